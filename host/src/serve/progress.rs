//! What running restores are doing now: phase, staged bytes and job states per end, kept
//! in memory for `get_restore` and `/metrics` and forwarded to the log. The journal holds
//! what must survive a crash; this holds what is only interesting while it happens.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::engine::Progress;
use crate::engine::progress::{JobCounts, Waiting};
use crate::journal::RestorePhase;
use crate::storage::StageProgress;

/// The live state of one restore.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    pub phase: Option<RestorePhase>,
    pub staging: Option<StageProgress>,
    pub jobs: JobCounts,
    pub waiting: Option<Waiting>,
}

/// A [`Progress`] that remembers the latest of everything per restore and passes each call
/// on to `inner` (the log).
pub struct LiveProgress {
    inner: Arc<dyn Progress>,
    // No await happens under this lock; calls are short.
    live: Mutex<BTreeMap<String, Live>>,
}

impl LiveProgress {
    pub fn new(inner: Arc<dyn Progress>) -> LiveProgress {
        LiveProgress {
            inner,
            live: Mutex::default(),
        }
    }

    /// The latest state of `restore`, if it reported anything since this process started.
    pub fn get(&self, restore: &str) -> Option<Live> {
        self.lock().get(restore).cloned()
    }

    /// Every restore that has not reached `Finished`.
    pub fn running(&self) -> Vec<(String, Live)> {
        self.lock()
            .iter()
            .filter(|(_, l)| l.phase != Some(RestorePhase::Finished))
            .map(|(id, l)| (id.clone(), l.clone()))
            .collect()
    }

    /// Bytes staged by every restore this process saw.
    pub fn staged_bytes(&self) -> u64 {
        self.lock()
            .values()
            .filter_map(|l| l.staging.map(|s| s.bytes_done))
            .sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Live>> {
        self.live
            .lock()
            .expect("live progress lock: no panics under it")
    }
}

impl Progress for LiveProgress {
    fn phase(&self, restore: &str, phase: RestorePhase) {
        self.lock().entry(restore.to_string()).or_default().phase = Some(phase);
        self.inner.phase(restore, phase);
    }

    fn staging(&self, restore: &str, progress: StageProgress) {
        self.lock().entry(restore.to_string()).or_default().staging = Some(progress);
        self.inner.staging(restore, progress);
    }

    fn jobs(&self, restore: &str, counts: &JobCounts) {
        self.lock().entry(restore.to_string()).or_default().jobs = counts.clone();
        self.inner.jobs(restore, counts);
    }

    fn waiting(&self, restore: &str, waiting: Option<&Waiting>) {
        self.lock().entry(restore.to_string()).or_default().waiting = waiting.cloned();
        self.inner.waiting(restore, waiting);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Silent;
    use crate::milvus::JobState;

    #[test]
    fn keeps_the_latest_of_each_and_lists_the_unfinished() {
        let live = LiveProgress::new(Arc::new(Silent));
        live.phase("a", RestorePhase::Staging);
        live.staging(
            "a",
            StageProgress {
                bytes_done: 10,
                bytes_total: 20,
                files_done: 1,
                files_total: 2,
            },
        );
        live.phase("b", RestorePhase::Holding);
        live.jobs(
            "b",
            &vec![(
                "primary".into(),
                BTreeMap::from([(JobState::Uncommitted, 3)]),
            )],
        );
        live.phase("b", RestorePhase::Finished);
        assert_eq!(live.get("a").unwrap().phase, Some(RestorePhase::Staging));
        assert_eq!(live.get("b").unwrap().jobs[0].1[&JobState::Uncommitted], 3);
        assert_eq!(
            live.running()
                .into_iter()
                .map(|(id, _)| id)
                .collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(live.staged_bytes(), 10);
    }
}
