//! The restore, end to end (DESIGN.md §1): preflight, plan, DDL, staging, checks, import,
//! hold, decision, commit, completion and report. Stages take and return values; this module
//! is the only caller of each, and owns abort and roll-forward.
//!
//! - [`preflight`]: every reason to refuse, found before anything is written.
//! - `ddl`: databases, collections, partitions, indexes on the target; mirrors awaited.
//! - `run`: one attempt, with its journal writes; `two_phase`: hold, commit, complete,
//!   abort; `watch` and [`schedule`]: polling; `recover`: finishing what a crash left.
//! - [`report`]: the outcome for people and scripts.

mod auto_commit;
mod checks;
mod ddl;
mod ends;
pub mod faults;
mod outcome;
pub mod preflight;
pub mod progress;
mod recover;
pub mod report;
mod retry;
pub mod route;
mod rows;
mod run;
pub mod schedule;
mod staging;
mod two_phase;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;

use jiff::Timestamp;
use tokio::sync::watch as signal;
use tracing::Instrument as _;

pub use ends::{EndClient, Ends, RecoverError};
pub use progress::{Logged, Progress, Silent};
pub use recover::{clean_left_stage, recorded_stores, recover};
pub use report::Report;
pub use run::destinations as staging_stores;

use crate::backup::RestorePlan;
use crate::job::{Job, StorageSpec};
use crate::journal::{self, Journal, Outcome, RestoreId, RestorePhase, RestoreRecord};
use crate::storage::{self, StagingPrefix, TempFiles};

/// What every restore of one process shares.
pub struct Engine {
    pub journal: Arc<dyn Journal>,
    /// Where JSON and text reports are written, one pair per restore.
    pub reports_dir: PathBuf,
    /// The plugin compile cache.
    pub plugin_cache: PathBuf,
    pub progress: Arc<dyn Progress>,
    pub interrupt: Interrupt,
}

/// Ctrl-C, as the engine sees it: before a decision it aborts the restore; after a decision
/// it changes nothing (only forward).
#[derive(Clone)]
pub struct Interrupt(signal::Receiver<bool>);

/// The restore was interrupted.
#[derive(Debug, Clone, Copy)]
pub struct Interrupted;

impl Interrupt {
    /// An interrupt and the handle that raises it.
    pub fn new() -> (signal::Sender<bool>, Interrupt) {
        let (tx, rx) = signal::channel(false);
        (tx, Interrupt(rx))
    }

    /// One that never fires.
    pub fn never() -> Interrupt {
        let (tx, rx) = signal::channel(false);
        // Keep the channel open forever: a dropped sender would read as "closed".
        std::mem::forget(tx);
        Interrupt(rx)
    }

    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Returns once the interrupt fires; never if it does not.
    pub async fn fired(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|set| *set).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Runs `fut` unless the interrupt fires first.
    pub async fn race<T>(&self, fut: impl Future<Output = T>) -> Result<T, Interrupted> {
        if self.is_set() {
            return Err(Interrupted);
        }
        let mut rx = self.0.clone();
        tokio::select! {
            out = fut => Ok(out),
            _ = rx.wait_for(|set| *set) => Err(Interrupted),
        }
    }
}

/// What `lockstep plan` prints: preflight passed, and this is what a run would do.
pub struct PlanOutput {
    pub plan: RestorePlan,
    pub ends: Vec<EndPlan>,
    pub import_prefix_note: String,
    pub route: route::Choice,
}

/// How one end gets the files it imports, and reads their paths.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EndPlan {
    pub name: String,
    pub version: String,
    /// The form of the import paths its Milvus resolves.
    pub import_paths: crate::job::PathForm,
    pub files: EndFiles,
}

/// Where an end's import files come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndFiles {
    /// Copied into its own store under the staging prefix.
    Staged,
    /// Its store holds the backup: imported where they are.
    InPlace,
    /// lockstep knows no store of it: it must see the target's, or its mirrors find nothing.
    TargetStore,
}

