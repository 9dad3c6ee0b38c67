//! One restore attempt, from preflight to report, with the journal written at every step
//! the recovery of a crash depends on: preflight, checks, DDL, staging beside the creates
//! (or before them, for checks before import and for auto-commit routes), the commit groups
//! (`group`), then cleanup and the outcome.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::attempt::{Attempt, Change, Inbox, Keeper};
use super::auto_commit;
use super::checks::{self, CheckSetup};
use super::ddl;
use super::ends::Ends;
use super::error::{Error, StageError};
use super::faults;
use super::gate::{ImportGate, StageEnd};
use super::group::{self, EarlyCleanup, GroupEnd, Groups};
use super::outcome::{self, RefusedAt};
use super::preflight::{Preflight, preflight};
use super::process::{Engine, Interrupted};
use super::progress::Waiting;
use super::refusal::Refusal;
use super::report::{
    self, CheckEntry, CollectionReport, Divergence, EndReport, JobReport, PreflightNotes, Report,
    ReportOf, StagingReport,
};
use super::retry::DEFAULT_CALL_DEADLINE;
use super::rollback::{self, StageCleanup};
use super::staging::{self, Destinations};
use super::two_phase::Tracker;
use super::verification;
use crate::diagnostic::error_chain;
use crate::job::Job;
use crate::journal::{
    Claim, CommitGroup, Decision, Outcome, RestoreId, RestorePhase, RestoreRecord,
};
use crate::plugins::{CheckContext, Phase, StagedFiles};
use crate::storage::TempFiles;
use crate::verify::Verification;

/// Runs a new attempt of `job` under `claim`. It owns the attempt: its keeper writes the
/// record, the work runs under it, and what the work returns decides the outcome.
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
    let (attempt, mut keeper, mut inbox) = Attempt::new(engine, ends, claim, record, Some(job));
    if let Err(e) = keeper.save().await {
        report.summary = error_chain(&e);
        return keeper.finish(report, Outcome::HostFailed, vec![]).await;
    }
    let preflight = match preflight(job, ends).await {
        Ok(preflight) => preflight,
        Err(refusals) => {
            let (outcome, summary) = outcome::refused(RefusedAt::Preflight, &refusals);
            report.summary = summary;
            return keeper.finish(report, outcome, refusals).await;
        }
    };
    for (end, v) in report.ends.iter_mut().zip(&preflight.versions) {
        end.version = Some(v.to_string());
    }
    report.route = Some(preflight.route.route);
    report.format = Some(preflight.backup.format);
    report.preflight = PreflightNotes {
        clock_waited_ms: Some(preflight.clock_waited.as_millis() as u64).filter(|ms| *ms > 0),
        mixed_builds: preflight.builds.mixed.clone(),
        gate_not_read: preflight.builds.not_read(ends),
    };
    for s in job.secondaries.iter().filter(|s| s.storage.is_none()) {
        tracing::warn!(
            secondary = %s.end.name,
            "no storage of this secondary is known, so nothing is staged there: it must see \
             the target's store, its mirrors reading the paths staged into the target's \
             storage from its own (a shared bucket, or synced content), or they find no \
             files and the restore rolls back; add `storage` to its cluster in the host \
             config (and `require_staging = true` to refuse such a restore)"
        );
    }
    let checks = match CheckSetup::load(engine, job).await {
        Ok(c) => c,
        Err(refusals) => {
            let (outcome, summary) = outcome::refused(RefusedAt::Elsewhere, &refusals);
            report.summary = summary;
            return keeper.finish(report, outcome, refusals).await;
        }
    };
    let found = Found::planned(&preflight);
    let work = execute(&attempt, job, &preflight, &checks, found);
    let Executed { mut found, end } = keeper.run(&mut inbox, work).await;
    let (outcome, summary, refusals) = match end {
        Ok((Outcome::RolledBack, summary)) => {
            undo(&attempt, &mut keeper, &mut inbox, Stage::Delete).await;
            if let Some(s) = found.staging.as_mut() {
                s.cleaned_up = true;
            }
            (Outcome::RolledBack, summary, vec![])
        }
        Ok((outcome, summary)) => (outcome, summary, vec![]),
        Err(Stopped { why, unsettled }) => {
            // A job some end may still hold can still read the staged files: they stay
            // for the recovery, which deletes them once every job settled.
            let staged = match unsettled.is_empty() {
                true => Stage::Delete,
                false => Stage::Keep,
            };
            undo(&attempt, &mut keeper, &mut inbox, staged).await;
            stopped(why, unsettled, &found, &attempt.id)
        }
    };
    let report = Report {
        summary,
        collections: found.collections,
        jobs: found.jobs,
        staging: found.staging,
        checks: found.checks,
        divergences: found.divergences,
        verification: found.verification,
        ..report
    };
    keeper.finish(report, outcome, refusals).await
}

