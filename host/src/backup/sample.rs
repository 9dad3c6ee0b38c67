//! A sample of a collection's rows, read from the backup's own data, for verification to
//! fetch from every end and compare field by field (`[verify] rows = "sample"`).
//!
//! The sample is the `n` keys of the collection whose hash is lowest (a bottom-k sketch):
//! spread over every segment and partition, the same keys on every run, and found in one
//! pass over the key columns, holding at most `n` keys. A key that some delete removed from
//! every row that held it must be absent on every end; a key that one live row holds must
//! show that row's values. A key that more than one live row holds (Milvus does not
//! deduplicate an import) is left out: which of them a query returns is the server's choice.
//!
//! Keys are read as [`super::rows`] reads them, with the same delete rule; the values of the
//! sampled rows are then read from their file groups only, one group's logs of one field at a
//! time.

use std::collections::BTreeMap;

use milvus_formats::binlog::{self, Delete, Pk};
use milvus_formats::column_group;
use milvus_formats::storage::StorageKind;
use milvus_formats::value::{self, Value};
use milvus_proto::schema::{DataType, FieldSchema};
use object_store::ObjectStore;

use super::BackupFile;
use super::batch::BatchKind;
use super::plan::CollectionPlan;
use super::read::BackupFiles;
use super::rows::{self, Unreadable};

/// Milvus numbers a collection's own fields from 100; below are RowID and Timestamp.
const FIRST_USER_FIELD: i64 = 100;

/// One field a sample holds, as a query names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampledField {
    pub id: i64,
    pub name: String,
    pub data_type: DataType,
}

/// One live row the backup holds: its key and each field's value, in the sample's field order.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledRow {
    pub pk: Pk,
    pub values: Vec<Value>,
}

/// What every end must show of a collection's sampled keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The primary key's name, then every other field (the dynamic field among them).
    pub fields: Vec<SampledField>,
    pub rows: Vec<SampledRow>,
    /// Keys every delete removed: no end may show them.
    pub absent: Vec<Pk>,
}

/// Where one sampled key's rows lie: each live row's (batch, group, row), and whether some
/// row of it was removed.
#[derive(Debug, Default)]
struct Seen {
    live: Vec<(usize, usize, usize)>,
    removed: bool,
}

/// The `n` keys of lowest hash, each with every row of it seen.
struct Sketch {
    n: usize,
    keys: BTreeMap<(u64, Pk), Seen>,
}

impl Sketch {
    /// Where the row's key belongs: `None` once `n` keys of lower hash are held (every row of
    /// such a key hashes as high, so none is missed).
    fn slot(&mut self, pk: &Pk) -> Option<&mut Seen> {
        let key = (hash(pk), pk.clone());
        if self.keys.len() >= self.n
            && !self.keys.contains_key(&key)
            && self
                .keys
                .last_key_value()
                .is_some_and(|(last, _)| key > *last)
        {
            return None;
        }
        if !self.keys.contains_key(&key) {
            self.keys.insert(key.clone(), Seen::default());
            if self.keys.len() > self.n {
                self.keys.pop_last();
            }
        }
        self.keys.get_mut(&key)
    }
}

