//! Preflight: every reason to refuse a restore, found before anything is written on any end.
//!
//! It reads (versions, replication topology, active import jobs, the backup, which target
//! collections exist) and never writes. Each refusal says why and what to do; all of them are
//! collected, so an operator fixes a job once, not once per run.

use std::time::Duration;

use futures::StreamExt as _;
use futures::future::join_all;

use super::builds::{self, Builds};
use super::clock;
use super::ends::Ends;
use super::faults::{self, Bug};
use super::refusal::{EndRunning, Refusal};
use super::route::{self, Choice, ImportApi, Route};
use crate::backup::{self, Backup, BackupFiles, CollectionCreation, L0Route, RestorePlan};
use crate::config::same_endpoint;
use crate::diagnostic::error_chain;
use crate::job::{Atomicity, Job};
use crate::milvus::topology::uri_of;
use crate::milvus::{ServerVersion, Topology};
use crate::storage::{self, OpenedStore};

/// What preflight learned, for the stages that follow.
pub struct Preflight {
    /// Per end, in [`Ends::all`] order.
    pub versions: Vec<ServerVersion>,
    pub backup_store: OpenedStore,
    /// The backup's files, without its meta tree (the plan holds what the restore takes
    /// from it). Their index keeps only where moved files are unless `[verify]` samples:
    /// the plan lists what is staged.
    pub backup: BackupFiles,
    pub plan: RestorePlan,
    /// Per collection of the plan: whether the target already has it.
    pub exists: Vec<bool>,
    /// The import this restore drives, and why.
    pub route: Choice,
    /// The ends' builds and replicated import gates.
    pub builds: Builds,
    /// How long preflight waited for every end's clock to pass the backup's newest row.
    pub clock_waited: Duration,
}

/// Runs every check; `Err` holds every reason to refuse.
pub async fn preflight(job: &Job, ends: &Ends) -> Result<Preflight, Vec<Refusal>> {
    let mut refusals = Vec::new();
    // Nothing else can be asked of an end that does not answer.
    let known = versions(job, ends, &mut refusals).await?;
    let route = match choose_route(job, ends, &known[0]).await {
        Ok(route) => route,
        Err(refusal) => {
            refusals.push(refusal);
            return Err(refusals);
        }
    };
    // The probe of the replication waits for a time tick or two on every secondary (200 ms
    // at least): the backup is read, planned and counted meanwhile, which is a quarter of
    // what lockstep adds to the imports of 100 collections. The backup's data is read even
    // when the topology refuses: that costs only a refusal its time, and says more.
    let mut topology = Vec::new();
    let mut job_and_backup = Vec::new();
    let mut of_builds = Vec::new();
    let allow_mixed = job.two_phase.allow_mixed_builds;
    let ((), (backup_store, read, planned), builds) = tokio::join!(
        check_topology(job, ends, &known[0], route.route, &mut topology),
        job_and_backup_checks(job, ends, &known, route.route, &mut job_and_backup),
        builds::check(ends, &known, allow_mixed, &mut of_builds),
    );
    refusals.extend(topology);
    refusals.extend(job_and_backup);
    refusals.extend(of_builds);
    // The meta tree is planned and checked: from here on the restore asks only the files.
    let files = read.map(|backup| backup.files);
    let mut exists = Vec::new();
    if let Some(plan) = &planned {
        if route.route == Route::TwoPhase {
            check_budget(job, ends, plan, &mut refusals).await;
        }
        exists = existing_collections(job, ends, plan, &mut refusals).await;
    }
    // Last, so that a wait for the clocks comes only when nothing else refuses.
    let mut clock_waited = Duration::ZERO;
    if let Some(plan) = &planned
        && let Some(newest) = plan.newest_row
        && !super::faults::planted(super::faults::Bug::SkipClock)
    {
        let collection = plan.collections[newest.collection].source.to_string();
        clock_waited =
            clock::hold(ends, &known, newest.timestamp, &collection, &mut refusals).await;
    }

    match (refusals.is_empty(), backup_store, files, planned) {
        (true, Some(backup_store), Some(mut files), Some(plan)) => {
            // After the commit a sample reads the segments' files by the listing; without
            // one, nothing asks it more than where a moved file is.
            if job.verify.sample.is_none() {
                files.binlogs.keep_sources();
            }
            Ok(Preflight {
                versions: known,
                backup_store,
                backup: files,
                plan,
                exists,
                route,
                builds,
                clock_waited,
            })
        }
        _ => Err(refusals),
    }
}

