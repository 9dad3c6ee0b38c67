//! The sim stays light at the size DESIGN §6 benchmarks: 1,000 collections × 4 partitions,
//! one import job per partition, instant stages, on a primary with one secondary. (Speed is
//! measured by benchmarks; this checks that the load completes and every end agrees.)

use milvus_proto::schema::DataType;
use milvus_sim::Protocol;
use milvus_sim::catalog::{DdlOp, NewCollection};
use milvus_sim::cluster::CreateImport;
use milvus_sim::jobs::JobState;
use object_store::{ObjectStoreExt, PutPayload, path::Path as ObjectPath};

use crate::common::*;

const COLLECTIONS: usize = 1000;
const PARTITIONS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_collections_of_four_partitions_import_and_commit_on_both_ends() {
    let instant = "[cluster.durations]\npending = \"0s\"\npreimport = \"0s\"\nimporting = \"0s\"\nsorting = \"0s\"\nindex_building = \"0s\"\ncommitting = \"0s\"\n";
    let topology = ["a", "b"]
        .iter()
        .map(|id| format!("[[cluster]]\nid = \"{id}\"\nimport_in_replicating_cluster = true\nmax_import_job_num = 5000\n[cluster.storage]\nurl = \"memory://\"\n{instant}"))
        .collect::<String>()
        + "[replication]\nprimary = \"a\"\nsecondaries = [\"b\"]\n";
    let sim = start(&topology).await;
    let (a, b) = (sim.cluster("a"), sim.cluster("b"));
    for cluster in [&a, &b] {
        // RowID, Timestamp and the pk: the fields a segment's binlogs must cover.
        for field in [0, 1, 100] {
            let bytes = milvus_formats::binlog::encode_insert(
                milvus_formats::binlog::Descriptor::new(field, DataType::Int64),
                &milvus_formats::binlog::Column::Int64(vec![0; 10]),
            );
            cluster
                .store()
                .put(
                    &ObjectPath::from(format!("bk/{field}/1")),
                    PutPayload::from(bytes),
                )
                .await
                .expect("put");
        }
    }
    let mut jobs = Vec::new();
    for c in 0..COLLECTIONS {
        let name = format!("c{c}");
        a.create_collection(NewCollection::keyed("default", &name))
            .expect("collection");
        for p in 1..PARTITIONS {
            a.execute_ddl(DdlOp::CreatePartition {
                db: "default".into(),
                collection: name.clone(),
                name: format!("p{p}"),
                id: a.next_id(),
            })
            .expect("partition");
        }
        for p in 0..PARTITIONS {
            let partition = if p == 0 {
                "_default".to_owned()
            } else {
                format!("p{p}")
            };
            let create = CreateImport {
                db_name: String::new(),
                collection_name: name.clone(),
                partition_name: partition,
                files: vec![vec!["bk/".into()]],
                options: [("backup", "true"), ("auto_commit", "false")]
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .into(),
                idempotency_key: None,
                protocol: Protocol::Rest,
            };
            jobs.push(a.create_import(create).expect("created"));
        }
    }
    for &id in &jobs {
        wait_for(&b, id, JobState::Uncommitted).await;
        wait_for(&a, id, JobState::Uncommitted).await;
    }
    for &id in &jobs {
        a.commit_import(&id.to_string()).expect("committed");
    }
    for &id in &jobs {
        wait_for(&a, id, JobState::Completed).await;
        wait_for(&b, id, JobState::Completed).await;
    }
    let snapshot = b.snapshot();
    assert_eq!(snapshot.collections.len(), COLLECTIONS);
    assert!(
        snapshot
            .collections
            .iter()
            .all(|c| c.partitions.len() == PARTITIONS && c.visible_rows == 40)
    );
}

#[tokio::test]
async fn the_request_log_keeps_the_newest_records_and_counts_the_rest() {
    let sim = start("[[cluster]]\nid = \"a\"\nrequest_log_capacity = 3\n").await;
    let mut client = grpc(&sim.uri("a")).await;
    client
        .get_version(milvus_proto::milvus::GetVersionRequest {})
        .await
        .expect("answers");
    for _ in 0..4 {
        client
            .check_health(milvus_proto::milvus::CheckHealthRequest {})
            .await
            .expect("answers");
    }
    let state = sim.cluster("a").control().state().await.expect("state");
    assert_eq!(state.requests.len(), 3);
    assert!(
        state
            .requests
            .iter()
            .all(|r| r.route.ends_with("/CheckHealth")),
        "the oldest record (GetVersion) fell off: {:?}",
        state.requests
    );
    assert_eq!(state.requests_dropped, 2);
}
