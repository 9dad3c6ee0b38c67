//! One attempt of a restore, in two parts. The [`Keeper`] owns its journal record and alone
//! writes it: the phases, what was created, the commit groups and their decisions, the
//! progress snapshot, and the fence. The [`Attempt`] is the handle the engine's stages act
//! through: it sends the keeper typed [`Change`]s, waits for the answer of those that must be
//! durable before the stage goes on (a decision, the keys before the creates), and asks the
//! keeper's fence before every action on an end. The keeper serves the handle while the
//! work runs ([`Keeper::run`]) and seals the report when it is done ([`Keeper::finish`]).
//!
//! One keeper, one order: a save never races another save or a fence check, so a check
//! never mistakes its own host's write for someone else's, and a stale snapshot never
//! overwrites a newer one.

use std::ops::Deref;
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::ends::Ends;
use super::error::StageError;
use super::faults;
use super::fence::{Fence, Lost};
use super::process::Engine;
use super::refusal::Refusal;
use super::report::{self, Report};
use super::two_phase::Tracker;
use crate::diagnostic::error_chain;
use crate::job::Job;
use crate::journal::{
    self, Claim, CommitGroup, CreatedCollection, Decision, EndProgress, Outcome, ProgressSnapshot,
    RecordedVerify, RestoreId, RestorePhase, RestoreRecord, StoredReport,
};
use crate::milvus::MilvusJobId;

/// How often, at most, a running restore writes a changed progress snapshot between
/// phase changes: fresh enough for a status page, rare enough for the journal.
const PROGRESS_EVERY: Duration = Duration::from_secs(3);

/// A progress write rewrites the whole record, which grows with the restore's batches: the
/// pause after one is also at least this many times what it took, so that progress takes at
/// most a tenth of the keeper's time however large the restore. At 10,000 collections a
/// write every 3 s made the journal's share of the CPU grow with the square of the restore.
const PROGRESS_PAUSE_PER_WRITE: u32 = 10;

/// The pause before the next progress write after one that took `took`.
fn progress_pause(took: Duration) -> Duration {
    PROGRESS_EVERY.max(took * PROGRESS_PAUSE_PER_WRITE)
}

/// A change to an attempt's record, as a stage tells it to the keeper.
#[derive(Debug)]
pub(super) enum Change {
    /// The phase moves forward (never back).
    Phase(RestorePhase),
    /// The collections the DDL will create, recorded before it starts.
    ToCreate(Vec<(String, String)>),
    /// A collection the DDL created, with the id the target gave it.
    Created(CreatedCollection),
    /// The commit groups and where the files are staged, before anything is created,
    /// staged or submitted.
    Planned {
        groups: Vec<CommitGroup>,
        staging: Option<(String, Vec<String>)>,
        verify: Option<RecordedVerify>,
    },
    /// Every create of group `0` may go out from now on.
    CreatesSent(usize),
    /// A create's answer: the job id of batch `batch` of group `group`.
    JobId {
        group: usize,
        batch: usize,
        id: Option<MilvusJobId>,
    },
    /// A group's decision. A commit decision whose own write fails is taken back, so that
    /// no later write makes it durable.
    Decided {
        group: usize,
        decision: Decision,
    },
    Progress(ProgressSnapshot),
    /// The time from "every end ready" to "commit sent" of one group; the slowest is kept.
    Reaction(Duration),
    /// What a recovery left: staged files still to delete, and whether the host that
    /// held the restore was lost before its decision.
    Recovered {
        stage_left: bool,
        host_lost: bool,
    },
}

enum Request {
    /// Applied, and written with the next write.
    Note(Change),
    /// Applied and written; the answer says whether it is durable.
    Write(Option<Change>, oneshot::Sender<Result<(), StageError>>),
}

type FenceReply = oneshot::Sender<Result<(), Lost>>;

/// The keeper's side of the handle's channels.
pub(super) struct Inbox {
    requests: mpsc::UnboundedReceiver<Request>,
    fences: mpsc::UnboundedReceiver<FenceReply>,
}

