//! DESIGN.md §2 checked against what milvus-sim recorded, for any run.

use e2e::{TARGET, World};
use milvus_sim::jobs::JobState;

/// Invariant 1: a commit reached the target for a job only after every end reported that
/// job Uncommitted; and no secondary ever received a commit, abort or create.
pub async fn commits_followed_every_uncommitted(world: &World) -> anyhow::Result<()> {
    let target = world.state(TARGET).await?;
    let mut ends = Vec::new();
    for end in world.ends() {
        ends.push((end.clone(), world.state(&end).await?));
    }
    for (end, state) in ends.iter().skip(1) {
        let writes = state
            .requests
            .iter()
            .filter(|r| {
                ["import/create", "import/commit", "import/abort"]
                    .iter()
                    .any(|w| r.route.ends_with(w))
            })
            .count();
        anyhow::ensure!(
            writes == 0,
            "secondary {end} received {writes} import writes"
        );
    }
    for commit in target.requests_to("import/commit") {
        let Some(job) = &commit.job_id else { continue };
        let id: i64 = job.parse()?;
        for (end, state) in &ends {
            let uncommitted = state
                .job(id)
                .and_then(|j| j.history.iter().find(|h| h.state == JobState::Uncommitted))
                .map(|h| h.at.unix_ms);
            match uncommitted {
                Some(at) => anyhow::ensure!(
                    at <= commit.at.unix_ms,
                    "commit of job {id} reached {TARGET} at {} before {end} was Uncommitted at {at}",
                    commit.at.unix_ms
                ),
                None => anyhow::bail!(
                    "commit of job {id} sent, but {end} never reported it Uncommitted"
                ),
            }
        }
    }
    Ok(())
}

/// After a rollback: nothing visible on any end, nothing held, no collection left behind.
pub async fn nothing_restored(world: &World) -> anyhow::Result<()> {
    world.assert_nothing_held().await?;
    for end in world.ends() {
        let state = world.state(&end).await?;
        let left: Vec<String> = state
            .collections
            .iter()
            .map(|c| format!("{}.{}", c.db_name, c.name))
            .collect();
        anyhow::ensure!(left.is_empty(), "{end} still has collections {left:?}");
        anyhow::ensure!(
            state.jobs.iter().all(|j| j.state != JobState::Completed),
            "{end} completed an import"
        );
    }
    Ok(())
}
