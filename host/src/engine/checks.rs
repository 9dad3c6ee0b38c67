//! The engine's side of plugin checks: loading the job's `[[check]]`s before anything is
//! written (a plugin that does not match the WIT refuses the restore), building the restore
//! context each phase sees, and handing the checks the ends' storage through a
//! [`CheckHost`] whose credentials never reach the plugin.

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::ObjectStore;

use super::ends::Ends;
use super::error::StageError;
use super::process::Engine;
use super::refusal::Refusal;
use super::report::{CheckEntry, CheckVerdict};
use super::two_phase::Tracker;
use crate::backup::BackupFile;
use crate::backup::RestorePlan;
use crate::config::PathForm;
use crate::job::Job;
use crate::journal::{CommitGroup, Role};
use crate::milvus::JobState;
use crate::plugins::{
    self, CheckCollection, CheckContext, CheckEnd, CheckHost, CheckImportJob, CheckReport,
    CheckStatus, EndJobState, EndRole, LoadedCheck, Phase, StagedFiles, StagedObject,
    StoreCheckHost,
};
use crate::storage;

/// The job's loaded checks.
pub struct CheckSetup {
    checks: Vec<LoadedCheck>,
}

/// What a restore is, for the contexts its checks are handed.
pub struct Restore<'a> {
    pub id: &'a str,
    pub backup: &'a str,
    pub ends: &'a Ends,
    /// Every collection the restore creates or imports into ([`collections`]).
    pub collections: &'a [CheckCollection],
    /// Every commit group, in order: batches are numbered across them.
    pub groups: &'a [CommitGroup],
    /// The staged files every check may page through (before-import and before-commit
    /// alike).
    pub staged: &'a StagedFiles,
}

/// The plan's collections as checks see them.
pub fn collections(plan: &RestorePlan) -> Vec<CheckCollection> {
    plan.collections
        .iter()
        .map(|c| CheckCollection {
            database: c.target.db.clone(),
            name: c.target.collection.clone(),
            partitions: c.partitions.clone(),
        })
        .collect()
}

impl CheckContext {
    /// The context a check of `phase` is handed: every collection the restore creates, and
    /// its import jobs numbered across the whole restore, as its staged files are. Before
    /// the import, every planned job (no id, absent everywhere); before a commit, the jobs
    /// of commit group `group` with what each end shows of them.
    pub(super) fn for_phase(
        restore: &Restore<'_>,
        phase: Phase,
        group: Option<(usize, &Tracker)>,
    ) -> CheckContext {
        // `usize` is the group's first batch, numbered across the restore.
        let end = |e: &super::ends::EndClient| CheckEnd {
            name: e.name.clone(),
            uri: e.uri.clone(),
            role: match e.role {
                Role::Target => EndRole::Target,
                Role::Secondary => EndRole::Secondary,
            },
        };
        let absent = || {
            restore
                .ends
                .all()
                .iter()
                .map(|e| EndJobState {
                    end: e.name.clone(),
                    state: plugins::JobState::Absent,
                })
                .collect::<Vec<_>>()
        };
        let jobs = match (phase, group) {
            (Phase::BeforeCommit, Some((first, tracker))) => tracker
                .jobs
                .iter()
                .enumerate()
                .map(|(i, j)| CheckImportJob {
                    id: j.job_id.as_ref().map(|i| i.0.clone()).unwrap_or_default(),
                    batch: (first + i) as u32,
                    collection: j.collection.to_string(),
                    partition: j.partition.clone(),
                    states: tracker
                        .end_names
                        .iter()
                        .zip(&j.seen)
                        .map(|(end, s)| EndJobState {
                            end: end.clone(),
                            state: s.as_ref().map_or(plugins::JobState::Absent, wit_state),
                        })
                        .collect(),
                })
                .collect(),
            _ => restore
                .groups
                .iter()
                .flat_map(|g| &g.batches)
                .enumerate()
                .map(|(i, b)| CheckImportJob {
                    id: String::new(),
                    batch: i as u32,
                    collection: b.planned.namespace().to_string(),
                    partition: b.planned.partition.clone(),
                    states: absent(),
                })
                .collect(),
        };
        CheckContext {
            restore_id: restore.id.to_owned(),
            backup_name: restore.backup.to_owned(),
            phase,
            target: end(restore.ends.target()),
            secondaries: restore.ends.secondaries().iter().map(end).collect(),
            collections: restore.collections.to_vec(),
            jobs,
        }
    }
}

fn wit_state(s: &super::poll::Seen) -> plugins::JobState {
    match s.state {
        JobState::Pending => plugins::JobState::Pending,
        JobState::Importing => plugins::JobState::Importing,
        JobState::Uncommitted => plugins::JobState::Uncommitted,
        JobState::Committing => plugins::JobState::Committing,
        JobState::Completed => plugins::JobState::Completed,
        JobState::Failed => plugins::JobState::Failed(s.reason.clone().unwrap_or_default()),
        JobState::Unknown => plugins::JobState::Unknown(String::new()),
    }
}

