//! Staging: copying a backup's binlogs into every destination end's store under one
//! restore-scoped prefix, so that every end imports the same paths; and removing them.
//!
//! A copy within one store is server-side (`ObjectStore::copy`: S3 CopyObject, a hard link
//! on a local directory) and moves no bytes through the host; so is one between two local
//! stores on one filesystem, a hard link as well. Otherwise the host streams: whole objects
//! up to [`PART_SIZE`], ranged reads into a multipart upload above.
//! Files already staged with the right size are skipped, so an interrupted stage resumes;
//! after copying, one listing per store verifies every size.
//!
//! When staging fails, what was copied stays under the prefix (the next run resumes from
//! it); [`cleanup`] removes it.
//!
//! One job a file: `files` (what is staged, from where to where), `paths` (the prefix and the
//! paths every end imports), `copy` (one file
//! into one destination, and whether one already there is whole), `local` (local stores:
//! listing, blocking work, durability) and `cleanup` (deleting what was staged). This file
//! drives them: [`stage`] over every file and destination, in the gate's order.

mod cleanup;
mod copy;
mod files;
mod local;
mod paths;

pub use cleanup::{TempFiles, cleanup, delete_stage};
pub use copy::PART_SIZE;
pub use files::{Destination, StageSource, Staged, StagedStore, Transfer};
pub use paths::{ImportPaths, STAGING_ROOT, StagingPrefix, import_paths};

use copy::{copy, staged_intact};
use files::{StoreGroup, group_by_store};
use local::{list_sizes, make_dirs, make_durable, stat_sizes};
use paths::join;

use std::borrow::Borrow;
use std::sync::Mutex;

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::ObjectStoreExt as _;
use object_store::path::Path;
use tokio_util::sync::CancellationToken;

use super::Error;
use super::open::OpenedStore;
use crate::backup::BackupFile;

/// Files copied at once. milvus-backup uses 128 for S3 transfers; S3 copies are
/// latency-bound, and 32 keeps a 2-core host busy. Local placements are capped lower
/// ([`LOCAL_IN_FLIGHT`]).
pub const DEFAULT_CONCURRENCY: usize = 32;
/// Links and copies on a local disk at once. They are disk-bound file-system calls on
/// blocking threads: more at once only queue in the file system and take the CPU from the
/// rest of the restore, whose DDL and creates now run beside the stage. Measured on a
/// 2-core host: 6,000 links took 2.7 s at 32 at once and 1.9 s at 8, and the DDL beside
/// them went from 0.25 s a collection to 0.02 s.
const LOCAL_IN_FLIGHT: usize = 8;
/// Files whose directories a local store makes in one blocking call, while the run before
/// them is placed.
const DIR_RUN: usize = 1024;
/// Files in the first run. Its directories are made before anything is placed, so it is
/// small, and each run after it is twice the one before, up to [`DIR_RUN`]: the first
/// batches are ready for import after a few dozen directories, not a thousand (at 100
/// collections, a first run of 1,024 files held the first import back 1.4 s, most of
/// lockstep's time over the imports').
const FIRST_DIR_RUN: usize = 16;

/// Progress of a stage, reported after each file, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageProgress {
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub files_done: u64,
    pub files_total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageOptions {
    /// Files copied at once; default [`DEFAULT_CONCURRENCY`].
    pub concurrency: usize,
    /// Whether a file bound for a local store on the backup's filesystem may be hard-linked
    /// ([`Transfer::Linked`]); default yes. Off, it is copied like any other: the copy path's
    /// own tests and benchmark turn it off, since their stores share one filesystem.
    pub hard_links: bool,
}

impl Default for StageOptions {
    fn default() -> Self {
        StageOptions {
            concurrency: DEFAULT_CONCURRENCY,
            hard_links: true,
        }
    }
}

