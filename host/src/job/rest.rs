//! The REST restore request: milvus-backup's `RestoreBackupRequest` (same keys, same
//! meanings) plus `target`, `secondaries` (names or URIs) and `strategy`, mapped into a
//! [`JobFile`] and validated like a job file. A problem is located at the request field
//! that gave the value.
//!
//! Unlike milvus-backup's server, unknown keys are refused (with the known ones listed),
//! and so are the keys lockstep does not implement (`restorePlan`, `skipParams`,
//! `bucket_name`, `path`), rather than silently restoring something else than asked.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use toml::Spanned;

use crate::backup::Strategy;

use super::file::{ClusterRef, JobFile};
use super::vocabulary::{Vocabulary, json_field_for};
use super::{Job, validate};
use crate::config::HostConfig;
use crate::config::{Env, process_env};
use crate::diagnostic::{Error, Input, Kind, Location, Problem};

/// Whether the caller waits for the restore's end (milvus-backup's `async`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResponseMode {
    /// `async: false` (default): the response carries the final state.
    #[default]
    Wait,
    /// `async: true`: respond at once; the caller polls `get_restore`.
    Async,
}

/// A validated REST restore request.
#[derive(Debug, Clone, PartialEq)]
pub struct RestRestore {
    pub job: Job,
    /// `requestId`, echoed in the response.
    pub request_id: Option<String>,
    pub response: ResponseMode,
}

/// The request body; field names are milvus-backup's JSON keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreRequest {
    #[serde(rename = "requestId")]
    request_id: Option<String>,
    backup_name: Option<String>,
    collection_names: Option<Vec<String>>,
    collection_suffix: Option<String>,
    collection_renames: Option<BTreeMap<String, String>>,
    #[serde(rename = "async")]
    run_async: Option<bool>,
    bucket_name: Option<String>,
    path: Option<String>,
    db_collections: Option<Value>,
    #[serde(rename = "metaOnly")]
    meta_only: Option<bool>,
    #[serde(rename = "restoreIndex")]
    restore_index: Option<bool>,
    #[serde(rename = "useAutoIndex")]
    use_auto_index: Option<bool>,
    #[serde(rename = "dropExistCollection")]
    drop_exist_collection: Option<bool>,
    #[serde(rename = "dropExistIndex")]
    drop_exist_index: Option<bool>,
    #[serde(rename = "skipCreateCollection")]
    skip_create_collection: Option<bool>,
    /// The task id; here the job's name.
    id: Option<String>,
    /// Deprecated in milvus-backup and ignored there: the disk quota check is always
    /// skipped for backup imports. Accepted and ignored here too.
    #[serde(rename = "skipImportDiskQuotaCheck")]
    _skip_import_disk_quota_check: Option<bool>,
    rbac: Option<bool>,
    #[serde(rename = "maxShardNum")]
    max_shard_num: Option<i64>,
    #[serde(rename = "skipParams")]
    skip_params: Option<Value>,
    #[serde(rename = "useV2Restore")]
    use_v2_restore: Option<bool>,
    #[serde(rename = "truncateBinlogByTs")]
    truncate_binlog_by_ts: Option<bool>,
    db_collections_after_rename: Option<Value>,
    #[serde(rename = "restorePlan")]
    restore_plan: Option<Value>,
    #[serde(rename = "ezkMapping")]
    ezk_mapping: Option<BTreeMap<String, String>>,
    target: Option<String>,
    secondaries: Option<Vec<String>>,
    strategy: Option<Strategy>,
}

fn unspanned<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

/// A field's value that is not allowed.
fn problem(field: &str, message: impl Into<String>) -> Problem {
    Problem {
        kind: Kind::Invalid,
        ..unread(field, message.into())
    }
}

/// A field that did not deserialize, of the kind serde says.
fn unread(field: &str, message: String) -> Problem {
    Problem {
        location: Location::JsonField(field.to_owned()),
        field: String::new(),
        kind: Kind::of_deserializing(&message),
        message,
    }
}

