//! Exact rows: what each data batch's import counts, read from the backup's own data.
//!
//! The meta alone cannot say it: `entries_num` is deprecated and often missing for delta
//! logs, and a segment's meta may claim rows its binlogs do not hold. So for every file
//! group of a data batch (one segment, or a whole partition in a backup without group ids)
//! this reads the primary keys and the timestamps of its rows and every delete of its delta
//! logs, and applies Milvus's rule for an import's own deletes (`FilterWithDelete`): a delete
//! removes the rows with its primary key written before it (a strictly earlier timestamp).
//! A delete of a key the group never held removes nothing (Milvus 2.3 writes a delete into
//! every segment whose bloom filter matches it).
//!
//! Each collection's live rows take every delete: a group's own, and the L0 deletes of its
//! partition and of the whole collection (one rule for all of them, [`fold::L0Deletes`]).
//! Where the L0 deletes are folded, they are a group's own deletes too, and its import counts
//! its live rows.
//!
//! Logs are taken in the order a listing gives (the order Milvus's import reads them in),
//! field by field, so the i-th key and the i-th timestamp are one row's. One group's keys
//! per batch in flight are in memory at a time, with the L0 deletes of the collections being
//! counted (each key once, with its latest delete).
//!
//! The newest of the rows' timestamps is kept too: Milvus 3.0 refuses a commit stamped below
//! it (docs/milvus-facts.md §2.7), so preflight holds every end's clock to it.
//!
//! The rows read are also held to the meta: a group whose binlogs hold another number of
//! rows than its segments' `num_of_rows` is a backup that disagrees with its meta, and the
//! restore is refused naming the segment, rather than restoring what the data holds under a
//! meta that says otherwise.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use milvus_formats::binlog::{self, Delete, Pk};
use milvus_formats::column_group;
use milvus_formats::storage::StorageKind;
use object_store::ObjectStore;

use super::batch::{BatchKind, ImportBatch};
use super::figures::{DataRows, Figures};
use super::fold::{self, L0Deletes};
use super::plan::{CollectionPlan, L0Route, NewestRow, RestorePlan};
use super::read::{Backup, BackupFiles};

/// `common.TimeStampField`: every segment's column of row timestamps.
const TIMESTAMP_FIELD: i64 = 1;

/// Batches whose rows are read at once.
const BATCHES_IN_FLIGHT: usize = 4;

/// Why a batch's exact rows could not be read: the restore then holds its rows to the
/// meta's range, and says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct Unreadable {
    /// The object, or the group's prefix, relative to the backup directory.
    pub path: String,
    pub reason: String,
}

/// A file group whose binlogs hold another number of rows than its meta says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error(
    "{prefix} (segment {}): its binlogs hold {read} rows, its meta says {meta}",
    .segments.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
)]
pub struct Disagreement {
    /// The group's insert prefix, relative to the backup directory.
    pub prefix: String,
    pub segments: Vec<i64>,
    pub read: i64,
    pub meta: i64,
}

/// What counting found beside the figures it set.
#[derive(Debug, Default)]
pub struct Counted {
    /// Batches (or a collection's L0 segments) whose data could not be read, with why.
    pub unreadable: Vec<(String, Unreadable)>,
    /// Groups whose data and meta disagree.
    pub disagreements: Vec<Disagreement>,
    /// Collections whose L0 deletes were to be folded, but whose data did not all read.
    pub unfoldable: Vec<String>,
}

enum Failure {
    Unreadable(Unreadable),
    Disagrees(Disagreement),
}

impl From<Unreadable> for Failure {
    fn from(u: Unreadable) -> Self {
        Failure::Unreadable(u)
    }
}

/// What one data batch's data says.
struct BatchRows {
    /// The rows its import counts.
    imported: i64,
    /// The rows it inserts that no delete of any kind removes.
    live: i64,
    /// The L0 deletes its groups take, when folding.
    folded: Vec<fold::Folded>,
    /// The newest timestamp of its rows.
    newest: Option<u64>,
}

