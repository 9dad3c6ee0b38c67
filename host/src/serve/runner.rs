//! Which restores run, when, and how many at once. Both the watched directory and the API
//! hand jobs to one [`Runner`]; the journal, not memory, decides whether a job content
//! already ran, so a restart or another host of the fleet sees the same answer.
//!
//! A job's identity is its name plus its content hash (the journal's
//! [`RestoreId::content_prefix`]). One identity has at most one task in a process, whoever
//! asked for it; across the fleet, the journal's claims make one host act and the others
//! wait: a host that finds the claim taken re-checks every [`RECHECK_EVERY`] until the
//! restore finished or the claim is free again (its holder died and the lease expired), and
//! then recovers it. A sweep every [`SWEEP_EVERY`] does the same for unfinished restores no
//! task here works on.
//!
//! Whoever finds a restore lost with its host, the rule for what follows is one: the job's
//! own loop ([`Runner::drive`]) recovers the lost attempt and asks the journal for the next
//! step, which runs the next attempt up to `max_attempts` while the job is unchanged. The
//! sweep hands a restore a job here still asks for to that loop; one no job here asks for
//! (submitted through another host's API, or whose file was deleted) it recovers from the
//! record alone, and the host that has the job runs the next attempt when its loop looks.
//!
//! Bounded: at most `max_parallel` restores run and the host config's `max_queued` more wait
//! for a slot (a job asked for again joins its task, and the sweep's recoveries are never
//! refused); beyond that an asker is told [`QueueFull`] and nothing is kept of it. A task
//! leaves the runner's maps when it ends; what a job asked for through the API wanted then
//! goes too, so that what ran is found in the journal, and memory holds only what is
//! running, waiting, or asked for by a job file still in the watched directory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{Notify, Semaphore, watch};

use super::{LiveProgress, reports};
use crate::config::HostConfig;
use crate::engine::{self, Ends, Engine, Interrupt, Progress, Report};
use crate::job::Job;
use crate::journal::{self, Journal, Outcome, RequestedBy, RestoreId, RestoreRecord};
use crate::plugins::LazyRuntime;

/// How often a host waiting on another host's claim looks again: a takeover happens within
/// this of the lease's expiry.
pub const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// How often unfinished restores nobody here asked for are looked for.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// How often every record is read, to find those that do not read among the ones no listing
/// shows: the one read of the whole history `serve` makes, so it is seldom.
pub const AUDIT_EVERY: Duration = Duration::from_secs(600);

/// How long a client refused with [`QueueFull`] is told to wait before asking again
/// (`Retry-After`): a small restore takes seconds, so a slot is likely free by then, and a
/// client that obeys costs one request every 10 s.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

/// Every slot is taken and `max_queued` restores already wait for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "{tracked} restores are running or waiting here, the most this host takes (max_parallel \
     {max_parallel} + max_queued {max_queued} in the host config): ask again once one ended"
)]
pub struct QueueFull {
    pub tracked: usize,
    pub max_parallel: usize,
    pub max_queued: usize,
}

/// Whether a new task is held to the queue limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// An asker's: refused with [`QueueFull`] beyond it.
    Bounded,
    /// The sweep's recovery of a restore nobody here holds: it must run whatever waits.
    Always,
}

/// Whether a job content that ran and failed runs again when asked again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rerun {
    /// Never: the same content runs once whatever its outcome (job files: to run it again,
    /// change it).
    Never,
    /// After a rollback or refusal a new attempt runs (API requests, as `lockstep run`).
    AfterFailure,
}

/// How a restore task ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// The report of the restore (run here, recovered here, or found in the journal).
    Report(Box<Report>),
    /// Cancelled before anything ran.
    NothingRan,
}

/// A caller's view of a restore task: its identity and its end.
#[derive(Clone)]
pub struct RestoreHandle {
    pub identity: String,
    ended: watch::Receiver<Option<Ended>>,
}

impl RestoreHandle {
    /// Waits for the task's end.
    pub async fn ended(&self) -> Ended {
        let mut rx = self.ended.clone();
        loop {
            if let Some(ended) = rx.borrow_and_update().clone() {
                return ended;
            }
            if rx.changed().await.is_err() {
                // The task is gone without saying how it ended: it panicked.
                return Ended::NothingRan;
            }
        }
    }
}

