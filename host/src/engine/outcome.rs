//! How a restore ended: one function from what the engine found to the outcome and the line
//! a person reads first. A run, a recovery and every strategy end here, so the same facts
//! always give the same exit code.

use crate::journal::{Outcome, RestoreId};

use super::refusal::Refusal;
use super::report::Divergence;

/// Where a refused restore was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedAt {
    /// By preflight, which only reads.
    Preflight,
    /// Before or after preflight, by a rule something else told: a plugin that does not
    /// load, an end the job's URIs do not reach, a create an end refused.
    Elsewhere,
}

/// A refused restore: [`Outcome::Refused`] and its reasons in one line.
pub fn refused(at: RefusedAt, refusals: &[Refusal]) -> (Outcome, String) {
    let by = match at {
        RefusedAt::Preflight => "refused by preflight",
        RefusedAt::Elsewhere => "refused",
    };
    (
        Outcome::Refused,
        format!("{by}: {}", Refusal::joined(refusals)),
    )
}

/// An attempt whose claim went to another host, whatever it found: the record, and the
/// restore's end, are the new holder's.
pub fn lost(lost: &super::fence::Lost) -> (Outcome, String) {
    (Outcome::Lost, lost.to_string())
}

/// A meta-only restore that made every collection on the target and saw it on every
/// secondary.
pub fn meta_only() -> (Outcome, String) {
    (
        Outcome::Succeeded,
        "meta only: collections created on the target and present on every secondary".into(),
    )
}

/// What a restore came to.
#[derive(Debug, Default)]
pub struct Facts<'a> {
    /// Why it stopped before (some of) its decisions; `None` if nothing failed.
    pub failure: Option<String>,
    /// Collections whose every row is visible on every end.
    pub visible: Vec<String>,
    /// Collections with some rows visible and not all (auto-commit imports that came up
    /// short or failed part-way), each with what it shows, e.g. `default.c (20 of 30 rows)`.
    pub partly_visible: Vec<String>,
    pub divergences: &'a [Divergence],
    /// Committed collections a query on some end shows with other rows than the backup's
    /// data holds, e.g. `s1: default.c shows 3989 of 3990 live rows`.
    pub shown_wrong: Vec<String>,
    /// Committed collections some end could not be asked about, with why.
    pub unverified: Vec<String>,
    /// `[verify] required`: what could not be asked makes the restore `unverified`.
    pub verify_required: bool,
    /// What did not converge: ends that did not settle an abort, commit groups that did not
    /// complete in time.
    pub unconverged: Vec<String>,
    /// For the summary of a success.
    pub collections: usize,
    pub jobs: usize,
    pub ends: usize,
}

