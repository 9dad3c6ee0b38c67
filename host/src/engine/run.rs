//! One restore attempt, from preflight to report, with the journal written at every step
//! the recovery of a crash depends on: preflight, checks, DDL, staging beside the creates
//! (or before them, for checks before import and for auto-commit routes), the commit groups
//! (`group`), then cleanup and the outcome.

use jiff::Timestamp;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::attempt::Attempt;
use super::auto_commit;
use super::checks::{self, CheckSetup};
use super::ddl;
use super::ends::Ends;
use super::error::{Error, StageError};
use super::faults;
use super::gate::ImportGate;
use super::group::{self, Groups};
use super::outcome;
use super::preflight::{Preflight, preflight};
use super::process::{Engine, Interrupted};
use super::refusal::Refusal;
use super::report::{CollectionReport, Divergence, EndReport, Report, ReportOf, StagingReport};
use super::retry::DEFAULT_CALL_DEADLINE;
use super::rollback;
use super::staging::{self, Destinations};
use super::two_phase::Tracker;
use crate::job::Job;
use crate::journal::{Claim, Decision, Outcome, RestorePhase, RestoreRecord};
use crate::plugins::{CheckContext, Phase};
use crate::storage::StagingPrefix;

/// Runs a new attempt of `job` under `claim`.
pub(super) async fn run_attempt(
    engine: &Engine,
    job: &Job,
    ends: &Ends,
    claim: &dyn Claim,
    record: RestoreRecord,
) -> Report {
    let started = Timestamp::now();
    let mut report = Report {
        rerun_because: record.rerun_because.clone(),
        ..Report::new(ReportOf::record(&record), EndReport::of_ends(ends), started)
    };
    let attempt = Attempt::new(engine, ends, claim, record, Some(job));
    if let Err(e) = attempt.persist().await {
        report.summary = e.to_string();
        return attempt.finish(report, Outcome::HostFailed, vec![]).await;
    }
    let preflight = match preflight(job, ends).await {
        Ok(preflight) => preflight,
        Err(refusals) => {
            let summary = format!("refused by preflight: {}", Refusal::joined(&refusals));
            report.summary = summary;
            return attempt.finish(report, Outcome::Refused, refusals).await;
        }
    };
    for (end, v) in report.ends.iter_mut().zip(&preflight.versions) {
        end.version = Some(v.to_string());
    }
    report.route = Some(preflight.route.route);
    report.format = Some(preflight.backup.format);
    for s in job.secondaries.iter().filter(|s| s.storage.is_none()) {
        tracing::warn!(
            secondary = %s.end.name,
            "no storage of this secondary is known, so nothing is staged there: it must see \
             the target's store, or its mirrors find no files; add `storage` to its cluster \
             in the host config (and `require_staging = true` to refuse such a restore)"
        );
    }
    let checks = match CheckSetup::load(engine, job).await {
        Ok(c) => c,
        Err(refusals) => {
            report.summary = format!("refused: {}", Refusal::joined(&refusals));
            return attempt.finish(report, Outcome::Refused, refusals).await;
        }
    };
    report.collections = preflight
        .plan
        .collections
        .iter()
        .map(CollectionReport::planned)
        .collect();
    let outcome = attempt
        .with_progress_writes(execute(&attempt, job, &preflight, &checks, &mut report))
        .await;
    let (outcome, refusals) = match outcome {
        Ok(outcome) => (outcome, vec![]),
        Err(Error::Refused(r)) => {
            report.summary = format!("refused: {}", Refusal::joined(&r));
            (Outcome::Refused, r)
        }
        Err(failed) => {
            // With collection atomicity, groups decided before the failure stay committed.
            let facts = outcome::Facts {
                failure: Some(failed.reason()),
                visible: report.committed_collections(),
                divergences: &report.divergences,
                ..outcome::Facts::default()
            };
            let id = attempt.record.lock().expect("record lock").id.clone();
            let (outcome, summary) = outcome::decide(&facts, &id);
            report.summary = summary;
            (outcome, vec![])
        }
    };
    attempt.finish(report, outcome, refusals).await
}

