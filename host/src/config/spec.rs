//! The host config, validated: the clusters, stores and defaults every command and job
//! stands on. What is here holds no secret a journal record or report could write down:
//! credentials are named by variable, or held as [`Secret`]s that serialize as their origin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use url::Url;

use super::etcd::JournalSpec;
use super::secret::{Secret, TokenSource};
use super::tls::TlsSpec;

/// Milvus's `dataCoord.import.maxImportJobNum` default.
pub const DEFAULT_MAX_IMPORT_JOBS: u32 = 1024;
/// milvus-backup's `backup.storage.rootPath` default.
pub const DEFAULT_BACKUP_ROOT: &str = "backup";
/// Where journal and reports go, relative to the host config's directory.
pub const DEFAULT_STATE_DIR: &str = ".lockstep";

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
    /// Requests go unsigned: a store a job described itself, which gets no credential of
    /// this host (neither the variables above, which a job cannot name, nor the instance's
    /// own, which the clients would otherwise fall back to). Left out of what is written
    /// down when off.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub anonymous: bool,
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
            anonymous: false,
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
    /// Its management API (Milvus's metrics port), where its settings are read; `None`
    /// leaves them unread.
    pub management: Option<Url>,
    /// `secondaries = "discover"`: as a target, a job that names no secondaries restores
    /// into every cluster it replicates to.
    pub discover_secondaries: bool,
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
    /// `named_ends_only`: jobs may name only this config's clusters (by name or by URI), never
    /// describe a cluster or a store of their own.
    pub named_ends_only: bool,
    /// `[journal]`: the fleet's etcd, and how it is reached.
    pub journal: JournalSpec,
    /// `max_queued`: restores `serve` and `watch` let wait for a slot beyond those running.
    pub max_queued: usize,
    /// `[retention]`; none keeps every record and report.
    pub retention: Option<Retention>,
}

/// `max_queued` when the host config sets none: a burst of requests a person or a CI
/// pipeline makes fits, a runaway client does not (each waiting restore holds its job and
/// a task; 400 requests in a second grew `serve` by 20 MB).
pub const DEFAULT_MAX_QUEUED: usize = 64;

/// `[retention]`, validated. A finished restore's record and reports are removed once it
/// ended more than `keep` ago *and* it is not among the `keep_last` newest finished
/// restores: either bound alone keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Zero when the file sets only `keep_last`.
    pub keep: std::time::Duration,
    /// Zero when the file sets only `keep`.
    pub keep_last: usize,
}

impl HostConfig {
    /// The cluster whose URI names the server `uri` does ([`same_endpoint`]), by name; `Err`
    /// with every name when more than one does. Its own URI is the one to dial: how a
    /// cluster is reached, over TLS or not, is the host config's to say.
    pub fn cluster_at(&self, uri: &Url) -> Result<Option<(&str, &ClusterSpec)>, Vec<&str>> {
        let mut found = self
            .clusters
            .iter()
            .filter(|(_, spec)| same_endpoint(spec.uri.as_str(), uri.as_str()));
        match (found.next(), found.next()) {
            (None, _) => Ok(None),
            (Some((name, spec)), None) => Ok(Some((name, spec))),
            (Some(first), Some(second)) => Err([first, second]
                .into_iter()
                .chain(found)
                .map(|(name, _)| name.as_str())
                .collect()),
        }
    }
}

/// Whether two Milvus URIs name the same server: the same host and port whatever the scheme
/// and a trailing slash, `localhost` and `127.0.0.1` taken as one, 19530 the default port (a
/// replication configuration's URIs are written so too).
pub fn same_endpoint(a: &str, b: &str) -> bool {
    match (endpoint_key(a), endpoint_key(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a.trim_end_matches('/') == b.trim_end_matches('/'),
    }
}

fn endpoint_key(uri: &str) -> Option<(String, u16)> {
    let with_scheme = if uri.contains("://") {
        uri.to_string()
    } else {
        format!("http://{uri}")
    };
    let url = Url::parse(&with_scheme).ok()?;
    let host = match url.host_str()? {
        "localhost" | "::1" | "[::1]" => "127.0.0.1".to_string(),
        h => h.to_ascii_lowercase(),
    };
    Some((host, url.port().unwrap_or(19530)))
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
            named_ends_only: false,
            journal: JournalSpec::default(),
            max_queued: DEFAULT_MAX_QUEUED,
            retention: None,
        }
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
