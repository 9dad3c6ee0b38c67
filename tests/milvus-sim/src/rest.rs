//! The REST v2 import API (reference §1): six POST routes under `/v2/vectordb/jobs/import/`,
//! answering `{code, message, data}` at HTTP 200 whatever happened, as Milvus's proxy does.
//!
//! Bodies are decoded as gin decodes them (Go's `encoding/json`): keys match case-insensitively,
//! unknown keys are ignored (pymilvus sends Zilliz Cloud fields), a value of the wrong type is
//! a binding error (1801) and a missing required field a validator error (1802). So these wire
//! structs deliberately do not deny unknown fields.

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value, json};

use crate::Protocol;
use crate::cluster::{Cluster, CreateImport};
use crate::faults::ApiEffect;
use crate::jobs::ImportJob;
use crate::merr::{MilvusError, code};
use crate::version::ImportFace;

const PREFIX: &str = "/v2/vectordb/jobs/import";

/// The import routes the cluster's version has; the others answer HTTP 404, as a Milvus
/// without them does.
pub(crate) fn router(cluster: Cluster) -> Router {
    let face = cluster.import_face();
    let mut router = Router::new();
    if face == ImportFace::V1Only {
        return router.with_state(cluster);
    }
    router = router
        .route(&format!("{PREFIX}/create"), post(create))
        .route(&format!("{PREFIX}/describe"), post(describe))
        .route(&format!("{PREFIX}/get_progress"), post(describe))
        .route(&format!("{PREFIX}/list"), post(list));
    if face == ImportFace::TwoPhase {
        router = router
            .route(&format!("{PREFIX}/commit"), post(commit))
            .route(&format!("{PREFIX}/abort"), post(abort));
    }
    router
        .route_layer(axum::middleware::from_fn_with_state(cluster.clone(), guard))
        .with_state(cluster)
}

/// Injected faults and bearer auth, before any handler runs.
async fn guard(State(cluster): State<Cluster>, request: Request, next: Next) -> Response {
    let route = request.uri().path().to_owned();
    match cluster.api_effect(Protocol::Rest) {
        Some(effect @ ApiEffect::Unavailable) => {
            cluster.record_request(Protocol::Rest, &route, None, None, Some(effect));
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "service unavailable (fault injected by milvus-sim)",
            )
                .into_response();
        }
        Some(ApiEffect::Delay { delay_ms }) => {
            tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
        }
        None => {}
    }
    let bearer = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if !cluster.accepts_token(bearer) {
        cluster.record_request(
            Protocol::Rest,
            &route,
            None,
            Some(code::NEED_AUTHENTICATE),
            None,
        );
        let body = json!({"code": code::NEED_AUTHENTICATE, "message": "user hasn't authenticated"});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    next.run(request).await
}

/// The envelope of every answer, logged on the way out.
fn answer(
    cluster: &Cluster,
    route: &str,
    job_id: Option<i64>,
    result: Result<Value, MilvusError>,
) -> Response {
    let (code, body) = match result {
        Ok(data) => (code::SUCCESS, json!({"code": 0, "data": data})),
        Err(e) => (e.code, json!({"code": e.code, "message": e.message})),
    };
    cluster.record_request(
        Protocol::Rest,
        &format!("{PREFIX}/{route}"),
        job_id,
        Some(code),
        None,
    );
    axum::Json(body).into_response()
}

/// A decoded JSON object with Go's case-insensitive key lookup.
struct Body {
    map: Map<String, Value>,
    go_type: &'static str,
}

