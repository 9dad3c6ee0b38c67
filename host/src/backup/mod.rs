//! milvus-backup's backup format: reading a backup's meta and binlog listing from any
//! object store, and planning its restore (what to create, which import batches).
//!
//! This module owns the format knowledge: the Go `encoding/json` shape of the meta files
//! ([`meta`]), the binlog path layout, milvus-backup's filter and rename rules, and its
//! batching. It contacts no Milvus and writes nothing; whether a target collection
//! exists, staging the binlogs and running the imports are the engine's and the other
//! stages' work, fed by the [`RestorePlan`] made here.

mod batch;

pub mod catalog;
pub mod figures;
mod file;
pub mod filter;
#[cfg(test)]
mod fixture;
pub mod fold;
mod from_bundle;
mod index;
pub mod meta;
pub mod namespace;
mod options;
mod plan;
mod read;
pub mod rename;
pub mod rows;
pub mod sample;
pub mod snapshot;
mod store;
pub mod verify;

pub use batch::{BatchId, BatchKind, ExpectedRows, ImportBatch};
pub use figures::{DataRows, Figures};
pub use file::BackupFile;
pub use filter::{Filter, FilterError};
pub use index::{IndexPlan, IndexedField};
pub use namespace::{DEFAULT_DB, Namespace, NamespaceError};
pub use options::{
    CollectionCreation, DEFAULT_MAX_SEGMENTS_PER_JOB, L0Batching, RestoreOptions, Strategy,
};
pub use plan::{
    CollectionConflict, CollectionPlan, L0Route, PlanTotals, RestorePlan, check_collection_exists,
    plan,
};
pub use read::{Backup, BackupFiles, BackupFormat, BinlogIndex, MetaSource, read};
pub use rename::{RenameError, RenameRule, RenameRules, Renaming};
pub use store::{BINLOG_DIR, BackupLocation, is_backup_name};

/// Why a backup could not be read or planned.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `meta/backup_meta.json` is absent: there is no backup of that name there.
    #[error("backup {name} not found at {url}")]
    NotFound { name: String, url: String },
    /// The backup exists but one of the level meta files is missing.
    #[error("backup meta file {url} is missing")]
    MetaFileMissing { url: String },
    #[error("cannot read {url}: {source}")]
    Storage {
        url: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{url} is not valid backup meta: {message} at line {line}, column {column}")]
    CorruptMeta {
        url: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A snapshot bundle's metadata or manifest that cannot be read as one.
    #[error("{url} is not a valid snapshot bundle file: {reason}")]
    CorruptBundle { url: String, reason: String },
    /// milvus#52930: backup import cannot read a StorageV3 (Loon manifest) segment.
    #[error(
        "collection {collection}: segment {segment} of the snapshot bundle is in storage version 3, which Milvus's backup import cannot read (milvus#52930); lockstep does not restore this collection"
    )]
    StorageV3Segment { collection: String, segment: i64 },
    /// A file a manifest names is not in the bundle: an import would come up short while
    /// Milvus reports success (milvus#53514).
    #[error(
        "collection {collection}: the snapshot bundle lacks {url}, which its manifest names; the backup is incomplete"
    )]
    MissingBundleFile { collection: String, url: String },
    /// Something a bundle's collection has that the reader cannot carry into a restore.
    #[error(
        "collection {collection}: the snapshot bundle has {what}, which lockstep does not restore from a snapshot bundle yet"
    )]
    UnsupportedInBundle { collection: String, what: String },
    #[error("backup {name} is in the format {format:?}, which lockstep does not know")]
    UnknownFormat { name: String, format: String },
    #[error("collections {first} and {second} of the backup would both be restored as {target}")]
    DuplicateTarget {
        target: Namespace,
        first: String,
        second: String,
    },
    #[error("collection {collection}: a field's default value cannot be decoded: {source}")]
    BadDefaultValue {
        collection: Namespace,
        #[source]
        source: meta::DefaultValueError,
    },
    #[error("collection {collection}: unknown consistency level {value}")]
    UnknownConsistencyLevel { collection: Namespace, value: i32 },
    #[error("collection {collection}: field {field} has unknown data type {data_type}")]
    UnknownDataType {
        collection: Namespace,
        field: String,
        data_type: i32,
    },
    #[error(
        "collection {collection}, partition {partition}: truncate_binlog_by_ts needs a backup with group ids, and this one has none"
    )]
    TruncateWithoutGroupIds {
        collection: Namespace,
        partition: String,
    },
    #[error(
        "collection {collection}: no channel checkpoint for vchannel {vchannel:?}, which truncate_binlog_by_ts needs"
    )]
    MissingCheckpoint {
        collection: Namespace,
        vchannel: String,
    },
    #[error(
        "collection {collection}: channel checkpoint of vchannel {vchannel} is unreadable: {reason}"
    )]
    BadCheckpoint {
        collection: Namespace,
        vchannel: String,
        reason: String,
    },
    /// The meta names binlogs the backup does not hold: an import would come up short.
    #[error(
        "collection {collection}, partition {partition}: segment {segment} holds {rows} rows by the backup meta, but the backup has no binlog under {prefix}; the backup is incomplete"
    )]
    MissingBinlogs {
        collection: Namespace,
        partition: String,
        segment: i64,
        rows: i64,
        prefix: String,
    },
}
