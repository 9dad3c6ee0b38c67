//! `lockstep verify ID` (issue 27): what a query sees on every end after the commit, against
//! the live rows of the backup's data.

use std::time::Duration;

use e2e::{L0Import, World, WorldSpec, secondary};

/// A restore whose deletes are folded (so every import applies deletes of its own), with the
/// indexes a load needs.
fn folded() -> WorldSpec {
    WorldSpec {
        l0_import: L0Import::Default,
        ..WorldSpec::default()
    }
}

const WITH_INDEXES: &str = "[restore]\nrebuild_index = true\n";

async fn restored(world: &World, name: &str, extra: &str) -> anyhow::Result<String> {
    let job = world.job(name, extra)?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    Ok(run.report["restore_id"]
        .as_str()
        .expect("a restore id")
        .to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_end_shows_the_live_rows_and_what_verify_loaded_is_released() -> anyhow::Result<()> {
    let world = World::start(folded()).await?;
    let id = restored(&world, "verified", WITH_INDEXES).await?;
    let verify = world.run(&["verify", &id], &[]).await?;
    assert_eq!(verify.code, 0, "{}", verify.explain());
    assert_eq!(verify.report["passed"], true, "{}", verify.stdout);
    let shown = verify.report["shown"].as_array().expect("shown");
    let collections = world.backup.info.collection_backups.len();
    assert_eq!(
        shown.len(),
        collections * world.ends().len(),
        "{}",
        verify.stdout
    );
    let total: i64 = shown
        .iter()
        .filter(|s| s["end"] == e2e::TARGET)
        .map(|s| s["shows"].as_i64().expect("a count"))
        .sum();
    assert_eq!(total, world.rows_after_deletes());
    // Released on the target; a secondary follows over its replication stream, which may
    // lag a machine under load.
    let released = e2e::eventually(Duration::from_secs(10), || async {
        let states = world.snapshots().await?;
        Ok(states
            .iter()
            .all(|(_, s)| s.collections.iter().all(|c| !c.loaded)))
    });
    if released.await.is_err() {
        for (end, state) in world.snapshots().await? {
            assert!(
                state.collections.iter().all(|c| !c.loaded),
                "{end}: verify left a collection loaded"
            );
        }
    }
    Ok(())
}

/// One mirror keeps a row its deletes remove and reports the rows it should have: row
/// accounting cannot see it and the restore succeeds; a query can, and verify names the end
/// and the collection.
#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_that_kept_a_deleted_row_is_a_mismatch_only_a_query_finds() -> anyhow::Result<()> {
    let world = World::start(folded()).await?;
    let drifted = secondary(1);
    world.lose_next_delete(&drifted).await?;
    let id = restored(&world, "drifted", WITH_INDEXES).await?;
    let verify = world.run(&["verify", &id], &[]).await?;
    assert_eq!(verify.code, 3, "{}", verify.explain());
    let mismatches: Vec<&serde_json::Value> = verify.report["shown"]
        .as_array()
        .expect("shown")
        .iter()
        .filter(|s| s["shows"] != s["live"])
        .collect();
    assert_eq!(mismatches.len(), 1, "{}", verify.stdout);
    assert_eq!(mismatches[0]["end"], drifted.as_str());
    assert_eq!(
        mismatches[0]["shows"].as_i64(),
        mismatches[0]["live"].as_i64().map(|n| n + 1)
    );
    let text = world
        .run_with(e2e::Output::Text, &["verify", &id], &[])
        .await?;
    assert!(
        text.stdout.contains("MISMATCH") && text.stdout.contains(&drifted),
        "{}",
        text.stdout
    );
    Ok(())
}

/// Without vector indexes Milvus will not load a collection: verify says it cannot run, and
/// does not pass.
#[tokio::test(flavor = "multi_thread")]
async fn a_collection_that_cannot_be_loaded_is_not_verified() -> anyhow::Result<()> {
    let world = World::start(folded()).await?;
    let id = restored(&world, "no-index", "").await?;
    let verify = world.run(&["verify", &id], &[]).await?;
    assert_eq!(verify.code, 4, "{}", verify.explain());
    assert_eq!(verify.report["passed"], false);
    let shown = verify.report["shown"].as_array().expect("shown");
    assert!(
        shown.iter().all(|s| s["unverifiable"]
            .as_str()
            .is_some_and(|why| why.contains("cannot load it") && why.contains("index"))),
        "{}",
        verify.stdout
    );
    Ok(())
}
