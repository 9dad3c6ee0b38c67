//! A restore from its job, top to bottom (DESIGN.md §1): the journal's earlier attempts of
//! the same content (a committed one answers; an unfinished one is recovered first), a new
//! attempt's claim and record, then [`run::run_attempt`]: preflight, checks, DDL, staging,
//! import, hold, decision, commit, completion and report. `plan` is preflight alone.

use tracing::Instrument as _;

use super::ends::{EndClient, Ends};
use super::process::Engine;
use super::recover::recover;
use super::refusal::Refusal;
use super::report::{self, Report};
use super::{checks, discover, preflight, route, run, staging};
use crate::backup::RestorePlan;
use crate::job::Job;
use crate::journal::{self, Outcome, RequestedBy, RestoreId, RestoreRecord};
use crate::storage;

/// What `lockstep plan` prints: preflight passed, and this is what a run would do.
pub struct PlanOutput {
    pub plan: RestorePlan,
    /// The backup's format.
    pub format: crate::backup::BackupFormat,
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
    pub import_paths: crate::config::PathForm,
    pub files: EndFiles,
    /// Its replicated import gate, in a restore with secondaries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<super::builds::Gate>,
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

/// How many times a host reads the attempts again when the attempt it claimed turns out
/// to have been run meanwhile: each time means a whole attempt ran between one read and
/// its claim.
const CLAIM_LOOKS: usize = 3;

/// What reading a job's attempts came to: the next one claimed, or the restore's end.
enum Next {
    Claimed(Box<dyn journal::Claim>, RestoreId, u32),
    Done(Box<Report>),
}

impl Engine {
    /// Runs `job`: a no-op returning the earlier report when the same content already
    /// committed; otherwise resolves an attempt a crash left unfinished, then (unless that
    /// committed) runs a new attempt. Every log line it writes carries a `restore` span
    /// with the job's name and the restore id, so that restores running side by side (in
    /// `serve`, a batch, a fleet) can be told apart. A new attempt's record keeps who asked
    /// for it (`requested_by`).
    pub async fn run(&self, job: &Job, requested_by: RequestedBy) -> Report {
        self.run_because(job, requested_by, None).await
    }

    /// [`Engine::run`], saying in the new attempt's record and report why it runs
    /// (`because`: the earlier attempt was lost with its host).
    pub async fn run_because(
        &self,
        job: &Job,
        requested_by: RequestedBy,
        because: Option<String>,
    ) -> Report {
        let span = tracing::info_span!("restore", job = %job.name, id = tracing::field::Empty);
        self.run_in(job, requested_by, because, &span)
            .instrument(span.clone())
            .await
    }

    async fn run_in(
        &self,
        job: &Job,
        requested_by: RequestedBy,
        because: Option<String>,
        span: &tracing::Span,
    ) -> Report {
        let discovered = match discover::secondaries(job).await {
            Ok(job) => job,
            Err(refusals) => return self.refused_early(job, refusals),
        };
        let job = discovered.as_ref();
        let ends = match Ends::for_job(job) {
            Ok(e) => e,
            Err(e) => {
                return self.refused_early(job, vec![Refusal::Client(e)]);
            }
        };
        // Which attempt to run is read before it is claimed: a host held up in between (a
        // pause, a partition from etcd) can find the attempt it chose already run by another
        // host once its claim lands, and then reads the attempts again rather than write a
        // fresh record over that one.
        let mut looks = 0;
        let (claim, id, attempt) = loop {
            looks += 1;
            match self.next_attempt(job, &ends, span).await {
                Next::Claimed(claim, id, attempt) => match self.journal.load(&id).await {
                    Ok(None) => break (claim, id, attempt),
                    Ok(Some(_)) if looks < CLAIM_LOOKS => {
                        tracing::info!(restore = %id, "another host ran this attempt since the attempts were read; reading them again");
                    }
                    Ok(Some(_)) => {
                        let why = format!(
                            "attempt {id} was run by another host each time it was claimed"
                        );
                        return self.host_failed(job, why);
                    }
                    Err(e) => return self.host_failed(job, format!("journal: {e}")),
                },
                Next::Done(report) => return *report,
            }
        };
        let record = RestoreRecord {
            mirror_grace_ms: job.two_phase.mirror_grace.as_millis() as u64,
            keep_temp_files: job.restore.keep_temp_files,
            renaming: job.restore.renaming.to_string(),
            rerun_because: because,
            requested_by: Some(requested_by),
            ..RestoreRecord::new(
                id,
                &job.name,
                job.id().as_str(),
                attempt,
                &job.backup.name,
                ends.all().iter().map(EndClient::recorded).collect(),
            )
        };
        run::run_attempt(self, job, &ends, claim.as_ref(), record).await
    }

