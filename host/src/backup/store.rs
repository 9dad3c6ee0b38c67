//! Where a backup's objects are, and reading them: the layer that loading a backup
//! ([`super::read`]) and reading a snapshot bundle ([`super::snapshot`]) both stand on.

use std::fmt;

use futures::TryStreamExt as _;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _};
use serde::de::DeserializeOwned;

use super::Error;
use crate::json_error::{json_message, json_position};

/// Where a backup keeps its binlogs, relative to the backup directory.
pub const BINLOG_DIR: &str = "binlogs";

/// Where one backup lives: `{root}/{name}/` in a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupLocation {
    /// The store's URL (e.g. `s3://backups` or `file:///srv/backups`), for messages only.
    pub store_url: String,
    /// The backup's name, the last part of its directory.
    pub name: String,
    /// `{root}/{name}` within the store.
    pub dir: Path,
}

/// Whether `name` can name a backup: it becomes one directory under the backup root, so one
/// segment of letters, digits, `_`, `-` and `.`, and nothing that walks (`.`, `..`).
pub fn is_backup_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.bytes().all(|b| b == b'.')
}

impl BackupLocation {
    /// The backup `name` under `root` (milvus-backup's `backup.storage.rootPath`, default
    /// `backup`; may be empty) in the store at `store_url`.
    pub fn new(store_url: &str, root: &str, name: &str) -> Self {
        let root = Path::from(root.trim_matches('/'));
        Self {
            store_url: store_url.trim_end_matches('/').to_owned(),
            name: name.to_owned(),
            dir: root.join(name),
        }
    }

    /// The path of `relative` (`meta/backup_meta.json`, `binlogs/...`) in the store.
    pub fn path(&self, relative: &str) -> Path {
        relative
            .split('/')
            .filter(|part| !part.is_empty())
            .fold(self.dir.clone(), |path, part| path.join(part))
    }

    /// `relative` as a URL, for messages.
    pub fn url(&self, relative: &str) -> String {
        format!("{}/{}", self.store_url, self.path(relative))
    }
}

impl fmt::Display for BackupLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/", self.store_url, self.dir)
    }
}

/// The object at `relative` in the backup; a missing one is a missing meta file.
pub(super) async fn read_bytes(
    store: &dyn ObjectStore,
    location: &BackupLocation,
    relative: &str,
) -> Result<bytes::Bytes, Error> {
    let url = location.url(relative);
    match store.get(&location.path(relative)).await {
        Ok(result) => result.bytes().await,
        Err(source) => Err(source),
    }
    .map_err(|source| match source {
        object_store::Error::NotFound { .. } => Error::MetaFileMissing { url },
        source => Error::Storage { url, source },
    })
}

pub(super) async fn read_json<T: DeserializeOwned>(
    store: &dyn ObjectStore,
    location: &BackupLocation,
    relative: &str,
) -> Result<T, Error> {
    let url = location.url(relative);
    let bytes = read_bytes(store, location, relative).await?;
    serde_json::from_slice(&bytes).map_err(|e| {
        let (line, column) = json_position(&e, &bytes);
        Error::CorruptMeta {
            url,
            line,
            column,
            message: json_message(&e),
        }
    })
}

/// Every object under `relative` in the backup: (path relative to the backup, size).
pub(super) async fn list_under(
    store: &dyn ObjectStore,
    location: &BackupLocation,
    relative: &str,
) -> Result<Vec<(String, u64)>, Error> {
    let listed: Vec<_> = store
        .list(Some(&location.path(relative)))
        .try_collect()
        .await
        .map_err(|source| Error::Storage {
            url: location.url(relative),
            source,
        })?;
    let files = listed.into_iter().filter_map(|object| {
        let parts = object.location.prefix_match(&location.dir)?;
        let relative = parts
            .map(|part| part.as_ref().to_owned())
            .collect::<Vec<_>>()
            .join("/");
        Some((relative, object.size))
    });
    Ok(files.collect())
}
