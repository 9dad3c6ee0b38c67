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
//! pchannel's checkpoint moves within a second or so. This stage reads every checkpoint,
//! then reads again until each has moved, for at most [`PROBE`]; one that has not moved by
//! then is refused by name, with how far behind it stands.

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

/// Every secondary whose replication from `source` is not moving, as refusals. A server
/// without `GetReplicateInfo` cannot say, and is let through with a warning.
pub async fn stalled(source: &MilvusCluster, secondaries: &[EndClient]) -> Vec<Refusal> {
    join_all(secondaries.iter().map(|s| probe(source, s)))
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// One secondary: its checkpoints once, then again until every one has moved.
async fn probe(source: &MilvusCluster, secondary: &EndClient) -> Option<Refusal> {
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

fn stalled_refusal(
    source: &MilvusCluster,
    secondary: &EndClient,
    waiting: &[(String, u64)],
    waited: Duration,
) -> Refusal {
    // A time tick's physical part is milliseconds since the epoch, shifted left 18 bits.
    let oldest = waiting.iter().map(|(_, tick)| *tick).min().unwrap_or(0);
    let at = jiff::Timestamp::from_millisecond((oldest >> 18) as i64).ok();
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
