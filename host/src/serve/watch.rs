//! `lockstep watch DIR`: every `*.toml` in the directory is a restore job; a new or changed
//! one starts its restore once its writes have settled, a deleted one cancels its restore
//! if that has not reached its decision. Job files are never moved, renamed or rewritten
//! (they usually live in git); reports go to the state directory, which lies outside the
//! watched one ([`state_dir_outside`]).
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
//! files, and a Kubernetes volume's `..data` and `..2026_12_06_...` entries); vim's
//! `.x.toml.swp`, emacs' `x.toml~` and `x.toml.tmp` of an atomic rename do not end in
//! `.toml`, so a write-then-rename lands as one change of the final name.
//!
//! What is read: whoever can write the directory decides what its names point at, so only a
//! regular file in it, or a symbolic link whose target resolves inside it, is ever opened
//! (a ConfigMap volume's `NAME -> ..data/NAME`, `..data -> ..2026_...`). The directory is
//! resolved again at each listing, so a watched path that is itself a link, or lies under
//! one (a git-sync checkout, swapped to each new commit's directory), is followed to where
//! it points now; the link's own directory is watched too, so a swap is a trigger. A link
//! that resolves elsewhere is refused, naming where it points, without being opened; and a
//! file opened is held to where the kernel says it is (`/proc/self/fd`), so a link swapped
//! between the look and the open is not read either. A file over [`MAX_JOB_FILE`] is
//! refused unread. A refusal report holds the reason, or an invalid file's located problems
//! (file, line, column, field and the message, which can quote the offending value: the
//! file is in the directory, written by whoever runs jobs there), never the file's text.
//!
//! What a change means: the file's bytes are hashed; the same bytes change nothing. New
//! bytes are validated: a bad file gets a refusal report (file, line, column, field) and
//! changes nothing else (a typo must not abort a running restore). A valid job whose
//! identity (name + content hash) differs from the file's previous one cancels the previous
//! restore unless decided, and starts the new one once the previous one ended.
//!
//! A valid job the runner has no room for (`max_queued` restores already wait) waits here,
//! validated, with a log line that says so once; it starts when a task ends, without the
//! file being read again.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read as _};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use rustix::fs::{Mode, OFlags};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::reports;
use super::runner::{Ended, QueueFull, Rerun, RestoreHandle, Runner};
use super::told::{InTheLog, Tell, Told};
use crate::config::HostConfig;
use crate::engine::Interrupt;
use crate::job::{Input, Job};
use crate::journal::{RequestedBy, RestoreId};

/// Quiet time the debouncer waits for after a path's last event before passing its events
/// on. Editors and `cp` finish well within it; a longer pause by a writer that keeps the
/// file open is covered by the open-write rule, not by this.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

/// How long a file's size, mtime and inode must stay the same before it is read.
pub const SETTLE: Duration = Duration::from_millis(100);

/// The largest job file read. A job file is a few hundred bytes; one whose `filter` or
/// `rename` names ten thousand collections is some 300 KB. A constant rather than a setting:
/// no real job comes near it, and it bounds what one name in a directory others can write
/// costs to read, hash and parse (a log dropped there by mistake, a link to a disk image).
pub const MAX_JOB_FILE: u64 = 1 << 20;

/// Errors that stop the watcher, or keep it from starting.
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
    #[error(
        "the state directory {state} lies inside the watched directory {dir}: whoever writes \
         job files there could plant journal records and reports beside them; choose a state \
         directory outside it (--state-dir, or state_dir in the host config)"
    )]
    StateInside { state: PathBuf, dir: PathBuf },
}

/// Why a job file was refused. Nothing of it runs, and nothing else changes.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error(
        "job file {file} points outside the watched directory {dir}, to {target}: not read (a \
         job file is a file in the directory, or a link to one there)"
    )]
    Outside {
        file: PathBuf,
        dir: PathBuf,
        target: PathBuf,
    },
    #[error("job file {file} is {len} bytes, over the {limit}-byte limit of a job file: not read")]
    TooLarge { file: PathBuf, len: u64, limit: u64 },
    #[error(transparent)]
    Invalid(#[from] crate::job::Error),
}

