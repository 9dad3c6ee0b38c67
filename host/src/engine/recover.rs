//! Finishing a restore a crash left behind (DESIGN.md §2, invariant 4), from its journal
//! record alone: no commit decision on record → presumed abort of everything it may have
//! submitted, including a job whose create answer was lost; a decision on record → roll
//! that group forward. States are re-read from every end right before acting, since Milvus
//! cannot check a fencing token.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use super::attempt::{Attempt, Change};
use super::ends::Ends;
use super::fence::Lost;
use super::process::Engine;
use super::report::{CollectionReport, Divergence, EndReport, Report, ReportOf};
use super::retry::DEFAULT_CALL_DEADLINE;
use super::rollback::{self, StageCleanup};
use super::two_phase::{self, Tracked, Tracker};
use super::{create, outcome, verification};
use crate::config::StorageSpec;
use crate::diagnostic::error_chain;
use crate::job::Job;
use crate::journal::{CommitGroup, Decision, Outcome, RestoreRecord};
use crate::storage::{StagingPrefix, TempFiles};

/// Resolves `record`. `job` is given when `lockstep run` found the record for the same job
/// content; `lockstep recover` passes none. `stores` are the stores it staged into (the
/// job's, or the host config's for the recorded ends): where the staged files are deleted,
/// or, when that cannot be done now, the record says they are left for a later cleanup.
pub async fn recover(
    engine: &Engine,
    record: RestoreRecord,
    ends: Ends,
    job: Option<&Job>,
    stores: &[(String, &StorageSpec)],
) -> Report {
    let started = Timestamp::now();
    let claim = match engine.journal.claim(&record.id).await {
        Ok(c) => c,
        Err(e) => {
            let mut report = report_of(&record, &ends, started);
            report.outcome = Outcome::Incomplete;
            report.summary = format!("cannot recover: {e}");
            return report;
        }
    };
    // Re-read the record under the claim: another host may have finished it meanwhile.
    let record = match engine.journal.load(&record.id).await {
        Ok(Some(r)) => r,
        _ => record,
    };
    if !record.is_unfinished()
        && let Some(stored) = &record.report
    {
        // A finished restore is never run again; a stored report that no longer reads is
        // said to be damaged, with the record's own outcome.
        return match stored.read::<Report>() {
            Ok(report) => report,
            Err(e) => {
                let mut report = report_of(&record, &ends, started);
                report.outcome = record.outcome.unwrap_or(Outcome::Incomplete);
                report.summary = format!(
                    "restore {} finished ({:?}), but the report in its journal record is \
                     damaged ({e}); nothing was done",
                    record.id, report.outcome
                );
                report
            }
        };
    }
    tracing::info!(restore = %record.id, phase = %record.phase, decided = record.has_commit_decision(), "recovering");
    let report = report_of(&record, &ends, started);
    let (attempt, mut keeper, mut inbox) =
        Attempt::new(engine, &ends, claim.as_ref(), record.clone(), job);
    let work = resolve(&attempt, &record, stores, report);
    let (report, outcome) = keeper.run(&mut inbox, work).await;
    keeper.finish(report, outcome, vec![]).await
}

/// What rolling the groups forward or back came to.
#[derive(Default)]
struct Settled {
    divergences: Vec<Divergence>,
    trackers: Vec<Tracker>,
    aborted_any: bool,
    /// Why some end is not known to be settled.
    unsettled: Vec<String>,
    forward_incomplete: bool,
}

