//! Planning: what a restore creates and imports, decided from the backup and the job's
//! restore options alone, without contacting any cluster.
//!
//! The steps are milvus-backup's (`core/restore/task.go`, `coll_task.go`): the backup
//! filter keeps databases and collections by their names in the backup, the renaming
//! maps them to target names, the post-rename filter keeps targets; then each collection's
//! segments become import batches. Where milvus-backup iterates a Go map (batch groups),
//! the order here is the order of first appearance in the backup, so that batch ids are
//! the same on every run of the same job.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use milvus_proto::common::{ConsistencyLevel, KeyValuePair};
use milvus_proto::schema::CollectionSchema;

use super::BackupFile;
use super::Error;
use super::batch::{CollectionBatcher, ImportBatch};
use super::figures::{DataRows, Figures};
use super::index::{IndexPlan, plan_indexes};
use super::meta::{CollectionBackupInfo, proto_key_values};
use super::namespace::Namespace;
use super::options::{CollectionCreation, RestoreOptions, Strategy};
use super::read::{Backup, BackupFormat};

/// Why a target collection's existence stops the restore (milvus-backup's
/// `checkCollExist`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectionConflict {
    #[error(
        "collection {0} already exists on the target; set drop_exist_collection to replace it or skip_create_collection to import into it"
    )]
    AlreadyExists(Namespace),
    #[error(
        "collection {0} does not exist on the target, and skip_create_collection imports into an existing one"
    )]
    Missing(Namespace),
}

/// milvus-backup's `checkCollExist` truth table as a pure function: an existing target
/// needs `DropAndCreate` or `UseExisting`; a missing one cannot be `UseExisting`. (Drop and
/// skip together, its eighth case, cannot be expressed by `CollectionCreation`; the job
/// refuses it while validating.)
pub fn check_collection_exists(
    target: &Namespace,
    exists: bool,
    creation: CollectionCreation,
) -> Result<(), CollectionConflict> {
    match (exists, creation) {
        (true, CollectionCreation::Create) => {
            Err(CollectionConflict::AlreadyExists(target.clone()))
        }
        (false, CollectionCreation::UseExisting) => {
            Err(CollectionConflict::Missing(target.clone()))
        }
        _ => Ok(()),
    }
}

/// Which way a collection's L0 deletes reach the ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum L0Route {
    /// `l0_import=true` jobs: every end imports L0 segments.
    Import,
    /// Folded into the data groups' delta logs in the stage: some end imports no L0.
    Fold,
    /// Folded because the import is two-phase, whatever the ends take: the data segments of
    /// an `auto_commit=false` import take the commit's timestamp while an L0 segment's
    /// deletes keep their own, older, so they would remove nothing (milvus#51247).
    FoldTwoPhase,
}

impl L0Route {
    /// Whether the deletes are folded into the data imports.
    pub fn folds(self) -> bool {
        !matches!(self, L0Route::Import)
    }
}

impl std::fmt::Display for L0Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            L0Route::Import => "imported as L0 jobs",
            L0Route::Fold => "folded into the data segments' delta logs",
            L0Route::FoldTwoPhase => {
                "folded into the data segments' delta logs (a two-phase import would give them \
                 timestamps older than the commit's rows, and they would delete nothing)"
            }
        })
    }
}

/// What the restore does for one target collection.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionPlan {
    /// The collection's name in the backup.
    pub source: Namespace,
    /// The collection's id in the backup (binlog paths use it).
    pub source_collection_id: i64,
    pub target: Namespace,
    /// The backup's schema under the target name, every field kept ($meta included).
    pub schema: CollectionSchema,
    /// The backup's shard count, capped by `max_shard_num`.
    pub shards_num: i32,
    pub consistency_level: ConsistencyLevel,
    /// The collection properties sent with CreateCollection (the schema's).
    pub properties: Vec<KeyValuePair>,
    /// The number of partitions to create when a field is a partition key (Milvus makes
    /// them itself), else 0.
    pub partition_num: i64,
    /// Partition names to create, in backup order (`_default` included).
    pub partitions: Vec<String>,
    /// Indexes to create, vector ones first; empty without `rebuild_index`.
    pub indexes: Vec<IndexPlan>,
    /// Import batches in the order milvus-backup runs them: every data batch, then the
    /// partitions' L0 batches, then the collection-level L0 batches. Empty with
    /// `meta_only`.
    pub batches: Vec<ImportBatch>,
    /// Whether the target's field ids must be the schema's: a snapshot bundle's binlogs are
    /// filed by the field ids of the cluster it came from, and the DDL checks that the
    /// collection it made (or found) has them.
    pub verify_field_ids: bool,
    /// Which way its L0 deletes go; `None` without L0 segments, or before
    /// [`super::rows::count`] decided.
    pub l0: Option<L0Route>,
    /// Its rows as the backup's data holds them; `None` until [`super::rows::count`] read
    /// them, or where they could not be read.
    pub rows: Option<DataRows>,
    /// Its segments and rows as the backup's meta gives them.
    pub meta: Figures,
}

