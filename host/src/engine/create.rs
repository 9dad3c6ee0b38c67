//! Import creates on the target, and the jobs of creates whose answer was lost.
//!
//! A create whose answer was lost may have made its job. Sent again under its
//! Idempotency-Key it would get that job back, but Milvus looks the key up only after
//! admission (the job limit, the binlog listing, the replication gate; milvus#53228,
//! docs/milvus-facts.md §1.6): with the job budget full of the restore's own held jobs, the
//! lost one among them, the retry is refused although the job exists, and a restore that
//! took the refusal for "not created" would leave that job held Uncommitted for ever. So a
//! refusal that follows a lost answer never counts before the target's jobs were looked at,
//! by the batch's paths; a job found is the batch's. A target that ignores the key (before
//! 3.0.2) gets the same look before each resend, which would otherwise start a second job.
//! Recovery, and the abort of a restore whose create failed so, find such jobs the same way
//! ([`find_unanswered`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::time::Instant;

use super::attempt::{Attempt, Change};
use super::ends::EndClient;
use super::fence::{Fence, Lost};
use super::retry::{fenced, retry};
use super::two_phase::Tracker;
use crate::journal::{BatchRecord, PlannedBatch};
use crate::milvus::{self, MilvusJobId};

/// Whether a create carries the batch's Idempotency-Key: only to a target that dedups by it
/// (Milvus 3.0.2 on); an older one would take the header for nothing, and a create whose
/// answer was lost is found by its paths instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CreateKey {
    Sent,
    Omitted,
}

/// A create that made no job the restore knows of.
#[derive(Debug)]
pub(super) struct CreateFailed {
    /// The last try's error.
    pub error: milvus::Error,
    /// Some try's answer was lost and no job was found by the batch's paths: one may still
    /// appear (a create Milvus was still registering), so the abort looks again.
    pub answer_lost: bool,
}

/// Creates `batch`'s held import on `target`, each try once `fence` passed, retried while
/// the target is away or busy until `deadline`. Once a try's answer was lost, a refusal
/// (with the key: a resend under it gets the job back whenever Milvus admits it) or any
/// failure (without: a resend would start a second job, so the look comes first) looks the
/// job up by the batch's paths: a job found is the answer.
pub(super) async fn create_held(
    target: &EndClient,
    fence: &dyn Fence,
    batch: &PlannedBatch,
    key: CreateKey,
    deadline: Instant,
) -> Result<Result<MilvusJobId, CreateFailed>, Lost> {
    let body = &batch.create_held_import();
    let key = (key == CreateKey::Sent).then_some(batch.idempotency_key.as_str());
    // Set at the first lost answer and kept: from then on every failure is looked up.
    let unanswered = &AtomicBool::new(false);
    let created = fenced(deadline, fence, || async move {
        let error = match target.rest.create_import(body, key).await {
            Ok(id) => return Ok(id),
            Err(e) => e,
        };
        let lost_before = unanswered.fetch_or(error.answer_lost(), Ordering::Relaxed);
        let look = match key {
            Some(_) => lost_before && !error.answer_lost(),
            None => lost_before || error.answer_lost(),
        };
        if look && let Ok(Some(id)) = find_by_paths(target, batch).await {
            tracing::info!(
                end = %target.name, batch = %batch.batch_id, job = %id, %error,
                "found the job of a create whose answer was lost"
            );
            return Ok(id);
        }
        Err(error)
    })
    .await?;
    Ok(created.map_err(|error| CreateFailed {
        error,
        answer_lost: unanswered.load(Ordering::Relaxed),
    }))
}

/// The job on `target` that imports exactly `batch`'s files and is not finished, if there
/// is one. Finished jobs are passed over: with a backup imported in place an earlier
/// attempt's aborted job has the same paths.
async fn find_by_paths(
    target: &EndClient,
    batch: &PlannedBatch,
) -> milvus::Result<Option<MilvusJobId>> {
    let wanted: BTreeSet<String> = (batch.files.iter())
        .map(|g| format!("[{}]", g.join(" ")))
        .collect();
    let listed = target.rest.list(&batch.db, &batch.collection).await?;
    for entry in listed.iter().filter(|e| !e.state.is_terminal()) {
        let described = match target.rest.describe(&batch.db, &entry.job_id).await {
            Ok(described) => described,
            // Gone since the list (or never readable): not the one.
            Err(e) if !e.is_retriable() => continue,
            Err(e) => return Err(e),
        };
        let groups: BTreeSet<String> = described.file_groups.into_iter().collect();
        if groups == wanted {
            return Ok(Some(entry.job_id.clone()));
        }
    }
    Ok(None)
}

/// For each batch of group `group` in `which`, the job its create may have made without the
/// answer saying so, recorded (as found, or as none) for the abort, which names jobs by id.
pub(super) async fn find_unanswered(
    attempt: &Attempt<'_>,
    group: usize,
    batches: &[BatchRecord],
    which: &[usize],
    tracker: &mut Tracker,
    deadline: Instant,
) {
    for &i in which {
        let id = find_lost(
            attempt.ends.target(),
            attempt,
            &batches[i].planned,
            deadline,
        )
        .await;
        tracker.jobs[i].job_id = id.clone();
        attempt.note(Change::JobId {
            group,
            batch: i,
            id,
        });
    }
}

/// The job a create of `batch` may have made: found by its paths, else, where the target
/// honours the key, by the key itself, which hands back the job if it was ever made (a
/// failed one included) and makes one otherwise, to be aborted with the rest. That create
/// waits for `fence`. A full job budget ends the look there: the key cannot be looked up
/// until a job ends (the jobs filling it may be a stalled host's, which this recovery is
/// to abort), and the listing, which shows every unfinished job, showed none with these
/// files, so nothing of this batch is left to abort.
async fn find_lost(
    target: &EndClient,
    fence: &dyn Fence,
    batch: &PlannedBatch,
    deadline: Instant,
) -> Option<MilvusJobId> {
    let found = retry(deadline, || find_by_paths(target, batch))
        .await
        .ok()?;
    if found.is_some() {
        return found;
    }
    let version = target.grpc.version().await.ok()?;
    if !version.honours_idempotency_key() {
        return None;
    }
    let body = batch.create_held_import();
    let key = Some(batch.idempotency_key.as_str());
    let looked_up = fenced(deadline, fence, || async {
        match target.rest.create_import(&body, key).await {
            Err(e) if e.is_job_limit() => Ok(None),
            answer => answer.map(Some),
        }
    });
    looked_up.await.ok()?.ok()?
}
