//! A cluster with a token: REST needs `Authorization: Bearer <token>`, gRPC an
//! `authorization` header (pymilvus sends base64 of the token); the control API is open.

use base64::Engine;
use milvus_proto::milvus::GetVersionRequest;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn rest_and_grpc_need_the_token() {
    let topology = standalone("3.0.0").replace("id = \"a\"", "id = \"a\"\ntoken = \"root:Milvus\"");
    let sim = start(&topology).await;
    let uri = sim.uri("a");
    let http = reqwest::Client::new();
    let list = |token: Option<&str>| {
        let mut request = http
            .post(format!("{uri}/v2/vectordb/jobs/import/list"))
            .json(&json!({}));
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        request.send()
    };
    let refused = list(None).await.expect("answers");
    assert_eq!(refused.status(), 401);
    let body: serde_json::Value = refused.json().await.expect("json");
    assert_eq!(
        body,
        json!({"code": 1800, "message": "user hasn't authenticated"})
    );
    assert_eq!(list(Some("wrong")).await.expect("answers").status(), 401);
    let allowed: serde_json::Value = list(Some("root:Milvus"))
        .await
        .expect("answers")
        .json()
        .await
        .expect("json");
    assert_eq!(allowed["code"], 0);

    let mut client = grpc(&uri).await;
    let error = client
        .get_version(GetVersionRequest {})
        .await
        .expect_err("no token");
    assert_eq!(error.code(), tonic::Code::Unauthenticated);
    let mut request = tonic::Request::new(GetVersionRequest {});
    let encoded = base64::engine::general_purpose::STANDARD.encode("root:Milvus");
    request
        .metadata_mut()
        .insert("authorization", encoded.parse().expect("ascii"));
    assert_eq!(
        client
            .get_version(request)
            .await
            .expect("authorized")
            .into_inner()
            .version,
        "3.0.0"
    );

    assert!(
        sim.cluster("a").control().state().await.is_ok(),
        "the control API needs no token"
    );
}

/// A cluster with a user granted `Import` and `CreateCollection` in `db_1` only, that wants
/// the cluster-level `ImportBinlog` for binlog imports, which the user lacks.
fn with_restorer() -> String {
    let cluster = standalone("3.0.0").replace(
        "id = \"a\"",
        "id = \"a\"\ntoken = \"root:Milvus\"\nimport_binlog_privilege = true",
    );
    cluster
        + r#"[[cluster.users]]
name = "restorer"
password = "pw"
grants = [
    { privilege = "Import", object = "Collection", db = "db_1" },
    { privilege = "CreateCollection", object = "Global", db = "db_1" },
]
"#
}

fn create_db_1(cluster: &milvus_sim::Cluster) {
    cluster
        .execute_ddl(milvus_sim::catalog::DdlOp::CreateDatabase {
            name: "db_1".into(),
            id: cluster.next_id(),
        })
        .expect("db_1");
}

