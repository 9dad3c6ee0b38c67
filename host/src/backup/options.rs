//! What a restore is asked to do: the job's `[restore]` options with milvus-backup's
//! meanings, and the strategy.

use std::collections::BTreeMap;

use serde::Serialize;

use super::filter::Filter;
use super::rename::Renaming;

/// milvus-backup's `restore.maxSegmentsPerImportJob` default, which keeps a request
/// within Milvus's `dataCoord.import.maxImportFileNumPerReq`.
pub const DEFAULT_MAX_SEGMENTS_PER_JOB: usize = 256;

/// How segments reach Milvus.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// REST v2 import, up to `max_segments_per_job` segments per job; the only strategy
    /// with two-phase commit.
    #[default]
    Merged,
    /// One v1 gRPC import per segment, auto-committed; milvus-backup's default restore.
    PerSeg,
}

/// What to do about a target collection that may already exist
/// (`drop_exist_collection` / `skip_create_collection`, which exclude each other).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub enum CollectionCreation {
    /// Create the collection; refuse if it exists.
    #[default]
    Create,
    /// `drop_exist_collection`: drop it if it exists, then create it.
    DropAndCreate,
    /// `skip_create_collection`: import into the existing collection; refuse if missing.
    UseExisting,
}

/// How L0 (delete) segments are grouped into import jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub enum L0Batching {
    /// Up to `max_segments_per_job` L0 segments per job: Milvus's `MultiL0InOneJob`
    /// feature, 2.6.5 and newer (every cluster two-phase restore can target).
    #[default]
    Merged,
    /// One L0 segment per job, for Milvus older than 2.6.5.
    OnePerJob,
}

/// The job's `[restore]` options, validated, with milvus-backup's meanings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreOptions {
    /// What the job named; `None` lets preflight choose from the target's version.
    pub strategy: Option<Strategy>,
    /// Applied to the backup's own names (REST `collection_names` / `db_collections`).
    pub backup_filter: Filter,
    /// `suffix` or `rename`.
    pub renaming: Renaming,
    /// Applied to target names (`--filter`, `db_collections_after_rename`).
    pub filter: Filter,
    pub collection_creation: CollectionCreation,
    /// `meta_only`: DDL only, no data.
    pub meta_only: bool,
    /// `rebuild_index`: create the backup's indexes on the target.
    pub rebuild_index: bool,
    /// `use_auto_index`: vector indexes become AUTOINDEX with the backup's metric.
    pub use_auto_index: bool,
    /// `drop_exist_index`: drop the target collection's indexes before creating them.
    pub drop_exist_index: bool,
    /// `rbac`: restore users, roles and grants the target lacks.
    pub rbac: bool,
    /// `keep_temp_files`: keep the staged binlogs after the restore.
    pub keep_temp_files: bool,
    /// At most this many segments per import job (1..=256).
    pub max_segments_per_job: usize,
    /// `max_shard_num`: cap on a collection's shard count.
    pub max_shard_num: Option<i32>,
    /// `truncate_binlog_by_ts`: import only data up to each vchannel's checkpoint.
    pub truncate_binlog_by_ts: bool,
    /// `ezk_mapping`: old encryption-zone key → new.
    pub ezk_mapping: BTreeMap<String, String>,
    /// How far preflight checks the backup against its meta. Not part of the job's
    /// content: the same data restored under a stricter check is the same restore.
    #[serde(skip)]
    pub verify_backup: super::verify::Level,
    /// Decided by the engine from the target's version, not by the job.
    pub l0_batching: L0Batching,
}

impl Default for RestoreOptions {
    fn default() -> Self {
        Self {
            strategy: None,
            backup_filter: Filter::default(),
            renaming: Renaming::default(),
            filter: Filter::default(),
            collection_creation: CollectionCreation::default(),
            meta_only: false,
            rebuild_index: false,
            use_auto_index: false,
            drop_exist_index: false,
            verify_backup: Default::default(),
            rbac: false,
            keep_temp_files: false,
            max_segments_per_job: DEFAULT_MAX_SEGMENTS_PER_JOB,
            max_shard_num: None,
            truncate_binlog_by_ts: false,
            ezk_mapping: BTreeMap::new(),
            l0_batching: L0Batching::default(),
        }
    }
}
