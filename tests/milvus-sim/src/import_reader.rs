//! Reads what an import job names from the cluster's own object storage: every file of every
//! group, or for binlog imports everything under each prefix. Each cluster reads its own
//! storage, so a file missing on a secondary fails only the mirror (docs/milvus-facts.md §2.5).
//!
//! Binlog objects are Milvus's own ([`milvus_formats::binlog`], which `gen-backup` writes too); rows are
//! counted from their payloads. The field id of an insert object is the second-to-last path
//! component (`.../insert_log/{coll}/{part}/{group}/{seg}/{field}/{logID}`), and must be the
//! one its descriptor names.
//!
//! Failure reasons name the path. Milvus's exact object-not-found text depends on the storage
//! backend; "key not found[key=...]" is merr's `ErrIoKeyNotFound` wording, and "no binlog to
//! import" is the reason milvus-backup users report for an empty prefix ([infer] for the rest).

use std::collections::BTreeMap;

use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt, path::Path};

use milvus_proto::schema::{CollectionSchema, DataType, FieldSchema};

use crate::jobs::{GroupResult, ImportedData, ManifestEntry, Row};
use crate::options::ImportSource;
use milvus_formats::binlog;
use milvus_formats::value::Value;

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
    /// Milvus's binlog reader (`verify`) refuses a segment whose fields do not all have
    /// binlogs, or whose fields have different numbers of them: part of it is missing.
    #[error("no binlog for {field}, prefix={prefix}")]
    NoFieldBinlog { field: String, prefix: String },
    #[error("misaligned binlog count, field{field}:{count}, field0:{row_ids}, prefix={prefix}")]
    MisalignedBinlogs {
        field: i64,
        count: usize,
        row_ids: usize,
        prefix: String,
    },
    /// [infer] wording: Milvus fails such a segment when it assembles rows.
    #[error(
        "imported rows are not aligned, field{field}:{rows} rows, field0:{row_ids} rows, prefix={prefix}"
    )]
    UnalignedRows {
        field: i64,
        rows: i64,
        row_ids: i64,
        prefix: String,
    },
    #[error("failed to access {path}: {source}")]
    Storage {
        path: String,
        #[source]
        source: object_store::Error,
    },
}

/// Everything a job imported.
#[derive(Debug)]
pub struct ReadOutcome {
    pub groups: Vec<GroupResult>,
    pub manifest: Vec<ManifestEntry>,
    pub rows: i64,
    pub deleted_rows: i64,
    pub data: ImportedData,
}

impl Default for ReadOutcome {
    fn default() -> Self {
        ReadOutcome {
            groups: Vec::new(),
            manifest: Vec::new(),
            rows: 0,
            deleted_rows: 0,
            data: ImportedData {
                keys: Some(Vec::new()),
                deletes: Vec::new(),
                first_removed: None,
                changed: None,
                kept: Vec::new(),
                max_row_ts: None,
            },
        }
    }
}

/// What an import reads from: a store, and the directory it keeps its files in when it is a
/// local one. There listing and keeping go through the file system: the store's own listing
/// stats every file and maps each name through a `file://` URL, and its copy probes for the
/// target, makes each parent directory on a miss and renames a temporary link; with three
/// ends importing a 1,000-collection restore in one process those were a fifth of the
/// emulator's CPU.
#[derive(Clone, Copy)]
pub struct Source<'a> {
    pub store: &'a dyn ObjectStore,
    pub dir: Option<&'a std::path::Path>,
}

impl<'a> Source<'a> {
    /// A store read through its own calls alone.
    pub fn of(store: &'a dyn ObjectStore) -> Self {
        Source { store, dir: None }
    }
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

/// The paths of the objects under `prefix`, sorted.
async fn list(from: Source<'_>, prefix: &str) -> Result<Vec<Path>, ReadError> {
    let prefix_path = object_path(prefix)?;
    let failed = |source| ReadError::Storage {
        path: prefix.to_owned(),
        source,
    };
    let paths: Vec<Path> = match from.dir {
        Some(dir) => {
            let dir = dir.join(prefix_path.as_ref());
            blocking(move || walk(&dir, &prefix_path))
                .await
                .map_err(failed)?
        }
        None => from
            .store
            .list(Some(&prefix_path))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(failed)?,
    };
    sorted_found(paths, prefix)
}

/// The objects under `prefix`, sorted by path, each with its bytes. In a local directory one
/// blocking call walks and reads them all: through the store, each object's `get` hands off
/// to a blocking thread twice, and with three ends importing 40,000 segments each those
/// hand-offs, not the reading, were most of the emulator's time. A segment's objects are
/// held at once, which bounds the memory by the largest segment, as Milvus's reader is.
async fn read_objects(
    from: Source<'_>,
    prefix: &str,
) -> Result<Vec<(Path, bytes::Bytes)>, ReadError> {
    let Some(root) = from.dir else {
        let mut objects = Vec::new();
        for path in list(from, prefix).await? {
            let bytes = get(from.store, &path).await?;
            objects.push((path, bytes));
        }
        return Ok(objects);
    };
    let prefix_path = object_path(prefix)?;
    let (root, owned) = (root.to_path_buf(), prefix.to_owned());
    let read = tokio::task::spawn_blocking(move || -> Result<_, ReadError> {
        let failed = |path: &Path, e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => ReadError::ObjectNotFound {
                path: path.to_string(),
            },
            _ => ReadError::Storage {
                path: path.to_string(),
                source: io_error(e),
            },
        };
        let paths = walk(&root.join(prefix_path.as_ref()), &prefix_path)
            .map_err(|e| failed(&prefix_path, e))?;
        sorted_found(paths, &owned)?
            .into_iter()
            .map(|path| match std::fs::read(root.join(path.as_ref())) {
                Ok(bytes) => Ok((path, bytes.into())),
                Err(e) => Err(failed(&path, e)),
            })
            .collect()
    });
    read.await.unwrap_or_else(|e| {
        Err(ReadError::Storage {
            path: prefix.to_owned(),
            source: io_error(std::io::Error::other(e)),
        })
    })
}

