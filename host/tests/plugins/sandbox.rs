//! The test guest misbehaves in every way a check could; each misbehaviour is
//! stopped or refused with the reason that says which, and the same loaded
//! plugin answers the next call normally.

use std::sync::Arc;
use std::time::Duration;

use lockstep::plugins::{
    AllowedHosts, CheckError, CheckGrants, CheckLimits, CheckRun, Error, LogLevel, LogSource,
    Phase, Plugin, Verdict,
};

use super::support::{
    ScriptedResolver, TestServer, config, context, no_storage, plugin, runtime, runtime_resolving,
};

const TIGHT: CheckLimits = CheckLimits {
    memory_bytes: 16 << 20,
    cpu: Duration::from_millis(200),
    wall: Duration::from_millis(2_000),
};

async fn test_guest(limits: CheckLimits) -> Plugin {
    runtime()
        .load(&plugin("test-guest"), limits)
        .await
        .expect("test guest loads")
}

async fn call(plugin: &Plugin, behaviour: &[(&str, &str)], grants: &CheckGrants) -> CheckRun {
    plugin
        .check(
            &context(Phase::BeforeCommit),
            &config(behaviour),
            grants,
            no_storage(),
        )
        .await
}

/// The next call on the same plugin still works: nothing of the bad call
/// survived in the host.
async fn assert_next_call_passes(plugin: &Plugin) {
    let run = call(plugin, &[("behaviour", "pass")], &CheckGrants::default()).await;
    assert_eq!(
        run.outcome,
        Ok(Verdict::Pass),
        "the next call after a bad one"
    );
}

/// The guest GETs `url` once.
async fn http_get(plugin: &Plugin, url: &str, grants: &CheckGrants) -> CheckRun {
    call(plugin, &[("behaviour", "http-get"), ("url", url)], grants).await
}

/// Grants that let the check's HTTP GET reach `origins`.
fn allowing(origins: &[String]) -> CheckGrants {
    CheckGrants {
        allow_hosts: AllowedHosts::parse("t", origins).expect("origins"),
        ..CheckGrants::default()
    }
}

