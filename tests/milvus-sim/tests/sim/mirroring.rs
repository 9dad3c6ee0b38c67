//! CDC mirroring (docs/milvus-facts.md §2.2–2.5): mirrors under the same job id reading their
//! own storage, lag and pause, commit replay, rollback, divergence, refusal of writes on a
//! secondary.

use std::time::Duration;

use milvus_proto::milvus::{CreateDatabaseRequest, CreateIndexRequest, DescribeCollectionRequest};
use milvus_sim::jobs::{JobOrigin, JobState};
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn mirrors_have_the_same_job_id_and_commit_reaches_every_end() {
    let (sim, files) = star_with_segment(&star()).await;
    let rest = Rest::new(&sim.uri("a"));
    let id = rest.create_manual("c", &files[0]).await;
    for end in ["a", "b", "c"] {
        let job = wait_for(&sim.cluster(end), id, JobState::Uncommitted).await;
        assert_eq!(job.total_rows, 10, "{end} read its own storage");
    }
    assert_eq!(
        sim.cluster("b").job(id).expect("mirror").origin,
        JobOrigin::Mirror { source: "a".into() }
    );
    // Reads work on a secondary and show the mirror under the same id.
    let on_b = Rest::new(&sim.uri("b")).describe(&id.to_string()).await;
    assert_eq!(
        (
            on_b["data"]["jobId"].as_str(),
            on_b["data"]["state"].as_str()
        ),
        (Some(id.to_string().as_str()), Some("Uncommitted"))
    );
    let listed = Rest::new(&sim.uri("c")).post("list", json!({})).await;
    assert_eq!(listed["data"]["records"][0]["jobId"], id.to_string());

    assert_eq!(rest.commit(&id.to_string()).await["code"], 0);
    for end in ["a", "b", "c"] {
        wait_for(&sim.cluster(end), id, JobState::Completed).await;
    }
    let manifests: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|end| {
            sim.cluster(end)
                .snapshot()
                .collection("default", "c")
                .expect("collection")
                .completed_imports
                .clone()
        })
        .collect();
    assert_eq!(manifests[0][0].rows, 10);
    assert_eq!(manifests[0], manifests[1]);
    assert_eq!(manifests[0], manifests[2]);
    assert_eq!(
        manifests[0][0].manifest.len(),
        8,
        "the eight insert objects of the group"
    );
}

