//! A journal that times its own calls: how long each operation took and how many failed, for
//! `/metrics`. The fleet's journal is the etcd Milvus itself runs on; one that slows down or
//! fails shows here before a restore stalls on a fence or a save.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::{Claim, Error, Journal, Removal, RestoreId, RestoreRecord, Result, Visit};

/// The journal's operations, as `/metrics` labels them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Claim,
    Save,
    Fence,
    Load,
    Scan,
    Remove,
    Ready,
}

impl Op {
    pub const ALL: [Op; 7] = [
        Op::Claim,
        Op::Save,
        Op::Fence,
        Op::Load,
        Op::Scan,
        Op::Remove,
        Op::Ready,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Op::Claim => "claim",
            Op::Save => "save",
            Op::Fence => "fence",
            Op::Load => "load",
            Op::Scan => "scan",
            Op::Remove => "remove",
            Op::Ready => "ready",
        }
    }
}

/// Upper bounds (seconds) of the latency buckets: a local fsync is a millisecond or so, an
/// etcd quorum write a few, and a fence slower than a second holds every action of a restore.
pub const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// One operation's calls: a cumulative histogram of their time, and those that failed.
#[derive(Debug, Default)]
pub struct OpStats {
    /// Per bucket of [`BUCKETS`], the calls at or under its bound.
    pub buckets: [AtomicU64; BUCKETS.len()],
    pub calls: AtomicU64,
    pub micros: AtomicU64,
    /// Calls the journal could not answer: a busy claim or a lost one is an answer.
    pub failures: AtomicU64,
}

/// Every operation's calls since this process started.
#[derive(Debug, Default)]
pub struct Stats {
    ops: [OpStats; Op::ALL.len()],
}

impl Stats {
    pub fn of(&self, op: Op) -> &OpStats {
        &self.ops[op as usize]
    }

    fn record<T>(&self, op: Op, took: Duration, result: &Result<T>) {
        let stats = self.of(op);
        let seconds = took.as_secs_f64();
        for (n, le) in stats.buckets.iter().zip(BUCKETS) {
            if seconds <= le {
                n.fetch_add(1, Ordering::Relaxed);
            }
        }
        stats.calls.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        stats.micros.fetch_add(micros, Ordering::Relaxed);
        if let Err(e) = result
            && !matches!(e, Error::Busy { .. } | Error::ClaimLost(_))
        {
            stats.failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `inner`, each call timed into a [`Stats`].
pub struct Measured {
    inner: Arc<dyn Journal>,
    stats: Arc<Stats>,
}

impl Measured {
    /// `inner` measured, and where its figures are read.
    pub fn wrap(inner: Arc<dyn Journal>) -> (Arc<dyn Journal>, Arc<Stats>) {
        let stats = Arc::new(Stats::default());
        let measured = Measured {
            inner,
            stats: Arc::clone(&stats),
        };
        (Arc::new(measured), stats)
    }

    fn timed<'a, T: Send + 'a>(
        &'a self,
        op: Op,
        call: BoxFuture<'a, Result<T>>,
    ) -> BoxFuture<'a, Result<T>> {
        Box::pin(async move {
            let started = Instant::now();
            let result = call.await;
            self.stats.record(op, started.elapsed(), &result);
            result
        })
    }
}

impl Journal for Measured {
    fn claim(&self, id: &RestoreId) -> BoxFuture<'_, Result<Box<dyn Claim>>> {
        self.timed(Op::Claim, self.inner.claim(id))
    }

    fn save<'a>(
        &'a self,
        claim: &'a dyn Claim,
        record: &'a RestoreRecord,
    ) -> BoxFuture<'a, Result<()>> {
        self.timed(Op::Save, self.inner.save(claim, record))
    }

    fn fence<'a>(&'a self, claim: &'a dyn Claim) -> BoxFuture<'a, Result<()>> {
        self.timed(Op::Fence, self.inner.fence(claim))
    }

    fn load<'a>(&'a self, id: &'a RestoreId) -> BoxFuture<'a, Result<Option<RestoreRecord>>> {
        self.timed(Op::Load, self.inner.load(id))
    }

    fn scan<'a>(
        &'a self,
        id_prefix: &'a str,
        visit: &'a mut Visit<'_>,
    ) -> BoxFuture<'a, Result<()>> {
        self.timed(Op::Scan, self.inner.scan(id_prefix, visit))
    }

    fn ready(&self) -> BoxFuture<'_, Result<()>> {
        self.timed(Op::Ready, self.inner.ready())
    }

    fn remove<'a>(&'a self, listed: &'a RestoreRecord) -> BoxFuture<'a, Result<Removal>> {
        self.timed(Op::Remove, self.inner.remove(listed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::embedded::FileJournal;

    /// Each call lands in its operation's histogram, and a journal that cannot answer is a
    /// failure where a busy claim is not.
    #[tokio::test]
    async fn calls_are_timed_by_operation_and_failures_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, stats) = Measured::wrap(Arc::new(FileJournal::open(dir.path()).unwrap()));
        let id = RestoreId::new("job", "0123456789abcdef", 1);
        let claim = journal.claim(&id).await.unwrap();
        assert!(journal.claim(&id).await.is_err(), "busy");
        journal.ready().await.unwrap();
        drop(claim);
        let calls = |op: Op| stats.of(op).calls.load(Ordering::Relaxed);
        let failures = |op: Op| stats.of(op).failures.load(Ordering::Relaxed);
        assert_eq!((calls(Op::Claim), failures(Op::Claim)), (2, 0));
        assert_eq!((calls(Op::Ready), calls(Op::Save)), (1, 0));
        let slowest = &stats.of(Op::Claim).buckets[BUCKETS.len() - 1];
        assert_eq!(
            slowest.load(Ordering::Relaxed),
            2,
            "every call is under 5 s"
        );

        // The state directory gone: the probe write fails.
        std::fs::remove_dir_all(dir.path()).unwrap();
        assert!(journal.ready().await.is_err());
        assert_eq!((calls(Op::Ready), failures(Op::Ready)), (2, 1));
    }
}
