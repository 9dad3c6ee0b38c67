//! The host config, `lockstep.toml`: the clusters and object stores a host knows, named
//! once so that job files can refer to them by name, where backups live, and where the
//! host keeps its journal and reports.
//!
//! ```toml
//! base = "backup.yaml"            # optional: milvus-backup's config, added to here
//! default_target = "prod-a"       # used by jobs that name no target
//! state_dir = ".lockstep"         # relative to this file; default ".lockstep"
//!
//! [storages.minio-a]
//! url = "s3://milvus-a/files"     # the bucket and Milvus's rootPath
//! endpoint = "http://10.0.0.1:9000"
//! allow_http = true
//! virtual_hosted = false          # true: BUCKET.host, as Aliyun, Tencent and Huawei need
//! # az://container/root: azure_account = "...", azure_key_env = "..."
//! # gs://bucket/root: service_account_file = "sa.json"
//! access_key_id_env = "MINIO_A_KEY"
//! secret_access_key_env = "MINIO_A_SECRET"
//!
//! [clusters.prod-a]
//! uri = "http://10.0.0.1:19530"     # https://: over TLS, for gRPC and REST alike
//! # tls = { ca_cert = "ca.pem", server_name = "milvus.internal",
//! #         client_cert = "client.pem", client_key = "client.key" }
//! token_env = "PROD_A_TOKEN"
//! storage = "minio-a"             # or an inline table
//! max_import_jobs = 1024          # dataCoord.import.maxImportJobNum
//! storage_type = "minio"          # common.storageType; "local": absolute import paths
//!
//! [backups]
//! storage = "minio-a"
//! root = "backup"                 # milvus-backup's backup.storage.rootPath
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;
use url::Url;

use super::diagnostic::{Error, Input, RawProblem, locate_in_file, read_toml};
use super::file::{ClusterFile, StorageFile, StorageRef};
use super::secret::Secret;

/// Milvus's `dataCoord.import.maxImportJobNum` default.
pub const DEFAULT_MAX_IMPORT_JOBS: u32 = 1024;
/// milvus-backup's `backup.storage.rootPath` default.
pub const DEFAULT_BACKUP_ROOT: &str = "backup";
/// Where journal and reports go, relative to the host config's directory.
pub const DEFAULT_STATE_DIR: &str = ".lockstep";

/// `lockstep.toml` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfigFile {
    /// `[clusters.NAME]`: every cluster jobs may name.
    #[serde(default)]
    pub clusters: BTreeMap<String, Spanned<ClusterFile>>,
    /// `[storages.NAME]`: object stores clusters and `[backups]` may name.
    #[serde(default)]
    pub storages: BTreeMap<String, Spanned<StorageFile>>,
    /// `[backups]`: where milvus-backup's backups live.
    pub backups: Option<Spanned<BackupsFile>>,
    /// The cluster restored into by jobs that name no target.
    pub default_target: Option<Spanned<String>>,
    /// The journal and report directory; default ".lockstep" beside this file.
    pub state_dir: Option<Spanned<String>>,
    /// How many attempts a watched or requested job gets when attempts are lost with
    /// their host (default 3).
    pub max_attempts: Option<Spanned<i64>>,
    /// A milvus-backup config (`backup.yaml`) this file adds to, relative to this file: its
    /// cluster `milvus` and storages `milvus` and `backup` are this file's, so one cluster
    /// is described once.
    pub base: Option<Spanned<String>>,
}

/// `[backups]` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupsFile {
    /// The store holding the backups: a `[storages.NAME]` name or an inline table.
    pub storage: Option<Spanned<StorageRef>>,
    /// The directory of the backups within that store; default "backup".
    pub root: Option<Spanned<String>>,
}

/// An object store, validated: the one description of a store that jobs, the engine and
/// `storage::open` share. Credentials stay in the environment: only the variable names are
/// kept (validation checks that those a job needs are set; `storage::open` reads them), so a
/// journal record or report that holds a spec holds no secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StorageSpec {
    /// `s3://bucket/root` or `file:///dir/root`.
    #[serde(serialize_with = "serialize_url")]
    pub url: Url,
    #[serde(serialize_with = "serialize_optional_url")]
    pub endpoint: Option<Url>,
    pub region: Option<String>,
    pub access_key_id_env: Option<String>,
    pub secret_access_key_env: Option<String>,
    pub session_token_env: Option<String>,
    /// Keys written in a milvus-backup config (or given with `--set`) rather than named by
    /// variable; in what is written down only the keys they came from appear.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub given: Option<GivenKeys>,
    pub allow_http: bool,
    /// Address the bucket by host name (`BUCKET.ENDPOINT-HOST`), as Aliyun OSS, Tencent COS
    /// and Huawei OBS require; otherwise by path (`ENDPOINT/BUCKET`), as MinIO serves. Left
    /// out of what is written down when off, so the specs written before it stay as they were.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub virtual_hosted: bool,
    /// Azure's storage account, for an `az://container/root` store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azure_account: Option<String>,
    /// The variable holding that account's shared key; without it (and without a key
    /// written in a milvus-backup config), Azure's credential chain: managed or workload
    /// identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azure_key_env: Option<String>,
    /// A Google service-account key file, for a `gs://bucket/root` store; without it, the
    /// instance's own credentials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_file: Option<PathBuf>,
}