#[tokio::test]
async fn ddl_reaches_secondaries_with_the_same_ids() {
    let sim = start(&star()).await;
    let mut a = grpc(&sim.uri("a")).await;
    let status = a
        .create_database(CreateDatabaseRequest {
            db_name: "db1".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(status.code, 0);
    create_collection(&sim.uri("a"), "c").await;
    let index = CreateIndexRequest {
        collection_name: "c".into(),
        field_name: "vector".into(),
        index_name: "vec_idx".into(),
        ..Default::default()
    };
    assert_eq!(
        a.create_index(index)
            .await
            .expect("answers")
            .into_inner()
            .code,
        0
    );
    let describe = |uri: String| async move {
        grpc(&uri)
            .await
            .describe_collection(DescribeCollectionRequest {
                collection_name: "c".into(),
                ..Default::default()
            })
            .await
            .expect("answers")
            .into_inner()
    };
    let primary = describe(sim.uri("a")).await;
    wait_collection(&sim.cluster("c"), "c").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    for end in ["b", "c"] {
        let mirror = describe(sim.uri(end)).await;
        assert_eq!(mirror.collection_id, primary.collection_id, "{end}");
        assert_eq!(mirror.schema, primary.schema, "{end}");
        assert_eq!(
            mirror.physical_channel_names,
            [format!("{end}-rootcoord-dml_0")],
            "the primary's one shard, on the mirror's own pchannel"
        );
        let snapshot = sim.cluster(end).snapshot();
        let coll = snapshot.collection("default", "c").expect("mirrored");
        assert_eq!(
            (coll.partitions.clone(), coll.indexes.clone()),
            (
                vec!["_default".to_owned(), "p1".to_owned()],
                vec!["vec_idx".to_owned()]
            )
        );
        assert!(
            sim.cluster(end).with_catalog(|c| c.database("db1").is_ok()),
            "database mirrored to {end}"
        );
    }
}

#[tokio::test]
async fn a_mirror_reaches_uncommitted_only_after_the_stream_lag() {
    let (sim, files) = star_with_segment(&star()).await;
    let lag = Duration::from_millis(400);
    sim.cluster("a")
        .control()
        .set_stream_lag("b", lag)
        .await
        .expect("lag set");
    let id = Rest::new(&sim.uri("a")).create_manual("c", &files[0]).await;
    let primary = wait_for(&sim.cluster("a"), id, JobState::Uncommitted).await;
    wait_for(&sim.cluster("c"), id, JobState::Uncommitted).await;
    let slow_mirror = wait_for(&sim.cluster("b"), id, JobState::Uncommitted).await;
    let created_gap = slow_mirror.created.unix_ms - primary.created.unix_ms;
    assert!(
        created_gap >= lag.as_millis() as i64,
        "mirror created {created_gap} ms after the primary job"
    );
    let reached = slow_mirror.history.last().expect("history").at.unix_ms;
    assert!(reached - primary.created.unix_ms >= lag.as_millis() as i64);
}

#[tokio::test]
async fn a_paused_stream_holds_the_mirror_until_resumed() {
    let (sim, files) = star_with_segment(&star()).await;
    let control = sim.cluster("a").control();
    control.pause_stream("b").await.expect("paused");
    let id = Rest::new(&sim.uri("a")).create_manual("c", &files[0]).await;
    wait_for(&sim.cluster("a"), id, JobState::Uncommitted).await;
    wait_for(&sim.cluster("c"), id, JobState::Uncommitted).await;
    assert!(
        sim.cluster("b").job(id).is_none(),
        "nothing reaches a paused secondary"
    );
    let stream = control.resume_stream("b").await.expect("resumed");
    assert!(stream.sent > stream.applied || sim.cluster("b").job(id).is_some());
    wait_for(&sim.cluster("b"), id, JobState::Uncommitted).await;
}

#[tokio::test]
async fn a_commit_that_arrives_early_is_replayed_once_the_mirror_is_uncommitted() {
    // The secondary's stages are slow: the commit reaches it while its mirror still imports.
    let topology = star().replacen(
        "id = \"b\"\nimport_in_replicating_cluster = true\n[cluster.durations]\npending = \"5ms\"",
        "id = \"b\"\nimport_in_replicating_cluster = true\n[cluster.durations]\npending = \"400ms\"",
        1,
    );
    let (sim, files) = star_with_segment(&topology).await;
    let id = Rest::new(&sim.uri("a")).create_manual("c", &files[0]).await;
    wait_for(&sim.cluster("a"), id, JobState::Uncommitted).await;
    // c is fast; waiting for it keeps this test about b's slowness.
    wait_for(&sim.cluster("c"), id, JobState::Uncommitted).await;
    assert_eq!(
        sim.cluster("b").job(id).expect("mirror").state,
        JobState::Pending
    );
    assert_eq!(
        Rest::new(&sim.uri("a")).commit(&id.to_string()).await["code"],
        0
    );
    let mirror = wait_for(&sim.cluster("b"), id, JobState::Completed).await;
    let s = states(&mirror);
    assert_eq!(
        &s[s.len() - 3..],
        [
            JobState::Uncommitted,
            JobState::Committing,
            JobState::Completed
        ]
    );
}

#[tokio::test]
async fn files_missing_on_a_secondary_fail_only_the_mirror_and_a_commit_leaves_the_divergence_visible()
 {
    let sim = start(&star()).await;
    create_collection(&sim.uri("a"), "c").await;
    let files = put_segment(&sim.cluster("a"), "bk", 10, 0).await;
    put_segment(&sim.cluster("c"), "bk", 10, 0).await;
    wait_collection(&sim.cluster("b"), "c").await;
    let id = Rest::new(&sim.uri("a")).create_manual("c", &files[0]).await;
    wait_for(&sim.cluster("a"), id, JobState::Uncommitted).await;
    let failed = wait_for(&sim.cluster("b"), id, JobState::Failed).await;
    assert!(
        failed.reason.contains(&files[0]) && failed.reason.contains("key not found"),
        "{}",
        failed.reason
    );
    let on_b = Rest::new(&sim.uri("b")).describe(&id.to_string()).await;
    assert_eq!(on_b["data"]["state"], "Failed");

    // Committing anyway: the primary and c become visible, b stays Failed (a logged no-op).
    assert_eq!(
        Rest::new(&sim.uri("a")).commit(&id.to_string()).await["code"],
        0
    );
    wait_for(&sim.cluster("a"), id, JobState::Completed).await;
    wait_for(&sim.cluster("c"), id, JobState::Completed).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let b = sim.cluster("b").snapshot();
    assert_eq!(b.job(id).expect("mirror").state, JobState::Failed);
    assert_eq!(
        b.collection("default", "c")
            .expect("collection")
            .visible_rows,
        0
    );
    let a = sim.cluster("a").control().state().await.expect("state");
    assert_eq!(
        a.collection("default", "c")
            .expect("collection")
            .visible_rows,
        10
    );
}

#[tokio::test]
async fn abort_on_the_primary_fails_every_mirror() {
    let (sim, files) = star_with_segment(&star()).await;
    let id = Rest::new(&sim.uri("a")).create_manual("c", &files[0]).await;
    for end in ["a", "b", "c"] {
        wait_for(&sim.cluster(end), id, JobState::Uncommitted).await;
    }
    assert_eq!(
        Rest::new(&sim.uri("a")).abort(&id.to_string()).await["code"],
        0
    );
    for end in ["a", "b", "c"] {
        let job = wait_for(&sim.cluster(end), id, JobState::Failed).await;
        assert_eq!(job.reason, milvus_sim::cluster::ABORTED_BY_USER, "{end}");
    }
}

/// A standby runs commit's and abort's job-state checks on its mirror, and only then does its
/// broadcast fail as not primary (docs/milvus-facts.md §2.4).
#[tokio::test]
async fn a_standby_answers_for_its_mirror_state_before_refusing_as_not_primary() {
    let slow = star().replace("importing = \"5ms\"", "importing = \"30s\"");
    let (sim, files) = star_with_segment(&slow).await;
    let id = Rest::new(&sim.uri("a")).create_manual("c", &files[0]).await;
    wait_for(&sim.cluster("b"), id, JobState::Importing).await;
    assert_refused(
        &Rest::new(&sim.uri("b")).commit(&id.to_string()).await,
        2100,
        &format!("job {id} is in state Importing, expected Uncommitted"),
    );

    let (sim, files) = star_with_segment(&star()).await;
    let (a, b) = (Rest::new(&sim.uri("a")), Rest::new(&sim.uri("b")));
    let id = a.create_manual("c", &files[0]).await;
    wait_for(&sim.cluster("b"), id, JobState::Uncommitted).await;
    assert_refused(
        &b.commit(&id.to_string()).await,
        65535,
        "cluster is not primary, cannot do any DDL/DCL",
    );
    wait_for(&sim.cluster("a"), id, JobState::Uncommitted).await;
    assert_eq!(a.commit(&id.to_string()).await["code"], 0);
    wait_for(&sim.cluster("b"), id, JobState::Completed).await;
    assert_eq!(
        b.commit(&id.to_string()).await,
        json!({"code": 0, "data": {}}),
        "a committed mirror's commit is a no-op, even on a standby"
    );
    assert_refused(
        &b.abort(&id.to_string()).await,
        2100,
        &format!("job {id} is in terminal/committed state Completed, abort not allowed"),
    );
}

#[tokio::test]
async fn writes_on_a_secondary_are_refused_without_any_change() {
    let (sim, files) = star_with_segment(&star()).await;
    let id = Rest::new(&sim.uri("a")).create_manual("c", &files[0]).await;
    // Both held: each end moves its job on by itself, and the mirror can get there first.
    wait_for(&sim.cluster("b"), id, JobState::Uncommitted).await;
    wait_for(&sim.cluster("a"), id, JobState::Uncommitted).await;
    let b = Rest::new(&sim.uri("b"));
    let before = sim.cluster("b").snapshot();

    let create = b
        .create(
            "c",
            "_default",
            json!([[files[0]]]),
            json!({"backup": "true", "auto_commit": "false"}),
        )
        .await;
    assert_refused(
        &create,
        65535,
        "failed to broadcast import: failed to start broadcast with collection id: cluster is not primary, cannot do any DDL/DCL",
    );
    assert_refused(&b.commit(&id.to_string()).await, 65535, "is not primary");
    assert_refused(&b.abort(&id.to_string()).await, 65535, "is not primary");
    let ddl = grpc(&sim.uri("b"))
        .await
        .create_collection(create_collection_request("other"))
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(ddl.code, 65535, "{ddl:?}");
    assert!(ddl.reason.contains("is not primary"));

    let after = sim.cluster("b").snapshot();
    assert_eq!(after.jobs.len(), before.jobs.len());
    assert_eq!(after.job(id).expect("mirror").state, JobState::Uncommitted);
    assert_eq!(
        after.job(id).expect("mirror").history.len(),
        before.job(id).expect("mirror").history.len()
    );
    assert_eq!(after.collections, before.collections);
    assert_eq!(
        sim.cluster("a").job(id).expect("primary").state,
        JobState::Uncommitted,
        "the primary is untouched"
    );
}

#[tokio::test]
async fn dropping_the_collection_fails_its_jobs_on_every_end() {
    let (sim, files) = star_with_segment(&star()).await;
    let id = Rest::new(&sim.uri("a")).create_manual("c", &files[0]).await;
    for end in ["a", "b", "c"] {
        wait_for(&sim.cluster(end), id, JobState::Uncommitted).await;
    }
    let collection_id = sim.cluster("a").job(id).expect("job").collection_id;
    let status = grpc(&sim.uri("a"))
        .await
        .drop_collection(milvus_proto::milvus::DropCollectionRequest {
            collection_name: "c".into(),
            ..Default::default()
        })
        .await
        .expect("answers")
        .into_inner();
    assert_eq!(status.code, 0);
    for end in ["a", "b", "c"] {
        let job = wait_for(&sim.cluster(end), id, JobState::Failed).await;
        assert_eq!(
            job.reason,
            format!("collection {collection_id} dropped"),
            "{end}"
        );
        assert!(sim.cluster(end).snapshot().collections.is_empty(), "{end}");
    }
}

/// `GetReplicateInfo` on a secondary: the checkpoint of each of the primary's pchannels
/// follows the clock while the stream flows and stands still while it is paused, the
/// topology still naming the edge (milvus#52727). A cluster that is no secondary of the
/// source answers with the checkpoint unset.
#[tokio::test]
async fn a_secondary_reports_a_checkpoint_that_stops_with_its_stream() {
    use milvus_proto::milvus::GetReplicateInfoRequest;

    let (sim, _) = star_with_segment(&star()).await;
    // The sim names a cluster's pchannels `{id}-rootcoord-dml_{i}`.
    let pchannel = || "a-rootcoord-dml_0".to_string();
    let ask = |end: &'static str, source: &'static str, pchannel: String| {
        let uri = sim.uri(end);
        async move {
            grpc(&uri)
                .await
                .get_replicate_info(GetReplicateInfoRequest {
                    source_cluster_id: source.into(),
                    target_pchannel: pchannel,
                })
                .await
                .expect("GetReplicateInfo answers")
                .into_inner()
                .checkpoint
                .map(|c| c.time_tick)
        }
    };
    let first = ask("b", "a", pchannel()).await.expect("b is a's secondary");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = ask("b", "a", pchannel()).await.expect("a checkpoint");
    assert!(later > first, "a flowing stream's checkpoint advances");

    sim.cluster("a")
        .control()
        .pause_stream("b")
        .await
        .expect("paused");
    let stalled = ask("b", "a", pchannel()).await.expect("a checkpoint");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ask("b", "a", pchannel()).await, Some(stalled));
    let on_c = ask("c", "a", pchannel()).await.expect("c's stream flows");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ask("c", "a", pchannel()).await.expect("a checkpoint") > on_c);

    assert_eq!(ask("a", "a", pchannel()).await, None, "a is no secondary");
    assert_eq!(ask("b", "c", pchannel()).await, None, "b does not follow c");
    assert_eq!(ask("b", "a", "no-such-pchannel".into()).await, None);
}
