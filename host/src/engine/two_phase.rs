//! The two phases on a set of submitted jobs: hold until every end is Uncommitted, commit on
//! the target only, wait until every end is Completed; or, before a decision, abort and wait
//! until no end holds an Uncommitted job. The journal and the decision itself are the
//! caller's (`run`); this module only talks to the ends.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

use super::ends::{EndClient, Ends};
use super::fence::{Fence, Lost};
pub use super::poll::Seen;
use super::poll::{Denied, Judgement, Pair, Sight, watch};
use super::progress::JobCounts;
use super::report::Divergence;
use super::retry::fenced;
use super::schedule::FirstLook;
use crate::backup::ExpectedRows;
use crate::journal::Role;
use crate::milvus::{JobState, MilvusJobId};

/// Commit and abort requests in flight at once.
const CONTROL_IN_FLIGHT: usize = 16;

/// How long a target job may stay Uncommitted after its commit was accepted before the
/// commit is sent again (it is idempotent; a lost commit would otherwise wait forever).
const RECOMMIT_AFTER: Duration = Duration::from_secs(10);

/// How often the wait after the commit says which ends still hold which jobs.
const STILL_WAITING_EVERY: Duration = Duration::from_secs(5);
/// How long an end must keep not knowing a committed job before it is named as having
/// forgotten it: longer than a look racing an end's restart.
const FORGOTTEN_AFTER: Duration = Duration::from_secs(5);

/// How often a watch shows its progress. Showing copies and counts every job, so doing it
/// on every sighting made a watch of thousands of jobs quadratic.
pub const SHOW_EVERY: Duration = Duration::from_millis(100);

/// Showing also waits at least this many times what the last showing took: a copy of
/// 40,000 jobs every 100 ms took a fifth of a core through a restore whose length grows
/// with the jobs, so the copies' share of the CPU grew with the square of the restore.
/// This way they take at most a tenth of the watch's time, whatever its size.
const SHOW_PAUSE_PER_SHOWING: u32 = 10;

/// How long to wait before showing again, after a showing that took `took`.
pub fn pause_after_showing(took: Duration) -> Duration {
    SHOW_EVERY.max(took * SHOW_PAUSE_PER_SHOWING)
}

/// When a watch may next show its progress.
#[derive(Default)]
struct Shown(Option<Instant>);

impl Shown {
    fn maybe(&mut self, now: Instant, show: impl FnOnce()) {
        if self.0.is_none_or(|next| now >= next) {
            let started = std::time::Instant::now();
            show();
            self.0 = Some(now + pause_after_showing(started.elapsed()));
        }
    }
}

/// A call sent once the fence passed, with its answer; or the fence's failure, and no call.
type Fenced<T> = Result<crate::milvus::Result<T>, Lost>;

/// One import job as the engine follows it.
#[derive(Debug)]
pub struct Tracked {
    pub batch_id: String,
    /// The target database, which job calls name in `DB-Name`. It and the collection are
    /// shared by the collection's jobs, and by every pair a watch of them makes.
    pub db: Arc<str>,
    /// `db.collection`.
    pub collection: Arc<str>,
    pub partition: String,
    /// What every end must import; `None` for L0 batches and for records written before
    /// row accounting.
    pub expected: Option<ExpectedRows>,
    pub job_id: Option<MilvusJobId>,
    /// Per end, target first; `None` until seen (or when the end does not know the job).
    pub seen: Vec<Option<Seen>>,
    /// Per end, the rows it says it imported, read once it held the job Uncommitted.
    pub imported: Vec<Option<i64>>,
}

impl Clone for Tracked {
    fn clone(&self) -> Self {
        Tracked {
            batch_id: self.batch_id.clone(),
            db: self.db.clone(),
            collection: self.collection.clone(),
            partition: self.partition.clone(),
            expected: self.expected,
            job_id: self.job_id.clone(),
            seen: self.seen.clone(),
            imported: self.imported.clone(),
        }
    }

