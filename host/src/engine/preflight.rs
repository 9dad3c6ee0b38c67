//! Preflight: every reason to refuse a restore, found before anything is written on any end.
//!
//! It reads (versions, replication topology, active import jobs, the backup, which target
//! collections exist) and never writes. Each refusal says why and what to do; all of them are
//! collected, so an operator fixes a job once, not once per run.

use futures::future::join_all;

use super::ends::Ends;
use super::route::{self, Choice, ImportApi, Route};
use crate::backup::{self, Backup, BatchKind, CollectionCreation, RestorePlan};
use crate::job::{Atomicity, Job};
use crate::milvus::{ServerVersion, Topology, topology::same_endpoint};
use crate::storage::{self, OpenedStore};

/// What preflight learned, for the stages that follow.
pub struct Preflight {
    /// Per end, in [`Ends::all`] order.
    pub versions: Vec<ServerVersion>,
    pub backup_store: OpenedStore,
    pub backup: Backup,
    pub plan: RestorePlan,
    /// Per collection of the plan: whether the target already has it.
    pub exists: Vec<bool>,
    /// The import this restore drives, and why.
    pub route: Choice,
}

/// Runs every check; `Err` holds every reason to refuse.
pub async fn preflight(job: &Job, ends: &Ends) -> Result<Preflight, Vec<String>> {
    let mut refusals = Vec::new();

    // Reachability and versions: nothing else can be asked of an end that does not answer.
    let versions = join_all(ends.all().iter().map(|e| e.grpc.version())).await;
    let mut known = Vec::new();
    for (end, v) in ends.all().iter().zip(versions) {
        match v {
            Ok(v) => known.push(v),
            Err(e) => refusals.push(format!(
                "{} ({}) is unreachable: {e}; check its URI and that Milvus is up",
                end.name, end.uri
            )),
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    if !job.secondaries.is_empty() {
        for (end, v) in ends.all().iter().zip(&known) {
            if !v.supports_two_phase_import() {
                refusals.push(format!(
                    "{} {} runs Milvus {v}; a restore with secondaries holds every import \
                     Uncommitted (two-phase import), which needs Milvus 3.0 or newer on the \
                     target and every secondary",
                    end.role, end.name
                ));
            }
        }
    }

    let route = match choose_route(job, ends, &known[0]).await {
        Ok(route) => route,
        Err(refusal) => {
            refusals.push(refusal);
            return Err(refusals);
        }
    };
    check_topology(job, ends, &known[0], route.route, &mut refusals).await;
    check_path_forms(job, &mut refusals);
    unsupported_options(job, &mut refusals);

    // The backup and its plan.
    let backup_store = match storage::open(&job.backup.storage) {
        Ok(s) => Some(s),
        Err(e) => {
            refusals.push(format!("backup storage {}: {e}", job.backup.storage.url));
            None
        }
    };
    let mut read = None;
    if let Some(store) = &backup_store {
        match backup::read(store.store.as_ref(), &job.backup.location()).await {
            Ok(b) => read = Some(b),
            Err(e) => refusals.push(error_chain(&e)),
        }
    }
    let mut planned = None;
    if let Some(b) = &read {
        match backup::plan(b, &job.restore, route.route.strategy()) {
            Ok(p) if p.collections.is_empty() => refusals.push(format!(
                "nothing to restore: no collection of backup {} passes the job's filters",
                job.backup.name
            )),
            Ok(p) => planned = Some(p),
            Err(e) => refusals.push(error_chain(&e)),
        }
    }

    let mut exists = Vec::new();
    if let Some(plan) = &planned {
        if route.route == Route::TwoPhase {
            check_budget(job, ends, plan, &mut refusals).await;
        }
        check_l0_import(job, ends, &known, plan, &mut refusals);
        let target = ends.target();
        let answers = join_all(plan.collections.iter().map(|c| {
            target
                .grpc
                .has_collection(&c.target.db, &c.target.collection)
        }))
        .await;
        for (c, answer) in plan.collections.iter().zip(answers) {
            match answer {
                Ok(found) => {
                    if let Err(conflict) = backup::check_collection_exists(
                        &c.target,
                        found,
                        job.restore.collection_creation,
                    ) {
                        refusals.push(conflict.to_string());
                    }
                    exists.push(found);
                }
                // A database that does not exist yet means the collection does not either.
                Err(e) if e.is_database_missing() => {
                    if job.restore.collection_creation == CollectionCreation::UseExisting {
                        refusals.push(format!(
                            "collection {} does not exist on the target (no database {}), and \
                             skip_create_collection imports into an existing one",
                            c.target, c.target.db
                        ));
                    }
                    exists.push(false);
                }
                Err(e) => {
                    refusals.push(format!("cannot tell whether {} exists: {e}", c.target));
                    exists.push(false);
                }
            }
        }
    }

    match (refusals.is_empty(), backup_store, read, planned) {
        (true, Some(backup_store), Some(backup), Some(plan)) => Ok(Preflight {
            versions: known,
            backup_store,
            backup,
            plan,
            exists,
            route,
        }),
        _ => Err(refusals),
    }
}

/// The route from what the job named and what the target's import API can do, probed
/// where the version cannot tell.
async fn choose_route(job: &Job, ends: &Ends, version: &ServerVersion) -> Result<Choice, String> {
    let target = ends.target();
    let api = match ImportApi::of(version) {
        Some(api) => api,
        None => ImportApi::probe(target).await.map_err(|e| {
            format!(
                "{} runs the branch build {version}, and asking which import routes it serves \
                 failed: {e}",
                target.name
            )
        })?,
    };
    route::choose(job.strategy(), api, version, job.secondaries.len())
}

/// A mirror imports the target's paths verbatim: every end must read them one way.
fn check_path_forms(job: &Job, refusals: &mut Vec<String>) {
    let target = &job.target.end;
    for s in &job.secondaries {
        if s.end.paths != target.paths {
            refusals.push(format!(
                "secondary {} reads import paths as {}, but the target {} as {}; a mirror \
                 imports the target's paths verbatim, so set storage_type and \
                 local_storage_path alike on every end",
                s.end.name, s.end.paths, target.name, target.paths
            ));
        }
    }
}

/// The replication rules (reference milvus-api.md §3.4): with secondaries, the target must be
/// the primary of a replicating star and the secondaries exactly its targets; without them,
/// the target must not replicate; `per_seg` (auto-commit) never meets replication.
async fn check_topology(
    job: &Job,
    ends: &Ends,
    target_version: &ServerVersion,
    route: Route,
    refusals: &mut Vec<String>,
) {
    let target = ends.target();
    let topology = match target.grpc.replicate_configuration().await {
        Ok(c) => Topology::new(c),
        Err(e) => {
            refusals.push(format!(
                "cannot read the replication configuration of {}: {e}",
                target.name
            ));
            return;
        }
    };
    let replicating = topology.is_replicating();
    if route == Route::PerSeg && replicating {
        refusals.push(format!(
            "strategy per_seg uses auto-commit imports, which Milvus refuses in a replicating \
             cluster and {} replicates; use strategy = \"merged\" with its secondaries",
            target.name
        ));
    }
    if !replicating {
        if !job.secondaries.is_empty() {
            let names: Vec<&str> = ends.secondaries().iter().map(|e| e.name.as_str()).collect();
            refusals.push(format!(
                "target {} does not replicate (GetReplicateConfiguration has no topology), so {} \
                 cannot be its secondaries; drop them from the job or configure CDC first",
                target.name,
                names.join(", ")
            ));
        }
        return;
    }
    let me = topology
        .find(None, &target.uri)
        .or_else(|| topology.primary());
    let Some(me) = me else {
        refusals.push(format!(
            "the replication configuration of {} has no single primary; fix the topology first",
            target.name
        ));
        return;
    };
    if topology.primary().map(|p| &p.cluster_id) != Some(&me.cluster_id) {
        refusals.push(format!(
            "{} is a secondary (cluster {}) in its replication topology; restore into the primary \
             {}",
            target.name,
            me.cluster_id,
            topology.primary().map_or("?", |p| p.cluster_id.as_str())
        ));
        return;
    }
    let targets = topology.targets_of(&me.cluster_id);
    let uri_of = |c: &milvus_proto::common::MilvusCluster| {
        c.connection_param
            .as_ref()
            .map(|p| p.uri.clone())
            .unwrap_or_default()
    };
    if job.secondaries.is_empty() {
        if target_version.supports_two_phase_import() {
            let list: Vec<String> = targets
                .iter()
                .map(|c| format!("{} ({})", c.cluster_id, uri_of(c)))
                .collect();
            refusals.push(format!(
                "target {} replicates to {}; name them as secondaries (secondaries = [...] or \
                 --secondaries) so the restore holds every mirror Uncommitted before the commit",
                target.name,
                list.join(", ")
            ));
        } else {
            refusals.push(format!(
                "target {} replicates and runs Milvus {target_version}; import into a replicating \
                 cluster needs Milvus 3.0 or newer",
                target.name
            ));
        }
        return;
    }
    for s in ends.secondaries() {
        if !targets.iter().any(|c| same_endpoint(&uri_of(c), &s.uri)) {
            let list: Vec<String> = targets
                .iter()
                .map(|c| format!("{} at {}", c.cluster_id, uri_of(c)))
                .collect();
            refusals.push(format!(
                "secondary {} ({}) is not a replication target of {} (cluster {}); its targets are: \
                 {}",
                s.name,
                s.uri,
                target.name,
                me.cluster_id,
                if list.is_empty() { "none".to_string() } else { list.join(", ") }
            ));
        }
    }
    for c in &targets {
        if !ends
            .secondaries()
            .iter()
            .any(|s| same_endpoint(&uri_of(c), &s.uri))
        {
            refusals.push(format!(
                "{} also replicates to cluster {} at {}, which the job does not name; every \
                 secondary must be held Uncommitted before the commit, so add it to secondaries",
                target.name,
                c.cluster_id,
                uri_of(c)
            ));
        }
    }
}

/// Options milvus-backup has that this version of lockstep does not carry out yet: refused
/// rather than silently skipped.
fn unsupported_options(job: &Job, refusals: &mut Vec<String>) {
    if job.restore.rbac {
        refusals.push(
            "restore.rbac: restoring users, roles and grants is not supported by this version of \
             lockstep; restore RBAC with milvus-backup or leave rbac off"
                .into(),
        );
    }
    if job.restore.drop_exist_index {
        refusals.push(
            "restore.drop_exist_index is not supported by this version of lockstep; drop the \
             indexes first or use drop_exist_collection"
                .into(),
        );
    }
}

/// Restore-level atomicity holds every job Uncommitted at once, and every job that is not
/// Completed or Failed counts against `dataCoord.import.maxImportJobNum`, on the target and,
/// as mirrors, on each secondary; refuse a restore that cannot fit on every end.
async fn check_budget(job: &Job, ends: &Ends, plan: &RestorePlan, refusals: &mut Vec<String>) {
    if job.restore.meta_only {
        return;
    }
    let largest = plan
        .collections
        .iter()
        .map(|c| c.batches.len())
        .max()
        .unwrap_or(0);
    let held = match job.two_phase.atomicity {
        Atomicity::Restore => plan.totals.batches,
        Atomicity::Collection => largest,
    };
    let limits = std::iter::once(job.target.max_import_jobs)
        .chain(job.secondaries.iter().map(|s| s.max_import_jobs));
    for (end, limit) in ends.all().iter().zip(limits) {
        let active = match end.rest.list("", "").await {
            Ok(jobs) => jobs.iter().filter(|j| !j.state.is_terminal()).count(),
            Err(e) => {
                refusals.push(format!(
                    "cannot list the import jobs active on {}: {e}",
                    end.name
                ));
                continue;
            }
        };
        let limit = limit as usize;
        if held + active <= limit {
            continue;
        }
        let advice = match job.two_phase.atomicity {
            Atomicity::Restore if largest + active <= limit => format!(
                "set [two_phase] atomicity = \"collection\" (the largest collection needs {largest} \
                 jobs) or raise the cluster's max_import_jobs / dataCoord.import.maxImportJobNum"
            ),
            _ => "raise max_import_jobs / dataCoord.import.maxImportJobNum, wait for active \
                  imports to finish, or restore fewer collections per job"
                .to_string(),
        };
        refusals.push(format!(
            "the restore holds {held} import jobs Uncommitted at once and {} has {active} active \
             (every job not Completed or Failed counts, mirrors too), beyond its import job \
             budget of {limit} (dataCoord.import.maxImportJobNum); {advice}",
            end.name
        ));
    }
}

/// L0 segments go through `l0_import=true` jobs, which Milvus 3.0 refuses unless
/// `dataCoord.import.enableL0Import` is on (it is off by default, #51194), and whose
/// replicated mirror a secondary with it off creates Failed: refuse up front, naming the
/// setting, where any end would not take them.
fn check_l0_import(
    job: &Job,
    ends: &Ends,
    versions: &[ServerVersion],
    plan: &RestorePlan,
    refusals: &mut Vec<String>,
) {
    let with_l0: Vec<String> = plan
        .collections
        .iter()
        .filter(|c| c.batches.iter().any(|b| b.kind == BatchKind::L0))
        .map(|c| c.source.to_string())
        .collect();
    if with_l0.is_empty() {
        return;
    }
    let specs = std::iter::once(&job.target.end).chain(job.secondaries.iter().map(|s| &s.end));
    for ((end, spec), version) in ends.all().iter().zip(specs).zip(versions) {
        if spec.imports_l0(version) {
            continue;
        }
        refusals.push(format!(
            "{} {} runs Milvus {version}, which refuses L0 (delete-only) segments unless \
             dataCoord.import.enableL0Import is on (off by default from 3.0), and the backup has \
             L0 segments in {}; turn the setting on and say so with `l0_import = true` in \
             [clusters.{}] of the host config, or restore a backup whose L0 deletes were folded \
             into the segments' delta logs",
            end.role,
            end.name,
            with_l0.join(", "),
            end.name
        ));
    }
}

/// An error with its causes, on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}
