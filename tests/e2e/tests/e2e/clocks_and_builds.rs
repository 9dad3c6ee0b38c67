//! Issue 49: rules of Milvus 3.0 a restore must never meet, found by preflight before
//! anything is written. A commit stamped below the backup's newest row stops the
//! collection's channels (milvus#51589): every end's clock is held to that row, refused when
//! far behind it and waited for when seconds behind. The replicated import is promised only
//! between ends of one build with its gate on (milvus#53544): a secondary of another build
//! is refused unless the job allows it, and an end whose management API says the gate is off
//! is refused by name.
//!
//! Every job here bounds its wait after the commit (`completion_timeout`): without the
//! clock's guard a restore commits and its jobs stay Committing for ever.

use std::time::Duration;

use e2e::{EndRules, Output, TARGET, World, WorldSpec, secondary};

use crate::refusals::refused;

/// What a job adds: a short wait after the commit, so a stopped channel ends the run.
const BOUNDED: &str = "[two_phase]\ncompletion_timeout = \"20s\"\n";

/// The default world with `end`'s rules replaced by `rules`.
fn with_end(end: &str, rules: EndRules) -> WorldSpec {
    let mut spec = WorldSpec::default();
    spec.end_rules.insert(end.into(), rules);
    spec
}

/// No pchannel of any end stopped at a rejected commit fence.
async fn no_channel_stopped(world: &World) -> anyhow::Result<()> {
    for end in world.ends() {
        let fences = world.state(&end).await?.fences;
        anyhow::ensure!(fences.is_empty(), "{end} stopped at {fences:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn clocks_behind_the_backup_by_days_are_refused_with_both_times() -> anyhow::Result<()> {
    // The target's clock stamps the commit; s1's is held to the row too.
    let mut spec = with_end(TARGET, EndRules::clock_before_generated_backups());
    (spec.end_rules).insert(secondary(0), EndRules::clock_before_generated_backups());
    let world = World::start(spec).await?;
    let job = world.job("behind", BOUNDED)?;
    let text = refused(
        &world,
        &job,
        Some("clock_behind"),
        &[
            "target t's clock (AllocTimestamp) reads",
            "secondary s1's clock (AllocTimestamp) reads",
            "before the newest row of the backup (2026-",
            "milvus#51589",
            "set the clock of t's nodes right (NTP)",
        ],
    )
    .await?;
    // Both times in UTC, how far apart in words (days: the generated backup was taken up
    // to a month after the day the clocks read), and only the ends that are behind.
    assert!(text.contains("Z, ") && text.contains(" d "), "{text}");
    assert!(!text.contains("s2's clock"), "{text}");
    no_channel_stopped(&world).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clock_seconds_behind_the_backup_is_waited_for_and_the_restore_commits()
-> anyhow::Result<()> {
    // Eight seconds behind the newest row when the world is made, within the ten the guard
    // waits for: by preflight a few of them remain, and without the wait the commit would
    // come while the clock is still behind.
    let spec = WorldSpec::default();
    let behind =
        EndRules::default().clock_behind_newest_row(&spec.backup, Duration::from_secs(8))?;
    let world = World::start(with_end(TARGET, behind)).await?;
    let job = world.job("seconds-behind", BOUNDED)?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    let waited = run.report["preflight"]["clock_waited_ms"].as_u64();
    assert!(waited > Some(0), "the report says no wait: {}", run.stdout);
    assert!(
        run.stderr.contains("waiting for it to pass"),
        "{}",
        run.explain()
    );
    no_channel_stopped(&world).await?;
    world.assert_every_end_has_the_backup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secondary_of_another_build_is_refused_unless_the_job_allows_it() -> anyhow::Result<()> {
    let build = "master-20260806-1a2b3c4";
    let world = World::start(with_end(
        &secondary(1),
        EndRules {
            build: Some(build.into()),
            ..EndRules::default()
        },
    ))
    .await?;
    let job = world.job("mixed", BOUNDED)?;
    refused(
        &world,
        &job,
        Some("mixed_builds"),
        &[
            &format!("secondary s2 runs {build} and the target t runs 3.0.2"),
            "milvus#53544",
            "allow_mixed_builds = true",
        ],
    )
    .await?;

    let allowed = world.job(
        "mixed-allowed",
        "[two_phase]\ncompletion_timeout = \"20s\"\nallow_mixed_builds = true\n",
    )?;
    let run = world.run(&["run", allowed.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(
        run.report["preflight"]["mixed_builds"],
        serde_json::json!(["t 3.0.2", "s1 3.0.2", format!("s2 {build}")]),
        "{}",
        run.stdout
    );
    world.assert_every_end_has_the_backup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secondary_whose_management_api_says_the_gate_is_off_is_refused() -> anyhow::Result<()> {
    // The target would take the create: only the secondary's own settings can tell.
    let world = World::start(with_end(
        &secondary(1),
        EndRules {
            replicated_import_gate: Some(false),
            ..EndRules::default()
        },
    ))
    .await?;
    let job = world.job("gate-off", BOUNDED)?;
    let management = world.sim.cluster(&secondary(1)).management_uri();
    let text = refused(
        &world,
        &job,
        Some("gate_off"),
        &[
            "secondary s2 has dataCoord.import.enableInReplicatingCluster off",
            &management,
        ],
    )
    .await?;
    assert!(!text.contains("secondary s1 has"), "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_management_uri_that_does_not_answer_is_refused() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    // The cluster's own port, which serves no management API (as on a real Milvus).
    let config = world.path("lockstep.toml");
    let written = std::fs::read_to_string(&config)?;
    let management = world.sim.cluster(TARGET).management_uri();
    std::fs::write(&config, written.replace(&management, &world.uri(TARGET)))?;
    let job = world.job("unread", BOUNDED)?;
    refused(
        &world,
        &job,
        Some("gate_unreadable"),
        &[
            "cannot read the replicated import gate of target t",
            "HTTP 404",
            "check `management`",
        ],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_management_uris_the_gate_is_not_read_and_the_plan_and_report_say_so()
-> anyhow::Result<()> {
    let world = World::start(WorldSpec {
        management_known: false,
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("no-management", BOUNDED)?;
    let job = job.to_str().unwrap();
    let plan = world.run_with(Output::Text, &["plan", job], &[]).await?;
    assert_eq!(plan.code, 0, "{}", plan.explain());
    for end in world.ends() {
        let line = (plan.stdout.lines())
            .find(|l| l.starts_with(&format!("  end {end}:")))
            .unwrap_or_default();
        assert!(
            line.contains("replicated import gate not read: no management URI"),
            "{end}: {}",
            plan.stdout
        );
    }
    let run = world.run(&["run", job], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    let warned = (run.stderr.lines())
        .filter(|l| l.contains("the replicated import gate"))
        .count();
    assert_eq!(warned, 1, "warned once for every end:\n{}", run.stderr);
    assert_eq!(
        run.report["preflight"]["gate_not_read"],
        serde_json::json!(world.ends()),
        "{}",
        run.stdout
    );
    Ok(())
}
