//! One retry helper for every call to an end that may meet a passing fault: describe, commit,
//! abort, create (with its Idempotency-Key), DDL. Only errors the end marks retriable (it
//! was away, overloaded or restarting) are retried; an answer is final.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::milvus;

/// First pause after a retriable error; doubles up to [`MAX_BACKOFF`]. milvus-backup's
/// `retry.Do` uses the same 200 ms start and 3 s cap.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
pub const MAX_BACKOFF: Duration = Duration::from_secs(3);

/// Bound on DDL and on each control call's retries when the job sets no timeout.
pub const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(600);

/// Calls `op` until it succeeds, fails with a final answer, or `deadline` passes.
pub async fn retry<T, F, Fut>(deadline: Instant, mut op: F) -> Result<T, milvus::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, milvus::Error>>,
{
    let mut backoff = FIRST_BACKOFF;
    loop {
        match op().await {
            Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                tracing::debug!(error = %e, ?backoff, "retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            other => return other,
        }
    }
}