/// Everything after preflight. `Ok` is the outcome of a restore that got past its DDL
/// without a pre-decision failure, or rolled back cleanly; `Err` a stop whose rollback the
/// caller reports.
async fn execute(
    attempt: &Attempt<'_>,
    job: &Job,
    preflight: &Preflight,
    checks: &CheckSetup,
    report: &mut Report,
) -> Result<Outcome, Error> {
    let engine = attempt.engine;
    let ends = attempt.ends;
    let grace = job.two_phase.mirror_grace;
    let call_deadline = || {
        Instant::now()
            + job
                .two_phase
                .commit_timeout
                .unwrap_or(DEFAULT_CALL_DEADLINE)
    };
    let restore_id = attempt.record.lock().expect("record lock").id.clone();

    // DDL on the target. What it will create is recorded before it starts (with the write
    // that enters the DDL phase), and what it created at every write after.
    attempt.record.lock().expect("record lock").to_create = ddl::to_create(
        &preflight.plan,
        &preflight.exists,
        job.restore.collection_creation,
    );
    let (made_tx, made) = watch::channel(0);
    let run_ddl = async |made: &watch::Sender<usize>| -> Result<(), Error> {
        let created = |c| {
            let mut r = attempt.record.lock().expect("record lock");
            r.created_collections.push(c);
        };
        let applied = ddl::apply(
            ends,
            attempt,
            &preflight.plan,
            &preflight.exists,
            job.restore.collection_creation,
            call_deadline(),
            &created,
            made,
        )
        .await;
        attempt
            .persist()
            .await
            .map_err(|e| attempt.failure_now(e))?;
        faults::crash_point("after-ddl");
        applied.map_err(|e| match e {
            ddl::Error::FieldIds {
                collection,
                mismatched,
            } => Error::Refused(vec![Refusal::FieldIds {
                collection,
                mismatched,
            }]),
            ddl::Error::Milvus(e) => attempt.failure_now(StageError::Ddl(e.to_string())),
            ddl::Error::Lost(lost) => Error::Lost(lost),
        })
    };
    // Every collection must be on every secondary before its jobs are created: a mirror
    // whose collection has not arrived is silently never created.
    let mirrored = async |arrived: &(dyn Fn(usize) + Sync)| -> Result<(), Error> {
        match engine
            .interrupt
            .race(ddl::await_mirrors(
                ends,
                &preflight.plan,
                grace,
                made.clone(),
                arrived,
            ))
            .await
        {
            Err(i) => Err(i.into()),
            Ok(result) => result.map_err(|e| attempt.failure_now(StageError::Arrival(e))),
        }
    };
    if job.restore.meta_only {
        attempt
            .set_phase(RestorePhase::Ddl)
            .await
            .map_err(|e| attempt.failure_now(e))?;
        if let Err(stop) = run_ddl(&made_tx).await {
            return rollback(attempt, stop).await;
        }
        if let Err(stop) = mirrored(&|_| {}).await {
            return rollback(attempt, stop).await;
        }
        report.summary =
            "meta only: collections created on the target and present on every secondary".into();
        for c in &mut report.collections {
            c.committed = true;
        }
        return Ok(Outcome::Succeeded);
    }

    // Where the ends import from, and the commit groups: recorded before anything is
    // created, staged or submitted.
    let to = match Destinations::open(job, preflight, &restore_id) {
        Ok(to) => to,
        Err(e) => return rollback(attempt, attempt.failure_now(e)).await,
    };
    let import_prefix = to.paths.prefix().to_string();
    let groups = group::plan(&restore_id, job, preflight, &import_prefix);
    let trackers = group::trackers(ends, preflight, &groups);
    // Every planned job, none created yet: what a restore stopped before its creates reports.
    report.jobs = trackers.iter().flat_map(Tracker::job_reports).collect();
    attempt.record.lock().expect("record lock").groups = groups.clone();
    checks.set_staged(checks::staged_objects(
        &import_prefix,
        &preflight.plan.files_to_stage,
        &groups,
        &job.target.end.paths,
    ));
    // One write for the groups, the prefix (so a crash mid-copy can still clean up) and the
    // phase: each is a journal commit with an fsync, and all of them come before any DDL,
    // copy or create.
    to.record_in(&mut attempt.record.lock().expect("record lock"));
    attempt.enter_phase(RestorePhase::Ddl);
    attempt
        .persist()
        .await
        .map_err(|e| attempt.failure_now(e))?;
    let gate = ImportGate::new(
        &import_prefix,
        &preflight.plan.files_to_stage,
        &groups,
        preflight.plan.collections.iter().map(|c| c.batches.len()),
        attempt.stop_token().clone(),
    );
    let arrived = |c: usize| gate.collection_arrived(c);
    let collections = checks::collections(&preflight.plan);
    let restore = checks::Restore {
        id: restore_id.as_str(),
        backup: &job.backup.name,
        ends,
        collections: &collections,
        groups: &groups,
    };
    let run_on = Groups {
        job,
        preflight,
        checks,
        restore: &restore,
        gate: &gate,
    };

    // Checks before import see every staged file, and `per_seg` has no decision to hold
    // back: both create every collection, wait for it everywhere and stage everything
    // first. Otherwise the DDL, the stage and the creates run side by side: each batch's
    // job is created as soon as its collection is on every secondary and its own files are
    // staged, and the decision waits for the whole stage.
    let auto_commits = preflight.route.route.auto_commits();
    let landed = if checks.has(Phase::BeforeImport) || auto_commits {
        if let Err(stop) = run_ddl(&made_tx).await {
            return rollback(attempt, stop).await;
        }
        if let Err(stop) = mirrored(&arrived).await {
            return rollback(attempt, stop).await;
        }
        match stage(attempt, preflight, &to, &gate).await {
            Ok(staged) => report.staging = Some(staged),
            Err(stop) => return rollback(attempt, stop).await,
        }
        faults::crash_point("after-stage");
        let before_import = CheckContext::for_phase(&restore, Phase::BeforeImport, None);
        let checked = checks.run(job, before_import).await;
        report.checks = checks.reports();
        if let Err(e) = checked {
            return rollback(attempt, attempt.failure_now(e)).await;
        }
        if auto_commits {
            attempt
                .set_phase(RestorePhase::Importing)
                .await
                .map_err(|e| attempt.failure_now(e))?;
            let imports =
                auto_commit::run(ends.target(), attempt, &groups, preflight.route.route).await;
            auto_committed(&imports, ends, report)
        } else {
            held(attempt, group::run(attempt, run_on, trackers).await, report)
        }
    } else {
        // A failure recorded here closes the gate: the groups abort with its reason.
        let creating = async {
            if let Err(stop) = run_ddl(&made_tx).await {
                attempt.fail(stop);
            }
            // Ends the wait for a collection the DDL never made, after its reason.
            drop(made_tx);
        };
        let arrivals = async {
            tokio::select! {
                mirrored = mirrored(&arrived) => {
                    if let Err(stop) = mirrored {
                        attempt.fail(stop);
                    }
                }
                // Nothing more is imported (the gate is closed): waiting for a late
                // collection is moot.
                () = attempt.stopped() => {}
            }
        };
        let staging = async {
            match stage(attempt, preflight, &to, &gate).await {
                Ok(staged) => {
                    faults::crash_point("after-stage");
                    Some(staged)
                }
                // The stage recorded its failure: the groups abort on it.
                Err(_) => None,
            }
        };
        let ((), (), staged, results) = tokio::join!(
            creating,
            arrivals,
            staging,
            group::run(attempt, run_on, trackers)
        );
        report.staging = staged;
        held(attempt, results, report)
    };
    report.checks = checks.reports();
    conclude(attempt, job, landed, report).await
}

