//! Helpers shared by the test modules: starting a topology, REST and gRPC calls, binlogs.

use std::path::Path;
use std::time::Duration;

use milvus_formats::binlog::{self, Column, Delete, DeltaForm, Descriptor};
use milvus_proto::milvus::milvus_service_client::MilvusServiceClient;
use milvus_proto::milvus::{CreateCollectionRequest, CreatePartitionRequest};
use milvus_proto::schema::{CollectionSchema, DataType, FieldSchema};
use milvus_sim::jobs::{ImportJob, JobState};
use milvus_sim::{Cluster, Sim, Topology};
use object_store::{ObjectStoreExt, PutPayload, path::Path as ObjectPath};
use prost::Message;
use serde_json::{Value, json};
use tonic::transport::Channel;

/// Fast stage durations, so a job reaches Uncommitted in well under a second.
pub const FAST: &str = "[cluster.durations]\npending = \"5ms\"\npreimport = \"5ms\"\nimporting = \"5ms\"\nsorting = \"5ms\"\nindex_building = \"5ms\"\ncommitting = \"5ms\"\n";

/// A standalone cluster "a" at `version`.
pub fn standalone(version: &str) -> String {
    format!("[[cluster]]\nid = \"a\"\nversion = \"{version}\"\n{FAST}")
}

/// `topology` with `dataCoord.import.enableL0Import` on in every cluster (Milvus 3.0 has it
/// off).
pub fn with_l0_import(topology: &str) -> String {
    topology.replace("[[cluster]]\n", "[[cluster]]\nenable_l0_import = true\n")
}

/// A star a → b, c with imports allowed in the replicating cluster.
pub fn star() -> String {
    let mut t = String::new();
    for id in ["a", "b", "c"] {
        t += &format!("[[cluster]]\nid = \"{id}\"\nimport_in_replicating_cluster = true\n{FAST}");
    }
    t + "[replication]\nprimary = \"a\"\nsecondaries = [\"b\", \"c\"]\n"
}

pub async fn start(topology: &str) -> Sim {
    let topology = Topology::from_toml_str(topology, "test.toml", Path::new("."))
        .expect("test topology is valid");
    Sim::start(topology).await.expect("sim starts")
}

/// A REST v2 client of one cluster.
pub struct Rest {
    http: reqwest::Client,
    base: String,
}

impl Rest {
    pub fn new(uri: &str) -> Rest {
        Rest {
            http: reqwest::Client::new(),
            base: uri.to_owned(),
        }
    }

    /// POSTs raw bytes; Milvus answers HTTP 200 whatever the outcome.
    pub async fn post_raw(&self, route: &str, body: &str, headers: &[(&str, &str)]) -> Value {
        let mut request = self
            .http
            .post(format!("{}/v2/vectordb/jobs/import/{route}", self.base))
            .header("Content-Type", "application/json")
            .body(body.to_owned());
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.expect("REST request reaches the sim");
        assert_eq!(response.status(), 200, "REST answers HTTP 200");
        response.json().await.expect("REST answers JSON")
    }

    pub async fn post(&self, route: &str, body: Value) -> Value {
        self.post_raw(route, &body.to_string(), &[]).await
    }

    pub async fn create(
        &self,
        collection: &str,
        partition: &str,
        files: Value,
        options: Value,
    ) -> Value {
        let body = json!({"collectionName": collection, "partitionName": partition, "files": files, "options": options});
        self.post("create", body).await
    }

    /// Creates a manual-commit backup import of `prefix` and returns its job id.
    pub async fn create_manual(&self, collection: &str, prefix: &str) -> i64 {
        let answer = self
            .create(
                collection,
                "_default",
                json!([[prefix]]),
                json!({"backup": "true", "auto_commit": "false"}),
            )
            .await;
        job_id(&answer)
    }

    pub async fn commit(&self, job_id: &str) -> Value {
        self.post("commit", json!({"jobId": job_id})).await
    }

    pub async fn abort(&self, job_id: &str) -> Value {
        self.post("abort", json!({"jobId": job_id})).await
    }

    pub async fn describe(&self, job_id: &str) -> Value {
        self.post("describe", json!({"jobId": job_id})).await
    }
}

/// The job id of a successful create answer.
pub fn job_id(answer: &Value) -> i64 {
    assert_eq!(answer["code"], 0, "create succeeded: {answer}");
    answer["data"]["jobId"]
        .as_str()
        .expect("jobId is a string")
        .parse()
        .expect("jobId is an int64")
}

/// Asserts a refusal's code and that its message contains `needle`.
pub fn assert_refused(answer: &Value, code: i64, needle: &str) {
    assert_eq!(answer["code"], code, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(needle),
        "message {message:?} should contain {needle:?}"
    );
    assert!(
        answer.get("data").is_none(),
        "an error carries no data: {answer}"
    );
}

pub async fn grpc(uri: &str) -> MilvusServiceClient<Channel> {
    let channel = tonic::transport::Endpoint::from_shared(uri.to_owned())
        .expect("valid uri")
        .connect()
        .await
        .expect("gRPC connects");
    MilvusServiceClient::new(channel)
}

