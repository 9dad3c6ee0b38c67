//! Reading a backup from object storage: its meta (`full_meta.json`, else the four level
//! files) and one listing of its binlogs.

use std::collections::BTreeMap;
use std::fmt;

use object_store::{ObjectStore, ObjectStoreExt as _};

use super::Error;
use super::from_bundle::{self, BundleFile};
use super::meta::{
    BackupInfo, CollectionBackupInfo, LevelInfos, PartitionBackupInfo, SegmentBackupInfo,
};
use super::namespace::Namespace;
use super::snapshot;
use super::store::{BINLOG_DIR, BackupLocation, list_under, read_json};

/// `BackupInfo.format` of the binlog format: empty, as every backup written before the
/// field existed reads back.
const FORMAT_BINLOG: &str = "";
/// `BackupInfo.format` of exported Milvus 3.0 snapshot bundles.
const FORMAT_SNAPSHOT: &str = "snapshot";

const META_DIR: &str = "meta";
const BACKUP_META: &str = "backup_meta.json";
const FULL_META: &str = "full_meta.json";
const COLLECTION_META: &str = "collection_meta.json";
const PARTITION_META: &str = "partition_meta.json";
const SEGMENT_META: &str = "segment_meta.json";
/// Which meta files a backup was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaSource {
    /// `full_meta.json`, the whole tree in one file.
    FullMeta,
    /// `backup_meta.json` plus the collection, partition and segment level files.
    LevelFiles,
}

/// Which of milvus-backup's formats a backup is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackupFormat {
    /// Binlogs under `binlogs/` and the meta tree that lists them.
    Binlog,
    /// A Milvus 3.0 snapshot bundle per collection (milvus-backup 0.6 on 3.0, by default).
    Snapshot,
}

impl fmt::Display for BackupFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackupFormat::Binlog => "binlog",
            BackupFormat::Snapshot => "snapshot",
        })
    }
}

/// Every object under a backup's `binlogs/`, listed once, by relative path; for a snapshot
/// bundle, its data files under the paths a binlog backup would hold them at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BinlogIndex {
    sizes: BTreeMap<String, u64>,
    /// Path → where the object is, for the files that are elsewhere.
    sources: BTreeMap<String, String>,
}

impl BinlogIndex {
    /// Builds an index from (relative path, size) pairs.
    pub fn new(files: impl IntoIterator<Item = (String, u64)>) -> Self {
        Self {
            sizes: files.into_iter().collect(),
            sources: BTreeMap::new(),
        }
    }

    fn of_bundles(files: Vec<BundleFile>) -> Self {
        let mut index = Self::default();
        for file in files {
            index.sizes.insert(file.path.clone(), file.size);
            index.sources.insert(file.path, file.source);
        }
        index
    }

    /// Forgets every listed file but those that are elsewhere, and where they are: all a
    /// restore asks of the index once its plan holds the files it stages
    /// ([`BinlogIndex::source`]). At 600,000 files the listing is some 70 MB.
    pub fn keep_sources(&mut self) {
        self.sizes.retain(|path, _| self.sources.contains_key(path));
    }

    /// Where the object listed as `path` is, when not there.
    pub fn source(&self, path: &str) -> Option<&str> {
        self.sources.get(path).map(String::as_str)
    }

    /// The files whose relative path starts with `prefix` (a directory prefix ending in
    /// `/`), in path order.
    pub fn under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, u64)> + 'a {
        self.sizes
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(path, _)| path.starts_with(prefix))
            .map(|(path, size)| (path.as_str(), *size))
    }

    /// The size of the object listed at `path`, if it is listed.
    pub fn size(&self, path: &str) -> Option<u64> {
        self.sizes.get(path).copied()
    }

    /// Whether any file lies under `prefix`: milvus-backup's `storage.Exist` on a prefix.
    pub fn has_prefix(&self, prefix: &str) -> bool {
        self.under(prefix).next().is_some()
    }

    /// The bytes under `prefix`.
    pub fn bytes_under(&self, prefix: &str) -> u64 {
        self.under(prefix).map(|(_, size)| size).sum()
    }

    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }
}

