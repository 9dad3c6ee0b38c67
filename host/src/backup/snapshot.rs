//! Snapshot-format backups: the bundle milvus-backup (v0.6.0 on, the default against Milvus
//! 3.0) has Milvus export for each collection, read into what the planner needs.
//!
//! A collection's `snapshot_backup.metadata_path` (relative to the backup directory) names
//! the bundle's metadata, `bundle/exports/<uuid>/snapshots/<collection>/metadata/<id>.json`;
//! the directory above `snapshots/` is the bundle. Below it:
//!
//! - the metadata: protojson with the `.proto` field names (`fieldID`, `is_primary_key`),
//!   64-bit integers as strings, enums by name, zero values left out;
//! - one manifest per segment, `snapshots/<collection>/manifests/<id>/<segment>.avro`: one
//!   raw Avro datum (no container header, no schema inside), whose schema the metadata's
//!   `format_version` picks;
//! - `files/<key under Milvus's root path>`: the insert, delta, stats and index files the
//!   manifests list, laid out as in Milvus's own bucket (`files/insert_log/C/P/S/F/L`).
//!
//! Every path inside the bundle is the object key it had when it was exported; the reader
//! re-roots each under the bundle where it is now, and refuses one outside the bundle.
//! Storage-version-3 segments (Loon manifests) cannot be imported as binlogs, so a bundle
//! with one is refused, naming it. `docs/snapshot-bundle.md` has the format as read from
//! Milvus's and milvus-backup's sources, with where each fact comes from.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::LazyLock;

use apache_avro::Schema;
use object_store::ObjectStore;
use serde::{Deserialize, Deserializer};

use super::Error;
use super::meta::KeyValuePair;
use super::store::{BackupLocation, list_under, read_bytes, read_json};

/// The newest metadata `format_version` this reader knows the manifest schema of.
pub const MAX_FORMAT_VERSION: i32 = 5;

/// The storage version from which a segment is a Loon manifest, not binlogs.
const STORAGE_V3: i64 = 3;

/// A collection's bundle, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// The bundle directory, relative to the backup directory (`bundle/exports/<uuid>`).
    pub dir: String,
    pub metadata: SnapshotMetadata,
    /// One per manifest, in segment id order.
    pub segments: Vec<Segment>,
    /// Every object under the bundle's `files/`, relative to the backup directory, with its
    /// size as listed.
    pub files: BTreeMap<String, u64>,
}

/// One segment as its manifest describes it, with every path relative to the bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub id: i64,
    /// -1 for an L0 segment that applies to every partition.
    pub partition_id: i64,
    pub level: SegmentLevel,
    pub channel: String,
    pub rows: i64,
    pub storage_version: i64,
    pub binlogs: Vec<FieldLogs>,
    pub deltalogs: Vec<FieldLogs>,
    pub statslogs: Vec<FieldLogs>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentLevel {
    Legacy,
    L0,
    L1,
    L2,
}

/// One field's (or column group's) files.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldLogs {
    pub field_id: i64,
    pub logs: Vec<Log>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    /// Relative to the bundle: `files/insert_log/...`.
    pub path: String,
    pub log_id: i64,
    pub entries: i64,
    pub size: i64,
    pub timestamp_from: u64,
    pub timestamp_to: u64,
}

