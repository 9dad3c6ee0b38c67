//! Preflight's look at each secondary's replication: is it moving?
//!
//! A replication can stop while the configuration still names it (milvus#52727: after a
//! standby is seeded, the replicator replays a stale configuration and stops). The topology
//! then looks healthy, and without this check the restore would find out only when a mirror
//! fails to appear within `mirror_grace`, after the target had imported everything.
//!
//! A secondary's `GetReplicateInfo` answers, per pchannel of its source, the time tick up to
//! which it has applied the source's messages. The source's WAL carries a time tick every few
//! hundred milliseconds even when nothing is written, so on a live replication each
//! pchannel's checkpoint moves within a second or so. This stage first asks the source for a
//! timestamp (`AllocTimestamp`, from the clock those ticks come from), then reads every
//! checkpoint: one within [`RECENT`] of that timestamp was applied a moment ago, and is not
//! waited for. The others are read again until each has moved, for at most [`PROBE`]; one
//! that has not moved by then is refused by name, with how far behind it stands. Either way a
//! replication that stopped just now passes, as it would if it stopped just after the probe:
//! what the probe catches is one that stopped and stayed stopped (milvus#52727), and what it
//! saves a live one is the wait for the next tick (up to 200 ms on Milvus).

use std::time::Duration;

use futures::future::join_all;
use milvus_proto::common::MilvusCluster;

use super::ends::EndClient;
use super::refusal::Refusal;
use crate::milvus::ReplicateProgress;

/// How long a checkpoint has to move: several of Milvus's time-tick intervals, and short
/// enough that a refusal comes before anything else would have been done.
const PROBE: Duration = Duration::from_secs(5);
/// The first wait before the checkpoints are read again; each wait after it is twice the
/// one before, up to [`POLL`]. A checkpoint that already moves is seen sooner than at a
/// full poll, which a restore would wait out whole whenever its backup is read faster.
const FIRST_POLL: Duration = Duration::from_millis(25);
/// How often the checkpoints are read again while some have not moved.
const POLL: Duration = Duration::from_millis(200);
/// How far behind the source's clock a checkpoint may stand and count as moving without a
/// wait: five of Milvus's time-tick intervals. A stream that lags more is watched move.
const RECENT: Duration = Duration::from_secs(1);

/// Every secondary whose replication from `source` (whose end is `primary`) is not moving,
/// as refusals. A server without `GetReplicateInfo` cannot say, and is let through with a
/// warning.
pub async fn stalled(
    source: &MilvusCluster,
    primary: &EndClient,
    secondaries: &[EndClient],
) -> Vec<Refusal> {
    // Asked before any checkpoint is read, so that a recent one is recent against it. A
    // source without the call has every checkpoint watched move.
    let now = match primary.grpc.alloc_timestamp().await {
        Ok(now) => Some(now),
        Err(e) => {
            tracing::debug!(error = %e, "no timestamp from the source: every checkpoint is watched move");
            None
        }
    };
    join_all(secondaries.iter().map(|s| probe(source, now, s)))
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// One secondary: its checkpoints once, then again until every one that was not recent
/// against `now` (the source's clock before the first read) has moved.
async fn probe(source: &MilvusCluster, now: Option<u64>, secondary: &EndClient) -> Option<Refusal> {
    let read = |pchannels: Vec<(String, u64)>| async move {
        let answers = join_all(
            pchannels
                .iter()
                .map(|(p, _)| secondary.grpc.replicate_progress(&source.cluster_id, p)),
        )
        .await;
        pchannels.into_iter().zip(answers).collect::<Vec<_>>()
    };
    let start = tokio::time::Instant::now();
    let mut waiting = Vec::new();
    let all = source.pchannels.iter().map(|p| (p.clone(), 0)).collect();
    for ((pchannel, _), answer) in read(all).await {
        match answer {
            Ok(ReplicateProgress::At(tick)) if now.is_some_and(|now| recent(tick, now)) => {}
            Ok(ReplicateProgress::At(tick)) => waiting.push((pchannel, tick)),
            Ok(ReplicateProgress::NotReplicating) => {
                return Some(Refusal::NoCheckpoint {
                    secondary: secondary.name.clone(),
                    from: source.cluster_id.clone(),
                    pchannel,
                });
            }
            Ok(ReplicateProgress::Unsupported) => {
                tracing::warn!(
                    secondary = %secondary.name,
                    "the secondary has no GetReplicateInfo; cannot tell whether its replication moves"
                );
                return None;
            }
            Err(e) => {
                return Some(Refusal::StreamUnreadable {
                    secondary: secondary.name.clone(),
                    reason: e.to_string(),
                });
            }
        }
    }
    let mut pause = FIRST_POLL;
    while !waiting.is_empty() {
        if start.elapsed() >= PROBE {
            return Some(stalled_refusal(
                source,
                secondary,
                &waiting,
                start.elapsed(),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(POLL);
        let mut still = Vec::new();
        for ((pchannel, first), answer) in read(waiting).await {
            match answer {
                Ok(ReplicateProgress::At(tick)) if tick > first => {}
                // An answer that fails now, after one that did not, is read again: only a
                // checkpoint that stands still for the whole probe refuses.
                _ => still.push((pchannel, first)),
            }
        }
        waiting = still;
    }
    None
}

/// Whether time tick `tick` stands within [`RECENT`] of time tick `now`.
fn recent(tick: u64, now: u64) -> bool {
    millis(now).saturating_sub(millis(tick)) <= RECENT.as_millis() as u64
}

/// A time tick's physical part: milliseconds since the epoch, shifted left 18 bits.
fn millis(tick: u64) -> u64 {
    tick >> 18
}

fn stalled_refusal(
    source: &MilvusCluster,
    secondary: &EndClient,
    waiting: &[(String, u64)],
    waited: Duration,
) -> Refusal {
    let oldest = waiting.iter().map(|(_, tick)| *tick).min().unwrap_or(0);
    let at = jiff::Timestamp::from_millisecond(millis(oldest) as i64).ok();
    let behind = match at {
        Some(at) => {
            let secs = jiff::Timestamp::now().duration_since(at).as_secs();
            format!("at {at:.0}, {secs} s behind this host's clock")
        }
        None => format!("at time tick {oldest}"),
    };
    Refusal::StreamStalled {
        secondary: secondary.name.clone(),
        from: source.cluster_id.clone(),
        pchannels: waiting.iter().map(|(p, _)| p.clone()).collect(),
        behind,
        waited_ms: waited.as_millis() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_recent_up_to_a_second_behind_the_source() {
        let at = |ms: u64| ms << 18;
        let now = at(1_764_000_000_000) | 7;
        assert!(recent(now, now));
        assert!(recent(at(1_764_000_000_000 - 1000), now));
        assert!(!recent(at(1_764_000_000_000 - 1001), now));
        // The logical part counts for nothing, and a tick read after the timestamp is ahead.
        assert!(recent(at(1_764_000_000_000 + 5) | 0x3ffff, now));
    }
}
