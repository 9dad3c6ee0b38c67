//! The host config's shapes as written, and the cluster and store tables a job file may
//! also write inline: every field optional and spanned, every struct denying unknown
//! fields, so that validation reports each problem at its place.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

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
    /// Jobs may name only this file's clusters and stores (by name, or a cluster by its
    /// URI): an inline cluster or store table, or a URI that is no cluster here, is refused.
    /// Default false.
    pub named_ends_only: Option<bool>,
    /// `[journal]`: the fleet's etcd journal, and how it is reached.
    pub journal: Option<Spanned<JournalFile>>,
    /// Restores `serve` and `watch` let wait for a slot beyond the running ones (default
    /// 64): past it a REST restore is answered 429 and a job file waits unread.
    pub max_queued: Option<Spanned<i64>>,
    /// `[retention]`: which finished restores' records and reports are removed.
    pub retention: Option<Spanned<RetentionFile>>,
}

/// `[retention]` as written: a finished restore goes once it is outside both bounds.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionFile {
    /// How long a finished restore is kept after it ended ("90d", "12h").
    pub keep: Option<Spanned<String>>,
    /// How many of the newest finished restores are kept whatever their age.
    pub keep_last: Option<Spanned<i64>>,
}

/// `[journal]` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalFile {
    /// `etcd://HOST:PORT[,HOST:PORT...]/prefix[?lease_ttl=SECONDS]`; `--journal` overrides it.
    pub etcd: Option<Spanned<String>>,
    /// TLS to every member: `https`, this CA, this client certificate and key.
    pub tls: Option<Spanned<TlsFile>>,
    /// etcd's own authentication: a user, and the variable holding its password.
    pub user: Option<Spanned<String>>,
    pub password_env: Option<Spanned<String>>,
    /// Take plain http to members that are not on loopback; default false.
    pub insecure: Option<bool>,
    /// The largest value written into etcd, in KiB (default 512); a larger record is split
    /// into parts. Keep it well under the server's `--max-request-bytes`.
    pub max_value_kib: Option<Spanned<usize>>,
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

/// A cluster's description: in the host config's `[clusters.NAME]`, or inline in a job.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// The cluster's address, `http://host:19530` (gRPC and REST share the port).
    pub uri: Option<Spanned<String>>,
    /// The environment variable holding the cluster's token (`user:password` or an API
    /// key); none means no authentication.
    pub token_env: Option<Spanned<String>>,
    /// The cluster's own object storage (Milvus's `minio`/`s3` bucket and root path):
    /// the name of a `[storages.NAME]` or an inline table.
    pub storage: Option<Spanned<StorageRef>>,
    /// The cluster's `dataCoord.import.maxImportJobNum`; default 1024.
    pub max_import_jobs: Option<Spanned<i64>>,
    /// Milvus's `common.storageType`: "minio" (any object storage; the default) or "local".
    pub storage_type: Option<Spanned<String>>,
    /// Milvus's `localStorage.path` as the server sees it, with `storage_type = "local"`;
    /// default: the directory of `storage`, for a server that sees it where lockstep does.
    pub local_storage_path: Option<Spanned<String>>,
    /// Refuse a restore with this cluster as a secondary unless lockstep can stage into
    /// its storage (it then needs `storage`); default false: it is assumed to see the
    /// target's store, with a warning.
    pub require_staging: Option<Spanned<bool>>,
    /// The cluster's `dataCoord.import.enableL0Import`: whether it imports L0 (delete-only)
    /// segments; default on before Milvus 3.0, off from 3.0 as Milvus has it.
    pub l0_import: Option<Spanned<bool>>,
    /// TLS to an `https://` cluster beyond the system's roots.
    pub tls: Option<Spanned<TlsFile>>,
    /// Milvus's management API, on its metrics port (`http://host:9091`), reached with the
    /// cluster's token and TLS: where preflight reads the replicated import gate. Without it
    /// the gate is not read (a warning says so).
    pub management: Option<Spanned<String>>,
    /// `"discover"`: a job restoring into this cluster that names no secondaries takes as
    /// its secondaries every cluster it replicates to, each a cluster of this host config.
    pub secondaries: Option<Spanned<String>>,
}

/// `tls = { ... }` of a cluster: PEM files and the certificate's name.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    /// The CA that signed the cluster's certificate (Milvus's `tls.caPemPath`).
    pub ca_cert: Option<Spanned<String>>,
    /// The name the cluster's certificate carries, when the URI's host is not it.
    pub server_name: Option<Spanned<String>>,
    /// The certificate and key lockstep presents, for `tlsMode` 2 (mutual).
    pub client_cert: Option<Spanned<String>>,
    pub client_key: Option<Spanned<String>>,
}

/// Object storage as a cluster or `[backups]` names it.
#[derive(Debug, Clone, PartialEq)]
pub enum StorageRef {
    /// The name of a `[storages.NAME]` table of the host config.
    Named(String),
    Inline(Box<StorageFile>),
}

/// An object store's description.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageFile {
    /// `s3://bucket/root` or `file:///path/root`: the bucket (or directory) and the root
    /// path within it.
    pub url: Option<Spanned<String>>,
    /// An S3-compatible endpoint such as `http://minio:9000`; default AWS.
    pub endpoint: Option<Spanned<String>>,
    pub region: Option<Spanned<String>>,
    /// Environment variables holding the credentials; none means the default chain.
    pub access_key_id_env: Option<Spanned<String>>,
    pub secret_access_key_env: Option<Spanned<String>>,
    pub session_token_env: Option<Spanned<String>>,
    /// Allow a plain-http endpoint; default false.
    pub allow_http: Option<bool>,
    /// Address the bucket by host name rather than by path; default false.
    pub virtual_hosted: Option<bool>,
    /// Azure (`az://container/root`): the storage account, and the variable holding its
    /// shared key.
    pub azure_account: Option<Spanned<String>>,
    pub azure_key_env: Option<Spanned<String>>,
    /// Google Cloud Storage (`gs://bucket/root`): a service-account key file.
    pub service_account_file: Option<Spanned<String>>,
}

/// Deserializes a string into `String`-carrying variant and a table into the struct, so
/// that the struct's own errors (unknown fields with the expected names) come through.
macro_rules! string_or_table {
    ($target:ty, $string:path, $table:ty, $inline:path, $expecting:literal) => {
        impl<'de> ::serde::Deserialize<'de> for $target {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> Result<Self, D::Error> {
                struct RefVisitor;
                impl<'de> ::serde::de::Visitor<'de> for RefVisitor {
                    type Value = $target;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: ::serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                        Ok($string(v.to_owned()))
                    }
                    fn visit_map<M: ::serde::de::MapAccess<'de>>(
                        self,
                        map: M,
                    ) -> Result<Self::Value, M::Error> {
                        <$table as ::serde::Deserialize>::deserialize(
                            ::serde::de::value::MapAccessDeserializer::new(map),
                        )
                        .map(|table| $inline(Box::new(table)))
                    }
                }
                deserializer.deserialize_any(RefVisitor)
            }
        }
    };
}

pub(crate) use string_or_table;

string_or_table!(
    StorageRef,
    StorageRef::Named,
    StorageFile,
    StorageRef::Inline,
    "a storage name or a table with `url`"
);
