//! The topology file: which clusters to start and how they replicate.
//!
//! Two steps, as everywhere in lockstep: [`TopologyFile`] mirrors the TOML (serde, spans kept),
//! [`Topology`] is the validated result with no strings left to parse. Every problem is
//! reported with the file, line, column and field path, and all problems are collected before
//! the file is refused.
//!
//! ```toml
//! [[cluster]]
//! id = "a"
//! import_in_replicating_cluster = true
//! [cluster.durations]
//! importing = "200ms"
//!
//! [[cluster]]
//! id = "b"
//! import_in_replicating_cluster = true
//!
//! [replication]
//! primary = "a"
//! secondaries = ["b"]
//! stream_lag = "100ms"
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::SignedDuration;
use serde::Deserialize;
use toml::Spanned;

use crate::go_duration::{self, GoDuration};

/// Default version string: the release lockstep targets.
pub const DEFAULT_VERSION: &str = "3.0.0";
/// Milvus's `dataCoord.import.maxImportJobNum` default.
pub const DEFAULT_MAX_IMPORT_JOB_NUM: usize = 1024;
/// Requests a cluster's log keeps when the file does not say: enough for any test to count
/// calls, few enough (tens of MB) that a long benchmark cannot grow the sim without bound.
pub const DEFAULT_REQUEST_LOG_CAPACITY: usize = 100_000;
/// Pchannels per cluster when the file does not say; Milvus's default dml channel count is 16,
/// but the sim keeps two so descriptions stay short. Every cluster of a topology must agree.
pub const DEFAULT_PCHANNELS: u32 = 2;
/// Each import stage lasts this long unless the file says otherwise: short, so tests are fast,
/// yet long enough that every state is observable.
pub const DEFAULT_STAGE_DURATION: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------- raw file (serde)

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    #[serde(rename = "cluster", default)]
    clusters: Vec<ClusterFile>,
    replication: Option<ReplicationFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    id: Spanned<String>,
    #[serde(default)]
    port: u16,
    version: Option<String>,
    storage: Option<StorageFile>,
    /// "minio" (default) or "local".
    storage_type: Option<Spanned<String>>,
    #[serde(default)]
    import_in_replicating_cluster: bool,
    enable_l0_import: Option<bool>,
    #[serde(default = "on")]
    two_phase_l0_keeps_timestamps: bool,
    pchannels: Option<Spanned<u32>>,
    max_import_job_num: Option<usize>,
    request_log_capacity: Option<usize>,
    token: Option<String>,
    #[serde(default)]
    users: Vec<crate::rbac::User>,
    #[serde(default)]
    import_binlog_privilege: bool,
    #[serde(default)]
    fill_redacted_tokens: bool,
    #[serde(default)]
    timeout_spares_committing: bool,
    task_retention: Option<Spanned<String>>,
    build: Option<String>,
    #[serde(default)]
    management_port: u16,
    clock_offset: Option<Spanned<String>>,
    #[serde(default = "on")]
    stale_commit_blocks_channel: bool,
    #[serde(default)]
    import_blocks_schema_ddl: bool,
    #[serde(default = "on")]
    admission_before_idempotency: bool,
    #[serde(default = "on")]
    partition_key_refuses_partition_names: bool,
    #[serde(default)]
    durations: DurationsFile,
}

