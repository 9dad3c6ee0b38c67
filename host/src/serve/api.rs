//! The REST API, compatible with milvus-backup's server where it overlaps
//! (docs/milvus-facts.md §5.5): `POST /api/v1/restore` with its request fields (plus `target`,
//! `secondaries` and `strategy`), `GET /api/v1/get_restore?id=`, and the `{requestId, code,
//! msg, data}` envelope with its codes, HTTP 200 for every answer but a body that is not
//! JSON (HTTP 400 `{"error": ...}`, as gin answers). Unlike milvus-backup, state is the
//! journal's, so it survives a restart and is the same on every host of a fleet.
//!
//! Added: `GET /api/v1/list_restores`, `GET /healthz`, `GET /readyz`, `GET /metrics`, the OpenAPI
//! document at `/api/v1/openapi.json`, and a status page at `/` (`status.html`, which reads
//! `list_restores`). Every route but the probes and the page requires
//! `Authorization: Bearer <token>` when a token is configured (a read token only on `GET`
//! routes, [`super::access`]); the CLI refuses to listen off loopback without TLS and a
//! token. Every route but the probes refuses a request that is not this server's by its
//! `Host` or `Origin`, and one that changes something without a JSON body
//! ([`super::origin`]). A restore's record keeps who asked for it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Extension, Router};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::envelope::{Code, answered, envelope, header_request_id, refused_request};
use super::listen::Conn;
use super::runner::{Ended, RETRY_AFTER, Rerun, recorded_report};
use super::state::ApiState;
use crate::engine::Report;
use crate::job::{Job, Location, ResponseMode};
use crate::journal::{
    Decision, Outcome, ProgressSnapshot, RequestedBy, RestoreId, RestoreLookup, RestorePhase,
    RestoreRecord, TokenScope,
};

/// milvus-backup's restore task states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum StateCode {
    Initial = 0,
    Executing = 1,
    Success = 2,
    Fail = 3,
}

/// Every route, for the OpenAPI test: (method, path).
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/api/v1/restore"),
    ("get", "/api/v1/get_restore"),
    ("get", "/api/v1/list_restores"),
    ("get", "/api/v1/list"),
    ("get", "/api/v1/get_backup"),
    ("get", "/api/v1/hello"),
    ("post", "/api/v1/restore_secondary"),
    ("post", "/api/v1/create"),
    ("delete", "/api/v1/delete"),
    ("get", "/api/v1/openapi.json"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/"),
];

/// Go's zero `time.Time` in Unix seconds: what milvus-backup shows as the end time of a
/// restore that has not ended (its omitempty does not leave out a non-zero number).
pub const UNSET_TIME: i64 = -62_135_596_800;

/// A restore as milvus-backup's `get_restore` shows one, plus lockstep's own fields.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RestoreView {
    /// The restore id (`{name}.{hash12}.{attempt}`), or the job identity (`{name}.{hash12}`)
    /// while it waits for its turn.
    pub id: String,
    pub state_code: i32,
    #[serde(rename = "errorMessage")]
    pub error_message: String,
    /// Unix seconds; [`UNSET_TIME`] (Go's zero time, as milvus-backup shows it) when not
    /// started or not ended.
    pub start_time: i64,
    pub end_time: i64,
    /// 1..=100 (never 0, as milvus-backup shows it); 100 once succeeded.
    pub progress: i32,
    pub collection_restore_tasks: Vec<CollectionView>,
    pub job_name: String,
    pub outcome: Option<Outcome>,
    pub phase: Option<RestorePhase>,
    /// What a running restore waits on, where this host runs it: "waiting for default.orders
    /// on standby-2 (made 25 s ago)", "committed; waiting for standby-2 to complete".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// The final report, once finished.
    pub report: Option<Report>,
    /// Job states and rows per end at the restore's last journal write, from whichever host
    /// runs it.
    #[serde(default)]
    pub snapshot: Option<ProgressSnapshot>,
    /// Who asked for the restore, as its record keeps it.
    #[serde(default)]
    pub requested_by: Option<RequestedBy>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CollectionView {
    /// Always "", as milvus-backup answers.
    pub id: String,
    pub state_code: i32,
    #[serde(rename = "errorMessage")]
    pub error_message: String,
    pub start_time: i64,
    pub end_time: i64,
    pub progress: i32,
    pub target_db_name: String,
    pub target_collection_name: String,
}

