//! Verification (issue 27): what a query sees on every end after the commit, against the
//! live rows of the backup's data: inside `lockstep run` (`[verify]`), and by
//! `lockstep verify ID` afterwards.

use std::time::Duration;

use e2e::{L0Import, RunResult as Run, World, WorldSpec, secondary};

/// A restore whose deletes are folded (so every import applies deletes of its own), with the
/// indexes a load needs.
fn folded() -> WorldSpec {
    WorldSpec {
        l0_import: L0Import::Default,
        ..WorldSpec::default()
    }
}

const WITH_INDEXES: &str = "[restore]\nrebuild_index = true\n";

/// Runs the job `name` with `extra` and says its restore id, holding the run to `code`.
async fn restored(world: &World, name: &str, extra: &str, code: i32) -> anyhow::Result<Run> {
    let job = world.job(name, extra)?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, code, "{}", run.explain());
    Ok(run)
}

fn restore_id(run: &Run) -> &str {
    run.report["restore_id"].as_str().expect("a restore id")
}

/// The `shown` entries of a verification in JSON, and those showing other rows than live.
fn shown(verification: &serde_json::Value) -> (Vec<&serde_json::Value>, Vec<&serde_json::Value>) {
    let all: Vec<&serde_json::Value> = (verification["shown"].as_array())
        .expect("shown")
        .iter()
        .collect();
    let wrong = (all.iter().copied())
        .filter(|s| s["unverifiable"].is_null() && s["shows"] != s["live"])
        .collect();
    (all, wrong)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_end_shows_the_live_rows_and_what_verify_loaded_is_released() -> anyhow::Result<()> {
    let world = World::start(folded()).await?;
    let run = restored(&world, "verified", WITH_INDEXES, 0).await?;
    // The restore verified itself: every end, every collection, the live rows.
    let (in_run, wrong) = shown(&run.report["verification"]);
    let collections = world.backup.info.collection_backups.len();
    assert_eq!(
        in_run.len(),
        collections * world.ends().len(),
        "{}",
        run.stdout
    );
    assert!(wrong.is_empty(), "{}", run.stdout);
    assert!(
        in_run.iter().all(|s| s["unverifiable"].is_null()),
        "{}",
        run.stdout
    );
    let verify = world.run(&["verify", restore_id(&run)], &[]).await?;
    assert_eq!(verify.code, 0, "{}", verify.explain());
    assert_eq!(verify.report["passed"], true, "{}", verify.stdout);
    let shown = verify.report["shown"].as_array().expect("shown");
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
/// accounting cannot see it; a query can. The restore's own verification makes it diverged,
/// naming the end and the collection; with `[verify] rows = "off"` it succeeds, and
/// `lockstep verify` finds the same afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_that_kept_a_deleted_row_is_a_mismatch_only_a_query_finds() -> anyhow::Result<()> {
    let world = World::start(folded()).await?;
    let drifted = secondary(1);
    world.lose_next_delete(&drifted).await?;
    let run = restored(&world, "drifted", WITH_INDEXES, 3).await?;
    assert_eq!(run.outcome(), "diverged");
    let (_, wrong) = shown(&run.report["verification"]);
    assert_eq!(wrong.len(), 1, "{}", run.stdout);
    assert_eq!(wrong[0]["end"], drifted.as_str());
    assert_eq!(
        wrong[0]["shows"].as_i64(),
        wrong[0]["live"].as_i64().map(|n| n + 1)
    );
    let summary = run.summary();
    assert!(
        summary.contains("a query shows other rows than the backup holds")
            && summary.contains(&format!(
                "{drifted}: {}",
                wrong[0]["collection"].as_str().unwrap_or("?")
            )),
        "{summary}"
    );

    let world = World::start(folded()).await?;
    world.lose_next_delete(&drifted).await?;
    let unverified = format!("{WITH_INDEXES}[verify]\nrows = \"off\"\n");
    let run = restored(&world, "drifted-unverified", &unverified, 0).await?;
    assert!(run.report["verification"].is_null(), "{}", run.stdout);
    let verify = world.run(&["verify", restore_id(&run)], &[]).await?;
    assert_eq!(verify.code, 3, "{}", verify.explain());
    let (_, mismatches) = shown(&verify.report);
    assert_eq!(mismatches.len(), 1, "{}", verify.stdout);
    assert_eq!(mismatches[0]["end"], drifted.as_str());
    let text = world
        .run_with(e2e::Output::Text, &["verify", restore_id(&run)], &[])
        .await?;
    assert!(
        text.stdout.contains("MISMATCH") && text.stdout.contains(&drifted),
        "{}",
        text.stdout
    );
    Ok(())
}

const SAMPLED: &str =
    "[restore]\nrebuild_index = true\n[verify]\nrows = \"sample\"\nsample = 1000\n";

/// `rows = "sample"`: every end shows each sampled key's row, field by field (the vector by
/// its bits, the dynamic field as a document), and none of the sampled deleted keys. The
/// sample of 1,000 keys takes every key of these collections, so every live row is compared.
#[tokio::test(flavor = "multi_thread")]
async fn every_end_shows_the_sampled_rows_field_by_field() -> anyhow::Result<()> {
    let world = World::start(folded()).await?;
    let run = restored(&world, "sampled", SAMPLED, 0).await?;
    let (in_run, wrong) = shown(&run.report["verification"]);
    assert!(wrong.is_empty(), "{}", run.stdout);
    assert_eq!(
        in_run.len(),
        world.backup.info.collection_backups.len() * world.ends().len()
    );
    let mut compared = 0;
    for s in &in_run {
        let sample = &s["sample"];
        assert_eq!(sample["differences"], 0, "{s}");
        assert_eq!(sample["rows"], s["live"], "every live row is sampled: {s}");
        assert!(
            sample["absent"].as_i64() > Some(0),
            "deleted keys are held absent: {s}"
        );
        if s["end"] == e2e::TARGET {
            compared += sample["rows"].as_i64().expect("rows");
        }
    }
    assert_eq!(compared, world.rows_after_deletes());
    Ok(())
}

/// One mirror shows one row with one value changed and reports every row: counts cannot see
/// it, so a restore verified by count succeeds; verified by sample it is diverged, naming the
/// end, the collection, the key and the field.
#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_that_changed_one_value_is_a_mismatch_only_the_sample_finds() -> anyhow::Result<()>
{
    let drifted = secondary(1);
    let world = World::start(folded()).await?;
    world.change_next_row(&drifted).await?;
    let run = restored(&world, "changed-counted", WITH_INDEXES, 0).await?;
    let (_, wrong) = shown(&run.report["verification"]);
    assert!(wrong.is_empty(), "a count cannot see it: {}", run.stdout);
    // `lockstep verify --sample` reads the backup again and finds it afterwards.
    let verify = world
        .run(&["verify", restore_id(&run), "--sample", "1000"], &[])
        .await?;
    assert_eq!(verify.code, 3, "{}", verify.explain());
    let found: Vec<_> = (verify.report["shown"].as_array().expect("shown").iter())
        .filter(|s| s["sample"]["differences"] == 1)
        .collect();
    assert_eq!(found.len(), 1, "{}", verify.stdout);
    assert_eq!(found[0]["end"], drifted.as_str());

    let world = World::start(folded()).await?;
    world.change_next_row(&drifted).await?;
    let run = restored(&world, "changed-sampled", SAMPLED, 3).await?;
    assert_eq!(run.outcome(), "diverged");
    let all = run.report["verification"]["shown"]
        .as_array()
        .expect("shown");
    let differs: Vec<_> = all
        .iter()
        .filter(|s| s["sample"]["differences"].as_i64() > Some(0))
        .collect();
    assert_eq!(differs.len(), 1, "{}", run.stdout);
    let s = differs[0];
    assert_eq!(s["end"], drifted.as_str());
    assert_eq!(s["shows"], s["live"], "the count is right: {s}");
    assert_eq!(s["sample"]["differences"], 1);
    let first = s["sample"]["first"][0].as_str().expect("named");
    assert!(
        first.starts_with("key ") && first.contains(", field vector: the backup holds"),
        "{first}"
    );
    let summary = run.summary();
    let collection = s["collection"].as_str().expect("collection");
    assert!(
        summary.contains(&format!("{drifted}: {collection} shows a sampled row")),
        "{summary}"
    );
    Ok(())
}

/// Without vector indexes Milvus will not load a collection: the restore says it was not
/// verified (and succeeds on its jobs' evidence, unless the job requires the verification),
/// and `verify` says it cannot run, and does not pass.
#[tokio::test(flavor = "multi_thread")]
async fn a_collection_that_cannot_be_loaded_is_not_verified() -> anyhow::Result<()> {
    let world = World::start(folded()).await?;
    let run = restored(&world, "no-index", "", 0).await?;
    // Said first, once, in the words that change it.
    let summary = run.summary();
    assert!(
        summary.starts_with("NOT VERIFIED by a query: "),
        "{summary}"
    );
    assert_eq!(
        summary.matches(lockstep::verify::NO_INDEX).count(),
        1,
        "{summary}"
    );
    assert!(!summary.contains("code 700"), "{summary}");
    let (in_run, _) = shown(&run.report["verification"]);
    assert!(
        in_run.iter().all(|s| s["unverifiable"].is_string()),
        "{}",
        run.stdout
    );
    let verify = world.run(&["verify", restore_id(&run)], &[]).await?;
    assert_eq!(verify.code, 4, "{}", verify.explain());
    // Where the job requires the verification, the same restore ends unverified, exit 4
    // as `verify` does, its data committed.
    let required = restored(
        &world,
        "no-index-required",
        "[verify]\nrequired = true\n[restore]\nsuffix = \"_required\"\n",
        4,
    )
    .await?;
    assert_eq!(
        required.report["outcome"], "unverified",
        "{}",
        required.stdout
    );
    assert!(
        required.summary().starts_with("NOT VERIFIED by a query: "),
        "{}",
        required.summary()
    );
    assert_eq!(verify.report["passed"], false);
    let shown = verify.report["shown"].as_array().expect("shown");
    assert!(
        shown.iter().all(|s| s["unverifiable"]
            .as_str()
            .is_some_and(|why| why == lockstep::verify::NO_INDEX)),
        "{}",
        verify.stdout
    );
    Ok(())
}

/// A committed collection dropped afterwards (by a client, or by a host that lost the
/// restore while paused: DESIGN.md §2.1) is gone, not unverified: `verify` names it gone on
/// the target and exits 3, as for other rows, and says why the ends that would show it after
/// a load were not asked; every other collection still shows its live rows.
#[tokio::test(flavor = "multi_thread")]
async fn a_collection_dropped_after_its_commit_is_gone_not_unverified() -> anyhow::Result<()> {
    let world = World::start(folded()).await?;
    let run = restored(&world, "dropped", WITH_INDEXES, 0).await?;
    let (in_run, _) = shown(&run.report["verification"]);
    let dropped = in_run[0]["collection"].as_str().expect("a collection");
    let (db, name) = dropped.split_once('.').expect("db.collection");
    let tls = lockstep::milvus::Tls::default();
    let uri = world.sim.uri(e2e::TARGET);
    let target = lockstep::milvus::GrpcClient::new(e2e::TARGET, &uri, None, &tls)?;
    target.drop_collection(db, name, None).await?;

    let verify = world.run(&["verify", restore_id(&run)], &[]).await?;
    assert_eq!(verify.code, 3, "{}", verify.explain());
    assert_eq!(verify.report["passed"], false);
    let shown = verify.report["shown"].as_array().expect("shown");
    let (of_dropped, others): (Vec<_>, Vec<_>) =
        shown.iter().partition(|s| s["collection"] == dropped);
    let gone: Vec<_> = of_dropped.iter().filter(|s| s["gone"] == true).collect();
    assert_eq!(gone.len(), 1, "{}", verify.stdout);
    assert_eq!(gone[0]["end"], e2e::TARGET);
    assert!(
        (of_dropped.iter())
            .filter(|s| s["end"] != e2e::TARGET)
            .all(|s| s["unverifiable"]
                .as_str()
                .is_some_and(|why| why.contains("gone from t"))),
        "{}",
        verify.stdout
    );
    assert!(
        !others.is_empty()
            && others
                .iter()
                .all(|s| s["gone"].is_null() && s["shows"] == s["live"]),
        "{}",
        verify.stdout
    );
    let text = world
        .run_with(e2e::Output::Text, &["verify", restore_id(&run)], &[])
        .await?;
    assert!(
        text.stdout.contains(dropped) && text.stdout.contains("GONE"),
        "{}",
        text.stdout
    );
    Ok(())
}