/// The handle of one attempt that the engine's stages act through. It holds no state of
/// the attempt's but the stop token: the record is the keeper's.
pub(super) struct Attempt<'a> {
    pub engine: &'a Engine,
    pub ends: &'a Ends,
    /// The job, when the restore is run from it (not when recovered from its record).
    pub job: Option<&'a Job>,
    pub id: RestoreId,
    requests: mpsc::UnboundedSender<Request>,
    fences: mpsc::UnboundedSender<FenceReply>,
    /// [`Fence::send_by`]: set by each check that passes.
    send_by: std::sync::Mutex<Option<std::time::Instant>>,
    /// Cancelled once the attempt fails before its decision, or its host lost the claim:
    /// the stage, the wait for arrivals, the import gate and the creates not sent yet stop
    /// on it, and undecided groups abort.
    stop: CancellationToken,
}

impl<'a> Attempt<'a> {
    /// The handle and the keeper of an attempt of `record`, and the keeper's inbox.
    pub fn new(
        engine: &'a Engine,
        ends: &'a Ends,
        claim: &'a dyn Claim,
        record: RestoreRecord,
        job: Option<&'a Job>,
    ) -> (Attempt<'a>, Keeper<'a>, Inbox) {
        let (requests, requests_in) = mpsc::unbounded_channel();
        let (fences, fences_in) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let attempt = Attempt {
            engine,
            ends,
            job,
            id: record.id.clone(),
            requests,
            fences,
            send_by: std::sync::Mutex::new(None),
            stop: stop.clone(),
        };
        let keeper = Keeper {
            engine,
            claim,
            record,
            written_progress: None,
            lost: None,
            stop,
            phase_starts: Vec::new(),
            reaction: None,
        };
        let inbox = Inbox {
            requests: requests_in,
            fences: fences_in,
        };
        (attempt, keeper, inbox)
    }

    /// Tells the keeper `change`, to be written with the next write.
    pub fn note(&self, change: Change) {
        // The keeper outlives every stage that holds the handle.
        let _ = self.requests.send(Request::Note(change));
    }

    /// Applies `change` and writes the record durably.
    pub async fn write(&self, change: Change) -> Result<(), StageError> {
        self.send_write(Some(change)).await
    }

    /// Writes the record durably with every change noted so far.
    pub async fn persist(&self) -> Result<(), StageError> {
        self.send_write(None).await
    }

    async fn send_write(&self, change: Option<Change>) -> Result<(), StageError> {
        let (reply, answer) = oneshot::channel();
        let _ = self.requests.send(Request::Write(change, reply));
        answer.await.unwrap_or_else(|_| Err(self.keeper_gone()))
    }

    /// What a request meets once the keeper stopped serving: nothing is written any more.
    fn keeper_gone(&self) -> StageError {
        StageError::Journal(journal::Error::ClaimLost(self.id.clone()))
    }

    /// Moves the record to `phase` without writing it: for a phase change that the write
    /// right after it makes durable.
    pub fn enter_phase(&self, phase: RestorePhase) {
        self.note(Change::Phase(phase));
    }

    /// Moves the record to `phase` and writes it, if that is a change.
    pub async fn set_phase(&self, phase: RestorePhase) -> Result<(), StageError> {
        self.write(Change::Phase(phase)).await
    }

    /// Stops everything waiting on [`Attempt::stopped`]: the attempt failed before its
    /// decision. Its caller returns the failure as its `Err`.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Whether the attempt failed before its decision, or its host lost the claim.
    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Cancelled once the attempt stopped: for the stages that stop on it.
    pub fn stop_token(&self) -> &CancellationToken {
        &self.stop
    }

    /// Returns once the attempt stopped; never if it does not.
    pub async fn stopped(&self) {
        self.stop.cancelled().await;
    }

    /// Runs `work`, stopping the attempt if it fails: for the parts that run side by side,
    /// so that the others stop on the first failure.
    pub async fn stopping_on_error<T, E>(
        &self,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let out = work.await;
        if out.is_err() {
            self.stop();
        }
        out
    }

    /// Shows the groups' trackers: the progress display now, and the record's progress
    /// snapshot with the next progress write.
    pub fn show(&self, trackers: &[impl Deref<Target = Tracker>]) {
        let mut counts = trackers.first().map(|t| t.counts()).unwrap_or_default();
        for t in trackers.iter().skip(1) {
            for ((_, total), (_, more)) in counts.iter_mut().zip(t.counts()) {
                for (state, n) in more {
                    *total.entry(state).or_default() += n;
                }
            }
        }
        self.engine.progress.jobs(self.id.as_str(), &counts);
        self.note(Change::Progress(progress_snapshot(trackers)));
    }
}