/// What the work after preflight found, each part returned by the stage that found it:
/// [`run_attempt`] makes the report of it once, whatever the work came to.
struct Found {
    /// The plan's collections, each marked committed once a decision made it visible.
    collections: Vec<CollectionReport>,
    /// Every planned job, then each as it ended.
    jobs: Vec<JobReport>,
    staging: Option<StagingReport>,
    checks: Vec<CheckEntry>,
    divergences: Vec<Divergence>,
    verification: Option<Verification>,
}

impl Found {
    /// Nothing found yet: the plan's collections, none committed.
    fn planned(preflight: &Preflight) -> Found {
        Found {
            collections: (preflight.plan.collections.iter())
                .map(CollectionReport::planned)
                .collect(),
            jobs: Vec::new(),
            staging: None,
            checks: Vec::new(),
            divergences: Vec::new(),
            verification: None,
        }
    }

    /// The work stopped by `why` with this found.
    fn stopped(self, why: impl Into<Stopped>) -> Executed {
        Executed {
            found: self,
            end: Err(why.into()),
        }
    }
}

/// What the work after preflight came to: its outcome and summary, or why it stopped, with
/// what it found either way.
struct Executed {
    found: Found,
    end: Result<(Outcome, String), Stopped>,
}

/// A restore that stopped before (some of) its decisions: why, and the aborts that did not
/// settle on every end.
struct Stopped {
    why: Error,
    unsettled: Vec<String>,
}

impl From<Error> for Stopped {
    fn from(why: Error) -> Stopped {
        Stopped {
            why,
            unsettled: Vec::new(),
        }
    }
}

impl From<StageError> for Stopped {
    fn from(failed: StageError) -> Stopped {
        Error::from(failed).into()
    }
}

/// What a rollback does with the staged files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Delete,
    /// Some job may still read them.
    Keep,
}

/// The outcome of an attempt that stopped before (some of) its decisions, rolled back;
/// incomplete while an abort did not settle.
fn stopped(
    stop: Error,
    unsettled: Vec<String>,
    found: &Found,
    id: &RestoreId,
) -> (Outcome, String, Vec<Refusal>) {
    if let Error::Refused(refusals) = stop {
        let (outcome, summary) = outcome::refused(RefusedAt::Elsewhere, &refusals);
        return (outcome, summary, refusals);
    }
    // With collection atomicity, groups decided before the failure stay committed, and
    // what a query showed of them counts.
    let (shown_wrong, unverified) = verification::findings(found.verification.as_ref());
    let facts = outcome::Facts {
        failure: Some(stop.reason()),
        visible: report::committed(&found.collections),
        divergences: &found.divergences,
        shown_wrong,
        unverified,
        unconverged: unsettled,
        ..outcome::Facts::default()
    };
    let (outcome, summary) = outcome::decide(&facts, id);
    (outcome, summary, vec![])
}

