//! Injected faults (control API): a job failing at a named state, REST 503, gRPC Unavailable,
//! delays, a create whose answer is lost after its job was made, deleted objects; and the
//! request log tests read call counts from.

use std::time::{Duration, Instant};

use milvus_proto::milvus::GetVersionRequest;
use milvus_sim::control::DeleteObjects;
use milvus_sim::faults::{ApiEffect, ApiFace, JobFailure, JobSelector, LostAnswer};
use milvus_sim::jobs::JobState;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn the_next_job_fails_at_the_named_state_with_the_reason() {
    let sim = start(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    create_collection(&a.uri(), "c").await;
    let files = put_segment(&a, "bk", 5, 0).await;
    let failure = JobFailure {
        job: JobSelector::Next,
        state: JobState::Sorting,
        reason: "disk quota exceeded".into(),
    };
    a.control().fail_job(&failure).await.expect("fault set");
    assert_eq!(
        a.control()
            .state()
            .await
            .expect("state")
            .pending_job_failures,
        [failure]
    );
    let rest = Rest::new(&a.uri());
    let id = rest.create_manual("c", &files[0]).await;
    let job = wait_for(&a, id, JobState::Failed).await;
    assert_eq!(job.reason, "disk quota exceeded");
    assert_eq!(
        &states(&job)[states(&job).len() - 2..],
        [JobState::Sorting, JobState::Failed]
    );
    let next = rest.create_manual("c", &files[0]).await;
    wait_for(&a, next, JobState::Uncommitted).await;

    // By id, at Uncommitted.
    let named = JobFailure {
        job: JobSelector::Id(next),
        state: JobState::Uncommitted,
        reason: "x".into(),
    };
    let refused = a
        .control()
        .fail_job(&JobFailure {
            state: JobState::Completed,
            ..named.clone()
        })
        .await
        .expect_err("cannot fail after commit");
    assert!(
        refused
            .to_string()
            .contains("only states before Committing"),
        "{refused}"
    );
    let third = rest.create_manual("c", &files[0]).await;
    a.control()
        .fail_job(&JobFailure {
            job: JobSelector::Id(third),
            state: JobState::Uncommitted,
            reason: "named".into(),
        })
        .await
        .expect("fault set");
    assert_eq!(wait_for(&a, third, JobState::Failed).await.reason, "named");

    // A named job already sitting in the state fails at once: an Uncommitted job waits for
    // its commit, not for another transition.
    let waiting = rest.create_manual("c", &files[0]).await;
    wait_for(&a, waiting, JobState::Uncommitted).await;
    a.control()
        .fail_job(&JobFailure {
            job: JobSelector::Id(waiting),
            state: JobState::Uncommitted,
            reason: "lost its segments".into(),
        })
        .await
        .expect("fault set");
    let failed = wait_for(&a, waiting, JobState::Failed).await;
    assert_eq!(failed.reason, "lost its segments");
}

#[tokio::test]
async fn rest_answers_503_and_grpc_unavailable_while_faulted_and_control_keeps_working() {
    let sim = start(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    let control = a.control();
    control
        .api_fault(
            ApiFace::Both,
            ApiEffect::Unavailable,
            Duration::from_secs(30),
        )
        .await
        .expect("fault set");
    let response = reqwest::Client::new()
        .post(format!("{}/v2/vectordb/jobs/import/list", a.uri()))
        .json(&json!({}))
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), 503);
    let error = grpc(&a.uri())
        .await
        .get_version(GetVersionRequest {})
        .await
        .expect_err("unavailable");
    assert_eq!(error.code(), tonic::Code::Unavailable);
    let state = control.state().await.expect("control is never faulted");
    let faulted: Vec<_> = state
        .requests
        .iter()
        .filter(|r| r.fault == Some(ApiEffect::Unavailable))
        .collect();
    assert_eq!(faulted.len(), 2);
    control.clear_faults().await.expect("cleared");
    let version = grpc(&a.uri())
        .await
        .get_version(GetVersionRequest {})
        .await
        .expect("served")
        .into_inner();
    assert_eq!(version.version, "3.0.0");
}