impl Body {
    fn parse(bytes: &[u8], go_type: &'static str) -> Result<Body, MilvusError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(MilvusError::new(
                code::INCORRECT_PARAMETER_FORMAT,
                "can only accept json format request, the request body should be nil, however {} is valid",
            ));
        }
        let bad = |detail: String| {
            MilvusError::new(
                code::INCORRECT_PARAMETER_FORMAT,
                format!("can only accept json format request, error: {detail}"),
            )
        };
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) => Ok(Body { map, go_type }),
            Ok(Value::Null) => Ok(Body {
                map: Map::new(),
                go_type,
            }),
            Ok(other) => Err(bad(format!(
                "json: cannot unmarshal {} into Go value of type httpserver.{go_type}",
                json_kind(&other)
            ))),
            Err(e) => Err(bad(e.to_string())),
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.map
            .get(key)
            .or_else(|| {
                self.map
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(key))
                    .map(|(_, v)| v)
            })
            .filter(|v| !v.is_null())
    }

    fn type_error(&self, key: &str, value: &Value, go: &str) -> MilvusError {
        MilvusError::new(
            code::INCORRECT_PARAMETER_FORMAT,
            format!(
                "can only accept json format request, error: json: cannot unmarshal {} into Go struct field {}.{key} of type {go}",
                json_kind(value),
                self.go_type
            ),
        )
    }

    fn string(&self, key: &str) -> Result<String, MilvusError> {
        match self.get(key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(self.type_error(key, v, "string")),
        }
    }

    /// A `binding:"required"` string: absent or empty fails validation.
    fn required_string(&self, key: &str, go_field: &str) -> Result<String, MilvusError> {
        let s = self.string(key)?;
        if s.is_empty() {
            return Err(self.missing(go_field));
        }
        Ok(s)
    }

    fn missing(&self, go_field: &str) -> MilvusError {
        MilvusError::new(
            code::MISSING_REQUIRED_PARAMETERS,
            format!(
                "missing required parameters, error: Key: '{}.{go_field}' Error:Field validation for '{go_field}' failed on the 'required' tag",
                self.go_type
            ),
        )
    }

    fn files(&self) -> Result<Vec<Vec<String>>, MilvusError> {
        let Some(value) = self.get("files") else {
            return Err(self.missing("Files"));
        };
        let Value::Array(groups) = value else {
            return Err(self.type_error("files", value, "[][]string"));
        };
        groups
            .iter()
            .map(|group| match group {
                Value::Array(files) => files
                    .iter()
                    .map(|f| match f {
                        Value::String(s) => Ok(s.clone()),
                        other => Err(self.type_error("files", other, "string")),
                    })
                    .collect(),
                Value::Null => Ok(Vec::new()),
                other => Err(self.type_error("files", other, "[]string")),
            })
            .collect()
    }

    /// `map[string]string`: only string values bind.
    fn options(&self) -> Result<BTreeMap<String, String>, MilvusError> {
        match self.get("options") {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    other => Err(self.type_error("options", other, "string")),
                })
                .collect(),
            Some(other) => Err(self.type_error("options", other, "map[string]string")),
        }
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The database of a request: the body's `dbName`, else the `DB-Name` header, else default.
fn db_name(body: &Body, headers: &HeaderMap) -> Result<String, MilvusError> {
    let from_body = body.string("dbName")?;
    if !from_body.is_empty() {
        return Ok(from_body);
    }
    Ok(headers
        .get("DB-Name")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned())
}

async fn create(State(cluster): State<Cluster>, headers: HeaderMap, bytes: Bytes) -> Response {
    let result = (|| {
        let body = Body::parse(&bytes, "ImportReq")?;
        let request = CreateImport {
            db_name: db_name(&body, &headers)?,
            collection_name: body.required_string("collectionName", "CollectionName")?,
            partition_name: body.string("partitionName")?,
            files: body.files()?,
            options: body.options()?,
            idempotency_key: headers
                .get("Idempotency-Key")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
            protocol: crate::Protocol::Rest,
        };
        cluster.create_import(request)
    })();
    let job_id = result.as_ref().ok().copied();
    answer(
        &cluster,
        "create",
        job_id,
        result.map(|id| json!({"jobId": id.to_string()})),
    )
}

fn job_id_of(bytes: &[u8]) -> Result<String, MilvusError> {
    Body::parse(bytes, "JobIDReq")?.required_string("jobId", "JobID")
}

