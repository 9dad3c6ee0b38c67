//! When to ask an end about a job next.
//!
//! The engine waits on many (end, job) pairs at once, and DESIGN.md §6 asks for two things that
//! pull apart: react within 250 ms (median) when the last mirror reaches Uncommitted, yet make no
//! more than one describe call per job per second on average (milvus-backup and Milvus's guide
//! poll every 3 s). Two mechanisms reconcile them:
//!
//! - Each pair predicts when its next transition is due from the rate its progress number moves
//!   (Milvus reports 0–99 through the stages, docs/milvus-facts.md §1.4), polls sparsely while
//!   it is far, and fast once it is near or overdue.
//! - A token bucket caps the average rate at [`CALLS_PER_JOB_PER_SECOND`] per job while letting
//!   tokens saved in quiet stretches be spent in a burst around a transition.

use std::time::Duration;

use tokio::time::Instant;

/// Never poll one pair faster than this: a transition is due and reaction time is what counts.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);

/// Never poll one pair slower than this: the cadence milvus-backup and the Milvus guide use.
pub const MAX_INTERVAL: Duration = Duration::from_secs(3);

/// The first look at a new pair, before any rate is known.
pub const FIRST_INTERVAL: Duration = Duration::from_millis(200);

/// The long-run budget, below DESIGN.md §6's ceiling of one per job per second.
pub const CALLS_PER_JOB_PER_SECOND: f64 = 0.9;

/// Rows a second that one end's lists may bring while ready jobs are looked at: a ready
/// pair (Uncommitted, or Committing, waiting on something no rate predicts) is looked at as
/// often as that allows, and as the budget can keep up (a look costs a call an end), between
/// [`MIN_INTERVAL`] and [`FIRST_INTERVAL`]. Milvus computes every row of a list, so a
/// restore of a few hundred jobs is looked at every 50 ms and one of ten thousand
/// collections (40,000 rows a list) still every 200 ms; so is one of a few jobs, whose
/// budget would be spent in a burst at 50 ms and then look every second.
const READY_ROWS_PER_SECOND: f64 = 20_000.0;

/// Tokens a quiet stretch may save for a burst, per job; a burst covers a few fast polls of
/// every pair of one job around its transition.
const BURST_PER_JOB: f64 = 12.0;

/// The progress Milvus reports for Uncommitted and Committing (docs/milvus-facts.md §1.4);
/// Completed is 100.
const READY_PROGRESS: i64 = 99;

/// When a new schedule first asks each pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstLook {
    /// Jobs just created: their first transition is at least a stage away, so the first looks
    /// wait [`FIRST_INTERVAL`], spread so a thousand jobs do not arrive as one burst.
    Spread,
    /// States just seen and about to be acted on (the re-read before a decision): ask now.
    Now,
}

/// One observation of a pair.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    progress: i64,
}

#[derive(Debug, Clone)]
struct Entry {
    first: Option<Sample>,
    last: Option<Sample>,
    next_at: Instant,
    /// Polls since the predicted due time passed without the transition; backs the interval
    /// off again so a stalled job does not burn the budget.
    overdue_polls: u32,
    active: bool,
}

/// The poll plan for a set of pairs, identified by their index.
#[derive(Debug)]
pub struct Schedule {
    entries: Vec<Entry>,
    tokens: f64,
    capacity: f64,
    rate: f64,
    refilled_at: Instant,
    /// How soon a ready pair is looked at again: see [`READY_ROWS_PER_SECOND`].
    ready_interval: Duration,
    /// How often the budget can pay for a look at every end, one call each.
    sustained: Duration,
}

impl Schedule {
    /// A schedule for `pairs` pairs that belong to `jobs` jobs (a job has one pair per end).
    pub fn new(pairs: usize, jobs: usize, now: Instant, first: FirstLook) -> Schedule {
        let jobs = jobs.max(1) as f64;
        let entries = (0..pairs)
            .map(|i| Entry {
                first: None,
                last: None,
                next_at: match first {
                    FirstLook::Spread => now + FIRST_INTERVAL.mul_f64((i % 16) as f64 / 16.0 + 1.0),
                    FirstLook::Now => now,
                },
                overdue_polls: 0,
                active: true,
            })
            .collect();
        let capacity = BURST_PER_JOB * jobs;
        let ends = pairs.div_ceil(jobs as usize).max(1);
        let rate = CALLS_PER_JOB_PER_SECOND * jobs;
        Schedule {
            entries,
            tokens: capacity,
            capacity,
            rate,
            refilled_at: now,
            ready_interval: FIRST_INTERVAL,
            sustained: Duration::from_secs_f64(ends as f64 / rate),
        }
    }