/// Rolls each group of `record` forward or back, as its decision says, then drops what the
/// rollback rule names and deletes the staged files once every job settled: the report so
/// far and the outcome.
async fn resolve(
    attempt: &Attempt<'_>,
    record: &RestoreRecord,
    stores: &[(String, &StorageSpec)],
    mut report: Report,
) -> (Report, Outcome) {
    let deadline = Instant::now() + DEFAULT_CALL_DEADLINE;
    let mut settled = settle(attempt, record, deadline).await;
    let _ = attempt.persist().await;
    let decided = record.has_commit_decision();
    let (cleaned, temp) = undo(attempt, record, stores, deadline, &mut settled).await;

    report.jobs = settled
        .trackers
        .iter()
        .flat_map(Tracker::job_reports)
        .collect();
    report.divergences = settled.divergences;
    // What the record's decisions made visible: the collections of the groups it committed.
    let committed: BTreeSet<String> = (record.groups.iter())
        .filter(|g| matches!(g.decision, Some(Decision::Commit { .. })))
        .flat_map(|g| g.batches.iter().map(|b| b.planned.namespace().to_string()))
        .collect();
    for c in &mut report.collections {
        c.committed = committed.contains(&c.target);
    }
    let mut unsettled = settled.unsettled;
    if settled.forward_incomplete {
        unsettled.push("not every end reported Completed after the roll-forward".into());
    }
    // What a query on every end sees of what the decisions made visible, as the run would
    // have asked once every end completed.
    if let Some(asked) = record.verify.as_ref().filter(|_| unsettled.is_empty()) {
        report.verification = verification::ask_recorded(attempt, asked, &report.collections).await;
    }
    let (shown_wrong, unverified) = verification::findings(report.verification.as_ref());
    let failure = match (decided, settled.aborted_any) {
        (false, _) => Some(format!(
            "recovered by presumed abort (the crash came before the commit decision, in phase \
             {:?}); nothing is visible on any end",
            record.phase
        )),
        (true, true) => Some("recovered: undecided commit groups aborted by presumed abort".into()),
        (true, false) => None,
    };
    let facts = outcome::Facts {
        failure,
        visible: committed.into_iter().collect(),
        divergences: &report.divergences,
        shown_wrong,
        unverified,
        unconverged: unsettled,
        verify_required: record.verify.as_ref().is_some_and(|v| v.required),
        collections: report.collections.len(),
        jobs: record.groups.iter().map(|g| g.batches.len()).sum(),
        ends: attempt.ends.len(),
        ..outcome::Facts::default()
    };
    let (outcome, summary) = outcome::decide(&facts, &record.id);
    report.summary = match outcome {
        Outcome::Succeeded | Outcome::Unverified | Outcome::Diverged
            if decided && !settled.aborted_any =>
        {
            format!("recovered by rolling the commit decision forward: {summary}")
        }
        _ => summary,
    };
    if let Some(s) = report.staging.as_mut() {
        s.cleaned_up = cleaned && temp == TempFiles::Delete;
    }
    (report, outcome)
}

/// Each group rolled forward (decided to commit) or aborted (undecided), in order; a lost
/// claim stops the walk.
async fn settle(attempt: &Attempt<'_>, record: &RestoreRecord, deadline: Instant) -> Settled {
    let names: Vec<String> = attempt.ends.all().iter().map(|e| e.name.clone()).collect();
    let grace = Duration::from_millis(record.mirror_grace_ms).min(Duration::from_secs(60));
    let mut settled = Settled::default();
    for (index, group) in record.groups.iter().enumerate() {
        let mut tracker = tracker_of(group, &names);
        let jobs: Vec<usize> = (0..tracker.jobs.len()).collect();
        if let Some(Decision::Commit { .. }) = &group.decision {
            match roll_forward(attempt, &mut tracker, &jobs, deadline).await {
                Ok((d, finished)) => {
                    settled.divergences.extend(d);
                    settled.forward_incomplete |= !finished;
                }
                Err(lost) => {
                    settled.unsettled.push(lost.to_string());
                    settled.trackers.push(tracker);
                    break;
                }
            }
        } else {
            let aborted = presumed_abort(attempt, index, group, &mut tracker, grace, deadline);
            settled.unsettled.extend(aborted.await);
            settled.aborted_any = true;
        }
        settled.trackers.push(tracker);
    }
    settled
}

