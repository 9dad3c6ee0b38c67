//! Running the checks of one phase: call each, wait out `retry-after`
//! verdicts in tokio (never inside wasm) up to the check's `max_wait`, apply
//! `on_error`, and collect one report per check for the restore report.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{
    CheckContext, CheckError, CheckGrants, CheckHost, Clock, Error, LogLine, Phase, Plugin,
    PluginRuntime, Verdict,
};

use super::spec::{Check, OnError};

/// The shortest wait honoured between attempts, so a check answering
/// `retry-after(0)` cannot turn the host into a busy loop.
pub const MIN_RETRY_WAIT: Duration = Duration::from_millis(100);

/// A job's [`Check`] with its plugin loaded: ready to run in its phase.
#[derive(Clone)]
pub struct LoadedCheck {
    pub plugin: Plugin,
    /// The validated `[[check]]` table it was loaded from.
    pub spec: Check,
    /// What each call may reach: the check's `allow_hosts`, and the system
    /// clock (tests fix it).
    pub grants: CheckGrants,
}

impl LoadedCheck {
    pub fn name(&self) -> &str {
        self.plugin.name()
    }

    pub fn phase(&self) -> Phase {
        self.spec.phase
    }
}

impl PluginRuntime {
    /// Loads the plugin of a validated `[[check]]` with that check's limits
    /// and name. Do this before a restore starts: a plugin that does not
    /// match the WIT is refused here.
    pub async fn load_check(&self, check: &Check) -> Result<LoadedCheck, Error> {
        let plugin = self
            .load(&check.plugin, check.limits)
            .await?
            .named(check.name.clone());
        Ok(LoadedCheck {
            plugin,
            grants: CheckGrants {
                allow_hosts: check.allow_hosts.clone(),
                clock: Clock::System,
            },
            spec: check.clone(),
        })
    }
}

/// How a check ended, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckStatus {
    Passed,
    /// The check said `fail`.
    Failed {
        reason: String,
    },
    /// Still `retry-after` when `max_wait` ran out.
    WaitExpired {
        waited: Duration,
        last_reason: String,
    },
    /// Trapped, hit a limit or timed out.
    Errored {
        error: CheckError,
    },
    /// Errored, but `on_error = "warn"` let the restore go on.
    Warned {
        error: CheckError,
    },
}

/// One check's part of the restore report.
#[derive(Debug, Clone)]
pub struct CheckReport {
    pub check: String,
    pub phase: Phase,
    pub status: CheckStatus,
    pub attempts: u32,
    /// Wall time from the first call to the decision, waits included.
    pub elapsed: Duration,
    /// Every attempt's log lines, in order.
    pub logs: Vec<LogLine>,
}

impl CheckReport {
    /// Whether this check lets the restore go on.
    pub fn allows_restore(&self) -> bool {
        matches!(
            self.status,
            CheckStatus::Passed | CheckStatus::Warned { .. }
        )
    }
}

/// A check stopped the restore. `reports` holds every check run so far,
/// the stopping one last.
#[derive(Debug, Clone, thiserror::Error)]
#[error("check `{check}` ({phase}) stopped the restore: {reason}")]
pub struct CheckFailure {
    pub check: String,
    pub phase: Phase,
    pub reason: String,
    pub reports: Vec<CheckReport>,
}

/// Runs every check of `phase`, in order, against `ctx` (whose phase must be
/// `phase`). Stops at the first check that does not allow the restore.
pub async fn run_checks(
    phase: Phase,
    ctx: &CheckContext,
    checks: &[LoadedCheck],
    host: Arc<dyn CheckHost>,
) -> Result<Vec<CheckReport>, CheckFailure> {
    debug_assert_eq!(
        ctx.phase, phase,
        "the context is built for the phase it runs in"
    );
    let mut reports = Vec::new();
    for check in checks.iter().filter(|check| check.phase() == phase) {
        let report = run_one(check, ctx, Arc::clone(&host)).await;
        let reason = match &report.status {
            CheckStatus::Passed | CheckStatus::Warned { .. } => None,
            CheckStatus::Failed { reason } => Some(reason.clone()),
            CheckStatus::WaitExpired {
                waited,
                last_reason,
            } => Some(format!(
                "still waiting after {} ms: {last_reason}",
                waited.as_millis()
            )),
            CheckStatus::Errored { error } => Some(error.to_string()),
        };
        reports.push(report);
        if let Some(reason) = reason {
            return Err(CheckFailure {
                check: check.name().to_owned(),
                phase,
                reason,
                reports,
            });
        }
    }
    Ok(reports)
}

async fn run_one(check: &LoadedCheck, ctx: &CheckContext, host: Arc<dyn CheckHost>) -> CheckReport {
    let started = Instant::now();
    let deadline = started + check.spec.max_wait;
    let mut attempts = 0;
    let mut logs = Vec::new();
    let status = loop {
        attempts += 1;
        let run = check
            .plugin
            .check(ctx, &check.spec.config, &check.grants, Arc::clone(&host))
            .await;
        logs.extend(run.logs);
        match run.outcome {
            Ok(Verdict::Pass) => break CheckStatus::Passed,
            Ok(Verdict::Fail { reason }) => break CheckStatus::Failed { reason },
            Ok(Verdict::RetryAfter { after, reason }) => {
                let now = Instant::now();
                if now >= deadline {
                    break CheckStatus::WaitExpired {
                        waited: now - started,
                        last_reason: reason,
                    };
                }
                let wait = after.max(MIN_RETRY_WAIT).min(deadline - now);
                tracing::info!(check = %check.name(), %reason, wait_ms = wait.as_millis() as u64, "check asks to wait");
                tokio::time::sleep(wait).await;
            }
            Err(error) => {
                break match check.spec.on_error {
                    OnError::Fail => CheckStatus::Errored { error },
                    OnError::Warn => {
                        tracing::warn!(check = %check.name(), %error, "check errored; on_error = warn lets the restore go on");
                        CheckStatus::Warned { error }
                    }
                };
            }
        }
    };
    CheckReport {
        check: check.name().to_owned(),
        phase: check.phase(),
        status,
        attempts,
        elapsed: started.elapsed(),
        logs,
    }
}