    /// Field by field, into this copy's own strings and vectors: a group publishes its
    /// tracker by copying it over the copy it published before ([`Tracker::copy_to`]). A
    /// whole copy made first was a third tracker in memory, and five allocations per job
    /// at every showing where this makes one (the job id's).
    fn clone_from(&mut self, source: &Self) {
        self.batch_id.clone_from(&source.batch_id);
        self.db.clone_from(&source.db);
        self.collection.clone_from(&source.collection);
        self.partition.clone_from(&source.partition);
        self.expected = source.expected;
        self.job_id.clone_from(&source.job_id);
        self.seen.clone_from(&source.seen);
        self.imported.clone_from(&source.imported);
    }
}

impl Tracked {
    /// Whether every end was seen holding the job: Uncommitted, or past it.
    pub fn held_everywhere(&self) -> bool {
        (self.seen.iter()).all(|s| s.as_ref().is_some_and(|s| s.state.is_ready_to_commit()))
    }
}

/// Every job of a restore.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    pub end_names: Vec<String>,
    pub jobs: Vec<Tracked>,
}

impl Tracker {
    /// Makes `published` a copy of this tracker, reusing what it holds.
    pub fn copy_to(&self, published: &mut Tracker) {
        published.end_names.clone_from(&self.end_names);
        published.jobs.clone_from(&self.jobs);
    }

    /// Whether every end was seen with every job Committing or Completed: nothing reads
    /// the jobs' files any more. `None` for a tracker without jobs.
    pub fn past_commit(&self) -> Option<bool> {
        let past = |s: &Option<Seen>| {
            s.as_ref()
                .is_some_and(|s| matches!(s.state, JobState::Committing | JobState::Completed))
        };
        (!self.jobs.is_empty()).then(|| self.jobs.iter().all(|j| j.seen.iter().all(past)))
    }

    /// Each job as the report shows it: its batch, its rows and every end's state.
    pub fn job_reports(&self) -> Vec<super::report::JobReport> {
        self.jobs
            .iter()
            .map(|j| super::report::JobReport {
                batch: j.batch_id.clone(),
                collection: j.collection.to_string(),
                partition: j.partition.clone(),
                job_id: j.job_id.as_ref().map(|i| i.0.clone()),
                rows: j.expected.map_or(0, |e| e.inserted),
                expected_rows: j.expected,
                states: self
                    .end_names
                    .iter()
                    .zip(&j.seen)
                    .zip(&j.imported)
                    .map(|((end, s), imported)| super::report::EndJobState {
                        end: end.clone(),
                        state: s.as_ref().map(|s| s.state),
                        reason: s.as_ref().and_then(|s| s.reason.clone()),
                        imported_rows: *imported,
                    })
                    .collect(),
            })
            .collect()
    }

    /// Which ends have which of `jobs` short of Completed, e.g. `s3: 6 Uncommitted (first
    /// job 4470…)`; empty when every end completed every job.
    pub fn not_completed(&self, jobs: &[usize]) -> String {
        let mut per_end = Vec::new();
        for (e, name) in self.end_names.iter().enumerate() {
            let mut states: std::collections::BTreeMap<String, usize> = Default::default();
            let mut first = None;
            for &j in jobs {
                let state = self.jobs[j].seen[e].as_ref().map(|s| s.state);
                if state != Some(JobState::Completed) {
                    let shown = state.map_or("unseen".to_string(), |s| s.to_string());
                    *states.entry(shown).or_default() += 1;
                    first = first.or(self.jobs[j].job_id.as_ref());
                }
            }
            if let Some(first) = first {
                let counts: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
                per_end.push(format!("{name}: {} (first job {first})", counts.join(", ")));
            }
        }
        per_end.join("; ")
    }

