//! The two-phase restore: happy path, lag within the grace, failures before the decision.

use std::time::Duration;

use e2e::{L0Import, TARGET, World, WorldSpec, eventually, secondary};
use milvus_sim::faults::{JobFailure, JobSelector};
use milvus_sim::jobs::JobState;

use crate::invariants::{
    commits_followed_every_uncommitted, nothing_restored, nothing_restored_eventually,
};

#[tokio::test(flavor = "multi_thread")]
async fn happy_path_makes_the_backup_visible_on_every_end() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.job("orders", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.outcome(), "succeeded");

    world.assert_nothing_held().await?;
    commits_followed_every_uncommitted(&world).await?;
    world.assert_every_end_has_the_backup().await?;
    // Commit went to the target once per job; secondaries got none (checked above).
    let jobs = run.report["jobs"].as_array().map_or(0, Vec::len);
    assert_eq!(world.requests(TARGET, "import/commit").await?, jobs);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_lagging_inside_the_grace_is_waited_for() -> anyhow::Result<()> {
    let world = World::start(WorldSpec {
        stream_lag: Duration::from_millis(1500),
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("lagging", "[two_phase]\nmirror_grace = \"20s\"\n")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    commits_followed_every_uncommitted(&world).await?;
    // The mirror really trailed: its Uncommitted came well after the target's.
    let target = world.state(TARGET).await?;
    let mirror = world.state(&secondary(0)).await?;
    let j = &target.jobs[0];
    let at = |jobs: &milvus_sim::ClusterSnapshot| {
        jobs.job(j.job_id)
            .and_then(|j| j.history.iter().find(|h| h.state == JobState::Uncommitted))
            .map(|h| h.at.unix_ms)
            .expect("Uncommitted in its history")
    };
    assert!(at(&mirror) - at(&target) >= 1000, "the mirror did not lag");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_failing_before_the_commit_rolls_everything_back() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let failing = secondary(1);
    world
        .fail_next_job(&failing, JobState::Importing, "disk full")
        .await?;
    let job = world.job("doomed", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back");
    assert!(
        run.summary().contains(&failing) && run.summary().contains("disk full"),
        "{}",
        run.summary()
    );
    assert_eq!(
        world.requests(TARGET, "import/commit").await?,
        0,
        "nothing may be committed"
    );
    nothing_restored_eventually(&world).await
}

/// Every end imports L0 segments, and the host config says so: a two-phase restore folds
/// the L0 deletes all the same and creates no L0 job anywhere, since a held import gives its
/// rows the commit's timestamp and an L0 job's deletes, older, would remove nothing
/// (milvus#51247). Nor does an end that says it imports L0 and does not matter.
#[tokio::test(flavor = "multi_thread")]
async fn a_two_phase_restore_folds_l0_deletes_whatever_the_ends_import() -> anyhow::Result<()> {
    for l0_import in [L0Import::On, L0Import::ClaimedButOff(vec![secondary(1)])] {
        let world = World::start(WorldSpec {
            l0_import: l0_import.clone(),
            ..WorldSpec::default()
        })
        .await?;
        let job = world.job("l0-on", "")?;
        let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
        assert_eq!(run.code, 0, "{l0_import:?}: {}", run.explain());
        world.assert_l0_folded().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secondary_that_cannot_read_the_files_stops_the_restore_before_any_commit()
-> anyhow::Result<()> {
    // The host config does not say where the secondaries' storage is, so nothing is staged
    // there and their mirrors fail to find the files.
    let world = World::start(WorldSpec {
        secondary_storage_known: false,
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("unstaged", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert!(run.summary().contains("secondary"), "{}", run.summary());
    assert!(
        run.summary().contains("s1") || run.summary().contains("s2"),
        "{}",
        run.summary()
    );
    // It was said before anything ran, and the failure names the setting to add.
    assert!(
        run.stderr.contains("no storage of this secondary is known"),
        "{}",
        run.stderr
    );
    assert!(
        run.summary().contains("add `storage` to its cluster"),
        "{}",
        run.summary()
    );
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    nothing_restored_eventually(&world).await
}

/// `plan` says, for each end, how it gets its files: staged into the target's store, and
/// for a secondary whose storage the host config does not give, that it must see the
/// target's store and which setting would stage into it.
#[tokio::test(flavor = "multi_thread")]
async fn plan_says_how_each_end_gets_its_files() -> anyhow::Result<()> {
    let world = World::start(WorldSpec {
        secondary_storage_known: false,
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("planned", "")?;
    let plan = world.run(&["plan", job.to_str().unwrap()], &[]).await?;
    assert_eq!(plan.code, 0, "{}", plan.explain());
    let files: Vec<(&str, &str)> = plan.report["ends"]
        .as_array()
        .expect("ends")
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["files"].as_str().unwrap()))
        .collect();
    let mut expected = vec![(TARGET, "staged")];
    let secondaries: Vec<String> = (0..world.spec.secondaries).map(secondary).collect();
    expected.extend(secondaries.iter().map(|s| (s.as_str(), "target_store")));
    assert_eq!(files, expected);
    let text = world
        .run_with(e2e::Output::Text, &["plan", job.to_str().unwrap()], &[])
        .await?;
    assert!(
        text.stdout.contains(&format!(
            "end {}: Milvus {}; no storage known: its mirrors read the paths staged into the target's storage from its own (a shared bucket, or synced content); add `storage` to its cluster in the host config to stage into it",
            secondary(0),
            world.spec.secondary_version
        )),
        "{}",
        text.explain()
    );
    assert!(
        world.writes_received().await?.is_empty(),
        "plan changes nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secondary_that_requires_staging_without_storage_is_refused_before_anything_runs()
-> anyhow::Result<()> {
    let world = World::start(WorldSpec {
        secondary_storage_known: false,
        ..WorldSpec::default()
    })
    .await?;
    let config = world.path("lockstep.toml");
    let text = std::fs::read_to_string(&config)?.replace(
        &format!("[clusters.{}]\n", secondary(0)),
        &format!("[clusters.{}]\nrequire_staging = true\n", secondary(0)),
    );
    std::fs::write(&config, text)?;
    let job = world.job("required", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 2, "{}", run.explain());
    assert!(
        run.stdout.contains("require_staging = true but no storage"),
        "{}",
        run.explain()
    );
    assert!(world.writes_received().await?.is_empty());
    Ok(())
}

/// A collection must be on every secondary before its jobs are created. One that does not
/// arrive within the mirror grace fails the restore, while staging runs beside the wait:
/// no job is created, and the collections and staged files are removed again.
#[tokio::test(flavor = "multi_thread")]
async fn a_collection_that_does_not_reach_a_secondary_in_time_creates_no_job() -> anyhow::Result<()>
{
    let world = World::start(WorldSpec {
        stream_lag: Duration::from_secs(4),
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("no-arrival", "[two_phase]\nmirror_grace = \"1s\"\n")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back");
    assert!(
        run.summary().contains("did not arrive on secondary"),
        "{}",
        run.summary()
    );
    assert_eq!(world.requests(TARGET, "import/create").await?, 0);
    assert!(
        !world
            .storage_dir(TARGET)
            .join(lockstep::storage::STAGING_ROOT)
            .exists(),
        "the staged files were left behind"
    );
    // The drops reach the secondaries over the lagging stream.
    eventually(Duration::from_secs(20), || async {
        Ok(nothing_restored(&world).await.is_ok())
    })
    .await?;
    nothing_restored(&world).await
}

/// Once every end accepted every commit, nothing reads the staged files again: they are
/// deleted while the ends are still Committing, not after every end is Completed.
#[tokio::test(flavor = "multi_thread")]
async fn staged_files_go_while_the_ends_commit() -> anyhow::Result<()> {
    // Every import stage, Committing included, lasts a second.
    let world = World::start(WorldSpec {
        target_stage: Duration::from_secs(1),
        secondary_stage: Duration::from_secs(1),
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("early-cleanup", "")?;
    let staging = world
        .storage_dir(TARGET)
        .join(lockstep::storage::STAGING_ROOT);
    // The target's states at the moment its staged files are gone.
    let watch = async {
        eventually(Duration::from_secs(60), || async { Ok(staging.exists()) }).await?;
        eventually(Duration::from_secs(60), || async { Ok(!staging.exists()) }).await?;
        let states: Vec<JobState> = world
            .state(TARGET)
            .await?
            .jobs
            .iter()
            .map(|j| j.state)
            .collect();
        anyhow::Ok(states)
    };
    let args = ["run", job.to_str().unwrap()];
    let (run, states) = tokio::join!(world.run(&args, &[]), watch);
    let (run, states) = (run?, states?);
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.report["staging"]["cleaned_up"].as_bool(), Some(true));
    assert!(
        states
            .iter()
            .all(|s| matches!(s, JobState::Committing | JobState::Completed))
            && states.contains(&JobState::Committing),
        "the staged files went at {states:?}: before every commit was accepted, or only after \
         every job completed"
    );
    Ok(())
}

/// Staging is pipelined: a batch's job is created as soon as its own files are staged. A file
/// that cannot be staged late in the stage fails the restore like any failure before the
/// decision: whatever jobs were created are aborted everywhere, nothing commits, and the
/// collections are dropped.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_fails_late_in_the_stage_aborts_the_jobs_created_before_it()
-> anyhow::Result<()> {
    // Enough batches that the first jobs are created well before the stage reaches the last
    // collection (about 70 of 280 here).
    let world = World::start(WorldSpec::with_collections(40)).await?;
    let job = world.job("late-file", "")?;
    let job_path = job.to_str().unwrap();
    // A first attempt that fails names the restore; the next attempt's id follows from it.
    world
        .fail_last_job_at_uncommitted(&job, "the first attempt fails")
        .await?;
    let first = world.run(&["run", job_path], &[]).await?;
    assert_eq!(first.code, 1, "{}", first.explain());
    let first_id = first.report["restore_id"].as_str().unwrap_or_default();
    let next_id = format!(
        "{}.2",
        first_id
            .strip_suffix(".1")
            .ok_or_else(|| anyhow::anyhow!("not a first attempt: {first_id}"))?
    );
    // The last collection's files are staged last. On s1 their staged paths are taken by
    // directories, so placing any of them fails.
    let last = world
        .backup
        .info
        .collection_backups
        .last()
        .expect("six collections");
    let lacking = secondary(0);
    let staged = world
        .storage_dir(&lacking)
        .join(lockstep::storage::STAGING_ROOT)
        .join(&next_id);
    let mut blocked = 0;
    for log in &world.backup.logs {
        if log
            .relative_path
            .contains(&format!("/{}/", last.collection_id))
        {
            std::fs::create_dir_all(staged.join(&log.relative_path))?;
            blocked += 1;
        }
    }
    assert!(blocked > 0, "no binlog of {}", last.collection_name);

    let before = world.requests(TARGET, "import/create").await?;
    let run = world.run(&["run", job_path], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back");
    assert_eq!(run.report["restore_id"].as_str(), Some(next_id.as_str()));
    let created = world.requests(TARGET, "import/create").await? - before;
    assert!(created > 0, "no job was created while the stage ran");
    assert!(
        run.summary().contains("staging failed") && run.summary().contains(&lacking),
        "{}",
        run.summary()
    );
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    world.assert_nothing_held().await?;
    nothing_restored_eventually(&world).await
}

/// The DDL runs beside the stage: a collection's jobs are created once it is on every end,
/// while later collections are still being created. A DDL call that fails late fails the
/// restore like any failure before the decision: the jobs already created are aborted
/// everywhere, nothing commits, and every collection the restore created is dropped.
#[tokio::test(flavor = "multi_thread")]
async fn a_ddl_call_that_fails_late_aborts_the_jobs_created_before_it() -> anyhow::Result<()> {
    a_ddl_call_fails_at(39).await
}

/// The DDL makes a few collections at once: when one in the middle of the plan fails, the
/// ones being made beside it are finished and recorded, and the rollback drops them too.
#[tokio::test(flavor = "multi_thread")]
async fn a_ddl_call_that_fails_mid_plan_leaves_none_of_the_collections_made_beside_it()
-> anyhow::Result<()> {
    a_ddl_call_fails_at(20).await
}

/// Restores forty collections with slow DDL answers, the index of collection `failing`
/// naming a field its schema lacks, and holds the rollback to leaving nothing.
async fn a_ddl_call_fails_at(failing: usize) -> anyhow::Result<()> {
    let world = World::start(WorldSpec::with_collections(40)).await?;
    // The collection's index names a field its schema lacks: with `rebuild_index`, Milvus
    // refuses that index after the collection itself was created.
    let failing = &world.backup.info.collection_backups[failing].collection_name;
    let meta = world
        .path("backups")
        .join(world.backup.backup_dir.as_ref())
        .join("meta");
    let edited = point_index_at_a_missing_field(&meta, failing)?;
    assert!(edited > 0, "no meta file describes {failing}'s index");
    // Slow DDL answers, so that the early collections' jobs are created while the DDL of
    // the later ones still runs.
    world
        .slow_grpc(TARGET, Duration::from_millis(15), Duration::from_secs(60))
        .await?;
    let job = world.job("late-ddl", "[restore]\nrebuild_index = true\n")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back");
    assert!(
        run.summary().contains("DDL on the target failed")
            && run.summary().contains("non-exist field"),
        "{}",
        run.summary()
    );
    assert!(
        world.requests(TARGET, "import/create").await? > 0,
        "no job was created while the DDL ran"
    );
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    world.assert_nothing_held().await?;
    nothing_restored_eventually(&world).await
}

/// Rewrites every meta file in the backup's `meta` folder so that `collection`'s indexes
/// name a field its schema lacks; how many indexes it changed.
fn point_index_at_a_missing_field(
    meta: &std::path::Path,
    collection: &str,
) -> anyhow::Result<usize> {
    fn edit(value: &mut serde_json::Value, collection: &str) -> usize {
        match value {
            serde_json::Value::Object(map) => {
                let ours = map.get("collection_name").and_then(|n| n.as_str()) == Some(collection);
                match map.get_mut("index_infos") {
                    Some(serde_json::Value::Array(infos)) if ours => {
                        for info in infos.iter_mut() {
                            info["field_name"] = "no_such_field".into();
                        }
                        infos.len()
                    }
                    _ => map.values_mut().map(|v| edit(v, collection)).sum(),
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().map(|v| edit(v, collection)).sum(),
            _ => 0,
        }
    }
    let mut edited = 0;
    for entry in std::fs::read_dir(meta)? {
        let path = entry?.path();
        let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        let n = edit(&mut json, collection);
        if n > 0 {
            std::fs::write(&path, serde_json::to_vec(&json)?)?;
            edited += n;
        }
    }
    Ok(edited)
}

/// Found by the fault runner (seed 3074): staged files deleted while a mirror listed its
/// segment left it reading part of one, and milvus-sim imported the rest where Milvus fails
/// the job. A secondary missing one binlog must stop the restore before any commit.
#[tokio::test(flavor = "multi_thread")]
async fn a_secondary_missing_one_binlog_of_a_staged_segment_rolls_back_instead_of_importing_the_rest()
-> anyhow::Result<()> {
    // The mirrors lag, so the binlog goes after staging and before the mirror reads it.
    let world = World::start(WorldSpec {
        stream_lag: Duration::from_millis(1500),
        ..WorldSpec::default()
    })
    .await?;
    let lacking = secondary(1);
    let job = world.job("half-segment", "")?;
    let remove_one = async {
        eventually(Duration::from_secs(30), || async {
            Ok(!world.state(TARGET).await?.jobs.is_empty())
        })
        .await?;
        let staged = world
            .storage_dir(&lacking)
            .join(lockstep::storage::STAGING_ROOT);
        let victim = first_file(&staged, &|f| f.to_string_lossy().contains("/insert_log/"))?
            .ok_or_else(|| anyhow::anyhow!("no staged insert log under {}", staged.display()))?;
        std::fs::remove_file(&victim)?;
        anyhow::Ok(victim)
    };
    let args = ["run", job.to_str().unwrap()];
    let (run, victim) = tokio::join!(world.run(&args, &[]), remove_one);
    let (run, victim) = (run?, victim?);
    assert_eq!(
        run.code,
        1,
        "{} (removed {})",
        run.explain(),
        victim.display()
    );
    assert_eq!(run.outcome(), "rolled_back");
    assert!(
        run.summary().contains(&lacking) && run.summary().contains("binlog"),
        "{}",
        run.summary()
    );
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    // The drops of the rolled-back collections reach the secondaries over the lagging stream.
    nothing_restored_eventually(&world).await
}

/// The first file under `dir` that `wanted` accepts, in name order, depth first.
fn first_file(
    dir: &std::path::Path,
    wanted: &dyn Fn(&std::path::Path) -> bool,
) -> std::io::Result<Option<std::path::PathBuf>> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if let Some(file) = first_file(&path, wanted)? {
                return Ok(Some(file));
            }
        } else if wanted(&path) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_content_after_success_is_a_no_op() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.job("twice", "")?;
    let first = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(first.code, 0, "{}", first.explain());
    let creates = world.requests(TARGET, "import/create").await?;
    let second = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(second.code, 0, "{}", second.explain());
    assert_eq!(
        second.report["restore_id"], first.report["restore_id"],
        "the earlier report is returned"
    );
    assert_eq!(
        world.requests(TARGET, "import/create").await?,
        creates,
        "nothing ran again"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_failing_after_the_commit_is_a_divergence_naming_it() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let failing = secondary(1);
    let target = world.sim.cluster(TARGET).control();
    // The stream to the failing secondary lags, so its commits are still in flight when the
    // test holds them back.
    target
        .set_stream_lag(&failing, Duration::from_millis(1500))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let job = world.job("diverging", "")?;
    let child = world
        .lockstep(&["run", job.to_str().unwrap()], &[])
        .spawn()?;

    // Every mirror on the failing end is Uncommitted: the decision may now be taken.
    e2e::eventually(Duration::from_secs(60), || async {
        let t = world.state(TARGET).await?;
        let s = world.state(&failing).await?;
        Ok(!t.jobs.is_empty()
            && s.jobs.len() == t.jobs.len()
            && s.jobs.iter().all(|j| j.state == JobState::Uncommitted))
    })
    .await?;
    target
        .pause_stream(&failing)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // The target committed; the commits to the failing end wait in its paused stream.
    e2e::eventually(Duration::from_secs(60), || async {
        Ok(world
            .state(TARGET)
            .await?
            .jobs
            .iter()
            .all(|j| j.state == JobState::Completed))
    })
    .await?;
    let mirrors = world.state(&failing).await?;
    for j in &mirrors.jobs {
        world
            .sim
            .cluster(&failing)
            .control()
            .fail_job(&JobFailure {
                job: JobSelector::Id(j.job_id),
                state: JobState::Uncommitted,
                reason: "lost its disk".into(),
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    target
        .resume_stream(&failing)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let out = child.wait_with_output().await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout)?;
    let report = &report["reports"][0];
    assert_eq!(report["outcome"], "diverged");
    let divergences = report["divergences"].as_array().expect("a list");
    assert_eq!(divergences.len(), mirrors.jobs.len());
    assert!(
        divergences
            .iter()
            .all(|d| d["end"] == failing.as_str() && d["reason"] == "lost its disk")
    );
    // Visible where committed, not on the failing end; nothing held anywhere.
    world.assert_nothing_held().await?;
    let expected = world.rows_after_deletes();
    assert_eq!(world.visible(TARGET).await?.values().sum::<i64>(), expected);
    assert_eq!(
        world.visible(&secondary(0)).await?.values().sum::<i64>(),
        expected
    );
    assert_eq!(world.visible(&failing).await?.values().sum::<i64>(), 0);
    Ok(())
}

/// Seed 53164 of the fault runner: after the decision a mirror that does not complete kept
/// lockstep waiting in silence for ever. Now the wait says which ends hold which jobs, and
/// the completion timeout (an hour unless the job sets one) ends it incomplete, naming them.
#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_that_does_not_complete_after_the_commit_is_named_and_the_wait_ends()
-> anyhow::Result<()> {
    let world = World::start(WorldSpec {
        first_secondary_committing: Some(Duration::from_secs(60)),
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("stuck", "[two_phase]\ncompletion_timeout = \"7s\"\n")?;
    let run = world
        .run(
            &["--log-format", "json", "run", job.to_str().unwrap()],
            &[("LOCKSTEP_LOG", "lockstep=info")],
        )
        .await?;
    assert_eq!(run.code, 4, "{}", run.explain());
    assert_eq!(run.outcome(), "incomplete");
    let stuck = secondary(0);
    assert!(
        run.summary().contains(&format!("{stuck}: ")) && run.summary().contains("Committing"),
        "{}",
        run.summary()
    );
    assert!(
        run.summary().contains("lockstep recover"),
        "{}",
        run.summary()
    );
    let said: Vec<serde_json::Value> = run
        .stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &serde_json::Value| {
            l["fields"]["message"] == "committed; waiting for every end to complete"
        })
        .collect();
    assert!(!said.is_empty(), "the wait was silent:\n{}", run.stderr);
    // Every line names its restore, as restores side by side in a serve need.
    assert_eq!(
        said[0]["span"]["id"], run.report["restore_id"],
        "{}",
        said[0]
    );
    let waiting_for = said[0]["fields"]["waiting_for"]
        .as_str()
        .unwrap_or_default();
    assert!(
        waiting_for.starts_with(&format!("{stuck}: ")) && waiting_for.contains("Committing"),
        "{waiting_for}"
    );
    Ok(())
}
