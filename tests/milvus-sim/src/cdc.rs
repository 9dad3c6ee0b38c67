//! CDC streams: the ordered message stream from a primary to one secondary.
//!
//! The primary puts every replicated operation (DDL, ImportMsg, CommitImport, RollbackImport,
//! replication-config updates) on the stream of each of its secondaries. A stream delivers in
//! order, each message no earlier than `lag` after it was sent, and not at all while paused;
//! a lag change applies to messages already queued. Delivery itself (waiting for a restarting
//! target, applying on the secondary) is the caller's function, so this module knows nothing
//! of clusters.
//!
//! A stream also has a checkpoint, what a secondary's `GetReplicateInfo` answers: the time
//! tick up to which the secondary has everything. A primary's WAL carries a time tick every
//! few hundred milliseconds even when nothing is written, so a flowing stream's checkpoint
//! follows the clock, `lag` behind, held back only by a message still on its way. A paused
//! stream's checkpoint stands still: that is how a replication that stopped silently while
//! the configuration still names it (milvus#52727) looks from outside.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use milvus_proto::common::ReplicateConfiguration;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::catalog::DdlOp;

/// The job a secondary creates from a replicated ImportMsg: same id, same files and options.
#[derive(Debug, Clone)]
pub struct MirrorImport {
    pub job_id: i64,
    pub db_name: String,
    pub collection_name: String,
    pub collection_id: i64,
    pub partition_name: String,
    pub files: Vec<Vec<String>>,
    pub options: BTreeMap<String, String>,
}

/// One replicated operation.
#[derive(Debug, Clone)]
pub enum CdcMessage {
    Ddl(DdlOp),
    Import(MirrorImport),
    /// `commit_ts` is the time tick the primary stamped the commit with: every cluster's
    /// commit fence checks the same one (docs/milvus-facts.md §2.7).
    CommitImport {
        job_id: i64,
        commit_ts: u64,
    },
    RollbackImport {
        job_id: i64,
    },
    ReplicateConfig(ReplicateConfiguration),
}

impl CdcMessage {
    pub fn kind(&self) -> &'static str {
        match self {
            CdcMessage::Ddl(op) => op.name(),
            CdcMessage::Import(_) => "ImportMsg",
            CdcMessage::CommitImport { .. } => "CommitImport",
            CdcMessage::RollbackImport { .. } => "RollbackImport",
            CdcMessage::ReplicateConfig(_) => "AlterReplicateConfig",
        }
    }
}

/// Whether a stream delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flow {
    #[default]
    Flowing,
    Paused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Settings {
    lag: Duration,
    flow: Flow,
}

/// A stream as the control API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSnapshot {
    pub target: String,
    pub lag_ms: u64,
    pub flow: Flow,
    /// Messages put on the stream.
    pub sent: u64,
    /// Messages the secondary has applied.
    pub applied: u64,
}

/// Applies one message on the target; waits as long as the target needs (e.g. a restart).
pub type Deliver = Arc<dyn Fn(CdcMessage) -> BoxFuture<'static, ()> + Send + Sync>;

struct Queued {
    sent_at: Instant,
    message: CdcMessage,
}

/// The stream from one primary to one secondary.
pub struct CdcStream {
    target: String,
    queue: mpsc::UnboundedSender<Queued>,
    settings: watch::Sender<Settings>,
    sent: AtomicU64,
    applied: Arc<AtomicU64>,
    /// Send times of the messages not applied yet, oldest first.
    in_flight: Arc<Mutex<VecDeque<Instant>>>,
    clock: Clock,
    /// The checkpoint last answered: it never goes back, and a pause freezes it.
    checkpoint: Mutex<u64>,
    task: tokio::task::JoinHandle<()>,
}

/// Turns the stream's instants into Milvus time ticks: milliseconds since the epoch on the
/// primary's clock shifted left 18 bits, the physical part of a hybrid timestamp.
#[derive(Debug, Clone, Copy)]
struct Clock {
    started: Instant,
    started_ms: i64,
}