pub fn router(state: Arc<ApiState>) -> Router {
    let guarded = Router::new()
        .route("/api/v1/restore", changes(post(restore)))
        .route("/api/v1/get_restore", get(get_restore))
        .route("/api/v1/list_restores", get(list_restores))
        .route("/api/v1/list", get(super::backups::list))
        .route("/api/v1/get_backup", get(super::backups::get_backup))
        .route("/api/v1/hello", get(super::backups::hello))
        .route(
            "/api/v1/restore_secondary",
            changes(post(|h: HeaderMap| not_served(h, NOT_SECONDARY))),
        )
        .route(
            "/api/v1/create",
            changes(post(|h: HeaderMap| not_served(h, NOT_BACKUPS))),
        )
        .route(
            "/api/v1/delete",
            changes(axum::routing::delete(|h: HeaderMap| {
                not_served(h, NOT_BACKUPS)
            })),
        )
        .route("/api/v1/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(
            Arc::new(state.tokens.clone()),
            super::access::authorize,
        ));
    Router::new()
        // The page holds no data: its script asks the API, with the token when one is set.
        .route("/", get(|| async { Html(include_str!("status.html")) }))
        .merge(guarded)
        .route_layer(middleware::from_fn_with_state(
            Arc::new(state.allowed.clone()),
            super::origin::same_origin,
        ))
        // Added after the same-origin check, which they are spared: probes reach them by
        // whatever address. `/healthz` says only that the process answers (liveness);
        // `/readyz` whether the journal can be written and read, with why not.
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// 200 while the journal can be written and read, 503 with the reason while it cannot: a
/// host that cannot record a restore must not be sent one.
async fn readyz(State(state): State<Arc<ApiState>>) -> Response {
    match state.runner.journal().ready().await {
        Ok(()) => "ready\n".into_response(),
        Err(e) => {
            let why = crate::diagnostic::error_chain(&e);
            tracing::warn!(reason = %why, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: the journal: {why}\n"),
            )
                .into_response()
        }
    }
}

/// A route that changes something (every POST and DELETE): after the token, it takes the
/// restore token alone, then a JSON body alone, read in time. On the method's own handler, so that a
/// method no route serves still gets 405.
fn changes(route: MethodRouter<Arc<ApiState>>) -> MethodRouter<Arc<ApiState>> {
    route
        .route_layer(middleware::from_fn(super::listen::body_in_time))
        .route_layer(middleware::from_fn(super::origin::json_only))
        .route_layer(middleware::from_fn(super::access::restore_scope_only))
}

/// milvus-backup's routes lockstep does not serve, answered with its `Not_Support` code and
/// what to do instead rather than a bare 404.
async fn not_served(headers: HeaderMap, why: &'static str) -> Response {
    envelope::<()>(header_request_id(&headers), Code::NotSupport, why, None)
}

const NOT_SECONDARY: &str = "lockstep does not restore a secondary on its own: it restores into \
     the primary and holds every secondary's mirror of each job until all of them can commit; \
     POST /api/v1/restore with `secondaries`";

const NOT_BACKUPS: &str = "lockstep restores backups; it does not create or delete them: use \
     milvus-backup for that";

/// A restore's request id: the body's `requestId`, else a new one, as milvus-backup makes.
fn request_id(given: Option<String>) -> String {
    given.filter(|r| !r.is_empty()).unwrap_or_else(|| {
        use ring::rand::SecureRandom as _;
        let mut b = [0u8; 16];
        ring::rand::SystemRandom::new()
            .fill(&mut b)
            .expect("the OS random source is available");
        hex::encode(b)
    })
}