/// Everything after preflight. An outcome is that of a restore that got past its DDL
/// without a failure before its decision (a rollback of it is the caller's); a stop is one
/// whose rollback the caller does and reports.
async fn execute(
    attempt: &Attempt<'_>,
    job: &Job,
    preflight: &Preflight,
    checks: &CheckSetup,
    mut found: Found,
) -> Executed {
    let ends = attempt.ends;
    let restore_id = &attempt.id;

    // DDL on the target. What it will create is recorded before it starts (with the write
    // that enters the DDL phase), and what it created at every write after.
    attempt.note(Change::ToCreate(ddl::to_create(
        &preflight.plan,
        &preflight.exists,
        job.restore.collection_creation,
    )));
    if job.restore.meta_only {
        return meta_only(attempt, job, preflight, found).await;
    }
    let (made_tx, made) = watch::channel(0);

    // Where the ends import from, and the commit groups: recorded before anything is
    // created, staged or submitted.
    let to = match Destinations::open(job, preflight, restore_id) {
        Ok(to) => to,
        Err(e) => return found.stopped(e),
    };
    let import_prefix = to.paths.prefix().to_string();
    let groups = group::plan(restore_id, job, preflight, &import_prefix);
    let trackers = group::trackers(ends, preflight, &groups);
    // Every planned job, none created yet: what a restore stopped before its creates reports.
    found.jobs = trackers.iter().flat_map(Tracker::job_reports).collect();
    // Only checks page through the staged files: without one, a list of every file's path
    // (about 100 MB at 600,000 files) would be held for nobody.
    let staged = if job.checks.is_empty() {
        StagedFiles::default()
    } else {
        checks::staged_objects(
            &import_prefix,
            &preflight.plan.files_to_stage,
            &groups,
            &job.target.end.paths,
        )
    };
    // One write for the groups, the prefix (so a crash mid-copy can still clean up) and the
    // phase: each is a journal commit with an fsync, and all of them come before any DDL,
    // copy or create.
    attempt.enter_phase(RestorePhase::Ddl);
    let planned = Change::Planned {
        groups: groups.clone(),
        staging: to.recorded(),
        verify: verification::recorded(job, &found.collections),
    };
    if let Err(e) = attempt.write(planned).await {
        return found.stopped(e);
    }
    let gate = ImportGate::new(
        &import_prefix,
        &preflight.plan.files_to_stage,
        &groups,
        preflight.plan.collections.iter().map(|c| c.batches.len()),
        attempt.stop_token().clone(),
    );
    let collections = checks::collections(&preflight.plan);
    let restore = checks::Restore {
        id: restore_id.as_str(),
        backup: &job.backup.name,
        ends,
        collections: &collections,
        groups: &groups,
        staged: &staged,
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
    let made = (made_tx, made);
    let landed = if checks.has(Phase::BeforeImport) || preflight.route.route.auto_commits() {
        one_after_another(attempt, run_on, trackers, &to, made).await
    } else {
        side_by_side(attempt, run_on, trackers, &to, made).await
    };
    conclude(attempt, job, preflight, landed, found).await
}

/// A meta-only restore: the collections created on the target and awaited on every
/// secondary, nothing imported.
async fn meta_only(
    attempt: &Attempt<'_>,
    job: &Job,
    preflight: &Preflight,
    mut found: Found,
) -> Executed {
    let made = async {
        let (made_tx, made) = watch::channel(0);
        attempt.set_phase(RestorePhase::Ddl).await?;
        ddl(attempt, job, preflight, &made_tx).await?;
        let grace = job.two_phase.mirror_grace;
        arrivals(attempt, preflight, grace, made, &|_| {}).await
    };
    if let Err(e) = made.await {
        return found.stopped(e);
    }
    for c in &mut found.collections {
        c.committed = true;
    }
    Executed {
        found,
        end: Ok(outcome::meta_only()),
    }
}

/// The DDL, the arrivals and the stage in turn, the checks before import, then the imports:
/// held by the commit groups, or auto-committed. The first of them to fail stops the rest,
/// before any job was created.
async fn one_after_another<'r>(
    attempt: &'r Attempt<'_>,
    run_on: Groups<'r>,
    trackers: Vec<Tracker>,
    to: &Destinations,
    (made_tx, made): (watch::Sender<usize>, watch::Receiver<usize>),
) -> Landed<'r> {
    let Groups {
        job,
        preflight,
        checks,
        restore,
        gate,
    } = run_on;
    let collections = preflight.plan.collections.len();
    let grace = job.two_phase.mirror_grace;
    let arrived = |c: usize| gate.collection_arrived(c);
    let made = async {
        ddl(attempt, job, preflight, &made_tx).await?;
        arrivals(attempt, preflight, grace, made, &arrived).await?;
        stage(attempt, preflight, to, gate).await
    };
    let staging = match made.await {
        Ok(staging) => staging,
        Err(why) => return Landed::before_imports(why, collections, None, Vec::new()),
    };
    faults::crash_point("after-stage");
    let before_import = CheckContext::for_phase(restore, Phase::BeforeImport, None);
    let (entries, checked) = checks.run(job, restore.staged, before_import).await;
    if let Err(why) = checked {
        return Landed::before_imports(why.into(), collections, Some(staging), entries);
    }
    if !preflight.route.route.auto_commits() {
        let ran = group::run(attempt, run_on, trackers).await;
        let plan = &preflight.plan.collections;
        return held(restore.groups, plan, ran, Ok(staging), entries, []);
    }
    if let Err(why) = attempt.set_phase(RestorePhase::Importing).await {
        return Landed::before_imports(why.into(), collections, Some(staging), entries);
    }
    let imports =
        auto_commit::run(attempt.ends, attempt, restore.groups, preflight.route.route).await;
    Landed {
        staging: Some(staging),
        checks: entries,
        ..auto_committed(&imports, attempt.ends, &preflight.plan)
    }
}

