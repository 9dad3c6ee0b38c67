//! Partition-key collections as Milvus makes them: `_default_0` … `_default_{n-1}` and no
//! `_default`, CreatePartition refused, the proxy's partition rules for imports, and the
//! restore of a generated backup whose collections have a partition key (issue 2).

use milvus_proto::milvus::*;
use milvus_proto::schema::{CollectionSchema, DataType, FieldSchema};
use milvus_sim::fixtures::{self, BackupSpec, GeneratedBackup, LogKind, SchemaMix};
use milvus_sim::jobs::JobState;
use object_store::ObjectStoreExt;
use prost::Message;
use serde_json::json;

use crate::common::*;

/// pk `id`, `vector`, and `tenant` (Int64) as the partition key.
fn keyed_schema(name: &str) -> CollectionSchema {
    let request = create_collection_request(name);
    let mut schema =
        CollectionSchema::decode(request.schema.as_slice()).expect("the helper's schema decodes");
    schema.fields.push(FieldSchema {
        name: "tenant".into(),
        data_type: DataType::Int64 as i32,
        is_partition_key: true,
        ..Default::default()
    });
    schema
}

fn keyed_request(name: &str, num_partitions: i64) -> CreateCollectionRequest {
    CreateCollectionRequest {
        schema: keyed_schema(name).encode_to_vec(),
        num_partitions,
        ..create_collection_request(name)
    }
}

