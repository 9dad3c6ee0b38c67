//! One row's value of one field, in the one form a backup's data and a query's answer are
//! both read into, so that a row restored on an end can be held to the row the backup holds.
//!
//! Values are compared as Milvus keeps them, not as they print: floats and vectors by their
//! bits (a vector whose last bit changed is another vector), JSON as documents (a server
//! may write a document's keys with other spacing), an Array as the `ScalarField` it is.

use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, FixedSizeBinaryArray, Float32Array, Float64Array,
    Int8Array, Int16Array, Int32Array, Int64Array, LargeBinaryArray, LargeStringArray, StringArray,
};
use milvus_proto::schema::{
    ArrayArray, BoolArray, BytesArray, DataType, DoubleArray, FieldData, FloatArray, IntArray,
    JsonArray, LongArray, ScalarField, SparseFloatArray, StringArray as ProtoStrings, VectorField,
    field_data, scalar_field, vector_field,
};
use prost::Message as _;

/// One field's value in one row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// Int8 to Int64.
    Int(i64),
    /// A Float's bits.
    Float(u32),
    /// A Double's bits.
    Double(u64),
    String(String),
    /// A JSON document (the dynamic field's too), as bytes.
    Json(Vec<u8>),
    /// An Array: its elements, as the `ScalarField` Milvus encodes them into.
    Array(Vec<u8>),
    /// A vector's bytes: fixed-width vectors little-endian, a sparse row as Milvus writes it.
    Bytes(Vec<u8>),
}

impl Value {
    /// Whether `self` (the backup's) and `other` (an end's) are the same value as Milvus
    /// keeps it.
    pub fn same(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Json(a), Value::Json(b)) => {
                match (
                    serde_json::from_slice::<serde_json::Value>(a),
                    serde_json::from_slice::<serde_json::Value>(b),
                ) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => a == b,
                }
            }
            (Value::Array(a), Value::Array(b)) => {
                match (ScalarField::decode(&a[..]), ScalarField::decode(&b[..])) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => a == b,
                }
            }
            (a, b) => a == b,
        }
    }

    /// The value for a message: short, with long bytes cut.
    pub fn brief(&self) -> String {
        fn cut(s: &str) -> String {
            match s.char_indices().nth(48) {
                Some((at, _)) => format!("{}…", &s[..at]),
                None => s.to_owned(),
            }
        }
        match self {
            Value::Null => "null".into(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(bits) => f32::from_bits(*bits).to_string(),
            Value::Double(bits) => f64::from_bits(*bits).to_string(),
            Value::String(s) => format!("{:?}", cut(s)),
            Value::Json(b) => cut(&String::from_utf8_lossy(b)),
            Value::Array(b) | Value::Bytes(b) => {
                let hex: String = b.iter().take(16).map(|x| format!("{x:02x}")).collect();
                format!(
                    "{} bytes {hex}{}",
                    b.len(),
                    if b.len() > 16 { "…" } else { "" }
                )
            }
        }
    }
}

/// Why a column or an answer does not read as values of its type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(pub String);

/// What a run of a column's rows gave: how many rows it holds, and the values of the rows
/// asked for that fall in it, by their row number in the whole column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Picked {
    pub rows: usize,
    pub values: Vec<(usize, Value)>,
}

/// The values of rows `wanted` (sorted row numbers of the whole column) found in `arrays`,
/// whose first row is row `first` of the column: a column of Milvus type `data_type`.
pub(crate) fn pick(
    arrays: &[ArrayRef],
    data_type: DataType,
    first: usize,
    wanted: &[usize],
) -> Result<Picked, ValueError> {
    let mut picked = Picked::default();
    let mut at = first;
    for array in arrays {
        let end = at + array.len();
        let from = wanted.partition_point(|&r| r < at);
        let to = wanted.partition_point(|&r| r < end);
        for &row in &wanted[from..to] {
            picked
                .values
                .push((row, value(array, row - at, data_type)?));
        }
        at = end;
    }
    picked.rows = at - first;
    Ok(picked)
}