impl Engine {
    /// Runs `job`: a no-op returning the earlier report when the same content already
    /// committed; otherwise resolves an attempt a crash left unfinished, then (unless that
    /// committed) runs a new attempt. Every log line it writes carries a `restore` span
    /// with the job's name and the restore id, so that restores running side by side (in
    /// `serve`, a batch, a fleet) can be told apart.
    pub async fn run(&self, job: &Job) -> Report {
        self.run_because(job, None).await
    }

    /// [`Engine::run`], saying in the new attempt's record and report why it runs
    /// (`because`: the earlier attempt was lost with its host).
    pub async fn run_because(&self, job: &Job, because: Option<String>) -> Report {
        let span = tracing::info_span!("restore", job = %job.name, id = tracing::field::Empty);
        self.run_in(job, because, &span)
            .instrument(span.clone())
            .await
    }

    async fn run_in(&self, job: &Job, because: Option<String>, span: &tracing::Span) -> Report {
        let ends = match Ends::for_job(job) {
            Ok(e) => e,
            Err(e) => return self.refused_early(job, vec![e.to_string()]).await,
        };
        let attempts = match self.journal.attempts(&job.name, job.id().as_str()).await {
            Ok(a) => a,
            Err(e) => return self.host_failed(job, format!("journal: {e}")),
        };
        if let Some(last) = attempts.last() {
            if last.outcome.is_some_and(Outcome::committed)
                && let Some(report) = last
                    .report
                    .as_ref()
                    .and_then(|r| serde_json::from_value::<Report>(r.clone()).ok())
            {
                tracing::info!(restore = %last.id, "this job content already ran; not running it again");
                return report;
            }
            if last.is_unfinished() {
                span.record("id", tracing::field::display(&last.id));
                let stores = staging_stores(job);
                let report = recover(self, last.clone(), ends.clone(), Some(job), &stores).await;
                if report.outcome != Outcome::RolledBack && report.outcome != Outcome::Refused {
                    return report;
                }
            }
        }
        let attempt = attempts.iter().map(|r| r.attempt).max().unwrap_or(0) + 1;
        let id = RestoreId::new(&job.name, job.id().as_str(), attempt);
        span.record("id", tracing::field::display(&id));
        let claim = match self.journal.claim(&id).await {
            Ok(c) => c,
            // Another process works on it: not lockstep's failure, and not the job's either.
            Err(e @ journal::Error::Busy { .. }) => {
                return self.refused_early(job, vec![e.to_string()]).await;
            }
            Err(e) => return self.host_failed(job, format!("journal: {e}")),
        };
        let now = Timestamp::now();
        let record = RestoreRecord {
            id,
            job_name: job.name.clone(),
            content_hash: job.id().to_string(),
            attempt,
            backup: job.backup.name.clone(),
            ends: ends.all().iter().map(EndClient::recorded).collect(),
            mirror_grace_ms: job.two_phase.mirror_grace.as_millis() as u64,
            keep_temp_files: job.restore.keep_temp_files,
            phase: RestorePhase::Preflight,
            started_at: now,
            updated_at: now,
            staging_prefix: None,
            staged_ends: vec![],
            created_collections: vec![],
            to_create: vec![],
            groups: vec![],
            outcome: None,
            report: None,
            progress: None,
            host_lost: false,
            stage_left: false,
            rerun_because: because,
        };
        run::attempt(self, job, &ends, claim.as_ref(), record).await
    }

