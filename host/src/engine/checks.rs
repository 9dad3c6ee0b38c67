//! The engine's side of plugin checks: loading the job's `[[check]]`s before anything is
//! written (a plugin that does not match the WIT refuses the restore), building the restore
//! context each phase sees, and handing the checks the ends' storage through a
//! [`CheckHost`] whose credentials never reach the plugin.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use object_store::ObjectStore;

use super::Engine;
use super::preflight::Preflight;
use super::report::{CheckEntry, Report};
use super::run::{Shared, destinations};
use super::two_phase::Tracker;
use crate::backup::BinlogFile;
use crate::job::Job;
use crate::journal::{CommitGroup, Role};
use crate::milvus::JobState;
use crate::plugins::{
    self, CheckCollection, CheckContext, CheckEnd, CheckHost, CheckImportJob, CheckReport,
    CheckStatus, EndJobState, EndRole, LoadedCheck, Phase, PluginRuntime, StagedObject,
    StoreCheckHost,
};
use crate::storage;

/// The job's loaded checks and what they reported.
pub struct CheckSetup {
    checks: Vec<LoadedCheck>,
    reports: Mutex<Vec<CheckEntry>>,
    staged: Mutex<Vec<StagedObject>>,
    collections: Mutex<Vec<CheckCollection>>,
}

impl CheckSetup {
    /// Loads every check of the job; a plugin that cannot load refuses the restore.
    pub async fn load(engine: &Engine, job: &Job) -> Result<CheckSetup, Vec<String>> {
        let mut setup = CheckSetup {
            checks: Vec::new(),
            reports: Mutex::new(Vec::new()),
            staged: Mutex::new(Vec::new()),
            collections: Mutex::new(Vec::new()),
        };
        if job.checks.is_empty() {
            return Ok(setup);
        }
        let runtime = PluginRuntime::new(&engine.plugin_cache).map_err(|e| vec![e.to_string()])?;
        let mut refusals = Vec::new();
        for (i, check) in job.checks.iter().enumerate() {
            match runtime.load_check(check).await {
                Ok(loaded) => setup.checks.push(loaded),
                Err(e) => refusals.push(format!("check[{i}] ({}): {e}", check.name)),
            }
        }
        if refusals.is_empty() {
            Ok(setup)
        } else {
            Err(refusals)
        }
    }

    pub fn reports(&self) -> Vec<CheckEntry> {
        self.reports.lock().expect("reports lock").clone()
    }

    /// Whether the job has checks in this phase.
    pub fn has(&self, p: Phase) -> bool {
        self.checks.iter().any(|c| c.phase() == p)
    }

    async fn run_phase(
        &self,
        shared: &Shared<'_>,
        job: &Job,
        ctx: CheckContext,
    ) -> Result<(), String> {
        let host = self.host(job)?;
        let result = plugins::run_checks(ctx.phase, &ctx, &self.checks, host).await;
        let reports = match &result {
            Ok(r) => r.clone(),
            Err(f) => f.reports.clone(),
        };
        self.reports
            .lock()
            .expect("reports lock")
            .extend(reports.iter().map(entry));
        let _ = shared;
        result.map(|_| ()).map_err(|f| f.to_string())
    }

    fn host(&self, job: &Job) -> Result<Arc<dyn CheckHost>, String> {
        let mut stores: BTreeMap<String, Arc<dyn ObjectStore>> = BTreeMap::new();
        for (end, spec) in destinations(job) {
            let opened = storage::open(spec).map_err(|e| format!("storage of {end}: {e}"))?;
            stores.insert(end, opened.store);
        }
        let staged = self.staged.lock().expect("staged lock").clone();
        Ok(Arc::new(StoreCheckHost::new(stores, staged)))
    }

    /// Runs the before-import checks after staging.
    pub async fn run_before_import(
        &self,
        shared: &Shared<'_>,
        job: &Job,
        pf: &Preflight,
        staged: &[StagedObject],
        report: &mut Report,
    ) -> Result<(), String> {
        *self.staged.lock().expect("staged lock") = staged.to_vec();
        *self.collections.lock().expect("collections lock") = pf
            .plan
            .collections
            .iter()
            .map(|c| CheckCollection {
                database: c.target.db.clone(),
                name: c.target.collection.clone(),
                partitions: c.partitions.clone(),
            })
            .collect();
        if !self.has(Phase::BeforeImport) {
            return Ok(());
        }
        let ctx = self.context(shared, job, Phase::BeforeImport, &[]);
        let result = self.run_phase(shared, job, ctx).await;
        report.checks = self.reports();
        result
    }