    /// Records how many rows the answer about to be observed brought (a describe's is one):
    /// the ready pairs it saw are looked at again as soon as that allows.
    pub fn listed(&mut self, rows: usize) {
        self.ready_interval = Duration::from_secs_f64(rows as f64 / READY_ROWS_PER_SECOND)
            .max(self.sustained)
            .clamp(MIN_INTERVAL, FIRST_INTERVAL);
    }

    /// Stops polling a pair (it reached what the caller waits for).
    pub fn finish(&mut self, pair: usize) {
        self.entries[pair].active = false;
    }

    pub fn is_active(&self, pair: usize) -> bool {
        self.entries[pair].active
    }

    /// The pairs due at `now`, soonest first, when the budget allows a call; otherwise, or
    /// when none is due, when to look again. One call may answer for several pairs, so the
    /// caller makes at most [`Schedule::calls_allowed`] calls and [`Schedule::spend`]s them.
    pub fn due(&mut self, now: Instant) -> Result<Vec<usize>, Instant> {
        self.refill(now);
        let mut due: Vec<usize> = (0..self.entries.len())
            .filter(|&i| self.entries[i].active && self.entries[i].next_at <= now)
            .collect();
        due.sort_by_key(|&i| self.entries[i].next_at);
        if self.calls_allowed() == 0 {
            due.clear();
        }
        if due.is_empty() {
            let next_entry = self
                .entries
                .iter()
                .filter(|e| e.active)
                .map(|e| e.next_at)
                .min();
            let Some(next_entry) = next_entry else {
                return Err(now + MAX_INTERVAL);
            };
            let next_token = if self.tokens >= 1.0 {
                now
            } else {
                now + Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
            };
            return Err(next_entry
                .max(next_token)
                .max(now + Duration::from_millis(1)));
        }
        Ok(due)
    }

    /// How many calls the budget allows now.
    pub fn calls_allowed(&self) -> usize {
        self.tokens.floor().max(0.0) as usize
    }

    /// Takes `calls` made from the budget (it may go below zero: a call that had to be
    /// followed by others pays for them, and the next looks wait for the refill).
    pub fn spend(&mut self, calls: usize) {
        self.tokens -= calls as f64;
    }

    /// Records what a poll saw and plans the next one.
    pub fn observe(&mut self, pair: usize, progress: i64, now: Instant) {
        let ready = self.ready_interval;
        let e = &mut self.entries[pair];
        let sample = Sample { at: now, progress };
        let first = *e.first.get_or_insert(sample);
        let moved = e.last.is_some_and(|l| l.progress != progress);
        e.last = Some(sample);
        let interval = match eta(first, sample) {
            Some(eta) if eta > Duration::ZERO => {
                e.overdue_polls = 0;
                // Half the remaining time: the samples converge on the transition.
                (eta / 2).clamp(MIN_INTERVAL, MAX_INTERVAL)
            }
            // Due by the rate, not there yet: fast at first, then back off.
            Some(_) => backoff(MIN_INTERVAL, &mut e.overdue_polls),
            // Ready (Uncommitted or Committing) and still watched: only a commit's effect is
            // awaited, due any moment; what a look lists and the budget, not a back-off,
            // bound these looks.
            None if progress >= READY_PROGRESS => ready,
            // No rate yet (one sample, or progress flat): back off from the first interval,
            // starting lower when the progress just moved, which says the job is alive.
            None if moved => backoff(FIRST_INTERVAL, &mut e.overdue_polls),
            None => backoff(FIRST_INTERVAL * 2, &mut e.overdue_polls),
        };
        e.next_at = now + interval;
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.refilled_at = now;
    }
}

/// `base` doubled once per earlier miss, capped at [`MAX_INTERVAL`]; counts this miss.
fn backoff(base: Duration, misses: &mut u32) -> Duration {
    let interval = base.saturating_mul(1 << (*misses).min(6)).min(MAX_INTERVAL);
    *misses += 1;
    interval
}