/// `SnapshotMetadata`, the fields lockstep reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SnapshotMetadata {
    pub format_version: i32,
    pub snapshot_info: SnapshotInfo,
    pub collection: CollectionDescription,
    pub indexes: Vec<SnapshotIndex>,
    pub manifest_list: Vec<String>,
    pub storagev2_manifest_list: Vec<StorageManifest>,
    pub segment_ids: Vec<Int64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SnapshotInfo {
    pub name: String,
    pub id: Int64,
    pub collection_id: Int64,
    pub create_ts: Int64,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CollectionDescription {
    pub schema: SnapshotSchema,
    pub num_shards: Int64,
    pub consistency_level: ProtoEnum,
    pub properties: Vec<KeyValuePair>,
    /// Partition name → id.
    pub partitions: BTreeMap<String, Int64>,
    pub virtual_channel_names: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SnapshotSchema {
    pub name: String,
    pub description: String,
    #[serde(rename = "autoID")]
    pub auto_id: bool,
    pub fields: Vec<SnapshotField>,
    pub enable_dynamic_field: bool,
    pub properties: Vec<KeyValuePair>,
    pub functions: Vec<SnapshotFunction>,
    /// Read only to refuse a schema that has them: lockstep does not restore them yet.
    pub struct_array_fields: Vec<serde::de::IgnoredAny>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SnapshotFunction {
    pub name: String,
    pub id: Int64,
    pub description: String,
    #[serde(rename = "type")]
    pub function_type: ProtoEnum,
    pub input_field_names: Vec<String>,
    pub input_field_ids: Vec<Int64>,
    pub output_field_names: Vec<String>,
    pub output_field_ids: Vec<Int64>,
    pub params: Vec<KeyValuePair>,
}

/// A field's default value: protojson's form of the `ValueField` oneof, one key set.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SnapshotValue {
    pub bool_data: Option<bool>,
    pub int_data: Option<i32>,
    pub long_data: Option<Int64>,
    pub float_data: Option<f32>,
    pub double_data: Option<f64>,
    pub string_data: Option<String>,
    /// Base64, as protojson writes bytes.
    pub bytes_data: Option<String>,
    pub timestamptz_data: Option<Int64>,
    pub date_data: Option<i32>,
    pub time_data: Option<Int64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SnapshotField {
    #[serde(rename = "fieldID")]
    pub field_id: Int64,
    pub name: String,
    pub is_primary_key: bool,
    pub description: String,
    pub data_type: ProtoEnum,
    pub type_params: Vec<KeyValuePair>,
    #[serde(rename = "autoID")]
    pub auto_id: bool,
    pub element_type: ProtoEnum,
    pub is_dynamic: bool,
    pub is_partition_key: bool,
    pub nullable: bool,
    pub is_function_output: bool,
    pub default_value: Option<SnapshotValue>,
}

/// An index definition; lockstep rebuilds it, it never copies index files.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SnapshotIndex {
    #[serde(rename = "fieldID")]
    pub field_id: Int64,
    pub index_name: String,
    pub index_params: Vec<KeyValuePair>,
    pub user_index_params: Vec<KeyValuePair>,
    pub is_auto_index: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StorageManifest {
    pub segment_id: Int64,
    /// A StorageV2 manifest key, or for StorageV3 the JSON `{"ver":..,"base_path":..}`.
    pub manifest: String,
}

/// A protojson 64-bit integer: a string by the spec, a number from some writers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Int64(pub i64);

impl<'de> Deserialize<'de> for Int64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Number(i64),
            Text(String),
        }
        match Either::deserialize(d)? {
            Either::Number(n) => Ok(Int64(n)),
            Either::Text(s) => s
                .parse()
                .map(Int64)
                .map_err(|_| serde::de::Error::custom(format!("{s:?} is not a 64-bit integer"))),
        }
    }
}

/// A protojson enum: its name by the spec, its number from some writers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtoEnum {
    Name(String),
    Number(i32),
}

impl Default for ProtoEnum {
    fn default() -> Self {
        ProtoEnum::Number(0)
    }
}

impl<'de> Deserialize<'de> for ProtoEnum {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Number(i32),
            Text(String),
        }
        Ok(match Either::deserialize(d)? {
            Either::Number(n) => ProtoEnum::Number(n),
            Either::Text(s) => ProtoEnum::Name(s),
        })
    }
}

impl ProtoEnum {
    /// Its number, resolving a name with `from_name` (prost's `from_str_name`).
    pub fn number(&self, from_name: impl Fn(&str) -> Option<i32>) -> Option<i32> {
        match self {
            ProtoEnum::Number(n) => Some(*n),
            ProtoEnum::Name(name) => from_name(name),
        }
    }
}

impl fmt::Display for ProtoEnum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoEnum::Name(name) => f.write_str(name),
            ProtoEnum::Number(n) => write!(f, "{n}"),
        }
    }
}