impl CollectionPlan {
    /// Its segments and rows, from its data where that was read.
    pub fn figures(&self) -> Figures {
        self.meta.with_rows(self.rows.as_ref())
    }
}

/// Totals for `lockstep plan`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PlanTotals {
    pub databases: usize,
    pub collections: usize,
    pub partitions: usize,
    pub batches: usize,
    /// The collections' figures summed: each source collection counted per target it has.
    #[serde(flatten)]
    pub figures: Figures,
    /// The bytes staging copies: the sum of `files_to_stage`.
    pub bytes_to_stage: u64,
}

/// Everything a restore of one backup creates and imports.
#[derive(Debug, Clone, PartialEq)]
pub struct RestorePlan {
    /// Target databases to create where missing, in backup order: the backup's databases
    /// that pass both filters (mapped by `db.:db2.` rules), then any other database a
    /// target collection lives in.
    pub databases: Vec<String>,
    pub collections: Vec<CollectionPlan>,
    /// Every binlog under some batch's prefixes, each once, in path order.
    pub files_to_stage: Vec<BackupFile>,
    pub totals: PlanTotals,
    /// The newest row timestamp of the data batches; `None` until [`super::rows::count`]
    /// read it, and for a plan without rows.
    pub newest_row: Option<NewestRow>,
}

/// The newest row timestamp of a restore's data, read from the rows, or from the meta of a
/// collection whose data did not read: a commit stamped below it is one Milvus 3.0's commit
/// fence rejects (docs/milvus-facts.md §2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewestRow {
    /// A hybrid timestamp (TSO), as the rows carry it.
    pub timestamp: u64,
    /// The plan collection holding it.
    pub collection: usize,
}

impl NewestRow {
    /// The later of `self` and `other`.
    pub(super) fn max(self, other: Option<NewestRow>) -> NewestRow {
        match other {
            Some(other) if other.timestamp > self.timestamp => other,
            _ => self,
        }
    }
}

/// Plans the restore of `backup` with `options`, in batches for `strategy` (preflight's
/// choice). Pure: reads only what `read` brought in.
pub fn plan(
    backup: &Backup,
    options: &RestoreOptions,
    strategy: Strategy,
) -> Result<RestorePlan, Error> {
    let info = &backup.info;
    let ezk_of_db: HashMap<&str, &str> = info
        .database_backups
        .iter()
        .filter(|db| options.backup_filter.allows_db(db_name(&db.db_name)))
        .map(|db| (db_name(&db.db_name), db.ezk.as_str()))
        .collect();

    let mut databases = Vec::new();
    for db in &info.database_backups {
        let source = db_name(&db.db_name);
        if !options.backup_filter.allows_db(source) {
            continue;
        }
        let target = options.renaming.database_target(source);
        if options.filter.allows_db(&target) && !databases.contains(&target) {
            databases.push(target);
        }
    }

    let mut collections: Vec<CollectionPlan> = Vec::new();
    let mut source_of: HashMap<Namespace, Namespace> = HashMap::new();
    for collection in &info.collection_backups {
        let source = Namespace::new(&collection.db_name, &collection.collection_name);
        if !options.backup_filter.allows(&source) {
            continue;
        }
        if let Some((_, segment)) = backup.storage_v3.iter().find(|(c, _)| *c == source) {
            return Err(Error::StorageV3Segment {
                collection: source.to_string(),
                segment: *segment,
            });
        }
        for target in options.renaming.collection_targets(&source) {
            if !options.filter.allows(&target) {
                continue;
            }
            if let Some(first) = source_of.insert(target.clone(), source.clone()) {
                return Err(Error::DuplicateTarget {
                    target,
                    first: first.to_string(),
                    second: source.to_string(),
                });
            }
            let ezk = ezk_of_db
                .get(source.db.as_str())
                .filter(|ezk| !ezk.is_empty())
                .map(|ezk| {
                    options
                        .ezk_mapping
                        .get(*ezk)
                        .cloned()
                        .unwrap_or_else(|| (*ezk).to_owned())
                });
            collections.push(plan_collection(
                backup,
                collection,
                source.clone(),
                target,
                ezk,
                options,
                strategy,
            )?);
        }
    }
    for collection in &collections {
        if !databases.contains(&collection.target.db) {
            databases.push(collection.target.db.clone());
        }
    }

    let mut staged = BTreeMap::new();
    for batch in collections.iter().flat_map(|c| &c.batches) {
        for prefix in batch.files.iter().flatten() {
            staged.extend(
                backup
                    .files
                    .binlogs
                    .under(prefix)
                    .map(|(path, size)| (path.to_owned(), size)),
            );
        }
    }
    let files_to_stage: Vec<BackupFile> = staged
        .into_iter()
        .map(|(path, size)| BackupFile {
            source: backup.files.binlogs.source(&path).map(str::to_owned),
            path,
            size,
            written: None,
        })
        .collect();

    let totals = PlanTotals {
        databases: databases.len(),
        collections: collections.len(),
        partitions: collections.iter().map(|c| c.partitions.len()).sum(),
        batches: collections.iter().map(|c| c.batches.len()).sum(),
        figures: Figures::total(collections.iter().map(CollectionPlan::figures)),
        bytes_to_stage: files_to_stage.iter().map(|f| f.size).sum(),
    };
    tracing::debug!(
        backup = %backup.files.location,
        collections = totals.collections,
        batches = totals.batches,
        bytes_to_stage = totals.bytes_to_stage,
        "planned restore"
    );
    Ok(RestorePlan {
        databases,
        collections,
        files_to_stage,
        totals,
        newest_row: None,
    })
}

