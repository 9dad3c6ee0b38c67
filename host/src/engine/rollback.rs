//! One rollback: what a restore made before its commit decision is taken back. The
//! collections it created are dropped and its staged files deleted; once some commit group
//! is decided, that group's collections stay (they are visible) and only the undecided
//! groups' are dropped. The run calls it on every stop it rolls back; recovery after a crash
//! drops by the record alone (`RestoreRecord::collections_to_drop`).

use tokio::time::Instant;

use super::ddl;
use super::ends::Ends;
use super::fence::{Fence, Lost};
use crate::job::Job;
use crate::journal::{CreatedCollection, Decision, RestoreRecord};
use crate::storage::{self, StagingPrefix};

/// The collections a rollback of `record` drops: every one the restore created, or, once a
/// group is decided for commit, those of the groups that are not.
pub(super) fn collections_to_drop(record: &RestoreRecord) -> Vec<CreatedCollection> {
    if !record.has_commit_decision() {
        return record.created_collections.clone();
    }
    let undecided =
        (record.groups.iter()).filter(|g| !matches!(g.decision, Some(Decision::Commit { .. })));
    let in_undecided = |db: &str, collection: &str| {
        undecided
            .clone()
            .any(|g| (g.batches.iter()).any(|b| b.db == db && b.collection == collection))
    };
    (record.created_collections.iter())
        .filter(|c| in_undecided(&c.db, &c.name))
        .cloned()
        .collect()
}

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
        storage::delete_stage(&job.destinations(), &prefix, storage::TempFiles::Delete).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{BatchRecord, CommitGroup, RestoreId};

    /// A restore that created c0, c1, … (one more than it has groups), group i importing
    /// into c{i} and decided as `decisions[i]` says (`Some(true)`: commit).
    fn record(decisions: &[Option<bool>]) -> RestoreRecord {
        let mut record =
            RestoreRecord::new(RestoreId::new("r", "ab", 1), "r", "ab", 1, "b", vec![]);
        record.created_collections = (0..=decisions.len())
            .map(|i| CreatedCollection {
                db: "default".into(),
                name: format!("c{i}"),
                id: Some(i as i64),
            })
            .collect();
        record.groups = (decisions.iter().enumerate())
            .map(|(i, decided)| CommitGroup {
                id: format!("g{i}"),
                batches: vec![BatchRecord {
                    batch_id: format!("b{i}"),
                    db: "default".into(),
                    collection: format!("c{i}"),
                    partition: "_default".into(),
                    idempotency_key: format!("k{i}"),
                    files: vec![],
                    options: Default::default(),
                    job_id: None,
                    create_sent: true,
                    expected_rows: None,
                }],
                decision: decided.map(|commit| match commit {
                    true => Decision::Commit {
                        at: jiff::Timestamp::now(),
                    },
                    false => Decision::Abort {
                        at: jiff::Timestamp::now(),
                        reason: "stop".into(),
                    },
                }),
            })
            .collect();
        record
    }

    fn names(collections: Vec<CreatedCollection>) -> Vec<String> {
        collections.into_iter().map(|c| c.name).collect()
    }

    #[test]
    fn before_any_decision_everything_created_is_dropped() {
        let r = record(&[None, Some(false)]);
        assert_eq!(names(collections_to_drop(&r)), ["c0", "c1", "c2"]);
    }

    #[test]
    fn a_committed_groups_collections_stay() {
        // c0 is committed, c1 aborted; c2 was created but is in no group.
        let r = record(&[Some(true), Some(false)]);
        assert_eq!(names(collections_to_drop(&r)), ["c1"]);
    }
}
