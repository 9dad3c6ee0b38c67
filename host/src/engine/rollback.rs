//! One rollback: what a restore made before its commit decision is taken back. The
//! collections it created are dropped and its staged files deleted; once some commit group
//! is decided, that group's collections stay (they are visible) and only the undecided
//! groups' are dropped. A run that stops and a recovery after a crash drop by one rule, the
//! record's (`RestoreRecord::collections_to_drop`).

use tokio::time::Instant;

use super::ddl;
use super::ends::Ends;
use super::fence::{Fence, Lost};
use crate::job::Job;
use crate::journal::CreatedCollection;
use crate::storage::{self, StagingPrefix};

/// Drops `collections` on the target (each only while it is still the one this restore
/// created) and, when the restore staged (`staged`), deletes its staging prefix from every
/// destination of `job`, each step once `fence` passed. Best effort: what cannot be undone
/// is logged, and the stage left is found again by the sweep. `Err` once the fence failed:
/// the rest is the new holder's.
pub(super) async fn undo(
    ends: &Ends,
    fence: &dyn Fence,
    collections: &[CreatedCollection],
    staged: Option<(&Job, StagingPrefix)>,
    deadline: Instant,
) -> Result<(), Lost> {
    for problem in ddl::drop_created(ends, fence, collections, deadline).await? {
        tracing::warn!(%problem, "rollback");
    }
    if let Some((job, prefix)) = staged {
        fence.check().await?;
        // The plan is not at hand: the prefix is walked.
        storage::delete_stage(
            &job.destinations(),
            &prefix,
            storage::TempFiles::Delete,
            &[],
        )
        .await;
    }
    Ok(())
}
