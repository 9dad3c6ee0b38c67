//! Per-call resource bounds of a check.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Error;

/// What one call of a check may use. Set per check in the job file as
/// `[check.limits]`; every field has a safe default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Linear memory the check may grow to, in MiB (default 64). Growing past
    /// it fails the call with `memory limit`.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: u64,
    /// CPU time one call may spend running wasm, in milliseconds (default
    /// 1000), measured in 10 ms epoch ticks; time spent waiting in host calls
    /// is not charged. Running past it fails the call with `cpu limit`.
    #[serde(default = "default_cpu_ms")]
    pub cpu_ms: u64,
    /// Wall time one call may take, host calls included, in milliseconds
    /// (default 30000). Past it the call fails with `timeout`.
    #[serde(default = "default_wall_ms")]
    pub wall_ms: u64,
}

fn default_memory_mib() -> u64 {
    64
}

fn default_cpu_ms() -> u64 {
    1_000
}

fn default_wall_ms() -> u64 {
    30_000
}

/// Bounds beyond which a limit is a typo rather than a wish: a check is a
/// guard, not a workload.
const MAX_MEMORY_MIB: u64 = 4 * 1024;
const MAX_WALL_MS: u64 = 60 * 60 * 1000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mib: default_memory_mib(),
            cpu_ms: default_cpu_ms(),
            wall_ms: default_wall_ms(),
        }
    }
}

impl Limits {
    /// Refuses zero and absurd values, naming the check and the field.
    pub fn validate(&self, check: &str) -> Result<(), Error> {
        let invalid = |field, value, reason| Error::InvalidLimit {
            check: check.to_owned(),
            field,
            value,
            reason,
        };
        if self.memory_mib == 0 || self.memory_mib > MAX_MEMORY_MIB {
            return Err(invalid(
                "limits.memory_mib",
                self.memory_mib,
                "must be 1..=4096",
            ));
        }
        if self.cpu_ms == 0 || self.cpu_ms > MAX_WALL_MS {
            return Err(invalid("limits.cpu_ms", self.cpu_ms, "must be 1..=3600000"));
        }
        if self.wall_ms == 0 || self.wall_ms > MAX_WALL_MS {
            return Err(invalid(
                "limits.wall_ms",
                self.wall_ms,
                "must be 1..=3600000",
            ));
        }
        Ok(())
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        usize::try_from(self.memory_mib * 1024 * 1024).expect("validated memory fits in usize")
    }

    pub(crate) fn cpu(&self) -> Duration {
        Duration::from_millis(self.cpu_ms)
    }

    pub(crate) fn wall(&self) -> Duration {
        Duration::from_millis(self.wall_ms)
    }
}
