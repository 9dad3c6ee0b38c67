//! A file of a backup, as a plan names it and a stage copies it.

/// One file of the backup to stage: its path under the backup directory
/// (`binlogs/insert_log/1/2/3/3/100/7`), which it keeps under the staging prefix, and its
/// size from the backup listing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BackupFile {
    pub path: String,
    pub size: u64,
    /// Where it is read from under the backup directory, when not at `path` (a snapshot
    /// bundle's file).
    #[serde(skip)]
    pub source: Option<String>,
    /// Its bytes, when lockstep wrote it rather than the backup holding it (an L0 fold's
    /// delta log, `backup::fold`): put into every destination, not copied.
    #[serde(skip)]
    pub written: Option<bytes::Bytes>,
}