/// Copies `files` from the backup into every destination under `prefix` and verifies them.
/// Returns how each file reached each store.
///
/// Files go in the order given, each to every destination before the next, and `ready` is
/// called with a file's index as soon as it is durable on every destination, so an import
/// can start on the first files while the rest are still copied. A placement is durable at
/// once when it is a link or a copy inside the store (no new bytes) or an S3 object (a PUT
/// that returned is durable); a copy or a write into a local store once its run is flushed,
/// which happens while the next run is placed.
/// `ready` promises durability, not the verification: only `stage` returning `Ok` does.
///
/// Once `stop` is cancelled no copy starts, those in flight finish, and the stage ends with
/// [`Error::Stopped`]: a copy abandoned mid-request could still land after the caller
/// deleted the prefix, and stay there.
///
/// Each file's two paths are made when it is copied and when it is verified, not kept for
/// the whole stage: at 200,000 files on three stores, keeping them and one record per file
/// and end held hundreds of megabytes.
#[allow(clippy::too_many_arguments)]
pub async fn stage<F: Borrow<BackupFile> + Sync>(
    source: StageSource<'_>,
    files: &[F],
    destinations: &[Destination<'_>],
    prefix: &StagingPrefix,
    options: StageOptions,
    progress: &(dyn Fn(StageProgress) + Send + Sync),
    ready: &(dyn Fn(usize) + Send + Sync),
    stop: &CancellationToken,
) -> Result<Staged, Error> {
    let from = |file: &BackupFile| {
        join(
            source.backup_dir,
            file.source.as_deref().unwrap_or(&file.path),
        )
    };
    let to = |file: &BackupFile| join(prefix.path(), &file.path);
    // A path that is not one is refused before anything is placed.
    for file in files.iter().map(F::borrow) {
        from(file)?;
        to(file)?;
    }
    let groups = group_by_store(destinations);
    // Stopped before it began, a stage touches no store, not even to make a directory.
    if stop.is_cancelled() {
        return Err(Error::Stopped);
    }

    let mut existing = Vec::with_capacity(groups.len());
    for group in &groups {
        existing.push(list_sizes(group.store, prefix.path(), &group.ends()).await?);
    }

    let file_bytes: u64 = files.iter().map(|f| f.borrow().size).sum();
    let local = tokio::sync::Semaphore::new(LOCAL_IN_FLIGHT);
    let done = Mutex::new(Tally {
        progress: StageProgress {
            bytes_done: 0,
            bytes_total: file_bytes * groups.len() as u64,
            files_done: 0,
            files_total: (files.len() * groups.len()) as u64,
        },
        not_durable: vec![groups.len(); files.len()],
    });
    progress(
        done.lock()
            .expect("progress lock is never poisoned: no panics under it")
            .progress,
    );

    let copy_one = |(g, f): (usize, usize)| {
        let (group, file) = (&groups[g], files[f].borrow());
        let (done, local, existing) = (&done, &local, &existing);
        async move {
            let (from, to) = (from(file)?, to(file)?);
            let transfer = async {
                if existing[g].get(&to) == Some(&file.size)
                    && staged_intact(source.store, group.store, &from, &to, file).await?
                {
                    return Ok(Transfer::AlreadyStaged);
                }
                if let Some(bytes) = &file.written {
                    group.store.store.put(&to, bytes.clone().into()).await?;
                    return Ok(Transfer::Written);
                }
                copy(
                    source.store,
                    group.store,
                    &from,
                    &to,
                    file.size,
                    options.hard_links,
                    local,
                )
                .await
            }
            .await
            .map_err(|source| Error::Transfer {
                end: group.ends(),
                path: file.path.clone(),
                source,
            })?;
            let durable = !awaits_flush(group.store, transfer);
            // A std Mutex: held for a few additions, released before the callbacks, never
            // across an await.
            let (snapshot, everywhere) = {
                let mut tally = done
                    .lock()
                    .expect("progress lock is never poisoned: no panics under it");
                tally.progress.bytes_done += file.size;
                tally.progress.files_done += 1;
                if durable {
                    tally.not_durable[f] -= 1;
                }
                (tally.progress, durable && tally.not_durable[f] == 0)
            };
            progress(snapshot);
            if everywhere {
                ready(f);
            }
            Ok::<_, Error>(((g, f), transfer))
        }
    };
    // File-major: the files of the first batches reach every destination first. They go a
    // run at a time, and a local store's directories are made for the next run while this
    // one is placed, on every such store at once: the first batches are placed and imported
    // while the rest's directories are made (at 10,000 collections, making all 870,000 of
    // them first held the first import back by a minute), and no set of every directory is
    // held.
    let runs = runs(files.len());
    if let Some(first) = runs.first() {
        make_dirs_of(&groups, &files[first.clone()], prefix, &to).await?;
    }
    // How each file reached each store, `g * files + f`.
    let mut transfers: Vec<Option<Transfer>> = vec![None; files.len() * groups.len()];
    // What the run before this one placed that a flush must make durable: it is flushed while
    // this run is placed, so that its batches are imported (a folded delta log is written
    // into every batch that has L0 deletes) without waiting for the whole stage.
    let mut unflushed = Unflushed::default();
    for (i, run) in runs.iter().enumerate() {
        if stop.is_cancelled() {
            break;
        }
        let tasks = run
            .clone()
            .flat_map(|f| (0..groups.len()).map(move |g| (g, f)));
        let placed = futures::stream::iter(tasks)
            .take_until(stop.cancelled())
            .map(copy_one)
            .buffer_unordered(options.concurrency.max(1))
            .try_for_each(|((g, f), transfer)| {
                transfers[g * files.len() + f] = Some(transfer);
                std::future::ready(Ok(()))
            });
        let next = async {
            match runs.get(i + 1) {
                Some(next) => make_dirs_of(&groups, &files[next.clone()], prefix, &to).await,
                None => Ok(()),
            }
        };
        let flushed = std::mem::take(&mut unflushed).flush(&groups, ready);
        let (placed, made, flushed) = tokio::join!(placed, next, flushed);
        placed?;
        made?;
        flushed?;
        unflushed = Unflushed::of_run(&groups, run.clone(), &transfers, files.len());
    }
    if stop.is_cancelled() {
        return Err(Error::Stopped);
    }
    let transfers_of = |g: usize| {
        transfers[g * files.len()..(g + 1) * files.len()]
            .iter()
            .map(|t| t.expect("every file of every store was placed or the stage failed"))
    };

    let mut staged = Staged::default();
    for (g, group) in groups.iter().enumerate() {
        match group.store.local() {
            Some(local) => check_sizes(local, &group.ends(), files, &to).await?,
            None => {
                let listed = list_sizes(group.store, prefix.path(), &group.ends()).await?;
                for file in files.iter().map(F::borrow) {
                    let to = to(file)?;
                    compare_size(&group.ends(), &to, file.size, listed.get(&to).copied())?;
                }
            }
        }
        staged.stores.push(StagedStore {
            ends: group.ends.iter().map(|end| (*end).to_owned()).collect(),
            transfers: transfers_of(g).collect(),
        });
    }
    unflushed.flush(&groups, ready).await?;
    tracing::info!(files = files.len(), stores = groups.len(), bytes = file_bytes, prefix = %prefix.path(), "staged");
    Ok(staged)
}

/// A run's placements that are durable only once flushed ([`awaits_flush`]): the stores to
/// flush, and the files to call ready then.
#[derive(Default)]
struct Unflushed {
    stores: Vec<usize>,
    files: Vec<usize>,
}

impl Unflushed {
    /// What `run` placed (`transfers`, `g * files + f`) that awaits a flush.
    fn of_run(
        groups: &[StoreGroup<'_>],
        run: std::ops::Range<usize>,
        transfers: &[Option<Transfer>],
        files: usize,
    ) -> Unflushed {
        let awaits = |g: usize, f: usize| {
            transfers[g * files + f].is_some_and(|t| awaits_flush(groups[g].store, t))
        };
        Unflushed {
            stores: (0..groups.len())
                .filter(|&g| run.clone().any(|f| awaits(g, f)))
                .collect(),
            files: run
                .filter(|&f| (0..groups.len()).any(|g| awaits(g, f)))
                .collect(),
        }
    }

    /// Flushes the stores, then tells `ready` of each file: it is now on every destination,
    /// durably.
    async fn flush(
        self,
        groups: &[StoreGroup<'_>],
        ready: &(dyn Fn(usize) + Send + Sync),
    ) -> Result<(), Error> {
        if self.stores.is_empty() {
            return Ok(());
        }
        let stores: Vec<&StoreGroup<'_>> = self.stores.iter().map(|&g| &groups[g]).collect();
        make_durable(&stores).await?;
        self.files.into_iter().for_each(ready);
        Ok(())
    }
}

/// `0..files` cut into runs: [`FIRST_DIR_RUN`] files first, then each run twice the one
/// before, up to [`DIR_RUN`].
fn runs(files: usize) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let (mut first, mut len) = (0, FIRST_DIR_RUN);
    while first < files {
        let end = (first + len).min(files);
        runs.push(first..end);
        (first, len) = (end, (len * 2).min(DIR_RUN));
    }
    runs
}

/// Makes the directories of `files` (placed at `to`) in every local store of `groups`, the
/// stores at once.
async fn make_dirs_of<F: Borrow<BackupFile>>(
    groups: &[StoreGroup<'_>],
    files: &[F],
    prefix: &StagingPrefix,
    to: &(dyn Fn(&BackupFile) -> Result<Path, Error> + Sync),
) -> Result<(), Error> {
    let mut made = Vec::new();
    for group in groups {
        let Some(local) = group.store.local() else {
            continue;
        };
        let targets: Vec<Path> = files.iter().filter_map(|f| to(f.borrow()).ok()).collect();
        made.push(async move {
            make_dirs(local, prefix.path(), targets.into_iter())
                .await
                .map_err(|source| Error::Transfer {
                    end: group.ends(),
                    path: prefix.path().to_string(),
                    source,
                })
        });
    }
    futures::future::try_join_all(made).await.map(drop)
}

/// Holds `found`, the size a store shows for `path` (`None`: it shows none), to `expected`.
fn compare_size(ends: &str, path: &Path, expected: u64, found: Option<u64>) -> Result<(), Error> {
    match found {
        None => Err(Error::Missing {
            end: ends.to_owned(),
            path: path.to_string(),
        }),
        Some(found) if found != expected => Err(Error::SizeMismatch {
            end: ends.to_owned(),
            path: path.to_string(),
            expected,
            found,
        }),
        Some(_) => Ok(()),
    }
}

/// Files a local store's check `stat`s in one blocking call: their paths are made for the
/// call and dropped after it.
const STAT_CHUNK: usize = 4096;

/// Verifies that a local store holds each of `files` at its place (`to`) with its size: one
/// `stat` a file, without walking the directories to find them.
async fn check_sizes<F: Borrow<BackupFile>>(
    local: &super::open::LocalFiles,
    ends: &str,
    files: &[F],
    to: &(dyn Fn(&BackupFile) -> Result<Path, Error> + Sync),
) -> Result<(), Error> {
    for chunk in files.chunks(STAT_CHUNK) {
        let mut keys = Vec::with_capacity(chunk.len());
        for file in chunk.iter().map(F::borrow) {
            let key = to(file)?;
            let path = local.path(&key).map_err(|source| Error::List {
                end: ends.to_owned(),
                prefix: key.to_string(),
                source,
            })?;
            keys.push((key, path, file.size));
        }
        let sizes = stat_sizes(keys.iter().map(|(_, path, _)| path.clone()).collect())
            .await
            .map_err(|source| Error::List {
                end: ends.to_owned(),
                prefix: keys
                    .first()
                    .map(|(k, ..)| k.to_string())
                    .unwrap_or_default(),
                source,
            })?;
        for ((key, _, expected), found) in keys.iter().zip(sizes) {
            compare_size(ends, key, *expected, found)?;
        }
    }
    Ok(())
}

/// Whether a file placed in `store` by `transfer` is durable only after [`make_durable`]: a
/// copy or a write into a local store, or one found there from an earlier stage (which may
/// not have reached its flush). Links and copies inside a store add no bytes, and an S3 PUT
/// that returned is durable.
fn awaits_flush(store: &OpenedStore, transfer: Transfer) -> bool {
    store.local().is_some()
        && matches!(
            transfer,
            Transfer::Streamed | Transfer::AlreadyStaged | Transfer::Written
        )
}

/// What a stage has done so far: its progress, and for each file the destinations where it
/// is not durable yet.
struct Tally {
    progress: StageProgress,
    not_durable: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;
    use std::sync::Arc;

    use object_store::{ObjectStore, PutPayload};

    use super::super::open::StoreId;
    use super::super::test_stores::{local, s3_server, unique_bucket};
    use super::*;
    use crate::journal::RestoreId;

    const BACKUP_DIR: &str = "backup/nightly";

    /// Deterministic content for a file of `size` bytes.
    fn content(path: &str, size: u64) -> Vec<u8> {
        let seed = path
            .bytes()
            .fold(7u8, |acc, b| acc.wrapping_mul(31).wrapping_add(b));
        (0..size)
            .map(|i| seed.wrapping_add((i % 251) as u8))
            .collect()
    }

    /// Writes a small backup into `store` and returns its listing. Its last file is kept
    /// elsewhere than it is staged to, as a snapshot bundle's files are.
    async fn write_backup(store: &OpenedStore, sizes: &[u64]) -> Vec<BackupFile> {
        let mut files = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let path = format!("binlogs/insert_log/1/2/{i}/{i}/100/{}", 1000 + i);
            let key = join(&Path::from(BACKUP_DIR), &path).expect("valid path");
            store
                .store
                .put(&key, PutPayload::from(content(&path, size)))
                .await
                .expect("put");
            files.push(BackupFile {
                path,
                size,
                source: None,
                written: None,
            });
        }
        let bundled = "bundle/exports/u/files/delta_log/1/-1/9/9001";
        files.push(BackupFile {
            path: "binlogs/delta_log/1/-1/9/9001".into(),
            size: 48,
            source: Some(bundled.into()),
            written: None,
        });
        let key = join(&Path::from(BACKUP_DIR), bundled).expect("valid path");
        store
            .store
            .put(
                &key,
                PutPayload::from(content("binlogs/delta_log/1/-1/9/9001", 48)),
            )
            .await
            .expect("put");
        files
    }

    fn prefix(id: &str) -> StagingPrefix {
        StagingPrefix::for_restore(RestoreId::new(id, "ab", 1).as_str())
    }

    fn source(store: &OpenedStore) -> StageSource<'_> {
        static DIR: std::sync::LazyLock<Path> = std::sync::LazyLock::new(|| Path::from(BACKUP_DIR));
        StageSource {
            store,
            backup_dir: &DIR,
        }
    }

    /// Stages, copying rather than linking between local stores (the tests' stores share
    /// one filesystem), and records every progress report.
    async fn stage_recording(
        from: &OpenedStore,
        files: &[BackupFile],
        destinations: &[Destination<'_>],
        prefix: &StagingPrefix,
    ) -> (Result<Staged, Error>, Vec<StageProgress>) {
        let copies = StageOptions {
            concurrency: 4,
            hard_links: false,
        };
        stage_with(from, files, destinations, prefix, copies).await
    }

    async fn stage_with(
        from: &OpenedStore,
        files: &[BackupFile],
        destinations: &[Destination<'_>],
        prefix: &StagingPrefix,
        options: StageOptions,
    ) -> (Result<Staged, Error>, Vec<StageProgress>) {
        let (result, events) = stage_timeline(from, files, destinations, prefix, options).await;
        let reports = events
            .into_iter()
            .filter_map(|e| match e {
                Event::Progress(p) => Some(p),
                Event::Ready(_) => None,
            })
            .collect();
        (result, reports)
    }

    /// What a stage reported, in the order it reported it.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Event {
        Progress(StageProgress),
        Ready(usize),
    }

    async fn stage_timeline(
        from: &OpenedStore,
        files: &[BackupFile],
        destinations: &[Destination<'_>],
        prefix: &StagingPrefix,
        options: StageOptions,
    ) -> (Result<Staged, Error>, Vec<Event>) {
        let events = Mutex::new(Vec::new());
        let push = |e: Event| events.lock().expect("no panic under the lock").push(e);
        let result = stage(
            source(from),
            files,
            destinations,
            prefix,
            options,
            &|p| push(Event::Progress(p)),
            &|f| push(Event::Ready(f)),
            &CancellationToken::new(),
        )
        .await;
        (
            result,
            events.into_inner().expect("no panic under the lock"),
        )
    }

    async fn assert_staged_content(
        store: &OpenedStore,
        prefix: &StagingPrefix,
        files: &[BackupFile],
    ) {
        for file in files {
            let key = join(prefix.path(), &file.path).expect("valid path");
            let bytes = store
                .store
                .get(&key)
                .await
                .expect("staged file")
                .bytes()
                .await
                .expect("read");
            assert!(
                bytes == content(&file.path, file.size),
                "{key} differs from the backup's file"
            );
        }
    }

    /// A target and its secondary `s1`, each with a store of its own.
    fn target_and_s1<'a>(target: &'a OpenedStore, s1: &'a OpenedStore) -> [Destination<'a>; 2] {
        [
            Destination {
                end: "target",
                store: target,
            },
            Destination {
                end: "s1",
                store: s1,
            },
        ]
    }

    fn transfers(staged: &Staged, end: &str) -> BTreeSet<Transfer> {
        let store = staged
            .stores
            .iter()
            .find(|s| s.ends.iter().any(|e| e == end));
        store
            .expect("staged into")
            .transfers
            .iter()
            .copied()
            .collect()
    }

    /// Files placed, counted once per end.
    fn placed(staged: &Staged) -> u64 {
        (staged.stores.iter())
            .map(|s| (s.ends.len() * s.transfers.len()) as u64)
            .sum()
    }

    #[tokio::test]
    async fn a_stopped_stage_starts_no_copy_and_says_it_stopped() {
        let (a, b) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let backup = local(a.path());
        let target = local(b.path());
        let files = write_backup(&backup, &[10, 20]).await;
        let stop = CancellationToken::new();
        stop.cancel();
        let result = stage(
            source(&backup),
            &files,
            &[Destination {
                end: "target",
                store: &target,
            }],
            &prefix("r0"),
            StageOptions::default(),
            &|_| {},
            &|_| {},
            &stop,
        )
        .await;
        assert!(matches!(result, Err(Error::Stopped)), "{result:?}");
        assert!(
            !b.path().join(STAGING_ROOT).exists(),
            "nothing was copied once stopped"
        );
    }

    #[tokio::test]
    async fn copies_between_local_stores_and_reports_progress() {
        let (a, b) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let backup = local(a.path());
        let target = local(b.path());
        let files = write_backup(&backup, &[10, 0, PART_SIZE * 2 + 5]).await;
        let prefix = prefix("r1");

        let (staged, reports) = stage_recording(
            &backup,
            &files,
            &[Destination {
                end: "target",
                store: &target,
            }],
            &prefix,
        )
        .await;
        let staged = staged.expect("stage");

        assert_eq!(placed(&staged), files.len() as u64);
        assert_eq!(
            transfers(&staged, "target"),
            BTreeSet::from([Transfer::Streamed])
        );
        assert_staged_content(&target, &prefix, &files).await;
        let total: u64 = files.iter().map(|f| f.size).sum();
        assert_eq!(
            reports.first().map(|p| (p.bytes_done, p.files_done)),
            Some((0, 0))
        );
        assert_eq!(
            reports.last(),
            Some(&StageProgress {
                bytes_done: total,
                bytes_total: total,
                files_done: 4,
                files_total: 4
            })
        );
        assert!(
            reports
                .windows(2)
                .all(|w| w[0].bytes_done <= w[1].bytes_done)
        );
        assert!(
            b.path()
                .join("lockstep-staging/r1.ab.1/binlogs/delta_log/1/-1/9/9001")
                .is_file()
        );
        let leftovers = partial_files(b.path());
        assert!(leftovers.is_empty(), "partial copies left: {leftovers:?}");
    }

    /// The part-written `#` files under `dir`.
    fn partial_files(dir: &std::path::Path) -> Vec<PathBuf> {
        walk(dir)
            .into_iter()
            .filter(|p| p.to_string_lossy().contains('#'))
            .collect()
    }

    /// Every file under `dir`, recursively.
    fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                files.extend(walk(&path));
            } else {
                files.push(path);
            }
        }
        files
    }

    /// A local store's listing, walked by the stage itself, names each object as the store's
    /// own listing does: a name that holds `%` or `#` as it stands, part-written copies left
    /// out.
    #[tokio::test]
    async fn a_local_listing_names_objects_as_the_store_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = local(dir.path());
        for (path, bytes) in [
            (Path::from("odd/per%cent"), 1),
            (Path::from("odd/hash#tag"), 2),
            (Path::parse("odd/raw#tag/x#1y").expect("a path"), 3),
            (Path::from("odd/1/2"), 4),
        ] {
            let payload = PutPayload::from(vec![0; bytes]);
            store.store.put(&path, payload).await.expect("put");
        }
        std::fs::write(dir.path().join("odd/1/2#1"), b"partial").expect("write");
        let prefix = Path::from("odd");
        let walked = list_sizes(&store, &prefix, "target").await.expect("listed");
        let listed: std::collections::HashMap<Path, u64> = (store.store.list(Some(&prefix)))
            .map_ok(|meta| (meta.location, meta.size))
            .try_collect()
            .await
            .expect("listed");
        assert_eq!(walked, listed);
        assert_eq!(walked.len(), 4, "{walked:?}");
    }

    #[tokio::test]
    async fn streams_large_files_into_a_remote_store_in_parts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let backup = local(dir.path());
        let target = OpenedStore::in_memory("memory");
        let files = write_backup(&backup, &[10, PART_SIZE * 2 + 5]).await;
        let prefix = prefix("r1m");

        let (staged, _) = stage_recording(
            &backup,
            &files,
            &[Destination {
                end: "target",
                store: &target,
            }],
            &prefix,
        )
        .await;

        assert_eq!(
            transfers(&staged.expect("stage"), "target"),
            BTreeSet::from([Transfer::Streamed])
        );
        assert_staged_content(&target, &prefix, &files).await;
    }

    #[tokio::test]
    async fn copies_server_side_within_one_store() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let backup = local(dir.path());
        // The target names the same directory another way: it is the same store.
        let links = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(dir.path(), links.path().join("store")).expect("symlink");
        let target = local(&links.path().join("store"));
        assert_eq!(backup.id, target.id);
        let files = write_backup(&backup, &[100, 200]).await;
        let prefix = prefix("r2");

        let (staged, _) = stage_recording(
            &backup,
            &files,
            &[Destination {
                end: "target",
                store: &target,
            }],
            &prefix,
        )
        .await;
        let staged = staged.expect("stage");

        assert_eq!(
            transfers(&staged, "target"),
            BTreeSet::from([Transfer::ServerSideCopy])
        );
        assert_staged_content(&target, &prefix, &files).await;
        // A local server-side copy is a hard link: the bytes exist once.
        let original =
            std::fs::metadata(dir.path().join(BACKUP_DIR).join(&files[0].path)).expect("stat");
        let copy = std::fs::metadata(
            dir.path()
                .join("lockstep-staging/r2.ab.1")
                .join(&files[0].path),
        )
        .expect("stat");
        assert_eq!(original.ino(), copy.ino());
    }

    /// One file at a time, so the order of the reports is the order of the work.
    const ONE_AT_A_TIME: StageOptions = StageOptions {
        concurrency: 1,
        hard_links: true,
    };

    /// Which files a timeline reported ready, and how many files were placed before each.
    fn readies(events: &[Event]) -> Vec<(usize, u64)> {
        let mut placed = 0;
        let mut out = Vec::new();
        for event in events {
            match event {
                Event::Progress(p) => placed = p.files_done,
                Event::Ready(f) => out.push((*f, placed)),
            }
        }
        out
    }

    #[tokio::test]
    async fn a_linked_file_is_ready_once_it_is_on_every_destination_and_a_copied_one_after_the_flush()
     {
        let (a, b, c) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let backup = local(a.path());
        let (target, secondary) = (local(b.path()), local(c.path()));
        let files = write_backup(&backup, &[10, 20, 30]).await;
        let destinations = target_and_s1(&target, &secondary);

        // Linked: file f is ready right after its second placement (one per store), before
        // the next file starts.
        let (staged, events) = stage_timeline(
            &backup,
            &files,
            &destinations,
            &prefix("ready-l"),
            ONE_AT_A_TIME,
        )
        .await;
        staged.expect("linked stage");
        let expected: Vec<(usize, u64)> =
            (0..files.len()).map(|f| (f, 2 * (f as u64 + 1))).collect();
        assert_eq!(readies(&events), expected);

        // Copied: nothing is ready before every copy is placed and flushed.
        let copies = StageOptions {
            hard_links: false,
            ..ONE_AT_A_TIME
        };
        let (staged, events) =
            stage_timeline(&backup, &files, &destinations, &prefix("ready-c"), copies).await;
        staged.expect("copied stage");
        let all = 2 * files.len() as u64;
        let expected: Vec<(usize, u64)> = (0..files.len()).map(|f| (f, all)).collect();
        assert_eq!(readies(&events), expected);
        assert!(
            matches!(events.last(), Some(Event::Ready(_))),
            "the copies' readiness comes last, after the flush: {events:?}"
        );
    }

    /// A file lockstep writes (a folded L0 delta log) awaits a flush, as a copy does; it is
    /// flushed with its run, so the batch it belongs to is imported before the stage's last
    /// run is placed, not after the whole stage.
    #[tokio::test]
    async fn a_written_file_is_ready_once_its_run_is_flushed_before_the_last_run_is_placed() {
        let dirs: Vec<_> = (0..3)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let backup = local(dirs[0].path());
        let (target, secondary) = (local(dirs[1].path()), local(dirs[2].path()));
        // Three runs: 16 files, 32, and the rest. The first is written, the others linked.
        let mut files = write_backup(&backup, &[1; 3 * FIRST_DIR_RUN]).await;
        let bytes = bytes::Bytes::from_static(b"folded deletes");
        files[0] = BackupFile {
            path: "binlogs/delta_log/1/2/0/0/9999".into(),
            size: bytes.len() as u64,
            source: None,
            written: Some(bytes),
        };
        let destinations = target_and_s1(&target, &secondary);
        let (staged, events) = stage_timeline(
            &backup,
            &files,
            &destinations,
            &prefix("written"),
            StageOptions::default(),
        )
        .await;
        let staged = staged.expect("stage");
        assert_eq!(
            transfers(&staged, "target"),
            BTreeSet::from([Transfer::Written, Transfer::Linked])
        );
        let first = readies(&events).into_iter().find(|(f, _)| *f == 0);
        let two_runs = 2 * 3 * FIRST_DIR_RUN as u64;
        assert!(
            first.is_some_and(|(_, placed)| placed <= two_runs),
            "the written file was ready after {first:?} placements, of {}",
            2 * files.len()
        );
        assert_staged_content(&target, &prefix("written"), &files[1..]).await;
    }

    #[tokio::test]
    async fn links_between_local_stores_on_one_filesystem_and_cleanup_keeps_the_backup() {
        use std::os::unix::fs::MetadataExt as _;
        let (a, b) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let backup = local(a.path());
        let target = local(b.path());
        assert_ne!(backup.id, target.id);
        let files = write_backup(&backup, &[100, 0, 300]).await;
        let prefix = prefix("r2l");
        let destinations = [Destination {
            end: "target",
            store: &target,
        }];

        let stage_linking = || {
            stage_with(
                &backup,
                &files,
                &destinations,
                &prefix,
                StageOptions::default(),
            )
        };

        assert_eq!(
            transfers(&stage_linking().await.0.expect("stage"), "target"),
            BTreeSet::from([Transfer::Linked])
        );
        assert_staged_content(&target, &prefix, &files).await;
        let original = std::fs::metadata(a.path().join(BACKUP_DIR).join(&files[0].path))
            .expect("stat backup file");
        let linked = std::fs::metadata(
            b.path()
                .join("lockstep-staging/r2l.ab.1")
                .join(&files[0].path),
        )
        .expect("stat staged file");
        assert_eq!(original.ino(), linked.ino(), "the bytes exist once");
        let leftovers = partial_files(b.path());
        assert!(leftovers.is_empty(), "partial links left: {leftovers:?}");

        assert_eq!(
            transfers(&stage_linking().await.0.expect("resumed stage"), "target"),
            BTreeSet::from([Transfer::AlreadyStaged])
        );

        let deleted = cleanup(&destinations, &prefix, TempFiles::Delete, &[])
            .await
            .expect("cleanup");
        assert_eq!(deleted, files.len() as u64);
        assert!(!b.path().join("lockstep-staging").exists());
        for file in &files {
            let at = file.source.as_deref().unwrap_or(&file.path);
            let kept = std::fs::read(a.path().join(BACKUP_DIR).join(at))
                .expect("the backup's file outlives its staged link");
            assert!(
                kept == content(&file.path, file.size),
                "{} changed",
                file.path
            );
        }
    }

    #[tokio::test]
    async fn the_first_files_are_ready_before_the_later_runs_directories_are_made() {
        let dirs: Vec<_> = (0..3)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let backup = local(dirs[0].path());
        let (target, secondary) = (local(dirs[1].path()), local(dirs[2].path()));
        // Each file in directories of its own: the third run starts at file 48 (after runs of
        // 16 and 32), and the file before last is in the last run.
        let files = write_backup(&backup, &vec![1; 2 * DIR_RUN + 1]).await;
        let prefix = prefix("runs");
        let destinations = target_and_s1(&target, &secondary);
        let later = [&files[3 * FIRST_DIR_RUN], &files[files.len() - 2]];
        let made = |file: &BackupFile| {
            [dirs[1].path(), dirs[2].path()].map(|root| {
                let placed = root.join("lockstep-staging/runs.ab.1").join(&file.path);
                placed.parent().expect("a file has a directory").exists()
            })
        };
        let seen_at_first_ready = Mutex::new(None);
        let staged = stage(
            source(&backup),
            &files,
            &destinations,
            &prefix,
            StageOptions::default(),
            &|_| {},
            &|f| {
                if f == 0 {
                    let seen = later.map(made);
                    *seen_at_first_ready.lock().expect("no panic under the lock") = Some(seen);
                }
            },
            &CancellationToken::new(),
        )
        .await
        .expect("stage");
        assert_eq!(
            seen_at_first_ready
                .into_inner()
                .expect("no panic under the lock"),
            Some([[false, false]; 2]),
            "the first file was ready before the third run's and the last run's directories were made"
        );
        assert_eq!(placed(&staged), 2 * files.len() as u64);
        for store in [&target, &secondary] {
            assert_staged_content(store, &prefix, &files).await;
        }
    }

    #[test]
    fn runs_start_small_and_double_up_to_the_full_run() {
        let cut = runs(3 * DIR_RUN);
        let lens: Vec<usize> = cut.iter().map(|r| r.len()).collect();
        assert_eq!(lens[..7], [16, 32, 64, 128, 256, 512, 1024]);
        assert!(lens[7..].iter().all(|&n| n <= DIR_RUN));
        let joined: Vec<usize> = cut.into_iter().flatten().collect();
        assert_eq!(joined, (0..3 * DIR_RUN).collect::<Vec<_>>());
        assert!(runs(0).is_empty());
        assert_eq!(runs(5).first(), Some(&(0..5)));
        assert_eq!(runs(5).len(), 1);
    }

    #[tokio::test]
    async fn cleanup_removes_a_large_prefix_in_parallel_and_leaves_other_restores_alone() {
        // Walked (a recovery's cleanup) and by the names the plan staged.
        for known in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = local(dir.path());
            let root = dir.path().join(STAGING_ROOT);
            let mut staged = Vec::new();
            for i in 0..300 {
                let relative = format!("binlogs/insert_log/{}/{}/{i}", i % 7, i % 5);
                let segment = root.join("r10.ab.1").join(&relative);
                std::fs::create_dir_all(&segment).expect("mkdir");
                std::fs::write(segment.join("1"), b"x").expect("write");
                staged.push(format!("{relative}/1"));
            }
            // A part-written copy is no object, but goes with its prefix.
            std::fs::write(root.join("r10.ab.1/binlogs/insert_log/0/0/0/2#1"), b"x")
                .expect("write");
            std::fs::create_dir_all(root.join("r11.ab.1")).expect("mkdir");
            std::fs::write(root.join("r11.ab.1/keep"), b"x").expect("write");
            let destinations = [Destination {
                end: "target",
                store: &store,
            }];
            let names =
                |all: &[String]| -> Vec<String> { if known { all.to_vec() } else { Vec::new() } };
            let named = names(&staged);
            let named: Vec<&str> = named.iter().map(String::as_str).collect();

            let deleted = cleanup(&destinations, &prefix("r10"), TempFiles::Delete, &named)
                .await
                .expect("cleanup");
            assert_eq!(deleted, 300, "known: {known}");
            assert!(!root.join("r10.ab.1").exists(), "known: {known}");
            assert!(
                root.join("r11.ab.1/keep").is_file(),
                "another restore's files stay"
            );

            let keep = names(&["keep".to_owned()]);
            let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
            let deleted = cleanup(&destinations, &prefix("r11"), TempFiles::Delete, &keep)
                .await
                .expect("cleanup");
            assert_eq!(deleted, 1);
            assert!(
                !root.exists(),
                "the last prefix takes the staging root with it"
            );
            let again = cleanup(&destinations, &prefix("r11"), TempFiles::Delete, &keep)
                .await
                .expect("cleanup of nothing");
            assert_eq!(again, 0);
        }
    }

    #[tokio::test]
    async fn a_walked_cleanup_removes_symbolic_links_not_what_they_point_at() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("precious"), b"x").expect("write");
        let store = local(dir.path());
        let staged = dir.path().join(STAGING_ROOT).join("r12.ab.1");
        // Deep enough that the removal splits the tree and opens directories below the
        // subtrees it was given, where the links are met by their directory entries.
        for i in 0..100 {
            let segment = staged.join(format!("binlogs/insert_log/{i}/0/0"));
            std::fs::create_dir_all(&segment).expect("mkdir");
            std::fs::write(segment.join("1"), b"x").expect("write");
            std::os::unix::fs::symlink(outside.path(), segment.join("dir-link")).expect("link");
            std::os::unix::fs::symlink(outside.path().join("precious"), segment.join("file-link"))
                .expect("link");
        }
        std::os::unix::fs::symlink(outside.path(), staged.join("top-link")).expect("link");
        let destinations = [Destination {
            end: "target",
            store: &store,
        }];

        let deleted = cleanup(&destinations, &prefix("r12"), TempFiles::Delete, &[])
            .await
            .expect("cleanup");
        assert_eq!(deleted, 100 * 3 + 1, "a link is an entry the store lists");
        assert!(!dir.path().join(STAGING_ROOT).exists());
        assert!(outside.path().join("precious").is_file());
    }

    #[tokio::test]
    async fn resume_skips_files_of_the_right_size_and_recopies_the_rest() {
        let (a, b) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let backup = local(a.path());
        let target = local(b.path());
        let files = write_backup(&backup, &[100, 200, 300]).await;
        let prefix = prefix("r3");
        let destinations = [Destination {
            end: "target",
            store: &target,
        }];
        stage_recording(&backup, &files, &destinations, &prefix)
            .await
            .0
            .expect("first stage");

        // An interrupted copy left one file short and never wrote another.
        let staged_dir = b.path().join("lockstep-staging/r3.ab.1");
        std::fs::write(staged_dir.join(&files[1].path), b"short").expect("truncate");
        std::fs::remove_file(staged_dir.join(&files[2].path)).expect("remove");

        let (staged, _) = stage_recording(&backup, &files, &destinations, &prefix).await;
        let staged = staged.expect("resumed stage");
        let transfer_of = |file: usize| staged.transfer("target", file);
        assert_eq!(transfer_of(0), Some(Transfer::AlreadyStaged));
        assert_eq!(
            transfer_of(1),
            Some(Transfer::Streamed),
            "the truncated file is copied again"
        );
        assert_eq!(
            transfer_of(2),
            Some(Transfer::Streamed),
            "the missing file is copied"
        );
        assert_eq!(transfer_of(3), Some(Transfer::AlreadyStaged));
        assert_staged_content(&target, &prefix, &files).await;
    }

    #[tokio::test]
    async fn resume_recopies_a_local_file_whose_size_outlived_its_bytes() {
        let (a, b) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let backup = local(a.path());
        let target = local(b.path());
        let files = write_backup(&backup, &[100, 200]).await;
        let prefix = prefix("r3b");
        let destinations = [Destination {
            end: "target",
            store: &target,
        }];
        stage_recording(&backup, &files, &destinations, &prefix)
            .await
            .0
            .expect("first stage");

        // What a power loss before the flush can leave: the size, not the bytes.
        let staged_file = b
            .path()
            .join("lockstep-staging/r3b.ab.1")
            .join(&files[1].path);
        std::fs::write(&staged_file, vec![0u8; 200]).expect("zero the file");

        let (staged, _) = stage_recording(&backup, &files, &destinations, &prefix).await;
        let staged = staged.expect("resumed stage");
        let recopied: Vec<usize> = (0..files.len())
            .filter(|&f| staged.transfer("target", f) != Some(Transfer::AlreadyStaged))
            .collect();
        assert_eq!(recopied, [1], "only the zeroed file is copied again");
        assert_staged_content(&target, &prefix, &files).await;
    }

    #[tokio::test]
    async fn verify_catches_a_size_the_backup_listing_does_not_match() {
        let (a, b) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let backup = local(a.path());
        let target = local(b.path());
        let mut files = write_backup(&backup, &[100, 200]).await;
        // The listing says 250 bytes, the object holds 200.
        files[1].size = 250;

        let (result, _) = stage_recording(
            &backup,
            &files,
            &[Destination {
                end: "prod-b",
                store: &target,
            }],
            &prefix("r4"),
        )
        .await;
        match result {
            Err(Error::SizeMismatch {
                end,
                path,
                expected,
                found,
            }) => {
                assert_eq!(end, "prod-b");
                assert!(path.ends_with(&files[1].path), "{path}");
                assert_eq!((expected, found), (250, 200));
            }
            other => panic!("expected SizeMismatch, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_missing_backup_file_fails_naming_file_and_end() {
        let (a, b) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let backup = local(a.path());
        let target = local(b.path());
        let mut files = write_backup(&backup, &[100]).await;
        files.push(BackupFile {
            path: "binlogs/insert_log/1/2/7/7/100/77".into(),
            size: 5,
            source: None,
            written: None,
        });

        let (result, _) = stage_recording(
            &backup,
            &files,
            &[Destination {
                end: "prod-a",
                store: &target,
            }],
            &prefix("r5"),
        )
        .await;
        match result {
            Err(Error::Transfer {
                end,
                path,
                source: object_store::Error::NotFound { .. },
            }) => {
                assert_eq!(
                    (end.as_str(), path.as_str()),
                    ("prod-a", "binlogs/insert_log/1/2/7/7/100/77")
                );
            }
            other => panic!("expected Transfer NotFound, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn ends_sharing_a_store_are_copied_once_and_cleanup_removes_the_prefix() {
        let dirs: Vec<_> = (0..3)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let backup = local(dirs[0].path());
        let shared = local(dirs[1].path());
        let other = local(dirs[2].path());
        let files = write_backup(&backup, &[10, 20]).await;
        let prefix = prefix("r6");
        let destinations = [
            Destination {
                end: "target",
                store: &shared,
            },
            Destination {
                end: "secondary-1",
                store: &shared,
            },
            Destination {
                end: "secondary-2",
                store: &other,
            },
        ];

        let (staged, reports) = stage_recording(&backup, &files, &destinations, &prefix).await;
        let staged = staged.expect("stage");
        assert_eq!(
            placed(&staged),
            3 * files.len() as u64,
            "one staged file per file and end"
        );
        assert_eq!(
            reports.last().map(|p| p.files_total),
            Some(2 * files.len() as u64),
            "two stores, not three"
        );
        assert_staged_content(&shared, &prefix, &files).await;
        assert_staged_content(&other, &prefix, &files).await;

        assert_eq!(
            cleanup(&destinations, &prefix, TempFiles::Keep, &[])
                .await
                .expect("keep"),
            0
        );
        assert!(dirs[1].path().join("lockstep-staging/r6.ab.1").is_dir());
        let deleted = cleanup(&destinations, &prefix, TempFiles::Delete, &[])
            .await
            .expect("cleanup");
        assert_eq!(deleted, 2 * files.len() as u64);
        for dir in &dirs[1..] {
            assert!(
                !dir.path().join("lockstep-staging/r6.ab.1").exists(),
                "prefix removed, directories too"
            );
        }
        assert!(
            dirs[0]
                .path()
                .join(BACKUP_DIR)
                .join(&files[0].path)
                .is_file(),
            "the backup is untouched"
        );
    }

    #[test]
    fn import_in_place_only_when_every_destination_is_the_backup_store() {
        let backup = StoreId::S3 {
            endpoint: "http://s3:9000".into(),
            bucket: "milvus".into(),
        };
        let other = StoreId::S3 {
            endpoint: "http://s3:9000".into(),
            bucket: "milvus-b".into(),
        };
        let backup_dir = Path::from("backup/nightly");
        assert_eq!(
            import_paths(&backup, &backup_dir, &[&backup, &backup], prefix("r7")),
            ImportPaths::InPlace {
                backup_dir: backup_dir.clone()
            }
        );
        let mixed = import_paths(&backup, &backup_dir, &[&backup, &other], prefix("r7"));
        assert_eq!(
            mixed,
            ImportPaths::Staged {
                prefix: prefix("r7")
            }
        );
        assert_eq!(mixed.prefix().as_ref(), "lockstep-staging/r7.ab.1");
    }

    #[test]
    fn a_restore_id_is_the_one_segment_under_the_staging_root() {
        assert_eq!(
            prefix("orders").path().as_ref(),
            "lockstep-staging/orders.ab.1"
        );
    }

    #[tokio::test]
    async fn s3_same_bucket_stage_moves_no_bytes_through_the_host() {
        let Some(server) = s3_server("s3_same_bucket_stage_moves_no_bytes_through_the_host").await
        else {
            return;
        };
        let (bucket_a, bucket_b) = (unique_bucket("same-a"), unique_bucket("same-b"));
        // milvus-backup wrote into the target's own bucket; the secondary has its own.
        let backup = server.bucket(&bucket_a).await;
        let target = server.bucket(&format!("{bucket_a}/files")).await;
        let secondary = server.bucket(&format!("{bucket_b}/files")).await;
        let files = write_backup(&backup, &[1000, PART_SIZE + 7]).await;
        let prefix = prefix("s3-r1");
        let destinations = [
            Destination {
                end: "target",
                store: &target,
            },
            Destination {
                end: "secondary",
                store: &secondary,
            },
        ];

        let (staged, _) = stage_recording(&backup, &files, &destinations, &prefix).await;
        let staged = staged.expect("stage");

        let streamed = |end: &str| -> u64 {
            (files.iter().enumerate())
                .filter(|(f, _)| staged.transfer(end, *f) == Some(Transfer::Streamed))
                .map(|(_, file)| file.size)
                .sum()
        };
        assert_eq!(
            transfers(&staged, "target"),
            BTreeSet::from([Transfer::ServerSideCopy])
        );
        assert_eq!(
            streamed("target"),
            0,
            "same bucket: CopyObject, zero bytes through the host"
        );
        assert_eq!(
            streamed("secondary"),
            files.iter().map(|f| f.size).sum::<u64>()
        );
        assert_staged_content(&target, &prefix, &files).await;
        assert_staged_content(&secondary, &prefix, &files).await;

        let (again, _) = stage_recording(&backup, &files, &destinations, &prefix).await;
        let again = again.expect("resume");
        assert_eq!(
            (transfers(&again, "target"), transfers(&again, "secondary")),
            (
                BTreeSet::from([Transfer::AlreadyStaged]),
                BTreeSet::from([Transfer::AlreadyStaged])
            )
        );

        assert_eq!(
            cleanup(&destinations, &prefix, TempFiles::Delete, &[])
                .await
                .expect("cleanup"),
            2 * files.len() as u64
        );
        let left: Vec<_> = secondary
            .store
            .list(Some(prefix.path()))
            .try_collect::<Vec<_>>()
            .await
            .expect("list after cleanup");
        assert!(left.is_empty());
    }

    #[tokio::test]
    async fn s3_stage_from_a_local_backup_verifies_and_resumes() {
        let Some(server) = s3_server("s3_stage_from_a_local_backup_verifies_and_resumes").await
        else {
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let backup = local(dir.path());
        let target = server.bucket(&unique_bucket("local-to-s3")).await;
        let files = write_backup(&backup, &[10, 20, 30]).await;
        let prefix = prefix("s3-r2");
        let destinations = [Destination {
            end: "target",
            store: &target,
        }];

        stage_recording(&backup, &files, &destinations, &prefix)
            .await
            .0
            .expect("stage");
        assert_staged_content(&target, &prefix, &files).await;
        // Truncate one staged object on S3: the resumed stage copies exactly that one.
        let truncated = join(prefix.path(), &files[1].path).expect("path");
        target
            .store
            .put(&truncated, PutPayload::from_static(b"x"))
            .await
            .expect("overwrite");
        let (staged, _) = stage_recording(&backup, &files, &destinations, &prefix).await;
        let staged = staged.expect("resume");
        let recopied: Vec<usize> = (0..files.len())
            .filter(|&f| staged.transfer("target", f) != Some(Transfer::AlreadyStaged))
            .collect();
        assert_eq!(recopied, [1], "only {truncated} is copied again");
        let _: Arc<dyn ObjectStore> = target.store.clone();
    }
}