struct Active {
    generation: u64,
    /// Raises the restore's own interrupt: cancels it if it has not decided.
    cancel: watch::Sender<bool>,
    wanted_by: usize,
    handle: RestoreHandle,
}

/// What the journal says to do next for a job.
enum Step {
    Done(Option<Box<Report>>),
    /// Another process holds the claim.
    Wait,
    Recover(Box<RestoreRecord>),
    /// A new attempt; with why, when it follows one lost with its host.
    Run(Option<String>),
}

/// Runs restores for a watcher and an API over one journal.
pub struct Runner {
    journal: Arc<dyn Journal>,
    /// How the journal's calls went, for `/metrics`.
    journal_stats: Arc<journal::measured::Stats>,
    host: HostConfig,
    reports_dir: PathBuf,
    plugins: LazyRuntime,
    progress: Arc<LiveProgress>,
    /// The process-wide interrupt (Ctrl-C, SIGTERM), forwarded into every restore.
    shutdown: Interrupt,
    slots: Arc<Semaphore>,
    max_parallel: usize,
    /// Tasks beyond `max_parallel` that may wait for a slot.
    max_queued: usize,
    /// Told each time a task ends: a job file waiting for room tries again.
    freed: Notify,
    // No await happens while these are held.
    active: Mutex<HashMap<String, Active>>,
    /// The jobs asked for here (a job file's content, an API request) by identity, for as
    /// long as some asker still wants them, whether or not their task is running: what the
    /// sweep hands a restore it finds to.
    wanted: Mutex<HashMap<String, Wanted>>,
    generations: std::sync::atomic::AtomicU64,
}

/// A job some asker here wants, and how many do.
struct Wanted {
    job: Job,
    rerun: Rerun,
    /// The latest asker: whom an attempt the sweep starts for this want records.
    requested_by: RequestedBy,
    by: usize,
}

impl Runner {
    pub fn new(
        journal: Arc<dyn Journal>,
        host: HostConfig,
        state_dir: PathBuf,
        progress: Arc<LiveProgress>,
        shutdown: Interrupt,
        max_parallel: usize,
    ) -> Arc<Runner> {
        let (journal, journal_stats) = journal::measured::Measured::wrap(journal);
        Arc::new(Runner {
            journal,
            journal_stats,
            max_queued: host.max_queued,
            host,
            reports_dir: state_dir.join("reports"),
            plugins: LazyRuntime::new(state_dir.join("plugin-cache")),
            progress,
            shutdown,
            slots: Arc::new(Semaphore::new(max_parallel.max(1))),
            max_parallel: max_parallel.max(1),
            freed: Notify::new(),
            active: Mutex::default(),
            wanted: Mutex::default(),
            generations: Default::default(),
        })
    }

    pub fn journal(&self) -> &Arc<dyn Journal> {
        &self.journal
    }

    pub fn journal_stats(&self) -> &journal::measured::Stats {
        &self.journal_stats
    }

    pub fn host(&self) -> &HostConfig {
        &self.host
    }

    pub fn reports_dir(&self) -> &std::path::Path {
        &self.reports_dir
    }

    pub fn progress(&self) -> &Arc<LiveProgress> {
        &self.progress
    }