/// Sets `exact_rows` on every data batch of `plan` whose data reads and agrees with its
/// meta, and each collection's [`DataRows`] where all of its batches read. A collection with
/// L0 segments has its L0 deletes taken by `route`: with [`L0Route::Fold`] they are folded
/// into its data batches ([`fold`]) and its L0 batches go. Returns what it found about the
/// batches it could not read.
pub async fn count(
    store: &dyn ObjectStore,
    backup: &Backup,
    plan: &mut RestorePlan,
    route: L0Route,
) -> Counted {
    let mut found = Counted::default();
    for collection in &mut plan.collections {
        let has_l0 = collection.batches.iter().any(|b| b.kind == BatchKind::L0);
        collection.l0 = has_l0.then_some(route);
        collection.rows = None;
    }
    // As many collections' L0 deletes read at once as batches below: one collection after
    // another, each a read and then a decode, they held the count of 1,000 collections with
    // L0 segments at 0.60 s against 0.49 s so. By index, as below.
    let collections = &plan.collections;
    let read: Vec<Option<Result<L0Deletes, Unreadable>>> =
        futures::stream::iter(0..collections.len())
            .map(|c| async move {
                let collection = &collections[c];
                match collection.l0 {
                    Some(_) => Some(l0_deletes(store, &backup.files, collection).await),
                    None => None,
                }
            })
            .buffered(BATCHES_IN_FLIGHT)
            .collect()
            .await;
    let mut l0 = Vec::with_capacity(read.len());
    for (collection, read) in plan.collections.iter().zip(read) {
        l0.push(match read {
            Some(Ok(deletes)) => Some(deletes),
            Some(Err(why)) => {
                found.unreadable.push((collection.target.to_string(), why));
                None
            }
            None => None,
        });
    }

    let mut batches = Vec::new();
    for (c, collection) in plan.collections.iter_mut().enumerate() {
        let pk = collection
            .schema
            .fields
            .iter()
            .find(|f| f.is_primary_key)
            .map(|f| f.field_id);
        let has_l0 = collection.l0.is_some();
        for (b, batch) in collection.batches.iter_mut().enumerate() {
            if batch.kind == BatchKind::Data {
                batch.exact_rows = None;
                // A collection whose L0 deletes did not read cannot say its live rows.
                let l0 = match (has_l0, &l0[c]) {
                    (true, None) => continue,
                    (_, deletes) => deletes.as_ref(),
                };
                batches.push((c, b, &*batch, pk, l0));
            }
        }
    }
    let dirs = segment_dirs(backup);
    let fold = route.folds();
    // By index: a closure over a borrowed item would keep the restore's future from being
    // `Send` (rust-lang/rust#102211).
    let counted: Vec<Result<BatchRows, Failure>> = futures::stream::iter(0..batches.len())
        .map(|i| {
            let (_, _, batch, pk, l0) = batches[i];
            batch_rows(store, &backup.files, &dirs, batch, pk, l0, fold)
        })
        .buffered(BATCHES_IN_FLIGHT)
        .collect()
        .await;
    let places: Vec<(usize, usize)> = batches.iter().map(|(c, b, ..)| (*c, *b)).collect();
    drop(batches);

    let mut read = vec![true; plan.collections.len()];
    for (c, collection) in plan.collections.iter().enumerate() {
        if collection.l0.is_some() && l0[c].is_none() {
            read[c] = false;
        }
    }
    let mut figures: Vec<DataRows> = vec![DataRows::default(); plan.collections.len()];
    let mut newest_row: Option<NewestRow> = None;
    let mut folds: Vec<Vec<(usize, Vec<fold::Folded>)>> =
        (0..plan.collections.len()).map(|_| Vec::new()).collect();
    for ((c, b), rows) in places.into_iter().zip(counted) {
        let batch = &mut plan.collections[c].batches[b];
        match rows {
            Ok(rows) => {
                if let Some(timestamp) = rows.newest {
                    let read = NewestRow {
                        timestamp,
                        collection: c,
                    };
                    newest_row = Some(read.max(newest_row));
                }
                batch.exact_rows = Some(rows.imported);
                let figure = &mut figures[c];
                figure.inserted += batch.rows;
                figure.live += rows.live;
                *figure
                    .partitions
                    .entry(batch.partition.clone().unwrap_or_default())
                    .or_default() += rows.live;
                if !rows.folded.is_empty() {
                    folds[c].push((b, rows.folded));
                }
            }
            Err(Failure::Unreadable(why)) => {
                read[c] = false;
                found.unreadable.push((batch.id.to_string(), why));
            }
            Err(Failure::Disagrees(d)) => {
                read[c] = false;
                found.disagreements.push(d);
            }
        }
    }

    let mut ids = fold::LogIds::above(backup);
    let mut unread = std::collections::HashSet::new();
    for (c, collection) in plan.collections.iter_mut().enumerate() {
        if !read[c] {
            match meta_newest(backup, collection) {
                Some(timestamp) => {
                    let newest = NewestRow {
                        timestamp,
                        collection: c,
                    };
                    newest_row = Some(newest.max(newest_row));
                }
                None => {
                    tracing::warn!(collection = %collection.target, "neither the backup's data nor its meta says when its newest row was written: no clock is held to it")
                }
            }
            if collection.l0.is_some_and(L0Route::folds) {
                found.unfoldable.push(collection.target.to_string());
            }
            continue;
        }
        let mut figure = std::mem::take(&mut figures[c]);
        figure.deleted = figure.inserted - figure.live;
        collection.rows = Some(figure);
        if collection.l0.is_some_and(L0Route::folds) {
            let folded = std::mem::take(&mut folds[c]);
            unread.extend(fold::apply(
                collection,
                folded,
                &mut ids,
                &mut plan.files_to_stage,
            ));
        }
    }
    fold::unstage(&mut plan.files_to_stage, &unread);
    plan.newest_row = newest_row;
    // Unstable: the paths are unique, and a stable sort holds a copy of half the list (9 MB
    // at 10,000 collections, at preflight's peak).
    plan.files_to_stage
        .sort_unstable_by(|a, b| a.path.cmp(&b.path));
    plan.totals.batches = plan.collections.iter().map(|c| c.batches.len()).sum();
    plan.totals.figures = Figures::total(plan.collections.iter().map(CollectionPlan::figures));
    plan.totals.bytes_to_stage = plan.files_to_stage.iter().map(|f| f.size).sum();
    found
}

