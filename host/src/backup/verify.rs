//! A backup held against its own meta, before anything is restored from it.
//!
//! - [`Level::Meta`] is cheap: every object the meta names is in the backup and not empty.
//! - [`Level::Data`] also reads every object: each insert binlog decodes and is the field it
//!   is filed under; every field of a segment holds the segment's `num_of_rows`; the
//!   primary key's column is there; every delta log decodes. A segment in a storage version
//!   no codec here reads is named as unverifiable, never passed.
//!
//! Each problem is one [`Finding`]: the object's path, its segment and collection, what is
//! wrong. Reading holds one object at a time.

use std::fmt;

use futures::StreamExt as _;
use milvus_formats::binlog;
use milvus_formats::column_group;
use milvus_formats::storage::StorageKind;
use object_store::ObjectStore;

use super::meta::{CollectionBackupInfo, FieldBinlog, SegmentBackupInfo};
use super::read::Backup;
use super::store::BINLOG_DIR;

/// How far a backup is checked.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Every object the meta names exists and is not empty.
    #[default]
    Meta,
    /// Also every object decodes and agrees with the meta.
    Data,
}

/// One object (or segment) that is not what the meta says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// `db.collection` as the backup names it.
    pub collection: String,
    pub segment: i64,
    /// Relative to the backup directory; the segment's directory when the problem is the
    /// segment's, not one object's.
    pub path: String,
    pub problem: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (segment {} of {}): {}",
            self.path, self.segment, self.collection, self.problem
        )
    }
}

/// Objects read at once at `Level::Data`.
const READS_IN_FLIGHT: usize = 8;

/// Every finding in the collections of `backup` that `wanted` takes, at `level`, in meta
/// order.
pub async fn verify(
    store: &dyn ObjectStore,
    backup: &Backup,
    level: Level,
    wanted: &(dyn Fn(&CollectionBackupInfo) -> bool + Sync),
) -> Vec<Finding> {
    let segments: Vec<_> = backup.info.segments().filter(|(c, _)| wanted(c)).collect();
    // By index: a closure over a borrowed item would keep the restore's future from being
    // `Send` (rust-lang/rust#102211).
    futures::stream::iter(0..segments.len())
        .map(|i| {
            let (collection, segment) = segments[i];
            verify_segment(store, backup, collection, segment, level)
        })
        .buffered(READS_IN_FLIGHT)
        .flat_map(futures::stream::iter)
        .collect()
        .await
}

/// The directory of a segment's logs of `kind` (`insert_log`, `delta_log`) in the backup,
/// with its trailing `/`: milvus-backup files a segment under its group when it has one.
pub(super) fn segment_dir(kind: &str, segment: &SegmentBackupInfo) -> String {
    let group = match segment.group_id {
        0 => String::new(),
        g => format!("{g}/"),
    };
    format!(
        "{BINLOG_DIR}/{kind}/{}/{}/{group}{}/",
        segment.collection_id, segment.partition_id, segment.segment_id
    )
}

/// Each log the meta names for `logs` under `dir`: (path, field id; -1 for a delta log).
fn named(dir: &str, logs: &[FieldBinlog], per_field: bool) -> Vec<(String, i64)> {
    logs.iter()
        .flat_map(|f| {
            f.binlogs.iter().map(move |b| {
                let path = if per_field {
                    format!("{dir}{}/{}", f.field_id, b.log_id)
                } else {
                    format!("{dir}{}", b.log_id)
                };
                (path, f.field_id)
            })
        })
        .collect()
}