fn db_name(name: &str) -> &str {
    if name.is_empty() {
        super::namespace::DEFAULT_DB
    } else {
        name
    }
}

fn plan_collection(
    backup: &Backup,
    collection: &CollectionBackupInfo,
    source: Namespace,
    target: Namespace,
    ezk: Option<String>,
    options: &RestoreOptions,
    strategy: Strategy,
) -> Result<CollectionPlan, Error> {
    let backup_schema = collection.schema.clone().unwrap_or_default();
    let schema = backup_schema
        .to_proto(&target.collection)
        .map_err(|source_error| Error::BadDefaultValue {
            collection: source.clone(),
            source: source_error,
        })?;
    let consistency_level =
        ConsistencyLevel::try_from(collection.consistency_level).map_err(|_| {
            Error::UnknownConsistencyLevel {
                collection: source.clone(),
                value: collection.consistency_level,
            }
        })?;
    let shards_num = match options.max_shard_num {
        Some(max) if max > 0 && collection.shards_num > max => max,
        _ => collection.shards_num,
    };
    let has_partition_key = backup_schema.fields.iter().any(|f| f.is_partition_key);
    let partition_num = if has_partition_key {
        collection.partition_backups.len() as i64
    } else {
        0
    };
    // A snapshot bundle carries its indexes' definitions, and Milvus's own restore of it
    // restores them: so does this one, whatever `rebuild_index` says.
    let snapshot = backup.files.format == BackupFormat::Snapshot;
    let indexes = if options.rebuild_index || snapshot {
        plan_indexes(collection, &source, options)?
    } else {
        Vec::new()
    };
    let batches = if options.meta_only {
        Vec::new()
    } else {
        CollectionBatcher {
            backup,
            collection,
            source: &source,
            target: &target,
            ezk,
            options,
            strategy,
        }
        .batches()?
    };
    Ok(CollectionPlan {
        source_collection_id: collection.collection_id,
        properties: proto_key_values(&backup_schema.properties),
        partitions: collection
            .partition_backups
            .iter()
            .map(|p| p.partition_name.clone())
            .collect(),
        source,
        target,
        schema,
        shards_num,
        consistency_level,
        partition_num,
        indexes,
        batches,
        verify_field_ids: snapshot,
        l0: None,
        rows: None,
        meta: Figures::of_meta(collection),
    })
}

#[cfg(test)]
mod tests {
    use super::super::batch::BatchKind;
    use super::super::filter::Filter;
    use super::super::fixture::{self, Layout};
    use super::super::index::IndexedField;
    use super::super::meta::{BackupInfo, PartitionBackupInfo, SegmentBackupInfo};
    use super::super::options::L0Batching;
    use super::super::read::{BackupFiles, BinlogIndex, MetaSource, read};
    use super::super::rename::{RenameRule, RenameRules, Renaming};
    use super::super::store::BackupLocation;
    use super::*;

    const V0: &str = "by-dev-rootcoord-dml_0_100v0";
    const V1: &str = "by-dev-rootcoord-dml_1_100v1";

    async fn orders_bak() -> Backup {
        read(
            fixture::store(Layout::Full).await.as_ref(),
            &fixture::location(),
        )
        .await
        .unwrap()
    }

    fn strings(files: &[&[&str]]) -> Vec<Vec<String>> {
        files
            .iter()
            .map(|entry| entry.iter().map(|s| s.to_string()).collect())
            .collect()
    }