/// Static keys whose values came with the config, not from the environment. For Azure,
/// `access_key_id` is the account and `secret_access_key` its shared key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenKeys {
    /// Where they came from, e.g. `backup.yaml milvus.storage.auth`.
    pub from: String,
    pub access_key_id: Secret,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
}

impl Serialize for GivenKeys {
    /// A journal record, a report and a job's identity name the keys' origin, never them.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("from", &self.from)?;
        map.end()
    }
}

/// Where a cluster's token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// An environment variable, read when the token is needed (`token_env`).
    Env(String),
    /// A milvus-backup config's `milvus.user` and `milvus.password`, as `user:password`.
    Given(Secret),
}

impl TokenSource {
    /// The token, reading the environment through `env` for [`TokenSource::Env`].
    pub fn read(&self, env: super::secret::Env<'_>) -> Result<Secret, MissingToken> {
        match self {
            TokenSource::Env(var) => env(var)
                .map(Secret)
                .ok_or_else(|| MissingToken(var.clone())),
            TokenSource::Given(secret) => Ok(secret.clone()),
        }
    }
}

/// A token's environment variable is not set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {0} is not set")]
pub struct MissingToken(pub String);

impl StorageSpec {
    /// A local directory as a store, with nothing else set; a relative `dir` is taken
    /// relative to the working directory.
    pub fn local(dir: &Path) -> std::io::Result<StorageSpec> {
        let dir = std::path::absolute(dir)?;
        let url = Url::from_file_path(&dir).expect("an absolute path is a valid file URL");
        Ok(StorageSpec {
            url,
            endpoint: None,
            region: None,
            access_key_id_env: None,
            secret_access_key_env: None,
            session_token_env: None,
            given: None,
            allow_http: false,
            virtual_hosted: false,
            azure_account: None,
            azure_key_env: None,
            service_account_file: None,
        })
    }

    /// The environment variables this store's credentials are read from.
    pub fn credential_envs(&self) -> impl Iterator<Item = &str> {
        [
            &self.access_key_id_env,
            &self.secret_access_key_env,
            &self.session_token_env,
            &self.azure_key_env,
        ]
        .into_iter()
        .filter_map(|env| env.as_deref())
    }
}

/// A cluster of the host config, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    pub uri: Url,
    pub token: Option<TokenSource>,
    /// The cluster's Milvus object storage; needed to stage into a target.
    pub storage: Option<StorageSpec>,
    pub max_import_jobs: u32,
    pub paths: PathForm,
    /// `require_staging`: as a secondary, it must have `storage`.
    pub require_staging: bool,
    /// `l0_import`: its `dataCoord.import.enableL0Import`; `None` leaves it to the version.
    pub l0_import: Option<bool>,
    /// How to trust an `https://` cluster, and what to present to it.
    pub tls: TlsSpec,
}

/// TLS to a cluster whose URI is `https://`, for gRPC and REST alike: the CA that signed its
/// certificate (default: the system's roots), the name that certificate carries when the
/// URI's host is not it, and the certificate and key lockstep presents to a cluster that
/// asks for one (Milvus's `tlsMode` 2). Files are read as given, relative to the working
/// directory as milvus-backup reads them, and checked when the config is loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TlsSpec {
    pub ca_cert: Option<PathBuf>,
    pub server_name: Option<String>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// How a Milvus resolves the paths of an import, by its `common.storageType`. A mirror
/// imports the target's paths verbatim, so every end of a restore must read them one way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "storage_type")]
pub enum PathForm {
    /// `minio` (any object storage): keys relative to the bucket, as lockstep stages them.
    #[default]
    Minio,
    /// `local`: absolute paths under Milvus's `localStorage.path`. A relative path is read
    /// from the filesystem root: Milvus 2.3 then lists nothing and completes with 0 rows.
    Local { local_storage_path: String },
}

impl PathForm {
    /// The path Milvus reads for `key`, a path relative to the end's store.
    pub fn import_path(&self, key: &str) -> String {
        match self {
            PathForm::Minio => key.to_owned(),
            PathForm::Local { local_storage_path } => {
                format!("{}/{key}", local_storage_path.trim_end_matches('/'))
            }
        }
    }
}

impl std::fmt::Display for PathForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathForm::Minio => f.write_str("bucket-relative keys (storage_type minio)"),
            PathForm::Local { local_storage_path } => write!(
                f,
                "absolute paths under {local_storage_path} (storage_type local)"
            ),
        }
    }
}

/// `[backups]`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackupsSpec {
    pub storage: StorageSpec,
    /// The backups' directory within the store; a backup is `{root}/{name}/`.
    pub root: String,
}