async fn verify_segment(
    store: &dyn ObjectStore,
    backup: &Backup,
    collection: &CollectionBackupInfo,
    segment: &SegmentBackupInfo,
    level: Level,
) -> Vec<Finding> {
    let name = format!("{}.{}", collection.db_name, collection.collection_name);
    let finding = |path: &str, problem: String| Finding {
        collection: name.clone(),
        segment: segment.segment_id,
        path: path.to_owned(),
        problem,
    };
    let inserts = named(&segment_dir("insert_log", segment), &segment.binlogs, true);
    let deltas = named(
        &segment_dir("delta_log", segment),
        &segment.deltalogs,
        false,
    );
    let mut found = Vec::new();
    let mut present = Vec::new();
    for (path, field) in inserts.iter().chain(&deltas) {
        match backup.files.binlogs.size(path) {
            None => found.push(finding(path, "missing: the meta names it".into())),
            Some(0) => found.push(finding(path, "empty (0 bytes)".into())),
            Some(_) => present.push((path.as_str(), *field)),
        }
    }
    if level == Level::Meta || !found.is_empty() {
        return found;
    }
    let kind = match StorageKind::of(segment.storage_version) {
        Ok(kind) => kind,
        Err(unknown) => {
            let dir = segment_dir("insert_log", segment);
            found.push(finding(&dir, format!("unverifiable: {unknown}")));
            return found;
        }
    };
    let pk_field = collection
        .schema
        .as_ref()
        .and_then(|s| s.fields.iter().find(|f| f.is_primary_key))
        .map(|f| f.field_id);
    let mut rows_by_field: Vec<(i64, usize)> = Vec::new();
    let mut pk_seen = false;
    for (path, field) in present {
        let bytes = match backup.files.binlog_bytes(store, path).await {
            Ok(bytes) => bytes,
            Err(e) => {
                found.push(finding(path, format!("cannot be read: {e}")));
                continue;
            }
        };
        let is_delta = deltas.iter().any(|(p, _)| p == path);
        let checked = match (kind, is_delta) {
            (StorageKind::Binlog, true) => binlog::parse(&bytes)
                .and_then(|log| binlog::deletes(&log))
                .map(|_| None)
                .map_err(|e| e.to_string()),
            (StorageKind::ColumnGroup, true) => column_group::deletes(&bytes)
                .map(|_| None)
                .map_err(|e| e.to_string()),
            (StorageKind::Binlog, false) => insert_binlog(&bytes, field, pk_field),
            (StorageKind::ColumnGroup, false) => column_group_file(&bytes, pk_field),
        };
        match checked {
            Ok(None) => {}
            Ok(Some((rows, has_pk))) => {
                pk_seen |= has_pk;
                match rows_by_field.iter_mut().find(|(f, _)| *f == field) {
                    Some((_, total)) => *total += rows,
                    None => rows_by_field.push((field, rows)),
                }
            }
            Err(problem) => found.push(finding(path, format!("does not decode: {problem}"))),
        }
    }
    if !found.is_empty() || segment.is_l0 {
        return found;
    }
    let dir = segment_dir("insert_log", segment);
    for (field, rows) in rows_by_field {
        if rows as i64 != segment.num_of_rows {
            found.push(finding(
                &format!("{dir}{field}/"),
                format!(
                    "field {field} holds {rows} rows, the segment's meta says {}",
                    segment.num_of_rows
                ),
            ));
        }
    }
    if let Some(pk) = pk_field
        && !pk_seen
    {
        found.push(finding(
            &dir,
            format!("the primary key's column (field {pk}) is not in the segment's logs"),
        ));
    }
    found
}

/// An insert binlog of `field`: its rows, and whether it is the primary key's and its keys
/// decode.
fn insert_binlog(
    bytes: &[u8],
    field: i64,
    pk_field: Option<i64>,
) -> Result<Option<(usize, bool)>, String> {
    let log = binlog::parse(bytes).map_err(|e| e.to_string())?;
    if log.descriptor.field_id != field {
        return Err(format!(
            "it is a log of field {}, filed under field {field}",
            log.descriptor.field_id
        ));
    }
    let rows = binlog::insert_rows(&log).map_err(|e| e.to_string())?;
    let is_pk = pk_field == Some(field);
    if is_pk {
        binlog::pk_values(&log).map_err(|e| e.to_string())?;
    }
    Ok(Some((rows, is_pk)))
}