/// The default of the rules Milvus 3.0 ships switched on.
fn on() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StorageFile {
    url: Spanned<String>,
    endpoint: Option<String>,
    region: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    #[serde(default)]
    allow_http: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DurationsFile {
    pending: Option<Spanned<String>>,
    preimport: Option<Spanned<String>>,
    importing: Option<Spanned<String>>,
    sorting: Option<Spanned<String>>,
    index_building: Option<Spanned<String>>,
    committing: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplicationFile {
    primary: Spanned<String>,
    #[serde(default)]
    secondaries: Vec<Spanned<String>>,
    stream_lag: Option<Spanned<String>>,
}

// ---------------------------------------------------------------- validated topology

/// A validated topology: the clusters to start and, optionally, the star they replicate in.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    pub clusters: Vec<ClusterSpec>,
    pub replication: Option<ReplicationSpec>,
}

/// One cluster: what a Milvus deployment's config would say about it.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// `msgChannel.chanNamePrefix.cluster`: names the cluster in replication configs.
    pub id: String,
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// What GetVersion and Connect report (default "3.0.0").
    pub version: String,
    /// Where this cluster reads import files from.
    pub storage: StorageSpec,
    /// Milvus's `common.storageType`: how it resolves import paths.
    pub storage_type: StorageType,
    /// `dataCoord.import.enableInReplicatingCluster` (default false, as in Milvus).
    pub import_in_replicating_cluster: bool,
    /// `dataCoord.import.enableL0Import`; unset, the version's default: off from 3.0
    /// (docs/milvus-facts.md §1.5), on before.
    pub enable_l0_import: Option<bool>,
    /// An L0 import held for commit (`auto_commit=false`) keeps its deletes' timestamps,
    /// while a held data import's rows take the commit's, later than every one of them: the
    /// deletes remove none of those rows (milvus#51247, why 3.0 turned L0 import off;
    /// docs/milvus-facts.md §1.5). Default true, as 3.0 does once L0 import is on; false
    /// applies them by the rows' own timestamps, as no release does.
    pub two_phase_l0_keeps_timestamps: bool,
    /// Number of pchannels, named `<id>-rootcoord-dml_<i>`.
    pub pchannels: u32,
    /// `dataCoord.import.maxImportJobNum`: active jobs (Uncommitted included) allowed at once.
    pub max_import_job_num: usize,
    /// Requests the cluster's log keeps (the oldest are dropped and counted); default 100,000.
    pub request_log_capacity: usize,
    /// When set, REST needs `Authorization: Bearer <token>` and gRPC an `authorization` header.
    /// The token is root's: it passes every privilege check.
    pub token: Option<String>,
    /// Users (`[[cluster.users]]`, each with `name`, `password` and `grants`): with any, the
    /// cluster checks Milvus's privileges ([`crate::rbac`]); they sign in as `name:password`.
    pub users: Vec<crate::rbac::User>,
    /// Binlog and L0 imports (`backup=true`, `l0_import=true`) also need the cluster-level
    /// `ImportBinlog` privilege, as Milvus builds with it do (docs/milvus-facts.md §1.5).
    pub import_binlog_privilege: bool,
    /// An update carrying the blanked tokens Get returns keeps the stored tokens
    /// (`FillRedactedConnectionTokens`, newer than released 3.0.x); default false: it is
    /// refused as a token change, as released 3.0.x does (docs/milvus-facts.md §3.2).
    pub fill_redacted_tokens: bool,
    /// A job's `timeout` leaves it alone once Committing, as newer code does; default false:
    /// released 3.0.x fails a Committing job whose timeout runs out ("import timeout").
    pub timeout_spares_committing: bool,
    /// `dataCoord.import.taskRetention`: how long a finished job stays describable; unset,
    /// the version's default (48 h from 3.0.2 and 2.6.24, 3 h before).
    pub task_retention: Option<Duration>,
    /// What GetVersion, Connect's `build_tags` and the management API report, when the build
    /// is not the release `version` names: a branch build such as `master-20260806-1a2b3c4`
    /// of the same code, so two clusters of one version can run different builds
    /// (docs/milvus-facts.md §4.2). The cluster behaves as `version` says either way.
    pub build: Option<String>,
    /// Port on 127.0.0.1 of the management API (Milvus's metrics port, 9091), which serves
    /// `/api/v1/_cluster/configs` and `/_cluster/info` ([`crate::management`]); 0 picks a
    /// free one. Never the cluster's own port: Milvus serves them apart.
    pub management_port: u16,
    /// How far the cluster's clock (its TSO: AllocTimestamp, the time tick a commit is
    /// stamped with, the checkpoints of its streams) runs from the host's; negative runs
    /// behind, so a backup's rows can be newer than the cluster's own time.
    pub clock_offset: SignedDuration,
    /// A commit whose time tick is below the newest row timestamp of the job's binlogs is
    /// rejected by the commit fence and retried forever (milvus#51589, in every 3.0 release,
    /// so on by default): the job stays Committing and the pchannels of its collection apply
    /// no further commit, on every cluster the commit reaches (docs/milvus-facts.md §2.7).
    pub stale_commit_blocks_channel: bool,
    /// Schema-changing DDL (AddCollectionField, AlterCollection) on a collection with an
    /// unfinished import job is refused with code 112 (milvus#53071, open: default off).
    pub import_blocks_schema_ddl: bool,
    /// An `Idempotency-Key` is looked up only after the create passed admission (the job
    /// limit, the replication gate, the broadcast), so the retry of a create whose job exists
    /// can be refused (milvus#53228, cherry-picked to 3.0: default on); off, a known key
    /// answers its job first.
    pub admission_before_idempotency: bool,
    /// A query that names partitions of a partition-key collection is refused (the proxy's
    /// rule in every release: default on).
    pub partition_key_refuses_partition_names: bool,
    pub durations: StageDurations,
    /// A second port serving the same over TLS ([`crate::tls`]).
    pub tls: Option<crate::tls::TlsSpec>,
}