/// Parses the body one key at a time, so that every bad key is reported, not only the
/// first serde meets.
fn parse_request(body: &[u8], problems: &mut Vec<Problem>) -> Option<RestoreRequest> {
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => {
            let (line, column) = super::json_position(&e, body);
            problems.push(Problem {
                location: Location::Body { line, column },
                field: String::new(),
                kind: Kind::Syntax,
                message: format!("malformed JSON: {}", super::json_message(&e)),
            });
            return None;
        }
    };
    let Value::Object(object) = value else {
        // Not a request at all, as a body that is not JSON is not (gin's binding error
        // for both): located at the value, the body's first character that is not space.
        let at = body
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(0);
        let before = &body[..at];
        let line_start = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        problems.push(Problem {
            location: Location::Body {
                line: before.iter().filter(|b| **b == b'\n').count() + 1,
                column: at - line_start + 1,
            },
            field: String::new(),
            kind: Kind::WrongType,
            message: "expected a JSON object with milvus-backup's restore request fields"
                .to_string(),
        });
        return None;
    };
    let mut good = serde_json::Map::new();
    for (key, value) in object {
        let single = Value::Object(serde_json::Map::from_iter([(key.clone(), value.clone())]));
        match serde_json::from_value::<RestoreRequest>(single) {
            Ok(_) => {
                good.insert(key, value);
            }
            Err(e) => problems.push(unread(&key, e.to_string())),
        }
    }
    Some(serde_json::from_value(Value::Object(good)).expect("every key deserialized on its own"))
}

/// milvus-backup's `db_collections`: `{"db": ["coll", ...]}` (an empty list is the
/// whole database), as an object or a string holding one; as filter rules.
fn db_collections_rules(value: &Value, field: &str, problems: &mut Vec<Problem>) -> Option<String> {
    let parsed: Result<BTreeMap<String, Vec<String>>, String> = match value {
        Value::Null => return None,
        Value::String(s) if s.trim().is_empty() => return None,
        Value::String(s) => serde_json::from_str(s).map_err(|e| e.to_string()),
        other => serde_json::from_value(other.clone()).map_err(|e| e.to_string()),
    };
    match parsed {
        Ok(map) => {
            let rules: Vec<String> = map
                .iter()
                .flat_map(|(db, collections)| {
                    let db = if db.is_empty() {
                        crate::backup::DEFAULT_DB
                    } else {
                        db.as_str()
                    };
                    if collections.is_empty() {
                        vec![format!("{db}.*")]
                    } else {
                        collections.iter().map(|c| format!("{db}.{c}")).collect()
                    }
                })
                .collect();
            Some(rules.join(","))
        }
        Err(e) => {
            problems.push(problem(
                field,
                format!("{e}: expected {{\"db\": [\"collection\", ...]}} as an object or a string holding one"),
            ));
            None
        }
    }
}