impl CheckSetup {
    /// Loads every check of the job into the process's one plugin runtime; a plugin that
    /// cannot load refuses the restore.
    pub async fn load(engine: &Engine, job: &Job) -> Result<CheckSetup, Vec<Refusal>> {
        let mut setup = CheckSetup { checks: Vec::new() };
        if job.checks.is_empty() {
            return Ok(setup);
        }
        let runtime = engine.plugins.get().map_err(|e| {
            vec![Refusal::PluginRuntime {
                reason: e.to_string(),
            }]
        })?;
        let mut refusals = Vec::new();
        for (i, check) in job.checks.iter().enumerate() {
            match runtime.load_check(check).await {
                Ok(loaded) => setup.checks.push(loaded),
                Err(e) => refusals.push(Refusal::CheckLoad {
                    index: i,
                    name: check.name.clone(),
                    reason: e.to_string(),
                }),
            }
        }
        if refusals.is_empty() {
            Ok(setup)
        } else {
            Err(refusals)
        }
    }

    /// Whether the job has checks in this phase.
    pub fn has(&self, p: Phase) -> bool {
        self.checks.iter().any(|c| c.phase() == p)
    }

    /// Runs the checks of `ctx.phase` with `ctx`, `staged` theirs to page through: what each
    /// reported, for the report, and whether they let the restore go on.
    pub async fn run(
        &self,
        job: &Job,
        staged: &StagedFiles,
        ctx: CheckContext,
    ) -> (Vec<CheckEntry>, Result<(), StageError>) {
        if !self.has(ctx.phase) {
            return (Vec::new(), Ok(()));
        }
        let host = match host(job, staged) {
            Ok(host) => host,
            Err(e) => return (Vec::new(), Err(e)),
        };
        let result = plugins::run_checks(ctx.phase, &ctx, &self.checks, host).await;
        let reports = match &result {
            Ok(r) => r,
            Err(f) => &f.reports,
        };
        let entries = reports.iter().map(entry).collect();
        let ran = result.map(|_| ()).map_err(|f| StageError::Check {
            check: f.check,
            phase: f.phase,
            reason: f.reason,
        });
        (entries, ran)
    }
}

/// What a check reaches through the host: every destination's store, and `staged`.
fn host(job: &Job, staged: &StagedFiles) -> Result<Arc<dyn CheckHost>, StageError> {
    let mut stores: BTreeMap<String, Arc<dyn ObjectStore>> = BTreeMap::new();
    for (end, spec) in job.destinations() {
        let opened = storage::open(spec).map_err(|e| StageError::Storage {
            end: end.clone(),
            source: Box::new(e),
        })?;
        stores.insert(end, opened.store);
    }
    Ok(Arc::new(StoreCheckHost::new(stores, staged.clone())))
}

fn entry(r: &CheckReport) -> CheckEntry {
    let (status, detail) = match &r.status {
        CheckStatus::Passed => (CheckVerdict::Passed, None),
        CheckStatus::Failed { reason } => (CheckVerdict::Failed, Some(reason.clone())),
        CheckStatus::WaitExpired {
            waited,
            last_reason,
        } => (
            CheckVerdict::Expired,
            Some(format!(
                "still waiting after {}s: {last_reason}",
                waited.as_secs()
            )),
        ),
        CheckStatus::Errored { error } => (CheckVerdict::Errored, Some(error.to_string())),
        CheckStatus::Warned { error } => (CheckVerdict::Warned, Some(error.to_string())),
    };
    CheckEntry {
        name: r.check.clone(),
        phase: r.phase,
        status,
        detail,
        elapsed_ms: u64::try_from(r.elapsed.as_millis()).unwrap_or(u64::MAX),
    }
}

/// The staged files as checks page through them: each path in the ends' stores with the
/// index of the batch that reads it (batches numbered across the restore's groups, in
/// order), found by the path Milvus is given for it (`paths`' form).
pub fn staged_objects(
    import_prefix: &str,
    files: &[BackupFile],
    groups: &[CommitGroup],
    paths: &PathForm,
) -> StagedFiles {
    let index = BatchIndex::new(groups);
    let staged: Vec<StagedObject> = files
        .iter()
        .filter_map(|f| {
            let path = format!("{import_prefix}/{}", f.path);
            let batch = index.batch_of(&paths.import_path(&path))?;
            Some(StagedObject {
                path,
                size: f.size,
                batch: batch as u32,
            })
        })
        .collect();
    staged.into()
}

/// Which batch imports a path, by the batches' import prefixes.
pub struct BatchIndex(BTreeMap<String, usize>);