impl ClusterSpec {
    /// A cluster with every default: port 0, version 3.0.0, a temporary directory as storage.
    pub fn new(id: impl Into<String>) -> Self {
        ClusterSpec {
            id: id.into(),
            port: 0,
            version: DEFAULT_VERSION.to_owned(),
            storage: StorageSpec::TempDir,
            storage_type: StorageType::Minio,
            import_in_replicating_cluster: false,
            enable_l0_import: None,
            two_phase_l0_keeps_timestamps: true,
            pchannels: DEFAULT_PCHANNELS,
            max_import_job_num: DEFAULT_MAX_IMPORT_JOB_NUM,
            request_log_capacity: DEFAULT_REQUEST_LOG_CAPACITY,
            token: None,
            users: Vec::new(),
            import_binlog_privilege: false,
            fill_redacted_tokens: false,
            timeout_spares_committing: false,
            task_retention: None,
            build: None,
            management_port: 0,
            clock_offset: SignedDuration::ZERO,
            stale_commit_blocks_channel: true,
            import_blocks_schema_ddl: false,
            admission_before_idempotency: true,
            partition_key_refuses_partition_names: true,
            durations: StageDurations::default(),
            tls: None,
        }
    }

    /// `<cluster_id>-rootcoord-dml_<i>`, the naming Milvus's docs and tests use.
    pub fn pchannel_names(&self) -> Vec<String> {
        (0..self.pchannels)
            .map(|i| format!("{}-rootcoord-dml_{i}", self.id))
            .collect()
    }
}

/// How a cluster resolves import paths, as Milvus's `common.storageType` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StorageType {
    /// Object storage: a path is a key of the cluster's bucket.
    #[default]
    Minio,
    /// Local storage: a path is a file path, read from the filesystem root, so only an
    /// absolute path under the storage directory names the cluster's files. A relative one
    /// (bucket-style) names nothing there: Milvus 2.3 then completes its import with 0 rows.
    Local,
}

/// Where a cluster's object storage lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageSpec {
    /// A fresh temporary directory, removed when the Sim stops.
    TempDir,
    /// A local directory.
    Local(PathBuf),
    /// In-process memory; for unit tests that run on paused tokio time.
    Memory,
    /// An S3 bucket, e.g. a moto or MinIO server on loopback.
    S3(S3Spec),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Spec {
    pub bucket: String,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub allow_http: bool,
}

/// How long each import stage lasts on a cluster, so tests can make one end slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageDurations {
    pub pending: Duration,
    pub preimport: Duration,
    pub importing: Duration,
    pub sorting: Duration,
    pub index_building: Duration,
    pub committing: Duration,
}

impl StageDurations {
    /// Every stage the same length; `uniform(Duration::ZERO)` gives instant imports.
    pub fn uniform(d: Duration) -> Self {
        StageDurations {
            pending: d,
            preimport: d,
            importing: d,
            sorting: d,
            index_building: d,
            committing: d,
        }
    }
}

impl Default for StageDurations {
    fn default() -> Self {
        Self::uniform(DEFAULT_STAGE_DURATION)
    }
}

/// The short form of a star: one primary replicating to every secondary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationSpec {
    pub primary: String,
    pub secondaries: Vec<String>,
    /// Initial lag of every CDC stream.
    pub stream_lag: Duration,
}

// ---------------------------------------------------------------- errors