/// A backup read into memory: its meta tree and the listing of its binlogs.
#[derive(Debug, Clone)]
pub struct Backup {
    pub files: BackupFiles,
    pub info: BackupInfo,
    pub meta_source: MetaSource,
    /// Collections of a snapshot bundle with a storage-version-3 segment (one named each):
    /// backup import cannot read them, so a restore that selects one is refused.
    pub storage_v3: Vec<(Namespace, i64)>,
}

/// Where a backup's data files are and how to read one: all that a restore asks of the
/// backup once it is planned, since the plan holds what it took from the meta tree. The
/// tree is not kept beside it: at 10,000 collections it is some 160 MB.
#[derive(Debug, Clone)]
pub struct BackupFiles {
    pub location: BackupLocation,
    pub format: BackupFormat,
    pub binlogs: BinlogIndex,
}

impl BackupFiles {
    /// Whether ends whose store is the backup's can import its files where they are. A
    /// bundle's files are not where a binlog import looks for a segment: always staged.
    pub fn importable_in_place(&self) -> bool {
        self.format == BackupFormat::Binlog
    }

    /// The bytes of the binlog listed at `path` (relative to the backup directory), read
    /// from where it is: a snapshot bundle's file for a bundle. A file still listed with its
    /// size is read as that many bytes, in one request: a local store's `get` hands off to a
    /// blocking thread twice (to open, then to read), its `get_ranges` once, and the count
    /// reads two files of every segment. A file shorter than listed fails to read; one that
    /// grew since it was listed reads as its listed bytes.
    pub async fn binlog_bytes(
        &self,
        store: &dyn ObjectStore,
        path: &str,
    ) -> Result<bytes::Bytes, object_store::Error> {
        let at = self.binlogs.source(path).unwrap_or(path);
        let location = self.location.path(at);
        match self.binlogs.size(path) {
            Some(size) if size > 0 => {
                let whole = 0..size;
                let mut read = (store.get_ranges(&location, std::slice::from_ref(&whole))).await?;
                Ok(read.pop().unwrap_or_default())
            }
            _ => store.get(&location).await?.bytes().await,
        }
    }
}

/// Reads the backup at `location` from `store`.
///
/// `meta/backup_meta.json` decides whether the backup exists (milvus-backup's
/// `meta.Exist`). The tree comes from `full_meta.json` when present, else from the level
/// files, joined on collection and partition ids as milvus-backup's `levelToTree` does.
/// A snapshot-format backup's bundles are read into the same tree (see [`from_bundle`]); a
/// format this version does not know is refused. Leaves nothing behind; only reads.
pub async fn read(store: &dyn ObjectStore, location: &BackupLocation) -> Result<Backup, Error> {
    let backup_meta = format!("{META_DIR}/{BACKUP_META}");
    if !exists(store, location, &backup_meta).await? {
        return Err(Error::NotFound {
            name: location.name.clone(),
            url: location.url(&backup_meta),
        });
    }

    let full_meta = format!("{META_DIR}/{FULL_META}");
    let (info, meta_source) = if exists(store, location, &full_meta).await? {
        (
            read_json::<BackupInfo>(store, location, &full_meta).await?,
            MetaSource::FullMeta,
        )
    } else {
        (read_levels(store, location).await?, MetaSource::LevelFiles)
    };

    let format = match info.format.as_str() {
        FORMAT_BINLOG => BackupFormat::Binlog,
        FORMAT_SNAPSHOT => BackupFormat::Snapshot,
        other => {
            return Err(Error::UnknownFormat {
                name: location.name.clone(),
                format: other.to_owned(),
            });
        }
    };
    let (info, binlogs, storage_v3) = match format {
        BackupFormat::Binlog => (info, list_binlogs(store, location).await?, Vec::new()),
        BackupFormat::Snapshot => read_bundles(store, location, info).await?,
    };
    tracing::debug!(backup = %location, %format, collections = info.collection_backups.len(), binlogs = binlogs.len(), ?meta_source, "read backup");
    Ok(Backup {
        files: BackupFiles {
            location: location.clone(),
            format,
            binlogs,
        },
        info,
        meta_source,
        storage_v3,
    })
}