/// The newest row timestamp the meta gives a collection whose data did not read: its
/// binlogs' `timestamp_to`, and the time it was backed up, which no row of it is newer than.
/// `None` when the meta says neither.
fn meta_newest(backup: &Backup, collection: &CollectionPlan) -> Option<u64> {
    let info = (backup.info.collection_backups.iter())
        .find(|c| c.collection_id == collection.source_collection_id)?;
    let binlogs = (info.partition_backups.iter())
        .flat_map(|p| &p.segment_backups)
        .filter(|s| !s.is_l0)
        .flat_map(|s| &s.binlogs)
        .flat_map(|f| &f.binlogs)
        .map(|b| b.timestamp_to);
    binlogs
        .chain([info.backup_timestamp])
        .max()
        .filter(|ts| *ts > 0)
}

/// Every delete of a collection's L0 batches.
pub(super) async fn l0_deletes(
    store: &dyn ObjectStore,
    backup: &BackupFiles,
    collection: &CollectionPlan,
) -> Result<L0Deletes, Unreadable> {
    let mut deletes = L0Deletes::default();
    for batch in collection
        .batches
        .iter()
        .filter(|b| b.kind == BatchKind::L0)
    {
        let kind = storage_kind(batch)?;
        for prefix in batch.files.iter().flatten() {
            let read = group_deletes(store, backup, kind, prefix).await?;
            deletes.add(batch.partition.as_deref(), read);
        }
    }
    Ok(deletes)
}

