//! The read-only backup commands, milvus-backup's habits: `list` the backups under the host
//! config's root, `get` one, `check` one against its own meta. None of them opens the journal
//! or writes anything.

use anyhow::Context as _;
use serde::Serialize;

use lockstep::backup::{self, Backup, BackupLocation};
use lockstep::job::{BackupsSpec, HostConfig};
use lockstep::journal::Outcome;
use lockstep::storage::OpenedStore;

use super::output::{self, OutputFormat};

/// What `list` and `get` show of a backup, as its meta says.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub name: String,
    pub format: backup::BackupFormat,
    pub collections: usize,
    pub segments: usize,
    /// Rows the meta's segments say they hold (before any delete).
    pub rows: i64,
    pub size: i64,
    pub milvus_version: String,
}

impl Summary {
    fn of(backup: &Backup) -> Summary {
        Summary {
            name: backup.location.name.clone(),
            format: backup.format,
            collections: backup.info.collection_backups.len(),
            segments: backup.info.segments().count(),
            rows: backup.info.segments().map(|(_, s)| s.num_of_rows).sum(),
            size: backup.info.size,
            milvus_version: backup.info.milvus_version.clone(),
        }
    }
}

/// A backup of the listing, or why it does not read.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Listed {
    Read(Summary),
    Unreadable { name: String, error: String },
}

fn backups(host: &HostConfig) -> anyhow::Result<&BackupsSpec> {
    host.backups.as_ref().context(
        "the host config says nowhere where backups live: give `[backups]` in lockstep.toml, \
         or run with milvus-backup's backup.yaml",
    )
}

fn open(backups: &BackupsSpec) -> anyhow::Result<OpenedStore> {
    lockstep::storage::open(&backups.storage)
        .with_context(|| format!("opening the backups' storage {}", backups.storage.url))
}

async fn read(store: &OpenedStore, backups: &BackupsSpec, name: &str) -> anyhow::Result<Backup> {
    let location = BackupLocation::new(backups.storage.url.as_str(), &backups.root, name);
    backup::read(store.store.as_ref(), &location)
        .await
        .with_context(|| format!("reading backup {name}"))
}

/// `lockstep list`: every directory under the backups' root, read as a backup.
pub async fn list(host: &HostConfig, format: OutputFormat) -> anyhow::Result<i32> {
    let backups = backups(host)?;
    let store = open(backups)?;
    let root = object_store::path::Path::from(backups.root.as_str());
    let listing = store
        .store
        .list_with_delimiter(Some(&root))
        .await
        .with_context(|| format!("listing {}/{}", backups.storage.url, backups.root))?;
    let mut names: Vec<String> = listing
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_owned))
        .collect();
    names.sort();
    let mut listed = Vec::new();
    for name in names {
        listed.push(match read(&store, backups, &name).await {
            Ok(backup) => Listed::Read(Summary::of(&backup)),
            Err(e) => Listed::Unreadable {
                name,
                error: format!("{e:#}"),
            },
        });
    }
    output::backups(format, &listed);
    Ok(0)
}

/// `lockstep get -n NAME`: one backup, collection by collection.
pub async fn get(host: &HostConfig, name: &str, format: OutputFormat) -> anyhow::Result<i32> {
    let backups = backups(host)?;
    let store = open(backups)?;
    let backup = read(&store, backups, name).await?;
    output::backup(format, &Summary::of(&backup), &backup);
    Ok(0)
}

/// `lockstep check NAME`: the backup held against its own meta.
pub async fn check(
    host: &HostConfig,
    name: &str,
    level: backup::verify::Level,
    format: OutputFormat,
) -> anyhow::Result<i32> {
    let backups = backups(host)?;
    let store = open(backups)?;
    let backup = read(&store, backups, name).await?;
    let findings = backup::verify::verify(store.store.as_ref(), &backup, level, &|_| true).await;
    output::check(format, &backup, level, &findings);
    Ok(if findings.is_empty() {
        0
    } else {
        Outcome::Refused.exit_code()
    })
}
