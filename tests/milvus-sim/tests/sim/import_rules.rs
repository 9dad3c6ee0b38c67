//! Create-time rules of the REST import API: binding, options, the replicating-cluster gate,
//! Idempotency-Key, maxImportJobNum, timeouts, and what describe and list show.

use std::path::Path;
use std::time::Duration;

use milvus_proto::milvus::QueryRequest;
use milvus_proto::schema::ScalarField;
use milvus_proto::schema::field_data::Field;
use milvus_proto::schema::scalar_field::Data;
use milvus_sim::catalog::{DdlOp, NewCollection};
use milvus_sim::cluster::CreateImport;
use milvus_sim::jobs::JobState;
use milvus_sim::{Protocol, Sim, Topology};
use object_store::{ObjectStoreExt, PutPayload, path::Path as ObjectPath};
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn binding_errors_use_codes_1801_and_1802() {
    let sim = start(&standalone("3.0.0")).await;
    let rest = Rest::new(&sim.uri("a"));
    let empty = rest.post_raw("create", "", &[]).await;
    assert_refused(
        &empty,
        1801,
        "can only accept json format request, the request body should be nil, however {} is valid",
    );
    assert_refused(
        &rest.post_raw("create", "{not json", &[]).await,
        1801,
        "can only accept json format request",
    );
    assert_refused(
        &rest.post_raw("create", "[1]", &[]).await,
        1801,
        "cannot unmarshal array",
    );
    let missing = rest.post("create", json!({"files": [["a.json"]]})).await;
    assert_refused(
        &missing,
        1802,
        "Field validation for 'CollectionName' failed on the 'required' tag",
    );
    assert_refused(
        &rest.post("create", json!({"collectionName": "c"})).await,
        1802,
        "'Files'",
    );
    assert_refused(&rest.post("describe", json!({})).await, 1802, "'JobID'");
    let number = rest
        .post(
            "create",
            json!({"collectionName": "c", "files": [["a.json"]], "options": {"timeout": 5}}),
        )
        .await;
    assert_refused(
        &number,
        1801,
        "cannot unmarshal number into Go struct field ImportReq.options of type string",
    );
    let bool_opt = rest.post("create", json!({"collectionName": "c", "files": [["a.json"]], "options": {"auto_commit": false}})).await;
    assert_refused(&bool_opt, 1801, "of type string");
    assert!(
        sim.cluster("a").snapshot().jobs.is_empty(),
        "no refused request created a job"
    );
}

/// Milvus 3.0's `ImportReq` options (#50695): `auto_commit` is `"true"` or `"false"` in any
/// case, else 1801; a `null` value of any other key reads as `""` (docs/milvus-facts.md §1.2).
#[tokio::test]
async fn auto_commit_is_parsed_strictly_and_null_options_are_accepted() {
    let sim = start(&standalone("3.0.0")).await;
    create_collection(&sim.uri("a"), "c").await;
    let rest = Rest::new(&sim.uri("a"));
    for value in ["yes", "0", ""] {
        let answer = rest
            .create("c", "", json!([["a.json"]]), json!({"auto_commit": value}))
            .await;
        assert_refused(
            &answer,
            1801,
            "options.auto_commit must be one of \"true\" or \"false\"",
        );
    }
    let null_commit = rest
        .create("c", "", json!([["a.json"]]), json!({"auto_commit": null}))
        .await;
    assert_refused(&null_commit, 1801, "of type string");
    assert!(sim.cluster("a").snapshot().jobs.is_empty());

    let upper = rest
        .create(
            "c",
            "",
            json!([["a.json"]]),
            json!({"auto_commit": "FALSE"}),
        )
        .await;
    assert_eq!(upper["code"], 0, "{upper}");
    let null_other = rest
        .create(
            "c",
            "",
            json!([["a.json"]]),
            json!({"sep": null, "nullkey": null}),
        )
        .await;
    assert_eq!(null_other["code"], 0, "{null_other}");
    let job = sim.cluster("a").job(job_id(&null_other)).expect("created");
    assert_eq!(job.options.get("sep").map(String::as_str), Some(""));
}

