//! One emulated Milvus cluster: its catalog, import jobs, replication config, CDC streams to its
//! secondaries, injected faults and request log, behind one std `Mutex` that only this module
//! and its children take.
//!
//! The mutex is a std one because no `.await` ever happens while it is held: every operation
//! is a short critical section, and waiting (stage durations, CDC lag, commit replay) happens
//! outside it on watch channels. REST, gRPC, the control API, the management API and the CDC
//! stream all call the methods here, so a rule (the replicating-cluster gate, commit semantics,
//! refusal on a secondary) exists in one place whichever face the request came through. The
//! faces call the cluster; the cluster never calls a face: what the server must do for it (a
//! restart the control API asked for) it asks for with [`Cluster::request_restart`], which the
//! server waits on.
//!
//! What survives a restart is everything in [`State`]: like a Milvus backed by etcd, jobs,
//! collections and the replication config outlive the process; only serving and the job tasks
//! stop, and the tasks resume from the state they were in.
//!
//! Layout: this file holds the state and the cluster's identity, settings and ports; each
//! child is one concern of the same [`Cluster`], an `impl Cluster` over the part of the state
//! it owns: `import` (create, describe, list, commit, abort), `driver` (the task that walks
//! a job through its stages), `ddl` (collections and databases), `replicate` (the
//! replication config and checkpoints), `mirror` (CDC out to secondaries and in from a
//! primary), `rows` (what a query counts and finds), `snapshot` (what the control API
//! shows), `injected` (injected faults and the request log).

mod ddl;
mod driver;
mod import;
mod injected;
mod mirror;
mod replicate;
mod rows;
mod snapshot;

pub use driver::IMPORT_TIMEOUT;
pub use import::{ABORTED_BY_USER, CreateImport, L0_IMPORT_DISABLED};
pub use rows::FoundRow;
pub use snapshot::{ClusterSnapshot, CollectionSnapshot, CompletedImport, FieldSnapshot};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;

use milvus_proto::common::ReplicateConfiguration;
use object_store::ObjectStore;
use tokio::sync::{Notify, oneshot, watch};

use crate::catalog::Catalog;
use crate::cdc::CdcStream;
use crate::faults::Faults;
use crate::fence::Fences;
use crate::jobs::{ImportJob, JobState};
use crate::merr::MilvusError;
use crate::options::{self, ImportSource};
use crate::replication::{self, Role};
use crate::request_log::RequestLog;
use crate::topology::{ClusterSpec, StorageType};
use crate::version::{ImportFace, ServerVersion};

/// Whether the cluster's port answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Up,
    Down,
}

/// Every cluster of one Sim by id: how a CDC edge finds its target.
#[derive(Default)]
pub struct Registry {
    clusters: RwLock<BTreeMap<String, Cluster>>,
}

impl Registry {
    pub fn insert(&self, cluster: Cluster) {
        self.clusters
            .write()
            .expect("registry lock is never poisoned: no panics under it")
            .insert(cluster.id().to_owned(), cluster);
    }

    pub fn get(&self, id: &str) -> Option<Cluster> {
        self.clusters
            .read()
            .expect("registry lock is never poisoned: no panics under it")
            .get(id)
            .cloned()
    }

    pub fn clear(&self) {
        self.clusters
            .write()
            .expect("registry lock is never poisoned: no panics under it")
            .clear();
    }
}

struct JobEntry {
    job: ImportJob,
    /// Tells the job's task and commit replays that the state moved.
    watch: watch::Sender<JobState>,
}

/// Everything a restart keeps.
struct State {
    catalog: Catalog,
    jobs: BTreeMap<i64, JobEntry>,
    /// The ids of each collection's jobs: a count or a list of one collection reads its own
    /// jobs, not each of the end's (40,000 at 10,000 collections, for every poll and count).
    by_collection: HashMap<i64, BTreeSet<i64>>,
    /// (collection id, key) → job id: keys are scoped to the collection.
    idempotency: HashMap<(i64, String), i64>,
    replicate_config: Option<ReplicateConfiguration>,
    faults: Faults,
    requests: RequestLog,
    streams: BTreeMap<String, CdcStream>,
    drivers: HashMap<i64, tokio::task::AbortHandle>,
    /// The pchannels whose replay stopped at a rejected commit fence.
    fences: Fences,
}

