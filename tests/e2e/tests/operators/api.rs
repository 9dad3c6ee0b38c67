//! The REST API against milvus-sim: every route, sync and async restores, the envelope and
//! codes, auth and the tokens' scopes, bad bodies, what a browser could be made to send
//! (another Host or Origin, a body that is not JSON), who asked for a restore, the OpenAPI
//! document checked against the answers, and state read back after the server restarts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lockstep::config::HostConfig;
use lockstep::engine::{Interrupt, Silent};
use lockstep::journal::embedded::FileJournal;
use lockstep::journal::{Journal as _, Outcome, RestoreId, RestorePhase, RestoreRecord};
use lockstep::serve::ApiState;
use lockstep::serve::access::{GivenToken, Tokens};
use lockstep::serve::api::{ROUTES, router};
use lockstep::serve::listen;
use lockstep::serve::origin::AllowedOrigins;
use lockstep::serve::{LiveProgress, Runner};
use serde_json::{Value, json};

use crate::support::{World, WorldSpec, creates, eventually, host_config, world};

pub(crate) struct Server {
    pub(crate) base: String,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(world: &World, state: PathBuf, token: Option<&str>) -> Server {
        Server::start_with(HostConfig::load(&host_config(world)).unwrap(), state, token).await
    }

    /// A server over `host` (its state directory replaced by `state`).
    pub(crate) async fn start_with(
        host: HostConfig,
        state: PathBuf,
        token: Option<&str>,
    ) -> Server {
        let token = token.map(|value| GivenToken {
            var: "TEST_TOKEN",
            value,
        });
        let tokens = Tokens::new(token, None).unwrap();
        Server::start_guarded(host, state, tokens, AllowedOrigins::default()).await
    }

