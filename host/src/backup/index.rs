//! The indexes a restore creates (`rebuild_index`), as milvus-backup's DDL sends them.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::Error;
use super::meta::{CollectionBackupInfo, IndexInfo};
use super::namespace::Namespace;
use super::options::RestoreOptions;

/// Whether an index is built on a vector field (created first, subject to
/// `use_auto_index`) or a scalar one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum IndexedField {
    Vector,
    Scalar,
}

/// One index to create (with `rebuild_index`), as milvus-backup's DDL sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IndexPlan {
    pub field_name: String,
    /// Empty for scalar indexes whose backed-up name has characters Milvus refuses
    /// (JSON path indexes), letting Milvus name them.
    pub index_name: String,
    pub params: BTreeMap<String, String>,
    pub field: IndexedField,
}

/// Milvus's vector data types (`schema.DataType` 100..=106): milvus-backup treats a field
/// as a vector field when its type name ends in "vector".
fn is_vector_type(data_type: i32) -> Option<bool> {
    match data_type {
        100..=106 => Some(true),
        0..=5 | 10 | 11 | 20..=31 | 200 | 201 => Some(false),
        _ => None,
    }
}

/// milvus-backup's `createIndex`: vector indexes first (AUTOINDEX with the backup's metric
/// under `use_auto_index`, `marisa-trie` renamed `Trie`), then scalar ones (a name Milvus
/// would refuse is sent empty).
pub(super) fn plan_indexes(
    collection: &CollectionBackupInfo,
    source: &Namespace,
    options: &RestoreOptions,
) -> Result<Vec<IndexPlan>, Error> {
    let mut vector_fields = BTreeSet::new();
    for field in collection.schema.iter().flat_map(|s| &s.fields) {
        match is_vector_type(field.data_type) {
            Some(true) => {
                vector_fields.insert(field.name.as_str());
            }
            Some(false) => {}
            None => {
                return Err(Error::UnknownDataType {
                    collection: source.clone(),
                    field: field.name.clone(),
                    data_type: field.data_type,
                });
            }
        }
    }
    let (vector, scalar): (Vec<&IndexInfo>, Vec<&IndexInfo>) = collection
        .index_infos
        .iter()
        .partition(|index| vector_fields.contains(index.field_name.as_str()));
    let vector = vector.into_iter().map(|index| {
        let mut params = if options.use_auto_index {
            let metric = index.params.get("metric_type").cloned().unwrap_or_default();
            BTreeMap::from([
                ("index_type".to_owned(), "AUTOINDEX".to_owned()),
                ("metric_type".to_owned(), metric),
            ])
        } else {
            index.params.clone()
        };
        if params.get("index_type").map(String::as_str) == Some("marisa-trie") {
            params.insert("index_type".to_owned(), "Trie".to_owned());
        }
        IndexPlan {
            field_name: index.field_name.clone(),
            index_name: index.index_name.clone(),
            params,
            field: IndexedField::Vector,
        }
    });
    let scalar = scalar.into_iter().map(|index| IndexPlan {
        field_name: index.field_name.clone(),
        index_name: if has_special_char(&index.index_name) {
            String::new()
        } else {
            index.index_name.clone()
        },
        params: index.params.clone(),
        field: IndexedField::Scalar,
    });
    Ok(vector.chain(scalar).collect())
}

/// milvus-backup's `specialIndexName` (copied there from Milvus's index-name check): a
/// name that, trimmed, starts with neither a letter nor `_`, or has a character other
/// than letters, digits and `_`.
fn has_special_char(index_name: &str) -> bool {
    let name = index_name.trim();
    let Some(first) = name.chars().next() else {
        return false;
    };
    (first != '_' && !first.is_ascii_alphabetic())
        || !name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_index_names_follow_milvus_rules() {
        assert!(!has_special_char("vec_idx"));
        assert!(!has_special_char("_x1"));
        assert!(!has_special_char(""));
        assert!(has_special_char("/a/b"));
        assert!(has_special_char("1abc"));
        assert!(has_special_char("a-b"));
    }
}