/// Every end's Milvus version, the target's first; an end that does not answer refuses the
/// restore at once. With secondaries, every end must hold imports Uncommitted.
async fn versions(
    job: &Job,
    ends: &Ends,
    refusals: &mut Vec<Refusal>,
) -> Result<Vec<ServerVersion>, Vec<Refusal>> {
    let versions = join_all(ends.all().iter().map(|e| e.grpc.version())).await;
    let mut known = Vec::new();
    for (end, v) in ends.all().iter().zip(versions) {
        match v {
            Ok(v) => known.push(v),
            Err(e) => refusals.push(Refusal::Unreachable {
                end: end.name.clone(),
                uri: end.uri.clone(),
                reason: e.to_string(),
            }),
        }
    }
    if !refusals.is_empty() {
        return Err(std::mem::take(refusals));
    }
    if !job.secondaries.is_empty() {
        for (end, v) in ends.all().iter().zip(&known) {
            if !v.supports_two_phase_import() {
                refusals.push(Refusal::VersionTooOld {
                    role: end.role,
                    end: end.name.clone(),
                    found: v.clone(),
                });
            }
        }
    }
    Ok(known)
}

/// The checks of the job and of the backup: the job's paths and options, the backup read,
/// planned and held to its objects, and its rows counted from its data when nothing was
/// refused so far. Returns the backup's store, the backup and its plan, each as far as it
/// got.
async fn job_and_backup_checks(
    job: &Job,
    ends: &Ends,
    known: &[ServerVersion],
    route: Route,
    refusals: &mut Vec<Refusal>,
) -> (Option<OpenedStore>, Option<Backup>, Option<RestorePlan>) {
    check_path_forms(job, refusals);
    unsupported_options(job, refusals);
    let (backup_store, read, mut planned) = backup_and_plan(job, route, refusals).await;
    if let (Some(store), Some(b), Some(plan)) = (&backup_store, &read, &mut planned) {
        check_backup_objects(job, store, b, plan, refusals).await;
        if refusals.is_empty() && !job.restore.meta_only {
            let l0 = l0_route(job, ends, known, route);
            let unfoldable = count_exact_rows(job, store, b, plan, l0, refusals).await;
            check_l0_import(job, ends, known, l0, unfoldable, refusals);
        }
    }
    (backup_store, read, planned)
}

/// The backup's store, the backup read from it and its plan for `route`, each as far as it
/// got.
async fn backup_and_plan(
    job: &Job,
    route: Route,
    refusals: &mut Vec<Refusal>,
) -> (Option<OpenedStore>, Option<Backup>, Option<RestorePlan>) {
    let backup_store = match storage::open(&job.backup.storage) {
        Ok(s) => s,
        Err(e) => {
            refusals.push(Refusal::BackupStorage {
                url: job.backup.storage.url.to_string(),
                reason: e.to_string(),
            });
            return (None, None, None);
        }
    };
    let read = match backup::read(backup_store.store.as_ref(), &job.backup.location()).await {
        Ok(b) => b,
        Err(e) => {
            refusals.push(Refusal::Backup {
                backup: job.backup.name.clone(),
                reason: error_chain(&e),
            });
            return (Some(backup_store), None, None);
        }
    };
    let planned = match backup::plan(&read, &job.restore, route.strategy()) {
        Ok(p) if p.collections.is_empty() => {
            refusals.push(Refusal::NothingToRestore {
                backup: job.backup.name.clone(),
            });
            None
        }
        Ok(p) => Some(p),
        Err(backup::Error::StorageV3Segment {
            collection,
            segment,
        }) => {
            refusals.push(Refusal::StorageV3 {
                collection,
                segment,
            });
            None
        }
        Err(e) => {
            refusals.push(Refusal::Backup {
                backup: job.backup.name.clone(),
                reason: error_chain(&e),
            });
            None
        }
    };
    (Some(backup_store), Some(read), planned)
}

