//! `lockstep serve` as a network service: what it refuses at start (a listener off loopback
//! without TLS and a token, a short token, a certificate that does not load), the example
//! systemd unit's command line, TLS with a certificate that cert-manager rotates in place,
//! seen by a client that trusts only the test's CA, and clients too slow to finish a
//! request, which neither hold a connection nor a stop.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use lockstep::serve::listen::{BODY_LIMIT, HEADER_LIMIT, STOP_LIMIT};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, pem::PemObject as _};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use crate::support::eventually;

const TOKEN_VAR: &str = "SERVE_TEST_TOKEN";
pub(super) const TOKEN: &str = "serve-test-token-0123456789";

/// An empty host config and a state directory under `root`.
fn layout(root: &Path) -> (PathBuf, PathBuf) {
    let config = root.join("lockstep.toml");
    std::fs::write(&config, "").unwrap();
    (config, root.join("state"))
}

fn serve(root: &Path, args: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
    let (config, state) = layout(root);
    let mut cmd = tokio::process::Command::new(e2e::lockstep_bin());
    cmd.arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .arg("serve")
        .args(args)
        .env_remove("LOCKSTEP_TOKEN_ENV")
        .env_remove("LOCKSTEP_LISTEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Runs a `serve` that must refuse to start: its exit code and its stderr.
async fn refused(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let root = tempfile::tempdir().unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        serve(root.path(), args, env).output(),
    )
    .await
    .expect("a refused serve ends at once")
    .unwrap();
    assert!(
        !root.path().join("state/journal").exists(),
        "a refused serve opened its journal"
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn serve_refuses_at_start_what_would_expose_the_api() {
    // Off loopback: TLS and a token, and the message says which flags are missing.
    let (code, err) = refused(&["--listen", "0.0.0.0:0"], &[]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("not loopback") && err.contains("--tls-cert") && err.contains("--token-env"),
        "{err}"
    );
    let (code, err) = refused(
        &["--listen", "0.0.0.0:0", "--token-env", TOKEN_VAR],
        &[(TOKEN_VAR, TOKEN)],
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--tls-cert") && !err.contains("--token-env NAME"),
        "{err}"
    );

    // A short token, named by its variable and never shown.
    let short = "only-15-bytes!!";
    let (code, err) = refused(&["--token-env", TOKEN_VAR], &[(TOKEN_VAR, short)]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(TOKEN_VAR) && err.contains("at least 16"),
        "{err}"
    );
    assert!(!err.contains(short), "the token was printed: {err}");
    // A read token alone would guard nothing.
    let (code, err) = refused(&["--read-token-env", TOKEN_VAR], &[(TOKEN_VAR, TOKEN)]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("needs --token-env"), "{err}");

    // An allowed origin that is neither an origin nor a host:port, from the environment.
    let (code, err) = refused(
        &[],
        &[("LOCKSTEP_ALLOWED_ORIGINS", "a.example:443,b.example")],
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--allowed-origin \"b.example\""), "{err}");

    // A certificate that is not there, by its path.
    let (code, err) = refused(
        &[
            "--tls-cert",
            "/nonexistent/tls.crt",
            "--tls-key",
            "/nonexistent/tls.key",
        ],
        &[],
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/nonexistent/tls.crt"), "{err}");
}

/// The systemd unit's command line is one `serve` takes: every flag parses, TLS and a token
/// are there, its tokens are long enough, and what stops it here is only the certificate
/// this machine does not have, named by its path.
#[tokio::test]
async fn the_example_units_command_line_is_one_serve_starts_with() {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serve/lockstep-serve.service"),
    )
    .unwrap();
    let exec = unit.replace("\\\n", " ");
    let line = exec
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    let args: Vec<&str> = line.split_whitespace().skip(1).collect();
    let out = tokio::process::Command::new(e2e::lockstep_bin())
        .args(&args)
        .env("LOCKSTEP_API_TOKEN", TOKEN)
        .env("LOCKSTEP_READ_TOKEN", "another-token-for-reading")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/etc/lockstep/tls/tls.crt"), "{err}");
}

/// A test CA, and certificates for `localhost` it signs.
pub(super) struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub(super) fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// A certificate for `localhost` and its key, as PEM.
    pub(super) fn leaf(&self) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    pub(super) fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        roots
    }
}

/// Writes `text` to `path` by renaming a new file over it, as cert-manager's secret
/// volume swaps its files.
fn replace(path: &Path, text: &str) {
    let part = path.with_extension("part");
    std::fs::write(&part, text).unwrap();
    std::fs::rename(&part, path).unwrap();
}

