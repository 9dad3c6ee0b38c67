//! What a stage moves and where: the files, the stores they come from and go to, and how
//! each got there.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use object_store::path::Path;

use crate::backup::BackupFile;

use super::super::open::{OpenedStore, StoreId};

/// Where the backup's files are read from.
#[derive(Debug, Clone, Copy)]
pub struct StageSource<'a> {
    pub store: &'a OpenedStore,
    /// `{backup root}/{backup name}` inside the store.
    pub backup_dir: &'a Path,
}

/// An end to stage into, by name (for reports and errors).
#[derive(Debug, Clone, Copy)]
pub struct Destination<'a> {
    pub end: &'a str,
    pub store: &'a OpenedStore,
}

/// How a staged file got to its destination.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Transfer {
    /// Copied inside the store; no bytes passed through the host.
    ServerSideCopy,
    /// Hard-linked from the backup's file, a local store on the backup's filesystem: no
    /// bytes copied, as `ObjectStore::copy` within one local store does. Milvus only reads
    /// an import's files and the backup's are never rewritten, so sharing the inode is safe.
    Linked,
    /// Read from the backup's store and written through the host (between two local
    /// directories, copied by the host's kernel).
    Streamed,
    /// Already there with the right size (a resumed stage).
    AlreadyStaged,
    /// Made by lockstep (an L0 fold's delta log) and put.
    Written,
}

impl Transfer {
    /// How the report names it, as its JSON does.
    pub fn label(self) -> &'static str {
        match self {
            Transfer::ServerSideCopy => "server_side_copy",
            Transfer::Linked => "linked",
            Transfer::Streamed => "streamed",
            Transfer::AlreadyStaged => "already_staged",
            Transfer::Written => "written",
        }
    }
}

/// What a stage placed: for each store, its ends and how each file (in the order the stage
/// was given them) reached it. One byte a file and store, however many files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Staged {
    pub stores: Vec<StagedStore>,
}

/// One store of a [`Staged`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedStore {
    pub ends: Vec<String>,
    pub transfers: Vec<Transfer>,
}

impl Staged {
    /// How file `file` reached `end`; `None` for an end not staged into.
    pub fn transfer(&self, end: &str, file: usize) -> Option<Transfer> {
        self.stores
            .iter()
            .find(|s| s.ends.iter().any(|e| e == end))
            .and_then(|s| s.transfers.get(file).copied())
    }

    /// Files placed by each kind of transfer, counted once per end, and the bytes of
    /// `files` streamed through the host, summed over the ends.
    pub fn tally<F: Borrow<BackupFile>>(&self, files: &[F]) -> (BTreeMap<Transfer, u64>, u64) {
        let (mut counts, mut streamed) = (BTreeMap::new(), 0);
        for store in &self.stores {
            let ends = store.ends.len() as u64;
            for (transfer, file) in store.transfers.iter().zip(files) {
                *counts.entry(*transfer).or_default() += ends;
                if *transfer == Transfer::Streamed {
                    streamed += file.borrow().size * ends;
                }
            }
        }
        (counts, streamed)
    }
}

/// Ends sharing one store: it is copied into once.
pub(super) struct StoreGroup<'a> {
    pub store: &'a OpenedStore,
    pub ends: Vec<&'a str>,
}

impl StoreGroup<'_> {
    /// The ends' names for errors: `a` or `a,b`.
    pub fn ends(&self) -> String {
        self.ends.join(",")
    }
}

pub(super) fn group_by_store<'a>(destinations: &[Destination<'a>]) -> Vec<StoreGroup<'a>> {
    let mut groups: BTreeMap<&StoreId, StoreGroup<'a>> = BTreeMap::new();
    for destination in destinations {
        groups
            .entry(&destination.store.id)
            .or_insert_with(|| StoreGroup {
                store: destination.store,
                ends: Vec::new(),
            })
            .ends
            .push(destination.end);
    }
    groups.into_values().collect()
}
