//! Storage versions 2 and 3: a segment's fields are the columns of plain Parquet files, one
//! file per column group and log, each column naming its field in the `PARQUET:field_id`
//! metadata (column names are not to be trusted). A delta log in this layout is a file of
//! two columns: the primary key (field id 0) and the delete's timestamp (field id 1).
//!
//! Only the column asked for is decoded, so reading a segment's keys costs its key column,
//! not its vectors.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{PARQUET_FIELD_ID_META_KEY, ProjectionMask};

use milvus_proto::schema::DataType;

use crate::binlog::{Delete, Pk};
use crate::caught;
use crate::value::Picked;

/// Why a column-group file cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("not a readable Parquet file: {0}")]
    Parquet(String),
    #[error("column {column:?} carries no PARQUET:field_id, so its field is unknown")]
    NoFieldId { column: String },
    #[error("field {field} is a column of {found}; a primary key is Int64 or VarChar")]
    KeyType { field: i64, found: String },
    #[error("field {field} is a column of {found}; a timestamp is Int64")]
    TimestampType { field: i64, found: String },
    #[error("a delta log without its {which} column (field id {field})")]
    DeltaColumn { which: &'static str, field: i64 },
}

fn parquet(e: impl std::fmt::Display) -> Error {
    Error::Parquet(e.to_string())
}

fn builder(file: &[u8]) -> Result<ParquetRecordBatchReaderBuilder<Bytes>, Error> {
    caught::reading(
        || ParquetRecordBatchReaderBuilder::try_new(Bytes::copy_from_slice(file)).map_err(parquet),
        Error::Parquet,
    )
}

/// The rows the file holds, from its footer.
pub fn rows(file: &[u8]) -> Result<usize, Error> {
    let rows = builder(file)?.metadata().file_metadata().num_rows();
    usize::try_from(rows).map_err(|_| Error::Parquet(format!("a footer of {rows} rows")))
}

/// The field id of each top-level column, in order.
pub fn field_ids(file: &[u8]) -> Result<Vec<i64>, Error> {
    builder(file)?
        .schema()
        .fields()
        .iter()
        .map(|f| {
            f.metadata()
                .get(PARQUET_FIELD_ID_META_KEY)
                .and_then(|id| id.parse().ok())
                .ok_or_else(|| Error::NoFieldId {
                    column: f.name().clone(),
                })
        })
        .collect()
}

/// Every value of field `field`'s column, batch by batch; `None` when this file (column
/// group) does not hold the field.
fn column(file: &[u8], field: i64) -> Result<Option<Vec<ArrayRef>>, Error> {
    let Some(index) = field_ids(file)?.iter().position(|id| *id == field) else {
        return Ok(None);
    };
    let builder = builder(file)?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), [index]);
    let batches: Vec<RecordBatch> = caught::reading(
        || {
            builder
                .with_projection(mask)
                .build()
                .map_err(parquet)?
                .collect::<Result<_, _>>()
                .map_err(parquet)
        },
        Error::Parquet,
    )?;
    Ok(Some(
        batches.iter().map(|b| Arc::clone(b.column(0))).collect(),
    ))
}

fn keys(arrays: &[ArrayRef], field: i64) -> Result<Vec<Pk>, Error> {
    let mut out = Vec::new();
    for array in arrays {
        if let Some(ints) = array.as_any().downcast_ref::<Int64Array>() {
            out.extend(ints.iter().map(|v| Pk::Int(v.unwrap_or_default())));
        } else if let Some(strings) = array.as_any().downcast_ref::<StringArray>() {
            out.extend(
                strings
                    .iter()
                    .map(|v| Pk::VarChar(v.unwrap_or_default().to_owned())),
            );
        } else {
            return Err(Error::KeyType {
                field,
                found: array.data_type().to_string(),
            });
        }
    }
    Ok(out)
}

/// The primary keys of field `pk_field`, if this file's column group holds it.
pub fn pks(file: &[u8], pk_field: i64) -> Result<Option<Vec<Pk>>, Error> {
    column(file, pk_field)?
        .map(|arrays| keys(&arrays, pk_field))
        .transpose()
}

/// The Int64 values of field `field` (the rows' timestamps, field 1), if this file's
/// column group holds it.
pub fn int64s(file: &[u8], field: i64) -> Result<Option<Vec<i64>>, Error> {
    let Some(arrays) = column(file, field)? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for array in arrays {
        let ints =
            array
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| Error::TimestampType {
                    field,
                    found: array.data_type().to_string(),
                })?;
        out.extend(ints.iter().map(Option::unwrap_or_default));
    }
    Ok(Some(out))
}

