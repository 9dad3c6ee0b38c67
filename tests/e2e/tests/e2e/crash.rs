//! Invariant 4: a lockstep process killed at any phase boundary, then run again, converges:
//! the restore ends visible on every end exactly once (no double import), and no end keeps
//! an Uncommitted job. Crash points come from the engine's `fault-injection` feature.

use std::time::Duration;

use e2e::{Output, TARGET, World, WorldSpec, secondary};
use milvus_sim::jobs::JobState;

use crate::invariants::commits_followed_every_uncommitted;

/// Runs job `name` of `world` until the process dies at `point`.
async fn killed_at(world: &World, name: &str, point: &str) -> anyhow::Result<()> {
    let job = world.job(name, "")?;
    let crashed = world
        .run(
            &["run", job.to_str().unwrap()],
            &[("LOCKSTEP_CRASH_AT", point)],
        )
        .await?;
    assert_ne!(crashed.code, 0, "killed at {point}: {}", crashed.explain());
    Ok(())
}

async fn killed_at_then_run_again(point: &str) -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.job("crashy", "")?;
    let job = job.to_str().unwrap();
    let crashed = world
        .run(&["run", job], &[("LOCKSTEP_CRASH_AT", point)])
        .await?;
    assert_ne!(
        crashed.code,
        0,
        "the crash point {point} was not reached:\n{}",
        crashed.explain()
    );
    assert!(
        crashed.report.is_null(),
        "a killed process prints no report:\n{}",
        crashed.explain()
    );

    let again = world.run(&["run", job], &[]).await?;
    assert_eq!(
        again.code,
        0,
        "after a crash at {point}:\n{}",
        again.explain()
    );
    world.assert_nothing_held().await?;
    commits_followed_every_uncommitted(&world).await?;
    // Exactly the backup's rows on every end: nothing imported twice.
    let expected = world.rows_after_deletes();
    for end in world.ends() {
        let visible: i64 = world.visible(&end).await?.values().sum();
        assert_eq!(visible, expected, "{end} after a crash at {point}");
    }
    // Every job the target ever had is Completed (committed once) or Failed (aborted).
    let target = world.state(TARGET).await?;
    let completed = target
        .jobs
        .iter()
        .filter(|j| j.state == JobState::Completed)
        .count();
    let batches = again.report["jobs"].as_array().map_or(0, Vec::len);
    assert_eq!(
        completed, batches,
        "one committed job per batch after a crash at {point}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_ddl() -> anyhow::Result<()> {
    killed_at_then_run_again("after-ddl").await
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_staging() -> anyhow::Result<()> {
    killed_at_then_run_again("after-stage").await
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_recording_the_keys_before_any_create() -> anyhow::Result<()> {
    killed_at_then_run_again("after-intent").await
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_submitting() -> anyhow::Result<()> {
    killed_at_then_run_again("after-submit").await
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_while_holding() -> anyhow::Result<()> {
    killed_at_then_run_again("holding").await
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_right_after_the_decision() -> anyhow::Result<()> {
    killed_at_then_run_again("after-decision").await
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_committing() -> anyhow::Result<()> {
    killed_at_then_run_again("after-commit").await
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_before_the_report() -> anyhow::Result<()> {
    killed_at_then_run_again("before-report").await
}

#[tokio::test(flavor = "multi_thread")]
async fn recover_alone_aborts_a_restore_killed_before_its_decision() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    killed_at(&world, "held", "holding").await?;
    let recovered = world.run(&["recover"], &[]).await?;
    assert_eq!(
        recovered.code,
        1,
        "presumed abort is a rollback:\n{}",
        recovered.explain()
    );
    assert_eq!(recovered.outcome(), "rolled_back");
    crate::invariants::nothing_restored_eventually(&world).await?;
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn recover_alone_rolls_a_decided_restore_forward() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    killed_at(&world, "decided", "after-decision").await?;
    assert_eq!(
        world.requests(TARGET, "import/commit").await?,
        0,
        "killed before any commit went out"
    );
    let recovered = world.run(&["recover"], &[]).await?;
    assert_eq!(recovered.code, 0, "{}", recovered.explain());
    world.assert_nothing_held().await?;
    commits_followed_every_uncommitted(&world).await?;
    let expected = world.rows_after_deletes();
    for end in world.ends() {
        assert_eq!(
            world.visible(&end).await?.values().sum::<i64>(),
            expected,
            "{end}"
        );
    }
    Ok(())
}

/// A recovery that rolls a restore forward asks what a query on every end sees, as the run
/// would have once every end completed: the job's `[verify]` went into the record with the
/// live rows the plan counted from the backup's data.
#[tokio::test(flavor = "multi_thread")]
async fn recover_verifies_what_it_rolled_forward() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.job("verified", "[restore]\nrebuild_index = true\n")?;
    let crashed = world
        .run(
            &["run", job.to_str().unwrap()],
            &[("LOCKSTEP_CRASH_AT", "after-decision")],
        )
        .await?;
    assert_ne!(crashed.code, 0, "{}", crashed.explain());
    let recovered = world.run(&["recover"], &[]).await?;
    assert_eq!(recovered.code, 0, "{}", recovered.explain());
    let shown = recovered.report["verification"]["shown"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let collections = world.backup.info.collection_backups.len();
    assert_eq!(
        shown.len(),
        collections * world.ends().len(),
        "every collection asked on every end: {}",
        recovered.explain()
    );
    let expected: i64 = shown
        .iter()
        .filter(|s| s["end"] == TARGET)
        .filter_map(|s| s["live"].as_i64())
        .sum();
    assert_eq!(expected, world.rows_after_deletes(), "the plan's live rows");
    for s in &shown {
        assert!(s["unverifiable"].is_null(), "{s}");
        assert_eq!(s["shows"], s["live"], "{s}");
    }
    Ok(())
}

/// With `rows = "sample"` the record keeps the sample's size: the same job run again after the
/// crash has the backup at hand and compares the sample on every end; `lockstep recover`
/// alone counts, and says of each collection that its sample was not compared and how to
/// ask for it, which `lockstep verify --sample` then does.
#[tokio::test(flavor = "multi_thread")]
async fn a_recovery_with_the_job_compares_the_sample_and_one_without_says_it_did_not()
-> anyhow::Result<()> {
    let sampled = "[restore]\nrebuild_index = true\n[verify]\nrows = \"sample\"\nsample = 50\n";
    let crash = [("LOCKSTEP_CRASH_AT", "after-decision")];
    for with_job in [true, false] {
        let world = World::start(WorldSpec::default()).await?;
        let job = world.job("sampled", sampled)?;
        let run = ["run", job.to_str().unwrap()];
        let crashed = world.run(&run, &crash).await?;
        assert_ne!(crashed.code, 0, "{}", crashed.explain());
        let recovered = match with_job {
            true => world.run(&run, &[]).await?,
            false => world.run(&["recover"], &[]).await?,
        };
        assert_eq!(recovered.code, 0, "{}", recovered.explain());
        let shown = recovered.report["verification"]["shown"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!shown.is_empty(), "{}", recovered.explain());
        for s in &shown {
            assert_eq!(s["shows"], s["live"], "{s}");
            if with_job {
                assert!(s["unverifiable"].is_null(), "{s}");
                assert_eq!(
                    s["sample"]["rows"].as_i64().map(|n| n > 0),
                    Some(true),
                    "{s}"
                );
                assert_eq!(s["sample"]["differences"], 0, "{s}");
            } else {
                let why = s["unverifiable"].as_str().unwrap_or_default();
                assert!(
                    why.contains("recovered without its job")
                        && why.contains("lockstep verify --sample 50"),
                    "{s}"
                );
            }
        }
        if !with_job {
            let id = recovered.report["restore_id"].as_str().expect("an id");
            let verify = world.run(&["verify", id, "--sample", "50"], &[]).await?;
            assert_eq!(verify.code, 0, "{}", verify.explain());
            let shown = verify.report["shown"].as_array().expect("shown");
            assert!(
                shown.iter().all(|s| s["sample"]["rows"].as_i64() > Some(0)),
                "{}",
                verify.stdout
            );
        }
    }
    Ok(())
}

/// A restore killed after its commits went out, recovered once every end has forgotten its
/// finished jobs (`dataCoord.import.taskRetention`): recover knows from the journal that the
/// jobs were created and committed, so it neither re-creates nor aborts them; it names each
/// one no end can account for any more, as not confirmed, and the data stays visible.
#[tokio::test(flavor = "multi_thread")]
async fn recover_after_task_retention_names_the_forgotten_jobs_instead_of_redoing_them()
-> anyhow::Result<()> {
    let world = World::start(WorldSpec {
        task_retention: Some(Duration::from_millis(300)),
        ..WorldSpec::default()
    })
    .await?;
    killed_at(&world, "forgotten", "after-commit").await?;
    let expected = world.rows_after_deletes();
    for end in world.ends() {
        e2e::eventually(Duration::from_secs(10), || async {
            Ok(world.visible(&end).await?.values().sum::<i64>() == expected)
        })
        .await?;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let creates = world.requests(TARGET, "import/create").await?;
    let recovered = world.run(&["recover"], &[]).await?;
    assert_eq!(recovered.code, 3, "{}", recovered.explain());
    assert_eq!(recovered.outcome(), "diverged");
    // Every job on every end, none of them re-created.
    let jobs = recovered.report["jobs"].as_array().map_or(0, Vec::len);
    let summary = recovered.summary();
    assert!(
        summary.starts_with(&format!(
            "recovered by rolling the commit decision forward: committed on the target; {} \
             job(s) not confirmed visible on s1, s2, t",
            jobs * world.ends().len()
        )),
        "{summary}"
    );
    let text = format!("{}\n{}", recovered.stdout, recovered.stderr);
    assert!(
        text.contains("no longer knows the job") && text.contains("dataCoord.import.taskRetention"),
        "{}",
        recovered.explain()
    );
    assert_eq!(
        world.requests(TARGET, "import/create").await?,
        creates,
        "nothing re-created"
    );
    assert_eq!(
        world.requests(TARGET, "import/abort").await?,
        0,
        "nothing aborted"
    );
    for end in world.ends() {
        assert_eq!(
            world.visible(&end).await?.values().sum::<i64>(),
            expected,
            "{end}"
        );
    }
    Ok(())
}

/// Staged files that a recovery cannot delete stay on record until they are deleted: a
/// crash while holding, recovered with a host config that names no storage for the
/// secondaries, rolls back and leaves the stage, which `status` lists; `recover` with the
/// stores known again deletes it on every end and `status` stops listing it.
#[tokio::test(flavor = "multi_thread")]
async fn a_stage_recovery_could_not_delete_is_listed_and_deleted_later() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    killed_at(&world, "left", "holding").await?;
    let prefix = "lockstep-staging";
    for end in world.ends() {
        assert!(
            !world.objects_under(&end, prefix).await?.is_empty(),
            "staged on {end}"
        );
    }

    // The secondaries' stores unknown: recovery aborts, but cannot delete their stage.
    let config = world.path("lockstep.toml");
    let full = std::fs::read_to_string(&config)?;
    let target_only: String = full
        .split("\n[clusters.")
        .map(|section| {
            if section.starts_with(TARGET) || !section.contains("\nuri") {
                section.to_string()
            } else {
                section
                    .lines()
                    .filter(|l| !l.starts_with("storage ="))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        })
        .collect::<Vec<_>>()
        .join("\n[clusters.");
    assert_ne!(target_only, full);
    std::fs::write(&config, &target_only)?;
    let recovered = world.run(&["recover"], &[]).await?;
    assert_eq!(
        recovered.outcome(),
        "rolled_back",
        "{}",
        recovered.explain()
    );
    world.assert_nothing_held().await?;
    let status = world.run_with(Output::Text, &["status"], &[]).await?;
    assert!(
        status
            .stdout
            .contains("staged files still to clean: lockstep-staging/left."),
        "{}",
        status.explain()
    );
    assert!(!world.objects_under(&secondary(0), prefix).await?.is_empty());

    // Known again: the next recover deletes it everywhere and the journal says so.
    std::fs::write(&config, &full)?;
    let cleaned = world.run(&["recover"], &[]).await?;
    assert_eq!(cleaned.code, 0, "{}", cleaned.explain());
    for end in world.ends() {
        assert_eq!(
            world.objects_under(&end, prefix).await?,
            Vec::<String>::new(),
            "{end}"
        );
    }
    let status = world.run_with(Output::Text, &["status"], &[]).await?;
    assert!(
        !status.stdout.contains("still to clean"),
        "{}",
        status.explain()
    );
    Ok(())
}
