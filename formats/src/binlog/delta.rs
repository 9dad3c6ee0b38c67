//! Delta logs: the deletes of a segment, in the two forms Milvus writes (`delta_data.go`,
//! `serde_events.go`; `dataNode.storage.deltalog` picks one, `json` by default in every
//! release):
//!
//! - **JSON** (2.3 on, the default): field id -1, payload type String, one delete event whose
//!   payload is a string column of `{"pk":..,"ts":..,"pkType":..}` documents (a VarChar pk is a
//!   JSON string). Milvus before 2.3 wrote `"pk,ts"`, which its reader still takes.
//! - **Multi-field** (`parquet`): field id -1, payload type Int64 whatever the pk's type,
//!   extras `"version":"MULTI_FIELD"`, and a payload of two columns, `pk` (Int64 or String)
//!   and `ts` (Int64), uncompressed.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int64Array, StringArray};
use milvus_proto::schema::DataType;
use parquet::basic::Compression;

use super::{Binlog, Descriptor, Error, EventType, pages, payload};

/// The extras key and value that mark the multi-field form.
const VERSION_KEY: &str = "version";
const MULTI_FIELD: &str = "MULTI_FIELD";
/// `common.InvalidFieldID`, the field id of a delta log.
const NO_FIELD: i64 = -1;

/// A deleted primary key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pk {
    Int(i64),
    VarChar(String),
}

impl std::fmt::Display for Pk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pk::Int(i) => write!(f, "{i}"),
            Pk::VarChar(s) => f.write_str(s),
        }
    }
}

/// One delete: the primary key and the timestamp it was deleted at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    pub pk: Pk,
    pub ts: u64,
}

impl Delete {
    /// The delete of an Int64 primary key.
    pub fn int(pk: i64, ts: u64) -> Self {
        Delete {
            pk: Pk::Int(pk),
            ts,
        }
    }
}

/// Milvus's rule for an import's own deletes (`FilterWithDelete`): how many of `rows` (each
/// a primary key and the timestamp it was written at) a delete of the same key at a later
/// timestamp removes. A delete of a key the rows never held removes nothing (Milvus 2.3
/// writes a delete into every segment whose bloom filter matches it); a row is removed once
/// however many deletes name it.
pub fn deleted_rows<'a>(rows: impl IntoIterator<Item = (&'a Pk, u64)>, deletes: &[Delete]) -> i64 {
    removed(rows, deletes).iter().filter(|gone| **gone).count() as i64
}

/// The same rule row by row: whether each of `rows` is removed by some delete of `deletes`.
pub fn removed<'a>(rows: impl IntoIterator<Item = (&'a Pk, u64)>, deletes: &[Delete]) -> Vec<bool> {
    // foldhash, not SipHash: every row's key is looked up, and SipHash was a tenth of
    // counting a backup's rows. Its seed is still the process's own.
    let mut latest: HashMap<&Pk, u64, foldhash::fast::RandomState> = HashMap::default();
    for delete in deletes {
        let ts = latest.entry(&delete.pk).or_default();
        *ts = (*ts).max(delete.ts);
    }
    rows.into_iter()
        .map(|(pk, ts)| latest.get(pk).is_some_and(|deleted| *deleted > ts))
        .collect()
}

/// Which form a delta log is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum DeltaForm {
    /// One JSON document per delete (`dataNode.storage.deltalog: json`, the default).
    #[default]
    Json,
    /// Columns `pk` and `ts` (`dataNode.storage.deltalog: parquet`).
    #[cfg_attr(feature = "clap", value(name = "parquet"))]
    MultiField,
}

/// `DeleteLog` as Go's `encoding/json` writes it: keys in struct order.
#[derive(serde::Serialize, serde::Deserialize)]
struct DeleteLog {
    pk: serde_json::Value,
    ts: u64,
    #[serde(rename = "pkType")]
    pk_type: i32,
}

/// A delta log of `deletes` in `form`; `descriptor` gives the ids and timestamps.
pub fn encode_delta(mut descriptor: Descriptor, deletes: &[Delete], form: DeltaForm) -> Vec<u8> {
    descriptor.field_id = NO_FIELD;
    let payload = match form {
        DeltaForm::Json => {
            let entries: Vec<String> = deletes.iter().map(json_entry).collect();
            descriptor.payload_type = DataType::String as i32;
            let size: usize = entries.iter().map(String::len).sum();
            descriptor
                .extras
                .insert("original_size".into(), size.to_string().into());
            let column: ArrayRef = Arc::new(StringArray::from_iter_values(&entries));
            payload::write(&[("val", column)], payload::zstd())
        }
        DeltaForm::MultiField => {
            descriptor.payload_type = DataType::Int64 as i32;
            descriptor
                .extras
                .insert(VERSION_KEY.into(), MULTI_FIELD.into());
            let ts: ArrayRef = Arc::new(Int64Array::from_iter_values(
                deletes.iter().map(|d| d.ts as i64),
            ));
            let ints: Option<Vec<i64>> = deletes
                .iter()
                .map(|d| match d.pk {
                    Pk::Int(i) => Some(i),
                    Pk::VarChar(_) => None,
                })
                .collect();
            let pk: ArrayRef = match ints {
                Some(ints) => Arc::new(Int64Array::from(ints)),
                None => Arc::new(StringArray::from_iter_values(
                    deletes.iter().map(|d| d.pk.to_string()),
                )),
            };
            let size = deletes.len() * 16;
            descriptor
                .extras
                .insert("original_size".into(), size.to_string().into());
            payload::write(&[("pk", pk), ("ts", ts)], Compression::UNCOMPRESSED)
        }
    };
    super::encode(&descriptor, EventType::Delete, &payload)
}