/// Maps the request into a `JobFile`, with the problems only a request can have.
fn job_file(request: &RestoreRequest, problems: &mut Vec<Problem>) -> (JobFile, &'static str) {
    for (set, field, why) in [
        (
            request.restore_plan.as_ref().is_some_and(|p| !p.is_null()),
            "restorePlan",
            "not supported by lockstep; use collection_renames or collection_suffix with db_collections_after_rename",
        ),
        (
            request
                .skip_params
                .as_ref()
                .is_some_and(|p| !p.is_null() && p.as_object().is_none_or(|o| !o.is_empty())),
            "skipParams",
            "not supported by lockstep: collections are restored with the backup's properties and params",
        ),
    ] {
        if set {
            problems.push(problem(field, why));
        }
    }

    let mut strategy = request.strategy.map(unspanned);
    if request.use_v2_restore == Some(true) {
        match request.strategy {
            Some(Strategy::PerSeg) => problems.push(problem(
                "useV2Restore",
                "useV2Restore asks for the merged strategy and strategy asks for per_seg: give one",
            )),
            Some(Strategy::Merged) => {}
            None => strategy = Some(unspanned(Strategy::Merged)),
        }
    }

    let (backup_filter, backup_filter_field) = match (
        &request.db_collections,
        &request.collection_names,
    ) {
        (Some(db_collections), Some(names)) if !db_collections.is_null() && !names.is_empty() => {
            problems.push(problem(
                "db_collections",
                "db_collections and collection_names both select collections from the backup: give one",
            ));
            (None, "db_collections")
        }
        (Some(db_collections), _) if !db_collections.is_null() => (
            db_collections_rules(db_collections, "db_collections", problems),
            "db_collections",
        ),
        (_, Some(names)) => (
            (!names.is_empty()).then(|| names.join(",")),
            "collection_names",
        ),
        _ => (None, "db_collections"),
    };
    let filter = request
        .db_collections_after_rename
        .as_ref()
        .and_then(|v| db_collections_rules(v, "db_collections_after_rename", problems));

    let mut file = JobFile {
        name: request
            .id
            .clone()
            .filter(|id| !id.is_empty())
            .map(unspanned),
        backup: request.backup_name.clone().map(unspanned),
        target: request
            .target
            .clone()
            .map(|t| unspanned(ClusterRef::NameOrUri(t))),
        secondaries: request
            .secondaries
            .iter()
            .flatten()
            .map(|s| unspanned(ClusterRef::NameOrUri(s.clone())))
            .collect(),
        strategy,
        ..JobFile::default()
    };
    let restore = &mut file.restore;
    restore.backup_filter = backup_filter.map(unspanned);
    restore.filter = filter.map(unspanned);
    restore.suffix = request
        .collection_suffix
        .clone()
        .filter(|s| !s.is_empty())
        .map(unspanned);
    restore.rename = request
        .collection_renames
        .as_ref()
        .filter(|renames| !renames.is_empty())
        .map(|renames| {
            unspanned(
                renames
                    .iter()
                    .map(|(from, to)| unspanned(format!("{from}:{to}")))
                    .collect(),
            )
        });
    restore.drop_exist_collection = request.drop_exist_collection.filter(|d| *d).map(unspanned);
    restore.skip_create_collection = request.skip_create_collection.filter(|s| *s).map(unspanned);
    restore.meta_only = request.meta_only;
    restore.rebuild_index = request.restore_index;
    restore.use_auto_index = request.use_auto_index;
    restore.drop_exist_index = request.drop_exist_index;
    restore.rbac = request.rbac;
    // milvus-backup reads a zero maxShardNum as "no cap".
    restore.max_shard_num = request.max_shard_num.filter(|n| *n != 0).map(unspanned);
    restore.truncate_binlog_by_ts = request.truncate_binlog_by_ts;
    restore.ezk_mapping = request.ezk_mapping.clone();
    (file, backup_filter_field)
}

/// The host config with the request's `bucket_name` and `path` in place of its backups'
/// bucket and root, as milvus-backup reads the backup from them for this request alone.
fn backups_for(
    request: &RestoreRequest,
    host: &HostConfig,
    problems: &mut Vec<Problem>,
) -> HostConfig {
    let mut host = host.clone();
    let bucket = request.bucket_name.as_deref().filter(|b| !b.is_empty());
    let path = request.path.as_deref().filter(|p| !p.is_empty());
    if bucket.is_none() && path.is_none() {
        return host;
    }
    let Some(backups) = host.backups.as_mut() else {
        let field = if bucket.is_some() {
            "bucket_name"
        } else {
            "path"
        };
        problems.push(problem(
            field,
            "the host config has no [backups] section saying where backups live",
        ));
        return host;
    };
    if let Some(bucket) = bucket {
        let named = crate::config::is_bucket_name(bucket)
            .then(|| url::Url::parse(&format!("s3://{bucket}")).ok())
            .flatten();
        match named {
            Some(_) if backups.storage.url.scheme() != "s3" => problems.push(problem(
                "bucket_name",
                "the backups' store is a local directory, which has no buckets",
            )),
            Some(url) => backups.storage.url = url,
            None => problems.push(problem(
                "bucket_name",
                format!("`{bucket}` is not a bucket name: expected lowercase letters, digits, `.` and `-`"),
            )),
        }
    }
    if let Some(path) = path {
        let root = path.trim_matches('/');
        if root
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
        {
            problems.push(problem(
                "path",
                "expected the backups' root directory in the store: relative, without `.` or `..`",
            ));
        } else {
            backups.root = root.to_owned();
        }
    }
    host
}

