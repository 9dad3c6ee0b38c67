//! `run_checks`: the phase filter, `on_error`, and the failure that names the
//! check; `inspect` and the `plugin test` helper.

use std::path::Path;
use std::time::Duration;

use lockstep::config::HostConfig;
use lockstep::job::Job;
use lockstep::plugins::{
    Check, CheckStatus, LoadedCheck, OnError, Phase, PluginRuntime, inspect, run_checks, test_check,
};

use super::support::{check_of, config, context, no_storage, plugin, runtime};

async fn guest_check(
    runtime: &PluginRuntime,
    behaviour: &str,
    phase: Phase,
    on_error: OnError,
) -> LoadedCheck {
    let check = Check {
        name: format!("guest-{behaviour}"),
        config: config(&[("behaviour", behaviour)]),
        on_error,
        ..check_of("test-guest", phase)
    };
    runtime.load_check(&check).await.expect("check loads")
}

#[tokio::test]
async fn an_error_fails_the_phase_unless_on_error_is_warn() {
    let runtime = runtime();
    let checks = vec![
        guest_check(&runtime, "pass", Phase::BeforeCommit, OnError::Fail).await,
        guest_check(&runtime, "trap", Phase::BeforeCommit, OnError::Warn).await,
        // Not this phase: must not run.
        guest_check(&runtime, "trap", Phase::BeforeImport, OnError::Fail).await,
    ];
    let reports = run_checks(
        Phase::BeforeCommit,
        &context(Phase::BeforeCommit),
        &checks,
        no_storage(),
    )
    .await
    .expect("warn lets the restore go on");
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0].status, CheckStatus::Passed);
    assert!(
        matches!(&reports[1].status, CheckStatus::Warned { error } if error.to_string().starts_with("trap: unreachable"))
    );
    assert!(reports.iter().all(|r| r.allows_restore()));

    let failure = run_checks(
        Phase::BeforeImport,
        &context(Phase::BeforeImport),
        &checks,
        no_storage(),
    )
    .await
    .expect_err("a trap with on_error = fail stops the restore");
    assert_eq!(failure.check, "guest-trap");
    assert!(
        failure.reason.starts_with("trap: unreachable at "),
        "{}",
        failure.reason
    );
    assert_eq!(failure.reports.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_after_without_max_wait_fails_as_expired() {
    let runtime = runtime();
    let mut check = guest_check(&runtime, "retry", Phase::BeforeCommit, OnError::Fail).await;
    check.spec.max_wait = Duration::from_secs(2);
    let failure = run_checks(
        Phase::BeforeCommit,
        &context(Phase::BeforeCommit),
        &[check],
        no_storage(),
    )
    .await
    .expect_err("never decides");
    let report = &failure.reports[0];
    assert!(
        matches!(report.status, CheckStatus::WaitExpired { .. }),
        "{:?}",
        report.status
    );
    // 100 ms minimum between attempts over 2 s of waiting.
    assert!(
        (20..=22).contains(&report.attempts),
        "{} attempts",
        report.attempts
    );
    assert!(
        failure.reason.contains("told to retry"),
        "{}",
        failure.reason
    );
}

#[test]
fn inspect_shows_world_version_and_refusal() {
    let good = inspect(&plugin("test-guest")).expect("inspects");
    assert_eq!(good.world.as_deref(), Some("lockstep:plugin/check@0.1.0"));
    assert_eq!(good.wit_version.as_deref(), Some("0.1.0"));
    assert!(
        good.imports
            .iter()
            .any(|i| i == "lockstep:plugin/host@0.1.0")
    );
    assert_eq!(good.exports, ["check"]);
    assert_eq!(good.verdict, Ok(()));
    let shown = good.to_string();
    assert!(shown.contains("loadable:    yes"), "{shown}");

    let bad = inspect(&plugin("foreign-import")).expect("inspects");
    let reason = bad.verdict.expect_err("not loadable");
    assert!(reason.contains("evil:probe/raw-socket@1.0.0"), "{reason}");
}

#[tokio::test]
async fn plugin_test_runs_a_check_from_a_context_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    for end in ["prod-a", "prod-b"] {
        std::fs::create_dir_all(dir.path().join(end).join("staged")).expect("end dir");
        std::fs::write(dir.path().join(end).join("staged/0.log"), b"abc").expect("file");
    }
    let file = serde_json::json!({
        "context": {
            "restore_id": "r1", "backup_name": "b", "phase": "before-import",
            "target": {"name": "prod-a", "uri": "http://a:19530", "role": "target"},
            "secondaries": [{"name": "prod-b", "uri": "http://b:19530", "role": "secondary"}]
        },
        "storage": {"prod-a": "prod-a", "prod-b": "prod-b"},
        "staged_files": [
            {"path": "staged/0.log", "size": 3, "batch": 0},
            {"path": "staged/1.log", "size": 3, "batch": 0}
        ],
        "now": "2026-11-29T10:00:00Z"
    });
    let context_file = dir.path().join("ctx.json");
    std::fs::write(&context_file, file.to_string()).expect("context file");
    let run = test_check(&runtime(), &plugin("storage-probe"), &context_file)
        .await
        .expect("runs");
    let outcome = run.outcome.expect("a verdict");
    assert!(
        matches!(&outcome, lockstep::plugins::Verdict::Fail { reason } if reason.contains("`prod-b` lacks 1 of 2") && reason.contains("staged/1.log")),
        "{outcome:?}"
    );
    assert!(
        run.logs
            .iter()
            .any(|l| l.message == "probed secondary storage")
    );
}

/// Every `examples/plugins/*.toml` is a job file lockstep accepts, and each of
/// its checks loads: the plugin is built and matches the WIT.
#[tokio::test]
async fn example_job_files_are_valid_and_their_checks_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/plugins");
    // The clusters the examples name; nothing is contacted.
    let host = HostConfig::parse_str(
        r#"
        [backups]
        storage = { url = "file:///var/lib/backups" }
        [clusters.prod-a]
        uri = "http://10.0.0.1:19530"
        storage = { url = "file:///var/lib/milvus-a" }
        [clusters.prod-b]
        uri = "http://10.0.0.2:19530"
        storage = { url = "file:///var/lib/milvus-b" }
        [clusters.prod-c]
        uri = "http://10.0.0.3:19530"
        storage = { url = "file:///var/lib/milvus-c" }
        "#,
        Path::new("lockstep.toml"),
    )
    .expect("host config");
    let runtime = runtime();
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/plugins") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let job = Job::from_file(&path, &host).unwrap_or_else(|e| panic!("{e}"));
        for check in &job.checks {
            let stem = check.plugin.file_stem().expect("stem").to_string_lossy();
            plugin(&stem);
            runtime
                .load_check(check)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            seen += 1;
        }
    }
    assert_eq!(seen, 4, "one check per example job file");
}
