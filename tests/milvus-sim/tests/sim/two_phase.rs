//! Commit and abort semantics, one test per rule of docs/milvus-facts.md §2.3.

use milvus_sim::jobs::JobState;
use serde_json::json;

use crate::common::*;

/// A standalone cluster with one collection and one segment; returns (sim, rest, files).
async fn setup(topology: &str) -> (milvus_sim::Sim, Rest, [String; 2]) {
    let sim = start(topology).await;
    let a = sim.cluster("a");
    create_collection(&a.uri(), "c").await;
    let files = put_segment(&a, "bk", 10, 2).await;
    (sim, Rest::new(&a.uri()), files)
}

#[tokio::test]
async fn manual_job_waits_uncommitted_then_commit_completes_and_is_idempotent() {
    let slow_commit = standalone("3.0.0").replace("committing = \"5ms\"", "committing = \"300ms\"");
    let (sim, rest, files) = setup(&slow_commit).await;
    let a = sim.cluster("a");
    let id = rest.create_manual("c", &files[0]).await;
    let job = wait_for(&a, id, JobState::Uncommitted).await;
    assert_eq!(
        states(&job),
        [
            JobState::Pending,
            JobState::PreImporting,
            JobState::Importing,
            JobState::Sorting,
            JobState::IndexBuilding,
            JobState::Uncommitted
        ]
    );
    let d = rest.describe(&id.to_string()).await;
    assert_eq!(
        (d["data"]["state"].as_str(), d["data"]["progress"].as_i64()),
        (Some("Uncommitted"), Some(99))
    );
    assert_eq!(
        a.visible_rows("", "c"),
        0,
        "nothing is visible before the commit"
    );

    assert_eq!(
        rest.commit(&id.to_string()).await["code"],
        0,
        "commit in Uncommitted"
    );
    assert_eq!(a.job(id).expect("job").state, JobState::Committing);
    assert_eq!(
        rest.commit(&id.to_string()).await["code"],
        0,
        "commit in Committing is idempotent"
    );
    let d = rest.describe(&id.to_string()).await;
    assert_eq!(d["data"]["state"], "Committing");
    wait_for(&a, id, JobState::Completed).await;
    assert_eq!(
        rest.commit(&id.to_string()).await,
        json!({"code": 0, "data": {}}),
        "commit in Completed"
    );
    assert_eq!(a.visible_rows("", "c"), 10);
    let d = rest.describe(&id.to_string()).await;
    assert_eq!(
        (
            d["data"]["progress"].as_i64(),
            d["data"]["importedRows"].as_i64()
        ),
        (Some(100), Some(10))
    );
}

#[tokio::test]
async fn commit_before_uncommitted_is_refused_naming_the_state() {
    let slow = standalone("3.0.0").replace("importing = \"5ms\"", "importing = \"30s\"");
    let (sim, rest, files) = setup(&slow).await;
    let id = rest.create_manual("c", &files[0]).await;
    wait_for(&sim.cluster("a"), id, JobState::Importing).await;
    let answer = rest.commit(&id.to_string()).await;
    assert_refused(&answer, 2100, "is in state Importing, expected Uncommitted");
    assert_eq!(
        sim.cluster("a").job(id).expect("job").state,
        JobState::Importing,
        "no state change"
    );
}

/// Milvus 3.0 checks the state before the auto-commit guard on commit, and the guard first on
/// abort (docs/milvus-facts.md §2.3).
#[tokio::test]
async fn commit_and_abort_of_an_auto_commit_job_follow_the_3_0_check_order() {
    let slow = standalone("3.0.0").replace("importing = \"5ms\"", "importing = \"30s\"");
    let (sim, rest, files) = setup(&slow).await;
    let id = job_id(
        &rest
            .create(
                "c",
                "_default",
                json!([[files[0]]]),
                json!({"backup": "true"}),
            )
            .await,
    );
    wait_for(&sim.cluster("a"), id, JobState::Importing).await;
    assert_refused(
        &rest.commit(&id.to_string()).await,
        2100,
        &format!("job {id} is in state Importing, expected Uncommitted"),
    );
    assert_refused(
        &rest.abort(&id.to_string()).await,
        2100,
        &format!("job {id} is auto-commit, manual commit/abort not allowed"),
    );
}

/// Committing or Completed makes a commit a no-op before the auto-commit guard runs.
#[tokio::test]
async fn commit_of_a_completed_auto_commit_job_is_a_no_op() {
    let (sim, rest, files) = setup(&standalone("3.0.0")).await;
    let id = job_id(
        &rest
            .create(
                "c",
                "_default",
                json!([[files[0]]]),
                json!({"backup": "true"}),
            )
            .await,
    );
    wait_for(&sim.cluster("a"), id, JobState::Completed).await;
    assert_eq!(
        rest.commit(&id.to_string()).await,
        json!({"code": 0, "data": {}})
    );
}

