//! milvus-backup's users switch with nothing to rewrite: the seed's command line, run in a
//! directory holding nothing but milvus-backup's `backup.yaml`, with the secondaries named
//! by URI alone. The world is an S3 one (moto), since the file names buckets.

use e2e::{
    Output, RunResult, StorageLayout, StorageService, TARGET, World, WorldSpec, lockstep_command,
    readme, run_to_end, secondary,
};

/// An S3 world whose ends and backup `backup.yaml` can describe, every end reading `layout`.
async fn world(test: &str, layout: StorageLayout) -> anyhow::Result<Option<World>> {
    let Some(endpoint) = e2e::s3_endpoint(test) else {
        return Ok(None);
    };
    let world = World::start(WorldSpec {
        service: StorageService::S3 { endpoint },
        storage: layout,
        secondary_storage_known: false,
        ..WorldSpec::default()
    })
    .await?;
    Ok(Some(world))
}

/// README's `lockstep restore -n my_backup --secondaries URI,URI`, run as written in a
/// directory with only `backup.yaml`: the backup's name and the two secondaries' addresses
/// are the world's.
async fn seeds_line(world: &World, env: &[(&str, &str)]) -> anyhow::Result<RunResult> {
    let dir = world.path("milvus-backup");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("backup.yaml"), world.milvus_backup_yaml()?)?;
    let block = readme::block("README.md", "lockstep restore -n")?;
    anyhow::ensure!(
        world.spec.secondaries == 2,
        "README's line names two secondaries"
    );
    let (first, second) = (world.sim.uri(&secondary(0)), world.sim.uri(&secondary(1)));
    let line = readme::edit(
        block.command(0)?,
        &[
            ("my_backup", &world.spec.backup.name),
            ("http://10.0.0.2:19530", first.trim_end_matches('/')),
            ("http://10.0.0.3:19530", second.trim_end_matches('/')),
        ],
    )?;
    let mut cmd = readme::sh(&dir, &format!("{line} --output json"))?;
    cmd.env("LOCKSTEP_LOG", "warn,lockstep=debug");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_to_end(cmd).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_seeds_line_restores_on_every_end_from_a_backup_yaml() -> anyhow::Result<()> {
    let test = "drop_in::the_seeds_line_restores_on_every_end_from_a_backup_yaml";
    let Some(world) = world(test, StorageLayout::Shared).await? else {
        return Ok(());
    };
    let run = seeds_line(&world, &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.outcome(), "succeeded");
    let ends: Vec<&str> = run.report["ends"]
        .as_array()
        .map(|ends| ends.iter().filter_map(|e| e["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ends[0], "milvus", "the backup.yaml's cluster is the target");
    assert_eq!(ends.len(), 1 + world.spec.secondaries, "{ends:?}");
    // Staged once, into the target's bucket, which every mirror reads as its own: each byte
    // an import reads went through the host once. (A two-phase restore folds the L0 deletes
    // into delta logs lockstep writes there, and stages no L0 log.)
    let (_, copied) = world.logs_to_stage();
    assert_eq!(
        run.report["staging"]["bytes_streamed"].as_u64(),
        Some(copied),
        "{}",
        run.explain()
    );
    world
        .assert_every_end_shows(world.rows_after_deletes())
        .await?;
    world.assert_nothing_held().await?;
    assert!(
        run.stderr.contains("it must see the target's store"),
        "the run says each URI-only mirror reads the target's staged paths: {}",
        run.stderr
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_whose_storage_lacks_the_files_fails_before_the_commit_by_name()
-> anyhow::Result<()> {
    let test = "drop_in::a_mirror_whose_storage_lacks_the_files_fails_before_the_commit_by_name";
    let Some(world) = world(test, StorageLayout::Separate).await? else {
        return Ok(());
    };
    let run = seeds_line(&world, &[]).await?;
    assert_ne!(run.code, 0, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back", "{}", run.explain());
    let mirror = world.sim.uri(&secondary(0));
    let summary = run.report["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains(mirror.trim_end_matches('/')) || summary.contains(&secondary(1)),
        "the summary names the mirror: {summary}"
    );
    assert!(
        summary.contains("lockstep-staging/"),
        "and the path it missed: {summary}"
    );
    assert_eq!(
        world.requests(TARGET, "import/commit").await?,
        0,
        "nothing was committed"
    );
    world.assert_every_end_shows(0).await?;
    Ok(())
}

/// milvus-backup's `aliyun` provider (and `tencent`, `hwc`, read the same way) addresses
/// buckets by host name. `oss.test` resolves nowhere here, so lockstep reaches it through a
/// loopback proxy (`HTTP_PROXY`) that hands each request to moto with its `Host` kept. Every
/// request lockstep made of a store named its bucket in the host, and the restore landed on
/// every end.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_style_provider_is_reached_by_bucket_host_names() -> anyhow::Result<()> {
    let test = "drop_in::a_host_style_provider_is_reached_by_bucket_host_names";
    let Some(world) = world(test, StorageLayout::Shared).await? else {
        return Ok(());
    };
    let (s3, target_bucket) = world.bucket(Some(TARGET))?;
    let (_, backup_bucket) = world.bucket(None)?;
    let proxy = e2e::host_style::Proxy::start(&s3).await?;
    let dir = world.path("milvus-backup");
    std::fs::create_dir_all(&dir)?;
    let yaml = world.milvus_backup_yaml_as("aliyun", "oss.test", 80)?;
    std::fs::write(dir.join("backup.yaml"), yaml)?;
    let uris: Vec<String> = (0..world.spec.secondaries)
        .map(|i| world.sim.uri(&secondary(i)))
        .collect();
    let mut cmd = lockstep_command(&dir, Output::Json);
    cmd.args(["restore", "-n", &world.spec.backup.name, "--secondaries"])
        .arg(uris.join(","))
        .env("HTTP_PROXY", proxy.url())
        // Milvus's REST API stays direct.
        .env("NO_PROXY", "127.0.0.1,localhost");
    let run = run_to_end(cmd).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    let hosts: std::collections::BTreeSet<String> = proxy.hosts().into_iter().collect();
    let expected = std::collections::BTreeSet::from([
        format!("{backup_bucket}.oss.test"),
        format!("{target_bucket}.oss.test"),
    ]);
    assert_eq!(hosts, expected, "only bucket host names were asked for");
    world
        .assert_every_end_shows(world.rows_after_deletes())
        .await?;
    world.assert_nothing_held().await?;
    Ok(())
}

/// milvus-backup's `tlsMode: mutual` with its CA, server name and client certificate: the
/// seed's line reaches the target over TLS with the file's certificates.
#[tokio::test(flavor = "multi_thread")]
async fn the_seeds_line_reaches_a_mutual_tls_target_from_a_backup_yaml() -> anyhow::Result<()> {
    let test = "drop_in::the_seeds_line_reaches_a_mutual_tls_target_from_a_backup_yaml";
    let Some(endpoint) = e2e::s3_endpoint(test) else {
        return Ok(());
    };
    let world = World::start(WorldSpec {
        service: StorageService::S3 { endpoint },
        storage: StorageLayout::Shared,
        secondary_storage_known: false,
        target_tls: e2e::TargetTls::Mutual,
        ..WorldSpec::default()
    })
    .await?;
    let run = seeds_line(&world, &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    let target = run.report["ends"][0]["uri"].as_str().unwrap_or_default();
    assert!(target.starts_with("https://"), "{}", run.explain());
    world
        .assert_every_end_shows(world.rows_after_deletes())
        .await?;
    world.assert_nothing_held().await?;
    Ok(())
}