fn refusal(run: &CheckRun) -> String {
    match &run.outcome {
        Ok(Verdict::Fail { reason }) => reason.clone(),
        other => panic!("expected the guest to report a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn an_endless_loop_hits_the_cpu_limit() {
    let plugin = test_guest(TIGHT).await;
    let run = call(
        &plugin,
        &[("behaviour", "loop-forever")],
        &CheckGrants::default(),
    )
    .await;
    assert!(
        matches!(run.outcome, Err(CheckError::CpuLimit { .. })),
        "{:?}",
        run.outcome
    );
    let reason = run.outcome.expect_err("cpu limit").to_string();
    assert!(reason.starts_with("cpu limit"), "{reason}");
    assert_next_call_passes(&plugin).await;
}

#[tokio::test]
async fn unbounded_allocation_hits_the_memory_limit() {
    let plugin = test_guest(TIGHT).await;
    let run = call(
        &plugin,
        &[("behaviour", "allocate")],
        &CheckGrants::default(),
    )
    .await;
    match &run.outcome {
        Err(CheckError::MemoryLimit { requested, limit }) => {
            assert_eq!(*limit, 16 << 20);
            assert!(requested > limit);
        }
        other => panic!("expected memory limit, got {other:?}"),
    }
    assert!(
        run.outcome
            .expect_err("limit")
            .to_string()
            .starts_with("memory limit")
    );
    assert_next_call_passes(&plugin).await;
}

#[tokio::test]
async fn a_trap_names_the_instruction_and_the_wasm_frame() {
    let plugin = test_guest(TIGHT).await;
    let run = call(&plugin, &[("behaviour", "trap")], &CheckGrants::default()).await;
    let error = run.outcome.expect_err("trap");
    let CheckError::Trap { kind, frame } = &error else {
        panic!("expected a trap, got {error:?}");
    };
    assert_eq!(kind, "unreachable");
    let frame = frame.as_deref().expect("the name section gives a frame");
    assert!(frame.contains("trap_here"), "{frame}");
    assert!(
        error.to_string().starts_with("trap: unreachable at "),
        "{error}"
    );
    assert_next_call_passes(&plugin).await;
}

/// The guest waits inside a host call (an HTTP GET to an allowed host that
/// never answers, retried); epochs cannot stop it, the wall-time limit does.
#[tokio::test(start_paused = true)]
async fn waiting_in_a_host_call_hits_the_wall_time_limit() {
    let server = TestServer::start(None, "").await;
    let plugin = test_guest(CheckLimits::default()).await;
    let grants = allowing(&[server.origin()]);
    let run = call(
        &plugin,
        &[("behaviour", "slow-http"), ("url", &server.url("/wait"))],
        &grants,
    )
    .await;
    assert_eq!(
        run.outcome,
        Err(CheckError::Timeout {
            limit: std::time::Duration::from_secs(30)
        })
    );
    assert!(server.connections() >= 1, "the allowed host was reached");
    assert_next_call_passes(&plugin).await;
}

#[tokio::test(start_paused = true)]
async fn sleeping_through_wasi_hits_the_wall_time_limit() {
    let plugin = test_guest(CheckLimits::default()).await;
    let run = call(
        &plugin,
        &[("behaviour", "wasi-sleep")],
        &CheckGrants::default(),
    )
    .await;
    assert!(
        matches!(run.outcome, Err(CheckError::Timeout { .. })),
        "{:?}",
        run.outcome
    );
    assert!(
        run.outcome
            .expect_err("timeout")
            .to_string()
            .starts_with("timeout")
    );
    assert_next_call_passes(&plugin).await;
}

#[tokio::test]
async fn opening_a_file_is_refused() {
    let plugin = test_guest(TIGHT).await;
    let run = call(
        &plugin,
        &[("behaviour", "open-file"), ("path", "/etc/passwd")],
        &CheckGrants::default(),
    )
    .await;
    let reason = refusal(&run);
    assert!(reason.starts_with("open /etc/passwd: "), "{reason}");
    assert_next_call_passes(&plugin).await;
}

#[tokio::test]
async fn connecting_a_socket_is_refused() {
    let server = TestServer::start(Some(200), "ok").await;
    let plugin = test_guest(TIGHT).await;
    let addr = server.addr.to_string();
    let run = call(
        &plugin,
        &[("behaviour", "connect-socket"), ("addr", &addr)],
        &CheckGrants::default(),
    )
    .await;
    let reason = refusal(&run);
    assert!(reason.starts_with(&format!("connect {addr}: ")), "{reason}");
    assert_eq!(
        server.connections(),
        0,
        "no connection reached the listener"
    );
    assert_next_call_passes(&plugin).await;
}

#[tokio::test]
async fn http_to_a_host_not_allowed_is_refused_before_connecting() {
    let server = TestServer::start(Some(200), "ok").await;
    let other = TestServer::start(Some(200), "ok").await;
    let plugin = test_guest(TIGHT).await;
    let grants = allowing(&[other.origin()]);
    let run = http_get(&plugin, &server.url("/secret"), &grants).await;
    let reason = refusal(&run);
    assert!(reason.contains("NotAllowed"), "{reason}");
    assert_eq!(server.connections(), 0, "refused before any connection");

    // The same grant lets the allowed origin through.
    let run = http_get(&plugin, &other.url("/ok"), &grants).await;
    assert_eq!(run.outcome, Ok(Verdict::Pass));
    assert_eq!(other.connections(), 1);
}

/// Host and the headers that frame a request are lockstep's: asking for one is an
/// error the guest handles (not a trap), and nothing is sent; other headers go
/// through beside the allowed origin's Host.
#[tokio::test]
async fn http_get_refuses_host_and_hop_by_hop_headers_without_sending() {
    let server = TestServer::start(Some(200), "ok").await;
    let plugin = test_guest(TIGHT).await;
    let grants = allowing(&[server.origin()]);
    let url = server.url("/approve");
    for header in [
        "Host: metadata.google.internal",
        "Transfer-Encoding: chunked",
        "Proxy-Authorization: Basic eA==",
        "Connection: upgrade",
    ] {
        let run = call(
            &plugin,
            &[("behaviour", "http-get"), ("url", &url), ("header", header)],
            &grants,
        )
        .await;
        let reason = refusal(&run);
        let name = header.split(':').next().expect("a name");
        assert!(
            reason.contains("NotAllowed") && reason.contains(&format!("request header `{name}`")),
            "{reason}"
        );
    }
    assert_eq!(server.connections(), 0, "no refused request was sent");

    let run = call(
        &plugin,
        &[
            ("behaviour", "http-get"),
            ("url", &url),
            ("header", "X-Request-Id: 7"),
        ],
        &grants,
    )
    .await;
    assert_eq!(run.outcome, Ok(Verdict::Pass));
    let heads = server.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].contains(&format!("\r\nhost: {}\r\n", server.addr)),
        "{}",
        heads[0]
    );
    assert!(heads[0].contains("\r\nx-request-id: 7\r\n"), "{}", heads[0]);
}

