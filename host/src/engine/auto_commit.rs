//! Imports that commit themselves: `per_seg` (one v1 gRPC import per segment, as
//! milvus-backup's default restore does, and the only import a Milvus before 2.4 has) and
//! merged REST v2 imports on a Milvus 2.4 to 2.6, which has no two-phase commit. Preflight
//! allows them only without secondaries on a target that does not replicate, and a failure
//! cannot be rolled back: what imported before it stays visible, and the report says which,
//! with its rows.
//!
//! Every batch's rows are counted: each job's rows (v1 `row_count`, REST `importedRows`)
//! summed over the batch, against what the backup meta says it holds. Milvus 2.3 completes
//! an import whose prefix lists nothing with 0 rows and no error, so a completed job proves
//! nothing.

use futures::StreamExt;
use milvus_proto::common::ImportState;
use tokio::time::Instant;

use std::sync::Arc;

use super::ends::{EndClient, Ends};
use super::fence::{Fence, Lost};
use super::poll::{Denied, Judgement, Pair, Sight, watch};
use super::report::{EndJobState, JobReport};
use super::retry::{DEFAULT_CALL_DEADLINE, fenced, retry};
use super::route::Route;
use super::schedule::FirstLook;
use super::schedule::MAX_INTERVAL;
use crate::backup::ExpectedRows;
use crate::diagnostic::error_chain;
use crate::journal::{BatchRecord, CommitGroup};
use crate::milvus::{self, JobState};

/// Imports in flight at once (milvus-backup bounds them with `importJobs`).
const IMPORTS_IN_FLIGHT: usize = 8;

/// One v1 import: a segment's file group into its partition.
struct V1Import<'a> {
    /// Index of its batch in the restore's batches.
    batch: usize,
    db: &'a str,
    collection: &'a str,
    partition: &'a str,
    files: Vec<String>,
    options: Vec<(String, String)>,
}

/// What one batch's v1 imports came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchImport {
    pub batch_id: String,
    /// `db.collection`.
    pub collection: String,
    pub partition: String,
    pub expected: Option<ExpectedRows>,
    /// The REST job's id, or the v1 import tasks' ids (one per file group), comma-separated:
    /// what to look for in the target's log.
    pub job_id: Option<String>,
    /// Rows the target says the batch's completed imports hold.
    pub imported: i64,
    /// The first of its imports that failed, if any did.
    pub failure: Option<String>,
}

impl BatchImport {
    /// Whether every import of the batch completed with the rows the backup holds.
    pub fn whole(&self) -> bool {
        self.failure.is_none() && self.expected.is_none_or(|e| e.accepts(self.imported))
    }

    /// Why the batch is not whole: its failure, or its rows.
    pub fn problem(&self) -> Option<String> {
        if let Some(failure) = &self.failure {
            return Some(failure.clone());
        }
        let expected = self.expected?;
        (!expected.accepts(self.imported)).then(|| {
            format!(
                "{} imported {} rows, the backup holds {expected}",
                self.batch_id, self.imported
            )
        })
    }

    /// The batch as a job of the report, on the target alone.
    pub fn job_report(&self, target: &str) -> JobReport {
        JobReport {
            batch: self.batch_id.clone(),
            collection: self.collection.clone(),
            partition: self.partition.clone(),
            job_id: self.job_id.clone(),
            rows: self.expected.map_or(0, |e| e.inserted),
            expected_rows: self.expected,
            states: vec![EndJobState {
                end: target.to_owned(),
                state: Some(if self.failure.is_some() {
                    JobState::Failed
                } else {
                    JobState::Completed
                }),
                reason: self.problem(),
                imported_rows: Some(self.imported),
            }],
        }
    }
}