/// A column-group file: its rows, and whether it holds the primary key's column (whose keys
/// then decode).
fn column_group_file(bytes: &[u8], pk_field: Option<i64>) -> Result<Option<(usize, bool)>, String> {
    let rows = column_group::rows(bytes).map_err(|e| e.to_string())?;
    let has_pk = match pk_field {
        Some(pk) => column_group::pks(bytes, pk)
            .map_err(|e| e.to_string())?
            .is_some(),
        None => false,
    };
    Ok(Some((rows, has_pk)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use milvus_formats::binlog::DeltaForm;
    use milvus_sim::fixtures::{BackupSpec, L0Segments, generate};
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{ObjectStoreExt as _, PutPayload};

    use super::*;
    use crate::backup::{BackupLocation, read};

    const NAME: &str = "nightly";

    /// A generated backup (L0 segments, several logs per field) in memory, and it read.
    async fn generated(form: DeltaForm) -> (Arc<InMemory>, Backup) {
        let store = Arc::new(InMemory::new());
        let spec = BackupSpec {
            name: NAME.into(),
            collections: 2,
            partitions: 2,
            segments_per_partition: 2,
            rows_per_segment: 50,
            binlogs_per_field: 2,
            l0_segments: L0Segments::Present,
            deltalog_format: form,
            ..BackupSpec::default()
        };
        generate(&spec, store.clone(), &Path::from("backup"))
            .await
            .expect("a backup");
        let backup = read(store.as_ref(), &location()).await.expect("it reads");
        (store, backup)
    }

    fn location() -> BackupLocation {
        BackupLocation::new("memory://", "backup", NAME)
    }

    fn first_segment(backup: &mut Backup) -> &mut SegmentBackupInfo {
        backup.info.collection_backups[0].partition_backups[0]
            .segment_backups
            .iter_mut()
            .find(|s| !s.is_l0)
            .expect("a data segment")
    }

    #[tokio::test]
    async fn a_generated_backup_is_sound_at_both_levels_in_both_delta_forms() {
        for form in [DeltaForm::Json, DeltaForm::MultiField] {
            let (store, backup) = generated(form).await;
            assert_eq!(
                verify(store.as_ref(), &backup, Level::Meta, &|_| true).await,
                vec![]
            );
            assert_eq!(
                verify(store.as_ref(), &backup, Level::Data, &|_| true).await,
                vec![]
            );
        }
    }

    /// The real case of issue 27: the meta claims 50 rows more than the segment's binlogs
    /// hold. Only reading the data sees it.
    #[tokio::test]
    async fn a_segment_whose_meta_claims_more_rows_than_its_binlogs_hold() {
        let (store, mut backup) = generated(DeltaForm::Json).await;
        let segment = first_segment(&mut backup);
        segment.num_of_rows += 50;
        let (id, claimed) = (segment.segment_id, segment.num_of_rows);
        assert_eq!(
            verify(store.as_ref(), &backup, Level::Meta, &|_| true).await,
            vec![]
        );
        let found = verify(store.as_ref(), &backup, Level::Data, &|_| true).await;
        assert!(!found.is_empty());
        for f in &found {
            assert_eq!(f.segment, id);
            assert!(
                f.problem
                    .ends_with(&format!("rows, the segment's meta says {claimed}")),
                "{f}"
            );
        }
    }

    #[tokio::test]
    async fn a_missing_object_an_empty_one_and_one_that_does_not_decode_are_named() {
        let (store, backup) = generated(DeltaForm::Json).await;
        let mut paths = backup
            .files
            .binlogs
            .under("binlogs/insert_log/")
            .map(|(p, _)| p);
        let missing = paths.next().expect("an insert log").to_owned();
        let empty = paths.next().expect("another").to_owned();
        // In another collection's segment: a segment with a missing object is not read.
        let garbage = paths.last().expect("a third").to_owned();
        let at = |p: &str| location().path(p);
        store.delete(&at(&missing)).await.unwrap();
        store.put(&at(&empty), PutPayload::new()).await.unwrap();
        store
            .put(&at(&garbage), PutPayload::from_static(b"not a binlog"))
            .await
            .unwrap();
        let backup = read(store.as_ref(), &location()).await.expect("it reads");

        let meta = verify(store.as_ref(), &backup, Level::Meta, &|_| true).await;
        let problems: Vec<(&str, &str)> = meta
            .iter()
            .map(|f| (f.path.as_str(), f.problem.as_str()))
            .collect();
        assert_eq!(
            problems,
            [
                (missing.as_str(), "missing: the meta names it"),
                (empty.as_str(), "empty (0 bytes)"),
            ]
        );
        let data = verify(store.as_ref(), &backup, Level::Data, &|_| true).await;
        assert!(
            data.iter().any(|f| f.path == garbage
                && f.problem
                    .starts_with("does not decode: parse magic number failed")),
            "{data:#?}"
        );
    }

    #[tokio::test]
    async fn a_storage_version_no_codec_reads_is_unverifiable_not_passed() {
        let (store, mut backup) = generated(DeltaForm::Json).await;
        first_segment(&mut backup).storage_version = 7;
        let found = verify(store.as_ref(), &backup, Level::Data, &|_| true).await;
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0]
                .problem
                .starts_with("unverifiable: storage version 7 is not one this reader knows"),
            "{}",
            found[0]
        );
    }
}