async fn describe(
    State(cluster): State<Cluster>,
    request_path: axum::extract::OriginalUri,
    bytes: Bytes,
) -> Response {
    let route = request_path
        .path()
        .rsplit('/')
        .next()
        .unwrap_or("describe")
        .to_owned();
    let result = job_id_of(&bytes).and_then(|raw| cluster.describe_import(&raw));
    let job_id = result.as_ref().ok().map(|j| j.job_id);
    answer(
        &cluster,
        &route,
        job_id,
        result.map(|job| describe_data(&cluster, &job)),
    )
}

/// `data` of describe / get_progress (reference §1.3).
fn describe_data(cluster: &Cluster, job: &ImportJob) -> Value {
    let fraction = cluster.stage_fraction(job);
    let (imported, total) = job.row_counts(fraction);
    let progress = job.progress(fraction);
    let complete_time = job.completed.map(|s| s.go_rfc3339()).unwrap_or_default();
    let details: Vec<Value> = job
        .files
        .iter()
        .enumerate()
        .map(|(i, files)| {
            let group = job.groups.get(i);
            let group_total = group.map_or(0, |g| g.rows);
            let group_imported = if total == 0 {
                0
            } else {
                group_total * imported / total
            };
            let mut detail = json!({
                "fileName": format!("[{}]", files.join(" ")),
                "fileSize": group.map_or(0, |g| g.size),
                "progress": progress,
                "completeTime": complete_time,
                "state": job.task_state(),
                "importedRows": if total == 0 { 0 } else { group_imported },
                "totalRows": if total == 0 { 0 } else { group_total },
            });
            if !job.reason.is_empty() {
                detail["reason"] = json!(job.reason);
            }
            detail
        })
        .collect();
    let mut data = json!({
        "jobId": job.job_id.to_string(),
        "collectionName": job.collection_name,
        "state": job.external_state().name(),
        "progress": progress,
        "importedRows": imported,
        "totalRows": total,
        "createTime": job.created.go_rfc3339(),
        "completeTime": complete_time,
        "fileSize": job.groups.iter().map(|g| g.size).sum::<u64>(),
        "details": details,
    });
    if !job.reason.is_empty() {
        data["reason"] = json!(job.reason);
    }
    data
}

async fn list(State(cluster): State<Cluster>, headers: HeaderMap, bytes: Bytes) -> Response {
    let result = (|| {
        let body = Body::parse(&bytes, "OptionalCollectionNameReq")?;
        let db = db_name(&body, &headers)?;
        let collection = body.string("collectionName")?;
        let jobs = cluster.list_imports(&db, Some(&collection))?;
        let records: Vec<Value> = jobs
            .iter()
            .map(|job| {
                let mut record = json!({
                    "jobId": job.job_id.to_string(),
                    "collectionName": job.collection_name,
                    "state": job.external_state().name(),
                    "progress": job.progress(cluster.stage_fraction(job)),
                });
                if !job.reason.is_empty() {
                    record["reason"] = json!(job.reason);
                }
                record
            })
            .collect();
        Ok(json!({ "records": records }))
    })();
    answer(&cluster, "list", None, result)
}

async fn commit(State(cluster): State<Cluster>, bytes: Bytes) -> Response {
    job_action(&cluster, "commit", &bytes, Cluster::commit_import)
}

async fn abort(State(cluster): State<Cluster>, bytes: Bytes) -> Response {
    job_action(&cluster, "abort", &bytes, Cluster::abort_import)
}

/// commit and abort: a `JobIDReq` body, an action, `data: {}`.
fn job_action(
    cluster: &Cluster,
    route: &str,
    bytes: &[u8],
    action: fn(&Cluster, &str) -> Result<i64, MilvusError>,
) -> Response {
    let raw = job_id_of(bytes);
    let job_id = raw.as_ref().ok().and_then(|r| r.parse().ok());
    let result = raw.and_then(|raw| action(cluster, &raw));
    answer(cluster, route, job_id, result.map(|_| json!({})))
}