/// The DDL, the arrivals, the stage and the commit groups side by side: each batch's job is
/// created once its collection is on every secondary and its own files are staged. The
/// first of them to fail stops the others, and the groups abort.
async fn side_by_side<'r>(
    attempt: &'r Attempt<'_>,
    run_on: Groups<'r>,
    trackers: Vec<Tracker>,
    to: &Destinations,
    (made_tx, made): (watch::Sender<usize>, watch::Receiver<usize>),
) -> Landed<'r> {
    let Groups {
        job,
        preflight,
        restore,
        gate,
        ..
    } = run_on;
    let grace = job.two_phase.mirror_grace;
    let arrived = |c: usize| gate.collection_arrived(c);
    let creating = attempt.stopping_on_error(async {
        let created = ddl(attempt, job, preflight, &made_tx).await;
        // Ends the wait for a collection the DDL never made, after its reason.
        drop(made_tx);
        created
    });
    let arrivals = attempt.stopping_on_error(async {
        tokio::select! {
            mirrored = arrivals(attempt, preflight, grace, made, &arrived) => mirrored,
            // Nothing more is imported (the gate is closed): waiting for a late
            // collection is moot.
            () = attempt.stopped() => Ok(()),
        }
    });
    let staging = async {
        let staged = stage(attempt, preflight, to, gate).await;
        if staged.is_ok() {
            faults::crash_point("after-stage");
        }
        staged
    };
    let (created, arrived, staged, ran) = tokio::join!(
        creating,
        arrivals,
        staging,
        group::run(attempt, run_on, trackers)
    );
    let stops = [created.err(), arrived.err()];
    let plan = &preflight.plan.collections;
    held(restore.groups, plan, ran, staged, vec![], stops)
}

/// The DDL on the target, counting the collections it made on `made`; what it created is
/// written before this returns, whatever it returns.
async fn ddl(
    attempt: &Attempt<'_>,
    job: &Job,
    preflight: &Preflight,
    made: &watch::Sender<usize>,
) -> Result<(), Error> {
    let created = |c| attempt.note(Change::Created(c));
    let deadline = Instant::now()
        + job
            .two_phase
            .commit_timeout
            .unwrap_or(DEFAULT_CALL_DEADLINE);
    let applied = ddl::apply(
        attempt.ends,
        attempt,
        &preflight.plan,
        &preflight.exists,
        job.restore.collection_creation,
        deadline,
        &created,
        made,
    )
    .await;
    attempt.persist().await?;
    faults::crash_point("after-ddl");
    applied.map_err(|e| match e {
        ddl::Error::FieldIds {
            collection,
            mismatched,
        } => Error::Refused(vec![Refusal::FieldIds {
            collection,
            mismatched,
        }]),
        ddl::Error::Milvus(e) => StageError::Ddl(e).into(),
        ddl::Error::Lost(lost) => Error::Lost(lost),
    })
}

/// Waits until every collection the DDL made (`made` counts them) is on every secondary,
/// telling `arrived` of each: a mirror whose collection has not arrived is silently never
/// created, so no job is created before.
async fn arrivals(
    attempt: &Attempt<'_>,
    preflight: &Preflight,
    grace: Duration,
    made: watch::Receiver<usize>,
    arrived: &(dyn Fn(usize) + Sync),
) -> Result<(), Error> {
    let id = attempt.id.to_string();
    let progress = &attempt.engine.progress;
    let waiting = |w: Option<Waiting>| progress.waiting(&id, w.as_ref());
    let arrivals = ddl::await_mirrors(
        attempt.ends,
        &preflight.plan,
        grace,
        made,
        arrived,
        &waiting,
    );
    match attempt.engine.interrupt.race(arrivals).await {
        Err(i) => Err(i.into()),
        Ok(result) => result.map_err(|e| StageError::Arrival(e).into()),
    }
}

