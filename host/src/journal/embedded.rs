//! The embedded journal: one JSON file per restore under `{state_dir}/journal/`, replaced by
//! atomic rename (write a temp file, fsync it, rename, fsync the directory), so a crash leaves
//! either the old record or the new one, never a torn one. A lock file per restore, held with
//! `flock` for as long as a process works on it, keeps two processes from driving one restore;
//! the OS releases it when the process dies, which is what lets `recover` take over.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::{
    Claim, Error, Journal, Listed, Removal, RestoreId, RestoreRecord, Result, Unreadable, Visit,
};

/// A journal in a local directory.
#[derive(Debug, Clone)]
pub struct FileJournal {
    dir: PathBuf,
    /// Per restore this process saved, the inode its last save renamed into place: every
    /// save writes a new file, so another inode means someone else wrote the record (or
    /// it went away). No await happens while this is held.
    written: Arc<Mutex<HashMap<RestoreId, u64>>>,
}

struct FileClaim {
    id: RestoreId,
    // Held for its lock; dropping the file releases it.
    _lock: File,
}

impl Claim for FileClaim {
    fn restore_id(&self) -> &RestoreId {
        &self.id
    }
}

impl FileJournal {
    /// Opens (creating) the journal directory `{state_dir}/journal`, its user's alone
    /// ([`crate::owner_only`]), as is every record, temp and lock file in it.
    pub fn open(state_dir: &Path) -> Result<FileJournal> {
        let dir = state_dir.join("journal");
        crate::owner_only::dir(&dir).map_err(|source| io_error(&dir, source))?;
        Ok(FileJournal {
            dir,
            written: Arc::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn record_path(&self, id: &RestoreId) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn claim_blocking(&self, id: &RestoreId) -> Result<FileClaim> {
        let path = self.dir.join(format!("{id}.lock"));
        let mut file = crate::owner_only::open(
            &path,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
        )
        .map_err(|source| io_error(&path, source))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                // The holder wrote its pid; an empty or unreadable file still means busy.
                let _ = file.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    "" => "another lockstep process".to_string(),
                    pid => format!("lockstep process {pid}"),
                };
                return Err(Error::Busy {
                    id: id.clone(),
                    holder,
                });
            }
            Err(fs::TryLockError::Error(source)) => return Err(io_error(&path, source)),
        }
        file.set_len(0).map_err(|source| io_error(&path, source))?;
        file.rewind().map_err(|source| io_error(&path, source))?;
        write!(file, "{}", std::process::id()).map_err(|source| io_error(&path, source))?;
        // A new claim starts from the record as it finds it, whoever wrote it last.
        self.written
            .lock()
            .expect("written lock: no panics under it")
            .remove(id);
        Ok(FileClaim {
            id: id.clone(),
            _lock: file,
        })
    }

    /// Writes `record` in its place, compact: indenting its nested lists made it half as
    /// large again.
    fn save_blocking(&self, record: &RestoreRecord) -> Result<()> {
        let id = &record.id;
        let path = self.record_path(id);
        let tmp = path.with_extension("json.tmp");
        let write = || -> io::Result<u64> {
            let mut out = io::BufWriter::new(crate::owner_only::create(&tmp)?);
            // A write that fails (a full disk) comes back as its io::Error, a record that
            // does not serialize as an InvalidData one.
            serde_json::to_writer(&mut out, record)?;
            let f = out.into_inner().map_err(io::IntoInnerError::into_error)?;
            f.sync_all()?;
            let inode = f.metadata()?.ino();
            fs::rename(&tmp, &path)?;
            // The rename is durable only once the directory entry is.
            File::open(&self.dir)?.sync_all()?;
            Ok(inode)
        };
        let inode = write().map_err(|source| io_error(&path, source))?;
        self.written
            .lock()
            .expect("written lock: no panics under it")
            .insert(id.clone(), inode);
        Ok(())
    }

    /// The claim holds its lock for as long as it lives, so only the record can tell a loss:
    /// gone, or replaced by a save that was not this process's.
    fn fence_blocking(&self, id: &RestoreId) -> Result<()> {
        let Some(inode) = (self.written.lock())
            .expect("written lock: no panics under it")
            .get(id)
            .copied()
        else {
            return Ok(());
        };
        let path = self.record_path(id);
        match fs::metadata(&path) {
            Ok(meta) if meta.ino() == inode => Ok(()),
            Ok(_) => Err(Error::ClaimLost(id.clone())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Error::ClaimLost(id.clone())),
            Err(source) => Err(io_error(&path, source)),
        }
    }