/// `paths` sorted; an empty prefix is an error, as Milvus's reader makes it.
fn sorted_found(mut paths: Vec<Path>, prefix: &str) -> Result<Vec<Path>, ReadError> {
    if paths.is_empty() {
        return Err(ReadError::EmptyPrefix {
            prefix: prefix.to_owned(),
        });
    }
    paths.sort();
    Ok(paths)
}

/// What an insert binlog of `field` (found in `field_id`'s directory) holds: its row count,
/// and the values of the two fields deletes are matched on (the primary key, Timestamp).
/// Milvus maps a binlog to a column by its descriptor's field id, so an object filed under
/// another field's directory is refused rather than read into the wrong column.
fn read_insert(
    path: &Path,
    bytes: &[u8],
    field_id: i64,
    field: Option<&FieldSchema>,
) -> Result<InsertLog, ReadError> {
    let bad = |detail: String| ReadError::BadBinlog {
        path: path.to_string(),
        detail,
    };
    let log = binlog::parse(bytes).map_err(|e| bad(e.to_string()))?;
    if log.descriptor.field_id != field_id {
        return Err(bad(format!(
            "the binlog is of field {}, filed under field {field_id}",
            log.descriptor.field_id
        )));
    }
    let want = match field_id {
        ROW_ID_FIELD | TIMESTAMP_FIELD => Some(DataType::Int64 as i32),
        _ => field.map(|f| f.data_type),
    };
    if let Some(want) = want.filter(|want| *want != log.descriptor.payload_type) {
        return Err(bad(format!(
            "the field is {} and the binlog holds {}",
            type_name(want),
            type_name(log.descriptor.payload_type)
        )));
    }
    // The keys and timestamps are decoded, since deletes are matched on them; the other
    // fields' rows are counted from their Parquet footers, which keeps a restore of
    // thousands of segments on three emulated ends within this machine's two cores. A page
    // of such a field that does not decode passes here, where Milvus would fail the import.
    let (rows, keys) = if field.is_some_and(|f| f.is_primary_key) {
        let pks = binlog::pk_values(&log).map_err(|e| bad(e.to_string()))?;
        (pks.len(), Keys::Pks(pks))
    } else if field_id == TIMESTAMP_FIELD {
        let timestamps = binlog::int64_values(&log).map_err(|e| bad(e.to_string()))?;
        (timestamps.len(), Keys::Timestamps(timestamps))
    } else {
        let rows = binlog::insert_rows_declared(&log).map_err(|e| bad(e.to_string()))?;
        (rows, Keys::None)
    };
    let rows =
        i64::try_from(rows).map_err(|_| bad(format!("row count {rows} does not fit in int64")))?;
    Ok(InsertLog { rows, keys })
}

struct InsertLog {
    rows: i64,
    keys: Keys,
}

/// The values of a binlog that deletes are matched on.
enum Keys {
    Pks(Vec<binlog::Pk>),
    Timestamps(Vec<i64>),
    None,
}

fn type_name(data_type: i32) -> String {
    DataType::try_from(data_type).map_or_else(
        |_| format!("data type {data_type}"),
        |t| t.as_str_name().to_owned(),
    )
}

/// The deletes of a delta log, in either form Milvus writes.
fn read_deletes(path: &Path, bytes: &[u8]) -> Result<Vec<binlog::Delete>, ReadError> {
    let bad = |detail: String| ReadError::BadBinlog {
        path: path.to_string(),
        detail,
    };
    let log = binlog::parse(bytes).map_err(|e| bad(e.to_string()))?;
    binlog::deletes(&log).map_err(|e| bad(e.to_string()))
}

