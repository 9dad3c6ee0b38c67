//! Whether this host may still act on a restore. A host that paused past its lease (a GC
//! pause, a frozen VM, a partition) wakes believing it holds a restore another host has
//! since taken over, finished and perhaps run again under the same collection names. Milvus
//! cannot check a fencing token, so every action that changes an end (a create, a commit,
//! an abort, a collection dropped, the stage deleted) asks the fence right before it acts:
//! the claim's lease alive and the journal record as this attempt last wrote it. Once that
//! fails the attempt touches nothing more: no rollback, no cleanup, no journal write.
//!
//! The check and the call are two steps, and a pause can fall between them; what that
//! window still allows, and why it cannot lose committed data, is DESIGN.md §2.1. A drop,
//! the one call that could, must leave by [`Fence::send_by`] (`milvus/gate.rs`).

use futures::future::BoxFuture;

use crate::journal::RestoreId;

/// This host no longer holds the restore, or cannot show that it does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this host lost restore {id}, its claim no longer shown to hold ({reason}); it stopped \
     touching anything, another host takes the restore over once the journal lets one, and \
     the journal's record says how it ends"
)]
pub struct Lost {
    pub id: RestoreId,
    pub reason: String,
}

/// Asked right before every action on an end.
pub(super) trait Fence: Sync {
    /// `Ok` while this host holds the restore; `Err` from the first time it does not, and
    /// from then on.
    fn check(&self) -> BoxFuture<'_, Result<(), Lost>>;

    /// The latest a call may leave this host on the strength of the checks that passed: the
    /// newest one's asking plus how long its answer counts. `None` where the claim cannot
    /// lapse while this process lives (a file lock).
    fn send_by(&self) -> Option<std::time::Instant>;
}
