//! `JobFile`: the job as written, field for field the TOML job file. CLI flags and REST
//! bodies are mapped into this same struct, so that one validation ([`super::validate`])
//! serves all three.
//!
//! Every field is optional here, values checked later are kept as `Spanned` so that a
//! problem found by validation still points at its line and column, and every struct
//! denies unknown fields.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use toml::Spanned;

use crate::backup::Strategy;
use crate::plugins::Phase;

use super::diagnostic::{Error, Input, RawProblem, locate_in_file, read_toml};

/// A restore job as written.
///
/// ```toml
/// name = "orders-2026-11-29"          # default: the file stem
/// backup = "my_backup"                # the backup's name under the host's [backups]
/// target = "prod-a"                   # a cluster of the host config, or an inline table
/// secondaries = ["prod-b", "http://10.0.0.3:19530"]
/// strategy = "merged"                 # or "per_seg"
///
/// [restore]
/// filter = "db1.orders,db2.*"
/// suffix = "_restored"
///
/// [two_phase]
/// mirror_grace = "5m"
///
/// [verify]
/// rows = "count"                      # or "off"
///
/// [[check]]
/// plugin = "plugins/storage-probe.wasm"
/// phase = "before-import"
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    /// The job's name, for people (reports, logs); defaults to the file stem. Not part
    /// of the job's identity.
    pub name: Option<Spanned<String>>,
    /// The name of the backup to restore (milvus-backup's `-n`).
    pub backup: Option<Spanned<String>>,
    /// The cluster restored into: a name from the host config, or an inline table with
    /// `uri` and `storage`. Defaults to the host config's `default_target`.
    pub target: Option<Spanned<ClusterRef>>,
    /// Clusters that replicate the target over CDC: names from the host config or
    /// `http(s)://` URIs. The restore waits until each mirrors every import job.
    #[serde(default)]
    pub secondaries: Vec<Spanned<ClusterRef>>,
    /// `merged` (default) or `per_seg`.
    pub strategy: Option<Spanned<Strategy>>,
    /// milvus-backup's restore options.
    #[serde(default)]
    pub restore: RestoreSection,
    /// Timing and scope of the two-phase commit.
    #[serde(default)]
    pub two_phase: TwoPhaseSection,
    /// What a query on every end must show once the restore committed.
    #[serde(default)]
    pub verify: VerifySection,
    /// Plugin checks, run before importing or before committing.
    #[serde(default)]
    pub check: Vec<Spanned<CheckSection>>,
}

/// A cluster as a job names it.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterRef {
    /// A cluster name from the host config, or an `http(s)://` URI.
    NameOrUri(String),
    /// A cluster described in place.
    Inline(Box<ClusterFile>),
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

/// `[restore]`: milvus-backup's restore options, with its meanings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreSection {
    /// Which collections to restore, by their names after `suffix`/`rename`:
    /// `"db1.coll1,db2.*,coll3,db4."` (milvus-backup's `--filter`). Default: all.
    pub filter: Option<Spanned<String>>,
    /// Which collections to take from the backup, by their names in the backup (REST
    /// `collection_names` / `db_collections`); same syntax. Default: all.
    pub backup_filter: Option<Spanned<String>>,
    /// Appended to every restored collection's name; letters, digits, underscore.
    pub suffix: Option<Spanned<String>>,
    /// Rename rules: `"db1.*:db2.*"`, `"db1.c1:db2.c2"`, `"c1:c2"`, `"db1.:db2."`.
    /// Excludes `suffix`.
    pub rename: Option<Spanned<Vec<Spanned<String>>>>,
    /// Drop a target collection that exists before creating it. Excludes
    /// `skip_create_collection`.
    pub drop_exist_collection: Option<Spanned<bool>>,
    /// Import into target collections that already exist instead of creating them.
    pub skip_create_collection: Option<Spanned<bool>>,
    /// Create databases, collections, partitions and indexes only; import no data.
    pub meta_only: Option<bool>,
    /// Create the backup's indexes on the restored collections.
    pub rebuild_index: Option<bool>,
    /// With `rebuild_index`: vector indexes become AUTOINDEX with the backup's metric.
    pub use_auto_index: Option<bool>,
    /// Drop the target collection's existing indexes first.
    pub drop_exist_index: Option<bool>,
    /// Restore users, roles and grants the target lacks.
    pub rbac: Option<bool>,
    /// Keep the binlogs staged into the target's storage after the restore.
    pub keep_temp_files: Option<bool>,
    /// At most this many segments per import job, 1 to 256; default 256.
    pub max_segments_per_job: Option<Spanned<i64>>,
    /// Cap a restored collection's shard count at this.
    pub max_shard_num: Option<Spanned<i64>>,
    /// Import only what each vchannel held at the backup's checkpoint (`end_ts`).
    pub truncate_binlog_by_ts: Option<bool>,
    /// Encryption-zone keys to replace: old key → new key.
    pub ezk_mapping: Option<BTreeMap<String, String>>,
    /// How far preflight checks the backup against its meta: `meta` (default: every object
    /// the meta names is there) or `data` (also every binlog decodes to the segment's rows).
    pub verify_backup: Option<crate::backup::verify::Level>,
}

