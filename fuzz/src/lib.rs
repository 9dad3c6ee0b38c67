//! The fuzz targets' bodies, one per parser an outsider can feed: a job file, the host
//! config, milvus-backup's `backup.yaml`, a REST restore body, a backup's meta files, a binlog object and milvus-sim's topology file. Each
//! runs the parser through validation (not only the TOML or JSON decoder) and then holds the
//! answer to what an operator is promised: no panic, and an input that is refused is refused
//! at a line and column inside it. `cargo fuzz` drives them (fuzz/README.md). As plain tests,
//! `tests/replay.rs` runs every seed through them, `tests/regressions.rs` every crash found so
//! far, and `tests/mutate.rs` a bounded run of [`mutate`]'s fuzzer from the seeds.

pub mod corpus;
pub mod mutate;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lockstep::backup::{self, BackupLocation, RestoreOptions, Strategy};
use lockstep::config::HostConfig;
use lockstep::job::{Error, Job, Location};
use object_store::memory::InMemory;
use object_store::{ObjectStoreExt as _, PutPayload};

/// The host config the job and REST targets validate against: lockstep's own test config
/// (clusters, storages, tokens by environment variable, a plugin directory).
fn host() -> &'static HostConfig {
    static HOST: OnceLock<HostConfig> = OnceLock::new();
    HOST.get_or_init(|| {
        HostConfig::load(&data_dir().join("jobs/lockstep.toml"))
            .expect("lockstep's test host config is valid")
    })
}

/// `host/tests/data`, where the test config and the seed inputs live.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/tests/data")
}

/// The job tests' environment: the host config's tokens are set, so validation gets past them.
fn env(name: &str) -> Option<String> {
    matches!(name, "PROD_A_TOKEN" | "MINIO_A_KEY" | "MINIO_A_SECRET").then(|| "fuzz".to_owned())
}

/// A job file, through parsing and validation.
pub fn job_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = data_dir().join("jobs/fuzzed.toml");
    if let Err(e) = Job::from_str_with_env(text, &path, host(), &env) {
        assert_located(&e, text);
    }
}

/// The host config, through parsing and validation.
pub fn host_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = HostConfig::parse_str(text, Path::new("/etc/lockstep/lockstep.toml")) {
        assert_located(&e, text);
    }
}

/// milvus-backup's `backup.yaml`, through reading (v1 or v2) and validation, with no
/// `--set` and an empty environment.
pub fn backup_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/etc/milvus-backup/backup.yaml");
    if let Err(e) = lockstep::config::backup_yaml::parse_str(text, path, &[], &|_| None) {
        assert_located(&e, text);
    }
}

/// A REST restore body (any bytes: the server takes them as they come).
pub fn rest_body(data: &[u8]) {
    if let Err(e) = Job::from_rest(data, host()) {
        let text = String::from_utf8_lossy(data);
        assert_located(&e, &text);
    }
}

/// Fields a REST problem may name although the body lacks them: the ones it must have.
const REQUIRED: &[&str] = &["backup_name", "target"];

/// Every problem of a refused input names a place inside it.
fn assert_located(e: &Error, text: &str) {
    assert!(
        matches!(e, Error::Invalid { .. }),
        "text input refused without problems: {e}"
    );
    for problem in e.problems() {
        match &problem.location {
            Location::File { line, column, .. } | Location::Body { line, column } => {
                assert_inside(text, *line, *column, &problem.to_string());
            }
            Location::JsonField(field) => {
                // A key of the body (an empty key is a key too), or a path into one.
                let keys: Vec<String> = serde_json::from_str::<serde_json::Value>(text)
                    .ok()
                    .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
                    .unwrap_or_default();
                let names_a_key = keys.iter().any(|k| {
                    field == k
                        || field
                            .strip_prefix(k.as_str())
                            .is_some_and(|rest| rest.starts_with(['.', '[']))
                });
                assert!(
                    names_a_key || REQUIRED.contains(&field.as_str()),
                    "a problem names a field the body does not have: {problem}"
                );
            }
            Location::Flag(_) | Location::Env(_) => {
                panic!("a file or body problem located outside it: {problem}")
            }
        }
    }
}

/// `line` and `column` (1-based, in characters) are a position in `text`, or just past the
/// end of one of its lines.
fn assert_inside(text: &str, line: usize, column: usize, what: &str) {
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(
        (1..=lines.len()).contains(&line),
        "line {line} outside the input's {} lines: {what}",
        lines.len()
    );
    let chars = lines[line - 1].chars().count();
    assert!(
        (1..=chars + 1).contains(&column),
        "column {column} outside line {line} ({chars} characters): {what}"
    );
}

