//! The read-only backup commands, milvus-backup's habits: `list` the backups under the host
//! config's root, `get` one, `check` one against its own meta. None of them opens the journal
//! or writes anything.

use anyhow::Context as _;

use lockstep::backup::{self, Backup, BackupLocation, catalog};
use lockstep::config::{BackupsSpec, HostConfig};
use lockstep::journal::Outcome;
use lockstep::storage::OpenedStore;

use super::output::{self, OutputFormat};

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
    anyhow::ensure!(
        backup::is_backup_name(name),
        "invalid backup name `{name}`: expected a directory name of letters, digits, `_`, `-` or `.`"
    );
    let location = BackupLocation::new(backups.storage.url.as_str(), &backups.root, name);
    backup::read(store.store.as_ref(), &location)
        .await
        .with_context(|| format!("reading backup {name}"))
}

/// `lockstep list`: every directory under the backups' root, read as a backup.
pub async fn list(host: &HostConfig, format: OutputFormat) -> anyhow::Result<i32> {
    let backups = backups(host)?;
    let store = open(backups)?;
    let listed = catalog::list(
        store.store.as_ref(),
        backups.storage.url.as_str(),
        &backups.root,
    )
    .await
    .with_context(|| format!("listing {}/{}", backups.storage.url, backups.root))?;
    output::backups(format, &listed);
    Ok(0)
}

/// `lockstep get -n NAME`: one backup, collection by collection, its rows read from its data
/// as a restore's preflight reads them, so that `get` and the restore give the same figures.
pub async fn get(host: &HostConfig, name: &str, format: OutputFormat) -> anyhow::Result<i32> {
    let backups = backups(host)?;
    let store = open(backups)?;
    let backup = read(&store, backups, name).await?;
    let (rows, counted) = catalog::read_rows(store.store.as_ref(), &backup)
        .await
        .with_context(|| format!("planning backup {name}"))?;
    let unread: Vec<String> = (counted.unreadable.iter())
        .map(|(batch, why)| format!("{batch}: {why}"))
        .chain(counted.disagreements.iter().map(ToString::to_string))
        .collect();
    output::backup(
        format,
        &backup,
        &catalog::collections(&backup, &rows),
        &unread,
    );
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
