//! Reads what an import job names from the cluster's own object storage: every file of every
//! group, or for binlog imports everything under each prefix. Each cluster reads its own
//! storage, so a file missing on a secondary fails only the mirror (reference §2.4).
//!
//! Binlog objects use the sim's format, defined once in [`crate::fixtures::binlog`] (which
//! `gen-backup` writes): a header naming the log kind and its row count, then payload. The
//! field id of an insert object is the second-to-last path component
//! (`.../insert_log/{coll}/{part}/{group}/{seg}/{field}/{logID}`).
//!
//! Failure reasons name the path. Milvus's exact object-not-found text depends on the storage
//! backend; "key not found[key=...]" is merr's `ErrIoKeyNotFound` wording, and "no binlog to
//! import" is the reason milvus-backup users report for an empty prefix ([infer] for the rest).

use std::collections::BTreeMap;

use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt, path::Path};

use crate::fixtures::binlog::{LogContent, read_header};
use crate::jobs::{GroupResult, ManifestEntry};
use crate::options::ImportSource;

/// Why a job could not read its files; the Display text is the job's failure reason.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no binlog to import, prefix={prefix}: key not found[key={prefix}]")]
    EmptyPrefix { prefix: String },
    #[error("failed to read {path}: The specified key does not exist.: key not found[key={path}]")]
    ObjectNotFound { path: String },
    #[error("failed to parse binlog {path}: {detail}")]
    BadBinlog { path: String, detail: String },
    #[error("failed to parse file {path}: {detail}")]
    BadRowFile { path: String, detail: String },
    #[error("unsupported file type: {path}")]
    UnsupportedFileType { path: String },
    #[error("import file group {index} is empty")]
    EmptyGroup { index: usize },
    #[error("failed to access {path}: {source}")]
    Storage {
        path: String,
        #[source]
        source: object_store::Error,
    },
}

/// Everything a job imported.
#[derive(Debug, Default)]
pub struct ReadOutcome {
    pub groups: Vec<GroupResult>,
    pub manifest: Vec<ManifestEntry>,
    pub rows: i64,
    pub deleted_rows: i64,
}

/// Import paths are bucket-relative; a leading `/` is dropped.
fn object_path(raw: &str) -> Result<Path, ReadError> {
    Path::parse(raw.trim_start_matches('/')).map_err(|_| ReadError::ObjectNotFound {
        path: raw.to_owned(),
    })
}

async fn get(store: &dyn ObjectStore, path: &Path) -> Result<bytes::Bytes, ReadError> {
    let result = store.get(path).await.map_err(|e| match e {
        object_store::Error::NotFound { .. } => ReadError::ObjectNotFound {
            path: path.to_string(),
        },
        source => ReadError::Storage {
            path: path.to_string(),
            source,
        },
    })?;
    result.bytes().await.map_err(|source| ReadError::Storage {
        path: path.to_string(),
        source,
    })
}

async fn list(store: &dyn ObjectStore, prefix: &str) -> Result<Vec<Path>, ReadError> {
    let prefix_path = object_path(prefix)?;
    let mut paths: Vec<Path> = store
        .list(Some(&prefix_path))
        .map_ok(|meta| meta.location)
        .try_collect()
        .await
        .map_err(|source| ReadError::Storage {
            path: prefix.to_owned(),
            source,
        })?;
    if paths.is_empty() {
        return Err(ReadError::EmptyPrefix {
            prefix: prefix.to_owned(),
        });
    }
    paths.sort();
    Ok(paths)
}

/// Which log a binlog prefix must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExpectedLog {
    Insert,
    Delta,
}

/// Reads a binlog header and returns its row count (deletes for a delta log), refusing an
/// object that is not the `expected` kind of log.
fn binlog_rows(path: &Path, bytes: &[u8], expected: ExpectedLog) -> Result<i64, ReadError> {
    let bad = |detail: String| ReadError::BadBinlog {
        path: path.to_string(),
        detail,
    };
    let count = match (
        read_header(bytes).map_err(|e| bad(e.to_string()))?,
        expected,
    ) {
        (LogContent::Insert { rows }, ExpectedLog::Insert) => rows,
        (LogContent::Delta { deletes }, ExpectedLog::Delta) => deletes,
        (LogContent::Delta { .. }, ExpectedLog::Insert) => {
            return Err(bad("a delta log where an insert log was expected".into()));
        }
        (LogContent::Insert { .. }, ExpectedLog::Delta) => {
            return Err(bad("an insert log where a delta log was expected".into()));
        }
    };
    i64::try_from(count).map_err(|_| bad(format!("row count {count} does not fit in int64")))
}