/// Drops what the record's rollback rule names, and deletes the staged files once no end
/// can still read them (every job settled); a store that cannot be reached or named now
/// leaves them for the sweep and `lockstep recover`. Whether they went, and the rule used.
async fn undo(
    attempt: &Attempt<'_>,
    record: &RestoreRecord,
    stores: &[(String, &StorageSpec)],
    deadline: Instant,
    settled: &mut Settled,
) -> (bool, TempFiles) {
    let decided = record.has_commit_decision();
    let temp = TempFiles::after(record.keep_temp_files, decided);
    // The staged files go only once no end can still read them: every job settled.
    let settled_before = settled.unsettled.is_empty() && !settled.forward_incomplete;
    let stage = settled_before.then_some(StageCleanup { stores, temp });
    let cleaned = match rollback::undo(attempt.ends, attempt, record, stage, deadline).await {
        Ok(cleaned) => cleaned,
        Err(lost) => {
            settled.unsettled.push(lost.to_string());
            false
        }
    };
    let quiet = settled.unsettled.is_empty() && !settled.forward_incomplete;
    if let Some(prefix) = &record.staging_prefix
        && !cleaned
    {
        tracing::warn!(%prefix, "staged files were left in place; they are deleted once the stores can be reached");
    }
    attempt.note(Change::Recovered {
        stage_left: record.staging_prefix.is_some() && !cleaned,
        host_lost: !decided && quiet,
    });
    (cleaned, temp)
}

/// A tracker of `group`'s jobs, by the ids its record holds, none seen yet.
fn tracker_of(group: &CommitGroup, names: &[String]) -> Tracker {
    let jobs = (group.batches.iter())
        .map(|b| Tracked {
            batch_id: b.planned.batch_id.clone(),
            db: b.planned.db.as_str().into(),
            collection: b.planned.namespace().to_string().into(),
            partition: b.planned.partition.clone(),
            expected: b.planned.expected_rows,
            job_id: b.job_id.clone(),
            seen: vec![None; names.len()],
            imported: vec![None; names.len()],
        })
        .collect();
    Tracker {
        end_names: names.to_vec(),
        jobs,
    }
}

/// Rolls a group decided for commit forward: commits, waits for every end to complete,
/// and reads the rows each shows. Its divergences and whether every end completed.
async fn roll_forward(
    attempt: &Attempt<'_>,
    tracker: &mut Tracker,
    jobs: &[usize],
    deadline: Instant,
) -> Result<(Vec<Divergence>, bool), Lost> {
    let ends = attempt.ends;
    let mut divergences = two_phase::commit(ends, attempt, tracker, jobs, deadline).await?;
    let completion = two_phase::complete(ends, attempt, tracker, jobs, Some(deadline), &|_| {});
    let (more, finished) = completion.await;
    divergences.extend(more);
    divergences.extend(super::rows::after_commit(ends, tracker, jobs, deadline).await);
    Ok((divergences, finished))
}

/// Aborts an undecided group (presumed abort) and records the decision. A batch whose
/// create may have gone out without its answer being recorded is looked up first, so its
/// job is aborted too. Why the abort did not settle, if it did not.
async fn presumed_abort(
    attempt: &Attempt<'_>,
    index: usize,
    group: &CommitGroup,
    tracker: &mut Tracker,
    settle: Duration,
    deadline: Instant,
) -> Option<String> {
    let unanswered: Vec<usize> = (group.batches.iter().enumerate())
        .filter(|(_, b)| b.job_id.is_none() && b.create_sent)
        .map(|(i, _)| i)
        .collect();
    create::find_unanswered(
        attempt,
        index,
        &group.batches,
        &unanswered,
        tracker,
        deadline,
    )
    .await;
    let jobs: Vec<usize> = (0..tracker.jobs.len()).collect();
    let aborted = two_phase::abort(attempt.ends, attempt, tracker, &jobs, settle, deadline).await;
    let decision = Decision::Abort {
        at: Timestamp::now(),
        reason: "recovered: no decision on record".into(),
    };
    attempt.note(Change::Decided {
        group: index,
        decision,
    });
    aborted.err().map(|e| error_chain(&e))
}

