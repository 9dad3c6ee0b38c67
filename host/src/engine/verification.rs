//! The stage after the commit: what a query on every end sees of the committed collections,
//! held to the live rows the backup's data holds (`[verify]`, DESIGN.md §1). The asking is
//! [`crate::verify`]'s, shared with `lockstep verify`; this stage chooses what is asked and
//! says what the answers mean for the outcome.

use super::attempt::Attempt;
use super::faults;
use super::fence::Fence;
use super::report::Report;
use crate::job::{Job, VerifyRows};
use crate::verify::{self, Verification};

/// Counts every committed collection whose live rows are known on every end, once the fence
/// passed (loading is an action on the target); `None` when `[verify]` is off, nothing was
/// committed, or the host lost the restore.
pub(super) async fn run(attempt: &Attempt<'_>, job: &Job, report: &Report) -> Option<Verification> {
    if job.verify.rows == VerifyRows::Off || faults::planted(faults::Bug::SkipVerify) {
        return None;
    }
    // The report's targets are namespaces written out: one that does not read back is a
    // report this restore did not make, and nothing is asked.
    let expected = report.to_verify().unwrap_or_default();
    if expected.is_empty() || attempt.check().await.is_err() {
        return None;
    }
    let ends = attempt.ends.to_verify();
    tracing::info!(
        collections = expected.len(),
        "verifying what a query on every end sees"
    );
    Some(verify::count(&ends, &expected, job.verify.timeout).await)
}

/// The collections `verification` found some end showing with other rows, and those it
/// could not ask about, in the words of the summary; none when nothing was asked.
pub(super) fn findings(verification: Option<&Verification>) -> (Vec<String>, Vec<String>) {
    let Some(verification) = verification else {
        return Default::default();
    };
    let wrong = (verification.mismatches())
        .map(|s| {
            let live = s.live.map_or("?".into(), |n| n.to_string());
            let shows = s.shows.map_or("?".into(), |n| n.to_string());
            format!(
                "{}: {} shows {shows} of {live} live rows",
                s.end, s.collection
            )
        })
        .collect();
    let unverified = (verification.unverifiable())
        .map(|s| {
            let why = s.unverifiable.as_deref().unwrap_or_default();
            format!("{} on {}: {why}", s.collection, s.end)
        })
        .collect();
    (wrong, unverified)
}