pub(super) fn restore_from_body(
    body: &[u8],
    host: &HostConfig,
    env: Env<'_>,
) -> Result<RestRestore, Error> {
    let mut problems = Vec::new();
    let Some(request) = parse_request(body, &mut problems) else {
        return Err(Error::Invalid {
            input: Input::Request,
            problems,
        });
    };
    let (file, backup_filter_field) = job_file(&request, &mut problems);
    let host = &backups_for(&request, host, &mut problems);
    let context = validate::Context {
        host,
        env,
        default_name: request
            .backup_name
            .clone()
            .map(|name| validate::DefaultName {
                name,
                field: "backup",
                hint: "taken from `backup_name`; set `id` to choose another",
            }),
        base_dir: std::path::PathBuf::new(),
        removed: &[],
        vocabulary: Vocabulary::Request,
    };
    match validate::validate(file, &context) {
        Ok(job) if problems.is_empty() => Ok(RestRestore {
            job,
            request_id: request.request_id.clone(),
            response: if request.run_async == Some(true) {
                ResponseMode::Async
            } else {
                ResponseMode::Wait
            },
        }),
        Ok(_) => Err(Error::Invalid {
            input: Input::Request,
            problems,
        }),
        Err(raw) => {
            problems.extend(raw.into_iter().map(|p| {
                let field = match json_field_for(&p.field) {
                    "" if p.field.starts_with("restore.backup_filter") => {
                        backup_filter_field.to_owned()
                    }
                    "" => p.field.clone(),
                    known => known.to_owned(),
                };
                Problem {
                    location: Location::JsonField(field),
                    field: p.field,
                    kind: p.kind,
                    message: p.message,
                }
            }));
            Err(Error::Invalid {
                input: Input::Request,
                problems,
            })
        }
    }
}

impl Job {
    /// Validates a REST restore request body (milvus-backup's `RestoreBackupRequest`
    /// plus `target`, `secondaries` and `strategy`) against `host`.
    pub fn from_rest(body: &[u8], host: &HostConfig) -> Result<RestRestore, Error> {
        restore_from_body(body, host, &process_env)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::testing::{env, host};

    fn from_body(body: &str) -> Result<RestRestore, Error> {
        restore_from_body(body.as_bytes(), &host(), &env)
    }

    fn shown(err: &Error) -> Vec<String> {
        err.problems().iter().map(ToString::to_string).collect()
    }

    /// Found by fuzzing: serde_json puts an error at column 0 of a line it has not read a
    /// character of; the refusal names column 1, a place inside the body.
    #[test]
    fn a_body_cut_at_a_line_start_is_refused_at_column_one() {
        for (body, at) in [
            ("", "line 1, column 1"),
            ("{\"backup_name\": \"b\",\n", "line 2, column 1"),
        ] {
            let shown = shown(&from_body(body).unwrap_err());
            assert_eq!(shown.len(), 1, "{shown:?}");
            assert!(
                shown[0].starts_with(&format!(
                    "request body {at}: malformed JSON: EOF while parsing"
                )),
                "{shown:?}"
            );
            assert!(!shown[0].contains("column 0"), "{shown:?}");
        }
    }

    /// Found by fuzzing: JSON that is not an object was refused naming an empty field;
    /// it is refused at the value, as a body that is not JSON is.
    #[test]
    fn a_body_that_is_not_an_object_is_refused_at_its_value() {
        for (body, at) in [
            ("0", "line 1, column 1"),
            ("\n  [\"b\"]", "line 2, column 3"),
        ] {
            let shown = shown(&from_body(body).unwrap_err());
            assert_eq!(
                shown,
                [format!(
                    "request body {at}: expected a JSON object with milvus-backup's restore request fields"
                )]
            );
        }
    }

    /// Found by fuzzing: a request whose job name defaults to an invalid backup name is
    /// refused at `backup_name`, saying where the name came from, not at `id` as if it came
    /// from a file.
    #[test]
    fn a_job_name_taken_from_an_invalid_backup_name_is_refused_at_backup_name() {
        let shown = shown(
            &from_body(
                r#"{"backup_name": "o%ders", "target": "prod-a", "secondaries": ["prod-b"]}"#,
            )
            .unwrap_err(),
        );
        assert!(
            shown.contains(&"request field `backup_name`: invalid job name `o%ders` (taken from `backup_name`; set `id` to choose another): expected up to 128 letters, digits, `_`, `-` or `.`".to_string()),
            "{shown:?}"
        );
        assert!(!shown.iter().any(|p| p.contains("file name")), "{shown:?}");
    }

    /// The REST API runs no caller's code: a request cannot name a plugin, in any field a
    /// job file uses for one, so a check runs only when a job file on the host names it.
    #[test]
    fn a_request_cannot_name_a_plugin() {
        for field in [
            r#""check": [{"plugin": "/tmp/evil.wasm", "phase": "before-commit"}]"#,
            r#""checks": [{"plugin": "../../evil.wasm"}]"#,
            r#""plugin": "/tmp/evil.wasm""#,
        ] {
            let err = from_body(&format!(
                r#"{{"backup_name": "b", "target": "prod-a", {field}}}"#
            ))
            .err()
            .unwrap_or_else(|| panic!("{field} was taken"));
            let shown = shown(&err);
            assert_eq!(shown.len(), 1, "{shown:?}");
            assert!(shown[0].contains("unknown field"), "{shown:?}");
        }
    }

    #[test]
    fn request_makes_the_same_job_as_the_toml() {
        let toml = Job::from_str_with_env(
            r#"
            name = "restore_2026_11_29"
            backup = "orders_bak"
            target = "prod-a"
            secondaries = ["prod-b", "http://10.0.0.9:19530"]
            strategy = "merged"
            [restore]
            backup_filter = "db2.*,default.orders"
            filter = "default.orders_r"
            suffix = "_r"
            rebuild_index = true
            drop_exist_collection = true
            max_shard_num = 2
            truncate_binlog_by_ts = true
            ezk_mapping = { old = "new" }
            "#,
            Path::new("j.toml"),
            &host(),
            &env,
        )
        .unwrap();
        let rest = from_body(
            r#"{
                "requestId": "req-1",
                "id": "restore_2026_11_29",
                "backup_name": "orders_bak",
                "target": "prod-a",
                "secondaries": ["prod-b", "http://10.0.0.9:19530"],
                "db_collections": {"db2": [], "default": ["orders"]},
                "db_collections_after_rename": "{\"default\": [\"orders_r\"]}",
                "collection_suffix": "_r",
                "restoreIndex": true,
                "dropExistCollection": true,
                "skipImportDiskQuotaCheck": true,
                "maxShardNum": 2,
                "truncateBinlogByTs": true,
                "ezkMapping": {"old": "new"},
                "useV2Restore": true,
                "async": true
            }"#,
        )
        .unwrap();
        // The same job, spoken of in a request's fields rather than keys.
        assert_eq!(rest.job.vocabulary, Vocabulary::Request);
        assert_eq!(
            Job {
                vocabulary: Vocabulary::File,
                ..rest.job.clone()
            },
            toml
        );
        assert_eq!(rest.job.id(), toml.id());
        assert_eq!(rest.request_id.as_deref(), Some("req-1"));
        assert_eq!(rest.response, ResponseMode::Async);
    }