/// The outcome and its summary. `id` is named where `lockstep recover` is the way on.
pub fn decide(facts: &Facts<'_>, id: &RestoreId) -> (Outcome, String) {
    if !facts.unconverged.is_empty() {
        return (
            Outcome::Incomplete,
            format!(
                "not every end converged: {}; `lockstep recover {id}` continues it",
                facts.unconverged.join("; ")
            ),
        );
    }
    let diverged = || {
        let mut parts = Vec::new();
        if !facts.divergences.is_empty() {
            let mut ends: Vec<&str> = facts.divergences.iter().map(|d| d.end.as_str()).collect();
            ends.sort_unstable();
            ends.dedup();
            parts.push(format!(
                "{} job(s) not confirmed visible on {}",
                facts.divergences.len(),
                ends.join(", ")
            ));
        }
        if !facts.shown_wrong.is_empty() {
            parts.push(format!(
                "a query shows other rows than the backup holds: {}",
                facts.shown_wrong.join("; ")
            ));
        }
        parts.join("; ")
    };
    let any_diverged = !facts.divergences.is_empty() || !facts.shown_wrong.is_empty();
    if let Some(reason) = &facts.failure {
        if facts.visible.is_empty() && facts.partly_visible.is_empty() {
            return (Outcome::RolledBack, reason.clone());
        }
        let mut summary = reason.clone();
        if !facts.visible.is_empty() {
            summary.push_str(&format!(
                "; committed before the failure and visible on every end: {}",
                facts.visible.join(", ")
            ));
        }
        if !facts.partly_visible.is_empty() {
            summary.push_str(&format!(
                "; partly visible: {}",
                facts.partly_visible.join(", ")
            ));
        }
        if !any_diverged {
            return (Outcome::PartlyCommitted, summary);
        }
        return (Outcome::Diverged, format!("{summary}; {}", diverged()));
    }
    if any_diverged {
        return (
            Outcome::Diverged,
            format!("committed on the target; {}", diverged()),
        );
    }
    let restored = format!(
        "restored {} collection(s) in {} import job(s), visible on {} end(s)",
        facts.collections, facts.jobs, facts.ends
    );
    // What is not verified comes first: a reader of the first words must not take it for
    // verified.
    if facts.unverified.is_empty() {
        return (Outcome::Succeeded, restored);
    }
    let summary = format!(
        "NOT VERIFIED by a query: {}; {restored} (the jobs' own counts)",
        facts.unverified.join("; ")
    );
    match facts.verify_required {
        true => (Outcome::Unverified, summary),
        false => (Outcome::Succeeded, summary),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_where_it_was_stopped_and_every_reason() {
        let refusals = [
            Refusal::Rbac,
            Refusal::Busy {
                id: "r".into(),
                holder: "h".into(),
            },
        ];
        let (outcome, summary) = refused(RefusedAt::Preflight, &refusals);
        assert_eq!(outcome, Outcome::Refused);
        assert_eq!(
            summary,
            format!("refused by preflight: {}", Refusal::joined(&refusals))
        );
        let (_, summary) = refused(RefusedAt::Elsewhere, &refusals[..1]);
        assert_eq!(summary, format!("refused: {}", refusals[0]));
        assert_eq!(meta_only().0, Outcome::Succeeded);
    }

    fn id() -> RestoreId {
        RestoreId::new("orders", "0123456789ab", 1)
    }

    fn divergence(end: &str) -> Divergence {
        Divergence {
            end: end.into(),
            job_id: "7".into(),
            collection: "default.c".into(),
            reason: "failed".into(),
        }
    }

    /// Rows a query shows otherwise than the backup's data holds make a committed restore
    /// diverged, naming the end; a collection that could not be asked is said, and changes
    /// nothing.
    #[test]
    fn a_query_that_shows_other_rows_diverges_and_one_not_asked_is_said() {
        let facts = Facts {
            visible: vec!["default.c".into()],
            shown_wrong: vec!["s1: default.c shows 3989 of 3990 live rows".into()],
            collections: 1,
            jobs: 1,
            ends: 2,
            ..Facts::default()
        };
        let (outcome, summary) = decide(&facts, &id());
        assert_eq!(outcome, Outcome::Diverged);
        assert_eq!(
            summary,
            "committed on the target; a query shows other rows than the backup holds: s1: \
             default.c shows 3989 of 3990 live rows"
        );
        let facts = Facts {
            visible: vec!["default.c".into()],
            unverified: vec!["default.c on t: no vector index".into()],
            collections: 1,
            jobs: 1,
            ends: 2,
            ..Facts::default()
        };
        let (outcome, summary) = decide(&facts, &id());
        assert_eq!(outcome, Outcome::Succeeded);
        assert!(
            summary.starts_with("NOT VERIFIED by a query: default.c on t: no vector index; "),
            "{summary}"
        );
    }

    /// With `[verify] required`, a collection not asked about makes the restore
    /// `unverified` (exit 4), said the same way.
    #[test]
    fn not_verified_where_verification_is_required_is_unverified() {
        let facts = |verify_required| Facts {
            visible: vec!["default.c".into()],
            unverified: vec!["default.c on t: no vector index".into()],
            verify_required,
            collections: 1,
            jobs: 1,
            ends: 2,
            ..Facts::default()
        };
        let (outcome, summary) = decide(&facts(true), &id());
        assert_eq!((outcome, outcome.exit_code()), (Outcome::Unverified, 4));
        assert_eq!(summary, decide(&facts(false), &id()).1);
        let verified = Facts {
            unverified: vec![],
            ..facts(true)
        };
        assert_eq!(decide(&verified, &id()).0, Outcome::Succeeded);
    }

    #[test]
    fn nothing_wrong_is_a_success_that_counts_what_it_restored() {
        let facts = Facts {
            visible: vec!["default.c".into()],
            collections: 1,
            jobs: 3,
            ends: 2,
            ..Facts::default()
        };
        let (outcome, summary) = decide(&facts, &id());
        assert_eq!(outcome, Outcome::Succeeded);
        assert_eq!(
            summary,
            "restored 1 collection(s) in 3 import job(s), visible on 2 end(s)"
        );
    }

    #[test]
    fn a_failure_with_nothing_visible_is_a_rollback() {
        let facts = Facts {
            failure: Some("job 7 failed on b".into()),
            ..Facts::default()
        };
        assert_eq!(
            decide(&facts, &id()),
            (Outcome::RolledBack, "job 7 failed on b".into())
        );
    }

    #[test]
    fn a_failure_after_some_data_became_visible_is_partly_committed() {
        let committed = Facts {
            failure: Some("boom".into()),
            visible: vec!["default.a".into()],
            ..Facts::default()
        };
        let (outcome, summary) = decide(&committed, &id());
        assert_eq!(outcome, Outcome::PartlyCommitted);
        assert!(
            summary.ends_with("visible on every end: default.a"),
            "{summary}"
        );
        let short = Facts {
            failure: Some("row accounting failed".into()),
            partly_visible: vec!["default.c (20 of 30 rows)".into()],
            ..Facts::default()
        };
        let (outcome, summary) = decide(&short, &id());
        assert_eq!(outcome, Outcome::PartlyCommitted);
        assert!(summary.ends_with("partly visible: default.c (20 of 30 rows)"));
    }

    #[test]
    fn divergence_outranks_a_partial_commit_and_names_every_end_once() {
        let divergences = [divergence("b"), divergence("c"), divergence("b")];
        let after_failure = Facts {
            failure: Some("boom".into()),
            visible: vec!["default.a".into()],
            divergences: &divergences,
            ..Facts::default()
        };
        assert_eq!(decide(&after_failure, &id()).0, Outcome::Diverged);
        let plain = Facts {
            divergences: &divergences,
            ..Facts::default()
        };
        assert_eq!(
            decide(&plain, &id()),
            (
                Outcome::Diverged,
                "committed on the target; 3 job(s) not confirmed visible on b, c".into()
            )
        );
    }

    #[test]
    fn what_did_not_converge_outranks_everything_and_says_how_to_go_on() {
        let divergences = [divergence("b")];
        let facts = Facts {
            failure: Some("boom".into()),
            divergences: &divergences,
            unconverged: vec!["group restore: not Completed in time".into()],
            ..Facts::default()
        };
        let (outcome, summary) = decide(&facts, &id());
        assert_eq!(outcome, Outcome::Incomplete);
        assert!(
            summary.ends_with("`lockstep recover orders.0123456789ab.1` continues it"),
            "{summary}"
        );
    }
}
