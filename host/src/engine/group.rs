//! The commit groups of a restore (the whole restore, or one per collection). They run
//! concurrently within the target's import-job budget, and each goes submit → hold → rows →
//! before-commit checks → decision → commit → complete on its own. A failure before a
//! group's decision fails every group that has not decided yet: they abort; decided groups
//! roll forward.
//!
//! Each group owns its tracker and publishes it over its own `watch` channel as its jobs
//! move. The progress display and the journal's progress snapshot read every group's; the
//! group's sentry reads its own; the early cleanup waits until all of them are past commit.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use sha2::{Digest, Sha256};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use super::attempt::{Attempt, Change};
use super::checks::{self, CheckSetup};
use super::create::{self, CreateKey};
use super::ends::Ends;
use super::error::{Error, StageError};
use super::faults;
use super::gate::ImportGate;
use super::preflight::Preflight;
use super::refusal::Refusal;
use super::report::{CheckEntry, Divergence};
use super::retry::DEFAULT_CALL_DEADLINE;
use super::rows;
use super::schedule::FirstLook;
use super::staging;
use super::two_phase::{self, HoldError, Tracked, Tracker};
use crate::backup::ImportBatch;
use crate::diagnostic::error_chain;
use crate::job::{Atomicity, Job};
use crate::journal::{
    BatchRecord, CommitGroup, Decision, PlannedBatch, RestoreId, RestorePhase, Role,
};
use crate::milvus::{self, ServerVersion};
use crate::plugins::{CheckContext, Phase};

/// Import creates in flight at once on the target.
const CREATES_IN_FLIGHT: usize = 8;

/// How long the wait after a decision lasts when the job sets no `completion_timeout`: then
/// the restore ends incomplete (exit 4), naming the ends that still hold jobs, for
/// `lockstep recover` to finish. A job file sets a longer one for a slower fleet.
const DEFAULT_COMPLETION_TIMEOUT: Duration = Duration::from_secs(3600);

/// How often the jobs a group created are looked at while its other creates wait on the
/// stage: milvus-backup's and the Milvus guide's poll.
const SENTRY_EVERY: Duration = Duration::from_secs(3);

/// The commit groups of a restore: one for all batches, or one per collection. Each batch is
/// recorded with the paths the target's Milvus resolves under `import_prefix` (the mirrors
/// get the same paths) and a key stable across a crash and a recovery of the attempt.
pub(super) fn plan(
    restore_id: &RestoreId,
    job: &Job,
    preflight: &Preflight,
    import_prefix: &str,
) -> Vec<CommitGroup> {
    // A collection's batches are planned together and mostly with the same options: each
    // shares the map of the batch before it when they are alike.
    let mut last_options: Option<Arc<BTreeMap<String, String>>> = None;
    let mut record = |b: &ImportBatch| {
        let options = b.options();
        let options = match &last_options {
            Some(last) if **last == options => last.clone(),
            _ => last_options.insert(Arc::new(options)).clone(),
        };
        BatchRecord::new(PlannedBatch {
            batch_id: b.id.to_string(),
            db: b.target.db.clone(),
            collection: b.target.collection.clone(),
            partition: b.partition.clone().unwrap_or_default(),
            idempotency_key: idempotency_key(restore_id, b.id.as_str()),
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
            options,
            expected_rows: b.expected_rows(),
        })
    };
    match job.two_phase.atomicity {
        Atomicity::Restore => vec![CommitGroup {
            id: "restore".into(),
            batches: preflight
                .plan
                .collections
                .iter()
                .flat_map(|c| c.batches.iter())
                .map(&mut record)
                .collect(),
            decision: None,
        }],
        Atomicity::Collection => preflight
            .plan
            .collections
            .iter()
            .filter(|c| !c.batches.is_empty())
            .map(|c| CommitGroup {
                id: c.target.to_string(),
                batches: c.batches.iter().map(&mut record).collect(),
                decision: None,
            })
            .collect(),
    }
}

