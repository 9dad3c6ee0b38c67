//! One restore attempt, from preflight to report, with the journal written at every step
//! the recovery of a crash depends on.
//!
//! Commit groups (the whole restore, or one per collection) run concurrently within the
//! target's import-job budget; each goes submit → hold → before-commit checks → decide →
//! commit → complete on its own. A failure before a group's decision fails every group that
//! has not decided yet: they abort; decided groups roll forward.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use sha2::{Digest, Sha256};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::attempt::{Attempt, Stop};
use super::auto_commit;
use super::checks::{self, CheckSetup};
use super::ddl;
use super::ends::Ends;
use super::faults;
use super::gate::ImportGate;
use super::outcome;
use super::preflight::{Preflight, error_chain, preflight};
use super::process::{Engine, Interrupted};
use super::refusal::Refusal;
use super::report::{CollectionReport, Divergence, EndReport, Report, ReportOf, StagingReport};
use super::retry::retry;
use super::rollback;
use super::rows;
use super::schedule::FirstLook;
use super::staging::{self, Destinations};
use super::two_phase::{self, Tracked, Tracker};
use crate::backup::ImportBatch;
use crate::job::{Atomicity, Job};
use crate::journal::{
    BatchRecord, Claim, CommitGroup, Decision, Outcome, RestoreId, RestorePhase, RestoreRecord,
};
use crate::milvus::{self, CreateImport, ServerVersion};
use crate::plugins::{CheckContext, Phase};
use crate::storage::{self, StagingPrefix};

/// Import creates in flight at once on the target.
const CREATES_IN_FLIGHT: usize = 8;

/// Why a group stops when the import gate fails. The restore's failure is the stage's, the
/// DDL's or the arrival's own reason, recorded before the gate fails; this one only marks
/// the group.
const GATE_FAILED: &str = "the DDL, staging or a collection's arrival on a secondary failed";

/// Bound on DDL and on each control call's retries when the job sets no timeout.
const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(600);

/// How long the wait after a decision lasts when the job sets no `completion_timeout`: then
/// the restore ends incomplete (exit 4), naming the ends that still hold jobs, for
/// `lockstep recover` to finish. A job file sets a longer one for a slower fleet.
const DEFAULT_COMPLETION_TIMEOUT: Duration = Duration::from_secs(3600);

/// How often the jobs a group created are looked at while its other creates wait on the
/// stage: milvus-backup's and the Milvus guide's poll.
const SENTRY_EVERY: Duration = Duration::from_secs(3);