fn value(array: &ArrayRef, i: usize, data_type: DataType) -> Result<Value, ValueError> {
    if array.is_null(i) {
        return Ok(Value::Null);
    }
    let any = array.as_any();
    macro_rules! get {
        ($ty:ty) => {
            any.downcast_ref::<$ty>().map(|a| a.value(i))
        };
    }
    let bytes = |b: &[u8]| match data_type {
        DataType::Json => Value::Json(b.to_vec()),
        DataType::Array => Value::Array(b.to_vec()),
        _ => Value::Bytes(b.to_vec()),
    };
    let found = get!(BooleanArray)
        .map(Value::Bool)
        .or_else(|| get!(Int8Array).map(|v| Value::Int(v.into())))
        .or_else(|| get!(Int16Array).map(|v| Value::Int(v.into())))
        .or_else(|| get!(Int32Array).map(|v| Value::Int(v.into())))
        .or_else(|| get!(Int64Array).map(Value::Int))
        .or_else(|| get!(Float32Array).map(|v| Value::Float(v.to_bits())))
        .or_else(|| get!(Float64Array).map(|v| Value::Double(v.to_bits())))
        .or_else(|| get!(StringArray).map(|v| Value::String(v.to_owned())))
        .or_else(|| get!(LargeStringArray).map(|v| Value::String(v.to_owned())))
        .or_else(|| get!(BinaryArray).map(bytes))
        .or_else(|| get!(LargeBinaryArray).map(bytes))
        .or_else(|| get!(FixedSizeBinaryArray).map(|v| Value::Bytes(v.to_vec())));
    found.ok_or_else(|| {
        ValueError(format!(
            "a column of {} does not read as {} values",
            array.data_type(),
            data_type.as_str_name()
        ))
    })
}

/// A field's default as the schema gives it (`FieldSchema.default_value`), the value a row
/// written before the field was added shows.
pub fn from_default(default: &milvus_proto::schema::ValueField) -> Value {
    use milvus_proto::schema::value_field::Data;
    match &default.data {
        None => Value::Null,
        Some(Data::BoolData(b)) => Value::Bool(*b),
        Some(Data::IntData(i)) => Value::Int((*i).into()),
        Some(Data::LongData(i) | Data::TimestamptzData(i) | Data::TimeData(i)) => Value::Int(*i),
        Some(Data::DateData(i)) => Value::Int((*i).into()),
        Some(Data::FloatData(f)) => Value::Float(f.to_bits()),
        Some(Data::DoubleData(f)) => Value::Double(f.to_bits()),
        Some(Data::StringData(s)) => Value::String(s.clone()),
        Some(Data::BytesData(b)) => Value::Bytes(b.clone()),
    }
}

