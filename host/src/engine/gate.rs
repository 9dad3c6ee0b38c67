//! The import gate: a batch's import starts once its own files are staged and its
//! collection is on every secondary, while the rest are still copied and still arriving.
//!
//! The files go in batch order, so the first batches are ready first. A batch is ready when
//! every file it imports is durable on every destination ([`crate::storage::stage`] says
//! when) and its collection arrived on every secondary; the commit decision waits for the
//! whole stage to end verified. A stage, a DDL or an arrival that fails after some jobs were
//! created fails the restore before its decision, and they are aborted like any other job:
//! the gate closes on the restore's own stop token, which is cancelled only once the
//! failure's reason is recorded.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::checks::BatchIndex;
use crate::backup::BackupFile;
use crate::journal::CommitGroup;

/// Where the restore's stage stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Staging still runs.
    Running,
    /// Every file is staged and verified.
    Verified,
    /// The stage ended unverified: nothing more is imported.
    Failed,
}

/// How a stage ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StageEnd {
    /// Every file is on every destination, durably, as checked.
    Verified,
    Failed,
}

/// Which batches may be imported, as the stage and the collections' arrival go.
pub(super) struct ImportGate {
    /// The plan's files in the order they are staged: indices into `files_to_stage`.
    pub order: Vec<usize>,
    /// For each file in that order, the batch that imports it (batches numbered across the
    /// restore's groups, in order).
    batch_of: Vec<Option<usize>>,
    /// For each plan collection, its batches.
    batches_of: Vec<Range<usize>>,
    /// For each batch, what it still waits for: its files not staged yet, plus one until its
    /// collection is on every secondary.
    waiting: Vec<AtomicUsize>,
    /// Touched too whenever a batch becomes ready, to wake its waiters.
    stage: watch::Sender<Stage>,
    /// The restore's: cancelled once it failed before its decision (the DDL, an arrival,
    /// the stage, a create). Nothing more is imported then.
    failed: CancellationToken,
}