/// Why one import of an auto-commit route failed: the batch's failure in the report.
#[derive(Debug, thiserror::Error)]
enum ImportFailure {
    #[error(transparent)]
    Lost(#[from] Lost),
    #[error("import create failed")]
    Create(#[source] milvus::Error),
    #[error("import of {files:?}")]
    CreateV1 {
        files: Vec<String>,
        #[source]
        source: milvus::Error,
    },
    #[error("import job {job}")]
    Describe {
        job: String,
        #[source]
        source: Arc<milvus::Error>,
    },
    /// The target refused the caller's rights while the job was watched.
    #[error("{0}")]
    Denied(String),
    #[error("import job {job} failed: {reason}")]
    Failed { job: String, reason: String },
    #[error("import task {task} of {files:?} failed: {reason}")]
    TaskFailed {
        task: i64,
        files: Vec<String>,
        reason: String,
    },
}

impl From<Denied> for ImportFailure {
    fn from(denied: Denied) -> Self {
        ImportFailure::Denied(denied.0)
    }
}

/// Runs every batch of `groups` on `target` by `route` (an auto-commit one) and says what
/// each batch came to. Never stops early: an auto-committed import cannot be taken back, so
/// the rest go on and the report names every batch. Each create waits for `fence`; once it
/// fails, the creates not sent yet fail with it.
pub async fn run(
    ends: &Ends,
    fence: &dyn Fence,
    groups: &[CommitGroup],
    route: Route,
) -> Vec<BatchImport> {
    let target = ends.target();
    let batches: Vec<&BatchRecord> = groups.iter().flat_map(|g| g.batches.iter()).collect();
    let mut out: Vec<BatchImport> = batches
        .iter()
        .map(|b| BatchImport {
            batch_id: b.planned.batch_id.clone(),
            collection: b.planned.namespace().to_string(),
            partition: b.planned.partition.clone(),
            expected: b.planned.expected_rows,
            job_id: None,
            imported: 0,
            failure: None,
        })
        .collect();
    if route == Route::PerSeg {
        let mut tasks: Vec<Vec<i64>> = vec![Vec::new(); batches.len()];
        for (batch, task, result) in v1_imports(target, fence, &batches).await {
            tasks[batch].extend(task);
            match result {
                Ok(rows) => out[batch].imported += rows,
                Err(failure) => {
                    out[batch].failure.get_or_insert(error_chain(&failure));
                }
            }
        }
        for (import, mut tasks) in out.iter_mut().zip(tasks) {
            tasks.sort_unstable();
            import.job_id = (!tasks.is_empty()).then(|| {
                tasks
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            });
        }
        return out;
    }
    let batches = &batches;
    let results: Vec<(usize, Option<String>, Result<i64, ImportFailure>)> =
        futures::stream::iter(0..batches.len())
            .map(|batch| async move {
                let (job_id, result) = rest_import(ends, fence, batches[batch]).await;
                (batch, job_id, result)
            })
            .buffer_unordered(IMPORTS_IN_FLIGHT)
            .collect()
            .await;
    for (batch, job_id, result) in results {
        out[batch].job_id = job_id;
        match result {
            Ok(rows) => out[batch].imported = rows,
            Err(failure) => out[batch].failure = Some(error_chain(&failure)),
        }
    }
    out
}

/// One v1 import per file group of every batch: `[insert_prefix, delta_prefix or ""]`, or
/// `[delta]` for L0. What each came to, with its task once created, by batch index.
async fn v1_imports(
    target: &EndClient,
    fence: &dyn Fence,
    batches: &[&BatchRecord],
) -> Vec<(usize, Option<i64>, Result<i64, ImportFailure>)> {
    let units: Vec<V1Import<'_>> = batches
        .iter()
        .enumerate()
        .flat_map(|(batch, b)| {
            let options: Vec<(String, String)> = b
                .planned
                .options
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            b.planned.files.iter().map(move |files| {
                let mut files = files.clone();
                if files.len() == 1 && b.planned.options.contains_key("backup") {
                    files.push(String::new());
                }
                V1Import {
                    batch,
                    db: &b.planned.db,
                    collection: &b.planned.collection,
                    partition: &b.planned.partition,
                    files,
                    options: options.clone(),
                }
            })
        })
        .collect();
    // Made before they are streamed: a closure over an item that borrows would keep the
    // restore's future from being `Send` (rust-lang/rust#102211).
    let imports: Vec<_> = (units.into_iter())
        .map(|unit| async move {
            let batch = unit.batch;
            let (task, result) = import(target, fence, unit).await;
            (batch, task, result)
        })
        .collect();
    futures::stream::iter(imports)
        .buffer_unordered(IMPORTS_IN_FLIGHT)
        .collect()
        .await
}

/// One REST v2 import of a whole batch, sent as a Milvus before 3.0 takes it (no
/// `auto_commit`: it commits every job itself), to its end: the job id once created, and
/// the rows it imported or why it failed. The job is watched as every held job is
/// ([`watch`]); once Completed, its rows are read from its describe.
async fn rest_import(
    ends: &Ends,
    fence: &dyn Fence,
    b: &BatchRecord,
) -> (Option<String>, Result<i64, ImportFailure>) {
    let target = ends.target();
    let body = b.planned.create_import();
    let deadline = Instant::now() + DEFAULT_CALL_DEADLINE;
    let job = match fenced(deadline, fence, || target.rest.create_import(&body, None)).await {
        Ok(Ok(job)) => job,
        Ok(Err(e)) => return (None, Err(ImportFailure::Create(e))),
        Err(lost) => return (None, Err(lost.into())),
    };
    let id = Some(job.to_string());
    let pair = Pair {
        job: job.clone(),
        db: b.planned.db.as_str().into(),
        end: 0,
        collection: b.planned.namespace().to_string().into(),
    };
    // An end that stops answering, or no longer knows the job, is given a call's deadline
    // from the last time it answered with the job.
    let mut answered = Instant::now();
    let mut judge = |_: usize, sight: Sight, now: Instant| -> Judgement<ImportFailure> {
        match sight {
            Sight::Seen(seen) if seen.state == JobState::Completed => Judgement::Done,
            Sight::Seen(seen) if seen.state == JobState::Failed => {
                Judgement::Stop(ImportFailure::Failed {
                    job: job.to_string(),
                    reason: seen.reason.unwrap_or_default(),
                })
            }
            Sight::Seen(_) => {
                answered = now;
                Judgement::Wait
            }
            Sight::Unreachable(source) if now >= answered + DEFAULT_CALL_DEADLINE => {
                Judgement::Stop(ImportFailure::Describe {
                    job: job.to_string(),
                    source,
                })
            }
            Sight::Missing if now >= answered + DEFAULT_CALL_DEADLINE => {
                Judgement::Stop(ImportFailure::Failed {
                    job: job.to_string(),
                    reason: "the target no longer knows the job".into(),
                })
            }
            Sight::Unreachable(_) | Sight::Missing => Judgement::Wait,
        }
    };
    let watched = watch(
        ends,
        std::slice::from_ref(&pair),
        1,
        FirstLook::Spread,
        &mut judge,
    )
    .await;
    if let Err(failure) = watched {
        return (id, Err(failure));
    }
    let deadline = Instant::now() + DEFAULT_CALL_DEADLINE;
    let rows = retry(deadline, || target.rest.describe(&b.planned.db, &job))
        .await
        .map(|seen| seen.imported_rows)
        .map_err(|source| ImportFailure::Describe {
            job: job.to_string(),
            source: Arc::new(source),
        });
    (id, rows)
}

/// One v1 import to its end: its task once created, and the rows the target says it
/// imported or why it failed. A server that goes away meanwhile (a restart, a crash) is
/// waited for, up to [`DEFAULT_CALL_DEADLINE`] per call: the create is sent again only when it never
/// reached the server (v1 `Import` has no key, so a create whose answer was lost may have
/// started a task), and the task's state is asked again until it is final. Milvus keeps its
/// import tasks across a restart: those queued complete, the one it was running fails.
async fn import(
    target: &EndClient,
    fence: &dyn Fence,
    unit: V1Import<'_>,
) -> (Option<i64>, Result<i64, ImportFailure>) {
    let created = create_v1(target, fence, &unit).await;
    match created {
        Ok(task) => (Some(task), finish_v1(target, task, unit.files).await),
        Err(failure) => (None, Err(failure)),
    }
}

/// Sends a v1 import; its task.
async fn create_v1(
    target: &EndClient,
    fence: &dyn Fence,
    unit: &V1Import<'_>,
) -> Result<i64, ImportFailure> {
    let files = &unit.files;
    fence.check().await?;
    let deadline = Instant::now() + DEFAULT_CALL_DEADLINE;
    let mut backoff = super::retry::FIRST_BACKOFF;
    loop {
        let created = target
            .grpc
            .import_v1(
                unit.db,
                unit.collection,
                unit.partition,
                files.clone(),
                unit.options.clone(),
            )
            .await;
        match created {
            Err(e) if e.never_sent() && Instant::now() + backoff < deadline => {
                tracing::debug!(error = %e, ?backoff, "the import never reached the server; sending it again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(super::retry::MAX_BACKOFF);
                fence.check().await?;
            }
            other => {
                return other.map_err(|source| ImportFailure::CreateV1 {
                    files: files.clone(),
                    source,
                });
            }
        }
    }
}

/// Asks after a v1 import task until it is final: the rows it imported, or why it failed.
async fn finish_v1(
    target: &EndClient,
    task: i64,
    files: Vec<String>,
) -> Result<i64, ImportFailure> {
    loop {
        let deadline = Instant::now() + DEFAULT_CALL_DEADLINE;
        let state = retry(deadline, || target.grpc.import_state(task))
            .await
            .map_err(|source| ImportFailure::Describe {
                job: format!("task {task}"),
                source: Arc::new(source),
            })?;
        match state.state {
            ImportState::ImportCompleted => return Ok(state.row_count),
            ImportState::ImportFailed | ImportState::ImportFailedAndCleaned => {
                return Err(ImportFailure::TaskFailed {
                    task,
                    files,
                    reason: state.reason.unwrap_or_default(),
                });
            }
            _ => tokio::time::sleep_until(Instant::now() + MAX_INTERVAL / 6).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(imported: i64, failure: Option<&str>) -> BatchImport {
        BatchImport {
            batch_id: "default.c/_default/data-0".into(),
            collection: "default.c".into(),
            partition: "_default".into(),
            expected: Some(ExpectedRows {
                inserted: 30,
                deletes: Some(0),
                exact: None,
            }),
            job_id: None,
            imported,
            failure: failure.map(str::to_owned),
        }
    }

    #[test]
    fn a_batch_is_whole_only_with_every_import_completed_and_its_rows() {
        assert!(batch(30, None).whole());
        assert!(!batch(0, None).whole());
        assert_eq!(
            batch(20, None).problem().as_deref(),
            Some("default.c/_default/data-0 imported 20 rows, the backup holds 30")
        );
        assert!(!batch(30, Some("boom")).whole());
        let report = batch(0, None).job_report("t");
        assert_eq!(report.states[0].imported_rows, Some(0));
        assert_eq!(report.states[0].state, Some(JobState::Completed));
        assert!(report.states[0].reason.is_some());
    }
}