fn json_entry(delete: &Delete) -> String {
    let (pk, pk_type) = match &delete.pk {
        Pk::Int(i) => (serde_json::Value::from(*i), DataType::Int64),
        Pk::VarChar(s) => (serde_json::Value::from(s.as_str()), DataType::VarChar),
    };
    serde_json::to_string(&DeleteLog {
        pk,
        ts: delete.ts,
        pk_type: pk_type as i32,
    })
    .expect("a delete log serializes")
}

/// The deletes a delta log holds, in whichever form it was written.
pub fn deletes(binlog: &Binlog<'_>) -> Result<Vec<Delete>, Error> {
    let multi_field = binlog
        .descriptor
        .extras
        .get(VERSION_KEY)
        .and_then(|v| v.as_str())
        == Some(MULTI_FIELD);
    let mut out = Vec::new();
    for event in &binlog.events {
        if event.kind != EventType::Delete {
            return Err(Error::Payload(
                "wrong binlog type, expect:DeleteEventType, actual:InsertEventType".into(),
            ));
        }
        if multi_field {
            out.extend(multi_field_deletes(event.payload)?);
        } else {
            for entry in pages::strings(event.payload)? {
                out.push(parse_entry(&entry)?);
            }
        }
    }
    Ok(out)
}

fn multi_field_deletes(payload: &[u8]) -> Result<Vec<Delete>, Error> {
    let mut out = Vec::new();
    for batch in payload::read(payload)? {
        if batch.num_columns() != 2 {
            return Err(Error::Payload(format!(
                "a multi-field delta log with {} columns, expected pk and ts",
                batch.num_columns()
            )));
        }
        let (pk, ts) = (batch.column(0), batch.column(1));
        payload::check_type(ts, DataType::Int64)?;
        let ts = ts
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("check_type saw Int64");
        let pks: Vec<Pk> = if let Some(ints) = pk.as_any().downcast_ref::<Int64Array>() {
            ints.iter()
                .map(|v| Pk::Int(v.unwrap_or_default()))
                .collect()
        } else {
            payload::check_type(pk, DataType::VarChar)?;
            let strings = pk
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("check_type saw Utf8");
            strings
                .iter()
                .map(|v| Pk::VarChar(v.unwrap_or_default().to_owned()))
                .collect()
        };
        for (pk, ts) in pks.into_iter().zip(ts.iter()) {
            out.push(Delete {
                pk,
                ts: ts.unwrap_or_default() as u64,
            });
        }
    }
    Ok(out)
}

/// `DeleteLog.Parse`: a JSON document, else the legacy `pk,ts`.
fn parse_entry(entry: &str) -> Result<Delete, Error> {
    let bad = |reason: String| Error::BadDelete {
        entry: entry.to_owned(),
        reason,
    };
    if let Ok(log) = serde_json::from_str::<DeleteLog>(entry) {
        let pk = match (DataType::try_from(log.pk_type), &log.pk) {
            (Ok(DataType::Int64), serde_json::Value::Number(n)) => Pk::Int(
                n.as_i64()
                    .ok_or_else(|| bad(format!("pk {n} is not an int64")))?,
            ),
            (Ok(DataType::VarChar), serde_json::Value::String(s)) => Pk::VarChar(s.clone()),
            _ => return Err(bad(format!("pk {} of pkType {}", log.pk, log.pk_type))),
        };
        return Ok(Delete { pk, ts: log.ts });
    }
    let (pk, ts) = entry.rsplit_once(',').ok_or_else(|| {
        bad(format!(
            "the format of delta log is incorrect, {entry} can not be split"
        ))
    })?;
    let ts = ts
        .parse::<u64>()
        .map_err(|e| bad(format!("timestamp {ts:?}: {e}")))?;
    let pk = pk
        .parse::<i64>()
        .map(Pk::Int)
        .unwrap_or_else(|_| Pk::VarChar(pk.to_owned()));
    Ok(Delete { pk, ts })
}
