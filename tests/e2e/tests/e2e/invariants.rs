//! DESIGN.md §2 checked against what milvus-sim recorded, for any run: the fault runner's
//! checker (`e2e::faults::checker`) over the world's current state.

use std::time::Duration;

use e2e::World;
use e2e::faults::checker::{self, Violation};

fn none_of(found: Vec<Violation>) -> anyhow::Result<()> {
    if found.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = found.iter().map(Violation::to_string).collect();
    anyhow::bail!("{}", lines.join("\n"))
}

/// Invariant 1: a commit reached the target for a job only after every end reported that
/// job Uncommitted; and no secondary ever received a commit, abort or create.
pub async fn commits_followed_every_uncommitted(world: &World) -> anyhow::Result<()> {
    none_of(checker::commits_followed_every_uncommitted(
        &world.snapshots().await?,
    ))
}

/// After a rollback: nothing visible on any end, nothing held, no collection left behind.
pub async fn nothing_restored(world: &World) -> anyhow::Result<()> {
    none_of(checker::nothing_restored(&world.snapshots().await?))
}

/// [`nothing_restored`] once the rollback's drops reached the secondaries over the stream
/// (within 10 s).
pub async fn nothing_restored_eventually(world: &World) -> anyhow::Result<()> {
    e2e::eventually(Duration::from_secs(10), || async {
        Ok(nothing_restored(world).await.is_ok())
    })
    .await?;
    nothing_restored(world).await
}
