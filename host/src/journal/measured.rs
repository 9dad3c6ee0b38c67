//! A journal that watches its own calls, for `/metrics`: how long each operation took and
//! how many failed (the fleet's journal is the etcd Milvus itself runs on; one that slows
//! down or fails shows here before a restore stalls on a fence or a save), which records met
//! do not read, and the figures of the restores this process finished. All of it is what
//! the calls carry anyway: nothing here reads the journal's history again.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::{
    Claim, Error, Journal, Listed, Listing, Removal, RestoreId, RestoreRecord, Result, Visit,
};

/// The journal's operations, as `/metrics` labels them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Claim,
    Save,
    Fence,
    Load,
    Scan,
    /// A read through an index: the newest records, the open ones, the outcome counts.
    Index,
    Remove,
    Ready,
}

impl Op {
    pub const ALL: [Op; 8] = [
        Op::Claim,
        Op::Save,
        Op::Fence,
        Op::Load,
        Op::Scan,
        Op::Index,
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
            Op::Index => "index",
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

/// Upper bounds (seconds) of the reaction-time buckets: DESIGN §6 asks for 250 ms median.
pub const REACTION_BUCKETS: [f64; 9] = [0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The figures of the restores this process finished (its save that gave one an outcome),
/// as their stored reports give them.
#[derive(Debug, Default, Clone)]
pub struct Finished {
    /// Per bucket of [`REACTION_BUCKETS`], the reactions at or under its bound; then the
    /// count and sum of them all.
    pub reaction_buckets: [u64; REACTION_BUCKETS.len()],
    pub reactions: u64,
    pub reaction_sum: f64,
    pub staged_bytes: u64,
}

/// What the figures read of a stored report; the rest is skipped.
#[derive(serde::Deserialize)]
struct Figures {
    reaction_ms: Option<u64>,
    staging: Option<Staged>,
}

#[derive(serde::Deserialize)]
struct Staged {
    bytes: u64,
}

impl Finished {
    fn add(&mut self, record: &RestoreRecord) {
        let Some(figures) = (record.report.as_ref()).and_then(|r| r.read::<Figures>().ok()) else {
            return;
        };
        if let Some(ms) = figures.reaction_ms {
            let seconds = ms as f64 / 1000.0;
            for (n, le) in self.reaction_buckets.iter_mut().zip(REACTION_BUCKETS) {
                *n += u64::from(seconds <= le);
            }
            self.reactions += 1;
            self.reaction_sum += seconds;
        }
        if let Some(staging) = figures.staging {
            self.staged_bytes += staging.bytes;
        }
    }
}

/// Every operation's calls since this process started, and what they met.
#[derive(Debug, Default)]
pub struct Stats {
    ops: [OpStats; Op::ALL.len()],
    /// The keys of records met that do not read: what the last whole scan found, and every
    /// one a listing of some records met since.
    unreadable: Mutex<BTreeSet<String>>,
    finished: Mutex<Finished>,
    /// Restores this process saved without an outcome: the save that gives one an outcome
    /// counts it in `finished`, once.
    running: Mutex<HashSet<RestoreId>>,
}

impl Stats {
    pub fn of(&self, op: Op) -> &OpStats {
        &self.ops[op as usize]
    }

    /// The keys of the records known not to read.
    pub fn unreadable(&self) -> Vec<String> {
        let met = self.unreadable.lock().expect("no panics under the lock");
        met.iter().cloned().collect()
    }

    pub fn finished(&self) -> Finished {
        self.finished
            .lock()
            .expect("no panics under the lock")
            .clone()
    }

    /// Notes what a listing met that does not read; a whole scan's replaces what was known.
    fn met(&self, keys: BTreeSet<String>, whole: bool) {
        let mut met = self.unreadable.lock().expect("no panics under the lock");
        match whole {
            true => *met = keys,
            false => met.extend(keys),
        }
    }

    /// Follows what a save of `record` did: a restore this process no longer holds (its
    /// claim lost) is forgotten, so that what is kept is only what runs here.
    fn saved(&self, record: &RestoreRecord, saved: &Result<()>) {
        let mut running = self.running.lock().expect("no panics under the lock");
        match saved {
            Err(Error::ClaimLost(_)) => {
                running.remove(&record.id);
            }
            Err(_) => {}
            Ok(()) if record.is_unfinished() => {
                running.insert(record.id.clone());
            }
            Ok(()) => {
                if running.remove(&record.id) {
                    (self.finished.lock().expect("no panics under the lock")).add(record);
                }
            }
        }
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

/// Keeps the key of `listed` if it does not read.
fn note(listed: &Listed, met: &mut BTreeSet<String>) {
    if let Listed::Unreadable(bad) = listed {
        met.insert(bad.key.clone());
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
        Box::pin(async move {
            let saved = self.timed(Op::Save, self.inner.save(claim, record)).await;
            self.stats.saved(record, &saved);
            saved
        })
    }

    fn fence<'a>(&'a self, claim: &'a dyn Claim) -> BoxFuture<'a, Result<()>> {
        self.timed(Op::Fence, self.inner.fence(claim))
    }

    fn fence_fresh(&self) -> Option<Duration> {
        self.inner.fence_fresh()
    }

    fn load<'a>(&'a self, id: &'a RestoreId) -> BoxFuture<'a, Result<Option<RestoreRecord>>> {
        self.timed(Op::Load, self.inner.load(id))
    }

    fn scan<'a>(
        &'a self,
        id_prefix: &'a str,
        visit: &'a mut Visit<'_>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut met = BTreeSet::new();
            let mut noting = |listed: Listed| {
                note(&listed, &mut met);
                visit(listed);
            };
            self.timed(Op::Scan, self.inner.scan(id_prefix, &mut noting))
                .await?;
            self.stats.met(met, id_prefix.is_empty());
            Ok(())
        })
    }

    fn newest(&self, n: usize) -> BoxFuture<'_, Result<Listing>> {
        Box::pin(async move {
            let listing = self.timed(Op::Index, self.inner.newest(n)).await?;
            let met = listing.unreadable.iter().map(|bad| bad.key.clone());
            self.stats.met(met.collect(), false);
            Ok(listing)
        })
    }

    fn scan_open<'a>(&'a self, visit: &'a mut Visit<'_>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut met = BTreeSet::new();
            let mut noting = |listed: Listed| {
                note(&listed, &mut met);
                visit(listed);
            };
            self.timed(Op::Index, self.inner.scan_open(&mut noting))
                .await?;
            self.stats.met(met, false);
            Ok(())
        })
    }

    fn count_outcomes(&self) -> BoxFuture<'_, Result<BTreeMap<&'static str, u64>>> {
        self.timed(Op::Index, self.inner.count_outcomes())
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

    /// A restore this process finished is counted once, by the save that gave it its
    /// outcome; one it only saved finished (another host ran it) is not; what records a
    /// listing met that do not read is what the last whole scan found.
    #[tokio::test]
    async fn a_finish_here_is_counted_once_and_a_whole_scan_says_what_does_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, stats) = Measured::wrap(Arc::new(FileJournal::open(dir.path()).unwrap()));
        let report = crate::journal::StoredReport::of(&serde_json::json!({
            "reaction_ms": 120, "staging": {"bytes": 7},
        }))
        .unwrap();
        for (attempt, ran_here) in [(1, true), (2, false)] {
            let id = RestoreId::new("job", "0123456789abcdef", attempt);
            let claim = journal.claim(&id).await.unwrap();
            let mut record =
                RestoreRecord::new(id, "job", "0123456789abcdef", attempt, "b", vec![]);
            if ran_here {
                journal.save(claim.as_ref(), &record).await.unwrap();
            }
            record.outcome = Some(super::super::Outcome::Succeeded);
            record.report = Some(report.clone());
            journal.save(claim.as_ref(), &record).await.unwrap();
            journal.save(claim.as_ref(), &record).await.unwrap();
        }
        let finished = stats.finished();
        assert_eq!((finished.reactions, finished.staged_bytes), (1, 7));
        assert_eq!(finished.reaction_buckets[3], 1, "0.12 s is under 0.25 s");

        let bad = dir.path().join("journal").join("bad.ff.1.json");
        std::fs::write(&bad, b"{ not a record").unwrap();
        journal.list().await.unwrap();
        assert_eq!(stats.unreadable(), ["bad.ff.1.json"]);
        std::fs::remove_file(&bad).unwrap();
        journal.newest(5).await.unwrap();
        assert_eq!(
            stats.unreadable(),
            ["bad.ff.1.json"],
            "a listing of some adds, never clears"
        );
        journal.list().await.unwrap();
        assert!(stats.unreadable().is_empty());
    }
}
