//! Plugin checks through the real binary against milvus-sim (issue 4): `storage-probe` stops a
//! restore before any import when a secondary's storage lacks the staged files;
//! `approval-gate` holds every job Uncommitted until the approval object appears, and aborts
//! when the approval expires; the Python `change-window` decides by the clock; `lockstep
//! plugin inspect|test` show an author what the host sees, without a cluster.
//!
//! The checks are the components `plugins/build.sh` builds into `plugins/dist/`.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use e2e::{Output, RunResult, TARGET, World, WorldSpec, lockstep_command, plugin, secondary};
use milvus_sim::control::DeleteObjects;
use milvus_sim::jobs::{JobState, Stamp};

use crate::invariants::{commits_followed_every_uncommitted, nothing_restored_eventually};

/// What lockstep logs each time a check answers `retry-after`: the moment a test knows the
/// restore is held by that check.
const WAITING: &str = "check asks to wait";

/// How long a test waits for lockstep to reach a check (DDL, staging, imports first).
const REACH_CHECK: Duration = Duration::from_secs(60);

/// The default world, compiling checks into the cache this build's tests share (the host's
/// plugin tests use it too).
async fn world() -> anyhow::Result<World> {
    let world = World::start(WorldSpec::default()).await?;
    world.share_plugin_cache(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"))?;
    Ok(world)
}

/// A `[[check]]` table running the built plugin `name` at `phase`, plus `lines` of TOML.
fn check(name: &str, phase: &str, lines: &str) -> anyhow::Result<String> {
    Ok(format!(
        "\n[[check]]\nplugin = \"{}\"\nphase = \"{phase}\"\n{lines}\n",
        plugin(name)?.display()
    ))
}

/// Approves by writing `object` into the target's storage, as a person with access to the
/// bucket would.
fn approve(world: &World, object: &str) -> anyhow::Result<()> {
    let path = world.storage_dir(TARGET).join(object);
    std::fs::create_dir_all(path.parent().expect("an object path has a folder"))?;
    std::fs::write(&path, "approved by the e2e test\n")?;
    Ok(())
}

/// `import/create` requests every end received.
async fn imports_created(world: &World) -> anyhow::Result<usize> {
    let mut created = 0;
    for end in world.ends() {
        created += world.requests(&end, "import/create").await?;
    }
    Ok(created)
}

/// Every end holds the target's jobs, each Uncommitted; returns how many jobs there are.
async fn every_job_uncommitted(world: &World) -> anyhow::Result<usize> {
    let target = world.state(TARGET).await?;
    anyhow::ensure!(!target.jobs.is_empty(), "the target has no import job");
    for end in world.ends() {
        let state = world.state(&end).await?;
        for job in &target.jobs {
            let seen = state.job(job.job_id).map(|j| j.state);
            anyhow::ensure!(
                seen == Some(JobState::Uncommitted),
                "{end} holds job {} as {seen:?}, not Uncommitted",
                job.job_id
            );
        }
    }
    Ok(target.jobs.len())
}

/// The report's entries for check `name`, in the order it ran: its status and detail each
/// time. A before-commit check runs once per commit group.
fn check_runs(run: &RunResult, name: &str) -> Vec<(String, String)> {
    let checks = run.report["checks"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    (checks.iter())
        .filter(|c| c["name"] == name)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["detail"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The report's one entry for check `name`, of a restore with one commit group.
fn check_status(run: &RunResult, name: &str) -> (String, String) {
    let mut runs = check_runs(run, name);
    assert_eq!(
        runs.len(),
        1,
        "check {name} is in the report {} times, not once:\n{}",
        runs.len(),
        run.explain()
    );
    runs.remove(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_probe_stops_the_restore_before_any_import_naming_the_secondary()
-> anyhow::Result<()> {
    let world = world().await?;
    let lacking = secondary(1);
    // An import approval holds the restore after staging and before any import, so the
    // test can take the staged files from one secondary's storage at that moment (as a
    // lifecycle rule or a cleanup on that bucket would); the probe runs next.
    let job = world.job(
        "probed",
        &[
            check(
                "approval-gate",
                "before-import",
                "name = \"import-approval\"\nmax_wait_ms = 60000\n\
                 config = { object = \"approvals/import\", poll = \"100ms\" }",
            )?,
            check(
                "storage-probe",
                "before-import",
                "config = { show_missing = \"2\" }",
            )?,
        ]
        .concat(),
    )?;
    let mut running = world.spawn(&["run", job.to_str().unwrap()], &[])?;
    running.wait_for_log(WAITING, 1, REACH_CHECK).await?;
    assert_eq!(imports_created(&world).await?, 0, "held before any import");
    let deleted = world
        .sim
        .cluster(&lacking)
        .control()
        .delete_objects(&DeleteObjects::Prefix("lockstep-staging/".into()))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert!(deleted > 0, "lockstep staged into {lacking}'s storage");
    approve(&world, "approvals/import")?;

    let run = running.finish().await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back", "{}", run.explain());
    let summary = run.summary();
    assert!(
        summary.contains("storage-probe")
            && summary.contains(&format!(
                "secondary `{lacking}` lacks {deleted} of {deleted} probed staged files: "
            )),
        "{summary}"
    );
    assert!(
        !summary.contains(&format!("`{}`", secondary(0))),
        "the secondary that has the files is not named: {summary}"
    );
    assert_eq!(
        check_status(&run, "import-approval").0,
        "passed",
        "{}",
        run.explain()
    );
    assert_eq!(check_status(&run, "storage-probe").0, "failed");
    assert_eq!(
        imports_created(&world).await?,
        0,
        "no import job was created on any end"
    );
    nothing_restored_eventually(&world).await
}

#[tokio::test(flavor = "multi_thread")]
async fn approval_gate_holds_the_commit_until_the_approval_object_appears() -> anyhow::Result<()> {
    let world = world().await?;
    let object = "approvals/orders-restore";
    // The probe passes here: every secondary's storage has what was staged for it.
    let job = world.job(
        "approved",
        &[
            check(
                "storage-probe",
                "before-import",
                "config = { sample = \"2\" }",
            )?,
            check(
                "approval-gate",
                "before-commit",
                &format!(
                    "max_wait_ms = 120000\nconfig = {{ object = \"{object}\", poll = \"100ms\" }}"
                ),
            )?,
        ]
        .concat(),
    )?;
    let mut running = world.spawn(&["run", job.to_str().unwrap()], &[])?;
    running.wait_for_log(WAITING, 1, REACH_CHECK).await?;
    let jobs = every_job_uncommitted(&world).await?;
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);

    // Still held five looks later: nothing committed while nobody approved.
    let looks = running.logged(WAITING);
    running
        .wait_for_log(WAITING, looks + 5, Duration::from_secs(10))
        .await?;
    assert_eq!(every_job_uncommitted(&world).await?, jobs);
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);

    let approved_at = Stamp::now().unix_ms;
    approve(&world, object)?;
    let run = running.finish().await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.outcome(), "succeeded");
    assert_eq!(check_status(&run, "storage-probe").0, "passed");
    assert_eq!(check_status(&run, "approval-gate").0, "passed");

    world.assert_nothing_held().await?;
    commits_followed_every_uncommitted(&world).await?;
    let commits = world.state(TARGET).await?;
    let commits = commits.requests_to("import/commit");
    assert_eq!(commits.len(), jobs, "one commit per job, on the target");
    for commit in commits {
        assert!(
            commit.at.unix_ms >= approved_at,
            "a commit reached the target at {} before the approval at {approved_at}",
            commit.at.unix_ms
        );
    }
    for end in world.ends() {
        let visible: i64 = world.visible(&end).await?.values().sum();
        assert_eq!(visible, world.rows_after_deletes(), "{end}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_approval_aborts_and_leaves_no_uncommitted_job() -> anyhow::Result<()> {
    let world = world().await?;
    // Expires while the jobs are held: by then DDL, staging and the imports have usually
    // run and the gate has asked to wait a few times. On a slow machine it may expire at
    // its first look, which tests the same thing: the jobs are Uncommitted everywhere
    // before any before-commit check runs.
    let expires_at = Stamp::now().rfc3339 + Duration::from_secs(5);
    let job = world.job(
        "expired",
        &check(
            "approval-gate",
            "before-commit",
            &format!(
                "max_wait_ms = 120000\n\
                 config = {{ object = \"approvals/never\", expires_at = \"{expires_at}\", poll = \"200ms\" }}"
            ),
        )?,
    )?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back");
    assert!(
        run.summary()
            .contains(&format!("approval expired at {expires_at}")),
        "{}",
        run.summary()
    );
    assert_eq!(check_status(&run, "approval-gate").0, "failed");
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    // Every job was held Uncommitted on every end before the expiry, then aborted.
    let target = world.state(TARGET).await?;
    assert!(!target.jobs.is_empty(), "the imports were created");
    for end in world.ends() {
        let state = world.state(&end).await?;
        for job in &target.jobs {
            let held = state
                .job(job.job_id)
                .is_some_and(|j| j.history.iter().any(|h| h.state == JobState::Uncommitted));
            assert!(held, "{end} never held job {} Uncommitted", job.job_id);
        }
    }
    nothing_restored_eventually(&world).await
}

/// `* HH:MM-HH:MM`: a change window every day, from `from` to `to` minutes after now (UTC,
/// wrapping past midnight).
fn window_around_now(from: i64, to: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs() as i64
        / 60;
    let at = |offset: i64| {
        let minute = (now + offset).rem_euclid(24 * 60);
        format!("{:02}:{:02}", minute / 60, minute % 60)
    };
    format!("* {}-{}", at(from), at(to))
}

#[tokio::test(flavor = "multi_thread")]
async fn change_window_passes_and_fails_by_the_clock_it_is_given() -> anyhow::Result<()> {
    let world = world().await?;
    let change_window = plugin("change-window")?;

    // A fixed clock, through `lockstep plugin test`.
    // 2026-11-26 is a Thursday, 2026-11-29 a Sunday.
    for (now, passes) in [
        ("2026-11-26T10:00:00Z", true),
        ("2026-11-29T10:00:00Z", false),
    ] {
        let context = world.path(&format!("ctx-{now}.json"));
        std::fs::write(
            &context,
            serde_json::json!({
                "context": {
                    "restore_id": "r1", "backup_name": "nightly", "phase": "before-commit",
                    "target": {"name": "t", "uri": "http://t:19530", "role": "target"}
                },
                "config": {"windows": "mon-fri 09:00-17:00"},
                "now": now,
            })
            .to_string(),
        )?;
        let run = world
            .run(
                &[
                    // `plugin` commands read no host config: name the world's state dir
                    // so the restores below find the compiled check in its cache.
                    "--state-dir",
                    world.path("state").to_str().unwrap(),
                    "plugin",
                    "test",
                    change_window.to_str().unwrap(),
                    "--context",
                    context.to_str().unwrap(),
                ],
                &[],
            )
            .await?;
        let verdict = run.report["verdict"].as_str().unwrap_or_default();
        if passes {
            assert_eq!((run.code, verdict), (0, "pass"), "{}", run.explain());
        } else {
            assert_eq!(run.code, 1, "{}", run.explain());
            assert!(
                verdict.starts_with("fail: outside the change windows")
                    && verdict.contains("Sun 2026-11-29 10:00 UTC"),
                "{verdict}"
            );
        }
    }

    // The system clock, through a restore: a window that excludes now stops it before the
    // commit and rolls everything back; one around now lets the same restore through.
    let closed = window_around_now(120, 180);
    let job = world.job(
        "outside",
        &check(
            "change-window",
            "before-commit",
            &format!("config = {{ windows = \"{closed}\" }}"),
        )?,
    )?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back");
    assert!(
        run.summary()
            .contains(&format!("outside the change windows ({closed})")),
        "{}",
        run.summary()
    );
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    nothing_restored_eventually(&world).await?;

    let open = window_around_now(-60, 60);
    let job = world.job(
        "inside",
        &check(
            "change-window",
            "before-commit",
            &format!("config = {{ windows = \"{open}\" }}"),
        )?,
    )?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(check_status(&run, "change-window").0, "passed");
    world.assert_nothing_held().await?;
    commits_followed_every_uncommitted(&world).await?;
    for end in world.ends() {
        let visible: i64 = world.visible(&end).await?.values().sum();
        assert_eq!(visible, world.rows_after_deletes(), "{end}");
    }
    Ok(())
}

/// `lockstep plugin …` in `dir` with no host config and no cluster.
async fn plugin_command(dir: &Path, output: Output, args: &[&str]) -> RunResult {
    let mut cmd = lockstep_command(dir, output);
    cmd.arg("--state-dir").arg(dir.join("state")).arg("plugin");
    cmd.args(args);
    e2e::run_to_end(cmd).await.expect("lockstep runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn plugin_inspect_shows_world_imports_exports_version_and_size() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probe = plugin("storage-probe")?;
    let size = std::fs::metadata(&probe)?.len();

    let text = plugin_command(
        dir.path(),
        Output::Text,
        &["inspect", probe.to_str().unwrap()],
    )
    .await;
    assert_eq!(text.code, 0, "{}", text.explain());
    let shown = &text.stdout;
    for line in [
        format!("file:        {}", probe.display()),
        format!("size:        {size} bytes"),
        "world:       lockstep:plugin/check@0.1.0".to_owned(),
        "wit version: 0.1.0".to_owned(),
        "imports:\n  lockstep:plugin/host@0.1.0\n  lockstep:plugin/types@0.1.0\n".to_owned(),
        "exports:\n  check\n".to_owned(),
        "loadable:    yes".to_owned(),
    ] {
        assert!(shown.contains(&line), "no {line:?} in:\n{shown}");
    }

    // JSON carries the same inspection.
    let json = plugin_command(
        dir.path(),
        Output::Json,
        &["inspect", probe.to_str().unwrap()],
    )
    .await;
    assert_eq!(json.code, 0, "{}", json.explain());
    assert_eq!(
        json.report["inspection"].as_str().map(str::trim_end),
        Some(shown.trim_end()),
        "{}",
        json.explain()
    );

    // A component importing outside the WIT: inspect says why lockstep would refuse it.
    let foreign = plugin("foreign-import")?;
    let refused = plugin_command(
        dir.path(),
        Output::Text,
        &["inspect", foreign.to_str().unwrap()],
    )
    .await;
    assert!(
        refused.stdout.contains("loadable:    no: ")
            && refused.stdout.contains("evil:probe/raw-socket@1.0.0"),
        "{}",
        refused.explain()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn plugin_test_prints_the_verdict_the_logs_and_the_time() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probe = plugin("storage-probe")?;
    // prod-b's storage has the first staged file, not the second.
    for end in ["prod-a", "prod-b"] {
        std::fs::create_dir_all(dir.path().join(end).join("staged"))?;
        std::fs::write(dir.path().join(end).join("staged/0.binlog"), b"abcd")?;
    }
    std::fs::write(dir.path().join("prod-a/staged/1.binlog"), b"efgh")?;
    let context = |staged: serde_json::Value| -> anyhow::Result<String> {
        let path = dir.path().join("ctx.json");
        std::fs::write(
            &path,
            serde_json::json!({
                "context": {
                    "restore_id": "r1", "backup_name": "nightly", "phase": "before-import",
                    "target": {"name": "prod-a", "uri": "http://a:19530", "role": "target"},
                    "secondaries": [{"name": "prod-b", "uri": "http://b:19530", "role": "secondary"}]
                },
                "storage": {"prod-a": "prod-a", "prod-b": "prod-b"},
                "staged_files": staged,
                "now": "2026-11-29T10:00:00Z",
            })
            .to_string(),
        )?;
        Ok(path.to_str().unwrap().to_owned())
    };
    let test = async |output: Output, context: &str| {
        plugin_command(
            dir.path(),
            output,
            &["test", probe.to_str().unwrap(), "--context", context],
        )
        .await
    };

    let present = context(serde_json::json!([
        {"path": "staged/0.binlog", "size": 4, "batch": 0}
    ]))?;
    let passed = test(Output::Text, &present).await;
    assert_eq!(passed.code, 0, "{}", passed.explain());
    let mut lines = passed.stdout.lines();
    assert_eq!(lines.next(), Some("verdict: pass"), "{}", passed.stdout);
    let time = lines.next().unwrap_or_default();
    assert!(
        time.starts_with("time: ") && time.ends_with(" ms"),
        "{}",
        passed.stdout
    );
    let log = lines.next().unwrap_or_default();
    assert!(
        log.contains("probed secondary storage")
            && log.contains("\"end\", \"prod-b\"")
            && log.contains("\"missing\", \"0\""),
        "{}",
        passed.stdout
    );

    let missing = context(serde_json::json!([
        {"path": "staged/0.binlog", "size": 4, "batch": 0},
        {"path": "staged/1.binlog", "size": 4, "batch": 0}
    ]))?;
    let failed = test(Output::Json, &missing).await;
    assert_eq!(failed.code, 1, "{}", failed.explain());
    let report = &failed.report;
    assert_eq!(
        report["verdict"],
        "fail: secondary `prod-b` lacks 1 of 2 probed staged files: staged/1.binlog",
        "{}",
        failed.explain()
    );
    assert!(report["elapsed_us"].as_u64().is_some_and(|us| us > 0));
    let logs = report["logs"].as_array().expect("logs");
    assert!(
        logs.iter()
            .any(|l| l["message"] == "probed secondary storage"
                && l["fields"]
                    == serde_json::json!([["end", "prod-b"], ["probed", "2"], ["missing", "1"]])),
        "{}",
        failed.explain()
    );
    Ok(())
}

/// What the test guest's `context` behaviour says it was handed, from its failure's reason:
/// `collections=2 jobs=5 with-ids=5 batches=0,1,2,3,4 staged=54 staged-batches=0,1,2,3,4`.
/// With collection atomicity, each group's run of it: the first.
fn handed(run: &RunResult) -> std::collections::BTreeMap<String, String> {
    let runs = check_runs(run, "context");
    let Some((status, detail)) = runs.first().cloned() else {
        panic!("check context is not in the report:\n{}", run.explain());
    };
    assert_eq!(status, "failed", "{}", run.explain());
    detail
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn numbers(list: &str) -> Vec<u32> {
    list.split(',').filter_map(|n| n.parse().ok()).collect()
}

/// A check is handed the whole restore in every phase: a before-commit check in a plain
/// restore once saw `collections=0 staged=0` (its context was only filled when a
/// before-import check ran), before-import checks saw no jobs, and with collection atomicity
/// job batches restarted per group while staged-file batches counted across the restore.
#[tokio::test(flavor = "multi_thread")]
async fn every_phase_hands_the_check_every_collection_job_and_staged_file() -> anyhow::Result<()> {
    let world = world().await?;
    let context = |phase: &str| {
        check(
            "test-guest",
            phase,
            "name = \"context\"\nconfig = { behaviour = \"context\" }",
        )
    };
    let plan = world
        .run(&["plan", world.job("plan", "")?.to_str().unwrap()], &[])
        .await?;
    let batches = plan.report["totals"]["batches"].as_u64().expect("batches") as u32;
    let all: Vec<u32> = (0..batches).collect();

    let plain = world.job("before-commit", &context("before-commit")?)?;
    let run = world.run(&["run", plain.to_str().unwrap()], &[]).await?;
    let seen = handed(&run);
    assert_eq!(seen["collections"], "2", "{seen:?}");
    assert_eq!(numbers(&seen["batches"]), all, "{seen:?}");
    assert_eq!(seen["with-ids"], batches.to_string(), "{seen:?}");
    let staged: u32 = seen["staged"].parse()?;
    assert!(
        staged > 0,
        "a before-commit check sees the staged files: {seen:?}"
    );
    assert_eq!(numbers(&seen["staged-batches"]), all, "{seen:?}");

    let import = world.job("before-import", &context("before-import")?)?;
    let run = world.run(&["run", import.to_str().unwrap()], &[]).await?;
    let seen = handed(&run);
    assert_eq!(seen["collections"], "2", "{seen:?}");
    assert_eq!(numbers(&seen["batches"]), all, "the planned jobs: {seen:?}");
    assert_eq!(seen["with-ids"], "0", "{seen:?}");
    assert_eq!(seen["staged"], staged.to_string(), "{seen:?}");

    let per_collection = world.job(
        "per-collection",
        &format!(
            "[two_phase]\natomicity = \"collection\"\n{}",
            context("before-commit")?
        ),
    )?;
    let run = world
        .run(&["run", per_collection.to_str().unwrap()], &[])
        .await?;
    let seen = handed(&run);
    let group = numbers(&seen["batches"]);
    assert!(!group.is_empty() && group.len() < all.len(), "{seen:?}");
    // One group's jobs, numbered as the restore's staged files are.
    assert!(group.windows(2).all(|w| w[1] == w[0] + 1), "{seen:?}");
    let staged_batches = numbers(&seen["staged-batches"]);
    assert!(group.iter().all(|b| staged_batches.contains(b)), "{seen:?}");
    assert_eq!(seen["collections"], "2", "{seen:?}");
    Ok(())
}