/// What the imports came to, however they ran: [`conclude`] decides the outcome from it.
struct Landed<'r> {
    /// Per collection of the plan, in its order: every row visible on every end.
    committed: Vec<bool>,
    /// Each job as it ended; empty when none was created (the planned ones stand).
    jobs: Vec<JobReport>,
    staging: Option<StagingReport>,
    /// What the checks before import and before commit reported.
    checks: Vec<CheckEntry>,
    /// Collections with some rows visible and not all, each with what it shows.
    partly_visible: Vec<String>,
    /// What went wrong and cannot be taken back: auto-committed imports that came up short.
    failure: Option<String>,
    divergences: Vec<Divergence>,
    /// Groups that stopped after their decision without completing.
    unconverged: Vec<String>,
    /// How many jobs the plan has.
    job_count: usize,
    /// The staged files' deletion begun while the ends finished committing; `None` if not.
    cleaned_early: Option<EarlyCleanup<'r>>,
    /// Why the restore stopped before (some of) its decisions, if it did.
    stop: Option<Error>,
    /// The groups that aborted on that stop.
    aborted: Vec<usize>,
    /// Why some of their aborts did not settle on every end.
    unsettled: Vec<String>,
}

impl Landed<'_> {
    /// A restore stopped by `why` before it created any job, with the stage and the checks
    /// before import it got to.
    fn before_imports(
        why: Error,
        collections: usize,
        staging: Option<StagingReport>,
        checks: Vec<CheckEntry>,
    ) -> Landed<'static> {
        Landed {
            committed: vec![false; collections],
            jobs: Vec::new(),
            staging,
            checks,
            partly_visible: Vec::new(),
            failure: None,
            divergences: Vec::new(),
            unconverged: Vec::new(),
            job_count: 0,
            cleaned_early: None,
            stop: Some(why),
            aborted: Vec::new(),
            unsettled: Vec::new(),
        }
    }
}

/// What the commit groups came to: a collection is committed when a group that imports
/// into it decided for commit. `stops` are those of the parts that ran beside the groups,
/// the stage's included: the restore's stop is the first of them and the groups' that
/// does not follow from another. `checks` are those that ran before the groups'.
fn held<'r>(
    groups: &[CommitGroup],
    collections: &[crate::backup::CollectionPlan],
    ran: group::Ran<'r>,
    staged: Result<StagingReport, Error>,
    mut checks: Vec<CheckEntry>,
    stops: impl IntoIterator<Item = Option<Error>>,
) -> Landed<'r> {
    let jobs = ran.trackers.iter().flat_map(Tracker::job_reports).collect();
    checks.extend(ran.checks);
    let (staging, stage_stop) = match staged {
        Ok(staging) => (Some(staging), None),
        Err(why) => (None, Some(why)),
    };
    let mut divergences = Vec::new();
    let mut unconverged = Vec::new();
    let mut aborted = Vec::new();
    let mut unsettled = Vec::new();
    let mut group_stops = Vec::new();
    let mut committed_groups = Vec::new();
    for (index, (group, end)) in groups.iter().zip(ran.ends).enumerate() {
        match end {
            GroupEnd::Committed {
                divergences: d,
                unfinished,
            } => {
                divergences.extend(d);
                unconverged.extend(unfinished.map(|why| format!("group {}: {why}", group.id)));
                committed_groups.push(group);
            }
            GroupEnd::Undecided(why) => unconverged.push(format!("group {}: {why}", group.id)),
            GroupEnd::Aborted { stop, unsettled: u } => {
                aborted.push(index);
                group_stops.push(stop);
                unsettled.extend(u.map(|why| format!("group {}: the abort: {why}", group.id)));
            }
        }
    }
    // Each committed collection named once: held to every report collection, a batch at a
    // time, it was a name made per batch per collection (millions at 1,000 × 4).
    let visible: BTreeSet<String> = (committed_groups.iter())
        .flat_map(|g| g.batches.iter().map(|b| b.planned.namespace().to_string()))
        .collect();
    let committed = (collections.iter())
        .map(|c| visible.contains(&c.target.to_string()))
        .collect();
    let stops = stops.into_iter().chain([stage_stop]).flatten();
    Landed {
        committed,
        jobs,
        staging,
        checks,
        partly_visible: Vec::new(),
        failure: None,
        divergences,
        unconverged,
        job_count: groups.iter().map(|g| g.batches.len()).sum(),
        cleaned_early: ran.cleaned_early,
        stop: Error::first(stops.chain(group_stops)),
        aborted,
        unsettled,
    }
}

