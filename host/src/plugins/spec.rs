//! A check as a job names it: the `[[check]]` table as written, and the validated
//! [`Check`] the plugin host loads, with the bounds of one call.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::diagnostic::InRange;

use super::context::Phase;
use super::http::AllowedHosts;

/// A plugin check, validated: what the plugin host loads
/// ([`crate::plugins::PluginRuntime::load_check`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The component's path, made absolute against the job file's directory.
    pub plugin: PathBuf,
    /// The check's name in logs and the report: its `name`, or the plugin's file stem.
    pub name: String,
    pub phase: Phase,
    /// Handed to the check as its `config`.
    pub config: BTreeMap<String, String>,
    pub on_error: OnError,
    /// The origins the check's HTTP GET may reach.
    pub allow_hosts: AllowedHosts,
    /// Total time `retry-after` verdicts may keep the restore waiting.
    pub max_wait: Duration,
    pub limits: CheckLimits,
}

/// What one call of a check may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CheckLimits {
    /// Bytes the call's instance may hold: every linear memory and every table
    /// (elements counted as pointers) together.
    pub memory_bytes: usize,
    /// CPU time spent running wasm.
    pub cpu: Duration,
    /// Wall-clock time, host calls included.
    pub wall: Duration,
}

/// Safe defaults for a check's call: a guard needs little memory and answers
/// in milliseconds; a stuck call must not hold a restore for long.
const DEFAULT_CHECK_MEMORY_MIB: u64 = 64;
const DEFAULT_CHECK_CPU_MS: u64 = 1_000;
const DEFAULT_CHECK_WALL_MS: u64 = 30_000;

impl CheckLimits {
    /// The limits a `[check.limits]` table sets, with the defaults for what it leaves
    /// out. Every value was range-checked when the table was read.
    pub fn from_section(section: &CheckLimitsSection) -> Self {
        let mib = section
            .memory_mib
            .map_or(DEFAULT_CHECK_MEMORY_MIB, InRange::get);
        CheckLimits {
            memory_bytes: usize::try_from(mib << 20)
                .expect("at most 4096 MiB, which fits a 64-bit usize"),
            cpu: Duration::from_millis(section.cpu_ms.map_or(DEFAULT_CHECK_CPU_MS, InRange::get)),
            wall: Duration::from_millis(
                section.wall_ms.map_or(DEFAULT_CHECK_WALL_MS, InRange::get),
            ),
        }
    }
}

impl Default for CheckLimits {
    /// 64 MiB of memory, 1 s of CPU and 30 s of wall time per call.
    fn default() -> Self {
        CheckLimits::from_section(&CheckLimitsSection::default())
    }
}

/// `[[check]]`: a plugin check, run before the import or before the commit.
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
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSection {
    /// The plugin's `.wasm` component, relative to the job file's directory.
    pub plugin: Option<Spanned<String>>,
    /// The check's name in logs and the report; default the plugin's file stem.
    pub name: Option<Spanned<String>>,
    /// `before-import` or `before-commit`.
    pub phase: Option<Spanned<Phase>>,
    /// Strings handed to the plugin as its `config`.
    pub config: Option<BTreeMap<String, String>>,
    /// What a trap, a limit hit or a timeout does; default `fail`. A `fail` verdict
    /// always stops the restore.
    pub on_error: Option<OnError>,
    /// Origins (`http://host[:port]`) the plugin's HTTP GET may reach; default none.
    pub allow_hosts: Option<Vec<Spanned<String>>>,
    /// How long `retry-after` verdicts may keep the restore waiting in total, in
    /// milliseconds, at most a week; default 0: a check that asks to wait fails.
    pub max_wait_ms: Option<InRange<0, MAX_CHECK_WAIT_MS>>,
    /// Per-call bounds.
    pub limits: Option<CheckLimitsSection>,
}

/// The longest `max_wait_ms`: a week. Longer is a typo, not an approval process.
pub const MAX_CHECK_WAIT_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// The most memory a check may be given: a check is a guard, not a workload.
pub const MAX_CHECK_MEMORY_MIB: u64 = 4 * 1024;
/// The longest CPU or wall time one call may be given: an hour.
pub const MAX_CHECK_CALL_MS: u64 = 60 * 60 * 1000;

/// `[check.limits]`: what one call of a check may use. Also the `limits` of a
/// `lockstep plugin test` context file, so the bounds are read one way in both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckLimitsSection {
    /// Memory the check's instance may hold, in MiB (1 to 4096; default 64): all its
    /// linear memories and tables together. Growing past it fails the call with
    /// `memory limit`.
    pub memory_mib: Option<InRange<1, MAX_CHECK_MEMORY_MIB>>,
    /// CPU time one call may spend running wasm, in milliseconds (default 1000),
    /// measured in 10 ms ticks; time spent waiting in host calls is not charged.
    /// Running past it fails the call with `cpu limit`.
    pub cpu_ms: Option<InRange<1, MAX_CHECK_CALL_MS>>,
    /// Wall time one call may take, host calls included, in milliseconds (default
    /// 30000). Past it the call fails with `timeout`.
    pub wall_ms: Option<InRange<1, MAX_CHECK_CALL_MS>>,
}

/// What a check that errors (traps, hits a limit, times out) does to the restore.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// The restore stops, as for a `fail` verdict.
    #[default]
    Fail,
    /// The error is logged and reported; the restore goes on.
    Warn,
}
