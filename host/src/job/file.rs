//! `JobFile`: the job as written, field for field the TOML job file. CLI flags and REST
//! bodies are mapped into this same struct, so that one validation ([`super::validate`])
//! serves all three.
//!
//! Every field is optional here, values checked later are kept as `Spanned` so that a
//! problem found by validation still points at its line and column, and every struct
//! denies unknown fields.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::backup::Strategy;
use crate::config::{ClusterFile, string_or_table};
use crate::diagnostic::{Error, InRange, Input, RawProblem, locate_in_file, read_toml};
use crate::plugins::CheckSection;

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
    /// Restore into ends that run different builds (GetVersion's strings differ), which
    /// Milvus's replicated import does not promise to handle (milvus#53544); the report
    /// says so. Default false: such a restore is refused.
    pub allow_mixed_builds: Option<bool>,
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
    /// Whether a restore some end could not be asked about (a collection Milvus will not
    /// load, an end that did not answer) ends `unverified` (exit 4) rather than succeeded;
    /// default false.
    pub required: Option<Spanned<bool>>,
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

string_or_table!(
    ClusterRef,
    ClusterRef::NameOrUri,
    ClusterFile,
    ClusterRef::Inline,
    "a cluster name, an http(s) URI, or a table with `uri`"
);