/// How many times a fence answer that came too late is asked for again before the attempt
/// takes its claim as lost.
const FENCE_ASKS: usize = 3;

impl Fence for Attempt<'_> {
    fn send_by(&self) -> Option<std::time::Instant> {
        *self.send_by.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The keeper's answer, provided it came within the journal's [`Journal::fence_fresh`]
    /// of asking: an answer that took longer may have waited out a pause of this host (its
    /// answer held in a socket while the process was stopped) during which another host took
    /// the restore over, and acting on it would act on that host's collections (fleet seed
    /// 492: a rollback's drop, woken 9 s late, dropped the collection the next attempt had
    /// committed). Asked again, it fails if the claim is gone.
    ///
    /// [`Journal::fence_fresh`]: crate::journal::Journal::fence_fresh
    fn check(&self) -> BoxFuture<'_, Result<(), Lost>> {
        Box::pin(async move {
            let fresh = self.engine.journal.fence_fresh();
            for _ in 0..FENCE_ASKS {
                let asked = tokio::time::Instant::now();
                let (reply, answer) = oneshot::channel();
                let _ = self.fences.send(reply);
                answer.await.unwrap_or_else(|_| {
                    Err(Lost {
                        id: self.id.clone(),
                        reason: "the attempt is over".into(),
                    })
                })?;
                super::faults::crash_point("fence-answered");
                let took = asked.elapsed();
                match fresh {
                    Some(fresh) if took > fresh => {
                        tracing::warn!(restore = %self.id, ?took, ?fresh, "the fence's answer came too late to act on; asking again");
                    }
                    Some(fresh) => {
                        let until = asked.into_std() + fresh;
                        let mut send_by = self.send_by.lock().unwrap_or_else(|e| e.into_inner());
                        *send_by = (*send_by).max(Some(until));
                        return Ok(());
                    }
                    None => return Ok(()),
                }
            }
            Err(Lost {
                id: self.id.clone(),
                reason: format!(
                    "{FENCE_ASKS} answers of the journal in a row came too late to act on (a pause of this host, or a journal that slow)"
                ),
            })
        })
    }
}

/// The owner of an attempt's record: it alone changes and writes it, in the order its
/// handle's requests come.
pub(super) struct Keeper<'a> {
    engine: &'a Engine,
    claim: &'a dyn Claim,
    record: RestoreRecord,
    /// The progress snapshot as last written: a progress write is due only when the
    /// snapshot moved since.
    written_progress: Option<ProgressSnapshot>,
    /// Set once this host no longer holds the restore: from then on it acts on no end and
    /// writes no record.
    lost: Option<Lost>,
    stop: CancellationToken,
    /// When each phase this process saw began, in order: the report's `phases`.
    phase_starts: Vec<(RestorePhase, Timestamp)>,
    /// The slowest time from "every end ready" to "commit sent" across groups.
    reaction: Option<Duration>,
}