/// `lockstep-` + 32 hex digits of sha256(restore id, batch id): printable ASCII well under
/// Milvus's 256-byte limit, stable across a crash and a recovery of the same attempt.
fn idempotency_key(restore_id: &RestoreId, batch_id: &str) -> String {
    let digest = Sha256::digest(format!("{restore_id}\n{batch_id}").as_bytes());
    format!("lockstep-{}", &hex::encode(digest)[..32])
}

/// A tracker for every group's jobs, none submitted yet.
pub(super) fn trackers(ends: &Ends, preflight: &Preflight, groups: &[CommitGroup]) -> Vec<Tracker> {
    let names: Vec<String> = ends.all().iter().map(|e| e.name.clone()).collect();
    // A collection's names are made once, for all of its jobs.
    let batches = preflight.plan.collections.iter().flat_map(|c| {
        let db: Arc<str> = c.target.db.as_str().into();
        let collection: Arc<str> = c.target.to_string().into();
        (c.batches.iter()).map(move |batch| (batch, db.clone(), collection.clone()))
    });
    let mut batches = batches.zip(groups.iter().flat_map(|g| g.batches.iter()));
    groups
        .iter()
        .map(|group| Tracker {
            end_names: names.clone(),
            jobs: batches
                .by_ref()
                .take(group.batches.len())
                .map(|((batch, db, collection), b)| Tracked {
                    batch_id: b.planned.batch_id.clone(),
                    db,
                    collection,
                    partition: b.planned.partition.clone(),
                    expected: batch.expected_rows(),
                    job_id: None,
                    seen: vec![None; names.len()],
                    imported: vec![None; names.len()],
                })
                .collect(),
        })
        .collect()
}

/// What the groups run against.
pub(super) struct Groups<'a> {
    pub job: &'a Job,
    pub preflight: &'a Preflight,
    pub checks: &'a CheckSetup,
    /// The restore as its checks are told of it, with the groups as the journal records them.
    pub restore: &'a checks::Restore<'a>,
    pub gate: &'a ImportGate,
}

/// How one commit group ended.
pub(super) enum GroupEnd {
    /// It stopped before its decision, and aborted its jobs: why (its own failure, or that
    /// it followed another's), and why the abort did not settle on every end, if it did not
    /// (some job may then still read the staged files).
    Aborted {
        stop: Error,
        unsettled: Option<String>,
    },
    /// Decided for commit: the jobs not confirmed visible somewhere, and why the group did
    /// not complete, if it did not (the restore is then incomplete).
    Committed {
        divergences: Vec<Divergence>,
        unfinished: Option<String>,
    },
    /// Ready, but its commit decision could not be made durable: nothing was committed,
    /// and its jobs are held for `lockstep recover`.
    Undecided(String),
}

/// How the groups ended.
pub(super) struct Ran<'r> {
    /// By group.
    pub ends: Vec<GroupEnd>,
    /// What every group's before-commit checks reported, in group order.
    pub checks: Vec<CheckEntry>,
    /// Each group's tracker as it ended, for the report.
    pub trackers: Vec<Tracker>,
    /// The deletion of the staged files begun while the ends finished committing; `None`
    /// if that did not begin here.
    pub cleaned_early: Option<EarlyCleanup<'r>>,
}

/// The staged files' deletion begun once every end accepted every commit: done by the time
/// the groups ended, or still going, for the caller to finish beside what follows (the
/// verification asks only the ends, and nothing reads the files any more).
pub(super) enum EarlyCleanup<'r> {
    Done(bool),
    Going(futures::future::BoxFuture<'r, bool>),
}

impl EarlyCleanup<'_> {
    /// Whether the staged files are gone, once the deletion ended.
    pub async fn finish(self) -> bool {
        match self {
            EarlyCleanup::Done(cleaned) => cleaned,
            EarlyCleanup::Going(cleanup) => cleanup.await,
        }
    }
}