pub(super) fn storage_kind(batch: &ImportBatch) -> Result<StorageKind, Unreadable> {
    StorageKind::of(batch.storage_version).map_err(|e| Unreadable {
        path: batch
            .files
            .first()
            .and_then(|g| g.first())
            .cloned()
            .unwrap_or_default(),
        reason: e.to_string(),
    })
}

/// Each data segment's insert directory, with its id and the rows its meta says it holds:
/// built once, so that finding a group's segments costs a range, not a scan of the backup.
type SegmentDirs = BTreeMap<String, (i64, i64)>;

fn segment_dirs(backup: &Backup) -> SegmentDirs {
    backup
        .info
        .segments()
        .filter(|(_, s)| !s.is_l0)
        .map(|(_, s)| {
            let dir = super::verify::segment_dir("insert_log", s);
            (dir, (s.segment_id, s.num_of_rows))
        })
        .collect()
}

/// The segments whose insert logs lie under `prefix` (one, or a whole partition's in a
/// backup without group ids), and the rows their meta says they hold.
fn meta_rows(dirs: &SegmentDirs, prefix: &str) -> (Vec<i64>, i64) {
    dirs.range::<str, _>((
        std::ops::Bound::Included(prefix),
        std::ops::Bound::Unbounded,
    ))
    .take_while(|(dir, _)| dir.starts_with(prefix))
    .fold((Vec::new(), 0), |(mut ids, rows), (_, (id, n))| {
        ids.push(*id);
        (ids, rows + n)
    })
}

/// One batch's rows: each file group's rows less those its own deletes remove (what its
/// import counts), and less those any delete removes (what stays live). With `fold`, the L0
/// deletes a group's keys take are its own too.
async fn batch_rows(
    store: &dyn ObjectStore,
    backup: &BackupFiles,
    dirs: &SegmentDirs,
    batch: &ImportBatch,
    pk_field: Option<i64>,
    l0: Option<&L0Deletes>,
    fold: bool,
) -> Result<BatchRows, Failure> {
    let kind = storage_kind(batch)?;
    let pk_field = pk_field.ok_or_else(|| Unreadable {
        path: batch.id.to_string(),
        reason: "the collection's schema has no primary key".into(),
    })?;
    let partition = batch.partition.as_deref().unwrap_or_default();
    let mut counted = BatchRows {
        imported: 0,
        live: 0,
        folded: Vec::new(),
        newest: None,
    };
    for (index, group) in batch.files.iter().enumerate() {
        let (insert, delta) = match group.as_slice() {
            [insert] => (insert.as_str(), None),
            [insert, delta, ..] => (insert.as_str(), Some(delta.as_str())),
            [] => continue,
        };
        let rows = group_rows(store, backup, kind, insert, pk_field).await?;
        counted.newest = counted.newest.max(rows.iter().map(|(_, ts)| *ts).max());
        let (segments, meta) = meta_rows(dirs, insert);
        if rows.len() as i64 != meta {
            return Err(Failure::Disagrees(Disagreement {
                prefix: insert.to_owned(),
                segments,
                read: rows.len() as i64,
                meta,
            }));
        }
        let mut deletes = match delta.filter(|d| !d.is_empty()) {
            Some(prefix) => group_deletes(store, backup, kind, prefix).await?,
            None => Vec::new(),
        };
        let keys = || rows.iter().map(|(pk, ts)| (pk, *ts));
        let own = rows.len() as i64 - binlog::deleted_rows(keys(), &deletes);
        let hits = l0.map(|l0| l0.hits(partition, &rows)).unwrap_or_default();
        deletes.extend(hits.iter().cloned());
        let live = rows.len() as i64 - binlog::deleted_rows(keys(), &deletes);
        counted.live += live;
        if fold && !hits.is_empty() {
            counted.imported += live;
            counted.folded.push(fold::Folded {
                group: index,
                segments,
                deletes: hits,
            });
        } else {
            counted.imported += own;
        }
    }
    Ok(counted)
}

