//! The staging stage: the plan's files into every end's store, and the gate that lets a
//! batch's import start once its own files are staged and its collection is on every
//! secondary, while the rest are still copied and still arriving.
//!
//! The files go in batch order, so the first batches are ready first. A batch is ready when
//! every file it imports is durable on every destination ([`storage::stage`] says when) and
//! its collection arrived on every secondary; the commit decision waits for the whole stage
//! to end verified. A stage, a DDL or an arrival that fails after some jobs were created
//! fails the restore before its decision, and they are aborted like any other job.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Interrupted;
use super::checks::BatchIndex;
use super::preflight::{Preflight, error_chain};
use super::report::StagingReport;
use super::run::{Shared, Stop, destinations};
use crate::backup::BinlogFile;
use crate::job::Job;
use crate::journal::{CommitGroup, RestoreId, RestorePhase, RestoreRecord};
use crate::storage::{self, ImportPaths, StagingPrefix};

/// Where a restore's way to its decision stands, as the gate sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Course {
    /// Staging still runs.
    Staging,
    /// Every file is staged and verified.
    Staged,
    /// The stage, the DDL or a collection's arrival failed: nothing more is imported.
    Failed,
}

/// Which batches may be imported, as the stage and the collections' arrival go.
pub(super) struct ImportGate {
    /// The plan's files in the order they are staged: indices into `files_to_stage`.
    order: Vec<usize>,
    /// For each file in that order, the batch that imports it (batches numbered across the
    /// restore's groups, in order).
    batch_of: Vec<Option<usize>>,
    /// For each plan collection, its batches.
    batches_of: Vec<Range<usize>>,
    /// For each batch, what it still waits for: its files not staged yet, plus one until its
    /// collection is on every secondary.
    waiting: Vec<AtomicUsize>,
    /// Touched too whenever a batch becomes ready, to wake its waiters.
    course: watch::Sender<Course>,
}