/// Collections whose existence is asked of the target at once. All of them at once sent a
/// server 10,000 calls in one burst, and held each one's request (11 MB per 1,000
/// collections, the largest part of preflight's peak after the backup's meta).
const ASKED_AT_ONCE: usize = 16;

/// Per collection of the plan, whether the target already has it, refusing what the job's
/// collection creation does not allow.
async fn existing_collections(
    job: &Job,
    ends: &Ends,
    plan: &RestorePlan,
    refusals: &mut Vec<Refusal>,
) -> Vec<bool> {
    let target = ends.target();
    // By index: a closure over a borrowed item would keep the restore's future from being
    // `Send` (rust-lang/rust#102211).
    let answers: Vec<_> = futures::stream::iter(0..plan.collections.len())
        .map(|i| {
            let c = &plan.collections[i].target;
            target.grpc.has_collection(&c.db, &c.collection)
        })
        .buffered(ASKED_AT_ONCE)
        .collect()
        .await;
    let mut exists = Vec::new();
    for (c, answer) in plan.collections.iter().zip(answers) {
        match answer {
            Ok(found) => {
                if let Err(conflict) = backup::check_collection_exists(
                    &c.target,
                    found,
                    job.restore.collection_creation,
                ) {
                    refusals.push(conflict.into());
                }
                exists.push(found);
            }
            // A database that does not exist yet means the collection does not either.
            Err(e) if e.is_database_missing() => {
                if job.restore.collection_creation == CollectionCreation::UseExisting {
                    refusals.push(Refusal::NoDatabase {
                        collection: c.target.clone(),
                    });
                }
                exists.push(false);
            }
            Err(e) => {
                refusals.push(Refusal::ExistenceUnknown {
                    collection: c.target.clone(),
                    reason: e.to_string(),
                });
                exists.push(false);
            }
        }
    }
    exists
}

/// The planned collections' objects against the backup's meta, as far as `verify_backup`
/// says: one refusal per object that is not what the meta says.
async fn check_backup_objects(
    job: &Job,
    store: &OpenedStore,
    backup: &Backup,
    plan: &RestorePlan,
    refusals: &mut Vec<Refusal>,
) {
    let planned = |c: &backup::meta::CollectionBackupInfo| {
        plan.collections
            .iter()
            .any(|p| p.source_collection_id == c.collection_id)
    };
    let findings = backup::verify::verify(
        store.store.as_ref(),
        backup,
        job.restore.verify_backup,
        &planned,
    )
    .await;
    refusals.extend(findings.into_iter().map(|finding| Refusal::BackupObject {
        backup: job.backup.name.clone(),
        finding,
    }));
}

/// Each data batch's rows as its import will count them, read from the backup's data; a
/// batch whose data cannot be read keeps the meta's range, and the log says why. Data that
/// disagrees with the meta is refused, one refusal per file group.
async fn count_exact_rows(
    job: &Job,
    store: &OpenedStore,
    backup: &Backup,
    plan: &mut RestorePlan,
    route: L0Route,
    refusals: &mut Vec<Refusal>,
) -> Vec<String> {
    let counted = backup::rows::count(store.store.as_ref(), backup, plan, route).await;
    for (batch, why) in counted.unreadable {
        tracing::warn!(%batch, reason = %why, "cannot read the batch's rows from the backup's data; holding its imports to the meta's range");
    }
    refusals.extend(
        counted
            .disagreements
            .into_iter()
            .map(|disagreement| Refusal::BackupRows {
                backup: job.backup.name.clone(),
                disagreement,
            }),
    );
    counted.unfoldable
}

/// The route from what the job named and what the target's import API can do, probed
/// where the version cannot tell.
async fn choose_route(job: &Job, ends: &Ends, version: &ServerVersion) -> Result<Choice, Refusal> {
    let target = ends.target();
    let api = match ImportApi::of(version) {
        Some(api) => api,
        None => ImportApi::probe(target)
            .await
            .map_err(|e| Refusal::RouteUnknown {
                end: target.name.clone(),
                version: version.clone(),
                reason: e.to_string(),
            })?,
    };
    route::choose(job.strategy(), api, version, job.secondaries.len()).map_err(Refusal::from)
}

