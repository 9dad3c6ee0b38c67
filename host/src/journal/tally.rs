//! The state directory's count of each outcome's index entries, for `/metrics`, without
//! listing a folder that nobody else changed since it was last counted.
//!
//! A folder's modification time moves whenever an entry is made in it or removed. The tally
//! keeps, per outcome, the entries it knows of and the folder's time when it knew them. Its
//! own journal's changes go through [`Tally::change`], which adds or takes one and takes the
//! new time, provided the time was still the known one just before: nobody else had
//! changed the folder. A folder whose time moved otherwise (another process's journal on the
//! same directory, `lockstep prune`) is listed again at the next count. So a scrape lists
//! nothing while only this process writes, and one folder after another process wrote.
//!
//! A time is only as fine as the filesystem's clock (a tick of a few milliseconds, whole
//! seconds on some filesystems): a change by another process in the same tick as one of
//! ours can leave the time where ours put it. A count older than [`RECOUNT_EVERY`] is
//! listed again, so such a miss lasts that long at most.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How long a count is trusted without listing its folder: as long as `serve`'s audit
/// leaves between two whole reads of the journal.
const RECOUNT_EVERY: Duration = Duration::from_secs(600);

/// What a change did to a folder's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    Made,
    Removed,
}

/// What is known of one outcome's folder.
#[derive(Debug, Clone, Copy)]
struct Known {
    entries: u64,
    /// The folder's modification time when `entries` was right.
    modified: SystemTime,
    /// When the folder was last listed.
    listed: Instant,
}

#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Per outcome label. Held across the filesystem calls of a change or a count, so that
    /// no change of this journal falls between a time read and the count it goes with.
    known: Mutex<HashMap<&'static str, Known>>,
}

impl Tally {
    /// Runs `change`, which makes or removes (`entry`) one entry in `label`'s `folder` and
    /// says whether it did (the entry was not there already, or was there to remove).
    pub(super) fn change(
        &self,
        label: &'static str,
        folder: &Path,
        entry: Entry,
        change: impl FnOnce() -> io::Result<bool>,
    ) -> io::Result<bool> {
        let mut known = self.lock();
        let before = modified(folder).ok();
        let changed = change()?;
        if changed {
            match (known.get_mut(label), before, modified(folder).ok()) {
                (Some(k), Some(before), Some(after)) if k.modified == before => {
                    k.entries = match entry {
                        Entry::Made => k.entries + 1,
                        Entry::Removed => k.entries.saturating_sub(1),
                    };
                    k.modified = after;
                }
                // Someone else changed it too: the next count lists it.
                _ => {
                    known.remove(label);
                }
            }
        }
        Ok(changed)
    }

    /// The entries of `label`'s `folder`: as known while its time has not moved otherwise,
    /// else listed.
    pub(super) fn count(&self, label: &'static str, folder: &Path) -> io::Result<u64> {
        let mut known = self.lock();
        // Read before the listing: a change while it lists moves the time past this one.
        let modified = modified(folder)?;
        if let Some(k) = known.get(label)
            && k.modified == modified
            && k.listed.elapsed() < RECOUNT_EVERY
        {
            return Ok(k.entries);
        }
        let listed = Instant::now();
        let mut entries = 0;
        for entry in fs::read_dir(folder)? {
            entry?;
            entries += 1;
        }
        known.insert(
            label,
            Known {
                entries,
                modified,
                listed,
            },
        );
        Ok(entries)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, Known>> {
        self.known.lock().expect("tally lock: no panics under it")
    }
}

fn modified(folder: &Path) -> io::Result<SystemTime> {
    fs::metadata(folder)?.modified()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets `folder`'s modification time.
    fn set_modified(folder: &Path, at: SystemTime) {
        fs::File::open(folder).unwrap().set_modified(at).unwrap();
    }

    fn make(tally: &Tally, folder: &Path, name: &str) -> bool {
        let path = folder.join(name);
        tally
            .change(
                "succeeded",
                folder,
                Entry::Made,
                || match fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                {
                    Ok(_) => Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                    Err(e) => Err(e),
                },
            )
            .unwrap()
    }

    /// While only the tally's own changes touch the folder, a count does not list it: an
    /// entry planted behind its back, the folder's time put back, is not counted. Once the
    /// time moves otherwise, the folder is listed and the planted entry counts.
    #[test]
    fn own_changes_are_counted_without_listing_and_anothers_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path();
        let tally = Tally::default();
        assert!(make(&tally, folder, "a"));
        assert_eq!(tally.count("succeeded", folder).unwrap(), 1);
        assert!(make(&tally, folder, "b"));
        assert!(!make(&tally, folder, "b"), "already there: no change");
        assert_eq!(tally.count("succeeded", folder).unwrap(), 2);

        let known = modified(folder).unwrap();
        fs::write(folder.join("planted"), b"").unwrap();
        set_modified(folder, known);
        assert_eq!(
            tally.count("succeeded", folder).unwrap(),
            2,
            "the folder was not listed"
        );
        let removed = tally
            .change("succeeded", folder, Entry::Removed, || {
                fs::remove_file(folder.join("a")).map(|()| true)
            })
            .unwrap();
        assert!(removed);
        assert_eq!(tally.count("succeeded", folder).unwrap(), 1);

        // Another process's change: the time moves, and the folder is listed.
        set_modified(folder, known + Duration::from_secs(5));
        assert_eq!(tally.count("succeeded", folder).unwrap(), 2);
    }

    /// A change made while the folder's time had moved otherwise is not added to a count
    /// that no longer holds: the next count lists the folder.
    #[test]
    fn a_change_after_anothers_leads_to_a_listing() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path();
        let tally = Tally::default();
        assert_eq!(tally.count("succeeded", folder).unwrap(), 0);
        let known = modified(folder).unwrap();
        fs::write(folder.join("theirs"), b"").unwrap();
        set_modified(folder, known + Duration::from_secs(5));
        assert!(make(&tally, folder, "ours"));
        assert_eq!(tally.count("succeeded", folder).unwrap(), 2);
    }
}
