//! The backups under a root, as milvus-backup's `list` and `get` show them: each directory
//! read as a backup and summed up in [`Figures`], from its meta (`list`) or from its data
//! too (`get`). Read-only.

use std::collections::HashMap;

use object_store::ObjectStore;
use serde::Serialize;

use super::rows::{self, Counted};
use super::{
    Backup, BackupFormat, BackupLocation, Error, Figures, L0Route, Namespace, RestoreOptions,
    Strategy, read,
};

/// A backup summed up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// milvus-backup's backup id.
    pub id: String,
    pub name: String,
    pub format: BackupFormat,
    pub collections: usize,
    #[serde(flatten)]
    pub figures: Figures,
    pub size: i64,
    pub milvus_version: String,
}

/// One collection of a backup summed up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CollectionSummary {
    pub name: String,
    pub partitions: usize,
    #[serde(flatten)]
    pub figures: Figures,
    pub size: i64,
    pub indexes: usize,
}

impl Summary {
    /// From the meta alone: no deleted or live rows.
    pub fn of(backup: &Backup) -> Summary {
        Summary::with_collections(backup, &collections(backup, &HashMap::new()))
    }

    /// The backup's collections summed.
    pub fn with_collections(backup: &Backup, collections: &[CollectionSummary]) -> Summary {
        Summary {
            id: backup.info.id.clone(),
            name: backup.files.location.name.clone(),
            format: backup.files.format,
            collections: collections.len(),
            figures: Figures::total(collections.iter().map(|c| c.figures)),
            size: backup.info.size,
            milvus_version: backup.info.milvus_version.clone(),
        }
    }
}

/// Each collection of `backup`, its rows from `read` where that has them.
pub fn collections(backup: &Backup, read: &HashMap<Namespace, Figures>) -> Vec<CollectionSummary> {
    (backup.info.collection_backups.iter())
        .map(|c| {
            let name = Namespace::new(&c.db_name, &c.collection_name);
            CollectionSummary {
                figures: (read.get(&name).copied()).unwrap_or_else(|| Figures::of_meta(c)),
                name: name.to_string(),
                partitions: c.partition_backups.len(),
                size: c.size,
                indexes: c.index_infos.len(),
            }
        })
        .collect()
}

/// Every collection's figures read from its data as a restore's preflight reads them, and
/// what could not be read. A backup that does not plan (a storage v3 segment) reads none.
pub async fn read_rows(
    store: &dyn ObjectStore,
    backup: &Backup,
) -> Result<(HashMap<Namespace, Figures>, Counted), Error> {
    let mut plan = super::plan(backup, &RestoreOptions::default(), Strategy::Merged)?;
    // Import keeps the plan's batches as they are: the rows are the same whichever way the
    // L0 deletes would go.
    let counted = rows::count(store, backup, &mut plan, L0Route::Import).await;
    let figures = (plan.collections.iter())
        .map(|c| (c.source.clone(), c.figures()))
        .collect();
    Ok((figures, counted))
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