/// A mirror imports the target's paths verbatim: every end must read them one way.
fn check_path_forms(job: &Job, refusals: &mut Vec<Refusal>) {
    let target = &job.target.end;
    for s in &job.secondaries {
        if s.end.paths != target.paths {
            refusals.push(Refusal::PathForms {
                secondary: s.end.name.to_string(),
                secondary_paths: s.end.paths.to_string(),
                target: target.name.to_string(),
                target_paths: target.paths.to_string(),
            });
        }
    }
}

/// The replication rules: with secondaries, the target must be the primary of a replicating
/// star, the secondaries exactly its targets, and each one's replication moving; without
/// them, the target must not replicate; `per_seg` (auto-commit) never meets replication.
async fn check_topology(
    job: &Job,
    ends: &Ends,
    target_version: &ServerVersion,
    route: Route,
    refusals: &mut Vec<Refusal>,
) {
    let target = ends.target();
    let topology = match target.grpc.replicate_configuration().await {
        Ok(c) => Topology::new(c),
        Err(e) => {
            refusals.push(Refusal::TopologyUnreadable {
                end: target.name.clone(),
                reason: e.to_string(),
            });
            return;
        }
    };
    let replicating = topology.is_replicating();
    if route == Route::PerSeg && replicating {
        refusals.push(Refusal::PerSegReplicates {
            target: target.name.clone(),
        });
    }
    if !replicating {
        if !job.secondaries.is_empty() {
            refusals.push(Refusal::NotReplicating {
                target: target.name.clone(),
                secondaries: ends.secondaries().iter().map(|e| e.name.clone()).collect(),
            });
        }
        return;
    }
    let me = topology
        .find(None, &target.uri)
        .or_else(|| topology.primary());
    let Some(me) = me else {
        refusals.push(Refusal::NoPrimary {
            target: target.name.clone(),
        });
        return;
    };
    if topology.primary().map(|p| &p.cluster_id) != Some(&me.cluster_id) {
        refusals.push(Refusal::TargetIsSecondary {
            target: target.name.clone(),
            cluster: me.cluster_id.clone(),
            primary: topology
                .primary()
                .map_or("?", |p| p.cluster_id.as_str())
                .to_string(),
        });
        return;
    }
    let targets = topology.targets_of(&me.cluster_id);
    if job.secondaries.is_empty() {
        refusals.push(unnamed_secondaries(
            job,
            &target.name,
            target_version,
            &targets,
        ));
        return;
    }
    secondaries_match(ends, &me.cluster_id, &targets, refusals);
    // The topology names every secondary; that does not say their replication moves.
    if refusals.is_empty() {
        refusals.extend(super::streams::stalled(me, ends.target(), ends.secondaries()).await);
    }
}

/// A replicating target restored without secondaries: name them, or (before 3.0, which
/// cannot hold imports) it cannot be restored while it replicates.
fn unnamed_secondaries(
    job: &Job,
    target: &str,
    target_version: &ServerVersion,
    targets: &[&milvus_proto::common::MilvusCluster],
) -> Refusal {
    if target_version.supports_two_phase_import() {
        let uris: Vec<String> = targets.iter().map(|c| uri_of(c)).collect();
        Refusal::SecondariesUnnamed {
            target: target.to_owned(),
            replicates_to: (targets.iter())
                .map(|c| format!("{} ({})", c.cluster_id, uri_of(c)))
                .collect(),
            fix: job.vocabulary.list("secondaries", &uris),
        }
    } else {
        Refusal::ReplicatingTooOld {
            target: target.to_owned(),
            version: target_version.clone(),
        }
    }
}

