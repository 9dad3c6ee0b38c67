//! One rollback: what a restore made before its commit decision is taken back. The
//! collections it created are dropped and its staged files deleted; once some commit group
//! is decided, that group's collections stay (they are visible) and only the undecided
//! groups' are dropped. A run that stops and a recovery after a crash roll back by this one
//! function and the record's one rule (`RestoreRecord::collections_to_drop`).

use tokio::time::Instant;

use super::ddl;
use super::ends::Ends;
use super::fence::{Fence, Lost};
use crate::config::StorageSpec;
use crate::journal::RestoreRecord;
use crate::storage::{self, StagingPrefix, TempFiles};

/// Where a rollback may delete the restore's staged files, and whether to: given only once
/// no end can still read them.
pub(super) struct StageCleanup<'a> {
    pub stores: &'a [(String, &'a StorageSpec)],
    pub temp: TempFiles,
}

/// Drops the collections `record`'s rule names on the target (each only while it is still
/// the one this restore created) and, with `stage`, deletes the restore's staging prefix,
/// each step once `fence` passed. Best effort: what cannot be undone is logged, and a stage
/// left is found again by the sweep. `Err` once the fence failed (the rest is the new
/// holder's); else whether the staged files went.
pub(super) async fn undo(
    ends: &Ends,
    fence: &dyn Fence,
    record: &RestoreRecord,
    stage: Option<StageCleanup<'_>>,
    deadline: Instant,
) -> Result<bool, Lost> {
    for problem in ddl::drop_created(ends, fence, &record.collections_to_drop(), deadline).await? {
        tracing::warn!(%problem, "rollback");
    }
    match (stage, &record.staging_prefix) {
        (Some(stage), Some(_)) if !stage.stores.is_empty() => {
            fence.check().await?;
            // The plan is not at hand: the prefix is walked.
            let prefix = StagingPrefix::for_restore(record.id.as_str());
            Ok(storage::delete_stage(stage.stores, &prefix, stage.temp, &[]).await)
        }
        _ => Ok(false),
    }
}