/// FNV-1a over the key's bytes, then SplitMix64's finalizer: the same on every run and
/// host, and spread evenly over sequential keys.
fn hash(pk: &Pk) -> u64 {
    let bytes: Vec<u8> = match pk {
        Pk::Int(i) => i.to_le_bytes().to_vec(),
        Pk::VarChar(s) => s.as_bytes().to_vec(),
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Samples `n` keys of `collection` from the backup's data, and reads the values of those a
/// live row holds. `staged` is the plan's files to stage (sorted by path): where L0 deletes
/// were folded, the delta logs written for them are among those, not in the backup.
pub async fn sample(
    store: &dyn ObjectStore,
    backup: &BackupFiles,
    staged: &[BackupFile],
    collection: &CollectionPlan,
    n: usize,
) -> Result<Sample, Unreadable> {
    let schema = &collection.schema;
    let pk = (schema.fields.iter())
        .find(|f| f.is_primary_key)
        .ok_or_else(|| Unreadable {
            path: collection.source.to_string(),
            reason: "the collection's schema has no primary key".into(),
        })?;
    let l0 = rows::l0_deletes(store, backup, collection).await?;
    let mut sketch = Sketch {
        n,
        keys: BTreeMap::new(),
    };
    for (b, batch) in collection.batches.iter().enumerate() {
        if batch.kind != BatchKind::Data {
            continue;
        }
        let kind = rows::storage_kind(batch)?;
        let partition = batch.partition.as_deref().unwrap_or_default();
        for (g, group) in batch.files.iter().enumerate() {
            let Some(insert) = group.first() else {
                continue;
            };
            let keys = rows::group_rows(store, backup, kind, insert, pk.field_id).await?;
            let mut deletes = match group.get(1).filter(|d| !d.is_empty()) {
                Some(prefix) => {
                    let mut read = rows::group_deletes(store, backup, kind, prefix).await?;
                    read.extend(written_deletes(staged, prefix)?);
                    read
                }
                None => Vec::new(),
            };
            deletes.extend(l0.hits(partition, &keys));
            let removed = binlog::removed(keys.iter().map(|(pk, ts)| (pk, *ts)), &deletes);
            for (index, ((key, _), gone)) in keys.iter().zip(removed).enumerate() {
                if let Some(seen) = sketch.slot(key) {
                    match gone {
                        true => seen.removed = true,
                        false => seen.live.push((b, g, index)),
                    }
                }
            }
        }
    }

    let fields: Vec<&FieldSchema> = std::iter::once(pk)
        .chain(
            (schema.fields.iter()).filter(|f| !f.is_primary_key && f.field_id >= FIRST_USER_FIELD),
        )
        .collect();
    let mut absent = Vec::new();
    // By group: (row in group, key), sorted by row.
    let mut by_group: BTreeMap<(usize, usize), Vec<(usize, Pk)>> = BTreeMap::new();
    for ((_, key), seen) in sketch.keys {
        match seen.live.as_slice() {
            [] if seen.removed => absent.push(key),
            [(b, g, index)] => by_group.entry((*b, *g)).or_default().push((*index, key)),
            _ => {}
        }
    }
    let mut rows = Vec::new();
    for ((b, g), mut wanted) in by_group {
        wanted.sort_unstable_by_key(|(index, _)| *index);
        let batch = &collection.batches[b];
        let kind = rows::storage_kind(batch)?;
        let at: Vec<usize> = wanted.iter().map(|(index, _)| *index).collect();
        let columns = group_values(store, backup, kind, &batch.files[g][0], &fields, &at).await?;
        for (i, (_, pk)) in wanted.into_iter().enumerate() {
            rows.push(SampledRow {
                pk,
                values: columns.iter().map(|c| c[i].clone()).collect(),
            });
        }
    }
    Ok(Sample {
        fields: (fields.iter())
            .map(|f| SampledField {
                id: f.field_id,
                name: f.name.clone(),
                data_type: data_type(f),
            })
            .collect(),
        rows,
        absent,
    })
}

/// The deletes of the delta logs the plan wrote under `prefix` (folded L0 deletes).
fn written_deletes(staged: &[BackupFile], prefix: &str) -> Result<Vec<Delete>, Unreadable> {
    let from = staged.partition_point(|f| f.path.as_str() < prefix);
    let mut deletes = Vec::new();
    for file in staged[from..]
        .iter()
        .take_while(|f| f.path.starts_with(prefix))
    {
        if let Some(bytes) = &file.written {
            let read = binlog::parse(bytes).and_then(|log| binlog::deletes(&log));
            deletes.extend(read.map_err(|e| Unreadable {
                path: file.path.clone(),
                reason: e.to_string(),
            })?);
        }
    }
    Ok(deletes)
}

/// A field's Milvus type; `None` for a type this build does not know (its values then read as
/// bytes).
fn data_type(field: &FieldSchema) -> DataType {
    DataType::try_from(field.data_type).unwrap_or(DataType::None)
}

/// The values of rows `at` (sorted) of each of `fields` in the group under `prefix`: one
/// column per field. A field the group has no data for (added to the collection after the
/// segment was written) shows its default, or null.
async fn group_values(
    store: &dyn ObjectStore,
    backup: &BackupFiles,
    kind: StorageKind,
    prefix: &str,
    fields: &[&FieldSchema],
    at: &[usize],
) -> Result<Vec<Vec<Value>>, Unreadable> {
    let mut columns: Vec<Vec<Value>> = vec![Vec::with_capacity(at.len()); fields.len()];
    let mut first = vec![0usize; fields.len()];
    for (path, _) in backup.binlogs.under(prefix) {
        let bad = |reason: String| Unreadable {
            path: path.to_owned(),
            reason,
        };
        let field_dir = rows::field_dir(path);
        let wanted = |id: i64| match kind {
            StorageKind::Binlog => field_dir == Some(id),
            // A column group's directory is not a field id: every file is looked in.
            StorageKind::ColumnGroup => true,
        };
        if !fields.iter().any(|f| wanted(f.field_id)) {
            continue;
        }
        let bytes = rows::get(store, backup, path).await?;
        for (i, field) in fields.iter().enumerate() {
            if !wanted(field.field_id) {
                continue;
            }
            let picked = match kind {
                StorageKind::Binlog => binlog::parse(&bytes)
                    .and_then(|log| binlog::values(&log, first[i], at))
                    .map(Some)
                    .map_err(|e| bad(e.to_string()))?,
                StorageKind::ColumnGroup => {
                    column_group::values(&bytes, field.field_id, data_type(field), first[i], at)
                        .map_err(|e| bad(e.to_string()))?
                }
            };
            if let Some(picked) = picked {
                first[i] += picked.rows;
                columns[i].extend(picked.values.into_iter().map(|(_, v)| v));
            }
        }
    }
    for (i, field) in fields.iter().enumerate() {
        if first[i] == 0 {
            columns[i] = match (&field.default_value, field.nullable) {
                (Some(default), _) => vec![value::from_default(default); at.len()],
                (None, true) => vec![Value::Null; at.len()],
                (None, false) => {
                    return Err(Unreadable {
                        path: prefix.to_owned(),
                        reason: format!("no data of field {} ({})", field.name, field.field_id),
                    });
                }
            };
        } else if columns[i].len() != at.len() {
            return Err(Unreadable {
                path: prefix.to_owned(),
                reason: format!(
                    "field {} holds {} rows, fewer than its key column",
                    field.name, first[i]
                ),
            });
        }
    }
    Ok(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sketch_keeps_the_lowest_hashes_whatever_the_order_rows_come_in() {
        let keys: Vec<Pk> = (0..500).map(Pk::Int).collect();
        let kept = |order: &mut dyn Iterator<Item = &Pk>| {
            let mut sketch = Sketch {
                n: 20,
                keys: BTreeMap::new(),
            };
            for pk in order {
                if let Some(seen) = sketch.slot(pk) {
                    seen.live.push((0, 0, 0));
                }
            }
            sketch.keys.into_keys().collect::<Vec<_>>()
        };
        let forward = kept(&mut keys.iter());
        let backward = kept(&mut keys.iter().rev());
        assert_eq!(forward.len(), 20);
        assert_eq!(forward, backward);
        let mut all: Vec<(u64, Pk)> = keys.iter().map(|k| (hash(k), k.clone())).collect();
        all.sort();
        assert_eq!(forward, all[..20]);
        // Spread: not the first keys.
        assert!(forward.iter().any(|(_, k)| *k > Pk::Int(100)));
    }

    #[test]
    fn a_key_seen_again_collects_every_row_of_it() {
        let mut sketch = Sketch {
            n: 1,
            keys: BTreeMap::new(),
        };
        let pk = Pk::Int(7);
        sketch.slot(&pk).expect("room").live.push((0, 0, 1));
        sketch.slot(&pk).expect("held").removed = true;
        let seen = sketch.keys.values().next().expect("one key");
        assert_eq!((seen.live.len(), seen.removed), (1, true));
    }
}
