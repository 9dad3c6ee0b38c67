//! A snapshot bundle as the binlog-format tree the planner reads, so that a snapshot-format
//! backup is planned, staged and imported exactly as a binlog backup is (backup import per
//! segment, held, checked and committed once), never through Milvus's snapshot restore.
//!
//! For storage versions below 3 a bundle's data files are Milvus binlogs: the same objects a
//! binlog backup holds, kept under their Milvus keys (`files/insert_log/C/P/S/F/L`). Each is
//! given the path a binlog backup of segment S would hold it at, in a virtual partition of
//! its own (`binlogs/insert_log/C/P/S/S/F/L`; an all-partition L0 segment's delta logs at
//! `binlogs/delta_log/C/-1/S/L`), and remembers where it is in the bundle: staging copies
//! it from there to that path. So every import entry names one segment, as milvus-backup's
//! grouped layout does.
//!
//! Stats logs are not imported (backup import rebuilds them) and index files not copied:
//! indexes are rebuilt from the bundle's definitions.

use std::collections::BTreeMap;

use base64::Engine as _;
use prost::Message as _;

use super::Error;
use super::meta::{
    Binlog, CollectionBackupInfo, CollectionSchema, FieldBinlog, FieldSchema, FunctionSchema,
    IndexInfo, PartitionBackupInfo, SegmentBackupInfo,
};
use super::namespace::Namespace;
use super::snapshot::{
    Bundle, FieldLogs, ProtoEnum, Segment, SegmentLevel, SnapshotSchema, SnapshotValue,
};
use super::store::BINLOG_DIR;
use milvus_proto::common as pb_common;
use milvus_proto::schema as pb_schema;

/// One file of the bundle under the path the plan stages it as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BundleFile {
    /// Relative to the backup directory, as a binlog backup would hold it.
    pub path: String,
    /// Where it is: relative to the backup directory, inside the bundle.
    pub source: String,
    pub size: u64,
}

