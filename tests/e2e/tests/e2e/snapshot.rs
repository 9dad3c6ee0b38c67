//! Snapshot-format backups (milvus-backup 0.6's default on Milvus 3.0): restored by backup
//! import from their bundles, two-phase wherever the target has it, never by Milvus's
//! snapshot restore.

use e2e::{L0Import, TARGET, World, WorldSpec};
use milvus_sim::fixtures::{Format, SchemaMix};

use crate::invariants::commits_followed_every_uncommitted;
use crate::refusals::refused;

/// The default world (a 3.0.2 target replicating to two secondaries) with its backup
/// written as snapshot bundles.
fn snapshot_world() -> WorldSpec {
    let mut spec = WorldSpec::default();
    spec.backup.format = Format::Snapshot;
    spec
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_backup_restores_two_phase_into_a_target_and_its_two_secondaries()
-> anyhow::Result<()> {
    // Field ids the fixture's first cluster kept (a field dropped before the backup, say):
    // a 3.0 keeps them because lockstep asks it to.
    let mut spec = snapshot_world();
    spec.backup.first_field_id = 200;
    // Dynamic fields and partition keys too.
    spec.backup.schema = SchemaMix::Varied;
    spec.backup.collections = 4;
    let world = World::start(spec).await?;
    let job = world.job("snap", "[verify]\nrows = \"sample\"\n")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.outcome(), "succeeded");
    // Every collection verified on every end, the partition-key ones counted whole (Milvus
    // refuses a query naming their partitions) and sampled by key.
    verified_everywhere(&world, &run.report["verification"]);
    let id = run.report["restore_id"].as_str().expect("a restore id");
    let verify = world.run(&["verify", id, "--sample", "100"], &[]).await?;
    assert_eq!(verify.code, 0, "{}", verify.explain());
    verified_everywhere(&world, &verify.report);
    assert_eq!(run.report["format"], "snapshot");
    assert_eq!(run.report["route"], "two_phase");
    world.assert_nothing_held().await?;
    commits_followed_every_uncommitted(&world).await?;
    world.assert_every_end_has_the_backup().await?;
    // One commit per job, on the target only; the indexes the bundle defines were rebuilt.
    let jobs = run.report["jobs"].as_array().map_or(0, Vec::len);
    assert_eq!(world.requests(TARGET, "import/commit").await?, jobs);
    for end in world.ends() {
        let state = world.state(&end).await?;
        for c in &state.collections {
            assert!(!c.indexes.is_empty(), "{end}: {} has no index", c.name);
            assert_eq!(c.fields[0].field_id, 200, "{end}: {} renumbered", c.name);
        }
        // Staged and deleted again: nothing of the bundle stays on any end.
        assert!(
            world
                .objects_under(&end, "lockstep-staging")
                .await?
                .is_empty()
        );
    }
    Ok(())
}