impl Keeper<'_> {
    /// The record as the keeper has it, every change told so far applied.
    pub fn record(&self) -> &RestoreRecord {
        &self.record
    }

    /// Serves the handle's requests while `work` runs, and the progress writes, then
    /// every request `work` left. Every use of the handle happens inside a `run`.
    pub async fn run<T>(&mut self, inbox: &mut Inbox, work: impl Future<Output = T>) -> T {
        let (done, finished) = oneshot::channel();
        // On the heap: the engine's futures are large, and a thread's stack is not.
        let work = Box::pin(async {
            let out = work.await;
            let _ = done.send(());
            out
        });
        let (out, ()) = tokio::join!(work, self.serve(inbox, finished));
        out
    }

    async fn serve(&mut self, inbox: &mut Inbox, mut finished: oneshot::Receiver<()>) {
        let progress = tokio::time::sleep(PROGRESS_EVERY);
        tokio::pin!(progress);
        loop {
            tokio::select! {
                biased;
                Some(request) = inbox.requests.recv() => self.handle(request).await,
                Some(reply) = inbox.fences.recv() => {
                    // Every check asked while this one waited is answered by it: it is
                    // made after each of them was asked.
                    let mut replies = vec![reply];
                    while let Ok(more) = inbox.fences.try_recv() {
                        replies.push(more);
                    }
                    let answer = self.fence().await;
                    for reply in replies {
                        let _ = reply.send(answer.clone());
                    }
                }
                _ = &mut finished => break,
                () = &mut progress => {
                    let started = tokio::time::Instant::now();
                    self.write_progress().await;
                    let next = tokio::time::Instant::now() + progress_pause(started.elapsed());
                    progress.as_mut().reset(next);
                }
            }
        }
        // What the work sent before it finished, none of it awaited.
        while let Ok(request) = inbox.requests.try_recv() {
            self.handle(request).await;
        }
    }

    async fn handle(&mut self, request: Request) {
        match request {
            Request::Note(change) => self.apply(change),
            Request::Write(change, reply) => {
                let taken_back = match change {
                    Some(Change::Decided { group, decision }) => {
                        let before = self.record.groups[group].decision.replace(decision);
                        Some((group, before))
                    }
                    Some(Change::Phase(phase)) if self.record.phase >= phase => {
                        let _ = reply.send(Ok(()));
                        return;
                    }
                    Some(change) => {
                        self.apply(change);
                        None
                    }
                    None => None,
                };
                let saved = self.save().await;
                if saved.is_err()
                    && let Some((group, before)) = taken_back
                {
                    self.record.groups[group].decision = before;
                }
                let _ = reply.send(saved);
            }
        }
    }

    fn apply(&mut self, change: Change) {
        let r = &mut self.record;
        match change {
            Change::Phase(phase) => {
                if r.phase >= phase {
                    return;
                }
                r.phase = phase;
                self.phase_starts.push((phase, Timestamp::now()));
                self.engine.progress.phase(r.id.as_str(), phase);
            }
            Change::ToCreate(to_create) => r.to_create = to_create,
            Change::Created(c) => r.created_collections.push(c),
            Change::Planned {
                groups,
                staging,
                verify,
            } => {
                r.groups = groups;
                r.verify = verify;
                if let Some((prefix, ends)) = staging {
                    r.staging_prefix = Some(prefix);
                    r.staged_ends = ends;
                }
            }
            Change::CreatesSent(group) => {
                for b in &mut r.groups[group].batches {
                    b.create_sent = true;
                }
            }
            Change::JobId { group, batch, id } => r.groups[group].batches[batch].job_id = id,
            Change::Decided { group, decision } => r.groups[group].decision = Some(decision),
            Change::Progress(snapshot) => r.progress = Some(snapshot),
            Change::Reaction(reaction) => {
                self.reaction = Some(self.reaction.map_or(reaction, |old| old.max(reaction)));
            }
            Change::Recovered {
                stage_left,
                host_lost,
            } => {
                r.stage_left = stage_left;
                r.host_lost = host_lost;
            }
        }
    }

    /// Writes the record as it is now: every change told so far, noted or not. A noted
    /// change may become durable with any write (another group's, or progress): only a
    /// decision must wait for its own, and [`Keeper::handle`] applies and writes it with
    /// nothing in between, taking it back if the write fails.
    pub async fn save(&mut self) -> Result<(), StageError> {
        if self.lost.is_some() {
            return Err(StageError::Journal(journal::Error::ClaimLost(
                self.record.id.clone(),
            )));
        }
        self.record.updated_at = Timestamp::now();
        if let Err(e) = self.engine.journal.save(self.claim, &self.record).await {
            if matches!(e, journal::Error::ClaimLost(_)) {
                self.lose(&e);
            }
            return Err(StageError::Journal(e));
        }
        self.written_progress.clone_from(&self.record.progress);
        Ok(())
    }

    /// Writes the record if its progress snapshot moved since the last write; a failed
    /// write is only logged: the restore's own next write meets the same journal and
    /// decides what it means.
    async fn write_progress(&mut self) {
        if self.written_progress == self.record.progress {
            return;
        }
        if let Err(e) = self.save().await {
            tracing::warn!(error = %error_chain(&e), "could not write the progress snapshot");
        }
    }

    /// Whether this host still holds the restore, asked of the journal.
    async fn fence(&mut self) -> Result<(), Lost> {
        // As if every action fell in the window between a check and its call.
        if faults::planted(faults::Bug::Unfenced) {
            return Ok(());
        }
        if let Some(lost) = &self.lost {
            return Err(lost.clone());
        }
        match self.engine.journal.fence(self.claim).await {
            Ok(()) => Ok(()),
            // Not knowing is not holding: an etcd that cannot answer cannot vouch for the
            // lease either.
            Err(e) => Err(self.lose(&e)),
        }
    }

    /// Records that the claim is gone (`why`) and stops the attempt: everything waiting
    /// on the stop token wakes, and finds every action fenced.
    fn lose(&mut self, why: &journal::Error) -> Lost {
        let lost = self
            .lost
            .get_or_insert_with(|| Lost {
                id: self.record.id.clone(),
                reason: error_chain(why),
            })
            .clone();
        tracing::error!(%lost, "stopping: this host no longer holds the restore");
        self.stop.cancel();
        lost
    }

    /// Seals a report: outcome, finish time, journal record, JSON and text files. An
    /// attempt whose host lost the claim ends [`Outcome::Lost`] whatever it found, and
    /// writes only its local report: the record is the new holder's.
    pub async fn finish(
        mut self,
        mut report: Report,
        outcome: Outcome,
        refusals: Vec<Refusal>,
    ) -> Report {
        let engine = self.engine;
        let outcome = match &self.lost {
            Some(lost) => {
                let (outcome, summary) = super::outcome::lost(lost);
                report.summary = summary;
                outcome
            }
            None => outcome,
        };
        report.outcome = outcome;
        report.set_refusals(&refusals);
        report.tally_imported();
        report.reaction_ms = self
            .reaction
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        report.finished_at = Timestamp::now();
        report.phases =
            report::phase_times(&self.phase_starts, report.started_at, report.finished_at);
        if report.summary.is_empty() {
            report.summary = outcome.to_string();
        }
        faults::crash_point("before-report");
        self.record.outcome = Some(outcome);
        self.record.phase = RestorePhase::Finished;
        self.record.report = StoredReport::of(&report).ok();
        if self.lost.is_some() {
            // No write: the record is no longer this host's.
        } else if let Err(e) = self.save().await {
            // The ends are as the report says; only the journal lags. Say so where the
            // operator reads, since `status` shows the restore unfinished until `recover`
            // (or the next run of the job) records it.
            let e = error_chain(&e);
            tracing::error!(error = %e, "could not write the final journal record");
            report.summary = format!(
                "{}. The journal could not record this outcome ({e}): `lockstep recover {}` \
                 records it once the journal can be written",
                report.summary, report.restore_id
            );
        }
        engine
            .progress
            .phase(&report.restore_id, RestorePhase::Finished);
        write_report_files(engine, &report);
        report
    }
}