    pub fn counts(&self) -> JobCounts {
        self.end_names
            .iter()
            .enumerate()
            .map(|(e, name)| {
                let mut states = std::collections::BTreeMap::new();
                for j in self.jobs.iter().filter(|j| j.job_id.is_some()) {
                    if let Some(s) = &j.seen[e] {
                        *states.entry(s.state).or_default() += 1;
                    }
                }
                (name.clone(), states)
            })
            .collect()
    }

    /// The (job, end) pairs of `jobs` that have a job id, with the tracker index of each.
    fn pairs(&self, jobs: &[usize], ends: usize) -> (Vec<Pair>, Vec<usize>) {
        let mut pairs = Vec::with_capacity(jobs.len() * ends);
        let mut owner = Vec::with_capacity(jobs.len() * ends);
        for &j in jobs {
            if let Some(id) = &self.jobs[j].job_id {
                for end in 0..ends {
                    pairs.push(Pair {
                        job: id.clone(),
                        db: self.jobs[j].db.clone(),
                        end,
                        collection: self.jobs[j].collection.clone(),
                    });
                    owner.push(j);
                }
            }
        }
        (pairs, owner)
    }

    fn note(&mut self, j: usize, end: usize, sight: &Sight) {
        match sight {
            Sight::Seen(seen) => self.jobs[j].seen[end] = Some(seen.clone()),
            Sight::Missing => self.jobs[j].seen[end] = None,
            Sight::Unreachable(_) => {}
        }
    }
}

/// A job as a failed hold names it: its id, its batch, and the end it was seen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldJob {
    pub job: MilvusJobId,
    pub batch: String,
    pub end: String,
}

/// Why a hold gave up: nothing is decided on its jobs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    #[error(
        "not every end reached Uncommitted within the commit timeout (job {} of {} on {})",
        .0.job, .0.batch, .0.end
    )]
    CommitTimeout(HeldJob),
    #[error("job {} ({}) failed on {role} {}: {reason}", job.job, job.batch, job.end)]
    JobFailed {
        job: HeldJob,
        role: Role,
        /// Milvus's own words.
        reason: String,
    },
    #[error("the target {} does not know job {} ({}) it created", .0.end, .0.job, .0.batch)]
    TargetForgot(HeldJob),
    #[error(
        "secondary {}: the mirror of job {} ({}) is still {state} {late_secs}s after the \
         target's copy was Uncommitted (mirror grace {grace_secs}s)",
        job.end, job.job, job.batch
    )]
    MirrorLate {
        job: HeldJob,
        /// What the secondary showed last, e.g. `Importing 40%` or `not created yet`.
        state: String,
        late_secs: u64,
        grace_secs: u64,
    },
    /// An end refused lockstep's rights to look at its jobs.
    #[error("{0}")]
    Denied(String),
}

impl From<Denied> for HoldError {
    fn from(denied: Denied) -> HoldError {
        HoldError::Denied(denied.0)
    }
}

