//! Why a restore stops before its decision, as the engine branches on it: refused (nothing
//! was imported), failed in a stage (every submitted job is aborted), or interrupted.

use crate::plugins::Phase;
use crate::{journal, milvus, storage};

use super::ddl::ArrivalError;
use super::fence::Lost;
use super::refusal::Refusal;
use super::rows::Unreadable;
use super::two_phase::HoldError;
use crate::diagnostic::error_chain;

/// What stopped a restore before its decision.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// A rule refused it; nothing was imported.
    #[error("refused: {}", Refusal::joined(.0))]
    Refused(Vec<Refusal>),
    /// A stage failed; every submitted job is aborted.
    #[error(transparent)]
    Failed(#[from] StageError),
    /// The process was told to stop before the decision.
    #[error("interrupted before the commit decision")]
    Interrupted,
    /// This host lost its claim: it acts on nothing more, and another host resolves the
    /// restore.
    #[error(transparent)]
    Lost(#[from] Lost),
}

/// Why a stage of the restore failed. Each says what failed in the words the report and the
/// journal's abort reason carry, with its cause as its source; the engine branches on the
/// kind, never on the text.
#[derive(Debug, thiserror::Error)]
pub(super) enum StageError {
    /// The journal did not take a write the restore cannot go on without.
    #[error("journal")]
    Journal(#[source] journal::Error),
    #[error("DDL on the target failed")]
    Ddl(#[source] milvus::Error),
    /// A collection did not arrive on a secondary within the mirror grace, or was never made.
    #[error(transparent)]
    Arrival(ArrivalError),
    /// A destination store could not be opened.
    #[error("storage of {end}")]
    Storage {
        end: String,
        #[source]
        source: Box<storage::Error>,
    },
    #[error("staging failed")]
    Staging(#[source] Box<storage::Error>),
    /// The stage was told to stop because the restore failed elsewhere.
    #[error("staging stopped: the restore failed")]
    StagingStopped,
    /// The DDL, the stage or an arrival failed, so this group imports nothing more; the
    /// restore's own failure is theirs.
    #[error("the DDL, staging or a collection's arrival on a secondary failed")]
    GateFailed,
    #[error("import create failed")]
    Create(#[source] milvus::Error),
    /// A job failed on some end, a mirror passed its grace, or the commit timeout ran out.
    #[error(transparent)]
    Hold(Box<HoldError>),
    /// A mirror found no files on a secondary that nothing was staged on, because the host
    /// config gives it no storage.
    #[error(
        "{error}; nothing was staged on {secondary} because the host config gives it no \
         storage: add `storage` to its cluster (or `require_staging = true` to refuse this up \
         front)"
    )]
    Unstaged {
        error: Box<HoldError>,
        secondary: String,
    },
    /// An end would not say how many rows a job imported.
    #[error(transparent)]
    RowsUnread(Box<Unreadable>),
    /// An end holds a job with other rows than the backup's.
    #[error("{0}")]
    Rows(String),
    /// A check failed, errored or ran out of time.
    #[error("check `{check}` ({phase}) stopped the restore: {reason}")]
    Check {
        check: String,
        phase: Phase,
        reason: String,
    },
    /// Another commit group failed before this one's decision.
    #[error("another commit group failed")]
    OtherGroup,
}

impl From<super::process::Interrupted> for Error {
    fn from(_: super::process::Interrupted) -> Error {
        Error::Interrupted
    }
}

impl Error {
    /// The journal's and the report's words for it, causes included.
    pub fn reason(&self) -> String {
        match self {
            Error::Refused(r) => Refusal::joined(r),
            _ => error_chain(self),
        }
    }

    /// Whether this stop only follows from another failure of the same restore: a stage
    /// told to stop, a gate that closed, another group that failed. Such a stop is never
    /// the reason a restore gives.
    fn follows(&self) -> bool {
        matches!(
            self,
            Error::Failed(
                StageError::StagingStopped | StageError::GateFailed | StageError::OtherGroup
            )
        )
    }

    /// The reason a restore stopped, of the stops its concurrent parts returned, in their
    /// order: the first that does not only follow from another.
    pub fn first(stops: impl IntoIterator<Item = Error>) -> Option<Error> {
        let mut followers = None;
        for stop in stops {
            if !stop.follows() {
                return Some(stop);
            }
            followers.get_or_insert(stop);
        }
        followers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::RestoreId;

    #[test]
    fn a_failure_reads_as_its_stage_says_with_its_causes_and_a_refusal_as_its_rules() {
        let failed = Error::from(StageError::GateFailed);
        assert_eq!(
            failed.reason(),
            "the DDL, staging or a collection's arrival on a secondary failed"
        );
        let id = RestoreId::new("orders", "0123456789ab", 1);
        let lost = journal::Error::ClaimLost(id);
        let journal = Error::from(StageError::Journal(lost));
        assert_eq!(
            journal.reason(),
            "journal: the claim on restore orders.0123456789ab.1 was lost: its lease expired or \
             went unrenewed, or its record changed hands"
        );
        assert_eq!(
            Error::Interrupted.reason(),
            "interrupted before the commit decision"
        );
        let busy = Refusal::Busy {
            id: "orders-ab-1".into(),
            holder: "host-b".into(),
        };
        let refused = Error::Refused(vec![busy.clone()]);
        assert_eq!(refused.reason(), busy.to_string());
        assert_eq!(refused.to_string(), format!("refused: {busy}"));
    }

    /// A stage stopped because a group failed says nothing of why: the group's failure is
    /// the restore's, wherever it stands among the stops.
    #[test]
    fn the_first_stop_that_does_not_follow_from_another_is_the_reason() {
        let stops = || {
            vec![
                Error::from(StageError::StagingStopped),
                Error::from(StageError::GateFailed),
                Error::from(StageError::Rows("default.c: 3 rows short".into())),
                Error::Interrupted,
            ]
        };
        let first = Error::first(stops()).expect("some stop");
        assert_eq!(first.reason(), "default.c: 3 rows short");
        let only_followers = stops().into_iter().take(2);
        let first = Error::first(only_followers).expect("some stop");
        assert_eq!(first.reason(), "staging stopped: the restore failed");
        assert!(Error::first(Vec::new()).is_none());
    }
}
