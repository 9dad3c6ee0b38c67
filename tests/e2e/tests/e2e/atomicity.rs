//! Restore-level atomicity: one collection failing leaves no collection visible anywhere;
//! collection-level atomicity commits collection by collection within the job budget.

use std::time::Duration;

use anyhow::Context as _;

use e2e::{TARGET, World, WorldSpec, secondary};
use milvus_sim::jobs::JobState;

use crate::invariants::{commits_followed_every_uncommitted, nothing_restored_eventually};

#[tokio::test(flavor = "multi_thread")]
async fn one_collection_failing_leaves_no_other_collection_visible() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::with_collections(3)).await?;
    let job = world.job("all-or-nothing", "")?;
    // The job the target creates last fails just as it would become Uncommitted: by then
    // the other collections' jobs are held Uncommitted, and must be aborted. The fault is
    // set before the restore starts, so it cannot miss a job that raced past the state.
    world
        .fail_last_job_at_uncommitted(&job, "segment corrupt")
        .await?;
    let child = world
        .lockstep(&["run", job.to_str().unwrap()], &[])
        .spawn()?;
    let out = child.wait_with_output().await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("segment corrupt"), "{stdout}");
    let state = world.state(TARGET).await?;
    let last = state.jobs.iter().map(|j| j.job_id).max().expect("a job");
    let held_then_aborted = state
        .jobs
        .iter()
        .filter(|j| j.job_id != last && j.history.iter().any(|h| h.state == JobState::Uncommitted))
        .count();
    assert!(
        held_then_aborted > 0,
        "no other job was held Uncommitted: the test proved nothing"
    );
    nothing_restored_eventually(&world).await
}

#[tokio::test(flavor = "multi_thread")]
async fn collection_atomicity_commits_in_waves_within_the_budget() -> anyhow::Result<()> {
    // 3 collections of 7 jobs; a budget of 10 holds one collection at a time.
    let world = World::start(WorldSpec {
        max_import_job_num: 10,
        ..WorldSpec::with_collections(3)
    })
    .await?;
    let job = world.job("waves", "[two_phase]\natomicity = \"collection\"\n")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    commits_followed_every_uncommitted(&world).await?;
    world.assert_nothing_held().await?;
    // Never more jobs active on the target than the budget.
    let state = world.state(TARGET).await?;
    let mut events: Vec<(i64, i32)> = Vec::new();
    for j in &state.jobs {
        events.push((j.created.unix_ms, 1));
        if let Some(done) = &j.completed {
            events.push((done.unix_ms, -1));
        }
    }
    events.sort();
    let mut active = 0;
    let mut peak = 0;
    for (_, d) in events {
        active += d;
        peak = peak.max(active);
    }
    assert!(peak <= 10, "{peak} jobs active at once on a budget of 10");
    Ok(())
}

/// Found by the fault runner (seed 6002): with collection atomicity, a collection that fails
/// while later collections are still being created stops the wait for their arrival, and
/// their groups, waiting for that arrival, must stop too rather than wait forever.
#[tokio::test(flavor = "multi_thread")]
async fn a_collection_failing_while_later_ones_are_created_ends_the_restore() -> anyhow::Result<()>
{
    let world = World::start(WorldSpec::with_collections(12)).await?;
    // Slow DDL answers: the later collections are still being created when the first
    // collection's mirror fails.
    world
        .slow_grpc(TARGET, Duration::from_millis(40), Duration::from_secs(60))
        .await?;
    world
        .fail_next_job(
            &secondary(0),
            JobState::PreImporting,
            "injected mirror failure",
        )
        .await?;
    let job = world.job("stopped-waves", "[two_phase]\natomicity = \"collection\"\n")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    // It ends. Collections decided before the failure was seen stay committed (on a loaded
    // machine some can be); every other one is rolled back and gone from every end.
    assert!(matches!(run.code, 1 | 5), "{}", run.explain());
    assert!(run.summary().contains(&secondary(0)), "{}", run.summary());
    world.assert_nothing_held().await?;
    let committed: std::collections::BTreeSet<String> = run.report["collections"]
        .as_array()
        .expect("collections")
        .iter()
        .filter(|c| c["committed"] == true)
        .filter_map(|c| c["target"].as_str().map(str::to_owned))
        .collect();
    if run.code == 1 {
        assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
        return nothing_restored_eventually(&world).await;
    }
    assert!(!committed.is_empty(), "{}", run.explain());
    e2e::eventually(Duration::from_secs(10), || async {
        for end in world.ends() {
            let shown: std::collections::BTreeSet<String> = world
                .state(&end)
                .await?
                .collections
                .iter()
                .map(|c| format!("{}.{}", c.db_name, c.name))
                .collect();
            if shown != committed {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await
    .with_context(|| format!("every end holds exactly the committed {committed:?}"))
}
