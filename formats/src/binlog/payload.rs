//! An event's payload: a Parquet file. An insert binlog's has one column; the writer here makes
//! it as Milvus's payload writer (Go's `pqarrow`) does: one non-null column named `val`, zstd
//! level 3, no Arrow schema in the metadata. The Arrow type of each Milvus data type is the
//! one the real 2.3.5 wrote.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, FixedSizeBinaryArray, Float32Array, Float64Array,
    Int8Array, Int16Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType as ArrowType, Field, Schema};
use milvus_proto::schema::DataType;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::Error;

/// The column name Milvus's payload writer gives its one column.
const COLUMN: &str = "val";

/// One field's values, as a binlog carries them.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    Bool(Vec<bool>),
    Int8(Vec<i8>),
    Int16(Vec<i16>),
    Int32(Vec<i32>),
    Int64(Vec<i64>),
    Float(Vec<f32>),
    Double(Vec<f64>),
    /// VarChar (and a delta log's one-column entries, which are `String`).
    VarChar(Vec<String>),
    /// A JSON document per row, as bytes.
    Json(Vec<Vec<u8>>),
    /// `dim / 8` bytes per row.
    BinaryVector {
        dim: usize,
        data: Vec<u8>,
    },
    /// `dim` little-endian floats per row.
    FloatVector {
        dim: usize,
        data: Vec<f32>,
    },
}

impl Column {
    /// `rows` zeros (empty strings, `{}` documents, zero vectors of dimension 8) of
    /// `data_type`: rows for tests that count them and never read them. None for a type this
    /// module does not write.
    pub fn zeroed(data_type: DataType, rows: usize) -> Option<Column> {
        const DIM: usize = 8;
        Some(match data_type {
            DataType::Bool => Column::Bool(vec![false; rows]),
            DataType::Int8 => Column::Int8(vec![0; rows]),
            DataType::Int16 => Column::Int16(vec![0; rows]),
            DataType::Int32 => Column::Int32(vec![0; rows]),
            DataType::Int64 => Column::Int64(vec![0; rows]),
            DataType::Float => Column::Float(vec![0.0; rows]),
            DataType::Double => Column::Double(vec![0.0; rows]),
            DataType::VarChar => Column::VarChar(vec![String::new(); rows]),
            DataType::Json => Column::Json(vec![b"{}".to_vec(); rows]),
            DataType::BinaryVector => Column::BinaryVector {
                dim: DIM,
                data: vec![0; rows * DIM / 8],
            },
            DataType::FloatVector => Column::FloatVector {
                dim: DIM,
                data: vec![0.0; rows * DIM],
            },
            _ => return None,
        })
    }

    pub fn data_type(&self) -> DataType {
        match self {
            Column::Bool(_) => DataType::Bool,
            Column::Int8(_) => DataType::Int8,
            Column::Int16(_) => DataType::Int16,
            Column::Int32(_) => DataType::Int32,
            Column::Int64(_) => DataType::Int64,
            Column::Float(_) => DataType::Float,
            Column::Double(_) => DataType::Double,
            Column::VarChar(_) => DataType::VarChar,
            Column::Json(_) => DataType::Json,
            Column::BinaryVector { .. } => DataType::BinaryVector,
            Column::FloatVector { .. } => DataType::FloatVector,
        }
    }

    /// Milvus's `GetMemorySize` of the values, which it records as `original_size`: fixed
    /// widths times rows; each string or document plus 16 bytes of header; vector data plus
    /// the 4-byte dimension.
    pub fn memory_size(&self) -> usize {
        let strings = |lens: &mut dyn Iterator<Item = usize>| lens.map(|n| n + 16).sum::<usize>();
        match self {
            Column::Bool(v) => v.len(),
            Column::Int8(v) => v.len(),
            Column::Int16(v) => v.len() * 2,
            Column::Int32(v) => v.len() * 4,
            Column::Float(v) => v.len() * 4,
            Column::Int64(v) => v.len() * 8,
            Column::Double(v) => v.len() * 8,
            Column::VarChar(v) => strings(&mut v.iter().map(String::len)),
            Column::Json(v) => strings(&mut v.iter().map(Vec::len)),
            Column::BinaryVector { data, .. } => data.len() + 4,
            Column::FloatVector { data, .. } => data.len() * 4 + 4,
        }
    }