/// A REST call as `credentials`, with headers; the HTTP status and the body.
async fn rest_as(
    uri: &str,
    credentials: &str,
    route: &str,
    body: serde_json::Value,
    headers: &[(&str, &str)],
) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{uri}/v2/vectordb/jobs/import/{route}"))
        .header("Authorization", format!("Bearer {credentials}"))
        .json(&body);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.expect("answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

fn denied(privilege: &str, db: &str) -> serde_json::Value {
    json!({
        "code": 65535,
        "message": format!(
            "rpc error: code = PermissionDenied desc = Privilege{privilege}: permission deny to restorer in the `{db}` database"
        ),
    })
}

/// Milvus 3.0 checks describe, get_progress, commit and abort against the job's collection in
/// the database of the `DB-Name` header (their body has no `dbName`), answering HTTP 403
/// (docs/milvus-facts.md §1.1).
#[tokio::test]
async fn job_calls_check_import_in_the_db_name_header_database() {
    let sim = start(&with_restorer()).await;
    let a = sim.cluster("a");
    create_db_1(&a);
    let mut c = milvus_sim::catalog::NewCollection::keyed("db_1", "c");
    c.schema.fields.push(milvus_proto::schema::FieldSchema {
        field_id: 101,
        name: "vector".into(),
        data_type: milvus_proto::schema::DataType::FloatVector as i32,
        ..Default::default()
    });
    a.create_collection(c).expect("collection");
    let files = put_segment(&a, "bk", 5, 1).await;
    let uri = sim.uri("a");
    let create = json!({
        "dbName": "db_1", "collectionName": "c", "partitionName": "_default",
        "files": [[files[0]]], "options": {"auto_commit": "false"},
    });
    let (status, body) = rest_as(&uri, "restorer:pw", "create", create.clone(), &[]).await;
    assert_eq!((status, body["code"].as_i64()), (200, Some(0)), "{body}");
    let id = body["data"]["jobId"].as_str().expect("job id").to_owned();
    let by_id = json!({"jobId": id});
    for route in ["describe", "get_progress", "commit", "abort"] {
        assert_eq!(
            rest_as(&uri, "restorer:pw", route, by_id.clone(), &[]).await,
            (403, denied("Import", "default")),
            "{route} without DB-Name"
        );
    }
    let db_1 = [("DB-Name", "db_1")];
    let (status, body) = rest_as(&uri, "restorer:pw", "describe", by_id.clone(), &db_1).await;
    assert_eq!(
        (status, body["data"]["jobId"].as_str()),
        (200, Some(id.as_str()))
    );
    // list leaves out what the user may not see rather than refusing.
    let (_, listed) = rest_as(&uri, "restorer:pw", "list", json!({}), &[]).await;
    assert_eq!(listed["data"]["records"], json!([]));
    let (_, listed) = rest_as(&uri, "restorer:pw", "list", json!({}), &db_1).await;
    assert_eq!(listed["data"]["records"].as_array().map(Vec::len), Some(1));
    // A binlog import also needs the cluster-level ImportBinlog.
    let mut backup = create;
    backup["options"]["backup"] = json!("true");
    assert_eq!(
        rest_as(&uri, "restorer:pw", "create", backup.clone(), &[]).await,
        (403, denied("ImportBinlog", "*"))
    );
    let (status, body) = rest_as(&uri, "root:Milvus", "create", backup, &[]).await;
    assert_eq!(
        (status, body["code"].as_i64()),
        (200, Some(0)),
        "root passes"
    );
    let (status, _) = rest_as(&uri, "restorer:wrong", "list", json!({}), &[]).await;
    assert_eq!(status, 401);
}

/// gRPC requests need their `privilege_ext_obj` privilege, in the request's database.
#[tokio::test]
async fn grpc_requests_need_their_privilege_in_their_database() {
    use milvus_proto::milvus::CreateCollectionRequest;
    let sim = start(&with_restorer()).await;
    let a = sim.cluster("a");
    create_db_1(&a);
    let mut client = grpc(&sim.uri("a")).await;
    let as_restorer = |db: &str| {
        let mut request = create_collection_request("c");
        request.db_name = db.into();
        let mut request: tonic::Request<CreateCollectionRequest> = tonic::Request::new(request);
        let encoded = base64::engine::general_purpose::STANDARD.encode("restorer:pw");
        request
            .metadata_mut()
            .insert("authorization", encoded.parse().expect("ascii"));
        request
    };
    let denied = client
        .create_collection(as_restorer(""))
        .await
        .expect_err("not granted in default");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    assert_eq!(
        denied.message(),
        "PrivilegeCreateCollection: permission deny to restorer in the `default` database"
    );
    let created = client
        .create_collection(as_restorer("db_1"))
        .await
        .expect("granted in db_1")
        .into_inner();
    assert_eq!(created.code, 0, "{created:?}");
}
