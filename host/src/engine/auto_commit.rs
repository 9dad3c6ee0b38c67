//! The `per_seg` strategy: one v1 gRPC import per segment, auto-committed, as
//! milvus-backup's default restore does. There is no two-phase commit here, so preflight
//! allows it only without secondaries on a target that does not replicate, and a failure
//! cannot be rolled back: segments imported before it stay visible, and the report says so.

use futures::StreamExt;
use milvus_proto::common::ImportState;
use tokio::time::Instant;

use super::report::Report;
use super::run::{Shared, Stop};
use super::schedule::MAX_INTERVAL;
use crate::job::Job;
use crate::journal::{CommitGroup, Outcome};

/// v1 imports in flight at once (milvus-backup bounds them with `importJobs`).
const IMPORTS_IN_FLIGHT: usize = 8;

/// One v1 import: a segment's file group into its partition.
struct V1Import<'a> {
    db: &'a str,
    collection: &'a str,
    partition: &'a str,
    files: Vec<String>,
    options: Vec<(String, String)>,
}

pub async fn run(
    shared: &Shared<'_>,
    _job: &Job,
    groups: &[CommitGroup],
    report: &mut Report,
) -> Result<Outcome, Stop> {
    let target = shared.ends.target();
    // One v1 job per file group: `[insert_prefix, delta_prefix or ""]`, or `[delta]` for L0.
    let units: Vec<V1Import<'_>> = groups
        .iter()
        .flat_map(|g| g.batches.iter())
        .flat_map(|b| {
            let options: Vec<(String, String)> = b
                .options
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            b.files.iter().map(move |files| {
                let mut files = files.clone();
                if files.len() == 1 && b.options.contains_key("backup") {
                    files.push(String::new());
                }
                V1Import {
                    db: &b.db,
                    collection: &b.collection,
                    partition: &b.partition,
                    files,
                    options: options.clone(),
                }
            })
        })
        .collect();
    let total = units.len();
    let results: Vec<Result<i64, String>> = futures::stream::iter(units)
        .map(|unit| async move {
            let files = unit.files;
            let task = target
                .grpc
                .import_v1(
                    unit.db,
                    unit.collection,
                    unit.partition,
                    files.clone(),
                    unit.options,
                )
                .await
                .map_err(|e| format!("import of {files:?}: {e}"))?;
            loop {
                let state = target
                    .grpc
                    .import_state(task)
                    .await
                    .map_err(|e| format!("import task {task}: {e}"))?;
                match state.state {
                    ImportState::ImportCompleted => return Ok(state.row_count),
                    ImportState::ImportFailed | ImportState::ImportFailedAndCleaned => {
                        return Err(format!(
                            "import task {task} of {files:?} failed: {}",
                            state.reason.unwrap_or_default()
                        ));
                    }
                    _ => tokio::time::sleep_until(Instant::now() + MAX_INTERVAL / 6).await,
                }
            }
        })
        .buffer_unordered(IMPORTS_IN_FLIGHT)
        .collect()
        .await;
    let failures: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().cloned())
        .collect();
    let rows: i64 = results.iter().filter_map(|r| r.as_ref().ok()).sum();
    if failures.is_empty() {
        for c in &mut report.collections {
            c.committed = true;
        }
        report.summary = format!("per_seg: {total} v1 import(s) completed, {rows} rows");
        Ok(Outcome::Succeeded)
    } else {
        Err(Stop::Failed(format!(
            "per_seg: {} of {total} imports failed and per_seg cannot roll back: the other {} \
             are visible. First failure: {}",
            failures.len(),
            total - failures.len(),
            failures[0]
        )))
    }
}