impl BatchIndex {
    /// Batches numbered across `groups`, in order.
    pub fn new(groups: &[CommitGroup]) -> BatchIndex {
        let mut prefixes = BTreeMap::new();
        for (index, b) in groups.iter().flat_map(|g| g.batches.iter()).enumerate() {
            for prefix in b.planned.files.iter().flatten() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::poll::Seen;
    use crate::engine::two_phase::Tracked;
    use crate::journal::{BatchRecord, PlannedBatch};
    use crate::milvus::MilvusJobId;

    fn ends() -> Ends {
        let end = |name: &str, role, port| {
            super::super::EndClient::connect(
                name,
                role,
                &format!("http://127.0.0.1:{port}"),
                None,
                &crate::milvus::Tls::default(),
            )
            .unwrap()
        };
        Ends::from_clients(vec![
            end("t", Role::Target, 1),
            end("s1", Role::Secondary, 2),
        ])
    }

    fn batch(collection: &str, partition: &str) -> BatchRecord {
        BatchRecord::new(PlannedBatch {
            batch_id: format!("default.{collection}/{partition}/data-0"),
            db: "default".into(),
            collection: collection.into(),
            partition: partition.into(),
            idempotency_key: String::new(),
            files: vec![],
            options: Default::default(),
            expected_rows: None,
        })
    }

    /// Two collections of one and two batches: one group for the restore, or one each.
    fn groups(per_collection: bool) -> Vec<CommitGroup> {
        let a = vec![batch("a", "p0")];
        let b = vec![batch("b", "p0"), batch("b", "p1")];
        let group = |id: &str, batches| CommitGroup {
            id: id.into(),
            batches,
            decision: None,
        };
        if per_collection {
            vec![group("default.a", a), group("default.b", b)]
        } else {
            vec![group("restore", a.into_iter().chain(b).collect())]
        }
    }

    fn collections() -> Vec<CheckCollection> {
        ["a", "b"]
            .iter()
            .map(|c| CheckCollection {
                database: "default".into(),
                name: (*c).into(),
                partitions: vec!["p0".into()],
            })
            .collect()
    }

    /// The tracker of `group`'s jobs, each Uncommitted on both ends.
    fn held(group: &CommitGroup) -> Tracker {
        Tracker {
            end_names: vec!["t".into(), "s1".into()],
            jobs: group
                .batches
                .iter()
                .enumerate()
                .map(|(i, b)| Tracked {
                    batch_id: b.planned.batch_id.clone(),
                    db: "default".into(),
                    collection: format!("default.{}", b.planned.collection).into(),
                    partition: b.planned.partition.clone(),
                    expected: None,
                    job_id: Some(MilvusJobId(format!("{}", 100 + i))),
                    seen: vec![
                        Some(Seen {
                            state: crate::milvus::JobState::Uncommitted,
                            progress: 99,
                            reason: None,
                        });
                        2
                    ],
                    imported: vec![None; 2],
                })
                .collect(),
        }
    }

    // The ends' clients need a runtime to be built (they connect on first use, never here).
    #[tokio::test]
    async fn before_import_every_planned_job_is_there_absent_everywhere() {
        let (ends, collections) = (ends(), collections());
        for per_collection in [false, true] {
            let groups = groups(per_collection);
            let restore = Restore {
                id: "r.ab.1",
                backup: "nightly",
                ends: &ends,
                collections: &collections,
                groups: &groups,
                staged: &StagedFiles::default(),
            };
            let ctx = CheckContext::for_phase(&restore, Phase::BeforeImport, None);
            assert_eq!(ctx.collections.len(), 2);
            let batches: Vec<u32> = ctx.jobs.iter().map(|j| j.batch).collect();
            assert_eq!(batches, [0, 1, 2], "per collection: {per_collection}");
            assert!(ctx.jobs.iter().all(|j| {
                j.id.is_empty()
                    && j.states.len() == 2
                    && j.states
                        .iter()
                        .all(|s| s.state == plugins::JobState::Absent)
            }));
            assert_eq!(ctx.jobs[2].collection, "default.b");
            assert_eq!(ctx.secondaries.len(), 1);
        }
    }

    #[tokio::test]
    async fn before_commit_a_group_sees_every_collection_and_its_jobs_numbered_across_the_restore()
    {
        let (ends, collections) = (ends(), collections());
        // Restore atomicity: one group, batches from 0.
        let one = groups(false);
        let restore = Restore {
            id: "r.ab.1",
            backup: "nightly",
            ends: &ends,
            collections: &collections,
            groups: &one,
            staged: &StagedFiles::default(),
        };
        let ctx = CheckContext::for_phase(&restore, Phase::BeforeCommit, Some((0, &held(&one[0]))));
        assert_eq!(
            ctx.collections.len(),
            2,
            "a plain restore's check sees its collections"
        );
        assert_eq!(
            ctx.jobs.iter().map(|j| j.batch).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!(ctx.jobs.iter().all(|j| {
            !j.id.is_empty()
                && j.states
                    .iter()
                    .all(|s| s.state == plugins::JobState::Uncommitted)
        }));
        // Collection atomicity: the second group's jobs go on from the first group's.
        let two = groups(true);
        let restore = Restore {
            groups: &two,
            ..restore
        };
        let ctx = CheckContext::for_phase(&restore, Phase::BeforeCommit, Some((1, &held(&two[1]))));
        assert_eq!(ctx.jobs.iter().map(|j| j.batch).collect::<Vec<_>>(), [1, 2]);
        assert!(ctx.jobs.iter().all(|j| j.collection == "default.b"));
        assert_eq!(ctx.collections.len(), 2);
    }
}