/// A snapshot-format backup's bundles, each collection's read into the tree a binlog backup
/// has, with the files that tree names. A collection with a storage-version-3 segment is
/// kept as its meta says and set aside, so that only a restore that selects it is refused.
async fn read_bundles(
    store: &dyn ObjectStore,
    location: &BackupLocation,
    mut info: BackupInfo,
) -> Result<(BackupInfo, BinlogIndex, Vec<(Namespace, i64)>), Error> {
    let mut files = Vec::new();
    let mut storage_v3 = Vec::new();
    let mut collections = Vec::new();
    for collection in std::mem::take(&mut info.collection_backups) {
        let name = Namespace::new(&collection.db_name, &collection.collection_name);
        let Some(metadata_path) = (collection.snapshot_backup.as_ref())
            .map(|s| s.metadata_path.as_str())
            .filter(|path| !path.is_empty())
        else {
            return Err(Error::CorruptBundle {
                url: location.url(&format!("{META_DIR}/{BACKUP_META}")),
                reason: format!(
                    "collection {name} of a snapshot-format backup has no snapshot_backup.metadata_path"
                ),
            });
        };
        match snapshot::read_bundle(store, location, &name.to_string(), metadata_path).await {
            Ok(bundle) => {
                let (tree, bundle_files) = from_bundle::collection_tree(&collection, &bundle)?;
                files.extend(bundle_files);
                collections.push(tree);
            }
            Err(Error::StorageV3Segment { segment, .. }) => {
                storage_v3.push((name, segment));
                collections.push(collection);
            }
            Err(e) => return Err(e),
        }
    }
    info.collection_backups = collections;
    info.size = info.collection_backups.iter().map(|c| c.size).sum();
    Ok((info, BinlogIndex::of_bundles(files), storage_v3))
}

async fn exists(
    store: &dyn ObjectStore,
    location: &BackupLocation,
    relative: &str,
) -> Result<bool, Error> {
    match store.head(&location.path(relative)).await {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(source) => Err(Error::Storage {
            url: location.url(relative),
            source,
        }),
    }
}

async fn read_levels(
    store: &dyn ObjectStore,
    location: &BackupLocation,
) -> Result<BackupInfo, Error> {
    let mut info: BackupInfo =
        read_json(store, location, &format!("{META_DIR}/{BACKUP_META}")).await?;
    let collections: LevelInfos<CollectionBackupInfo> =
        read_json(store, location, &format!("{META_DIR}/{COLLECTION_META}")).await?;
    let partitions: LevelInfos<PartitionBackupInfo> =
        read_json(store, location, &format!("{META_DIR}/{PARTITION_META}")).await?;
    let segments: LevelInfos<SegmentBackupInfo> =
        read_json(store, location, &format!("{META_DIR}/{SEGMENT_META}")).await?;
    info.collection_backups = level_to_tree(collections.infos, partitions.infos, segments.infos);
    info.size = info.collection_backups.iter().map(|c| c.size).sum();
    Ok(info)
}

