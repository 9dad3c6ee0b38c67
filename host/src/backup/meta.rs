//! The meta files milvus-backup writes, with the shape Go's `encoding/json` gives its
//! protobuf structs (`core/proto/backup.proto`), not protojson's.
//!
//! That shape means: keys are the proto field names as written in the `.proto`
//! (`fieldID`, `autoID`, `data_type`), zero values are omitted (every field here is
//! `#[serde(default)]`), int64 and uint64 are JSON numbers (timestamps exceed 2^53, and
//! serde_json reads them into `u64` exactly), enums are their integer values, and oneofs
//! cannot be written at all (hence `default_value_base64`).
//!
//! Unlike lockstep's own config structs these do not deny unknown fields: milvus-backup
//! adds fields to its meta over time, and a backup written by a newer version must still
//! be readable for the fields restore needs.

use std::collections::BTreeMap;

use base64::Engine as _;
use prost::Message as _;
use serde::Deserialize;

use milvus_proto::common as pb_common;
use milvus_proto::schema as pb_schema;

/// `BackupInfo`: the root of a backup, as `backup_meta.json` (without
/// `collection_backups`) or `full_meta.json` (the whole tree) holds it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct BackupInfo {
    pub id: String,
    /// Deprecated in milvus-backup; read only so that old backups parse the same way.
    pub state_code: i32,
    pub name: String,
    /// Logical (hybrid) time of the backup.
    pub backup_timestamp: u64,
    #[serde(deserialize_with = "exact")]
    pub collection_backups: Vec<CollectionBackupInfo>,
    pub size: i64,
    pub milvus_version: String,
    pub rbac_meta: Option<RbacMeta>,
    pub rpc_channel_info: Option<RpcChannelInfo>,
    pub database_backups: Vec<DatabaseBackupInfo>,
    /// pchannel → base64 `ImmutableMessage`; used by milvus-backup's secondary restore only.
    pub flush_all_msgs_base64: BTreeMap<String, String>,
    pub control_channel_name: String,
    pub physical_channel_names: Vec<String>,
    /// Empty for the binlog format, `"snapshot"` for exported snapshot bundles.
    pub format: String,
}