    pub(crate) fn to_arrow(&self) -> ArrayRef {
        let fixed = |width: usize, bytes: &[u8]| -> ArrayRef {
            let width = i32::try_from(width).expect("a vector row is under 2 GiB");
            let rows = bytes.chunks(width as usize);
            Arc::new(
                FixedSizeBinaryArray::try_from_iter(rows)
                    .expect("every row of a vector column has the same width"),
            )
        };
        match self {
            Column::Bool(v) => Arc::new(BooleanArray::from(v.clone())),
            Column::Int8(v) => Arc::new(Int8Array::from(v.clone())),
            Column::Int16(v) => Arc::new(Int16Array::from(v.clone())),
            Column::Int32(v) => Arc::new(Int32Array::from(v.clone())),
            Column::Int64(v) => Arc::new(Int64Array::from(v.clone())),
            Column::Float(v) => Arc::new(Float32Array::from(v.clone())),
            Column::Double(v) => Arc::new(Float64Array::from(v.clone())),
            Column::VarChar(v) => Arc::new(StringArray::from_iter_values(v)),
            Column::Json(v) => Arc::new(BinaryArray::from_iter_values(v)),
            Column::BinaryVector { dim, data } => fixed(dim / 8, data),
            Column::FloatVector { dim, data } => {
                let bytes: Vec<u8> = data.iter().flat_map(|f| f.to_le_bytes()).collect();
                fixed(dim * 4, &bytes)
            }
        }
    }

    /// The payload Parquet file.
    pub fn to_parquet(&self) -> Vec<u8> {
        write(&[(COLUMN, self.to_arrow())], zstd())
    }
}

/// Milvus's payload writers compress with zstd at level 3.
pub(super) fn zstd() -> Compression {
    Compression::ZSTD(ZstdLevel::try_new(3).expect("3 is a zstd level"))
}

/// A Parquet file of non-null `columns`, in one row group.
pub(super) fn write(columns: &[(&str, ArrayRef)], compression: Compression) -> Vec<u8> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array)| Field::new(*name, array.data_type().clone(), false))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let arrays = columns.iter().map(|(_, array)| array.clone()).collect();
    let batch =
        RecordBatch::try_new(schema.clone(), arrays).expect("columns that match their schema");
    let properties = WriterProperties::builder()
        .set_compression(compression)
        .build();
    let options = ArrowWriterOptions::new()
        .with_properties(properties)
        .with_skip_arrow_metadata(true);
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new_with_options(&mut out, schema, options)
        .expect("an in-memory Parquet writer opens");
    writer.write(&batch).expect("writing to memory succeeds");
    writer
        .close()
        .expect("closing an in-memory writer succeeds");
    out
}

/// The Arrow type a payload of `data_type` must have, and whether it is a fixed-width vector
/// (whose width depends on the field's dimension).
fn expected(data_type: DataType) -> Option<ArrowType> {
    Some(match data_type {
        DataType::Bool => ArrowType::Boolean,
        DataType::Int8 => ArrowType::Int8,
        DataType::Int16 => ArrowType::Int16,
        DataType::Int32 => ArrowType::Int32,
        DataType::Int64 => ArrowType::Int64,
        DataType::Float => ArrowType::Float32,
        DataType::Double => ArrowType::Float64,
        DataType::String | DataType::VarChar | DataType::Text => ArrowType::Utf8,
        DataType::Json | DataType::Array | DataType::SparseFloatVector => ArrowType::Binary,
        _ => return None,
    })
}

