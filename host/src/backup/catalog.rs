//! The backups under a root, as milvus-backup's `list` and `get` show them: each directory
//! read as a backup and summed up from its meta. Read-only; `lockstep list`/`get` and the
//! REST `list`/`get_backup` show the same figures.

use object_store::ObjectStore;
use serde::Serialize;

use super::{Backup, BackupFormat, BackupLocation, Error, read};

/// A backup as its meta sums it up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// milvus-backup's backup id.
    pub id: String,
    pub name: String,
    pub format: BackupFormat,
    pub collections: usize,
    pub segments: usize,
    /// Rows the meta's segments say they hold, before any delete.
    pub rows: i64,
    pub size: i64,
    pub milvus_version: String,
}

impl Summary {
    pub fn of(backup: &Backup) -> Summary {
        Summary {
            id: backup.info.id.clone(),
            name: backup.files.location.name.clone(),
            format: backup.files.format,
            collections: backup.info.collection_backups.len(),
            segments: backup.info.segments().count(),
            rows: backup.info.segments().map(|(_, s)| s.num_of_rows).sum(),
            size: backup.info.size,
            milvus_version: backup.info.milvus_version.clone(),
        }
    }
}

/// A directory under the root: a backup, or why it does not read as one.
#[derive(Debug)]
pub enum Listed {
    Read(Box<Backup>),
    Unreadable { name: String, error: Error },
}

impl Listed {
    pub fn name(&self) -> &str {
        match self {
            Listed::Read(backup) => &backup.files.location.name,
            Listed::Unreadable { name, .. } => name,
        }
    }
}

/// Every directory directly under `root` of the store at `store_url`, by name, each read.
pub async fn list(
    store: &dyn ObjectStore,
    store_url: &str,
    root: &str,
) -> Result<Vec<Listed>, object_store::Error> {
    let prefix = object_store::path::Path::from(root);
    let listing = store.list_with_delimiter(Some(&prefix)).await?;
    let mut names: Vec<String> = listing
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_owned))
        .collect();
    names.sort();
    let mut listed = Vec::with_capacity(names.len());
    for name in names {
        let location = BackupLocation::new(store_url, root, &name);
        listed.push(match read(store, &location).await {
            Ok(backup) => Listed::Read(Box::new(backup)),
            Err(error) => Listed::Unreadable { name, error },
        });
    }
    Ok(listed)
}