/// `dataCoord.import.enableL0Import` is off by default from 3.0: an L0 import is refused at
/// create, and a replicated one reaching a peer with the gate off is created Failed
/// (docs/milvus-facts.md §1.5).
#[tokio::test]
async fn l0_import_is_refused_while_enable_l0_import_is_off() {
    let refusal = format!(
        "{}: importing data failed",
        milvus_sim::cluster::L0_IMPORT_DISABLED
    );
    for (topology, allowed) in [
        (standalone("3.0.0"), false),
        (with_l0_import(&standalone("3.0.0")), true),
        (standalone("2.6.24"), true),
    ] {
        let sim = start(&topology).await;
        create_collection(&sim.uri("a"), "c").await;
        let files = put_segment(&sim.cluster("a"), "bk", 5, 2).await;
        let answer = Rest::new(&sim.uri("a"))
            .create("c", "", json!([[files[1]]]), json!({"l0_import": "true"}))
            .await;
        if allowed {
            assert_eq!(answer["code"], 0, "{topology}: {answer}");
        } else {
            assert_refused(&answer, 2100, &refusal);
            assert_eq!(answer["message"], refusal.as_str());
        }
    }

    // The primary has the gate on, the peer "c" has not.
    let topology = star().replacen(
        "[[cluster]]\nid = \"a\"",
        "[[cluster]]\nid = \"a\"\nenable_l0_import = true",
        1,
    );
    let topology = topology.replacen(
        "[[cluster]]\nid = \"b\"",
        "[[cluster]]\nid = \"b\"\nenable_l0_import = true",
        1,
    );
    let (sim, files) = star_with_segment(&topology).await;
    let answer = Rest::new(&sim.uri("a"))
        .create(
            "c",
            "",
            json!([[files[1]]]),
            json!({"l0_import": "true", "auto_commit": "false"}),
        )
        .await;
    let id = job_id(&answer);
    wait_for(&sim.cluster("b"), id, JobState::Uncommitted).await;
    let peer = wait_for(&sim.cluster("c"), id, JobState::Failed).await;
    assert_eq!(peer.reason, milvus_sim::cluster::L0_IMPORT_DISABLED);
}

/// A held L0 import keeps its deletes' timestamps while a held data import's rows take the
/// commit's (milvus#51247; docs/milvus-facts.md §1.5): once both are committed, a query counts
/// the rows the deletes target and finds them by key. With `two_phase_l0_keeps_timestamps`
/// off the deletes apply, as they do to rows imported with auto-commit either way.
#[tokio::test]
async fn a_held_l0_import_deletes_none_of_the_rows_a_held_import_committed() {
    // (switch, held, rows a query counts, keys 0..4 it finds)
    for (keeps, held, count, found) in [
        (None, true, 10, vec![0, 1, 2, 3]),
        (Some(false), true, 7, vec![3]),
        (None, false, 7, vec![3]),
    ] {
        let mut topology = with_l0_import(&standalone("3.0.0"));
        if let Some(keeps) = keeps {
            topology = topology.replace(
                "[[cluster]]\n",
                &format!("[[cluster]]\ntwo_phase_l0_keeps_timestamps = {keeps}\n"),
            );
        }
        let case = format!("switch {keeps:?}, held {held}");
        let sim = start(&topology).await;
        let a = sim.cluster("a");
        create_collection(&a.uri(), "c").await;
        // Ten rows (keys 0..10 at timestamp 0), and an L0 segment deleting keys 0..3 at
        // timestamp 1.
        let [insert, l0] = put_segment(&a, "bk", 10, 3).await;
        let rest = Rest::new(&a.uri());
        let auto_commit = if held { "false" } else { "true" };
        let mut ids = Vec::new();
        for (files, source) in [(insert, "backup"), (l0, "l0_import")] {
            let answer = rest
                .create(
                    "c",
                    "_default",
                    json!([[files]]),
                    json!({source: "true", "auto_commit": auto_commit}),
                )
                .await;
            ids.push(job_id(&answer));
        }
        for id in &ids {
            if held {
                wait_for(&a, *id, JobState::Uncommitted).await;
                assert_eq!(rest.commit(&id.to_string()).await["code"], 0, "{case}");
            }
            wait_for(&a, *id, JobState::Completed).await;
        }
        load(&a);
        assert_eq!(query_ids(&a, "").await, vec![count], "{case}: count(*)");
        assert_eq!(query_ids(&a, "id in [0, 1, 2, 3]").await, found, "{case}");
    }
}

