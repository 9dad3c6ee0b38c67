//! The restore context as a check reads it: the raw WIT record plus config
//! lookups that turn a bad value into a message naming the key.

use std::str::FromStr;

use crate::{End, RestoreContext};

/// The restore context handed to [`crate::Check::check`]. Derefs to the raw
/// [`RestoreContext`], so `ctx.restore_id`, `ctx.jobs` etc. read directly.
pub struct Context {
    raw: RestoreContext,
}

/// A config value that is missing or does not parse.
#[derive(Debug)]
pub enum ConfigError {
    Missing {
        key: String,
    },
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Missing { key } => write!(f, "config `{key}` is required"),
            ConfigError::Invalid { key, value, reason } => {
                write!(f, "config `{key}` = `{value}`: {reason}")
            }
        }
    }
}

impl Context {
    pub fn new(raw: RestoreContext) -> Self {
        Context { raw }
    }

    /// The raw config value for `key`, if the job file set one.
    pub fn config(&self, key: &str) -> Option<&str> {
        self.raw
            .config
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The config value for `key` parsed as `T`; `Ok(None)` when unset.
    pub fn config_parse<T>(&self, key: &str) -> Result<Option<T>, ConfigError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        self.config(key)
            .map(|value| {
                value.parse().map_err(|e: T::Err| ConfigError::Invalid {
                    key: key.to_owned(),
                    value: value.to_owned(),
                    reason: e.to_string(),
                })
            })
            .transpose()
    }

    /// The config value for `key`, which the check cannot do without.
    pub fn config_required(&self, key: &str) -> Result<&str, ConfigError> {
        self.config(key).ok_or_else(|| ConfigError::Missing {
            key: key.to_owned(),
        })
    }

    /// The target followed by every secondary.
    pub fn ends(&self) -> impl Iterator<Item = &End> {
        std::iter::once(&self.raw.target).chain(self.raw.secondaries.iter())
    }
}

impl std::ops::Deref for Context {
    type Target = RestoreContext;

    fn deref(&self) -> &RestoreContext {
        &self.raw
    }
}
