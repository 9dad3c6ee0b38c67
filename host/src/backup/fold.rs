//! L0 deletes folded into the data segments' own imports.
//!
//! Milvus 2.4 to 2.6 write deletes into L0 (delete-only) segments, and a restore imports them
//! as `l0_import=true` jobs. Milvus 3.0 refuses those unless `dataCoord.import.enableL0Import`
//! is on, which it is not by default, and 2.3 has no L0 import at all. So where any end would
//! not take them, lockstep folds them instead, as milvus-backup's offline `l0compact` does:
//! for each file group of a data batch, the L0 deletes of keys the group holds become one more
//! delta log of that group, written in the stage beside its own. The group's import applies
//! them by Milvus's own rule (a delete removes the rows of its key written before it), and no
//! L0 job is created.
//!
//! Which deletes apply to a group: its partition's L0 segments, and the collection-level L0
//! segments, which apply to every partition. A key deleted more than once keeps its latest
//! delete: a row written before it is removed whichever delete names it, a row written after
//! it by none. The log is written in the one-column JSON form inside the v1 envelope, whatever
//! the segment's storage version: Milvus reads an import's delta logs with that reader only
//! (milvus-backup's `l0compact` writes the same form for the same reason).

use std::collections::{HashMap, HashSet};

use super::BackupFile;
use super::batch::{BatchKind, ImportBatch};
use super::plan::CollectionPlan;
use super::read::Backup;
use milvus_formats::binlog::{self, Delete, DeltaForm, Descriptor, Pk};
use milvus_proto::schema::DataType;

/// Each key's latest delete. Hashed with foldhash, not SipHash: every row of a collection
/// with L0 segments looks its key up here, and SipHash was a tenth of counting its rows.
type Latest = HashMap<Pk, u64, foldhash::fast::RandomState>;

/// A collection's L0 deletes: for each key, its latest delete.
#[derive(Debug, Default)]
pub struct L0Deletes {
    by_partition: HashMap<String, Latest>,
    everywhere: Latest,
}

impl L0Deletes {
    /// Adds the deletes of one L0 batch: its partition's, or every partition's.
    pub fn add(&mut self, partition: Option<&str>, deletes: Vec<Delete>) {
        let map = match partition {
            Some(p) => self.by_partition.entry(p.to_owned()).or_default(),
            None => &mut self.everywhere,
        };
        for Delete { pk, ts } in deletes {
            let latest = map.entry(pk).or_default();
            *latest = (*latest).max(ts);
        }
    }

    /// The deletes that name a key of `rows` (rows of `partition`), one per key with its
    /// latest timestamp, in the order the keys first appear.
    pub fn hits(&self, partition: &str, rows: &[(Pk, u64)]) -> Vec<Delete> {
        let own = self.by_partition.get(partition);
        let mut seen = HashSet::with_hasher(foldhash::fast::RandomState::default());
        rows.iter()
            .filter_map(|(pk, _)| {
                let ts = [own.and_then(|m| m.get(pk)), self.everywhere.get(pk)]
                    .into_iter()
                    .flatten()
                    .max()?;
                seen.insert(pk).then(|| Delete {
                    pk: pk.clone(),
                    ts: *ts,
                })
            })
            .collect()
    }
}

/// The L0 deletes one file group of a data batch takes.
#[derive(Debug)]
pub struct Folded {
    /// The group's index in the batch's `files`.
    pub group: usize,
    /// Its segments, the first of which names the log's directory.
    pub segments: Vec<i64>,
    pub deletes: Vec<Delete>,
}

/// Log ids for the folded logs: above every log id the backup holds, so none can take the
/// name of a delta log of the backup's own.
pub struct LogIds(i64);

impl LogIds {
    pub fn above(backup: &Backup) -> Self {
        let highest = backup
            .files
            .binlogs
            .under("")
            .filter_map(|(path, _)| path.rsplit('/').next()?.parse::<i64>().ok())
            .max()
            .unwrap_or(0);
        LogIds(highest)
    }

    fn next(&mut self) -> i64 {
        self.0 += 1;
        self.0
    }
}

/// Folds a collection's L0 deletes into its data batches: each group in `folded` gets a delta
/// log (a delta prefix too, if it had none), written into `files` for the stage, and the L0
/// batches go. Returns the prefixes of the L0 logs no import reads any more, for
/// [`unstage`]: every L0 batch's, but one a data group's prefix holds (a backup without group
/// ids keeps a partition's data and L0 delta logs under one prefix, which that group's import
/// reads whole).
pub fn apply(
    collection: &mut CollectionPlan,
    folded: Vec<(usize, Vec<Folded>)>,
    ids: &mut LogIds,
    files: &mut Vec<BackupFile>,
) -> Vec<String> {
    let source_id = collection.source_collection_id;
    for (index, groups) in folded {
        let batch = &mut collection.batches[index];
        for fold in groups {
            let file = delta_log(batch, &fold, source_id, ids.next());
            batch.bytes += file.size;
            // The batch's delta logs now hold these deletes too, as the meta would count them
            // had milvus-backup's `l0compact` written the log.
            batch.deletes = batch.deletes.map(|d| d + fold.deletes.len() as i64);
            files.push(file);
        }
    }
    let (l0, data): (Vec<ImportBatch>, Vec<ImportBatch>) = std::mem::take(&mut collection.batches)
        .into_iter()
        .partition(|b| b.kind == BatchKind::L0);
    collection.batches = data;
    unread(
        collection
            .batches
            .iter()
            .flat_map(|b| b.files.iter().flatten()),
        l0.into_iter().flat_map(|b| b.files.into_iter().flatten()),
    )
}