fn manifest_entry(path: &Path, bytes: &[u8]) -> ManifestEntry {
    ManifestEntry {
        path: path.to_string(),
        size: bytes.len() as u64,
        crc32c: crc32c::crc32c(bytes),
    }
}

/// Reads every group of a job into the collection of `schema` (every field of which must have
/// binlogs, of its data type). A binlog import's groups are then kept under `keep` (see
/// [`keep_groups`]), from what was read rather than listed again.
pub async fn read_groups(
    from: Source<'_>,
    source: ImportSource,
    groups: &[Vec<String>],
    schema: Option<&CollectionSchema>,
    keep: Option<&str>,
) -> Result<ReadOutcome, ReadError> {
    let mut outcome = ReadOutcome::default();
    let mut inserted = Vec::with_capacity(groups.len());
    for (index, group) in groups.iter().enumerate() {
        if group.is_empty() {
            return Err(ReadError::EmptyGroup { index });
        }
        let result = match source {
            ImportSource::Binlogs => {
                let (result, objects) = read_binlog_group(
                    from,
                    (index, &group[0]),
                    group.get(1).map(String::as_str),
                    schema,
                    &mut outcome,
                )
                .await?;
                inserted.push(objects);
                result
            }
            ImportSource::L0Deltas => {
                read_binlog_group(from, (index, ""), Some(&group[0]), None, &mut outcome)
                    .await?
                    .0
            }
            ImportSource::RowFiles => {
                outcome.data.keys = None;
                read_row_group(from.store, group, &mut outcome.manifest).await?
            }
        };
        outcome.rows += result.rows;
        outcome.deleted_rows += result.deleted_rows;
        outcome.groups.push(GroupResult {
            files: group.clone(),
            ..result
        });
    }
    if let Some(dir) = keep.filter(|_| source == ImportSource::Binlogs) {
        outcome.data.kept = keep_groups(from, groups, &inserted, dir).await?;
    }
    Ok(outcome)
}

/// One binlog group: its rows (the keys of those its own deletes leave go into `outcome`'s
/// data), or for an L0 group (no insert prefix) its deletes; and the insert logs it read,
/// each with its field.
async fn read_binlog_group(
    from: Source<'_>,
    (group, insert_prefix): (usize, &str),
    delta_prefix: Option<&str>,
    schema: Option<&CollectionSchema>,
    outcome: &mut ReadOutcome,
) -> Result<(GroupResult, Vec<(i64, Path)>), ReadError> {
    let manifest = &mut outcome.manifest;
    let mut result = GroupResult::default();
    // The primary keys of the segment's rows (None without a schema or an insert prefix),
    // and their timestamps, row for row.
    let (mut pks, mut timestamps): (Option<Vec<binlog::Pk>>, Vec<i64>) = (None, Vec::new());
    let mut inserted = Vec::new();
    if !insert_prefix.is_empty() {
        let logs_by_field = by_field(read_objects(from, insert_prefix).await?, |(path, _)| path)?;
        verify_fields(schema, &logs_by_field, insert_prefix)?;
        let mut rows_by_field: BTreeMap<i64, i64> = BTreeMap::new();
        for (field_id, objects) in logs_by_field {
            let field = schema.and_then(|s| s.fields.iter().find(|f| f.field_id == field_id));
            for (path, bytes) in objects {
                let log = read_insert(&path, &bytes, field_id, field)?;
                *rows_by_field.entry(field_id).or_default() += log.rows;
                match log.keys {
                    Keys::Pks(values) => pks.get_or_insert_default().extend(values),
                    Keys::Timestamps(values) => timestamps.extend(values),
                    Keys::None => {}
                }
                result.size += bytes.len() as u64;
                manifest.push(manifest_entry(&path, &bytes));
                inserted.push((field_id, path));
            }
        }
        // Milvus reads a segment as rows of every field at once; fields of different
        // lengths do not make rows.
        let row_ids = rows_by_field.get(&ROW_ID_FIELD).copied().unwrap_or(0);
        if let Some((field, rows)) = rows_by_field.iter().find(|(_, rows)| **rows != row_ids) {
            return Err(ReadError::UnalignedRows {
                field: *field,
                rows: *rows,
                row_ids,
                prefix: insert_prefix.to_owned(),
            });
        }
        result.rows = row_ids;
        let newest = timestamps.iter().max().map(|ts| *ts as u64);
        outcome.data.max_row_ts = outcome.data.max_row_ts.max(newest);
    }
    // `[insert, ""]` is how milvus-backup's v1 import says "no delta logs": Milvus skips an
    // empty delta path rather than listing its whole bucket.
    let mut deletes = Vec::new();
    if let Some(prefix) = delta_prefix.filter(|p| !p.is_empty()) {
        for (path, bytes) in read_objects(from, prefix).await? {
            deletes.extend(read_deletes(&path, &bytes)?);
            result.size += bytes.len() as u64;
            manifest.push(manifest_entry(&path, &bytes));
        }
    }
    result.deleted_rows = match pks {
        Some(pks) => {
            let rows: Vec<Row> = (pks.into_iter().zip(&timestamps).enumerate())
                .map(|(index, (pk, ts))| Row {
                    pk,
                    ts: *ts as u64,
                    group,
                    index,
                })
                .collect();
            let removed = binlog::removed(rows.iter().map(|r| (&r.pk, r.ts)), &deletes);
            if outcome.data.first_removed.is_none() {
                outcome.data.first_removed = (rows.iter().zip(&removed))
                    .find(|(_, gone)| **gone)
                    .map(|(row, _)| row.clone());
            }
            if let Some(keys) = &mut outcome.data.keys {
                keys.extend(
                    rows.iter()
                        .zip(&removed)
                        .filter(|(_, gone)| !**gone)
                        .map(|(row, _)| row.clone()),
                );
            }
            removed.iter().filter(|gone| **gone).count() as i64
        }
        // An L0 import's deletes apply to rows outside the job: counted here, applied to
        // the collection's rows by what counts them (`live_rows` in [`crate::cluster`]).
        None => {
            let count = deletes.len() as i64;
            outcome.data.deletes.extend(deletes);
            count
        }
    };
    Ok((result, inserted))
}