/// One problem in a topology file, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: usize,
    pub column: usize,
    /// Field path, e.g. `cluster[1].durations.importing`.
    pub field: String,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("cannot read topology file {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid topology file {file}:\n{}", render_problems(file, problems))]
    Invalid {
        file: String,
        problems: Vec<Problem>,
    },
}

fn render_problems(file: &str, problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| {
            format!(
                "  {file}:{}:{}: {}: {}",
                p.line, p.column, p.field, p.message
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Topology {
    /// Reads and validates a topology file; relative storage paths are resolved against the
    /// file's directory.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Topology, TopologyError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
            file: file.clone(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_toml_str(&text, &file, base)
    }

    /// Validates topology text; `file` names it in errors, `base_dir` anchors relative paths.
    pub fn from_toml_str(
        text: &str,
        file: &str,
        base_dir: &Path,
    ) -> Result<Topology, TopologyError> {
        let invalid = |problems| TopologyError::Invalid {
            file: file.to_owned(),
            problems,
        };
        let raw: TopologyFile = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let (line, column) = line_column(text, span.start);
            invalid(vec![Problem {
                line,
                column,
                field: field_path_at(text, span.start),
                message: e.message().trim().to_owned(),
            }])
        })?;
        let mut checker = Checker {
            text,
            problems: Vec::new(),
        };
        let topology = checker.check(raw, base_dir);
        if checker.problems.is_empty() {
            Ok(topology)
        } else {
            Err(invalid(checker.problems))
        }
    }
}

struct Checker<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl Checker<'_> {
    fn problem(&mut self, offset: usize, field: String, message: impl Into<String>) {
        let (line, column) = line_column(self.text, offset);
        self.problems.push(Problem {
            line,
            column,
            field,
            message: message.into(),
        });
    }

    fn duration(&mut self, value: &Spanned<String>, field: String) -> Duration {
        match go_duration::parse(value.get_ref()) {
            Ok(GoDuration::Forward(d)) => d,
            Ok(GoDuration::Backward(_)) => {
                self.problem(
                    value.span().start,
                    field,
                    "expected a non-negative duration",
                );
                Duration::ZERO
            }
            Err(e) => {
                self.problem(
                    value.span().start,
                    field,
                    format!("expected a Go duration such as \"50ms\" or \"1.5s\": {e}"),
                );
                Duration::ZERO
            }
        }
    }

    /// A Go duration that may be negative (`"-8760h"`).
    fn signed_duration(&mut self, value: &Spanned<String>, field: String) -> SignedDuration {
        let signed = |d: Duration| SignedDuration::try_from(d).ok();
        let parsed = match go_duration::parse(value.get_ref()) {
            Ok(GoDuration::Forward(d)) => signed(d).ok_or_else(|| "too long".to_owned()),
            Ok(GoDuration::Backward(d)) => {
                (signed(d).map(|d| -d)).ok_or_else(|| "too long".to_owned())
            }
            Err(e) => Err(e.to_string()),
        };
        parsed.unwrap_or_else(|e| {
            self.problem(
                value.span().start,
                field,
                format!("expected a Go duration such as \"-8760h\" or \"30s\": {e}"),
            );
            SignedDuration::ZERO
        })
    }

    fn check(&mut self, raw: TopologyFile, base_dir: &Path) -> Topology {
        let mut clusters: Vec<ClusterSpec> = Vec::new();
        for (i, c) in raw.clusters.into_iter().enumerate() {
            let at = format!("cluster[{i}]");
            let id = c.id.get_ref().clone();
            if id.is_empty() || id.chars().any(char::is_whitespace) {
                self.problem(
                    c.id.span().start,
                    format!("{at}.id"),
                    "expected a non-empty id without whitespace",
                );
            } else if clusters.iter().any(|o| o.id == id) {
                self.problem(
                    c.id.span().start,
                    format!("{at}.id"),
                    format!("duplicate cluster id '{id}'"),
                );
            }
            let pchannels = match c.pchannels {
                Some(p) if *p.get_ref() == 0 => {
                    self.problem(
                        p.span().start,
                        format!("{at}.pchannels"),
                        "expected at least one pchannel",
                    );
                    DEFAULT_PCHANNELS
                }
                Some(p) => *p.get_ref(),
                None => DEFAULT_PCHANNELS,
            };
            let storage = match c.storage {
                None => StorageSpec::TempDir,
                Some(s) => match storage_spec(&s, base_dir) {
                    Ok(spec) => spec,
                    Err(msg) => {
                        self.problem(s.url.span().start, format!("{at}.storage.url"), msg);
                        StorageSpec::TempDir
                    }
                },
            };
            let storage_type = match c.storage_type.as_ref().map(|t| (t, t.get_ref().as_str())) {
                None | Some((_, "minio")) => StorageType::Minio,
                Some((_, "local"))
                    if matches!(storage, StorageSpec::TempDir | StorageSpec::Local(_)) =>
                {
                    StorageType::Local
                }
                Some((t, "local")) => {
                    self.problem(
                        t.span().start,
                        format!("{at}.storage_type"),
                        "storage_type \"local\" needs a local storage directory",
                    );
                    StorageType::Minio
                }
                Some((t, other)) => {
                    self.problem(
                        t.span().start,
                        format!("{at}.storage_type"),
                        format!("unknown storage_type `{other}`: expected \"minio\" or \"local\""),
                    );
                    StorageType::Minio
                }
            };
            let task_retention = c
                .task_retention
                .as_ref()
                .map(|r| self.duration(r, format!("{at}.task_retention")));
            let clock_offset = c.clock_offset.as_ref().map_or(SignedDuration::ZERO, |o| {
                self.signed_duration(o, format!("{at}.clock_offset"))
            });
            let d = &c.durations;
            let mut stage = |value: &Option<Spanned<String>>, name: &str| match value {
                Some(v) => self.duration(v, format!("{at}.durations.{name}")),
                None => DEFAULT_STAGE_DURATION,
            };
            let durations = StageDurations {
                pending: stage(&d.pending, "pending"),
                preimport: stage(&d.preimport, "preimport"),
                importing: stage(&d.importing, "importing"),
                sorting: stage(&d.sorting, "sorting"),
                index_building: stage(&d.index_building, "index_building"),
                committing: stage(&d.committing, "committing"),
            };
            clusters.push(ClusterSpec {
                id,
                port: c.port,
                version: c.version.unwrap_or_else(|| DEFAULT_VERSION.to_owned()),
                storage,
                storage_type,
                import_in_replicating_cluster: c.import_in_replicating_cluster,
                enable_l0_import: c.enable_l0_import,
                two_phase_l0_keeps_timestamps: c.two_phase_l0_keeps_timestamps,
                pchannels,
                max_import_job_num: c.max_import_job_num.unwrap_or(DEFAULT_MAX_IMPORT_JOB_NUM),
                request_log_capacity: c
                    .request_log_capacity
                    .unwrap_or(DEFAULT_REQUEST_LOG_CAPACITY),
                token: c.token,
                users: c.users,
                import_binlog_privilege: c.import_binlog_privilege,
                fill_redacted_tokens: c.fill_redacted_tokens,
                timeout_spares_committing: c.timeout_spares_committing,
                task_retention,
                build: c.build,
                management_port: c.management_port,
                clock_offset,
                stale_commit_blocks_channel: c.stale_commit_blocks_channel,
                import_blocks_schema_ddl: c.import_blocks_schema_ddl,
                admission_before_idempotency: c.admission_before_idempotency,
                partition_key_refuses_partition_names: c.partition_key_refuses_partition_names,
                durations,
                tls: None,
            });
        }
        let replication = raw.replication.map(|r| {
            let known = |id: &str| clusters.iter().any(|c| c.id == id);
            if !known(r.primary.get_ref()) {
                self.problem(
                    r.primary.span().start,
                    "replication.primary".into(),
                    format!("no cluster has id '{}'", r.primary.get_ref()),
                );
            }
            for (i, s) in r.secondaries.iter().enumerate() {
                let field = format!("replication.secondaries[{i}]");
                if !known(s.get_ref()) {
                    self.problem(
                        s.span().start,
                        field,
                        format!("no cluster has id '{}'", s.get_ref()),
                    );
                } else if s.get_ref() == r.primary.get_ref() {
                    self.problem(
                        s.span().start,
                        field,
                        "the primary cannot be its own secondary",
                    );
                } else if r.secondaries[..i]
                    .iter()
                    .any(|o| o.get_ref() == s.get_ref())
                {
                    self.problem(
                        s.span().start,
                        field,
                        format!("duplicate secondary '{}'", s.get_ref()),
                    );
                }
            }
            let stream_lag = match &r.stream_lag {
                Some(v) => self.duration(v, "replication.stream_lag".into()),
                None => Duration::ZERO,
            };
            ReplicationSpec {
                primary: r.primary.into_inner(),
                secondaries: r.secondaries.into_iter().map(Spanned::into_inner).collect(),
                stream_lag,
            }
        });
        if let Some(r) = &replication {
            let counts: Vec<u32> = clusters
                .iter()
                .filter(|c| c.id == r.primary || r.secondaries.contains(&c.id))
                .map(|c| c.pchannels)
                .collect();
            if counts.windows(2).any(|w| w[0] != w[1]) {
                self.problem(
                    0,
                    "replication".into(),
                    "every replicating cluster must have the same pchannel count",
                );
            }
        }
        Topology {
            clusters,
            replication,
        }
    }
}