/// Runs every group, each from its own tracker in `trackers`, to its decision and on.
///
/// Once every end accepted every commit, the staged files are deleted while the ends finish
/// committing, instead of after: no state after Committing reads an import's files (Milvus
/// reads them in PreImporting and Importing) and a Committing job cannot fail. What is left
/// of that when the groups end is the caller's to finish ([`EarlyCleanup`]).
pub(super) async fn run<'r>(
    attempt: &'r Attempt<'_>,
    groups: Groups<'r>,
    trackers: Vec<Tracker>,
) -> Ran<'r> {
    let (job, staged) = (groups.job, &groups.preflight.plan.files_to_stage);
    let (published, seen): (Vec<_>, Vec<_>) =
        trackers.iter().map(|t| watch::channel(t.clone())).unzip();
    let budget = Semaphore::new((groups.job.target.max_import_jobs as usize).max(1));
    let (budget, groups, published) = (&budget, &groups, &published);
    // Every group at once (the budget paces them), made before they are driven: a stream
    // whose closure borrows would keep the restore's future from being `Send`
    // (rust-lang/rust#102211).
    let runs: futures::stream::FuturesUnordered<_> = (trackers.into_iter().enumerate())
        .map(|(index, tracker)| async move {
            let need = groups.restore.groups[index].batches.len().max(1) as u32;
            let _slots = budget
                .acquire_many(need)
                .await
                .expect("the budget semaphore is never closed");
            let group = Group {
                attempt,
                groups,
                index,
                first_batch: groups.restore.groups[..index]
                    .iter()
                    .map(|g| g.batches.len())
                    .sum(),
                jobs: (0..tracker.jobs.len()).collect(),
                unanswered: Vec::new(),
                checks: Vec::new(),
                tracker,
                published: &published[index],
            };
            (index, run_group(group).await)
        })
        .collect();
    let runs = runs.collect::<Vec<_>>();
    let work = async {
        let mut runs = std::pin::pin!(runs);
        tokio::select! {
            results = &mut runs => (results, None),
            () = past_commit(seen.clone()) => {
                let mut cleanup: futures::future::BoxFuture<'r, bool> =
                    Box::pin(staging::clean_up(job, attempt, &attempt.id, staged));
                tokio::select! {
                    results = &mut runs => (results, Some(EarlyCleanup::Going(cleanup))),
                    cleaned = &mut cleanup => (runs.await, Some(EarlyCleanup::Done(cleaned))),
                }
            }
        }
    };
    let (mut results, cleaned_early) = tokio::select! {
        ran = work => ran,
        never = show_progress(attempt, seen.clone()) => match never {},
    };
    results.sort_by_key(|(index, _)| *index);
    // Taken, not copied: every group is done with its channel.
    let trackers: Vec<Tracker> = (published.iter())
        .map(|p| p.send_replace(Tracker::default()))
        .collect();
    attempt.show(&trackers.iter().collect::<Vec<_>>());
    Ran {
        checks: (results.iter_mut())
            .flat_map(|(_, (_, checks))| std::mem::take(checks))
            .collect(),
        ends: results.into_iter().map(|(_, (end, _))| end).collect(),
        trackers,
        cleaned_early,
    }
}

/// Shows the groups' trackers as they change, at most every [`two_phase::SHOW_EVERY`], and
/// paced by its own cost as a watch's showing is: every showing counts every job on every
/// end twice (120,000 entries each at 10,000 collections).
async fn show_progress(
    attempt: &Attempt<'_>,
    mut groups: Vec<watch::Receiver<Tracker>>,
) -> Infallible {
    loop {
        any_changed(&mut groups).await;
        let started = std::time::Instant::now();
        {
            // Counted where they are published, not copied: copying every job ten times a
            // second showed in a 4,000-job restore's CPU time. A group that publishes
            // meanwhile waits for the count, which never awaits.
            let trackers: Vec<watch::Ref<'_, Tracker>> =
                groups.iter_mut().map(|t| t.borrow_and_update()).collect();
            attempt.show(&trackers);
        }
        tokio::time::sleep(two_phase::pause_after_showing(started.elapsed())).await;
    }
}