    /// Preflight and plan, changing nothing anywhere.
    pub async fn plan(&self, job: &Job) -> Result<PlanOutput, Vec<String>> {
        let ends = Ends::for_job(job).map_err(|e| vec![e.to_string()])?;
        let pf = preflight::preflight(job, &ends).await?;
        let dest: Vec<storage::OpenedStore> = run::destinations(job)
            .iter()
            .filter_map(|(_, spec)| storage::open(spec).ok())
            .collect();
        let in_place = !dest.is_empty() && dest.iter().all(|d| d.id == pf.backup_store.id);
        let known = if in_place {
            EndFiles::InPlace
        } else {
            EndFiles::Staged
        };
        let mut planned = vec![(&job.target.end, known)];
        for s in &job.secondaries {
            let files = if s.storage.is_some() {
                known
            } else {
                EndFiles::TargetStore
            };
            planned.push((&s.end, files));
        }
        let ends = planned
            .into_iter()
            .zip(&pf.versions)
            .map(|((end, files), version)| EndPlan {
                name: end.name.to_string(),
                version: version.to_string(),
                import_paths: end.paths.clone(),
                files,
            })
            .collect();
        let import_prefix_note = if in_place {
            format!("imports read the backup in place ({})", pf.backup.location)
        } else {
            format!(
                "binlogs are staged under {}/<restore id>/ on {} store(s)",
                storage::STAGING_ROOT,
                dest.len()
            )
        };
        checks::CheckSetup::load(self, job).await?;
        Ok(PlanOutput {
            plan: pf.plan,
            ends,
            import_prefix_note,
            route: pf.route,
        })
    }

    /// lockstep's own failure before any journal record exists: nothing was written on any
    /// end, and the job is not to blame (exit 6).
    fn host_failed(&self, job: &Job, reason: String) -> Report {
        tracing::error!(%reason, "lockstep cannot run the restore");
        let of = report::ReportOf {
            restore_id: String::new(),
            job_name: job.name.clone(),
            job_id: job.id().to_string(),
            backup: job.backup.name.clone(),
        };
        Report {
            outcome: Outcome::HostFailed,
            ..Report::refused(of, reason, vec![])
        }
    }

    /// A refusal before any journal record exists (the ends cannot be reached by the URIs
    /// given, or another process holds the restore).
    async fn refused_early(&self, job: &Job, refusals: Vec<String>) -> Report {
        let of = report::ReportOf {
            restore_id: String::new(),
            job_name: job.name.clone(),
            job_id: job.id().to_string(),
            backup: job.backup.name.clone(),
        };
        Report::refused(of, format!("refused: {}", refusals.join("; ")), refusals)
    }
}

/// Seals a report: outcome, finish time, journal record, JSON and text files.
async fn finish_report(
    engine: &Engine,
    mut report: Report,
    outcome: Outcome,
    refusals: Vec<String>,
    shared: &run::Shared<'_>,
) -> Report {
    report.outcome = outcome;
    report.refusals = refusals;
    report.reaction_ms = shared
        .reaction
        .lock()
        .expect("reaction lock")
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    report.finished_at = Timestamp::now();
    report.phases = report::phase_times(
        &shared.phase_starts.lock().expect("phase lock"),
        report.started_at,
        report.finished_at,
    );
    if report.summary.is_empty() {
        report.summary = format!("{outcome:?}");
    }
    faults::crash_point("before-report");
    {
        let mut r = shared
            .record
            .lock()
            .expect("record lock: no panics under it");
        r.outcome = Some(outcome);
        r.phase = RestorePhase::Finished;
        r.report = serde_json::to_value(&report).ok();
    }
    if let Err(e) = shared.persist().await {
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

/// Deletes a restore's staging prefix on every destination store (or keeps it). Whether it
/// succeeded; failures are logged, since leftover staged files cost space, not correctness.
async fn cleanup_prefix(
    destinations: &[(String, &StorageSpec)],
    prefix: &StagingPrefix,
    temp: TempFiles,
) -> bool {
    let mut opened = Vec::new();
    for (end, spec) in destinations {
        match storage::open(spec) {
            Ok(s) => opened.push((end.clone(), s)),
            Err(e) => {
                tracing::warn!(end, error = %e, "cannot open store to clean up staged files");
                return false;
            }
        }
    }
    let dests: Vec<storage::Destination<'_>> = opened
        .iter()
        .map(|(end, store)| storage::Destination { end, store })
        .collect();
    match storage::cleanup(&dests, prefix, temp).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e, "staged files were not all deleted");
            false
        }
    }
}