/// Connects over TLS trusting `roots` for `localhost`, asks `GET path` with the token, and
/// returns the certificate presented and the answer's status line.
pub(super) async fn get_over_tls(
    port: u16,
    roots: RootCertStore,
    path: &str,
) -> anyhow::Result<(Vec<u8>, String)> {
    let config = ClientConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost")?, tcp)
        .await?;
    let presented = tls.get_ref().1.peer_certificates().unwrap_or_default();
    let leaf = presented.first().map(|c| c.to_vec()).unwrap_or_default();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Connection: close\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    // The answer is whole when the server closes; how it closes does not matter here.
    let _ = tls.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    Ok((leaf, answer.lines().next().unwrap_or_default().to_owned()))
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn serve_over_tls_presents_a_rotated_certificate_to_new_connections() {
    let root = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (cert, key) = (root.path().join("tls.crt"), root.path().join("tls.key"));
    let (first_cert, first_key) = ca.leaf();
    replace(&cert, &first_cert);
    replace(&key, &first_key);
    let mut child = serve(
        root.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-env",
            TOKEN_VAR,
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &[(TOKEN_VAR, TOKEN)],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let port = listening(&mut child, "https").await;

    let (presented, status) = get_over_tls(port, ca.roots(), "/api/v1/list_restores")
        .await
        .unwrap();
    assert_eq!(presented, der(&first_cert));
    assert_eq!(status, "HTTP/1.1 200 OK");
    // A client that trusts another CA gets no answer at all.
    assert!(
        get_over_tls(port, Ca::new().roots(), "/healthz")
            .await
            .is_err()
    );

    // Rotated in place, key first: a new connection sees the new certificate.
    let (second_cert, second_key) = ca.leaf();
    replace(&key, &second_key);
    replace(&cert, &second_cert);
    let second = der(&second_cert);
    eventually(Duration::from_secs(30), || async {
        let (presented, status) = get_over_tls(port, ca.roots(), "/healthz").await.unwrap();
        assert_eq!(status, "HTTP/1.1 200 OK");
        (presented == second).then_some(())
    })
    .await
    .expect("the rotated certificate is served");
    child.kill().await.unwrap();
}

/// The port a started `serve` says it listens on (over `scheme`).
async fn listening(child: &mut tokio::process::Child, scheme: &str) -> u16 {
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("serve says where it listens")
        .unwrap()
        .unwrap_or_default();
    line.strip_prefix(&format!("listening on {scheme}://127.0.0.1:"))
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap()
}

/// A plain `serve` on a loopback port of its own, and that port.
async fn plain_serve(root: &Path) -> (tokio::process::Child, u16) {
    let mut child = serve(root, &["--listen", "127.0.0.1:0"], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let port = listening(&mut child, "http").await;
    (child, port)
}

/// What a connection to `port` that sent `sent` reads until the server closes it, or `None`
/// if it is still open after `limit`.
async fn read_until_closed(port: u16, sent: &str, limit: Duration) -> Option<String> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tcp.write_all(sent.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    match tokio::time::timeout(limit, tcp.read_to_end(&mut answer)).await {
        // A reset after the answer is a close as well.
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        Err(_) => None,
    }
}

/// Well past a limit, for a loaded machine, and short of what a client that is never cut
/// off would be waited for.
const PAST: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_client_that_sends_half_its_headers_is_cut_off() {
    let root = tempfile::tempdir().unwrap();
    let (mut child, port) = plain_serve(root.path()).await;
    let half = format!("GET /api/v1/list_restores HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    let answer = read_until_closed(port, &half, HEADER_LIMIT + PAST).await;
    assert!(
        answer.is_some(),
        "a connection with half its headers was still open {:?} later",
        HEADER_LIMIT + PAST
    );
    // The same connection with its headers whole is answered: the limit cut the slow one.
    let whole = format!("{half}Connection: close\r\n\r\n");
    let answer = read_until_closed(port, &whole, PAST).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_body_that_does_not_arrive_is_answered_408() {
    let root = tempfile::tempdir().unwrap();
    let (mut child, port) = plain_serve(root.path()).await;
    let request = format!(
        "POST /api/v1/restore HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{{\"backup_name\":"
    );
    let answer = read_until_closed(port, &request, BODY_LIMIT + PAST)
        .await
        .expect("the server closed the connection of a body that never came");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within"), "{answer}");
    child.kill().await.unwrap();
}

#[tokio::test]
async fn sigterm_stops_serve_within_its_deadline_whatever_a_slow_client_does() {
    let root = tempfile::tempdir().unwrap();
    let (mut child, port) = plain_serve(root.path()).await;
    // One connection with half its headers, one kept alive after an answer.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let half = format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    slow.write_all(half.as_bytes()).await.unwrap();
    let mut idle = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let whole = format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    idle.write_all(whole.as_bytes()).await.unwrap();
    let mut answer = [0u8; 12];
    idle.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");

    let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    // Well before the header limit would have cut the slow client off: the stop's own
    // deadline ended it.
    let within = STOP_LIMIT + (HEADER_LIMIT - STOP_LIMIT) / 2;
    let exited = tokio::time::timeout(within, child.wait()).await;
    let status = exited
        .unwrap_or_else(|_| panic!("serve still ran {within:?} after SIGTERM"))
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
    drop((slow, idle));
}

// The SIGTERM test tells the stop's deadline from the header limit only if it is shorter.
const _: () = assert!(STOP_LIMIT.as_secs() < HEADER_LIMIT.as_secs());