    /// A backup of one collection (id 1, `default.c`) with the given partitions, no meta
    /// on disk and the given binlog paths (1 byte each).
    fn synthetic(
        partitions: Vec<PartitionBackupInfo>,
        l0: Vec<SegmentBackupInfo>,
        files: &[&str],
    ) -> Backup {
        // A sealed segment with rows the test gave no binlog holds a RowID one, as a
        // complete backup does.
        let sealed: Vec<String> = partitions
            .iter()
            .flat_map(|p| &p.segment_backups)
            .filter(|s| !s.is_l0 && s.num_of_rows > 0)
            .map(|s| match s.group_id {
                0 => format!("binlogs/insert_log/1/{}/{}/", s.partition_id, s.segment_id),
                g => format!(
                    "binlogs/insert_log/1/{}/{g}/{}/",
                    s.partition_id, s.segment_id
                ),
            })
            .filter(|dir| !files.iter().any(|f| f.starts_with(dir.as_str())))
            .map(|dir| format!("{dir}0/1"))
            .collect();
        let collection = CollectionBackupInfo {
            collection_id: 1,
            db_name: "default".into(),
            collection_name: "c".into(),
            partition_backups: partitions,
            l0_segments: l0,
            ..Default::default()
        };
        let files = files.iter().map(|f| f.to_string()).chain(sealed);
        Backup {
            files: BackupFiles {
                location: BackupLocation::new("memory://t", "backup", "b"),
                format: BackupFormat::Binlog,
                binlogs: BinlogIndex::new(files.map(|f| (f, 1))),
            },
            info: BackupInfo {
                collection_backups: vec![collection],
                ..Default::default()
            },
            meta_source: MetaSource::FullMeta,
            storage_v3: Vec::new(),
        }
    }

    fn segment(
        id: i64,
        partition: i64,
        vchannel: &str,
        storage_version: i64,
        l0: bool,
    ) -> SegmentBackupInfo {
        SegmentBackupInfo {
            segment_id: id,
            collection_id: 1,
            partition_id: partition,
            num_of_rows: 1,
            group_id: if l0 || partition < 0 { 0 } else { id },
            is_l0: l0,
            v_channel: vchannel.into(),
            storage_version,
            ..Default::default()
        }
    }

    fn partition(id: i64, name: &str, segments: Vec<SegmentBackupInfo>) -> PartitionBackupInfo {
        PartitionBackupInfo {
            partition_id: id,
            partition_name: name.into(),
            collection_id: 1,
            segment_backups: segments,
            ..Default::default()
        }
    }

    /// milvus-backup's TestL0SegmentBatches: ten L0 segments on two (vchannel, storage
    /// version) groups of five.
    fn ten_l0_segments() -> Vec<SegmentBackupInfo> {
        (0..10)
            .map(|i| segment(i, 7, &format!("vch{}", i % 2), i % 2, true))
            .collect()
    }

    fn l0_batches(options: &RestoreOptions) -> Vec<ImportBatch> {
        let backup = synthetic(vec![partition(7, "p", ten_l0_segments())], vec![], &[]);
        plan(&backup, options, Strategy::Merged)
            .unwrap()
            .collections
            .remove(0)
            .batches
    }

    #[test]
    fn l0_one_segment_per_job_without_multi_l0() {
        let batches = l0_batches(&RestoreOptions {
            l0_batching: L0Batching::OnePerJob,
            ..Default::default()
        });
        assert_eq!(batches.len(), 10);
        for batch in &batches {
            assert_eq!(batch.kind, BatchKind::L0);
            assert_eq!(batch.files.len(), 1);
            assert_eq!(batch.files[0].len(), 1);
            assert!(batch.files[0][0].starts_with("binlogs/delta_log/1/7/"));
        }
    }

    #[test]
    fn l0_merged_per_vchannel_and_storage_version() {
        let batches = l0_batches(&RestoreOptions::default());
        assert_eq!(batches.len(), 2);
        assert!(batches.iter().all(|b| b.files.len() == 5));
        assert_eq!(
            (batches[0].vchannel.as_str(), batches[0].storage_version),
            ("vch0", 0)
        );
        assert_eq!(
            (batches[1].vchannel.as_str(), batches[1].storage_version),
            ("vch1", 1)
        );
        assert_eq!(
            batches[0].files[1],
            vec!["binlogs/delta_log/1/7/2/".to_string()]
        );
    }

    // Each group holds five segments, so a limit of two splits it into 2+2+1.
    #[test]
    fn max_segments_per_job_splits_two_two_one() {
        let batches = l0_batches(&RestoreOptions {
            max_segments_per_job: 2,
            ..Default::default()
        });
        let sizes: Vec<usize> = batches.iter().map(|b| b.files.len()).collect();
        assert_eq!(sizes, vec![2, 2, 1, 2, 2, 1]);
        let ids: Vec<&str> = batches.iter().map(|b| b.id.as_str()).collect();
        assert_eq!(ids[0], "default.c/p/l0-0");
        assert_eq!(ids[5], "default.c/p/l0-5");
    }