/// Insert logs (sorted, each a path or a path and its bytes) by the field whose directory
/// holds them, each field's in path order (the order its rows are
/// numbered in).
fn by_field<T>(logs: Vec<T>, path_of: fn(&T) -> &Path) -> Result<BTreeMap<i64, Vec<T>>, ReadError> {
    let mut by_field: BTreeMap<i64, Vec<T>> = BTreeMap::new();
    for log in logs {
        let path = path_of(&log);
        let field_id = field_dir(path).ok_or_else(|| ReadError::BadBinlog {
            path: path.to_string(),
            detail: "the second-to-last path component is not a field id".into(),
        })?;
        by_field.entry(field_id).or_default().push(log);
    }
    Ok(by_field)
}

/// The field whose directory holds an insert log: its path's second-to-last component.
fn field_dir(path: &Path) -> Option<i64> {
    let parts: Vec<_> = path.parts().collect();
    let dir = parts.len().checked_sub(2)?;
    parts[dir].as_ref().parse().ok()
}

/// Runs file-system calls on tokio's blocking threads; an I/O error as the store reports one.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> object_store::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        .map_err(io_error)
}

/// A file-system error as the local store reports one.
fn io_error(source: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: source.into(),
    }
}

/// Every file under `dir`, the local directory of `key`, as a path under `key` (see
/// [`walk_files`]).
fn walk(dir: &std::path::Path, key: &Path) -> std::io::Result<Vec<Path>> {
    let mut paths = Vec::new();
    walk_files(dir, key, &mut paths).map(|()| paths)
}

/// Adds to `paths` every file under `dir`, the local directory of `key`, as a path under
/// `key`: nothing if `dir` is missing or no directory, as the store lists nothing there.
/// Each name is a key part as it stands, as the store lists it (a file `a%23b` is the
/// object `a%23b`); a name whose first `#` only digits follow is skipped, as the store skips
/// it: the form of its part-written copies.
fn walk_files(dir: &std::path::Path, key: &Path, paths: &mut Vec<Path>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(());
        }
        entries => entries?,
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let part = object_store::path::PathPart::parse(&name).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", entry.path().display()),
            )
        })?;
        let child = key.clone().join(part);
        if entry.file_type()?.is_dir() {
            walk_files(&entry.path(), &child, paths)?;
        } else if !name
            .split_once('#')
            .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        {
            paths.push(child);
        }
    }
    Ok(())
}

/// Copies each group's insert logs (`inserted`: what was read under the group's insert prefix,
/// its first path, each with its field, or nothing) into `dir/`, as Milvus writes what it
/// imported into segments of its own: a query reads its rows from there once the files it
/// imported from are gone. A copy is named `{group}.{field}.{path under the insert prefix,
/// '/' as '.'}`, all of a job's in one directory: making a directory a field for each of
/// 120,000 jobs was a fifth of the emulator's kernel time at 10,000 collections. Returns each
/// group's copies as the name prefix `dir/{group}.` ("" for a group without insert logs),
/// which [`read_values`] reads. In a local directory the copies are hard links.
async fn keep_groups(
    from: Source<'_>,
    groups: &[Vec<String>],
    inserted: &[Vec<(i64, Path)>],
    dir: &str,
) -> Result<Vec<String>, ReadError> {
    let mut kept = Vec::with_capacity(inserted.len());
    for (index, (group, objects)) in groups.iter().zip(inserted).enumerate() {
        let Some(prefix) = group.first().filter(|_| !objects.is_empty()) else {
            kept.push(String::new());
            continue;
        };
        let to = format!("{dir}/{index}.");
        let under = object_path(prefix)?.to_string();
        let copies: Vec<(&Path, Path)> = (objects.iter())
            .map(|(field, path)| {
                let rest = path.as_ref().strip_prefix(&under).unwrap_or(path.as_ref());
                let name = rest.trim_start_matches('/').replace('/', ".");
                (path, Path::from(format!("{to}{field}.{name}")))
            })
            .collect();
        let failed = |source| ReadError::Storage {
            path: prefix.to_owned(),
            source,
        };
        match from.dir {
            Some(root) => {
                let links: Vec<_> = (copies.iter())
                    .map(|(from, to)| (root.join(from.as_ref()), root.join(to.as_ref())))
                    .collect();
                blocking(move || link_all(&links)).await.map_err(failed)?;
            }
            None => {
                for (path, target) in &copies {
                    from.store.copy(path, target).await.map_err(failed)?;
                }
            }
        }
        kept.push(to);
    }
    Ok(kept)
}

