//! Local stores: listing what is there, blocking work off the runtime, and making what a
//! stage wrote durable.

use std::collections::{HashMap, HashSet};

use futures::TryStreamExt as _;
use object_store::path::{Path, PathPart};

use super::super::Error;
use super::super::open::{LocalFiles, OpenedStore, StoreId, part_written};
use super::files::StoreGroup;

/// Sizes of every object under `prefix`.
pub(super) async fn list_sizes(
    store: &OpenedStore,
    prefix: &Path,
    ends: &str,
) -> Result<HashMap<Path, u64>, Error> {
    let failed = |source| Error::List {
        end: ends.to_owned(),
        prefix: prefix.to_string(),
        source,
    };
    if let Some(files) = store.local() {
        let dir = files.path(prefix).map_err(failed)?;
        let key = prefix.clone();
        let walked = blocking(move || {
            let mut sizes = HashMap::new();
            walk_files(&dir, &key, &mut |key, entry| {
                sizes.insert(key, entry.metadata()?.len());
                Ok(())
            })
            .map(|()| sizes)
        })
        .await;
        return walked.map_err(|e| failed(local_error(e)));
    }
    store
        .store
        .list(Some(prefix))
        .map_ok(|meta| (meta.location, meta.size))
        .try_collect()
        .await
        .map_err(failed)
}

/// Makes, once each and parents first, the directory of every one of `targets` (paths under
/// `prefix`) and every directory between it and `prefix`'s: the links then go straight into
/// them. (A `create_dir_all` a file checks every directory again for every file; `cp -al`
/// makes each once.) The directories are found and ordered as object paths, strings: a
/// parent is a prefix of its child's path, so it sorts first. As `PathBuf`s in an ordered
/// set (compared component by component) they cost a restore of 10,000 collections some
/// 5 % of its CPU.
pub(super) async fn make_dirs(
    files: &LocalFiles,
    prefix: &Path,
    targets: impl Iterator<Item = Path>,
) -> object_store::Result<()> {
    let root = files.path(prefix)?;
    let mut dirs = HashSet::new();
    for target in targets {
        let relative =
            (target.as_ref().strip_prefix(prefix.as_ref())).and_then(|rest| rest.strip_prefix('/'));
        let mut dir = relative.unwrap_or_default();
        while let Some((parent, _)) = dir.rsplit_once('/') {
            if !dirs.insert(parent.to_owned()) {
                break;
            }
            dir = parent;
        }
    }
    let mut dirs: Vec<String> = dirs.into_iter().collect();
    dirs.sort_unstable();
    blocking(move || {
        std::fs::create_dir_all(&root)?;
        for dir in dirs {
            match std::fs::create_dir(root.join(dir)) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
        }
        Ok(())
    })
    .await
    .map_err(local_error)
}

/// The size of each of `paths` (`None`: not there), one `stat` a file.
pub(super) async fn stat_sizes(
    paths: Vec<std::path::PathBuf>,
) -> object_store::Result<Vec<Option<u64>>> {
    blocking(move || {
        paths
            .iter()
            .map(|path| match std::fs::metadata(path) {
                Ok(meta) => Ok(Some(meta.len())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            })
            .collect()
    })
    .await
    .map_err(local_error)
}

/// Calls `visit` with the key and directory entry of every file under `dir`, the local
/// directory of the store's `key`; nothing if `dir` does not exist. Each name is a key part
/// as it stands, as the store lists it (a file `a%25b` is the object `a%25b`, not `a%b`), and
/// part-written copies are skipped, as the store's own listing skips them.
///
/// The store's own listing stats and converts every entry it walks, which took seconds for
/// the tens of thousands of binlogs of a large backup; this reads directory entries and
/// leaves the rest to `visit`.
pub(super) fn walk_files(
    dir: &std::path::Path,
    key: &Path,
    visit: &mut dyn FnMut(Path, &std::fs::DirEntry) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        entries => entries?,
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is not UTF-8", entry.path().display()),
            ));
        };
        let part = PathPart::parse(name).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", entry.path().display()),
            )
        })?;
        let child = key.clone().join(part);
        if entry.file_type()?.is_dir() {
            walk_files(&entry.path(), &child, visit)?;
        } else if !part_written(name) {
            visit(child, &entry)?;
        }
    }
    Ok(())
}

/// An I/O error from a local store, as the store's own calls report one.
pub(super) fn local_error(source: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: source.into(),
    }
}

/// Runs file-system calls on tokio's blocking threads, off the ones that drive the stage.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// Flushes what the stage copied into local stores to stable storage: one `syncfs` of each
/// local store's filesystem writes back the copies' bytes and commits every new directory
/// and rename in one journal commit.
///
/// Copies write without fsync, so none of them waits on the disk; one pass for each run of
/// files (while the next run is placed) makes them durable before [`stage`] reports them
/// ready, and so before any import can read them: after a power loss, a restarted Milvus
/// must not import a file that kept its name but lost its bytes. A pass only at the end held
/// every batch with a written file (a folded L0 delta log) back until the whole stage was
/// placed. Links need no flush: they add no bytes, and a link lost with
/// the power is a missing file, which the import reports and a resumed stage makes again.
/// Fsyncing each staged file and directory instead cost a journal commit apiece: a backup
/// keeps each field's binlogs in a directory of their own, so a 1,000-collection restore
/// made 30,000 directories per store, and their flush took most of its 20 s stage. The price
/// is that `syncfs` also writes back whatever else is dirty on that filesystem.
/// S3 needs nothing: a PUT that returned is durable.
pub(super) async fn make_durable(groups: &[&StoreGroup<'_>]) -> Result<(), Error> {
    for group in groups {
        let StoreId::Local { dir: root } = &group.store.id else {
            continue;
        };
        let root = root.clone();
        let synced = {
            let root = root.clone();
            blocking(move || {
                rustix::fs::syncfs(std::fs::File::open(&root)?).map_err(std::io::Error::from)
            })
            .await
        };
        synced.map_err(|source| Error::Sync {
            end: group.ends(),
            path: root.display().to_string(),
            source,
        })?;
    }
    Ok(())
}