/// The host config, validated: names resolved, URLs parsed, paths absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    pub clusters: BTreeMap<String, ClusterSpec>,
    pub storages: BTreeMap<String, StorageSpec>,
    pub backups: Option<BackupsSpec>,
    pub default_target: Option<String>,
    pub state_dir: PathBuf,
    /// Attempts of one job content, counting those lost with their host (1..=100).
    pub max_attempts: u32,
    /// What a job that does not say takes from the host.
    pub restore: RestoreDefaults,
}

/// Restore options a host config may set for its jobs (milvus-backup's `restore.*`); a job
/// that sets one wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreDefaults {
    pub max_segments_per_job: usize,
    pub keep_temp_files: bool,
}

impl Default for RestoreDefaults {
    fn default() -> Self {
        Self {
            max_segments_per_job: crate::backup::DEFAULT_MAX_SEGMENTS_PER_JOB,
            keep_temp_files: false,
        }
    }
}

/// `max_attempts` when the host config sets none: a host lost twice in a row is a fleet
/// problem a person should look at, not a reason to go on.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

impl HostConfig {
    /// Validates `lockstep.toml` text; `path` locates messages and relative paths. `base`
    /// reads the milvus-backup config the file names as its `base`, or answers `None` for a
    /// path that names none; `overridden`: `--set` was given, which only a base can take.
    pub(super) fn from_toml(
        text: &str,
        path: &Path,
        base: &dyn Fn(&Path) -> Option<Result<HostConfig, Error>>,
        overridden: bool,
    ) -> Result<Self, Error> {
        let read = read_toml::<HostConfigFile>(text);
        let mut problems = read.problems;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        let base = match read.value.as_ref().and_then(|f| f.base.as_ref()) {
            Some(named) => match base(&base_dir.join(named.get_ref())) {
                Some(read) => Some(read?),
                None => {
                    problems.push(RawProblem::new(
                        "base",
                        Some(named.span()),
                        format!(
                            "`{}`: a base is a milvus-backup config, a .yaml file",
                            named.get_ref()
                        ),
                    ));
                    None
                }
            },
            None if overridden => {
                problems.push(RawProblem::new(
                    "base",
                    None,
                    "--set overrides a milvus-backup config's keys, and this file names no `base` backup.yaml",
                ));
                None
            }
            None => None,
        };
        let config = read
            .value
            .and_then(|file| validate(file, path, base, &mut problems));
        match config {
            Some(config) if problems.is_empty() => Ok(config),
            _ => Err(Error::Invalid {
                input: Input::HostConfig(path.to_owned()),
                problems: locate_in_file(path, text, problems),
            }),
        }
    }

    /// A host config with no clusters or stores, for tools that only read the state dir.
    pub fn empty(state_dir: PathBuf) -> Self {
        Self {
            clusters: BTreeMap::new(),
            storages: BTreeMap::new(),
            backups: None,
            default_target: None,
            state_dir,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            restore: RestoreDefaults::default(),
        }
    }
}

fn validate(
    file: HostConfigFile,
    path: &Path,
    base: Option<HostConfig>,
    problems: &mut Vec<RawProblem>,
) -> Option<HostConfig> {
    let base_name = file.base.as_ref().map(|b| b.get_ref().clone());
    let (mut storages, mut clusters, base_backups, base_target, restore) = match base {
        Some(base) => (
            base.storages,
            base.clusters,
            base.backups,
            base.default_target,
            base.restore,
        ),
        None => Default::default(),
    };
    let defined_by_base = |what: &str, name: &str, span, problems: &mut Vec<RawProblem>| {
        problems.push(RawProblem::new(
            format!("{what}.{name}"),
            Some(span),
            format!(
                "`{name}` is defined by the base {}; name this one differently",
                base_name.as_deref().unwrap_or_default()
            ),
        ));
    };
    for (name, storage) in &file.storages {
        if storages.contains_key(name) {
            defined_by_base("storages", name, storage.span(), problems);
            continue;
        }
        check_name(name, &format!("storages.{name}"), storage.span(), problems);
        if let Some(spec) = storage_spec(
            storage.get_ref(),
            &format!("storages.{name}"),
            storage.span(),
            problems,
        ) {
            storages.insert(name.clone(), spec);
        }
    }
    for (name, cluster) in &file.clusters {
        if clusters.contains_key(name) {
            defined_by_base("clusters", name, cluster.span(), problems);
            continue;
        }
        let field = format!("clusters.{name}");
        check_name(name, &field, cluster.span(), problems);
        if let Some(spec) = cluster_spec(
            cluster.get_ref(),
            &field,
            cluster.span(),
            &storages,
            problems,
        ) {
            clusters.insert(name.clone(), spec);
        }
    }
    let backups = file.backups.as_ref().and_then(|backups| {
        let storage = match &backups.get_ref().storage {
            Some(storage) => resolve_storage(storage, "backups.storage", &storages, problems),
            None => {
                problems.push(RawProblem::new(
                    "backups.storage",
                    Some(backups.span()),
                    "missing field `storage`: expected the name of a [storages.NAME] or a table with `url`",
                ));
                None
            }
        }?;
        let root = backups.get_ref().root.as_ref().map_or(DEFAULT_BACKUP_ROOT, |r| r.get_ref().as_str());
        Some(BackupsSpec { storage, root: root.trim_matches('/').to_owned() })
    }).or(base_backups);
    if let Some(target) = &file.default_target
        && !clusters.contains_key(target.get_ref())
        && !file.clusters.contains_key(target.get_ref())
    {
        problems.push(RawProblem::new(
            "default_target",
            Some(target.span()),
            format!(
                "unknown cluster `{}`; expected one of: {}",
                target.get_ref(),
                names(file.clusters.keys(), "cluster")
            ),
        ));
    }
    let max_attempts = match &file.max_attempts {
        None => DEFAULT_MAX_ATTEMPTS,
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(n @ 1..=100) => n,
            _ => {
                problems.push(RawProblem::new(
                    "max_attempts",
                    Some(n.span()),
                    format!("{} attempts: expected 1 to 100", n.get_ref()),
                ));
                DEFAULT_MAX_ATTEMPTS
            }
        },
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let state_dir = file
        .state_dir
        .as_ref()
        .map_or(DEFAULT_STATE_DIR, |s| s.get_ref().as_str());
    Some(HostConfig {
        clusters,
        storages,
        backups,
        default_target: file.default_target.map(Spanned::into_inner).or(base_target),
        state_dir: base.join(state_dir),
        max_attempts,
        restore,
    })
}

