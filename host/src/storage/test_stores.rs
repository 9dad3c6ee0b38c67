//! Real stores for the storage tests: a local directory, and a real S3 server (`moto` from
//! PyPI).
//!
//! The S3 tests run when `LOCKSTEP_TEST_S3_ENDPOINT` is set (CI sets it). If a server
//! answers there it is used; otherwise the test starts its own `moto_server` on a free
//! loopback port and stops it when done, so tests running in parallel processes never
//! share or kill each other's server. Unset, the test prints that it skipped and why.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use url::Url;

use super::open::{OpenedStore, open, open_with_env};
use crate::config::StorageSpec;

const ENDPOINT_VAR: &str = "LOCKSTEP_TEST_S3_ENDPOINT";
/// The variables the test specs name for their credentials; moto takes any value, and the
/// tests hand these to the store through their own environment, not the process's.
const KEY_VAR: &str = "LOCKSTEP_TEST_S3_KEY";
const SECRET_VAR: &str = "LOCKSTEP_TEST_S3_SECRET";
/// How long moto may take to start listening (it imports a lot of Python).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// An S3 endpoint for one test; stops the server if the test started it.
pub struct S3Server {
    pub endpoint: String,
    child: Option<Child>,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            // Best effort: the process is ours and the test is over either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl S3Server {
    /// `s3://{bucket_and_root}` on this server, opened, creating the bucket.
    pub async fn bucket(&self, bucket_and_root: &str) -> OpenedStore {
        let bucket = bucket_and_root
            .split('/')
            .next()
            .expect("split yields at least one part");
        let response = reqwest::Client::new()
            .put(format!("{}/{bucket}", self.endpoint))
            .send()
            .await
            .expect("create bucket request");
        let status = response.status();
        assert!(
            status.is_success() || status.as_u16() == 409,
            "create bucket {bucket}: {status}"
        );
        let spec = StorageSpec {
            url: Url::parse(&format!("s3://{bucket_and_root}")).expect("bucket names a URL"),
            endpoint: Some(Url::parse(&self.endpoint).expect("endpoint is a URL")),
            region: None,
            access_key_id_env: Some(KEY_VAR.into()),
            secret_access_key_env: Some(SECRET_VAR.into()),
            session_token_env: None,
            given: None,
            allow_http: true,
            virtual_hosted: false,
            azure_account: None,
            azure_key_env: None,
            service_account_file: None,
            anonymous: false,
        };
        let env = |name: &str| {
            [KEY_VAR, SECRET_VAR]
                .contains(&name)
                .then(|| "testing".to_owned())
        };
        open_with_env(&spec, &env).expect("open the moto bucket")
    }
}

/// A local directory, opened as a store.
pub fn local(dir: &std::path::Path) -> OpenedStore {
    open(&StorageSpec::local(dir).expect("a temp dir is a valid path")).expect("open")
}

/// A bucket name no other test run uses.
pub fn unique_bucket(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    format!("{test}-{}-{nanos}", std::process::id()).replace('_', "-")
}

/// The S3 server for `test`, or `None` (after saying so) when S3 tests are not enabled. Under
/// `CI=true` that is a failure: a CI run that lost its S3 server must not pass by skipping.
pub async fn s3_server(test: &str) -> Option<S3Server> {
    let Ok(endpoint) = std::env::var(ENDPOINT_VAR) else {
        let why = format!("{ENDPOINT_VAR} is not set; set it to run the S3 path against moto");
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "{test}: {why} (CI=true: a test whose service is missing fails)"
        );
        eprintln!("SKIPPED {test}: {why}");
        return None;
    };
    let endpoint = endpoint.trim_end_matches('/').to_owned();
    if let Some(addr) = socket_addr(&endpoint)
        && reachable(addr).await
    {
        return Some(S3Server {
            endpoint,
            child: None,
        });
    }
    Some(start_moto().await)
}

fn socket_addr(endpoint: &str) -> Option<SocketAddr> {
    let url = url::Url::parse(endpoint).ok()?;
    url.socket_addrs(|| None).ok()?.into_iter().next()
}

async fn reachable(addr: SocketAddr) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

async fn start_moto() -> S3Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("bound address")
        .port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server (pip install \"moto[server]\")");
    let server = S3Server {
        endpoint: format!("http://127.0.0.1:{port}"),
        child: Some(child),
    };
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = tokio::time::Instant::now() + STARTUP_TIMEOUT;
    while !reachable(addr).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "moto_server did not listen on {port} within {STARTUP_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server
}
