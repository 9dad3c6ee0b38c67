//! One emulated Milvus cluster: its catalog, import jobs, replication config, CDC streams to its
//! secondaries, injected faults and request log, behind one std `Mutex`.
//!
//! The mutex is a std one because no `.await` ever happens while it is held: every operation
//! is a short critical section, and waiting (stage durations, CDC lag, commit replay) happens
//! outside it on watch channels. REST, gRPC, the control API and the CDC stream all call the
//! methods here, so a rule (the replicating-cluster gate, commit semantics, refusal on a
//! secondary) exists in one place whichever face the request came through.
//!
//! What survives a restart is everything in [`State`]: like a Milvus backed by etcd, jobs,
//! collections and the replication config outlive the process; only serving and the job tasks
//! stop, and the tasks resume from the state they were in.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;

use milvus_proto::common::{ReplicateCheckpoint, ReplicateConfiguration};
use object_store::ObjectStore;
use tokio::sync::{Notify, watch};

use crate::Protocol;
use crate::catalog::{Catalog, DdlOp, DdlOutcome, NewCollection};
use crate::cdc::{CdcMessage, CdcStream, Deliver, Flow, MirrorImport, StreamSnapshot};
use crate::control::{
    ClusterSnapshot, CollectionSnapshot, CompletedImport, FieldSnapshot, RequestRecord,
};
use crate::faults::{ApiEffect, Faults};
use crate::fence::{self, Fence, Fences};
use crate::jobs::{ImportJob, JobOrigin, JobState, Row, Stamp};
use crate::merr::MilvusError;
use crate::options::{self, CommitMode, ImportSource};
use crate::replication::{self, Role};
use crate::request_log::RequestLog;
use crate::topology::ClusterSpec;
use crate::topology::StorageType;
use crate::version::{ImportFace, ServerVersion};
use milvus_formats::binlog::{self, Delete, Pk};

/// Reason a rollback gives a job (Milvus's `import_job.go`, docs/milvus-facts.md §2.3).
pub const ABORTED_BY_USER: &str = "aborted by user";
/// Why an L0 import is refused, or a replicated one created Failed, with
/// `dataCoord.import.enableL0Import` off (Milvus 3.0's default, `services.go`).
pub const L0_IMPORT_DISABLED: &str = "l0 import is disabled (dataCoord.import.enableL0Import=false); fold L0 deletes into data segment deltalogs before restore, or set the config to true to re-enable the legacy L0 import";
/// Reason of a job past its `timeout` option (Milvus's `tryTimeoutJob`).
pub const IMPORT_TIMEOUT: &str = "import timeout";
/// Milvus's `streaming.idempotency.maxKeyLength`.
const MAX_IDEMPOTENCY_KEY_LEN: usize = 256;
/// How long a secondary waits for a config it was sent directly to arrive through CDC.
/// [infer]: Milvus's docs say only that it waits; a bound keeps a client from hanging forever.
const CONFIG_ARRIVAL_WAIT: Duration = Duration::from_secs(10);

/// What an UpdateReplicateConfiguration call still has to do after the synchronous part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigStep {
    Done,
    AwaitReplication,
}

/// Whether the cluster's port answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Up,
    Down,
}