/// Names of clusters and storages end up in messages, file names and metrics labels.
fn check_name(
    name: &str,
    field: &str,
    span: std::ops::Range<usize>,
    problems: &mut Vec<RawProblem>,
) {
    if !is_name(name) {
        problems.push(RawProblem::new(
            field,
            Some(span),
            format!("invalid name `{name}`: expected letters, digits, `_`, `-` or `.`"),
        ));
    }
}

pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// An S3 bucket name: 3 to 63 lowercase letters, digits, `.` and `-`, starting and ending
/// with a letter or digit.
pub(crate) fn is_bucket_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// `what`s the host config names, for "expected one of" messages.
pub(crate) fn names<'a>(names: impl Iterator<Item = &'a String>, what: &str) -> String {
    let list: Vec<_> = names.map(|n| format!("`{n}`")).collect();
    if list.is_empty() {
        format!("(none: the host config names no {what})")
    } else {
        list.join(", ")
    }
}

/// Validates a cluster table (host config or inline in a job).
pub(crate) fn cluster_spec(
    file: &ClusterFile,
    field: &str,
    span: std::ops::Range<usize>,
    storages: &BTreeMap<String, StorageSpec>,
    problems: &mut Vec<RawProblem>,
) -> Option<ClusterSpec> {
    let uri = match &file.uri {
        Some(uri) => cluster_uri(
            uri.get_ref(),
            &format!("{field}.uri"),
            Some(uri.span()),
            problems,
        ),
        None => {
            problems.push(RawProblem::new(
                format!("{field}.uri"),
                Some(span),
                "missing field `uri`: expected the cluster's address, e.g. \"http://10.0.0.1:19530\"",
            ));
            None
        }
    };
    let storage = file
        .storage
        .as_ref()
        .and_then(|s| resolve_storage(s, &format!("{field}.storage"), storages, problems));
    let max_import_jobs = match &file.max_import_jobs {
        None => Some(DEFAULT_MAX_IMPORT_JOBS),
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(n) if n > 0 => Some(n),
            _ => {
                problems.push(RawProblem::new(
                    format!("{field}.max_import_jobs"),
                    Some(n.span()),
                    format!(
                        "invalid value {}: expected a positive number of import jobs",
                        n.get_ref()
                    ),
                ));
                None
            }
        },
    };
    let token = file
        .token_env
        .as_ref()
        .map(|t| TokenSource::Env(t.get_ref().clone()));
    if let Some(token_env) = &file.token_env {
        check_env_name(token_env, &format!("{field}.token_env"), problems);
    }
    let storage_ok = file.storage.is_none() || storage.is_some();
    let paths = path_form(file, field, storage.as_ref(), problems);
    let tls = tls_spec(file, field, uri.as_ref(), problems);
    Some(ClusterSpec {
        uri: uri?,
        token,
        storage,
        max_import_jobs: max_import_jobs?,
        paths: paths?,
        require_staging: file.require_staging.as_ref().is_some_and(|r| *r.get_ref()),
        l0_import: file.l0_import.as_ref().map(|l| *l.get_ref()),
        tls: tls?,
    })
    .filter(|_| storage_ok)
}