/// The manifest's record as the reader maps it; the schema has more fields (positions,
/// index and text-index files), which serde skips.
#[derive(Debug, Deserialize)]
struct ManifestEntry {
    segment_id: i64,
    partition_id: i64,
    segment_level: i64,
    channel_name: String,
    num_of_rows: i64,
    storage_version: i64,
    binlog_files: Vec<AvroFieldBinlog>,
    deltalog_files: Vec<AvroFieldBinlog>,
    statslog_files: Vec<AvroFieldBinlog>,
}

#[derive(Debug, Deserialize)]
struct AvroFieldBinlog {
    field_id: i64,
    binlogs: Vec<AvroBinlog>,
}

#[derive(Debug, Deserialize)]
struct AvroBinlog {
    entries_num: i64,
    timestamp_from: i64,
    timestamp_to: i64,
    log_path: String,
    log_size: i64,
    log_id: i64,
}

/// The manifest schema of format 2, which the others are edits of. Record and field names,
/// order and types are the wire format: a raw datum carries none of them.
const SCHEMA_V2: &str = milvus_proto::SNAPSHOT_MANIFEST_SCHEMA_V2;

/// Format 2's schema edited into another version's: each edit inserts `text` right after
/// `after` (or, with an empty `text`, deletes `after`).
fn edited(edits: &[(&str, &str)]) -> String {
    edits
        .iter()
        .fold(SCHEMA_V2.to_string(), |schema, (after, text)| {
            assert!(schema.contains(after), "schema edit anchor {after:?}");
            match text.is_empty() {
                true => schema.replacen(after, "", 1),
                false => schema.replacen(after, &format!("{after}{text}"), 1),
            }
        })
}

const IS_SORTED: &str = r#"{"name":"is_sorted","type":"boolean"}"#;
const COMMIT_TS: &str = r#",{"name":"commit_timestamp","type":"long","default":0}"#;
const COLUMN_GROUP: &str = r#",{"name":"child_fields","type":{"type":"array","items":"long"},"default":[]},{"name":"format","type":"string","default":""}"#;
const FIELD_ID_OF_BINLOG: &str = r#""name":"AvroFieldBinlog","fields":[
 {"name":"field_id","type":"long"}"#;
const DELETE_APPLY: &str =
    r#",{"name":"delete_apply_start_after_timetick","type":"long","default":0}"#;
const INDEX_STORE_PATH: &str = r#",
 {"name":"index_store_path_version","type":"int","default":0}"#;

/// The manifest schemas by `format_version`: 0 and 1 share one.
static SCHEMAS: LazyLock<BTreeMap<i32, Schema>> = LazyLock::new(|| {
    let v1 = edited(&[(INDEX_STORE_PATH, "")]);
    let v3 = edited(&[(IS_SORTED, COMMIT_TS)]);
    let v4 = edited(&[(IS_SORTED, COMMIT_TS), (FIELD_ID_OF_BINLOG, COLUMN_GROUP)]);
    let v5 = edited(&[
        (IS_SORTED, COMMIT_TS),
        (FIELD_ID_OF_BINLOG, COLUMN_GROUP),
        (&format!("{IS_SORTED}{COMMIT_TS}"), DELETE_APPLY),
    ]);
    let parse = |text: &str| Schema::parse_str(text).expect("a manifest schema of this module");
    BTreeMap::from([
        (0, parse(&v1)),
        (1, parse(&v1)),
        (2, parse(SCHEMA_V2)),
        (3, parse(&v3)),
        (4, parse(&v4)),
        (5, parse(&v5)),
    ])
});

/// The manifest schema of metadata format `version`.
pub fn manifest_schema(version: i32) -> Option<&'static Schema> {
    SCHEMAS.get(&version)
}

/// Decodes one manifest written under metadata format `version`. Every byte must belong to
/// the datum: a manifest read with the wrong schema rarely fails outright, but it does not
/// end where the datum does.
fn decode_manifest(bytes: &[u8], version: i32) -> Result<ManifestEntry, String> {
    let schema = manifest_schema(version).ok_or_else(|| {
        format!("snapshot format {version} is not one lockstep reads (0 to {MAX_FORMAT_VERSION})")
    })?;
    let not_one = |e: apache_avro::Error| format!("not a format-{version} manifest: {e}");
    let mut rest = bytes;
    let value = (apache_avro::reader::datum::GenericDatumReader::builder(schema).build())
        .and_then(|reader| reader.read_value(&mut rest))
        .map_err(not_one)?;
    if !rest.is_empty() {
        return Err(format!(
            "not a format-{version} manifest: {} byte(s) after the entry",
            rest.len()
        ));
    }
    apache_avro::from_value(&value).map_err(not_one)
}

