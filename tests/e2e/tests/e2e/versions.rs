//! Every Milvus from 2.3 on, each through the import it has: preflight picks the route from
//! the target's version (or probes a branch build), and refuses a strategy the target
//! cannot do with what to do instead.

use e2e::{TARGET, TargetPaths, World, WorldSpec};

/// A target alone, not replicating, reporting `version`.
fn standalone(version: &str) -> WorldSpec {
    WorldSpec {
        secondaries: 0,
        replicating: false,
        target_version: version.into(),
        ..WorldSpec::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn milvus_2_3_is_restored_by_v1_import_per_segment_when_no_strategy_is_named()
-> anyhow::Result<()> {
    let world = World::start(standalone("v2.3.5-lite")).await?;
    let job = world.job_alone("old", "")?;
    let plan = world.run(&["plan", job.to_str().unwrap()], &[]).await?;
    assert_eq!(plan.code, 0, "{}", plan.explain());
    assert_eq!(plan.report["route"]["route"], "per_seg", "{}", plan.stdout);
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.report["route"], "per_seg");
    // Each job of the report names its v1 import tasks, to find them in the target's log.
    let jobs = run.report["jobs"].as_array().cloned().unwrap_or_default();
    assert!(!jobs.is_empty(), "{}", run.explain());
    for job in &jobs {
        let tasks = job["job_id"].as_str().unwrap_or_default();
        assert!(
            !tasks.is_empty() && tasks.split(',').all(|t| t.parse::<i64>().is_ok()),
            "{job}"
        );
    }
    let visible: i64 = world.visible(TARGET).await?.values().sum();
    assert_eq!(visible, world.rows_after_deletes());
    // No REST import route exists on 2.3: nothing was asked of one.
    assert_eq!(world.requests(TARGET, "import/create").await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn merged_named_on_milvus_2_3_is_refused_with_what_to_do() -> anyhow::Result<()> {
    let world = World::start(standalone("v2.3.5-lite")).await?;
    let job = world.job_alone("merged-old", "strategy = \"merged\"\n")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 2, "{}", run.explain());
    let summary = run.summary();
    assert!(
        summary.contains("v2.3.5-lite")
            && summary.contains("(2.4+)")
            && summary.contains("leave strategy unset or use per_seg"),
        "{summary}"
    );
    assert!(world.writes_received().await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn milvus_2_5_is_restored_by_merged_imports_that_commit_themselves() -> anyhow::Result<()> {
    let world = World::start(standalone("v2.5.4")).await?;
    let job = world.job_alone("middle", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.report["route"], "merged_auto_commit");
    let visible: i64 = world.visible(TARGET).await?.values().sum();
    assert_eq!(visible, world.rows_after_deletes());
    let jobs = run.report["jobs"].as_array().expect("jobs");
    assert_eq!(world.requests(TARGET, "import/create").await?, jobs.len());
    // 2.5 has no commit route, and a restore into it sends none.
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    let target = world.state(TARGET).await?;
    assert!(
        target
            .jobs
            .iter()
            .all(|j| !j.options.contains_key("auto_commit")),
        "auto_commit sent to a Milvus that does not know it"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_import_on_milvus_2_5_is_partly_committed_not_a_success() -> anyhow::Result<()> {
    let mut spec = standalone("v2.5.4");
    spec.backup.l0_segments = milvus_sim::fixtures::L0Segments::Absent;
    let world = World::start(spec).await?;
    world.short_next_import(TARGET, 4).await?;
    let job = world.job_alone("middle-short", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 5, "{}", run.explain());
    assert!(
        run.summary().contains("the backup holds"),
        "{}",
        run.summary()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_branch_build_is_probed_and_a_two_phase_one_restored_two_phase() -> anyhow::Result<()> {
    let world = World::start(standalone("master-20260806-1a2b3c4")).await?;
    let job = world.job_alone("branch", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.report["route"], "two_phase");
    let jobs = run.report["jobs"].as_array().expect("jobs").len();
    // One commit per job, and the probe's one for a job that does not exist.
    assert_eq!(world.requests(TARGET, "import/commit").await?, jobs + 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn milvus_3_without_secondaries_is_restored_two_phase_on_the_one_end() -> anyhow::Result<()> {
    let world = World::start(standalone("3.0.2")).await?;
    let job = world.job_alone("single", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.report["route"], "two_phase");
    let phases: Vec<&str> = run.report["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter_map(|p| p["phase"].as_str())
        .collect();
    for phase in ["preflight", "ddl", "holding", "completing"] {
        assert!(phases.contains(&phase), "{phase} missing from {phases:?}");
    }
    let jobs = run.report["jobs"].as_array().expect("jobs").len();
    assert_eq!(world.requests(TARGET, "import/commit").await?, jobs);
    Ok(())
}

/// A target on local storage (Milvus `common.storageType: local`), reporting `version`.
fn local_storage(version: &str, paths: TargetPaths) -> WorldSpec {
    let mut spec = standalone(version);
    spec.target_paths = paths;
    spec.backup.l0_segments = milvus_sim::fixtures::L0Segments::Absent;
    spec
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_storage_target_is_sent_absolute_paths_and_imports_every_row() -> anyhow::Result<()>
{
    let world = World::start(local_storage("v2.3.5-lite", TargetPaths::LocalDeclared)).await?;
    let job = world.job_alone("local", "")?;
    let plan = world.run(&["plan", job.to_str().unwrap()], &[]).await?;
    assert_eq!(plan.code, 0, "{}", plan.explain());
    let dir = world.storage_dir(TARGET);
    assert_eq!(
        plan.report["ends"][0]["import_paths"]["local_storage_path"],
        dir.display().to_string(),
        "{}",
        plan.stdout
    );
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    let visible: i64 = world.visible(TARGET).await?.values().sum();
    assert_eq!(visible, world.rows_after_deletes());
    let target = world.state(TARGET).await?;
    let prefix = format!("{}/lockstep-staging/", dir.display());
    for j in &target.jobs {
        assert!(
            j.files
                .iter()
                .flatten()
                .all(|f| f.is_empty() || f.starts_with(&prefix)),
            "{:?}",
            j.files
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn bucket_style_paths_on_a_local_storage_2_3_import_nothing_and_the_restore_says_so()
-> anyhow::Result<()> {
    // What lockstep did before it knew storage types: Milvus 2.3 lists nothing under a
    // relative path and completes every import with 0 rows.
    let world = World::start(local_storage("v2.3.5-lite", TargetPaths::LocalUndeclared)).await?;
    let job = world.job_alone("relative", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back");
    assert!(
        run.summary().contains("imported 0 rows"),
        "{}",
        run.summary()
    );
    let target = world.state(TARGET).await?;
    assert!(
        target.jobs.iter().all(|j| j.reason.is_empty()),
        "the server saw no failure: only row accounting could"
    );
    assert!(world.visible(TARGET).await?.values().all(|rows| *rows == 0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn bucket_style_paths_on_a_local_storage_3_0_fail_with_no_binlog_to_import()
-> anyhow::Result<()> {
    let world = World::start(local_storage("3.0.2", TargetPaths::LocalUndeclared)).await?;
    let job = world.job_alone("relative-3", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert!(
        run.summary().contains("no binlog to import"),
        "{}",
        run.summary()
    );
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    Ok(())
}