/// `tls`: only for an `https://` URI; a client certificate comes with its key; every file
/// is there and holds PEM.
fn tls_spec(
    file: &ClusterFile,
    field: &str,
    uri: Option<&Url>,
    problems: &mut Vec<RawProblem>,
) -> Option<TlsSpec> {
    let Some(tls) = &file.tls else {
        return Some(TlsSpec::default());
    };
    let before = problems.len();
    let at = |name: &str| format!("{field}.tls.{name}");
    if uri.is_some_and(|u| u.scheme() != "https") {
        problems.push(RawProblem::new(
            format!("{field}.tls"),
            Some(tls.span()),
            "tls applies to a cluster reached over TLS: write its uri as https://",
        ));
    }
    let tls = tls.get_ref();
    if tls.client_cert.is_some() != tls.client_key.is_some() {
        problems.push(RawProblem::new(
            at(if tls.client_cert.is_some() {
                "client_key"
            } else {
                "client_cert"
            }),
            tls.client_cert
                .as_ref()
                .or(tls.client_key.as_ref())
                .map(|p| p.span()),
            "a client certificate is presented with its key: give client_cert and client_key",
        ));
    }
    let mut pem = |name: &str, path: &Option<Spanned<String>>| {
        let path = path.as_ref()?;
        if let Err(reason) = read_pem(Path::new(path.get_ref())) {
            problems.push(RawProblem::new(at(name), Some(path.span()), reason));
        }
        Some(PathBuf::from(path.get_ref()))
    };
    let spec = TlsSpec {
        ca_cert: pem("ca_cert", &tls.ca_cert),
        client_cert: pem("client_cert", &tls.client_cert),
        client_key: pem("client_key", &tls.client_key),
        server_name: tls.server_name.as_ref().map(|n| n.get_ref().clone()),
    };
    (problems.len() == before).then_some(spec)
}

/// A PEM file's bytes, or why it is not one.
pub fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(format!("`{}` holds no PEM block", path.display()));
    }
    Ok(bytes)
}

/// `storage_type` and `local_storage_path`: how the cluster's Milvus reads import paths.
fn path_form(
    file: &ClusterFile,
    field: &str,
    storage: Option<&StorageSpec>,
    problems: &mut Vec<RawProblem>,
) -> Option<PathForm> {
    let local = match &file.storage_type {
        None => false,
        Some(t) => match t.get_ref().as_str() {
            "minio" => false,
            "local" => true,
            other => {
                problems.push(RawProblem::new(
                    format!("{field}.storage_type"),
                    Some(t.span()),
                    format!(
                        "invalid storage_type `{other}`: expected \"minio\" (any object storage) or \"local\", as Milvus's common.storageType"
                    ),
                ));
                return None;
            }
        },
    };
    if !local {
        if let Some(path) = &file.local_storage_path {
            problems.push(RawProblem::new(
                format!("{field}.local_storage_path"),
                Some(path.span()),
                "local_storage_path applies only with storage_type = \"local\"",
            ));
            return None;
        }
        return Some(PathForm::Minio);
    }
    let seen_dir = storage
        .filter(|s| s.url.scheme() == "file")
        .and_then(|s| s.url.to_file_path().ok());
    let local_storage_path = match (&file.local_storage_path, seen_dir) {
        (Some(path), _) if !path.get_ref().starts_with('/') => {
            problems.push(RawProblem::new(
                format!("{field}.local_storage_path"),
                Some(path.span()),
                format!(
                    "invalid local_storage_path `{}`: expected an absolute path, Milvus's localStorage.path as the server sees it",
                    path.get_ref()
                ),
            ));
            return None;
        }
        (Some(path), Some(_)) => path.get_ref().clone(),
        (None, Some(dir)) => dir.display().to_string(),
        (_, None) => {
            let span = file.storage_type.as_ref().map(Spanned::span);
            problems.push(RawProblem::new(
                format!("{field}.storage"),
                span,
                "storage_type = \"local\" needs `storage` to be the file:/// directory where lockstep sees Milvus's localStorage.path",
            ));
            return None;
        }
    };
    Some(PathForm::Local { local_storage_path })
}

/// Parses a cluster address: `http://` or `https://` with a host.
pub(crate) fn cluster_uri(
    uri: &str,
    field: &str,
    span: Option<std::ops::Range<usize>>,
    problems: &mut Vec<RawProblem>,
) -> Option<Url> {
    match Url::parse(uri) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Some(url),
        _ => {
            problems.push(RawProblem::new(
                field,
                span,
                format!(
                    "invalid cluster URI `{uri}`: expected http://host:port or https://host:port"
                ),
            ));
            None
        }
    }
}

/// Resolves a storage reference against the host config's `[storages]`.
pub(crate) fn resolve_storage(
    storage: &Spanned<StorageRef>,
    field: &str,
    storages: &BTreeMap<String, StorageSpec>,
    problems: &mut Vec<RawProblem>,
) -> Option<StorageSpec> {
    match storage.get_ref() {
        StorageRef::Inline(file) => storage_spec(file, field, storage.span(), problems),
        StorageRef::Named(name) => match storages.get(name) {
            Some(spec) => Some(spec.clone()),
            None => {
                problems.push(RawProblem::new(
                    field,
                    Some(storage.span()),
                    format!(
                        "unknown storage `{name}`; expected one of: {}",
                        names(storages.keys(), "valid storage")
                    ),
                ));
                None
            }
        },
    }
}