    /// Identities with a task in this process now.
    pub fn active(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// How many jobs the runner holds: tasks (running or waiting), and jobs some asker
    /// wants. Both go back to 0 once every restore asked for through the API ended and no
    /// job file is watched.
    pub fn tracked(&self) -> (usize, usize) {
        (self.lock().len(), self.wanted_lock().len())
    }

    /// Whether a job file or request here asks for the job identity `identity`.
    pub fn wants(&self, identity: &str) -> bool {
        self.wanted_lock().contains_key(identity)
    }

    /// Resolves once some task ended since the last time it resolved: room for a job
    /// that waits for one.
    pub async fn freed(&self) {
        self.freed.notified().await;
    }

    fn wanted_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Wanted>> {
        self.wanted
            .lock()
            .expect("wanted jobs lock: no panics under it")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Active>> {
        self.active
            .lock()
            .expect("active restores lock: no panics under it")
    }

    /// Asks for `job` to run (once; see [`Rerun`]), after every restore in `after` ended;
    /// the attempts it runs record `requested_by`. Asking again for an identity that has a
    /// task joins that task, whose records keep the asker that started it. The asker wants
    /// it until it [`Runner::release`]s it (a job file, while it is in the directory).
    pub fn start_for(
        self: &Arc<Self>,
        requested_by: RequestedBy,
        job: &Job,
        rerun: Rerun,
        after: &[RestoreHandle],
    ) -> Result<RestoreHandle, QueueFull> {
        let identity = RestoreId::content_prefix(&job.name, job.id().as_str());
        let (task_job, asker, after) = (job.clone(), requested_by.clone(), after.to_vec());
        let handle = self.begin(identity.clone(), Admission::Bounded, |runner, interrupt| {
            Box::pin(async move {
                for earlier in after {
                    earlier.ended().await;
                }
                runner.drive(task_job, rerun, asker, interrupt).await
            })
        })?;
        self.wanted_lock()
            .entry(identity)
            .and_modify(|w| w.requested_by = requested_by.clone())
            .or_insert_with(|| Wanted {
                job: job.clone(),
                rerun,
                requested_by,
                by: 0,
            })
            .by += 1;
        Ok(handle)
    }

    /// [`Runner::start_for`] for an asker that wants the restore only until it ended (an
    /// API request): then it is forgotten here, and found in the journal.
    pub fn ask(
        self: &Arc<Self>,
        requested_by: RequestedBy,
        job: &Job,
        rerun: Rerun,
    ) -> Result<RestoreHandle, QueueFull> {
        let handle = self.start_for(requested_by, job, rerun, &[])?;
        let (runner, ended) = (Arc::clone(self), handle.clone());
        tokio::spawn(async move {
            ended.ended().await;
            runner.unwant(&ended.identity);
        });
        Ok(handle)
    }

    /// Says that one asker no longer wants `handle`'s restore (its job file was deleted or
    /// replaced). When nobody does, the restore is cancelled: aborted if it has not reached
    /// its decision, left to finish if it has.
    pub fn release(&self, handle: &RestoreHandle) {
        self.unwant(&handle.identity);
        let mut active = self.lock();
        if let Some(a) = active.get_mut(&handle.identity) {
            a.wanted_by = a.wanted_by.saturating_sub(1);
            if a.wanted_by == 0 {
                tracing::info!(job = %handle.identity, "no longer wanted: cancelling unless decided");
                let _ = a.cancel.send(true);
            }
        }
    }

    /// One asker fewer wants `identity`; with none left, the job is forgotten.
    fn unwant(&self, identity: &str) {
        let mut wanted = self.wanted_lock();
        if let Some(w) = wanted.get_mut(identity) {
            w.by = w.by.saturating_sub(1);
            if w.by == 0 {
                wanted.remove(identity);
            }
        }
    }

    // The work is boxed as `dyn Send` where it is written: in this generic function rustc
    // cannot prove async blocks that borrow across awaits Send (rust-lang/rust#102211).
    fn begin(
        self: &Arc<Self>,
        identity: String,
        admission: Admission,
        work: impl FnOnce(Arc<Runner>, Interrupt) -> BoxFuture<'static, Ended>,
    ) -> Result<RestoreHandle, QueueFull> {
        let mut active = self.lock();
        if let Some(a) = active.get_mut(&identity) {
            a.wanted_by += 1;
            return Ok(a.handle.clone());
        }
        if admission == Admission::Bounded && active.len() >= self.max_parallel + self.max_queued {
            return Err(QueueFull {
                tracked: active.len(),
                max_parallel: self.max_parallel,
                max_queued: self.max_queued,
            });
        }
        let (cancel, interrupt) = Interrupt::new();
        let (ended_tx, ended_rx) = watch::channel(None);
        let handle = RestoreHandle {
            identity: identity.clone(),
            ended: ended_rx,
        };
        let generation = self
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        active.insert(
            identity.clone(),
            Active {
                generation,
                cancel: cancel.clone(),
                wanted_by: 1,
                handle: handle.clone(),
            },
        );
        drop(active);
        // Ctrl-C reaches every restore through its own interrupt.
        let shutdown = self.shutdown.clone();
        let forward = tokio::spawn(async move {
            if shutdown.race(std::future::pending::<()>()).await.is_err() {
                let _ = cancel.send(true);
            }
        });
        let fut = work(Arc::clone(self), interrupt);
        let runner = Arc::clone(self);
        tokio::spawn(async move {
            let ended = fut.await;
            forward.abort();
            {
                let mut active = runner.lock();
                if active
                    .get(&identity)
                    .is_some_and(|a| a.generation == generation)
                {
                    active.remove(&identity);
                }
            }
            let _ = ended_tx.send(Some(ended));
            runner.freed.notify_one();
        });
        Ok(handle)
    }

    fn engine(&self, interrupt: Interrupt) -> Engine {
        Engine {
            journal: Arc::clone(&self.journal),
            reports_dir: self.reports_dir.clone(),
            plugins: self.plugins.clone(),
            progress: Arc::clone(&self.progress) as Arc<dyn Progress>,
            interrupt,
        }
    }

    /// The life of one job's task: wait for a slot, ask the journal what to do, do it.
    fn drive(
        self: Arc<Self>,
        job: Job,
        rerun: Rerun,
        requested_by: RequestedBy,
        interrupt: Interrupt,
    ) -> BoxFuture<'static, Ended> {
        Box::pin(async move {
            loop {
                let Ok(slot) = interrupt
                    .race(Arc::clone(&self.slots).acquire_owned())
                    .await
                else {
                    return Ended::NothingRan;
                };
                let _slot = slot.expect("the slots semaphore is never closed");
                let step = match self.next_step(&job, rerun).await {
                    Ok(step) => step,
                    Err(e) => {
                        tracing::warn!(job = %job.name, error = %e, "journal unavailable; trying again");
                        Step::Wait
                    }
                };
                match step {
                    Step::Done(report) => {
                        return report.map_or(Ended::NothingRan, Ended::Report);
                    }
                    Step::Wait => {
                        drop(_slot);
                        if !recheck_later(&interrupt).await {
                            return Ended::NothingRan;
                        }
                    }
                    Step::Recover(record) => {
                        let report = match ends_of(&job).await {
                            Ok((job, ends)) => spawn_recover(
                                self.engine(interrupt.clone()),
                                *record,
                                ends,
                                Some(job),
                                self.host.clone(),
                            )
                            .await
                            .expect("a recovery does not panic"),
                            Err(e) => {
                                tracing::warn!(job = %job.name, error = %e, "cannot reach the ends to recover; trying again");
                                drop(_slot);
                                tokio::time::sleep(RECHECK_EVERY).await;
                                continue;
                            }
                        };
                        self.link_latest(&report);
                        // Loop: the journal now says whether anything is left to do.
                    }
                    Step::Run(because) => {
                        if interrupt.is_set() {
                            return Ended::NothingRan;
                        }
                        let engine = self.engine(interrupt.clone());
                        let report = spawn_run(engine, job.clone(), requested_by.clone(), because)
                            .await
                            .expect("a restore does not panic");
                        if report.restore_id.is_empty() {
                            // Refused before any record: either another host claimed the same
                            // attempt a moment ago (its claim, or the record it then wrote,
                            // says so), or a real refusal. The first is never the job's end:
                            // the loop waits on that host like on any other.
                            let busy = report.refusal_kinds.iter().any(|k| k == "busy");
                            let started_elsewhere = busy
                                || self
                                    .journal
                                    .attempts(&job.name, job.id().as_str())
                                    .await
                                    .is_ok_and(|a| !a.is_empty());
                            if started_elsewhere {
                                drop(_slot);
                                if !recheck_later(&interrupt).await {
                                    return Ended::NothingRan;
                                }
                                continue;
                            }
                            let mut report = report;
                            report.restore_id = format!(
                                "{}refused",
                                RestoreId::content_prefix(&job.name, job.id().as_str())
                            );
                            if let Err(e) = reports::write(&self.reports_dir, &report) {
                                tracing::error!(error = %e, "could not write the report");
                            }
                            return Ended::Report(Box::new(report));
                        }
                        self.link_latest(&report);
                        if report.outcome == Outcome::Lost {
                            // Another host holds the attempt now; the journal says what
                            // follows it, by the same rule as for any other takeover.
                            continue;
                        }
                        return Ended::Report(Box::new(report));
                    }
                }
            }
        })
    }

    fn link_latest(&self, report: &Report) {
        if let Err(e) = reports::link_latest(&self.reports_dir, report) {
            tracing::error!(error = %e, "could not link the latest report");
        }
    }

    async fn next_step(&self, job: &Job, rerun: Rerun) -> journal::Result<Step> {
        let attempts = self.journal.attempts(&job.name, job.id().as_str()).await?;
        let next_attempt = match attempts.last() {
            Some(last) if last.is_unfinished() => {
                return Ok(match self.probe(&last.id).await? {
                    true => Step::Recover(Box::new(last.clone())),
                    false => Step::Wait,
                });
            }
            Some(last) => {
                let committed = last.outcome.is_some_and(Outcome::committed);
                // Lost with its host, not failed: the job is not to blame, so it runs
                // again, until the attempts are spent.
                let lost = last.host_lost && last.outcome == Some(Outcome::RolledBack);
                let max = self.host.max_attempts;
                if committed || (rerun == Rerun::Never && !lost) {
                    let outcome = last.outcome.map_or(String::new(), |o| o.to_string());
                    tracing::info!(restore = %last.id, %outcome, "this job content already ran; not running it again");
                    let report = recorded_report(last).map(Report::not_run_again);
                    return Ok(Step::Done(report.map(Box::new)));
                }
                if lost && last.attempt >= max {
                    tracing::error!(restore = %last.id, max_attempts = max, "every attempt was lost with its host; not running it again");
                    let report = recorded_report(last).map(|report| {
                        let mut report = report.not_run_again();
                        report.summary = format!(
                            "{}; not run again: {} attempts were lost with their hosts \
                             (max_attempts = {max} in the host config)",
                            report.summary, last.attempt
                        );
                        Box::new(report)
                    });
                    return Ok(Step::Done(report));
                }
                let because = lost.then(|| {
                    format!(
                        "attempt {} ({}) was rolled back when its host was lost before its \
                         commit decision; this is attempt {} of at most {max}",
                        last.attempt,
                        last.id,
                        last.attempt + 1
                    )
                });
                (last.attempt + 1, because)
            }
            None => (1, None),
        };
        let (next_attempt, because) = next_attempt;
        let id = RestoreId::new(&job.name, job.id().as_str(), next_attempt);
        Ok(match self.probe(&id).await? {
            true => Step::Run(because),
            false => Step::Wait,
        })
    }

    /// Whether nobody holds `id`'s claim (taking and dropping it at once).
    async fn probe(&self, id: &RestoreId) -> journal::Result<bool> {
        match self.journal.claim(id).await {
            Ok(claim) => {
                drop(claim);
                Ok(true)
            }
            Err(journal::Error::Busy { holder, .. }) => {
                tracing::debug!(restore = %id, %holder, "claimed elsewhere; waiting");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads every record at start, then every [`AUDIT_EVERY`]: each that does not read is
    /// logged by its key, and counted by `/metrics` (the measured journal notes it).
    pub async fn audit(self: Arc<Self>) {
        loop {
            let mut log = |listed| {
                if let journal::Listed::Unreadable(bad) = listed {
                    journal::log_unreadable(&bad);
                }
            };
            if let Err(e) = self.journal.scan("", &mut log).await {
                tracing::warn!(error = %e, "audit: cannot list the journal");
            }
            let slept = self.shutdown.race(tokio::time::sleep(AUDIT_EVERY)).await;
            if slept.is_err() {
                return;
            }
        }
    }

    /// Recovers, every [`SWEEP_EVERY`], unfinished restores that no task here works on and
    /// whose claim is free: their host died, and no job file or request here asks for them.
    pub async fn sweep(self: Arc<Self>) {
        loop {
            if self
                .shutdown
                .race(tokio::time::sleep(SWEEP_EVERY))
                .await
                .is_err()
            {
                return;
            }
            // A record that does not read is left to a person (logged each sweep); the others
            // are swept. Only what the open index names is read, not the journal's history.
            let records = match self.journal.list_open().await {
                Ok(listing) => listing.readable(),
                Err(e) => {
                    tracing::warn!(error = %e, "sweep: cannot list the journal");
                    continue;
                }
            };
            self.clean_left_stages(&records).await;
            for record in records.into_iter().filter(RestoreRecord::is_unfinished) {
                let identity = RestoreId::content_prefix(&record.job_name, &record.content_hash);
                if self.lock().contains_key(&identity) {
                    continue;
                }
                match self.probe(&record.id).await {
                    Ok(true) => {}
                    _ => continue,
                }
                let wanted = (self.wanted_lock())
                    .get(&identity)
                    .map(|w| (w.job.clone(), w.rerun, w.requested_by.clone()));
                if let Some((job, rerun, requested_by)) = wanted {
                    tracing::info!(restore = %record.id, "taking over an unfinished restore nobody holds, for the job here that asks for it");
                    let begun = self.begin(identity, Admission::Always, |runner, interrupt| {
                        runner.drive(job, rerun, requested_by, interrupt)
                    });
                    begun.expect("a recovery is always admitted");
                    continue;
                }
                tracing::info!(restore = %record.id, "taking over an unfinished restore nobody holds; no job here asks for it");
                let begun = self.begin(identity, Admission::Always, |runner, interrupt| Box::pin(async move {
                    let ends = match Ends::from_recorded(&record.ends, &runner.host) {
                        Ok(ends) => ends,
                        Err(e) => {
                            tracing::warn!(restore = %record.id, error = %e, "cannot reach the recorded ends");
                            return Ended::NothingRan;
                        }
                    };
                    let host = runner.host.clone();
                    let report = spawn_recover(runner.engine(interrupt), record, ends, None, host)
                        .await
                        .expect("a recovery does not panic");
                    runner.link_latest(&report);
                    Ended::Report(Box::new(report))
                }));
                begun.expect("a recovery is always admitted");
            }
        }
    }

    /// Deletes the staged files that finished restores left behind, where the host config
    /// names their stores; what cannot be deleted yet is tried again at the next sweep.
    async fn clean_left_stages(&self, records: &[RestoreRecord]) {
        for record in records
            .iter()
            .filter(|r| r.stage_left && !r.is_unfinished())
        {
            let Some(stores) = engine::recorded_stores(record, &self.host) else {
                continue;
            };
            let engine = self.engine(Interrupt::never());
            if let Err(e) = engine::clean_left_stage(&engine, &record.id, &stores).await {
                tracing::warn!(restore = %record.id, error = %e, "staged files left by a recovery: not deleted yet");
            }
        }
    }
}

/// Waits [`RECHECK_EVERY`] before a job's loop asks the journal again; `false` when the
/// interrupt fired meanwhile.
async fn recheck_later(interrupt: &Interrupt) -> bool {
    interrupt
        .race(tokio::time::sleep(RECHECK_EVERY))
        .await
        .is_ok()
}

/// Spawns a restore of `job` as a task of its own.
fn spawn_run(
    engine: Engine,
    job: Job,
    requested_by: RequestedBy,
    because: Option<String>,
) -> tokio::task::JoinHandle<Report> {
    tokio::spawn(async move { engine.run_because(&job, requested_by, because).await })
}

/// Spawns a recovery of `record`, with the job's stores when the job is known, else the
/// host config's.
/// The job, its secondaries discovered where it asks for that, and its ends; or why they
/// cannot be had now.
async fn ends_of(job: &Job) -> Result<(Job, Ends), String> {
    let job = engine::discover::secondaries(job)
        .await
        .map_err(|refusals| {
            (refusals.iter().map(ToString::to_string))
                .collect::<Vec<_>>()
                .join("; ")
        })?;
    let ends = Ends::for_job(&job).map_err(|e| e.to_string())?;
    Ok((job.into_owned(), ends))
}

fn spawn_recover(
    engine: Engine,
    record: RestoreRecord,
    ends: Ends,
    job: Option<Job>,
    host: HostConfig,
) -> tokio::task::JoinHandle<Report> {
    tokio::spawn(async move {
        let stores = match &job {
            Some(job) => job.destinations(),
            None => engine::recorded_stores(&record, &host).unwrap_or_default(),
        };
        engine::recover(&engine, record, ends, job.as_ref(), &stores).await
    })
}

/// The report a finished record holds.
pub fn recorded_report(record: &RestoreRecord) -> Option<Report> {
    record.report.as_ref().and_then(|r| r.read().ok())
}
