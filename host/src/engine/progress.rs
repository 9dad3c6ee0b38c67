//! What the engine tells a watcher while it works: the phase, staging bytes, and how many
//! jobs stand in each state on each end. The CLI draws bars on a TTY and logs lines
//! otherwise; the API keeps the latest for `get_restore`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::journal::RestorePhase;
use crate::milvus::JobState;
use crate::storage::StageProgress;

/// Job counts per end (in end order) per state.
pub type JobCounts = Vec<(String, BTreeMap<JobState, usize>)>;

/// What a restore waits on, and where: a phase names the stage a restore reached, but the
/// stages overlap, and a wait for another cluster can outlast the stage it began in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// A collection the target made, to show on a secondary over CDC.
    Arrival {
        collection: String,
        end: String,
        since: tokio::time::Instant,
    },
}

impl std::fmt::Display for Waiting {
    /// `waiting for default.orders on standby-2 (made 25 s ago)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Waiting::Arrival {
                collection,
                end,
                since,
            } => write!(
                f,
                "waiting for {collection} on {end} (made {} s ago)",
                since.elapsed().as_secs()
            ),
        }
    }
}

/// Receives progress; implementations must be cheap (called from the engine's loop).
pub trait Progress: Send + Sync {
    fn phase(&self, restore: &str, phase: RestorePhase);
    fn staging(&self, restore: &str, progress: StageProgress);
    fn jobs(&self, restore: &str, counts: &JobCounts);
    /// What the restore waits on now; `None` once it no longer waits.
    fn waiting(&self, restore: &str, waiting: Option<&Waiting>);
}

/// Progress that goes nowhere (tests, `plan`).
pub struct Silent;

impl Progress for Silent {
    fn phase(&self, _: &str, _: RestorePhase) {}
    fn staging(&self, _: &str, _: StageProgress) {}
    fn jobs(&self, _: &str, _: &JobCounts) {}
    fn waiting(&self, _: &str, _: Option<&Waiting>) {}
}

/// Progress as tracing events, throttled: one line per phase change, and job counts only
/// when they change. For logs that are not a TTY.
#[derive(Default)]
pub struct Logged {
    // No await happens under this lock; a std mutex is enough.
    last: Mutex<BTreeMap<String, String>>,
}

impl Progress for Logged {
    fn phase(&self, restore: &str, phase: RestorePhase) {
        tracing::info!(restore, %phase, "phase");
    }

    fn staging(&self, restore: &str, p: StageProgress) {
        if p.files_done == p.files_total || p.files_done.is_multiple_of(256) {
            tracing::info!(
                restore,
                bytes = p.bytes_done,
                of = p.bytes_total,
                files = p.files_done,
                of_files = p.files_total,
                "staging"
            );
        }
    }

    fn jobs(&self, restore: &str, counts: &JobCounts) {
        let line = format_counts(counts);
        let mut last = self
            .last
            .lock()
            .expect("progress lock is never poisoned: no panics under it");
        if last.get(restore) != Some(&line) {
            tracing::info!(restore, jobs = %line, "jobs");
            last.insert(restore.to_string(), line);
        }
    }

    fn waiting(&self, restore: &str, waiting: Option<&Waiting>) {
        if let Some(waiting) = waiting {
            tracing::info!(restore, "{waiting}");
        }
    }
}

/// `a: Uncommitted=3 Importing=1 · b: Pending=4`
pub fn format_counts(counts: &JobCounts) -> String {
    counts
        .iter()
        .map(|(end, states)| {
            let s: Vec<String> = states.iter().map(|(st, n)| format!("{st}={n}")).collect();
            format!(
                "{end}: {}",
                if s.is_empty() {
                    "-".to_string()
                } else {
                    s.join(" ")
                }
            )
        })
        .collect::<Vec<_>>()
        .join(" · ")
}