    /// Under the restore's lock, which a claimer takes first: the record as listed and
    /// finished, then its file and the lock file go. A claimer that opened the lock file
    /// before it went finds it held; one that opens it after makes a new one and finds no
    /// record.
    fn remove_blocking(&self, listed: &RestoreRecord) -> Result<Removal> {
        let id = &listed.id;
        let claim = match self.claim_blocking(id) {
            Ok(claim) => claim,
            Err(Error::Busy { holder, .. }) => return Ok(Removal::Claimed { holder }),
            Err(e) => return Err(e),
        };
        match self.load_blocking(id)? {
            Some(now) if now == *listed && !now.is_unfinished() => {}
            _ => return Ok(Removal::Changed),
        }
        let path = self.record_path(id);
        let lock = self.dir.join(format!("{id}.lock"));
        let remove = || -> io::Result<()> {
            fs::remove_file(&path)?;
            fs::remove_file(&lock)?;
            File::open(&self.dir)?.sync_all()
        };
        remove().map_err(|source| io_error(&path, source))?;
        drop(claim);
        Ok(Removal::Removed)
    }

    fn load_blocking(&self, id: &RestoreId) -> Result<Option<RestoreRecord>> {
        read_record(&self.record_path(id))
    }

    /// Sends every record whose file name starts with `prefix`, and each that does not
    /// read, one file at a time: the channel's room is the page held at once. Stops when
    /// the receiver went away.
    fn scan_blocking(&self, prefix: &str, out: &mpsc::Sender<Result<Listed>>) {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(source) => {
                let _ = out.blocking_send(Err(io_error(&self.dir, source)));
                return;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(source) => {
                    let _ = out.blocking_send(Err(io_error(&self.dir, source)));
                    return;
                }
            };
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !(name.starts_with(prefix) && name.ends_with(".json")) {
                continue;
            }
            let listed = match read_record(&entry.path()) {
                Ok(Some(record)) => Listed::Record(record),
                // Gone since the directory was read: replaced, or removed.
                Ok(None) => continue,
                Err(error) => Listed::Unreadable(Unreadable {
                    key: name.to_owned(),
                    error,
                }),
            };
            if out.blocking_send(Ok(listed)).is_err() {
                return;
            }
        }
    }
}

/// How many records a scan reads ahead of its visitor: the page it holds at once.
const SCAN_PAGE: usize = 64;

fn read_record(path: &Path) -> Result<Option<RestoreRecord>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io_error(path, source)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| Error::Corrupt {
            path: path.display().to_string(),
            source,
        })
}

fn io_error(path: &Path, source: io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Runs blocking file work off the async workers (fsync can take milliseconds).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Backend(format!("journal task failed: {e}")))?
}