impl ImportGate {
    /// `batches_per_collection`: the plan's collections' batch counts, in plan order (the
    /// order the groups number their batches in). `failed`: the restore's stop token.
    pub fn new(
        import_prefix: &str,
        files: &[BackupFile],
        groups: &[CommitGroup],
        batches_per_collection: impl IntoIterator<Item = usize>,
        failed: CancellationToken,
    ) -> ImportGate {
        let index = BatchIndex::new(groups);
        let batches = groups.iter().map(|g| g.batches.len()).sum();
        let mut order: Vec<(usize, Option<usize>)> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (i, index.batch_of(&format!("{import_prefix}/{}", f.path))))
            .collect();
        // Stable: within a batch, the files keep the plan's path order.
        order.sort_by_key(|(_, batch)| batch.unwrap_or(usize::MAX));
        let mut waiting = vec![1; batches];
        for (_, batch) in &order {
            if let Some(b) = batch {
                waiting[*b] += 1;
            }
        }
        let mut next = 0;
        let batches_of = batches_per_collection
            .into_iter()
            .map(|n| {
                next += n;
                next - n..next
            })
            .collect();
        ImportGate {
            order: order.iter().map(|(i, _)| *i).collect(),
            batch_of: order.iter().map(|(_, b)| *b).collect(),
            batches_of,
            waiting: waiting.into_iter().map(AtomicUsize::new).collect(),
            stage: watch::Sender::new(Stage::Running),
            failed,
        }
    }

    /// One thing `batch` waited for is there.
    fn release(&self, batch: usize) {
        if self.waiting[batch].fetch_sub(1, Ordering::AcqRel) == 1 {
            self.stage.send_modify(|_| {});
        }
    }

    /// The file at `position` in the stage order is on every destination, durably.
    pub fn file_ready(&self, position: usize) {
        if let Some(b) = self.batch_of[position] {
            self.release(b);
        }
    }

    /// Plan collection `collection` is on every secondary.
    pub fn collection_arrived(&self, collection: usize) {
        for b in self.batches_of[collection].clone() {
            self.release(b);
        }
    }

    /// The stage ended, `how`: verified, or failed.
    pub fn end(&self, how: StageEnd) {
        self.stage.send_modify(|c| {
            if *c == Stage::Running {
                *c = match how {
                    StageEnd::Verified => Stage::Verified,
                    StageEnd::Failed => Stage::Failed,
                };
            }
        });
    }

    /// Waits until `batch` may be imported: true, or false once the restore failed. A batch
    /// the restore does not have (a group without batches) waits for nothing.
    pub async fn batch_ready(&self, batch: usize) -> bool {
        let ready = self.stage_until(|c| {
            c == Stage::Failed
                || self
                    .waiting
                    .get(batch)
                    .is_none_or(|w| w.load(Ordering::Acquire) == 0)
        });
        matches!(ready.await, Some(Stage::Running | Stage::Verified))
    }

    /// Waits until the stage ended; whether every file was staged and verified (and the
    /// restore did not fail).
    pub async fn staged(&self) -> bool {
        let ended = self.stage_until(|c| c != Stage::Running);
        matches!(ended.await, Some(Stage::Verified))
    }

    /// Returns once the stage ended unverified or the restore failed; never otherwise.
    pub async fn failed(&self) {
        self.stage_until(|c| c == Stage::Failed).await;
    }

    /// The stage once `until` holds of it; `None` once the restore failed (first, if both).
    async fn stage_until(&self, until: impl Fn(Stage) -> bool) -> Option<Stage> {
        let mut stage = self.stage.subscribe();
        let seen = tokio::select! {
            biased;
            () = self.failed.cancelled() => return None,
            seen = stage.wait_for(|c| until(*c)) => seen.map(|c| *c),
        };
        // The sender lives in `self`, so the wait only ends with a stage it was waiting for.
        seen.ok().filter(|_| !self.failed.is_cancelled())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::journal::{BatchRecord, PlannedBatch};

    /// One group of two batches, each importing one segment prefix.
    fn groups() -> Vec<CommitGroup> {
        let batch = |id: &str, segment: &str| {
            BatchRecord::new(PlannedBatch {
                batch_id: id.into(),
                db: "default".into(),
                collection: "c".into(),
                partition: "p".into(),
                idempotency_key: format!("key-{id}"),
                files: vec![vec![format!("stage/binlogs/insert_log/1/2/{segment}/")]],
                options: Default::default(),
                expected_rows: None,
            })
        };
        vec![CommitGroup {
            id: "restore".into(),
            batches: vec![batch("b0", "10"), batch("b1", "20")],
            decision: None,
        }]
    }

    fn file(path: &str) -> BackupFile {
        BackupFile {
            path: path.into(),
            size: 1,
            source: None,
            written: None,
        }
    }

    /// The plan lists files by path; the gate stages them batch by batch. Each batch is
    /// its own collection's.
    fn gate() -> ImportGate {
        let files = [
            file("binlogs/insert_log/1/2/20/100/1"),
            file("binlogs/insert_log/1/2/10/100/1"),
            file("binlogs/insert_log/1/2/10/101/1"),
        ];
        ImportGate::new("stage", &files, &groups(), [1, 1], CancellationToken::new())
    }

    async fn settles<T>(f: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .ok()
    }

    #[tokio::test]
    async fn a_batch_opens_when_its_files_are_staged_and_its_collection_arrived() {
        let gate = gate();
        assert_eq!(gate.order, vec![1, 2, 0], "batch 0's files first");
        assert_eq!(settles(gate.batch_ready(0)).await, None);
        gate.file_ready(0);
        assert_eq!(settles(gate.batch_ready(0)).await, None, "one of two files");
        gate.file_ready(1);
        assert_eq!(
            settles(gate.batch_ready(0)).await,
            None,
            "its collection is not on every secondary yet"
        );
        gate.collection_arrived(0);
        assert_eq!(settles(gate.batch_ready(0)).await, Some(true));
        gate.collection_arrived(1);
        assert_eq!(
            settles(gate.batch_ready(1)).await,
            None,
            "its file is not staged"
        );
        assert_eq!(settles(gate.staged()).await, None, "not verified yet");
        gate.file_ready(2);
        assert_eq!(settles(gate.batch_ready(1)).await, Some(true));
        gate.end(StageEnd::Verified);
        assert_eq!(settles(gate.staged()).await, Some(true));
        assert_eq!(settles(gate.failed()).await, None);
    }

    #[tokio::test]
    async fn a_failed_stage_releases_every_waiter_with_no() {
        let gate = gate();
        gate.file_ready(0);
        gate.file_ready(1);
        gate.collection_arrived(0);
        let waiting = async { tokio::join!(gate.batch_ready(1), gate.staged(), gate.failed()) };
        let ended = async {
            tokio::task::yield_now().await;
            gate.end(StageEnd::Failed);
        };
        let ((ready, staged, ()), ()) = tokio::join!(waiting, ended);
        assert!(!ready && !staged);
        assert_eq!(
            settles(gate.batch_ready(0)).await,
            Some(false),
            "no more creates once the stage failed, even for a ready batch"
        );
    }

    #[tokio::test]
    async fn a_restore_that_fails_closes_even_a_verified_stage() {
        let gate = gate();
        (0..3).for_each(|p| gate.file_ready(p));
        gate.collection_arrived(0);
        gate.end(StageEnd::Verified);
        gate.failed.cancel();
        assert_eq!(settles(gate.staged()).await, Some(false));
        assert_eq!(settles(gate.failed()).await, Some(()));
        assert_eq!(settles(gate.batch_ready(1)).await, Some(false));
        gate.end(StageEnd::Verified);
        assert_eq!(
            settles(gate.staged()).await,
            Some(false),
            "a stage ending later does not undo the failure"
        );
    }
}
