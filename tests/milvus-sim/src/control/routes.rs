//! Server side of the control API.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::{ApiFaultRequest, DeleteObjects, Deleted, RestartRequest, StreamUpdate};
use crate::cluster::Cluster;
use crate::faults::{ChangedRow, Drift, JobFailure, LostAnswer, LostDelete, ShortImport};
use crate::go_duration;

pub(crate) fn router(cluster: Cluster) -> Router {
    Router::new()
        .route("/sim/v1/state", get(state))
        .route("/sim/v1/streams/{target}", post(stream))
        .route("/sim/v1/faults/job", post(job_fault))
        .route("/sim/v1/faults/short_import", post(short_import_fault))
        .route(
            "/sim/v1/faults/lost_delete",
            post(drift_fault::<LostDelete>),
        )
        .route(
            "/sim/v1/faults/changed_row",
            post(drift_fault::<ChangedRow>),
        )
        .route("/sim/v1/faults/api", post(api_fault))
        .route("/sim/v1/faults/lost_answer", post(lost_answer_fault))
        .route("/sim/v1/faults", delete(clear_faults))
        .route("/sim/v1/storage/delete", post(delete_objects))
        .route("/sim/v1/restart", post(restart))
        .with_state(cluster)
}

/// A refused control request: an HTTP status and `{"error": message}`.
struct Refusal {
    status: StatusCode,
    message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({ "error": self.message }))).into_response()
    }
}

fn refuse(status: StatusCode, message: impl std::fmt::Display) -> Refusal {
    Refusal {
        status,
        message: message.to_string(),
    }
}

fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, Refusal> {
    serde_json::from_slice(bytes)
        .map_err(|e| refuse(StatusCode::BAD_REQUEST, format!("invalid body: {e}")))
}

fn duration(field: &str, value: &str) -> Result<std::time::Duration, Refusal> {
    match go_duration::parse(value) {
        Ok(go_duration::GoDuration::Forward(d)) => Ok(d),
        Ok(go_duration::GoDuration::Backward(_)) => Err(refuse(
            StatusCode::BAD_REQUEST,
            format!("{field}: expected a non-negative duration"),
        )),
        Err(e) => Err(refuse(StatusCode::BAD_REQUEST, format!("{field}: {e}"))),
    }
}

async fn state(State(cluster): State<Cluster>) -> Response {
    axum::Json(cluster.snapshot()).into_response()
}

async fn stream(
    State(cluster): State<Cluster>,
    Path(target): Path<String>,
    bytes: Bytes,
) -> Response {
    let result = (|| {
        let update: StreamUpdate = body(&bytes)?;
        if !cluster.has_peer(&target) {
            return Err(refuse(
                StatusCode::NOT_FOUND,
                format!("no other cluster '{target}' in this sim"),
            ));
        }
        let lag = update
            .lag
            .as_deref()
            .map(|l| duration("lag", l))
            .transpose()?;
        Ok(axum::Json(cluster.configure_stream(&target, lag, update.flow)).into_response())
    })();
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn job_fault(State(cluster): State<Cluster>, bytes: Bytes) -> Response {
    match body::<JobFailure>(&bytes) {
        Ok(failure) if !failure.state.can_fail() => refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "a job cannot fail in state {}: only states before Committing can",
                failure.state.name()
            ),
        )
        .into_response(),
        Ok(failure) => {
            cluster.add_job_failure(failure);
            axum::Json(json!({})).into_response()
        }
        Err(refusal) => refusal.into_response(),
    }
}

async fn short_import_fault(State(cluster): State<Cluster>, bytes: Bytes) -> Response {
    match body::<ShortImport>(&bytes) {
        Ok(short) if short.rows <= 0 => refuse(
            StatusCode::BAD_REQUEST,
            "a short import takes at least one row".to_string(),
        )
        .into_response(),
        Ok(short) => {
            cluster.add_short_import(short);
            axum::Json(json!({})).into_response()
        }
        Err(refusal) => refusal.into_response(),
    }
}

async fn drift_fault<T: DeserializeOwned + Into<Drift>>(
    State(cluster): State<Cluster>,
    bytes: Bytes,
) -> Response {
    match body::<T>(&bytes) {
        Ok(drift) => {
            cluster.add_drift(drift);
            axum::Json(json!({})).into_response()
        }
        Err(refusal) => refusal.into_response(),
    }
}

async fn lost_answer_fault(State(cluster): State<Cluster>, bytes: Bytes) -> Response {
    match body::<LostAnswer>(&bytes) {
        Ok(lost) => {
            cluster.add_lost_answer(lost);
            axum::Json(json!({})).into_response()
        }
        Err(refusal) => refusal.into_response(),
    }
}

async fn api_fault(State(cluster): State<Cluster>, bytes: Bytes) -> Response {
    let result = body::<ApiFaultRequest>(&bytes).and_then(|req| {
        let d = duration("duration", &req.duration)?;
        cluster.add_api_fault(req.face, req.effect, d);
        Ok(axum::Json(json!({})).into_response())
    });
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn clear_faults(State(cluster): State<Cluster>) -> Response {
    cluster.clear_faults();
    axum::Json(json!({})).into_response()
}

async fn delete_objects(State(cluster): State<Cluster>, bytes: Bytes) -> Response {
    match remove_objects(&cluster, &bytes).await {
        Ok(deleted) => axum::Json(deleted).into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

async fn remove_objects(cluster: &Cluster, bytes: &Bytes) -> Result<Deleted, Refusal> {
    let store = cluster.store();
    let parse = |p: &str| {
        object_store::path::Path::parse(p.trim_start_matches('/'))
            .map_err(|e| refuse(StatusCode::BAD_REQUEST, format!("invalid path {p}: {e}")))
    };
    let paths = match body::<DeleteObjects>(bytes)? {
        DeleteObjects::Paths(paths) => paths
            .iter()
            .map(|p| parse(p))
            .collect::<Result<Vec<_>, _>>()?,
        DeleteObjects::Prefix(prefix) => {
            let prefix = parse(&prefix)?;
            store
                .list(Some(&prefix))
                .map_ok(|m| m.location)
                .try_collect::<Vec<_>>()
                .await
                .map_err(|e| {
                    refuse(
                        StatusCode::BAD_REQUEST,
                        format!("cannot list {prefix}: {e}"),
                    )
                })?
        }
    };
    let mut deleted = 0;
    for path in paths {
        match store.delete(&path).await {
            Ok(()) => deleted += 1,
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => {
                return Err(refuse(
                    StatusCode::BAD_REQUEST,
                    format!("cannot delete {path}: {e}"),
                ));
            }
        }
    }
    Ok(Deleted { deleted })
}

async fn restart(State(cluster): State<Cluster>, bytes: Bytes) -> Response {
    let result = body::<RestartRequest>(&bytes).and_then(|req| duration("down_for", &req.down_for));
    match result {
        Ok(down_for) => {
            // The server restarts the cluster; this answer goes out before the port closes.
            cluster.request_restart(down_for);
            (StatusCode::ACCEPTED, axum::Json(json!({}))).into_response()
        }
        Err(refusal) => refusal.into_response(),
    }
}
