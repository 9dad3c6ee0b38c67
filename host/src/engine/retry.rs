//! One retry helper for every call to an end that may meet a passing fault: describe, commit,
//! abort, create (with its Idempotency-Key), DDL. Only errors the end marks retriable (it
//! was away, overloaded or restarting) are retried; an answer is final.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::fence::{Fence, Lost};
use crate::milvus;

/// First pause after a retriable error; doubles up to [`MAX_BACKOFF`]. milvus-backup's
/// `retry.Do` uses the same 200 ms start and 3 s cap.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
pub const MAX_BACKOFF: Duration = Duration::from_secs(3);

/// Bound on each call's retries (DDL, creates, looks, recovery) when the job sets no timeout.
pub const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(600);

/// Calls `op` until it succeeds, fails with a final answer, or `deadline` passes.
pub async fn retry<T, F, Fut>(deadline: Instant, op: F) -> Result<T, milvus::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, milvus::Error>>,
{
    retrying(deadline, None, op)
        .await
        .expect("no fence, so never lost")
}

/// [`retry`] for a call that changes an end: `fence` is asked before every attempt, not
/// only the first. An end that is away for a while (a restart) stretches the time between
/// a check and its call to the whole wait; a host paused during that wait, or whose claim
/// lapsed meanwhile, would otherwise send the call after another host took the restore
/// over (fault runner seed 766 of the fleet range: a recovery's drop, retried across a
/// target restart and a pause, dropped the collection the next attempt had committed).
pub async fn fenced<T, F, Fut>(
    deadline: Instant,
    fence: &dyn Fence,
    op: F,
) -> Result<Result<T, milvus::Error>, Lost>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, milvus::Error>>,
{
    retrying(deadline, Some(fence), op).await
}

async fn retrying<T, F, Fut>(
    deadline: Instant,
    fence: Option<&dyn Fence>,
    mut op: F,
) -> Result<Result<T, milvus::Error>, Lost>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, milvus::Error>>,
{
    let mut backoff = FIRST_BACKOFF;
    loop {
        if let Some(fence) = fence {
            fence.check().await?;
        }
        match op().await {
            Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                tracing::debug!(error = %e, ?backoff, "retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            other => return Ok(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::future::BoxFuture;

    use super::*;
    use crate::journal::RestoreId;

    /// Holds the claim for its first `holds` checks, then loses it.
    struct Lapsing {
        holds: usize,
        checks: AtomicUsize,
    }

    impl Fence for Lapsing {
        fn send_by(&self) -> Option<std::time::Instant> {
            None
        }

        fn check(&self) -> BoxFuture<'_, Result<(), Lost>> {
            let n = self.checks.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if n < self.holds {
                    Ok(())
                } else {
                    Err(Lost {
                        id: RestoreId::new("j", "abc", 1),
                        reason: "the lease expired".into(),
                    })
                }
            })
        }
    }

    fn away() -> milvus::Error {
        milvus::Error::Unreachable {
            end: "t".into(),
            uri: "http://t:19530".into(),
            source: "restarting".into(),
        }
    }

    /// Seed 766: a call retried while the end restarts asks the fence before every try, so
    /// a claim that lapses during the outage stops the call instead of sending it late.
    #[tokio::test(start_paused = true)]
    async fn a_fenced_call_asks_before_every_try_and_stops_once_the_claim_lapsed() {
        let fence = Lapsing {
            holds: 2,
            checks: AtomicUsize::new(0),
        };
        let calls = AtomicUsize::new(0);
        let deadline = Instant::now() + Duration::from_secs(600);
        let result = fenced(deadline, &fence, || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(away()) }
        })
        .await;
        assert!(result.is_err(), "lost, not an end's error");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "two tries while the claim held"
        );
        assert_eq!(fence.checks.load(Ordering::SeqCst), 3);

        let holding = Lapsing {
            holds: usize::MAX,
            checks: AtomicUsize::new(0),
        };
        let answered = fenced(deadline, &holding, || async { Ok::<_, milvus::Error>(7) }).await;
        assert_eq!(answered.map(|r| r.ok()), Ok(Some(7)));
    }
}