/// A name that resolves to loopback is refused, even when allowed; the address itself,
/// named in allow_hosts, is reached.
#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_while_the_address_is_allowed() {
    let server = TestServer::start(Some(200), "ok").await;
    let plugin = test_guest(TIGHT).await;
    let port = server.addr.port();
    let by_name = format!("http://localhost:{port}");
    let grants = allowing(std::slice::from_ref(&by_name));
    let run = http_get(&plugin, &format!("{by_name}/"), &grants).await;
    let reason = refusal(&run);
    assert!(
        reason.contains("NotAllowed") && reason.contains("(a loopback address)"),
        "{reason}"
    );
    assert_eq!(server.connections(), 0);

    let grants = allowing(&[server.origin()]);
    let run = http_get(&plugin, &server.url("/"), &grants).await;
    assert_eq!(run.outcome, Ok(Verdict::Pass));
    assert_eq!(server.connections(), 1);
}

/// DNS rebinding: `approvals.test` answers 127.0.0.1 (named by address in allow_hosts, so
/// reachable), then 127.0.0.2 (not named). Every GET of one call goes to the first
/// answer, looked up once; the next call looks up again and is refused the second.
#[tokio::test]
async fn a_name_stays_on_its_first_address_for_the_whole_call() {
    let first = TestServer::start(Some(200), "ok").await;
    let port = first.addr.port();
    let second = TestServer::start_on(([127, 0, 0, 2], port).into(), Some(200), "ok").await;
    let resolver = Arc::new(ScriptedResolver::new(&[first.addr.ip(), second.addr.ip()]));
    let plugin = runtime_resolving(resolver.clone())
        .load(&plugin("test-guest"), TIGHT)
        .await
        .expect("test guest loads");
    let name = format!("approvals.test:{port}");
    let grants = allowing(&[format!("http://{name}"), first.origin()]);
    let url = format!("http://{name}/approved");

    let run = call(
        &plugin,
        &[("behaviour", "http-get"), ("url", &url), ("times", "3")],
        &grants,
    )
    .await;
    assert_eq!(run.outcome, Ok(Verdict::Pass));
    assert_eq!(resolver.lookups(), 1, "one lookup per call");
    assert_eq!(first.connections(), 3);
    assert_eq!(
        second.connections(),
        0,
        "the second answer was never followed"
    );
    assert!(
        (first.heads().iter()).all(|head| head.contains(&format!("\r\nhost: {name}\r\n"))),
        "{:?}",
        first.heads()
    );

    let run = http_get(&plugin, &url, &grants).await;
    let reason = refusal(&run);
    assert!(
        reason.contains("NotAllowed") && reason.contains("127.0.0.2 (a loopback address)"),
        "{reason}"
    );
    assert_eq!(resolver.lookups(), 2);
    assert_eq!(second.connections(), 0);
}

#[tokio::test]
async fn logs_and_output_are_captured_and_tagged() {
    let plugin = test_guest(TIGHT).await;
    let run = call(&plugin, &[("behaviour", "echo")], &CheckGrants::default()).await;
    assert_eq!(run.outcome, Ok(Verdict::Pass));
    let host_line = run
        .logs
        .iter()
        .find(|l| l.source == LogSource::Host)
        .expect("log import line");
    assert_eq!(host_line.level, LogLevel::Info);
    assert_eq!(host_line.message, "echo");
    assert!(
        host_line
            .fields
            .contains(&("restore".into(), "r-42".into()))
    );
    assert!(
        run.logs
            .iter()
            .any(|l| l.source == LogSource::Stdout && l.message == "to stdout")
    );
    assert!(
        run.logs
            .iter()
            .any(|l| l.source == LogSource::Stderr && l.message == "to stderr")
    );
}

#[tokio::test]
async fn a_plugin_importing_outside_the_wit_is_refused_at_load() {
    let path = plugin("foreign-import");
    let error = runtime()
        .load(&path, CheckLimits::default())
        .await
        .err()
        .expect("refused at load");
    match &error {
        Error::UnknownImport { import, .. } => assert_eq!(import, "evil:probe/raw-socket@1.0.0"),
        other => panic!("expected an unknown import, got {other}"),
    }
    assert!(
        error.to_string().contains("evil:probe/raw-socket@1.0.0"),
        "{error}"
    );
}

#[tokio::test]
async fn a_core_module_or_garbage_is_refused_at_load() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("garbage.wasm");
    std::fs::write(&path, b"\0asm\x01\0\0\0").expect("write");
    let error = runtime()
        .load(&path, CheckLimits::default())
        .await
        .err()
        .expect("refused");
    assert!(matches!(error, Error::NotAComponent { .. }), "{error}");
}
