//! The management API Milvus serves on its metrics port (9091, `METRICS_PORT`), apart from
//! the gRPC and REST port: how a client reads a cluster's configuration and build from outside
//! (docs/milvus-facts.md §4.6). Two of its WebUI routes, GET, under `/api/v1`:
//!
//! - `/_cluster/configs`: one flat JSON object of every setting as a string, keyed by its
//!   `milvus.yaml` path lowercased (`datacoord.import.enableinreplicatingcluster`), and the
//!   build variables of the process environment (`MILVUS_GIT_BUILD_TAGS`);
//! - `/_cluster/info`: the system-info metrics, `{"nodes_info": [...]}`, each node's
//!   `infos.system_info.build_version` the build GetVersion reports.
//!
//! With authorization on (a cluster with a token or users), the `/api/v1` group asks for
//! credentials as the REST port does: `Authorization: Bearer <token or user:password>`, or
//! HTTP Basic. Milvus answers a missing or wrong one with HTTP 401.
//!
//! Its own port because Milvus's is its own: a client that read these from the gRPC port
//! would pass against the sim and find nothing there on a real Milvus.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use serde_json::{Value, json};

use crate::Protocol;
use crate::catalog::DEFAULT_PARTITION;
use crate::cluster::Cluster;
use crate::merr::code;

/// Where Milvus mounts the WebUI's REST routes on the metrics port (`apiPathPrefix`).
const PREFIX: &str = "/api/v1";

pub(crate) fn router(cluster: Cluster) -> Router {
    Router::new()
        .route(&format!("{PREFIX}/_cluster/configs"), get(configs))
        .route(&format!("{PREFIX}/_cluster/info"), get(info))
        .with_state(cluster)
}

/// The credentials of a request, as the `/api/v1` group's `authenticate` reads them: a
/// bearer token or `user:password`, or HTTP Basic.
fn credentials(headers: &HeaderMap) -> Option<String> {
    let header = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    if let Some(bearer) = header.strip_prefix("Bearer ") {
        return Some(bearer.to_owned());
    }
    let basic = header.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(basic.trim())
        .ok()?;
    String::from_utf8(decoded).ok()
}

/// Answers `body` when the caller may ask, HTTP 401 otherwise; logged either way.
fn answer(
    cluster: &Cluster,
    route: &str,
    headers: &HeaderMap,
    body: impl FnOnce() -> Value,
) -> Response {
    let route = format!("{PREFIX}{route}");
    let presented = credentials(headers);
    if cluster
        .access()
        .authenticate(presented.as_deref())
        .is_none()
    {
        let code = code::NEED_AUTHENTICATE;
        cluster.record_request(Protocol::Rest, &route, None, Some(code), None);
        let body = json!({"code": code, "message": "user hasn't authenticated"});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    cluster.record_request(Protocol::Rest, &route, None, Some(code::SUCCESS), None);
    axum::Json(body()).into_response()
}

async fn configs(State(cluster): State<Cluster>, headers: HeaderMap) -> Response {
    answer(&cluster, "/_cluster/configs", &headers, || {
        configs_of(&cluster)
    })
}

async fn info(State(cluster): State<Cluster>, headers: HeaderMap) -> Response {
    answer(&cluster, "/_cluster/info", &headers, || info_of(&cluster))
}

/// The settings lockstep reads and a few that name the cluster, with the values the cluster
/// runs with. Milvus lists every setting; these are the ones the sim models.
fn configs_of(cluster: &Cluster) -> Value {
    let spec = cluster.spec();
    let retention = cluster.task_retention();
    let authorization = spec.token.is_some() || !spec.users.is_empty();
    json!({
        "MILVUS_GIT_BUILD_TAGS": cluster.build(),
        "common.defaultpartitionname": DEFAULT_PARTITION,
        "common.security.authorizationenabled": authorization.to_string(),
        "datacoord.import.enableinreplicatingcluster": spec.import_in_replicating_cluster.to_string(),
        "datacoord.import.enablel0import": cluster.l0_import_enabled().to_string(),
        "datacoord.import.maximportjobnum": spec.max_import_job_num.to_string(),
        "datacoord.import.taskretention": retention.as_secs().to_string(),
        "msgchannel.channameprefix.cluster": cluster.id(),
    })
}

/// One node of the system-info metrics, in the shape of Milvus's `metricsinfo` JSON.
fn node(cluster: &Cluster, role: &str, connected: Value, configurations: Value) -> Value {
    let created = jiff::Timestamp::now().to_string();
    json!({
        "identifier": 1,
        "connected": connected,
        "infos": {
            "has_error": false,
            "error_reason": "",
            "name": format!("{role}1"),
            "hardware_infos": {
                "ip": cluster.addr().to_string(),
                "cpu_core_count": 0,
                "cpu_core_usage": 0,
                "memory": 0,
                "memory_usage": 0,
                "disk": 0,
                "disk_usage": 0,
            },
            "system_info": {
                // The git commit; the sim has none.
                "system_version": "",
                "deploy_mode": "CLUSTER",
                "build_version": cluster.build(),
                "build_time": "",
                "used_go_version": "milvus-sim",
            },
            "created_time": created,
            "updated_time": created,
            "type": role,
            "id": 1,
            "system_configurations": configurations,
        },
    })
}

fn info_of(cluster: &Cluster) -> Value {
    let proxy = node(
        cluster,
        "proxy",
        json!([{"connected_identifier": 1, "type": "forward", "target_type": "datacoord"}]),
        json!({"default_partition_name": DEFAULT_PARTITION, "default_index_name": "_default_idx"}),
    );
    let datacoord = node(cluster, "datacoord", Value::Null, json!({}));
    json!({ "nodes_info": [proxy, datacoord] })
}