/// milvus-backup's `levelToTree`: segments join their partition on (collection id,
/// partition id), partitions their collection on collection id, and sizes are summed
/// again from the segments up. Segments of partition -1 join no partition; they are
/// carried by the collection's own `l0_segments`.
fn level_to_tree(
    collections: Vec<CollectionBackupInfo>,
    partitions: Vec<PartitionBackupInfo>,
    segments: Vec<SegmentBackupInfo>,
) -> Vec<CollectionBackupInfo> {
    let mut segments_by_partition: BTreeMap<(i64, i64), Vec<SegmentBackupInfo>> = BTreeMap::new();
    for segment in segments {
        segments_by_partition
            .entry((segment.collection_id, segment.partition_id))
            .or_default()
            .push(segment);
    }
    let mut partitions_by_collection: BTreeMap<i64, Vec<PartitionBackupInfo>> = BTreeMap::new();
    for mut partition in partitions {
        partition.segment_backups = segments_by_partition
            .remove(&(partition.collection_id, partition.partition_id))
            .unwrap_or_default();
        partition.size = partition.segment_backups.iter().map(|s| s.size).sum();
        partitions_by_collection
            .entry(partition.collection_id)
            .or_default()
            .push(partition);
    }
    collections
        .into_iter()
        .map(|mut collection| {
            collection.partition_backups = partitions_by_collection
                .remove(&collection.collection_id)
                .unwrap_or_default();
            collection.size = collection.partition_backups.iter().map(|p| p.size).sum();
            collection
        })
        .collect()
}

async fn list_binlogs(
    store: &dyn ObjectStore,
    location: &BackupLocation,
) -> Result<BinlogIndex, Error> {
    Ok(BinlogIndex::new(
        list_under(store, location, BINLOG_DIR).await?,
    ))
}

#[cfg(test)]
mod tests {
    use object_store::PutPayload;
    use object_store::local::LocalFileSystem;
    use object_store::path::Path;

    use super::super::fixture::{self, Layout};
    use super::super::meta::KeyValuePair;
    use super::*;

    #[tokio::test]
    async fn full_meta_and_level_files_give_the_same_tree() {
        let full = read(
            fixture::store(Layout::Full).await.as_ref(),
            &fixture::location(),
        )
        .await
        .unwrap();
        let levels = read(
            fixture::store(Layout::Levels).await.as_ref(),
            &fixture::location(),
        )
        .await
        .unwrap();
        assert_eq!(full.meta_source, MetaSource::FullMeta);
        assert_eq!(levels.meta_source, MetaSource::LevelFiles);
        assert_eq!(full.info, levels.info);
        assert_eq!(full.files.binlogs, levels.files.binlogs);
        let orders = &full.info.collection_backups[0];
        assert_eq!(orders.partition_backups.len(), 2);
        assert_eq!(orders.partition_backups[0].segment_backups.len(), 4);
        assert!(orders.partition_backups[1].segment_backups.is_empty());
        assert_eq!(levels.info.size, 2220);
    }

    #[tokio::test]
    async fn go_json_shapes_are_read_exactly() {
        let backup = read(
            fixture::store(Layout::Full).await.as_ref(),
            &fixture::location(),
        )
        .await
        .unwrap();
        let info = &backup.info;
        // A TSO above 2^53 survives as an exact u64.
        assert_eq!(info.backup_timestamp, 456_789_012_345_678_901);
        assert_eq!(
            info.collection_backups[0].backup_timestamp,
            456_789_012_345_678_901
        );
        // Omitted zero values read as zero.
        assert_eq!(info.state_code, 0);
        assert_eq!(info.format, "");
        let items = &info.collection_backups[1];
        assert_eq!(items.consistency_level, 0);
        assert_eq!(items.partition_backups[0].segment_backups[0].group_id, 0);
        assert_eq!(items.partition_backups[0].segment_backups[0].v_channel, "");
        assert!(!items.partition_backups[0].segment_backups[0].is_l0);
        // Enums are integers, proto field names are the keys (fieldID, autoID).
        let orders = &info.collection_backups[0];
        assert_eq!(orders.consistency_level, 2);
        let schema = orders.schema.as_ref().unwrap();
        assert_eq!(schema.fields[1].field_id, 101);
        assert_eq!(schema.fields[1].data_type, 101);
        assert_eq!(
            schema.fields[1].type_params,
            vec![KeyValuePair {
                key: "dim".into(),
                value: "4".into()
            }]
        );
        assert!(items.schema.as_ref().unwrap().auto_id);
        assert_eq!(
            orders.partition_backups[0].segment_backups[0].binlogs[1].field_id,
            101
        );
        assert_eq!(
            orders.partition_backups[0].segment_backups[0].binlogs[1].binlogs[0].log_size,
            200
        );
        assert_eq!(orders.l0_segments[0].partition_id, -1);
        // RBAC and the database key come through.
        let rbac = info.rbac_meta.as_ref().unwrap();
        assert_eq!(rbac.users[0].roles[0].name, "reader");
        assert_eq!(
            rbac.grants[0]
                .grantor
                .as_ref()
                .unwrap()
                .privilege
                .as_ref()
                .unwrap()
                .name,
            "Query"
        );
        assert_eq!(info.database_backups[1].ezk, "ezk-old");
        // The default value is base64 protobuf.
        let price = schema.fields[2].default_value().unwrap().unwrap();
        assert_eq!(
            price.data,
            Some(milvus_proto::schema::value_field::Data::LongData(42))
        );
    }

