//! Object storage per end: opening each end's store from its validated
//! [`StorageSpec`](crate::config::StorageSpec), staging a backup's binlogs into the
//! destinations' stores, cleaning them up, and probes (head, paged list) for the plugin host.
//!
//! This module moves and checks bytes; it does not decide when. The engine picks the
//! import paths with [`import_paths`], calls [`stage`] before importing and [`cleanup`]
//! once every end reports Completed. Which files belong to the backup comes from
//! `backup` (the listing); which ends exist comes from `job`.
//!
//! - `open`: [`open`] a spec into an [`OpenedStore`]; [`StoreId`] for "same store" decisions.
//! - `stage`: [`stage`], [`cleanup`], [`import_paths`].
//! - `probe`: [`EndStores`] heads and pages.

mod open;
mod probe;
mod stage;
#[cfg(test)]
mod test_stores;

pub use open::{OpenedStore, StoreId, open};
pub use probe::{EndStores, ListPage};
pub use stage::{
    DEFAULT_CONCURRENCY, Destination, ImportPaths, PART_SIZE, STAGING_ROOT, StageOptions,
    StageProgress, StageSource, Staged, StagingPrefix, TempFiles, Transfer, cleanup, delete_stage,
    import_paths, stage,
};

/// Why a storage operation failed. Variants name the end (or ends sharing a store) and the
/// file, so a report says where to look.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid storage url `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("storage credential {field}: environment variable `{variable}` is not set")]
    MissingCredential {
        field: &'static str,
        variable: String,
    },
    #[error("cannot open object store `{url}`")]
    Open {
        url: String,
        #[source]
        source: object_store::Error,
    },
    #[error("cannot use local directory {dir}")]
    LocalDir {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("staging stopped before it finished")]
    Stopped,
    #[error("backup file path `{path}` is not a valid object path: {reason}")]
    InvalidFilePath { path: String, reason: String },
    #[error("staging {path} into {end}")]
    Transfer {
        end: String,
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error("flushing staged {path} on {end} to disk")]
    Sync {
        end: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("listing {prefix} on {end}")]
    List {
        end: String,
        prefix: String,
        #[source]
        source: object_store::Error,
    },
    #[error("staged file {path} is missing on {end} after the copy")]
    Missing { end: String, path: String },
    #[error("staged file {path} on {end} is {found} bytes, the backup lists {expected}")]
    SizeMismatch {
        end: String,
        path: String,
        expected: u64,
        found: u64,
    },
    #[error("deleting staged files under {prefix} on {end}")]
    Delete {
        end: String,
        prefix: String,
        #[source]
        source: object_store::Error,
    },
    #[error("no end named `{end}` in this restore")]
    UnknownEnd { end: String },
    #[error("probing {path} on {end}")]
    Probe {
        end: String,
        path: String,
        #[source]
        source: object_store::Error,
    },
}