/// `[two_phase]`: durations in jiff's friendly format ("30s", "5m", "1h30m").
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TwoPhaseSection {
    /// How long a secondary may lag behind the target in reaching Uncommitted before the
    /// restore gives up and aborts; default "5m".
    pub mirror_grace: Option<Spanned<String>>,
    /// The longest wait, from submitting the imports, for every job to be Uncommitted on
    /// every end; past it the restore aborts. Default: no limit.
    pub commit_timeout: Option<Spanned<String>>,
    /// The longest wait, after committing, for every job to be Completed on every end;
    /// past it the unfinished ends are reported. Default: no limit.
    pub completion_timeout: Option<Spanned<String>>,
    /// `restore` (default): nothing is committed until every job of the whole restore is
    /// Uncommitted everywhere. `collection`: each collection commits on its own.
    pub atomicity: Option<Spanned<Atomicity>>,
}

/// `[verify]`: what a query on every end must show after the commit.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifySection {
    /// `count` (default): `count(*)` of every committed collection and partition on every
    /// end, held to the live rows the backup's data holds. `sample`: that, and `sample` keys
    /// of each collection fetched from every end and compared field by field. `off`: no query.
    pub rows: Option<Spanned<VerifyRows>>,
    /// With `rows = "sample"`: how many keys of each collection; default 100.
    pub sample: Option<Spanned<InRange<1, MAX_VERIFY_SAMPLE>>>,
    /// The longest wait for one collection to load on every end; default "5m".
    pub timeout: Option<Spanned<String>>,
}

/// The most keys `[verify] sample` takes of one collection: each is fetched from every end.
pub const MAX_VERIFY_SAMPLE: u64 = 10_000;

/// How the rows a query sees are verified after the commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyRows {
    /// `count(*)` of each committed collection and partition on every end.
    #[default]
    Count,
    /// `count`, and a sample of each collection's keys compared field by field.
    Sample,
    /// No query after the commit.
    Off,
}

/// Which jobs are committed together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Atomicity {
    /// Every job of the restore, across all collections, is held Uncommitted on every end
    /// before any is committed. Needs the target's import-job budget to hold them all.
    #[default]
    Restore,
    /// Each collection's jobs are committed once that collection's are all Uncommitted.
    Collection,
}

/// `[[check]]`: a plugin check, run before the import or before the commit.
///
/// ```toml
/// [[check]]
/// plugin = "plugins/dist/approval-gate.wasm"
/// phase = "before-commit"
/// on_error = "fail"
/// max_wait_ms = 3600000
/// allow_hosts = ["http://approvals.internal:8080"]
/// config = { object = "approvals/orders.approved" }
/// [check.limits]
/// memory_mib = 64
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSection {
    /// The plugin's `.wasm` component, relative to the job file's directory.
    pub plugin: Option<Spanned<String>>,
    /// The check's name in logs and the report; default the plugin's file stem.
    pub name: Option<Spanned<String>>,
    /// `before-import` or `before-commit`.
    pub phase: Option<Spanned<Phase>>,
    /// Strings handed to the plugin as its `config`.
    pub config: Option<BTreeMap<String, String>>,
    /// What a trap, a limit hit or a timeout does; default `fail`. A `fail` verdict
    /// always stops the restore.
    pub on_error: Option<OnError>,
    /// Origins (`http://host[:port]`) the plugin's HTTP GET may reach; default none.
    pub allow_hosts: Option<Vec<Spanned<String>>>,
    /// How long `retry-after` verdicts may keep the restore waiting in total, in
    /// milliseconds, at most a week; default 0: a check that asks to wait fails.
    pub max_wait_ms: Option<InRange<0, MAX_CHECK_WAIT_MS>>,
    /// Per-call bounds.
    pub limits: Option<CheckLimitsSection>,
}

/// The longest `max_wait_ms`: a week. Longer is a typo, not an approval process.
pub const MAX_CHECK_WAIT_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// The most memory a check may be given: a check is a guard, not a workload.
pub const MAX_CHECK_MEMORY_MIB: u64 = 4 * 1024;
/// The longest CPU or wall time one call may be given: an hour.
pub const MAX_CHECK_CALL_MS: u64 = 60 * 60 * 1000;