async fn restore(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(conn): ConnectInfo<Conn>,
    Extension(scope): Extension<TokenScope>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let at = Timestamp::now();
    let host = state.runner.host().clone();
    let parsed = tokio::task::spawn_blocking(move || Job::from_rest(&body, &host))
        .await
        .expect("validation does not panic");
    let rest = match parsed {
        Ok(rest) => rest,
        Err(e) => {
            if e.problems()
                .iter()
                .any(|p| matches!(p.location, Location::Body { .. }))
            {
                // Not a JSON object at all: gin's binding error, HTTP 400.
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({ "error": e.to_string() })),
                )
                    .into_response();
            }
            return refused_request(header_request_id(&headers), e.to_string(), e.problems());
        }
    };
    let request_id = request_id(rest.request_id.clone());
    tracing::info!(%request_id, %scope, peer = %conn.peer, job = %rest.job.name, "restore requested");
    let requested_by = RequestedBy::Api {
        scope,
        peer: conn.peer.to_string(),
        at,
        request_id: request_id.clone(),
    };
    let handle = match state
        .runner
        .ask(requested_by, &rest.job, Rerun::AfterFailure)
    {
        Ok(handle) => handle,
        Err(full) => {
            tracing::warn!(%request_id, job = %rest.job.name, "restore refused: {full}");
            let wait = RETRY_AFTER.as_secs().to_string();
            let mut answer = answered(
                StatusCode::TOO_MANY_REQUESTS,
                request_id,
                Code::Fail,
                full.to_string(),
            );
            let wait = header::HeaderValue::from_str(&wait).expect("digits are a header value");
            answer.headers_mut().insert(header::RETRY_AFTER, wait);
            return answer;
        }
    };
    match rest.response {
        ResponseMode::Async => envelope(
            request_id,
            Code::Success,
            "restore backup is executing asynchronously",
            Some(queued_view(&handle.identity, &rest.job.name)),
        ),
        ResponseMode::Wait => match handle.ended().await {
            // As milvus-backup answers a failed restore: `data` null, the reason in `msg`;
            // `get_restore` and `list_restores` still show the restore whole.
            Ended::Report(report) if report.outcome != Outcome::Succeeded => {
                envelope::<()>(request_id, Code::Fail, report.summary, None)
            }
            Ended::Report(report) => {
                let recorded = match RestoreId::parse(&report.restore_id) {
                    Ok(id) => state.runner.journal().load(&id).await.ok().flatten(),
                    Err(_) => None,
                };
                let view = match recorded {
                    Some(record) => view_of(&state, &record),
                    None => view_of_report(&report),
                };
                envelope(request_id, Code::Success, "success", Some(view))
            }
            Ended::NothingRan => envelope::<()>(
                request_id,
                Code::Fail,
                "the restore was cancelled before it started (the server is stopping)",
                None,
            ),
        },
    }
}

#[derive(Debug, Deserialize)]
struct IdQuery {
    id: Option<String>,
}

async fn get_restore(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    Query(query): Query<IdQuery>,
) -> Response {
    let rid = header_request_id(&headers);
    let Some(id) = query.id.filter(|i| !i.is_empty()) else {
        return envelope::<()>(rid, Code::ParameterError, "id is required", None);
    };
    // The message names the rule, not the input: an id may be a probe for a path.
    let lookup = match RestoreLookup::parse(&id) {
        Ok(lookup) => lookup,
        Err(e) => return envelope::<()>(rid, Code::ParameterError, e.to_string(), None),
    };
    match find(&state, &lookup).await {
        Ok(Some(view)) => envelope(rid, Code::Success, "success", Some(view)),
        Ok(None) => envelope::<()>(rid, Code::Fail, format!("task not found: {id}"), None),
        Err(e) => journal_unreadable(rid, &e),
    }
}

/// A restore id; else a job identity (`{name}.{hash12}`) or a job name, whose newest
/// attempt is shown; else a job waiting for its turn here. Only a parsed id is loaded by
/// key, so no query can name a file.
async fn find(
    state: &ApiState,
    lookup: &RestoreLookup,
) -> crate::journal::Result<Option<RestoreView>> {
    if let Some(record) = lookup.find(state.runner.journal().as_ref()).await? {
        return Ok(Some(view_of(state, &record)));
    }
    Ok(state
        .runner
        .active()
        .into_iter()
        .find(|identity| lookup.names_identity(identity))
        .map(|identity| queued_view(&identity, "")))
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    limit: Option<String>,
}

