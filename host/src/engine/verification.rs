//! The stage after the commit: what a query on every end sees of the committed collections,
//! held to the live rows the backup's data holds (`[verify]`, DESIGN.md §1). The asking is
//! [`crate::verify`]'s, shared with `lockstep verify`; this stage chooses what is asked and
//! says what the answers mean for the outcome.

use super::attempt::Attempt;
use super::faults;
use super::fence::Fence;
use super::preflight::Preflight;
use super::report::Report;
use crate::backup::sample;
use crate::job::{Job, VerifyRows};
use crate::journal::{RecordedLive, RecordedVerify};
use crate::verify::{self, Verification};

/// Where the sampled keys' rows are read from: the backup, as preflight read and planned it,
/// and how many keys of each collection.
#[derive(Clone, Copy)]
pub(super) struct Sampler<'a> {
    pub preflight: &'a Preflight,
    pub keys: usize,
}

/// Counts every committed collection whose live rows are known on every end (and compares
/// its sample, with `rows = "sample"`), once the fence passed (loading is an action on the
/// target); `None` when `[verify]` is off, nothing was committed, or the host lost the
/// restore.
pub(super) async fn run(
    attempt: &Attempt<'_>,
    job: &Job,
    report: &Report,
    preflight: &Preflight,
) -> Option<Verification> {
    if job.verify.rows == VerifyRows::Off {
        return None;
    }
    let sampler = job.verify.sample.map(|keys| Sampler { preflight, keys });
    ask(attempt, job.verify.timeout, report, sampler).await
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

/// Counts the report's committed collections on every end (and compares their samples, with
/// a `sampler`), waiting up to `timeout` for each to load.
pub(super) async fn ask(
    attempt: &Attempt<'_>,
    timeout: std::time::Duration,
    report: &Report,
    sampler: Option<Sampler<'_>>,
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
    let mut verification = Verification::default();
    for collection in &expected {
        let sample = match sampler {
            Some(sampler) => Some(read_sample(sampler, &collection.collection).await),
            None => None,
        };
        let sample_read = sample.as_ref().map(|s| s.as_ref().ok());
        let mut shown = verify::collection(&ends, collection, sample_read.flatten(), timeout).await;
        if let Some(Err(why)) = sample {
            for s in &mut shown {
                s.unverifiable.get_or_insert_with(|| {
                    format!("its sample cannot be read from the backup: {why}")
                });
            }
        }
        verification.shown.extend(shown);
    }
    Some(verification)
}

/// The sample of the planned collection restored as `target`, read from the backup.
async fn read_sample(
    sampler: Sampler<'_>,
    target: &crate::backup::Namespace,
) -> Result<sample::Sample, String> {
    let Preflight {
        backup_store,
        backup,
        plan,
        ..
    } = sampler.preflight;
    let collection = (plan.collections.iter())
        .find(|c| c.target == *target)
        .ok_or_else(|| format!("{target} is not in the plan"))?;
    let staged = &plan.files_to_stage;
    sample::sample(
        backup_store.store.as_ref(),
        backup,
        staged,
        collection,
        sampler.keys,
    )
    .await
    .map_err(|e| e.to_string())
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
            sample: None,
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
