//! The queries a restore's verification sends, answered from the data the collection's
//! Completed imports hold once it is loaded: `count(*)` of the collection or of some
//! partitions, and the rows of a list of primary keys (`pk in [...]`) with the fields named.
//! The values are read from the imported binlogs, so a row shows what its files hold. Other
//! expressions are refused as ones Milvus cannot parse.

use std::collections::{BTreeMap, HashSet};

use milvus_formats::binlog::Pk;
use milvus_formats::value::{self, Value};
use milvus_proto::milvus::{QueryRequest, QueryResults};
use milvus_proto::schema::{DataType, FieldSchema};

use crate::cluster::{Cluster, FoundRow};
use crate::merr::{self, MilvusError, code};
use crate::version::ImportFace;

/// Milvus's code for an expression or output field it cannot use.
const CANNOT_PARSE: i32 = 1100;

/// What a query asks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Query {
    Count,
    /// The rows whose primary key (the field named) is one of these.
    Keys {
        field: String,
        keys: Vec<Pk>,
    },
}

fn cannot_parse(req: &QueryRequest, why: &str) -> MilvusError {
    MilvusError::new(
        CANNOT_PARSE,
        format!(
            "cannot parse expression: {:?} with output fields {:?}: {why}",
            req.expr, req.output_fields
        ),
    )
}

fn parse(req: &QueryRequest) -> Result<Query, MilvusError> {
    let expr = req.expr.trim();
    if expr.is_empty() {
        return match req.output_fields.as_slice() {
            [one] if one == "count(*)" => Ok(Query::Count),
            _ => Err(cannot_parse(req, "an empty expression counts only")),
        };
    }
    let (field, list) = expr
        .split_once(" in ")
        .ok_or_else(|| cannot_parse(req, "only `field in [...]` is understood"))?;
    let list = list
        .trim()
        .strip_prefix('[')
        .and_then(|l| l.strip_suffix(']'))
        .ok_or_else(|| cannot_parse(req, "the list is not in brackets"))?;
    let keys = literals(list).ok_or_else(|| cannot_parse(req, "a list of ints or strings"))?;
    Ok(Query::Keys {
        field: field.trim().to_owned(),
        keys,
    })
}

/// Comma-separated integers, or double-quoted strings with `\` escapes.
fn literals(list: &str) -> Option<Vec<Pk>> {
    let mut out = Vec::new();
    let mut chars = list.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.peek() {
            None => return Some(out),
            Some('"') => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next()? {
                        '\\' => s.push(chars.next()?),
                        '"' => break,
                        c => s.push(c),
                    }
                }
                out.push(Pk::VarChar(s));
            }
            Some(_) => {
                let mut digits = String::new();
                while let Some(c) = chars.next_if(|c| *c == '-' || c.is_ascii_digit()) {
                    digits.push(c);
                }
                out.push(Pk::Int(digits.parse().ok()?));
            }
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.next() {
            None => return Some(out),
            Some(',') => {}
            Some(_) => return None,
        }
    }
}

/// The proxy's refusal of a query naming partitions of a partition-key collection (its
/// `PreExecute`, before the load state is looked at; docs/milvus-facts.md §4.5): an input
/// error, 1100, from 3.0; a plain error, 65535, on older servers (seen on 2.3.5).
fn refuse_partition_names(cluster: &Cluster) -> MilvusError {
    const RULE: &str =
        "not support manually specifying the partition names if partition key mode is used";
    if cluster.import_face() == ImportFace::TwoPhase {
        MilvusError::new(
            code::PARAMETER_INVALID,
            format!("{RULE}: invalid parameter"),
        )
    } else {
        MilvusError::new(code::UNEXPECTED, RULE)
    }
}

/// The answer to `req` on `cluster`.
pub async fn answer(cluster: &Cluster, req: QueryRequest) -> Result<QueryResults, MilvusError> {
    let db = crate::catalog::db_or_default(&req.db_name).to_owned();
    let (loaded, keyed) = cluster.with_catalog(|c| {
        c.collection(&db, &req.collection_name)
            .map(|coll| (coll.loaded, coll.has_partition_key()))
    })?;
    if keyed
        && !req.partition_names.is_empty()
        && cluster.spec().partition_key_refuses_partition_names
    {
        return Err(refuse_partition_names(cluster));
    }
    if !loaded {
        return Err(MilvusError::new(
            101,
            format!("collection not loaded[collection={}]", req.collection_name),
        ));
    }
    let partitions = (!req.partition_names.is_empty()).then_some(req.partition_names.as_slice());
    let fields_data = match parse(&req)? {
        Query::Count => {
            let n = cluster.count_rows(&db, &req.collection_name, partitions)?;
            vec![value::to_field_data(
                "count(*)",
                0,
                DataType::Int64,
                0,
                &[Value::Int(n)],
            )]
        }
        Query::Keys { field, keys } => {
            let wanted: HashSet<Pk> = keys.into_iter().collect();
            let (schema, found) =
                cluster.rows_with_keys(&db, &req.collection_name, partitions, &wanted)?;
            let pk = (schema.fields.iter())
                .find(|f| f.is_primary_key)
                .ok_or_else(|| cannot_parse(&req, "the collection has no primary key"))?;
            if pk.name != field {
                return Err(cannot_parse(&req, "only the primary key is filtered on"));
            }
            let mut outputs = vec![pk];
            for name in &req.output_fields {
                let f = (schema.fields.iter())
                    .find(|f| &f.name == name)
                    .ok_or_else(|| cannot_parse(&req, &format!("field {name} not exist")))?;
                if !outputs.iter().any(|o| o.field_id == f.field_id) {
                    outputs.push(f);
                }
            }
            rows(cluster, &outputs, &found).await?
        }
    };
    Ok(QueryResults {
        status: Some(merr::success()),
        output_fields: fields_data.iter().map(|f| f.field_name.clone()).collect(),
        fields_data,
        collection_name: req.collection_name,
        ..Default::default()
    })
}