    #[test]
    fn a_segment_whose_binlogs_the_backup_lacks_is_refused_before_anything_is_written() {
        let mut with_field = segment(11, 7, "v", 0, false);
        with_field.num_of_rows = 40;
        with_field.binlogs = vec![crate::backup::meta::FieldBinlog {
            field_id: 101,
            binlogs: vec![Default::default()],
        }];
        // The RowID binlog is there, the vector field's is gone.
        let backup = synthetic(
            vec![partition(7, "p", vec![with_field])],
            vec![],
            &["binlogs/insert_log/1/7/11/11/0/1"],
        );
        let err = plan(&backup, &RestoreOptions::default(), Strategy::Merged).unwrap_err();
        assert_eq!(
            err.to_string(),
            "collection default.c, partition p: segment 11 holds 40 rows by the backup meta, \
             but the backup has no binlog under binlogs/insert_log/1/7/11/11/101/; the backup is \
             incomplete"
        );
    }

    // milvus-backup's TestToPaths: [insert, delta] when the delta prefix has files,
    // [insert] alone otherwise.
    #[test]
    fn data_entries_carry_the_delta_prefix_only_if_present() {
        let backup = synthetic(
            vec![partition(
                7,
                "p",
                vec![segment(11, 7, "v", 0, false), segment(12, 7, "v", 0, false)],
            )],
            vec![],
            &[
                "binlogs/insert_log/1/7/11/11/100/1",
                "binlogs/delta_log/1/7/11/11/2",
                "binlogs/insert_log/1/7/12/12/100/3",
            ],
        );
        let batches = plan(&backup, &RestoreOptions::default(), Strategy::Merged)
            .unwrap()
            .collections
            .remove(0)
            .batches;
        assert_eq!(batches.len(), 1);
        assert_eq!(
            batches[0].files,
            strings(&[
                &["binlogs/insert_log/1/7/11/", "binlogs/delta_log/1/7/11/"],
                &["binlogs/insert_log/1/7/12/"],
            ])
        );
        assert_eq!(batches[0].bytes, 3);
        assert_eq!(batches[0].rows, 2);
    }

    #[test]
    fn non_l0_batches_come_before_partition_l0_and_collection_l0_last() {
        let backup = synthetic(
            vec![
                partition(
                    7,
                    "p",
                    vec![segment(1, 7, "v", 0, true), segment(2, 7, "v", 0, false)],
                ),
                partition(
                    8,
                    "q",
                    vec![segment(3, 8, "v", 0, false), segment(4, 8, "v", 0, true)],
                ),
            ],
            vec![segment(5, -1, "v", 0, true)],
            &[],
        );
        let batches = plan(&backup, &RestoreOptions::default(), Strategy::Merged)
            .unwrap()
            .collections
            .remove(0)
            .batches;
        let order: Vec<(BatchKind, Option<&str>)> = batches
            .iter()
            .map(|b| (b.kind, b.partition.as_deref()))
            .collect();
        assert_eq!(
            order,
            vec![
                (BatchKind::Data, Some("p")),
                (BatchKind::Data, Some("q")),
                (BatchKind::L0, Some("p")),
                (BatchKind::L0, Some("q")),
                (BatchKind::L0, None),
            ]
        );
        assert_eq!(batches[4].files, strings(&[&["binlogs/delta_log/1/-1/5/"]]));
        assert_eq!(batches[4].id.as_str(), "default.c/*/l0-0");
    }

    #[test]
    fn empty_partitions_make_no_batches_but_are_still_created() {
        let backup = synthetic(
            vec![partition(7, "p", vec![]), partition(8, "q", vec![])],
            vec![],
            &[],
        );
        let plan = plan(&backup, &RestoreOptions::default(), Strategy::Merged).unwrap();
        assert!(plan.collections[0].batches.is_empty());
        assert_eq!(plan.collections[0].partitions, vec!["p", "q"]);
        assert_eq!(plan.totals.batches, 0);
        assert!(plan.files_to_stage.is_empty());
    }

    #[test]
    fn per_seg_imports_one_segment_per_job() {
        let segments = (0..3).map(|i| segment(i + 1, 7, "v", 0, false)).collect();
        let backup = synthetic(vec![partition(7, "p", segments)], vec![], &[]);
        let batches = plan(&backup, &RestoreOptions::default(), Strategy::PerSeg)
            .unwrap()
            .collections
            .remove(0)
            .batches;
        assert_eq!(batches.len(), 3);
        assert!(batches.iter().all(|b| b.files.len() == 1));
    }

    #[test]
    fn meta_only_plans_ddl_without_batches() {
        let segments = vec![segment(1, 7, "v", 0, false)];
        let backup = synthetic(
            vec![partition(7, "p", segments)],
            vec![],
            &["binlogs/insert_log/1/7/1/1/100/1"],
        );
        let plan = plan(
            &backup,
            &RestoreOptions {
                meta_only: true,
                ..Default::default()
            },
            Strategy::Merged,
        )
        .unwrap();
        assert!(plan.collections[0].batches.is_empty());
        assert_eq!(plan.totals.bytes_to_stage, 0);
    }

