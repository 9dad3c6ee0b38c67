//! A restart keeps jobs, collections and config (as etcd does) and resumes in-flight jobs.

use std::time::Duration;

use milvus_sim::cluster::Availability;
use milvus_sim::jobs::JobState;

use crate::common::*;

#[tokio::test]
async fn restart_refuses_connections_then_keeps_jobs_and_resumes_them() {
    let slow = star().replacen("importing = \"5ms\"", "importing = \"300ms\"", 1);
    let sim = start(&slow).await;
    let a = sim.cluster("a");
    create_collection(&a.uri(), "c").await;
    for cluster in sim.clusters() {
        put_segment(&cluster, "bk", 6, 0).await;
    }
    let rest = Rest::new(&a.uri());
    let done = rest
        .create_manual("c", "bk/binlogs/insert_log/1/2/3/")
        .await;
    wait_for(&a, done, JobState::Uncommitted).await;
    let in_flight = rest
        .create_manual("c", "bk/binlogs/insert_log/1/2/3/")
        .await;
    wait_for(&a, in_flight, JobState::Importing).await;
    let before = a.snapshot();

    a.control()
        .restart(Duration::from_millis(400))
        .await
        .expect("restart accepted");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let refused = reqwest::Client::new()
        .get(format!("{}/sim/v1/state", a.uri()))
        .send()
        .await;
    assert!(
        refused.is_err_and(|e| e.is_connect()),
        "the port refuses connections while down"
    );
    a.control()
        .wait_ready(Duration::from_secs(5))
        .await
        .expect("back up");

    let after = a.control().state().await.expect("state");
    assert_eq!(after.collections, before.collections);
    assert_eq!(after.role, "primary");
    assert_eq!(after.job(done).expect("kept").state, JobState::Uncommitted);
    wait_for(&a, in_flight, JobState::Uncommitted).await;
    // Commit after the restart still reaches the mirrors.
    assert_eq!(rest.commit(&done.to_string()).await["code"], 0);
    for end in ["a", "b", "c"] {
        wait_for(&sim.cluster(end), done, JobState::Completed).await;
    }
}

#[tokio::test]
async fn messages_sent_to_a_restarting_secondary_arrive_when_it_is_back() {
    let sim = start(&star()).await;
    create_collection(&sim.uri("a"), "c").await;
    for cluster in sim.clusters() {
        put_segment(&cluster, "bk", 6, 0).await;
    }
    let b = sim.cluster("b");
    b.restart(Duration::ZERO)
        .await
        .expect("restart works in-process too");
    let restarting = tokio::spawn({
        let b = b.clone();
        async move { b.restart(Duration::from_millis(300)).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let id = Rest::new(&sim.uri("a"))
        .create_manual("c", "bk/binlogs/insert_log/1/2/3/")
        .await;
    restarting.await.expect("joined").expect("restarted");
    wait_for(&b, id, JobState::Uncommitted).await;
}

/// Seed 53164 of the fault runner: the stream to a secondary paused, the primary restarted
/// after the commit went out, the stream resumed. Milvus replicates through its WAL, so what
/// the stream had not delivered when the primary went down is delivered once it flows again.
#[tokio::test]
async fn a_primary_restart_loses_nothing_its_paused_stream_had_not_delivered() {
    let sim = start(&star()).await;
    let a = sim.cluster("a");
    create_collection(&a.uri(), "c").await;
    for cluster in sim.clusters() {
        put_segment(&cluster, "bk", 6, 0).await;
    }
    let rest = Rest::new(&a.uri());
    let id = rest
        .create_manual("c", "bk/binlogs/insert_log/1/2/3/")
        .await;
    for end in ["a", "b", "c"] {
        wait_for(&sim.cluster(end), id, JobState::Uncommitted).await;
    }
    a.control().pause_stream("c").await.expect("paused");
    assert_eq!(rest.commit(&id.to_string()).await["code"], 0);
    wait_for(&a, id, JobState::Completed).await;
    wait_for(&sim.cluster("b"), id, JobState::Completed).await;
    // In process: returns once the cluster is down, and back up again.
    a.restart(Duration::from_millis(300))
        .await
        .expect("restarted");
    assert_eq!(
        sim.cluster("c").job(id).expect("mirror").state,
        JobState::Uncommitted,
        "the commit waits in the paused stream"
    );
    a.control().resume_stream("c").await.expect("resumed");
    wait_for(&sim.cluster("c"), id, JobState::Completed).await;
}

/// The server waits for the control API's restart requests anew each time it serves the
/// port: a cluster the control API restarted, the control API restarts again.
#[tokio::test]
async fn the_control_api_restarts_a_cluster_it_restarted_before() {
    let sim = start(&star()).await;
    let a = sim.cluster("a");
    for restart in 1..=2 {
        a.control()
            .restart(Duration::from_secs(1))
            .await
            .expect("restart accepted");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while a.availability() == Availability::Up {
            assert!(
                tokio::time::Instant::now() < deadline,
                "restart {restart} never took the port down"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        a.control()
            .wait_ready(Duration::from_secs(10))
            .await
            .expect("back up");
    }
}