    #[test]
    fn collection_names_and_renames_map_like_milvus_backup() {
        let rest = from_body(
            r#"{"backup_name": "b", "target": "prod-a", "collection_names": ["c1", "db2.c2"],
                "collection_renames": {"c1": "c9", "db2.*": "db3.*"}, "maxShardNum": 0}"#,
        )
        .unwrap();
        let toml = Job::from_str_with_env(
            "backup = \"b\"\ntarget = \"prod-a\"\n[restore]\nbackup_filter = \"c1,db2.c2\"\nrename = [\"c1:c9\", \"db2.*:db3.*\"]\n",
            Path::new("b.toml"),
            &host(),
            &env,
        )
        .unwrap();
        assert_eq!(rest.job.restore, toml.restore);
        assert_eq!(rest.job.name, "b");
        assert_eq!(rest.response, ResponseMode::Wait);
        assert_eq!(rest.job.restore.max_shard_num, None);
    }

    #[test]
    fn bucket_name_and_path_move_the_backup_for_this_request() {
        let rest = from_body(
            r#"{"backup_name": "b", "target": "prod-a", "bucket_name": "archive-2026", "path": "/nightly/"}"#,
        )
        .unwrap();
        let plain = from_body(r#"{"backup_name": "b", "target": "prod-a"}"#).unwrap();
        let (moved, host) = (&rest.job.backup, &plain.job.backup);
        assert_eq!(moved.root, "nightly");
        assert_eq!(moved.storage.url.as_str(), "s3://archive-2026");
        assert_eq!(
            moved.storage.endpoint, host.storage.endpoint,
            "the same server"
        );
        assert_ne!(
            rest.job.id(),
            plain.job.id(),
            "another backup is another job"
        );
        let err =
            from_body(r#"{"backup_name": "b", "target": "prod-a", "bucket_name": "Not_A_Bucket"}"#)
                .unwrap_err();
        assert_eq!(
            shown(&err),
            [
                "request field `bucket_name`: `Not_A_Bucket` is not a bucket name: expected lowercase letters, digits, `.` and `-`"
            ]
        );
    }

    #[test]
    fn every_bad_key_is_reported_at_its_field() {
        let err = from_body(
            r#"{"backup_name": 7, "metaOnly": "yes", "colection_names": ["c"], "target": "prod-a",
                "restorePlan": {"mapping": []}, "path": "../root", "secondaries": ["prod-q"],
                "dropExistCollection": true, "skipCreateCollection": true}"#,
        )
        .unwrap_err();
        let mut problems = shown(&err);
        problems.sort();
        let mut expected = vec![
            "request field `backup_name`: invalid type: integer `7`, expected a string".to_string(),
            "request field `metaOnly`: invalid type: string \"yes\", expected a boolean".to_string(),
            "request field `colection_names`: unknown field `colection_names`, expected one of `requestId`, `backup_name`, `collection_names`, `collection_suffix`, `collection_renames`, `async`, `bucket_name`, `path`, `db_collections`, `metaOnly`, `restoreIndex`, `useAutoIndex`, `dropExistCollection`, `dropExistIndex`, `skipCreateCollection`, `id`, `skipImportDiskQuotaCheck`, `rbac`, `maxShardNum`, `skipParams`, `useV2Restore`, `truncateBinlogByTs`, `db_collections_after_rename`, `restorePlan`, `ezkMapping`, `target`, `secondaries`, `strategy`".to_string(),
            "request field `restorePlan`: not supported by lockstep; use collection_renames or collection_suffix with db_collections_after_rename".to_string(),
            "request field `path`: expected the backups' root directory in the store: relative, without `.` or `..`".to_string(),
            "request field `backup_name`: missing: expected the name of the backup to restore, e.g. \"backup_name\": \"my_backup\"".to_string(),
            "request field `secondaries`: unknown cluster `prod-q`; expected a cluster of the host config (`prod-a`, `prod-b`, `prod-c`) or an http(s):// URI".to_string(),
            "request field `dropExistCollection`: drop_exist_collection and skip_create_collection cannot both be true: choose dropping the existing collection or importing into it".to_string(),
        ];
        expected.sort();
        assert_eq!(problems, expected);
        assert!(
            err.to_string()
                .starts_with("restore request refused (8 problems):\n")
        );
    }

    #[test]
    fn malformed_json_and_bad_db_collections() {
        let err = from_body("{\"backup_name\": \"b\",\n \"target\": }").unwrap_err();
        assert_eq!(
            err.problems()[0].location,
            Location::Body {
                line: 2,
                column: 12
            }
        );

        let err =
            from_body(r#"{"backup_name": "b", "target": "prod-a", "db_collections": "{not json"}"#)
                .unwrap_err();
        assert_eq!(err.problems().len(), 1);
        assert_eq!(
            err.problems()[0].location,
            Location::JsonField("db_collections".into())
        );

        let err =
            from_body(r#"{"backup_name": "b", "target": "prod-a", "collection_names": ["a-b"]}"#)
                .unwrap_err();
        assert_eq!(
            shown(&err),
            vec![
                "request field `collection_names`: invalid filter rule `a-b`: expected `db.*`, `db.collection`, `collection` or `db.`"
            ]
        );

        let err = from_body(
            r#"{"backup_name": "b", "target": "prod-a", "collection_names": ["c"], "db_collections": {"d": []}}"#,
        )
        .unwrap_err();
        assert_eq!(
            err.problems()[0].location,
            Location::JsonField("db_collections".into())
        );

        let err = from_body("[1, 2]").unwrap_err();
        assert_eq!(err.problems().len(), 1);
    }

    #[test]
    fn null_and_empty_values_mean_unset_as_in_go() {
        let rest = from_body(
            r#"{"backup_name": "b", "target": "prod-a", "collection_suffix": "", "db_collections": null,
                "collection_renames": {}, "skipParams": {}, "bucket_name": "", "restorePlan": null, "id": ""}"#,
        )
        .unwrap();
        assert_eq!(rest.job.restore, crate::backup::RestoreOptions::default());
        assert_eq!(rest.job.name, "b");
    }
}