    /// Reads the job's attempts and claims the next: unless the same content already
    /// committed (its report), or the last attempt is unfinished and its recovery ends the
    /// restore.
    async fn next_attempt(&self, job: &Job, ends: &Ends, span: &tracing::Span) -> Next {
        let attempts = match self.journal.attempts(&job.name, job.id().as_str()).await {
            Ok(a) => a,
            Err(e) => return Next::Done(Box::new(self.host_failed(job, format!("journal: {e}")))),
        };
        if let Some(last) = attempts.last() {
            if last.outcome.is_some_and(Outcome::committed)
                && let Some(report) = last.report.as_ref().and_then(|r| r.read::<Report>().ok())
            {
                tracing::info!(restore = %last.id, "this job content already committed; not running it again");
                return Next::Done(Box::new(report.not_run_again()));
            }
            if last.is_unfinished() {
                span.record("id", tracing::field::display(&last.id));
                let stores = job.destinations();
                let report = recover(self, last.clone(), ends.clone(), Some(job), &stores).await;
                if report.outcome != Outcome::RolledBack && report.outcome != Outcome::Refused {
                    return Next::Done(Box::new(report));
                }
            }
        }
        let attempt = attempts.iter().map(|r| r.attempt).max().unwrap_or(0) + 1;
        let id = RestoreId::new(&job.name, job.id().as_str(), attempt);
        span.record("id", tracing::field::display(&id));
        super::faults::crash_point("before-claim");
        match self.journal.claim(&id).await {
            Ok(claim) => Next::Claimed(claim, id, attempt),
            // Another process works on it: not lockstep's failure, and not the job's either.
            Err(journal::Error::Busy { id, holder }) => {
                let busy = Refusal::Busy {
                    id: id.to_string(),
                    holder,
                };
                Next::Done(Box::new(self.refused_early(job, vec![busy])))
            }
            Err(e) => Next::Done(Box::new(self.host_failed(job, format!("journal: {e}")))),
        }
    }

    /// Preflight and plan, changing nothing anywhere.
    pub async fn plan(&self, job: &Job) -> Result<PlanOutput, Vec<Refusal>> {
        let job = discover::secondaries(job).await?;
        let job = job.as_ref();
        let ends = Ends::for_job(job).map_err(|e| vec![Refusal::Client(e)])?;
        let preflight = preflight::preflight(job, &ends).await?;
        let dest: Vec<storage::OpenedStore> = job
            .destinations()
            .iter()
            .filter_map(|(_, spec)| storage::open(spec).ok())
            .collect();
        let in_place = staging::in_place(&preflight)
            && !dest.is_empty()
            && dest.iter().all(|d| d.id == preflight.backup_store.id);
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
        let gates = (preflight.builds.gates.iter().copied()).map(Some);
        let ends = planned
            .into_iter()
            .zip(&preflight.versions)
            .zip(gates.chain(std::iter::repeat(None)))
            .map(|(((end, files), version), gate)| EndPlan {
                name: end.name.to_string(),
                version: version.to_string(),
                import_paths: end.paths.clone(),
                files,
                gate,
            })
            .collect();
        let import_prefix_note = if in_place {
            format!(
                "imports read the backup in place ({})",
                preflight.backup.location
            )
        } else {
            format!(
                "{} files are staged under {}/<restore id>/ on {} store(s)",
                preflight.backup.format,
                storage::STAGING_ROOT,
                dest.len()
            )
        };
        checks::CheckSetup::load(self, job).await?;
        Ok(PlanOutput {
            format: preflight.backup.format,
            plan: preflight.plan,
            ends,
            import_prefix_note,
            route: preflight.route,
        })
    }

    /// lockstep's own failure before any journal record exists: nothing was written on any
    /// end, and the job is not to blame (exit 6).
    fn host_failed(&self, job: &Job, reason: String) -> Report {
        tracing::error!(%reason, "lockstep cannot run the restore");
        Report {
            outcome: Outcome::HostFailed,
            ..Report::refused(report::ReportOf::job(job), reason, vec![])
        }
    }

    /// A refusal before any journal record exists (the ends cannot be reached by the URIs
    /// given, or another process holds the restore).
    fn refused_early(&self, job: &Job, refusals: Vec<Refusal>) -> Report {
        let (_, summary) = super::outcome::refused(super::outcome::RefusedAt::Elsewhere, &refusals);
        let mut report = Report::refused(report::ReportOf::job(job), summary, vec![]);
        report.set_refusals(&refusals);
        report
    }
}