/// A group's rows: (primary key, timestamp), row for row.
pub(super) async fn group_rows(
    store: &dyn ObjectStore,
    backup: &BackupFiles,
    kind: StorageKind,
    prefix: &str,
    pk_field: i64,
) -> Result<Vec<(Pk, u64)>, Unreadable> {
    let mut keyed = Vec::new();
    for (path, _) in backup.binlogs.under(prefix) {
        let field = field_dir(path).ok_or_else(|| Unreadable {
            path: path.to_owned(),
            reason: "the second-to-last path component is not a field id".into(),
        })?;
        if kind == StorageKind::Binlog && field != pk_field && field != TIMESTAMP_FIELD {
            continue;
        }
        keyed.push((path, field));
    }
    // A binlog segment's key files are read and decoded together, in one hand-off to a
    // blocking thread. A column group's files hold every column, vectors too: one at a time,
    // so that what is held is one file, not the segment.
    let together = match kind {
        StorageKind::Binlog => keyed.len().max(1),
        StorageKind::ColumnGroup => 1,
    };
    let (mut pks, mut timestamps) = (Vec::new(), Vec::new());
    for part in keyed.chunks(together) {
        let read = part.iter().map(|&(path, field)| async move {
            Ok::<_, Unreadable>((path.to_owned(), field, get(store, backup, path).await?))
        });
        let files = futures::future::try_join_all(read).await?;
        // Decoding is most of a count's CPU, and the batches in flight would otherwise all
        // decode on the one thread the count runs on: on a blocking thread they use every
        // core (at 10,000 collections preflight ran on one of two).
        let decode = move || {
            (files.into_iter())
                .map(|(path, field, bytes)| {
                    key_columns(kind, field, pk_field, &bytes)
                        .map_err(|reason| Unreadable { path, reason })
                })
                .collect::<Result<Vec<KeyColumns>, Unreadable>>()
        };
        let decoded = tokio::task::spawn_blocking(decode)
            .await
            .unwrap_or_else(|e| {
                Err(Unreadable {
                    path: prefix.to_owned(),
                    reason: format!("its decoding stopped: {e}"),
                })
            })?;
        for read in decoded {
            pks.extend(read.pks);
            timestamps.extend(read.timestamps.into_iter().map(|t| t as u64));
        }
    }
    if pks.len() != timestamps.len() {
        return Err(Unreadable {
            path: prefix.to_owned(),
            reason: format!(
                "{} primary keys and {} timestamps: the fields do not make rows",
                pks.len(),
                timestamps.len()
            ),
        });
    }
    Ok(pks.into_iter().zip(timestamps).collect())
}

/// What one file of a segment holds of the two columns its rows are keyed on.
#[derive(Default)]
struct KeyColumns {
    pks: Vec<Pk>,
    timestamps: Vec<i64>,
}

/// The primary keys and timestamps in one file of `field`'s directory (a column group's, for
/// a column group file: it may hold either, both or neither).
fn key_columns(
    kind: StorageKind,
    field: i64,
    pk_field: i64,
    bytes: &[u8],
) -> Result<KeyColumns, String> {
    let mut read = KeyColumns::default();
    match kind {
        StorageKind::Binlog => {
            let log = binlog::parse(bytes).map_err(|e| e.to_string())?;
            if field == pk_field {
                read.pks = binlog::pk_values(&log).map_err(|e| e.to_string())?;
            } else {
                read.timestamps = binlog::int64_values(&log).map_err(|e| e.to_string())?;
            }
        }
        StorageKind::ColumnGroup => {
            // The group's field id is not the column's: look in every file.
            let pks = column_group::pks(bytes, pk_field).map_err(|e| e.to_string())?;
            read.pks = pks.unwrap_or_default();
            let timestamps =
                column_group::int64s(bytes, TIMESTAMP_FIELD).map_err(|e| e.to_string())?;
            read.timestamps = timestamps.unwrap_or_default();
        }
    }
    Ok(read)
}

/// The field whose directory holds a binlog: its path's second-to-last component (in storage
/// v1; a column group's directory is the group's, not a field's).
pub(super) fn field_dir(path: &str) -> Option<i64> {
    path.rsplit('/').nth(1).and_then(|f| f.parse().ok())
}

