//! `lockstep watch DIR`: every `*.toml` in the directory is a restore job; a new or changed
//! one starts its restore once its writes have settled, a deleted one cancels its restore
//! if that has not reached its decision. Job files are never moved, renamed or rewritten
//! (they usually live in git); reports go to the state directory.
//!
//! Events are only triggers (docs/milvus-facts.md §7): the debouncer's batches, and any
//! rescan after an inotify overflow, make the watcher re-list the directory and compare each
//! file's size, modification time and inode with what it saw last, so a lost or merged event
//! costs nothing and 10,000 files cost one `readdir` and 10,000 `stat`s per trigger. Only a
//! file whose stat changed is read, and only when:
//! - no write is open on it: on Linux a write event without its `close(2)` yet means a
//!   writer is still at it, however long it pauses;
//! - its stat stayed the same for [`SETTLE`], for writers whose closes are not seen (other
//!   platforms, files found at start or after an overflow).
//!
//! Names considered: `*.toml`, not starting with `.` (editors' `.#x.toml` locks, hidden temp
//! files); vim's `.x.toml.swp`, emacs' `x.toml~` and `x.toml.tmp` of an atomic rename do not
//! end in `.toml`, so a write-then-rename lands as one change of the final name.
//!
//! What a change means: the file's bytes are hashed; the same bytes change nothing. New
//! bytes are validated: a bad file gets a refusal report (file, line, column, field) and
//! changes nothing else (a typo must not abort a running restore). A valid job whose
//! identity (name + content hash) differs from the file's previous one cancels the previous
//! restore unless decided, and starts the new one once the previous one ended.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use notify::EventKind;
use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::reports;
use super::runner::{Rerun, RestoreHandle, Runner};
use crate::config::HostConfig;
use crate::engine::Interrupt;
use crate::job::Job;

/// Quiet time the debouncer waits for after a path's last event before passing its events
/// on. Editors and `cp` finish well within it; a longer pause by a writer that keeps the
/// file open is covered by the open-write rule, not by this.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

/// How long a file's size, mtime and inode must stay the same before it is read.
pub const SETTLE: Duration = Duration::from_millis(100);

/// Errors that stop the watcher.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot watch {dir}: {source}")]
    Watch {
        dir: PathBuf,
        #[source]
        source: notify::Error,
    },
    #[error("cannot list {dir}: {source}")]
    List {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How a watcher runs.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub dir: PathBuf,
}

/// Counters a benchmark and `/metrics` read.
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Directory listings done.
    pub relists: AtomicU64,
    /// Job files read (and hashed).
    pub reads: AtomicU64,
    /// Job files refused as invalid.
    pub refused: AtomicU64,
}

/// What the watcher knows about one file.
#[derive(Default)]
struct Seen {
    stat: Option<Stat>,
    /// When `stat` was first seen with its present value.
    since: Option<Instant>,
    /// The stat at the last read; equal to `stat` means nothing new.
    read_stat: Option<Stat>,
    bytes_hash: Option<[u8; 32]>,
    /// The restore the file's current valid content asks for.
    restore: Option<RestoreHandle>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    len: u64,
    mtime: Option<std::time::SystemTime>,
    inode: u64,
}

impl Stat {
    fn of(meta: &std::fs::Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt as _;
        Stat {
            len: meta.len(),
            mtime: meta.modified().ok(),
            inode: meta.ino(),
        }
    }
}