impl Refusal {
    /// The report's refusal lines: an invalid file's located problems, else the one reason.
    fn lines(&self) -> Vec<String> {
        match self {
            Refusal::Invalid(e) if !e.problems().is_empty() => {
                e.problems().iter().map(ToString::to_string).collect()
            }
            other => vec![other.to_string()],
        }
    }
}

/// How a watcher runs.
#[derive(Clone)]
pub struct WatchOptions {
    pub dir: PathBuf,
    /// Where it tells the end of each restore a job file asked for.
    pub tell: Arc<dyn Tell>,
}

impl WatchOptions {
    /// Watching `dir`, telling in the log.
    pub fn new(dir: PathBuf) -> WatchOptions {
        WatchOptions {
            dir,
            tell: Arc::new(InTheLog),
        }
    }
}

/// Counters a benchmark and `/metrics` read.
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Directory listings done.
    pub relists: AtomicU64,
    /// Job files read (and hashed).
    pub reads: AtomicU64,
    /// Job files refused: invalid, or not read at all.
    pub refused: AtomicU64,
}

/// Refuses a state directory inside the watched one (the journal's records and the reports
/// would lie where job-file authors write). Both are compared as they resolve now; a state
/// directory not made yet is resolved through its nearest existing parent.
pub fn state_dir_outside(dir: &Path, state: &Path) -> Result<(), Error> {
    let list_error = |dir: &Path| {
        let dir = dir.to_owned();
        move |source| Error::List { dir, source }
    };
    let watched = dir.canonicalize().map_err(list_error(dir))?;
    let resolved = resolve_missing(state).map_err(list_error(state))?;
    if resolved.starts_with(&watched) {
        return Err(Error::StateInside {
            state: state.to_owned(),
            dir: dir.to_owned(),
        });
    }
    Ok(())
}

/// `path` canonicalized through its nearest existing ancestor, the rest taken as written.
fn resolve_missing(path: &Path) -> io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut rest = Vec::new();
    let mut existing = absolute.as_path();
    let base = loop {
        match existing.canonicalize() {
            Ok(base) => break base,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                rest.push(existing.file_name());
                existing = existing.parent().ok_or(e)?;
            }
            Err(e) => return Err(e),
        }
    };
    let mut resolved = base;
    for part in rest.into_iter().rev() {
        match part {
            Some(name) => resolved.push(name),
            // `..` as the last part of what does not exist yet: its parent.
            None => {
                resolved.pop();
            }
        }
    }
    Ok(resolved)
}

/// What the watcher knows about one file.
#[derive(Default)]
struct Seen {
    listed: Option<Listed>,
    /// When `listed` was first seen with its present value.
    since: Option<Instant>,
    /// What was listed at the last read (or refusal); equal to `listed` means nothing new.
    read: Option<Listed>,
    bytes_hash: Option<[u8; 32]>,
    /// The restore the file's current valid content asks for.
    restore: Option<RestoreHandle>,
    /// The file's current valid content, waiting for room in the runner, and the restores
    /// it starts after.
    waiting: Option<(Job, Vec<RestoreHandle>)>,
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

/// A job-file name as listed: the stat of what it leads to, and where that is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    stat: Stat,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A regular file in the directory, at this (resolved) path.
    File(PathBuf),
    /// A link to a regular file inside the directory, resolved to this path.
    Link(PathBuf),
    /// A link that resolves outside the directory, to this path; `stat` is the link's own.
    Outside(PathBuf),
}

/// One listing: the watched directory as it resolves now, and its job-file names.
struct Listing {
    root: PathBuf,
    entries: HashMap<PathBuf, Listed>,
}