/// What an auto-commit restore's imports made visible, counted: a collection is committed
/// when every batch of it imported what the backup holds.
fn auto_committed(
    imports: &[auto_commit::BatchImport],
    ends: &Ends,
    plan: &crate::backup::RestorePlan,
) -> Landed<'static> {
    let target = &ends.target().name;
    let jobs = imports.iter().map(|b| b.job_report(target)).collect();
    let mut committed = Vec::new();
    let mut partly_visible = Vec::new();
    for c in &plan.collections {
        let name = c.target.to_string();
        let mine: Vec<_> = imports.iter().filter(|b| b.collection == name).collect();
        let imported: i64 = mine.iter().map(|b| b.imported).sum();
        let whole = mine.iter().all(|b| b.whole());
        if !whole && imported > 0 {
            let inserted: i64 = c.batches.iter().map(|b| b.rows).sum();
            partly_visible.push(format!("{name} ({imported} of {inserted} rows)"));
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
        jobs,
        staging: None,
        checks: Vec::new(),
        partly_visible,
        failure,
        divergences: Vec::new(),
        unconverged: Vec::new(),
        job_count: imports.len(),
        cleaned_early: None,
        stop: None,
        aborted: Vec::new(),
        unsettled: Vec::new(),
    }
}

/// The one tail of every restore that got to its imports. A stop before a decision records
/// the aborted groups' decisions with its reason and returns it, for the caller to roll
/// back what no decision committed; otherwise the outcome follows from what landed.
/// Nothing visible at all is rolled back by the caller (an auto-commit restore whose
/// imports all failed); anything else stays, and the staged files go once nothing reads
/// them.
async fn conclude(
    attempt: &Attempt<'_>,
    job: &Job,
    preflight: &Preflight,
    mut landed: Landed<'_>,
    mut found: Found,
) -> Executed {
    for (c, committed) in found.collections.iter_mut().zip(&landed.committed) {
        c.committed = *committed;
    }
    if !landed.jobs.is_empty() {
        found.jobs = std::mem::take(&mut landed.jobs);
    }
    found.staging = landed.staging.take();
    found.checks = std::mem::take(&mut landed.checks);
    found.divergences = std::mem::take(&mut landed.divergences);
    let settled = landed.unconverged.is_empty();
    // A restore that every end completed, with nothing failed, keeps what it committed
    // whatever a query then shows: its staged files go while the ends are asked (nothing
    // after Completed reads them, and verification asks only the ends), instead of after.
    // A failure decides below whether anything stays.
    let clean_now = settled
        && landed.cleaned_early.is_none()
        && landed.stop.is_none()
        && landed.failure.is_none()
        && found.staging.is_some();
    let staged = &preflight.plan.files_to_stage;
    // What a query sees of what was committed, once every end completed it (with collection
    // atomicity, also before a stop that left other collections undecided): a restore left
    // incomplete is verified by `lockstep verify` once it is finished.
    // A deletion begun while the ends finished committing goes on beside it as well.
    let early = landed.cleaned_early.take();
    let (verified, cleaned) = tokio::join!(
        async {
            if !settled {
                return None;
            }
            verification::run(attempt, job, &found.collections, preflight).await
        },
        async {
            match early {
                Some(early) => Some(early.finish().await),
                None if clean_now => {
                    Some(staging::clean_up(job, attempt, &attempt.id, staged).await)
                }
                None => None,
            }
        }
    );
    found.verification = verified;
    if let Some(stop) = landed.stop {
        let reason = stop.reason();
        for &group in &landed.aborted {
            let decision = Decision::Abort {
                at: Timestamp::now(),
                reason: reason.clone(),
            };
            attempt.note(Change::Decided { group, decision });
        }
        if let Err(e) = attempt.persist().await {
            tracing::warn!(error = %error_chain(&e), "could not record the abort decisions");
        }
        return found.stopped(Stopped {
            why: stop,
            unsettled: landed.unsettled,
        });
    }
    let (shown_wrong, unverified) = verification::findings(found.verification.as_ref());
    let facts = outcome::Facts {
        failure: landed.failure,
        visible: report::committed(&found.collections),
        partly_visible: landed.partly_visible,
        divergences: &found.divergences,
        shown_wrong,
        unverified,
        unconverged: landed.unconverged,
        verify_required: job.verify.required,
        collections: found.collections.len(),
        jobs: landed.job_count,
        ends: attempt.ends.len(),
    };
    let decided = outcome::decide(&facts, &attempt.id);
    if decided.0 == Outcome::RolledBack {
        return Executed {
            found,
            end: Ok(decided),
        };
    }
    // A restore left incomplete already says why; a journal that cannot take this write
    // either does not change that outcome.
    if let Err(e) = attempt.set_phase(RestorePhase::Completing).await {
        if settled {
            return found.stopped(e);
        }
        tracing::warn!(error = %error_chain(&e), "could not record the completing phase");
    }
    if let Some(s) = found.staging.as_mut() {
        match cleaned {
            Some(cleaned) => s.cleaned_up = cleaned,
            None if settled => {
                s.cleaned_up = staging::clean_up(job, attempt, &attempt.id, staged).await;
            }
            None => {}
        }
    }
    Executed {
        found,
        end: Ok(decided),
    }
}