/// Returns once every end has every job of every group Committing or Completed; never for
/// a restore without jobs.
async fn past_commit(mut groups: Vec<watch::Receiver<Tracker>>) {
    loop {
        let past: Option<bool> = groups
            .iter()
            .filter_map(|t| t.borrow().past_commit())
            .reduce(|a, b| a && b);
        if past == Some(true) {
            return;
        }
        any_changed(&mut groups).await;
    }
}

/// Returns once some group published a new tracker since it was last looked at. The
/// senders outlive every receiver here, so a wait never ends for a closed channel.
async fn any_changed(groups: &mut [watch::Receiver<Tracker>]) {
    if groups.is_empty() {
        return std::future::pending().await;
    }
    let changes: Vec<_> = groups.iter_mut().map(|t| Box::pin(t.changed())).collect();
    let (changed, ..) = futures::future::select_all(changes).await;
    if changed.is_err() {
        std::future::pending::<()>().await;
    }
}

/// One commit group as it runs: its place among the restore's, the tracker it owns and
/// the channel it publishes that tracker on.
struct Group<'a, 'r> {
    attempt: &'a Attempt<'r>,
    groups: &'a Groups<'r>,
    index: usize,
    /// The group's first batch, numbered across the restore's groups.
    first_batch: usize,
    tracker: Tracker,
    published: &'a watch::Sender<Tracker>,
    /// Every job of the group, by index into the tracker.
    jobs: Vec<usize>,
    /// Batches whose create failed after an answer was lost, no job found: the abort looks
    /// for their jobs again.
    unanswered: Vec<usize>,
    /// What its before-commit checks reported.
    checks: Vec<CheckEntry>,
}

/// One commit group, submit to complete, and what its checks reported. A failure before
/// its decision stops the attempt (every undecided group aborts on it) and this group
/// aborts.
async fn run_group(mut group: Group<'_, '_>) -> (GroupEnd, Vec<CheckEntry>) {
    let ready = group.ready().await;
    let checks = std::mem::take(&mut group.checks);
    let end = match ready {
        Ok(()) => group.commit().await,
        Err(stop) => group.abort(stop).await,
    };
    (end, checks)
}

impl Group<'_, '_> {
    fn publish(&self) {
        self.published.send_modify(|t| self.tracker.copy_to(t));
    }

    /// How long each call to an end may keep retrying.
    fn call_timeout(&self) -> Duration {
        (self.groups.job.two_phase.commit_timeout).unwrap_or(DEFAULT_CALL_DEADLINE)
    }

    /// Submit, hold, rows and the before-commit checks: `Ok` once the group may be
    /// decided for commit.
    async fn ready(&mut self) -> Result<(), Error> {
        let Groups {
            job, checks, gate, ..
        } = *self.groups;
        let attempt = self.attempt;
        if attempt.is_stopped() {
            return Err(StageError::OtherGroup.into());
        }
        self.submit_watched().await?;
        if attempt.is_stopped() {
            return Err(StageError::OtherGroup.into());
        }
        // The commit timeout counts from the creates: they may have waited on staging.
        let deadline = job.two_phase.commit_timeout.map(|t| Instant::now() + t);
        attempt.set_phase(RestorePhase::Holding).await?;
        if !faults::planted(faults::Bug::CommitEarly) {
            self.hold(deadline, FirstLook::Spread).await?;
        }
        // Nothing is decided on a job some end holds with other rows than the backup's; and
        // no check (an approval can take hours) is asked about one. The rows of a job held
        // Uncommitted do not change, so the checks' time does not make them stale.
        if !faults::planted(faults::Bug::SkipRows) {
            let deadline = Instant::now() + self.call_timeout();
            rows::read(attempt.ends, &mut self.tracker, &self.jobs, deadline)
                .await
                .map_err(|e| StageError::RowsUnread(Box::new(e)))?;
            self.publish();
            let wrong = rows::mismatches(&self.tracker, &self.jobs);
            if !wrong.is_empty() {
                return Err(StageError::Rows(rows::failure(&wrong)).into());
            }
        }
        if checks.has(Phase::BeforeCommit) {
            let group = Some((self.first_batch, &self.tracker));
            let ctx = CheckContext::for_phase(self.groups.restore, Phase::BeforeCommit, group);
            let (entries, checked) = checks.run(job, self.groups.restore.staged, ctx).await;
            self.checks = entries;
            checked?;
            // Re-read every end right before deciding: a mirror may have failed while the
            // checks ran (an approval can take hours), and Milvus cannot check a fencing
            // token, only states. Without checks the hold's own sightings are that fresh.
            self.hold(deadline, FirstLook::Now).await?;
        }
        // Nothing is decided on files that were not all staged and verified.
        if !gate.staged().await {
            return Err(StageError::GateFailed.into());
        }
        Ok(())
    }