impl Clock {
    /// The clock of a primary whose TSO runs `offset` from the host's.
    fn now(offset: jiff::SignedDuration) -> Clock {
        Clock {
            started: Instant::now(),
            started_ms: jiff::Timestamp::now().as_millisecond() + offset.as_millis() as i64,
        }
    }

    fn tick(&self, at: Instant) -> u64 {
        let ms = match at.checked_duration_since(self.started) {
            Some(after) => self.started_ms + after.as_millis() as i64,
            None => self.started_ms - self.started.duration_since(at).as_millis() as i64,
        };
        crate::tso::from_unix_ms(ms)
    }
}

impl CdcStream {
    /// Starts the stream's delivery task; its time ticks are on the primary's clock, which
    /// runs `clock_offset` from the host's.
    pub fn start(
        target: String,
        lag: Duration,
        clock_offset: jiff::SignedDuration,
        deliver: Deliver,
    ) -> CdcStream {
        let (queue, rx) = mpsc::unbounded_channel();
        let (settings, settings_rx) = watch::channel(Settings {
            lag,
            flow: Flow::Flowing,
        });
        let applied = Arc::new(AtomicU64::new(0));
        let in_flight = Arc::new(Mutex::new(VecDeque::new()));
        let task = tokio::spawn(deliver_in_order(
            rx,
            settings_rx,
            deliver,
            applied.clone(),
            in_flight.clone(),
        ));
        let clock = Clock::now(clock_offset);
        let now = Instant::now();
        CdcStream {
            target,
            queue,
            settings,
            sent: AtomicU64::new(0),
            applied,
            in_flight,
            clock,
            checkpoint: Mutex::new(clock.tick(now.checked_sub(lag).unwrap_or(now))),
            task,
        }
    }

    /// The time tick up to which the secondary has every message: see the module's doc.
    pub fn checkpoint(&self) -> u64 {
        let settings = *self.settings.borrow();
        let mut last = self.checkpoint.lock().expect("not poisoned");
        if settings.flow == Flow::Flowing {
            let now = Instant::now();
            let mut through = now.checked_sub(settings.lag).unwrap_or(now);
            if let Some(oldest) = self.in_flight.lock().expect("not poisoned").front() {
                through = through.min(*oldest);
            }
            *last = (*last).max(self.clock.tick(through));
        }
        *last
    }

    pub fn send(&self, message: CdcMessage) {
        tracing::debug!(target = %self.target, kind = message.kind(), "cdc send");
        self.sent.fetch_add(1, Ordering::Relaxed);
        let sent_at = Instant::now();
        self.in_flight
            .lock()
            .expect("not poisoned")
            .push_back(sent_at);
        // The receiver lives as long as the task, which lives as long as this stream.
        let _ = self.queue.send(Queued { sent_at, message });
    }

    pub fn set_lag(&self, lag: Duration) {
        self.settings.send_modify(|s| s.lag = lag);
    }

    pub fn set_flow(&self, flow: Flow) {
        // The checkpoint stops where the stream stops.
        self.checkpoint();
        self.settings.send_modify(|s| s.flow = flow);
    }

    pub fn snapshot(&self) -> StreamSnapshot {
        let s = *self.settings.borrow();
        StreamSnapshot {
            target: self.target.clone(),
            lag_ms: s.lag.as_millis() as u64,
            flow: s.flow,
            sent: self.sent.load(Ordering::Relaxed),
            applied: self.applied.load(Ordering::Relaxed),
        }
    }
}