impl BackupInfo {
    /// Every segment of the backup with its collection, in meta order.
    pub fn segments(&self) -> impl Iterator<Item = (&CollectionBackupInfo, &SegmentBackupInfo)> {
        self.collection_backups.iter().flat_map(|c| {
            c.partition_backups
                .iter()
                .flat_map(move |p| p.segment_backups.iter().map(move |s| (c, s)))
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct RpcChannelInfo {
    pub name: String,
    pub position: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct DatabaseBackupInfo {
    pub db_name: String,
    pub db_id: i64,
    pub properties: Vec<KeyValuePair>,
    /// The database's encryption-zone key, passed to import as the `ezk` option.
    pub ezk: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CollectionBackupInfo {
    pub id: String,
    pub collection_id: i64,
    pub db_name: String,
    pub collection_name: String,
    pub schema: Option<CollectionSchema>,
    pub shards_num: i32,
    /// `common.ConsistencyLevel` as its integer value.
    pub consistency_level: i32,
    #[serde(deserialize_with = "exact")]
    pub partition_backups: Vec<PartitionBackupInfo>,
    pub backup_timestamp: u64,
    pub size: i64,
    pub has_index: bool,
    pub index_infos: Vec<IndexInfo>,
    pub load_state: String,
    pub backup_physical_timestamp: u64,
    /// vchannel → base64 protobuf `msgpb.MsgPosition`.
    pub channel_checkpoints: BTreeMap<String, String>,
    /// L0 segments that apply to every partition (their `partition_id` is -1).
    #[serde(deserialize_with = "exact")]
    pub l0_segments: Vec<SegmentBackupInfo>,
    pub properties: Vec<KeyValuePair>,
    pub db_id: i64,
    pub created_timestamp: u64,
    pub virtual_channel_names: Vec<String>,
    pub physical_channel_names: Vec<String>,
    pub aliases: Vec<String>,
    /// Set only in the snapshot format.
    pub snapshot_backup: Option<SnapshotBackupInfo>,
}

impl CollectionBackupInfo {
    /// The timestamp of `vchannel`'s checkpoint (`channel_checkpoints` holds a base64
    /// `msgpb.MsgPosition` per vchannel); `None` when there is none, an error when it does not
    /// decode.
    pub fn checkpoint_ts(&self, vchannel: &str) -> Option<Result<u64, String>> {
        let encoded = self.channel_checkpoints.get(vchannel)?;
        Some(
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| e.to_string())
                .and_then(|bytes| {
                    milvus_proto::msg::MsgPosition::decode(bytes.as_slice())
                        .map_err(|e| e.to_string())
                })
                .map(|position| position.timestamp),
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SnapshotBackupInfo {
    pub metadata_path: String,
    pub total_files: i64,
    pub total_bytes: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct PartitionBackupInfo {
    pub partition_id: i64,
    pub partition_name: String,
    pub collection_id: i64,
    #[serde(deserialize_with = "exact")]
    pub segment_backups: Vec<SegmentBackupInfo>,
    pub size: i64,
    pub load_state: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SegmentBackupInfo {
    pub segment_id: i64,
    pub collection_id: i64,
    pub partition_id: i64,
    pub num_of_rows: i64,
    #[serde(deserialize_with = "exact")]
    pub binlogs: Vec<FieldBinlog>,
    // `statslogs` is not read: an import reads a segment's insert and delta logs only.
    #[serde(deserialize_with = "exact")]
    pub deltalogs: Vec<FieldBinlog>,
    pub size: i64,
    /// The virtual partition the backup stored this segment under, so that one import
    /// entry names exactly this segment. Equal to `segment_id`; 0 for old backups
    /// (one directory per partition) and for all-partition L0 segments.
    pub group_id: i64,
    pub backuped: bool,
    pub is_l0: bool,
    pub v_channel: String,
    pub storage_version: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct FieldBinlog {
    #[serde(rename = "fieldID")]
    pub field_id: i64,
    #[serde(deserialize_with = "exact")]
    pub binlogs: Vec<Binlog>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Binlog {
    pub entries_num: i64,
    pub timestamp_from: u64,
    pub timestamp_to: u64,
    // `log_path` is not read: it is where the log was in the backed-up Milvus's bucket, and
    // the backup holds its copy under the segment's directory by field and log id. Kept,
    // the paths were most of a segment's share of the meta tree.
    pub log_size: i64,
    pub log_id: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct KeyValuePair {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct IndexInfo {
    pub field_name: String,
    pub index_name: String,
    pub index_type: String,
    pub params: BTreeMap<String, String>,
    pub index_id: i64,
    pub field_id: i64,
    pub create_time: u64,
    pub type_params: Vec<KeyValuePair>,
    pub index_params: Vec<KeyValuePair>,
    pub user_index_params: Vec<KeyValuePair>,
    pub is_auto_index: bool,
    pub min_index_version: i32,
    pub max_index_version: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CollectionSchema {
    pub name: String,
    pub description: String,
    #[serde(rename = "autoID")]
    pub auto_id: bool,
    #[serde(deserialize_with = "exact")]
    pub fields: Vec<FieldSchema>,
    pub enable_dynamic_field: bool,
    pub properties: Vec<KeyValuePair>,
    pub functions: Vec<FunctionSchema>,
    pub struct_array_fields: Vec<StructArrayFieldSchema>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct FieldSchema {
    #[serde(rename = "fieldID")]
    pub field_id: i64,
    pub name: String,
    pub is_primary_key: bool,
    pub description: String,
    /// `schema.DataType` as its integer value.
    pub data_type: i32,
    pub type_params: Vec<KeyValuePair>,
    pub index_params: Vec<KeyValuePair>,
    #[serde(rename = "autoID")]
    pub auto_id: bool,
    pub state: i32,
    pub element_type: i32,
    pub is_dynamic: bool,
    pub is_partition_key: bool,
    pub nullable: bool,
    /// The raw protobuf bytes of a `ValueField`, written by old milvus-backup versions
    /// as a Go string (a oneof cannot go through `encoding/json`).
    pub default_value_proto: String,
    pub is_function_output: bool,
    /// Base64 of the protobuf `ValueField`; preferred over `default_value_proto`.
    pub default_value_base64: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct FunctionSchema {
    pub name: String,
    pub id: i64,
    pub description: String,
    /// `schema.FunctionType` as its integer value (BM25 = 1, TextEmbedding = 2).
    #[serde(rename = "type")]
    pub function_type: i32,
    pub input_field_names: Vec<String>,
    pub input_field_ids: Vec<i64>,
    pub output_field_names: Vec<String>,
    pub output_field_ids: Vec<i64>,
    pub params: Vec<KeyValuePair>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StructArrayFieldSchema {
    #[serde(rename = "fieldID")]
    pub field_id: i64,
    pub name: String,
    pub description: String,
    pub fields: Vec<FieldSchema>,
}

/// Users, roles, grants and privilege groups, restored when the job asks for `rbac`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct RbacMeta {
    pub users: Vec<UserInfo>,
    pub roles: Vec<NamedEntity>,
    pub grants: Vec<GrantEntity>,
    pub privilege_groups: Vec<PrivilegeGroupInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct UserInfo {
    pub user: String,
    pub password: String,
    pub roles: Vec<NamedEntity>,
}

/// `RoleEntity`, `UserEntity`, `ObjectEntity` and `PrivilegeEntity` share this shape.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct NamedEntity {
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GrantEntity {
    pub role: Option<NamedEntity>,
    pub object: Option<NamedEntity>,
    pub object_name: String,
    pub grantor: Option<GrantorEntity>,
    pub db_name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GrantorEntity {
    pub user: Option<NamedEntity>,
    pub privilege: Option<NamedEntity>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct PrivilegeGroupInfo {
    pub group_name: String,
    pub privileges: Vec<NamedEntity>,
}

/// The level files: `collection_meta.json`, `partition_meta.json` and
/// `segment_meta.json` each hold `{"infos": [...]}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, bound = "T: Deserialize<'de>")]
pub(crate) struct LevelInfos<T> {
    #[serde(deserialize_with = "exact")]
    pub infos: Vec<T>,
}

impl<T> Default for LevelInfos<T> {
    fn default() -> Self {
        Self { infos: Vec::new() }
    }
}

/// A list of the meta read to its length. serde grows a list by doubling as it reads it, and
/// a backup's tree is mostly short lists (a segment's fields, each field's one binlog, a
/// partition's one segment): a list of one kept room for four, one of five room for eight.
/// At 10,000 collections that slack was over a third of the tree, the largest part of
/// preflight's peak.
fn exact<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let mut list = Vec::<T>::deserialize(deserializer)?;
    list.shrink_to_fit();
    Ok(list)
}

/// A field's default value could not be decoded from the backup.
#[derive(Debug, thiserror::Error)]
pub enum DefaultValueError {
    #[error("default_value_base64 is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("default value is not a protobuf ValueField: {0}")]
    Protobuf(#[from] prost::DecodeError),
}

pub(crate) fn proto_key_values(pairs: &[KeyValuePair]) -> Vec<pb_common::KeyValuePair> {
    pairs
        .iter()
        .map(|kv| pb_common::KeyValuePair {
            key: kv.key.clone(),
            value: kv.value.clone(),
        })
        .collect()
}

impl FieldSchema {
    /// The field's default value as milvus-backup's `conv.DefaultValue` reads it:
    /// `default_value_base64` first, then the deprecated raw `default_value_proto`.
    pub fn default_value(&self) -> Result<Option<pb_schema::ValueField>, DefaultValueError> {
        if !self.default_value_base64.is_empty() {
            let bytes =
                base64::engine::general_purpose::STANDARD.decode(&self.default_value_base64)?;
            return Ok(Some(pb_schema::ValueField::decode(bytes.as_slice())?));
        }
        if !self.default_value_proto.is_empty() {
            return Ok(Some(pb_schema::ValueField::decode(
                self.default_value_proto.as_bytes(),
            )?));
        }
        Ok(None)
    }

    /// The field in Milvus's wire form, every attribute carried over unchanged.
    pub fn to_proto(&self) -> Result<pb_schema::FieldSchema, DefaultValueError> {
        Ok(pb_schema::FieldSchema {
            field_id: self.field_id,
            name: self.name.clone(),
            is_primary_key: self.is_primary_key,
            description: self.description.clone(),
            data_type: self.data_type,
            type_params: proto_key_values(&self.type_params),
            index_params: proto_key_values(&self.index_params),
            auto_id: self.auto_id,
            state: self.state,
            element_type: self.element_type,
            default_value: self.default_value()?,
            is_dynamic: self.is_dynamic,
            is_partition_key: self.is_partition_key,
            is_clustering_key: false,
            nullable: self.nullable,
            is_function_output: self.is_function_output,
        })
    }
}

impl FunctionSchema {
    pub fn to_proto(&self) -> pb_schema::FunctionSchema {
        pb_schema::FunctionSchema {
            name: self.name.clone(),
            id: self.id,
            description: self.description.clone(),
            r#type: self.function_type,
            input_field_names: self.input_field_names.clone(),
            input_field_ids: self.input_field_ids.clone(),
            output_field_names: self.output_field_names.clone(),
            output_field_ids: self.output_field_ids.clone(),
            params: proto_key_values(&self.params),
        }
    }
}

impl CollectionSchema {
    /// The schema in Milvus's wire form under the collection name `name`. Every field
    /// is kept, the dynamic `$meta` field included: which fields go into
    /// CreateCollection and which into AddField is the DDL's decision.
    pub fn to_proto(&self, name: &str) -> Result<pb_schema::CollectionSchema, DefaultValueError> {
        let fields = self
            .fields
            .iter()
            .map(FieldSchema::to_proto)
            .collect::<Result<_, _>>()?;
        let struct_array_fields = self
            .struct_array_fields
            .iter()
            .map(|s| {
                Ok(pb_schema::StructArrayFieldSchema {
                    field_id: s.field_id,
                    name: s.name.clone(),
                    description: s.description.clone(),
                    fields: s
                        .fields
                        .iter()
                        .map(FieldSchema::to_proto)
                        .collect::<Result<_, _>>()?,
                    type_params: Vec::new(),
                    nullable: false,
                })
            })
            .collect::<Result<_, DefaultValueError>>()?;
        Ok(pb_schema::CollectionSchema {
            name: name.to_owned(),
            description: self.description.clone(),
            auto_id: self.auto_id,
            fields,
            enable_dynamic_field: self.enable_dynamic_field,
            properties: proto_key_values(&self.properties),
            functions: self
                .functions
                .iter()
                .map(FunctionSchema::to_proto)
                .collect(),
            db_name: String::new(),
            struct_array_fields,
            version: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_keeps_no_room_it_did_not_read() {
        let json = r#"{"collection_backups": [{"partition_backups": [{"segment_backups": [{
            "binlogs": [
                {"fieldID": 100, "binlogs": [{"log_id": 1}]},
                {"fieldID": 101, "binlogs": [{"log_id": 2}]},
                {"fieldID": 0, "binlogs": [{"log_id": 3}, {"log_id": 4}, {"log_id": 5}]}
            ],
            "deltalogs": [{"fieldID": 0, "binlogs": [{"log_id": 6}]}]
        }]}]}]}"#;
        let info: BackupInfo = serde_json::from_str(json).unwrap();
        let (_, segment) = info.segments().next().unwrap();
        assert_eq!(segment.binlogs.len(), 3);
        assert_eq!(segment.binlogs.capacity(), 3);
        let logs: Vec<_> = (segment.binlogs.iter().chain(&segment.deltalogs))
            .map(|f| (f.binlogs.len(), f.binlogs.capacity()))
            .collect();
        assert_eq!(logs, [(1, 1), (1, 1), (3, 3), (1, 1)]);
        let partition = &info.collection_backups[0].partition_backups[0];
        assert_eq!(partition.segment_backups.capacity(), 1);
    }
}