/// A job that failed on its own is rolled back by an abort (its mirrors may hold rows) and
/// keeps its own reason; each abort broadcasts again.
#[tokio::test]
async fn abort_of_a_self_failed_job_rolls_back_and_keeps_its_reason() {
    let (sim, rest, files) = setup(&standalone("3.0.0")).await;
    let a = sim.cluster("a");
    a.add_job_failure(milvus_sim::faults::JobFailure {
        job: milvus_sim::faults::JobSelector::Next,
        state: JobState::Importing,
        reason: "disk quota exceeded, please allocate more resources".into(),
    });
    let id = rest.create_manual("c", &files[0]).await;
    wait_for(&a, id, JobState::Failed).await;
    for _ in 0..2 {
        assert_eq!(rest.abort(&id.to_string()).await["code"], 0);
    }
    let job = a.job(id).expect("job");
    assert_eq!(
        (job.state, job.reason.as_str()),
        (
            JobState::Failed,
            "disk quota exceeded, please allocate more resources"
        )
    );
}

#[tokio::test]
async fn auto_commit_job_shows_importing_at_99_then_completes() {
    let slow_commit = standalone("3.0.0").replace("committing = \"5ms\"", "committing = \"30s\"");
    let (sim, rest, files) = setup(&slow_commit).await;
    let a = sim.cluster("a");
    let id = job_id(
        &rest
            .create(
                "c",
                "_default",
                json!([[files[0]]]),
                json!({"backup": "true"}),
            )
            .await,
    );
    wait_for(&a, id, JobState::Committing).await;
    let d = rest.describe(&id.to_string()).await;
    assert_eq!(
        (d["data"]["state"].as_str(), d["data"]["progress"].as_i64()),
        (Some("Importing"), Some(99))
    );
    assert!(
        states(&a.job(id).expect("job")).contains(&JobState::Uncommitted),
        "every job passes Uncommitted"
    );
}

#[tokio::test]
async fn commit_after_abort_is_refused() {
    let (sim, rest, files) = setup(&standalone("3.0.0")).await;
    let id = rest.create_manual("c", &files[0]).await;
    wait_for(&sim.cluster("a"), id, JobState::Uncommitted).await;
    assert_eq!(rest.abort(&id.to_string()).await["code"], 0);
    assert_refused(&rest.commit(&id.to_string()).await, 2100, "Failed");
    let job = sim.cluster("a").job(id).expect("job");
    assert_eq!(
        (job.state, job.reason.as_str()),
        (JobState::Failed, milvus_sim::cluster::ABORTED_BY_USER)
    );
}

#[tokio::test]
async fn abort_after_commit_is_refused() {
    // Committing lasts long enough that the abort below meets it, however loaded the machine.
    let slow = standalone("3.0.0").replace("committing = \"5ms\"", "committing = \"2s\"");
    let (sim, rest, files) = setup(&slow).await;
    let a = sim.cluster("a");
    let id = rest.create_manual("c", &files[0]).await;
    wait_for(&a, id, JobState::Uncommitted).await;
    assert_eq!(rest.commit(&id.to_string()).await["code"], 0);
    assert_refused(
        &rest.abort(&id.to_string()).await,
        2100,
        &format!("job {id} is in terminal/committed state Committing, abort not allowed"),
    );
    wait_for(&a, id, JobState::Completed).await;
    assert_refused(
        &rest.abort(&id.to_string()).await,
        2100,
        &format!("job {id} is in terminal/committed state Completed, abort not allowed"),
    );
}

#[tokio::test]
async fn repeated_abort_succeeds_and_the_job_stays_failed() {
    let slow = standalone("3.0.0").replace("importing = \"5ms\"", "importing = \"30s\"");
    let (sim, rest, files) = setup(&slow).await;
    let id = rest.create_manual("c", &files[0]).await;
    wait_for(&sim.cluster("a"), id, JobState::Importing).await;
    assert_eq!(
        rest.abort(&id.to_string()).await["code"],
        0,
        "abort before Uncommitted"
    );
    assert_eq!(
        rest.abort(&id.to_string()).await["code"],
        0,
        "repeated abort"
    );
    let d = rest.describe(&id.to_string()).await;
    assert_eq!(d["data"]["state"], "Failed");
    assert_eq!(d["data"]["reason"], milvus_sim::cluster::ABORTED_BY_USER);
    assert_eq!(
        (
            d["data"]["progress"].as_i64(),
            d["data"]["importedRows"].as_i64()
        ),
        (Some(0), Some(0))
    );
}

#[tokio::test]
async fn job_id_that_is_not_an_int64_is_code_1100() {
    let (_sim, rest, _) = setup(&standalone("3.0.0")).await;
    for route in ["commit", "abort"] {
        let answer = rest.post(route, json!({"jobId": "12abc"})).await;
        assert_refused(
            &answer,
            1100,
            "invalid parameter[expected=int64 jobId][actual=12abc]",
        );
    }
    assert_refused(&rest.describe("x").await, 1100, "parse job id failed");
}

/// An unknown job is a server-side failure, 2101, since Milvus #50221 (2100 before): describe
/// says `import job does not exist`, commit and abort `job N not found`.
#[tokio::test]
async fn an_unknown_job_is_code_2101() {
    let (_sim, rest, _) = setup(&standalone("3.0.0")).await;
    for route in ["commit", "abort"] {
        let answer = rest
            .post(route, json!({"jobId": "448293190903759186"}))
            .await;
        assert_refused(
            &answer,
            2101,
            "job 448293190903759186 not found: importing data failed on server side",
        );
    }
    for route in ["describe", "get_progress"] {
        let answer = rest
            .post(route, json!({"jobId": "448293190903759186"}))
            .await;
        assert_refused(
            &answer,
            2101,
            "import job does not exist, jobID=448293190903759186",
        );
    }
}