/// Runs a new attempt of `job` under `claim`.
pub(super) async fn run_attempt(
    engine: &Engine,
    job: &Job,
    ends: &Ends,
    claim: &dyn Claim,
    record: RestoreRecord,
) -> Report {
    let started = Timestamp::now();
    let attempt = Attempt::new(engine, ends, claim, record, Some(job));
    let mut report = base_report(
        job,
        ends,
        &attempt.record.lock().expect("record lock"),
        started,
    );
    if let Err(e) = attempt.persist().await {
        report.summary = e;
        return attempt.finish(report, Outcome::HostFailed, vec![]).await;
    }
    let pf = match preflight(job, ends).await {
        Ok(pf) => pf,
        Err(refusals) => {
            let summary = format!("refused by preflight: {}", Refusal::joined(&refusals));
            report.summary = summary;
            return attempt.finish(report, Outcome::Refused, refusals).await;
        }
    };
    for (end, v) in report.ends.iter_mut().zip(&pf.versions) {
        end.version = Some(v.to_string());
    }
    report.route = Some(pf.route.route);
    report.format = Some(pf.backup.format);
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
    report.collections = pf
        .plan
        .collections
        .iter()
        .map(|c| CollectionReport {
            source: c.source.to_string(),
            target: c.target.to_string(),
            partitions: c.partitions.len(),
            batches: c.batches.len(),
            rows: c.batches.iter().map(|b| b.rows).sum(),
            committed: false,
        })
        .collect();
    let outcome = attempt
        .with_progress_writes(execute(&attempt, job, &pf, &checks, &mut report))
        .await;
    let (outcome, refusals) = match outcome {
        Ok(outcome) => (outcome, vec![]),
        Err(Stop::Refused(r)) => {
            report.summary = format!("refused: {}", Refusal::joined(&r));
            (Outcome::Refused, r)
        }
        Err(Stop::Failed(reason)) => {
            // With collection atomicity, groups decided before the failure stay committed.
            let facts = outcome::Facts {
                failure: Some(reason),
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
    // Auto-commit restores track no held jobs and report their batches themselves.
    if report.jobs.is_empty() {
        report.jobs = job_reports(&attempt.trackers.lock().expect("tracker lock"));
    }
    attempt.finish(report, outcome, refusals).await
}

/// Everything after preflight. `Ok` is the outcome of a restore that got past its DDL
/// without a pre-decision failure, or rolled back cleanly; `Err` a stop whose rollback the
/// caller reports.
async fn execute(
    attempt: &Attempt<'_>,
    job: &Job,
    pf: &Preflight,
    checks: &CheckSetup,
    report: &mut Report,
) -> Result<Outcome, Stop> {
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
    attempt.record.lock().expect("record lock").to_create =
        ddl::to_create(&pf.plan, &pf.exists, job.restore.collection_creation);
    let (made_tx, made) = watch::channel(0);
    let run_ddl = async |made: &watch::Sender<usize>| -> Result<(), Stop> {
        let created = |db: &str, name: &str| {
            let mut r = attempt.record.lock().expect("record lock");
            r.created_collections
                .push((db.to_string(), name.to_string()));
        };
        let applied = ddl::apply(
            ends,
            &pf.plan,
            &pf.exists,
            job.restore.collection_creation,
            call_deadline(),
            &created,
            made,
        )
        .await;
        attempt.persist().await.map_err(Stop::Failed)?;
        faults::crash_point("after-ddl");
        applied.map_err(|e| match e {
            ddl::Error::FieldIds {
                collection,
                mismatched,
            } => Stop::Refused(vec![Refusal::FieldIds {
                collection,
                mismatched,
            }]),
            ddl::Error::Milvus(e) => Stop::Failed(format!("DDL on the target failed: {e}")),
        })
    };
    // Every collection must be on every secondary before its jobs are created: a mirror
    // whose collection has not arrived is silently never created.
    let mirrored = async |arrived: &(dyn Fn(usize) + Sync)| -> Result<(), Stop> {
        match engine
            .interrupt
            .race(ddl::await_mirrors(
                ends,
                &pf.plan,
                grace,
                made.clone(),
                arrived,
            ))
            .await
        {
            Err(i) => Err(i.into()),
            Ok(result) => result.map_err(Stop::Failed),
        }
    };
    if job.restore.meta_only {
        attempt
            .set_phase(RestorePhase::Ddl)
            .await
            .map_err(Stop::Failed)?;
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
    let to = match Destinations::open(job, pf, &restore_id) {
        Ok(to) => to,
        Err(reason) => return rollback(attempt, Stop::Failed(reason)).await,
    };
    let import_prefix = to.paths.prefix().to_string();
    let groups = build_groups(&restore_id, job, pf, &import_prefix);
    track_groups(attempt, pf, &groups);
    checks.set_staged(checks::staged_objects(
        &import_prefix,
        &pf.plan.files_to_stage,
        &groups,
        &job.target.end.paths,
    ));
    // One write for the groups, the prefix (so a crash mid-copy can still clean up) and the
    // phase: each is a journal commit with an fsync, and all of them come before any DDL,
    // copy or create.
    to.record_in(&mut attempt.record.lock().expect("record lock"));
    attempt.enter_phase(RestorePhase::Ddl);
    attempt.persist().await.map_err(Stop::Failed)?;
    let gate = ImportGate::new(
        &import_prefix,
        &pf.plan.files_to_stage,
        &groups,
        pf.plan.collections.iter().map(|c| c.batches.len()),
    );
    let arrived = |c: usize| gate.collection_arrived(c);

    // Checks before import see every staged file, and `per_seg` has no decision to hold
    // back: both create every collection, wait for it everywhere and stage everything
    // first. Otherwise the DDL, the stage and the creates run side by side: each batch's
    // job is created as soon as its collection is on every secondary and its own files are
    // staged, and the decision waits for the whole stage.
    let auto_commits = pf.route.route.auto_commits();
    let (results, cleaned_early) = if checks.has(Phase::BeforeImport) || auto_commits {
        if let Err(stop) = run_ddl(&made_tx).await {
            return rollback(attempt, stop).await;
        }
        if let Err(stop) = mirrored(&arrived).await {
            return rollback(attempt, stop).await;
        }
        match stage(attempt, pf, &to, &gate).await {
            Ok(staged) => report.staging = Some(staged),
            Err(stop) => return rollback(attempt, stop).await,
        }
        faults::crash_point("after-stage");
        let collections = checks::collections(&pf.plan);
        let restore = checks::Restore {
            id: restore_id.as_str(),
            backup: &job.backup.name,
            ends,
            collections: &collections,
            groups: &groups,
        };
        let before_import = CheckContext::for_phase(&restore, Phase::BeforeImport, None);
        let checked = checks.run(job, before_import).await;
        report.checks = checks.reports();
        if let Err(reason) = checked {
            return rollback(attempt, Stop::Failed(reason)).await;
        }
        if auto_commits {
            attempt
                .set_phase(RestorePhase::Importing)
                .await
                .map_err(Stop::Failed)?;
            let imports = auto_commit::run(ends.target(), &groups, pf.route.route).await;
            return auto_committed(attempt, job, &imports, report).await;
        }
        run_groups(attempt, job, &groups, checks, pf, &gate).await
    } else {
        // Each failure is recorded before the gate fails, so the groups abort with it.
        let fail = |stop: Stop| {
            attempt.fail(stop);
            gate.fail();
        };
        let creating = async {
            if let Err(stop) = run_ddl(&made_tx).await {
                fail(stop);
            }
            // Ends the wait for a collection the DDL never made, after its reason.
            drop(made_tx);
        };
        let arrivals = async {
            tokio::select! {
                mirrored = mirrored(&arrived) => {
                    if let Err(stop) = mirrored {
                        fail(stop);
                    }
                }
                // Nothing more is imported: waiting for a late collection is moot, and
                // the batches that wait for one must not wait on.
                () = attempt.stopped() => gate.fail(),
            }
        };
        let staging = async {
            match stage(attempt, pf, &to, &gate).await {
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
            run_groups(attempt, job, &groups, checks, pf, &gate)
        );
        report.staging = staged;
        results
    };

    let mut divergences = Vec::new();
    let mut incomplete = Vec::new();
    for (g, r) in results {
        match r {
            Ok(d) => divergences.extend(d),
            Err(reason) => incomplete.push(format!("group {}: {reason}", groups[g].id)),
        }
    }
    let decided: Vec<bool> = {
        let r = attempt.record.lock().expect("record lock");
        r.groups
            .iter()
            .map(|g| matches!(g.decision, Some(Decision::Commit { .. })))
            .collect()
    };
    for c in &mut report.collections {
        c.committed = groups.iter().zip(&decided).any(|(g, d)| {
            *d && g
                .batches
                .iter()
                .any(|b| format!("{}.{}", b.db, b.collection) == c.target)
        });
    }
    report.checks.extend(checks.reports());

    let failure = attempt.failure.send_replace(None);
    if let Some(stop) = failure {
        // Undecided groups aborted themselves; drop what they created. With some groups
        // committed, their collections stay and the report says which.
        report.divergences = divergences;
        return rollback(attempt, stop).await;
    }

    // Every group decided, or stopped past the point of aborting: cleanup, then the
    // outcome. A group left incomplete already says why; a journal that cannot take this
    // write either does not change that outcome.
    if let Err(e) = attempt.set_phase(RestorePhase::Completing).await {
        if incomplete.is_empty() {
            return Err(Stop::Failed(e));
        }
        tracing::warn!(error = %e, "could not record the completing phase");
    }
    if let Some(s) = report.staging.as_mut() {
        match cleaned_early {
            Some(cleaned) => s.cleaned_up = cleaned,
            None if incomplete.is_empty() => s.cleaned_up = cleanup_staging(job, &restore_id).await,
            None => {}
        }
    }
    report.divergences = divergences;
    // Every group decided: no failure, so what is visible follows from the divergences.
    let facts = outcome::Facts {
        divergences: &report.divergences,
        unconverged: incomplete,
        collections: report.collections.len(),
        jobs: groups.iter().map(|g| g.batches.len()).sum(),
        ends: ends.len(),
        ..outcome::Facts::default()
    };
    let (outcome, summary) = outcome::decide(&facts, &restore_id);
    report.summary = summary;
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
    pf: &Preflight,
    to: &Destinations,
    gate: &ImportGate,
) -> Result<StagingReport, Stop> {
    // Rides on the next journal write: nothing recovers differently for it.
    attempt.enter_phase(RestorePhase::Staging);
    let stop = CancellationToken::new();
    let id = attempt.record.lock().expect("record lock").id.to_string();
    let progress = attempt.engine.progress.clone();
    let show = move |p| progress.staging(&id, p);
    let staging = staging::stage_files(pf, to, gate, &show, &stop);
    tokio::pin!(staging);
    // A restore that fails meanwhile (a mirror, a create, the DDL) imports nothing more, and
    // the rest of a long copy would only be deleted again; so does an interrupted one. The
    // stage is told to stop and waited for, not dropped: a copy abandoned mid-request could
    // land after the rollback deleted the prefix.
    let staged = tokio::select! {
        staged = &mut staging => staged.map_err(Stop::Failed),
        why = stopped_by(attempt) => {
            stop.cancel();
            let _ = staging.await;
            Err(why)
        }
    };
    // The failure is recorded before the gate closes, so the groups that wake on it abort
    // with the stage's reason, not their own.
    if let Err(stop) = &staged {
        attempt.fail(stop.clone());
    }
    gate.end(staged.is_ok());
    staged
}

/// Returns once the restore failed elsewhere or was interrupted, with what that means for
/// the stage.
async fn stopped_by(attempt: &Attempt<'_>) -> Stop {
    tokio::select! {
        () = attempt.stopped() => {
            tracing::info!("staging stopped: the restore failed before its decision");
            Stop::Failed("staging stopped: the restore failed".into())
        }
        () = attempt.engine.interrupt.fired() => {
            tracing::info!("staging stopped: interrupted");
            Interrupted.into()
        }
    }
}

/// The end of an auto-commit restore: what its imports made visible, counted.
/// Nothing imported at all is rolled back (the DDL is undone); anything else stays, and the
/// report says per collection what. The staged files go either way: nothing reads them once
/// the imports ended.
async fn auto_committed(
    attempt: &Attempt<'_>,
    job: &Job,
    imports: &[auto_commit::BatchImport],
    report: &mut Report,
) -> Result<Outcome, Stop> {
    let target = &attempt.ends.target().name;
    report.jobs = imports.iter().map(|b| b.job_report(target)).collect();
    let mut partly_visible = Vec::new();
    for c in &mut report.collections {
        let mine: Vec<_> = imports
            .iter()
            .filter(|b| b.collection == c.target)
            .collect();
        let imported: i64 = mine.iter().map(|b| b.imported).sum();
        c.committed = mine.iter().all(|b| b.whole());
        if !c.committed && imported > 0 {
            partly_visible.push(format!("{} ({imported} of {} rows)", c.target, c.rows));
        }
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
    let facts = outcome::Facts {
        visible: report.committed_collections(),
        failure,
        partly_visible,
        collections: report.collections.len(),
        jobs: imports.len(),
        ends: 1,
        ..outcome::Facts::default()
    };
    let restore_id = attempt.record.lock().expect("record lock").id.clone();
    let (outcome, summary) = outcome::decide(&facts, &restore_id);
    report.summary = summary;
    if outcome == Outcome::RolledBack {
        undo(attempt).await;
        if let Some(s) = report.staging.as_mut() {
            s.cleaned_up = true;
        }
    } else if let Some(s) = report.staging.as_mut() {
        s.cleaned_up = cleanup_staging(job, &restore_id).await;
    }
    Ok(outcome)
}

/// Starts a tracker for every group's jobs, none submitted yet.
fn track_groups(attempt: &Attempt<'_>, pf: &Preflight, groups: &[CommitGroup]) {
    attempt.record.lock().expect("record lock").groups = groups.to_vec();
    let batches = pf.plan.collections.iter().flat_map(|c| c.batches.iter());
    let names: Vec<String> = attempt.ends.all().iter().map(|e| e.name.clone()).collect();
    let mut batches = batches.zip(groups.iter().flat_map(|g| g.batches.iter()));
    let mut trackers = attempt.trackers.lock().expect("tracker lock");
    for group in groups {
        trackers.push(Tracker {
            end_names: names.clone(),
            jobs: batches
                .by_ref()
                .take(group.batches.len())
                .map(|(batch, b)| Tracked {
                    batch_id: b.batch_id.clone(),
                    db: b.db.clone(),
                    collection: batch.target.to_string(),
                    partition: b.partition.clone(),
                    expected: batch.expected_rows(),
                    job_id: None,
                    seen: vec![None; names.len()],
                    imported: vec![None; names.len()],
                })
                .collect(),
        });
    }
}

/// What each group's run ended with, by group index.
type GroupResults = Vec<(usize, Result<Vec<Divergence>, String>)>;

/// Runs the groups within the target's import-job budget, each to its decision and on.
///
/// Once every end accepted every commit, the staged files are deleted while the ends finish
/// committing, instead of after: no state after Committing reads an import's files (Milvus
/// reads them in PreImporting and Importing) and a Committing job cannot fail. Whether that
/// cleanup succeeded comes back with the results; `None` if it did not run here.
async fn run_groups(
    attempt: &Attempt<'_>,
    job: &Job,
    groups: &[CommitGroup],
    checks: &CheckSetup,
    pf: &Preflight,
    gate: &ImportGate,
) -> (GroupResults, Option<bool>) {
    let restore_id = attempt.record.lock().expect("record lock").id.clone();
    let budget = Arc::new(Semaphore::new((job.target.max_import_jobs as usize).max(1)));
    let runs = futures::stream::iter(0..groups.len())
        .map(|g| {
            let budget = Arc::clone(&budget);
            let need = groups[g].batches.len().max(1) as u32;
            let first_batch = groups[..g].iter().map(|g| g.batches.len()).sum();
            async move {
                let _slots = budget
                    .acquire_many(need)
                    .await
                    .expect("the budget semaphore is never closed");
                let group = GroupRun {
                    g,
                    first_batch,
                    groups,
                    gate,
                };
                (g, run_group(attempt, job, group, checks, pf).await)
            }
        })
        .buffer_unordered(groups.len().max(1))
        .collect::<GroupResults>();
    let mut runs = std::pin::pin!(runs);
    tokio::select! {
        results = &mut runs => (results, None),
        () = attempt.past_commit() => {
            let (results, cleaned) = tokio::join!(runs, cleanup_staging(job, &restore_id));
            (results, Some(cleaned))
        }
    }
}

/// The commit groups of the restore: one for all batches, or one per collection.
fn build_groups(
    restore_id: &RestoreId,
    job: &Job,
    pf: &Preflight,
    import_prefix: &str,
) -> Vec<CommitGroup> {
    let record = |b: &ImportBatch| BatchRecord {
        batch_id: b.id.to_string(),
        db: b.target.db.clone(),
        collection: b.target.collection.clone(),
        partition: b.partition.clone().unwrap_or_default(),
        idempotency_key: idempotency_key(restore_id, b.id.as_str()),
        // In the form the target's Milvus resolves; the mirrors get the same paths.
        files: b
            .files
            .iter()
            .map(|group| {
                group
                    .iter()
                    .map(|f| {
                        job.target
                            .end
                            .paths
                            .import_path(&format!("{import_prefix}/{f}"))
                    })
                    .collect()
            })
            .collect(),
        options: b.options(),
        job_id: None,
        create_sent: false,
        expected_rows: b.expected_rows(),
    };
    match job.two_phase.atomicity {
        Atomicity::Restore => vec![CommitGroup {
            id: "restore".into(),
            batches: pf
                .plan
                .collections
                .iter()
                .flat_map(|c| c.batches.iter().map(record))
                .collect(),
            decision: None,
        }],
        Atomicity::Collection => pf
            .plan
            .collections
            .iter()
            .filter(|c| !c.batches.is_empty())
            .map(|c| CommitGroup {
                id: c.target.to_string(),
                batches: c.batches.iter().map(record).collect(),
                decision: None,
            })
            .collect(),
    }
}

/// `lockstep-` + 32 hex digits of sha256(restore id, batch id): printable ASCII well under
/// Milvus's 256-byte limit, stable across a crash and a recovery of the same attempt.
pub(super) fn idempotency_key(restore_id: &RestoreId, batch_id: &str) -> String {
    let digest = Sha256::digest(format!("{restore_id}\n{batch_id}").as_bytes());
    format!("lockstep-{}", &hex::encode(digest)[..32])
}

/// One commit group, submit to complete. `Ok` carries its divergences; `Err` says why the
/// group stopped after its decision without completing (the restore is then incomplete).
/// A pre-decision failure is recorded in `attempt.failure` and the group aborts itself.
/// One commit group of a restore, and the stage its jobs wait on.
struct GroupRun<'a> {
    g: usize,
    /// The group's first batch, numbered across the restore's groups.
    first_batch: usize,
    /// Every group of the restore.
    groups: &'a [CommitGroup],
    gate: &'a ImportGate,
}

async fn run_group(
    attempt: &Attempt<'_>,
    job: &Job,
    group: GroupRun<'_>,
    checks: &CheckSetup,
    pf: &Preflight,
) -> Result<Vec<Divergence>, String> {
    let ends = attempt.ends;
    let engine = attempt.engine;
    let GroupRun { g, gate, .. } = group;
    let mut tracker = attempt.trackers.lock().expect("tracker lock")[g].clone();
    let jobs: Vec<usize> = (0..tracker.jobs.len()).collect();
    let call_timeout = job
        .two_phase
        .commit_timeout
        .unwrap_or(DEFAULT_CALL_DEADLINE);
    let call_deadline = Instant::now() + call_timeout;
    let honours_key = pf
        .versions
        .first()
        .is_some_and(ServerVersion::honours_idempotency_key);

    let pre: Result<(), Stop> = async {
        if attempt.failed() {
            return Err(Stop::Failed("another commit group failed".into()));
        }
        {
            let submitted = submit(attempt, &group, &mut tracker, call_timeout, honours_key);
            tokio::pin!(submitted);
            tokio::select! {
                submitted = &mut submitted => submitted?,
                // The creates not sent yet stop; those in flight finish: no job id is lost.
                () = sentry(attempt, g, job.two_phase.mirror_grace) => submitted.await?,
            }
        }
        if attempt.failed() {
            return Err(Stop::Failed(
                "a job failed while the creates went out".into(),
            ));
        }
        // The commit timeout counts from the creates: they may have waited on staging.
        let deadline = job.two_phase.commit_timeout.map(|t| Instant::now() + t);
        attempt
            .set_phase(RestorePhase::Holding)
            .await
            .map_err(Stop::Failed)?;
        let hold = async |tracker: &mut Tracker, first: FirstLook| -> Result<(), Stop> {
            let show = |t: &Tracker| {
                attempt.trackers.lock().expect("tracker lock")[g] = t.clone();
                attempt.show();
            };
            let grace = job.two_phase.mirror_grace;
            let held = two_phase::hold(ends, tracker, &jobs, grace, deadline, first, &show);
            // A stage that fails while the jobs import ends the hold: nothing will commit.
            tokio::select! {
                held = engine.interrupt.race(held) => {
                    held?.map_err(|reason| Stop::Failed(staging_hint(job, reason)))?
                }
                () = gate.failed() => {
                    return Err(Stop::Failed(GATE_FAILED.into()));
                }
            }
            if attempt.failed() {
                return Err(Stop::Failed("another commit group failed".into()));
            }
            Ok(())
        };
        if !faults::planted(faults::Bug::CommitEarly) {
            hold(&mut tracker, FirstLook::Spread).await?;
        }
        // Nothing is decided on a job some end holds with other rows than the backup's; and
        // no check (an approval can take hours) is asked about one. The rows of a job held
        // Uncommitted do not change, so the checks' time does not make them stale.
        if !faults::planted(faults::Bug::SkipRows) {
            rows::read(ends, &mut tracker, &jobs, Instant::now() + call_timeout)
                .await
                .map_err(|e| Stop::Failed(e.to_string()))?;
            attempt.trackers.lock().expect("tracker lock")[g] = tracker.clone();
            attempt.show();
            let wrong = rows::mismatches(&tracker, &jobs);
            if !wrong.is_empty() {
                return Err(Stop::Failed(rows::failure(&wrong)));
            }
        }
        if checks.has(Phase::BeforeCommit) {
            let restore_id = attempt.record.lock().expect("record lock").id.clone();
            let collections = checks::collections(&pf.plan);
            let restore = checks::Restore {
                id: restore_id.as_str(),
                backup: &job.backup.name,
                ends,
                collections: &collections,
                groups: group.groups,
            };
            let ctx = CheckContext::for_phase(
                &restore,
                Phase::BeforeCommit,
                Some((group.first_batch, &tracker)),
            );
            checks.run(job, ctx).await.map_err(Stop::Failed)?;
            // Re-read every end right before deciding: a mirror may have failed while the
            // checks ran (an approval can take hours), and Milvus cannot check a fencing
            // token, only states. Without checks the hold's own sightings are that fresh.
            hold(&mut tracker, FirstLook::Now).await?;
        }
        // Nothing is decided on files that were not all staged and verified.
        if !gate.staged().await {
            return Err(Stop::Failed(GATE_FAILED.into()));
        }
        Ok(())
    }
    .await;

    if let Err(stop) = pre {
        attempt.fail(stop);
        let settle = job.two_phase.mirror_grace.min(Duration::from_secs(60));
        let aborted = if faults::planted(faults::Bug::SkipAbort) {
            Ok(())
        } else {
            two_phase::abort(ends, &mut tracker, &jobs, settle, call_deadline).await
        };
        let reason = {
            let mut r = attempt.record.lock().expect("record lock");
            let reason = match attempt.failure.borrow().as_ref() {
                Some(Stop::Failed(r)) => r.clone(),
                Some(Stop::Refused(r)) => Refusal::joined(r),
                None => "failed".into(),
            };
            r.groups[g].decision = Some(Decision::Abort {
                at: Timestamp::now(),
                reason: reason.clone(),
            });
            reason
        };
        attempt.trackers.lock().expect("tracker lock")[g] = tracker;
        let _ = attempt.persist().await;
        tracing::warn!(group = g, %reason, "aborted before the decision");
        return aborted
            .map(|()| Vec::new())
            .map_err(|e| format!("abort did not settle: {e}"));
    }

    let ready_at = Instant::now();
    // The decision: durable before any commit is sent. From here on, only forward.
    if !faults::planted(faults::Bug::NoDecision) {
        {
            let mut r = attempt.record.lock().expect("record lock");
            r.groups[g].decision = Some(Decision::Commit {
                at: Timestamp::now(),
            });
        }
        let durable = match attempt.set_phase(RestorePhase::Deciding).await {
            Ok(()) => attempt.persist().await,
            Err(e) => Err(e),
        };
        if let Err(e) = durable {
            // Not durable, so not decided: nothing was committed. The jobs stay held, as
            // after a crash, for `recover` to decide from what reached the journal (a write
            // that failed may still have landed).
            attempt.record.lock().expect("record lock").groups[g].decision = None;
            return Err(format!(
                "the commit decision could not be made durable ({e}); nothing was committed \
                 and the jobs are still held: run `lockstep recover` once the journal can be \
                 written"
            ));
        }
    }
    faults::crash_point("after-decision");
    attempt.note_reaction(ready_at.elapsed());
    let mut divergences = two_phase::commit(
        ends,
        &tracker,
        &jobs,
        Instant::now() + DEFAULT_CALL_DEADLINE,
    )
    .await;
    faults::crash_point("after-commit");
    let completion = Instant::now()
        + job
            .two_phase
            .completion_timeout
            .unwrap_or(DEFAULT_COMPLETION_TIMEOUT);
    let show = |t: &Tracker| {
        attempt.trackers.lock().expect("tracker lock")[g] = t.clone();
        attempt.show();
    };
    let (more, finished) =
        two_phase::complete(ends, &mut tracker, &jobs, Some(completion), &show).await;
    divergences.extend(more);
    if !faults::planted(faults::Bug::SkipRows) {
        let rows_deadline = Instant::now() + call_timeout;
        divergences.extend(rows::after_commit(ends, &mut tracker, &jobs, rows_deadline).await);
    }
    let waiting_for = tracker.not_completed(&jobs);
    attempt.trackers.lock().expect("tracker lock")[g] = tracker;
    if finished {
        Ok(divergences)
    } else {
        Err(format!(
            "not every end reported Completed within the completion timeout: {waiting_for}"
        ))
    }
}

/// Creates the group's jobs on the target, each once its batch's files are staged. Every
/// key is recorded as possibly sent before any create goes out, so a crash mid-submit
/// leaves recovery a key to look each job up by.
async fn submit(
    attempt: &Attempt<'_>,
    group: &GroupRun<'_>,
    tracker: &mut Tracker,
    call_timeout: Duration,
    honours_key: bool,
) -> Result<(), Stop> {
    let GroupRun {
        g,
        first_batch,
        gate,
        ..
    } = *group;
    if !batch_ready(attempt, gate, first_batch).await {
        return Err(Stop::Failed(GATE_FAILED.into()));
    }
    // Written with the keys below.
    attempt.enter_phase(RestorePhase::Importing);
    let batches: Vec<BatchRecord> = {
        let mut r = attempt.record.lock().expect("record lock");
        for b in &mut r.groups[g].batches {
            b.create_sent = true;
        }
        r.groups[g].batches.clone()
    };
    attempt.persist().await.map_err(Stop::Failed)?;
    faults::crash_point("after-intent");
    let target = attempt.ends.target();
    let mut creates = futures::stream::iter(batches.iter().enumerate())
        .map(|(i, b)| async move {
            if !batch_ready(attempt, gate, first_batch + i).await {
                return (i, None);
            }
            let body = CreateImport {
                db_name: b.db.clone(),
                collection_name: b.collection.clone(),
                partition_name: (!b.partition.is_empty()).then(|| b.partition.clone()),
                files: b.files.clone(),
                options: import_options(b),
            };
            let key = honours_key.then_some(b.idempotency_key.as_str());
            let deadline = Instant::now() + call_timeout;
            let created = retry(deadline, || target.rest.create_import(&body, key)).await;
            (i, Some(created))
        })
        .buffer_unordered(CREATES_IN_FLIGHT);
    let mut first_error = None;
    let mut unstaged = false;
    while let Some((i, result)) = creates.next().await {
        match result {
            Some(Ok(id)) => {
                tracker.jobs[i].job_id = Some(id.clone());
                attempt.record.lock().expect("record lock").groups[g].batches[i].job_id = Some(id);
            }
            // Recorded at once, so that the stage and the other groups stop now rather
            // than when the last batch was staged.
            Some(Err(e)) if first_error.is_none() => {
                let stop = create_failed(&e);
                attempt.fail(stop.clone());
                first_error = Some(stop);
            }
            Some(Err(_)) => {}
            None => unstaged = true,
        }
    }
    drop(creates);
    attempt.trackers.lock().expect("tracker lock")[g] = tracker.clone();
    attempt.persist().await.map_err(Stop::Failed)?;
    faults::crash_point("after-submit");
    match first_error {
        None if unstaged => Err(Stop::Failed(GATE_FAILED.into())),
        None => Ok(()),
        Some(stop) => Err(stop),
    }
}

/// Watches the jobs group `g` created so far while the rest wait on the stage, which can take
/// hours: a job that fails on any end, or a mirror past its grace, fails the restore now
/// rather than once the last batch was staged, and so stops the stage and the creates not
/// sent yet. Returns once it failed the restore; never otherwise.
async fn sentry(attempt: &Attempt<'_>, g: usize, grace: Duration) {
    loop {
        tokio::time::sleep(SENTRY_EVERY).await;
        let mut tracker = attempt.trackers.lock().expect("tracker lock")[g].clone();
        {
            let r = attempt.record.lock().expect("record lock");
            for (t, b) in tracker.jobs.iter_mut().zip(&r.groups[g].batches) {
                t.job_id.clone_from(&b.job_id);
            }
        }
        let created: Vec<usize> = (0..tracker.jobs.len())
            .filter(|&j| tracker.jobs[j].job_id.is_some())
            .collect();
        if created.is_empty() {
            continue;
        }
        // One round of the hold: it stops on what would stop the hold itself.
        let round = two_phase::hold(
            attempt.ends,
            &mut tracker,
            &created,
            grace,
            None,
            FirstLook::Now,
            &|_| {},
        );
        if let Ok(Err(reason)) = tokio::time::timeout(SENTRY_EVERY, round).await {
            tracing::warn!(group = g, %reason, "a created job failed while the stage went on");
            let reason = match attempt.job {
                Some(job) => staging_hint(job, reason),
                None => reason,
            };
            attempt.fail(Stop::Failed(reason));
            return;
        }
    }
}

/// A mirror that found no files on a secondary lockstep staged nothing into says what to
/// add: the secondary's storage, so that the next restore stages there.
fn staging_hint(job: &Job, reason: String) -> String {
    let unstaged = job
        .secondaries
        .iter()
        .filter(|s| s.storage.is_none())
        .find(|s| reason.contains(&format!("secondary {}:", s.end.name)));
    match unstaged {
        Some(s) if reason.contains("no binlog to import") => format!(
            "{reason}; nothing was staged on {} because the host config gives it no storage: \
             add `storage` to its cluster (or `require_staging = true` to refuse this up front)",
            s.end.name
        ),
        _ => reason,
    }
}

/// Waits until `batch` may be imported: false once the gate or the restore failed, since a
/// create that is not sent yet waits for nothing then.
async fn batch_ready(attempt: &Attempt<'_>, gate: &ImportGate, batch: usize) -> bool {
    tokio::select! {
        ready = gate.batch_ready(batch) => ready,
        () = attempt.stopped() => false,
    }
}

/// What a refused create means for the restore.
fn create_failed(e: &milvus::Error) -> Stop {
    if e.is_replicated_import_disabled() {
        Stop::Refused(vec![Refusal::ReplicatedImportDisabled {
            reason: error_chain(e),
        }])
    } else {
        Stop::Failed(format!("import create failed: {}", error_chain(e)))
    }
}

/// The batch's options plus `auto_commit=false`: the job waits Uncommitted for our commit.
/// Never a `timeout`, whatever a journal record holds: Milvus 3.0.0 and 3.0.1 fail a
/// Committing job whose timeout runs out (`tryTimeoutJob` skips only Failed and Completed),
/// which can leave its vchannels partly visible (milvus-3.0-changes §2.5). Without one, a
/// held job waits for the commit as long as it takes.
pub(super) fn import_options(b: &BatchRecord) -> BTreeMap<String, String> {
    let mut options = b.options.clone();
    options.remove("timeout");
    options.insert("auto_commit".into(), "false".into());
    options
}

/// Takes back what the restore made ([`rollback`]) and stops with `stop`.
async fn rollback(attempt: &Attempt<'_>, stop: Stop) -> Result<Outcome, Stop> {
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
    rollback::undo(
        attempt.ends,
        &collections,
        attempt.job.zip(staged),
        deadline,
    )
    .await;
}

/// Deletes the staged files once every end completed (unless `keep_temp_files`). Whether
/// they are gone, for the report.
async fn cleanup_staging(job: &Job, restore_id: &RestoreId) -> bool {
    let prefix = StagingPrefix::for_restore(restore_id);
    let temp = if job.restore.keep_temp_files {
        storage::TempFiles::Keep
    } else {
        storage::TempFiles::Delete
    };
    let cleaned = storage::delete_stage(&job.destinations(), &prefix, temp).await;
    cleaned && temp == storage::TempFiles::Delete
}

fn base_report(job: &Job, ends: &Ends, record: &RestoreRecord, started: Timestamp) -> Report {
    let of = ReportOf {
        restore_id: record.id.to_string(),
        job_name: job.name.clone(),
        job_id: job.id().to_string(),
        backup: job.backup.name.clone(),
    };
    Report {
        rerun_because: record.rerun_because.clone(),
        ..Report::new(of, EndReport::of_ends(ends), started)
    }
}

pub(super) fn job_reports(trackers: &[Tracker]) -> Vec<super::report::JobReport> {
    trackers
        .iter()
        .flat_map(|t| {
            t.jobs.iter().map(|j| super::report::JobReport {
                batch: j.batch_id.clone(),
                collection: j.collection.clone(),
                partition: j.partition.clone(),
                job_id: j.job_id.as_ref().map(|i| i.0.clone()),
                rows: j.expected.map_or(0, |e| e.inserted),
                expected_rows: j.expected,
                states: t
                    .end_names
                    .iter()
                    .zip(&j.seen)
                    .zip(&j.imported)
                    .map(|((end, s), imported)| super::report::EndJobState {
                        end: end.clone(),
                        state: s.as_ref().map(|s| s.state),
                        reason: s.as_ref().and_then(|s| s.reason.clone()),
                        imported_rows: *imported,
                    })
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_job_is_created_without_auto_commit_and_never_with_a_timeout() {
        let record = BatchRecord {
            batch_id: "default.c/p/data-0".into(),
            db: "default".into(),
            collection: "c".into(),
            partition: "p".into(),
            idempotency_key: String::new(),
            files: vec![],
            // A record as an older or edited journal might hold it.
            options: BTreeMap::from([
                ("backup".to_owned(), "true".to_owned()),
                ("timeout".to_owned(), "300s".to_owned()),
                ("auto_commit".to_owned(), "true".to_owned()),
            ]),
            job_id: None,
            create_sent: false,
            expected_rows: None,
        };
        let options = import_options(&record);
        assert_eq!(
            options,
            BTreeMap::from([
                ("auto_commit".to_owned(), "false".to_owned()),
                ("backup".to_owned(), "true".to_owned()),
            ])
        );
    }
}