/// A create request from either face, after the face's own parsing.
#[derive(Debug, Clone)]
pub struct CreateImport {
    pub db_name: String,
    pub collection_name: String,
    pub partition_name: String,
    pub files: Vec<Vec<String>>,
    pub options: BTreeMap<String, String>,
    pub idempotency_key: Option<String>,
    pub protocol: Protocol,
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

pub(crate) struct JobEntry {
    pub job: ImportJob,
    /// Tells the job's task and commit replays that the state moved.
    pub watch: watch::Sender<JobState>,
}

/// Everything a restart keeps.
pub(crate) struct State {
    pub catalog: Catalog,
    pub jobs: BTreeMap<i64, JobEntry>,
    /// The ids of each collection's jobs: a count or a list of one collection reads its own
    /// jobs, not each of the end's (40,000 at 10,000 collections, for every poll and count).
    pub by_collection: HashMap<i64, std::collections::BTreeSet<i64>>,
    /// (collection id, key) → job id: keys are scoped to the collection.
    pub idempotency: HashMap<(i64, String), i64>,
    pub replicate_config: Option<ReplicateConfiguration>,
    pub faults: Faults,
    pub requests: RequestLog,
    pub streams: BTreeMap<String, CdcStream>,
    pub drivers: HashMap<i64, tokio::task::AbortHandle>,
    /// The pchannels whose replay stopped at a rejected commit fence.
    pub fences: Fences,
}

/// Import jobs of one cluster whose files are read at once. Each holds open files while it
/// reads; without a bound, 40,000 imports on each of three clusters in one process ran out
/// of file descriptors. Milvus too reads imports in a bounded number of task slots.
pub const IMPORT_READS: usize = 64;

pub(crate) struct Shared {
    pub spec: ClusterSpec,
    pub version: ServerVersion,
    pub pchannels: Vec<String>,
    pub store: Arc<dyn ObjectStore>,
    /// The directory `store` keeps its files in, when it is a local one.
    pub dir: Option<std::path::PathBuf>,
    /// Kept so a temporary storage directory lives as long as the cluster.
    pub _temp_dir: Option<tempfile::TempDir>,
    pub state: Mutex<State>,
    ids: AtomicI64,
    /// Round-robin counter over `pchannels` for the shards of new collections.
    pchannel_cursor: AtomicUsize,
    job_created: Notify,
    /// Jobs whose files are read at once (see [`IMPORT_READS`]).
    pub import_reads: tokio::sync::Semaphore,
    config_changed: watch::Sender<u64>,
    pub availability: watch::Sender<Availability>,
    pub addr: Mutex<Option<SocketAddr>>,
    /// The TLS port's address, when the spec asks for one.
    pub tls_addr: Mutex<Option<SocketAddr>>,
    /// The management API's port ([`crate::management`]).
    pub management_addr: Mutex<Option<SocketAddr>>,
    pub registry: Weak<Registry>,
    pub default_lag: Mutex<Duration>,
    pub server: tokio::sync::Mutex<Option<crate::server::Serving>>,
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
pub struct Cluster(pub(crate) Arc<Shared>);

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
            addr: Mutex::new(None),
            tls_addr: Mutex::new(None),
            management_addr: Mutex::new(None),
            registry,
            default_lag: Mutex::new(Duration::ZERO),
            server: tokio::sync::Mutex::new(None),
        }))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
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

    pub fn addr(&self) -> SocketAddr {
        self.0
            .addr
            .lock()
            .expect("addr lock is never poisoned")
            .expect("a cluster is bound before its handle is handed out")
    }

    /// `http://127.0.0.1:PORT`: gRPC, REST and the control API all answer there.
    pub fn uri(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// `https://127.0.0.1:PORT` of the TLS port, when the cluster has one.
    pub fn tls_uri(&self) -> Option<String> {
        let addr = *self.0.tls_addr.lock().expect("addr lock is never poisoned");
        addr.map(|a| format!("https://{a}"))
    }

    /// `http://127.0.0.1:PORT` of the management API (Milvus's metrics port).
    pub fn management_uri(&self) -> String {
        let addr = self
            .0
            .management_addr
            .lock()
            .expect("addr lock is never poisoned")
            .expect("a cluster is bound before its handle is handed out");
        format!("http://{addr}")
    }

    /// A control-API client for this cluster.
    pub fn control(&self) -> crate::control::SimControl {
        crate::control::SimControl::new(self.uri())
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

    pub fn role(&self) -> Role {
        replication::role_of(self.lock().replicate_config.as_ref(), self.id())
    }

    // ------------------------------------------------------------------ request log, auth, faults

    pub fn record_request(
        &self,
        protocol: Protocol,
        route: &str,
        job_id: Option<i64>,
        code: Option<i32>,
        fault: Option<ApiEffect>,
    ) {
        self.log_request(RequestRecord::new(protocol, route, job_id, code, fault));
    }

    /// Logs `record` as it stands (one about a collection names it).
    pub fn log_request(&self, record: RequestRecord) {
        self.lock().requests.push(record);
    }

    /// The injected effect for a request arriving now on `protocol`.
    pub fn api_effect(&self, protocol: Protocol) -> Option<ApiEffect> {
        self.lock().faults.api_effect(protocol)
    }

    /// Whether the presented credential opens this cluster: always when it has no token.
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

    // ------------------------------------------------------------------ imports

    /// REST create / gRPC Import on this cluster (docs/milvus-facts.md §1, §2.1).
    pub fn create_import(&self, req: CreateImport) -> Result<i64, MilvusError> {
        let mut state = self.lock();
        let collection = state
            .catalog
            .collection(&req.db_name, &req.collection_name)?;
        let (collection_id, db_name) = (collection.id, collection.db_name.clone());
        collection
            .check_import_partition(&req.partition_name, options::import_source(&req.options))?;
        if req.files.is_empty() {
            return Err(MilvusError::import_failed("import request is empty"));
        }
        let mut parsed = options::parse(&req.options, &req.partition_name)?;
        if parsed.source == ImportSource::L0Deltas && !self.l0_import_enabled() {
            return Err(MilvusError::import_failed(L0_IMPORT_DISABLED));
        }
        // Before 3.0 `auto_commit` is an option Milvus does not know: every job commits
        // itself.
        if self.import_face() != ImportFace::TwoPhase {
            parsed.commit = CommitMode::Auto;
        }
        let key = self.idempotency_key(req.idempotency_key.as_deref())?;
        // The job a known key names; looked up before admission, or after it when the
        // cluster follows milvus#53228 (docs/milvus-facts.md §1.6).
        let known = |state: &State| {
            let key = key.clone()?;
            state.idempotency.get(&(collection_id, key)).copied()
        };
        let after_admission = self.0.spec.admission_before_idempotency;
        if let Some(existing) = known(&state).filter(|_| !after_admission) {
            return Ok(existing);
        }
        // Only as many jobs as the limit can hold that many active ones: counting them at
        // every create made a restore of 40,000 jobs quadratic.
        let limit = self.0.spec.max_import_job_num;
        let at_limit = state.jobs.len() >= limit
            && state
                .jobs
                .values()
                .filter(|e| e.job.state.is_active())
                .count()
                >= limit;
        if at_limit {
            return Err(MilvusError::import_sys_failed(
                "The number of jobs has reached the limit, please try again later. If your request is set to only import a single file, please consider importing multiple files in one request for better efficiency.",
            ));
        }
        // Milvus validates the job limit, then the replication gate, then broadcasts; a
        // standby's broadcast is what fails.
        if replication::is_replicating(state.replicate_config.as_ref()) {
            let gate = if !self.0.spec.import_in_replicating_cluster {
                Some("import in replicating cluster is not supported yet")
            } else if parsed.commit == CommitMode::Auto {
                Some("auto_commit=true import in replicating cluster is not supported")
            } else {
                None
            };
            if let Some(msg) = gate {
                let inner = MilvusError::operation_not_supported(msg);
                return Err(MilvusError::new(
                    inner.code,
                    format!("failed to validate import request: {}", inner.message),
                ));
            }
        }
        self.refuse_on_secondary(&state).map_err(|e| {
            MilvusError::new(
                e.code,
                format!(
                    "failed to broadcast import: failed to start broadcast with collection id: {}",
                    e.message
                ),
            )
        })?;
        if let Some(existing) = known(&state) {
            return Ok(existing);
        }
        let job_id = self.next_id();
        let mirror = MirrorImport {
            job_id,
            db_name,
            collection_name: req.collection_name,
            collection_id,
            partition_name: req.partition_name,
            files: req.files,
            options: req.options,
        };
        if let Some(key) = &key {
            state
                .idempotency
                .insert((collection_id, key.clone()), job_id);
        }
        self.insert_job(
            &mut state,
            &mirror,
            parsed,
            JobOrigin::Client {
                protocol: req.protocol,
            },
            key,
        );
        self.broadcast(&mut state, CdcMessage::Import(mirror));
        drop(state);
        crate::executor::spawn_driver(self, job_id);
        Ok(job_id)
    }

    /// The `Idempotency-Key` of a create, checked as the proxy checks it; None when the
    /// version ignores the header or none was sent.
    fn idempotency_key(&self, key: Option<&str>) -> Result<Option<String>, MilvusError> {
        let Some(key) = key.filter(|k| !k.is_empty()) else {
            return Ok(None);
        };
        if !self.0.version.honours_idempotency_key() {
            return Ok(None);
        }
        if key.len() > MAX_IDEMPOTENCY_KEY_LEN || !key.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(MilvusError::parameter_invalid(
                "idempotency key of printable ASCII, at most 256 bytes",
                format!("{} bytes", key.len()),
            ));
        }
        Ok(Some(key.to_owned()))
    }

    fn insert_job(
        &self,
        state: &mut State,
        spec: &MirrorImport,
        parsed: options::ImportOptions,
        origin: JobOrigin,
        idempotency_key: Option<String>,
    ) {
        let created = Stamp::now();
        let timeout_at = parsed.timeout.map(|t| tokio::time::Instant::now() + t);
        let deadline = parsed.timeout.map(|t| {
            let at = created.rfc3339 + t;
            Stamp {
                rfc3339: at,
                unix_ms: at.as_millisecond(),
            }
        });
        let mut job = ImportJob {
            job_id: spec.job_id,
            db_name: spec.db_name.clone(),
            collection_name: spec.collection_name.clone(),
            collection_id: spec.collection_id,
            partition_name: spec.partition_name.clone(),
            files: spec.files.clone(),
            options: spec.options.clone(),
            parsed_options: parsed,
            origin,
            idempotency_key,
            state: JobState::Pending,
            reason: String::new(),
            history: Vec::new(),
            created,
            completed: None,
            deadline,
            total_rows: 0,
            imported_rows: 0,
            deleted_rows: 0,
            groups: Vec::new(),
            manifest: Vec::new(),
            data: Default::default(),
            state_entered_ms: created.unix_ms,
            timeout_at,
        };
        job.enter(JobState::Pending);
        state.faults.bind_next(spec.job_id);
        (state.by_collection.entry(job.collection_id).or_default()).insert(spec.job_id);
        state.jobs.insert(
            spec.job_id,
            JobEntry {
                job,
                watch: watch::channel(JobState::Pending).0,
            },
        );
        self.0.job_created.notify_waiters();
    }

    /// A copy of a job.
    pub fn job(&self, job_id: i64) -> Option<ImportJob> {
        self.lock().jobs.get(&job_id).map(|e| e.job.clone())
    }

    /// describe / get_progress: the job under a string id (docs/milvus-facts.md §1.3).
    pub fn describe_import(&self, raw_id: &str) -> Result<ImportJob, MilvusError> {
        let job_id: i64 = raw_id.parse().map_err(|_| {
            MilvusError::new(
                crate::merr::code::PARAMETER_INVALID,
                format!(
                    "parse job id failed: strconv.ParseInt: parsing \"{raw_id}\": invalid syntax"
                ),
            )
        })?;
        self.job(job_id)
            .filter(|j| self.retained(j))
            .ok_or_else(|| job_not_found(job_id))
    }

    /// Whether a job is still known to clients: a finished one is forgotten
    /// `dataCoord.import.taskRetention` after it finished (the sim's own record keeps it).
    fn retained(&self, job: &ImportJob) -> bool {
        let retention = self.task_retention();
        job.completed
            .is_none_or(|done| Stamp::now().unix_ms - done.unix_ms <= retention.as_millis() as i64)
    }

    /// list: what `row` makes of every job, optionally of one collection of a database.
    /// `row` runs under the state's lock (it must not take it): a whole job is not cloned
    /// for the few fields a list shows (with 40,000 jobs on an end, each poll of a whole-end
    /// list cloned every one, with its files, options, history and manifest).
    pub fn list_imports<T>(
        &self,
        db: &str,
        collection: Option<&str>,
        row: impl FnMut(&ImportJob) -> T,
    ) -> Result<Vec<T>, MilvusError> {
        let state = self.lock();
        let collection_id = match collection {
            Some(name) if !name.is_empty() => Some(state.catalog.collection(db, name)?.id),
            _ => None,
        };
        Ok(jobs_of(&state, collection_id)
            .filter(|job| self.retained(job))
            .map(row)
            .collect())
    }

    /// How far into its current stage a job is, for progress interpolation.
    pub fn stage_fraction(&self, job: &ImportJob) -> f64 {
        let d = &self.0.spec.durations;
        let stage = match job.state {
            JobState::Pending => d.pending,
            JobState::PreImporting => d.preimport,
            JobState::Importing => d.importing,
            JobState::Sorting => d.sorting,
            JobState::IndexBuilding => d.index_building,
            _ => return 0.0,
        };
        if stage.is_zero() {
            return 0.0;
        }
        let elapsed_ms = (Stamp::now().unix_ms - job.state_entered_ms).max(0) as f64;
        elapsed_ms / stage.as_millis() as f64
    }

    fn parse_job_id(raw: &str) -> Result<i64, MilvusError> {
        raw.parse()
            .map_err(|_| MilvusError::parameter_invalid("int64 jobId", raw))
    }

    /// REST commit, its checks in Milvus 3.0's order (docs/milvus-facts.md §2.3): the job must
    /// exist (2101); Committing or Completed is a no-op, anything but Uncommitted is refused
    /// (2100); then an auto-commit job is refused; and only the broadcast, last, fails on a
    /// standby, so a standby answers for its mirror's state first.
    pub fn commit_import(&self, raw_id: &str) -> Result<i64, MilvusError> {
        let job_id = Self::parse_job_id(raw_id)?;
        let mut state = self.lock();
        let entry = state
            .jobs
            .get(&job_id)
            .filter(|e| self.retained(&e.job))
            .ok_or_else(|| MilvusError::import_sys_failed(format!("job {job_id} not found")))?;
        match entry.job.state {
            JobState::Committing | JobState::Completed => return Ok(job_id),
            JobState::Uncommitted => {}
            other => {
                return Err(MilvusError::import_failed(format!(
                    "job {job_id} is in state {}, expected Uncommitted",
                    other.name()
                )));
            }
        }
        if entry.job.commit_mode() == CommitMode::Auto {
            return Err(manual_not_allowed(job_id));
        }
        self.refuse_on_secondary(&state)?;
        let commit_ts = self.clock();
        self.enter_committing(&mut state, job_id, commit_ts, None);
        self.broadcast(&mut state, CdcMessage::CommitImport { job_id, commit_ts });
        Ok(job_id)
    }

    /// A commit stamped `commit_ts` reaching job `job_id`: the job is Committing. A commit the
    /// fence rejects ([`fence::rejected`]) also stops the pchannels of the job's collection,
    /// and a secondary's replication `checkpoint` with them (docs/milvus-facts.md §2.7).
    fn enter_committing(
        &self,
        state: &mut State,
        job_id: i64,
        commit_ts: u64,
        checkpoint: Option<u64>,
    ) {
        let Some(entry) = state.jobs.get_mut(&job_id) else {
            return;
        };
        set_state(entry, JobState::Committing);
        let Some(max_row_ts) = fence::rejected(&entry.job, commit_ts)
            .filter(|_| self.0.spec.stale_commit_blocks_channel)
        else {
            return;
        };
        let collection_id = entry.job.collection_id;
        let Some(collection) = state.catalog.collection_by_id(collection_id) else {
            return;
        };
        tracing::warn!(
            cluster = self.id(),
            job_id,
            commit_ts,
            max_row_ts,
            pchannels = ?collection.physical_channels,
            "commit timestamp is below the binlogs' newest row timestamp: the commit fence is rejected and retried without end"
        );
        let pchannels = collection.physical_channels.clone();
        let fence = Fence {
            pchannel: String::new(),
            job_id,
            commit_ts,
            max_row_ts,
            checkpoint,
        };
        state.fences.raise(&pchannels, &fence);
    }

    /// Whether job `job_id`'s commit cannot complete: a pchannel of its collection stopped at
    /// a rejected commit fence (its own, or an earlier job's).
    pub(crate) fn commit_blocked(&self, job_id: i64) -> bool {
        let state = self.lock();
        let Some(entry) = state.jobs.get(&job_id) else {
            return false;
        };
        let collection = state.catalog.collection_by_id(entry.job.collection_id);
        collection.is_some_and(|c| state.fences.blocks(&c.physical_channels))
    }

    /// REST abort (docs/milvus-facts.md §2.3): a job already aborted by the user is a no-op; a
    /// committing or completed one is refused; any other state, a job that failed on its own
    /// included, is rolled back everywhere (it keeps its own reason here), after the
    /// auto-commit guard and, on a standby, the refusal of the broadcast.
    pub fn abort_import(&self, raw_id: &str) -> Result<i64, MilvusError> {
        let job_id = Self::parse_job_id(raw_id)?;
        let mut state = self.lock();
        let entry = state
            .jobs
            .get(&job_id)
            .filter(|e| self.retained(&e.job))
            .ok_or_else(|| MilvusError::import_sys_failed(format!("job {job_id} not found")))?;
        match entry.job.state {
            JobState::Failed if entry.job.reason == ABORTED_BY_USER => return Ok(job_id),
            s @ (JobState::Committing | JobState::Completed) => {
                return Err(MilvusError::import_failed(format!(
                    "job {job_id} is in terminal/committed state {}, abort not allowed",
                    s.name()
                )));
            }
            _ => {}
        }
        if entry.job.commit_mode() == CommitMode::Auto {
            return Err(manual_not_allowed(job_id));
        }
        self.refuse_on_secondary(&state)?;
        if let Some(entry) = state.jobs.get_mut(&job_id)
            && entry.job.state != JobState::Failed
        {
            entry.job.fail(ABORTED_BY_USER);
            entry.watch.send_replace(JobState::Failed);
        }
        self.broadcast(&mut state, CdcMessage::RollbackImport { job_id });
        Ok(job_id)
    }

    /// Subscribes to a job's state.
    pub(crate) fn job_watch(&self, job_id: i64) -> Option<watch::Receiver<JobState>> {
        self.lock().jobs.get(&job_id).map(|e| e.watch.subscribe())
    }

    /// Runs `f` on a job still in state `from`; a job that moved meanwhile is left alone.
    pub(crate) fn update_job_in<R>(
        &self,
        job_id: i64,
        from: JobState,
        f: impl FnOnce(&mut ImportJob) -> R,
    ) -> Option<R> {
        let mut state = self.lock();
        let entry = state.jobs.get_mut(&job_id)?;
        if entry.job.state != from {
            return None;
        }
        let result = f(&mut entry.job);
        if entry.job.state != from {
            entry.watch.send_replace(entry.job.state);
        }
        Some(result)
    }

    /// The rows an injected short import takes from `job_id`, consumed.
    pub(crate) fn take_short_import(&self, job_id: i64) -> Option<i64> {
        self.lock().faults.take_short_import(job_id)
    }

    /// Whether an injected drift applies to a job that can drift so, consumed.
    pub(crate) fn take_drift(&self, drift: crate::faults::Drift) -> bool {
        self.lock().faults.take_drift(drift)
    }

    /// The injected failure for a job arriving in `state`, consumed.
    pub(crate) fn take_job_failure(&self, job_id: i64, state: JobState) -> Option<String> {
        self.lock().faults.take_job_failure(job_id, state)
    }

    // ------------------------------------------------------------------ DDL

    /// CreateCollection from a client: checked, ids and shard pchannels decided, applied and
    /// replicated.
    pub fn create_collection(&self, request: NewCollection) -> Result<DdlOutcome, MilvusError> {
        let op = request.into_op(
            self.0.version.preserves_field_ids(),
            self.0.pchannels.len(),
            || self.next_id(),
            || self.0.pchannel_cursor.fetch_add(1, Ordering::Relaxed),
        )?;
        self.execute_ddl(op)
    }

    /// Applies a client's DDL (ids already allocated) and replicates it when it changed
    /// anything; refused on a secondary, where DDL only arrives through the stream.
    pub fn execute_ddl(&self, op: DdlOp) -> Result<DdlOutcome, MilvusError> {
        let mut state = self.lock();
        self.refuse_on_secondary(&state)?;
        self.refuse_schema_ddl_while_importing(&state, &op)?;
        let outcome = self.apply_ddl(&mut state, &op)?;
        if outcome != DdlOutcome::AlreadyThere {
            self.broadcast(&mut state, CdcMessage::Ddl(op));
        }
        Ok(outcome)
    }

    /// With `import_blocks_schema_ddl` (milvus#53071), DDL changing the schema of a collection
    /// with an unfinished import job, Uncommitted included, is refused with code 112 before it
    /// is applied or broadcast (docs/milvus-facts.md §2.8). Only a client's DDL is checked: a
    /// secondary applies what its primary already let through.
    fn refuse_schema_ddl_while_importing(
        &self,
        state: &State,
        op: &DdlOp,
    ) -> Result<(), MilvusError> {
        let Some((db, name)) = op.changes_schema_of() else {
            return Ok(());
        };
        if !self.0.spec.import_blocks_schema_ddl {
            return Ok(());
        }
        let id = state.catalog.collection(db, name)?.id;
        match jobs_of(state, Some(id)).find(|j| j.state.is_active()) {
            Some(job) => Err(MilvusError::collection_ddl_import_conflict(
                name,
                job.job_id,
                job.state.name(),
            )),
            None => Ok(()),
        }
    }

    /// Applies DDL from a client or the stream; a dropped collection fails its active jobs
    /// with "collection %d dropped", as Milvus's `checkCollection` does.
    fn apply_ddl(&self, state: &mut State, op: &DdlOp) -> Result<DdlOutcome, MilvusError> {
        let outcome = state.catalog.apply(op, &self.0.pchannels)?;
        if let DdlOutcome::DroppedCollection(collection_id) = outcome {
            for entry in state.jobs.values_mut() {
                if entry.job.collection_id == collection_id && entry.job.state.can_fail() {
                    entry
                        .job
                        .fail(format!("collection {collection_id} dropped"));
                    entry.watch.send_replace(JobState::Failed);
                }
            }
        }
        Ok(outcome)
    }

    /// Reads the catalog.
    pub fn with_catalog<R>(&self, f: impl FnOnce(&Catalog) -> R) -> R {
        f(&self.lock().catalog)
    }

    // ------------------------------------------------------------------ replication config

    /// The stored config with tokens blanked, as `GetReplicateConfiguration` answers.
    pub fn replicate_configuration(&self) -> Option<ReplicateConfiguration> {
        self.lock()
            .replicate_config
            .as_ref()
            .map(replication::sanitize)
    }

    /// `GetReplicateInfo` on this cluster: how far its replication from `source` has come on
    /// the source's pchannel `pchannel`, read off the source's stream to this cluster, and held
    /// where it was when the pchannel's replay stopped at a rejected commit fence. `None`
    /// unless this cluster is a secondary of `source` and the pchannel is one of the source's.
    pub fn replicate_checkpoint(
        &self,
        source: &str,
        pchannel: &str,
    ) -> Option<ReplicateCheckpoint> {
        let role = replication::role_of(self.lock().replicate_config.as_ref(), self.id());
        if !matches!(&role, Role::Secondary { primary } if primary == source) {
            return None;
        }
        let primary = self.0.registry.upgrade()?.get(source)?;
        // CDC maps the source's pchannel i to this cluster's pchannel i.
        let index = primary.0.pchannels.iter().position(|p| p == pchannel)?;
        let live = self.stream_checkpoint(source)?;
        let stopped =
            (self.0.pchannels.get(index)).and_then(|own| self.lock().fences.checkpoint(own));
        let time_tick = stopped.map_or(live, |at| at.min(live));
        Some(ReplicateCheckpoint {
            cluster_id: source.to_owned(),
            pchannel: pchannel.to_owned(),
            message_id: None,
            time_tick,
        })
    }

    /// How far the stream from `source` to this cluster has come (see [`CdcStream`]).
    fn stream_checkpoint(&self, source: &str) -> Option<u64> {
        let primary = self.0.registry.upgrade()?.get(source)?;
        let mut state = primary.lock();
        Some(primary.stream(&mut state, self.id()).checkpoint())
    }

    /// `UpdateReplicateConfiguration` (docs/milvus-facts.md §3.1): validated with Milvus's rules;
    /// on the primary the new config also travels to its secondaries over the stream. A cluster
    /// that is a secondary waits for the config to arrive through CDC.
    pub async fn update_replicate_configuration(
        &self,
        incoming: &ReplicateConfiguration,
    ) -> Result<(), MilvusError> {
        let mut changes = self.0.config_changed.subscribe();
        if self.store_unless_secondary(incoming)? == ConfigStep::Done {
            return Ok(());
        }
        let arrived = tokio::time::timeout(CONFIG_ARRIVAL_WAIT, async {
            while changes.changed().await.is_ok() {
                let state = self.lock();
                let stored = state.replicate_config.as_ref();
                if self
                    .validate_config(incoming, stored)
                    .is_ok_and(|v| Some(&v) == stored)
                {
                    return true;
                }
            }
            false
        })
        .await;
        match arrived {
            Ok(true) => Ok(()),
            _ => Err(MilvusError::new(
                crate::merr::code::UNEXPECTED,
                format!(
                    "cluster '{}' is a secondary; the replicate configuration did not arrive through CDC within {CONFIG_ARRIVAL_WAIT:?}",
                    self.id()
                ),
            )),
        }
    }

    /// Validates and stores `incoming`, replicating it from a primary; a secondary must wait
    /// for the config to arrive through CDC instead.
    fn store_unless_secondary(
        &self,
        incoming: &ReplicateConfiguration,
    ) -> Result<ConfigStep, MilvusError> {
        let mut state = self.lock();
        let validated = self.validate_config(incoming, state.replicate_config.as_ref())?;
        if Some(&validated) == state.replicate_config.as_ref() {
            return Ok(ConfigStep::Done);
        }
        if let Role::Secondary { .. } =
            replication::role_of(state.replicate_config.as_ref(), self.id())
        {
            return Ok(ConfigStep::AwaitReplication);
        }
        self.store_config(&mut state, validated.clone());
        self.broadcast(&mut state, CdcMessage::ReplicateConfig(validated));
        Ok(ConfigStep::Done)
    }

    /// Stores a config without the secondary wait: the Sim applies its topology's short form
    /// to every cluster this way at start, as an operator applies it to each cluster.
    pub(crate) fn apply_configuration(
        &self,
        config: &ReplicateConfiguration,
    ) -> Result<(), MilvusError> {
        let mut state = self.lock();
        let validated = self.validate_config(config, state.replicate_config.as_ref())?;
        self.store_config(&mut state, validated);
        Ok(())
    }

    fn store_config(&self, state: &mut State, config: ReplicateConfiguration) {
        state.replicate_config = Some(config);
        self.0.config_changed.send_modify(|n| *n += 1);
    }

    /// [`replication::validate`] with this cluster's id, pchannels and token rule.
    fn validate_config(
        &self,
        incoming: &ReplicateConfiguration,
        stored: Option<&ReplicateConfiguration>,
    ) -> Result<ReplicateConfiguration, MilvusError> {
        let redacted = if self.0.spec.fill_redacted_tokens {
            replication::RedactedTokens::Filled
        } else {
            replication::RedactedTokens::Refused
        };
        replication::validate(incoming, stored, self.id(), &self.0.pchannels, redacted)
    }

    // ------------------------------------------------------------------ CDC

    /// Puts `message` on the stream of every secondary of this cluster (none unless primary).
    fn broadcast(&self, state: &mut State, message: CdcMessage) {
        let Role::Primary { secondaries } =
            replication::role_of(state.replicate_config.as_ref(), self.id())
        else {
            return;
        };
        for target in secondaries {
            self.stream(state, &target).send(message.clone());
        }
    }

    fn stream<'s>(&self, state: &'s mut State, target: &str) -> &'s CdcStream {
        state.streams.entry(target.to_owned()).or_insert_with(|| {
            let lag = *self
                .0
                .default_lag
                .lock()
                .expect("lag lock is never poisoned");
            CdcStream::start(
                target.to_owned(),
                lag,
                self.0.spec.clock_offset,
                self.deliver_to(target.to_owned()),
            )
        })
    }

    fn deliver_to(&self, target: String) -> Deliver {
        let registry = self.0.registry.clone();
        let source = self.id().to_owned();
        Arc::new(move |message| {
            let registry = registry.clone();
            let source = source.clone();
            let target = target.clone();
            Box::pin(async move {
                let Some(cluster) = registry.upgrade().and_then(|r| r.get(&target)) else {
                    tracing::warn!(%source, %target, kind = message.kind(), "cdc target is not a cluster of this sim; message dropped");
                    return;
                };
                // A restarting secondary receives what was sent once it is back, as CDC retries.
                cluster.wait_serving().await;
                cluster.apply_replicated(&source, message);
            })
        })
    }

    /// Sets the lag or flow of the stream to `target`, creating it if no message went yet.
    pub fn configure_stream(
        &self,
        target: &str,
        lag: Option<Duration>,
        flow: Option<Flow>,
    ) -> StreamSnapshot {
        let mut state = self.lock();
        let stream = self.stream(&mut state, target);
        if let Some(lag) = lag {
            stream.set_lag(lag);
        }
        if let Some(flow) = flow {
            stream.set_flow(flow);
        }
        stream.snapshot()
    }

    pub(crate) fn set_default_lag(&self, lag: Duration) {
        *self
            .0
            .default_lag
            .lock()
            .expect("lag lock is never poisoned") = lag;
    }

    /// A secondary applies one replicated message (docs/milvus-facts.md §2.2).
    pub(crate) fn apply_replicated(&self, source: &str, message: CdcMessage) {
        tracing::debug!(
            cluster = self.id(),
            source,
            kind = message.kind(),
            "cdc apply"
        );
        match message {
            CdcMessage::Ddl(op) => {
                let result = self.apply_ddl(&mut self.lock(), &op);
                if let Err(e) = result {
                    tracing::warn!(cluster = self.id(), op = op.name(), error = %e, "replicated DDL failed");
                }
            }
            CdcMessage::Import(spec) => self.apply_mirror_import(source, spec),
            CdcMessage::CommitImport { job_id, commit_ts } => {
                let cluster = self.clone();
                let source = source.to_owned();
                // Retried until the mirror is Uncommitted, without holding up later messages.
                tokio::spawn(
                    async move { cluster.replay_commit(&source, job_id, commit_ts).await },
                );
            }
            CdcMessage::RollbackImport { job_id } => {
                let mut state = self.lock();
                if let Some(entry) = state.jobs.get_mut(&job_id)
                    && entry.job.state.can_fail()
                {
                    entry.job.fail(ABORTED_BY_USER);
                    entry.watch.send_replace(JobState::Failed);
                }
            }
            CdcMessage::ReplicateConfig(config) => {
                let mut state = self.lock();
                match self.validate_config(&config, state.replicate_config.as_ref()) {
                    Ok(validated) => self.store_config(&mut state, validated),
                    Err(e) => {
                        tracing::warn!(cluster = self.id(), error = %e, "replicated config refused")
                    }
                }
            }
        }
    }

    fn apply_mirror_import(&self, source: &str, spec: MirrorImport) {
        let mut state = self.lock();
        if state.jobs.contains_key(&spec.job_id) {
            return;
        }
        if state.catalog.collection_by_id(spec.collection_id).is_none() {
            tracing::info!(
                cluster = self.id(),
                job_id = spec.job_id,
                "collection not found; replicated import skipped"
            );
            return;
        }
        let parsed = options::parse(&spec.options, &spec.partition_name).unwrap_or_default();
        let l0_refused = parsed.source == ImportSource::L0Deltas && !self.l0_import_enabled();
        let origin = JobOrigin::Mirror {
            source: source.to_owned(),
        };
        self.insert_job(&mut state, &spec, parsed, origin, None);
        if l0_refused {
            // The peer's own gate: the job exists, Failed from the start.
            if let Some(entry) = state.jobs.get_mut(&spec.job_id) {
                entry.job.fail(L0_IMPORT_DISABLED);
                entry.watch.send_replace(JobState::Failed);
            }
            return;
        }
        drop(state);
        crate::executor::spawn_driver(self, spec.job_id);
    }

    /// `commitImportV2AckCallback` on a secondary: waits (unbounded, as Milvus retries) for the
    /// mirror to exist and reach Uncommitted; a Failed mirror is a logged divergence. The
    /// commit keeps the primary's time tick, so the fence judges it as the primary's did.
    async fn replay_commit(&self, source: &str, job_id: i64, commit_ts: u64) {
        let mut watch = loop {
            let created = self.0.job_created.notified();
            tokio::pin!(created);
            created.as_mut().enable();
            if let Some(w) = self.job_watch(job_id) {
                break w;
            }
            created.await;
        };
        loop {
            let current = *watch.borrow_and_update();
            match current {
                JobState::Uncommitted => {
                    // Read before the lock: it takes the primary's.
                    let checkpoint = self.stream_checkpoint(source);
                    let mut state = self.lock();
                    if state.jobs.get(&job_id).map(|e| e.job.state) == Some(JobState::Uncommitted) {
                        self.enter_committing(&mut state, job_id, commit_ts, checkpoint);
                        return;
                    }
                }
                JobState::Committing | JobState::Completed => return,
                JobState::Failed => {
                    tracing::warn!(
                        cluster = self.id(),
                        job_id,
                        "job is Failed; this replica will NOT commit while the source commits — potential primary/standby divergence"
                    );
                    return;
                }
                _ => {
                    if watch.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// The rows a query of `collection` counts now, in `partitions` (all when `None`); an
    /// error when the collection does not exist.
    pub fn count_rows(
        &self,
        db: &str,
        collection: &str,
        partitions: Option<&[String]>,
    ) -> Result<i64, MilvusError> {
        let state = self.lock();
        let id = state.catalog.collection(db, collection)?.id;
        Ok(live_rows(&completed(&state, id), partitions, &self.0.spec))
    }

    /// The live rows of `collection` in `partitions` (all when `None`) whose key is one of
    /// `keys`, each with the file group its values lie in, and the collection's schema.
    pub fn rows_with_keys(
        &self,
        db: &str,
        collection: &str,
        partitions: Option<&[String]>,
        keys: &std::collections::HashSet<Pk>,
    ) -> Result<(milvus_proto::schema::CollectionSchema, Vec<FoundRow>), MilvusError> {
        let state = self.lock();
        let coll = state.catalog.collection(db, collection)?;
        let done = completed(&state, coll.id);
        let found = live_keys(&done, partitions, &self.0.spec)
            .filter(|(_, row)| keys.contains(&row.pk))
            .map(|(job, row)| FoundRow {
                insert_prefix: job.data.kept[row.group].clone(),
                index: row.index,
                pk: row.pk.clone(),
                changed: job.data.changed.as_ref() == Some(&row.pk),
            })
            .collect();
        Ok((coll.schema.clone(), found))
    }

    // ------------------------------------------------------------------ snapshot

    /// Everything the control API's `GET /sim/v1/state` shows.
    pub fn snapshot(&self) -> ClusterSnapshot {
        let state = self.lock();
        let role = replication::role_of(state.replicate_config.as_ref(), self.id());
        let mut completed: HashMap<i64, Vec<&ImportJob>> = HashMap::new();
        for entry in state.jobs.values() {
            if entry.job.state == JobState::Completed {
                completed
                    .entry(entry.job.collection_id)
                    .or_default()
                    .push(&entry.job);
            }
        }
        let collections = state
            .catalog
            .databases
            .values()
            .flat_map(|d| d.collections.values())
            .map(|c| {
                let done = completed.get(&c.id).map(Vec::as_slice).unwrap_or_default();
                CollectionSnapshot {
                    db_name: c.db_name.clone(),
                    name: c.name.clone(),
                    id: c.id,
                    fields: c
                        .schema
                        .fields
                        .iter()
                        .map(|f| FieldSnapshot {
                            field_id: f.field_id,
                            name: f.name.clone(),
                            is_dynamic: f.is_dynamic,
                        })
                        .collect(),
                    partitions: c.partitions.iter().map(|p| p.name.clone()).collect(),
                    indexes: c.indexes.iter().map(|i| i.index_name.clone()).collect(),
                    loaded: c.loaded,
                    visible_rows: done.iter().map(|j| j.total_rows).sum(),
                    visible_deleted_rows: done.iter().map(|j| j.total_rows).sum::<i64>()
                        - live_rows(done, None, &self.0.spec),
                    changed_rows: live_keys(done, None, &self.0.spec)
                        .filter(|(job, row)| job.data.changed.as_ref() == Some(&row.pk))
                        .count() as i64,
                    completed_imports: done
                        .iter()
                        .map(|j| CompletedImport {
                            job_id: j.job_id.to_string(),
                            partition_name: j.partition_name.clone(),
                            rows: j.total_rows,
                            manifest: j.manifest.clone(),
                        })
                        .collect(),
                }
            })
            .collect();
        ClusterSnapshot {
            cluster_id: self.id().to_owned(),
            version: self.version().to_owned(),
            build: self.build().to_owned(),
            role: role.name().to_owned(),
            primary: match &role {
                Role::Secondary { primary } => Some(primary.clone()),
                _ => None,
            },
            secondaries: match &role {
                Role::Primary { secondaries } => secondaries.clone(),
                _ => Vec::new(),
            },
            pchannels: self.0.pchannels.clone(),
            collections,
            jobs: state.jobs.values().map(|e| e.job.clone()).collect(),
            streams: state.streams.values().map(CdcStream::snapshot).collect(),
            pending_job_failures: state.faults.pending_job_failures(),
            fences: state.fences.list(),
            requests: state.requests.records().cloned().collect(),
            requests_dropped: state.requests.dropped(),
        }
    }
}

fn set_state(entry: &mut JobEntry, state: JobState) {
    entry.job.enter(state);
    entry.watch.send_replace(state);
}

/// describe / get_progress of an unknown job: 2101 since Milvus #50221.
fn job_not_found(job_id: i64) -> MilvusError {
    MilvusError::import_sys_failed(format!("import job does not exist, jobID={job_id}"))
}

fn manual_not_allowed(job_id: i64) -> MilvusError {
    MilvusError::import_failed(format!(
        "job {job_id} is auto-commit, manual commit/abort not allowed"
    ))
}

/// Lets the fault API reach the job-failure list without exposing `State`.
impl Cluster {
    /// Fails a job when it reaches `failure.state`; a named job already in that state fails
    /// now (an Uncommitted job waits for its commit, not for another transition).
    pub fn add_job_failure(&self, failure: crate::faults::JobFailure) {
        if let crate::faults::JobSelector::Id(id) = failure.job
            && self
                .update_job_in(id, failure.state, |j| j.fail(failure.reason.clone()))
                .is_some()
        {
            return;
        }
        self.lock().faults.add_job_failure(failure);
    }

    /// The next job (or a named one) imports fewer rows than its files hold.
    pub fn add_short_import(&self, short: crate::faults::ShortImport) {
        self.lock().faults.add_short_import(short);
    }

    /// The answer to the REST create that makes the selected job is lost after the job was
    /// made.
    pub fn add_lost_answer(&self, lost: crate::faults::LostAnswer) {
        self.lock().faults.add_lost_answer(lost);
    }

    /// Whether the answer to the create that made `job_id` is to be lost, consuming the
    /// fault.
    pub(crate) fn take_lost_answer(&self, job_id: i64) -> bool {
        self.lock().faults.take_lost_answer(job_id)
    }

    /// The next job that can drift so reports its rows and shows a query others: a lost
    /// delete, a changed value.
    pub fn add_drift(&self, drift: impl Into<crate::faults::Drift>) {
        self.lock().faults.add_drift(drift.into());
    }

    pub fn add_api_fault(
        &self,
        face: crate::faults::ApiFace,
        effect: ApiEffect,
        duration: Duration,
    ) {
        self.lock().faults.add_api_fault(face, effect, duration);
    }

    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Rows visible in a collection: those of its Completed imports.
    pub fn visible_rows(&self, db: &str, collection: &str) -> i64 {
        let state = self.lock();
        let Ok(id) = state.catalog.collection(db, collection).map(|c| c.id) else {
            return 0;
        };
        state
            .jobs
            .values()
            .filter(|e| e.job.collection_id == id && e.job.state == JobState::Completed)
            .map(|e| e.job.total_rows)
            .sum()
    }
}

/// One live row a query found by its key.
#[derive(Debug, Clone)]
pub struct FoundRow {
    /// The insert prefix of the file group that holds its values, and its row there.
    pub insert_prefix: String,
    pub index: usize,
    pub pk: Pk,
    /// The changed-row fault took it: a query shows one of its values changed.
    pub changed: bool,
}

/// The Completed imports of collection `id`: what a query reads.
fn completed(state: &State, id: i64) -> Vec<&ImportJob> {
    jobs_of(state, Some(id))
        .filter(|j| j.state == JobState::Completed)
        .collect()
}

/// The jobs of collection `id` (every job when `None`), in id order.
fn jobs_of(state: &State, id: Option<i64>) -> Box<dyn Iterator<Item = &ImportJob> + '_> {
    let Some(id) = id else {
        return Box::new(state.jobs.values().map(|e| &e.job));
    };
    let ids = state.by_collection.get(&id).into_iter().flatten();
    Box::new(ids.filter_map(|job| state.jobs.get(job)).map(|e| &e.job))
}

/// The L0 deletes of `done` that apply to the rows of `rows` (a job of `done`): those of its
/// partition, and those of L0 imports into no partition, which apply to every partition. On a
/// cluster whose held L0 imports keep their timestamps (`two_phase_l0_keeps_timestamps`, as
/// 3.0 does), a held L0 import's deletes keep the backup's timestamps while the rows of a
/// held data import take the commit's, later than every one of them: they remove none of
/// those rows (milvus#51247).
fn deletes_for(done: &[&ImportJob], rows: &ImportJob, spec: &ClusterSpec) -> Vec<Delete> {
    let committed_later = rows.commit_mode() == CommitMode::Manual;
    done.iter()
        .filter(|j| j.partition_name.is_empty() || j.partition_name == rows.partition_name)
        .filter(|j| {
            let kept_timestamps =
                spec.two_phase_l0_keeps_timestamps && j.commit_mode() == CommitMode::Manual;
            !(kept_timestamps && committed_later)
        })
        .flat_map(|j| j.data.deletes.iter().cloned())
        .collect()
}

/// The keys of the rows of `done` (Completed imports of one collection on the cluster of
/// `spec`) in `partitions` (all when `None`) that no L0 delete removes, by Milvus's rule: a
/// delete removes the rows of its key written before it.
fn live_keys<'a>(
    done: &'a [&'a ImportJob],
    partitions: Option<&'a [String]>,
    spec: &'a ClusterSpec,
) -> impl Iterator<Item = (&'a ImportJob, &'a Row)> + 'a {
    done.iter()
        .filter(move |j| partitions.is_none_or(|p| p.contains(&j.partition_name)))
        .filter_map(|j| j.data.keys.as_ref().map(|keys| (*j, keys)))
        .flat_map(move |(j, keys)| {
            let deletes = deletes_for(done, j, spec);
            let removed = binlog::removed(keys.iter().map(|r| (&r.pk, r.ts)), &deletes);
            keys.iter()
                .zip(removed)
                .filter(|(_, gone)| !gone)
                .map(move |(row, _)| (j, row))
        })
}

/// How many rows of `done` in `partitions` a query counts: the rows whose keys were read, less
/// those an L0 delete removes, and the rows of imports whose keys were not read (row files),
/// as imported.
fn live_rows(done: &[&ImportJob], partitions: Option<&[String]>, spec: &ClusterSpec) -> i64 {
    let unkeyed: i64 = done
        .iter()
        .filter(|j| partitions.is_none_or(|p| p.contains(&j.partition_name)))
        .filter(|j| j.data.keys.is_none())
        .map(|j| j.total_rows - j.deleted_rows)
        .sum();
    unkeyed + live_keys(done, partitions, spec).count() as i64
}