/// What the imports came to, however they ran: [`conclude`] decides the outcome from it.
struct Landed {
    /// Per collection of the report, in its order: every row visible on every end.
    committed: Vec<bool>,
    /// Collections with some rows visible and not all, each with what it shows.
    partly_visible: Vec<String>,
    /// What went wrong and cannot be taken back: auto-committed imports that came up short.
    failure: Option<String>,
    divergences: Vec<Divergence>,
    /// Groups that stopped after their decision without completing.
    unconverged: Vec<String>,
    jobs: usize,
    /// Whether the staged files went while the ends finished committing; `None` if not.
    cleaned_early: Option<bool>,
}

/// What the commit groups came to: a collection is committed when a group that imports
/// into it has a commit decision.
fn held(attempt: &Attempt<'_>, ran: group::Ran, report: &mut Report) -> Landed {
    report.jobs = ran.trackers.iter().flat_map(Tracker::job_reports).collect();
    let record = attempt.record.lock().expect("record lock");
    let mut divergences = Vec::new();
    let mut unconverged = Vec::new();
    for (group, result) in record.groups.iter().zip(ran.results) {
        match result {
            Ok(d) => divergences.extend(d),
            Err(reason) => unconverged.push(format!("group {}: {reason}", group.id)),
        }
    }
    let committed = (report.collections.iter())
        .map(|c| {
            record.groups.iter().any(|g| {
                matches!(g.decision, Some(Decision::Commit { .. }))
                    && (g.batches.iter()).any(|b| format!("{}.{}", b.db, b.collection) == c.target)
            })
        })
        .collect();
    Landed {
        committed,
        partly_visible: Vec::new(),
        failure: None,
        divergences,
        unconverged,
        jobs: record.groups.iter().map(|g| g.batches.len()).sum(),
        cleaned_early: ran.cleaned_early,
    }
}