/// The restores, newest first: every one, or the newest `limit`, in which case the answer
/// (and what the server holds to make it) grows with `limit`, not with the journal.
async fn list_restores(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let rid = header_request_id(&headers);
    // A query that does not parse (a field twice, say) gets milvus-backup's code 400 in the
    // envelope, as a bad `limit` does, not axum's bare 400.
    let Ok(Query(query)) = query.map_err(|e| tracing::debug!(error = %e, "bad query")) else {
        return envelope::<()>(
            rid,
            Code::ParameterError,
            "the query string does not parse: expected at most one limit",
            None,
        );
    };
    let limit = match query.limit.as_deref().map(str::parse::<usize>) {
        None => None,
        Some(Ok(n)) if n > 0 => Some(n),
        Some(_) => {
            return envelope::<()>(
                rid,
                Code::ParameterError,
                "limit: expected a whole number of restores, at least 1",
                None,
            );
        }
    };
    let journal = state.runner.journal();
    let listed = match limit {
        Some(n) => journal.newest(n).await,
        None => journal.list().await,
    };
    match listed {
        Ok(listing) => {
            // One bad record is named (by its key, not its content), and the rest listed:
            // every one known, whether or not among the newest asked for (the measured
            // journal noted this listing's too).
            let unreadable = state.runner.journal_stats().unreadable();
            let msg = match unreadable.len() {
                0 => "success".to_owned(),
                n => format!(
                    "success; {n} journal record(s) do not read and are left out ({}); the server's log says why",
                    unreadable.join(", ")
                ),
            };
            let mut records = listing.readable();
            records.reverse();
            let views: Vec<RestoreView> = records.iter().map(|r| view_of(&state, r)).collect();
            envelope(rid, Code::Success, msg, Some(views))
        }
        Err(e) => journal_unreadable(rid, &e),
    }
}

/// A journal error names journal paths and may quote a record: the log gets it, the caller
/// does not.
fn journal_unreadable(rid: String, e: &crate::journal::Error) -> Response {
    tracing::warn!(error = %e, "the journal could not be read");
    envelope::<()>(
        rid,
        Code::Fail,
        "the journal could not be read; the server's log says why",
        None,
    )
}

async fn openapi(State(state): State<Arc<ApiState>>) -> Response {
    axum::Json(super::openapi::document(state.tokens.setup())).into_response()
}