/// Links each `(from, to)`, making each directory `to` needs once (the pairs of one directory
/// come together), and replacing a file already at `to`.
fn link_all(links: &[(std::path::PathBuf, std::path::PathBuf)]) -> std::io::Result<()> {
    let mut made: Option<&std::path::Path> = None;
    for (from, to) in links {
        let parent = to.parent();
        if parent != made {
            if let Some(parent) = parent {
                std::fs::create_dir_all(parent)?;
            }
            made = parent;
        }
        match std::fs::hard_link(from, to) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(to)?;
                std::fs::hard_link(from, to)?;
            }
            linked => linked?,
        }
    }
    Ok(())
}

/// The values of rows `rows` (sorted row numbers of the group) of each field of `fields` in
/// the insert logs a group's import kept (`kept`, as [`keep_groups`] names them): what a
/// query that returns fields reads.
pub async fn read_values(
    from: Source<'_>,
    kept: &str,
    fields: &[i64],
    rows: &[usize],
) -> Result<BTreeMap<i64, Vec<Value>>, ReadError> {
    let (dir, group) = kept.rsplit_once('/').unwrap_or(("", kept));
    let mut logs: BTreeMap<i64, Vec<Path>> = BTreeMap::new();
    for path in list(from, &format!("{dir}/")).await? {
        let field = (path.filename())
            .and_then(|name| name.strip_prefix(group))
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(field, _)| field.parse().ok());
        if let Some(field) = field {
            logs.entry(field).or_default().push(path);
        }
    }
    let mut out = BTreeMap::new();
    for field in fields {
        let mut values = Vec::with_capacity(rows.len());
        let mut first = 0;
        for path in logs.get(field).map(Vec::as_slice).unwrap_or_default() {
            let bytes = get(from.store, path).await?;
            let picked = binlog::parse(&bytes)
                .and_then(|log| binlog::values(&log, first, rows))
                .map_err(|e| ReadError::BadBinlog {
                    path: path.to_string(),
                    detail: e.to_string(),
                })?;
            first += picked.rows;
            values.extend(picked.values.into_iter().map(|(_, v)| v));
        }
        if values.len() != rows.len() {
            return Err(ReadError::BadBinlog {
                path: format!("{kept}{field}"),
                detail: format!("{} of {} rows asked for read", values.len(), rows.len()),
            });
        }
        out.insert(*field, values);
    }
    Ok(out)
}

/// Field ids Milvus gives the system fields RowID and Timestamp; their binlogs are part of
/// every segment.
pub(crate) const ROW_ID_FIELD: i64 = 0;
pub(crate) const TIMESTAMP_FIELD: i64 = 1;

