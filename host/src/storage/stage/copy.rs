//! One file into one destination: a server-side copy, a hard link, a kernel copy between
//! local directories, or a stream through the host, and whether one already staged is whole.

use std::path::PathBuf;

use futures::TryStreamExt as _;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, WriteMultipart};

use super::super::open::OpenedStore;
use super::files::Transfer;
use super::local::{blocking, local_error};
use crate::backup::BackupFile;

/// Streamed objects above this size go through a multipart upload in parts of this size
/// (S3 parts must be at least 5 MiB); memory held is at most concurrency × 2 parts.
pub const PART_SIZE: u64 = 16 << 20;

/// Parts of one multipart upload in flight at once.
pub(super) const PARTS_IN_FLIGHT: usize = 2;

/// Whether a file already staged with the listed size holds the backup's bytes (or the
/// bytes lockstep wrote for it).
///
/// S3 publishes an object whole, and durably, when its PUT returns: there the size is
/// enough. A local file is written without fsync and made durable only when its stage
/// finishes ([`make_durable`]), so after a power loss during an unfinished stage it can have
/// its size but not its bytes; its crc32c is compared with the backup file's.
pub(super) async fn staged_intact(
    from_store: &OpenedStore,
    to_store: &OpenedStore,
    from: &Path,
    to: &Path,
    file: &BackupFile,
) -> object_store::Result<bool> {
    if to_store.local().is_none() {
        return Ok(true);
    }
    let original = async {
        match &file.written {
            Some(bytes) => Ok(crc32c::crc32c(bytes)),
            None => crc32c_of(from_store.store.as_ref(), from).await,
        }
    };
    let (staged, original) = futures::try_join!(crc32c_of(to_store.store.as_ref(), to), original)?;
    Ok(staged == original)
}

pub(super) async fn crc32c_of(store: &dyn ObjectStore, path: &Path) -> object_store::Result<u32> {
    let mut chunks = store.get(path).await?.into_stream();
    let mut crc = 0;
    while let Some(chunk) = chunks.try_next().await? {
        crc = crc32c::crc32c_append(crc, &chunk);
    }
    Ok(crc)
}

/// One object from the backup's store to a destination store. `listed_size` (from the
/// backup listing) picks a whole-object copy or a multipart one; the parts follow the
/// object's real size, so a stale listing shows up in verification, not as a cut copy.
/// A placement between two local stores waits for one of the stage's `local` slots.
pub(super) async fn copy(
    from_store: &OpenedStore,
    to_store: &OpenedStore,
    from: &Path,
    to: &Path,
    listed_size: u64,
    hard_links: bool,
    local: &tokio::sync::Semaphore,
) -> object_store::Result<Transfer> {
    if from_store.id == to_store.id {
        to_store.store.copy(from, to).await?;
        return Ok(Transfer::ServerSideCopy);
    }
    if let (Some(from_files), Some(to_files)) = (from_store.local(), to_store.local()) {
        let src = from_files.path(from)?;
        let dst = to_files.path(to)?;
        let placed = {
            let _slot = local
                .acquire()
                .await
                .expect("the stage's semaphore is never closed");
            let src = src.clone();
            blocking(move || place_local_file(&src, &dst, hard_links)).await
        };
        return match placed {
            Ok(transfer) => Ok(transfer),
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
                Err(object_store::Error::NotFound {
                    path: src.display().to_string(),
                    source: source.into(),
                })
            }
            Err(source) => Err(local_error(source)),
        };
    }
    let (reader, writer) = (from_store.store.as_ref(), to_store.store.as_ref());
    if listed_size <= PART_SIZE {
        let bytes = reader.get(from).await?.bytes().await?;
        writer.put(to, bytes.into()).await?;
        return Ok(Transfer::Streamed);
    }
    let size = reader.head(from).await?.size;
    let mut upload =
        WriteMultipart::new_with_chunk_size(writer.put_multipart(to).await?, PART_SIZE as usize);
    let mut offset = 0;
    while offset < size {
        let end = (offset + PART_SIZE).min(size);
        let part = match reader.get_range(from, offset..end).await {
            Ok(part) => part,
            Err(e) => {
                // Best effort: an unfinished upload only holds storage until the store expires it.
                let _ = upload.abort().await;
                return Err(e);
            }
        };
        if let Err(e) = upload.wait_for_capacity(PARTS_IN_FLIGHT).await {
            let _ = upload.abort().await;
            return Err(e);
        }
        upload.put(part);
        offset = end;
    }
    upload.finish().await?;
    Ok(Transfer::Streamed)
}

/// Puts a backup file into another local store. On one filesystem, with `hard_links`, it is
/// a hard link: the file is already there, and a link writes no data. A link is whole the
/// moment it exists, so it goes straight to `dst`: one call a file, in a directory the stage
/// made beforehand (or makes here when it is missing). A copy, or a link over a file an
/// earlier stage left, is published as `LocalFileSystem::put` publishes one (written as
/// `{dst}#1`, which listings skip, then renamed over `dst`, so the store never shows a
/// part-written file). Across filesystems, or where a link is refused
/// (`protected_hardlinks`, a filesystem without links), `std::fs::copy`: the kernel copies
/// the bytes (`copy_file_range`) instead of the host reading them into memory and writing
/// them back.
pub(super) fn place_local_file(
    src: &std::path::Path,
    dst: &std::path::Path,
    hard_links: bool,
) -> std::io::Result<Transfer> {
    if hard_links {
        match link_fresh(src, dst) {
            Ok(()) => return Ok(Transfer::Linked),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(e),
            // Taken, or refused: the published path below decides.
            Err(_) => {}
        }
    }
    let mut partial = dst.as_os_str().to_owned();
    partial.push("#1");
    let partial = PathBuf::from(partial);
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // A `#1` left by an interrupted stage would make the link fail.
    match std::fs::remove_file(&partial) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let linked = if hard_links {
        std::fs::hard_link(src, &partial)
    } else {
        Err(std::io::ErrorKind::Unsupported.into())
    };
    let placed = match linked {
        Ok(()) => Ok(Transfer::Linked),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(e),
        Err(_) => std::fs::copy(src, &partial).map(|_| Transfer::Streamed),
    }
    .and_then(|transfer| std::fs::rename(&partial, dst).map(|()| transfer));
    // Best effort, on failure: a leftover `#1` file is invisible to listings, but takes
    // space. And after a link, renaming onto a link of the same inode succeeds without
    // removing the `#1` (POSIX rename of two links to one file does nothing).
    if placed.is_err() || placed.as_ref().is_ok_and(|t| *t == Transfer::Linked) {
        let _ = std::fs::remove_file(&partial);
    }
    placed
}

/// `src` linked at `dst`, making `dst`'s directory if it is missing. A missing `src` is
/// `NotFound`; a `dst` already there is `AlreadyExists`.
fn link_fresh(src: &std::path::Path, dst: &std::path::Path) -> std::io::Result<()> {
    match std::fs::hard_link(src, dst) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match dst.parent().filter(|parent| !parent.exists()) {
                Some(parent) => {
                    std::fs::create_dir_all(parent)?;
                    std::fs::hard_link(src, dst)
                }
                None => Err(e),
            }
        }
        linked => linked,
    }
}
