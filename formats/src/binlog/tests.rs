//! The reader and writer against objects a real Milvus 2.3.5 wrote (`fixtures/real-2.3.5`,
//! made by its `make_fixture.py`), so that both cannot share one misunderstanding: the real
//! objects must read as `fixture.json` says, and the writer's objects must frame their data
//! byte for byte as the real ones do and carry the same values.

use std::path::PathBuf;

use arrow_array::{
    Array, BinaryArray, BooleanArray, FixedSizeBinaryArray, Float32Array, Float64Array, Int8Array,
    Int16Array, Int32Array, Int64Array, StringArray,
};
use milvus_proto::schema::DataType;

use super::*;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/real-2.3.5")
}

/// Every object of the fixture with its entry in `fixture.json`, and the entry's segment.
fn fixture_files() -> Vec<(Vec<u8>, serde_json::Value, serde_json::Value)> {
    let dir = fixture_dir();
    let text = std::fs::read_to_string(dir.join("fixture.json")).expect("fixture.json");
    let fixture: serde_json::Value = serde_json::from_str(&text).expect("fixture.json parses");
    let mut out = Vec::new();
    for segment in fixture["segments"].as_array().expect("segments") {
        for file in segment["files"].as_array().expect("files") {
            let path = file["path"].as_str().expect("path");
            let bytes = std::fs::read(dir.join(path)).expect("fixture object");
            out.push((bytes, file.clone(), segment.clone()));
        }
    }
    assert_eq!(out.len(), 17, "the fixture's 17 objects");
    out
}

fn payload_column(payload: &[u8]) -> arrow_array::ArrayRef {
    let batches = payload::read(payload).expect("payload reads");
    assert_eq!(batches.len(), 1, "one row group, one batch");
    batches[0].column(0).clone()
}

/// The writer's [`Column`] holding what a real payload's column holds.
fn column_of(array: &dyn Array, data_type: DataType, dim: usize) -> Column {
    fn cast<T: 'static>(array: &dyn Array) -> &T {
        array.as_any().downcast_ref::<T>().expect("column type")
    }
    match data_type {
        DataType::Bool => Column::Bool(cast::<BooleanArray>(array).iter().flatten().collect()),
        DataType::Int8 => Column::Int8(cast::<Int8Array>(array).values().to_vec()),
        DataType::Int16 => Column::Int16(cast::<Int16Array>(array).values().to_vec()),
        DataType::Int32 => Column::Int32(cast::<Int32Array>(array).values().to_vec()),
        DataType::Int64 => Column::Int64(cast::<Int64Array>(array).values().to_vec()),
        DataType::Float => Column::Float(cast::<Float32Array>(array).values().to_vec()),
        DataType::Double => Column::Double(cast::<Float64Array>(array).values().to_vec()),
        DataType::VarChar => Column::VarChar(
            cast::<StringArray>(array)
                .iter()
                .flatten()
                .map(str::to_owned)
                .collect(),
        ),
        DataType::Json => Column::Json(
            cast::<BinaryArray>(array)
                .iter()
                .flatten()
                .map(<[u8]>::to_vec)
                .collect(),
        ),
        DataType::BinaryVector => Column::BinaryVector {
            dim,
            data: cast::<FixedSizeBinaryArray>(array).value_data().to_vec(),
        },
        DataType::FloatVector => Column::FloatVector {
            dim,
            data: cast::<FixedSizeBinaryArray>(array)
                .value_data()
                .chunks(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                .collect(),
        },
        other => panic!("the fixture has no {other:?} field"),
    }
}