/// Every collection of the backup shown on every end of `verification` (a report's, or
/// `lockstep verify`'s), with its live rows, and its sample without a difference.
fn verified_everywhere(world: &World, verification: &serde_json::Value) {
    let shown = verification["shown"].as_array().expect("shown");
    let collections = world.backup.info.collection_backups.len();
    assert_eq!(
        shown.len(),
        collections * world.ends().len(),
        "{verification}"
    );
    for s in shown {
        assert!(s["unverifiable"].is_null(), "{s}");
        assert_eq!(s["shows"], s["live"], "{s}");
        assert_eq!(s["sample"]["differences"], 0, "{s}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_storage_v3_collection_is_refused_up_front_with_nothing_written() -> anyhow::Result<()> {
    let mut spec = snapshot_world();
    spec.backup.storage_versions = vec![3];
    let world = World::start(spec).await?;
    let job = world.job("v3", "")?;
    let text = refused(
        &world,
        &job,
        Some("storage_v3"),
        &["storage version 3", "milvus#52930"],
    )
    .await?;
    let first = &world.backup.info.collection_backups[0].collection_name;
    assert!(
        text.contains(first.as_str()),
        "the collection is named:\n{text}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_that_renumbers_the_fields_is_refused_and_what_was_created_dropped()
-> anyhow::Result<()> {
    // A 2.6 does not know preserve_field_ids: the collection it makes numbers its fields
    // from 100, and the bundle's files are filed under 200.
    let mut spec = snapshot_world();
    spec.secondaries = 0;
    spec.replicating = false;
    spec.target_version = "2.6.24".into();
    spec.backup.first_field_id = 200;
    let world = World::start(spec).await?;
    let job = world.job_alone("renumbered", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 2, "{}", run.explain());
    assert_eq!(run.outcome(), "refused");
    assert_eq!(run.report["refusal_kinds"][0], "field_ids");
    let summary = run.summary();
    assert!(summary.contains("id: 200 → 100"), "{summary}");
    assert_eq!(world.requests(TARGET, "import/create").await?, 0);
    let target = world.state(TARGET).await?;
    let left: Vec<&str> = target.collections.iter().map(|c| c.name.as_str()).collect();
    assert!(
        left.is_empty(),
        "the restore's collections stayed: {left:?}"
    );
    assert!(
        world
            .objects_under(TARGET, "lockstep-staging")
            .await?
            .is_empty()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bundles_l0_segments_are_folded_for_ends_that_do_not_import_l0() -> anyhow::Result<()> {
    // Milvus 3.0 does not import L0 segments by default: the bundle's L0 deletes are folded
    // into its data imports, as a binlog backup's are, beside files read out of bundles.
    let mut spec = snapshot_world();
    spec.l0_import = L0Import::Default;
    let world = World::start(spec).await?;
    let job = world.job("l0-off", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    world.assert_l0_folded().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_backup_into_a_2_6_target_is_restored_by_auto_commit_import()
-> anyhow::Result<()> {
    // Not only into replicating clusters: a 2.6 has no two-phase import, and gets the same
    // backup import, every row counted.
    let mut spec = snapshot_world();
    spec.secondaries = 0;
    spec.replicating = false;
    spec.target_version = "2.6.24".into();
    let world = World::start(spec).await?;
    let job = world.job_alone("on-2-6", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.report["route"], "merged_auto_commit");
    world.assert_every_end_has_the_backup().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_backup_into_a_lone_3_0_target_is_two_phase_on_the_one_end() -> anyhow::Result<()>
{
    let mut spec = snapshot_world();
    spec.secondaries = 0;
    spec.replicating = false;
    let world = World::start(spec).await?;
    let job = world.job_alone("lone", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(
        (run.report["format"].as_str(), run.report["route"].as_str()),
        (Some("snapshot"), Some("two_phase"))
    );
    commits_followed_every_uncommitted(&world).await?;
    world.assert_every_end_has_the_backup().await?;
    let jobs = run.report["jobs"].as_array().map_or(0, Vec::len);
    assert!(jobs > 0);
    assert_eq!(world.requests(TARGET, "import/commit").await?, jobs);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_backup_in_the_targets_own_bucket_is_staged_not_imported_in_place()
-> anyhow::Result<()> {
    // A binlog backup there would be imported where it is; a bundle's files are not where an
    // import looks for a segment's binlogs.
    let mut spec = snapshot_world();
    spec.secondaries = 0;
    spec.replicating = false;
    spec.backup_store = e2e::BackupStore::Target;
    let world = World::start(spec).await?;
    let job = world.job_alone("own-bucket", "")?;
    let plan = world.run(&["plan", job.to_str().unwrap()], &[]).await?;
    assert_eq!(plan.code, 0, "{}", plan.explain());
    assert_eq!(plan.report["format"], "snapshot");
    assert_eq!(plan.report["ends"][0]["files"], "staged", "{}", plan.stdout);
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    world.assert_every_end_has_the_backup().await?;
    Ok(())
}