/// Waits until every end reports every job of `jobs` Uncommitted (or past it). A failed job
/// anywhere, a mirror that trails its target job by more than `grace`, or `deadline` stops
/// the hold with the reason. `on_change` is called as states change (progress display), at
/// most every [`SHOW_EVERY`].
pub async fn hold(
    ends: &Ends,
    tracker: &mut Tracker,
    jobs: &[usize],
    grace: Duration,
    deadline: Option<Instant>,
    first: FirstLook,
    on_change: &(dyn Fn(&Tracker) + Send + Sync),
) -> Result<(), HoldError> {
    let (pairs, owner) = tracker.pairs(jobs, ends.len());
    let job_count = jobs.len();
    let names: Vec<String> = ends.all().iter().map(|e| e.name.clone()).collect();
    // When each job's target copy became ready: the mirror grace runs from there.
    let mut target_ready: Vec<Option<Instant>> = vec![None; tracker.jobs.len()];
    let mut shown = Shown::default();
    let mut judge = |i: usize, sight: Sight, now: Instant| -> Judgement<HoldError> {
        let j = owner[i];
        let end = pairs[i].end;
        tracker.note(j, end, &sight);
        shown.maybe(now, || on_change(tracker));
        let job = || HeldJob {
            job: pairs[i].job.clone(),
            batch: tracker.jobs[j].batch_id.clone(),
            end: names[end].clone(),
        };
        if let Some(d) = deadline
            && now >= d
        {
            return Judgement::Stop(HoldError::CommitTimeout(job()));
        }
        let state = match &sight {
            Sight::Seen(p) if p.state.is_ready_to_commit() => {
                if end == 0 {
                    target_ready[j].get_or_insert(now);
                }
                // Some job is held Uncommitted somewhere, not yet everywhere.
                super::faults::crash_point("holding");
                return Judgement::Done;
            }
            Sight::Seen(p) if p.state == JobState::Failed => {
                return Judgement::Stop(HoldError::JobFailed {
                    role: if end == 0 {
                        Role::Target
                    } else {
                        Role::Secondary
                    },
                    reason: p.reason.clone().unwrap_or_else(|| "no reason given".into()),
                    job: job(),
                });
            }
            Sight::Seen(p) => format!("{} {}%", p.state, p.progress),
            Sight::Missing if end == 0 => {
                return Judgement::Stop(HoldError::TargetForgot(job()));
            }
            Sight::Missing => "not created yet".to_string(),
            Sight::Unreachable(e) => format!("unreachable ({e})"),
        };
        match (end, target_ready[j]) {
            (0, _) | (_, None) => Judgement::Wait,
            (_, Some(ready)) if now.saturating_duration_since(ready) > grace => {
                Judgement::Stop(HoldError::MirrorLate {
                    job: job(),
                    state,
                    late_secs: now.saturating_duration_since(ready).as_secs(),
                    grace_secs: grace.as_secs(),
                })
            }
            _ => Judgement::Wait,
        }
    };
    let held = watch(ends, &pairs, job_count, first, &mut judge).await;
    on_change(tracker);
    held
}

/// Sends the commit of every job in `jobs` to the target (never to a secondary), each once
/// `fence` passed. Commit is idempotent in Uncommitted, Committing and Completed, so it is
/// retried on any passing fault. A job whose commit the target refuses is a divergence on
/// the target itself. `Err` once the fence failed: the commits not sent are the new
/// holder's, which rolls the same decision forward.
pub async fn commit(
    ends: &Ends,
    fence: &dyn Fence,
    tracker: &Tracker,
    jobs: &[usize],
    deadline: Instant,
) -> Result<Vec<Divergence>, Lost> {
    let target = ends.target();
    // Closures over owned items: one over a borrowed item would keep the restore's future
    // from being `Send` (rust-lang/rust#102211).
    let results: Vec<(usize, Fenced<()>)> = futures::stream::iter(
        jobs.iter()
            .copied()
            .filter_map(|j| tracker.jobs[j].job_id.clone().map(|id| (j, id))),
    )
    .map(|(j, id)| async move {
        let db = &tracker.jobs[j].db;
        (
            j,
            fenced(deadline, fence, || target.rest.commit(db, &id)).await,
        )
    })
    .buffer_unordered(CONTROL_IN_FLIGHT)
    .collect()
    .await;
    let mut sent = Vec::with_capacity(results.len());
    for (j, result) in results {
        sent.push((j, result?));
    }
    Ok(sent
        .into_iter()
        .filter_map(|(j, r)| {
            // A job the target no longer knows was created (the journal says so): whether
            // it completed is for `complete` to find out, not a refused commit.
            r.err()
                .filter(|e| !e.is_job_not_found())
                .map(|e| Divergence {
                    end: target.name.clone(),
                    job_id: tracker.jobs[j]
                        .job_id
                        .as_ref()
                        .map(|i| i.0.clone())
                        .unwrap_or_default(),
                    collection: tracker.jobs[j].collection.to_string(),
                    reason: format!("the target refused the commit: {e}"),
                })
        })
        .collect())
}