/// Every delete of the delta logs under `prefix`.
pub(super) async fn group_deletes(
    store: &dyn ObjectStore,
    backup: &BackupFiles,
    kind: StorageKind,
    prefix: &str,
) -> Result<Vec<Delete>, Unreadable> {
    let mut deletes = Vec::new();
    for (path, _) in backup.binlogs.under(prefix) {
        let bytes = get(store, backup, path).await?;
        let read = match kind {
            StorageKind::Binlog => binlog::parse(&bytes)
                .and_then(|log| binlog::deletes(&log))
                .map_err(|e| e.to_string()),
            StorageKind::ColumnGroup => column_group::deletes(&bytes).map_err(|e| e.to_string()),
        };
        deletes.extend(read.map_err(|reason| Unreadable {
            path: path.to_owned(),
            reason,
        })?);
    }
    Ok(deletes)
}

pub(super) async fn get(
    store: &dyn ObjectStore,
    backup: &BackupFiles,
    path: &str,
) -> Result<bytes::Bytes, Unreadable> {
    backup
        .binlog_bytes(store, path)
        .await
        .map_err(|e| Unreadable {
            path: path.to_owned(),
            reason: format!("cannot be read: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use milvus_formats::binlog::DeltaForm;
    use milvus_sim::fixtures::{BackupSpec, GeneratedBackup, L0Segments, generate};
    use object_store::ObjectStoreExt as _;
    use object_store::memory::InMemory;
    use object_store::path::Path;

    use super::*;
    use crate::backup::BackupFile;
    use crate::backup::{BackupLocation, read};
    use crate::backup::{RestoreOptions, Strategy, plan};

    /// The backup these tests read, its deletes in `form`.
    fn spec(form: DeltaForm) -> BackupSpec {
        BackupSpec {
            name: "b".into(),
            collections: 2,
            partitions: 2,
            segments_per_partition: 2,
            rows_per_segment: 40,
            binlogs_per_field: 2,
            deletes_per_segment: 5,
            l0_segments: L0Segments::Present,
            deltalog_format: form,
            ..BackupSpec::default()
        }
    }

    /// A generated backup in both delta forms, read and planned.
    async fn planned(form: DeltaForm) -> (Arc<InMemory>, Backup, RestorePlan, GeneratedBackup) {
        let store = Arc::new(InMemory::new());
        let spec = spec(form);
        let generated = generate(&spec, store.clone(), &Path::from("backup"))
            .await
            .expect("a backup");
        let location = BackupLocation::new("memory://", "backup", "b");
        let backup = read(store.as_ref(), &location).await.expect("it reads");
        let plan = plan(&backup, &RestoreOptions::default(), Strategy::Merged).expect("a plan");
        (store, backup, plan, generated)
    }

    fn exact_total(plan: &RestorePlan) -> Option<i64> {
        plan.collections
            .iter()
            .flat_map(|c| &c.batches)
            .filter(|b| b.kind == BatchKind::Data)
            .map(|b| b.exact_rows)
            .sum()
    }

    #[tokio::test]
    async fn every_data_batch_gets_the_rows_its_import_counts_after_its_own_deletes() {
        for form in [DeltaForm::Json, DeltaForm::MultiField] {
            let (store, backup, mut plan, generated) = planned(form).await;
            let want = generated.rows_of_data_imports();
            let found = count(store.as_ref(), &backup, &mut plan, L0Route::Import).await;
            assert!(found.unreadable.is_empty(), "{:?}", found.unreadable);
            assert!(found.disagreements.is_empty(), "{:?}", found.disagreements);
            assert_eq!(exact_total(&plan), Some(want as i64), "{form:?}");
        }
    }

    /// Issue 49: the newest row timestamp is read with the keys, from the rows themselves;
    /// a collection whose data does not read gives the time its meta says it was backed up,
    /// which no row of it is newer than.
    #[tokio::test]
    async fn the_newest_row_is_read_with_the_keys_and_else_taken_from_the_meta() {
        let (store, backup, mut plan, _) = planned(DeltaForm::Json).await;
        let want = milvus_sim::fixtures::newest_row_ts(&spec(DeltaForm::Json))
            .expect("a valid spec")
            .expect("rows");
        let mut read = plan.clone();
        count(store.as_ref(), &backup, &mut read, L0Route::Import).await;
        let newest = read.newest_row.expect("a newest row");
        assert_eq!(newest.timestamp, want);
        let holder = &backup.info.collection_backups[newest.collection];

        // The holder's data does not read: its backup time stands in for its rows.
        let prefix = (plan.collections[newest.collection].batches.iter())
            .find(|b| b.kind == BatchKind::Data)
            .and_then(|b| b.files.first()?.first().cloned())
            .expect("a data batch");
        let (path, _) = (backup.files.binlogs.under(&prefix))
            .find(|(path, _)| field_dir(path) == Some(TIMESTAMP_FIELD))
            .expect("a timestamp binlog");
        store
            .put(&backup.files.location.path(path), vec![0x5a; 16].into())
            .await
            .expect("overwritten");
        let found = count(store.as_ref(), &backup, &mut plan, L0Route::Import).await;
        assert!(!found.unreadable.is_empty());
        let newest = plan.newest_row.expect("a newest row");
        assert!(holder.backup_timestamp > want);
        assert_eq!(newest.timestamp, holder.backup_timestamp);
    }

    /// Issue 27's case: a segment whose meta claims 50 rows more than its binlogs hold.
    #[tokio::test]
    async fn a_segment_whose_meta_claims_other_rows_than_its_binlogs_is_named() {
        let (store, mut backup, mut plan, _) = planned(DeltaForm::Json).await;
        let segment = backup.info.collection_backups[1].partition_backups[0]
            .segment_backups
            .iter_mut()
            .find(|s| !s.is_l0)
            .expect("a data segment");
        segment.num_of_rows += 50;
        let (id, claimed) = (segment.segment_id, segment.num_of_rows);
        let found = count(store.as_ref(), &backup, &mut plan, L0Route::Import).await;
        assert_eq!(found.disagreements.len(), 1, "{:?}", found.disagreements);
        let d = &found.disagreements[0];
        assert_eq!(
            (d.segments.as_slice(), d.read, d.meta),
            ([id].as_slice(), claimed - 50, claimed)
        );
        assert!(d.to_string().contains(&format!(
            "(segment {id}): its binlogs hold {} rows, its meta says {claimed}",
            claimed - 50
        )));
    }

    /// The L0 deletes of every collection are read at once: a damaged one names its own
    /// collection, which cannot be folded, and leaves the others' figures whole.
    #[tokio::test]
    async fn a_damaged_l0_delta_log_names_its_collection_alone() {
        let (store, backup, mut plan, _) = planned(DeltaForm::Json).await;
        let damaged = &plan.collections[1];
        let prefix = (damaged.batches.iter())
            .find(|b| b.kind == BatchKind::L0)
            .and_then(|b| b.files.first()?.first().cloned())
            .expect("an L0 batch");
        let (path, size) = (backup.files.binlogs.under(&prefix).next())
            .map(|(p, s)| (p.to_owned(), s))
            .expect("an L0 delta log");
        let garbage = vec![0x5a; usize::try_from(size).expect("a small log")];
        store
            .put(&backup.files.location.path(&path), garbage.into())
            .await
            .expect("overwritten");
        let target = damaged.target.to_string();

        let found = count(store.as_ref(), &backup, &mut plan, L0Route::Fold).await;
        let named: Vec<&str> = found.unreadable.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(named, [target.as_str()]);
        assert!(found.unreadable[0].1.path == path, "{:?}", found.unreadable);
        assert_eq!(found.unfoldable, [target]);
        assert!(plan.collections[0].rows.is_some());
        assert!(plan.collections[1].rows.is_none());
    }

    fn live_total(plan: &RestorePlan) -> i64 {
        plan.collections
            .iter()
            .map(|c| c.rows.as_ref().expect("every collection read").live)
            .sum()
    }

    /// Folded, a collection's L0 deletes become delta logs of the groups holding their keys:
    /// its imports then count its live rows, the same live rows as when L0 is imported, and
    /// no L0 job is left.
    #[tokio::test]
    async fn folding_gives_each_group_the_l0_deletes_of_its_keys() {
        let (store, backup, mut imported, generated) = planned(DeltaForm::Json).await;
        let mut folded = imported.clone();
        count(store.as_ref(), &backup, &mut imported, L0Route::Import).await;
        let found = count(store.as_ref(), &backup, &mut folded, L0Route::Fold).await;
        assert!(found.unreadable.is_empty() && found.unfoldable.is_empty());

        let live = live_total(&imported);
        assert_eq!(
            live,
            generated.live_total() as i64,
            "the generator's own count"
        );
        assert_eq!(live_total(&folded), live);
        assert_eq!(exact_total(&folded), Some(live));
        assert!(
            live < exact_total(&imported).expect("read"),
            "the L0 deletes remove rows the data imports hold"
        );
        for c in &folded.collections {
            assert_eq!(c.l0, Some(L0Route::Fold));
            assert!(c.batches.iter().all(|b| b.kind == BatchKind::Data));
            let figures = c.rows.as_ref().expect("read");
            assert_eq!(figures.inserted - figures.deleted, figures.live);
            assert_eq!(figures.partitions.values().sum::<i64>(), figures.live);
        }
        assert!(
            imported
                .collections
                .iter()
                .all(|c| c.l0 == Some(L0Route::Import))
        );

        let written: Vec<&BackupFile> = folded
            .files_to_stage
            .iter()
            .filter(|f| f.written.is_some())
            .collect();
        assert!(!written.is_empty());
        let paths: Vec<&str> = folded
            .files_to_stage
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert!(paths.is_sorted(), "the stage keeps path order");
        // No import reads the L0 logs once folded: none is staged, and every other log is.
        let l0_dirs: Vec<String> = (imported.collections.iter())
            .flat_map(|c| &c.batches)
            .filter(|b| b.kind == BatchKind::L0)
            .flat_map(|b| b.files.iter().flatten().cloned())
            .collect();
        assert!(!l0_dirs.is_empty());
        let l0_staged = |plan: &RestorePlan| {
            (plan.files_to_stage.iter())
                .filter(|f| l0_dirs.iter().any(|dir| f.path.starts_with(dir.as_str())))
                .count()
        };
        assert_eq!(l0_staged(&folded), 0, "{paths:?}");
        assert!(l0_staged(&imported) > 0);
        assert_eq!(
            folded.files_to_stage.len(),
            imported.files_to_stage.len() - l0_staged(&imported) + written.len()
        );
        for file in written {
            let bytes = file.written.as_ref().expect("written");
            assert_eq!(file.size, bytes.len() as u64);
            let log = binlog::parse(bytes).expect("a delta log Milvus reads");
            let deletes = binlog::deletes(&log).expect("its deletes");
            // The group whose delta prefix holds it, and the keys of that group's rows.
            let batch = folded
                .collections
                .iter()
                .flat_map(|c| &c.batches)
                .find(|b| {
                    b.files
                        .iter()
                        .any(|g| g.len() == 2 && file.path.starts_with(&g[1]))
                })
                .expect("a group imports it");
            let group = batch
                .files
                .iter()
                .find(|g| g.len() == 2 && file.path.starts_with(&g[1]))
                .expect("its group");
            let kind = StorageKind::of(batch.storage_version).expect("a known version");
            let rows = group_rows(store.as_ref(), &backup.files, kind, &group[0], 100)
                .await
                .expect("the group reads");
            assert!(!deletes.is_empty());
            for delete in &deletes {
                assert!(
                    rows.iter().any(|(pk, _)| *pk == delete.pk),
                    "{}: deletes key {} that its group does not hold",
                    file.path,
                    delete.pk
                );
            }
        }
    }
}
