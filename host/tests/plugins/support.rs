//! Shared pieces: plugin paths, a runtime on a shared compile cache, a restore
//! context, local object stores per end, tiny HTTP servers on loopback and a
//! resolver whose answers a test scripts.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use lockstep::plugins::{
    AllowedHosts, Check, CheckContext, CheckEnd, CheckHost, CheckImportJob, CheckLimits, EndRole,
    OnError, Phase, PluginRuntime, Resolver, RuntimeConfig, StagedObject, StoreCheckHost,
};
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The built component `name` (`plugins/dist/<name>.wasm`).
pub fn plugin(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/dist")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run plugins/build.sh first (it builds every check into plugins/dist)",
        path.display()
    );
    path
}

/// A runtime whose compile cache outlives the test run, so the slow first
/// compile (the Python check takes seconds) is paid once per target dir.
pub fn runtime() -> PluginRuntime {
    PluginRuntime::new(cache_dir()).expect("runtime starts")
}

/// [`runtime`] looking names up with `resolver`.
pub fn runtime_resolving(resolver: Arc<dyn Resolver>) -> PluginRuntime {
    PluginRuntime::with_config(RuntimeConfig {
        resolver,
        ..RuntimeConfig::new(cache_dir())
    })
    .expect("runtime starts")
}

fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache")
}

/// A validated `[[check]]` of the built plugin `name` in `phase`, as a job
/// file with only `plugin` and `phase` would give it.
pub fn check_of(name: &str, phase: Phase) -> Check {
    Check {
        plugin: plugin(name),
        name: name.to_owned(),
        phase,
        config: BTreeMap::new(),
        on_error: OnError::Fail,
        allow_hosts: AllowedHosts::default(),
        max_wait: Duration::ZERO,
        limits: CheckLimits::default(),
    }
}

pub fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn end(name: &str, role: EndRole) -> CheckEnd {
    CheckEnd {
        name: name.to_owned(),
        uri: format!("http://{name}:19530"),
        role,
    }
}

/// A restore onto `prod-a` replicating to `prod-b` and `prod-c`, two batches.
pub fn context(phase: Phase) -> CheckContext {
    CheckContext {
        restore_id: "r-42".into(),
        backup_name: "nightly".into(),
        phase,
        target: end("prod-a", EndRole::Target),
        secondaries: vec![
            end("prod-b", EndRole::Secondary),
            end("prod-c", EndRole::Secondary),
        ],
        collections: Vec::new(),
        jobs: (0..2)
            .map(|batch| CheckImportJob {
                id: String::new(),
                batch,
                collection: "orders".into(),
                partition: "_default".into(),
                states: Vec::new(),
            })
            .collect(),
    }
}

/// A host with no storage at all.
pub fn no_storage() -> Arc<dyn CheckHost> {
    Arc::new(StoreCheckHost::new(BTreeMap::new(), Default::default()))
}

/// One local object store per end, in a temp dir that lives as long as this.
pub struct LocalEnds {
    _dir: tempfile::TempDir,
    pub stores: BTreeMap<String, Arc<dyn ObjectStore>>,
}

impl LocalEnds {
    pub fn new(names: &[&str]) -> LocalEnds {
        let dir = tempfile::tempdir().expect("temp dir");
        let stores = names
            .iter()
            .map(|name| {
                let root = dir.path().join(name);
                std::fs::create_dir_all(&root).expect("end dir");
                let store: Arc<dyn ObjectStore> =
                    Arc::new(LocalFileSystem::new_with_prefix(&root).expect("local store"));
                ((*name).to_owned(), store)
            })
            .collect();
        LocalEnds { _dir: dir, stores }
    }

    pub async fn put(&self, end: &str, path: &str, bytes: &'static [u8]) {
        self.stores[end]
            .put(&ObjectPath::from(path), PutPayload::from_static(bytes))
            .await
            .expect("put");
    }

    pub fn host(&self, staged: Vec<StagedObject>) -> Arc<dyn CheckHost> {
        Arc::new(StoreCheckHost::new(self.stores.clone(), staged.into()))
    }
}

/// A loopback server that counts connections, keeps each request's head and
/// answers each request with `status` and `body` — or never answers when
/// `status` is `None`.
pub struct TestServer {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl TestServer {
    pub async fn start(status: Option<u16>, body: &'static str) -> TestServer {
        TestServer::start_on(([127, 0, 0, 1], 0).into(), status, body).await
    }

    /// The server on `addr` (port 0: any free port).
    pub async fn start_on(addr: SocketAddr, status: Option<u16>, body: &'static str) -> TestServer {
        let listener = TcpListener::bind(addr).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let counter = Arc::clone(&connections);
        let received = Arc::clone(&heads);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let received = Arc::clone(&received);
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    received
                        .lock()
                        .expect("no panics under the lock")
                        .push(String::from_utf8_lossy(&request).to_ascii_lowercase());
                    let Some(status) = status else {
                        // Hold the connection open without answering.
                        std::future::pending::<()>().await;
                        return;
                    };
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                });
            }
        });
        TestServer {
            addr,
            connections,
            heads,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The request line and headers of each request so far, lowercased.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("no panics under the lock").clone()
    }
}

/// A resolver that answers each lookup with the next of `answers` (the last one
/// from then on) and counts the lookups: a name whose address changes.
#[derive(Debug)]
pub struct ScriptedResolver {
    answers: Vec<IpAddr>,
    lookups: AtomicUsize,
}

impl ScriptedResolver {
    pub fn new(answers: &[IpAddr]) -> ScriptedResolver {
        assert!(!answers.is_empty(), "a script answers at least once");
        ScriptedResolver {
            answers: answers.to_vec(),
            lookups: AtomicUsize::new(0),
        }
    }

    pub fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }
}

impl Resolver for ScriptedResolver {
    fn lookup<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let turn = self.lookups.fetch_add(1, Ordering::SeqCst);
        let answer = self.answers[turn.min(self.answers.len() - 1)];
        Box::pin(std::future::ready(Ok(vec![answer])))
    }
}