/// What an auto-commit restore's imports made visible, counted: a collection is committed
/// when every batch of it imported what the backup holds.
fn auto_committed(
    imports: &[auto_commit::BatchImport],
    ends: &Ends,
    report: &mut Report,
) -> Landed {
    let target = &ends.target().name;
    report.jobs = imports.iter().map(|b| b.job_report(target)).collect();
    let mut committed = Vec::new();
    let mut partly_visible = Vec::new();
    for c in &report.collections {
        let mine: Vec<_> = imports
            .iter()
            .filter(|b| b.collection == c.target)
            .collect();
        let imported: i64 = mine.iter().map(|b| b.imported).sum();
        let whole = mine.iter().all(|b| b.whole());
        if !whole && imported > 0 {
            partly_visible.push(format!("{} ({imported} of {} rows)", c.target, c.inserted));
        }
        committed.push(whole);
    }
    let problems: Vec<String> = imports.iter().filter_map(|b| b.problem()).collect();
    let failure = (!problems.is_empty()).then(|| {
        format!(
            "{} of {} batch(es) did not import what the backup holds, and auto-committed \
             imports cannot be rolled back; first: {}",
            problems.len(),
            imports.len(),
            problems[0]
        )
    });
    Landed {
        committed,
        partly_visible,
        failure,
        divergences: Vec::new(),
        unconverged: Vec::new(),
        jobs: imports.len(),
        cleaned_early: None,
    }
}

/// The one tail of every restore that got to its imports. A failure before a decision rolls
/// back what no decision committed; otherwise the outcome follows from what landed. Nothing
/// visible at all is rolled back (an auto-commit restore whose imports all failed);
/// anything else stays, and the staged files go once nothing reads them.
async fn conclude(
    attempt: &Attempt<'_>,
    job: &Job,
    landed: Landed,
    report: &mut Report,
) -> Result<Outcome, Error> {
    for (c, committed) in report.collections.iter_mut().zip(&landed.committed) {
        c.committed = *committed;
    }
    report.divergences = landed.divergences;
    if let Some(stop) = attempt.first_failure() {
        // Undecided groups aborted themselves; drop what they created. With some groups
        // committed, their collections stay and the report says which.
        return rollback(attempt, stop).await;
    }
    let restore_id = attempt.record.lock().expect("record lock").id.clone();
    let facts = outcome::Facts {
        failure: landed.failure,
        visible: report.committed_collections(),
        partly_visible: landed.partly_visible,
        divergences: &report.divergences,
        unconverged: landed.unconverged,
        collections: report.collections.len(),
        jobs: landed.jobs,
        ends: attempt.ends.len(),
    };
    let (outcome, summary) = outcome::decide(&facts, &restore_id);
    let settled = facts.unconverged.is_empty();
    report.summary = summary;
    if outcome == Outcome::RolledBack {
        undo(attempt).await;
        if let Some(s) = report.staging.as_mut() {
            s.cleaned_up = true;
        }
        return Ok(outcome);
    }
    // A restore left incomplete already says why; a journal that cannot take this write
    // either does not change that outcome.
    if let Err(e) = attempt.set_phase(RestorePhase::Completing).await {
        if settled {
            return Err(attempt.failure_now(e));
        }
        tracing::warn!(error = %e, "could not record the completing phase");
    }
    if let Some(s) = report.staging.as_mut() {
        match landed.cleaned_early {
            Some(cleaned) => s.cleaned_up = cleaned,
            None if settled => s.cleaned_up = staging::clean_up(job, attempt, &restore_id).await,
            None => {}
        }
    }
    Ok(outcome)
}