impl State {
    /// The jobs of collection `id` (every job when `None`), in id order.
    fn jobs_of(&self, id: Option<i64>) -> Box<dyn Iterator<Item = &ImportJob> + '_> {
        let Some(id) = id else {
            return Box::new(self.jobs.values().map(|e| &e.job));
        };
        let ids = self.by_collection.get(&id).into_iter().flatten();
        Box::new(ids.filter_map(|job| self.jobs.get(job)).map(|e| &e.job))
    }
}

/// Import jobs of one cluster whose files are read at once. Each holds open files while it
/// reads; without a bound, 40,000 imports on each of three clusters in one process ran out
/// of file descriptors. Milvus too reads imports in a bounded number of task slots.
pub const IMPORT_READS: usize = 64;

/// Where a cluster's ports are bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ports {
    pub plain: SocketAddr,
    /// The TLS port, when the spec asks for one.
    pub tls: Option<SocketAddr>,
    /// The management API's port ([`crate::management`]).
    pub management: SocketAddr,
}

/// The server that serves a cluster's ports, as the server started it: how to stop it.
pub(crate) struct Serving {
    pub stop: oneshot::Sender<()>,
    pub task: tokio::task::JoinHandle<()>,
}

struct Shared {
    spec: ClusterSpec,
    version: ServerVersion,
    pchannels: Vec<String>,
    store: Arc<dyn ObjectStore>,
    /// The directory `store` keeps its files in, when it is a local one.
    dir: Option<std::path::PathBuf>,
    /// Kept so a temporary storage directory lives as long as the cluster.
    _temp_dir: Option<tempfile::TempDir>,
    state: Mutex<State>,
    ids: AtomicI64,
    /// Round-robin counter over `pchannels` for the shards of new collections.
    pchannel_cursor: AtomicUsize,
    job_created: Notify,
    /// Jobs whose files are read at once (see [`IMPORT_READS`]).
    import_reads: tokio::sync::Semaphore,
    config_changed: watch::Sender<u64>,
    availability: watch::Sender<Availability>,
    ports: Mutex<Option<Ports>>,
    server: tokio::sync::Mutex<Option<Serving>>,
    /// A restart asked for and not yet begun: how long the port stays down.
    restart: Mutex<Option<Duration>>,
    restart_asked: Notify,
    registry: Weak<Registry>,
    default_lag: Mutex<Duration>,
}

/// A cluster's import store, owned: see [`Source`](crate::import_reader::Source).
pub struct ImportStore {
    pub store: Arc<dyn ObjectStore>,
    pub dir: Option<std::path::PathBuf>,
}

impl ImportStore {
    pub fn source(&self) -> crate::import_reader::Source<'_> {
        crate::import_reader::Source {
            store: self.store.as_ref(),
            dir: self.dir.as_deref(),
        }
    }
}

/// A handle on one cluster; cheap to clone.
#[derive(Clone)]
pub struct Cluster(Arc<Shared>);

