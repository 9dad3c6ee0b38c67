//! The `[[check]]` table of a job file.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Limits, Phase};

/// One `[[check]]` table as the job file writes it. The job module embeds it
/// and [`super::PluginRuntime::load_check`] turns it into a loaded [`super::Check`].
///
/// ```toml
/// [[check]]
/// plugin = "plugins/dist/approval-gate.wasm"
/// phase = "before-commit"
/// on_error = "fail"
/// max_wait_ms = 3600000
/// allow_hosts = ["http://approvals.internal:8080"]
/// config = { object = "approvals/orders.approved" }
/// [check.limits]
/// memory_mib = 64
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    /// Path of the component (`.wasm`), relative to the job file's folder.
    pub plugin: PathBuf,
    /// Name in logs and the report; defaults to the plugin's file stem.
    #[serde(default)]
    pub name: Option<String>,
    /// When the check runs.
    pub phase: Phase,
    /// Handed to the check as its `config` (all values are strings).
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// What a trap, a limit hit or a timeout does to the restore (default
    /// `fail`). A `fail` verdict always fails the restore.
    #[serde(default)]
    pub on_error: OnError,
    /// Origins (`scheme://host[:port]`) the check's HTTP GET may reach; empty
    /// (the default) allows none.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// How long `retry-after` verdicts may keep the restore waiting in total,
    /// in milliseconds (default 0: a check that asks to wait fails).
    #[serde(default)]
    pub max_wait_ms: u64,
    #[serde(default)]
    pub limits: Limits,
}

/// What a check that errors (trap, limit, timeout) does to the restore.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// The restore stops, as for a `fail` verdict.
    #[default]
    Fail,
    /// The error is logged and reported; the restore goes on.
    Warn,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_check_table_with_defaults() {
        let spec: CheckSpec = toml::from_str(
            r#"plugin = "p.wasm"
               phase = "before-import"
               config = { sample = "8" }"#,
        )
        .expect("minimal table parses");
        assert_eq!(spec.on_error, OnError::Fail);
        assert_eq!(spec.limits, Limits::default());
        assert_eq!(spec.config["sample"], "8");
        assert!(spec.allow_hosts.is_empty());
    }

    #[test]
    fn refuses_unknown_keys_by_name() {
        let error = toml::from_str::<CheckSpec>(
            r#"plugin = "p.wasm"
               phase = "before-import"
               [limits]
               memory = 3"#,
        )
        .expect_err("unknown key refused");
        assert!(error.to_string().contains("memory"), "{error}");
    }
}
