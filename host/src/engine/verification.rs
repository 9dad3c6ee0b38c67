//! The stage after the commit: what a query on every end sees of the committed collections,
//! held to the live rows the backup's data holds (`[verify]`, DESIGN.md §1). The asking is
//! [`crate::verify`]'s, shared with `lockstep verify`; this stage chooses what is asked and
//! says what the answers mean for the outcome.

use super::attempt::Attempt;
use super::faults;
use super::fence::Fence;
use super::preflight::Preflight;
use super::report::{self, CollectionReport};
use crate::job::{Job, VerifyRows};
use crate::journal::{RecordedLive, RecordedVerify};
use crate::verify::{self, Verification};

/// Counts every committed collection whose live rows are known on every end (and compares
/// its sample, with `rows = "sample"`), once the fence passed (loading is an action on the
/// target); `None` when `[verify]` is off, nothing was committed, or the host lost the
/// restore.
pub(super) async fn run(
    attempt: &Attempt<'_>,
    job: &Job,
    collections: &[CollectionReport],
    preflight: &Preflight,
) -> Option<Verification> {
    if job.verify.rows == VerifyRows::Off {
        return None;
    }
    let sampler = job.verify.sample.map(|keys| verify::Sampler {
        store: preflight.backup_store.store.as_ref(),
        backup: &preflight.backup,
        plan: &preflight.plan,
        keys,
    });
    ask(attempt, job.verify.timeout, collections, sampler.as_ref()).await
}

/// What the job's `[verify]` asks, for the record: a recovery that rolls the restore
/// forward asks it too, without the job.
pub(super) fn recorded(job: &Job, collections: &[CollectionReport]) -> Option<RecordedVerify> {
    (job.verify.rows != VerifyRows::Off).then(|| RecordedVerify {
        timeout_ms: u64::try_from(job.verify.timeout.as_millis()).unwrap_or(u64::MAX),
        required: job.verify.required,
        sample: job.verify.sample,
        collections: (collections.iter())
            .map(|c| RecordedLive {
                target: c.target.clone(),
                source: c.source.clone(),
                live: c.live,
                live_by_partition: c.live_by_partition.clone(),
            })
            .collect(),
    })
}

/// What a recovery that rolled the restore forward asks, as the record says the run would
/// have: the count, and the sample where the job is at hand to read the backup again. A
/// sample that cannot be asked says so on each collection, and how to ask it.
pub(super) async fn ask_recorded(
    attempt: &Attempt<'_>,
    asked: &RecordedVerify,
    collections: &[CollectionReport],
) -> Option<Verification> {
    let timeout = std::time::Duration::from_millis(asked.timeout_ms);
    let Some(keys) = asked.sample else {
        return ask(attempt, timeout, collections, None).await;
    };
    let reopened = match attempt.job {
        Some(job) => {
            let b = &job.backup;
            verify::Reopened::open(&b.storage, &b.root, &b.name)
                .await
                .map_err(|e| crate::diagnostic::error_chain(&e))
        }
        None => Err("recovered without its job".to_owned()),
    };
    let sampler = reopened.as_ref().ok().map(|r| r.sampler(keys));
    let mut verification = ask(attempt, timeout, collections, sampler.as_ref()).await;
    if let (Err(why), Some(verification)) = (reopened, verification.as_mut()) {
        let why = format!(
            "its sample was not compared ({why}); `lockstep verify --sample {keys}` compares it"
        );
        for shown in &mut verification.shown {
            shown.unverifiable.get_or_insert_with(|| why.clone());
        }
    }
    verification
}

/// Counts the committed ones of `collections` on every end (and compares their samples, with
/// a `sampler`), waiting up to `timeout` for each to load.
pub(super) async fn ask(
    attempt: &Attempt<'_>,
    timeout: std::time::Duration,
    collections: &[CollectionReport],
    sampler: Option<&verify::Sampler<'_>>,
) -> Option<Verification> {
    if faults::planted(faults::Bug::SkipVerify) {
        return None;
    }
    // The report's targets are namespaces written out: one that does not read back is a
    // report this restore did not make, and nothing is asked.
    let expected = report::to_verify(collections).unwrap_or_default();
    if expected.is_empty() || attempt.check().await.is_err() {
        return None;
    }
    let ends = attempt.ends.to_verify();
    tracing::info!(
        collections = expected.len(),
        "verifying what a query on every end sees"
    );
    Some(verify::run(&ends, &expected, sampler, timeout).await)
}

/// The collections `verification` found some end showing with other rows, and those it
/// could not ask about, in the words of the summary; none when nothing was asked.
pub(super) fn findings(verification: Option<&Verification>) -> (Vec<String>, Vec<String>) {
    let Some(verification) = verification else {
        return Default::default();
    };
    let wrong = (verification.mismatches())
        .map(|s| {
            if s.gone {
                return format!(
                    "{}: {} is gone, dropped after its commit",
                    s.end, s.collection
                );
            }
            let live = s.live.map_or("?".into(), |n| n.to_string());
            let shows = s.shows.map_or("?".into(), |n| n.to_string());
            match s.sample.as_ref().filter(|_| s.shows == s.live) {
                Some(sample) if sample.differences > 0 => format!(
                    "{}: {} shows a sampled row other than the backup holds ({} difference(s)); {}",
                    s.end,
                    s.collection,
                    sample.differences,
                    sample.first.first().map_or("", String::as_str)
                ),
                _ => format!(
                    "{}: {} shows {shows} of {live} live rows",
                    s.end, s.collection
                ),
            }
        })
        .collect();
    let unverified = (verification.unverified().iter())
        .map(ToString::to_string)
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
            gone: false,
            sample: None,
        }
    }

    /// A collection an end says does not exist after its commit is a divergence said in
    /// those words, not a collection left unverified.
    #[test]
    fn a_collection_gone_after_its_commit_is_named_as_gone() {
        let verification = Verification {
            shown: vec![
                Shown {
                    gone: true,
                    shows: None,
                    ..shown("t", "default.c", None, 0)
                },
                shown("s1", "default.c", None, 10),
            ],
        };
        assert!(!verification.passed());
        let (wrong, unverified) = findings(Some(&verification));
        assert_eq!(wrong, ["t: default.c is gone, dropped after its commit"]);
        assert!(unverified.is_empty(), "{unverified:?}");
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

    /// A reason shared by many collections (no index anywhere) is one line, naming the
    /// first few collections and how many more.
    #[test]
    fn one_reason_on_many_collections_is_one_line() {
        let shown: Vec<Shown> = (0..8)
            .flat_map(|c| {
                let collection = format!("default.c{c}");
                ["t", "s1"].map(|end| shown(end, &collection, Some("no vector index"), 0))
            })
            .collect();
        let (_, unverified) = findings(Some(&Verification { shown }));
        assert_eq!(
            unverified,
            [
                "default.c0, default.c1, default.c2, default.c3, default.c4 and 3 more on t, \
                 s1: no vector index"
            ]
        );
    }
}
