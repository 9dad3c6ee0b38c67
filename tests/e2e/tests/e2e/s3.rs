//! The S3 path end to end: the backup and every end's storage in buckets on a real S3 server
//! (moto), staged by lockstep and read back by milvus-sim's imports. Skipped (after saying
//! so) when `LOCKSTEP_TEST_S3_ENDPOINT` is unset.

use e2e::{BackupStore, RunResult, StorageService, TARGET, World, WorldSpec, secondary};
use milvus_sim::jobs::JobState;

use crate::invariants::commits_followed_every_uncommitted;

/// The default world with every store a bucket on `endpoint`.
fn s3_world(endpoint: String) -> WorldSpec {
    WorldSpec {
        service: StorageService::S3 { endpoint },
        ..WorldSpec::default()
    }
}

/// The staging part of the report: (prefix, bytes staged per end, bytes through the host,
/// cleaned up).
fn staging(run: &RunResult) -> (String, u64, u64, bool) {
    let s = &run.report["staging"];
    (
        s["prefix"].as_str().unwrap_or_default().to_owned(),
        s["bytes"].as_u64().unwrap_or_default(),
        s["bytes_streamed"].as_u64().unwrap_or_default(),
        s["cleaned_up"].as_bool().unwrap_or_default(),
    )
}

/// The report's count of staged files (one per file and end) by way of transfer.
fn transfers(run: &RunResult) -> serde_json::Value {
    run.report["staging"]["transfers"].clone()
}

