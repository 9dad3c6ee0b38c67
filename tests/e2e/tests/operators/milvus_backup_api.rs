//! milvus-backup's clients against `serve`: the requests its e2e suite sends
//! (`tests/api/milvus_backup.py` and `tests/testcases/test_restore_backup.py` in
//! zilliztech/milvus-backup) and the answers checked field by field as its server gives
//! them: `code` left out on success, `data` always there, `requestId` from the header on
//! the GET routes, its state codes, progress and zero end time. The one addition to its
//! restore bodies is `secondaries`: the test's target replicates, and lockstep refuses to
//! restore into a replicating cluster without being told its secondaries.

use std::collections::BTreeSet;
use std::time::Duration;

use lockstep::config::HostConfig;
use serde_json::{Value, json};

use crate::api::{Server, call_with, document};
use crate::support::{eventually, host_config, world};

/// A milvus-backup client: no token, its `RequestId` header (which its server ignores).
struct Client {
    base: String,
    doc: Value,
}

impl Client {
    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Value {
        let (status, value) =
            call_with(&self.doc, "get", &self.base, path, None, None, headers).await;
        assert_eq!(status, 200, "{path}: {value}");
        value
    }

    async fn restore(&self, payload: Value) -> Value {
        let body = payload.to_string();
        let (status, value) = call_with(
            &self.doc,
            "post",
            &self.base,
            "/api/v1/restore",
            Some(&body),
            None,
            &[("RequestId", "ignored-by-milvus-backup")],
        )
        .await;
        assert_eq!(status, 200, "{body}: {value}");
        value
    }

    /// milvus-backup's `wait_restore_complete`: poll `get_restore` while the state code is 0
    /// or 1; true at 2.
    async fn wait_restore_complete(&self, id: &str) -> bool {
        let last = eventually(Duration::from_secs(60), || async {
            let res = self.get(&format!("/api/v1/get_restore?id={id}"), &[]).await;
            let code = res["data"]["state_code"].as_i64().unwrap_or(1);
            (code != 0 && code != 1).then_some(res)
        })
        .await
        .expect("the restore to end");
        last["data"]["state_code"] == 2
    }
}

fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn milvus_backups_own_requests_get_its_answers_field_by_field() {
    let world = world().await;
    let mut host = HostConfig::load(&host_config(&world)).unwrap();
    host.default_target = Some("t".into());
    let server = Server::start_with(host, world.path("api-state"), None).await;
    let client = Client {
        doc: document(&server.base, None).await,
        base: server.base.clone(),
    };

    // hello: plain text.
    let hello = client.get("/api/v1/hello", &[]).await;
    assert_eq!(hello, json!("Hello, This is backup service"));

    // list: BackupSummary per backup, no code and no msg on success, the header's id.
    let listed = client
        .get("/api/v1/list", &[("request_id", "rid-list")])
        .await;
    assert_eq!(
        keys(&listed),
        BTreeSet::from(["requestId", "data"]),
        "{listed}"
    );
    assert_eq!(listed["requestId"], "rid-list");
    let all_backup: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(all_backup, ["bak"]);
    let summary = &listed["data"][0];
    assert!(summary["size"].as_i64().is_some_and(|s| s > 0), "{summary}");
    let summary_keys = keys(summary);
    assert!(
        summary_keys.is_subset(&BTreeSet::from(["id", "name", "size", "milvus_version"])),
        "{summary}"
    );
    let deprecated = client.get("/api/v1/list?collection_name=c", &[]).await;
    assert_eq!(deprecated["code"], 400);
    assert_eq!(deprecated["msg"], "collection_name is deprecated");
    assert_eq!(deprecated["data"], Value::Null);
    assert_eq!(deprecated.get("requestId"), None, "no header, no id");

    // get_backup: BackupInfoBrief of a finished backup.
    let backup = client.get("/api/v1/get_backup?backup_name=bak", &[]).await;
    assert_eq!(backup.get("code"), None, "{backup}");
    assert_eq!(backup["msg"], "success");
    let data = &backup["data"];
    assert_eq!(data["name"], "bak");
    assert_eq!(
        (data["state_code"].clone(), data["progress"].clone()),
        (json!(2), json!(100))
    );
    assert_eq!(data["size"], summary["size"]);
    assert!(data["meta_size"].as_i64().is_some_and(|m| m > 0), "{data}");
    let backup_collections: Vec<&str> = data["collection_backups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["collection_name"].as_str())
        .collect();
    assert_eq!(backup_collections, ["collection_0", "collection_1"]);
    if let Some(id) = summary["id"].as_str() {
        let by_id = client
            .get(&format!("/api/v1/get_backup?backup_id={id}"), &[])
            .await;
        assert_eq!(by_id["data"]["name"], "bak", "{by_id}");
    }
    let neither = client.get("/api/v1/get_backup", &[]).await;
    assert_eq!(neither["code"], 400);
    assert_eq!(neither["data"], Value::Null);
    let walking = client.get("/api/v1/get_backup?backup_name=..", &[]).await;
    assert_eq!(walking["code"], 400);
    let absent = client
        .get("/api/v1/get_backup?backup_name=absent", &[])
        .await;
    assert_eq!(
        (absent["code"].clone(), absent["data"].clone()),
        (json!(3), Value::Null)
    );
    let elsewhere = client
        .get("/api/v1/get_backup?backup_name=bak&path=elsewhere", &[])
        .await;
    assert_eq!(elsewhere["code"], 3, "path moves the root: {elsewhere}");

    // test_milvus_restore_back, async: answered at once, then waited for.
    let res = client
        .restore(json!({
            "async": true,
            "backup_name": "bak",
            "collection_suffix": "_mb",
            "useV2Restore": true,
            "secondaries": ["s1"],
        }))
        .await;
    assert_eq!(res.get("code"), None, "{res}");
    assert_eq!(res["msg"], "restore backup is executing asynchronously");
    assert!(
        res["requestId"].as_str().is_some_and(|r| !r.is_empty()),
        "a new id: {res}"
    );
    assert_eq!(res["data"]["state_code"], 0);
    assert_eq!(res["data"]["end_time"], lockstep::serve::api::UNSET_TIME);
    assert!(
        res["data"]["progress"].as_i64().is_some_and(|p| p >= 1),
        "{res}"
    );
    let restore_id = res["data"]["id"].as_str().unwrap().to_owned();
    assert!(client.wait_restore_complete(&restore_id).await);
    let done = client
        .get(&format!("/api/v1/get_restore?id={restore_id}"), &[])
        .await;
    assert_eq!(done["msg"], "success");
    assert_eq!(done["data"]["progress"], 100);
    let restored: BTreeSet<&str> = done["data"]["collection_restore_tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["target_collection_name"].as_str())
        .collect();
    assert_eq!(
        restored,
        BTreeSet::from(["collection_0_mb", "collection_1_mb"])
    );
    for end in ["t", "s1"] {
        assert_eq!(
            world
                .collections_with_suffix(end, "_mb")
                .await
                .unwrap()
                .len(),
            2,
            "{end}"
        );
    }

    // The same, sync, with collection_names and db_collections as a string of JSON.
    let res = client
        .restore(json!({
            "async": false,
            "backup_name": "bak",
            "collection_suffix": "_names",
            "collection_names": ["collection_0"],
            "secondaries": ["s1"],
        }))
        .await;
    assert_eq!(res.get("code"), None, "{res}");
    assert_eq!(res["msg"], "success");
    assert_eq!(res["data"]["state_code"], 2);
    let res = client
        .restore(json!({
            "async": false,
            "backup_name": "bak",
            "collection_suffix": "_db",
            "db_collections": json!({"default": ["collection_1"]}).to_string(),
            "secondaries": ["s1"],
        }))
        .await;
    assert_eq!(res["data"]["state_code"], 2, "{res}");
    assert_eq!(
        world.collections_with_suffix("s1", "_names").await.unwrap(),
        ["default.collection_0_names"]
    );
    assert_eq!(
        world.collections_with_suffix("s1", "_db").await.unwrap(),
        ["default.collection_1_db"]
    );

    // bucket_name and path move where the backup is read, for this request alone.
    let res = client
        .restore(json!({
            "backup_name": "bak",
            "collection_suffix": "_path",
            "path": "elsewhere",
            "secondaries": ["s1"],
        }))
        .await;
    assert_eq!(res["code"], 3, "no backup under that root: {res}");
    assert!(
        res["msg"].as_str().is_some_and(|m| m.contains("not found")),
        "{res}"
    );
    let res = client
        .restore(
            json!({"backup_name": "bak", "bucket_name": "other-bucket", "secondaries": ["s1"]}),
        )
        .await;
    assert_eq!(res["code"], 400);
    assert!(
        res["msg"]
            .as_str()
            .is_some_and(|m| m.contains("bucket_name")),
        "{res}"
    );
    assert!(
        world
            .collections_with_suffix("t", "_path")
            .await
            .unwrap()
            .is_empty()
    );

    // Its routes lockstep does not serve say so, with its Not_Support code and what to do.
    for (method, path, says) in [
        ("post", "/api/v1/restore_secondary", "secondaries"),
        ("post", "/api/v1/create", "milvus-backup"),
        ("delete", "/api/v1/delete?backup_name=bak", "milvus-backup"),
    ] {
        // Its client sends every request as JSON, a DELETE's `json.dumps(None)` included.
        let body = Some(if method == "post" { "{}" } else { "null" });
        let (status, res) =
            call_with(&client.doc, method, &client.base, path, body, None, &[]).await;
        assert_eq!((status, &res["code"]), (200, &json!(1)), "{path}: {res}");
        assert!(
            res["msg"].as_str().is_some_and(|m| m.contains(says)),
            "{path}: {res}"
        );
        assert_eq!(res["data"], Value::Null);
    }
    assert!(
        world.dir.path().join("backups/backup/bak/meta").exists(),
        "delete deleted nothing"
    );
    server.stop().await;
}