fn dim_of(segment: &serde_json::Value, field_id: i64) -> usize {
    segment["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .find(|f| f["field_id"] == field_id)
        .and_then(|f| f["type_params"]["dim"].as_str())
        .map_or(0, |d| d.parse().expect("dim"))
}

/// Where an object's one data event starts: after the magic and the descriptor event.
fn data_event_at(bytes: &[u8]) -> usize {
    4 + i32::from_le_bytes(bytes[13..17].try_into().expect("4 bytes")) as usize
}

#[test]
fn real_insert_binlogs_read_as_the_server_wrote_them() {
    for (bytes, file, segment) in fixture_files() {
        if file["kind"] != "insert" {
            continue;
        }
        let path = file["path"].as_str().expect("path");
        let binlog = parse(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
        let d = &binlog.descriptor;
        assert_eq!(d.collection_id, segment["collection_id"], "{path}");
        assert_eq!(d.partition_id, segment["partition_id"], "{path}");
        assert_eq!(d.segment_id, segment["segment_id"], "{path}");
        assert_eq!(d.field_id, file["field_id"], "{path}");
        assert_eq!(d.start_ts, file["timestamp_from"], "{path}");
        assert_eq!(d.end_ts, file["timestamp_to"], "{path}");
        let data_type = DataType::try_from(d.payload_type).expect("known type");
        assert_eq!(
            data_type.as_str_name().to_ascii_lowercase(),
            file["data_type"]
                .as_str()
                .expect("type")
                .to_ascii_lowercase(),
            "{path}"
        );
        assert_eq!(serde_json::Value::Object(d.extras.clone()), file["extras"]);
        assert_eq!(binlog.events.len(), 1, "{path}");
        assert_eq!(insert_rows(&binlog), Ok(5), "{path}");
        assert_eq!(file["entries_num"], 5);
    }
}

#[test]
fn real_values_are_the_rows_the_fixture_inserted() {
    let files = fixture_files();
    let field = |name: &str| {
        let (bytes, _, _) = files
            .iter()
            .find(|(_, f, s)| f["field"] == name && s["collection"] == "fixture_all_types")
            .unwrap_or_else(|| panic!("field {name}"));
        let binlog = parse(bytes).expect("parses");
        payload_column(binlog.events[0].payload)
    };
    let pk = field("pk");
    let pk = pk.as_any().downcast_ref::<Int64Array>().expect("int64");
    assert_eq!(pk.values().to_vec(), vec![1, 2, 3, 4, 5]);
    let name = field("name");
    let name = name.as_any().downcast_ref::<StringArray>().expect("utf8");
    assert_eq!(name.value(2), "row-3");
    let fvec = field("fvec");
    let fvec = fvec
        .as_any()
        .downcast_ref::<FixedSizeBinaryArray>()
        .expect("fixed");
    let row2: Vec<f32> = fvec
        .value(1)
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4")))
        .collect();
    assert_eq!(row2, vec![2.0, 2.5, -2.0, 0.5]);
    let i8s = field("i8");
    let i8s = i8s.as_any().downcast_ref::<Int8Array>().expect("int8");
    assert_eq!(i8s.values().to_vec(), vec![-1, -2, -3, -4, -5]);
}

/// The keys' page-by-page reader ([`pages`]) reads every Int64 and VarChar column the real
/// server wrote as the Arrow reader does.
#[test]
fn real_key_columns_read_page_by_page_as_through_arrow() {
    let mut read = [0, 0];
    for (bytes, file, _) in fixture_files() {
        let path = file["path"].as_str().expect("path");
        let binlog = parse(&bytes).expect("parses");
        let column = payload_column(binlog.events[0].payload);
        let footer = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&bytes::Bytes::copy_from_slice(binlog.events[0].payload))
            .expect("a footer");
        let compression = footer.row_group(0).column(0).compression();
        assert!(
            matches!(compression, parquet::basic::Compression::ZSTD(_)),
            "{path}: the server compressed it with zstd, the codec read here: {compression:?}"
        );
        match DataType::try_from(binlog.descriptor.payload_type) {
            Ok(DataType::Int64) if file["kind"] == "insert" => {
                let arrow = column.as_any().downcast_ref::<Int64Array>().expect("int64");
                assert_eq!(int64_values(&binlog), Ok(arrow.values().to_vec()), "{path}");
                read[0] += 1;
            }
            Ok(DataType::VarChar) => {
                let arrow = column.as_any().downcast_ref::<StringArray>().expect("utf8");
                let want = arrow
                    .iter()
                    .map(|v| Pk::VarChar(v.expect("non-null").to_owned()));
                assert_eq!(pk_values(&binlog), Ok(want.collect()), "{path}");
                read[1] += 1;
            }
            _ => {}
        }
    }
    assert!(
        read[0] >= 3 && read[1] >= 1,
        "the fixture's key-typed columns: {read:?}"
    );
}

/// `values` picks rows out of the real server's binlogs, numbered as one column whose
/// first rows lie in an earlier log.
#[test]
fn picked_values_of_real_binlogs_are_the_rows_inserted() {
    use crate::value::Value;
    let files = fixture_files();
    let log = |name: &str| {
        let (bytes, _, _) = files
            .iter()
            .find(|(_, f, s)| f["field"] == name && s["collection"] == "fixture_all_types")
            .unwrap_or_else(|| panic!("field {name}"));
        bytes.clone()
    };
    let bytes = log("name");
    let name = parse(&bytes).expect("parses");
    let picked = values(&name, 100, &[3, 101, 104, 105]).expect("reads");
    assert_eq!(picked.rows, 5);
    assert_eq!(
        picked.values,
        [
            (101, Value::String("row-2".into())),
            (104, Value::String("row-5".into()))
        ]
    );
    let bytes = log("fvec");
    let fvec = parse(&bytes).expect("parses");
    let picked = values(&fvec, 0, &[1]).expect("reads");
    let want: Vec<u8> = [2.0f32, 2.5, -2.0, 0.5]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    assert_eq!(picked.values, [(1, Value::Bytes(want))]);
}

#[test]
fn the_writer_frames_data_byte_for_byte_as_the_server_does() {
    for (bytes, file, segment) in fixture_files() {
        let path = file["path"].as_str().expect("path");
        let real = parse(&bytes).expect("parses");
        let at = data_event_at(&bytes);
        let real_payload = real.events[0].payload;
        let ours = if file["kind"] == "insert" {
            let data_type = DataType::try_from(real.descriptor.payload_type).expect("type");
            let dim = dim_of(&segment, real.descriptor.field_id);
            let column = column_of(payload_column(real_payload).as_ref(), data_type, dim);
            let mut descriptor = real.descriptor.clone();
            descriptor.extras.clear();
            encode_insert(descriptor, &column)
        } else {
            let deletes = deletes(&real).expect("deletes");
            let mut descriptor = real.descriptor.clone();
            descriptor.extras.clear();
            encode_delta(descriptor, &deletes, DeltaForm::Json)
        };
        // Magic, descriptor event (original_size included) and the data event's header and
        // timestamps: everything but the Parquet bytes, whose writer differs. The event
        // length and next position at bytes 9..17 of the data event hold the payload's size.
        let framing = at + 9;
        assert_eq!(ours[..framing], bytes[..framing], "{path}: framing");
        assert_eq!(
            ours[at + 17..at + 33],
            bytes[at + 17..at + 33],
            "{path}: event timestamps"
        );
        let ours = parse(&ours).expect("our object parses");
        assert_eq!(
            payload_column(ours.events[0].payload).to_data(),
            payload_column(real_payload).to_data(),
            "{path}: values"
        );
    }
}

#[test]
fn real_delta_log_holds_the_deleted_pks() {
    let (bytes, file, segment) = fixture_files()
        .into_iter()
        .find(|(_, f, _)| f["kind"] == "delete")
        .expect("the delta log");
    let binlog = parse(&bytes).expect("parses");
    assert_eq!(binlog.descriptor.field_id, -1);
    assert_eq!(binlog.descriptor.payload_type, DataType::String as i32);
    let deletes = deletes(&binlog).expect("deletes");
    let pks: Vec<Pk> = deletes.iter().map(|d| d.pk.clone()).collect();
    let want: Vec<Pk> = segment["deleted_pks"]
        .as_array()
        .expect("pks")
        .iter()
        .map(|pk| Pk::Int(pk.as_i64().expect("int pk")))
        .collect();
    assert_eq!(pks, want);
    let ts: Vec<u64> = deletes.iter().map(|d| d.ts).collect();
    let want_ts: Vec<u64> = file["values"]
        .as_array()
        .expect("values")
        .iter()
        .map(|v| v["ts"].as_u64().expect("ts"))
        .collect();
    assert_eq!(ts, want_ts);
    assert_eq!(file["entries_num"], 2);
}

#[test]
fn multi_field_delta_logs_round_trip_both_pk_types() {
    let ints = vec![
        Delete {
            pk: Pk::Int(7),
            ts: 100,
        },
        Delete {
            pk: Pk::Int(-3),
            ts: 101,
        },
    ];
    let strings = vec![Delete {
        pk: Pk::VarChar("a,b".into()),
        ts: 9,
    }];
    for (deletes_in, form) in [
        (&ints, DeltaForm::MultiField),
        (&strings, DeltaForm::MultiField),
        (&ints, DeltaForm::Json),
        (&strings, DeltaForm::Json),
    ] {
        let object = encode_delta(Descriptor::new(0, DataType::Int64), deletes_in, form);
        let binlog = parse(&object).expect("parses");
        assert_eq!(&deletes(&binlog).expect("reads"), deletes_in, "{form:?}");
        let multi = binlog.descriptor.extras.get("version");
        assert_eq!(
            multi.and_then(|v| v.as_str()) == Some("MULTI_FIELD"),
            form == DeltaForm::MultiField
        );
    }
}

#[test]
fn legacy_pk_ts_entries_are_read() {
    let column: arrow_array::ArrayRef =
        std::sync::Arc::new(StringArray::from(vec!["12,400", "x1,401"]));
    let payload = payload::write(&[("val", column)], payload::zstd());
    let object = encode(
        &Descriptor::new(-1, DataType::String),
        EventType::Delete,
        &payload,
    );
    let read = deletes(&parse(&object).expect("parses")).expect("reads");
    assert_eq!(
        read,
        vec![
            Delete {
                pk: Pk::Int(12),
                ts: 400
            },
            Delete {
                pk: Pk::VarChar("x1".into()),
                ts: 401
            }
        ]
    );
    let column: arrow_array::ArrayRef = std::sync::Arc::new(StringArray::from(vec!["nocomma"]));
    let payload = payload::write(&[("val", column)], payload::zstd());
    let object = encode(
        &Descriptor::new(-1, DataType::String),
        EventType::Delete,
        &payload,
    );
    let err = deletes(&parse(&object).expect("parses")).expect_err("unsplittable");
    assert!(
        err.to_string()
            .contains("the format of delta log is incorrect, nocomma can not be split"),
        "{err}"
    );
}

#[test]
fn damaged_objects_are_refused_with_milvus_reasons() {
    let good = encode_insert(
        Descriptor::new(100, DataType::Int64),
        &Column::Int64(vec![1, 2, 3]),
    );
    assert_eq!(parse(&good).and_then(|b| insert_rows(&b)), Ok(3));

    assert_eq!(parse(&good[..3]), Err(Error::TooShort { len: 3 }));
    let mut wrong_magic = good.clone();
    wrong_magic[0] = 0xbd;
    assert_eq!(
        parse(&wrong_magic).expect_err("magic").to_string(),
        "parse magic number failed, expected: 16775868, actual: 16775869"
    );
    assert_eq!(parse(b"PAR1\x15\x04"), Err(Error::PackedParquet));

    // Cut anywhere: inside the descriptor, inside the event, inside the Parquet footer.
    let at = data_event_at(&good);
    for cut in [30, at + 5, good.len() - 3] {
        for count in [insert_rows, insert_rows_declared] {
            let err = parse(&good[..cut]).and_then(|b| count(&b));
            assert!(
                matches!(err, Err(Error::Truncated { .. }) | Err(Error::Payload(_))),
                "cut at {cut}: {err:?}"
            );
        }
    }
    // A payload that is not of the descriptor's type: Int64 values described as VarChar.
    let mut retyped = good.clone();
    retyped[4 + 17 + 48..4 + 17 + 52].copy_from_slice(&(DataType::VarChar as i32).to_le_bytes());
    for count in [insert_rows, insert_rows_declared] {
        assert_eq!(
            parse(&retyped).and_then(|b| count(&b)),
            Err(Error::Payload(
                "a column of Int64 where VarChar data was expected".into()
            ))
        );
    }
    // An insert binlog read as a delta log.
    let err = deletes(&parse(&good).expect("parses")).expect_err("not a delta log");
    assert!(err.to_string().contains("wrong binlog type"), "{err}");
}

#[test]
fn every_column_type_round_trips() {
    let columns = [
        Column::Bool(vec![true, false]),
        Column::Int8(vec![-1, 2]),
        Column::Int16(vec![300, -300]),
        Column::Int32(vec![1 << 20, 0]),
        Column::Int64(vec![i64::MIN, i64::MAX]),
        Column::Float(vec![0.5, -1.5]),
        Column::Double(vec![0.25, 1e300]),
        Column::VarChar(vec!["a".into(), String::new()]),
        Column::Json(vec![br#"{"k":1}"#.to_vec(), b"null".to_vec()]),
        Column::BinaryVector {
            dim: 16,
            data: vec![1, 2, 3, 4],
        },
        Column::FloatVector {
            dim: 2,
            data: vec![1.0, 2.0, 3.0, 4.0],
        },
    ];
    for column in columns {
        let data_type = column.data_type();
        let dim = match &column {
            Column::BinaryVector { dim, .. } | Column::FloatVector { dim, .. } => *dim,
            _ => 0,
        };
        let object = encode_insert(Descriptor::new(101, DataType::None), &column);
        let binlog = parse(&object).expect("parses");
        assert_eq!(binlog.descriptor.payload_type, data_type as i32);
        assert_eq!(insert_rows(&binlog), Ok(2), "{data_type:?}");
        assert_eq!(insert_rows_declared(&binlog), Ok(2), "{data_type:?}");
        let back = column_of(
            payload_column(binlog.events[0].payload).as_ref(),
            data_type,
            dim,
        );
        assert_eq!(back, column);
    }
}

fn row(pk: i64, ts: u64) -> (Pk, u64) {
    (Pk::Int(pk), ts)
}

#[test]
fn a_delete_removes_only_earlier_rows_of_its_key() {
    let rows = [row(1, 10), row(2, 10), row(3, 10), row(1, 30)];
    let deletes = [
        Delete::int(1, 20), // the first row of key 1, not the one written after it
        Delete::int(2, 10), // the same timestamp: not before it, kept
        Delete::int(9, 50), // a key the group never held
        Delete::int(3, 15), // removes key 3 ...
        Delete::int(3, 12), // ... once, however many deletes name it
    ];
    assert_eq!(
        deleted_rows(rows.iter().map(|(pk, ts)| (pk, *ts)), &deletes),
        2
    );
    assert_eq!(deleted_rows(rows.iter().map(|(pk, ts)| (pk, *ts)), &[]), 0);
}