/// `[check.limits]`: what one call of a check may use. Also the `limits` of a
/// `lockstep plugin test` context file, so the bounds are read one way in both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckLimitsSection {
    /// Linear memory the check may grow to, in MiB (1 to 4096; default 64). Growing
    /// past it fails the call with `memory limit`.
    pub memory_mib: Option<InRange<1, MAX_CHECK_MEMORY_MIB>>,
    /// CPU time one call may spend running wasm, in milliseconds (default 1000),
    /// measured in 10 ms ticks; time spent waiting in host calls is not charged.
    /// Running past it fails the call with `cpu limit`.
    pub cpu_ms: Option<InRange<1, MAX_CHECK_CALL_MS>>,
    /// Wall time one call may take, host calls included, in milliseconds (default
    /// 30000). Past it the call fails with `timeout`.
    pub wall_ms: Option<InRange<1, MAX_CHECK_CALL_MS>>,
}

/// A whole number from `MIN` to `MAX`, refused while it is read so the message
/// points at the value itself (in TOML and in JSON alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InRange<const MIN: u64, const MAX: u64>(u64);

impl<const MIN: u64, const MAX: u64> InRange<MIN, MAX> {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl<'de, const MIN: u64, const MAX: u64> Deserialize<'de> for InRange<MIN, MAX> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RangeVisitor<const MIN: u64, const MAX: u64>;
        impl<const MIN: u64, const MAX: u64> RangeVisitor<MIN, MAX> {
            fn expected() -> String {
                format!("a whole number from {MIN} to {MAX}")
            }
        }
        impl<'de, const MIN: u64, const MAX: u64> Visitor<'de> for RangeVisitor<MIN, MAX> {
            type Value = InRange<MIN, MAX>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&Self::expected())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                if (MIN..=MAX).contains(&v) {
                    Ok(InRange(v))
                } else {
                    Err(E::invalid_value(
                        de::Unexpected::Unsigned(v),
                        &Self::expected().as_str(),
                    ))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(
                        de::Unexpected::Signed(v),
                        &Self::expected().as_str(),
                    )),
                }
            }
        }
        deserializer.deserialize_u64(RangeVisitor::<MIN, MAX>)
    }
}

/// What a check that errors (traps, hits a limit, times out) does to the restore.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// The restore stops, as for a `fail` verdict.
    #[default]
    Fail,
    /// The error is logged and reported; the restore goes on.
    Warn,
}

impl JobFile {
    /// Reads and parses the job file at `path`, refusing it with every problem found.
    pub fn parse(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            input: Input::JobFile(path.to_owned()),
            source,
        })?;
        Self::parse_str(&text, path)
    }

    /// Parses job file text; `path` is where it came from, for messages.
    pub fn parse_str(text: &str, path: &Path) -> Result<Self, Error> {
        match Self::read(text) {
            (Some(file), problems, _) if problems.is_empty() => Ok(file),
            (_, problems, _) => Err(Error::Invalid {
                input: Input::JobFile(path.to_owned()),
                problems: locate_in_file(path, text, problems),
            }),
        }
    }

    /// The file as far as it could be read, every problem, and the fields removed.
    pub(crate) fn read(text: &str) -> (Option<Self>, Vec<RawProblem>, Vec<String>) {
        let read = read_toml::<Self>(text);
        (read.value, read.problems, read.removed)
    }
}

/// Deserializes a string into `String`-carrying variant and a table into the struct, so
/// that the struct's own errors (unknown fields with the expected names) come through.
macro_rules! string_or_table {
    ($target:ty, $string:path, $table:ty, $inline:path, $expecting:literal) => {
        impl<'de> Deserialize<'de> for $target {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct RefVisitor;
                impl<'de> Visitor<'de> for RefVisitor {
                    type Value = $target;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                        Ok($string(v.to_owned()))
                    }
                    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Self::Value, M::Error> {
                        <$table>::deserialize(de::value::MapAccessDeserializer::new(map))
                            .map(|table| $inline(Box::new(table)))
                    }
                }
                deserializer.deserialize_any(RefVisitor)
            }
        }
    };
}

string_or_table!(
    ClusterRef,
    ClusterRef::NameOrUri,
    ClusterFile,
    ClusterRef::Inline,
    "a cluster name, an http(s) URI, or a table with `uri`"
);
string_or_table!(
    StorageRef,
    StorageRef::Named,
    StorageFile,
    StorageRef::Inline,
    "a storage name or a table with `url`"
);
