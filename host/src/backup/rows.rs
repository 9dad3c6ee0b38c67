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
//! Logs are taken in the order a listing gives (the order Milvus's import reads them in),
//! field by field, so the i-th key and the i-th timestamp are one row's. One group's keys
//! are in memory at a time.
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

use super::plan::{BatchKind, ImportBatch, RestorePlan};
use super::read::Backup;

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
    /// Batches whose data could not be read, with why.
    pub unreadable: Vec<(String, Unreadable)>,
    /// Groups whose data and meta disagree.
    pub disagreements: Vec<Disagreement>,
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

/// Sets `exact_rows` on every data batch of `plan` whose data reads and agrees with its
/// meta, and returns what it found about the others.
pub async fn count(store: &dyn ObjectStore, backup: &Backup, plan: &mut RestorePlan) -> Counted {
    let mut batches: Vec<(&mut ImportBatch, Option<i64>)> = Vec::new();
    for collection in &mut plan.collections {
        let pk = collection
            .schema
            .fields
            .iter()
            .find(|f| f.is_primary_key)
            .map(|f| f.field_id);
        for batch in &mut collection.batches {
            if batch.kind == BatchKind::Data {
                batch.exact_rows = None;
                batches.push((batch, pk));
            }
        }
    }
    let dirs = segment_dirs(backup);
    let counted: Vec<Result<i64, Failure>> = futures::stream::iter(batches.iter())
        .map(|(batch, pk)| batch_rows(store, backup, &dirs, batch, *pk))
        .buffered(BATCHES_IN_FLIGHT)
        .collect()
        .await;
    let mut found = Counted::default();
    for ((batch, _), rows) in batches.into_iter().zip(counted) {
        match rows {
            Ok(rows) => batch.exact_rows = Some(rows),
            Err(Failure::Unreadable(why)) => found.unreadable.push((batch.id.to_string(), why)),
            Err(Failure::Disagrees(d)) => found.disagreements.push(d),
        }
    }
    found
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

/// The rows one batch's import counts: each file group's rows less those its own deletes
/// remove.
async fn batch_rows(
    store: &dyn ObjectStore,
    backup: &Backup,
    dirs: &SegmentDirs,
    batch: &ImportBatch,
    pk_field: Option<i64>,
) -> Result<i64, Failure> {
    let kind = StorageKind::of(batch.storage_version).map_err(|e| Unreadable {
        path: batch
            .files
            .first()
            .and_then(|g| g.first())
            .cloned()
            .unwrap_or_default(),
        reason: e.to_string(),
    })?;
    let pk_field = pk_field.ok_or_else(|| Unreadable {
        path: batch.id.to_string(),
        reason: "the collection's schema has no primary key".into(),
    })?;
    let mut total = 0;
    for group in &batch.files {
        let (insert, delta) = match group.as_slice() {
            [insert] => (insert.as_str(), None),
            [insert, delta, ..] => (insert.as_str(), Some(delta.as_str())),
            [] => continue,
        };
        let rows = group_rows(store, backup, kind, insert, pk_field).await?;
        let (segments, meta) = meta_rows(dirs, insert);
        if rows.len() as i64 != meta {
            return Err(Failure::Disagrees(Disagreement {
                prefix: insert.to_owned(),
                segments,
                read: rows.len() as i64,
                meta,
            }));
        }
        let deletes = match delta.filter(|d| !d.is_empty()) {
            Some(prefix) => group_deletes(store, backup, kind, prefix).await?,
            None => Vec::new(),
        };
        total += rows.len() as i64
            - binlog::deleted_rows(rows.iter().map(|(pk, ts)| (pk, *ts)), &deletes);
    }
    Ok(total)
}

/// A group's rows: (primary key, timestamp), row for row.
async fn group_rows(
    store: &dyn ObjectStore,
    backup: &Backup,
    kind: StorageKind,
    prefix: &str,
    pk_field: i64,
) -> Result<Vec<(Pk, u64)>, Unreadable> {
    let mut pks = Vec::new();
    let mut timestamps = Vec::new();
    for (path, _) in backup.binlogs.under(prefix) {
        let field = path
            .rsplit('/')
            .nth(1)
            .and_then(|f| f.parse::<i64>().ok())
            .ok_or_else(|| Unreadable {
                path: path.to_owned(),
                reason: "the second-to-last path component is not a field id".into(),
            })?;
        let bad = |reason: String| Unreadable {
            path: path.to_owned(),
            reason,
        };
        match kind {
            StorageKind::Binlog if field == pk_field || field == TIMESTAMP_FIELD => {
                let bytes = get(store, backup, path).await?;
                let log = binlog::parse(&bytes).map_err(|e| bad(e.to_string()))?;
                if field == pk_field {
                    pks.extend(binlog::pk_values(&log).map_err(|e| bad(e.to_string()))?);
                } else {
                    let values = binlog::int64_values(&log).map_err(|e| bad(e.to_string()))?;
                    timestamps.extend(values.into_iter().map(|t| t as u64));
                }
            }
            StorageKind::Binlog => {}
            StorageKind::ColumnGroup => {
                // The group's field id is not the column's: look in every file.
                let bytes = get(store, backup, path).await?;
                if let Some(keys) =
                    column_group::pks(&bytes, pk_field).map_err(|e| bad(e.to_string()))?
                {
                    pks.extend(keys);
                }
                if let Some(values) =
                    column_group::int64s(&bytes, TIMESTAMP_FIELD).map_err(|e| bad(e.to_string()))?
                {
                    timestamps.extend(values.into_iter().map(|t| t as u64));
                }
            }
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

/// Every delete of the delta logs under `prefix`.
async fn group_deletes(
    store: &dyn ObjectStore,
    backup: &Backup,
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

async fn get(
    store: &dyn ObjectStore,
    backup: &Backup,
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
    use milvus_sim::fixtures::{BackupSpec, L0Segments, generate};
    use object_store::memory::InMemory;
    use object_store::path::Path;

    use super::*;
    use crate::backup::plan::{RestoreOptions, Strategy, plan};
    use crate::backup::{BackupLocation, read};

    /// A generated backup in both delta forms, read and planned.
    async fn planned(form: DeltaForm) -> (Arc<InMemory>, Backup, RestorePlan, u64) {
        let store = Arc::new(InMemory::new());
        let spec = BackupSpec {
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
        };
        let generated = generate(&spec, store.clone(), &Path::from("backup"))
            .await
            .expect("a backup");
        let location = BackupLocation::new("memory://", "backup", "b");
        let backup = read(store.as_ref(), &location).await.expect("it reads");
        let plan = plan(&backup, &RestoreOptions::default(), Strategy::Merged).expect("a plan");
        (store, backup, plan, generated.rows_of_data_imports())
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
            let (store, backup, mut plan, want) = planned(form).await;
            let found = count(store.as_ref(), &backup, &mut plan).await;
            assert!(found.unreadable.is_empty(), "{:?}", found.unreadable);
            assert!(found.disagreements.is_empty(), "{:?}", found.disagreements);
            assert_eq!(exact_total(&plan), Some(want as i64), "{form:?}");
        }
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
        let found = count(store.as_ref(), &backup, &mut plan).await;
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
}
