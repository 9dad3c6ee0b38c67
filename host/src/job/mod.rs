//! The restore job: one validated [`Job`], reached from a TOML job file, from
//! `lockstep restore` flags, or from a REST request body.
//!
//! Two steps, as ripgrep's `LowArgs`/`HiArgs`: each form is first mapped into a
//! [`JobFile`] (the TOML's shape, values still raw and spanned), which [`validate`]
//! turns into a `Job` (clusters resolved against the [`HostConfig`], tokens read from
//! their environment variables, durations and rules parsed, no strings left to parse).
//! Validation collects every problem before refusing, each with its file, line and
//! column (or flag, or request field), field path and what was expected. Nothing is
//! contacted and nothing is written here; whether the clusters agree with the job is the
//! engine's preflight.

mod cli;
mod diagnostic;
mod file;
mod host;
mod rest;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest as _, Sha256};
use url::Url;

use crate::backup::{BackupLocation, RestoreOptions, Strategy};

pub use cli::RestoreArgs;
pub use diagnostic::{Error, Input, Location, Problem};
pub use file::{
    Atomicity, CheckPhase, CheckSection, ClusterFile, ClusterRef, JobFile, OnError, RestoreSection,
    StorageFile, StorageRef, TwoPhaseSection,
};
pub use host::{
    BackupsFile, BackupsSpec, ClusterSpec, DEFAULT_BACKUP_ROOT, DEFAULT_MAX_IMPORT_JOBS,
    DEFAULT_STATE_DIR, HostConfig, HostConfigFile, StorageSpec,
};
pub use rest::{ResponseMode, RestRestore};

/// A validated restore job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// For people: reports, logs. Not part of [`Job::id`].
    pub name: String,
    pub backup: BackupSource,
    pub target: Target,
    pub secondaries: Vec<Secondary>,
    /// The `[restore]` options, the strategy among them.
    pub restore: RestoreOptions,
    pub two_phase: TwoPhase,
    pub checks: Vec<Check>,
    id: JobId,
}

impl Job {
    /// Reads, parses and validates the job file at `path` against `host`.
    pub fn from_file(path: &Path, host: &HostConfig) -> Result<Self, Error> {
        Self::from_file_with_env(path, host, &process_env)
    }

    /// Validates `lockstep restore` flags against `host`.
    pub fn from_cli(args: &RestoreArgs, host: &HostConfig) -> Result<Self, Error> {
        cli::job_from_args(args, host, &process_env)
    }

    /// Validates a REST restore request body (milvus-backup's `RestoreBackupRequest`
    /// plus `target`, `secondaries` and `strategy`) against `host`.
    pub fn from_rest(body: &[u8], host: &HostConfig) -> Result<RestRestore, Error> {
        rest::restore_from_body(body, host, &process_env)
    }

    pub(crate) fn from_file_with_env(
        path: &Path,
        host: &HostConfig,
        env: Env<'_>,
    ) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            input: Input::JobFile(path.to_owned()),
            source,
        })?;
        Self::from_str_with_env(&text, path, host, env)
    }

    /// Validates job file text; `path` names it in messages, gives the default name (its
    /// stem) and the directory plugin paths are relative to.
    pub(crate) fn from_str_with_env(
        text: &str,
        path: &Path,
        host: &HostConfig,
        env: Env<'_>,
    ) -> Result<Self, Error> {
        let (file, mut problems, removed) = JobFile::read(text);
        let context = validate::Context {
            host,
            env,
            default_name: path.file_stem().map(|s| s.to_string_lossy().into_owned()),
            base_dir: path.parent().map(Path::to_owned).unwrap_or_default(),
            removed: &removed,
        };
        let job = file.and_then(|file| match validate::validate(file, &context) {
            Ok(job) => Some(job),
            Err(more) => {
                problems.extend(more);
                None
            }
        });
        match job {
            Some(job) if problems.is_empty() => Ok(job),
            _ => Err(Error::Invalid {
                input: Input::JobFile(path.to_owned()),
                problems: diagnostic::locate_in_file(path, text, problems),
            }),
        }
    }

    /// The job's content identity: the SHA-256 (hex) of its canonical validated content,
    /// so the same job written differently (whitespace, comments, key order, defaults
    /// written out or left implicit) has the same id, and the journal runs it once. The name and the
    /// tokens are not part of it: renaming a job file or rotating a token does not make a
    /// finished restore run again.
    pub fn id(&self) -> &JobId {
        &self.id
    }

    pub fn strategy(&self) -> Strategy {
        self.restore.strategy
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        name: String,
        backup: BackupSource,
        target: Target,
        secondaries: Vec<Secondary>,
        restore: RestoreOptions,
        two_phase: TwoPhase,
        checks: Vec<Check>,
    ) -> Self {
        let id = JobId::of(&JobContent {
            version: JOB_CONTENT_VERSION,
            backup: &backup,
            target: &target,
            secondaries: &secondaries,
            restore: &restore,
            two_phase: &two_phase,
            checks: &checks,
        });
        Self {
            name,
            backup,
            target,
            secondaries,
            restore,
            two_phase,
            checks,
            id,
        }
    }
}