/// The values of rows `wanted` (sorted row numbers of the field's whole column, across its
/// logs) of field `field` (of Milvus type `data_type`) in this file, its first row being row
/// `first` of the column, and how many rows it holds; `None` when its column group does
/// not hold the field.
pub fn values(
    file: &[u8],
    field: i64,
    data_type: DataType,
    first: usize,
    wanted: &[usize],
) -> Result<Option<Picked>, Error> {
    let Some(arrays) = column(file, field)? else {
        return Ok(None);
    };
    crate::value::pick(&arrays, data_type, first, wanted)
        .map(Some)
        .map_err(|e| Error::Parquet(e.0))
}

/// The deletes of a delta log in this layout.
pub fn deletes(file: &[u8]) -> Result<Vec<Delete>, Error> {
    const PK: i64 = 0;
    const TS: i64 = 1;
    let pks = column(file, PK)?.ok_or(Error::DeltaColumn {
        which: "primary key",
        field: PK,
    })?;
    let pks = keys(&pks, PK)?;
    let timestamps = int64s(file, TS)?.ok_or(Error::DeltaColumn {
        which: "timestamp",
        field: TS,
    })?;
    Ok(pks
        .into_iter()
        .zip(timestamps)
        .map(|(pk, ts)| Delete { pk, ts: ts as u64 })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow_array::FixedSizeBinaryArray;
    use arrow_schema::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;

    use super::*;

    fn field(name: &str, data_type: DataType, id: Option<i64>) -> Field {
        let meta: HashMap<String, String> = id
            .map(|id| (PARQUET_FIELD_ID_META_KEY.to_owned(), id.to_string()))
            .into_iter()
            .collect();
        Field::new(name, data_type, true).with_metadata(meta)
    }

    fn file(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Vec<u8> {
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        out
    }

    /// A column group of a segment: the pk (field 100, named otherwise), a vector, row ids.
    fn group() -> Vec<u8> {
        file(
            vec![
                field("0", DataType::Int64, Some(0)),
                field("not_the_pk", DataType::Int64, Some(100)),
                field("vec", DataType::FixedSizeBinary(8), Some(101)),
            ],
            vec![
                Arc::new(Int64Array::from(vec![7, 8, 9])),
                Arc::new(Int64Array::from(vec![10, 20, 30])),
                Arc::new(
                    FixedSizeBinaryArray::try_from_iter([[1u8; 8], [2; 8], [3; 8]].into_iter())
                        .unwrap(),
                ),
            ],
        )
    }

    #[test]
    fn the_key_column_is_found_by_field_id_not_by_name_or_position() {
        let group = group();
        assert_eq!(rows(&group), Ok(3));
        assert_eq!(field_ids(&group), Ok(vec![0, 100, 101]));
        assert_eq!(
            pks(&group, 100),
            Ok(Some(vec![Pk::Int(10), Pk::Int(20), Pk::Int(30)]))
        );
        assert_eq!(pks(&group, 102), Ok(None), "another group holds it");
        assert!(matches!(
            pks(&group, 101),
            Err(Error::KeyType { field: 101, .. })
        ));
    }

    #[test]
    fn varchar_keys_and_a_delta_log() {
        let keys = file(
            vec![field("pk", DataType::Utf8, Some(100))],
            vec![Arc::new(StringArray::from(vec!["a", "b"]))],
        );
        assert_eq!(
            pks(&keys, 100),
            Ok(Some(vec![Pk::VarChar("a".into()), Pk::VarChar("b".into())]))
        );
        let delta = file(
            vec![
                field("0", DataType::Utf8, Some(0)),
                field("1", DataType::Int64, Some(1)),
            ],
            vec![
                Arc::new(StringArray::from(vec!["a"])),
                Arc::new(Int64Array::from(vec![42])),
            ],
        );
        assert_eq!(
            deletes(&delta),
            Ok(vec![Delete {
                pk: Pk::VarChar("a".into()),
                ts: 42
            }])
        );
        assert!(matches!(
            deletes(&keys),
            Err(Error::DeltaColumn { field: 0, .. })
        ));
    }

    const BINARY_VECTOR: milvus_proto::schema::DataType =
        milvus_proto::schema::DataType::BinaryVector;

    /// A file damaged at any one byte reads or is refused; it never panics.
    #[test]
    fn a_file_damaged_anywhere_never_panics() {
        let group = group();
        for at in 0..group.len() {
            let mut damaged = group.clone();
            damaged[at] ^= 0x5a;
            let _ = rows(&damaged);
            let _ = pks(&damaged, 100);
            let _ = int64s(&damaged, 0);
            let _ = values(&damaged, 101, BINARY_VECTOR, 0, &[0, 2]);
            let _ = deletes(&damaged);
        }
    }

    #[test]
    fn a_column_without_its_field_id_and_a_file_that_is_not_parquet_are_named() {
        let unnamed = file(
            vec![field("pk", DataType::Int64, None)],
            vec![Arc::new(Int64Array::from(vec![1]))],
        );
        assert_eq!(
            pks(&unnamed, 100),
            Err(Error::NoFieldId {
                column: "pk".into()
            })
        );
        assert!(matches!(rows(b"not parquet"), Err(Error::Parquet(_))));
    }
}