/// What reading one settled file gave.
enum Reading {
    Bytes(Vec<u8>),
    Refused(Refusal),
    /// It changed, or moved out of the directory, between the listing and the read: it
    /// settles again (with what the open found, when it found a file).
    Moved(Option<Listed>),
    /// Gone, or unreadable (logged).
    Failed,
}

/// The debouncer the watcher owns: dropping it stops the events.
type Watcher = Debouncer<RecommendedWatcher, RecommendedCache>;

/// Watches `options.dir` until `shutdown` fires, handing jobs to `runner`.
pub async fn watch(
    options: WatchOptions,
    host: HostConfig,
    runner: Arc<Runner>,
    stats: Arc<WatchStats>,
    shutdown: Interrupt,
) -> Result<(), Error> {
    let WatchOptions { dir, tell } = options;
    let (tx, mut events) = mpsc::unbounded_channel::<DebounceEventResult>();
    let watch_error = |dir: &Path| {
        let dir = dir.to_owned();
        move |source| Error::Watch { dir, source }
    };
    let mut watcher = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        // The receiver goes only when the watcher stops.
        let _ = tx.send(result);
    })
    .map_err(watch_error(&dir))?;
    let root = dir.canonicalize().map_err(|source| Error::List {
        dir: dir.clone(),
        source,
    })?;
    watcher
        .watch(&root, RecursiveMode::NonRecursive)
        .map_err(watch_error(&root))?;
    let links = links_on_the_way(&dir);
    for link in &links {
        let beside = link.parent().unwrap_or(Path::new("/"));
        watcher
            .watch(beside, RecursiveMode::NonRecursive)
            .map_err(watch_error(beside))?;
    }
    tracing::info!(dir = %dir.display(), resolved = %root.display(), "watching for job files");

    let mut state = DirState {
        dir,
        root,
        links,
        watcher,
        host,
        runner,
        stats,
        tell,
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
        let freed = state.runner.freed();
        let triggered = shutdown
            .race(async {
                tokio::select! {
                    batch = events.recv() => Wake::Events(batch),
                    _ = sleep => Wake::Settled,
                    _ = freed => Wake::Freed,
                }
            })
            .await;
        let Ok(wake_by) = triggered else { break };
        let relist = match wake_by {
            Wake::Freed => {
                state.start_waiting();
                false
            }
            Wake::Events(Some(batch)) => {
                let mut relevant = state.note(batch);
                // Take every batch already waiting: one re-list serves them all.
                while let Ok(more) = events.try_recv() {
                    relevant |= state.note(more);
                }
                relevant
            }
            // The timer of a file still settling (or the events' end, which only stops).
            Wake::Events(None) | Wake::Settled => true,
        };
        if relist {
            wake = state.relist().await?;
        }
    }
    tracing::info!("watcher stopping");
    Ok(())
}

/// What woke the watcher.
enum Wake {
    Events(Option<DebounceEventResult>),
    /// A file's settling time passed.
    Settled,
    /// A restore ended: room for a job that waits.
    Freed,
}

struct DirState {
    /// The watched path, as given: job files are named under it.
    dir: PathBuf,
    /// Where `dir` resolved at the last listing, which the notify watch is on. Watched by
    /// this path rather than `dir`, so that its own removal (git-sync deleting an old
    /// worktree) is not reported under the name of the link that replaced it, which the
    /// debouncer would then take for a link made and removed within its window.
    root: PathBuf,
    /// Symbolic links among `dir` and its ancestors (absolute): their directories are
    /// watched for the links' replacement.
    links: Vec<PathBuf>,
    watcher: Watcher,
    host: HostConfig,
    runner: Arc<Runner>,
    stats: Arc<WatchStats>,
    tell: Arc<dyn Tell>,
    files: HashMap<PathBuf, Seen>,
    /// Paths with a write event and no close since (Linux).
    writing: HashSet<PathBuf>,
}