/// Stages the plan's files into every end's store that is not the backup's, in the gate's
/// order, opening the gate batch by batch; ends the gate either way. The caller has
/// recorded the prefix ([`Destinations::recorded`]).
///
/// Stops at an interrupt, like every stage before the decision, and when the restore fails
/// elsewhere. A failure of its own stops the attempt, so that the groups abort.
async fn stage(
    attempt: &Attempt<'_>,
    preflight: &Preflight,
    to: &Destinations,
    gate: &ImportGate,
) -> Result<StagingReport, Error> {
    // Rides on the next journal write: nothing recovers differently for it.
    attempt.enter_phase(RestorePhase::Staging);
    let stop = CancellationToken::new();
    let id = attempt.id.to_string();
    let progress = attempt.engine.progress.clone();
    let show = move |p| progress.staging(&id, p);
    let staging = staging::stage_files(preflight, to, gate, &show, &stop);
    tokio::pin!(staging);
    // A restore that fails meanwhile (a mirror, a create, the DDL) imports nothing more, and
    // the rest of a long copy would only be deleted again; so does an interrupted one. The
    // stage is told to stop and waited for, not dropped: a copy abandoned mid-request could
    // land after the rollback deleted the prefix.
    let staged = tokio::select! {
        staged = &mut staging => staged.map_err(Error::from),
        why = stopped_by(attempt) => {
            stop.cancel();
            let _ = staging.await;
            Err(why)
        }
    };
    if staged.is_err() {
        attempt.stop();
    }
    gate.end(match staged {
        Ok(_) => StageEnd::Verified,
        Err(_) => StageEnd::Failed,
    });
    staged
}

/// Returns once the restore failed elsewhere or was interrupted, with what that means for
/// the stage.
async fn stopped_by(attempt: &Attempt<'_>) -> Error {
    tokio::select! {
        () = attempt.stopped() => {
            tracing::info!("staging stopped: the restore failed before its decision");
            StageError::StagingStopped.into()
        }
        () = attempt.engine.interrupt.fired() => {
            tracing::info!("staging stopped: interrupted");
            Interrupted.into()
        }
    }
}

/// Takes back what the restore made before its decision (DESIGN.md §2): the collections
/// the record's one rollback rule names, and the staged files unless some job may still
/// read them.
async fn undo(attempt: &Attempt<'_>, keeper: &mut Keeper<'_>, inbox: &mut Inbox, staged: Stage) {
    let record = keeper.record().clone();
    let stores = attempt.job.map(Job::destinations).unwrap_or_default();
    let stage = (staged == Stage::Delete).then_some(StageCleanup {
        stores: &stores,
        temp: TempFiles::Delete,
    });
    let deadline = Instant::now() + DEFAULT_CALL_DEADLINE;
    let undo = rollback::undo(attempt.ends, attempt, &record, stage, deadline);
    if let Err(lost) = keeper.run(inbox, undo).await {
        tracing::warn!(%lost, "rollback stopped: what is left is the new holder's");
    }
}