/// The bundle directory of `metadata_path`, both relative to the backup directory: what is
/// above `snapshots/<collection>/metadata/<snapshot>.json`.
fn bundle_dir(metadata_path: &str) -> Option<&str> {
    let parts: Vec<&str> = metadata_path.rsplitn(5, '/').collect();
    let [file, metadata, collection, snapshots, dir] = parts[..] else {
        return None;
    };
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let snapshot = file.strip_suffix(".json")?;
    (snapshots == "snapshots" && metadata == "metadata" && numeric(collection) && numeric(snapshot))
        .then_some(dir)
}

/// Re-roots the keys the bundle was exported with under the bundle where it is now.
struct Rebase {
    /// The bundle's key when exported, e.g. `backup/b1/bundle/exports/<uuid>`.
    old_root: String,
}

impl Rebase {
    /// The old root is what precedes `/snapshots/<collection>/manifests/` in the manifest
    /// paths. A complete URI (`s3://bucket/key`) is accepted as well as a key.
    fn new(metadata: &SnapshotMetadata) -> Option<Rebase> {
        let marker = format!(
            "/snapshots/{}/manifests/",
            metadata.snapshot_info.collection_id.0
        );
        let first = metadata.manifest_list.first()?;
        let at = first.find(&marker)?;
        Some(Rebase {
            old_root: strip_uri(&first[..at]).to_string(),
        })
    }

    /// `path` relative to the bundle, if it lies under `under` in it (`files/` or
    /// `snapshots/`).
    fn relative(&self, path: &str, under: &str) -> Option<String> {
        let path = strip_uri(path);
        let anchor = format!("{}/{under}", self.old_root);
        let at = path.find(&anchor)?;
        // The old root must start the key, or follow a bucket segment of a URI.
        if at > 0 && !path[..at].ends_with('/') {
            return None;
        }
        let rest = &path[at + self.old_root.len() + 1..];
        (!rest
            .split('/')
            .any(|p| p == ".." || p == "." || p.is_empty()))
        .then(|| rest.to_string())
    }
}

/// `s3://bucket/key` → `bucket/key`; a key stays as it is.
fn strip_uri(path: &str) -> &str {
    path.split_once("://").map_or(path, |(_, rest)| rest)
}

