//! What a held import forbids on Milvus 3.0 (issue 49): schema DDL on its collection
//! (milvus#53071), so every DDL of a collection comes before its first import; and a create
//! retried under its Idempotency-Key is admitted before the key is looked up (milvus#53228),
//! so a create whose answer was lost, retried into a job budget its own job fills, is
//! refused although the job exists: the restore finds that job and holds it with the rest.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use e2e::faults::checker;
use e2e::{TARGET, World, WorldSpec, secondary};
use milvus_sim::faults::{ApiEffect, JobSelector};
use milvus_sim::fixtures::Format;
use milvus_sim::jobs::JobState;

use crate::invariants::{commits_followed_every_uncommitted, nothing_restored_eventually};

/// A snapshot backup (its collections are created with `preserve_field_ids`, and carry
/// indexes) of three collections, into ends that refuse schema DDL while a collection has
/// an unfinished import.
fn ddl_blocked_while_importing() -> WorldSpec {
    let mut spec = WorldSpec::with_collections(3);
    spec.backup.format = Format::Snapshot;
    spec.rules.import_blocks_schema_ddl = true;
    spec
}

/// The DDL a restore sends on a collection before its imports.
const DDL: [&str; 6] = [
    "/CreateCollection",
    "/CreatePartition",
    "/CreateIndex",
    "/DropIndex",
    "/AlterCollection",
    "/AddCollectionField",
];

