//! The management API on its own port (Milvus's metrics port; docs/milvus-facts.md §4.6):
//! `/api/v1/_cluster/configs` and `/_cluster/info` report each cluster's settings and build,
//! and a cluster's `build` can differ from another's of the same version.

use std::time::Duration;

use base64::Engine;
use milvus_proto::milvus::{ConnectRequest, GetVersionRequest};
use serde_json::Value;

use crate::common::*;

async fn get(uri: &str, route: &str, auth: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(format!("{uri}/api/v1/{route}"));
    if let Some(auth) = auth {
        request = request.header("Authorization", auth);
    }
    let response = request.send().await.expect("the management port answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn each_cluster_reports_its_gate_settings_and_build_on_its_management_port() {
    let topology = star()
        .replacen(
            "[[cluster]]\nid = \"b\"\nimport_in_replicating_cluster = true",
            "[[cluster]]\nid = \"b\"\nimport_in_replicating_cluster = false\nbuild = \"master-20260806-1a2b3c4\"\nversion = \"3.0.0\"\nmax_import_job_num = 7\nenable_l0_import = true",
            1,
        )
        .replacen("[[cluster]]\nid = \"c\"", "[[cluster]]\nid = \"c\"\nversion = \"3.0.0\"", 1);
    let sim = start(&topology).await;
    for (id, build, gate, l0, limit) in [
        ("a", "3.0.0", "true", "false", "1024"),
        ("b", "master-20260806-1a2b3c4", "false", "true", "7"),
        ("c", "3.0.0", "true", "false", "1024"),
    ] {
        let cluster = sim.cluster(id);
        assert_ne!(cluster.management_uri(), cluster.uri(), "a port of its own");
        let (status, configs) = get(&cluster.management_uri(), "_cluster/configs", None).await;
        assert_eq!(status, 200);
        let key = |k: &str| configs[k].as_str().map(str::to_owned);
        assert_eq!(
            key("datacoord.import.enableinreplicatingcluster").as_deref(),
            Some(gate),
            "{id}"
        );
        assert_eq!(
            key("datacoord.import.enablel0import").as_deref(),
            Some(l0),
            "{id}"
        );
        assert_eq!(
            key("datacoord.import.maximportjobnum").as_deref(),
            Some(limit),
            "{id}"
        );
        assert_eq!(
            key("msgchannel.channameprefix.cluster").as_deref(),
            Some(id)
        );
        assert_eq!(key("MILVUS_GIT_BUILD_TAGS").as_deref(), Some(build));
        let (status, info) = get(&cluster.management_uri(), "_cluster/info", None).await;
        assert_eq!(status, 200);
        let nodes = info["nodes_info"].as_array().expect("nodes");
        assert!(!nodes.is_empty());
        for node in nodes {
            assert_eq!(node["infos"]["system_info"]["build_version"], build, "{id}");
        }
        // GetVersion and Connect report the build too.
        let mut client = grpc(&cluster.uri()).await;
        let version = client
            .get_version(GetVersionRequest::default())
            .await
            .expect("answers")
            .into_inner();
        let connected = client
            .connect(ConnectRequest::default())
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(version.version, build);
        assert_eq!(connected.server_info.expect("info").build_tags, build);
        // Milvus does not serve them on its gRPC and REST port.
        let (status, _) = get(&cluster.uri(), "_cluster/configs", None).await;
        assert_eq!(status, 404);
    }
    // b behaves as its version says whatever build it reports.
    let b = sim.cluster("b").snapshot();
    assert_eq!(
        (b.version.as_str(), b.build.as_str()),
        ("3.0.0", "master-20260806-1a2b3c4")
    );
}

#[tokio::test]
async fn with_authorization_on_the_management_api_wants_credentials() {
    let topology = standalone("3.0.2").replace("id = \"a\"", "id = \"a\"\ntoken = \"root:Milvus\"")
        + "[[cluster.users]]\nname = \"reader\"\npassword = \"pw\"\n";
    let sim = start(&topology).await;
    let a = sim.cluster("a");
    let uri = a.management_uri();
    let (status, body) = get(&uri, "_cluster/configs", None).await;
    assert_eq!((status, body["code"].as_i64()), (401, Some(1800)));
    let (status, _) = get(&uri, "_cluster/configs", Some("Bearer wrong")).await;
    assert_eq!(status, 401);
    let (status, configs) = get(&uri, "_cluster/configs", Some("Bearer root:Milvus")).await;
    assert_eq!(status, 200);
    assert_eq!(configs["common.security.authorizationenabled"], "true");
    let basic = base64::engine::general_purpose::STANDARD.encode("reader:pw");
    let (status, _) = get(&uri, "_cluster/info", Some(&format!("Basic {basic}"))).await;
    assert_eq!(status, 200);

    // A restart takes the management port down with the others and back at the same place.
    a.restart(Duration::from_millis(10))
        .await
        .expect("restarts");
    assert_eq!(a.management_uri(), uri);
    let (status, _) = get(&uri, "_cluster/info", Some("Bearer root:Milvus")).await;
    assert_eq!(status, 200);
}
