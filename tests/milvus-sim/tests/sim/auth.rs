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