/// Reads the bundle of the collection `collection` (for messages) whose metadata is at
/// `metadata_path` in the backup at `location`: the metadata, every manifest, and a listing
/// of the bundle's `files/` to check that every file a manifest names is there.
pub async fn read_bundle(
    store: &dyn ObjectStore,
    location: &BackupLocation,
    collection: &str,
    metadata_path: &str,
) -> Result<Bundle, Error> {
    let corrupt = |relative: &str, reason: String| Error::CorruptBundle {
        url: location.url(relative),
        reason,
    };
    let dir = bundle_dir(metadata_path)
        .ok_or_else(|| {
            corrupt(
                metadata_path,
                "snapshot_backup.metadata_path does not end in \
                 snapshots/<collection>/metadata/<snapshot>.json"
                    .into(),
            )
        })?
        .to_string();
    let metadata: SnapshotMetadata = read_json(store, location, metadata_path).await?;
    if !(0..=MAX_FORMAT_VERSION).contains(&metadata.format_version) {
        return Err(corrupt(
            metadata_path,
            format!(
                "snapshot format {} is newer than lockstep reads (up to {MAX_FORMAT_VERSION})",
                metadata.format_version
            ),
        ));
    }
    if let Some(v3) =
        (metadata.storagev2_manifest_list.iter()).find(|m| m.manifest.starts_with('{'))
    {
        return Err(Error::StorageV3Segment {
            collection: collection.to_string(),
            segment: v3.segment_id.0,
        });
    }
    let rebase = Rebase::new(&metadata);
    let mut segments = Vec::new();
    for manifest in &metadata.manifest_list {
        let relative = rebase
            .as_ref()
            .and_then(|r| r.relative(manifest, "snapshots/"))
            .ok_or_else(|| {
                corrupt(
                    metadata_path,
                    format!("manifest {manifest} is not inside the bundle"),
                )
            })?;
        let path = format!("{dir}/{relative}");
        let bytes = read_bytes(store, location, &path).await?;
        let entry = decode_manifest(&bytes, metadata.format_version)
            .map_err(|reason| corrupt(&path, reason))?;
        if entry.storage_version >= STORAGE_V3 {
            return Err(Error::StorageV3Segment {
                collection: collection.to_string(),
                segment: entry.segment_id,
            });
        }
        let rebase = rebase.as_ref().expect("a manifest gives the root");
        let logs = |fields: Vec<AvroFieldBinlog>| -> Result<Vec<FieldLogs>, Error> {
            (fields.into_iter())
                .map(|f| {
                    let logs = (f.binlogs.into_iter())
                        .map(|l| {
                            let relative =
                                rebase.relative(&l.log_path, "files/").ok_or_else(|| {
                                    corrupt(
                                        &path,
                                        format!("file {} is not inside the bundle", l.log_path),
                                    )
                                })?;
                            Ok(Log {
                                path: relative,
                                log_id: l.log_id,
                                entries: l.entries_num,
                                size: l.log_size,
                                timestamp_from: l.timestamp_from as u64,
                                timestamp_to: l.timestamp_to as u64,
                            })
                        })
                        .collect::<Result<_, Error>>()?;
                    Ok(FieldLogs {
                        field_id: f.field_id,
                        logs,
                    })
                })
                .collect()
        };
        segments.push(Segment {
            id: entry.segment_id,
            partition_id: entry.partition_id,
            level: match entry.segment_level {
                1 => SegmentLevel::L0,
                2 => SegmentLevel::L1,
                3 => SegmentLevel::L2,
                _ => SegmentLevel::Legacy,
            },
            channel: entry.channel_name,
            rows: entry.num_of_rows,
            storage_version: entry.storage_version,
            binlogs: logs(entry.binlog_files)?,
            deltalogs: logs(entry.deltalog_files)?,
            statslogs: logs(entry.statslog_files)?,
        });
    }
    segments.sort_by_key(|s| s.id);

    let listed: BTreeSet<i64> = segments.iter().map(|s| s.id).collect();
    let named: BTreeSet<i64> = metadata.segment_ids.iter().map(|id| id.0).collect();
    if listed != named || listed.len() != segments.len() {
        return Err(corrupt(
            metadata_path,
            format!(
                "segment_ids {named:?} do not match the manifests' segments {:?}",
                segments.iter().map(|s| s.id).collect::<Vec<_>>()
            ),
        ));
    }
    // Milvus's own restore does not check this end to end (milvus#53514, #53519): a file
    // the manifest names and the bundle lacks would import short and report success.
    let present: BTreeMap<String, u64> = list_under(store, location, &format!("{dir}/files/"))
        .await?
        .into_iter()
        .collect();
    let files = segments
        .iter()
        .flat_map(|s| s.binlogs.iter().chain(&s.deltalogs).chain(&s.statslogs))
        .flat_map(|f| &f.logs);
    for log in files {
        if !present.contains_key(&format!("{dir}/{}", log.path)) {
            return Err(Error::MissingBundleFile {
                collection: collection.to_string(),
                url: location.url(&format!("{dir}/{}", log.path)),
            });
        }
    }
    Ok(Bundle {
        dir,
        metadata,
        segments,
        files: present,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use apache_avro::types::{Record, Value};
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt as _, PutPayload};

    use super::*;

    const ROOT: &str = "backup/b1/bundle/exports/11111111-2222-3333-4444-555555555555";
    /// The bundle, relative to the backup directory.
    pub(crate) const BUNDLE: &str = "bundle/exports/11111111-2222-3333-4444-555555555555";
    /// The bundle in the store.
    pub(crate) const DIR: &str = "backups/b1/bundle/exports/11111111-2222-3333-4444-555555555555";
    pub(crate) const METADATA: &str =
        "bundle/exports/11111111-2222-3333-4444-555555555555/snapshots/1001/metadata/2002.json";

    /// A raw manifest datum of format `version` for segment `id` with one insert binlog of
    /// field 100 and one delta log.
    pub(crate) fn manifest(version: i32, id: i64, storage_version: i64) -> Vec<u8> {
        let schema = manifest_schema(version).expect("a known format");
        let Schema::Record(record) = schema else {
            panic!("a record schema");
        };
        let position = Value::Record(vec![
            ("channel_name".into(), Value::String("ch".into())),
            ("msg_id".into(), Value::Bytes(vec![])),
            ("msg_group".into(), Value::String(String::new())),
            ("timestamp".into(), Value::Long(0)),
        ]);
        let log = |kind: &str, field: i64, entries: i64| {
            Value::Record(vec![
                ("entries_num".into(), Value::Long(entries)),
                ("timestamp_from".into(), Value::Long(1)),
                ("timestamp_to".into(), Value::Long(2)),
                (
                    "log_path".into(),
                    Value::String(format!("{ROOT}/files/{kind}/1001/1003/{id}/{field}/7")),
                ),
                ("log_size".into(), Value::Long(64)),
                ("log_id".into(), Value::Long(7)),
                ("memory_size".into(), Value::Long(64)),
            ])
        };
        let field = |kind: &str, field: i64, entries: i64| {
            let mut fields = vec![("field_id".into(), Value::Long(field))];
            if version >= 4 {
                fields.push(("child_fields".into(), Value::Array(vec![])));
                fields.push(("format".into(), Value::String(String::new())));
            }
            fields.push((
                "binlogs".into(),
                Value::Array(vec![log(kind, field, entries)]),
            ));
            Value::Array(vec![Value::Record(fields)])
        };
        let mut entry = Record::new(schema).expect("a record");
        for f in &record.fields {
            let value = match f.name.as_str() {
                "segment_id" => Value::Long(id),
                "partition_id" => Value::Long(1003),
                "segment_level" => Value::Long(2),
                "channel_name" => Value::String("by-dev-rootcoord-dml_0_1001v0".into()),
                "num_of_rows" => Value::Long(10),
                "start_position" | "dml_position" => position.clone(),
                "storage_version" => Value::Long(storage_version),
                "is_sorted" => Value::Boolean(true),
                "commit_timestamp" | "delete_apply_start_after_timetick" => Value::Long(0),
                "binlog_files" => field("insert_log", 100, 10),
                "deltalog_files" => field("delta_log", 0, 2),
                _ => Value::Array(vec![]),
            };
            entry.put(&f.name, value);
        }
        (apache_avro::writer::datum::GenericDatumWriter::builder(schema).build())
            .and_then(|writer| writer.write_value_to_vec(entry))
            .expect("a manifest datum")
    }

    pub(crate) fn metadata(version: i32, segments: &[i64]) -> String {
        let manifests: Vec<String> = segments
            .iter()
            .map(|s| format!("\"{ROOT}/snapshots/1001/manifests/2002/{s}.avro\""))
            .collect();
        let ids: Vec<String> = segments.iter().map(|s| format!("\"{s}\"")).collect();
        format!(
            r#"{{
  "format_version": {version},
  "snapshot_info": {{ "name": "mbk_b1", "id": "2002", "collection_id": "1001",
    "create_ts": "461234567890123456" }},
  "collection": {{ "schema": {{ "name": "c", "fields": [
      {{ "fieldID": "100", "name": "pk", "is_primary_key": true, "data_type": "Int64" }},
      {{ "fieldID": 101, "name": "vec", "data_type": "FloatVector",
        "type_params": [{{"key": "dim", "value": "4"}}] }} ] }},
    "num_shards": "1", "consistency_level": "Bounded", "partitions": {{ "_default": "1003" }} }},
  "indexes": [ {{ "fieldID": "101", "index_name": "vec",
    "index_params": [{{"key": "index_type", "value": "HNSW"}}] }} ],
  "manifest_list": [{}],
  "segment_ids": [{}],
  "layout": "SnapshotLayoutSelfContained"
}}"#,
            manifests.join(","),
            ids.join(",")
        )
    }

    async fn put(store: &InMemory, path: &str, bytes: Vec<u8>) {
        store
            .put(
                &object_store::path::Path::from(path),
                PutPayload::from(bytes),
            )
            .await
            .expect("put");
    }

    /// A bundle of `segments` in format `version`, with every file the manifests name.
    pub(crate) async fn bundle(version: i32, segments: &[i64]) -> InMemory {
        let store = InMemory::new();
        let dir = DIR;
        put(
            &store,
            &format!("backups/b1/{METADATA}"),
            metadata(version, segments).into_bytes(),
        )
        .await;
        for &s in segments {
            let manifest = manifest(version, s, 0);
            put(
                &store,
                &format!("{dir}/snapshots/1001/manifests/2002/{s}.avro"),
                manifest,
            )
            .await;
            for kind in [
                "insert_log/1001/1003/{s}/100/7",
                "delta_log/1001/1003/{s}/0/7",
            ] {
                let file = kind.replace("{s}", &s.to_string());
                put(&store, &format!("{dir}/files/{file}"), vec![0; 64]).await;
            }
        }
        store
    }

    pub(crate) fn location() -> BackupLocation {
        BackupLocation::new("memory://", "backups", "b1")
    }

    #[tokio::test]
    async fn a_bundle_reads_into_segments_with_paths_inside_it() {
        for version in [2, 4] {
            let store = bundle(version, &[1006, 1005]).await;
            let read = read_bundle(&store, &location(), "default.c", METADATA)
                .await
                .expect("the bundle reads");
            assert_eq!(
                read.dir,
                "bundle/exports/11111111-2222-3333-4444-555555555555"
            );
            assert_eq!(read.segments.len(), 2);
            let s = &read.segments[0];
            assert_eq!(
                (s.id, s.partition_id, s.rows, s.level),
                (1005, 1003, 10, SegmentLevel::L1)
            );
            assert_eq!(s.channel, "by-dev-rootcoord-dml_0_1001v0");
            assert_eq!(s.binlogs[0].field_id, 100);
            assert_eq!(
                s.binlogs[0].logs[0],
                Log {
                    path: "files/insert_log/1001/1003/1005/100/7".into(),
                    log_id: 7,
                    entries: 10,
                    size: 64,
                    timestamp_from: 1,
                    timestamp_to: 2,
                }
            );
            assert_eq!(s.deltalogs[0].logs[0].entries, 2);
            let m = &read.metadata;
            assert_eq!(m.collection.schema.fields[0].field_id, Int64(100));
            assert_eq!(
                m.collection.schema.fields[1].field_id,
                Int64(101),
                "a number too"
            );
            assert!(m.collection.schema.fields[0].is_primary_key);
            assert_eq!(
                m.collection.schema.fields[1].data_type,
                ProtoEnum::Name("FloatVector".into())
            );
            assert_eq!(m.collection.partitions["_default"], Int64(1003));
            assert_eq!(m.collection.num_shards, Int64(1));
            assert_eq!(m.indexes[0].index_name, "vec");
        }
    }

    #[test]
    fn a_manifest_read_with_another_format_is_refused() {
        let v4 = manifest(4, 1005, 0);
        assert!(decode_manifest(&v4, 4).is_ok());
        let err = decode_manifest(&v4, 2).expect_err("a format-4 manifest is not format 2");
        assert!(err.starts_with("not a format-2 manifest"), "{err}");
        let v2 = manifest(2, 1005, 0);
        assert!(decode_manifest(&v2, 3).is_err());
        assert!(
            decode_manifest(&v2, 9)
                .unwrap_err()
                .contains("is not one lockstep reads")
        );
    }

    #[tokio::test]
    async fn a_truncated_manifest_is_refused_with_its_path() {
        let store = bundle(4, &[1005]).await;
        let path = "backups/b1/bundle/exports/11111111-2222-3333-4444-555555555555/snapshots/1001/manifests/2002/1005.avro";
        let mut bytes = manifest(4, 1005, 0);
        bytes.truncate(bytes.len() / 2);
        put(&store, path, bytes).await;
        let err = read_bundle(&store, &location(), "default.c", METADATA)
            .await
            .expect_err("a truncated manifest");
        let Error::CorruptBundle { url, reason } = &err else {
            panic!("{err}");
        };
        assert!(url.ends_with("manifests/2002/1005.avro"), "{url}");
        assert!(reason.starts_with("not a format-4 manifest"), "{reason}");
    }

    #[tokio::test]
    async fn a_storage_v3_segment_is_refused_naming_it() {
        let store = bundle(4, &[1005]).await;
        let path = "backups/b1/bundle/exports/11111111-2222-3333-4444-555555555555/snapshots/1001/manifests/2002/1005.avro";
        put(&store, path, manifest(4, 1005, 3)).await;
        let err = read_bundle(&store, &location(), "default.c", METADATA)
            .await
            .expect_err("v3");
        assert!(
            matches!(&err, Error::StorageV3Segment { collection, segment: 1005 } if collection == "default.c"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_file_the_manifest_names_and_the_bundle_lacks_is_refused() {
        let store = bundle(4, &[1005]).await;
        let gone = "backups/b1/bundle/exports/11111111-2222-3333-4444-555555555555/files/delta_log/1001/1003/1005/0/7";
        store
            .delete(&object_store::path::Path::from(gone))
            .await
            .expect("delete");
        let err = read_bundle(&store, &location(), "default.c", METADATA)
            .await
            .expect_err("missing");
        assert!(
            matches!(&err, Error::MissingBundleFile { url, .. } if url.ends_with("delta_log/1001/1003/1005/0/7")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn segment_ids_that_do_not_match_the_manifests_are_refused() {
        let store = bundle(4, &[1005]).await;
        let text = metadata(4, &[1005]).replace(
            r#""segment_ids": ["1005"]"#,
            r#""segment_ids": ["1005", "1006"]"#,
        );
        put(&store, &format!("backups/b1/{METADATA}"), text.into_bytes()).await;
        let err = read_bundle(&store, &location(), "default.c", METADATA)
            .await
            .expect_err("ids");
        assert!(
            err.to_string().contains("do not match the manifests"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn bad_metadata_is_refused_at_its_line_and_column() {
        let store = bundle(4, &[1005]).await;
        let text = metadata(4, &[1005]).replace(r#""num_shards": "1""#, r#""num_shards": "one""#);
        put(&store, &format!("backups/b1/{METADATA}"), text.into_bytes()).await;
        let err = read_bundle(&store, &location(), "default.c", METADATA)
            .await
            .expect_err("bad");
        let Error::CorruptMeta { url, line, .. } = &err else {
            panic!("{err}");
        };
        assert!(url.ends_with("metadata/2002.json"), "{url}");
        assert_eq!(*line, 9, "{err}");
    }

    #[test]
    fn the_bundle_is_what_precedes_snapshots_and_nothing_else_anchors() {
        assert_eq!(
            bundle_dir(METADATA),
            Some("bundle/exports/11111111-2222-3333-4444-555555555555")
        );
        assert_eq!(
            bundle_dir("bundle/snapshots/449577/metadata/449580.json"),
            Some("bundle")
        );
        assert_eq!(bundle_dir("bundle/snapshots/x/metadata/449580.json"), None);
        assert_eq!(bundle_dir("snapshots/1/metadata/2.json"), None);
        assert_eq!(bundle_dir("bundle/exports/u/metadata/2.json"), None);
    }

    #[test]
    fn paths_are_re_rooted_and_none_escapes_the_bundle() {
        let rebase = Rebase {
            old_root: ROOT.to_string(),
        };
        let file = format!("{ROOT}/files/insert_log/1/2/3/100/7");
        assert_eq!(
            rebase.relative(&file, "files/").as_deref(),
            Some("files/insert_log/1/2/3/100/7")
        );
        let uri = format!("s3://bucket/{file}");
        assert_eq!(
            rebase.relative(&uri, "files/").as_deref(),
            Some("files/insert_log/1/2/3/100/7")
        );
        assert_eq!(
            rebase.relative(&format!("{ROOT}/files/../../x"), "files/"),
            None
        );
        assert_eq!(rebase.relative(&format!("x{ROOT}/files/a"), "files/"), None);
        assert_eq!(rebase.relative("other/files/insert_log/1", "files/"), None);
        assert_eq!(
            rebase.relative(&format!("{ROOT}/snapshots/1/x.avro"), "files/"),
            None
        );
    }
}