/// The collection `meta` of a snapshot-format backup (its names and `snapshot_backup`)
/// with everything else taken from its `bundle`, and the bundle files that tree names.
pub(super) fn collection_tree(
    meta: &CollectionBackupInfo,
    bundle: &Bundle,
) -> Result<(CollectionBackupInfo, Vec<BundleFile>), Error> {
    let name = Namespace::new(&meta.db_name, &meta.collection_name);
    let corrupt = |reason: String| Error::CorruptBundle {
        url: format!("the bundle {} of collection {name}", bundle.dir),
        reason,
    };
    let description = &bundle.metadata.collection;
    let collection_id = bundle.metadata.snapshot_info.collection_id.0;
    let mut schema = schema(&description.schema, &name.to_string())?;
    let consistency_level = description
        .consistency_level
        .number(|n| pb_common::ConsistencyLevel::from_str_name(n).map(|l| l as i32))
        .ok_or_else(|| {
            corrupt(format!(
                "unknown consistency level {}",
                description.consistency_level
            ))
        })?;
    let indexes = bundle
        .metadata
        .indexes
        .iter()
        .map(|index| {
            let field = (schema.fields.iter())
                .find(|f| f.field_id == index.field_id.0)
                .ok_or_else(|| {
                    corrupt(format!(
                        "index {} is on field {}, which the schema does not have",
                        index.index_name, index.field_id.0
                    ))
                })?;
            let params = match index.user_index_params.is_empty() {
                true => &index.index_params,
                false => &index.user_index_params,
            };
            Ok(IndexInfo {
                field_name: field.name.clone(),
                index_name: index.index_name.clone(),
                params: (params.iter())
                    .map(|kv| (kv.key.clone(), kv.value.clone()))
                    .collect(),
                field_id: index.field_id.0,
                index_params: index.index_params.clone(),
                user_index_params: index.user_index_params.clone(),
                is_auto_index: index.is_auto_index,
                ..IndexInfo::default()
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;

    let mut partitions: BTreeMap<i64, PartitionBackupInfo> = (description.partitions.iter())
        .map(|(partition_name, id)| {
            let partition = PartitionBackupInfo {
                partition_id: id.0,
                partition_name: partition_name.clone(),
                collection_id,
                ..PartitionBackupInfo::default()
            };
            (id.0, partition)
        })
        .collect();
    let mut l0_segments = Vec::new();
    let mut files = Vec::new();
    for segment in &bundle.segments {
        let info = segment_info(collection_id, segment, bundle, &mut files).map_err(corrupt)?;
        if segment.level == SegmentLevel::L0 && segment.partition_id < 0 {
            l0_segments.push(info);
            continue;
        }
        let Some(partition) = partitions.get_mut(&segment.partition_id) else {
            return Err(corrupt(format!(
                "segment {} is in partition {}, which the collection does not have",
                segment.id, segment.partition_id
            )));
        };
        partition.size += info.size;
        partition.segment_backups.push(info);
    }
    let partition_backups: Vec<PartitionBackupInfo> = partitions.into_values().collect();

    for kv in &description.properties {
        if !schema.properties.iter().any(|p| p.key == kv.key) {
            schema.properties.push(kv.clone());
        }
    }
    let tree = CollectionBackupInfo {
        id: meta.id.clone(),
        collection_id,
        db_name: meta.db_name.clone(),
        collection_name: meta.collection_name.clone(),
        schema: Some(schema),
        shards_num: description.num_shards.0 as i32,
        consistency_level,
        size: (partition_backups.iter().map(|p| p.size)).sum::<i64>()
            + l0_segments.iter().map(|s| s.size).sum::<i64>(),
        has_index: !indexes.is_empty(),
        index_infos: indexes,
        partition_backups,
        l0_segments,
        properties: description.properties.clone(),
        db_id: meta.db_id,
        virtual_channel_names: description.virtual_channel_names.clone(),
        snapshot_backup: meta.snapshot_backup.clone(),
        ..CollectionBackupInfo::default()
    };
    Ok((tree, files))
}

/// One segment of the bundle as a binlog backup's segment, its insert and delta logs added
/// to `files` under the paths that segment would have.
fn segment_info(
    collection_id: i64,
    segment: &Segment,
    bundle: &Bundle,
    files: &mut Vec<BundleFile>,
) -> Result<SegmentBackupInfo, String> {
    let l0 = segment.level == SegmentLevel::L0;
    // Each segment in a virtual partition of its own, as milvus-backup copies them; an
    // all-partition L0 segment (partition -1) has none.
    let group_id = if segment.partition_id < 0 {
        0
    } else {
        segment.id
    };
    let mut logs = |fields: &[FieldLogs], kind: &str| -> Result<Vec<FieldBinlog>, String> {
        fields
            .iter()
            .map(|field| {
                let binlogs = (field.logs.iter())
                    .map(|log| {
                        let path = staged_path(&log.path, kind, collection_id, segment, group_id)?;
                        let source = format!("{}/{}", bundle.dir, log.path);
                        let size = bundle.files.get(&source).copied().unwrap_or(0);
                        files.push(BundleFile { path, source, size });
                        Ok(Binlog {
                            entries_num: log.entries,
                            timestamp_from: log.timestamp_from,
                            timestamp_to: log.timestamp_to,
                            log_size: log.size,
                            log_id: log.log_id,
                        })
                    })
                    .collect::<Result<_, String>>()?;
                Ok(FieldBinlog {
                    field_id: field.field_id,
                    binlogs,
                })
            })
            .collect()
    };
    let binlogs = logs(&segment.binlogs, "insert_log")?;
    let deltalogs = logs(&segment.deltalogs, "delta_log")?;
    let size = (binlogs.iter().chain(&deltalogs))
        .flat_map(|f| &f.binlogs)
        .map(|b| b.log_size)
        .sum();
    Ok(SegmentBackupInfo {
        segment_id: segment.id,
        collection_id,
        partition_id: segment.partition_id,
        num_of_rows: segment.rows,
        binlogs,
        deltalogs,
        size,
        group_id,
        backuped: true,
        is_l0: l0,
        v_channel: segment.channel.clone(),
        storage_version: segment.storage_version,
    })
}

/// `files/{kind}/C/P/S/rest` of the bundle as `binlogs/{kind}/C/P/G/S/rest` (or without
/// the group directory when `group_id` is 0). The key must be the segment's own: a file
/// filed under another collection, partition or segment would be imported into it.
fn staged_path(
    path: &str,
    kind: &str,
    collection_id: i64,
    segment: &Segment,
    group_id: i64,
) -> Result<String, String> {
    let misplaced = || {
        format!(
            "{path} is not a {kind} file of segment {} (files/{kind}/{collection_id}/{}/{}/...)",
            segment.id, segment.partition_id, segment.id
        )
    };
    let rest = path
        .strip_prefix(&format!("files/{kind}/"))
        .ok_or_else(misplaced)?;
    let mut parts = rest.splitn(4, '/');
    let (Some(c), Some(p), Some(s), Some(tail)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(misplaced());
    };
    let own = |part: &str, id: i64| part == id.to_string();
    if !(own(c, collection_id) && own(p, segment.partition_id) && own(s, segment.id)) {
        return Err(misplaced());
    }
    Ok(match group_id {
        0 => format!("{BINLOG_DIR}/{kind}/{c}/{p}/{s}/{tail}"),
        group => format!("{BINLOG_DIR}/{kind}/{c}/{p}/{group}/{s}/{tail}"),
    })
}

/// The bundle's protojson schema in the shape milvus-backup's meta gives it.
fn schema(schema: &SnapshotSchema, collection: &str) -> Result<CollectionSchema, Error> {
    let unsupported = |what: String| Error::UnsupportedInBundle {
        collection: collection.to_string(),
        what,
    };
    if !schema.struct_array_fields.is_empty() {
        return Err(unsupported("struct array fields".into()));
    }
    let data_type = |field: &str, value: &ProtoEnum| {
        value
            .number(|n| pb_schema::DataType::from_str_name(n).map(|t| t as i32))
            .ok_or_else(|| unsupported(format!("field {field} of data type {value}")))
    };
    let fields = (schema.fields.iter())
        .map(|f| {
            Ok(FieldSchema {
                field_id: f.field_id.0,
                name: f.name.clone(),
                is_primary_key: f.is_primary_key,
                description: f.description.clone(),
                data_type: data_type(&f.name, &f.data_type)?,
                type_params: f.type_params.clone(),
                auto_id: f.auto_id,
                element_type: data_type(&f.name, &f.element_type)?,
                is_dynamic: f.is_dynamic,
                is_partition_key: f.is_partition_key,
                nullable: f.nullable,
                is_function_output: f.is_function_output,
                default_value_base64: f
                    .default_value
                    .as_ref()
                    .map(|v| {
                        default_value(v)
                            .map_err(|e| unsupported(format!("{e} of field {}", f.name)))
                    })
                    .transpose()?
                    .unwrap_or_default(),
                ..FieldSchema::default()
            })
        })
        .collect::<Result<_, Error>>()?;
    let functions = (schema.functions.iter())
        .map(|f| {
            let function_type = f
                .function_type
                .number(|n| pb_schema::FunctionType::from_str_name(n).map(|t| t as i32))
                .ok_or_else(|| {
                    unsupported(format!("function {} of type {}", f.name, f.function_type))
                })?;
            Ok(FunctionSchema {
                name: f.name.clone(),
                id: f.id.0,
                description: f.description.clone(),
                function_type,
                input_field_names: f.input_field_names.clone(),
                input_field_ids: f.input_field_ids.iter().map(|id| id.0).collect(),
                output_field_names: f.output_field_names.clone(),
                output_field_ids: f.output_field_ids.iter().map(|id| id.0).collect(),
                params: f.params.clone(),
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(CollectionSchema {
        name: schema.name.clone(),
        description: schema.description.clone(),
        auto_id: schema.auto_id,
        fields,
        enable_dynamic_field: schema.enable_dynamic_field,
        properties: schema.properties.clone(),
        functions,
        struct_array_fields: Vec::new(),
    })
}

/// A protojson default value as the base64 protobuf `ValueField` milvus-backup's meta holds.
fn default_value(value: &SnapshotValue) -> Result<String, String> {
    use pb_schema::value_field::Data;
    let set: Vec<Data> = [
        value.bool_data.map(Data::BoolData),
        value.int_data.map(Data::IntData),
        value.long_data.map(|v| Data::LongData(v.0)),
        value.float_data.map(Data::FloatData),
        value.double_data.map(Data::DoubleData),
        value.string_data.clone().map(Data::StringData),
        (value.bytes_data.as_ref())
            .map(|b| base64::engine::general_purpose::STANDARD.decode(b))
            .transpose()
            .map_err(|e| format!("a bytes default value that is not base64 ({e})"))?
            .map(Data::BytesData),
        value.timestamptz_data.map(|v| Data::TimestamptzData(v.0)),
        value.date_data.map(Data::DateData),
        value.time_data.map(|v| Data::TimeData(v.0)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let [data] = <[Data; 1]>::try_from(set)
        .map_err(|set| format!("a default value with {} of its one-of keys set", set.len()))?;
    let field = pb_schema::ValueField { data: Some(data) };
    Ok(base64::engine::general_purpose::STANDARD.encode(field.encode_to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::meta::KeyValuePair;
    use crate::backup::snapshot::{Int64, Log, SnapshotMetadata};

    fn log(path: &str, entries: i64) -> Log {
        Log {
            path: path.into(),
            log_id: 7,
            entries,
            size: 64,
            timestamp_from: 1,
            timestamp_to: 2,
        }
    }

    fn segment(id: i64, partition_id: i64, level: SegmentLevel) -> Segment {
        let (insert, delta) = match level {
            SegmentLevel::L0 => (
                vec![],
                format!("files/delta_log/1001/{partition_id}/{id}/9"),
            ),
            _ => (
                vec![FieldLogs {
                    field_id: 100,
                    logs: vec![log(
                        &format!("files/insert_log/1001/{partition_id}/{id}/100/7"),
                        10,
                    )],
                }],
                format!("files/delta_log/1001/{partition_id}/{id}/8"),
            ),
        };
        Segment {
            id,
            partition_id,
            level,
            channel: "ch_0".into(),
            rows: if level == SegmentLevel::L0 { 0 } else { 10 },
            storage_version: 2,
            binlogs: insert,
            deltalogs: vec![FieldLogs {
                field_id: 0,
                logs: vec![log(&delta, 2)],
            }],
            statslogs: vec![],
        }
    }

    fn bundle(segments: Vec<Segment>) -> Bundle {
        let metadata: SnapshotMetadata = serde_json::from_str(
            r#"{
  "format_version": 2,
  "snapshot_info": { "name": "s", "id": "2002", "collection_id": "1001" },
  "collection": {
    "schema": { "name": "c", "enable_dynamic_field": true, "fields": [
      { "fieldID": "100", "name": "pk", "is_primary_key": true, "data_type": "Int64" },
      { "fieldID": "101", "name": "vec", "data_type": "FloatVector",
        "type_params": [{"key": "dim", "value": "4"}] },
      { "fieldID": "102", "name": "n", "data_type": "Int32", "nullable": true,
        "default_value": { "int_data": 5 } },
      { "fieldID": "103", "name": "tags", "data_type": "Array", "element_type": "VarChar" } ] },
    "num_shards": "2", "consistency_level": "Strong",
    "properties": [{"key": "collection.ttl.seconds", "value": "60"}],
    "partitions": { "_default": "1003", "p1": "1004" },
    "virtual_channel_names": ["ch_0", "ch_1"] },
  "indexes": [ { "fieldID": "101", "index_name": "vec_idx",
    "index_params": [{"key": "index_type", "value": "HNSW"}, {"key": "mmap", "value": "x"}],
    "user_index_params": [{"key": "index_type", "value": "HNSW"},
                          {"key": "metric_type", "value": "L2"}] } ]
}"#,
        )
        .expect("metadata");
        let mut files = BTreeMap::new();
        for s in &segments {
            for l in s.binlogs.iter().chain(&s.deltalogs).flat_map(|f| &f.logs) {
                files.insert(format!("bundle/exports/u/{}", l.path), 64);
            }
        }
        Bundle {
            dir: "bundle/exports/u".into(),
            metadata,
            segments,
            files,
        }
    }

    fn meta() -> CollectionBackupInfo {
        CollectionBackupInfo {
            db_name: "db1".into(),
            collection_name: "c".into(),
            ..CollectionBackupInfo::default()
        }
    }

    #[test]
    fn segments_become_one_group_each_and_files_keep_their_bundle_source() {
        let b = bundle(vec![
            segment(1005, 1003, SegmentLevel::L1),
            segment(1006, 1004, SegmentLevel::L2),
            segment(1007, 1003, SegmentLevel::L0),
            segment(1008, -1, SegmentLevel::L0),
        ]);
        let (tree, files) = collection_tree(&meta(), &b).expect("converts");
        assert_eq!(tree.collection_id, 1001);
        assert_eq!(
            (tree.shards_num, tree.consistency_level),
            (2, pb_common::ConsistencyLevel::Strong as i32)
        );
        let names: Vec<&str> = tree
            .partition_backups
            .iter()
            .map(|p| p.partition_name.as_str())
            .collect();
        assert_eq!(names, ["_default", "p1"]);
        let s = &tree.partition_backups[0].segment_backups[0];
        assert_eq!(
            (s.segment_id, s.group_id, s.num_of_rows, s.is_l0),
            (1005, 1005, 10, false)
        );
        assert_eq!((s.v_channel.as_str(), s.storage_version), ("ch_0", 2));
        assert_eq!(
            (s.binlogs[0].field_id, s.binlogs[0].binlogs[0].log_id),
            (100, 7)
        );
        let l0 = &tree.partition_backups[0].segment_backups[1];
        assert_eq!((l0.segment_id, l0.group_id, l0.is_l0), (1007, 1007, true));
        assert_eq!(l0.deltalogs[0].binlogs.len(), 1);
        assert_eq!(tree.l0_segments.len(), 1);
        assert_eq!(tree.l0_segments[0].deltalogs[0].binlogs.len(), 1);
        // Each log is staged where a binlog backup holds it: under its segment's group, and
        // an all-partition L0 segment's under partition -1.
        let staged: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        for path in [
            "binlogs/insert_log/1001/1003/1005/1005/100/7",
            "binlogs/delta_log/1001/1003/1007/1007/9",
            "binlogs/delta_log/1001/-1/1008/9",
        ] {
            assert!(staged.contains(&path), "{path} in {staged:?}");
        }
        assert!(files.contains(&BundleFile {
            path: "binlogs/delta_log/1001/1003/1005/1005/8".into(),
            source: "bundle/exports/u/files/delta_log/1001/1003/1005/8".into(),
            size: 64,
        }));
        assert_eq!(files.len(), 6, "insert and delta logs only: {files:?}");
    }

    #[test]
    fn schema_indexes_and_properties_come_from_the_metadata() {
        let (tree, _) = collection_tree(&meta(), &bundle(vec![])).expect("converts");
        let schema = tree.schema.as_ref().expect("schema");
        assert!(schema.enable_dynamic_field);
        let types: Vec<(i64, i32, i32)> = schema
            .fields
            .iter()
            .map(|f| (f.field_id, f.data_type, f.element_type))
            .collect();
        use pb_schema::DataType as T;
        assert_eq!(
            types,
            [
                (100, T::Int64 as i32, 0),
                (101, T::FloatVector as i32, 0),
                (102, T::Int32 as i32, 0),
                (103, T::Array as i32, T::VarChar as i32)
            ]
        );
        let default = schema.fields[2]
            .default_value()
            .expect("decodes")
            .expect("set");
        assert_eq!(default.data, Some(pb_schema::value_field::Data::IntData(5)));
        assert_eq!(
            schema.properties,
            [KeyValuePair {
                key: "collection.ttl.seconds".into(),
                value: "60".into()
            }]
        );
        let index = &tree.index_infos[0];
        assert_eq!(
            (index.field_name.as_str(), index.index_name.as_str()),
            ("vec", "vec_idx")
        );
        assert_eq!(
            index.params.get("metric_type").map(String::as_str),
            Some("L2"),
            "the user's params"
        );
        assert!(!index.params.contains_key("mmap"));
    }

    #[test]
    fn a_file_filed_under_another_segment_is_refused() {
        let mut s = segment(1005, 1003, SegmentLevel::L1);
        s.binlogs[0].logs[0].path = "files/insert_log/1001/1003/1099/100/7".into();
        let err = collection_tree(&meta(), &bundle(vec![s])).expect_err("misplaced");
        assert!(
            err.to_string()
                .contains("is not a insert_log file of segment 1005"),
            "{err}"
        );
    }

    #[test]
    fn a_segment_of_an_unknown_partition_is_refused() {
        let err = collection_tree(&meta(), &bundle(vec![segment(1005, 77, SegmentLevel::L1)]))
            .expect_err("no such partition");
        assert!(
            err.to_string()
                .contains("partition 77, which the collection does not have"),
            "{err}"
        );
    }

    #[test]
    fn what_cannot_be_restored_yet_is_named() {
        let mut b = bundle(vec![]);
        b.metadata.collection.schema.fields[1].data_type = ProtoEnum::Name("Vector9000".into());
        let err = collection_tree(&meta(), &b).expect_err("unknown type");
        assert!(
            matches!(&err, Error::UnsupportedInBundle { what, .. } if what == "field vec of data type Vector9000"),
            "{err}"
        );
        let mut b = bundle(vec![]);
        b.metadata.collection.schema.fields[2].default_value = Some(SnapshotValue {
            int_data: Some(1),
            long_data: Some(Int64(2)),
            ..SnapshotValue::default()
        });
        let err = collection_tree(&meta(), &b).expect_err("two keys");
        assert!(
            err.to_string()
                .contains("2 of its one-of keys set of field n"),
            "{err}"
        );
    }
}
