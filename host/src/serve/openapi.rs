//! The OpenAPI 3.0 description of [`super::api`], served at `/api/v1/openapi.json`. Written
//! by hand next to the handlers; the API tests check that it lists exactly the routes the
//! router serves and that every answer they get matches the schema it names, and `.ci/run`
//! holds a `serve` to it with schemathesis.

use serde_json::{Value, json};

use super::access::TokenSetup;

/// What a route needs, as the document says it (`x-lockstep-scope`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Nothing: no token, and any Host or Origin (`/healthz`, `/readyz`).
    Probe,
    /// No token, but a request that is this server's (the status page).
    Page,
    /// Either token: it only reads.
    Read,
    /// The restore token: it changes something (every POST and DELETE).
    Restore,
}

/// The document of a server with `tokens`: a loopback `serve` started without `--token-env`
/// asks for nothing, and the document says so rather than promising a 401 that never comes.
/// Every route says the scope it needs (`x-lockstep-scope`: `read`, `restore`, or `none`)
/// and its security the tokens that may call it.
pub fn document(tokens: TokenSetup) -> Value {
    let envelope = |mut data: Value| {
        data["nullable"] = json!(true);
        json!({
            "type": "object",
            "required": ["data"],
            "properties": {
                "requestId": {"type": "string", "description": "left out when empty"},
                "code": {"type": "integer", "enum": [1, 2, 3, 400], "description": "milvus-backup's ResponseCode, left out on success (0), as its server encodes it: 1 Not_Support (its routes lockstep does not serve), 2 No_Permission, 3 Fail, 400 Parameter_Error. A request that breaks the request schema (a missing or mistyped field, an unknown field) or that names something invalid or unknown is answered with HTTP 200 and code 400, as milvus-backup answers; only a body that is not JSON, or not a JSON object, gets HTTP 400"},
                "msg": {"type": "string", "description": "left out when empty"},
                "data": data,
                "problems": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/Problem"}, "description": "lockstep's own field: a refused request's problems (code 400), each located by its JSON field; left out otherwise"},
            }
        })
    };
    let ok = |schema: Value, what: &str| json!({"description": what, "content": {"application/json": {"schema": schema}}});
    let mut queue_full = ok(
        envelope(json!({})),
        "Refused (code 3, data null): max_parallel restores run and max_queued more wait for a slot on this server (the host config's max_queued); nothing of the request is kept. Ask again after Retry-After seconds",
    );
    queue_full["headers"] = json!({"Retry-After": {
        "description": "seconds to wait before asking again",
        "required": true,
        "schema": {"type": "integer", "minimum": 1},
    }});
    let restore_token = json!({"bearer": []});
    let read_token = json!({"readBearer": []});
    // A route's answers (its own, plus the refusals every route of its scope can get), the
    // scope it needs and, where it differs from the document's, the tokens that may call it.
    let route = |scope: Scope, summary: &str, mut op: Value| {
        let responses = &mut op["responses"];
        if scope != Scope::Probe {
            let read_token = if scope == Scope::Restore {
                ", or a read token on this route, which changes something"
            } else {
                ""
            };
            responses["403"] = ok(
                envelope(json!({})),
                &format!(
                    "Refused (code 2): the request's Host or Origin is not this server's (a page of another origin, or one reached by DNS rebinding; a proxy's name is allowed with --allowed-origin){read_token}"
                ),
            );
        }
        if matches!(scope, Scope::Read | Scope::Restore) && tokens != TokenSetup::None {
            responses["401"] = ok(envelope(json!({})), "No or wrong bearer token (code 2)");
        }
        if scope == Scope::Restore {
            responses["415"] = ok(
                envelope(json!({})),
                "The request's Content-Type is not application/json (code 400): a route that changes something takes nothing else, so that no web page can post a form or text to it",
            );
            responses["408"] = ok(
                envelope(json!({})),
                "The body did not arrive within 10 s of the headers (code 400); the connection is closed",
            );
            responses["413"] = ok(
                envelope(json!({})),
                "The body is over 1 MiB, or did not read (code 400)",
            );
        }
        op["summary"] = json!(summary);
        op["x-lockstep-scope"] = json!(match scope {
            Scope::Probe | Scope::Page => "none",
            Scope::Read => "read",
            Scope::Restore => "restore",
        });
        match (scope, tokens) {
            (Scope::Probe | Scope::Page, _) => op["security"] = json!([]),
            (Scope::Restore, TokenSetup::RestoreAndRead) => {
                op["security"] = json!([restore_token.clone()]);
            }
            _ => {}
        }
        op
    };
    let (security, auth_note) = match tokens {
        TokenSetup::None => (
            json!([]),
            "This server was started on loopback without a token and requires none; one started with --token-env requires `Authorization: Bearer <token>` on every route but /healthz, /readyz and /, and its document says so.",
        ),
        TokenSetup::Restore => (
            json!([restore_token.clone()]),
            "This server requires `Authorization: Bearer <token>` with its restore token on every route but /healthz, /readyz and /.",
        ),
        TokenSetup::RestoreAndRead => (
            json!([restore_token.clone(), read_token.clone()]),
            "This server requires `Authorization: Bearer <token>` on every route but /healthz, /readyz and /: its restore token on every route, or its read token on the routes that only read (x-lockstep-scope: read).",
        ),
    };
    let note = format!(
        "{auth_note} Each route's x-lockstep-scope names the token it needs: `read` (the read or the restore token), `restore` (the restore token), `none`. Every route but /healthz and /readyz refuses (403) a request whose Host or Origin is not this server's, and every POST and DELETE one whose Content-Type is not application/json (415)."
    );
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "lockstep",
            "version": env!("CARGO_PKG_VERSION"),
            "description": format!("Restores milvus-backup backups into a CDC-replicating Milvus with two-phase import. The restore routes take milvus-backup's request fields and answer with its {{requestId, code, msg, data}} envelope: HTTP 200 for every answer, with the outcome in `code`; a refused request also lists its `problems`. {note}"),
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "The restore token (--token-env): every route"},
                "readBearer": {"type": "http", "scheme": "bearer", "description": "The read token (--read-token-env): the routes whose x-lockstep-scope is read"},
            },
            "schemas": {
                "RestoreRequest": restore_request(),
                "RestoreView": restore_view(),
                "CollectionView": collection_view(),
                "BackupSummary": backup_summary(),
                "BackupInfoBrief": backup_info_brief(),
                "Problem": problem(),
            }
        },
        "security": security,
        "paths": {
            "/api/v1/restore": {"post": route(Scope::Restore, "Restore a backup (sync, or async with \"async\": true)", json!({
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RestoreRequest"}}}},
                "responses": {
                    "200": ok(envelope(json!({"$ref": "#/components/schemas/RestoreView"})), "The restore (code 0), a refused request (code 400: the body breaks this schema, or names an invalid or unknown backup, cluster or job), or a failed restore (code 3)"),
                    "400": ok(json!({"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}), "The body is not JSON, or is JSON but not an object"),
                    "429": queue_full,
                },
            }))},
            "/api/v1/get_restore": {"get": route(Scope::Read, "A restore by restore id, job identity (name.hash12) or job name (newest attempt), with who asked for it (requested_by)", json!({
                "parameters": [
                    {"name": "id", "in": "query", "required": true, "schema": {"type": "string"}},
                    {"name": "request_id", "in": "header", "required": false, "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": ok(envelope(json!({"$ref": "#/components/schemas/RestoreView"})), "The restore (code 0), no id or an invalid one (code 400) or not found (code 3)"),
                },
            }))},
            "/api/v1/list_restores": {"get": route(Scope::Read, "Every restore in the journal, newest first, or the newest `limit`", json!({
                "parameters": [
                    {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1}, "description": "the newest this many restores; an answer and its cost grow with it, not with the journal's history. Anything but a whole number of at least 1: code 400"},
                ],
                "responses": {
                    "200": ok(envelope(json!({"type": "array", "items": {"$ref": "#/components/schemas/RestoreView"}})), "The restores"),
                },
            }))},
            "/api/v1/list": {"get": route(Scope::Read, "The backups under the host config's backups root, as milvus-backup lists them (a directory that does not read as a backup is left out)", json!({
                "parameters": [
                    {"name": "collection_name", "in": "query", "required": false, "schema": {"type": "string"}, "description": "deprecated in milvus-backup: refused with code 400 when given"},
                    {"name": "request_id", "in": "header", "required": false, "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": ok(envelope(json!({"type": "array", "items": {"$ref": "#/components/schemas/BackupSummary"}})), "The backups (no code), or code 400 / 3"),
                },
            }))},
            "/api/v1/get_backup": {"get": route(Scope::Read, "One backup by name or by milvus-backup's backup id, as milvus-backup's BackupInfoBrief", json!({
                "parameters": [
                    {"name": "backup_name", "in": "query", "required": false, "schema": {"type": "string"}},
                    {"name": "backup_id", "in": "query", "required": false, "schema": {"type": "string"}},
                    {"name": "path", "in": "query", "required": false, "schema": {"type": "string"}, "description": "the backups' root for this request"},
                    {"name": "request_id", "in": "header", "required": false, "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": ok(envelope(json!({"$ref": "#/components/schemas/BackupInfoBrief"})), "The backup (no code), neither name nor id or an invalid one (code 400), or not found (code 3)"),
                },
            }))},
            "/api/v1/hello": {"get": route(Scope::Read, "milvus-backup's greeting, plain text", json!({
                "responses": {
                    "200": {"description": "Hello, This is backup service", "content": {"text/plain": {"schema": {"type": "string"}}}},
                },
            }))},
            "/api/v1/restore_secondary": {"post": route(Scope::Restore, "milvus-backup's restore of one secondary: not served (code 1); lockstep restores into the primary and holds every secondary, through /api/v1/restore with `secondaries`", json!({
                "requestBody": {"required": true, "description": "any JSON (milvus-backup's create body, say): like every POST and DELETE here it is sent as JSON; it is not read", "content": {"application/json": {"schema": {}}}},
                "responses": {
                    "200": ok(envelope(json!({})), "Code 1, Not_Support, saying what to do instead"),
                },
            }))},
            "/api/v1/create": {"post": route(Scope::Restore, "milvus-backup's backup creation: not served (code 1); lockstep only restores", json!({
                "requestBody": {"required": true, "description": "any JSON (milvus-backup's create body, say): like every POST and DELETE here it is sent as JSON; it is not read", "content": {"application/json": {"schema": {}}}},
                "responses": {
                    "200": ok(envelope(json!({})), "Code 1, Not_Support"),
                },
            }))},
            "/api/v1/delete": {"delete": route(Scope::Restore, "milvus-backup's backup deletion: not served (code 1); lockstep only restores", json!({
                "parameters": [
                    {"name": "backup_name", "in": "query", "required": false, "schema": {"type": "string"}},
                ],
                "requestBody": {"required": true, "description": "any JSON (milvus-backup's client sends `null`): like every POST and DELETE here it is sent as JSON; it is not read", "content": {"application/json": {"schema": {}}}},
                "responses": {
                    "200": ok(envelope(json!({})), "Code 1, Not_Support"),
                },
            }))},
            "/api/v1/openapi.json": {"get": route(Scope::Read, "This document", json!({
                "responses": {
                    "200": ok(json!({"type": "object", "required": ["openapi", "paths"]}), "The OpenAPI document"),
                },
            }))},
            "/": {"get": route(Scope::Page, "The status page: restores, running first, with their phase, job states and rows per end, divergences and a link to their JSON. It holds no data and needs no token; its script reads /api/v1/list_restores, asking for the token when this server requires one (the read token is enough)", json!({
                "responses": {"200": {"description": "HTML", "content": {"text/html": {"schema": {"type": "string"}}}}},
            }))},
            "/healthz": {"get": route(Scope::Probe, "Liveness; never needs a token, and answers whatever Host or Origin a request names", json!({
                "responses": {"200": {"description": "ok", "content": {"text/plain": {"schema": {"type": "string"}}}}},
            }))},
            "/readyz": {"get": route(Scope::Probe, "Readiness: whether the journal can be written and read now; never needs a token, and answers whatever Host or Origin a request names", json!({
                "responses": {
                    "200": {"description": "ready", "content": {"text/plain": {"schema": {"type": "string"}}}},
                    "503": {"description": "not ready, with the journal's error", "content": {"text/plain": {"schema": {"type": "string"}}}},
                },
            }))},
            "/metrics": {"get": route(Scope::Read, "Prometheus text: restores by outcome, import jobs per end and state, reaction-time histogram, staged bytes", json!({
                "responses": {
                    "200": {"description": "Prometheus text format 0.0.4", "content": {"text/plain": {"schema": {"type": "string"}}}},
                },
            }))},
        }
    })
}

fn restore_request() -> Value {
    let s = json!({"type": "string"});
    let b = json!({"type": "boolean"});
    json!({
        "type": "object",
        "required": ["backup_name"],
        "additionalProperties": false,
        "properties": {
            "requestId": s, "backup_name": s,
            "collection_names": {"type": "array", "items": s},
            "collection_suffix": s,
            "collection_renames": {"type": "object", "additionalProperties": s},
            "async": b,
            "bucket_name": {"type": "string", "description": "the backups' bucket for this request (an S3 store)"},
            "path": {"type": "string", "description": "the backups' root directory for this request"},
            "db_collections": {"description": "{\"db\": [\"collection\", ...]} as an object or a string holding one"},
            "metaOnly": b, "restoreIndex": b, "useAutoIndex": b, "dropExistCollection": b,
            "dropExistIndex": b, "skipCreateCollection": b,
            "id": {"type": "string", "description": "the job's name"},
            "skipImportDiskQuotaCheck": b, "rbac": b,
            "maxShardNum": {"type": "integer"},
            "skipParams": {"description": "refused when not empty"},
            "useV2Restore": b, "truncateBinlogByTs": b,
            "db_collections_after_rename": {"description": "as db_collections, applied after renaming"},
            "restorePlan": {"description": "refused when set"},
            "ezkMapping": {"type": "object", "additionalProperties": s},
            "target": {"type": "string", "description": "a cluster of the host config or an http(s):// URI"},
            "secondaries": {"type": "array", "items": s, "description": "cluster names or URIs"},
            "strategy": {"type": "string", "enum": ["merged", "per_seg"]},
        }
    })
}

fn backup_summary() -> Value {
    json!({
        "type": "object",
        "required": ["size"],
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "size": {"type": "integer"},
            "milvus_version": {"type": "string"},
        }
    })
}

fn backup_info_brief() -> Value {
    json!({
        "type": "object",
        "required": ["state_code", "progress", "size", "meta_size"],
        "properties": {
            "id": {"type": "string"},
            "state_code": {"type": "integer", "description": "2 BACKUP_SUCCESS: a backup whose meta reads"},
            "progress": {"type": "integer"},
            "name": {"type": "string"},
            "backup_timestamp": {"type": "integer"},
            "collection_backups": {"type": "array", "items": {
                "type": "object",
                "required": ["collection_id", "shards_num", "size", "has_index"],
                "properties": {
                    "id": {"type": "string"},
                    "collection_id": {"type": "integer"},
                    "db_name": {"type": "string"},
                    "collection_name": {"type": "string"},
                    "shards_num": {"type": "integer"},
                    "backup_timestamp": {"type": "integer"},
                    "size": {"type": "integer"},
                    "has_index": {"type": "boolean"},
                    "load_state": {"type": "string"},
                }
            }},
            "size": {"type": "integer"},
            "milvus_version": {"type": "string"},
            "meta_size": {"type": "integer"},
            "format": {"type": "string"},
        }
    })
}

/// One problem of a refused request, as a refused job file's JSON gives it
/// (`docs/schema/refusal.json`): a body's problems are located by their JSON field, or by
/// line and column where the body is not JSON.
fn problem() -> Value {
    json!({
        "type": "object",
        "required": ["field", "kind", "text"],
        "properties": {
            "json_field": {"type": "string", "description": "the request field, e.g. `collection_renames`"},
            "line": {"type": "integer", "minimum": 1},
            "column": {"type": "integer", "minimum": 1},
            "field": {"type": "string", "description": "the field's path in a job file's terms, empty for the request as a whole"},
            "kind": {"type": "string", "enum": ["syntax", "unknown_field", "wrong_type", "missing", "invalid"]},
            "text": {"type": "string"},
        },
    })
}

fn restore_view() -> Value {
    json!({
        "type": "object",
        "required": ["id", "state_code", "errorMessage", "start_time", "end_time", "progress", "collection_restore_tasks", "job_name"],
        "properties": {
            "id": {"type": "string"},
            "state_code": {"type": "integer", "description": "0 INITIAL, 1 EXECUTING, 2 SUCCESS, 3 FAIL"},
            "errorMessage": {"type": "string"},
            "start_time": {"type": "integer"},
            "end_time": {"type": "integer"},
            "progress": {"type": "integer"},
            "collection_restore_tasks": {"type": "array", "items": {"$ref": "#/components/schemas/CollectionView"}},
            "job_name": {"type": "string"},
            "outcome": {"type": "string", "nullable": true, "enum": ["succeeded", "unverified", "refused", "rolled_back", "diverged", "partly_committed", "incomplete", "host_failed", "lost", null]},
            "phase": {"type": "string", "nullable": true},
            "waiting_for": {"type": "string", "description": "what a running restore waits on, and where: a collection to arrive on a secondary, or, once committed, the ends still completing"},
            "report": {"type": "object", "nullable": true, "description": "The final report: outcome, route, ends, refusals and their kinds, collections, every import job with its expected rows and the rows and state on every end, divergences, what a query on every end showed (verification), checks, staging, phases"},
            "snapshot": {
                "type": "object", "nullable": true,
                "description": "Job states and rows per end at the restore's last journal write (each phase change, and every few seconds while it holds or completes), from whichever host runs it",
                "required": ["ends", "rows_expected", "rows_exact"],
                "properties": {
                    "ends": {"type": "array", "items": {
                        "type": "object",
                        "required": ["end", "jobs", "rows_imported"],
                        "properties": {
                            "end": {"type": "string"},
                            "jobs": {"type": "object", "additionalProperties": {"type": "integer"}, "description": "import jobs by state on this end"},
                            "rows_imported": {"type": "integer"},
                        }
                    }},
                    "rows_expected": {"type": "integer"},
                    "rows_exact": {"type": "boolean", "description": "false when some deletes are not counted by the backup's meta, so fewer rows may be right"},
                }
            },
            "requested_by": {
                "type": "object", "nullable": true,
                "description": "Who asked for the restore, as its journal record keeps it: an API request ({source: api, scope, peer, at, request_id}: the token's scope, `restore` or `none` on a server without tokens, the peer's address, when, in UTC), a job file of a watched directory ({source: watch, file}: its absolute path), or the command line ({source: cli, file}); absent in records written before it was kept",
                "required": ["source"],
                "properties": {
                    "source": {"type": "string", "enum": ["api", "watch", "cli"]},
                    "scope": {"type": "string", "enum": ["restore", "read", "none"]},
                    "peer": {"type": "string"},
                    "at": {"type": "string", "format": "date-time"},
                    "request_id": {"type": "string"},
                    "file": {"type": "string"},
                }
            },
        }
    })
}

fn collection_view() -> Value {
    json!({
        "type": "object",
        "required": ["id", "state_code", "errorMessage", "start_time", "end_time", "progress", "target_db_name", "target_collection_name"],
        "properties": {
            "id": {"type": "string"},
            "state_code": {"type": "integer"},
            "errorMessage": {"type": "string"},
            "start_time": {"type": "integer"},
            "end_time": {"type": "integer"},
            "progress": {"type": "integer"},
            "target_db_name": {"type": "string"},
            "target_collection_name": {"type": "string"},
        }
    })
}