/// Whether `name` can be a job file.
fn is_job_name(name: &str) -> bool {
    name.ends_with(".toml") && !name.starts_with('.') && name.len() > ".toml".len()
}

/// The symbolic links among `dir` and its ancestors, absolute.
fn links_on_the_way(dir: &Path) -> Vec<PathBuf> {
    let Ok(absolute) = std::path::absolute(dir) else {
        return Vec::new();
    };
    absolute
        .ancestors()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()))
        .map(Path::to_owned)
        .collect()
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
            let change = !matches!(
                event.kind,
                EventKind::Access(
                    AccessKind::Open(_)
                        | AccessKind::Read
                        | AccessKind::Close(AccessMode::Read | AccessMode::Execute)
                )
            );
            let beside_link = |p: &PathBuf| self.links.iter().any(|l| p.parent() == l.parent());
            if event.paths.iter().any(beside_link) {
                // From the directory of a link on the way: only the link's replacement
                // (a git-sync swap) matters, not its neighbours.
                relevant |= change && event.paths.iter().any(|p| self.links.contains(p));
                continue;
            }
            relevant |= change;
            // Named as the listing names them: under the watched path, not where it resolves.
            let names = event.paths.iter().filter_map(|p| {
                let name = p.strip_prefix(&self.root).ok()?;
                Some(self.dir.join(name))
            });
            for path in names {
                match event.kind {
                    EventKind::Create(_)
                    | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => {
                        self.writing.insert(path);
                    }
                    EventKind::Access(AccessKind::Close(AccessMode::Write))
                    | EventKind::Remove(_)
                    | EventKind::Modify(ModifyKind::Name(_)) => {
                        self.writing.remove(&path);
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

    /// Moves the notify watch to where the watched path resolves now, when a link on the
    /// way was swapped: the old directory's events no longer concern the job files. Whether
    /// it moved.
    fn follow(&mut self, root: &Path) -> Result<bool, Error> {
        if root == self.root {
            return Ok(false);
        }
        tracing::info!(dir = %self.dir.display(), resolved = %root.display(), "the watched directory now resolves elsewhere");
        // The old directory may be gone, and its watch with it.
        let _ = self.watcher.unwatch(&self.root);
        self.watcher
            .watch(root, RecursiveMode::NonRecursive)
            .map_err(|source| Error::Watch {
                dir: root.to_owned(),
                source,
            })?;
        // Writes open in the old directory say nothing of the new one's files.
        self.writing.clear();
        self.root = root.to_owned();
        Ok(true)
    }

    /// Lists the directory off the runtime's workers.
    async fn list(&self) -> Result<Listing, Error> {
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || list(&dir))
            .await
            .expect("the listing task does not panic")
            .map_err(|source| Error::List {
                dir: self.dir.clone(),
                source,
            })
    }

    /// Lists the directory, reacts to every settled change, and says when to look again
    /// for files still settling.
    async fn relist(&mut self) -> Result<Option<Instant>, Error> {
        self.stats.relists.fetch_add(1, Ordering::Relaxed);
        let mut listing = self.list().await?;
        if self.follow(&listing.root)? {
            // What was written there before the watch moved is seen by listing again.
            listing = self.list().await?;
        }
        let now = Instant::now();

        let gone: Vec<PathBuf> = self
            .files
            .keys()
            .filter(|p| !listing.entries.contains_key(*p))
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
        for (path, listed) in listing.entries {
            let seen = self.files.entry(path.clone()).or_default();
            if seen.listed.as_ref() != Some(&listed) {
                seen.listed = Some(listed.clone());
                seen.since = Some(now);
            }
            // A write through a link's name cannot be open: the link itself is made whole.
            let open_write = matches!(listed.kind, Kind::File(_)) && self.writing.contains(&path);
            if seen.read.as_ref() == Some(&listed) || open_write {
                continue;
            }
            let settled_at = seen.since.unwrap_or(now) + SETTLE;
            if settled_at > now {
                wake = Some(wake.map_or(settled_at, |w| w.min(settled_at)));
                continue;
            }
            ready.push((path, listed));
        }
        // Reading and validating thousands of files is CPU and disk work: off the
        // runtime's workers, in one blocking task.
        let (dir, root) = (self.dir.clone(), listing.root);
        let read = tokio::task::spawn_blocking(move || {
            ready
                .into_iter()
                .map(|(path, listed)| {
                    let reading = read(&path, &listed, &dir, &root);
                    (path, listed, reading)
                })
                .collect::<Vec<_>>()
        })
        .await
        .expect("the reading task does not panic");
        let mut contents = Vec::new();
        for (path, listed, reading) in read {
            let seen = self.files.get_mut(&path).expect("listed above");
            let bytes = match reading {
                Reading::Bytes(bytes) => bytes,
                Reading::Refused(refusal) => {
                    seen.read = Some(listed);
                    self.refuse(&path, refusal);
                    continue;
                }
                Reading::Moved(found) => {
                    seen.listed = found;
                    seen.since = Some(now);
                    let at = now + SETTLE;
                    wake = Some(wake.map_or(at, |w| w.min(at)));
                    continue;
                }
                Reading::Failed => continue,
            };
            self.stats.reads.fetch_add(1, Ordering::Relaxed);
            seen.read = Some(listed);
            let hash: [u8; 32] = Sha256::digest(&bytes).into();
            if seen.bytes_hash == Some(hash) {
                continue;
            }
            seen.bytes_hash = Some(hash);
            contents.push((path, bytes));
        }
        let host = self.host.clone();
        let validated = tokio::task::spawn_blocking(move || {
            contents
                .into_iter()
                .map(|(path, bytes)| {
                    let job = validate(&path, &bytes, &host);
                    (path, bytes, job)
                })
                .collect::<Vec<_>>()
        })
        .await
        .expect("the validating task does not panic");
        for (path, bytes, job) in validated {
            match job {
                Ok(job) => self.changed(&path, job),
                Err(e) => self.refuse_read(&path, &bytes, e.into()),
            }
        }
        Ok(wake)
    }

    /// A refusal of a file that was not read: its report's id hashes the reason, so the
    /// same link or size gives the same report.
    fn refuse(&mut self, path: &Path, refusal: Refusal) {
        let reason = refusal.to_string();
        self.refuse_read(path, reason.as_bytes(), refusal);
    }

    /// Reports `refusal` of the file at `path`, identified by `identity` (the bytes read,
    /// or the reason when none were). Nothing else changes: a bad edit must not abort a
    /// running restore.
    fn refuse_read(&mut self, path: &Path, identity: &[u8], refusal: Refusal) {
        self.stats.refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(file = %path.display(), "job file refused: {refusal}");
        let report = reports::refused_file(path, identity, refusal.lines());
        if let Err(e) = reports::write(self.runner.reports_dir(), &report) {
            tracing::error!(error = %e, "could not write the refusal report");
        }
        self.tell.tell(&Told::of(path, &report));
    }

    fn changed(&mut self, path: &Path, job: Job) {
        let seen = self.files.get_mut(path).expect("a listed file");
        let asked = |j: &Job| RestoreId::content_prefix(&j.name, j.id().as_str());
        let identity = asked(&job);
        if (seen.restore.as_ref()).is_some_and(|h| h.identity == identity)
            || (seen.waiting.as_ref()).is_some_and(|(j, _)| asked(j) == identity)
        {
            // Same job written differently (comments, whitespace, key order).
            return;
        }
        let mut after = seen
            .waiting
            .take()
            .map(|(_, after)| after)
            .unwrap_or_default();
        if let Some(previous) = seen.restore.take() {
            tracing::info!(file = %path.display(), "job file changed: a new restore replaces the previous one");
            self.runner.release(&previous);
            after.push(previous);
        }
        tracing::info!(file = %path.display(), job = %identity, "job file ready");
        if let Err(full) = self.begin(path, job, after) {
            tracing::info!(file = %path.display(), "job file waits for room: {full}");
        }
    }

    /// Starts the restore `path`'s `job` asks for, after the restores in `after`; when the
    /// runner has no room, keeps it waiting and says so.
    fn begin(&mut self, path: &Path, job: Job, after: Vec<RestoreHandle>) -> Result<(), QueueFull> {
        let seen = self.files.get_mut(path).expect("a listed file");
        // The record names the file by an absolute path, so that retention, from any
        // directory, can tell whether it is still there.
        let file = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let requested_by = RequestedBy::Watch {
            file: Some(file.display().to_string()),
        };
        let handle = match (self.runner).start_for(requested_by, &job, Rerun::Never, &after) {
            Ok(handle) => handle,
            Err(full) => {
                seen.waiting = Some((job, after));
                return Err(full);
            }
        };
        seen.restore = Some(handle.clone());
        // Told once the restore ends; one cancelled before it ran has nothing to tell.
        let (tell, file) = (Arc::clone(&self.tell), path.to_owned());
        tokio::spawn(async move {
            if let Ended::Report(report) = handle.ended().await {
                tell.tell(&Told::of(&file, &report));
            }
        });
        Ok(())
    }

    /// Starts the jobs that wait for room, in file order, while there is room.
    fn start_waiting(&mut self) {
        let mut waiting: Vec<PathBuf> = (self.files.iter())
            .filter(|(_, seen)| seen.waiting.is_some())
            .map(|(path, _)| path.clone())
            .collect();
        waiting.sort();
        for path in waiting {
            let seen = self.files.get_mut(&path).expect("listed above");
            let (job, after) = seen.waiting.take().expect("waiting, as filtered");
            if self.begin(&path, job, after).is_err() {
                break;
            }
            tracing::info!(file = %path.display(), "job file no longer waits: its restore starts");
        }
    }
}

/// The job identity the job file at `path` asks for now, if it is one the watcher would
/// read (a regular file in its directory, or a link to one there, within
/// [`MAX_JOB_FILE`]) and it is a valid job: what retention holds a watched restore's record
/// to. Nothing of the file is shown.
pub(super) fn identity_of(path: &Path, host: &HostConfig) -> Option<String> {
    let dir = path.parent()?.canonicalize().ok()?;
    let resolved = path.canonicalize().ok()?;
    let meta = std::fs::metadata(&resolved).ok()?;
    if !resolved.starts_with(&dir) || !meta.is_file() || meta.len() > MAX_JOB_FILE {
        return None;
    }
    let mut bytes = Vec::new();
    (File::open(&resolved).ok()?)
        .take(MAX_JOB_FILE)
        .read_to_end(&mut bytes)
        .ok()?;
    let job = validate(path, &bytes, host).ok()?;
    Some(RestoreId::content_prefix(&job.name, job.id().as_str()))
}

/// The job `bytes` (read from `path`) describe, validated against `host`.
fn validate(path: &Path, bytes: &[u8], host: &HostConfig) -> Result<Job, crate::job::Error> {
    let text = std::str::from_utf8(bytes).map_err(|e| crate::job::Error::Read {
        input: Input::JobFile(path.to_owned()),
        source: io::Error::new(io::ErrorKind::InvalidData, e),
    })?;
    Job::from_str_with_env(text, path, host, &|name| std::env::var(name).ok())
}

/// The job-file names in `dir` and what each leads to; links are resolved, and one that
/// leads outside the directory is listed as such, not followed further.
fn list(dir: &Path) -> io::Result<Listing> {
    let root = dir.canonicalize()?;
    let mut entries = HashMap::new();
    for entry in std::fs::read_dir(&root)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_job_name(name) {
            continue;
        }
        // A name removed between readdir and its stat is simply not there.
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        let listed = if file_type.is_symlink() {
            // A dangling link leads nowhere.
            let Ok(target) = entry.path().canonicalize() else {
                continue;
            };
            if target.starts_with(&root) {
                match std::fs::metadata(&target) {
                    Ok(meta) if meta.is_file() => Listed {
                        stat: Stat::of(&meta),
                        kind: Kind::Link(target),
                    },
                    _ => continue,
                }
            } else {
                let Ok(meta) = entry.metadata() else { continue };
                Listed {
                    stat: Stat::of(&meta),
                    kind: Kind::Outside(target),
                }
            }
        } else if file_type.is_file() {
            let Ok(meta) = entry.metadata() else { continue };
            Listed {
                stat: Stat::of(&meta),
                kind: Kind::File(entry.path()),
            }
        } else {
            continue;
        };
        entries.insert(dir.join(name), listed);
    }
    Ok(Listing { root, entries })
}