/// Loads collection `c` of `cluster`, its vector field indexed first.
fn load(cluster: &milvus_sim::Cluster) {
    for op in [
        DdlOp::CreateIndex {
            db: "default".into(),
            collection: "c".into(),
            field_name: "vector".into(),
            index_name: "vector".into(),
            params: Vec::new(),
            id: cluster.next_id(),
        },
        DdlOp::LoadCollection {
            db: "default".into(),
            collection: "c".into(),
        },
    ] {
        cluster.execute_ddl(op).expect("the collection loads");
    }
}

/// The answer to `expr` on collection `c` of `cluster`: `count(*)` for an empty `expr`, else
/// the keys found, in order.
async fn query_ids(cluster: &milvus_sim::Cluster, expr: &str) -> Vec<i64> {
    let output = if expr.is_empty() { "count(*)" } else { "id" };
    let answer = grpc(&cluster.uri())
        .await
        .query(QueryRequest {
            collection_name: "c".into(),
            expr: expr.into(),
            output_fields: vec![output.into()],
            ..Default::default()
        })
        .await
        .expect("Query answers")
        .into_inner();
    let status = answer.status.unwrap_or_default();
    assert_eq!(status.code, 0, "{status:?}");
    let column = answer.fields_data.first().expect("one column");
    match &column.field {
        Some(Field::Scalars(ScalarField {
            data: Some(Data::LongData(longs)),
        })) => {
            let mut ids = longs.data.clone();
            ids.sort_unstable();
            ids
        }
        other => panic!("not an Int64 column: {other:?}"),
    }
}

