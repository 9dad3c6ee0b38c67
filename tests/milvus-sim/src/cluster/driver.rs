//! The task that walks one import job through Milvus's V1 pipeline on one cluster:
//! Pending → PreImporting → Importing → Sorting → IndexBuilding → Uncommitted → (auto commit or
//! wait for commit) → Committing → Completed, each stage lasting the cluster's configured
//! duration. PreImporting reads every file from the cluster's own storage (as Milvus's preimport
//! does), so a missing object fails the job there.
//!
//! The task owns nothing: the job lives in the cluster's state, and the task races each stage
//! against the job's deadline (`timeout` option) and against the job's state watch, so an abort
//! or a commit from elsewhere takes effect at once. A restart aborts the task; a new one resumes
//! from the state the job was left in.

use std::future::pending;

use super::Cluster;
use crate::faults::Drift;
use crate::import_reader::{self, ReadError, ReadOutcome};
use crate::jobs::JobState;
use crate::options::CommitMode;
use crate::version::ImportFace;

/// Reason of a job past its `timeout` option (Milvus's `tryTimeoutJob`).
pub const IMPORT_TIMEOUT: &str = "import timeout";

/// What a stage ended with.
enum StageEnd {
    Advance(Option<ReadOutcome>),
    Fail(String),
}

impl Cluster {
    /// Starts (or restarts) the task of `job_id`.
    pub(super) fn spawn_driver(&self, job_id: i64) {
        let handle = tokio::spawn(drive(self.clone(), job_id));
        if let Some(old) = self.lock().drivers.insert(job_id, handle.abort_handle()) {
            old.abort();
        }
    }

    /// Stops every job task (the cluster is going down); the jobs stay where they are.
    pub(crate) fn stop_drivers(&self) {
        for (_, handle) in self.lock().drivers.drain() {
            handle.abort();
        }
    }

    /// Starts a task for every job that is not finished (the cluster came back).
    pub(crate) fn resume_drivers(&self) {
        let active: Vec<i64> = self
            .lock()
            .jobs
            .values()
            .filter(|e| e.job.state.is_active())
            .map(|e| e.job.job_id)
            .collect();
        for job_id in active {
            self.spawn_driver(job_id);
        }
    }
}

async fn drive(cluster: Cluster, job_id: i64) {
    let Some(mut watch) = cluster.job_watch(job_id) else {
        return;
    };
    loop {
        let state = *watch.borrow_and_update();
        if state.is_terminal() {
            break;
        }
        if state.can_fail()
            && let Some(reason) = cluster.take_job_failure(job_id, state)
        {
            cluster.update_job_in(job_id, state, |j| j.fail(reason));
            continue;
        }
        let Some(job) = cluster.job(job_id) else {
            break;
        };
        // Released 3.0.x's `tryTimeoutJob` skips only Failed and Completed, so a Committing
        // job times out too; newer code spares it (docs/milvus-facts.md §2.6).
        let times_out = state.can_fail()
            || (state == JobState::Committing && !cluster.spec().timeout_spares_committing);
        let deadline = async {
            match job.timeout_at {
                Some(at) if times_out => tokio::time::sleep_until(at).await,
                _ => pending().await,
            }
        };
        tokio::select! {
            changed = watch.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            () = deadline => {
                cluster.update_job_in(job_id, state, |j| j.fail(IMPORT_TIMEOUT));
            }
            end = run_stage(&cluster, state, job.commit_mode(), job_id) => match end {
                StageEnd::Advance(outcome) => {
                    cluster.update_job_in(job_id, state, |j| {
                        if let Some(read) = outcome {
                            j.total_rows = read.rows;
                            j.deleted_rows = read.deleted_rows;
                            j.groups = read.groups;
                            j.manifest = read.manifest;
                            j.data = std::sync::Arc::new(read.data);
                        }
                        if state == JobState::Importing {
                            j.imported_rows = j.total_rows;
                        }
                        if let Some(next) = state.next_stage() {
                            j.enter(next);
                        }
                    });
                }
                StageEnd::Fail(reason) => {
                    cluster.update_job_in(job_id, state, |j| j.fail(reason));
                }
            },
        }
    }
    cluster.lock().drivers.remove(&job_id);
}

async fn run_stage(
    cluster: &Cluster,
    state: JobState,
    commit: CommitMode,
    job_id: i64,
) -> StageEnd {
    let d = cluster.spec().durations;
    let stage = match state {
        JobState::Pending => d.pending,
        JobState::PreImporting => {
            let outcome = read_files(cluster, job_id).await;
            tokio::time::sleep(d.preimport).await;
            return match outcome {
                Ok(mut read) => {
                    if let Some(short) = cluster.take_short_import(job_id) {
                        let short = short.clamp(0, read.rows);
                        read.rows -= short;
                        if let Some(keys) = &mut read.data.keys {
                            keys.truncate(keys.len().saturating_sub(short as usize));
                        }
                    }
                    // Only a job whose deletes removed a row can lose one: the fault waits.
                    if let Some(kept) = read.data.first_removed.take()
                        && cluster.take_drift(Drift::LostDelete)
                        && let Some(keys) = &mut read.data.keys
                    {
                        keys.push(kept);
                    }
                    if let Some(first) = read.data.keys.as_ref().and_then(|k| k.first())
                        && cluster.take_drift(Drift::ChangedRow)
                    {
                        read.data.changed = Some(first.pk.clone());
                    }
                    StageEnd::Advance(Some(read))
                }
                Err(reason) => StageEnd::Fail(reason),
            };
        }
        JobState::Importing => d.importing,
        JobState::Sorting => d.sorting,
        JobState::IndexBuilding => d.index_building,
        // The checker commits an auto-commit job itself; a manual one waits for commit/abort,
        // which arrive through the job's watch.
        JobState::Uncommitted => match commit {
            CommitMode::Auto => return StageEnd::Advance(None),
            CommitMode::Manual => pending().await,
        },
        // A commit the fence rejected is retried without end (docs/milvus-facts.md §2.7).
        JobState::Committing if cluster.commit_blocked(job_id) => return pending().await,
        JobState::Committing => d.committing,
        JobState::Completed | JobState::Failed => return pending().await,
    };
    tokio::time::sleep(stage).await;
    StageEnd::Advance(None)
}

async fn read_files(cluster: &Cluster, job_id: i64) -> Result<ReadOutcome, String> {
    let job = cluster
        .job(job_id)
        .ok_or_else(|| format!("job {job_id} vanished"))?;
    let schema = cluster.with_catalog(|c| {
        c.collection_by_id(job.collection_id)
            .map(|coll| coll.schema.clone())
    });
    let store = cluster.import_store();
    let _slot = cluster.0.import_reads.acquire().await;
    let read = import_reader::read_groups(
        store.source(),
        job.parsed_options.source,
        &job.files,
        schema.as_ref(),
        Some(&cluster.kept_dir(job_id)),
    )
    .await;
    let read = match read {
        // Milvus 2.3's binlog parser lists an insert prefix that holds nothing
        // (`logsCount=0`) and completes the import with 0 rows, no error.
        Err(ReadError::EmptyPrefix { .. }) if cluster.import_face() == ImportFace::V1Only => {
            return Ok(ReadOutcome::default());
        }
        read => read.map_err(|e| e.to_string())?,
    };
    Ok(read)
}
