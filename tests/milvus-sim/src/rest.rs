//! The REST v2 import API (docs/milvus-facts.md §1): six POST routes under
//! `/v2/vectordb/jobs/import/`, answering `{code, message, data}` at HTTP 200 whatever happened,
//! as Milvus's proxy does.
//!
//! Bodies are decoded as gin decodes them (Go's `encoding/json`): keys match case-insensitively,
//! unknown keys are ignored (pymilvus sends Zilliz Cloud fields), a value of the wrong type is
//! a binding error (1801) and a missing required field a validator error (1802). So these wire
//! structs deliberately do not deny unknown fields.

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value, json};

use crate::Protocol;
use crate::catalog::db_or_default;
use crate::cluster::{Cluster, CreateImport};
use crate::faults::ApiEffect;
use crate::jobs::ImportJob;
use crate::merr::{MilvusError, code};
use crate::rbac::{Caller, Denied, Required};
use crate::request_log::RequestRecord;
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
    let Some(caller) = cluster.access().authenticate(bearer) else {
        cluster.record_request(
            Protocol::Rest,
            &route,
            None,
            Some(code::NEED_AUTHENTICATE),
            None,
        );
        let body = json!({"code": code::NEED_AUTHENTICATE, "message": "user hasn't authenticated"});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    };
    let mut request = request;
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// A call the caller may not make: HTTP 403 with the interceptor's error, which is no merr
/// error and so carries code 65535 (`checkAuthorizationV2`).
struct Forbidden(Denied);

/// The privilege checks of one REST call.
struct Guard<'a> {
    cluster: &'a Cluster,
    caller: &'a Caller,
    /// The `DB-Name` header's database ("" for default).
    header_db: String,
}

impl<'a> Guard<'a> {
    fn new(cluster: &'a Cluster, caller: &'a Caller, headers: &HeaderMap) -> Self {
        Guard {
            cluster,
            caller,
            header_db: header_db(headers),
        }
    }

    fn require(&self, required: &Required) -> Result<(), Forbidden> {
        self.cluster
            .access()
            .authorize(self.caller, required)
            .map_err(Forbidden)
    }

    /// `Import` on a collection of `db`; for a binlog or L0 import also the cluster-level
    /// `ImportBinlog` where the cluster wants it.
    fn import(
        &self,
        db: &str,
        collection: &str,
        options: &BTreeMap<String, String>,
    ) -> Result<(), Forbidden> {
        self.require(&Required::collection("Import", db, collection))?;
        if self.cluster.requires_import_binlog(options) {
            self.require(&Required::cluster("ImportBinlog"))?;
        }
        Ok(())
    }

    /// describe, get_progress, commit, abort (`checkImportJobAuth`): `Import` on the job's
    /// collection in the header's database, whichever database the job is in. An unknown
    /// job passes, for the call to answer as Milvus's progress lookup does.
    fn job(&self, body: &[u8]) -> Result<(), Forbidden> {
        match job_id_of(body).and_then(|raw| self.cluster.describe_import(&raw)) {
            Ok(job) => self.require(&Required::collection(
                "Import",
                &self.header_db,
                &job.collection_name,
            )),
            Err(_) => Ok(()),
        }
    }
}

fn forbidden(cluster: &Cluster, route: &str, Forbidden(denied): Forbidden) -> Response {
    cluster.record_request(
        Protocol::Rest,
        &format!("{PREFIX}/{route}"),
        None,
        Some(code::UNEXPECTED),
        None,
    );
    let body = json!({
        "code": code::UNEXPECTED,
        "message": format!("rpc error: code = PermissionDenied desc = {denied}"),
    });
    (StatusCode::FORBIDDEN, axum::Json(body)).into_response()
}

fn header_db(headers: &HeaderMap) -> String {
    headers
        .get("DB-Name")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The envelope of every answer, logged on the way out.
fn answer(
    cluster: &Cluster,
    route: &str,
    job_id: Option<i64>,
    result: Result<Value, MilvusError>,
) -> Response {
    answer_about(cluster, route, job_id, None, result)
}

/// [`answer`] for a request about `collection` (`db.name`), which the log names.
fn answer_about(
    cluster: &Cluster,
    route: &str,
    job_id: Option<i64>,
    collection: Option<String>,
    result: Result<Value, MilvusError>,
) -> Response {
    let (code, body) = match result {
        Ok(data) => (code::SUCCESS, json!({"code": 0, "data": data})),
        Err(e) => (e.code, json!({"code": e.code, "message": e.message})),
    };
    let logged = RequestRecord::new(
        Protocol::Rest,
        &format!("{PREFIX}/{route}"),
        job_id,
        Some(code),
        None,
    );
    cluster.log_request(RequestRecord {
        collection,
        ..logged
    });
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

    /// `map[string]string`: only string values bind. Milvus 3.0's own `UnmarshalJSON`
    /// (#50695) also takes `null` (as `""`) for every key but `auto_commit`, which must be
    /// `"true"` or `"false"` in any case (docs/milvus-facts.md §1.2).
    fn options(&self, face: ImportFace) -> Result<BTreeMap<String, String>, MilvusError> {
        let two_phase = face == ImportFace::TwoPhase;
        let options = match self.get("options") {
            None => return Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    Value::Null if two_phase && k != "auto_commit" => {
                        Ok((k.clone(), String::new()))
                    }
                    other => Err(self.type_error("options", other, "string")),
                })
                .collect::<Result<BTreeMap<_, _>, _>>()?,
            Some(other) => return Err(self.type_error("options", other, "map[string]string")),
        };
        if two_phase
            && let Some(value) = options.get("auto_commit")
            && !["true", "false"]
                .iter()
                .any(|b| value.eq_ignore_ascii_case(b))
        {
            return Err(MilvusError::new(
                code::INCORRECT_PARAMETER_FORMAT,
                format!(
                    "can only accept json format request, error: options.auto_commit must be one of \"true\" or \"false\", got {value:?}: invalid parameter"
                ),
            ));
        }
        Ok(options)
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
    Ok(header_db(headers))
}