/// Stages the plan's files into every end's store that is not the backup's, in the gate's
/// order, opening the gate batch by batch; ends the gate either way. The caller has
/// recorded the prefix ([`Destinations::record_in`]). The phase and a failure are recorded
/// here, not by the stage.
///
/// Stops at an interrupt, like every stage before the decision, and when the restore fails
/// elsewhere. A failure is the restore's: it is recorded for the groups to abort on.
async fn stage(
    attempt: &Attempt<'_>,
    preflight: &Preflight,
    to: &Destinations,
    gate: &ImportGate,
) -> Result<StagingReport, Error> {
    // Rides on the next journal write: nothing recovers differently for it.
    attempt.enter_phase(RestorePhase::Staging);
    let stop = CancellationToken::new();
    let id = attempt.record.lock().expect("record lock").id.to_string();
    let progress = attempt.engine.progress.clone();
    let show = move |p| progress.staging(&id, p);
    let staging = staging::stage_files(preflight, to, gate, &show, &stop);
    tokio::pin!(staging);
    // A restore that fails meanwhile (a mirror, a create, the DDL) imports nothing more, and
    // the rest of a long copy would only be deleted again; so does an interrupted one. The
    // stage is told to stop and waited for, not dropped: a copy abandoned mid-request could
    // land after the rollback deleted the prefix.
    let staged = tokio::select! {
        staged = &mut staging => staged.map_err(|e| attempt.failure_now(e)),
        why = stopped_by(attempt) => {
            stop.cancel();
            let _ = staging.await;
            Err(why)
        }
    };
    // Recording the failure closes the gate, so the groups that wake on it abort with the
    // stage's reason, not their own.
    if let Err(stop) = &staged {
        attempt.fail(stop.clone());
    }
    gate.end(staged.is_ok());
    staged
}

/// Returns once the restore failed elsewhere or was interrupted, with what that means for
/// the stage.
async fn stopped_by(attempt: &Attempt<'_>) -> Error {
    tokio::select! {
        () = attempt.stopped() => {
            tracing::info!("staging stopped: the restore failed before its decision");
            attempt.failure_now(StageError::StagingStopped)
        }
        () = attempt.engine.interrupt.fired() => {
            tracing::info!("staging stopped: interrupted");
            Interrupted.into()
        }
    }
}

/// Takes back what the restore made ([`rollback`]) and stops with `stop`.
async fn rollback(attempt: &Attempt<'_>, stop: Error) -> Result<Outcome, Error> {
    undo(attempt).await;
    Err(stop)
}

/// Drops the collections a rollback drops and deletes the restore's staged files.
async fn undo(attempt: &Attempt<'_>) {
    let (collections, staged) = {
        let r = attempt.record.lock().expect("record lock");
        let staged = r
            .staging_prefix
            .is_some()
            .then(|| StagingPrefix::for_restore(&r.id));
        (rollback::collections_to_drop(&r), staged)
    };
    let deadline = Instant::now() + DEFAULT_CALL_DEADLINE;
    let undone = rollback::undo(
        attempt.ends,
        attempt,
        &collections,
        attempt.job.zip(staged),
        deadline,
    )
    .await;
    if let Err(lost) = undone {
        tracing::warn!(%lost, "rollback stopped: what is left is the new holder's");
    }
}