    /// Submits the group's jobs while its sentry watches those created so far.
    async fn submit_watched(&mut self) -> Result<(), Error> {
        let (attempt, job, index) = (self.attempt, self.groups.job, self.index);
        let key = match (self.groups.preflight.versions.first())
            .is_some_and(ServerVersion::honours_idempotency_key)
        {
            true => CreateKey::Sent,
            false => CreateKey::Omitted,
        };
        let submitted = submit(
            attempt,
            self.groups,
            Submitting {
                index,
                first_batch: self.first_batch,
                tracker: &mut self.tracker,
                unanswered: &mut self.unanswered,
                published: self.published,
                key,
            },
        );
        tokio::pin!(submitted);
        tokio::select! {
            submitted = &mut submitted => submitted,
            // The creates not sent yet stop; those in flight finish: no job id is lost.
            error = sentry(attempt.ends, self.published, job.two_phase.mirror_grace) => {
                tracing::warn!(group = index, %error, "a created job failed while the stage went on");
                attempt.stop();
                // The creates not sent fail for the stop; the failure is the sentry's, unless
                // the claim went meanwhile.
                match submitted.await {
                    Err(Error::Lost(lost)) => Err(Error::Lost(lost)),
                    _ => Err(held_failure(job, error).into()),
                }
            }
        }
    }

    /// Holds every job until every end has it Uncommitted, or a reason to stop.
    async fn hold(&mut self, deadline: Option<Instant>, first: FirstLook) -> Result<(), Error> {
        let (attempt, job) = (self.attempt, self.groups.job);
        let grace = job.two_phase.mirror_grace;
        let published = self.published;
        let publish = |t: &Tracker| published.send_modify(|p| t.copy_to(p));
        let held = two_phase::hold(
            attempt.ends,
            &mut self.tracker,
            &self.jobs,
            grace,
            deadline,
            first,
            &publish,
        );
        // A stage that fails while the jobs import ends the hold: nothing will commit.
        tokio::select! {
            held = attempt.engine.interrupt.race(held) => {
                held?.map_err(|error| held_failure(job, error))?
            }
            () = self.groups.gate.failed() => return Err(StageError::GateFailed.into()),
        }
        if attempt.is_stopped() {
            return Err(StageError::OtherGroup.into());
        }
        Ok(())
    }

    /// Aborts the group's jobs on `stop`, those of creates whose answer was lost included,
    /// unless the host lost the claim: then the restore is the new holder's, and there is
    /// nothing to abort.
    async fn abort(mut self, stop: Error) -> GroupEnd {
        self.attempt.stop();
        let mut unsettled = None;
        if !matches!(stop, Error::Lost(_)) {
            let settle = (self.groups.job.two_phase.mirror_grace).min(Duration::from_secs(60));
            let deadline = Instant::now() + self.call_timeout();
            let batches = &self.groups.restore.groups[self.index].batches;
            let (attempt, tracker) = (self.attempt, &mut self.tracker);
            create::find_unanswered(
                attempt,
                self.index,
                batches,
                &self.unanswered,
                tracker,
                deadline,
            )
            .await;
            let aborted = if faults::planted(faults::Bug::SkipAbort) {
                Ok(())
            } else {
                two_phase::abort(attempt.ends, attempt, tracker, &self.jobs, settle, deadline).await
            };
            self.publish();
            if let Err(e) = aborted {
                tracing::warn!(group = self.index, error = %e, "the abort did not settle on every end");
                unsettled = Some(error_chain(&e));
            }
        }
        tracing::warn!(group = self.index, reason = %stop.reason(), "aborted before the decision");
        GroupEnd::Aborted { stop, unsettled }
    }