/// Reads the file `listed` found for `path`, when it is in the directory (resolved to
/// `root`) and within [`MAX_JOB_FILE`]; refuses it unread otherwise.
fn read(path: &Path, listed: &Listed, dir: &Path, root: &Path) -> Reading {
    let resolved = match &listed.kind {
        Kind::File(resolved) | Kind::Link(resolved) => resolved,
        Kind::Outside(target) => {
            return Reading::Refused(Refusal::Outside {
                file: path.to_owned(),
                dir: dir.to_owned(),
                target: target.clone(),
            });
        }
    };
    let failed = |e: io::Error| {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the job file");
        }
        Reading::Failed
    };
    // No link is followed at the last step (the listing resolved it), and a FIFO put in
    // its place does not block the open.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let mut file = match rustix::fs::open(resolved, flags | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => File::from(fd),
        // ELOOP: the last step became a link since the listing; the next one judges it.
        Err(e) if e == rustix::io::Errno::LOOP => return Reading::Moved(None),
        Err(e) => return failed(e.into()),
    };
    match where_opened(&file) {
        Ok(at) if at.starts_with(root) => {}
        // A step on the way was swapped after the listing: the next listing judges again.
        Ok(_) => return Reading::Moved(None),
        Err(e) => return failed(e),
    }
    let meta = match file.metadata() {
        Ok(meta) if meta.is_file() => meta,
        Ok(_) => return Reading::Moved(None),
        Err(e) => return failed(e),
    };
    let opened = Listed {
        stat: Stat::of(&meta),
        kind: listed.kind.clone(),
    };
    if opened != *listed {
        return Reading::Moved(Some(opened));
    }
    let too_large = |len| {
        Reading::Refused(Refusal::TooLarge {
            file: path.to_owned(),
            len,
            limit: MAX_JOB_FILE,
        })
    };
    if meta.len() > MAX_JOB_FILE {
        return too_large(meta.len());
    }
    let mut bytes = Vec::new();
    if let Err(e) = (&mut file).take(MAX_JOB_FILE + 1).read_to_end(&mut bytes) {
        return failed(e);
    }
    if bytes.len() as u64 > MAX_JOB_FILE {
        return too_large(bytes.len() as u64);
    }
    // Written while being read: settle again.
    match file.metadata() {
        Ok(after) if Stat::of(&after) == listed.stat => Reading::Bytes(bytes),
        Ok(after) => Reading::Moved(Some(Listed {
            stat: Stat::of(&after),
            kind: listed.kind.clone(),
        })),
        Err(e) => failed(e),
    }
}

