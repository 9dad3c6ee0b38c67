//! One attempt of a restore as the engine keeps it: its journal record and the writes that
//! make it durable, the phases it went through, the first failure before the decision, and
//! the sealing of its report. Only the engine (`run`, `group`, `recover`) holds one; the
//! stages it calls get values.

use std::ops::Deref;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use super::ends::Ends;
use super::error::{Error, StageError};
use super::faults;
use super::fence::{Fence, Lost};
use super::preflight::error_chain;
use super::process::Engine;
use super::refusal::Refusal;
use super::report::{self, Report};
use super::two_phase::Tracker;
use crate::job::Job;
use crate::journal::{
    self, Claim, EndProgress, Outcome, ProgressSnapshot, RestorePhase, RestoreRecord,
};

/// One attempt of a restore, held by the engine and lent to its concurrent commit groups.
pub(super) struct Attempt<'a> {
    pub engine: &'a Engine,
    pub ends: &'a Ends,
    claim: &'a dyn Claim,
    /// The job, when the restore is run from it (not when recovered from its record).
    pub job: Option<&'a Job>,
    // No await happens while these are held.
    pub record: Mutex<RestoreRecord>,
    /// The first pre-decision failure; undecided groups abort on it.
    failure: Mutex<Option<Error>>,
    /// Set once this host no longer holds the restore: from then on it acts on no end and
    /// writes no record.
    lost: Mutex<Option<Lost>>,
    /// Cancelled once `failure` is set, after it: the stage, the wait for arrivals, the
    /// import gate and the creates not sent yet stop on it, and whoever wakes on it finds
    /// the reason already there.
    stop: CancellationToken,
    /// Serialises saves so a stale snapshot never overwrites a newer one, and keeps fence
    /// checks (its readers, side by side) out of a save: a check that read the record
    /// between a save's write and the note of what it wrote would see its own host's write
    /// as someone else's.
    save_lock: tokio::sync::RwLock<()>,
    /// From the last ready sighting to the commit going out (decision write included).
    pub reaction: Mutex<Option<Duration>>,
    /// When each phase this process saw began, in order: the report's `phases`.
    pub phase_starts: Mutex<Vec<(RestorePhase, Timestamp)>>,
    /// The record as last written. A progress write writes it again with only the new
    /// snapshot: never a change the restore has made in memory but not yet written (a
    /// decision whose own write then fails is taken back, and must not have been made
    /// durable by someone else's write).
    written: Mutex<Option<RestoreRecord>>,
}

/// How often, at most, a running restore writes a changed progress snapshot between
/// phase changes: fresh enough for a status page, rare enough for the journal.
const PROGRESS_EVERY: Duration = Duration::from_secs(3);