    /// The decision, durable before any commit is sent, then the commits, the wait for
    /// every end to complete and the rows each shows. From the decision on, only forward.
    async fn commit(mut self) -> GroupEnd {
        let attempt = self.attempt;
        let ends = attempt.ends;
        let ready_at = Instant::now();
        if !faults::planted(faults::Bug::NoDecision) {
            attempt.enter_phase(RestorePhase::Deciding);
            let decision = Decision::Commit {
                at: Timestamp::now(),
            };
            let decided = attempt.write(Change::Decided {
                group: self.index,
                decision,
            });
            if let Err(e) = decided.await {
                // Not durable, so not decided: nothing was committed. The jobs stay held,
                // as after a crash, for `recover` to decide from what reached the journal
                // (a write that failed may still have landed).
                return GroupEnd::Undecided(format!(
                    "the commit decision could not be made durable ({}); nothing was \
                     committed and the jobs are still held: run `lockstep recover` once the \
                     journal can be written",
                    error_chain(&e)
                ));
            }
        }
        faults::crash_point("after-decision");
        attempt.note(Change::Reaction(ready_at.elapsed()));
        let deadline = Instant::now() + DEFAULT_CALL_DEADLINE;
        let committed = two_phase::commit(ends, attempt, &self.tracker, &self.jobs, deadline);
        // A host that lost the claim after the decision leaves the commits to the new
        // holder, which finds the decision and rolls it forward.
        let mut divergences = match committed.await {
            Ok(divergences) => divergences,
            Err(lost) => {
                return GroupEnd::Committed {
                    divergences: Vec::new(),
                    unfinished: Some(lost.to_string()),
                };
            }
        };
        faults::crash_point("after-commit");
        // The commits went out: what is left is every end's completion, and what a watcher
        // sees says so now. The record's phase moves once the restore concludes, by a write
        // of its own: a journal that cannot take it then fails the run (DESIGN §2).
        (attempt.engine.progress).phase(attempt.id.as_str(), RestorePhase::Completing);
        let completion = Instant::now()
            + (self.groups.job.two_phase.completion_timeout).unwrap_or(DEFAULT_COMPLETION_TIMEOUT);
        let published = self.published;
        let publish = |t: &Tracker| published.send_modify(|p| t.copy_to(p));
        let (more, finished) = two_phase::complete(
            ends,
            attempt,
            &mut self.tracker,
            &self.jobs,
            Some(completion),
            &publish,
        )
        .await;
        divergences.extend(more);
        if !faults::planted(faults::Bug::SkipRows) {
            let deadline = Instant::now() + self.call_timeout();
            let after = rows::after_commit(ends, &mut self.tracker, &self.jobs, deadline);
            divergences.extend(after.await);
        }
        self.publish();
        let unfinished = (!finished).then(|| {
            format!(
                "not every end reported Completed within the completion timeout: {}",
                self.tracker.not_completed(&self.jobs)
            )
        });
        GroupEnd::Committed {
            divergences,
            unfinished,
        }
    }
}

/// One group's submit: which group, and where its answers go.
struct Submitting<'s> {
    index: usize,
    /// The group's first batch, numbered across the restore's groups.
    first_batch: usize,
    tracker: &'s mut Tracker,
    /// Where the batches go whose create failed after an answer was lost.
    unanswered: &'s mut Vec<usize>,
    published: &'s watch::Sender<Tracker>,
    key: CreateKey,
}