async fn partition_names(uri: &str, collection: &str) -> Vec<String> {
    let shown = grpc(uri)
        .await
        .show_partitions(ShowPartitionsRequest {
            collection_name: collection.into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(shown.status.expect("status").code, 0);
    shown.partition_names
}

#[tokio::test]
async fn a_partition_key_collection_gets_default_i_partitions_and_no_default() {
    let sim = start(&star()).await;
    let uri = sim.uri("a");
    let mut client = grpc(&uri).await;
    for (name, asked, made) in [("sixteen", 0, 16), ("three", 3, 3)] {
        let status = client
            .create_collection(keyed_request(name, asked))
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(status.code, 0, "{status:?}");
        let expected: Vec<String> = (0..made).map(|i| format!("_default_{i}")).collect();
        assert_eq!(partition_names(&uri, name).await, expected);
        let described = client
            .describe_collection(DescribeCollectionRequest {
                collection_name: name.into(),
                ..Default::default()
            })
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(described.num_partitions, made);
        let has_default = client
            .has_partition(HasPartitionRequest {
                collection_name: name.into(),
                partition_name: "_default".into(),
                ..Default::default()
            })
            .await
            .expect("answers")
            .into_inner();
        assert!(
            !has_default.value,
            "no _default partition with a partition key"
        );
    }

    // The secondaries mirror the partitions with the primary's ids.
    let primary = sim.cluster("a").snapshot();
    for secondary in ["b", "c"] {
        wait_collection(&sim.cluster(secondary), "three").await;
        assert_eq!(
            partition_names(&sim.uri(secondary), "three").await,
            ["_default_0", "_default_1", "_default_2"]
        );
        let ids = |cluster: &str| {
            sim.cluster(cluster).with_catalog(|c| {
                let coll = c.collection("", "three").expect("collection");
                coll.partitions.iter().map(|p| p.id).collect::<Vec<_>>()
            })
        };
        assert_eq!(ids(secondary), ids("a"));
    }
    assert_eq!(
        primary
            .collection("default", "three")
            .expect("snapshot")
            .partitions,
        ["_default_0", "_default_1", "_default_2"]
    );
}

#[tokio::test]
async fn create_partition_on_a_partition_key_collection_is_refused() {
    let sim = start(&standalone("3.0.0")).await;
    let mut client = grpc(&sim.uri("a")).await;
    client
        .create_collection(keyed_request("k", 2))
        .await
        .expect("answers");
    for partition in ["p1", "_default_0"] {
        let status = client
            .create_partition(CreatePartitionRequest {
                collection_name: "k".into(),
                partition_name: partition.into(),
                ..Default::default()
            })
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(
            (status.code, status.reason.as_str()),
            (
                65535,
                "disable create partition if partition key mode is used"
            )
        );
    }
    assert_eq!(
        partition_names(&sim.uri("a"), "k").await,
        ["_default_0", "_default_1"]
    );
}

#[tokio::test]
async fn partition_key_rules_of_create_collection_answer_with_milvus_messages() {
    let sim = start(&standalone("3.0.0")).await;
    let mut client = grpc(&sim.uri("a")).await;
    let with_fields = |name: &str, edit: &dyn Fn(&mut CollectionSchema)| {
        let mut schema = keyed_schema(name);
        edit(&mut schema);
        CreateCollectionRequest {
            schema: schema.encode_to_vec(),
            ..create_collection_request(name)
        }
    };
    let cases = [
        (
            CreateCollectionRequest {
                num_partitions: 4,
                ..create_collection_request("no_key")
            },
            65535,
            "num_partitions should only be specified with partition key field enabled",
        ),
        (
            with_fields("two_keys", &|s: &mut CollectionSchema| {
                s.fields.push(FieldSchema {
                    name: "region".into(),
                    data_type: DataType::VarChar as i32,
                    is_partition_key: true,
                    ..Default::default()
                })
            }),
            65535,
            "there are more than one partition key, field name = tenant, region",
        ),
        (
            // The primary key comes first, so it is the one refused.
            with_fields("pk_key", &|s: &mut CollectionSchema| {
                s.fields[0].is_partition_key = true
            }),
            65535,
            "the partition key field must not be primary field",
        ),
        (
            with_fields("float_key", &|s: &mut CollectionSchema| {
                s.fields[2].data_type = DataType::Float as i32
            }),
            65535,
            "the data type of partition key should be Int64 or VarChar",
        ),
        (
            with_fields("nullable_key", &|s: &mut CollectionSchema| {
                s.fields[2].nullable = true
            }),
            1100,
            "partition key field not support nullable: invalid parameter",
        ),
        (
            keyed_request("negative", -1),
            65535,
            "the specified partitions should be greater than 0 if partition key is used",
        ),
        (
            keyed_request("too_many", 1025),
            1100,
            "partition number (1025) exceeds max configuration (1024): invalid parameter",
        ),
    ];
    for (request, code, message) in cases {
        let name = request.collection_name.clone();
        let status = client
            .create_collection(request)
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(
            (status.code, status.reason.as_str()),
            (code, message),
            "{name}"
        );
    }
    let shown = client
        .show_collections(ShowCollectionsRequest::default())
        .await
        .expect("answers")
        .into_inner();
    assert!(shown.collection_names.is_empty(), "nothing was created");
}

#[tokio::test]
async fn imports_into_a_partition_key_collection_follow_the_proxy_rules() {
    let sim = start(&with_l0_import(&standalone("3.0.0"))).await;
    let a = sim.cluster("a");
    grpc(&a.uri())
        .await
        .create_collection(keyed_request("k", 2))
        .await
        .expect("answers");
    // `tenant` is field 102.
    let fields = [
        (100, DataType::Int64),
        (101, DataType::FloatVector),
        (102, DataType::Int64),
    ];
    let files = put_segment_of(&a, "bk", 6, 1, &fields).await;
    let rest = Rest::new(&a.uri());

    // A backup import names one of the `_default_i` partitions.
    let answer = rest
        .create(
            "k",
            "_default_1",
            json!([files]),
            json!({"backup": "true", "auto_commit": "false"}),
        )
        .await;
    let job = wait_for(&a, job_id(&answer), JobState::Uncommitted).await;
    assert_eq!(
        (job.partition_name.as_str(), job.total_rows),
        ("_default_1", 6)
    );
    assert_refused(
        &rest
            .create("k", "_default", json!([files]), json!({"backup": "true"}))
            .await,
        200,
        "partition not found[partition=_default]",
    );

    // A row-file import must leave the routing to the key.
    a.store()
        .put(
            &object_store::path::Path::from("rows.json"),
            object_store::PutPayload::from_static(br#"{"rows":[{"id":1,"tenant":7}]}"#),
        )
        .await
        .expect("put");
    assert_refused(
        &rest
            .create("k", "_default_0", json!([["rows.json"]]), json!({}))
            .await,
        2100,
        "not allow to set partition name for collection with partition key: importing data failed",
    );
    let rows = rest
        .create("k", "", json!([["rows.json"]]), json!({}))
        .await;
    assert_eq!(
        wait_for(&a, job_id(&rows), JobState::Completed)
            .await
            .total_rows,
        1
    );

    // An L0 import may name a partition.
    let l0 = rest
        .create(
            "k",
            "_default_0",
            json!([[files[1]]]),
            json!({"l0_import": "true"}),
        )
        .await;
    assert_eq!(
        wait_for(&a, job_id(&l0), JobState::Completed)
            .await
            .deleted_rows,
        1
    );
}

/// The schema a restore sends for a backed-up collection: the backup's fields without the
/// dynamic `$meta`, which Milvus adds itself.
fn restore_schema(backed_up: &fixtures::meta::CollectionSchema) -> CollectionSchema {
    CollectionSchema {
        name: backed_up.name.clone(),
        description: backed_up.description.clone(),
        enable_dynamic_field: backed_up.enable_dynamic_field,
        fields: backed_up
            .fields
            .iter()
            .filter(|f| !f.is_dynamic)
            .map(|f| FieldSchema {
                field_id: f.field_id,
                name: f.name.clone(),
                is_primary_key: f.is_primary_key,
                data_type: i32::from(f.data_type),
                type_params: f
                    .type_params
                    .iter()
                    .map(|kv| milvus_proto::common::KeyValuePair {
                        key: kv.key.clone(),
                        value: kv.value.clone(),
                    })
                    .collect(),
                is_partition_key: f.is_partition_key,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// `[insert_prefix, delta_prefix]` of a sealed segment (the delta prefix only when it has one).
fn segment_files(backup: &GeneratedBackup, segment_id: i64) -> Vec<String> {
    let parent = |path: &str| {
        path.rsplit_once('/')
            .expect("a log path has a parent")
            .0
            .to_owned()
    };
    let mut insert = None;
    let mut delta = None;
    for log in backup.logs_of_segment(segment_id) {
        match log.kind {
            LogKind::Insert { .. } => insert = Some(parent(&parent(log.path.as_ref()))),
            LogKind::Delta => delta = Some(parent(log.path.as_ref())),
        }
    }
    let mut files = vec![format!(
        "{}/",
        insert.expect("a sealed segment has insert logs")
    )];
    files.extend(delta.map(|d| format!("{d}/")));
    files
}

/// Issue 2: restoring gen-backup's varied schemas failed with
/// "partition not found[partition=_default_1]", because the sim gave a partition-key
/// collection a `_default` partition instead of Milvus's `_default_{i}`.
#[tokio::test]
async fn regression_issue_2_varied_backup_imports_into_its_partition_key_partitions() {
    let sim = start(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    let spec = BackupSpec {
        collections: 4,
        partitions: 2,
        segments_per_partition: 1,
        rows_per_segment: 20,
        dim: 4,
        schema: SchemaMix::Varied,
        ..BackupSpec::default()
    };
    let backup = fixtures::generate(&spec, a.store(), &object_store::path::Path::from("backups"))
        .await
        .expect("backup written");
    let mut client = grpc(&a.uri()).await;
    let rest = Rest::new(&a.uri());
    let mut keyed = 0;
    for collection in &backup.info.collection_backups {
        let schema = restore_schema(collection.schema.as_ref().expect("backed-up schema"));
        let has_key = schema.fields.iter().any(|f| f.is_partition_key);
        keyed += usize::from(has_key);
        let status = client
            .create_collection(CreateCollectionRequest {
                collection_name: collection.collection_name.clone(),
                schema: schema.encode_to_vec(),
                shards_num: collection.shards_num,
                num_partitions: if has_key {
                    collection.partition_backups.len() as i64
                } else {
                    0
                },
                ..Default::default()
            })
            .await
            .expect("answers")
            .into_inner();
        assert_eq!(status.code, 0, "{status:?}");
        for partition in &collection.partition_backups {
            if !has_key && partition.partition_name != "_default" {
                let status = client
                    .create_partition(CreatePartitionRequest {
                        collection_name: collection.collection_name.clone(),
                        partition_name: partition.partition_name.clone(),
                        ..Default::default()
                    })
                    .await
                    .expect("answers")
                    .into_inner();
                assert_eq!(status.code, 0, "{status:?}");
            }
            let sealed: Vec<_> = partition
                .segment_backups
                .iter()
                .filter(|s| !s.is_l0)
                .collect();
            let files: Vec<Vec<String>> = sealed
                .iter()
                .map(|s| segment_files(&backup, s.segment_id))
                .collect();
            let answer = rest
                .create(
                    &collection.collection_name,
                    &partition.partition_name,
                    json!(files),
                    json!({"backup": "true"}),
                )
                .await;
            let job = wait_for(&a, job_id(&answer), JobState::Completed).await;
            let expected: i64 = sealed.iter().map(|s| s.num_of_rows).sum();
            assert_eq!(job.total_rows, expected, "{}", partition.partition_name);
        }
    }
    assert_eq!(
        keyed, 2,
        "the varied mix gives half the collections a partition key"
    );
}

/// The proxy refuses a query that names partitions of a partition-key collection, count(*)
/// included, before it looks at the load state: an input error (1100) from 3.0, a plain one
/// (65535) on 2.3.5; `partition_key_refuses_partition_names = false` lets it through
/// (docs/milvus-facts.md §4.5).
#[tokio::test]
async fn a_query_naming_partitions_of_a_partition_key_collection_is_refused() {
    const RULE: &str =
        "not support manually specifying the partition names if partition key mode is used";
    let invalid = format!("{RULE}: invalid parameter");
    for (version, extra, refusal) in [
        ("3.0.0", "", Some((1100, invalid.as_str()))),
        ("2.3.5", "", Some((65535, RULE))),
        (
            "3.0.0",
            "partition_key_refuses_partition_names = false\n",
            None,
        ),
    ] {
        let topology = standalone(version).replace("id = \"a\"\n", &format!("id = \"a\"\n{extra}"));
        let sim = start(&topology).await;
        let uri = sim.uri("a");
        let mut client = grpc(&uri).await;
        client
            .create_collection(keyed_request("k", 2))
            .await
            .expect("answers");
        create_collection(&uri, "plain").await;
        for name in ["k", "plain"] {
            let index = CreateIndexRequest {
                collection_name: name.into(),
                field_name: "vector".into(),
                ..Default::default()
            };
            assert_eq!(
                client
                    .create_index(index)
                    .await
                    .expect("answers")
                    .into_inner()
                    .code,
                0
            );
            let load = LoadCollectionRequest {
                collection_name: name.into(),
                ..Default::default()
            };
            assert_eq!(
                client
                    .load_collection(load)
                    .await
                    .expect("answers")
                    .into_inner()
                    .code,
                0
            );
        }
        let count = |collection: &str, partitions: &[&str]| QueryRequest {
            collection_name: collection.into(),
            output_fields: vec!["count(*)".into()],
            partition_names: partitions.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        };
        let status = |request| {
            let mut client = client.clone();
            async move {
                let answer = client.query(request).await.expect("answers").into_inner();
                let status = answer.status.expect("status");
                (status.code, status.reason)
            }
        };
        let named = status(count("k", &["_default_0"])).await;
        match refusal {
            Some((code, message)) => assert_eq!(named, (code, message.to_owned()), "{version}"),
            None => assert_eq!(named.0, 0, "{named:?}"),
        }
        assert_eq!(
            status(count("k", &[])).await.0,
            0,
            "the whole collection is counted"
        );
        assert_eq!(
            status(count("plain", &["p1"])).await.0,
            0,
            "no partition key"
        );
    }
}