fn storage_spec(
    file: &StorageFile,
    field: &str,
    span: std::ops::Range<usize>,
    problems: &mut Vec<RawProblem>,
) -> Option<StorageSpec> {
    let before = problems.len();
    let url = match &file.url {
        None => {
            problems.push(RawProblem::new(
                format!("{field}.url"),
                Some(span),
                "missing field `url`: expected s3://bucket/root, az://container/root, gs://bucket/root or file:///dir/root",
            ));
            None
        }
        Some(url) => {
            match Url::parse(url.get_ref()) {
                Ok(parsed)
                    if matches!(parsed.scheme(), "s3" | "az" | "gs")
                        && parsed.host_str().is_some_and(|h| !h.is_empty()) =>
                {
                    Some(parsed)
                }
                // `file://host/dir` parses, but names no local directory.
                Ok(parsed) if parsed.scheme() == "file" && parsed.to_file_path().is_ok() => {
                    Some(parsed)
                }
                _ => {
                    problems.push(RawProblem::new(
                    format!("{field}.url"),
                    Some(url.span()),
                    format!("invalid storage URL `{}`: expected s3://bucket/root, az://container/root, gs://bucket/root or file:///dir/root", url.get_ref()),
                ));
                    None
                }
            }
        }
    };
    let allow_http = file.allow_http.unwrap_or(false);
    let endpoint =
        file.endpoint
            .as_ref()
            .and_then(|endpoint| match Url::parse(endpoint.get_ref()) {
                Ok(parsed)
                    if parsed.scheme() == "https" || (parsed.scheme() == "http" && allow_http) =>
                {
                    Some(parsed)
                }
                Ok(parsed) if parsed.scheme() == "http" => {
                    problems.push(RawProblem::new(
                        format!("{field}.endpoint"),
                        Some(endpoint.span()),
                        format!(
                            "endpoint `{}` is plain http: set allow_http = true to use it",
                            endpoint.get_ref()
                        ),
                    ));
                    None
                }
                _ => {
                    problems.push(RawProblem::new(
                        format!("{field}.endpoint"),
                        Some(endpoint.span()),
                        format!(
                            "invalid endpoint `{}`: expected http(s)://host:port",
                            endpoint.get_ref()
                        ),
                    ));
                    None
                }
            });
    for (name, env) in [
        ("access_key_id_env", &file.access_key_id_env),
        ("secret_access_key_env", &file.secret_access_key_env),
        ("session_token_env", &file.session_token_env),
        ("azure_key_env", &file.azure_key_env),
    ] {
        if let Some(env) = env {
            check_env_name(env, &format!("{field}.{name}"), problems);
        }
    }
    cloud_fields(file, field, url.as_ref(), problems);
    if problems.len() > before {
        return None;
    }
    Some(StorageSpec {
        url: url?,
        endpoint,
        region: file.region.as_ref().map(|r| r.get_ref().clone()),
        access_key_id_env: file.access_key_id_env.as_ref().map(|e| e.get_ref().clone()),
        secret_access_key_env: file
            .secret_access_key_env
            .as_ref()
            .map(|e| e.get_ref().clone()),
        session_token_env: file.session_token_env.as_ref().map(|e| e.get_ref().clone()),
        given: None,
        allow_http,
        virtual_hosted: file.virtual_hosted.unwrap_or(false),
        azure_account: file.azure_account.as_ref().map(|a| a.get_ref().clone()),
        azure_key_env: file.azure_key_env.as_ref().map(|e| e.get_ref().clone()),
        service_account_file: file
            .service_account_file
            .as_ref()
            .map(|f| PathBuf::from(f.get_ref())),
    })
}

/// The fields one cloud's store takes: an `az://` store names its account, and neither
/// cloud's fields go with another's URL. A service-account file must be there.
fn cloud_fields(
    file: &StorageFile,
    field: &str,
    url: Option<&Url>,
    problems: &mut Vec<RawProblem>,
) {
    let scheme = url.map(Url::scheme);
    let only = |name: &str, given: Option<std::ops::Range<usize>>, on: &str| {
        given
            .filter(|_| scheme.is_some_and(|s| s != on))
            .map(|span| {
                RawProblem::new(
                    format!("{field}.{name}"),
                    Some(span),
                    format!("applies only to an {on}:// store"),
                )
            })
    };
    problems.extend(only(
        "azure_account",
        file.azure_account.as_ref().map(Spanned::span),
        "az",
    ));
    problems.extend(only(
        "azure_key_env",
        file.azure_key_env.as_ref().map(Spanned::span),
        "az",
    ));
    problems.extend(only(
        "service_account_file",
        file.service_account_file.as_ref().map(Spanned::span),
        "gs",
    ));
    if scheme == Some("az") && file.azure_account.is_none() {
        problems.push(RawProblem::new(
            format!("{field}.azure_account"),
            file.url.as_ref().map(Spanned::span),
            "an az:// store names its storage account: azure_account",
        ));
    }
    if let Some(path) = &file.service_account_file
        && let Err(e) = std::fs::metadata(path.get_ref())
    {
        problems.push(RawProblem::new(
            format!("{field}.service_account_file"),
            Some(path.span()),
            format!("cannot read `{}`: {e}", path.get_ref()),
        ));
    }
}