/// Watches `options.dir` until `shutdown` fires, handing jobs to `runner`.
pub async fn watch(
    options: WatchOptions,
    host: HostConfig,
    runner: Arc<Runner>,
    stats: Arc<WatchStats>,
    shutdown: Interrupt,
) -> Result<(), Error> {
    let dir = options.dir;
    let (tx, mut events) = mpsc::unbounded_channel::<DebounceEventResult>();
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        // The receiver goes only when the watcher stops.
        let _ = tx.send(result);
    })
    .map_err(|source| Error::Watch {
        dir: dir.clone(),
        source,
    })?;
    debouncer
        .watch(&dir, notify::RecursiveMode::NonRecursive)
        .map_err(|source| Error::Watch {
            dir: dir.clone(),
            source,
        })?;
    tracing::info!(dir = %dir.display(), "watching for job files");

    let mut state = DirState {
        dir,
        host,
        runner,
        stats,
        files: HashMap::new(),
        writing: HashSet::new(),
    };
    let mut wake: Option<Instant> = Some(Instant::now());
    loop {
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let triggered = shutdown
            .race(async {
                tokio::select! {
                    batch = events.recv() => batch,
                    _ = sleep => None,
                }
            })
            .await;
        let Ok(batch) = triggered else { break };
        let relist = match batch {
            Some(batch) => {
                let mut relevant = state.note(batch);
                // Take every batch already waiting: one re-list serves them all.
                while let Ok(more) = events.try_recv() {
                    relevant |= state.note(more);
                }
                relevant
            }
            // The timer of a file still settling.
            None => true,
        };
        if relist {
            wake = state.relist().await?;
        }
    }
    tracing::info!("watcher stopping");
    Ok(())
}

struct DirState {
    dir: PathBuf,
    host: HostConfig,
    runner: Arc<Runner>,
    stats: Arc<WatchStats>,
    files: HashMap<PathBuf, Seen>,
    /// Paths with a write event and no close since (Linux).
    writing: HashSet<PathBuf>,
}

/// Whether `name` can be a job file.
fn is_job_name(name: &str) -> bool {
    name.ends_with(".toml") && !name.starts_with('.') && name.len() > ".toml".len()
}

impl DirState {
    /// Updates the open-writes set from a batch of events; whether any of them can mean a
    /// change (opens and reads, the watcher's own among them, cannot).
    fn note(&mut self, batch: DebounceEventResult) -> bool {
        let events = match batch {
            Ok(events) => events,
            Err(errors) => {
                for e in errors {
                    tracing::warn!(error = %e, "watch error; re-listing");
                }
                return true;
            }
        };
        let mut relevant = false;
        for event in events {
            if event.need_rescan() {
                // Events were lost: nothing is known about open writes any more.
                self.writing.clear();
                relevant = true;
                continue;
            }
            relevant |= !matches!(
                event.kind,
                EventKind::Access(
                    AccessKind::Open(_)
                        | AccessKind::Read
                        | AccessKind::Close(AccessMode::Read | AccessMode::Execute)
                )
            );
            for path in &event.paths {
                match event.kind {
                    EventKind::Create(_)
                    | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => {
                        self.writing.insert(path.clone());
                    }
                    EventKind::Access(AccessKind::Close(AccessMode::Write))
                    | EventKind::Remove(_)
                    | EventKind::Modify(ModifyKind::Name(_)) => {
                        self.writing.remove(path);
                    }
                    _ => {}
                }
            }
        }
        // A Create without its close on a platform that never reports closes would block
        // a file forever; only Linux reports them.
        if !cfg!(target_os = "linux") {
            self.writing.clear();
        }
        relevant
    }