/// Job states and rows per end over every commit group's tracker.
fn progress_snapshot(trackers: &[impl Deref<Target = Tracker>]) -> ProgressSnapshot {
    let mut snapshot = ProgressSnapshot {
        rows_exact: true,
        ..ProgressSnapshot::default()
    };
    for tracker in trackers {
        if snapshot.ends.is_empty() {
            snapshot.ends = (tracker.end_names.iter())
                .map(|end| EndProgress {
                    end: end.clone(),
                    ..EndProgress::default()
                })
                .collect();
        }
        for job in tracker.jobs.iter().filter(|j| j.job_id.is_some()) {
            if let Some(expected) = job.expected {
                // The rows read from the data where they were read: they take the L0 deletes
                // folded into the job, which the meta's own deletes do not count.
                let meta = expected.inserted - expected.deletes.unwrap_or(0);
                snapshot.rows_expected += expected.exact.unwrap_or(meta);
                snapshot.rows_exact &= expected.exact.is_some() || expected.deletes.is_some();
            }
            for (end, (seen, imported)) in snapshot
                .ends
                .iter_mut()
                .zip(job.seen.iter().zip(&job.imported))
            {
                if let Some(seen) = seen {
                    *end.jobs.entry(seen.state).or_default() += 1;
                }
                end.rows_imported += imported.unwrap_or(0);
            }
        }
    }
    snapshot
}

/// `{reports_dir}/{restore_id}.json` and `.txt`, plus `{job_name}.latest.json`.
fn write_report_files(engine: &Engine, report: &Report) {
    if report.restore_id.is_empty() {
        return;
    }
    let write = || -> std::io::Result<()> {
        let json = report.write_files(&engine.reports_dir)?;
        let latest = format!(
            "{}.latest.json",
            journal::RestoreId::content_prefix(&report.job_name, "").trim_end_matches('.')
        );
        // The copy takes the report's own mode, 0600.
        std::fs::copy(&json, engine.reports_dir.join(latest)).map(drop)
    };
    if let Err(e) = write() {
        tracing::error!(error = %e, dir = %engine.reports_dir.display(), "could not write the report files");
    }
}
