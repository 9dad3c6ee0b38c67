//! The host config: the clusters and object stores a host knows, named once so that job
//! files can refer to them by name, where backups live, and where the host keeps its
//! journal and reports. It is the one place credentials come from.
//!
//! Two readers fill one model ([`HostConfig`]), chosen by the file's extension
//! ([`load`](HostConfig::load)): a `lockstep.toml`, and milvus-backup's own `backup.yaml`
//! ([`backup_yaml`]), which a `lockstep.toml` may also name as its `base`.
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
//!
//! - `file`: the tables as written, which a job file's inline cluster and store share;
//! - `validate`: a `lockstep.toml` into the model, every problem with its place;
//! - `spec`: the model;
//! - `secret`: credentials, and the environment they are read from; `tls`: the TLS files;
//! - `etcd`: where a fleet's journal is, and how etcd is reached;
//! - `load`: which reader a file takes.

pub mod backup_yaml;
mod etcd;
mod file;
mod load;
mod secret;
mod spec;
#[cfg(test)]
pub(crate) mod testing;
mod tls;
mod validate;

pub use etcd::{
    DEFAULT_LEASE_TTL, DEFAULT_VALUE_LIMIT, EtcdAccess, EtcdLocation, JournalSpec, LocationError,
    ValueLimit,
};
pub(crate) use file::string_or_table;
pub use file::{
    BackupsFile, ClusterFile, HostConfigFile, JournalFile, RetentionFile, StorageFile, StorageRef,
    TlsFile,
};
pub(crate) use secret::process_env;
pub use secret::{Env, MissingToken, Secret, TokenSource};
pub(crate) use spec::serialize_url;
pub use spec::{
    BackupsSpec, ClusterSpec, DEFAULT_BACKUP_ROOT, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_IMPORT_JOBS,
    DEFAULT_MAX_QUEUED, DEFAULT_STATE_DIR, GivenKeys, HostConfig, PathForm, RestoreDefaults,
    Retention, StorageSpec, same_endpoint,
};
pub use tls::TlsSpec;
pub use validate::read_pem;
pub(crate) use validate::{
    Author, cluster_spec, cluster_uri, is_bucket_name, is_name, names, without_userinfo,
};
