//! Watching (end, job) pairs until each reaches what the caller waits for.
//!
//! One loop serves the hold before the decision, the wait for completion after it and the
//! wait for a clean abort: the caller judges each sighting, the [`Schedule`] decides when
//! each pair is asked next and caps the describe rate.

use futures::StreamExt;
use tokio::time::Instant;

use super::ends::Ends;
use super::schedule::{FirstLook, Schedule};
use crate::milvus::{self, ImportProgress, MilvusJobId};

/// Describe calls in flight at once across all ends.
const DESCRIBES_IN_FLIGHT: usize = 32;

/// One pair to watch: a job on an end (index into [`Ends::all`]).
#[derive(Debug, Clone)]
pub struct Pair {
    pub job: MilvusJobId,
    pub end: usize,
}

/// What one describe saw.
#[derive(Debug)]
pub enum Sight {
    Seen(ImportProgress),
    /// The end does not know the job (yet, for a mirror whose ImportMsg is in flight).
    Missing,
    /// The end did not answer; the pair is asked again later.
    Unreachable(milvus::Error),
}

/// The caller's verdict on a sighting.
#[derive(Debug, PartialEq, Eq)]
pub enum Judgement {
    /// This pair is where the caller wants it; stop asking.
    Done,
    /// Not yet; ask again.
    Wait,
    /// Give up on the whole watch, for this reason.
    Stop(String),
}

/// Asks about every pair until the judge calls each one done (`Ok`) or stops the watch
/// (`Err(reason)`). `jobs` is the number of distinct jobs, for the describe budget.
pub async fn watch(
    ends: &Ends,
    pairs: &[Pair],
    jobs: usize,
    first: FirstLook,
    judge: &mut (dyn FnMut(usize, Sight, Instant) -> Judgement + Send),
) -> Result<(), String> {
    let mut schedule = Schedule::new(pairs.len(), jobs, Instant::now(), first);
    let mut remaining = pairs.len();
    while remaining > 0 {
        let due = match schedule.due(Instant::now()) {
            Ok(due) => due,
            Err(next) => {
                tokio::time::sleep_until(next).await;
                continue;
            }
        };
        let mut sightings = futures::stream::iter(due.into_iter().map(|i| {
            let pair = &pairs[i];
            let end = &ends.all()[pair.end];
            async move {
                let sight = match end.rest.describe(&pair.job).await {
                    Ok(p) => Sight::Seen(p),
                    Err(e) if e.is_job_not_found() => Sight::Missing,
                    Err(e) => Sight::Unreachable(e),
                };
                (i, sight)
            }
        }))
        .buffer_unordered(DESCRIBES_IN_FLIGHT);
        while let Some((i, sight)) = sightings.next().await {
            let now = Instant::now();
            let progress = match &sight {
                Sight::Seen(p) => p.progress,
                _ => 0,
            };
            match judge(i, sight, now) {
                Judgement::Done => {
                    schedule.finish(i);
                    remaining -= 1;
                }
                Judgement::Wait => schedule.observe(i, progress, now),
                Judgement::Stop(reason) => return Err(reason),
            }
        }
    }
    Ok(())
}