    /// Lists the directory, reacts to every settled change, and says when to look again
    /// for files still settling.
    async fn relist(&mut self) -> Result<Option<Instant>, Error> {
        self.stats.relists.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.clone();
        let listed = tokio::task::spawn_blocking(move || list(&dir))
            .await
            .expect("the listing task does not panic")
            .map_err(|source| Error::List {
                dir: self.dir.clone(),
                source,
            })?;
        let now = Instant::now();

        let gone: Vec<PathBuf> = self
            .files
            .keys()
            .filter(|p| !listed.contains_key(*p))
            .cloned()
            .collect();
        for path in gone {
            let seen = self.files.remove(&path).expect("listed above");
            self.writing.remove(&path);
            if let Some(handle) = seen.restore {
                tracing::info!(file = %path.display(), "job file deleted");
                self.runner.release(&handle);
            }
        }

        let mut wake: Option<Instant> = None;
        let mut ready = Vec::new();
        for (path, stat) in listed {
            let seen = self.files.entry(path.clone()).or_default();
            if seen.stat != Some(stat) {
                seen.stat = Some(stat);
                seen.since = Some(now);
            }
            if seen.read_stat == Some(stat) || self.writing.contains(&path) {
                continue;
            }
            let settled_at = seen.since.unwrap_or(now) + SETTLE;
            if settled_at > now {
                wake = Some(wake.map_or(settled_at, |w| w.min(settled_at)));
                continue;
            }
            ready.push((path, stat));
        }
        // Reading and validating thousands of files is CPU and disk work: off the
        // runtime's workers, in one blocking task.
        let host = self.host.clone();
        let read = tokio::task::spawn_blocking(move || {
            ready
                .into_iter()
                .map(|(path, stat)| {
                    let bytes = std::fs::read(&path);
                    let after = std::fs::metadata(&path).map(|m| Stat::of(&m)).ok();
                    (path, stat, bytes, after)
                })
                .collect::<Vec<_>>()
        })
        .await
        .expect("the reading task does not panic");
        let mut contents = Vec::new();
        for (path, stat, bytes, after) in read {
            let Ok(bytes) = bytes else { continue };
            let seen = self.files.get_mut(&path).expect("listed above");
            if after != Some(stat) {
                // Written while being read: settle again.
                seen.stat = after;
                seen.since = Some(now);
                let at = now + SETTLE;
                wake = Some(wake.map_or(at, |w| w.min(at)));
                continue;
            }
            self.stats.reads.fetch_add(1, Ordering::Relaxed);
            seen.read_stat = Some(stat);
            let hash: [u8; 32] = Sha256::digest(&bytes).into();
            if seen.bytes_hash == Some(hash) {
                continue;
            }
            seen.bytes_hash = Some(hash);
            contents.push((path, bytes));
        }
        let validated = tokio::task::spawn_blocking(move || {
            contents
                .into_iter()
                .map(|(path, bytes)| {
                    let job = match std::str::from_utf8(&bytes) {
                        Ok(text) => Job::from_str_with_env(text, &path, &host, &|name| {
                            std::env::var(name).ok()
                        }),
                        Err(_) => Job::from_file(&path, &host),
                    };
                    (path, bytes, job)
                })
                .collect::<Vec<_>>()
        })
        .await
        .expect("the validating task does not panic");
        for (path, bytes, job) in validated {
            self.changed(&path, &bytes, job);
        }
        Ok(wake)
    }

    fn changed(&mut self, path: &Path, bytes: &[u8], job: Result<Job, crate::job::Error>) {
        let job = match job {
            Ok(job) => job,
            Err(e) => {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(file = %path.display(), "job file refused: {e}");
                let report = reports::refused_file(path, bytes, &e);
                if let Err(e) = reports::write(self.runner.reports_dir(), &report) {
                    tracing::error!(error = %e, "could not write the refusal report");
                }
                return;
            }
        };
        let seen = self.files.get_mut(path).expect("a listed file");
        let identity = crate::journal::RestoreId::content_prefix(&job.name, job.id().as_str());
        if seen
            .restore
            .as_ref()
            .is_some_and(|h| h.identity == identity)
        {
            // Same job written differently (comments, whitespace, key order).
            return;
        }
        let mut after = Vec::new();
        if let Some(previous) = seen.restore.take() {
            tracing::info!(file = %path.display(), "job file changed: a new restore replaces the previous one");
            self.runner.release(&previous);
            after.push(previous);
        }
        tracing::info!(file = %path.display(), job = %identity, "job file ready");
        seen.restore = Some(self.runner.start(job, Rerun::Never, after));
    }
}

/// The job-file candidates in `dir` with their stats.
fn list(dir: &Path) -> std::io::Result<HashMap<PathBuf, Stat>> {
    let mut out = HashMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_job_name(name) {
            continue;
        }
        // A file deleted between readdir and stat is simply not there.
        let Ok(meta) = std::fs::metadata(entry.path()) else {
            continue;
        };
        if meta.is_file() {
            out.insert(entry.path(), Stat::of(&meta));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_final_job_names_are_considered() {
        for name in ["orders.toml", "a.b.toml"] {
            assert!(is_job_name(name), "{name}");
        }
        for name in [
            ".orders.toml.swp",
            ".#orders.toml",
            "orders.toml~",
            "orders.toml.tmp",
            ".orders.toml",
            "4913",
            ".toml",
            "orders.json",
        ] {
            assert!(!is_job_name(name), "{name}");
        }
    }
}