    #[tokio::test]
    async fn fixture_backup_plans_as_milvus_backup_would() {
        let backup = orders_bak().await;
        let plan = plan(&backup, &RestoreOptions::default(), Strategy::Merged).unwrap();
        assert_eq!(plan.databases, vec!["default", "db2"]);
        assert_eq!(plan.collections.len(), 2);

        let orders = &plan.collections[0];
        assert_eq!(orders.target, Namespace::new("default", "orders"));
        assert_eq!(orders.schema.name, "orders");
        assert_eq!(orders.schema.fields.len(), 4);
        assert_eq!(orders.shards_num, 2);
        assert_eq!(orders.consistency_level, ConsistencyLevel::Bounded);
        assert_eq!(orders.partitions, vec!["_default", "p1"]);
        assert_eq!(orders.partition_num, 0);
        assert!(orders.indexes.is_empty(), "indexes only with rebuild_index");
        /// (id, vchannel, storage version, files, bytes, rows)
        type Summary<'a> = (&'a str, &'a str, i64, Vec<Vec<String>>, u64, i64);
        let summary: Vec<Summary<'_>> = orders
            .batches
            .iter()
            .map(|b| {
                (
                    b.id.as_str(),
                    b.vchannel.as_str(),
                    b.storage_version,
                    b.files.clone(),
                    b.bytes,
                    b.rows,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "default.orders/_default/data-0",
                    V0,
                    2,
                    strings(&[
                        &[
                            "binlogs/insert_log/100/1000/2001/",
                            "binlogs/delta_log/100/1000/2001/"
                        ],
                        &["binlogs/insert_log/100/1000/2002/"],
                    ]),
                    650,
                    30,
                ),
                (
                    "default.orders/_default/data-1",
                    V1,
                    2,
                    strings(&[&["binlogs/insert_log/100/1000/2003/"]]),
                    400,
                    5
                ),
                (
                    "default.orders/_default/l0-0",
                    V0,
                    2,
                    strings(&[&["binlogs/delta_log/100/1000/2004/"]]),
                    60,
                    3
                ),
                (
                    "default.orders/*/l0-0",
                    V1,
                    2,
                    strings(&[&["binlogs/delta_log/100/-1/2005/"]]),
                    70,
                    7
                ),
            ]
        );
        assert_eq!(
            orders.batches[0].options(),
            BTreeMap::from([
                ("backup".to_string(), "true".to_string()),
                ("skip_disk_quota_check".to_string(), "true".to_string()),
                ("storage_version".to_string(), "2".to_string()),
            ])
        );
        assert_eq!(
            orders.batches[2]
                .options()
                .get("l0_import")
                .map(String::as_str),
            Some("true")
        );
        assert!(!orders.batches[2].options().contains_key("backup"));

        // An old backup without group ids: one entry for the whole partition.
        let items = &plan.collections[1];
        assert_eq!(items.target, Namespace::new("db2", "items"));
        assert_eq!(items.batches.len(), 1);
        assert_eq!(
            items.batches[0].files,
            strings(&[&[
                "binlogs/insert_log/200/2000/",
                "binlogs/delta_log/200/2000/"
            ]])
        );
        assert_eq!(items.batches[0].bytes, 1110);
        assert_eq!(items.batches[0].rows, 90);
        assert_eq!(items.batches[0].ezk.as_deref(), Some("ezk-old"));
        assert_eq!(
            items.batches[0].options().get("ezk").map(String::as_str),
            Some("ezk-old")
        );
        assert!(!items.batches[0].options().contains_key("storage_version"));

        assert_eq!(plan.files_to_stage.len(), fixture::BINLOGS.len());
        assert_eq!(
            plan.totals,
            PlanTotals {
                databases: 2,
                collections: 2,
                partitions: 3,
                batches: 5,
                // The L0 segments' 10 deletes are not rows.
                figures: Figures {
                    segments: 5,
                    l0_segments: 2,
                    inserted: 125,
                    deleted: None,
                    live: None,
                },
                bytes_to_stage: 2290
            }
        );
    }

    #[tokio::test]
    async fn batch_ids_are_stable_across_runs() {
        let first = plan(
            &orders_bak().await,
            &RestoreOptions::default(),
            Strategy::Merged,
        )
        .unwrap();
        let second = plan(
            &orders_bak().await,
            &RestoreOptions::default(),
            Strategy::Merged,
        )
        .unwrap();
        assert_eq!(first, second);
    }

    #[tokio::test]
    async fn rebuild_index_puts_vector_indexes_first_and_blanks_special_names() {
        let backup = orders_bak().await;
        let options = RestoreOptions {
            rebuild_index: true,
            ..Default::default()
        };
        let indexes = plan(&backup, &options, Strategy::Merged)
            .unwrap()
            .collections
            .remove(0)
            .indexes;
        assert_eq!(indexes.len(), 2);
        assert_eq!(
            (indexes[0].field, indexes[0].index_name.as_str()),
            (IndexedField::Vector, "vec_idx")
        );
        assert_eq!(indexes[0].params.get("M").map(String::as_str), Some("16"));
        assert_eq!(
            (indexes[1].field, indexes[1].index_name.as_str()),
            (IndexedField::Scalar, "")
        );

        let auto = RestoreOptions {
            rebuild_index: true,
            use_auto_index: true,
            ..Default::default()
        };
        let indexes = plan(&backup, &auto, Strategy::Merged)
            .unwrap()
            .collections
            .remove(0)
            .indexes;
        assert_eq!(
            indexes[0].params,
            BTreeMap::from([
                ("index_type".to_string(), "AUTOINDEX".to_string()),
                ("metric_type".to_string(), "L2".to_string()),
            ])
        );
        assert_eq!(
            indexes[1].params.get("index_type").map(String::as_str),
            Some("INVERTED")
        );
    }

