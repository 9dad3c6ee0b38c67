//! etcd for the tests: the suite's own (`LOCKSTEP_TEST_ETCD`, which CI sets) under a prefix
//! per test, or a server of a test's or a seed's own, which a fault can stop and start
//! again without touching any other journal.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The variable naming the suite's etcd (`http://127.0.0.1:2379`).
const SUITE_VAR: &str = "LOCKSTEP_TEST_ETCD";

/// The etcd a test's journals live on. Dropping it stops a server started for the test.
pub struct TestEtcd {
    /// `HOST:PORT`.
    pub endpoint: String,
    _own: Option<(EtcdServer, tempfile::TempDir)>,
}

impl TestEtcd {
    /// `etcd://HOST:PORT/{prefix}` with a prefix no other test uses.
    pub fn journal_url(&self, test: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        format!(
            "etcd://{}/lockstep-test/{test}-{}-{nanos}",
            self.endpoint,
            std::process::id()
        )
    }
}

/// The suite's etcd when `LOCKSTEP_TEST_ETCD` is set, else one started for `test` from the
/// `etcd` binary on `PATH` (Debian's `etcd-server`). With neither, `test` is skipped, or
/// fails under `CI=true` (see [`crate::unavailable`]).
pub async fn for_test(test: &str) -> Option<TestEtcd> {
    if let Ok(url) = std::env::var(SUITE_VAR) {
        let endpoint = url.trim_start_matches("http://").trim_end_matches('/');
        return Some(TestEtcd {
            endpoint: endpoint.to_owned(),
            _own: None,
        });
    }
    let Some(binary) = binary() else {
        crate::unavailable(
            test,
            &format!("no etcd: install Debian's etcd-server or set {SUITE_VAR}"),
        );
        return None;
    };
    let dir = tempfile::tempdir().expect("a temp dir for etcd");
    let server = EtcdServer::start(&binary, dir.path())
        .await
        .unwrap_or_else(|e| panic!("{test}: starting etcd: {e:#}"));
    Some(TestEtcd {
        endpoint: server.address(),
        _own: Some((server, dir)),
    })
}

/// The `etcd` binary on `PATH`, if there is one.
pub fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
}

/// A running (or stopped) etcd with its data in the seed's world.
pub struct EtcdServer {
    binary: PathBuf,
    data_dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl EtcdServer {
    /// Starts etcd on two free ports with its data under `dir`, and waits until it answers.
    pub async fn start(binary: &Path, dir: &Path) -> anyhow::Result<EtcdServer> {
        let mut server = EtcdServer {
            binary: binary.to_owned(),
            data_dir: dir.join("etcd"),
            client_port: free_port()?,
            peer_port: free_port()?,
            child: None,
        };
        server.up().await?;
        Ok(server)
    }

    /// `host:port` of its client URL.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// SIGKILL: the server goes away as in a crash, its data kept on disk.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.start_kill().context("killing etcd")?;
            child.wait().await.context("waiting for etcd to die")?;
        }
        Ok(())
    }

    /// Starts the server again on its ports and data, and waits until it answers.
    pub async fn up(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(self.child.is_none(), "etcd is already running");
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.with_extension("log"))
            .context("opening etcd's log")?;
        let child = Command::new(&self.binary)
            .args(["--name", "faults", "--data-dir"])
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("faults={peer}")])
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        self.child = Some(child);
        let health = format!("{client}/health");
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if reqwest::get(&health)
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < until,
                "etcd on port {} did not answer within 30 s (its log: {})",
                self.client_port,
                self.data_dir.with_extension("log").display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A loopback port nobody listens on now. Another process could take it before its user
/// binds it; on a test machine that is rare enough that the error naming it will do.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}