async fn metrics(State(state): State<Arc<ApiState>>) -> Response {
    let outcomes = state.runner.journal().count_outcomes().await;
    if let Err(e) = &outcomes {
        tracing::warn!(error = %e, "the journal's records could not be counted for /metrics");
    }
    let text = super::metrics::render(
        outcomes.as_ref().ok(),
        state.runner.journal_stats(),
        state.runner.progress(),
        state.runner.tracked(),
        state.watch.as_deref(),
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

fn queued_view(identity: &str, job_name: &str) -> RestoreView {
    RestoreView {
        id: identity.trim_end_matches('.').to_string(),
        state_code: StateCode::Initial as i32,
        error_message: String::new(),
        start_time: UNSET_TIME,
        end_time: UNSET_TIME,
        progress: 1,
        collection_restore_tasks: vec![],
        job_name: job_name.to_string(),
        outcome: None,
        phase: None,
        report: None,
        waiting_for: None,
        snapshot: None,
        requested_by: None,
    }
}

fn state_code(outcome: Option<Outcome>) -> StateCode {
    match outcome {
        // A lost attempt goes on under its new holder; no record holds it, but a report may.
        None | Some(Outcome::Incomplete | Outcome::Lost) => StateCode::Executing,
        Some(Outcome::Succeeded) => StateCode::Success,
        Some(
            Outcome::Refused
            | Outcome::RolledBack
            | Outcome::Diverged
            | Outcome::Unverified
            | Outcome::PartlyCommitted
            | Outcome::HostFailed,
        ) => StateCode::Fail,
    }
}

/// Progress in percent from the phase (and, while holding, the share of jobs seen ready on
/// every end); at least 1 once started and 100 when succeeded, as milvus-backup shows it.
fn progress(record: &RestoreRecord, live: Option<&super::progress::Live>) -> i32 {
    use crate::milvus::JobState;
    if record.outcome == Some(Outcome::Succeeded) {
        return 100;
    }
    let phase = live.and_then(|l| l.phase).unwrap_or(record.phase);
    let pct = match phase {
        RestorePhase::Preflight => 1.0,
        RestorePhase::Ddl => 5.0,
        RestorePhase::Staging => {
            let share = live
                .and_then(|l| l.staging)
                .filter(|s| s.bytes_total > 0)
                .map_or(0.0, |s| s.bytes_done as f64 / s.bytes_total as f64);
            5.0 + 25.0 * share
        }
        RestorePhase::Importing | RestorePhase::Holding => {
            let (ready, total) = live.map_or((0, 0), |l| {
                l.jobs.iter().fold((0, 0), |(r, t), (_, states)| {
                    let ready: usize = states
                        .iter()
                        .filter(|(s, _)| {
                            matches!(
                                s,
                                JobState::Uncommitted | JobState::Committing | JobState::Completed
                            )
                        })
                        .map(|(_, n)| n)
                        .sum();
                    (r + ready, t + states.values().sum::<usize>())
                })
            });
            30.0 + if total > 0 {
                60.0 * ready as f64 / total as f64
            } else {
                0.0
            }
        }
        RestorePhase::Deciding => 90.0,
        RestorePhase::Completing => 95.0,
        RestorePhase::Finished => 99.0,
    };
    (pct as i32).clamp(1, 100)
}

/// What a running restore waits on: what the engine said it waits for, or, once it is
/// committed, the ends whose jobs have not completed.
fn waiting_for(live: &super::progress::Live) -> Option<String> {
    use crate::milvus::JobState;
    if let Some(waiting) = &live.waiting {
        return Some(waiting.to_string());
    }
    if live.phase != Some(RestorePhase::Completing) {
        return None;
    }
    let behind: Vec<&str> = (live.jobs.iter())
        .filter(|(_, states)| (states.iter()).any(|(s, n)| *s != JobState::Completed && *n > 0))
        .map(|(end, _)| end.as_str())
        .collect();
    (!behind.is_empty())
        .then(|| format!("committed; waiting for {} to complete", behind.join(", ")))
}

fn view_of(state: &ApiState, record: &RestoreRecord) -> RestoreView {
    let live = state.runner.progress().get(record.id.as_str());
    let report = recorded_report(record);
    let code = state_code(record.outcome);
    let end_time = if record.outcome.is_some() {
        record.updated_at.as_second()
    } else {
        UNSET_TIME
    };
    let error_message = match (&report, code) {
        (Some(r), StateCode::Fail) => r.summary.clone(),
        _ => String::new(),
    };
    let mut collections: BTreeMap<(String, String), CollectionView> = BTreeMap::new();
    for group in &record.groups {
        let (state_code, error) = match (&group.decision, record.outcome) {
            (
                Some(Decision::Commit { .. }),
                Some(Outcome::Succeeded | Outcome::PartlyCommitted),
            ) => (StateCode::Success, String::new()),
            (Some(Decision::Abort { reason, .. }), _) => (StateCode::Fail, reason.clone()),
            (_, Some(Outcome::Refused | Outcome::RolledBack)) => {
                (StateCode::Fail, error_message.clone())
            }
            _ => (StateCode::Executing, String::new()),
        };
        for b in &group.batches {
            collections
                .entry((b.planned.db.clone(), b.planned.collection.clone()))
                .or_insert_with(|| CollectionView {
                    id: String::new(),
                    state_code: state_code as i32,
                    error_message: error.clone(),
                    start_time: record.started_at.as_second(),
                    end_time,
                    progress: if state_code == StateCode::Success {
                        100
                    } else {
                        progress(record, live.as_ref())
                    },
                    target_db_name: b.planned.db.clone(),
                    target_collection_name: b.planned.collection.clone(),
                });
        }
    }
    RestoreView {
        id: record.id.to_string(),
        state_code: code as i32,
        error_message,
        start_time: record.started_at.as_second(),
        end_time,
        progress: progress(record, live.as_ref()),
        collection_restore_tasks: collections.into_values().collect(),
        job_name: record.job_name.clone(),
        outcome: record.outcome,
        // What this host sees now may be ahead of the record's last write.
        phase: Some(
            (live.as_ref().and_then(|l| l.phase)).map_or(record.phase, |p| p.max(record.phase)),
        ),
        report,
        waiting_for: live.as_ref().and_then(waiting_for),
        snapshot: record.progress.clone(),
        requested_by: record.requested_by.clone(),
    }
}

/// A view from a report alone (a refusal before any journal record).
fn view_of_report(report: &Report) -> RestoreView {
    RestoreView {
        id: report.restore_id.clone(),
        state_code: state_code(Some(report.outcome)) as i32,
        error_message: report.summary.clone(),
        start_time: report.started_at.as_second(),
        end_time: report.finished_at.as_second(),
        progress: if report.outcome == Outcome::Succeeded {
            100
        } else {
            1
        },
        collection_restore_tasks: vec![],
        job_name: report.job_name.clone(),
        outcome: Some(report.outcome),
        phase: Some(RestorePhase::Finished),
        report: Some(report.clone()),
        waiting_for: None,
        snapshot: None,
        requested_by: None,
    }
}
