//! Every preflight refusal: exit 2, a message that says why, and nothing written on any end.

use e2e::{L0Import, World, WorldSpec};

/// The pchannels of every cluster milvus-sim starts by default.
const PCHANNELS: usize = milvus_sim::topology::DEFAULT_PCHANNELS as usize;

/// Runs `job` and checks it was refused before anything was written anywhere, for a reason
/// of `kind` (the report's `refusal_kinds`; `None` for a job file refused before any
/// preflight) whose text says `why`.
pub(crate) async fn refused(
    world: &World,
    job: &std::path::Path,
    kind: Option<&str>,
    why: &[&str],
) -> anyhow::Result<String> {
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 2, "{}", run.explain());
    let kinds = run.report["refusal_kinds"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    match kind {
        Some(kind) => assert!(
            kinds.iter().any(|k| k == kind),
            "no {kind} refusal among {kinds:?}: {}",
            run.explain()
        ),
        None => assert!(kinds.is_empty(), "preflight ran: {kinds:?}"),
    }
    let text = format!("{}\n{}", run.stdout, run.stderr);
    for w in why {
        assert!(text.contains(w), "refusal does not say {w:?}:\n{text}");
    }
    let writes = world.writes_received().await?;
    assert!(writes.is_empty(), "a refused restore wrote: {writes:?}");
    Ok(text)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_below_3_0_with_secondaries() -> anyhow::Result<()> {
    let world = World::start(WorldSpec {
        target_version: "2.6.24".into(),
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("old-target", "")?;
    refused(
        &world,
        &job,
        Some("version_too_old"),
        &["2.6.24", "3.0 or newer"],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secondary_below_3_0() -> anyhow::Result<()> {
    let world = World::start(WorldSpec {
        secondary_version: "v2.5.4".into(),
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("old-secondary", "")?;
    refused(&world, &job, Some("version_too_old"), &["v2.5.4", "s1"]).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replicating_target_without_secondaries() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.write_job(
        "no-secondaries",
        &format!("backup = \"{}\"\ntarget = \"t\"\n", world.spec.backup.name),
    )?;
    refused(
        &world,
        &job,
        Some("secondaries_unnamed"),
        &["replicates to", "secondaries"],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn per_seg_with_secondaries() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.job("per-seg", "strategy = \"per_seg\"\n")?;
    refused(
        &world,
        &job,
        None,
        &["per_seg", "cannot be used with secondaries"],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn per_seg_on_a_replicating_target() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.write_job(
        "per-seg-alone",
        &format!(
            "backup = \"{}\"\ntarget = \"t\"\nstrategy = \"per_seg\"\n",
            world.spec.backup.name
        ),
    )?;
    refused(
        &world,
        &job,
        Some("per_seg_replicates"),
        &["per_seg", "replicat"],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secondary_that_is_not_a_replication_target() -> anyhow::Result<()> {
    let world = World::start(WorldSpec {
        unreplicated: 1,
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("stranger", "")?;
    refused(
        &world,
        &job,
        Some("not_a_target"),
        &["s2", "is not a replication target"],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replication_target_the_job_does_not_name() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.write_job(
        "one-of-two",
        &format!(
            "backup = \"{}\"\ntarget = \"t\"\nsecondaries = [\"s1\"]\n",
            world.spec.backup.name
        ),
    )?;
    refused(
        &world,
        &job,
        Some("unnamed_target"),
        &["also replicates to", "s2"],
    )
    .await?;
    Ok(())
}

/// Each secondary's checkpoints, read once, are within a second of the target's clock: that
/// replication is moving, and preflight does not wait for its next time tick.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_replication_is_read_once_not_waited_for() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.job("live", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    for secondary in ["s1", "s2"] {
        assert_eq!(
            world.requests(secondary, "/GetReplicateInfo").await?,
            PCHANNELS,
            "{secondary}'s checkpoints were read more than once"
        );
    }
    Ok(())
}

/// Issue 26: the stream to s2 stopped while the topology still names it (milvus#52727).
/// Preflight refuses by name before anything is written; s1's healthy stream is not named.
/// A stream that only lags is not refused: it is read again until it moves.
#[tokio::test(flavor = "multi_thread")]
async fn a_secondary_whose_replication_stopped() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let target = world.sim.cluster(e2e::TARGET).control();
    target
        .pause_stream("s2")
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // A replication that stopped under a second ago still looks live to preflight (as one
    // that stops just after it would): this one stopped and stayed stopped.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let job = world.job("stalled", "")?;
    let text = refused(
        &world,
        &job,
        Some("stream_stalled"),
        &[
            "secondary s2's replication from cluster t has not moved",
            "s behind",
        ],
    )
    .await?;
    assert!(!text.contains("secondary s1's"), "{text}");

    target
        .resume_stream("s2")
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    target
        .set_stream_lag("s2", std::time::Duration::from_secs(3))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let read_before = world.requests("s2", "/GetReplicateInfo").await?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(
        run.code,
        0,
        "a lagging stream still moves: {}",
        run.explain()
    );
    // Three seconds behind is not recent: its checkpoints were read again, and moved.
    assert!(world.requests("s2", "/GetReplicateInfo").await? - read_before > PCHANNELS);
    Ok(())
}

/// Issue 27: with `verify_backup = "data"` an insert binlog that does not decode is refused
/// before anything is written, in a line that names it. (At the default level, `meta`, the
/// object is there and preflight does not read it.)
#[tokio::test(flavor = "multi_thread")]
async fn a_binlog_that_does_not_decode_under_verify_backup_data() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let log = world
        .backup
        .logs
        .iter()
        .find(|l| matches!(l.kind, milvus_sim::fixtures::LogKind::Insert { .. }))
        .expect("an insert log");
    std::fs::write(
        world.path("backups").join(log.path.as_ref()),
        b"not a binlog",
    )?;
    let job = world.job("checked", "[restore]\nverify_backup = \"data\"\n")?;
    refused(
        &world,
        &job,
        Some("backup_object"),
        &[
            &log.relative_path,
            "does not decode: parse magic number failed",
        ],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_too_small_for_restore_level_atomicity() -> anyhow::Result<()> {
    // 8 jobs in all, 4 in the largest collection (one a segment group of its partition, the
    // L0 segments folded into them): restore-level atomicity cannot fit 6, collection-level
    // can.
    let world = World::start(WorldSpec {
        max_import_job_num: 6,
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("too-big", "")?;
    refused(
        &world,
        &job,
        Some("over_budget"),
        &[
            "maxImportJobNum",
            "set [two_phase] atomicity",
            "largest collection needs 4 jobs",
        ],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_backup() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.write_job(
        "missing",
        "backup = \"no_such_backup\"\ntarget = \"t\"\nsecondaries = [\"s1\", \"s2\"]\n",
    )?;
    refused(
        &world,
        &job,
        Some("backup"),
        &["no_such_backup", "not found"],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_end() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let config = std::fs::read_to_string(world.path("lockstep.toml"))?;
    let s2 = world.sim.uri("s2");
    std::fs::write(
        world.path("lockstep.toml"),
        config.replace(&s2, &format!("http://127.0.0.1:{closed}")),
    )?;
    let job = world.job("unreachable", "")?;
    refused(&world, &job, Some("unreachable"), &["s2", "unreachable"]).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_job_file_names_file_line_and_field() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.job(
        "typo",
        "[two_phase]\nmirror_grace = \"5m\"\natomicty = \"collection\"\n",
    )?;
    refused(
        &world,
        &job,
        None,
        &["typo.toml:6:1", "two_phase.atomicty", "expected one of"],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_existing_collection_without_drop_or_skip() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let first = world.job("first", "")?;
    let run = world.run(&["run", first.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    let writes_before = world.writes_received().await?.len();
    // Other content (a different grace), same target collections.
    let second = world.job("second", "[two_phase]\nmirror_grace = \"1m\"\n")?;
    let run = world.run(&["run", second.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 2, "{}", run.explain());
    assert!(run.stdout.contains("already exists"), "{}", run.explain());
    assert_eq!(
        world.writes_received().await?.len(),
        writes_before,
        "the refused run wrote"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_import_gate_off_on_the_target() -> anyhow::Result<()> {
    // Without a management URI (where preflight reads dataCoord.import.enableInReplicatingCluster,
    // tests/e2e/tests/e2e/clocks_and_builds.rs), the gate shows only in the create it refuses
    // (code 3000), so lockstep learns it at its first create, before any job exists, and
    // undoes its DDL: nothing is left on any end once the drops have replicated.
    let world = World::start(WorldSpec {
        gate_on: false,
        management_known: false,
        ..WorldSpec::default()
    })
    .await?;
    let job = world.job("gated", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 2, "{}", run.explain());
    assert!(
        run.stdout.contains("enableInReplicatingCluster"),
        "{}",
        run.explain()
    );
    crate::invariants::nothing_restored_eventually(&world).await
}

/// Milvus 3.0 turns `dataCoord.import.enableL0Import` off by default, so lockstep folds a
/// backup's L0 deletes into its data imports (tests/e2e/tests/e2e/rows.rs restores so). Where
/// an L0 delta log does not decode it cannot, and the restore is refused before anything is
/// written, naming the setting and every end without it.
#[tokio::test(flavor = "multi_thread")]
async fn l0_deletes_that_cannot_be_folded_for_ends_that_do_not_import_them() -> anyhow::Result<()> {
    let world = World::start(WorldSpec {
        l0_import: L0Import::Default,
        ..WorldSpec::default()
    })
    .await?;
    let l0 = world.l0_log().expect("the backup has an L0 segment");
    // The same size, so that the meta check passes and only reading the data finds it.
    std::fs::write(
        world.path("backups").join(l0.path.as_ref()),
        vec![b'x'; l0.size as usize],
    )?;
    let job = world.job("l0-off", "")?;
    refused(
        &world,
        &job,
        Some("l0_import"),
        &[
            "cannot be folded into the data imports",
            "a two-phase import cannot take them as L0 jobs",
            "milvus#51247",
            "collection_0",
        ],
    )
    .await?;
    Ok(())
}