/// The fields `outputs` of the rows `found`, read from their files.
async fn rows(
    cluster: &Cluster,
    outputs: &[&FieldSchema],
    found: &[FoundRow],
) -> Result<Vec<milvus_proto::schema::FieldData>, MilvusError> {
    let ids: Vec<i64> = outputs.iter().map(|f| f.field_id).collect();
    let mut by_group: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for row in found {
        by_group
            .entry(&row.insert_prefix)
            .or_default()
            .push(row.index);
    }
    let store = cluster.import_store();
    let mut columns: Vec<Vec<Value>> = vec![Vec::new(); outputs.len()];
    for (prefix, rows) in &mut by_group {
        rows.sort_unstable();
        let read = crate::import_reader::read_values(store.source(), prefix, &ids, rows)
            .await
            .map_err(|e| MilvusError::new(65535, format!("cannot read the rows: {e}")))?;
        let changed: Vec<bool> = (rows.iter())
            .map(|i| {
                found
                    .iter()
                    .any(|r| r.changed && r.insert_prefix == *prefix && r.index == *i)
            })
            .collect();
        for (column, field) in columns.iter_mut().zip(outputs) {
            let mut values = read.get(&field.field_id).cloned().unwrap_or_default();
            // The changed-row fault changes the row's first field after its key.
            if !field.is_primary_key && field.field_id == first_value_field(outputs) {
                for (value, _) in values.iter_mut().zip(&changed).filter(|(_, c)| **c) {
                    *value = changed_value(value);
                }
            }
            column.extend(values);
        }
    }
    Ok(outputs
        .iter()
        .zip(&columns)
        .map(|(f, values)| {
            let mut data = value::to_field_data(&f.name, f.field_id, data_type(f), dim(f), values);
            data.is_dynamic = f.is_dynamic;
            data
        })
        .collect())
}

fn first_value_field(outputs: &[&FieldSchema]) -> i64 {
    (outputs.iter())
        .find(|f| !f.is_primary_key)
        .map_or(-1, |f| f.field_id)
}

/// `value` with one change a comparison of values finds and a count does not.
fn changed_value(value: &Value) -> Value {
    match value {
        Value::Null => Value::Int(0),
        Value::Bool(b) => Value::Bool(!b),
        Value::Int(i) => Value::Int(i.wrapping_add(1)),
        Value::Float(bits) => Value::Float(bits ^ 1),
        Value::Double(bits) => Value::Double(bits ^ 1),
        Value::String(s) => Value::String(format!("{s}~")),
        Value::Json(_) => Value::Json(br#"{"changed":true}"#.to_vec()),
        Value::Array(b) | Value::Bytes(b) => {
            let mut b = b.clone();
            if let Some(last) = b.last_mut() {
                *last ^= 1;
            }
            Value::Bytes(b)
        }
    }
}

fn data_type(field: &FieldSchema) -> DataType {
    DataType::try_from(field.data_type).unwrap_or(DataType::None)
}

fn dim(field: &FieldSchema) -> i64 {
    (field.type_params.iter())
        .find(|kv| kv.key == "dim")
        .and_then(|kv| kv.value.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(expr: &str, output: &[&str]) -> QueryRequest {
        QueryRequest {
            expr: expr.into(),
            output_fields: output.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn key_lists_parse_and_other_expressions_are_refused() {
        assert_eq!(parse(&req("", &["count(*)"])), Ok(Query::Count));
        assert_eq!(
            parse(&req("id in [1, -2,3]", &["v"])),
            Ok(Query::Keys {
                field: "id".into(),
                keys: vec![Pk::Int(1), Pk::Int(-2), Pk::Int(3)],
            })
        );
        assert_eq!(
            parse(&req(r#"name in ["a", "b\"c"]"#, &[])),
            Ok(Query::Keys {
                field: "name".into(),
                keys: vec![Pk::VarChar("a".into()), Pk::VarChar("b\"c".into())],
            })
        );
        for bad in ["id > 3", "id in 1, 2", "id in [1 2]", r#"id in ["a]"#] {
            let e = parse(&req(bad, &[])).expect_err(bad);
            assert_eq!(e.code, CANNOT_PARSE, "{bad}");
        }
        assert!(parse(&req("", &["v"])).is_err());
    }
}