    #[tokio::test]
    async fn suffix_then_post_rename_filter() {
        let backup = orders_bak().await;
        let options = RestoreOptions {
            renaming: Renaming::suffix("_bak").unwrap(),
            filter: Filter::parse("default.orders_bak").unwrap(),
            ..Default::default()
        };
        let plan = plan(&backup, &options, Strategy::Merged).unwrap();
        let targets: Vec<String> = plan
            .collections
            .iter()
            .map(|c| c.target.to_string())
            .collect();
        assert_eq!(targets, vec!["default.orders_bak"]);
        assert_eq!(plan.collections[0].schema.name, "orders_bak");
        assert_eq!(
            plan.collections[0].batches[0].id.as_str(),
            "default.orders_bak/_default/data-0"
        );
        // The filter names the database `default` only: db2 is neither created nor restored.
        assert_eq!(plan.databases, vec!["default"]);

        // milvus-backup's documented pitfall: the filter sees renamed names.
        let pre_rename = RestoreOptions {
            filter: Filter::parse("default.orders").unwrap(),
            ..options
        };
        assert!(plan_targets(&backup, &pre_rename).is_empty());
    }

    fn plan_targets(backup: &Backup, options: &RestoreOptions) -> Vec<String> {
        plan(backup, options, Strategy::Merged)
            .unwrap()
            .collections
            .iter()
            .map(|c| c.target.to_string())
            .collect()
    }

    fn rules(rules: &[&str]) -> Renaming {
        Renaming::Rules(
            RenameRules::new(rules.iter().map(|r| RenameRule::parse(r).unwrap())).unwrap(),
        )
    }

    #[tokio::test]
    async fn backup_filter_applies_to_names_in_the_backup() {
        let backup = orders_bak().await;
        let options = RestoreOptions {
            backup_filter: Filter::parse("db2.*").unwrap(),
            renaming: rules(&["db2.*:db3.*"]),
            ..Default::default()
        };
        assert_eq!(plan_targets(&backup, &options), vec!["db3.items"]);
        // db2 is the backup's database that passes the backup filter; db3 holds the collection.
        assert_eq!(
            plan(&backup, &options, Strategy::Merged).unwrap().databases,
            vec!["db2", "db3"]
        );
    }

    #[tokio::test]
    async fn rename_to_several_targets_and_database_rules() {
        let backup = orders_bak().await;
        let options = RestoreOptions {
            renaming: rules(&["orders:o1", "default.orders:db9.o2", "db2.:db5."]),
            ..Default::default()
        };
        assert_eq!(
            plan_targets(&backup, &options),
            vec!["default.o1", "db9.o2", "db2.items"]
        );
        assert_eq!(
            plan(&backup, &options, Strategy::Merged).unwrap().databases,
            vec!["default", "db5", "db9", "db2"]
        );
    }

    #[tokio::test]
    async fn two_collections_onto_one_target_are_refused() {
        let backup = orders_bak().await;
        let options = RestoreOptions {
            renaming: rules(&["orders:x", "db2.items:default.x"]),
            ..Default::default()
        };
        let err = plan(&backup, &options, Strategy::Merged).unwrap_err();
        assert_eq!(
            err.to_string(),
            "collections default.orders and db2.items of the backup would both be restored as default.x"
        );
    }

    #[tokio::test]
    async fn max_shard_num_caps_and_ezk_mapping_replaces() {
        let backup = orders_bak().await;
        let options = RestoreOptions {
            max_shard_num: Some(1),
            ezk_mapping: BTreeMap::from([("ezk-old".to_string(), "ezk-new".to_string())]),
            ..Default::default()
        };
        let plan = plan(&backup, &options, Strategy::Merged).unwrap();
        assert_eq!(plan.collections[0].shards_num, 1);
        assert_eq!(plan.collections[1].shards_num, 1);
        assert_eq!(
            plan.collections[1].batches[0].ezk.as_deref(),
            Some("ezk-new")
        );
        assert_eq!(plan.collections[0].batches[0].ezk, None);
    }