    /// Runs the before-commit checks of one commit group, with its jobs' states.
    pub async fn run_before_commit(
        &self,
        shared: &Shared<'_>,
        job: &Job,
        _group: usize,
        tracker: &Tracker,
    ) -> Result<(), String> {
        if !self.has(Phase::BeforeCommit) {
            return Ok(());
        }
        let ctx = self.context(
            shared,
            job,
            Phase::BeforeCommit,
            std::slice::from_ref(tracker),
        );
        self.run_phase(shared, job, ctx).await
    }

    fn context(
        &self,
        shared: &Shared<'_>,
        job: &Job,
        phase: Phase,
        trackers: &[Tracker],
    ) -> CheckContext {
        let end = |e: &super::EndClient| CheckEnd {
            name: e.name.clone(),
            uri: e.uri.clone(),
            role: match e.role {
                Role::Target => EndRole::Target,
                Role::Secondary => EndRole::Secondary,
            },
        };
        let mut jobs = Vec::new();
        let mut index = 0u32;
        for t in trackers {
            for j in &t.jobs {
                jobs.push(CheckImportJob {
                    id: j.job_id.as_ref().map(|i| i.0.clone()).unwrap_or_default(),
                    batch: index,
                    collection: j.collection.clone(),
                    partition: j.partition.clone(),
                    states: t
                        .end_names
                        .iter()
                        .zip(&j.seen)
                        .map(|(end, s)| EndJobState {
                            end: end.clone(),
                            state: match s {
                                None => plugins::JobState::Absent,
                                Some(s) => match s.state {
                                    JobState::Pending => plugins::JobState::Pending,
                                    JobState::Importing => plugins::JobState::Importing,
                                    JobState::Uncommitted => plugins::JobState::Uncommitted,
                                    JobState::Committing => plugins::JobState::Committing,
                                    JobState::Completed => plugins::JobState::Completed,
                                    JobState::Failed => plugins::JobState::Failed(
                                        s.reason.clone().unwrap_or_default(),
                                    ),
                                    JobState::Unknown => plugins::JobState::Unknown(String::new()),
                                },
                            },
                        })
                        .collect(),
                });
                index += 1;
            }
        }
        CheckContext {
            restore_id: shared.record.lock().expect("record lock").id.to_string(),
            backup_name: job.backup.name.clone(),
            phase,
            target: end(shared.ends.target()),
            secondaries: shared.ends.secondaries().iter().map(end).collect(),
            collections: self.collections.lock().expect("collections lock").clone(),
            jobs,
        }
    }
}

fn entry(r: &CheckReport) -> CheckEntry {
    let (status, detail) = match &r.status {
        CheckStatus::Passed => ("passed", None),
        CheckStatus::Failed { reason } => ("failed", Some(reason.clone())),
        CheckStatus::WaitExpired {
            waited,
            last_reason,
        } => (
            "expired",
            Some(format!(
                "still waiting after {}s: {last_reason}",
                waited.as_secs()
            )),
        ),
        CheckStatus::Errored { error } => ("errored", Some(error.to_string())),
        CheckStatus::Warned { error } => ("warned", Some(error.to_string())),
    };
    CheckEntry {
        name: r.check.clone(),
        phase: r.phase.to_string(),
        status: status.into(),
        detail,
        elapsed_ms: u64::try_from(r.elapsed.as_millis()).unwrap_or(u64::MAX),
    }
}

/// The staged files as checks page through them: each import path with the index of the
/// batch that reads it (batches numbered across the restore's groups, in order).
pub fn staged_objects(
    import_prefix: &str,
    files: &[BinlogFile],
    groups: &[CommitGroup],
) -> Vec<StagedObject> {
    let index = BatchIndex::new(groups);
    files
        .iter()
        .filter_map(|f| {
            let path = format!("{import_prefix}/{}", f.path);
            let batch = index.batch_of(&path)?;
            Some(StagedObject {
                path,
                size: f.size,
                batch: batch as u32,
            })
        })
        .collect()
}

/// Which batch imports a path, by the batches' import prefixes.
pub struct BatchIndex(BTreeMap<String, usize>);

impl BatchIndex {
    /// Batches numbered across `groups`, in order.
    pub fn new(groups: &[CommitGroup]) -> BatchIndex {
        let mut prefixes = BTreeMap::new();
        for (index, b) in groups.iter().flat_map(|g| g.batches.iter()).enumerate() {
            for prefix in b.files.iter().flatten() {
                prefixes.insert(prefix.clone(), index);
            }
        }
        BatchIndex(prefixes)
    }

    /// The batch whose prefix `path` is under, if any.
    pub fn batch_of(&self, path: &str) -> Option<usize> {
        // The batch prefix is the greatest one not after the path that the path starts with.
        let (prefix, batch) = self.0.range(..=path.to_owned()).next_back()?;
        path.starts_with(prefix.as_str()).then_some(*batch)
    }
}