/// A successful restore: every end imported exactly the backup's binlogs (size and crc32c,
/// computed by milvus-sim from the bytes it read) from under `prefix`, the rows are visible
/// everywhere, nothing is held, and the staged prefix is gone from every end's bucket.
async fn restored_everywhere_from(world: &World, prefix: &str) -> anyhow::Result<()> {
    world.assert_nothing_held().await?;
    commits_followed_every_uncommitted(world).await?;
    for c in &world.backup.info.collection_backups {
        for end in world.ends() {
            let differs = world.imported_differs(&end, &c.collection_name).await?;
            assert_eq!(
                differs, None,
                "{end}: {} imported other files than the backup holds",
                c.collection_name
            );
            let state = world.state(&end).await?;
            let collection = state
                .collection("default", &c.collection_name)
                .expect("imported above");
            for import in &collection.completed_imports {
                for file in &import.manifest {
                    assert!(
                        file.path.starts_with(prefix),
                        "{end} imported {} from outside the staged prefix {prefix}",
                        file.path
                    );
                }
            }
        }
    }
    let expected = world.rows_after_deletes();
    for end in world.ends() {
        let visible: i64 = world.visible(&end).await?.values().sum();
        assert_eq!(visible, expected, "{end}");
        let left = world.objects_under(&end, prefix).await?;
        assert!(
            left.is_empty(),
            "{end} still holds staged objects: {left:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_in_s3_is_staged_into_every_ends_bucket_and_cleaned_up() -> anyhow::Result<()> {
    let Some(endpoint) =
        e2e::s3_endpoint("s3::a_backup_in_s3_is_staged_into_every_ends_bucket_and_cleaned_up")
    else {
        return Ok(());
    };
    let world = World::start(s3_world(endpoint)).await?;
    let job = world.job("s3-orders", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.outcome(), "succeeded");

    let (prefix, bytes, streamed, cleaned_up) = staging(&run);
    assert!(
        prefix.starts_with("lockstep-staging/"),
        "imports must read staged copies, not the backup's bucket: {prefix:?}"
    );
    // Every log an import reads is staged: the backup's, less its L0 logs, whose deletes a
    // two-phase restore folds into the delta logs it writes.
    let (files, copied) = world.logs_to_stage();
    let (folded, written) = world.folded_logs(TARGET).await?;
    assert!(folded > 0, "the backup's L0 deletes were folded");
    assert_eq!(bytes, copied + written, "every binlog is staged");
    // No end's bucket is the backup's: every end's copy went through the host.
    let ends = world.ends().len();
    assert_eq!(streamed, copied * ends as u64);
    assert_eq!(
        transfers(&run),
        serde_json::json!({ "streamed": files * ends, "written": folded * ends })
    );
    assert!(cleaned_up, "{}", run.explain());
    restored_everywhere_from(&world, &prefix).await?;
    let jobs = run.report["jobs"].as_array().map_or(0, Vec::len);
    assert_eq!(world.requests(TARGET, "import/commit").await?, jobs);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_in_the_targets_bucket_is_staged_there_by_server_side_copy() -> anyhow::Result<()>
{
    let Some(endpoint) =
        e2e::s3_endpoint("s3::a_backup_in_the_targets_bucket_is_staged_there_by_server_side_copy")
    else {
        return Ok(());
    };
    let world = World::start(WorldSpec {
        backup_store: BackupStore::Target,
        ..s3_world(endpoint)
    })
    .await?;
    let job = world.job("s3-same-bucket", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.outcome(), "succeeded");

    // The secondaries' buckets differ from the backup's, so they get staged copies too and
    // every end imports the same staged paths; the target's copy is a CopyObject inside its
    // bucket. A staged file is counted once per end that streamed it, so exactly the
    // secondaries' share passing through the host means the target's share did not.
    let (prefix, bytes, streamed, cleaned_up) = staging(&run);
    assert!(prefix.starts_with("lockstep-staging/"), "{prefix:?}");
    let (files, copied) = world.logs_to_stage();
    let (folded, written) = world.folded_logs(TARGET).await?;
    assert_eq!(bytes, copied + written);
    assert_eq!(
        streamed,
        copied * world.spec.secondaries as u64,
        "the target's staging must move no bytes through the host"
    );
    assert_eq!(
        transfers(&run),
        serde_json::json!({
            "server_side_copy": files,
            "streamed": files * world.spec.secondaries,
            "written": folded * world.ends().len(),
        })
    );
    assert!(cleaned_up, "{}", run.explain());
    // The target imported the server-side copies (milvus-sim read them: the crc32c matches),
    // and cleanup removed only them: the backup itself is still in the bucket.
    restored_everywhere_from(&world, &prefix).await?;
    let backup_left = world.objects_under(TARGET, "backup").await?;
    assert!(
        backup_left.len() >= world.backup.logs.len(),
        "the backup in the target's bucket was touched: {} objects left",
        backup_left.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_missing_from_s3_is_refused_before_anything_is_written() -> anyhow::Result<()> {
    let Some(endpoint) =
        e2e::s3_endpoint("s3::a_backup_missing_from_s3_is_refused_before_anything_is_written")
    else {
        return Ok(());
    };
    let world = World::start(s3_world(endpoint)).await?;
    let job = world.write_job(
        "s3-missing",
        "backup = \"no_such_backup\"\ntarget = \"t\"\nsecondaries = [\"s1\", \"s2\"]\n",
    )?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 2, "{}", run.explain());
    let text = format!("{}\n{}", run.stdout, run.stderr);
    assert!(
        text.contains("no_such_backup"),
        "the refusal does not name the backup:\n{text}"
    );
    let writes = world.writes_received().await?;
    assert!(writes.is_empty(), "a refused restore wrote: {writes:?}");
    // The ends' buckets started empty (the backup has a bucket of its own) and stay so.
    for end in world.ends() {
        let objects = world.objects_under(&end, "").await?;
        assert!(
            objects.is_empty(),
            "{end}'s bucket was written: {objects:?}"
        );
    }
    Ok(())
}

/// A restore that fails while its stage still copies stops copying: what is left would only
/// be deleted again, and on S3 every byte goes through the host. With collection atomicity
/// the first collection's jobs are held while the stage streams the other collections into
/// three buckets; its mirror on s1 fails, and the stage must stop short of its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_that_fails_mid_stage_stops_copying() -> anyhow::Result<()> {
    failing_mid_stage(
        "s3::a_restore_that_fails_mid_stage_stops_copying",
        "collection",
    )
    .await
}

/// The same with restore atomicity, where no job is held before the last create: the jobs
/// created so far are watched while the rest wait on the stage.
#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_failing_mid_stage_stops_a_restore_atomic_stage() -> anyhow::Result<()> {
    failing_mid_stage(
        "s3::a_mirror_failing_mid_stage_stops_a_restore_atomic_stage",
        "restore",
    )
    .await
}

/// The first mirror job on s1 fails while the stage copies 12 collections; the restore must
/// roll back with the stage stopped short of its end.
async fn failing_mid_stage(test: &str, atomicity: &str) -> anyhow::Result<()> {
    let Some(endpoint) = e2e::s3_endpoint(test) else {
        return Ok(());
    };
    let mut spec = s3_world(endpoint);
    spec.backup.collections = 12;
    let world = World::start(spec).await?;
    let failing = secondary(0);
    world
        .fail_next_job(&failing, JobState::PreImporting, "injected mirror failure")
        .await?;
    let job = world.job(
        "s3-stopped",
        &format!("[two_phase]\natomicity = \"{atomicity}\"\n"),
    )?;
    let run = world
        .run(&["--log-format", "json", "run", job.to_str().unwrap()], &[])
        .await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back");
    assert!(run.summary().contains(&failing), "{}", run.summary());
    let logged: Vec<serde_json::Value> = run
        .stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let said = |message: &str| {
        logged
            .iter()
            .filter(|l| l["fields"]["message"] == message)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        said("staging stopped: the restore failed before its decision").len(),
        1,
        "{}",
        run.explain()
    );
    let progress = said("staging");
    assert!(
        !progress.is_empty(),
        "no staging progress:\n{}",
        run.explain()
    );
    assert!(
        progress
            .iter()
            .all(|p| p["fields"]["files"] != p["fields"]["of_files"]),
        "the stage copied every file before it stopped:\n{}",
        run.explain()
    );
    assert!(
        run.report["staging"].is_null(),
        "a stopped stage reports no staging: {}",
        run.report["staging"]
    );
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    world.assert_nothing_held().await?;
    crate::invariants::nothing_restored_eventually(&world).await?;
    for end in world.ends() {
        let staged = world
            .objects_under(&end, lockstep::storage::STAGING_ROOT)
            .await?;
        assert!(staged.is_empty(), "{end} kept staged files: {staged:?}");
    }
    Ok(())
}