    #[tokio::test]
    async fn truncate_sets_end_ts_from_the_vchannel_checkpoint() {
        let backup = orders_bak().await;
        let options = RestoreOptions {
            truncate_binlog_by_ts: true,
            backup_filter: Filter::parse("default.orders").unwrap(),
            ..Default::default()
        };
        let batches = plan(&backup, &options, Strategy::Merged)
            .unwrap()
            .collections
            .remove(0)
            .batches;
        assert_eq!(batches[0].end_ts, Some(456_789_012_345_678_801));
        assert_eq!(batches[1].end_ts, Some(456_789_012_345_678_701));
        assert_eq!(
            batches[0].options().get("end_ts").map(String::as_str),
            Some("456789012345678801")
        );

        // The old collection has no group ids, which truncation needs.
        let all = RestoreOptions {
            truncate_binlog_by_ts: true,
            ..Default::default()
        };
        let err = plan(&backup, &all, Strategy::Merged).unwrap_err();
        assert!(
            matches!(err, Error::TruncateWithoutGroupIds { .. }),
            "{err}"
        );
    }

    // milvus-backup's TestTask_CheckCollExist, less the drop+skip rows that
    // `CollectionCreation` cannot express (the job refuses them while validating).
    #[test]
    fn check_collection_exists_truth_table() {
        let ns = Namespace::new("db1", "coll1");
        let cases = [
            (
                true,
                CollectionCreation::Create,
                Err(CollectionConflict::AlreadyExists(ns.clone())),
            ),
            (true, CollectionCreation::UseExisting, Ok(())),
            (true, CollectionCreation::DropAndCreate, Ok(())),
            (false, CollectionCreation::Create, Ok(())),
            (
                false,
                CollectionCreation::UseExisting,
                Err(CollectionConflict::Missing(ns.clone())),
            ),
            (false, CollectionCreation::DropAndCreate, Ok(())),
        ];
        for (exists, creation, expected) in cases {
            assert_eq!(
                check_collection_exists(&ns, exists, creation),
                expected,
                "exists={exists} {creation:?}"
            );
        }
    }
}

/// milvus-sim writes the same backup in both formats from one seed: the snapshot one must
/// plan as its binlog twin does, down to every batch, row count and staged path.
#[cfg(test)]
mod snapshot_twin {
    use std::sync::Arc;

    use milvus_sim::fixtures::{BackupSpec, Format, generate};
    use object_store::memory::InMemory;
    use object_store::path::Path;

    use super::super::read::read;
    use super::super::store::BackupLocation;
    use super::*;

    async fn planned(format: Format) -> (Backup, RestorePlan) {
        let store = Arc::new(InMemory::new());
        let spec = BackupSpec {
            name: "twin".into(),
            collections: 2,
            rows_per_segment: 20,
            dim: 4,
            format,
            ..BackupSpec::default()
        };
        generate(&spec, store.clone(), &Path::from("backup"))
            .await
            .expect("generates");
        let backup = read(
            store.as_ref(),
            &BackupLocation::new("memory://", "backup", "twin"),
        )
        .await
        .expect("reads");
        let plan = plan(&backup, &RestoreOptions::default(), Strategy::Merged).expect("plans");
        (backup, plan)
    }

    #[tokio::test]
    async fn a_snapshot_backup_plans_as_its_binlog_twin() {
        let (_, binlog) = planned(Format::Binlog).await;
        let (snapshot_backup, snapshot) = planned(Format::Snapshot).await;
        assert_eq!(snapshot_backup.files.format, BackupFormat::Snapshot);
        assert_eq!(snapshot.totals, binlog.totals);
        assert!(snapshot.totals.figures.inserted > 0);
        let batches = |p: &RestorePlan| -> Vec<(String, Vec<Vec<String>>, i64)> {
            (p.collections.iter().flat_map(|c| &c.batches))
                .map(|b| (b.id.to_string(), b.files.clone(), b.rows))
                .collect()
        };
        assert_eq!(batches(&snapshot), batches(&binlog));
        let paths = |p: &RestorePlan| -> Vec<(String, u64)> {
            (p.files_to_stage.iter())
                .map(|f| (f.path.clone(), f.size))
                .collect()
        };
        assert_eq!(paths(&snapshot), paths(&binlog));
        assert!(binlog.files_to_stage.iter().all(|f| f.source.is_none()));
        assert!(
            (snapshot.files_to_stage.iter()).all(|f| f
                .source
                .as_deref()
                .is_some_and(|s| s.starts_with("bundle/exports/"))),
            "every file is read from its bundle"
        );
        for (s, b) in snapshot.collections.iter().zip(&binlog.collections) {
            assert_eq!((&s.target, &s.partitions), (&b.target, &b.partitions));
            assert_eq!(s.schema, b.schema);
            assert_eq!(
                (s.shards_num, s.consistency_level),
                (b.shards_num, b.consistency_level)
            );
            assert!(s.verify_field_ids && !b.verify_field_ids);
            assert!(
                !s.indexes.is_empty() && b.indexes.is_empty(),
                "a snapshot's indexes are rebuilt"
            );
        }
    }
}