async fn create(
    State(cluster): State<Cluster>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let guard = Guard::new(&cluster, &caller, &headers);
    let result = (|| {
        let body = Body::parse(&bytes, "ImportReq")?;
        let request = CreateImport {
            db_name: db_name(&body, &headers)?,
            collection_name: body.required_string("collectionName", "CollectionName")?,
            partition_name: body.string("partitionName")?,
            files: body.files()?,
            options: body.options(cluster.import_face())?,
            idempotency_key: headers
                .get("Idempotency-Key")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
            protocol: crate::Protocol::Rest,
        };
        Ok(request)
    })();
    let mut collection = None;
    let result = match result {
        Ok(request) => {
            let allowed =
                guard.import(&request.db_name, &request.collection_name, &request.options);
            if let Err(forbid) = allowed {
                return forbidden(&cluster, "create", forbid);
            }
            collection = Some(format!(
                "{}.{}",
                db_or_default(&request.db_name),
                request.collection_name
            ));
            cluster.create_import(request)
        }
        Err(e) => Err(e),
    };
    let job_id = result.as_ref().ok().copied();
    if let Some(made) = job_id.filter(|id| cluster.take_lost_answer(*id)) {
        let logged = RequestRecord::new(
            Protocol::Rest,
            &format!("{PREFIX}/create"),
            Some(made),
            Some(code::SUCCESS),
            Some(ApiEffect::Unavailable),
        );
        cluster.log_request(RequestRecord {
            collection,
            ..logged
        });
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream connection lost after the request was served (fault injected by milvus-sim)",
        )
            .into_response();
    }
    answer_about(
        &cluster,
        "create",
        job_id,
        collection,
        result.map(|id| json!({"jobId": id.to_string()})),
    )
}

fn job_id_of(bytes: &[u8]) -> Result<String, MilvusError> {
    Body::parse(bytes, "JobIDReq")?.required_string("jobId", "JobID")
}

async fn describe(
    State(cluster): State<Cluster>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    request_path: axum::extract::OriginalUri,
    bytes: Bytes,
) -> Response {
    let route = request_path
        .path()
        .rsplit('/')
        .next()
        .unwrap_or("describe")
        .to_owned();
    if let Err(forbid) = Guard::new(&cluster, &caller, &headers).job(&bytes) {
        return forbidden(&cluster, &route, forbid);
    }
    let result = job_id_of(&bytes).and_then(|raw| cluster.describe_import(&raw));
    let job_id = result.as_ref().ok().map(|j| j.job_id);
    answer(
        &cluster,
        &route,
        job_id,
        result.map(|job| describe_data(&cluster, &job)),
    )
}

/// `data` of describe / get_progress (docs/milvus-facts.md §1.3).
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

async fn list(
    State(cluster): State<Cluster>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let guard = Guard::new(&cluster, &caller, &headers);
    let result = (|| {
        let body = Body::parse(&bytes, "OptionalCollectionNameReq")?;
        let db = db_name(&body, &headers)?;
        let collection = body.string("collectionName")?;
        let jobs = cluster.list_imports(&db, Some(&collection), |job| {
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
        })?;
        // Jobs of collections the caller may not import into are left out, not refused.
        let records: Vec<Value> = jobs
            .into_iter()
            .filter(|record| {
                let name = record["collectionName"].as_str().unwrap_or_default();
                guard
                    .require(&Required::collection("Import", &db, name))
                    .is_ok()
            })
            .collect();
        Ok(json!({ "records": records }))
    })();
    answer(&cluster, "list", None, result)
}

async fn commit(
    State(cluster): State<Cluster>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let guard = Guard::new(&cluster, &caller, &headers);
    job_action(&guard, "commit", &bytes, Cluster::commit_import)
}

async fn abort(
    State(cluster): State<Cluster>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let guard = Guard::new(&cluster, &caller, &headers);
    job_action(&guard, "abort", &bytes, Cluster::abort_import)
}

/// commit and abort: a `JobIDReq` body, the privilege on the job's collection, an action,
/// `data: {}`.
fn job_action(
    guard: &Guard<'_>,
    route: &str,
    bytes: &[u8],
    action: fn(&Cluster, &str) -> Result<i64, MilvusError>,
) -> Response {
    let cluster = guard.cluster;
    if let Err(forbid) = guard.job(bytes) {
        return forbidden(cluster, route, forbid);
    }
    let raw = job_id_of(bytes);
    let job_id = raw.as_ref().ok().and_then(|r| r.parse().ok());
    let result = raw.and_then(|raw| action(cluster, &raw));
    answer(cluster, route, job_id, result.map(|_| json!({})))
}