/// Creates group `index`'s jobs on the target, each once its batch's files are staged, and
/// publishes each job id as it comes. Every key is recorded as possibly sent before any
/// create goes out, so a crash mid-submit leaves recovery a key to look each job up by.
async fn submit(
    attempt: &Attempt<'_>,
    groups: &Groups<'_>,
    to: Submitting<'_>,
) -> Result<(), Error> {
    let Submitting {
        index,
        first_batch,
        tracker,
        unanswered,
        published,
        key,
    } = to;
    let gate = groups.gate;
    if !gate.batch_ready(first_batch).await {
        return Err(StageError::GateFailed.into());
    }
    // Written with the keys below.
    attempt.enter_phase(RestorePhase::Importing);
    attempt.write(Change::CreatesSent(index)).await?;
    faults::crash_point("after-intent");
    let target = attempt.ends.target();
    let call_timeout = groups
        .job
        .two_phase
        .commit_timeout
        .unwrap_or(DEFAULT_CALL_DEADLINE);
    let batches = &groups.restore.groups[index].batches;
    // By index: a closure over a borrowed item would keep the restore's future from being
    // `Send` (rust-lang/rust#102211).
    let mut creates = futures::stream::iter(0..batches.len())
        .map(|i| async move {
            if !gate.batch_ready(first_batch + i).await {
                return (i, None);
            }
            let deadline = Instant::now() + call_timeout;
            let created = create::create_held(target, attempt, &batches[i].planned, key, deadline);
            (i, Some(created.await))
        })
        .buffer_unordered(CREATES_IN_FLIGHT);
    let mut first_error = None;
    let mut unstaged = false;
    while let Some((i, result)) = creates.next().await {
        match result {
            // The creates in flight finish, and no more go out: each asks the fence.
            Some(Err(lost)) => {
                if first_error.is_none() {
                    first_error = Some(Error::Lost(lost));
                }
            }
            Some(Ok(Ok(id))) => {
                tracker.jobs[i].job_id = Some(id.clone());
                published.send_modify(|t| t.jobs[i].job_id = Some(id.clone()));
                let id = Some(id);
                attempt.note(Change::JobId {
                    group: index,
                    batch: i,
                    id,
                });
            }
            // The attempt stops at once, so that the stage and the other groups stop now
            // rather than when the last batch was staged.
            Some(Ok(Err(failed))) => {
                if failed.answer_lost {
                    unanswered.push(i);
                }
                if first_error.is_none() {
                    attempt.stop();
                    first_error = Some(create_failed(failed.error));
                }
            }
            None => unstaged = true,
        }
    }
    drop(creates);
    attempt.persist().await?;
    faults::crash_point("after-submit");
    match first_error {
        None if unstaged => Err(StageError::GateFailed.into()),
        None => Ok(()),
        Some(error) => Err(error),
    }
}

/// Watches the jobs a group created so far, as it publishes them, while the rest wait on
/// the stage, which can take hours: a job that fails on any end, or a mirror past its
/// grace, fails the restore now rather than once the last batch was staged, and so stops
/// the stage and the creates not sent yet. Returns why once it found a reason; never
/// otherwise.
///
/// A job every end was seen holding is left to the hold after the stage: each round then
/// copies and asks about what is still moving, not every job created so far (at 10,000
/// collections, 40,000 jobs copied every three seconds for most of the restore).
async fn sentry(ends: &Ends, published: &watch::Sender<Tracker>, grace: Duration) -> HoldError {
    let mut held_everywhere: Vec<bool> = Vec::new();
    loop {
        tokio::time::sleep(SENTRY_EVERY).await;
        let (mut moving, watched) = {
            let all = published.borrow();
            held_everywhere.resize(all.jobs.len(), false);
            let watched: Vec<usize> = (0..all.jobs.len())
                .filter(|&j| !held_everywhere[j] && all.jobs[j].job_id.is_some())
                .collect();
            let moving = Tracker {
                end_names: all.end_names.clone(),
                jobs: watched.iter().map(|&j| all.jobs[j].clone()).collect(),
            };
            (moving, watched)
        };
        if watched.is_empty() {
            continue;
        }
        // One round of the hold: it stops on what would stop the hold itself.
        let every: Vec<usize> = (0..watched.len()).collect();
        let round = two_phase::hold(
            ends,
            &mut moving,
            &every,
            grace,
            None,
            FirstLook::Now,
            &|_| {},
        );
        if let Ok(Err(error)) = tokio::time::timeout(SENTRY_EVERY, round).await {
            return error;
        }
        for (job, j) in moving.jobs.iter().zip(watched) {
            held_everywhere[j] = job.held_everywhere();
        }
    }
}