fn manifest_entry(path: &Path, bytes: &[u8]) -> ManifestEntry {
    ManifestEntry {
        path: path.to_string(),
        size: bytes.len() as u64,
        crc32c: crc32c::crc32c(bytes),
    }
}

/// Reads every group of a job. `primary_field_id` decides which insert objects count rows.
pub async fn read_groups(
    store: &dyn ObjectStore,
    source: ImportSource,
    groups: &[Vec<String>],
    primary_field_id: Option<i64>,
) -> Result<ReadOutcome, ReadError> {
    let mut outcome = ReadOutcome::default();
    for (index, group) in groups.iter().enumerate() {
        if group.is_empty() {
            return Err(ReadError::EmptyGroup { index });
        }
        let result = match source {
            ImportSource::Binlogs => {
                read_binlog_group(
                    store,
                    &group[0],
                    group.get(1).map(String::as_str),
                    primary_field_id,
                    &mut outcome.manifest,
                )
                .await?
            }
            ImportSource::L0Deltas => {
                read_binlog_group(store, "", Some(&group[0]), None, &mut outcome.manifest).await?
            }
            ImportSource::RowFiles => read_row_group(store, group, &mut outcome.manifest).await?,
        };
        outcome.rows += result.rows;
        outcome.deleted_rows += result.deleted_rows;
        outcome.groups.push(GroupResult {
            files: group.clone(),
            ..result
        });
    }
    Ok(outcome)
}

async fn read_binlog_group(
    store: &dyn ObjectStore,
    insert_prefix: &str,
    delta_prefix: Option<&str>,
    primary_field_id: Option<i64>,
    manifest: &mut Vec<ManifestEntry>,
) -> Result<GroupResult, ReadError> {
    let mut result = GroupResult::default();
    if !insert_prefix.is_empty() {
        let mut rows_by_field: BTreeMap<i64, i64> = BTreeMap::new();
        for path in list(store, insert_prefix).await? {
            let bytes = get(store, &path).await?;
            let rows = binlog_rows(&path, &bytes, ExpectedLog::Insert)?;
            let parts: Vec<_> = path.parts().collect();
            let field_id = parts
                .len()
                .checked_sub(2)
                .and_then(|i| parts[i].as_ref().parse::<i64>().ok())
                .ok_or_else(|| ReadError::BadBinlog {
                    path: path.to_string(),
                    detail: "the second-to-last path component is not a field id".into(),
                })?;
            *rows_by_field.entry(field_id).or_default() += rows;
            result.size += bytes.len() as u64;
            manifest.push(manifest_entry(&path, &bytes));
        }
        result.rows = primary_field_id
            .and_then(|pk| rows_by_field.get(&pk).copied())
            .or_else(|| rows_by_field.values().next().copied())
            .unwrap_or(0);
    }
    if let Some(prefix) = delta_prefix {
        for path in list(store, prefix).await? {
            let bytes = get(store, &path).await?;
            result.deleted_rows += binlog_rows(&path, &bytes, ExpectedLog::Delta)?;
            result.size += bytes.len() as u64;
            manifest.push(manifest_entry(&path, &bytes));
        }
    }
    Ok(result)
}

async fn read_row_group(
    store: &dyn ObjectStore,
    files: &[String],
    manifest: &mut Vec<ManifestEntry>,
) -> Result<GroupResult, ReadError> {
    let mut result = GroupResult::default();
    for file in files {
        let path = object_path(file)?;
        let extension = file.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
        let rows_of: fn(&[u8]) -> Result<i64, String> = match extension.as_deref() {
            Some("json") => json_rows,
            Some("csv") => csv_rows,
            _ => return Err(ReadError::UnsupportedFileType { path: file.clone() }),
        };
        let bytes = get(store, &path).await?;
        result.rows += rows_of(&bytes).map_err(|detail| ReadError::BadRowFile {
            path: file.clone(),
            detail,
        })?;
        result.size += bytes.len() as u64;
        manifest.push(manifest_entry(&path, &bytes));
    }
    Ok(result)
}

/// Milvus's JSON row format is `{"rows": [...]}`; a top-level array is accepted too.
fn json_rows(bytes: &[u8]) -> Result<i64, String> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let rows = match &value {
        serde_json::Value::Array(rows) => rows,
        serde_json::Value::Object(map) => match map.get("rows") {
            Some(serde_json::Value::Array(rows)) => rows,
            _ => return Err("expected {\"rows\": [...]} or a JSON array of rows".into()),
        },
        _ => return Err("expected {\"rows\": [...]} or a JSON array of rows".into()),
    };
    Ok(rows.len() as i64)
}