/// The database of a create: the body's `dbName`, else the `DB-Name` header, else default
/// (docs/milvus-facts.md §1.1).
#[tokio::test]
async fn db_selection_takes_the_body_then_the_db_name_header_then_default() {
    let sim = start(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    for db in ["db_1", "db_2"] {
        a.execute_ddl(milvus_sim::catalog::DdlOp::CreateDatabase {
            name: db.into(),
            id: a.next_id(),
        })
        .expect("database");
        a.create_collection(NewCollection::keyed(db, "c"))
            .expect("collection");
    }
    a.create_collection(NewCollection::keyed("default", "c"))
        .expect("collection");
    a.store()
        .put(
            &ObjectPath::from("r.json"),
            PutPayload::from_static(br#"{"rows":[{"id":1}]}"#),
        )
        .await
        .expect("put");
    let rest = Rest::new(&a.uri());
    for (body_db, header, want) in [
        (Some("db_1"), Some("db_2"), "db_1"),
        (None, Some("db_2"), "db_2"),
        (Some(""), None, "default"),
    ] {
        let mut body = json!({"collectionName": "c", "files": [["r.json"]]});
        if let Some(db) = body_db {
            body["dbName"] = json!(db);
        }
        let headers: Vec<(&str, &str)> = header.map(|h| ("DB-Name", h)).into_iter().collect();
        let answer = rest.post_raw("create", &body.to_string(), &headers).await;
        let job = a.job(job_id(&answer)).expect("job");
        assert_eq!(job.db_name, want, "{body_db:?} {header:?}");
    }
}

#[tokio::test]
async fn option_errors_come_back_with_milvus_messages() {
    let sim = start(&standalone("3.0.0")).await;
    create_collection(&sim.uri("a"), "c").await;
    let rest = Rest::new(&sim.uri("a"));
    let cases = [
        (
            "",
            json!({"backup": "true"}),
            "partition name is required when backup=true",
        ),
        (
            "_default",
            json!({"timeout": "soon"}),
            "parse timeout failed, err=time: invalid duration \"soon\"",
        ),
        (
            "_default",
            json!({"storage_version": "x"}),
            "parse storage_version failed",
        ),
        (
            "p1",
            json!({"backup": "true", "storage_version": "3"}),
            "StorageV3 backup import requires source_type=snapshot and must not specify storage_version",
        ),
        (
            "_default",
            json!({"start_ts": "x"}),
            "parse start_ts failed",
        ),
        (
            "_default",
            json!({"source_type": "snapshot"}),
            "source_type=snapshot requires backup=true",
        ),
    ];
    for (partition, options, needle) in cases {
        let answer = rest
            .create("c", partition, json!([["a.json"]]), options)
            .await;
        assert_refused(&answer, 2100, needle);
    }
    assert_refused(
        &rest
            .create("nope", "", json!([["a.json"]]), json!({}))
            .await,
        100,
        "collection not found[database=default][collection=nope]",
    );
    assert_refused(
        &rest.create("c", "p9", json!([["a.json"]]), json!({})).await,
        200,
        "partition not found[partition=p9]",
    );
}

#[tokio::test]
async fn gate_refuses_import_when_the_cluster_flag_is_off() {
    let topology = star().replace(
        "import_in_replicating_cluster = true",
        "import_in_replicating_cluster = false",
    );
    let sim = start(&topology).await;
    create_collection(&sim.uri("a"), "c").await;
    let answer = Rest::new(&sim.uri("a"))
        .create(
            "c",
            "_default",
            json!([["a.json"]]),
            json!({"auto_commit": "false"}),
        )
        .await;
    assert_eq!(
        answer,
        json!({"code": 3000, "message": "failed to validate import request: import in replicating cluster is not supported yet: unsupported operation"})
    );
}

#[tokio::test]
async fn gate_refuses_auto_commit_in_a_replicating_cluster() {
    let sim = start(&star()).await;
    create_collection(&sim.uri("a"), "c").await;
    let answer = Rest::new(&sim.uri("a"))
        .create("c", "_default", json!([["a.json"]]), json!({}))
        .await;
    assert_eq!(
        answer,
        json!({"code": 3000, "message": "failed to validate import request: auto_commit=true import in replicating cluster is not supported: unsupported operation"})
    );
}

async fn key_setup(version: &str) -> (Sim, Rest) {
    let sim = start(&standalone(version)).await;
    create_collection(&sim.uri("a"), "c").await;
    create_collection(&sim.uri("a"), "d").await;
    let rest = Rest::new(&sim.uri("a"));
    (sim, rest)
}

async fn create_with_key(rest: &Rest, collection: &str, key: &str) -> serde_json::Value {
    let body = json!({"collectionName": collection, "files": [["missing.json"]], "options": {"auto_commit": "false"}});
    rest.post_raw("create", &body.to_string(), &[("Idempotency-Key", key)])
        .await
}

#[tokio::test]
async fn idempotency_key_returns_the_same_job_even_when_it_failed() {
    for version in ["3.0.2", "2.6.24", "master-20260806-1a2b3c4"] {
        let (sim, rest) = key_setup(version).await;
        let first = job_id(&create_with_key(&rest, "c", "restore-1/batch-0").await);
        // The file does not exist, so the job fails; the key still maps to it.
        let failed = wait_for(&sim.cluster("a"), first, JobState::Failed).await;
        assert!(
            failed.reason.contains("key not found[key=missing.json]"),
            "{}",
            failed.reason
        );
        assert_eq!(
            job_id(&create_with_key(&rest, "c", "restore-1/batch-0").await),
            first,
            "{version}"
        );
        let other = job_id(&create_with_key(&rest, "d", "restore-1/batch-0").await);
        assert_ne!(other, first, "keys are scoped to the collection");
        assert_eq!(sim.cluster("a").snapshot().jobs.len(), 2);
        let bad = create_with_key(&rest, "c", &"k".repeat(257)).await;
        assert_refused(&bad, 1100, "invalid parameter");
        assert_refused(
            &create_with_key(&rest, "c", "tab\there").await,
            1100,
            "printable ASCII",
        );
    }
}

/// milvus#53228 (in 3.0): the key is looked up only after admission, so the retry of a create
/// whose job exists is refused when the job limit is full, although its job was created;
/// with `admission_before_idempotency = false` the retry answers the job first
/// (docs/milvus-facts.md §1.6).
#[tokio::test]
async fn a_known_idempotency_key_answers_only_after_admission() {
    for after_admission in [true, false] {
        let mut topology =
            standalone("3.0.2").replace("id = \"a\"", "id = \"a\"\nmax_import_job_num = 1");
        if !after_admission {
            topology = topology.replace(
                "id = \"a\"",
                "id = \"a\"\nadmission_before_idempotency = false",
            );
        }
        let sim = start(&topology).await;
        let a = sim.cluster("a");
        create_collection(&a.uri(), "c").await;
        let files = put_segment(&a, "bk", 3, 0).await;
        let rest = Rest::new(&a.uri());
        let body =
            json!({"collectionName": "c", "partitionName": "_default", "files": [[files[0]]],
            "options": {"backup": "true", "auto_commit": "false"}})
            .to_string();
        let create = || rest.post_raw("create", &body, &[("Idempotency-Key", "batch-0")]);
        let first = job_id(&create().await);
        wait_for(&a, first, JobState::Uncommitted).await;
        let retry = create().await;
        if after_admission {
            assert_refused(&retry, 2101, "The number of jobs has reached the limit");
        } else {
            assert_eq!(job_id(&retry), first);
        }
        assert_eq!(a.snapshot().jobs.len(), 1, "no second job either way");
    }
}

#[tokio::test]
async fn idempotency_key_is_ignored_by_older_versions() {
    for version in ["3.0.0", "3.0.1", "2.6.23", "v2.5.4"] {
        let (sim, rest) = key_setup(version).await;
        let first = job_id(&create_with_key(&rest, "c", "same").await);
        let second = job_id(&create_with_key(&rest, "c", "same").await);
        assert_ne!(first, second, "{version} ignores the header");
        assert!(
            job_id(&create_with_key(&rest, "c", &"k".repeat(300)).await) > 0,
            "{version} does not validate it"
        );
        assert_eq!(sim.cluster("a").snapshot().jobs.len(), 3);
    }
}

#[tokio::test]
async fn max_import_job_num_counts_uncommitted_jobs() {
    let topology = standalone("3.0.0").replace("id = \"a\"", "id = \"a\"\nmax_import_job_num = 2");
    let sim = start(&topology).await;
    let a = sim.cluster("a");
    create_collection(&a.uri(), "c").await;
    let files = put_segment(&a, "bk", 3, 0).await;
    let rest = Rest::new(&a.uri());
    let first = rest.create_manual("c", &files[0]).await;
    let second = rest.create_manual("c", &files[0]).await;
    wait_for(&a, first, JobState::Uncommitted).await;
    wait_for(&a, second, JobState::Uncommitted).await;
    let refused = rest
        .create(
            "c",
            "_default",
            json!([[files[0]]]),
            json!({"backup": "true", "auto_commit": "false"}),
        )
        .await;
    // A server-side condition, 2101 (`ErrImportSysFailed`), which a client may retry.
    assert_refused(&refused, 2101, "The number of jobs has reached the limit");
    assert_eq!(rest.abort(&first.to_string()).await["code"], 0);
    rest.create_manual("c", &files[0]).await;
}

/// A cluster "a" (`extra` TOML in its table) on in-memory storage with stages of 1 s and
/// `committing`, a collection `c` and a one-row file `rows.json`: for paused-time tests, where
/// no blocking I/O may race the clock.
async fn paused_cluster(extra: &str, committing: &str) -> Sim {
    let topology = Topology::from_toml_str(
        &format!(
            "[[cluster]]\nid = \"a\"\n{extra}[cluster.storage]\nurl = \"memory://\"\n[cluster.durations]\npending = \"1s\"\npreimport = \"1s\"\nimporting = \"1s\"\nsorting = \"1s\"\nindex_building = \"1s\"\ncommitting = \"{committing}\"\n"
        ),
        "t.toml",
        Path::new("."),
    )
    .expect("valid");
    let sim = Sim::start(topology).await.expect("starts");
    let a = sim.cluster("a");
    a.create_collection(NewCollection::keyed("default", "c"))
        .expect("collection created");
    a.store()
        .put(
            &ObjectPath::from("rows.json"),
            PutPayload::from_static(br#"{"rows":[{"id":1}]}"#),
        )
        .await
        .expect("put");
    sim
}

/// A manual-commit import of `rows.json` into `c`, with `timeout` when not empty.
fn rows_import(timeout: &str) -> CreateImport {
    let mut options: std::collections::BTreeMap<String, String> =
        [("auto_commit".to_owned(), "false".to_owned())].into();
    if !timeout.is_empty() {
        options.insert("timeout".to_owned(), timeout.to_owned());
    }
    CreateImport {
        db_name: String::new(),
        collection_name: "c".into(),
        partition_name: String::new(),
        files: vec![vec!["rows.json".into()]],
        options,
        idempotency_key: None,
        protocol: Protocol::Rest,
    }
}

#[tokio::test(start_paused = true)]
async fn timeout_fails_an_uncommitted_job_with_import_timeout() {
    let sim = paused_cluster("", "5ms").await;
    let a = sim.cluster("a");
    let id = a.create_import(rows_import("1h")).expect("created");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        a.job(id).expect("job").state,
        JobState::Uncommitted,
        "stages take 5 s, the timeout is an hour"
    );
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let job = a.job(id).expect("job");
    assert_eq!(
        (job.state, job.reason.as_str()),
        (JobState::Failed, "import timeout")
    );
    assert_eq!(states(&job)[states(&job).len() - 2], JobState::Uncommitted);
    // A job without the option never times out.
    let forever = a.create_import(rows_import("")).expect("created");
    tokio::time::sleep(Duration::from_secs(30 * 24 * 3600)).await;
    assert_eq!(a.job(forever).expect("job").state, JobState::Uncommitted);
}

/// Released 3.0.x's `tryTimeoutJob` skips only Failed and Completed: a Committing job whose
/// `timeout` runs out is failed; newer code spares it (docs/milvus-facts.md §2.6). Why lockstep
/// never sends `timeout` with a held job.
#[tokio::test(start_paused = true)]
async fn a_committing_job_whose_timeout_runs_out_fails_unless_the_version_spares_it() {
    for (spares, want) in [
        ("", (JobState::Failed, "import timeout")),
        (
            "timeout_spares_committing = true\n",
            (JobState::Completed, ""),
        ),
    ] {
        let sim = paused_cluster(spares, "1h").await;
        let a = sim.cluster("a");
        let id = a.create_import(rows_import("60s")).expect("created");
        tokio::time::sleep(Duration::from_secs(10)).await;
        a.commit_import(&id.to_string()).expect("committed");
        assert_eq!(a.job(id).expect("job").state, JobState::Committing);
        tokio::time::sleep(Duration::from_secs(7200)).await;
        let job = a.job(id).expect("job");
        assert_eq!((job.state, job.reason.as_str()), want, "{spares:?}");
    }
}

/// `maxImportJobNum` counts every job that is not Completed or Failed, a standby's mirrors
/// included: its limit is checked before its broadcast refuses the create.
#[tokio::test]
async fn max_import_job_num_counts_a_standbys_mirrors() {
    let topology = star().replacen(
        "[[cluster]]\nid = \"b\"",
        "[[cluster]]\nid = \"b\"\nmax_import_job_num = 1",
        1,
    );
    let (sim, files) = star_with_segment(&topology).await;
    let id = Rest::new(&sim.uri("a")).create_manual("c", &files[0]).await;
    wait_for(&sim.cluster("b"), id, JobState::Uncommitted).await;
    let answer = Rest::new(&sim.uri("b"))
        .create(
            "c",
            "_default",
            json!([[files[0]]]),
            json!({"backup": "true", "auto_commit": "false"}),
        )
        .await;
    assert_refused(&answer, 2101, "The number of jobs has reached the limit");
}

/// `dataCoord.import.taskRetention`: a finished job is forgotten after it (describe 2101
/// `import job does not exist`, commit `job N not found`, list leaves it out); 48 h from
/// 3.0.2, 3 h before (docs/milvus-facts.md §2.6).
#[tokio::test]
async fn a_finished_job_is_forgotten_after_task_retention() {
    assert_eq!(
        milvus_sim::version::ServerVersion::parse("3.0.2").default_task_retention(),
        Duration::from_secs(48 * 3600)
    );
    assert_eq!(
        milvus_sim::version::ServerVersion::parse("3.0.1").default_task_retention(),
        Duration::from_secs(3 * 3600)
    );
    let topology = standalone("3.0.2").replace("id = \"a\"", "id = \"a\"\ntask_retention = \"1s\"");
    let sim = start(&topology).await;
    let a = sim.cluster("a");
    create_collection(&a.uri(), "c").await;
    let files = put_segment(&a, "bk", 5, 0).await;
    let rest = Rest::new(&a.uri());
    let id = rest.create_manual("c", &files[0]).await;
    wait_for(&a, id, JobState::Uncommitted).await;
    assert_eq!(rest.commit(&id.to_string()).await["code"], 0);
    wait_for(&a, id, JobState::Completed).await;
    assert_eq!(rest.describe(&id.to_string()).await["code"], 0, "retained");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_refused(
        &rest.describe(&id.to_string()).await,
        2101,
        &format!("import job does not exist, jobID={id}"),
    );
    assert_refused(
        &rest.commit(&id.to_string()).await,
        2101,
        &format!("job {id} not found"),
    );
    let listed = rest.post("list", json!({"collectionName": "c"})).await;
    assert_eq!(listed["data"]["records"], json!([]));
    assert_eq!(a.visible_rows("", "c"), 5, "its rows stay visible");
}

#[tokio::test]
async fn describe_and_list_show_the_fields_of_the_reference() {
    let sim = start(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    create_collection(&a.uri(), "c").await;
    let store = a.store();
    store
        .put(
            &ObjectPath::from("in/a.json"),
            PutPayload::from_static(br#"{"rows":[{"id":1},{"id":2}]}"#),
        )
        .await
        .expect("put");
    store
        .put(
            &ObjectPath::from("in/b.csv"),
            PutPayload::from_static(b"id\n3\n4\n5\n"),
        )
        .await
        .expect("put");
    let rest = Rest::new(&a.uri());
    let id = job_id(
        &rest
            .create("c", "", json!([["in/a.json"], ["in/b.csv"]]), json!({}))
            .await,
    );
    assert!(id.to_string().len() >= 17, "Milvus-like int64 ids: {id}");
    wait_for(&a, id, JobState::Completed).await;
    let d = rest
        .post("get_progress", json!({"jobId": id.to_string()}))
        .await;
    let data = &d["data"];
    assert_eq!(data["jobId"], id.to_string());
    assert_eq!(
        (
            data["state"].as_str(),
            data["totalRows"].as_i64(),
            data["importedRows"].as_i64()
        ),
        (Some("Completed"), Some(5), Some(5))
    );
    assert!(
        data.get("reason").is_none(),
        "reason is omitted when empty: {data}"
    );
    for time in [&data["createTime"], &data["completeTime"]] {
        let text = time.as_str().expect("a string");
        assert!(
            text.parse::<jiff::Timestamp>().is_ok() && text.ends_with('Z') && !text.contains('.'),
            "RFC3339: {text}"
        );
    }
    let details = data["details"].as_array().expect("details");
    assert_eq!(details.len(), 2);
    assert_eq!(
        (
            details[0]["fileName"].as_str(),
            details[1]["totalRows"].as_i64()
        ),
        (Some("[in/a.json]"), Some(3))
    );
    assert_eq!(
        data["fileSize"].as_i64(),
        Some(
            details
                .iter()
                .map(|d| d["fileSize"].as_i64().unwrap_or(0))
                .sum()
        )
    );

    let bad = job_id(&rest.create("c", "", json!([["in/x.txt"]]), json!({})).await);
    wait_for(&a, bad, JobState::Failed).await;
    let listed = rest.post("list", json!({"collectionName": "c"})).await;
    let records = listed["data"]["records"].as_array().expect("records");
    assert_eq!(records.len(), 2);
    assert_eq!(records[1]["reason"], "unsupported file type: in/x.txt");
    assert!(records[0].get("reason").is_none());
    assert_eq!(a.visible_rows("", "c"), 5);
}

#[tokio::test]
async fn an_unknown_rest_route_is_a_404_not_a_grpc_answer() {
    let sim = start(&standalone("3.0.0")).await;
    let response = reqwest::Client::new()
        .post(format!("{}/v2/vectordb/jobs/import/nope", sim.uri("a")))
        .json(&json!({}))
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 404);
}

/// rootcoord numbers a new collection's fields itself, whatever ids the schema carries; a
/// 3.0 keeps them when the create says `preserve_field_ids` (its snapshot restore does).
#[tokio::test]
async fn field_ids_are_numbered_unless_a_3_0_is_asked_to_preserve_them() {
    for (version, preserve, want) in [
        ("3.0.2", true, 200),
        ("3.0.2", false, 100),
        ("2.6.24", true, 100),
    ] {
        let sim = start(&standalone(version)).await;
        let a = sim.cluster("a");
        let mut request = NewCollection::keyed("default", "c");
        request.schema.fields[0].field_id = 200;
        if preserve {
            request.properties = vec![milvus_proto::common::KeyValuePair {
                key: "preserve_field_ids".into(),
                value: "true".into(),
            }];
        }
        a.create_collection(request).expect("created");
        let id =
            a.with_catalog(|c| c.collection("", "c").expect("there").schema.fields[0].field_id);
        assert_eq!(id, want, "{version}, preserve {preserve}");
    }
}
