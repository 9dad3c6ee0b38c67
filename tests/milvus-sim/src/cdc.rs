//! CDC streams: the ordered message stream from a primary to one secondary.
//!
//! The primary puts every replicated operation (DDL, ImportMsg, CommitImport, RollbackImport,
//! replication-config updates) on the stream of each of its secondaries. A stream delivers in
//! order, each message no earlier than `lag` after it was sent, and not at all while paused;
//! a lag change applies to messages already queued. Delivery itself (waiting for a restarting
//! target, applying on the secondary) is the caller's function, so this module knows nothing
//! of clusters.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    CommitImport { job_id: i64 },
    RollbackImport { job_id: i64 },
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
    task: tokio::task::JoinHandle<()>,
}

impl CdcStream {
    /// Starts the stream's delivery task.
    pub fn start(target: String, lag: Duration, deliver: Deliver) -> CdcStream {
        let (queue, rx) = mpsc::unbounded_channel();
        let (settings, settings_rx) = watch::channel(Settings {
            lag,
            flow: Flow::Flowing,
        });
        let applied = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(deliver_in_order(rx, settings_rx, deliver, applied.clone()));
        CdcStream {
            target,
            queue,
            settings,
            sent: AtomicU64::new(0),
            applied,
            task,
        }
    }

    pub fn send(&self, message: CdcMessage) {
        tracing::debug!(target = %self.target, kind = message.kind(), "cdc send");
        self.sent.fetch_add(1, Ordering::Relaxed);
        // The receiver lives as long as the task, which lives as long as this stream.
        let _ = self.queue.send(Queued {
            sent_at: Instant::now(),
            message,
        });
    }

    pub fn set_lag(&self, lag: Duration) {
        self.settings.send_modify(|s| s.lag = lag);
    }

    pub fn set_flow(&self, flow: Flow) {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    type Seen = Arc<Mutex<Vec<(i64, Instant)>>>;

    fn recorder() -> (Deliver, Seen) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let deliver: Deliver = Arc::new(move |m| {
            let sink = sink.clone();
            Box::pin(async move {
                if let CdcMessage::CommitImport { job_id } = m {
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
        let stream = CdcStream::start("b".into(), Duration::from_secs(2), deliver);
        let start = Instant::now();
        stream.send(CdcMessage::CommitImport { job_id: 1 });
        stream.send(CdcMessage::CommitImport { job_id: 2 });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(seen.lock().expect("not poisoned").is_empty());
        tokio::time::sleep(Duration::from_secs(2)).await;
        let got = seen.lock().expect("not poisoned").clone();
        assert_eq!(got.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2]);
        assert!(got[0].1 - start >= Duration::from_secs(2));
        assert_eq!(stream.snapshot().applied, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn pause_holds_messages_until_resume() {
        let (deliver, seen) = recorder();
        let stream = CdcStream::start("b".into(), Duration::ZERO, deliver);
        stream.set_flow(Flow::Paused);
        stream.send(CdcMessage::CommitImport { job_id: 1 });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(seen.lock().expect("not poisoned").is_empty());
        assert_eq!(stream.snapshot().sent, 1);
        stream.set_flow(Flow::Flowing);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(seen.lock().expect("not poisoned").len(), 1);
    }
}
