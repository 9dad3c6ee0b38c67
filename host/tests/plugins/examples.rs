//! The example checks against real local object stores, real HTTP on
//! loopback and a clock the test fixes.

use std::time::Duration;

use jiff::Timestamp;
use lockstep::plugins::{
    AllowedHosts, Check, CheckGrants, CheckLimits, CheckStatus, Clock, LoadedCheck, Phase,
    StagedObject, Verdict, run_checks,
};

use super::support::{LocalEnds, TestServer, check_of, config, context, plugin, runtime};

fn staged(path: &str, batch: u32) -> StagedObject {
    StagedObject {
        path: path.to_owned(),
        size: 4,
        batch,
    }
}

/// Two batches of three files; prod-b has all of them, prod-c lacks two of
/// batch 1 (the middle and the last).
async fn staged_ends() -> (LocalEnds, Vec<StagedObject>) {
    let ends = LocalEnds::new(&["prod-a", "prod-b", "prod-c"]);
    let mut files = Vec::new();
    for batch in 0..2 {
        for i in 0..3 {
            let path = format!("staged/r-42/{batch}/{i}.binlog");
            for end in ["prod-a", "prod-b", "prod-c"] {
                let missing = end == "prod-c" && batch == 1 && i > 0;
                if !missing {
                    ends.put(end, &path, b"data").await;
                }
            }
            files.push(staged(&path, batch));
        }
    }
    (ends, files)
}

async fn probe(sample: Option<&str>) -> Verdict {
    let (ends, files) = staged_ends().await;
    let plugin = runtime()
        .load(&plugin("storage-probe"), CheckLimits::default())
        .await
        .expect("loads");
    let mut pairs = vec![("show_missing", "1")];
    if let Some(n) = sample {
        pairs.push(("sample", n));
    }
    plugin
        .check(
            &context(Phase::BeforeImport),
            &config(&pairs),
            &CheckGrants::default(),
            ends.host(files),
        )
        .await
        .outcome
        .expect("storage-probe decides")
}

#[tokio::test]
async fn storage_probe_names_the_secondary_and_the_first_missing_paths() {
    let Verdict::Fail { reason } = probe(None).await else {
        panic!("prod-c lacks files");
    };
    assert_eq!(
        reason,
        "secondary `prod-c` lacks 2 of 6 probed staged files: staged/r-42/1/1.binlog (and 1 more)"
    );
}

#[tokio::test]
async fn storage_probe_samples_per_batch() {
    // One per batch probes the first file of each: present everywhere.
    assert_eq!(probe(Some("1")).await, Verdict::Pass);
    // Two per batch include the last file of batch 1, missing on prod-c.
    let Verdict::Fail { reason } = probe(Some("2")).await else {
        panic!("the sample reaches a missing file");
    };
    assert!(
        reason.contains("`prod-c` lacks 1 of 4") && reason.contains("1/2.binlog"),
        "{reason}"
    );
    assert!(!reason.contains("prod-b"), "{reason}");
}

#[tokio::test]
async fn storage_probe_passes_when_every_secondary_sees_everything() {
    let (ends, files) = staged_ends().await;
    for i in 1..3 {
        ends.put("prod-c", &format!("staged/r-42/1/{i}.binlog"), b"data")
            .await;
    }
    let plugin = runtime()
        .load(&plugin("storage-probe"), CheckLimits::default())
        .await
        .expect("loads");
    let run = plugin
        .check(
            &context(Phase::BeforeImport),
            &config(&[]),
            &CheckGrants::default(),
            ends.host(files),
        )
        .await;
    assert_eq!(run.outcome, Ok(Verdict::Pass));
}

async fn approval_gate(
    pairs: &[(&str, &str)],
    max_wait: Duration,
    grants: CheckGrants,
) -> LoadedCheck {
    let spec = Check {
        config: config(pairs),
        max_wait,
        ..check_of("approval-gate", Phase::BeforeCommit)
    };
    let mut check = runtime().load_check(&spec).await.expect("loads");
    check.grants = grants;
    check
}

#[tokio::test(start_paused = true)]
async fn approval_gate_waits_then_passes_when_the_object_appears() {
    let ends = LocalEnds::new(&["prod-a", "prod-b", "prod-c"]);
    let check = approval_gate(
        &[("object", "approvals/r-42"), ("poll", "1s")],
        Duration::from_secs(600),
        CheckGrants::default(),
    )
    .await;
    let approve = async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        ends.put("prod-a", "approvals/r-42", b"ok").await;
    };
    let ctx = context(Phase::BeforeCommit);
    let (reports, ()) = tokio::join!(
        run_checks(
            Phase::BeforeCommit,
            &ctx,
            std::slice::from_ref(&check),
            ends.host(Vec::new())
        ),
        approve
    );
    let reports = reports.expect("approved");
    assert_eq!(reports[0].status, CheckStatus::Passed);
    assert!(
        (5..=7).contains(&reports[0].attempts),
        "polled every second for ~5 s: {} attempts",
        reports[0].attempts
    );
}