/// A CSV file's rows are its non-empty lines after the header.
fn csv_rows(bytes: &[u8]) -> Result<i64, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    if lines == 0 {
        return Err("missing header line".into());
    }
    Ok(lines as i64 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::binlog::{encode_delta, encode_insert};
    use object_store::{PutPayload, memory::InMemory};

    async fn put(store: &InMemory, path: &str, bytes: Vec<u8>) {
        store
            .put(&Path::from(path), PutPayload::from(bytes))
            .await
            .expect("put");
    }

    #[tokio::test]
    async fn binlog_group_counts_primary_key_rows_and_deletes() {
        let store = InMemory::new();
        let ins = "bk/binlogs/insert_log/1/2/3";
        put(&store, &format!("{ins}/30/100/1"), encode_insert(7, 1, 1)).await;
        put(&store, &format!("{ins}/30/100/2"), encode_insert(5, 1, 2)).await;
        put(&store, &format!("{ins}/30/101/3"), encode_insert(12, 7, 3)).await;
        put(
            &store,
            "bk/binlogs/delta_log/1/2/3/30/9",
            encode_delta(&[(1, 10), (2, 11)]),
        )
        .await;
        let groups = vec![vec![
            format!("{ins}/"),
            "/bk/binlogs/delta_log/1/2/3/".into(),
        ]];
        let out = read_groups(&store, ImportSource::Binlogs, &groups, Some(100))
            .await
            .expect("reads");
        assert_eq!((out.rows, out.deleted_rows, out.manifest.len()), (12, 2, 4));
        assert_eq!(
            out.manifest[0].crc32c,
            crc32c::crc32c(&encode_insert(7, 1, 1))
        );
        // Without a known primary key the smallest field id counts.
        let out = read_groups(&store, ImportSource::Binlogs, &groups, None)
            .await
            .expect("reads");
        assert_eq!(out.rows, 12);
    }

    #[tokio::test]
    async fn failures_name_the_path() {
        let store = InMemory::new();
        let missing = read_groups(&store, ImportSource::Binlogs, &[vec!["nope/".into()]], None)
            .await
            .expect_err("empty prefix");
        assert!(
            missing.to_string().contains("key not found[key=nope/]"),
            "{missing}"
        );
        put(&store, "bad/1/100/1", b"MSIMINS1\x01".to_vec()).await;
        let short = read_groups(&store, ImportSource::Binlogs, &[vec!["bad".into()]], None)
            .await
            .expect_err("short object");
        assert!(
            short
                .to_string()
                .starts_with("failed to parse binlog bad/1/100/1:"),
            "{short}"
        );
        put(&store, "x/1/100/1", encode_delta(&[(1, 10)])).await;
        let kind = read_groups(&store, ImportSource::Binlogs, &[vec!["x".into()]], None)
            .await
            .expect_err("a delta log under an insert prefix");
        assert_eq!(
            kind.to_string(),
            "failed to parse binlog x/1/100/1: a delta log where an insert log was expected"
        );
        put(&store, "p/1/100/1", b"PAR1 not a sim binlog".to_vec()).await;
        let magic = read_groups(&store, ImportSource::Binlogs, &[vec!["p".into()]], None)
            .await
            .expect_err("foreign magic");
        assert_eq!(
            magic.to_string(),
            r#"failed to parse binlog p/1/100/1: log object starts with "PAR1 not", not "MSIMINS1" or "MSIMDEL1""#
        );
        let not_found = read_groups(
            &store,
            ImportSource::RowFiles,
            &[vec!["a.json".into()]],
            None,
        )
        .await
        .expect_err("missing file");
        assert!(
            not_found.to_string().contains("key not found[key=a.json]"),
            "{not_found}"
        );
        let parquet = read_groups(
            &store,
            ImportSource::RowFiles,
            &[vec!["a.parquet".into()]],
            None,
        )
        .await
        .expect_err("parquet");
        assert_eq!(parquet.to_string(), "unsupported file type: a.parquet");
    }

    #[tokio::test]
    async fn row_files_count_rows() {
        let store = InMemory::new();
        put(
            &store,
            "r/a.json",
            br#"{"rows":[{"id":1},{"id":2}]}"#.to_vec(),
        )
        .await;
        put(&store, "r/b.json", br#"[{"id":3}]"#.to_vec()).await;
        put(&store, "r/c.csv", b"id,v\n1,a\n2,b\n\n".to_vec()).await;
        let groups = vec![
            vec!["r/a.json".into()],
            vec!["r/b.json".into()],
            vec!["r/c.csv".into()],
        ];
        let out = read_groups(&store, ImportSource::RowFiles, &groups, None)
            .await
            .expect("reads");
        assert_eq!(
            out.groups.iter().map(|g| g.rows).collect::<Vec<_>>(),
            [2, 1, 2]
        );
        assert_eq!(out.rows, 5);
    }
}