fn check_env_name(env: &Spanned<String>, field: &str, problems: &mut Vec<RawProblem>) {
    let name = env.get_ref();
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        problems.push(RawProblem::new(
            field,
            Some(env.span()),
            format!("invalid environment variable name `{name}`: expected letters, digits and `_`"),
        ));
    }
}

/// URLs take part in a job's identity as their normalized text.
pub(crate) fn serialize_url<S: serde::Serializer>(
    url: &Url,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(url.as_str())
}

fn serialize_optional_url<S: serde::Serializer>(
    url: &Option<Url>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => serializer.serialize_some(url.as_str()),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::data_dir;
    use super::*;

    fn parse(text: &str) -> Result<HostConfig, Error> {
        HostConfig::parse_str(text, Path::new("/etc/lockstep/lockstep.toml"))
    }

    #[test]
    fn max_attempts_defaults_to_three_and_is_bounded() {
        assert_eq!(parse("").unwrap().max_attempts, DEFAULT_MAX_ATTEMPTS);
        assert_eq!(parse("max_attempts = 1\n").unwrap().max_attempts, 1);
        for bad in ["0", "101", "-2"] {
            let err = parse(&format!("max_attempts = {bad}\n")).unwrap_err();
            let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
            assert_eq!(
                shown,
                [format!(
                    "/etc/lockstep/lockstep.toml:1:16: max_attempts: {bad} attempts: expected 1 to 100"
                )]
            );
        }
    }

    #[test]
    fn test_host_config_resolves_names() {
        let path = data_dir().join("jobs/lockstep.toml");
        let config = HostConfig::load(&path).unwrap();
        assert_eq!(config.state_dir, data_dir().join("jobs/state"));
        let a = &config.clusters["prod-a"];
        assert_eq!(a.uri.as_str(), "http://127.0.0.1:19530/");
        assert_eq!(a.token, Some(TokenSource::Env("PROD_A_TOKEN".into())));
        assert_eq!(a.max_import_jobs, 2048);
        assert_eq!(a.storage.as_ref(), config.storages.get("minio-a"));
        let b = &config.clusters["prod-b"];
        assert_eq!(b.max_import_jobs, DEFAULT_MAX_IMPORT_JOBS);
        assert_eq!(
            b.storage.as_ref().map(|s| s.url.as_str()),
            Some("s3://milvus-b/files")
        );
        assert!(!b.storage.as_ref().unwrap().allow_http);
        assert_eq!(config.clusters["prod-c"].storage, None);
        let backups = config.backups.as_ref().unwrap();
        assert_eq!(backups.root, "backup");
        assert_eq!(
            backups.storage.credential_envs().collect::<Vec<_>>(),
            vec!["MINIO_A_KEY", "MINIO_A_SECRET"]
        );
        assert_eq!(config.default_target, None);
    }

    #[test]
    fn defaults_of_an_empty_config() {
        let config = parse("").unwrap();
        assert!(config.clusters.is_empty());
        assert_eq!(config.backups, None);
        assert_eq!(config.state_dir, PathBuf::from("/etc/lockstep/.lockstep"));
        let local = parse("[backups]\nstorage = { url = \"file:///srv/backups\" }\n").unwrap();
        assert_eq!(local.backups.unwrap().root, DEFAULT_BACKUP_ROOT);
    }

    #[test]
    fn storage_urls_name_a_bucket_or_a_local_directory() {
        let err = parse("[storages.s]\nurl = \"file://server/share\"\n").unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "/etc/lockstep/lockstep.toml:2:7: storages.s.url: invalid storage URL `file://server/share`: expected s3://bucket/root, az://container/root, gs://bucket/root or file:///dir/root"
            ]
        );
        let config = parse("[storages.s]\nurl = \"file:///srv/backups\"\n").unwrap();
        assert_eq!(
            config.storages["s"],
            StorageSpec::local(Path::new("/srv/backups")).unwrap(),
            "a spec built for a directory equals the validated file URL"
        );
    }

    #[test]
    fn each_clouds_store_takes_its_own_fields() {
        let text = r#"[storages.blob]
url = "az://container/root"
azure_key_env = "AZURE_KEY"

[storages.bucket]
url = "s3://bucket"
azure_account = "acct"

[storages.gcs]
url = "gs://bucket/root"
service_account_file = "/nonexistent/sa.json"
"#;
        let err = parse(text).unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        let fields: Vec<&str> = shown
            .iter()
            .map(|p| p.split(": ").nth(1).unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "storages.blob.azure_account",
                "storages.bucket.azure_account",
                "storages.gcs.service_account_file",
            ],
            "{shown:#?}"
        );
        assert!(shown[0].contains("names its storage account"), "{shown:#?}");
        assert!(
            shown[1].contains("applies only to an az:// store"),
            "{shown:#?}"
        );
        assert!(
            shown[2].contains("cannot read `/nonexistent/sa.json`"),
            "{shown:#?}"
        );

        let good = r#"[storages.blob]