/// Why the staged files a finished restore left are not deleted yet.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(transparent)]
    Journal(#[from] crate::journal::Error),
    #[error("the staged files of {0} could not all be deleted yet")]
    NotDeleted(crate::journal::RestoreId),
}

/// Deletes the staged files a finished restore left (`stage_left`) from `stores`, under
/// the restore's claim, and records that they are gone. `Ok(false)` when another process
/// holds the restore or it has nothing left.
pub async fn clean_left_stage(
    engine: &Engine,
    id: &crate::journal::RestoreId,
    stores: &[(String, &StorageSpec)],
) -> Result<bool, CleanupError> {
    let claim = match engine.journal.claim(id).await {
        Ok(c) => c,
        Err(crate::journal::Error::Busy { .. }) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let mut record = match engine.journal.load(id).await? {
        Some(r) if r.stage_left && !r.is_unfinished() => r,
        _ => return Ok(false),
    };
    let temp = TempFiles::after(record.keep_temp_files, record.has_commit_decision());
    // Right before the delete, as before every action: still this host's.
    engine.journal.fence(claim.as_ref()).await?;
    if !crate::storage::delete_stage(stores, &StagingPrefix::for_restore(id.as_str()), temp, &[])
        .await
    {
        return Err(CleanupError::NotDeleted(id.clone()));
    }
    record.stage_left = false;
    record.updated_at = Timestamp::now();
    engine.journal.save(claim.as_ref(), &record).await?;
    tracing::info!(restore = %id, "deleted the staged files a recovery had left");
    Ok(true)
}

/// The stores a recorded restore staged into, from the host config; `None` when one of
/// the ends it staged into has no storage there (an end named by URI, say).
pub fn recorded_stores<'h>(
    record: &RestoreRecord,
    host: &'h crate::config::HostConfig,
) -> Option<Vec<(String, &'h StorageSpec)>> {
    record
        .staged_ends
        .iter()
        .map(|end| {
            let spec = host.clusters.get(end)?.storage.as_ref()?;
            Some((end.clone(), spec))
        })
        .collect()
}

/// The report of a recovered restore, its collections in the record's order. Each is found
/// by name in a map: at 10,000 collections, scanning the list for each of 40,000 batches and
/// the verification's list for each collection made recovery quadratic.
fn report_of(record: &RestoreRecord, ends: &Ends, started: Timestamp) -> Report {
    let mut collections: Vec<CollectionReport> = Vec::new();
    let mut by_target: HashMap<String, usize> = HashMap::new();
    // The live rows the plan counted, for verification.
    let mut counted = HashMap::new();
    for c in record.verify.iter().flat_map(|v| &v.collections) {
        counted.entry(c.target.as_str()).or_insert(c);
    }
    for g in &record.groups {
        for b in &g.batches {
            let target = b.planned.namespace().to_string();
            match by_target.get(&target) {
                Some(&c) => collections[c].batches += 1,
                None => {
                    let counted = counted.get(target.as_str()).copied();
                    by_target.insert(target.clone(), collections.len());
                    collections.push(CollectionReport {
                        source: counted.map(|c| c.source.clone()).unwrap_or_default(),
                        partitions: 0,
                        batches: 1,
                        inserted: 0,
                        deleted: None,
                        live: counted.and_then(|c| c.live),
                        live_by_partition: counted
                            .map(|c| c.live_by_partition.clone())
                            .unwrap_or_default(),
                        imported: Default::default(),
                        committed: false,
                        l0_deletes: None,
                        target,
                    })
                }
            }
        }
    }
    let of = ReportOf::record(record);
    Report {
        outcome: Outcome::Incomplete,
        collections,
        staging: record
            .staging_prefix
            .as_ref()
            .map(|p| super::report::StagingReport {
                prefix: p.clone(),
                files: 0,
                bytes: 0,
                bytes_streamed: 0,
                transfers: Default::default(),
                destinations: record.staged_ends.clone(),
                cleaned_up: false,
            }),
        ..Report::new(of, EndReport::of_ends(ends), started)
    }
}