/// From the target's request log: each collection's last DDL was answered before its first
/// import create, and its indexes were made (else the order proves nothing).
async fn ddl_then_imports(world: &World) -> anyhow::Result<()> {
    let target = world.state(TARGET).await?;
    let mut last_ddl: BTreeMap<&str, (i64, &str)> = BTreeMap::new();
    let mut first_import: BTreeMap<&str, i64> = BTreeMap::new();
    for r in (target.requests.iter()).filter(|r| r.code == Some(0)) {
        let Some(collection) = r.collection.as_deref() else {
            continue;
        };
        if r.route.ends_with("import/create") {
            first_import.entry(collection).or_insert(r.at.unix_ms);
        } else if DDL.iter().any(|d| r.route.ends_with(d)) {
            last_ddl.insert(collection, (r.at.unix_ms, &r.route));
        }
    }
    let indexed = (target.requests_to("/CreateIndex").iter())
        .filter_map(|r| r.collection.clone())
        .collect::<std::collections::BTreeSet<_>>();
    ensure!(
        indexed.len() == world.backup.info.collection_backups.len() && !first_import.is_empty(),
        "every collection is indexed and imported: indexed {indexed:?}, imported {first_import:?}"
    );
    for (collection, first) in &first_import {
        let (at, route) = last_ddl
            .get(collection)
            .context("a collection never made")?;
        ensure!(
            at <= first,
            "{route} on {collection} answered at {at}, after its first import create at {first}"
        );
    }
    let found = checker::ddl_before_imports(&world.snapshots().await?);
    ensure!(found.is_empty(), "{}", found[0]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_ddl_of_a_collection_is_answered_before_its_first_import() -> anyhow::Result<()> {
    let world = World::start(ddl_blocked_while_importing()).await?;
    let job = world.job("ddl-first", "[restore]\nrebuild_index = true\n")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    world.assert_every_end_has_the_backup().await?;
    ddl_then_imports(&world).await
}

/// The order is read from the request log, not from a refusal: Milvus refuses schema DDL
/// (AddCollectionField, AlterCollection) while a job is held, and a restore's properties
/// ride on its CreateCollection, while an index made after the first import is no schema
/// change and goes through. A collection released to the gate before its indexes is
/// caught all the same.
#[tokio::test(flavor = "multi_thread")]
async fn an_index_made_after_the_first_import_is_caught_by_the_order_check() -> anyhow::Result<()> {
    let world = World::start(ddl_blocked_while_importing()).await?;
    let job = world.job("ddl-late", "[restore]\nrebuild_index = true\n")?;
    let plant = [("LOCKSTEP_PLANT", "index-after-release")];
    let run = world.run(&["run", job.to_str().unwrap()], &plant).await?;
    assert_eq!(
        run.code,
        0,
        "milvus-sim lets a late index through: {}",
        run.explain()
    );
    let caught = ddl_then_imports(&world).await;
    assert!(caught.is_err(), "the late indexes went unseen");
    Ok(())
}

/// A world whose target, and each secondary, can hold exactly the restore's jobs, and the
/// answer to the create of the last of them lost: its retry meets the budget full.
async fn budget_full_at_the_lost_answer(extra: &str) -> anyhow::Result<(World, u32)> {
    let spec = WorldSpec::with_collections(2);
    let jobs = spec.restore_jobs(extra).await?;
    let world = World::start(WorldSpec {
        max_import_job_num: jobs as usize,
        ..spec
    })
    .await?;
    world.lose_create_answer(jobs).await?;
    Ok((world, jobs))
}

/// The create whose answer was lost, and whether its retry met the full budget.
async fn lost_and_refused(world: &World) -> anyhow::Result<(i64, bool)> {
    let target = world.state(TARGET).await?;
    let creates = target.requests_to("import/create");
    let lost = (creates.iter())
        .find(|r| r.fault == Some(ApiEffect::Unavailable) && r.code == Some(0))
        .and_then(|r| r.job_id.as_deref()?.parse().ok())
        .context("no create answer was lost")?;
    let refused = creates.iter().any(|r| r.code == Some(2101));
    Ok((lost, refused))
}

/// Bounds the retries a create whose job is never found would go on with, so that a restore
/// that took the refusals for "not created" ends within the test.
const SHORT_CALLS: &str = "[two_phase]\ncommit_timeout = \"20s\"\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_create_whose_answer_was_lost_into_a_full_budget_is_found_held_and_committed()
-> anyhow::Result<()> {
    let (world, jobs) = budget_full_at_the_lost_answer(SHORT_CALLS).await?;
    let job = world.job("lost-answer", SHORT_CALLS)?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    let (lost, refused) = lost_and_refused(&world).await?;
    assert!(
        refused,
        "the retry never met the full budget: the test proved nothing"
    );
    let target = world.state(TARGET).await?;
    assert_eq!(
        target.jobs.len(),
        jobs as usize,
        "one job per batch, none twice"
    );
    let committed = target.requests_to("import/commit");
    assert!(
        committed.iter().any(|r| r.job_id == Some(lost.to_string())),
        "job {lost} was not committed"
    );
    world.assert_nothing_held().await?;
    commits_followed_every_uncommitted(&world).await?;
    world.assert_every_end_has_the_backup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_whose_answer_was_lost_into_a_full_budget_is_found_and_aborted_on_failure()
-> anyhow::Result<()> {
    let (world, jobs) = budget_full_at_the_lost_answer(SHORT_CALLS).await?;
    // The lost job's mirror fails once it is held: only a restore that found the job sees
    // it, and then the restore aborts everything, the lost job among them.
    let reason = "mirror of the lost create failed";
    let s1 = secondary(0);
    (world.fail_job(&s1, JobSelector::Nth(jobs), JobState::Uncommitted, reason)).await?;
    let job = world.job("lost-answer-abort", SHORT_CALLS)?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert!(run.summary().contains(reason), "{}", run.explain());
    let (lost, refused) = lost_and_refused(&world).await?;
    assert!(
        refused,
        "the retry never met the full budget: the test proved nothing"
    );
    let aborted = world.state(TARGET).await?.requests_to("import/abort").len();
    let aborts_of_lost = (world
        .state(TARGET)
        .await?
        .requests_to("import/abort")
        .iter())
    .filter(|r| r.job_id == Some(lost.to_string()))
    .count();
    assert!(
        aborts_of_lost > 0,
        "job {lost} was never aborted ({aborted} aborts): it died with its collection"
    );
    world.assert_nothing_held().await?;
    nothing_restored_eventually(&world).await
}

/// An abort that does not settle (the stream to a secondary stops before the rollback
/// reaches its mirrors) leaves jobs that may still read the staged files: they stay, and the
/// restore is left incomplete for `lockstep recover`, which deletes them once every job is
/// final.
#[tokio::test(flavor = "multi_thread")]
async fn staged_files_stay_until_every_aborted_job_is_final() -> anyhow::Result<()> {
    let spec = WorldSpec {
        secondaries: 1,
        // The mirrors stay importing: the restore's hold times out.
        secondary_stage: Duration::from_secs(600),
        ..WorldSpec::default()
    };
    let world = World::start(spec).await?;
    let job = world.job("unsettled", "[two_phase]\ncommit_timeout = \"3s\"\n")?;
    let jobs = world.planned_batches(&job).await? as usize;
    let running = world.spawn(&["run", job.to_str().unwrap()], &[])?;
    let s1 = secondary(0);
    e2e::eventually(Duration::from_secs(30), || async {
        Ok(world.state(&s1).await?.jobs.len() == jobs)
    })
    .await
    .context("every mirror on s1")?;
    let target = world.sim.cluster(TARGET).control();
    (target.pause_stream(&s1).await).map_err(|e| anyhow::anyhow!("{e}"))?;
    let run = running.finish().await?;
    assert_eq!(run.code, 4, "{}", run.explain());
    assert!(run.summary().contains("the abort"), "{}", run.summary());
    for end in world.ends() {
        let staged = world.objects_under(&end, "lockstep-staging").await?;
        assert!(
            !staged.is_empty(),
            "{end}: staged files deleted under held mirrors"
        );
    }
    (target.resume_stream(&s1).await).map_err(|e| anyhow::anyhow!("{e}"))?;
    let recovered = world.run(&["recover"], &[]).await?;
    assert_eq!(
        recovered.outcome(),
        "rolled_back",
        "{}",
        recovered.explain()
    );
    for end in world.ends() {
        let staged = world.objects_under(&end, "lockstep-staging").await?;
        assert!(
            staged.is_empty(),
            "{end}: {staged:?} left after the recovery"
        );
    }
    world.assert_nothing_held().await?;
    nothing_restored_eventually(&world).await
}