/// What Milvus's binlog reader checks before reading a segment (`verify`): RowID and
/// Timestamp have binlogs, so does every field of the collection's schema, and every field
/// has as many as RowID. A segment with an object missing fails here rather than importing
/// the rest.
fn verify_fields<T>(
    schema: Option<&CollectionSchema>,
    logs_by_field: &BTreeMap<i64, Vec<T>>,
    prefix: &str,
) -> Result<(), ReadError> {
    let missing = |field: String| ReadError::NoFieldBinlog {
        field,
        prefix: prefix.to_owned(),
    };
    for field in schema.map(|s| s.fields.as_slice()).unwrap_or_default() {
        if !logs_by_field.contains_key(&field.field_id) {
            return Err(missing(format!("field:{}", field.name)));
        }
    }
    let Some(row_ids) = logs_by_field.get(&ROW_ID_FIELD) else {
        return Err(missing("RowID field".into()));
    };
    if !logs_by_field.contains_key(&TIMESTAMP_FIELD) {
        return Err(missing("TimestampField".into()));
    }
    match logs_by_field
        .iter()
        .find(|(_, logs)| logs.len() != row_ids.len())
    {
        Some((field, logs)) => Err(ReadError::MisalignedBinlogs {
            field: *field,
            count: logs.len(),
            row_ids: row_ids.len(),
            prefix: prefix.to_owned(),
        }),
        None => Ok(()),
    }
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
            Some("parquet") => parquet_rows,
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

/// A Parquet row file (bulk_writer's default): one column per field, its rows in the footer.
fn parquet_rows(bytes: &[u8]) -> Result<i64, String> {
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        bytes::Bytes::copy_from_slice(bytes),
    )
    .map_err(|e| e.to_string())?;
    Ok(builder.metadata().file_metadata().num_rows())
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
    use milvus_formats::binlog::{
        Column, Delete, DeltaForm, Descriptor, encode_delta, encode_insert,
    };
    use object_store::{PutPayload, memory::InMemory};

    /// An insert binlog of `rows` Int64 rows of `field`, or of a float vector for field 101.
    fn insert(field: i64, rows: usize) -> Vec<u8> {
        let data_type = if field == 101 {
            DataType::FloatVector
        } else {
            DataType::Int64
        };
        let column = Column::zeroed(data_type, rows).expect("a binlog type");
        encode_insert(Descriptor::new(field, data_type), &column)
    }

    fn delta(pks: &[i64]) -> Vec<u8> {
        delta_at(&pks.iter().map(|pk| (*pk, 10)).collect::<Vec<_>>())
    }

    fn delta_at(deletes: &[(i64, u64)]) -> Vec<u8> {
        let deletes: Vec<Delete> = deletes
            .iter()
            .map(|&(pk, ts)| Delete::int(pk, ts))
            .collect();
        encode_delta(
            Descriptor::new(-1, DataType::String),
            &deletes,
            DeltaForm::Json,
        )
    }

    async fn put(store: &dyn ObjectStore, path: &str, bytes: Vec<u8>) {
        store
            .put(&Path::from(path), PutPayload::from(bytes))
            .await
            .expect("put");
    }

    /// A collection of a primary key (100, "id") and a vector (101, "vector").
    fn id_and_vector() -> CollectionSchema {
        CollectionSchema {
            fields: vec![
                FieldSchema {
                    field_id: 100,
                    name: "id".into(),
                    is_primary_key: true,
                    data_type: DataType::Int64 as i32,
                    ..Default::default()
                },
                FieldSchema {
                    field_id: 101,
                    name: "vector".into(),
                    data_type: DataType::FloatVector as i32,
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    /// Two binlogs of 7 and 5 rows for each of `fields` under `prefix`: pks 1 to 12, all
    /// written at timestamp 5.
    async fn put_segment(store: &dyn ObjectStore, prefix: &str, fields: &[i64]) {
        for field in fields {
            for (log, pks) in [(1, 1..8), (2, 8..13)] {
                let object = match field {
                    100 => encode_insert(
                        Descriptor::new(100, DataType::Int64),
                        &Column::Int64(pks.collect()),
                    ),
                    1 => encode_insert(
                        Descriptor::new(1, DataType::Int64),
                        &Column::Int64(pks.map(|_| 5).collect()),
                    ),
                    _ => insert(*field, pks.count()),
                };
                put(store, &format!("{prefix}/{field}/{log}"), object).await;
            }
        }
    }

    #[tokio::test]
    async fn binlog_group_counts_rows_and_the_rows_its_deletes_remove() {
        let store = InMemory::new();
        let ins = "bk/binlogs/insert_log/1/2/3";
        put_segment(&store, &format!("{ins}/30"), &[0, 1, 100, 101]).await;
        // pks 1 and 2 deleted after their insert (and 2 twice), 3 before it, 99 never held:
        // Milvus's filter removes two rows.
        put(
            &store,
            "bk/binlogs/delta_log/1/2/3/30/9",
            delta_at(&[(1, 10), (2, 10), (3, 4), (99, 10)]),
        )
        .await;
        put(
            &store,
            "bk/binlogs/delta_log/1/2/3/30/10",
            delta_at(&[(2, 11)]),
        )
        .await;
        let groups = vec![vec![
            format!("{ins}/"),
            "/bk/binlogs/delta_log/1/2/3/".into(),
        ]];
        let schema = id_and_vector();
        let out = read_groups(
            Source::of(&store),
            ImportSource::Binlogs,
            &groups,
            Some(&schema),
            None,
        )
        .await
        .expect("reads");
        assert_eq!(
            (out.rows, out.deleted_rows, out.manifest.len()),
            (12, 2, 10)
        );
        assert_eq!(out.manifest[0].crc32c, crc32c::crc32c(&insert(0, 7)));
        // Without a known schema the keys are not known: every delete counts.
        let out = read_groups(
            Source::of(&store),
            ImportSource::Binlogs,
            &groups,
            None,
            None,
        )
        .await
        .expect("reads");
        assert_eq!((out.rows, out.deleted_rows), (12, 5));
        // An L0 import counts its deletes.
        let l0 = vec![vec!["bk/binlogs/delta_log/1/2/3/30/".into()]];
        let out = read_groups(Source::of(&store), ImportSource::L0Deltas, &l0, None, None)
            .await
            .expect("reads");
        assert_eq!((out.rows, out.deleted_rows), (0, 5));
    }

    /// A local directory is listed, and what an import keeps is linked, through the file
    /// system: the job reads, keeps and later serves the same as through the store's calls.
    #[tokio::test]
    async fn a_local_directory_reads_and_keeps_as_its_store_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let store = object_store::local::LocalFileSystem::new_with_prefix(&root).expect("store");
        let ins = "bk/binlogs/insert_log/1/2/3/30";
        put_segment(&store, ins, &[0, 1, 100, 101]).await;
        put(&store, "bk/binlogs/delta_log/1/2/3/30/9", delta(&[3, 99])).await;
        // What an interrupted copy leaves: skipped by both listings.
        std::fs::write(root.join(ins).join("100/3#1"), b"partial").expect("write");
        // Delta logs whose names hold a `#` but are no part-written copies, one kept encoded
        // on disk (`x%23y`) and one as it stands: read by both.
        put(&store, "bk/binlogs/delta_log/1/2/3/30/x#y", delta(&[4])).await;
        let raw = Path::parse("bk/binlogs/delta_log/1/2/3/30/z#w").expect("a path");
        (store.put(&raw, PutPayload::from(delta(&[5]))))
            .await
            .expect("put");
        let local = Source {
            store: &store,
            dir: Some(&root),
        };
        let groups = vec![vec![
            format!("{ins}/"),
            "bk/binlogs/delta_log/1/2/3/".into(),
        ]];
        let schema = id_and_vector();
        let read =
            |from, keep| read_groups(from, ImportSource::Binlogs, &groups, Some(&schema), keep);
        let (by_store, by_files) = (
            read(Source::of(&store), Some("kept/8"))
                .await
                .expect("reads"),
            read(local, Some("kept/7")).await.expect("reads"),
        );
        assert_eq!((by_files.rows, by_files.deleted_rows), (12, 3));
        assert_eq!(by_files.manifest, by_store.manifest);
        assert_eq!(by_files.manifest.len(), 11);
        let missing = vec![vec!["bk/none/".to_owned()]];
        assert!(matches!(
            read_groups(local, ImportSource::Binlogs, &missing, None, None).await,
            Err(ReadError::EmptyPrefix { .. })
        ));

        let (kept, through_store) = (by_files.data.kept, by_store.data.kept);
        assert_eq!(
            (&kept[..], &through_store[..]),
            (&["kept/7/0.".to_owned()][..], &["kept/8/0.".to_owned()][..])
        );
        // One directory a job, its copies named by group and field.
        let names: Vec<String> = (std::fs::read_dir(root.join("kept/7")).expect("kept"))
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names.len(), 8, "{names:?}");
        assert!(
            names
                .iter()
                .all(|n| n.starts_with("0.") && root.join("kept/7").join(n).is_file())
        );
        assert!(names.contains(&"0.100.100.1".to_owned()), "{names:?}");
        // A job read again (a restarted driver) replaces its links.
        read(local, Some("kept/7")).await.expect("read again");
        std::fs::remove_dir_all(root.join("bk")).expect("the imported files go");
        for (from, prefix) in [(local, &kept[0]), (Source::of(&store), &through_store[0])] {
            let values = read_values(from, prefix, &[100], &[0, 11])
                .await
                .expect("the kept rows");
            assert_eq!(values[&100], [Value::Int(1), Value::Int(12)], "{prefix}");
        }
    }

    #[tokio::test]
    async fn a_segment_missing_a_binlog_fails_as_milvus_verify_does() {
        async fn read(store: InMemory) -> String {
            read_groups(
                Source::of(&store),
                ImportSource::Binlogs,
                &[vec!["seg/".into()]],
                Some(&id_and_vector()),
                None,
            )
            .await
            .expect_err("an incomplete segment")
            .to_string()
        }

        let store = InMemory::new();
        put_segment(&store, "seg", &[0, 1, 100, 101]).await;
        store
            .delete(&Path::from("seg/101/2"))
            .await
            .expect("delete");
        assert_eq!(
            read(store).await,
            "misaligned binlog count, field101:1, field0:2, prefix=seg/"
        );

        let store = InMemory::new();
        put_segment(&store, "seg", &[0, 1, 100]).await;
        assert_eq!(read(store).await, "no binlog for field:vector, prefix=seg/");

        let store = InMemory::new();
        put_segment(&store, "seg", &[1, 100, 101]).await;
        assert_eq!(read(store).await, "no binlog for RowID field, prefix=seg/");

        let store = InMemory::new();
        put_segment(&store, "seg", &[0, 100, 101]).await;
        assert_eq!(
            read(store).await,
            "no binlog for TimestampField, prefix=seg/"
        );
    }

    #[tokio::test]
    async fn failures_name_the_path() {
        let store = InMemory::new();
        let missing = read_groups(
            Source::of(&store),
            ImportSource::Binlogs,
            &[vec!["nope/".into()]],
            None,
            None,
        )
        .await
        .expect_err("empty prefix");
        assert!(
            missing.to_string().contains("key not found[key=nope/]"),
            "{missing}"
        );
        // Each case is a segment whose other fields are sound and whose field 100 is not.
        let pk_of = |rows| insert(100, rows);
        let cases: Vec<(&str, Vec<u8>, String)> = vec![
            (
                "short",
                b"\xbc\xfa".to_vec(),
                "parse magic number failed: the object is 2 bytes, shorter than the magic".into(),
            ),
            (
                "magic",
                b"MSIMINS1 the old invented format".to_vec(),
                "parse magic number failed, expected: 16775868, actual: 1296651085".into(),
            ),
            (
                "packed",
                b"PAR1 a column group".to_vec(),
                "the object is a Parquet file, not a binlog: a storage version 2 or 3 (column \
                 group) segment's file"
                    .into(),
            ),
            (
                "delta",
                delta(&[1]),
                "the binlog is of field -1, filed under field 100".into(),
            ),
            (
                "field",
                insert(0, 3),
                "the binlog is of field 0, filed under field 100".into(),
            ),
            (
                "type",
                encode_insert(
                    Descriptor::new(100, DataType::VarChar),
                    &Column::VarChar(vec!["a".into()]),
                ),
                "the field is Int64 and the binlog holds VarChar".into(),
            ),
            (
                "cut",
                pk_of(3)[..60].to_vec(),
                "the event at byte 4 runs past the end of the object (60 bytes)".into(),
            ),
        ];
        for (prefix, object, reason) in cases {
            for field in [0, 1, 101] {
                put(&store, &format!("{prefix}/1/{field}/1"), insert(field, 3)).await;
            }
            put(&store, &format!("{prefix}/1/100/1"), object).await;
            let err = read_groups(
                Source::of(&store),
                ImportSource::Binlogs,
                &[vec![prefix.into()]],
                Some(&id_and_vector()),
                None,
            )
            .await
            .expect_err(prefix);
            assert_eq!(
                err.to_string(),
                format!("failed to parse binlog {prefix}/1/100/1: {reason}"),
                "{prefix}"
            );
        }
        // Every field's binlogs are sound, but the pk has a row fewer than the RowIDs.
        for field in [0, 1, 101] {
            put(&store, &format!("rows/1/{field}/1"), insert(field, 3)).await;
        }
        put(&store, "rows/1/100/1", pk_of(2)).await;
        let err = read_groups(
            Source::of(&store),
            ImportSource::Binlogs,
            &[vec!["rows".into()]],
            Some(&id_and_vector()),
            None,
        )
        .await
        .expect_err("unaligned");
        assert_eq!(
            err.to_string(),
            "imported rows are not aligned, field100:2 rows, field0:3 rows, prefix=rows"
        );
        let not_found = read_groups(
            Source::of(&store),
            ImportSource::RowFiles,
            &[vec!["a.json".into()]],
            None,
            None,
        )
        .await
        .expect_err("missing file");
        assert!(
            not_found.to_string().contains("key not found[key=a.json]"),
            "{not_found}"
        );
        let text = read_groups(
            Source::of(&store),
            ImportSource::RowFiles,
            &[vec!["a.txt".into()]],
            None,
            None,
        )
        .await
        .expect_err("text");
        assert_eq!(text.to_string(), "unsupported file type: a.txt");
        put(&store, "a.parquet", b"PAR1 but no footer".to_vec()).await;
        let parquet = read_groups(
            Source::of(&store),
            ImportSource::RowFiles,
            &[vec!["a.parquet".into()]],
            None,
            None,
        )
        .await
        .expect_err("bad parquet");
        assert!(
            parquet
                .to_string()
                .starts_with("failed to parse file a.parquet:"),
            "{parquet}"
        );
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
        // A Parquet row file of 4 rows (the binlog payload writer makes one of one column).
        put(
            &store,
            "r/d.parquet",
            milvus_formats::binlog::Column::Int64(vec![1, 2, 3, 4]).to_parquet(),
        )
        .await;
        let groups = vec![
            vec!["r/a.json".into()],
            vec!["r/b.json".into()],
            vec!["r/c.csv".into()],
            vec!["r/d.parquet".into()],
        ];
        let out = read_groups(
            Source::of(&store),
            ImportSource::RowFiles,
            &groups,
            None,
            None,
        )
        .await
        .expect("reads");
        assert_eq!(
            out.groups.iter().map(|g| g.rows).collect::<Vec<_>>(),
            [2, 1, 2, 4]
        );
        assert_eq!(out.rows, 9);
    }
}