/// Where the kernel says the opened `file` is: what was opened, whatever its name now
/// leads to.
fn where_opened(file: &File) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
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

    fn read_listed(dir: &Path, name: &str) -> (Listed, Reading) {
        let listing = list(dir).unwrap();
        let listed = listing.entries[&dir.join(name)].clone();
        let reading = read(&dir.join(name), &listed, dir, &listing.root);
        (listed, reading)
    }

    #[test]
    fn a_link_out_of_the_directory_is_refused_naming_its_target_and_not_read() {
        let temp = tempfile::tempdir().unwrap();
        let (jobs, outside) = (temp.path().join("jobs"), temp.path().join("outside"));
        std::fs::create_dir_all(&jobs).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.toml"), "token = \"S3CR3T\"\n").unwrap();
        std::os::unix::fs::symlink(outside.join("secret.toml"), jobs.join("direct.toml")).unwrap();
        // Relative, through a directory link: still outside once resolved.
        std::os::unix::fs::symlink("../outside", jobs.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/secret.toml", jobs.join("via.toml")).unwrap();
        let target = outside.canonicalize().unwrap().join("secret.toml");
        for name in ["direct.toml", "via.toml"] {
            let (listed, reading) = read_listed(&jobs, name);
            assert_eq!(listed.kind, Kind::Outside(target.clone()), "{name}");
            let Reading::Refused(refusal) = reading else {
                panic!("{name}: not refused");
            };
            let message = refusal.lines().join("\n");
            assert!(
                message.contains(&target.display().to_string()) && message.contains(name),
                "{message}"
            );
            assert!(!message.contains("S3CR3T"), "{message}");
        }
        assert_eq!(list(&jobs).unwrap().entries.len(), 2, "..data is no job");
    }

    #[test]
    fn a_file_over_the_limit_is_refused_unread_naming_size_and_limit() {
        let temp = tempfile::tempdir().unwrap();
        let big = vec![b'#'; MAX_JOB_FILE as usize + 1];
        std::fs::write(temp.path().join("big.toml"), &big).unwrap();
        let (_, reading) = read_listed(temp.path(), "big.toml");
        let Reading::Refused(refusal) = reading else {
            panic!("not refused");
        };
        assert!(
            matches!(refusal, Refusal::TooLarge { len, limit: MAX_JOB_FILE, .. } if len == MAX_JOB_FILE + 1)
        );
        let message = refusal.to_string();
        assert!(
            message.contains("1048577 bytes") && message.contains("1048576"),
            "{message}"
        );
    }

    /// A Kubernetes ConfigMap volume: `NAME -> ..data/NAME`, `..data -> ..TIMESTAMP`.
    #[test]
    fn links_that_resolve_inside_are_read() {
        let temp = tempfile::tempdir().unwrap();
        let jobs = temp.path();
        std::fs::create_dir(jobs.join("..2026_12_06_10_00_00.1")).unwrap();
        std::fs::write(jobs.join("..2026_12_06_10_00_00.1/a.toml"), "x = 1\n").unwrap();
        std::os::unix::fs::symlink("..2026_12_06_10_00_00.1", jobs.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/a.toml", jobs.join("a.toml")).unwrap();
        let (listed, reading) = read_listed(jobs, "a.toml");
        assert!(matches!(listed.kind, Kind::Link(_)), "{listed:?}");
        assert!(matches!(reading, Reading::Bytes(b) if b == b"x = 1\n"));
    }

    #[test]
    fn a_state_directory_inside_the_watched_one_is_refused() {
        let temp = tempfile::tempdir().unwrap();
        let jobs = temp.path().join("jobs");
        std::fs::create_dir(&jobs).unwrap();
        std::os::unix::fs::symlink(&jobs, temp.path().join("link")).unwrap();
        for inside in [
            jobs.join(".lockstep"),
            jobs.join("a/b"),
            temp.path().join("link/state"),
            temp.path().join("elsewhere/../jobs/state"),
            jobs.clone(),
        ] {
            let err = state_dir_outside(&jobs, &inside).unwrap_err();
            assert!(
                matches!(err, Error::StateInside { .. }),
                "{}: {err}",
                inside.display()
            );
            assert!(err.to_string().contains("--state-dir"), "{err}");
        }
        for outside in [temp.path().join("state"), temp.path().join("jobs-state")] {
            state_dir_outside(&jobs, &outside).expect("outside");
        }
        assert!(!jobs.join("a").exists(), "a refusal makes nothing");
    }
}