impl Cluster {
    pub(crate) fn new(
        spec: ClusterSpec,
        storage: crate::storage::Opened,
        registry: Weak<Registry>,
    ) -> Cluster {
        let first_id = crate::tso::now() as i64;
        let ids = AtomicI64::new(first_id);
        let catalog = Catalog::new(1);
        let requests = RequestLog::new(spec.request_log_capacity);
        Cluster(Arc::new(Shared {
            version: ServerVersion::parse(&spec.version),
            pchannels: spec.pchannel_names(),
            spec,
            store: storage.store,
            dir: storage.dir,
            _temp_dir: storage.temp_dir,
            state: Mutex::new(State {
                catalog,
                jobs: BTreeMap::new(),
                by_collection: HashMap::new(),
                idempotency: HashMap::new(),
                replicate_config: None,
                faults: Faults::default(),
                requests,
                streams: BTreeMap::new(),
                drivers: HashMap::new(),
                fences: Fences::default(),
            }),
            ids,
            pchannel_cursor: AtomicUsize::new(0),
            job_created: Notify::new(),
            import_reads: tokio::sync::Semaphore::new(IMPORT_READS),
            config_changed: watch::channel(0).0,
            availability: watch::channel(Availability::Down).0,
            ports: Mutex::new(None),
            server: tokio::sync::Mutex::new(None),
            restart: Mutex::new(None),
            restart_asked: Notify::new(),
            registry,
            default_lag: Mutex::new(Duration::ZERO),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0
            .state
            .lock()
            .expect("cluster state lock is never poisoned: nothing panics while holding it")
    }

    pub fn id(&self) -> &str {
        &self.0.spec.id
    }

    pub fn spec(&self) -> &ClusterSpec {
        &self.0.spec
    }

    pub fn version(&self) -> &str {
        &self.0.spec.version
    }

    /// The build it reports (GetVersion, Connect, the management API): its `build`, else its
    /// version, as a release build reports its tag.
    pub fn build(&self) -> &str {
        self.0.spec.build.as_deref().unwrap_or(&self.0.spec.version)
    }

    /// Its TSO now: the clock AllocTimestamp answers from and commits are stamped with,
    /// `clock_offset` from the host's.
    pub fn clock(&self) -> u64 {
        crate::tso::now_shifted(self.0.spec.clock_offset)
    }

    /// `dataCoord.import.taskRetention`, as set or as the version has it.
    pub fn task_retention(&self) -> Duration {
        self.0
            .spec
            .task_retention
            .unwrap_or_else(|| self.0.version.default_task_retention())
    }

    /// `dataCoord.import.enableL0Import`, as set or as the version has it.
    pub fn l0_import_enabled(&self) -> bool {
        self.0
            .spec
            .enable_l0_import
            .unwrap_or(self.import_face() != ImportFace::TwoPhase)
    }

    /// The import API its version serves.
    pub fn import_face(&self) -> ImportFace {
        self.0.version.import_face()
    }

    pub fn pchannels(&self) -> &[String] {
        &self.0.pchannels
    }

    /// The cluster's own object storage.
    pub fn store(&self) -> Arc<dyn ObjectStore> {
        self.0.store.clone()
    }

    /// Where its imports read from: its store, or under local storage the filesystem from
    /// its root, where Milvus's local chunk manager resolves a path.
    pub fn import_store(&self) -> ImportStore {
        match self.0.spec.storage_type {
            StorageType::Minio => ImportStore {
                store: self.store(),
                dir: self.0.dir.clone(),
            },
            StorageType::Local => ImportStore {
                store: Arc::new(object_store::local::LocalFileSystem::new()),
                dir: Some("/".into()),
            },
        }
    }

    /// Where the cluster keeps what job `job_id` imported, in its import store: in its own
    /// storage (under local storage, its own directory seen from the root; a relative path
    /// there would land in the host's `/`).
    pub fn kept_dir(&self, job_id: i64) -> String {
        let own = match (self.0.spec.storage_type, &self.0.dir) {
            (StorageType::Local, Some(dir)) => format!("{}/", dir.display()),
            _ => String::new(),
        };
        format!("{}sim-imported/{job_id}", own.trim_start_matches('/'))
    }

    /// Where its ports are bound.
    ///
    /// # Panics
    /// Before the server bound them: a cluster is bound before its handle is handed out.
    pub(crate) fn ports(&self) -> Ports {
        self.0
            .ports
            .lock()
            .expect("ports lock is never poisoned")
            .expect("a cluster is bound before its handle is handed out")
    }

    /// Records where the server bound its ports.
    pub(crate) fn bound(&self, ports: Ports) {
        *self.0.ports.lock().expect("ports lock is never poisoned") = Some(ports);
    }

    pub fn addr(&self) -> SocketAddr {
        self.ports().plain
    }

    /// `http://127.0.0.1:PORT`: gRPC, REST and the control API all answer there.
    pub fn uri(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// `https://127.0.0.1:PORT` of the TLS port, when the cluster has one.
    pub fn tls_uri(&self) -> Option<String> {
        let ports = *self.0.ports.lock().expect("ports lock is never poisoned");
        ports.and_then(|p| p.tls).map(|a| format!("https://{a}"))
    }

    /// `http://127.0.0.1:PORT` of the management API (Milvus's metrics port).
    pub fn management_uri(&self) -> String {
        format!("http://{}", self.ports().management)
    }

    /// Fresh int64 id, Milvus-like (physical ms << 18 | logical): about 18 decimal digits.
    pub fn next_id(&self) -> i64 {
        let now = crate::tso::now() as i64;
        let mut prev = self.0.ids.load(Ordering::Relaxed);
        loop {
            let next = now.max(prev + 1);
            match self
                .0
                .ids
                .compare_exchange(prev, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(actual) => prev = actual,
            }
        }
    }

    pub fn availability(&self) -> Availability {
        *self.0.availability.borrow()
    }

    /// Waits until the cluster serves (returns at once when it does).
    pub async fn wait_serving(&self) {
        let mut rx = self.0.availability.subscribe();
        // The sender lives in `Shared`, which this handle keeps alive.
        let _ = rx.wait_for(|a| *a == Availability::Up).await;
    }

    /// The server serves the cluster: its ports answer.
    pub(crate) async fn serving_started(&self, serving: Serving) {
        *self.0.server.lock().await = Some(serving);
        self.0.availability.send_replace(Availability::Up);
    }

    /// The ports stop answering; the server that served them, to stop, if one did.
    pub(crate) async fn serving_stopped(&self) -> Option<Serving> {
        self.0.availability.send_replace(Availability::Down);
        self.0.server.lock().await.take()
    }

    /// Asks the server to restart the cluster, its port down for `down_for` (the control
    /// API's restart): the request returns at once, so its answer goes out before the port
    /// closes. A second request before the restart begins replaces the first.
    pub fn request_restart(&self, down_for: Duration) {
        *self
            .0
            .restart
            .lock()
            .expect("restart lock is never poisoned") = Some(down_for);
        self.0.restart_asked.notify_one();
    }

    /// Waits for a restart request and takes it: how long the port is to stay down.
    pub(crate) async fn restart_requested(&self) -> Duration {
        loop {
            self.0.restart_asked.notified().await;
            let asked = self
                .0
                .restart
                .lock()
                .expect("restart lock is never poisoned")
                .take();
            if let Some(down_for) = asked {
                return down_for;
            }
        }
    }

    /// Whether `id` names another cluster of this sim.
    pub(crate) fn has_peer(&self, id: &str) -> bool {
        id != self.id()
            && self
                .0
                .registry
                .upgrade()
                .is_some_and(|r| r.get(id).is_some())
    }

    pub fn role(&self) -> Role {
        replication::role_of(self.lock().replicate_config.as_ref(), self.id())
    }

    /// Whether an import with `options` needs the cluster-level `ImportBinlog` privilege:
    /// a binlog or L0 import, on a cluster that wants it.
    pub fn requires_import_binlog(&self, options: &BTreeMap<String, String>) -> bool {
        self.0.spec.import_binlog_privilege
            && options::import_source(options) != ImportSource::RowFiles
    }

    /// Who may call, with what privileges.
    pub fn access(&self) -> crate::rbac::Access {
        crate::rbac::Access {
            token: self.0.spec.token.clone(),
            users: self.0.spec.users.clone(),
        }
    }

    /// A write broadcast from a standby fails with Milvus's `ErrNotPrimary`.
    fn refuse_on_secondary(&self, state: &State) -> Result<(), MilvusError> {
        match replication::role_of(state.replicate_config.as_ref(), self.id()) {
            Role::Secondary { .. } => Err(MilvusError::not_primary()),
            Role::Primary { .. } | Role::Standalone => Ok(()),
        }
    }
}