impl ImportGate {
    /// `batches_per_collection`: the plan's collections' batch counts, in plan order (the
    /// order the groups number their batches in).
    pub fn new(
        import_prefix: &str,
        files: &[BinlogFile],
        groups: &[CommitGroup],
        batches_per_collection: impl IntoIterator<Item = usize>,
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
            course: watch::Sender::new(Course::Staging),
        }
    }

    /// One thing `batch` waited for is there.
    fn release(&self, batch: usize) {
        if self.waiting[batch].fetch_sub(1, Ordering::AcqRel) == 1 {
            self.course.send_modify(|_| {});
        }
    }

    /// The file at `position` in the stage order is on every destination, durably.
    fn file_ready(&self, position: usize) {
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

    fn end(&self, verified: bool) {
        self.course.send_modify(|c| {
            if *c == Course::Staging {
                *c = if verified {
                    Course::Staged
                } else {
                    Course::Failed
                };
            }
        });
    }

    /// Nothing more is imported: the DDL failed or a collection did not arrive.
    pub fn fail(&self) {
        self.course.send_replace(Course::Failed);
    }

    /// Waits until `batch` may be imported: true, or false once the restore failed. A batch
    /// the restore does not have (a group without batches) waits for nothing.
    pub async fn batch_ready(&self, batch: usize) -> bool {
        let mut course = self.course.subscribe();
        let seen = course
            .wait_for(|c| {
                *c == Course::Failed
                    || self
                        .waiting
                        .get(batch)
                        .is_none_or(|w| w.load(Ordering::Acquire) == 0)
            })
            .await
            .map(|c| *c);
        matches!(seen, Ok(Course::Staging | Course::Staged))
    }

    /// Waits until the stage ended; whether every file was staged and verified (and nothing
    /// failed since).
    pub async fn staged(&self) -> bool {
        let mut course = self.course.subscribe();
        let seen = course.wait_for(|c| *c != Course::Staging).await.map(|c| *c);
        matches!(seen, Ok(Course::Staged))
    }

    /// Returns once the stage or an arrival failed; never if neither does.
    pub async fn failed(&self) {
        let mut course = self.course.subscribe();
        if course.wait_for(|c| *c == Course::Failed).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Stages the plan's files into every end's store that is not the backup's, in the gate's
/// order, opening the gate batch by batch; ends the gate either way. The caller has
/// recorded the prefix ([`Destinations::record_in`]).
///
/// Stops at an interrupt, like every stage before the decision, and when the restore fails
/// elsewhere. A failure is the restore's: it is recorded for the groups to abort on.
pub(super) async fn stage(
    shared: &Shared<'_>,
    pf: &Preflight,
    to: &Destinations,
    gate: &ImportGate,
) -> Result<StagingReport, Stop> {
    // Rides on the next journal write: nothing recovers differently for it.
    shared.enter_phase(RestorePhase::Staging);
    let stop = CancellationToken::new();
    let staging = stage_files(shared, pf, to, gate, &stop);
    tokio::pin!(staging);
    // A restore that fails meanwhile (a mirror, a create, the DDL) imports nothing more, and
    // the rest of a long copy would only be deleted again; so does an interrupted one. The
    // stage is told to stop and waited for, not dropped: a copy abandoned mid-request could
    // land after the rollback deleted the prefix.
    let staged = tokio::select! {
        staged = &mut staging => staged.map_err(Stop::Failed),
        why = stopped_by(shared) => {
            stop.cancel();
            let _ = staging.await;
            Err(why)
        }
    };
    // The failure is recorded before the gate closes, so the groups that wake on it abort
    // with the stage's reason, not their own.
    if let Err(stop) = &staged {
        shared.fail(stop.clone());
    }
    gate.end(staged.is_ok());
    staged
}

/// Returns once the restore failed elsewhere or was interrupted, with what that means for
/// the stage.
async fn stopped_by(shared: &Shared<'_>) -> Stop {
    tokio::select! {
        () = shared.stopped() => {
            tracing::info!("staging stopped: the restore failed before its decision");
            Stop::Failed("staging stopped: the restore failed".into())
        }
        () = shared.engine.interrupt.fired() => {
            tracing::info!("staging stopped: interrupted");
            Interrupted.into()
        }
    }
}

/// The stores the ends import from, opened, and where in them.
pub(super) struct Destinations {
    pub paths: ImportPaths,
    stores: Vec<(String, storage::OpenedStore)>,
}

impl Destinations {
    /// Opens every destination store and picks the import paths: the staging prefix, or
    /// the backup itself when every destination is the backup's store.
    pub fn open(job: &Job, pf: &Preflight, restore_id: &RestoreId) -> Result<Self, String> {
        let prefix = StagingPrefix::for_restore(restore_id);
        let mut stores = Vec::new();
        for (end, spec) in destinations(job) {
            let store = storage::open(spec)
                .map_err(|e| format!("storage of {end}: {}", error_chain(&e)))?;
            stores.push((end, store));
        }
        let ids: Vec<&storage::StoreId> = stores.iter().map(|(_, s)| &s.id).collect();
        let paths =
            storage::import_paths(&pf.backup_store.id, &pf.backup.location.dir, &ids, prefix);
        Ok(Destinations { paths, stores })
    }

    /// Notes the staging prefix and the ends staged into in the restore's record, before
    /// anything is copied, so that a crash mid-copy can still clean up.
    pub fn record_in(&self, record: &mut RestoreRecord) {
        if let ImportPaths::Staged { prefix } = &self.paths {
            record.staging_prefix = Some(prefix.path().to_string());
            record.staged_ends = self.stores.iter().map(|(e, _)| e.clone()).collect();
        }
    }
}

async fn stage_files(
    shared: &Shared<'_>,
    pf: &Preflight,
    to: &Destinations,
    gate: &ImportGate,
    stop: &CancellationToken,
) -> Result<StagingReport, String> {
    let (paths, opened) = (&to.paths, &to.stores);
    let files: Vec<storage::BackupFile> = gate
        .order
        .iter()
        .map(|&i| {
            let f = &pf.plan.files_to_stage[i];
            storage::BackupFile {
                path: f.path.clone(),
                size: f.size,
            }
        })
        .collect();
    let mut report = StagingReport {
        prefix: paths.prefix().to_string(),
        files: files.len() as u64,
        bytes: files.iter().map(|f| f.size).sum(),
        bytes_streamed: 0,
        transfers: Default::default(),
        destinations: opened.iter().map(|(e, _)| e.clone()).collect(),
        cleaned_up: false,
    };
    let ImportPaths::Staged { prefix } = paths else {
        // Imported in place: every file is there already.
        (0..gate.order.len()).for_each(|position| gate.file_ready(position));
        return Ok(report);
    };
    let destinations: Vec<storage::Destination<'_>> = opened
        .iter()
        .map(|(end, store)| storage::Destination { end, store })
        .collect();
    let source = storage::StageSource {
        store: &pf.backup_store,
        backup_dir: &pf.backup.location.dir,
    };
    let id = shared.record.lock().expect("record lock").id.to_string();
    let progress = shared.engine.progress.clone();
    let staged = storage::stage(
        source,
        &files,
        &destinations,
        prefix,
        storage::StageOptions::default(),
        &move |p| progress.staging(&id, p),
        &|position| gate.file_ready(position),
        stop,
    )
    .await
    .map_err(|e| format!("staging failed: {}", error_chain(&e)))?;
    for file in &staged {
        *report.transfers.entry(file.transfer).or_default() += 1;
        if file.transfer == storage::Transfer::Streamed {
            report.bytes_streamed += file.size;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::journal::BatchRecord;

    /// One group of two batches, each importing one segment prefix.
    fn groups() -> Vec<CommitGroup> {
        let batch = |id: &str, segment: &str| BatchRecord {
            batch_id: id.into(),
            db: "default".into(),
            collection: "c".into(),
            partition: "p".into(),
            idempotency_key: format!("key-{id}"),
            files: vec![vec![format!("stage/binlogs/insert_log/1/2/{segment}/")]],
            options: Default::default(),
            job_id: None,
            create_sent: false,
            expected_rows: None,
        };
        vec![CommitGroup {
            id: "restore".into(),
            batches: vec![batch("b0", "10"), batch("b1", "20")],
            decision: None,
        }]
    }

    fn file(path: &str) -> BinlogFile {
        BinlogFile {
            path: path.into(),
            size: 1,
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
        ImportGate::new("stage", &files, &groups(), [1, 1])
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
        gate.end(true);
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
            gate.end(false);
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
    async fn a_collection_that_does_not_arrive_fails_a_verified_stage() {
        let gate = gate();
        (0..3).for_each(|p| gate.file_ready(p));
        gate.collection_arrived(0);
        gate.end(true);
        gate.fail();
        assert_eq!(settles(gate.staged()).await, Some(false));
        assert_eq!(settles(gate.failed()).await, Some(()));
        assert_eq!(settles(gate.batch_ready(1)).await, Some(false));
        gate.end(true);
        assert_eq!(
            settles(gate.staged()).await,
            Some(false),
            "a stage ending later does not undo the failure"
        );
    }
}