/// The rows of a query's answer for one field, in the answer's row order.
pub fn from_field_data(field: &FieldData) -> Result<Vec<Value>, ValueError> {
    let bad = |what: &str| ValueError(format!("field {:?}: {what}", field.field_name));
    let mut values: Vec<Value> = match &field.field {
        Some(field_data::Field::Scalars(s)) => match &s.data {
            Some(scalar_field::Data::BoolData(a)) => {
                a.data.iter().map(|&b| Value::Bool(b)).collect()
            }
            Some(scalar_field::Data::IntData(a)) => {
                a.data.iter().map(|&i| Value::Int(i.into())).collect()
            }
            Some(scalar_field::Data::LongData(a)) => {
                a.data.iter().map(|&i| Value::Int(i)).collect()
            }
            Some(scalar_field::Data::FloatData(a)) => {
                a.data.iter().map(|f| Value::Float(f.to_bits())).collect()
            }
            Some(scalar_field::Data::DoubleData(a)) => {
                a.data.iter().map(|f| Value::Double(f.to_bits())).collect()
            }
            Some(scalar_field::Data::StringData(a)) => {
                a.data.iter().cloned().map(Value::String).collect()
            }
            Some(scalar_field::Data::BytesData(a)) => {
                a.data.iter().cloned().map(Value::Bytes).collect()
            }
            Some(scalar_field::Data::JsonData(a)) => {
                a.data.iter().cloned().map(Value::Json).collect()
            }
            Some(scalar_field::Data::ArrayData(a)) => a
                .data
                .iter()
                .map(|s| Value::Array(s.encode_to_vec()))
                .collect(),
            None => Vec::new(),
        },
        Some(field_data::Field::Vectors(v)) => {
            let dim = usize::try_from(v.dim).map_err(|_| bad("a negative dimension"))?;
            let width = |bytes_per_row: usize| (bytes_per_row > 0).then_some(bytes_per_row);
            match &v.data {
                Some(vector_field::Data::FloatVector(a)) => {
                    let bytes: Vec<u8> = a.data.iter().flat_map(|f| f.to_le_bytes()).collect();
                    rows_of(&bytes, width(dim * 4)).ok_or_else(|| bad("a dimension of 0"))?
                }
                Some(vector_field::Data::BinaryVector(b)) => {
                    rows_of(b, width(dim / 8)).ok_or_else(|| bad("a dimension of 0"))?
                }
                Some(
                    vector_field::Data::Float16Vector(b) | vector_field::Data::Bfloat16Vector(b),
                ) => rows_of(b, width(dim * 2)).ok_or_else(|| bad("a dimension of 0"))?,
                Some(vector_field::Data::Int8Vector(b)) => {
                    rows_of(b, width(dim)).ok_or_else(|| bad("a dimension of 0"))?
                }
                Some(vector_field::Data::SparseFloatVector(s)) => {
                    s.contents.iter().cloned().map(Value::Bytes).collect()
                }
                None => Vec::new(),
            }
        }
        None => Vec::new(),
    };
    // A nullable field's answer carries a validity per row; Milvus 2.5 on leaves a null
    // row's slot out of the data (or zeroed), so the data is laid out by the valid rows.
    if !field.valid_data.is_empty() {
        let dense = values.len() == field.valid_data.len();
        let mut data = values.into_iter();
        values = field
            .valid_data
            .iter()
            .map(|&valid| match (valid, dense) {
                (true, _) => data
                    .next()
                    .ok_or_else(|| bad("fewer values than valid rows")),
                (false, true) => {
                    data.next();
                    Ok(Value::Null)
                }
                (false, false) => Ok(Value::Null),
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(values)
}

fn rows_of(bytes: &[u8], width: Option<usize>) -> Option<Vec<Value>> {
    Some(
        bytes
            .chunks(width?)
            .map(|row| Value::Bytes(row.to_vec()))
            .collect(),
    )
}

/// A query's answer for one field of `data_type` (of dimension `dim` for a vector) holding
/// `values`: what milvus-sim answers with, in the forms Milvus does.
pub fn to_field_data(
    name: &str,
    field_id: i64,
    data_type: DataType,
    dim: i64,
    values: &[Value],
) -> FieldData {
    let valid_data: Vec<bool> = if values.contains(&Value::Null) {
        values.iter().map(|v| *v != Value::Null).collect()
    } else {
        Vec::new()
    };
    let present = || values.iter().filter(|v| **v != Value::Null);
    let ints = || present().map(|v| if let Value::Int(i) = v { *i } else { 0 });
    let bytes = || {
        present()
            .map(|v| match v {
                Value::Bytes(b) | Value::Json(b) | Value::Array(b) => b.clone(),
                Value::String(s) => s.clone().into_bytes(),
                _ => Vec::new(),
            })
            .collect::<Vec<_>>()
    };
    let scalars = |data| field_data::Field::Scalars(ScalarField { data: Some(data) });
    let vectors = |data| {
        field_data::Field::Vectors(VectorField {
            dim,
            data: Some(data),
        })
    };
    let field = match data_type {
        DataType::Bool => scalars(scalar_field::Data::BoolData(BoolArray {
            data: present().map(|v| matches!(v, Value::Bool(true))).collect(),
        })),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => {
            scalars(scalar_field::Data::IntData(IntArray {
                data: ints().map(|i| i as i32).collect(),
            }))
        }
        DataType::Int64 => scalars(scalar_field::Data::LongData(LongArray {
            data: ints().collect(),
        })),
        DataType::Float => scalars(scalar_field::Data::FloatData(FloatArray {
            data: (present())
                .map(|v| {
                    if let Value::Float(b) = v {
                        f32::from_bits(*b)
                    } else {
                        0.0
                    }
                })
                .collect(),
        })),
        DataType::Double => scalars(scalar_field::Data::DoubleData(DoubleArray {
            data: (present())
                .map(|v| {
                    if let Value::Double(b) = v {
                        f64::from_bits(*b)
                    } else {
                        0.0
                    }
                })
                .collect(),
        })),
        DataType::String | DataType::VarChar | DataType::Text => {
            scalars(scalar_field::Data::StringData(ProtoStrings {
                data: (present())
                    .map(|v| {
                        if let Value::String(s) = v {
                            s.clone()
                        } else {
                            String::new()
                        }
                    })
                    .collect(),
            }))
        }
        DataType::Json => scalars(scalar_field::Data::JsonData(JsonArray { data: bytes() })),
        DataType::Array => scalars(scalar_field::Data::ArrayData(ArrayArray {
            data: (bytes().iter())
                .map(|b| ScalarField::decode(&b[..]).unwrap_or_default())
                .collect(),
            element_type: 0,
        })),
        DataType::FloatVector => vectors(vector_field::Data::FloatVector(FloatArray {
            data: bytes()
                .concat()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        })),
        DataType::BinaryVector => vectors(vector_field::Data::BinaryVector(bytes().concat())),
        DataType::Float16Vector => vectors(vector_field::Data::Float16Vector(bytes().concat())),
        DataType::BFloat16Vector => vectors(vector_field::Data::Bfloat16Vector(bytes().concat())),
        DataType::Int8Vector => vectors(vector_field::Data::Int8Vector(bytes().concat())),
        DataType::SparseFloatVector => {
            vectors(vector_field::Data::SparseFloatVector(SparseFloatArray {
                contents: bytes(),
                dim,
            }))
        }
        _ => scalars(scalar_field::Data::BytesData(BytesArray { data: bytes() })),
    };
    FieldData {
        r#type: data_type as i32,
        field_name: name.to_owned(),
        field: Some(field),
        field_id,
        is_dynamic: false,
        valid_data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binlog::Column;

    #[test]
    fn a_column_read_into_values_answers_as_milvus_and_reads_back() {
        let cases = [
            (Column::Int64(vec![5, 6, 7]), 0),
            (Column::Float(vec![0.5, -1.25, f32::MIN_POSITIVE]), 0),
            (
                Column::VarChar(vec!["a".into(), "b\"c".into(), String::new()]),
                0,
            ),
            (
                Column::Json(vec![b"{\"a\":1}".to_vec(), b"[]".to_vec(), b"{}".to_vec()]),
                0,
            ),
            (
                Column::FloatVector {
                    dim: 2,
                    data: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                },
                2,
            ),
            (
                Column::BinaryVector {
                    dim: 8,
                    data: vec![1, 2, 3],
                },
                8,
            ),
        ];
        for (column, dim) in cases {
            let arrays = vec![column.to_arrow()];
            let picked = pick(&arrays, column.data_type(), 10, &[10, 12, 13]).expect("reads");
            assert_eq!(picked.rows, 3);
            let rows: Vec<usize> = picked.values.iter().map(|(r, _)| *r).collect();
            assert_eq!(rows, [10, 12], "{column:?}: row 13 is past this run");
            let values: Vec<Value> = picked.values.into_iter().map(|(_, v)| v).collect();
            let answer = to_field_data("f", 101, column.data_type(), dim, &values);
            let back = from_field_data(&answer).expect("the answer reads");
            assert_eq!(back.len(), 2);
            assert!(
                back.iter().zip(&values).all(|(a, b)| a.same(b)),
                "{column:?}"
            );
        }
    }

    #[test]
    fn json_is_compared_as_documents_and_vectors_by_their_bits() {
        let a = Value::Json(br#"{"a": 1, "b": [true]}"#.to_vec());
        let b = Value::Json(br#"{"b":[true],"a":1}"#.to_vec());
        assert!(a.same(&b));
        assert!(!a.same(&Value::Json(br#"{"a":2,"b":[true]}"#.to_vec())));
        let v = Value::Bytes(1.0f32.to_le_bytes().to_vec());
        let w = Value::Bytes(f32::from_bits(1.0f32.to_bits() ^ 1).to_le_bytes().to_vec());
        assert!(!v.same(&w), "one bit off is another vector");
        assert!(!Value::Float(0.0f32.to_bits()).same(&Value::Float((-0.0f32).to_bits())));
    }

    #[test]
    fn nulls_take_their_place_by_the_validity_the_answer_carries() {
        let values = [Value::Int(1), Value::Null, Value::Int(3)];
        let answer = to_field_data("n", 102, DataType::Int64, 0, &values);
        assert_eq!(answer.valid_data, [true, false, true]);
        assert_eq!(from_field_data(&answer).expect("reads"), values);
        // The dense form: a slot per row, the null's zeroed.
        let mut dense = answer.clone();
        dense.field = Some(field_data::Field::Scalars(ScalarField {
            data: Some(scalar_field::Data::LongData(LongArray {
                data: vec![1, 0, 3],
            })),
        }));
        assert_eq!(from_field_data(&dense).expect("reads"), values);
    }
}
