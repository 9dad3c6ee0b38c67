//! Why a restore stops before its decision, as the engine branches on it: refused (nothing
//! was imported), failed in a stage (every submitted job is aborted), or interrupted.

use crate::journal::RestorePhase;
use crate::plugins::Phase;

use super::ddl::ArrivalError;
use super::fence::Lost;
use super::refusal::Refusal;
use super::two_phase::HoldError;

/// What stopped a restore before its decision.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum Error {
    /// A rule refused it; nothing was imported.
    #[error("refused: {}", Refusal::joined(.0))]
    Refused(Vec<Refusal>),
    /// A stage failed in `phase`; every submitted job is aborted.
    #[error("{source}")]
    Failed {
        phase: RestorePhase,
        source: StageError,
    },
    /// The process was told to stop before the decision.
    #[error("interrupted before the commit decision")]
    Interrupted,
    /// This host lost its claim: it acts on nothing more, and another host resolves the
    /// restore.
    #[error("{0}")]
    Lost(Lost),
}

/// Why a stage of the restore failed. Each says what failed in the words the report and the
/// journal's abort reason carry; the engine branches on the kind, never on the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum StageError {
    /// The journal did not take a write the restore cannot go on without.
    #[error("journal: {0}")]
    Journal(String),
    #[error("DDL on the target failed: {0}")]
    Ddl(String),
    /// A collection did not arrive on a secondary within the mirror grace, or was never made.
    #[error("{0}")]
    Arrival(ArrivalError),
    /// A destination store could not be opened.
    #[error("storage of {end}: {reason}")]
    Storage { end: String, reason: String },
    #[error("staging failed: {0}")]
    Staging(String),
    /// The stage was told to stop because the restore failed elsewhere.
    #[error("staging stopped: the restore failed")]
    StagingStopped,
    /// The DDL, the stage or an arrival failed, so this group imports nothing more; the
    /// restore's own failure is theirs.
    #[error("the DDL, staging or a collection's arrival on a secondary failed")]
    GateFailed,
    #[error("import create failed: {0}")]
    Create(String),
    /// A job failed on some end, a mirror passed its grace, or the commit timeout ran out.
    #[error("{0}")]
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
    /// An end holds a job with other rows than the backup's, or did not say how many.
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
    /// A job of this group failed on some end while its creates went out.
    #[error("a job failed while the creates went out")]
    JobFailedDuringCreates,
}

impl From<super::process::Interrupted> for Error {
    fn from(_: super::process::Interrupted) -> Error {
        Error::Interrupted
    }
}

impl Error {
    /// The failure `source`, in `phase`.
    pub fn failed(phase: RestorePhase, source: StageError) -> Error {
        Error::Failed { phase, source }
    }

    /// The journal's and the report's words for it.
    pub fn reason(&self) -> String {
        match self {
            Error::Refused(r) => Refusal::joined(r),
            _ => self.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reads_as_its_stage_says_and_a_refusal_as_its_rules() {
        let failed = Error::failed(RestorePhase::Holding, StageError::GateFailed);
        assert_eq!(
            failed.reason(),
            "the DDL, staging or a collection's arrival on a secondary failed"
        );
        let journal = Error::failed(RestorePhase::Ddl, StageError::Journal("disk full".into()));
        assert_eq!(journal.reason(), "journal: disk full");
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
}