/// A CreateCollection request for `name`: pk `id` Int64 (field 100), `vector` (field 101).
pub fn create_collection_request(name: &str) -> CreateCollectionRequest {
    let schema = CollectionSchema {
        name: name.into(),
        fields: vec![
            FieldSchema {
                name: "id".into(),
                is_primary_key: true,
                data_type: DataType::Int64 as i32,
                ..Default::default()
            },
            FieldSchema {
                name: "vector".into(),
                data_type: DataType::FloatVector as i32,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    CreateCollectionRequest {
        collection_name: name.into(),
        schema: schema.encode_to_vec(),
        shards_num: 1,
        ..Default::default()
    }
}

/// Creates collection `name` (see [`create_collection_request`]) and partition `p1` on `uri`
/// over gRPC.
pub async fn create_collection(uri: &str, name: &str) {
    let mut client = grpc(uri).await;
    let status = client
        .create_collection(create_collection_request(name))
        .await
        .expect("CreateCollection answers")
        .into_inner();
    assert_eq!(status.code, 0, "{status:?}");
    let status = client
        .create_partition(CreatePartitionRequest {
            collection_name: name.into(),
            partition_name: "p1".into(),
            ..Default::default()
        })
        .await
        .expect("CreatePartition answers")
        .into_inner();
    assert_eq!(status.code, 0, "{status:?}");
}

/// Writes one backup segment group under `prefix` in a cluster's storage: `rows` rows in two
/// insert binlogs for each of RowID, Timestamp, the pk field (100) and the vector field (101),
/// as Milvus's binlog reader requires, and a delta log of `deleted`. Returns the group's
/// `[insert_prefix, delta_prefix]`.
pub async fn put_segment(cluster: &Cluster, prefix: &str, rows: u64, deleted: u64) -> [String; 2] {
    let fields = [(100, DataType::Int64), (101, DataType::FloatVector)];
    put_segment_of(cluster, prefix, rows, deleted, &fields).await
}

/// [`put_segment`] for a collection whose user fields are `fields` (id and type).
pub async fn put_segment_of(
    cluster: &Cluster,
    prefix: &str,
    rows: u64,
    deleted: u64,
    fields: &[(i64, DataType)],
) -> [String; 2] {
    put_rows(cluster, prefix, (rows, 0), deleted, fields).await
}

/// [`put_segment`] of rows stamped `row_ts` (the source cluster's timestamp, which a backup
/// import keeps), without deletes.
pub async fn put_segment_at(
    cluster: &Cluster,
    prefix: &str,
    rows: u64,
    row_ts: u64,
) -> [String; 2] {
    let fields = [(100, DataType::Int64), (101, DataType::FloatVector)];
    put_rows(cluster, prefix, (rows, row_ts), 0, &fields).await
}

/// `rows` rows, each stamped `row_ts`, and the deletes of the first `deleted` keys at
/// timestamp 1.
async fn put_rows(
    cluster: &Cluster,
    prefix: &str,
    (rows, row_ts): (u64, u64),
    deleted: u64,
    fields: &[(i64, DataType)],
) -> [String; 2] {
    let store = cluster.store();
    let insert = format!("{prefix}/binlogs/insert_log/1/2/3");
    let delta = format!("{prefix}/binlogs/delta_log/1/2/3");
    let system = [(0, DataType::Int64), (1, DataType::Int64)];
    let mut objects = Vec::new();
    for &(field, data_type) in system.iter().chain(fields) {
        // The pk (field 100) counts 0, 1, ...; every other field is zeros and Timestamp is
        // `row_ts`: at 0, each delete below (at timestamp 1) removes its row.
        let log = |pks: std::ops::Range<i64>| {
            let column = match field {
                100 => Column::Int64(pks.collect()),
                1 => Column::Int64(pks.map(|_| row_ts as i64).collect()),
                _ => Column::zeroed(data_type, pks.count()).expect("a type binlogs carry"),
            };
            binlog::encode_insert(Descriptor::new(field, data_type), &column)
        };
        let split = rows as i64 - 1;
        objects.push((format!("{insert}/30/{field}/1"), log(0..split)));
        objects.push((format!("{insert}/30/{field}/2"), log(split..rows as i64)));
    }
    let deletes: Vec<Delete> = (0..deleted as i64).map(|pk| Delete::int(pk, 1)).collect();
    objects.push((
        format!("{delta}/30/4"),
        binlog::encode_delta(
            Descriptor::new(-1, DataType::String),
            &deletes,
            DeltaForm::Json,
        ),
    ));
    for (path, bytes) in objects {
        store
            .put(&ObjectPath::from(path.as_str()), PutPayload::from(bytes))
            .await
            .expect("put binlog");
    }
    [format!("{insert}/"), format!("{delta}/")]
}

/// Star a → b, c with collection `c` everywhere and the same segment in each cluster's storage.
pub async fn star_with_segment(topology: &str) -> (Sim, [String; 2]) {
    let sim = start(topology).await;
    create_collection(&sim.uri("a"), "c").await;
    let mut files = None;
    for cluster in sim.clusters() {
        files = Some(put_segment(&cluster, "bk", 10, 1).await);
    }
    wait_collection(&sim.cluster("b"), "c").await;
    wait_collection(&sim.cluster("c"), "c").await;
    (sim, files.expect("three clusters"))
}

/// Waits until collection `name` of the default database exists on `cluster` (at most 10 s).
pub async fn wait_collection(cluster: &Cluster, name: &str) {
    for _ in 0..2000 {
        if cluster.with_catalog(|c| c.collection("", name).is_ok()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("collection {name} never reached {}", cluster.id());
}

/// Waits until the job is in `state` on `cluster` (at most 10 s).
pub async fn wait_for(cluster: &Cluster, job_id: i64, state: JobState) -> ImportJob {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(job) = cluster.job(job_id)
            && job.state == state
        {
            return job;
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "job {job_id} on {} never reached {state:?}: {:?}",
                cluster.id(),
                cluster.job(job_id)
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The sequence of states a job went through.
pub fn states(job: &ImportJob) -> Vec<JobState> {
    job.history.iter().map(|c| c.state).collect()
}