/// Time until progress reaches the ready mark at the rate seen between two samples.
fn eta(first: Sample, last: Sample) -> Option<Duration> {
    let dt = last.at.saturating_duration_since(first.at).as_secs_f64();
    let dp = (last.progress - first.progress) as f64;
    if dt <= 0.0 || dp <= 0.0 {
        return None;
    }
    let remaining = (READY_PROGRESS - last.progress).max(0) as f64;
    Some(Duration::from_secs_f64(remaining * dt / dp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn first_looks_are_spread_and_soon() {
        let now = Instant::now();
        let mut s = Schedule::new(32, 32, now, FirstLook::Spread);
        let next = s.due(now).unwrap_err();
        assert!(next - now >= FIRST_INTERVAL && next - now < FIRST_INTERVAL * 2);
        let later = now + FIRST_INTERVAL * 2;
        assert_eq!(s.due(later).unwrap().len(), 32);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pair_polls_faster_as_its_transition_nears() {
        let t0 = Instant::now();
        let mut s = Schedule::new(1, 1, t0, FirstLook::Spread);
        s.observe(0, 10, t0);
        // 10 → 50 in 4 s: 49 points left take ~4.9 s, so the next look is ~2.45 s away.
        let t1 = t0 + Duration::from_secs(4);
        s.observe(0, 50, t1);
        let gap1 = s.entries[0].next_at - t1;
        assert!(
            gap1 > Duration::from_secs(2) && gap1 < Duration::from_secs(3),
            "{gap1:?}"
        );
        // Two points from 99 at ~10 points a second: ~200 ms left, so look again in ~100 ms.
        let t2 = t0 + Duration::from_millis(8800);
        s.observe(0, 97, t2);
        let gap2 = s.entries[0].next_at - t2;
        assert!(gap2 >= MIN_INTERVAL && gap2 <= MIN_INTERVAL * 3, "{gap2:?}");
        // At the mark: the floor.
        let t3 = t0 + Duration::from_millis(9000);
        s.observe(0, 99, t3);
        assert_eq!(s.entries[0].next_at - t3, MIN_INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_pair_backs_off_to_the_ceiling() {
        let t0 = Instant::now();
        let mut s = Schedule::new(1, 1, t0, FirstLook::Spread);
        let mut t = t0;
        for _ in 0..10 {
            s.observe(0, 40, t);
            t += Duration::from_secs(1);
        }
        assert_eq!(
            s.entries[0].next_at - (t - Duration::from_secs(1)),
            MAX_INTERVAL
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_caps_the_long_run_rate() {
        // 10 jobs, every pair always due: over 100 s the calls stay within rate × time + burst.
        let t0 = Instant::now();
        let mut s = Schedule::new(30, 10, t0, FirstLook::Spread);
        let mut calls = 0usize;
        let mut t = t0;
        while t < t0 + Duration::from_secs(100) {
            if let Ok(mut due) = s.due(t) {
                due.truncate(s.calls_allowed());
                s.spend(due.len());
                calls += due.len();
                for p in due {
                    s.entries[p].next_at = t; // always due again
                }
            }
            t += Duration::from_millis(10);
        }
        let ceiling = 100.0 * 10.0 * CALLS_PER_JOB_PER_SECOND + 10.0 * BURST_PER_JOB;
        assert!(calls as f64 <= ceiling, "{calls} > {ceiling}");
        assert!(
            calls as f64 >= 100.0 * 10.0 * CALLS_PER_JOB_PER_SECOND * 0.95,
            "{calls}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_committing_pair_is_looked_at_steadily_not_backed_off() {
        let t0 = Instant::now();
        let mut s = Schedule::new(1, 1, t0, FirstLook::Now);
        let mut t = t0;
        for _ in 0..10 {
            s.observe(0, READY_PROGRESS, t);
            assert_eq!(s.entries[0].next_at - t, FIRST_INTERVAL);
            t += FIRST_INTERVAL;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_ready_pair_is_looked_at_as_often_as_its_lists_allow() {
        let t0 = Instant::now();
        // 400 jobs on 3 ends: the budget pays for a look every 8 ms.
        let mut s = Schedule::new(1200, 400, t0, FirstLook::Now);
        let next = |s: &mut Schedule, rows| {
            s.listed(rows);
            s.observe(0, READY_PROGRESS, t0);
            s.entries[0].next_at - t0
        };
        // A few hundred rows a list: the floor.
        assert_eq!(next(&mut s, 400), MIN_INTERVAL);
        // 2,000 rows at 20,000 a second: 100 ms.
        assert_eq!(next(&mut s, 2_000), Duration::from_millis(100));
        // Ten thousand collections' 40,000 jobs: no faster than before.
        assert_eq!(next(&mut s, 40_000), FIRST_INTERVAL);
        // A pair on its way is planned by its rate, whatever the lists.
        s.listed(400);
        s.observe(0, 10, t0);
        s.observe(0, 50, t0 + Duration::from_secs(4));
        assert!(s.entries[0].next_at - (t0 + Duration::from_secs(4)) > FIRST_INTERVAL);
        // 40 jobs on 3 ends: a look every 83 ms is what the budget keeps up, however short
        // the lists.
        let mut s = Schedule::new(120, 40, t0, FirstLook::Now);
        let sustained = next(&mut s, 40);
        assert!(sustained > Duration::from_millis(80) && sustained < Duration::from_millis(90));
        // One job on 3 ends: every 200 ms as before, not a burst at 50 ms and then a look
        // a second.
        let mut s = Schedule::new(3, 1, t0, FirstLook::Now);
        assert_eq!(next(&mut s, 1), FIRST_INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn finished_pairs_are_not_polled() {
        let t0 = Instant::now();
        let mut s = Schedule::new(2, 1, t0, FirstLook::Spread);
        s.finish(0);
        let due = s.due(t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(due, vec![1]);
    }
}