fn is_fixed_vector(data_type: DataType) -> bool {
    matches!(
        data_type,
        DataType::BinaryVector
            | DataType::FloatVector
            | DataType::Float16Vector
            | DataType::BFloat16Vector
    )
}

/// Reads a payload's record batches.
pub(super) fn read(payload: &[u8]) -> Result<Vec<RecordBatch>, Error> {
    let bad = |e: &dyn std::fmt::Display| Error::Payload(e.to_string());
    decoding(|| {
        ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::copy_from_slice(payload))
            .map_err(|e| bad(&e))?
            .build()
            .map_err(|e| bad(&e))?
            .map(|batch| batch.map_err(|e| bad(&e)))
            .collect()
    })
}

/// Runs `decode`, a panic in it taken as a bad payload (see [`crate::caught`]).
pub(super) fn decoding<T>(decode: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    crate::caught::reading(decode, Error::Payload)
}

/// Checks that `column` holds `data_type` data as Milvus writes it.
pub(super) fn check_type(column: &ArrayRef, data_type: DataType) -> Result<(), Error> {
    check_arrow_type(column.data_type(), data_type)
}

/// Checks that a payload's Arrow schema is one column of `data_type` data as Milvus writes it.
pub(super) fn check_one_column(schema: &Schema, data_type: DataType) -> Result<(), Error> {
    let [field] = &schema.fields()[..] else {
        return Err(Error::Payload(format!(
            "{} columns, expected one",
            schema.fields().len()
        )));
    };
    check_arrow_type(field.data_type(), data_type)
}

/// Checks that a column of Arrow type `got` holds `data_type` data as Milvus writes it.
fn check_arrow_type(got: &ArrowType, data_type: DataType) -> Result<(), Error> {
    let fits = match (expected(data_type), got) {
        (Some(want), got) => &want == got,
        (None, ArrowType::FixedSizeBinary(_)) => is_fixed_vector(data_type),
        (None, _) => false,
    };
    if fits {
        Ok(())
    } else {
        Err(Error::Payload(format!(
            "a column of {got} where {} data was expected",
            data_type.as_str_name()
        )))
    }
}

/// The one column of each batch of a single-field payload, checked to be of `data_type`.
/// Columns are taken by position: the legacy writer names its column `val`, the stream
/// writers of 2.5 on name it after the field id.
pub(super) fn single_columns(payload: &[u8], data_type: DataType) -> Result<Vec<ArrayRef>, Error> {
    read(payload)?
        .into_iter()
        .map(|batch| {
            if batch.num_columns() != 1 {
                return Err(Error::Payload(format!(
                    "{} columns, expected one",
                    batch.num_columns()
                )));
            }
            let column = batch.column(0).clone();
            check_type(&column, data_type)?;
            Ok(column)
        })
        .collect()
}

/// The rows of a payload of `data_type`, counted from its values as Milvus's reader counts
/// them (a null row is a row).
pub fn rows(payload: &[u8], data_type: DataType) -> Result<usize, Error> {
    Ok(single_columns(payload, data_type)?
        .iter()
        .map(|c| c.len())
        .sum())
}

/// The rows a payload of `data_type` declares in its Parquet footer, its one column's type
/// checked against `data_type`, without decoding a page. A reader that decodes the key columns
/// anyway counts the other fields so; a page that does not decode goes unnoticed here.
pub fn footer_rows(payload: &[u8], data_type: DataType) -> Result<usize, Error> {
    let bad = |e: &dyn std::fmt::Display| Error::Payload(e.to_string());
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::copy_from_slice(payload))
        .map_err(|e| bad(&e))?;
    check_one_column(builder.schema(), data_type)?;
    usize::try_from(builder.metadata().file_metadata().num_rows())
        .map_err(|_| Error::Payload("a negative row count in the footer".into()))
}