/// Bumped when `JobContent` changes shape, so that an old journal's ids are not mistaken
/// for new content.
const JOB_CONTENT_VERSION: u32 = 1;

/// The SHA-256 hex of a job's canonical content.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct JobId(String);

impl JobId {
    fn of(content: &JobContent<'_>) -> Self {
        let canonical = serde_json::to_vec(content)
            .expect("job content has string keys and no non-finite floats");
        Self(hex::encode(Sha256::digest(&canonical)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What [`Job::id`] hashes: everything but the name. Serialized as JSON, whose map keys
/// are all from `BTreeMap`s or struct fields, so the bytes are the same on every run.
#[derive(Serialize)]
struct JobContent<'a> {
    version: u32,
    backup: &'a BackupSource,
    target: &'a Target,
    secondaries: &'a [Secondary],
    restore: &'a RestoreOptions,
    two_phase: &'a TwoPhase,
    checks: &'a [Check],
}

/// Where the backup is read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackupSource {
    /// The backup's name, its directory under `root`.
    pub name: String,
    /// The store holding the backups (the host config's `[backups]`).
    pub storage: StorageSpec,
    /// The backups' directory within the store.
    pub root: String,
}

impl BackupSource {
    /// The backup's location, with paths relative to the root of `storage.url` (the store
    /// the storage module builds for that URL).
    pub fn location(&self) -> BackupLocation {
        BackupLocation::new(self.storage.url.as_str(), &self.root, &self.name)
    }
}

/// A cluster's name as lockstep reports it: its host config name, or its URI when the
/// job gave one inline.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct EndName(String);

impl EndName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EndName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A credential read from the environment; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// One Milvus cluster the restore talks to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct End {
    pub name: EndName,
    /// `http(s)://host:port`, serving gRPC and REST.
    #[serde(serialize_with = "host::serialize_url")]
    pub uri: Url,
    /// The token from the cluster's `token_env`; none when it has none.
    #[serde(skip)]
    pub token: Option<Secret>,
}

/// The cluster restored into: DDL, staging, imports and commits go here only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    pub end: End,
    /// The target's Milvus object storage, where binlogs are staged for import. A target
    /// must have one: a bare URI does not say where Milvus reads its files from.
    pub storage: StorageSpec,
    /// `dataCoord.import.maxImportJobNum`: the budget restore-level atomicity must fit.
    pub max_import_jobs: u32,
}

/// A cluster replicating the target; lockstep only reads from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Secondary {
    pub end: End,
    /// The secondary's own object storage, for checks that probe it; none when the job
    /// named the secondary by URI only.
    pub storage: Option<StorageSpec>,
}

/// `[two_phase]`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TwoPhase {
    pub mirror_grace: Duration,
    pub commit_timeout: Option<Duration>,
    pub completion_timeout: Option<Duration>,
    pub atomicity: Atomicity,
}

/// A plugin check, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The component's path, made absolute against the job file's directory.
    pub plugin: PathBuf,
    pub phase: CheckPhase,
    pub config: BTreeMap<String, String>,
    pub on_error: OnError,
    pub allow_hosts: Vec<String>,
    pub limits: CheckLimits,
}

/// What one check may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CheckLimits {
    pub memory_bytes: u64,
    /// CPU time per call.
    pub cpu: Duration,
    /// Wall-clock time per call.
    pub timeout: Duration,
    /// Total time spent waiting on the plugin's retry-after answers.
    pub max_wait: Duration,
}

/// How validation reads environment variables; tests pass their own.
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}