fn storage_spec(s: &StorageFile, base_dir: &Path) -> Result<StorageSpec, String> {
    let url = s.url.get_ref().as_str();
    if url == "memory://" {
        return Ok(StorageSpec::Memory);
    }
    if let Some(rest) = url.strip_prefix("s3://") {
        let bucket = rest.trim_end_matches('/');
        if bucket.is_empty() || bucket.contains('/') {
            return Err(format!("expected s3://BUCKET, found '{url}'"));
        }
        return Ok(StorageSpec::S3(S3Spec {
            bucket: bucket.to_owned(),
            endpoint: s.endpoint.clone(),
            region: s.region.clone(),
            access_key_id: s.access_key_id.clone(),
            secret_access_key: s.secret_access_key.clone(),
            allow_http: s.allow_http,
        }));
    }
    let path = match url.strip_prefix("file://") {
        Some(p) => PathBuf::from(p),
        None if url.contains("://") => {
            return Err(format!(
                "expected a directory, file://, s3:// or memory:// URL, found '{url}'"
            ));
        }
        None => PathBuf::from(url),
    };
    Ok(StorageSpec::Local(if path.is_absolute() {
        path
    } else {
        base_dir.join(path)
    }))
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The dotted field path at a byte offset: the enclosing `[table]` or `[[array]]` header (with
/// the array index) plus the key on that line. toml's errors carry a span but no path.
fn field_path_at(text: &str, offset: usize) -> String {
    let offset = text.floor_char_boundary(offset.min(text.len()));
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = &text[line_start..line_end];
    let key = match line.split_once('=') {
        Some((k, _)) => k.trim().to_owned(),
        None if line.trim_start().starts_with('[') => String::new(),
        None => line.trim().to_owned(),
    };
    let mut table = String::new();
    let mut array_counts: Vec<(String, usize)> = Vec::new();
    for header in text[..line_start].lines() {
        let h = header.trim();
        if let Some(name) = h.strip_prefix("[[").and_then(|h| h.split("]]").next()) {
            let name = name.trim().to_owned();
            let index = match array_counts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, count)) => {
                    *count += 1;
                    *count
                }
                None => {
                    array_counts.push((name.clone(), 0));
                    0
                }
            };
            table = format!("{name}[{index}]");
        } else if let Some(name) = h.strip_prefix('[').and_then(|h| h.split(']').next()) {
            // A sub-table of the last array element (`[cluster.durations]`) keeps its index.
            let name = name.trim();
            table = match array_counts.last() {
                Some((array, index)) if name.starts_with(&format!("{array}.")) => {
                    format!("{array}[{index}]{}", &name[array.len()..])
                }
                _ => name.to_owned(),
            };
        }
    }
    match (table.is_empty(), key.is_empty()) {
        (true, true) => "(top level)".to_owned(),
        (true, false) => key,
        (false, true) => table,
        (false, false) => format!("{table}.{key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Topology, TopologyError> {
        Topology::from_toml_str(text, "t.toml", Path::new("/base"))
    }

    fn problems(text: &str) -> Vec<Problem> {
        match parse(text) {
            Err(TopologyError::Invalid { problems, .. }) => problems,
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn defaults_and_short_form() {
        let t = parse(
            "[[cluster]]\nid = \"a\"\n[[cluster]]\nid = \"b\"\nversion = \"2.6.24\"\n[cluster.durations]\nimporting = \"1.5s\"\n[cluster.storage]\nurl = \"data/b\"\n\n[replication]\nprimary = \"a\"\nsecondaries = [\"b\"]\nstream_lag = \"250ms\"\n",
        )
        .expect("valid topology");
        let a = &t.clusters[0];
        assert_eq!((a.version.as_str(), a.port, a.pchannels), ("3.0.0", 0, 2));
        assert_eq!(a.storage, StorageSpec::TempDir);
        assert!(!a.import_in_replicating_cluster);
        assert_eq!(a.max_import_job_num, 1024);
        assert_eq!(a.request_log_capacity, 100_000);
        // The 3.0 rules as 3.0 ships them.
        assert_eq!(
            (
                a.two_phase_l0_keeps_timestamps,
                a.stale_commit_blocks_channel,
                a.import_blocks_schema_ddl,
                a.admission_before_idempotency,
                a.partition_key_refuses_partition_names,
            ),
            (true, true, false, true, true)
        );
        assert_eq!(
            (a.clock_offset, a.build.as_deref(), a.management_port),
            (SignedDuration::ZERO, None, 0)
        );
        assert_eq!(
            a.pchannel_names(),
            ["a-rootcoord-dml_0", "a-rootcoord-dml_1"]
        );
        let b = &t.clusters[1];
        assert_eq!(b.durations.importing, Duration::from_millis(1500));
        assert_eq!(b.durations.pending, DEFAULT_STAGE_DURATION);
        assert_eq!(b.storage, StorageSpec::Local(PathBuf::from("/base/data/b")));
        let r = t.replication.expect("replication given");
        assert_eq!(
            (r.primary.as_str(), r.stream_lag),
            ("a", Duration::from_millis(250))
        );
    }

    #[test]
    fn a_clock_offset_may_run_behind_and_must_be_a_go_duration() {
        let t = parse("[[cluster]]\nid = \"a\"\nclock_offset = \"-8760h\"\n").expect("valid");
        assert_eq!(
            t.clusters[0].clock_offset,
            SignedDuration::from_hours(-8760)
        );
        let p = problems("[[cluster]]\nid = \"a\"\nclock_offset = \"a year\"\n");
        assert_eq!(
            (p[0].line, p[0].field.as_str()),
            (3, "cluster[0].clock_offset")
        );
        assert!(
            p[0].message.contains("expected a Go duration"),
            "{}",
            p[0].message
        );
    }

    #[test]
    fn unknown_field_names_line_column_and_path() {
        let p = problems("[[cluster]]\nid = \"a\"\n\n[[cluster]]\nid = \"b\"\nportt = 5\n");
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].line, p[0].column), (6, 1));
        assert_eq!(p[0].field, "cluster[1].portt");
        assert!(
            p[0].message.contains("unknown field `portt`"),
            "{}",
            p[0].message
        );
    }

    #[test]
    fn wrong_type_names_the_field() {
        let p = problems("[[cluster]]\nid = \"a\"\n[cluster.durations]\npending = 5\n");
        assert_eq!(
            (p[0].line, p[0].field.as_str()),
            (4, "cluster[0].durations.pending")
        );
    }

    #[test]
    fn semantic_problems_are_all_collected() {
        let p = problems(
            "[[cluster]]\nid = \"a\"\n[cluster.durations]\npending = \"5 parsecs\"\n[[cluster]]\nid = \"a\"\n[replication]\nprimary = \"z\"\n",
        );
        let fields: Vec<_> = p.iter().map(|p| (p.field.as_str(), p.line)).collect();
        assert_eq!(
            fields,
            [
                ("cluster[0].durations.pending", 4),
                ("cluster[1].id", 6),
                ("replication.primary", 8)
            ]
        );
        let rendered = TopologyError::Invalid {
            file: "t.toml".into(),
            problems: p,
        }
        .to_string();
        assert!(
            rendered.contains("t.toml:4:11: cluster[0].durations.pending: expected a Go duration"),
            "{rendered}"
        );
    }
}