/// Waits until every end reports every job of `jobs` Completed, or failed for good (a
/// divergence naming the end). Rolls forward only: a target copy that stays Uncommitted
/// gets its commit again. Returns the divergences and whether the wait ended before
/// `deadline` (otherwise the restore is incomplete and `recover` continues it).
pub async fn complete(
    ends: &Ends,
    fence: &dyn Fence,
    tracker: &mut Tracker,
    jobs: &[usize],
    deadline: Option<Instant>,
    on_change: &(dyn Fn(&Tracker) + Send + Sync),
) -> (Vec<Divergence>, bool) {
    let (pairs, owner) = tracker.pairs(jobs, ends.len());
    let names: Vec<String> = ends.all().iter().map(|e| e.name.clone()).collect();
    let mut divergences = Vec::new();
    // When each job's commit was last sent again.
    let mut recommitted: std::collections::HashMap<MilvusJobId, Instant> = Default::default();
    let started = Instant::now();
    // Commits sent again go out beside the wait, each once the fence passed; the first
    // fence that fails ends the wait (the new holder finishes it).
    let (recommit, mut to_recommit) =
        tokio::sync::mpsc::unbounded_channel::<(Arc<str>, MilvusJobId)>();
    let mut shown = Shown::default();
    let mut said = started;
    // When each pair was first seen missing, while it still is.
    let mut missing_since: std::collections::HashMap<usize, Instant> = Default::default();
    let mut judge = |i: usize, sight: Sight, now: Instant| -> Judgement {
        let j = owner[i];
        let end = pairs[i].end;
        tracker.note(j, end, &sight);
        shown.maybe(now, || on_change(tracker));
        if !matches!(sight, Sight::Missing) {
            missing_since.remove(&i);
        }
        let divergence = |reason: String| Divergence {
            end: names[end].clone(),
            job_id: pairs[i].job.0.clone(),
            collection: tracker.jobs[j].collection.to_string(),
            reason,
        };
        match &sight {
            Sight::Seen(p) if p.state == JobState::Completed => return Judgement::Done,
            Sight::Seen(p) if p.state == JobState::Failed => {
                divergences.push(divergence(p.reason.clone().unwrap_or("failed".into())));
                return Judgement::Done;
            }
            // Past the decision every end held the job (see `forgotten`).
            Sight::Missing => {
                let since = *missing_since.entry(i).or_insert(now);
                if now.saturating_duration_since(since) >= FORGOTTEN_AFTER {
                    divergences.push(divergence(forgotten(&names[end])));
                    return Judgement::Done;
                }
            }
            Sight::Seen(p) if end == 0 && p.state == JobState::Uncommitted => {
                let last = recommitted.get(&pairs[i].job).copied().unwrap_or(started);
                if now.saturating_duration_since(last) > RECOMMIT_AFTER {
                    recommitted.insert(pairs[i].job.clone(), now);
                    // The receiver lives as long as this wait.
                    let _ = recommit.send((pairs[i].db.clone(), pairs[i].job.clone()));
                }
            }
            _ => {}
        }
        if deadline.is_some_and(|d| now >= d) {
            return Judgement::Stop("completion timeout".into());
        }
        // Past the decision nothing can be undone: a wait that goes on says what it waits for.
        if now.saturating_duration_since(said) >= STILL_WAITING_EVERY {
            said = now;
            tracing::info!(
                since_commit_s = now.saturating_duration_since(started).as_secs(),
                waiting_for = %tracker.not_completed(jobs),
                "committed; waiting for every end to complete"
            );
        }
        Judgement::Wait
    };
    let finished = tokio::select! {
        watched = watch(ends, &pairs, jobs.len(), FirstLook::Spread, &mut judge) => watched.is_ok(),
        lost = resend_commits(fence, &ends.target().rest, &mut to_recommit) => {
            tracing::warn!(%lost, "stopped waiting for the ends to complete");
            false
        }
    };
    on_change(tracker);
    (divergences, finished)
}