impl Drop for CdcStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn deliver_in_order(
    mut queue: mpsc::UnboundedReceiver<Queued>,
    mut settings: watch::Receiver<Settings>,
    deliver: Deliver,
    applied: Arc<AtomicU64>,
    in_flight: Arc<Mutex<VecDeque<Instant>>>,
) {
    while let Some(Queued { sent_at, message }) = queue.recv().await {
        loop {
            let current = *settings.borrow_and_update();
            let due = sent_at + current.lag;
            match current.flow {
                Flow::Paused => {}
                Flow::Flowing if Instant::now() >= due => break,
                Flow::Flowing => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(due) => break,
                        _ = settings.changed() => continue,
                    }
                }
            }
            if settings.changed().await.is_err() {
                return;
            }
        }
        deliver(message).await;
        applied.fetch_add(1, Ordering::Relaxed);
        in_flight.lock().expect("not poisoned").pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    type Seen = Arc<Mutex<Vec<(i64, Instant)>>>;

    fn commit(job_id: i64) -> CdcMessage {
        CdcMessage::CommitImport {
            job_id,
            commit_ts: 0,
        }
    }

    fn start(lag: Duration, deliver: Deliver) -> CdcStream {
        CdcStream::start("b".into(), lag, jiff::SignedDuration::ZERO, deliver)
    }

    fn recorder() -> (Deliver, Seen) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let deliver: Deliver = Arc::new(move |m| {
            let sink = sink.clone();
            Box::pin(async move {
                if let CdcMessage::CommitImport { job_id, .. } = m {
                    sink.lock()
                        .expect("not poisoned")
                        .push((job_id, Instant::now()));
                }
            })
        });
        (deliver, seen)
    }

    #[tokio::test(start_paused = true)]
    async fn delivers_in_order_after_the_lag() {
        let (deliver, seen) = recorder();
        let stream = start(Duration::from_secs(2), deliver);
        let start = Instant::now();
        stream.send(commit(1));
        stream.send(commit(2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(seen.lock().expect("not poisoned").is_empty());
        tokio::time::sleep(Duration::from_secs(2)).await;
        let got = seen.lock().expect("not poisoned").clone();
        assert_eq!(got.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2]);
        assert!(got[0].1 - start >= Duration::from_secs(2));
        assert_eq!(stream.snapshot().applied, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_checkpoint_follows_the_clock_behind_the_lag_and_stops_while_paused() {
        let (deliver, _) = recorder();
        let stream = start(Duration::from_millis(500), deliver);
        let first = stream.checkpoint();
        assert!(first > 0);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let flowing = stream.checkpoint();
        assert_eq!(
            (flowing - first) >> 18,
            1_000,
            "a second later, a second further"
        );

        // A message on its way holds the checkpoint at its send time until it is applied.
        stream.set_lag(Duration::from_secs(5));
        let held = stream.checkpoint();
        stream.send(commit(1));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(
            stream.checkpoint() > held,
            "applied after 5 s; the clock runs on"
        );

        stream.set_flow(Flow::Paused);
        let stalled = stream.checkpoint();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            stream.checkpoint(),
            stalled,
            "a paused stream's checkpoint stands still"
        );
        stream.set_flow(Flow::Flowing);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(stream.checkpoint() > stalled);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_on_its_way_holds_the_checkpoint_back() {
        // A secondary that never finishes applying the message (a restart that never ends).
        let stuck: Deliver = Arc::new(|_| Box::pin(futures::future::pending()));
        let stream = start(Duration::ZERO, stuck);
        let before = stream.checkpoint();
        stream.send(commit(1));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            stream.checkpoint(),
            before,
            "held at the message's send time"
        );
        assert_eq!(stream.snapshot().applied, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn pause_holds_messages_until_resume() {
        let (deliver, seen) = recorder();
        let stream = start(Duration::ZERO, deliver);
        stream.set_flow(Flow::Paused);
        stream.send(commit(1));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(seen.lock().expect("not poisoned").is_empty());
        assert_eq!(stream.snapshot().sent, 1);
        stream.set_flow(Flow::Flowing);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(seen.lock().expect("not poisoned").len(), 1);
    }
}