/// The prefixes of `l0` that lie under none of the prefixes `read`.
fn unread<'a>(
    read: impl Iterator<Item = &'a String>,
    l0: impl Iterator<Item = String>,
) -> Vec<String> {
    let read: HashSet<&str> = read.map(String::as_str).collect();
    l0.filter(|prefix| !ancestors(prefix).any(|dir| read.contains(dir)))
        .collect()
}

/// Drops from the files to stage the logs of the L0 prefixes [`apply`] returned: nothing
/// imports them once folded, and staging them would copy bytes no end reads (and leave files
/// a storage probe, which probes what the jobs import, would not see).
pub fn unstage(files: &mut Vec<BackupFile>, unread: &HashSet<String>) {
    if unread.is_empty() {
        return;
    }
    files.retain(|f| !ancestors(&f.path).any(|dir| unread.contains(dir)));
}

/// Each directory `path` lies in, outermost first, every one ending in `/` (a prefix that
/// ends in `/` is among its own).
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.char_indices()
        .filter(|(_, c)| *c == '/')
        .map(|(i, _)| &path[..=i])
}

/// The delta log of one group's folded deletes, under the group's delta prefix, which the
/// group gets if it had none: `delta_log/` mirrors `insert_log/` in every backup layout.
fn delta_log(
    batch: &mut ImportBatch,
    fold: &Folded,
    collection_id: i64,
    log_id: i64,
) -> BackupFile {
    let group = &mut batch.files[fold.group];
    if group.len() == 1 {
        let delta = group[0].replacen("/insert_log/", "/delta_log/", 1);
        group.push(delta);
    }
    let segment = fold.segments.first().copied().unwrap_or_default();
    let path = format!("{}{segment}/{log_id}", group[1]);
    let partition_id = path
        .split('/')
        .nth(3)
        .and_then(|p| p.parse().ok())
        .unwrap_or_default();
    let descriptor = Descriptor {
        collection_id,
        partition_id,
        segment_id: segment,
        start_ts: fold.deletes.iter().map(|d| d.ts).min().unwrap_or_default(),
        end_ts: fold.deletes.iter().map(|d| d.ts).max().unwrap_or_default(),
        written_ts: fold.deletes.iter().map(|d| d.ts).max().unwrap_or_default(),
        ..Descriptor::new(-1, DataType::String)
    };
    let bytes = bytes::Bytes::from(binlog::encode_delta(
        descriptor,
        &fold.deletes,
        DeltaForm::Json,
    ));
    BackupFile {
        size: bytes.len() as u64,
        path,
        source: None,
        written: Some(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(keys: &[i64]) -> Vec<(Pk, u64)> {
        keys.iter().map(|k| (Pk::Int(*k), 5)).collect()
    }

    #[test]
    fn a_group_takes_the_latest_delete_of_each_key_it_holds_from_its_partition_and_everywhere() {
        let mut l0 = L0Deletes::default();
        l0.add(
            Some("p"),
            vec![Delete::int(1, 10), Delete::int(1, 30), Delete::int(7, 10)],
        );
        l0.add(Some("q"), vec![Delete::int(2, 10)]);
        l0.add(None, vec![Delete::int(1, 20), Delete::int(3, 40)]);
        // Key 1 twice in the group: one delete. Key 2 is deleted in another partition only.
        let hits = l0.hits("p", &rows(&[1, 2, 3, 1, 4]));
        assert_eq!(hits, vec![Delete::int(1, 30), Delete::int(3, 40)]);
        assert_eq!(l0.hits("q", &rows(&[2])), vec![Delete::int(2, 10)]);
        assert!(l0.hits("r", &rows(&[7])).is_empty());
    }

    /// Once folded, an L0 segment's logs are staged no more, unless a data group's import
    /// reads them too: in a backup without group ids a partition's one delta prefix holds its
    /// L0 segments' directories.
    #[test]
    fn the_l0_logs_no_import_reads_are_not_staged() {
        let strings = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let data = strings(&[
            "binlogs/insert_log/1/7/11/",
            "binlogs/delta_log/1/7/11/",
            "binlogs/insert_log/1/8/",
            "binlogs/delta_log/1/8/",
        ]);
        let l0 = strings(&[
            "binlogs/delta_log/1/7/12/",
            "binlogs/delta_log/1/8/13/",
            "binlogs/delta_log/1/-1/14/",
        ]);
        let unread: HashSet<String> = unread(data.iter(), l0.into_iter()).into_iter().collect();
        let expected = strings(&["binlogs/delta_log/1/7/12/", "binlogs/delta_log/1/-1/14/"]);
        assert_eq!(unread, expected.into_iter().collect());
        let file = |path: &str| BackupFile {
            path: path.into(),
            size: 1,
            source: None,
            written: None,
        };
        let mut files = vec![
            file("binlogs/delta_log/1/7/11/11/20"),
            file("binlogs/delta_log/1/7/12/12/21"),
            file("binlogs/delta_log/1/8/13/22"),
            file("binlogs/delta_log/1/-1/14/23"),
            file("binlogs/insert_log/1/7/11/11/100/24"),
        ];
        unstage(&mut files, &unread);
        let kept: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            kept,
            [
                "binlogs/delta_log/1/7/11/11/20",
                "binlogs/delta_log/1/8/13/22",
                "binlogs/insert_log/1/7/11/11/100/24"
            ]
        );
    }
}
