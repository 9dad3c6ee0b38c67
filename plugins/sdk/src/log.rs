//! Structured logging into lockstep's log and the check's report section.

use crate::bindings::lockstep::plugin::host::{self, LogLevel};

/// Logs `message` at `level` with extra key/value `fields`.
pub fn log(level: LogLevel, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    host::log(level, message, &fields);
}

pub fn debug(message: &str, fields: &[(&str, &str)]) {
    log(LogLevel::Debug, message, fields);
}

pub fn info(message: &str, fields: &[(&str, &str)]) {
    log(LogLevel::Info, message, fields);
}

pub fn warn(message: &str, fields: &[(&str, &str)]) {
    log(LogLevel::Warn, message, fields);
}

pub fn error(message: &str, fields: &[(&str, &str)]) {
    log(LogLevel::Error, message, fields);
}
