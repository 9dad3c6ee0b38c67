//! The stage after the commit: what a query on every end sees of the committed collections,
//! held to the live rows the backup's data holds (`[verify]`, DESIGN.md §1). The asking is
//! [`crate::verify`]'s, shared with `lockstep verify`; this stage chooses what is asked and
//! says what the answers mean for the outcome.

use super::attempt::Attempt;
use super::faults;
use super::fence::Fence;
use super::report::Report;
use crate::job::{Job, VerifyRows};
use crate::journal::{RecordedLive, RecordedVerify};
use crate::verify::{self, Verification};

/// Counts every committed collection whose live rows are known on every end, once the fence
/// passed (loading is an action on the target); `None` when `[verify]` is off, nothing was
/// committed, or the host lost the restore.
pub(super) async fn run(attempt: &Attempt<'_>, job: &Job, report: &Report) -> Option<Verification> {
    if job.verify.rows == VerifyRows::Off {
        return None;
    }
    ask(attempt, job.verify.timeout, report).await
}

/// What the job's `[verify]` asks, for the record: a recovery that rolls the restore
/// forward asks it too, without the job.
pub(super) fn recorded(job: &Job, report: &Report) -> Option<RecordedVerify> {
    (job.verify.rows != VerifyRows::Off).then(|| RecordedVerify {
        timeout_ms: u64::try_from(job.verify.timeout.as_millis()).unwrap_or(u64::MAX),
        collections: (report.collections.iter())
            .map(|c| RecordedLive {
                target: c.target.clone(),
                live: c.live,
                live_by_partition: c.live_by_partition.clone(),
            })
            .collect(),
    })
}

/// Counts the report's committed collections on every end, waiting up to `timeout` for
/// each to load.
pub(super) async fn ask(
    attempt: &Attempt<'_>,
    timeout: std::time::Duration,
    report: &Report,
) -> Option<Verification> {
    if faults::planted(faults::Bug::SkipVerify) {
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
    Some(verify::count(&ends, &expected, timeout).await)
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
    // One reason that holds on several ends (a missing index stops the load everywhere) is
    // said once, naming them.
    let mut grouped: Vec<((&str, &str), Vec<&str>)> = Vec::new();
    for s in verification.unverifiable() {
        let key = (
            s.collection.as_str(),
            s.unverifiable.as_deref().unwrap_or_default(),
        );
        match grouped.iter_mut().find(|(k, _)| *k == key) {
            Some((_, ends)) => ends.push(&s.end),
            None => grouped.push((key, vec![&s.end])),
        }
    }
    let unverified = grouped
        .into_iter()
        .map(|((collection, why), ends)| format!("{collection} on {}: {why}", ends.join(", ")))
        .collect();
    (wrong, unverified)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Shown;

    fn shown(end: &str, collection: &str, unverifiable: Option<&str>, shows: i64) -> Shown {
        Shown {
            end: end.into(),
            collection: collection.into(),
            live: Some(10),
            shows: unverifiable.is_none().then_some(shows),
            partitions_differ: vec![],
            unverifiable: unverifiable.map(str::to_owned),
        }
    }

    #[test]
    fn one_reason_on_several_ends_is_said_once_naming_them() {
        let verification = Verification {
            shown: vec![
                shown("a", "default.c", Some("no vector index"), 0),
                shown("b", "default.c", Some("no vector index"), 0),
                shown("b", "default.d", Some("unreachable"), 0),
                shown("a", "default.d", None, 9),
            ],
        };
        let (wrong, unverified) = findings(Some(&verification));
        assert_eq!(wrong, ["a: default.d shows 9 of 10 live rows"]);
        assert_eq!(
            unverified,
            [
                "default.c on a, b: no vector index",
                "default.d on b: unreachable"
            ]
        );
    }
}