/// The create makes its job and the client gets HTTP 503; the log says both. Retried under
/// the same key into a job budget the job itself fills, the create is refused at admission
/// (milvus#53228), and only a look at the collection's jobs finds it.
#[tokio::test]
async fn a_lost_create_answer_leaves_its_job_made_and_the_retry_meets_the_full_budget() {
    let topology = standalone("3.0.2").replace("id = \"a\"", "id = \"a\"\nmax_import_job_num = 1");
    let sim = start(&topology).await;
    let a = sim.cluster("a");
    create_collection(&a.uri(), "c").await;
    let files = put_segment(&a, "bk", 3, 0).await;
    let lost = LostAnswer {
        job: JobSelector::Next,
    };
    a.control().lose_answer(&lost).await.expect("fault set");
    let body = json!({"collectionName": "c", "partitionName": "_default", "files": [[files[0]]],
        "options": {"backup": "true", "auto_commit": "false"}});
    let send = || {
        reqwest::Client::new()
            .post(format!("{}/v2/vectordb/jobs/import/create", a.uri()))
            .header("Idempotency-Key", "batch-0")
            .json(&body)
            .send()
    };
    let first = send().await.expect("answers");
    assert_eq!(first.status(), 503);
    let state = a.control().state().await.expect("state");
    let [job] = state.jobs.as_slice() else {
        panic!("one job made: {:?}", state.jobs);
    };
    let logged = state.requests_to("import/create");
    assert_eq!(logged.len(), 1);
    assert_eq!(
        (
            logged[0].code,
            logged[0].fault,
            logged[0].collection.as_deref()
        ),
        (Some(0), Some(ApiEffect::Unavailable), Some("default.c"))
    );
    assert_eq!(logged[0].job_id, Some(job.job_id.to_string()));

    let retry: serde_json::Value = send().await.expect("answers").json().await.expect("JSON");
    assert_refused(&retry, 2101, "The number of jobs has reached the limit");
    let listed = Rest::new(&a.uri())
        .post("list", json!({"collectionName": "c"}))
        .await;
    assert_eq!(
        listed["data"]["records"][0]["jobId"],
        job.job_id.to_string(),
        "{listed}"
    );
    assert_eq!(a.snapshot().jobs.len(), 1, "the retry made no second job");
}

#[tokio::test]
async fn a_fault_expires_after_its_duration() {
    let sim = start(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    a.control()
        .api_fault(
            ApiFace::Grpc,
            ApiEffect::Unavailable,
            Duration::from_millis(200),
        )
        .await
        .expect("set");
    let mut client = grpc(&a.uri()).await;
    assert!(client.get_version(GetVersionRequest {}).await.is_err());
    let rest = Rest::new(&a.uri());
    assert_eq!(
        rest.post("list", json!({})).await["code"],
        0,
        "the REST face is not faulted"
    );
    for _ in 0..200 {
        if client.get_version(GetVersionRequest {}).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the fault never expired");
}

#[tokio::test]
async fn delayed_answers_come_after_the_delay() {
    let sim = start(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    let delay = ApiEffect::Delay { delay_ms: 300 };
    a.control()
        .api_fault(ApiFace::Rest, delay, Duration::from_secs(30))
        .await
        .expect("set");
    let rest = Rest::new(&a.uri());
    let started = Instant::now();
    assert_eq!(
        rest.post("list", json!({})).await["code"],
        0,
        "a delayed answer is a normal answer"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "answered after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn deleted_objects_fail_the_next_import_and_requests_are_logged() {
    let sim = start(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    create_collection(&a.uri(), "c").await;
    let files = put_segment(&a, "bk", 5, 0).await;
    let deleted = a
        .control()
        .delete_objects(&DeleteObjects::Prefix(files[0].clone()))
        .await
        .expect("deleted");
    assert_eq!(deleted, 8, "two insert logs for each of four fields");
    let single = a
        .control()
        .delete_objects(&DeleteObjects::Paths(vec![format!("{}30/4", files[1])]))
        .await
        .expect("deleted");
    assert_eq!(single, 1);
    let rest = Rest::new(&a.uri());
    let id = rest.create_manual("c", &files[0]).await;
    let job = wait_for(&a, id, JobState::Failed).await;
    assert!(
        job.reason.contains("no binlog to import") && job.reason.contains(&files[0]),
        "{}",
        job.reason
    );
    rest.describe(&id.to_string()).await;
    rest.describe(&id.to_string()).await;
    let state = a.control().state().await.expect("state");
    let describes = state.requests_to("/jobs/import/describe");
    assert_eq!(describes.len(), 2);
    assert!(
        describes
            .iter()
            .all(|r| r.job_id == Some(id.to_string()) && r.code == Some(0))
    );
    assert_eq!(
        state.requests_to("/jobs/import/create")[0].job_id,
        Some(id.to_string())
    );
    assert_eq!(state.requests_to("MilvusService/CreateCollection").len(), 1);
}
