//! The embedded journal: one JSON file per restore under `{state_dir}/journal/`, replaced by
//! atomic rename (write a temp file, fsync it, rename, fsync the directory), so a crash leaves
//! either the old record or the new one, never a torn one. A lock file per restore, held with
//! `flock` for as long as a process works on it, keeps two processes from driving one restore;
//! the OS releases it when the process dies, which is what lets `recover` take over.
//!
//! Beside the records, `journal/index/` holds the index entries ([`super::index`]) as empty
//! files: `started/{day}/{started name}`, `open/{id}`, `outcome/{label}/{id}`, and
//! `content/{name}/{hash}/{attempt}`, which finds a job's attempts without reading the
//! names of every record (etcd ranges over a key prefix instead); and `built` once every
//! record present when the index first came was entered.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::index::{self, outcome_label, outcome_labels};
use super::tally::{Entry, Tally};
use super::{
    Claim, Error, Journal, Listed, Listing, Newest, Removal, RestoreId, RestoreRecord, Result,
    Unreadable, Visit,
};

/// A journal in a local directory.
#[derive(Debug, Clone)]
pub struct FileJournal {
    dir: PathBuf,
    /// Per restore this process saved, the inode its last save renamed into place: every
    /// save writes a new file, so another inode means someone else wrote the record (or
    /// it went away). No await happens while this is held.
    written: Arc<Mutex<HashMap<RestoreId, u64>>>,
    /// The outcome entries' counts, kept as this journal makes and removes them.
    tally: Arc<Tally>,
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
        let journal = FileJournal {
            dir,
            written: Arc::default(),
            tally: Arc::default(),
        };
        let index = journal.index_dir();
        let dirs = [
            index.join("started"),
            index.join("open"),
            index.join("content"),
        ]
        .into_iter()
        .chain(outcome_labels().map(|label| index.join("outcome").join(label)));
        for dir in dirs {
            crate::owner_only::open_dir(&dir).map_err(|source| io_error(&dir, source))?;
        }
        if !index.join("built").exists() {
            journal.build_index()?;
        }
        Ok(journal)
    }

    fn index_dir(&self) -> PathBuf {
        self.dir.join("index")
    }

    fn started_entry(&self, record: &RestoreRecord) -> PathBuf {
        (self.index_dir().join("started"))
            .join(index::started_day(record))
            .join(index::started_name(record))
    }

    fn open_entry(&self, id: &RestoreId) -> PathBuf {
        self.index_dir().join("open").join(id.as_str())
    }

    fn outcome_dir(&self, label: &str) -> PathBuf {
        self.index_dir().join("outcome").join(label)
    }

    fn outcome_entry(&self, label: &str, id: &RestoreId) -> PathBuf {
        self.outcome_dir(label).join(id.as_str())
    }

    /// Makes (`durable`: synced when new) or removes `id`'s entry under `label`, through
    /// the tally.
    fn change_outcome_entry(
        &self,
        label: &'static str,
        id: &RestoreId,
        entry: Entry,
        durable: bool,
    ) -> io::Result<bool> {
        let path = self.outcome_entry(label, id);
        self.tally
            .change(label, &self.outcome_dir(label), entry, || match entry {
                Entry::Made => make_entry(&path, durable),
                Entry::Removed => Ok(remove_entry(&path)),
            })
    }

    /// `content/{name}/{hash}/{attempt}`: the parts of a parsed id, so never a path of its
    /// own.
    fn content_entry(&self, id: &RestoreId) -> PathBuf {
        id.as_str()
            .split('.')
            .fold(self.index_dir().join("content"), |path, part| {
                path.join(part)
            })
    }

    /// The record files whose ids start with `prefix`, when it is a job's (`{name}.`) or a
    /// content's (`{name}.{hash}.`): read from the `content` entries. `None` for any other
    /// prefix, which only a whole listing reads.
    fn content_files(&self, prefix: &str) -> Option<Result<Vec<String>>> {
        let mut parts = prefix.strip_suffix('.')?.split('.');
        let (name, hash) = (parts.next()?, parts.next());
        let part = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
        };
        if parts.next().is_some() || !part(name) || !hash.is_none_or(part) {
            return None;
        }
        let of_name = self.index_dir().join("content").join(name);
        let files = || -> Result<Vec<String>> {
            let hashes = match hash {
                Some(hash) => vec![hash.to_owned()],
                None => names_if_any(&of_name)?.collect(),
            };
            let mut files = Vec::new();
            for hash in hashes {
                for attempt in names_if_any(&of_name.join(&hash))? {
                    files.push(format!("{name}.{hash}.{attempt}.json"));
                }
            }
            Ok(files)
        };
        Some(files())
    }

    /// Enters every record already here (a journal written before the index, once). Its
    /// entries are made, never removed: a save meanwhile makes and removes its own, and an
    /// entry too many is what the index allows. None is synced one by one: `built` is
    /// written only once the file system is, so a crash means building again.
    fn build_index(&self) -> Result<()> {
        let mut entered = 0usize;
        for name in names(&self.dir)?.filter(|name| name.ends_with(".json")) {
            match read_listed(&self.dir, name) {
                Some(Listed::Record(record)) => {
                    (self.enter(&record, false)).map_err(|source| io_error(&self.dir, source))?;
                    entered += 1;
                }
                Some(Listed::Unreadable(bad)) => {
                    tracing::warn!(record = %bad.key, error = %bad.error, "a journal record does not read: whole listings name it, the index does not")
                }
                None => {}
            }
        }
        let built = self.index_dir().join("built");
        let sync = || -> io::Result<()> {
            // Every entry and folder made above, in one call: `built` says they are durable.
            rustix::fs::syncfs(File::open(self.index_dir())?)?;
            crate::owner_only::create(&built)?.sync_all()?;
            File::open(self.index_dir())?.sync_all()
        };
        sync().map_err(|source| io_error(&built, source))?;
        tracing::info!(dir = %self.dir.display(), records = entered, "indexed the journal's records");
        Ok(())
    }

    /// The entries `record` needs, made before it is written (each synced when new and
    /// `durable`): a crash between leaves one entry too many, never a record its entries do
    /// not find.
    fn enter(&self, record: &RestoreRecord, durable: bool) -> io::Result<()> {
        let started = self.started_entry(record);
        if let Some(day) = started.parent()
            && !day.exists()
        {
            crate::owner_only::open_dir(day)?;
            if durable {
                File::open(self.index_dir().join("started"))?.sync_all()?;
            }
        }
        let content = self.content_entry(&record.id);
        if let Some(of_content) = content.parent()
            && !of_content.exists()
        {
            crate::owner_only::open_dir(of_content)?;
            if durable {
                for made in of_content.ancestors().skip(1).take(2) {
                    File::open(made)?.sync_all()?;
                }
            }
        }
        let mut wanted = vec![started, content];
        if record.is_open() {
            wanted.push(self.open_entry(&record.id));
        }
        for path in wanted {
            make_entry(&path, durable)?;
        }
        let label = outcome_label(record.outcome);
        self.change_outcome_entry(label, &record.id, Entry::Made, durable)?;
        Ok(())
    }

    /// Removes the entries `record`, as just written, no longer has: an open entry once it
    /// is not open, the outcome entries of other outcomes. One left by a failure here is an
    /// entry too many, which readers check against the record.
    fn leave(&self, record: &RestoreRecord) {
        let own = outcome_label(record.outcome);
        for label in outcome_labels().filter(|label| *label != own) {
            // Never an error: remove_entry logs an entry it could not remove.
            let _ = self.change_outcome_entry(label, &record.id, Entry::Removed, false);
        }
        if !record.is_open() {
            remove_entry(&self.open_entry(&record.id));
        }
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
        self.enter(record, true)
            .map_err(|source| io_error(&self.index_dir(), source))?;
        let inode = write().map_err(|source| io_error(&path, source))?;
        self.written
            .lock()
            .expect("written lock: no panics under it")
            .insert(id.clone(), inode);
        self.leave(record);
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
        // The record is gone: its entries lead nowhere, and readers skip them if this fails.
        for entry in [
            self.started_entry(listed),
            self.content_entry(id),
            self.open_entry(id),
        ] {
            remove_entry(&entry);
        }
        let label = outcome_label(listed.outcome);
        let _ = self.change_outcome_entry(label, id, Entry::Removed, false);
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
        let files = match self.content_files(prefix) {
            Some(files) => files,
            None => names(&self.dir).map(|names| {
                (names.filter(|name| name.starts_with(prefix) && name.ends_with(".json"))).collect()
            }),
        };
        match files {
            Ok(files) => self.send_records(files.into_iter(), |_| true, out),
            Err(e) => {
                let _ = out.blocking_send(Err(e));
            }
        }
    }

    /// Sends the records the `open` index names that are open, and each that does not read.
    fn scan_open_blocking(&self, out: &mpsc::Sender<Result<Listed>>) {
        let dir = self.index_dir().join("open");
        match names(&dir) {
            Ok(names) => {
                let files = (names.filter_map(|name| RestoreId::parse(&name).ok()))
                    .map(|id| format!("{id}.json"));
                self.send_records(files, RestoreRecord::is_open, out);
            }
            Err(e) => {
                let _ = out.blocking_send(Err(e));
            }
        }
    }

    /// Sends the record in each of `files` that `keep` wants, and each that does not read;
    /// a record gone since its name was read (removed, or replaced mid-read) is passed over.
    fn send_records(
        &self,
        files: impl Iterator<Item = String>,
        keep: impl Fn(&RestoreRecord) -> bool,
        out: &mpsc::Sender<Result<Listed>>,
    ) {
        for file in files {
            let listed = match read_listed(&self.dir, file) {
                Some(Listed::Record(record)) if !keep(&record) => continue,
                Some(listed) => listed,
                None => continue,
            };
            if out.blocking_send(Ok(listed)).is_err() {
                return;
            }
        }
    }

    /// The newest `n` records, walking the `started` index's days and names newest first
    /// and reading only the records it keeps.
    fn newest_blocking(&self, n: usize) -> Result<Listing> {
        let mut newest = Newest::of(n);
        let started = self.index_dir().join("started");
        let mut days: Vec<String> = names(&started)?.collect();
        days.sort_unstable_by(|a, b| b.cmp(a));
        for day in days {
            let mut entries: Vec<String> = names(&started.join(&day))?.collect();
            entries.sort_unstable_by(|a, b| b.cmp(a));
            for id in entries.iter().filter_map(|name| index::id_of_started(name)) {
                if newest.full() {
                    return Ok(newest.done());
                }
                if let Some(listed) = read_listed(&self.dir, format!("{id}.json")) {
                    newest.take(listed);
                }
            }
        }
        Ok(newest.done())
    }

    /// How many entries each outcome's directory holds, listing only those another
    /// process changed ([`Tally`]).
    fn count_outcomes_blocking(&self) -> Result<BTreeMap<&'static str, u64>> {
        (outcome_labels())
            .map(|label| {
                let dir = self.outcome_dir(label);
                let count = self.tally.count(label, &dir);
                Ok((label, count.map_err(|source| io_error(&dir, source))?))
            })
            .collect()
    }
}