#[tokio::test]
async fn approval_gate_fails_when_expired() {
    let ends = LocalEnds::new(&["prod-a"]);
    let now: Timestamp = "2026-11-29T12:00:00Z".parse().expect("time");
    let check = approval_gate(
        &[
            ("object", "approvals/r-42"),
            ("expires_at", "2026-11-29T11:00:00Z"),
        ],
        Duration::from_secs(600),
        CheckGrants {
            clock: Clock::Fixed(now),
            ..CheckGrants::default()
        },
    )
    .await;
    let failure = run_checks(
        Phase::BeforeCommit,
        &context(Phase::BeforeCommit),
        &[check],
        ends.host(Vec::new()),
    )
    .await
    .expect_err("expired");
    assert_eq!(failure.check, "approval-gate");
    assert!(
        failure
            .reason
            .contains("approval expired at 2026-11-29T11:00:00Z"),
        "{}",
        failure.reason
    );
    assert_eq!(failure.reports[0].attempts, 1);
}

#[tokio::test]
async fn approval_gate_fails_when_rejected() {
    let ends = LocalEnds::new(&["prod-a"]);
    ends.put("prod-a", "approvals/r-42.rejected", b"no").await;
    let check = approval_gate(
        &[("object", "approvals/r-42")],
        Duration::from_secs(600),
        CheckGrants::default(),
    )
    .await;
    let failure = run_checks(
        Phase::BeforeCommit,
        &context(Phase::BeforeCommit),
        &[check],
        ends.host(Vec::new()),
    )
    .await
    .expect_err("rejected");
    assert!(
        failure
            .reason
            .contains("restore rejected: `approvals/r-42.rejected` exists on prod-a"),
        "{}",
        failure.reason
    );
}

#[tokio::test]
async fn approval_gate_follows_an_allowed_endpoint() {
    let ends = LocalEnds::new(&["prod-a"]);
    for (status, expect_pass) in [(200, true), (403, false)] {
        let server = TestServer::start(Some(status), "decided").await;
        let grants = CheckGrants {
            allow_hosts: AllowedHosts::parse("approval-gate", &[server.origin()]).expect("origin"),
            ..CheckGrants::default()
        };
        let check = approval_gate(
            &[("url", &server.url("/approve/r-42"))],
            Duration::ZERO,
            grants,
        )
        .await;
        let result = run_checks(
            Phase::BeforeCommit,
            &context(Phase::BeforeCommit),
            &[check],
            ends.host(Vec::new()),
        )
        .await;
        assert_eq!(result.is_ok(), expect_pass, "status {status}: {result:?}");
        if let Err(failure) = result {
            assert!(
                failure.reason.contains("answered 403: decided"),
                "{}",
                failure.reason
            );
        }
    }
}

async fn change_window_at(now: &str) -> Verdict {
    let plugin = runtime()
        .load(&plugin("change-window"), CheckLimits::default())
        .await
        .expect("the Python check loads");
    let grants = CheckGrants {
        clock: Clock::Fixed(now.parse().expect("time")),
        ..CheckGrants::default()
    };
    let run = plugin
        .check(
            &context(Phase::BeforeCommit),
            &config(&[("windows", "mon-fri 09:00-17:00, sat 10:00-12:00")]),
            &grants,
            LocalEnds::new(&[]).host(Vec::new()),
        )
        .await;
    run.outcome.expect("change-window decides")
}

#[tokio::test]
async fn change_window_passes_and_fails_by_the_clock_it_is_given() {
    // 2026-11-26 is a Thursday, 2026-11-29 a Sunday.
    assert_eq!(
        change_window_at("2026-11-26T10:00:00Z").await,
        Verdict::Pass
    );
    assert_eq!(
        change_window_at("2026-11-28T11:30:00Z").await,
        Verdict::Pass
    );
    let Verdict::Fail { reason } = change_window_at("2026-11-29T10:00:00Z").await else {
        panic!("Sunday is outside every window");
    };
    assert!(
        reason.contains("outside the change windows")
            && reason.contains("Sun 2026-11-29 10:00 UTC"),
        "{reason}"
    );
}