/// Why a job that was held on every end is gone from `end`: past the decision it was
/// created, so it is named, not waited for and not taken for never created.
fn forgotten(end: &str) -> String {
    format!(
        "{end} no longer knows the job: it finished more than dataCoord.import.taskRetention \
         ago, or the end lost it; whether it completed, and with how many rows, cannot be read"
    )
}

/// Sends again each commit the wait asks for, once the fence passed; ends with the first
/// fence that fails (the new holder finishes the wait), else never.
async fn resend_commits(
    fence: &dyn Fence,
    target: &crate::milvus::RestClient,
    to_recommit: &mut tokio::sync::mpsc::UnboundedReceiver<(Arc<str>, MilvusJobId)>,
) -> Lost {
    while let Some((db, id)) = to_recommit.recv().await {
        if let Err(lost) = fence.check().await {
            return lost;
        }
        if let Err(e) = target.commit(&db, &id).await {
            tracing::warn!(job = %id, error = %e, "re-sent commit failed; will retry");
        }
    }
    std::future::pending().await
}

/// Why an abort did not settle on every end.
#[derive(Debug, thiserror::Error)]
pub enum AbortError {
    /// The fence failed: the rest is the new holder's.
    #[error(transparent)]
    Lost(#[from] Lost),
    /// An end refused an abort to this user, or a status read: waiting will not settle it.
    #[error("{0}; the jobs stay held until a user allowed to abort them does")]
    Denied(String),
    /// A job is Committing or Completed though this restore never committed it.
    #[error("job {job} on {end} is {state} though this restore never committed it")]
    Committed {
        job: MilvusJobId,
        end: String,
        state: JobState,
    },
    /// A job some end still holds past the deadline.
    #[error("job {job} ({batch}) on {end} did not settle after the abort")]
    Unsettled {
        job: MilvusJobId,
        batch: String,
        end: String,
    },
}

impl From<Denied> for AbortError {
    fn from(denied: Denied) -> AbortError {
        AbortError::Denied(denied.0)
    }
}

/// Aborts every job of `jobs` on the target, each by the id this attempt's create got and
/// once `fence` passed, and waits until no end holds one Uncommitted: the target's copy
/// Failed (or unknown), each mirror Failed, or still unknown `settle` after the abort (its
/// ImportMsg never arrived, so neither will a job). `Err` names what did not settle before
/// `deadline`, or that the fence failed.
pub async fn abort(
    ends: &Ends,
    fence: &dyn Fence,
    tracker: &mut Tracker,
    jobs: &[usize],
    settle: Duration,
    deadline: Instant,
) -> Result<(), AbortError> {
    send_aborts(ends.target(), fence, tracker, jobs, deadline).await?;
    let (pairs, owner) = tracker.pairs(jobs, ends.len());
    let names: Vec<String> = ends.all().iter().map(|e| e.name.clone()).collect();
    let aborted_at = Instant::now();
    let mut stuck: Option<AbortError> = None;
    let mut judge = |i: usize, sight: Sight, now: Instant| -> Judgement<AbortError> {
        let j = owner[i];
        let end = pairs[i].end;
        tracker.note(j, end, &sight);
        let verdict = match &sight {
            Sight::Seen(p) if p.state == JobState::Failed => Judgement::Done,
            Sight::Missing if end == 0 => Judgement::Done,
            Sight::Missing if now.saturating_duration_since(aborted_at) >= settle => {
                Judgement::Done
            }
            Sight::Seen(p) if p.state == JobState::Completed || p.state == JobState::Committing => {
                // Only a commit makes a job Committing; before a decision none was sent by
                // this restore. Report it rather than wait forever.
                stuck = Some(AbortError::Committed {
                    job: pairs[i].job.clone(),
                    end: names[end].clone(),
                    state: p.state,
                });
                Judgement::Done
            }
            _ => Judgement::Wait,
        };
        if matches!(verdict, Judgement::Wait) && now >= deadline {
            return Judgement::Stop(AbortError::Unsettled {
                job: pairs[i].job.clone(),
                batch: tracker.jobs[j].batch_id.clone(),
                end: names[end].clone(),
            });
        }
        verdict
    };
    watch(ends, &pairs, jobs.len(), FirstLook::Now, &mut judge).await?;
    match stuck {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// Sends the abort of every job of `jobs` that has an id to `target`, each once `fence`
/// passed. An abort refused to this user will not settle by waiting, so it is an error now;
/// one refused otherwise (the job already Failed, or never created) is left to the states.
async fn send_aborts(
    target: &EndClient,
    fence: &dyn Fence,
    tracker: &Tracker,
    jobs: &[usize],
    deadline: Instant,
) -> Result<(), AbortError> {
    let ids: Vec<(&str, MilvusJobId)> = jobs
        .iter()
        .filter_map(|&j| {
            let job = &tracker.jobs[j];
            job.job_id.clone().map(|id| (&*job.db, id))
        })
        .collect();
    let ids = &ids;
    let fenced: Vec<(&MilvusJobId, Fenced<()>)> = futures::stream::iter(0..ids.len())
        .map(|i| async move {
            let (db, id) = &ids[i];
            (
                id,
                fenced(deadline, fence, || target.rest.abort(db, id)).await,
            )
        })
        .buffer_unordered(CONTROL_IN_FLIGHT)
        .collect()
        .await;
    let mut answers = Vec::with_capacity(fenced.len());
    for (id, answer) in fenced {
        answers.push((id, answer?));
    }
    let denied: Vec<String> = answers
        .iter()
        .filter_map(|(id, r)| match r {
            Err(e) if e.is_denied() => Some(format!("abort of job {id} was refused: {e}")),
            _ => None,
        })
        .collect();
    if !denied.is_empty() {
        return Err(AbortError::Denied(denied.join("; ")));
    }
    let refused: Vec<String> = answers
        .iter()
        .filter_map(|(id, r)| match r {
            // Already Failed or never created: nothing to release.
            Err(e) if !e.is_job_not_found() => {
                Some(format!("abort of job {id} on {}: {e}", target.name))
            }
            _ => None,
        })
        .collect();
    if !refused.is_empty() {
        let refused = refused.join("; ");
        tracing::warn!(%refused, "some aborts were refused; checking their states");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: Option<&str>, state: JobState, reason: Option<&str>) -> Tracked {
        let name = id.unwrap_or("unsubmitted");
        Tracked {
            batch_id: format!("default.c/p/{name}"),
            db: "default".into(),
            collection: "default.c".into(),
            partition: format!("p-{name}"),
            expected: None,
            job_id: id.map(|id| MilvusJobId(id.into())),
            seen: vec![
                Some(Seen {
                    state,
                    progress: 40,
                    reason: reason.map(str::to_owned),
                }),
                None,
            ],
            imported: vec![Some(7), None],
        }
    }

    /// A copy over a published tracker is the tracker, whatever the published one held:
    /// more jobs or fewer, ids and reasons where it had none or the other way round.
    #[test]
    fn a_copy_over_a_published_tracker_is_the_tracker() {
        let source = Tracker {
            end_names: vec!["t".into(), "s1".into()],
            jobs: vec![
                job(Some("41"), JobState::Uncommitted, None),
                job(None, JobState::Pending, Some("waiting")),
            ],
        };
        let older = |jobs| Tracker {
            end_names: vec!["t".into()],
            jobs,
        };
        for mut published in [
            Tracker::default(),
            older(vec![job(None, JobState::Failed, Some("gone"))]),
            older(vec![
                job(Some("1"), JobState::Importing, None),
                job(Some("2"), JobState::Importing, None),
                job(Some("3"), JobState::Completed, None),
            ]),
        ] {
            source.copy_to(&mut published);
            assert_eq!(format!("{published:?}"), format!("{source:?}"));
        }
    }
}