impl FileJournal {
    /// Runs `read` on a blocking thread, handing `visit` what it sends a page at a time.
    fn stream<'a>(
        &'a self,
        read: impl FnOnce(&FileJournal, &mpsc::Sender<Result<Listed>>) + Send + 'static,
        visit: &'a mut Visit<'_>,
    ) -> BoxFuture<'a, Result<()>> {
        let this = self.clone();
        Box::pin(async move {
            let (out, mut found) = mpsc::channel(SCAN_PAGE);
            let reader = tokio::task::spawn_blocking(move || read(&this, &out));
            while let Some(listed) = found.recv().await {
                visit(listed?);
            }
            reader
                .await
                .map_err(|e| Error::Backend(format!("journal task failed: {e}")))
        })
    }
}

/// Makes an index entry, synced into its directory when new and `durable`; whether it
/// was new.
fn make_entry(path: &Path, durable: bool) -> io::Result<bool> {
    match crate::owner_only::open(path, OpenOptions::new().write(true).create_new(true)) {
        Ok(_) if durable => {
            File::open(path.parent().expect("an entry is in a directory"))?.sync_all()?;
            Ok(true)
        }
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Removes an index entry, if there; whether it removed one. One that stays is an entry
/// too many, which readers check against its record.
fn remove_entry(path: &Path) -> bool {
    match fs::remove_file(path) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => {
            tracing::warn!(entry = %path.display(), error = %e, "a stale journal index entry stays");
            false
        }
    }
}

/// The names in `dir`, none when it is not there (a job with no attempt yet).
fn names_if_any(dir: &Path) -> Result<std::vec::IntoIter<String>> {
    match fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new().into_iter()),
        _ => names(dir).map(|names| names.collect::<Vec<_>>().into_iter()),
    }
}