impl Journal for FileJournal {
    fn claim(&self, id: &RestoreId) -> BoxFuture<'_, Result<Box<dyn Claim>>> {
        let this = self.clone();
        let id = id.clone();
        Box::pin(async move {
            let claim = blocking(move || this.claim_blocking(&id)).await?;
            Ok(Box::new(claim) as Box<dyn Claim>)
        })
    }

    fn save<'a>(
        &'a self,
        claim: &'a dyn Claim,
        record: &'a RestoreRecord,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if claim.restore_id() != &record.id {
                return Err(Error::ClaimLost(record.id.clone()));
            }
            // A copy is cheap (what each batch was planned as, and the report, are shared),
            // and lets the blocking thread write the text as it is made: at 10,000
            // collections it is some 100 MB, which the runtime's threads should not spend
            // their time on, nor the process hold whole.
            let (this, record) = (self.clone(), record.clone());
            blocking(move || this.save_blocking(&record)).await
        })
    }

    fn fence<'a>(&'a self, claim: &'a dyn Claim) -> BoxFuture<'a, Result<()>> {
        // A stat, cheap enough to run inline before every action.
        Box::pin(std::future::ready(self.fence_blocking(claim.restore_id())))
    }

    fn load<'a>(&'a self, id: &'a RestoreId) -> BoxFuture<'a, Result<Option<RestoreRecord>>> {
        let this = self.clone();
        let id = id.clone();
        Box::pin(blocking(move || this.load_blocking(&id)))
    }

    fn scan<'a>(
        &'a self,
        id_prefix: &'a str,
        visit: &'a mut Visit<'_>,
    ) -> BoxFuture<'a, Result<()>> {
        let (this, prefix) = (self.clone(), id_prefix.to_owned());
        Box::pin(async move {
            let (out, mut found) = mpsc::channel(SCAN_PAGE);
            let reader = tokio::task::spawn_blocking(move || this.scan_blocking(&prefix, &out));
            while let Some(listed) = found.recv().await {
                visit(listed?);
            }
            reader
                .await
                .map_err(|e| Error::Backend(format!("journal task failed: {e}")))
        })
    }

    fn remove<'a>(&'a self, listed: &'a RestoreRecord) -> BoxFuture<'a, Result<Removal>> {
        let (this, listed) = (self.clone(), listed.clone());
        Box::pin(blocking(move || this.remove_blocking(&listed)))
    }

    fn ready(&self) -> BoxFuture<'_, Result<()>> {
        let path = self.dir.join(".ready");
        Box::pin(blocking(move || {
            let probe = || {
                let mut file = crate::owner_only::open(
                    &path,
                    OpenOptions::new().write(true).create(true).truncate(true),
                )?;
                file.write_all(b"ready\n")?;
                file.sync_all()?;
                fs::read(&path)?;
                fs::remove_file(&path)
            };
            probe().map_err(|source| io_error(&path, source))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Outcome;

    fn record(id: &RestoreId, attempt: u32) -> RestoreRecord {
        RestoreRecord {
            mirror_grace_ms: 300_000,
            started_at: jiff::Timestamp::from_second(1_700_000_000 + i64::from(attempt)).unwrap(),
            ..RestoreRecord::new(
                id.clone(),
                "orders",
                "abcdef0123456789",
                attempt,
                "b",
                vec![],
            )
        }
    }

    /// The fence holds while the record is the one this process last saved, and fails once
    /// the record went away or was replaced by a write that was not its own.
    #[tokio::test]
    async fn the_fence_holds_until_the_record_is_replaced_or_gone() {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        let id = RestoreId::new("orders", "abcdef0123456789", 1);
        let claim = journal.claim(&id).await.unwrap();
        journal
            .fence(claim.as_ref())
            .await
            .expect("before any write");
        journal.save(claim.as_ref(), &record(&id, 1)).await.unwrap();
        journal
            .fence(claim.as_ref())
            .await
            .expect("after its own write");

        let path = journal.record_path(&id);
        let other = path.with_extension("other");
        fs::write(&other, fs::read(&path).unwrap()).unwrap();
        fs::rename(&other, &path).unwrap();
        assert!(matches!(
            journal.fence(claim.as_ref()).await,
            Err(Error::ClaimLost(lost)) if lost == id
        ));

        journal.save(claim.as_ref(), &record(&id, 1)).await.unwrap();
        journal
            .fence(claim.as_ref())
            .await
            .expect("its own write again");
        fs::remove_file(&path).unwrap();
        assert!(matches!(
            journal.fence(claim.as_ref()).await,
            Err(Error::ClaimLost(_))
        ));
    }

    #[tokio::test]
    async fn saved_records_load_back_and_group_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        for attempt in [1, 2] {
            let id = RestoreId::new("orders", "abcdef0123456789", attempt);
            let claim = journal.claim(&id).await.unwrap();
            let mut r = record(&id, attempt);
            r.outcome = Some(Outcome::RolledBack);
            journal.save(claim.as_ref(), &r).await.unwrap();
            assert_eq!(journal.load(&id).await.unwrap(), Some(r));
        }
        let other = RestoreId::new("orders", "ffff", 1);
        let claim = journal.claim(&other).await.unwrap();
        journal
            .save(claim.as_ref(), &record(&other, 1))
            .await
            .unwrap();

        let attempts = journal
            .attempts("orders", "abcdef0123456789")
            .await
            .unwrap();
        assert_eq!(
            attempts.iter().map(|r| r.attempt).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(journal.list().await.unwrap().whole().unwrap().len(), 3);
        // No temp file is left behind by a completed save.
        assert!(
            fs::read_dir(journal.dir())
                .unwrap()
                .all(|e| { !e.unwrap().file_name().to_string_lossy().ends_with(".tmp") })
        );
    }

    /// Only a finished record as listed goes, with its lock file; one claimed or written
    /// since stays.
    #[tokio::test]
    async fn remove_takes_only_an_unclaimed_finished_record_as_listed() {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        let id = RestoreId::new("orders", "abcdef0123456789", 1);
        let claim = journal.claim(&id).await.unwrap();
        let mut listed = record(&id, 1);
        listed.outcome = Some(Outcome::Succeeded);
        journal.save(claim.as_ref(), &listed).await.unwrap();
        assert!(matches!(
            journal.remove(&listed).await.unwrap(),
            Removal::Claimed { holder } if holder.contains(&std::process::id().to_string())
        ));
        let mut newer = listed.clone();
        newer.outcome = Some(Outcome::Incomplete);
        journal.save(claim.as_ref(), &newer).await.unwrap();
        drop(claim);
        assert_eq!(journal.remove(&listed).await.unwrap(), Removal::Changed);
        assert_eq!(journal.remove(&newer).await.unwrap(), Removal::Changed);
        assert_eq!(journal.load(&id).await.unwrap(), Some(newer.clone()));

        let claim = journal.claim(&id).await.unwrap();
        journal.save(claim.as_ref(), &listed).await.unwrap();
        drop(claim);
        assert_eq!(journal.remove(&listed).await.unwrap(), Removal::Removed);
        assert_eq!(journal.load(&id).await.unwrap(), None);
        assert_eq!(fs::read_dir(journal.dir()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn a_claim_is_exclusive_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        let id = RestoreId::new("orders", "abcdef0123456789", 1);
        let claim = journal.claim(&id).await.unwrap();
        match journal.claim(&id).await {
            Err(Error::Busy { holder, .. }) => {
                assert!(holder.contains(&std::process::id().to_string()), "{holder}")
            }
            other => panic!("expected Busy, got {:?}", other.map(|_| ())),
        }
        drop(claim);
        journal
            .claim(&id)
            .await
            .expect("free again after the holder dropped it");
    }

    #[tokio::test]
    async fn a_save_under_another_restores_claim_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        let a = RestoreId::new("a", "abcdef0123456789", 1);
        let b = RestoreId::new("b", "abcdef0123456789", 1);
        let claim_a = journal.claim(&a).await.unwrap();
        let err = journal
            .save(claim_a.as_ref(), &record(&b, 1))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::ClaimLost(id) if id == b));
    }

    /// The newest few are the newest by start whatever order the directory gives, a filter
    /// keeps only what it wants, and a record that does not read is reported by both.
    #[tokio::test]
    async fn a_listing_keeps_the_newest_or_what_it_wants_and_names_a_bad_record() {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        for attempt in [3, 1, 5, 2, 4] {
            let id = RestoreId::new("orders", "abcdef0123456789", attempt);
            let claim = journal.claim(&id).await.unwrap();
            let mut r = record(&id, attempt);
            r.outcome = (attempt % 2 == 0).then_some(Outcome::Succeeded);
            journal.save(claim.as_ref(), &r).await.unwrap();
        }
        fs::write(journal.dir().join("bad.ab.1.json"), b"{ not json").unwrap();
        let attempts = |listing: &crate::journal::Listing| {
            (listing.records.iter())
                .map(|r| r.attempt)
                .collect::<Vec<_>>()
        };
        let newest = journal.newest(2).await.unwrap();
        assert_eq!(attempts(&newest), [4, 5]);
        assert_eq!(newest.unreadable.len(), 1);
        let unfinished = (journal.list_where(&RestoreRecord::is_unfinished).await).unwrap();
        assert_eq!(attempts(&unfinished), [1, 3, 5]);
        assert_eq!(unfinished.unreadable[0].key, "bad.ab.1.json");
        assert_eq!(attempts(&journal.list().await.unwrap()), [1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn a_corrupt_record_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        let id = RestoreId::new("orders", "abcdef0123456789", 1);
        fs::write(journal.dir().join(format!("{id}.json")), b"{ not json").unwrap();
        let err = journal.load(&id).await.unwrap_err();
        assert!(err.to_string().contains(&format!("{id}.json")), "{err}");
    }
}
