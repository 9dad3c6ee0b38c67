//! Shared pieces: a real etcd on loopback, milvus-sim with a backup, host configs and job
//! files as operators write them, and waiting for a condition with a bound.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use milvus_sim::fixtures::{BackupSpec, SchemaMix, generate};
use milvus_sim::{Sim, Topology};
use object_store::local::LocalFileSystem;

/// A free loopback port (bound, then released for the child to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// An etcd to test against: `LOCKSTEP_TEST_ETCD` (`http://127.0.0.1:2379`) when set, else one
/// started here from the `etcd` binary (Debian's `etcd-server`) on loopback ports, killed on
/// drop.
pub struct Etcd {
    /// `HOST:PORT`.
    pub endpoint: String,
    child: Option<Child>,
    _data: Option<tempfile::TempDir>,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Etcd {
    /// `etcd://HOST:PORT/{prefix}` with a prefix no other test uses.
    pub fn journal_url(&self, test: &str) -> String {
        format!(
            "etcd://{}/lockstep-test/{test}-{}-{}",
            self.endpoint,
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        )
    }
}

/// The etcd for a test, or `None` (after printing SKIPPED) when there is none to use.
pub fn etcd() -> Option<Etcd> {
    if let Ok(url) = std::env::var("LOCKSTEP_TEST_ETCD") {
        let endpoint = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        return Some(Etcd {
            endpoint,
            child: None,
            _data: None,
        });
    }
    let binary = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("etcd"))
            .find(|p| p.is_file())
    });
    let Some(binary) = binary else {
        println!("SKIPPED: no etcd (install Debian's etcd-server or set LOCKSTEP_TEST_ETCD)");
        return None;
    };
    let data = tempfile::tempdir().expect("a temp dir for etcd");
    let (client, peer) = (free_port(), free_port());
    let child = Command::new(binary)
        .arg("--data-dir")
        .arg(data.path())
        .args([
            "--name",
            "test",
            "--listen-client-urls",
            &format!("http://127.0.0.1:{client}"),
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{client}"),
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-cluster",
            &format!("test=http://127.0.0.1:{peer}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd starts");
    let etcd = Etcd {
        endpoint: format!("127.0.0.1:{client}"),
        child: Some(child),
        _data: Some(data),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&etcd.endpoint).is_err() {
        assert!(Instant::now() < deadline, "etcd did not listen within 20s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(etcd)
}

/// Polls `check` every 50 ms until it returns `Some`, failing the test after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A primary replicating to a standby, each reading imports from its own directory, with
/// quick import stages so a restore takes about a second.
fn topology(root: &Path) -> String {
    let mut text = String::new();
    for id in ["primary", "standby"] {
        text.push_str(&format!(
            "[[cluster]]\nid = \"{id}\"\nversion = \"3.0.2\"\nimport_in_replicating_cluster = true\nenable_l0_import = true\n\
             pchannels = 2\n[cluster.storage]\nurl = \"{}\"\n[cluster.durations]\npending = \"20ms\"\n\
             preimport = \"20ms\"\nimporting = \"50ms\"\nsorting = \"10ms\"\nindex_building = \"20ms\"\n\
             committing = \"20ms\"\n\n",
            root.join("storage").join(id).display()
        ));
    }
    text.push_str("[replication]\nprimary = \"primary\"\nsecondaries = [\"standby\"]\nstream_lag = \"20ms\"\n");
    text
}

/// milvus-sim (a primary replicating to a standby, each on its own local storage), a
/// generated backup `bak` (2 collections × 2 partitions) and a host config naming both
/// clusters, all under one temporary directory.
pub struct World {
    pub sim: Sim,
    pub dir: tempfile::TempDir,
    pub host_config: PathBuf,
}

impl World {
    pub async fn start() -> World {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        for id in ["primary", "standby"] {
            std::fs::create_dir_all(root.join("storage").join(id)).unwrap();
        }
        let topology_file = root.join("topology.toml");
        std::fs::write(&topology_file, topology(root)).unwrap();
        let sim = Sim::start(Topology::from_toml_file(&topology_file).expect("topology parses"))
            .await
            .expect("milvus-sim starts");

        let backups = root.join("backups");
        std::fs::create_dir_all(&backups).unwrap();
        let spec = BackupSpec {
            name: "bak".into(),
            collections: 2,
            partitions: 2,
            schema: SchemaMix::Plain,
            ..BackupSpec::default()
        };
        let store = Arc::new(LocalFileSystem::new_with_prefix(&backups).unwrap());
        generate(&spec, store, &object_store::path::Path::from("backup"))
            .await
            .expect("backup generated");

        let mut text = format!(
            "[backups]\nstorage = {{ url = \"file://{}\" }}\nroot = \"backup\"\n",
            backups.display()
        );
        for id in ["primary", "standby"] {
            text.push_str(&format!(
                "\n[clusters.{id}]\nuri = \"{}\"\nstorage = {{ url = \"file://{}\" }}\nl0_import = true\n",
                sim.uri(id),
                root.join("storage").join(id).display()
            ));
        }
        let host_config = root.join("lockstep.toml");
        std::fs::write(&host_config, text).unwrap();
        World {
            sim,
            dir,
            host_config,
        }
    }

    /// A job file's text restoring `bak` with `suffix` onto the primary, mirrored to the
    /// standby.
    pub fn job(&self, name: &str, suffix: &str) -> String {
        format!(
            "name = \"{name}\"\nbackup = \"bak\"\ntarget = \"primary\"\nsecondaries = [\"standby\"]\n\n\
             [restore]\nsuffix = \"{suffix}\"\n\n[two_phase]\nmirror_grace = \"20s\"\n"
        )
    }

    /// Import creates the primary received.
    pub async fn creates(&self) -> usize {
        self.sim
            .cluster("primary")
            .control()
            .state()
            .await
            .expect("sim state")
            .requests_to("/jobs/import/create")
            .len()
    }

    /// Visible rows of `db.collection` on `end`; `None` when it does not exist there.
    pub async fn visible_rows(&self, end: &str, db: &str, collection: &str) -> Option<i64> {
        let state = self.sim.cluster(end).control().state().await.ok()?;
        state
            .collection(db, collection)
            .map(|c| c.visible_rows - c.visible_deleted_rows)
    }

    /// Collections on `end` whose name ends with `suffix`.
    pub async fn collections_with_suffix(&self, end: &str, suffix: &str) -> Vec<String> {
        let state = self
            .sim
            .cluster(end)
            .control()
            .state()
            .await
            .expect("sim state");
        state
            .collections
            .iter()
            .filter(|c| c.name.ends_with(suffix))
            .map(|c| format!("{}.{}", c.db_name, c.name))
            .collect()
    }

    /// Import jobs left Uncommitted on any end.
    pub async fn uncommitted_jobs(&self) -> usize {
        let mut n = 0;
        for end in ["primary", "standby"] {
            let state = self
                .sim
                .cluster(end)
                .control()
                .state()
                .await
                .expect("state");
            n += state
                .jobs
                .iter()
                .filter(|j| j.state == milvus_sim::jobs::JobState::Uncommitted)
                .count();
        }
        n
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
}

/// Every file under `dir` (not recursing into dot-directories) with its bytes: job files
/// must come out of a test exactly as they went in.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| (e.path(), std::fs::read(e.path()).unwrap()))
        .collect();
    files.sort();
    files
}
