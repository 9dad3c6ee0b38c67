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

/// Receives progress; implementations must be cheap (called from the engine's loop).
pub trait Progress: Send + Sync {
    fn phase(&self, restore: &str, phase: RestorePhase);
    fn staging(&self, restore: &str, progress: StageProgress);
    fn jobs(&self, restore: &str, counts: &JobCounts);
}

/// Progress that goes nowhere (tests, `plan`).
pub struct Silent;

impl Progress for Silent {
    fn phase(&self, _: &str, _: RestorePhase) {}
    fn staging(&self, _: &str, _: StageProgress) {}
    fn jobs(&self, _: &str, _: &JobCounts) {}
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