    /// A server over `host` that takes `tokens` and answers to `allowed` beside its own
    /// address.
    async fn start_guarded(
        mut host: HostConfig,
        state: PathBuf,
        tokens: Tokens,
        allowed: AllowedOrigins,
    ) -> Server {
        host.state_dir = state.clone();
        let (stop, shutdown) = Interrupt::new();
        let runner = Runner::new(
            Arc::new(FileJournal::open(&state).unwrap()),
            host,
            state,
            Arc::new(LiveProgress::new(Arc::new(Silent))),
            shutdown.clone(),
            2,
        );
        let app = router(Arc::new(ApiState {
            runner,
            tokens,
            allowed,
            watch: None,
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            listen::serve(listener, None, app, async move {
                let _ = shutdown.race(std::future::pending::<()>()).await;
            })
            .await
            .unwrap();
        });
        Server { base, stop, task }
    }

    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Sends a request, checks its answer against the OpenAPI document's schema for that route
/// and status, and returns (status, body).
async fn call(
    doc: &Value,
    method: &str,
    base: &str,
    path_and_query: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> (u16, Value) {
    call_with(doc, method, base, path_and_query, body, token, &[]).await
}

/// [`call`] with extra request headers (a `Content-Type` among them replaces JSON's).
pub(crate) async fn call_with(
    doc: &Value,
    method: &str,
    base: &str,
    path_and_query: &str,
    body: Option<&str>,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let url = format!("{base}{path_and_query}");
    let mut req = match method {
        "post" => client.post(&url),
        "delete" => client.delete(&url),
        _ => client.get(&url),
    };
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    if let Some(b) = body {
        if !headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        {
            req = req.header("content-type", "application/json");
        }
        req = req.body(b.to_string());
    }
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("the server answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let path = path_and_query.split('?').next().unwrap();
    let op = &doc["paths"][path][method];
    assert!(op.is_object(), "{method} {path} is documented");
    let response = &op["responses"][status.to_string()];
    assert!(
        response.is_object(),
        "{method} {path} answered {status}, which the document does not list: {text}"
    );
    let (ctype, schema) = response["content"]
        .as_object()
        .and_then(|c| c.iter().next())
        .expect("a documented content type");
    let value = if ctype == "application/json" {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}"))
    } else {
        Value::String(text)
    };
    conforms(doc, &value, schema, &format!("{method} {path} {status}"));
    // Every answer of the milvus-backup API is its envelope, `data` null on failure (a body
    // that is not a JSON object gets a bare HTTP 400, as the document says).
    let enveloped = ctype == "application/json" && path != "/api/v1/openapi.json";
    if path.starts_with("/api/v1/") && enveloped && status == 200 {
        e2e::schema::check("envelope.json", &value)
            .unwrap_or_else(|e| panic!("{method} {path} {status}: {e:#}"));
    }
    (status, value)
}

/// A small JSON-schema check for what the document uses: $ref, type, nullable, required,
/// properties, items, enum.
fn conforms(doc: &Value, value: &Value, schema: &Value, at: &str) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return conforms(doc, value, &doc["components"]["schemas"][name], at);
    }
    if value.is_null() && schema["nullable"] == json!(true) {
        return;
    }
    if let Some(t) = schema["type"].as_str() {
        let ok = match t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        assert!(ok, "{at}: expected {t}, got {value}");
    }
    if let Some(options) = schema["enum"].as_array() {
        assert!(options.contains(value), "{at}: {value} not in {options:?}");
    }
    if let Some(required) = schema["required"].as_array() {
        for key in required {
            let key = key.as_str().unwrap();
            assert!(value.get(key).is_some(), "{at}: missing `{key}` in {value}");
        }
    }
    if let (Some(props), Some(obj)) = (schema["properties"].as_object(), value.as_object()) {
        for (key, sub) in props {
            if let Some(v) = obj.get(key) {
                conforms(doc, v, sub, &format!("{at}.{key}"));
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), value.as_array()) {
        for (i, v) in arr.iter().enumerate() {
            conforms(doc, v, items, &format!("{at}[{i}]"));
        }
    }
}

pub(crate) async fn document(base: &str, token: Option<&str>) -> Value {
    let mut req = reqwest::Client::new().get(format!("{base}/api/v1/openapi.json"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap().json().await.unwrap()
}

fn body(suffix: &str, extra: &str) -> String {
    format!(
        r#"{{"requestId": "req-{suffix}", "backup_name": "bak", "collection_suffix": "{suffix}", "target": "t", "secondaries": ["s1"]{extra}}}"#
    )
}

#[tokio::test]
async fn every_route_sync_and_async_with_state_read_back_after_a_restart() {
    let world = world().await;
    let state = world.path("api-state");
    let server = Server::start(&world, state.clone(), None).await;
    let doc = document(&server.base, None).await;
    // Started without a token, it asks for none and promises no 401.
    assert_eq!(doc["security"], json!([]));
    assert!(
        doc["paths"]["/metrics"]["get"]["responses"]
            .get("401")
            .is_none()
    );

    // The document lists exactly the routes served.
    let mut documented: Vec<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(p, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| (m.clone(), p.clone()))
        })
        .collect();
    documented.sort();
    let mut served: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    served.sort();
    assert_eq!(documented, served);

    let b = &server.base;
    let (status, health) = call(&doc, "get", b, "/healthz", None, None).await;
    assert_eq!((status, health), (200, json!("ok\n")));
    let (status, ready) = call(&doc, "get", b, "/readyz", None, None).await;
    assert_eq!((status, ready), (200, json!("ready\n")));

    // Sync: the answer carries the final state.
    let (_, sync) = call(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(&body("_sync", "")),
        None,
    )
    .await;
    assert_eq!(sync.get("code"), None, "success carries no code: {sync}");
    assert_eq!(sync["msg"], "success");
    assert_eq!(sync["requestId"], "req-_sync");
    assert_eq!(sync["data"]["state_code"], 2);
    assert_eq!(sync["data"]["progress"], 100);
    assert_eq!(
        sync["data"]["collection_restore_tasks"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let sync_id = sync["data"]["id"].as_str().unwrap().to_string();
    // Its record says who asked: an API request on a server without tokens.
    let asked = &sync["data"]["requested_by"];
    assert_eq!(
        (&asked["source"], &asked["scope"], &asked["request_id"]),
        (&json!("api"), &json!("none"), &json!("req-_sync")),
        "{asked}"
    );
    assert!(
        asked["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{asked}"
    );
    assert_eq!(
        world
            .collections_with_suffix("s1", "_sync")
            .await
            .unwrap()
            .len(),
        2
    );

    // Async: answered at once, then polled to its end.
    let (_, queued) = call(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(&body("_async", r#", "async": true, "id": "nightly""#)),
        None,
    )
    .await;
    assert_eq!(queued.get("code"), None);
    assert_eq!(queued["msg"], "restore backup is executing asynchronously");
    assert_eq!(queued["data"]["state_code"], 0);
    let identity = queued["data"]["id"].as_str().unwrap().to_string();
    assert!(identity.starts_with("nightly."), "{identity}");
    let done = eventually(Duration::from_secs(60), || async {
        let (_, v) = call(
            &doc,
            "get",
            b,
            &format!("/api/v1/get_restore?id={identity}"),
            None,
            None,
        )
        .await;
        (v["data"]["state_code"] == 2).then_some(v)
    })
    .await
    .expect("the async restore");
    assert_eq!(done["data"]["job_name"], "nightly");
    assert_eq!(done["data"]["outcome"], "succeeded");

    let (_, missing) = call(&doc, "get", b, "/api/v1/get_restore", None, None).await;
    assert_eq!(missing["code"], 400);
    let (_, unknown) = call(&doc, "get", b, "/api/v1/get_restore?id=nope", None, None).await;
    assert_eq!(unknown["code"], 3);
    assert!(unknown["msg"].as_str().unwrap().contains("task not found"));

    let (_, list) = call(&doc, "get", b, "/api/v1/list_restores", None, None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 2);
    let (_, metrics) = call(&doc, "get", b, "/metrics", None, None).await;
    let metrics = metrics.as_str().unwrap();
    assert!(
        metrics.contains("lockstep_restores{outcome=\"succeeded\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("lockstep_reaction_seconds_count 2"),
        "{metrics}"
    );
    // The journal's calls, timed: two restores claimed and saved, none failed.
    let count = |op: &str| -> u64 {
        let line = format!("lockstep_journal_seconds_count{{op=\"{op}\"}} ");
        (metrics.lines().find_map(|l| l.strip_prefix(line.as_str())))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {line}in {metrics}"))
    };
    assert!(
        count("claim") >= 2 && count("save") >= 2 && count("fence") >= 2,
        "{metrics}"
    );
    assert!(
        metrics.contains("lockstep_journal_failures_total{op=\"save\"} 0"),
        "{metrics}"
    );

    // The same request again is the same content: it does not run again.
    let created = creates(&world).await;
    let (_, again) = call(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(&body("_sync", "")),
        None,
    )
    .await;
    assert_eq!(again["data"]["id"], sync_id.as_str());
    assert_eq!(creates(&world).await, created);

    // Restarted: the state is the journal's.
    server.stop().await;
    let server = Server::start(&world, state, None).await;
    let (_, after) = call(
        &doc,
        "get",
        &server.base,
        &format!("/api/v1/get_restore?id={sync_id}"),
        None,
        None,
    )
    .await;
    assert_eq!(after["data"]["state_code"], 2, "{after}");
    assert_eq!(after["data"]["id"], sync_id.as_str());
    let (_, by_name) = call(
        &doc,
        "get",
        &server.base,
        "/api/v1/get_restore?id=nightly",
        None,
        None,
    )
    .await;
    assert_eq!(by_name["data"]["outcome"], "succeeded");
    server.stop().await;
}

#[tokio::test]
async fn bad_bodies_get_milvus_backups_codes_and_nothing_runs() {
    let world = world().await;
    let server = Server::start(&world, world.path("api-state"), None).await;
    let doc = document(&server.base, None).await;
    let b = &server.base;

    let (status, not_json) = call(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some("{\"backup_name\": "),
        None,
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        not_json["error"]
            .as_str()
            .unwrap()
            .contains("malformed JSON"),
        "{not_json}"
    );

    let (status, unknown) = call(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(r#"{"backup_name": "bak", "target": "t", "colection_names": ["x"]}"#),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(unknown["code"], 400);
    assert!(
        unknown["msg"]
            .as_str()
            .unwrap()
            .contains("`colection_names`"),
        "{unknown}"
    );
    // Each problem apart, located by its JSON field, as a job file's are by line.
    assert_eq!(unknown["data"], Value::Null, "{unknown}");
    assert_eq!(
        (
            &unknown["problems"][0]["json_field"],
            &unknown["problems"][0]["kind"]
        ),
        (&json!("colection_names"), &json!("unknown_field")),
        "{unknown}"
    );

    let (_, no_backup) = call(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(r#"{"requestId": "r1", "target": "t"}"#),
        None,
    )
    .await;
    assert_eq!(no_backup["code"], 400);
    assert!(
        no_backup["msg"].as_str().unwrap().contains("backup_name"),
        "{no_backup}"
    );
    let kinds: Vec<&Value> = (no_backup["problems"].as_array().unwrap().iter())
        .map(|p| &p["kind"])
        .collect();
    assert!(kinds.contains(&&json!("missing")), "{no_backup}");

    let (_, unknown_cluster) = call(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(r#"{"backup_name": "bak", "target": "t", "secondaries": ["nowhere"]}"#),
        None,
    )
    .await;
    assert_eq!(unknown_cluster["code"], 400);
    assert!(
        unknown_cluster["msg"]
            .as_str()
            .unwrap()
            .contains("`secondaries`"),
        "{unknown_cluster}"
    );
    let problem = &unknown_cluster["problems"][0];
    assert_eq!(
        (&problem["json_field"], &problem["kind"]),
        (&json!("secondaries"), &json!("invalid")),
        "{unknown_cluster}"
    );

    // A restore that runs and fails answers as milvus-backup's does: code 3, the reason in
    // `msg`, `data` null.
    let (_, failed) = call(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(r#"{"backup_name": "absent", "target": "t", "secondaries": ["s1"]}"#),
        None,
    )
    .await;
    assert_eq!(
        (&failed["code"], &failed["data"]),
        (&json!(3), &Value::Null),
        "{failed}"
    );
    assert!(
        failed["msg"].as_str().unwrap().contains("absent"),
        "{failed}"
    );

    assert_eq!(creates(&world).await, 0);
    server.stop().await;
}

/// The restore token of the servers these tests start with one (16 bytes or more).
const TOKEN: &str = "s3cret-restore-token";
/// Their read token.
const READ_TOKEN: &str = "s3cret-read-token-for-grafana";

#[tokio::test]
async fn a_token_is_required_when_set_except_for_the_probes_and_the_page() {
    let world = world().await;
    let server = Server::start(&world, world.path("api-state"), Some(TOKEN)).await;
    let doc = document(&server.base, Some(TOKEN)).await;
    // The document says what this server asks for: the token, on every route but /healthz
    // and the status page (which holds no data; its script asks the API with the token).
    assert_eq!(doc["security"], json!([{"bearer": []}]));
    let open = ["/healthz", "/readyz", "/"];
    for path in open {
        assert_eq!(doc["paths"][path]["get"]["security"], json!([]), "{path}");
    }
    let b = &server.base;
    for (method, path) in ROUTES.iter().filter(|(_, p)| !open.contains(p)) {
        let body = (*method == "post").then_some("{}");
        let (status, none) = call(&doc, method, b, path, body, None).await;
        assert_eq!(status, 401, "{path}");
        assert_eq!(none["code"], 2);
        let (status, _) = call(&doc, method, b, path, body, Some("wrong")).await;
        assert_eq!(status, 401, "{path}");
    }
    let (status, _) = call(&doc, "get", b, "/healthz", None, None).await;
    assert_eq!(status, 200);
    let (status, page) = call(&doc, "get", b, "/", None, None).await;
    assert_eq!(status, 200);
    assert!(
        page.as_str()
            .is_some_and(|p| p.contains("/api/v1/list_restores")),
        "{page}"
    );
    let (status, list) = call(&doc, "get", b, "/api/v1/list_restores", None, Some(TOKEN)).await;
    assert_eq!((status, list.get("code")), (200, None));
    server.stop().await;
}

/// The restore body the hostile requests below send: the world's backup onto the target,
/// dropping what is there.
fn dropping_body(suffix: &str) -> String {
    body(suffix, r#", "dropExistCollection": true"#)
}

/// What a web page could make a browser send is refused before anything runs: a body that
/// is not declared JSON (a form, `text/plain`: what a page of another origin can post
/// without asking), a request naming another host (a page under a name rebound to this
/// server) and one from another origin. A proxy's name, once allowed, is answered.
#[tokio::test]
async fn a_request_a_web_page_could_send_is_refused_and_nothing_runs() {
    let world = world().await;
    let server = Server::start_guarded(
        HostConfig::load(&host_config(&world)).unwrap(),
        world.path("api-state"),
        Tokens::none(),
        AllowedOrigins::parse(&["https://lockstep.example.com".to_owned()]).unwrap(),
    )
    .await;
    let doc = document(&server.base, None).await;
    let b = &server.base;
    let port = b.rsplit(':').next().unwrap();

    for content_type in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (status, refused) = call_with(
            &doc,
            "post",
            b,
            "/api/v1/restore",
            Some(&dropping_body("_plain")),
            None,
            &[("content-type", content_type)],
        )
        .await;
        assert_eq!((status, &refused["code"]), (415, &json!(400)), "{refused}");
        let msg = refused["msg"].as_str().unwrap();
        assert!(
            msg.contains("Content-Type: application/json") && msg.contains(content_type),
            "{msg}"
        );
    }
    // No body at all is not JSON either, on every route that changes something; a method
    // no route serves is still that (405).
    for (method, path) in ROUTES.iter().filter(|(m, _)| *m != "get") {
        let (status, _) = call(&doc, method, b, path, None, None).await;
        assert_eq!(status, 415, "{method} {path}");
    }
    let put = reqwest::Client::new()
        .put(format!("{b}/api/v1/list_restores"))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 405);

    // A page under a name rebound to this address reads nothing.
    let rebound = format!("evil.example:{port}");
    let (status, refused) = call_with(
        &doc,
        "get",
        b,
        "/api/v1/list_restores",
        None,
        None,
        &[("host", rebound.as_str())],
    )
    .await;
    assert_eq!((status, &refused["code"]), (403, &json!(2)), "{refused}");
    assert!(
        refused["msg"].as_str().unwrap().contains("DNS rebinding"),
        "{refused}"
    );
    assert_eq!(refused["data"], Value::Null);
    // Another origin may not post even JSON (fetch would ask first; a script of its own
    // does not).
    let other = "http://127.0.0.1:1";
    let (status, refused) = call_with(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(&dropping_body("_origin")),
        None,
        &[("origin", other)],
    )
    .await;
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused["msg"].as_str().unwrap().contains(other),
        "{refused}"
    );
    assert_eq!(creates(&world).await, 0);
    let (_, list) = call(&doc, "get", b, "/api/v1/list_restores", None, None).await;
    assert_eq!(list["data"], json!([]), "nothing ran: {list}");

    // What a proxy publishes is this server's once allowed; JSON with a charset is JSON.
    let (status, listed) = call_with(
        &doc,
        "get",
        b,
        "/api/v1/list_restores",
        None,
        None,
        &[
            ("host", "lockstep.example.com"),
            ("origin", "https://lockstep.example.com"),
        ],
    )
    .await;
    assert_eq!((status, listed.get("code")), (200, None), "{listed}");
    let (status, ran) = call_with(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(&body("_charset", "")),
        None,
        &[("content-type", "application/json; charset=utf-8")],
    )
    .await;
    assert_eq!(
        (status, &ran["data"]["state_code"]),
        (200, &json!(2)),
        "{ran}"
    );
    server.stop().await;
}

/// A read token reads every route that only reads and is refused, saying it is a read
/// token, where something changes; the restore token does everything, whatever the case of
/// `Bearer`, and the restore's record says it was the restore token, from where, when.
#[tokio::test]
async fn a_read_token_only_reads_and_a_restore_records_the_token_that_asked() {
    let world = world().await;
    let state = world.path("api-state");
    let given = |var, value| Some(GivenToken { var, value });
    let tokens = Tokens::new(given("T", TOKEN), given("RO", READ_TOKEN)).unwrap();
    let server = Server::start_guarded(
        HostConfig::load(&host_config(&world)).unwrap(),
        state.clone(),
        tokens,
        AllowedOrigins::default(),
    )
    .await;
    let doc = document(&server.base, Some(READ_TOKEN)).await;
    let b = &server.base;

    // The document says which token each route needs.
    assert_eq!(doc["security"], json!([{"bearer": []}, {"readBearer": []}]));
    for (method, path) in ROUTES {
        let op = &doc["paths"][path][method];
        let scope = match (*method, *path) {
            (_, "/" | "/healthz" | "/readyz") => "none",
            ("get", _) => "read",
            _ => "restore",
        };
        assert_eq!(op["x-lockstep-scope"], scope, "{method} {path}");
        if scope == "restore" {
            assert_eq!(op["security"], json!([{"bearer": []}]), "{path}");
        }
    }

    for (method, path) in ROUTES
        .iter()
        .filter(|(_, p)| !["/", "/healthz"].contains(p))
    {
        let body = (*method != "get").then(|| dropping_body("_read"));
        let (status, answer) = call(&doc, method, b, path, body.as_deref(), Some(READ_TOKEN)).await;
        if *method == "get" {
            assert_ne!(status, 401, "{path}: {answer}");
            assert_ne!(status, 403, "{path}: {answer}");
        } else {
            assert_eq!((status, &answer["code"]), (403, &json!(2)), "{path}");
            assert!(
                answer["msg"].as_str().unwrap().contains("read token"),
                "{path}: {answer}"
            );
        }
    }
    assert_eq!(creates(&world).await, 0, "a read token started nothing");

    let before = jiff::Timestamp::now();
    let bearer = format!("bearer {TOKEN}");
    let (status, ran) = call_with(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(&body("_scoped", "")),
        None,
        &[("authorization", bearer.as_str())],
    )
    .await;
    assert_eq!(
        (status, &ran["data"]["state_code"]),
        (200, &json!(2)),
        "{ran}"
    );
    let asked = &ran["data"]["requested_by"];
    assert_eq!(
        (&asked["source"], &asked["scope"], &asked["request_id"]),
        (&json!("api"), &json!("restore"), &json!("req-_scoped")),
        "{asked}"
    );
    let at: jiff::Timestamp = asked["at"].as_str().unwrap().parse().unwrap();
    assert!(
        at >= before && at <= jiff::Timestamp::now(),
        "{at} is when it was asked"
    );
    assert!(asked["at"].as_str().unwrap().ends_with('Z'), "UTC: {asked}");
    // As the journal holds it.
    let id = ran["data"]["id"].as_str().unwrap();
    let record: Value =
        serde_json::from_slice(&std::fs::read(state.join(format!("journal/{id}.json"))).unwrap())
            .unwrap();
    assert_eq!(&record["requested_by"], asked);
    server.stop().await;
}

/// `/readyz` says whether the journal can be written and read: not while its directory is
/// gone (with why), again once it is back. A record that does not parse makes no host
/// unready, and is one bad record: `list_restores` names it and lists the others, `/metrics`
/// counts it apart. `/healthz` answers ok throughout.
#[tokio::test]
async fn readiness_follows_the_journal_and_not_a_bad_record() {
    let world = world().await;
    let state = world.path("ready-state");
    let server = Server::start(&world, state.clone(), None).await;
    let doc = document(&server.base, None).await;
    let b = &server.base;
    let journal = state.join("journal");
    std::fs::write(journal.join("bad.json"), "{ not a record").unwrap();
    assert_eq!(call(&doc, "get", b, "/readyz", None, None).await.0, 200);
    // The bad record is named by its file, and the others listed and counted.
    let good = RestoreId::new("orders", "abcdef0123456789", 1);
    {
        let journal = FileJournal::open(&state).unwrap();
        let claim = journal.claim(&good).await.unwrap();
        let finished = RestoreRecord {
            outcome: Some(Outcome::Succeeded),
            phase: RestorePhase::Finished,
            ..RestoreRecord::new(good.clone(), "orders", "abcdef0123456789", 1, "b", vec![])
        };
        journal.save(claim.as_ref(), &finished).await.unwrap();
    }
    let (status, listed) = call(&doc, "get", b, "/api/v1/list_restores", None, None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["data"][0]["id"], good.as_str(), "{listed}");
    let msg = listed["msg"].as_str().unwrap_or_default();
    assert!(
        msg.contains("1 journal record(s) do not read") && msg.contains("bad.json"),
        "{msg}"
    );
    let metrics = reqwest::get(format!("{b}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "lockstep_journal_listed 1",
        "lockstep_journal_unreadable_records 1",
        "lockstep_restores{outcome=\"succeeded\"} 1",
    ] {
        assert!(metrics.contains(line), "no {line}:\n{metrics}");
    }

    let aside = world.path("journal-aside");
    std::fs::rename(&journal, &aside).unwrap();
    let (status, why) = call(&doc, "get", b, "/readyz", None, None).await;
    assert_eq!(status, 503, "{why}");
    let why = why.as_str().unwrap_or_default();
    assert!(why.starts_with("not ready: the journal: "), "{why}");
    assert!(
        why.contains(".ready"),
        "names what it could not write: {why}"
    );
    assert_eq!(call(&doc, "get", b, "/healthz", None, None).await.0, 200);

    std::fs::rename(&aside, &journal).unwrap();
    assert_eq!(call(&doc, "get", b, "/readyz", None, None).await.0, 200);
    server.stop().await;
}

/// While a restore waits on another cluster, `get_restore` says on what and where: a
/// collection that has not reached the lagging secondary yet, then, once the target
/// committed, the end still completing. The phase names the wait too: the commits went out,
/// so it is `completing`, not `deciding`.
#[tokio::test(flavor = "multi_thread")]
async fn get_restore_says_what_a_running_restore_waits_for() {
    let world = World::start(WorldSpec {
        stream_lag: Duration::from_millis(2500),
        ..WorldSpec::pair()
    })
    .await
    .unwrap();
    let server = Server::start(&world, world.path("api-state"), None).await;
    let doc = document(&server.base, None).await;
    let b = &server.base;
    let (_, queued) = call(
        &doc,
        "post",
        b,
        "/api/v1/restore",
        Some(&body("_lag", r#", "async": true, "id": "lagging""#)),
        None,
    )
    .await;
    let identity = queued["data"]["id"].as_str().unwrap().to_string();
    // (phase, waiting_for) as each answer gave them.
    let said: std::cell::RefCell<Vec<(String, String)>> = Default::default();
    let done = eventually(Duration::from_secs(120), || {
        let (said, doc, identity) = (&said, &doc, &identity);
        async move {
            let path = format!("/api/v1/get_restore?id={identity}");
            let (_, v) = call(doc, "get", b, &path, None, None).await;
            let data = &v["data"];
            if let Some(waiting) = data["waiting_for"].as_str() {
                let phase = data["phase"].as_str().unwrap_or_default().to_owned();
                said.borrow_mut().push((phase, waiting.to_owned()));
            }
            (data["outcome"].is_string()).then(|| data.clone())
        }
    })
    .await
    .expect("the restore ends");
    assert_eq!(done["outcome"], "succeeded", "{done}");
    let said = said.into_inner();
    assert!(
        said.iter()
            .any(|(_, w)| w.starts_with("waiting for default.") && w.contains("_lag on s1 (made ")),
        "{said:?}"
    );
    assert!(
        said.iter().any(|(phase, w)| phase == "completing"
            && w == "committed; waiting for s1 to complete"),
        "{said:?}"
    );
    assert!(
        done.get("waiting_for").is_none(),
        "an ended restore waits on nothing: {done}"
    );
    server.stop().await;
}