url = "az://container/root"
azure_account = "acct"
azure_key_env = "AZURE_KEY"
"#;
        let config = parse(good).unwrap();
        let blob = &config.storages["blob"];
        assert_eq!(blob.azure_account.as_deref(), Some("acct"));
        assert_eq!(blob.credential_envs().collect::<Vec<_>>(), ["AZURE_KEY"]);
    }

    #[test]
    fn tls_is_read_for_an_https_cluster_and_its_files_checked() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(
            &pem,
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let not_pem = dir.path().join("key.txt");
        std::fs::write(&not_pem, "a key, not PEM").unwrap();
        let text = format!(
            r#"[clusters.a]
uri = "https://10.0.0.1:19530"
tls = {{ ca_cert = "{pem}", server_name = "milvus.example" }}
"#,
            pem = pem.display()
        );
        let config = parse(&text).unwrap();
        assert_eq!(
            config.clusters["a"].tls,
            TlsSpec {
                ca_cert: Some(pem.clone()),
                server_name: Some("milvus.example".into()),
                client_cert: None,
                client_key: None,
            }
        );

        let text = format!(
            r#"[clusters.plain]
uri = "http://10.0.0.1:19530"
tls = {{ ca_cert = "{pem}" }}

[clusters.half]
uri = "https://10.0.0.2:19530"
tls = {{ client_cert = "{pem}" }}

[clusters.files]
uri = "https://10.0.0.3:19530"
tls = {{ ca_cert = "{gone}", client_cert = "{pem}", client_key = "{not_pem}" }}
"#,
            pem = pem.display(),
            gone = dir.path().join("gone.pem").display(),
            not_pem = not_pem.display(),
        );
        let err = parse(&text).unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        let fields: Vec<&str> = shown
            .iter()
            .map(|p| p.split(": ").nth(1).unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "clusters.files.tls.ca_cert",
                "clusters.files.tls.client_key",
                "clusters.half.tls.client_key",
                "clusters.plain.tls",
            ],
            "{shown:#?}"
        );
        assert!(shown[0].contains("cannot read"), "{shown:#?}");
        assert!(shown[1].contains("holds no PEM block"), "{shown:#?}");
        assert!(
            shown[2].contains("give client_cert and client_key"),
            "{shown:#?}"
        );
        assert!(shown[3].contains("write its uri as https://"), "{shown:#?}");
    }

    #[test]
    fn every_problem_is_reported_with_its_place() {
        let text = r#"default_target = "prod-z"

[storages.s]
url = "gcs://bucket"
endpoint = "http://minio:9000"

[clusters.a]
uri = "grpc://10.0.0.1:19530"
storage = "nope"
max_import_jobs = 0
token_env = "1TOKEN"

[clusters."bad name"]
uri = "http://10.0.0.2:19530"

[clusters.c]
storage = { url = "s3://b/r" }
tokens = "x"

[backups]
root = "backup"
"#;
        let err = parse(text).unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        let path = "/etc/lockstep/lockstep.toml";
        let mut expected = vec![
            format!(
                "{path}:18:1: clusters.c.tokens: unknown field `tokens`, expected one of `uri`, `token_env`, `storage`, `max_import_jobs`, `storage_type`, `local_storage_path`, `require_staging`, `l0_import`, `tls`"
            ),
            format!(
                "{path}:4:7: storages.s.url: invalid storage URL `gcs://bucket`: expected s3://bucket/root, az://container/root, gs://bucket/root or file:///dir/root"
            ),
            format!(
                "{path}:5:12: storages.s.endpoint: endpoint `http://minio:9000` is plain http: set allow_http = true to use it"
            ),
            format!(
                "{path}:8:7: clusters.a.uri: invalid cluster URI `grpc://10.0.0.1:19530`: expected http://host:port or https://host:port"
            ),
            format!(
                "{path}:9:11: clusters.a.storage: unknown storage `nope`; expected one of: (none: the host config names no valid storage)"
            ),
            format!(
                "{path}:10:19: clusters.a.max_import_jobs: invalid value 0: expected a positive number of import jobs"
            ),
            format!(
                "{path}:11:13: clusters.a.token_env: invalid environment variable name `1TOKEN`: expected letters, digits and `_`"
            ),
            format!(
                "{path}:13:1: clusters.bad name: invalid name `bad name`: expected letters, digits, `_`, `-` or `.`"
            ),
            format!(
                "{path}:16:1: clusters.c.uri: missing field `uri`: expected the cluster's address, e.g. \"http://10.0.0.1:19530\""
            ),
            format!(
                "{path}:20:1: backups.storage: missing field `storage`: expected the name of a [storages.NAME] or a table with `url`"
            ),
            format!(
                "{path}:1:18: default_target: unknown cluster `prod-z`; expected one of: `a`, `bad name`, `c`"
            ),
        ];
        let mut shown_sorted = shown.clone();
        shown_sorted.sort();
        expected.sort();
        assert_eq!(shown_sorted, expected);
        assert!(
            err.to_string()
                .starts_with(&format!("host config {path} refused (11 problems):"))
        );
    }
}