    #[tokio::test]
    async fn binlogs_are_listed_once_with_sizes() {
        let backup = read(
            fixture::store(Layout::Full).await.as_ref(),
            &fixture::location(),
        )
        .await
        .unwrap();
        assert_eq!(backup.files.binlogs.len(), fixture::BINLOGS.len());
        assert_eq!(
            backup
                .files
                .binlogs
                .bytes_under("binlogs/insert_log/100/1000/2001/"),
            300
        );
        assert!(
            backup
                .files
                .binlogs
                .has_prefix("binlogs/delta_log/100/1000/2001/")
        );
        assert!(
            !backup
                .files
                .binlogs
                .has_prefix("binlogs/delta_log/100/1000/2002/")
        );
        // A prefix is a directory: 200 does not match 2000.
        assert_eq!(
            backup.files.binlogs.bytes_under("binlogs/insert_log/200/"),
            1100
        );
        assert_eq!(
            backup.files.binlogs.bytes_under("binlogs/insert_log/20/"),
            0
        );
    }

    #[tokio::test]
    async fn reads_from_a_local_directory() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        fixture::write(&store, Layout::Levels).await;
        let location = BackupLocation::new("file:///srv/backups/", "/backup/", "orders_bak");
        let backup = read(&store, &location).await.unwrap();
        assert_eq!(backup.info.collection_backups.len(), 2);
        assert_eq!(backup.files.binlogs.len(), fixture::BINLOGS.len());
        assert_eq!(
            location.to_string(),
            "file:///srv/backups/backup/orders_bak/"
        );
    }

    #[tokio::test]
    async fn missing_backup_names_the_meta_file() {
        let store = fixture::store(Layout::Full).await;
        let location = BackupLocation::new(fixture::STORE_URL, "backup", "nope");
        let err = read(store.as_ref(), &location).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "backup nope not found at memory://test/backup/nope/meta/backup_meta.json"
        );
    }

    #[tokio::test]
    async fn corrupt_meta_names_the_file_line_and_column() {
        let store = fixture::store(Layout::Full).await;
        let corrupt = "{\n  \"name\": \"orders_bak\",\n  \"collection_backups\": [\n    {\"collection_id\": \"oops\"}\n  ]\n}";
        store
            .put(
                &fixture::path("meta/full_meta.json"),
                PutPayload::from(corrupt),
            )
            .await
            .unwrap();
        let err = read(store.as_ref(), &fixture::location())
            .await
            .unwrap_err();
        let Error::CorruptMeta {
            url,
            line,
            column,
            message,
        } = &err
        else {
            panic!("{err}")
        };
        assert_eq!(url, "memory://test/backup/orders_bak/meta/full_meta.json");
        assert_eq!((*line, *column), (4, 28));
        assert!(message.contains("expected i64"), "{message}");
        assert!(err.to_string().starts_with(
            "memory://test/backup/orders_bak/meta/full_meta.json is not valid backup meta"
        ));
    }

    #[tokio::test]
    async fn truncated_level_file_is_reported_by_name() {
        let store = fixture::store(Layout::Levels).await;
        store
            .put(
                &fixture::path("meta/segment_meta.json"),
                PutPayload::from("{\"infos\":["),
            )
            .await
            .unwrap();
        let err = read(store.as_ref(), &fixture::location())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::CorruptMeta { url, line: 1, .. } if url.ends_with("/meta/segment_meta.json")),
            "{err}"
        );
        store
            .delete(&fixture::path("meta/segment_meta.json"))
            .await
            .unwrap();
        let err = read(store.as_ref(), &fixture::location())
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "backup meta file memory://test/backup/orders_bak/meta/segment_meta.json is missing"
        );
    }

    #[tokio::test]
    async fn unknown_formats_are_refused() {
        let store = fixture::store(Layout::Full).await;
        let meta = r#"{"name":"orders_bak","format":"parquet"}"#;
        store
            .put(
                &fixture::path("meta/full_meta.json"),
                PutPayload::from(meta),
            )
            .await
            .unwrap();
        let err = read(store.as_ref(), &fixture::location())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("format \"parquet\""), "{err}");
    }

    /// A snapshot-format backup of one collection whose bundle is snapshot's test bundle.
    async fn snapshot_backup(storage_version: i64) -> object_store::memory::InMemory {
        let store = snapshot::tests::bundle(2, &[1005, 1006]).await;
        if storage_version > 0 {
            let manifest = snapshot::tests::manifest(2, 1006, storage_version);
            let path = format!(
                "{}/snapshots/1001/manifests/2002/1006.avro",
                snapshot::tests::DIR
            );
            store
                .put(&Path::from(path), PutPayload::from(manifest))
                .await
                .unwrap();
        }
        let meta = format!(
            r#"{{"name":"b1","format":"snapshot","collection_backups":[
  {{"db_name":"default","collection_name":"c","snapshot_backup":{{"metadata_path":"{}"}}}}]}}"#,
            snapshot::tests::METADATA
        );
        for file in ["meta/backup_meta.json", "meta/full_meta.json"] {
            let path = Path::from(format!("backups/b1/{file}"));
            store
                .put(&path, PutPayload::from(meta.clone()))
                .await
                .unwrap();
        }
        store
    }

    #[tokio::test]
    async fn a_snapshot_backup_reads_into_binlog_paths_that_point_into_its_bundle() {
        let store = snapshot_backup(0).await;
        let backup = read(&store, &snapshot::tests::location())
            .await
            .expect("reads");
        assert_eq!(backup.files.format, BackupFormat::Snapshot);
        assert!(!backup.files.importable_in_place());
        let c = &backup.info.collection_backups[0];
        assert_eq!((c.collection_id, c.partition_backups.len()), (1001, 1));
        assert_eq!(c.partition_backups[0].segment_backups.len(), 2);
        let staged = "binlogs/insert_log/1001/1003/1005/1005/100/7";
        assert_eq!(
            backup
                .files
                .binlogs
                .under("binlogs/insert_log/1001/1003/1005/")
                .count(),
            1
        );
        assert_eq!(
            backup.files.binlogs.source(staged),
            Some(
                format!(
                    "{}/files/insert_log/1001/1003/1005/100/7",
                    snapshot::tests::BUNDLE
                )
                .as_str()
            )
        );
        assert!(backup.storage_v3.is_empty());
    }

    #[tokio::test]
    async fn a_storage_v3_collection_is_set_aside_naming_its_segment() {
        let store = snapshot_backup(3).await;
        let backup = read(&store, &snapshot::tests::location())
            .await
            .expect("reads");
        assert_eq!(backup.storage_v3, [(Namespace::new("default", "c"), 1006)]);
    }

    #[tokio::test]
    async fn a_snapshot_collection_without_its_metadata_path_is_refused() {
        let store = fixture::store(Layout::Full).await;
        let meta = r#"{"name":"orders_bak","format":"snapshot","collection_backups":[{"collection_name":"c"}]}"#;
        store
            .put(
                &fixture::path("meta/full_meta.json"),
                PutPayload::from(meta),
            )
            .await
            .unwrap();
        let err = read(store.as_ref(), &fixture::location())
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("has no snapshot_backup.metadata_path"),
            "{err}"
        );
    }
}
