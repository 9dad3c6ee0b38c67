//! The gRPC subset (docs/milvus-facts.md §4) as a client sees it.

use milvus_proto::common::{ImportState, KeyValuePair, LoadState};
use milvus_proto::milvus::*;
use milvus_sim::jobs::JobState;
use prost::Message;

use crate::common::*;

#[tokio::test]
async fn version_connect_and_health_report_the_configured_version() {
    for version in ["3.0.0", "2.6.24", "v2.5.4", "master-20260806-1a2b3c4"] {
        let sim = start(&standalone(version)).await;
        let mut client = grpc(&sim.uri("a")).await;
        let v = client
            .get_version(GetVersionRequest {})
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(v.version, version);
        let c = client
            .connect(ConnectRequest::default())
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(c.server_info.expect("server info").build_tags, version);
        assert_ne!(c.identifier, 0);
        assert!(
            client
                .check_health(CheckHealthRequest {})
                .await
                .expect("answers")
                .into_inner()
                .is_healthy
        );
    }
}

#[tokio::test]
async fn catalog_calls_answer_with_milvus_codes() {
    let sim = start(&standalone("3.0.0")).await;
    let uri = sim.uri("a");
    let mut client = grpc(&uri).await;
    let missing = client
        .describe_collection(DescribeCollectionRequest {
            collection_name: "nope".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(missing.status.expect("status").code, 100);
    create_collection(&uri, "c").await;
    let described = client
        .describe_collection(DescribeCollectionRequest {
            collection_name: "c".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    let schema = described.schema.expect("schema");
    assert_eq!(
        schema.fields.iter().map(|f| f.field_id).collect::<Vec<_>>(),
        [100, 101]
    );
    assert_eq!(
        described.physical_channel_names,
        ["a-rootcoord-dml_0"],
        "one pchannel per shard"
    );
    assert_eq!(
        described.virtual_channel_names,
        [format!("a-rootcoord-dml_0_{}v0", described.collection_id)]
    );
    assert_eq!(described.db_name, "default");
    let has = client
        .has_collection(HasCollectionRequest {
            collection_name: "c".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert!(has.value);
    let parts = client
        .show_partitions(ShowPartitionsRequest {
            collection_name: "c".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(parts.partition_names, ["_default", "p1"]);
    let index = client
        .describe_index(DescribeIndexRequest {
            collection_name: "c".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(index.status.expect("status").code, 700, "no index yet");
    let shown = client
        .show_collections(ShowCollectionsRequest::default())
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(shown.collection_names, ["c"]);
    let load = client
        .get_load_state(GetLoadStateRequest {
            collection_name: "c".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(load.state, LoadState::NotLoad as i32);
    let dbs = client
        .list_databases(ListDatabasesRequest::default())
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(dbs.db_names, ["default"]);
    let dup_db = client
        .create_database(CreateDatabaseRequest {
            db_name: "default".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(
        (dup_db.code, dup_db.reason.as_str()),
        (65535, "database already exist: default")
    );
}

#[tokio::test]
async fn v1_import_is_one_auto_commit_group_and_maps_states() {
    let sim = start(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    create_collection(&a.uri(), "c").await;
    let files = put_segment(&a, "bk", 8, 0).await;
    let mut client = grpc(&a.uri()).await;
    let response = client
        .import(ImportRequest {
            collection_name: "c".into(),
            partition_name: "_default".into(),
            files: files.to_vec(),
            options: vec![KeyValuePair {
                key: "backup".into(),
                value: "true".into(),
            }],
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(response.status.expect("status").code, 0);
    let task = response.tasks[0];
    let job = wait_for(&a, task, JobState::Completed).await;
    assert_eq!(
        (job.files.len(), job.total_rows),
        (1, 8),
        "every file in one group"
    );
    let state = client
        .get_import_state(GetImportStateRequest { task })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(
        (state.state, state.row_count, state.id),
        (ImportState::ImportCompleted as i32, 8, 0)
    );
    let listed = client
        .list_import_tasks(ListImportTasksRequest {
            collection_name: "c".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(listed.tasks.len(), 1);

    // A manual job waiting in Uncommitted reads as ImportFailed over v1
    // (docs/milvus-facts.md §4.4).
    let rest = Rest::new(&a.uri());
    let manual = rest.create_manual("c", &files[0]).await;
    wait_for(&a, manual, JobState::Uncommitted).await;
    let state = client
        .get_import_state(GetImportStateRequest { task: manual })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(state.state, ImportState::ImportFailed as i32);
}

#[tokio::test]
async fn a_dynamic_schema_stores_meta_which_describe_hides_and_an_explicit_one_is_refused() {
    let sim = start(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    let mut client = grpc(&a.uri()).await;
    let mut request = create_collection_request("dyn");
    let mut schema = milvus_proto::schema::CollectionSchema::decode(request.schema.as_slice())
        .expect("the helper's schema decodes");
    schema.enable_dynamic_field = true;
    request.schema = schema.encode_to_vec();
    for attempt in ["first", "identical again"] {
        let status = client
            .create_collection(request.clone())
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(status.code, 0, "{attempt}: {status:?}");
    }

    let stored = a.snapshot();
    let fields: Vec<_> = stored
        .collection("default", "dyn")
        .expect("created")
        .fields
        .iter()
        .map(|f| (f.field_id, f.name.as_str(), f.is_dynamic))
        .collect();
    assert_eq!(
        fields,
        [
            (100, "id", false),
            (101, "vector", false),
            (102, "$meta", true)
        ]
    );
    let meta =
        a.with_catalog(|c| c.collection("", "dyn").expect("created").schema.fields[2].clone());
    assert_eq!(
        (meta.data_type, meta.nullable, meta.description.as_str()),
        (
            milvus_proto::schema::DataType::Json as i32,
            true,
            "dynamic schema"
        )
    );

    let described = client
        .describe_collection(DescribeCollectionRequest {
            collection_name: "dyn".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner()
        .schema
        .expect("schema");
    assert!(described.enable_dynamic_field);
    assert_eq!(
        described
            .fields
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>(),
        ["id", "vector"],
        "the proxy's DescribeCollection skips the dynamic field"
    );

    schema.name = "explicit".into();
    schema.fields.push(milvus_proto::schema::FieldSchema {
        name: "$meta".into(),
        data_type: milvus_proto::schema::DataType::Json as i32,
        is_dynamic: true,
        ..Default::default()
    });
    let refused = client
        .create_collection(CreateCollectionRequest {
            collection_name: "explicit".into(),
            schema: schema.encode_to_vec(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(
        (refused.code, refused.reason.as_str()),
        (
            1100,
            "cannot explicitly set a field as a dynamic field: invalid parameter"
        )
    );
}

async fn describe_channels(uri: &str, collection: &str) -> (i64, Vec<String>, Vec<String>) {
    let described = grpc(uri)
        .await
        .describe_collection(DescribeCollectionRequest {
            collection_name: collection.into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(described.status.expect("status").code, 0, "{collection}");
    (
        described.collection_id,
        described.physical_channel_names,
        described.virtual_channel_names,
    )
}

#[tokio::test]
async fn each_shard_gets_a_pchannel_round_robin_and_mirrors_use_their_own() {
    let four = "pchannels = 4\nimport_in_replicating_cluster = true\n";
    let sim = start(&format!(
        "[[cluster]]\nid = \"a\"\n{four}[[cluster]]\nid = \"b\"\n{four}[replication]\nprimary = \"a\"\nsecondaries = [\"b\"]\n"
    ))
    .await;
    let mut client = grpc(&sim.uri("a")).await;
    for (name, shards) in [("three", 3), ("two", 2), ("default_one", 0)] {
        let status = client
            .create_collection(CreateCollectionRequest {
                shards_num: shards,
                ..create_collection_request(name)
            })
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(status.code, 0, "{name}: {status:?}");
    }
    let expected = [
        ("three", vec![0, 1, 2]),
        ("two", vec![3, 0]),
        ("default_one", vec![1]),
    ];
    for cluster in ["a", "b"] {
        let uri = sim.uri(cluster);
        for (name, indexes) in &expected {
            wait_collection(&sim.cluster(cluster), name).await;
            let (id, physical, virtual_) = describe_channels(&uri, name).await;
            let pchannels: Vec<String> = indexes
                .iter()
                .map(|i| format!("{cluster}-rootcoord-dml_{i}"))
                .collect();
            assert_eq!(physical, pchannels, "{cluster}/{name}");
            let vchannels: Vec<String> = pchannels
                .iter()
                .enumerate()
                .map(|(shard, p)| format!("{p}_{id}v{shard}"))
                .collect();
            assert_eq!(virtual_, vchannels, "{cluster}/{name}");
            // Lockstep finds itself by matching these against the replicate configuration.
            let own = sim.cluster(cluster).pchannels().to_vec();
            assert!(physical.iter().all(|p| own.contains(p)), "{cluster}/{name}");
        }
    }

    for (shards, code, message) in [
        (
            5,
            1100,
            "shard num (5) exceeds max configuration (4): invalid parameter",
        ),
        (17, 65535, "maximum shards's number should be limited to 16"),
    ] {
        let status = client
            .create_collection(CreateCollectionRequest {
                shards_num: shards,
                ..create_collection_request("too_many_shards")
            })
            .await
            .expect("answers")
            .into_inner();
        assert_eq!((status.code, status.reason.as_str()), (code, message));
    }
}