impl<'a> Attempt<'a> {
    pub fn new(
        engine: &'a Engine,
        ends: &'a Ends,
        claim: &'a dyn Claim,
        record: RestoreRecord,
        job: Option<&'a Job>,
    ) -> Attempt<'a> {
        Attempt {
            engine,
            ends,
            claim,
            job,
            record: Mutex::new(record),
            failure: Mutex::new(None),
            lost: Mutex::new(None),
            stop: CancellationToken::new(),
            save_lock: tokio::sync::RwLock::new(()),
            reaction: Mutex::new(None),
            phase_starts: Mutex::new(Vec::new()),
            written: Mutex::new(None),
        }
    }

    /// Writes the current record durably.
    pub async fn persist(&self) -> Result<(), StageError> {
        let order = self.save_lock.write().await;
        self.save(order).await
    }

    /// Writes the record as it is now while `order` keeps every other write out.
    async fn save(&self, order: tokio::sync::RwLockWriteGuard<'_, ()>) -> Result<(), StageError> {
        let snapshot = {
            let mut r = self.record.lock().expect("record lock: no panics under it");
            r.updated_at = Timestamp::now();
            r.clone()
        };
        self.write(order, snapshot).await
    }

    async fn write(
        &self,
        _order: tokio::sync::RwLockWriteGuard<'_, ()>,
        record: RestoreRecord,
    ) -> Result<(), StageError> {
        if let Some(lost) = self.lost() {
            return Err(StageError::Journal(lost.to_string()));
        }
        let saved = self.engine.journal.save(self.claim, &record).await;
        if let Err(e) = saved {
            if matches!(e, journal::Error::ClaimLost(_)) {
                self.lose(&e);
            }
            return Err(StageError::Journal(error_chain(&e)));
        }
        *self.written.lock().expect("written lock") = Some(record);
        Ok(())
    }

    /// Whether, and why, this host no longer holds the restore.
    pub fn lost(&self) -> Option<Lost> {
        self.lost.lock().expect("lost lock").clone()
    }

    /// Records that the claim is gone (`why`) and stops the attempt: everything waiting on
    /// [`Attempt::stopped`] wakes, and finds every action fenced.
    fn lose(&self, why: &journal::Error) -> Lost {
        let lost = {
            let mut slot = self.lost.lock().expect("lost lock");
            let id = self.record.lock().expect("record lock").id.clone();
            slot.get_or_insert_with(|| Lost {
                id,
                reason: error_chain(why),
            })
            .clone()
        };
        tracing::error!(%lost, "stopping: this host no longer holds the restore");
        self.fail(Error::Lost(lost.clone()));
        lost
    }

    /// Runs `work`, and meanwhile writes the progress snapshot every [`PROGRESS_EVERY`]
    /// when it changed since the last write, so that every host sharing the journal sees a
    /// long hold move. It goes into the record as last written, nothing else with it. A
    /// write already under way carries the snapshot, so none is queued behind it; a failed
    /// one is only logged: the restore's own next write meets the same journal and decides
    /// what it means.
    pub async fn with_progress_writes<T>(&self, work: impl Future<Output = T>) -> T {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                () = tokio::time::sleep(PROGRESS_EVERY) => {}
            }
            let Ok(order) = self.save_lock.try_write() else {
                continue;
            };
            let progress = self.record.lock().expect("record lock").progress.clone();
            let Some(mut record) = self
                .written
                .lock()
                .expect("written lock")
                .clone()
                .filter(|written| written.progress != progress)
            else {
                continue;
            };
            record.progress = progress;
            record.updated_at = Timestamp::now();
            let save = self.write(order, record);
            tokio::pin!(save);
            // The restore goes on while the snapshot is written; if it ends first, the
            // write still finishes before anything after the restore writes.
            let (saved, out) = tokio::select! {
                saved = &mut save => (saved, None),
                out = &mut work => (save.await, Some(out)),
            };
            if let Err(e) = saved {
                tracing::warn!(error = %e, "could not write the progress snapshot");
            }
            if let Some(out) = out {
                return out;
            }
        }
    }

    pub async fn set_phase(&self, phase: RestorePhase) -> Result<(), StageError> {
        if !self.enter_phase(phase) {
            return Ok(());
        }
        self.persist().await
    }

    /// Moves the record to `phase` (never back) without writing it: for a phase change that
    /// the write right after it makes durable. Whether the phase changed.
    pub fn enter_phase(&self, phase: RestorePhase) -> bool {
        let id = {
            let mut r = self.record.lock().expect("record lock: no panics under it");
            if r.phase >= phase {
                return false;
            }
            r.phase = phase;
            r.id.to_string()
        };
        self.phase_starts
            .lock()
            .expect("phase lock")
            .push((phase, Timestamp::now()));
        self.engine.progress.phase(&id, phase);
        true
    }

    /// Keeps the slowest time from "every end ready" to "commit sent" across groups.
    pub fn note_reaction(&self, reaction: Duration) {
        let mut r = self.reaction.lock().expect("reaction lock");
        *r = Some(r.map_or(reaction, |old| old.max(reaction)));
    }

    /// `source`, failed in the phase the restore is in.
    pub fn failure_now(&self, source: StageError) -> Error {
        let phase = self.record.lock().expect("record lock").phase;
        Error::failed(phase, source)
    }

    /// Records the restore's first failure before its decision, then stops everything
    /// waiting on [`Attempt::stopped`]; a later one is left out.
    pub fn fail(&self, error: Error) {
        {
            let mut first = self.failure.lock().expect("failure lock");
            if first.is_some() {
                return;
            }
            *first = Some(error);
        }
        self.stop.cancel();
    }

    pub fn failed(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// The restore's first failure before its decision, if any.
    pub fn first_failure(&self) -> Option<Error> {
        self.failure.lock().expect("failure lock").clone()
    }

    /// Cancelled once the restore failed before its decision: for the stages that stop
    /// on it.
    pub fn stop_token(&self) -> &CancellationToken {
        &self.stop
    }

    /// Returns once the restore failed before its decision; never if it does not.
    pub async fn stopped(&self) {
        self.stop.cancelled().await;
    }

    /// Shows the groups' trackers: the record's progress snapshot (written with the next
    /// progress write) and the live progress display.
    pub fn show(&self, trackers: &[impl Deref<Target = Tracker>]) {
        let mut counts = trackers.first().map(|t| t.counts()).unwrap_or_default();
        for t in trackers.iter().skip(1) {
            for ((_, total), (_, more)) in counts.iter_mut().zip(t.counts()) {
                for (state, n) in more {
                    *total.entry(state).or_default() += n;
                }
            }
        }
        let snapshot = progress_snapshot(trackers);
        let id = {
            let mut r = self.record.lock().expect("record lock");
            r.progress = Some(snapshot);
            r.id.to_string()
        };
        self.engine.progress.jobs(&id, &counts);
    }

    /// Seals a report: outcome, finish time, journal record, JSON and text files. An
    /// attempt whose host lost the claim ends [`Outcome::Lost`] whatever it found, and
    /// writes only its local report: the record is the new holder's.
    pub async fn finish(
        &self,
        mut report: Report,
        outcome: Outcome,
        refusals: Vec<Refusal>,
    ) -> Report {
        let engine = self.engine;
        let lost = self.lost();
        let outcome = if lost.is_some() {
            Outcome::Lost
        } else {
            outcome
        };
        if let Some(lost) = &lost {
            report.summary = lost.to_string();
        }
        report.outcome = outcome;
        report.set_refusals(&refusals);
        report.tally_imported();
        report.reaction_ms = self
            .reaction
            .lock()
            .expect("reaction lock")
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        report.finished_at = Timestamp::now();
        report.phases = report::phase_times(
            &self.phase_starts.lock().expect("phase lock"),
            report.started_at,
            report.finished_at,
        );
        if report.summary.is_empty() {
            report.summary = format!("{outcome:?}");
        }
        faults::crash_point("before-report");
        {
            let mut r = self.record.lock().expect("record lock: no panics under it");
            r.outcome = Some(outcome);
            r.phase = RestorePhase::Finished;
            r.report = serde_json::to_value(&report).ok();
        }
        if lost.is_some() {
            // No write: the record is no longer this host's.
        } else if let Err(e) = self.persist().await {
            // The ends are as the report says; only the journal lags. Say so where the
            // operator reads, since `status` shows the restore unfinished until `recover`
            // (or the next run of the job) records it.
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

impl Fence for Attempt<'_> {
    fn check(&self) -> BoxFuture<'_, Result<(), Lost>> {
        Box::pin(async move {
            // As if every action fell in the window between a check and its call.
            if faults::planted(faults::Bug::Unfenced) {
                return Ok(());
            }
            if let Some(lost) = self.lost() {
                return Err(lost);
            }
            let _no_save = self.save_lock.read().await;
            match self.engine.journal.fence(self.claim).await {
                Ok(()) => Ok(()),
                // Not knowing is not holding: an etcd that cannot answer cannot vouch for
                // the lease either.
                Err(e) => Err(self.lose(&e)),
            }
        })
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
                snapshot.rows_expected += expected.inserted - expected.deletes.unwrap_or(0);
                snapshot.rows_exact &= expected.deletes.is_some();
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
        std::fs::create_dir_all(&engine.reports_dir)?;
        let json = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
        std::fs::write(
            engine
                .reports_dir
                .join(format!("{}.json", report.restore_id)),
            &json,
        )?;
        std::fs::write(
            engine
                .reports_dir
                .join(format!("{}.txt", report.restore_id)),
            report.to_string(),
        )?;
        let latest = format!(
            "{}.latest.json",
            journal::RestoreId::content_prefix(&report.job_name, "").trim_end_matches('.')
        );
        std::fs::write(engine.reports_dir.join(latest), &json)
    };
    if let Err(e) = write() {
        tracing::error!(error = %e, dir = %engine.reports_dir.display(), "could not write the report files");
    }
}