/// The parts of a backup-meta input, split at NUL bytes (which JSON text cannot hold): the
/// first byte picks the layout, then `full_meta.json` (even) or `backup_meta.json` and the
/// three level files (odd), and last the binlogs present, one `path size` a line.
pub fn backup_meta(data: &[u8]) {
    let Some((&layout, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.split(|b| *b == 0);
    let mut next = || parts.next().unwrap_or_default().to_vec();
    let mut files: Vec<(&str, Vec<u8>)> = if layout % 2 == 0 {
        vec![
            ("meta/backup_meta.json", b"{}".to_vec()),
            ("meta/full_meta.json", next()),
        ]
    } else {
        vec![
            ("meta/backup_meta.json", next()),
            ("meta/collection_meta.json", next()),
            ("meta/partition_meta.json", next()),
            ("meta/segment_meta.json", next()),
        ]
    };
    let listing = String::from_utf8_lossy(&next()).into_owned();
    let binlogs: Vec<(String, usize)> = listing
        .lines()
        .filter_map(|line| {
            let (path, size) = line.rsplit_once(' ')?;
            Some((format!("binlogs/{path}"), size.parse().ok()?))
        })
        .take(64)
        .collect();
    for (path, size) in &binlogs {
        files.push((path, vec![0; (*size).min(1024)]));
    }

    let location = BackupLocation::new("memory://fuzz", "backup", "fuzzed");
    runtime().block_on(async {
        let store = InMemory::new();
        for (relative, bytes) in &files {
            // A listed path object_store cannot hold is not a backup anyone could have.
            let Ok(path) = object_store::path::Path::parse(location.path(relative).as_ref()) else {
                continue;
            };
            store
                .put(&path, PutPayload::from(bytes.clone()))
                .await
                .expect("the in-memory store takes any object");
        }
        match backup::read(&store, &location).await {
            Ok(read) => {
                for strategy in [Strategy::Merged, Strategy::PerSeg] {
                    // A plan or a refusal; neither may panic.
                    let _ = backup::plan(&read, &RestoreOptions::default(), strategy);
                }
            }
            Err(backup::Error::CorruptMeta {
                url, line, column, ..
            }) => {
                let relative = url.rsplit_once("/fuzzed/").map(|(_, r)| r).unwrap_or(&url);
                let (_, bytes) = files
                    .iter()
                    .find(|(path, _)| *path == relative)
                    .expect("a corrupt meta file is one the input held");
                assert_inside(
                    &String::from_utf8_lossy(bytes),
                    line,
                    column,
                    &format!("corrupt {relative}"),
                );
            }
            Err(_) => {}
        }
    });
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime starts")
    })
}

/// milvus-sim's topology file, through validation.
pub fn topology(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match milvus_sim::topology::Topology::from_toml_str(text, "topology.toml", Path::new("/srv")) {
        Ok(_) => {}
        Err(milvus_sim::topology::TopologyError::Invalid { problems, .. }) => {
            for p in &problems {
                assert_inside(
                    text,
                    p.line,
                    p.column,
                    &format!("{}: {}", p.field, p.message),
                );
            }
        }
        Err(e) => panic!("topology text refused without problems: {e}"),
    }
}

/// A binlog object of a backup, through every reading lockstep and milvus-sim do of one: its
/// rows counted and declared, its keys, its values, its deletes. A damaged object is refused
/// with a reason; none may panic, whatever its payload's Parquet holds.
pub fn binlog(data: &[u8]) {
    use milvus_formats::binlog;
    let Ok(log) = binlog::parse(data) else {
        return;
    };
    let _ = binlog::insert_rows(&log);
    let _ = binlog::insert_rows_declared(&log);
    let _ = binlog::pk_values(&log);
    let _ = binlog::int64_values(&log);
    let _ = binlog::values(&log, 0, &[0, 2, 4]);
    let _ = binlog::deletes(&log);
}

/// A storage v2/v3 column-group file, through every reading lockstep does of one: its rows,
/// its field ids, an Int64 or VarChar key, its timestamps, a vector's values, its deletes.
/// A damaged file is refused with a reason; none may panic.
pub fn column_group(data: &[u8]) {
    use milvus_formats::column_group;
    use milvus_proto::schema::DataType;
    let _ = column_group::rows(data);
    let _ = column_group::field_ids(data);
    let _ = column_group::pks(data, 100);
    let _ = column_group::int64s(data, 1);
    let _ = column_group::values(data, 101, DataType::FloatVector, 0, &[0, 2, 4]);
    let _ = column_group::deletes(data);
}