/// The job's secondaries are exactly the target's replication targets: none is missing and
/// none is extra.
fn secondaries_match(
    ends: &Ends,
    cluster: &str,
    targets: &[&milvus_proto::common::MilvusCluster],
    refusals: &mut Vec<Refusal>,
) {
    let target = ends.target();
    for s in ends.secondaries() {
        if !targets.iter().any(|c| same_endpoint(&uri_of(c), &s.uri)) {
            refusals.push(Refusal::NotATarget {
                secondary: s.name.clone(),
                uri: s.uri.clone(),
                target: target.name.clone(),
                cluster: cluster.to_owned(),
                targets: (targets.iter())
                    .map(|c| format!("{} at {}", c.cluster_id, uri_of(c)))
                    .collect(),
            });
        }
    }
    for c in targets {
        if !ends
            .secondaries()
            .iter()
            .any(|s| same_endpoint(&uri_of(c), &s.uri))
        {
            refusals.push(Refusal::UnnamedTarget {
                target: target.name.clone(),
                cluster: c.cluster_id.clone(),
                uri: uri_of(c),
            });
        }
    }
}

/// Options milvus-backup has that this version of lockstep does not carry out yet: refused
/// rather than silently skipped.
fn unsupported_options(job: &Job, refusals: &mut Vec<Refusal>) {
    if job.restore.rbac {
        refusals.push(Refusal::Rbac);
    }
    if job.restore.drop_exist_index {
        refusals.push(Refusal::DropExistIndex);
    }
}

/// Restore-level atomicity holds every job Uncommitted at once, and every job that is not
/// Completed or Failed counts against `dataCoord.import.maxImportJobNum`, on the target and,
/// as mirrors, on each secondary; refuse a restore that cannot fit on every end.
async fn check_budget(job: &Job, ends: &Ends, plan: &RestorePlan, refusals: &mut Vec<Refusal>) {
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
                refusals.push(Refusal::BudgetUnknown {
                    end: end.name.clone(),
                    reason: e.to_string(),
                });
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
        refusals.push(Refusal::OverBudget {
            held,
            end: end.name.clone(),
            active,
            limit,
            advice,
        });
    }
}

/// How the backup's L0 deletes reach the ends: as `l0_import=true` jobs where every end
/// takes them and the import commits itself, else folded into the data imports
/// ([`backup::fold`]). Milvus 3.0 refuses L0 jobs unless `dataCoord.import.enableL0Import`
/// is on (off by default, #51194), a secondary with it off creates the replicated mirror
/// Failed, and 2.3 has no L0 import. A two-phase import always folds: its L0 deletes would
/// keep timestamps older than the commit gives the rows, and delete nothing (milvus#51247,
/// why 3.0 turned L0 import off), whatever `l0_import` says.
fn l0_route(job: &Job, ends: &Ends, versions: &[ServerVersion], route: Route) -> L0Route {
    if route == Route::TwoPhase && !faults::planted(Bug::HeldL0Jobs) {
        return L0Route::FoldTwoPhase;
    }
    let specs = std::iter::once(&job.target.end).chain(job.secondaries.iter().map(|s| &s.end));
    let all_import = ends
        .all()
        .iter()
        .zip(specs)
        .zip(versions)
        .all(|((_, spec), version)| spec.imports_l0(version));
    if all_import {
        L0Route::Import
    } else {
        L0Route::Fold
    }
}

/// The collections whose L0 deletes could not be folded (their data did not read), refused
/// on every end that would not import them as L0 jobs, naming the setting.
fn check_l0_import(
    job: &Job,
    ends: &Ends,
    versions: &[ServerVersion],
    route: L0Route,
    unfoldable: Vec<String>,
    refusals: &mut Vec<Refusal>,
) {
    if unfoldable.is_empty() {
        return;
    }
    if route == L0Route::FoldTwoPhase {
        refusals.push(Refusal::L0TwoPhase {
            collections: unfoldable,
        });
        return;
    }
    let specs = std::iter::once(&job.target.end).chain(job.secondaries.iter().map(|s| &s.end));
    let refusing: Vec<EndRunning> = ends
        .all()
        .iter()
        .zip(specs)
        .zip(versions)
        .filter(|((_, spec), version)| !spec.imports_l0(version))
        .map(|((end, _), version)| EndRunning {
            role: end.role,
            end: end.name.clone(),
            version: version.clone(),
        })
        .collect();
    if !refusing.is_empty() {
        refusals.push(Refusal::L0Import {
            ends: refusing,
            collections: unfoldable,
        });
    }
}