/// The names in `dir` that are text (no name this journal writes is not).
fn names(dir: &Path) -> Result<impl Iterator<Item = String>> {
    let entries = fs::read_dir(dir).map_err(|source| io_error(dir, source))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| io_error(dir, source))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    Ok(names.into_iter())
}

/// How many records a scan reads ahead of its visitor: the page it holds at once.
const SCAN_PAGE: usize = 64;

/// The record in `dir`'s `file` as a listing shows it, by that name when it does not read;
/// `None` when it is gone.
fn read_listed(dir: &Path, file: String) -> Option<Listed> {
    match read_record(&dir.join(&file)) {
        Ok(Some(record)) => Some(Listed::Record(record)),
        Ok(None) => None,
        Err(error) => Some(Listed::Unreadable(Unreadable { key: file, error })),
    }
}

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
        let prefix = id_prefix.to_owned();
        self.stream(move |this, out| this.scan_blocking(&prefix, out), visit)
    }

    fn scan_open<'a>(&'a self, visit: &'a mut Visit<'_>) -> BoxFuture<'a, Result<()>> {
        self.stream(|this, out| this.scan_open_blocking(out), visit)
    }

    fn newest(&self, n: usize) -> BoxFuture<'_, Result<Listing>> {
        let this = self.clone();
        Box::pin(blocking(move || this.newest_blocking(n)))
    }

    fn count_outcomes(&self) -> BoxFuture<'_, Result<BTreeMap<&'static str, u64>>> {
        let this = self.clone();
        Box::pin(blocking(move || this.count_outcomes_blocking()))
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
        let left: Vec<_> = (fs::read_dir(journal.dir()).unwrap())
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["index"]);
        assert_eq!(entries(&journal), Vec::<String>::new());
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

    /// Saves attempts 3, 1, 5, 2 and 4 of one job (started in attempt order), the even
    /// ones finished.
    async fn five_attempts(journal: &FileJournal) {
        for attempt in [3, 1, 5, 2, 4] {
            let id = RestoreId::new("orders", "abcdef0123456789", attempt);
            let claim = journal.claim(&id).await.unwrap();
            let mut r = record(&id, attempt);
            r.outcome = (attempt % 2 == 0).then_some(Outcome::Succeeded);
            journal.save(claim.as_ref(), &r).await.unwrap();
        }
    }

    /// A journal in a directory of its own, holding [`five_attempts`].
    async fn with_five_attempts() -> (tempfile::TempDir, FileJournal) {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        five_attempts(&journal).await;
        (dir, journal)
    }

    fn attempts(listing: &crate::journal::Listing) -> Vec<u32> {
        listing.records.iter().map(|r| r.attempt).collect()
    }

    /// The attempts a listing shows, and the keys of the records it met that do not read.
    fn shown(listing: &crate::journal::Listing) -> (Vec<u32>, Vec<&str>) {
        let keys = listing.unreadable.iter().map(|u| u.key.as_str()).collect();
        (attempts(listing), keys)
    }

    /// Every file under the index, relative to it.
    fn entries(journal: &FileJournal) -> Vec<String> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
            for entry in fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                match path.is_dir() {
                    true => walk(&path, base, out),
                    false => out.push(path.strip_prefix(base).unwrap().display().to_string()),
                }
            }
        }
        let mut out = Vec::new();
        walk(&journal.index_dir(), &journal.index_dir(), &mut out);
        out.retain(|e| e != "built");
        out.sort();
        out
    }

    /// The newest few are the newest by start whatever order they were saved in, the open
    /// ones are the unfinished ones, and a record that does not read is named by each
    /// listing that comes to it, the others listed.
    #[tokio::test]
    async fn a_listing_keeps_the_newest_or_the_open_and_names_a_bad_record() {
        let (_dir, journal) = with_five_attempts().await;
        assert_eq!(attempts(&journal.newest(2).await.unwrap()), [4, 5]);
        assert_eq!(attempts(&journal.list_open().await.unwrap()), [1, 3, 5]);

        let fifth = "orders.abcdef012345.5.json";
        fs::write(journal.dir().join(fifth), b"{ not json").unwrap();
        let newest = journal.newest(2).await.unwrap();
        assert_eq!(shown(&newest), (vec![3, 4], vec![fifth]));
        let open = journal.list_open().await.unwrap();
        assert_eq!(shown(&open), (vec![1, 3], vec![fifth]));
        let all = journal.list().await.unwrap();
        assert_eq!(shown(&all), (vec![1, 2, 3, 4], vec![fifth]));
    }

    /// A listing of the newest reads the records it shows and no other: a record that does
    /// not read, older than those shown, is not come to; asked for more, it is.
    #[tokio::test]
    async fn the_newest_are_found_without_reading_older_records() {
        let (_dir, journal) = with_five_attempts().await;
        // Attempt 1 started three days before the others: its entry is in another day.
        let first = RestoreId::new("orders", "abcdef0123456789", 1);
        let claim = journal.claim(&first).await.unwrap();
        let mut early = record(&first, 1);
        early.started_at = jiff::Timestamp::from_second(1_700_000_000 - 3 * 86_400).unwrap();
        journal.save(claim.as_ref(), &early).await.unwrap();
        let stale = journal.started_entry(&record(&first, 1));
        fs::remove_file(stale).unwrap();
        let file = "orders.abcdef012345.1.json";
        fs::write(journal.dir().join(file), b"{ not json").unwrap();

        let newest = journal.newest(4).await.unwrap();
        assert_eq!(shown(&newest), (vec![2, 3, 4, 5], vec![]));
        let more = journal.newest(5).await.unwrap();
        assert_eq!(shown(&more), (vec![2, 3, 4, 5], vec![file]));
    }

    /// Each save leaves the entries its record needs and no other, and a removal leaves
    /// none; the outcome counts follow.
    #[tokio::test]
    async fn the_index_follows_each_save_and_removal() {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        let id = RestoreId::new("orders", "abcdef0123456789", 1);
        let claim = journal.claim(&id).await.unwrap();
        let mut r = record(&id, 1);
        journal.save(claim.as_ref(), &r).await.unwrap();
        let started = format!("started/019675/{}", index::started_name(&r));
        let content = "content/orders/abcdef012345/1".to_owned();
        assert_eq!(
            entries(&journal),
            [
                content.clone(),
                format!("open/{id}"),
                format!("outcome/running/{id}"),
                started.clone()
            ]
        );
        r.outcome = Some(Outcome::Succeeded);
        r.stage_left = true;
        journal.save(claim.as_ref(), &r).await.unwrap();
        assert_eq!(
            entries(&journal),
            [
                content.clone(),
                format!("open/{id}"),
                format!("outcome/succeeded/{id}"),
                started.clone()
            ]
        );
        r.stage_left = false;
        journal.save(claim.as_ref(), &r).await.unwrap();
        assert_eq!(
            entries(&journal),
            [content, format!("outcome/succeeded/{id}"), started]
        );
        let counts = journal.count_outcomes().await.unwrap();
        assert_eq!(counts.len(), Outcome::ALL.len() + 1);
        assert_eq!(counts.values().sum::<u64>(), 1);
        assert_eq!(counts["succeeded"], 1);
        drop(claim);
        assert_eq!(journal.remove(&r).await.unwrap(), Removal::Removed);
        assert_eq!(entries(&journal), Vec::<String>::new());
        assert_eq!(journal.count_outcomes().await.unwrap()["succeeded"], 0);
    }

    /// The outcome counts follow every save and removal of this journal from what it knows,
    /// and a save by another journal on the same directory from a listing.
    #[tokio::test]
    async fn the_outcome_counts_follow_this_journals_changes_and_anothers() {
        let dir = tempfile::tempdir().unwrap();
        let ours = FileJournal::open(dir.path()).unwrap();
        let counted = |j: &FileJournal| {
            let j = j.clone();
            async move {
                let counts = j.count_outcomes().await.unwrap();
                (counts["running"], counts["succeeded"])
            }
        };
        assert_eq!(counted(&ours).await, (0, 0));
        let id = RestoreId::new("orders", "abcdef0123456789", 1);
        let claim = ours.claim(&id).await.unwrap();
        let mut r = record(&id, 1);
        ours.save(claim.as_ref(), &r).await.unwrap();
        assert_eq!(counted(&ours).await, (1, 0));
        r.outcome = Some(Outcome::Succeeded);
        ours.save(claim.as_ref(), &r).await.unwrap();
        assert_eq!(counted(&ours).await, (0, 1));

        // Past the coarsest clock a folder's time is kept with, so that the other journal's
        // change moves it.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let theirs = FileJournal::open(dir.path()).unwrap();
        let other = RestoreId::new("orders", "bbbbbb0123456789", 1);
        let their_claim = theirs.claim(&other).await.unwrap();
        let mut t = record(&other, 1);
        t.outcome = Some(Outcome::Succeeded);
        theirs.save(their_claim.as_ref(), &t).await.unwrap();
        assert_eq!(counted(&ours).await, (0, 2));

        drop(claim);
        assert_eq!(ours.remove(&r).await.unwrap(), Removal::Removed);
        assert_eq!(counted(&ours).await, (0, 1));
    }

    /// A job's attempts, and a lookup by its name, are read from its `content` entries: two
    /// contents of one job apart, another job's records never among them.
    #[tokio::test]
    async fn a_jobs_attempts_are_found_by_its_content_entries() {
        let (_dir, journal) = with_five_attempts().await;
        for (name, hash) in [
            ("orders", "bbbbbb0123456789"),
            ("orders_v2", "abcdef0123456789"),
        ] {
            let id = RestoreId::new(name, hash, 1);
            let claim = journal.claim(&id).await.unwrap();
            let r = RestoreRecord::new(id, name, hash, 1, "b", vec![]);
            journal.save(claim.as_ref(), &r).await.unwrap();
        }
        let attempts = journal
            .attempts("orders", "abcdef0123456789")
            .await
            .unwrap();
        assert_eq!(
            attempts.iter().map(|r| r.attempt).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        let lookup = crate::journal::RestoreLookup::parse("orders").unwrap();
        let newest = lookup.find(&journal).await.unwrap().unwrap();
        assert_eq!(newest.content_hash, "bbbbbb0123456789", "started last");
        let lookup = crate::journal::RestoreLookup::parse("orders.abcdef012345").unwrap();
        assert_eq!(lookup.find(&journal).await.unwrap().unwrap().attempt, 5);
        assert!(
            journal
                .attempts("nobody", "abcdef0123456789")
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// An entry too many (a crash between a save's record and its removal of an entry, or
    /// a removal's record and its entries) leads to nothing: listings check the record.
    #[tokio::test]
    async fn an_entry_too_many_is_passed_over() {
        let (_dir, journal) = with_five_attempts().await;
        let second = RestoreId::new("orders", "abcdef0123456789", 2);
        fs::write(journal.open_entry(&second), b"").unwrap();
        assert_eq!(attempts(&journal.list_open().await.unwrap()), [1, 3, 5]);
        fs::remove_file(journal.record_path(&RestoreId::new("orders", "abcdef0123456789", 5)))
            .unwrap();
        let newest = journal.newest(2).await.unwrap();
        assert_eq!(shown(&newest), (vec![3, 4], vec![]));
    }

    /// A journal written before the index is indexed when first opened, once: its records
    /// are found by the newest, the open and the counts; one written in later by hand, not
    /// by a save, is found only by a whole listing.
    #[tokio::test]
    async fn a_journal_from_before_the_index_is_indexed_when_opened() {
        let (dir, journal) = with_five_attempts().await;
        fs::remove_dir_all(journal.index_dir()).unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        assert_eq!(attempts(&journal.newest(3).await.unwrap()), [3, 4, 5]);
        assert_eq!(attempts(&journal.list_open().await.unwrap()), [1, 3, 5]);
        let counts = journal.count_outcomes().await.unwrap();
        assert_eq!((counts["running"], counts["succeeded"]), (3, 2));

        let sixth = record(&RestoreId::new("orders", "abcdef0123456789", 6), 6);
        let path = journal.record_path(&sixth.id);
        fs::write(path, serde_json::to_vec(&sixth).unwrap()).unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        assert_eq!(attempts(&journal.newest(1).await.unwrap()), [5]);
        assert_eq!(attempts(&journal.list().await.unwrap()), [1, 2, 3, 4, 5, 6]);
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