/// A hold's failure as the restore's. A mirror that found no files on a secondary lockstep
/// staged nothing into says what to add: the secondary's storage, so that the next restore
/// stages there.
fn held_failure(job: &Job, error: HoldError) -> StageError {
    let unstaged = match &error {
        HoldError::JobFailed {
            job: held,
            role: Role::Secondary,
            reason,
        } if milvus::found_no_files(reason) => job
            .secondaries
            .iter()
            .find(|s| s.storage.is_none() && s.end.name.as_str() == held.end),
        _ => None,
    };
    match unstaged {
        Some(s) => StageError::Unstaged {
            secondary: s.end.name.to_string(),
            error: Box::new(error),
        },
        None => StageError::Hold(Box::new(error)),
    }
}

/// What a refused create means for the restore.
fn create_failed(e: milvus::Error) -> Error {
    if e.is_replicated_import_disabled() {
        Error::Refused(vec![Refusal::ReplicatedImportDisabled {
            reason: error_chain(&e),
        }])
    } else {
        StageError::Create(e).into()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::testing::{env, host};
    use crate::engine::two_phase::HeldJob;
    use crate::milvus::MilvusJobId;

    /// A job on the job tests' host config whose second secondary, known by URI alone, has
    /// no storage.
    fn job() -> Job {
        let text = "backup = \"b\"\ntarget = \"prod-a\"\n\
                    secondaries = [\"prod-b\", \"http://10.0.0.9:19530\"]\n";
        Job::from_str_with_env(text, Path::new("jobs/t.toml"), &host(), &env).expect("a valid job")
    }

    fn failed_on(end: &str, reason: &str) -> HoldError {
        HoldError::JobFailed {
            job: HeldJob {
                job: MilvusJobId("7".into()),
                batch: "default.c/p/data-0".into(),
                end: end.into(),
            },
            role: Role::Secondary,
            reason: reason.into(),
        }
    }

    #[test]
    fn a_mirror_without_files_on_an_unstaged_secondary_says_to_give_it_storage() {
        let job = job();
        let unstaged = job
            .secondaries
            .iter()
            .find(|s| s.storage.is_none())
            .expect("the secondary known by URI alone")
            .end
            .name
            .to_string();
        let no_files = failed_on(&unstaged, "no binlog to import under the path");
        let hinted = held_failure(&job, no_files);
        assert!(
            matches!(&hinted, StageError::Unstaged { secondary, .. } if *secondary == unstaged),
            "{hinted:?}"
        );
        assert_eq!(
            hinted.to_string(),
            format!(
                "job 7 (default.c/p/data-0) failed on secondary {unstaged}: no binlog to import \
                 under the path; nothing was staged on {unstaged} because the host config gives \
                 it no storage: add `storage` to its cluster (or `require_staging = true` to \
                 refuse this up front)"
            )
        );
        // A secondary that was staged into, or another failure, is the hold's own.
        let staged = held_failure(&job, failed_on("prod-b", "no binlog to import"));
        assert!(matches!(staged, StageError::Hold(_)), "{staged:?}");
        let other = held_failure(&job, failed_on(&unstaged, "disk quota exceeded"));
        assert!(matches!(other, StageError::Hold(_)), "{other:?}");
    }
}
