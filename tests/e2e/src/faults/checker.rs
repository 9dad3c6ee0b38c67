//! DESIGN.md §2 over what a run left: every end's final `/sim/v1/state` (jobs with their state
//! histories, collections, the request log), the journal's records, and what each lockstep
//! process exited with and reported. The checker knows nothing of the schedule that produced
//! them: a violation is a violation whatever the faults were.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use lockstep::engine::Report;
use lockstep::journal::{BatchRecord, CommitGroup, Decision, Outcome, RestoreRecord};
use milvus_sim::ClusterSnapshot;
use milvus_sim::fixtures::GeneratedBackup;
use milvus_sim::jobs::JobState;
use serde_json::Value;

use crate::{L0Logs, imported_differs};

/// One broken promise, with what identifies it. The invariant it breaks is in its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Invariant 1: a secondary was sent an import create, commit or abort.
    SecondaryWritten { end: String, route: String },
    /// Invariant 1: commit sent before `end` reported the job Uncommitted.
    CommitBeforeUncommitted { job: i64, end: String },
    /// Invariant 1: commit sent for a job whose group has no commit decision on record.
    CommitWithoutDecision { job: i64 },
    /// Invariant 1: commit sent before the decision was written.
    CommitBeforeDecision {
        job: i64,
        decided_ms: i64,
        commit_ms: i64,
    },
    /// Invariants 2 and 4: a job left in a non-final state after the run converged.
    Held {
        end: String,
        job: i64,
        state: JobState,
    },
    /// Invariant 2: a job held when its restore failed was never aborted; it failed only
    /// because its collection was dropped afterwards.
    AbortSkipped { job: i64 },
    /// Invariant 2: a job of a group never decided for commit became visible.
    VisibleWithoutDecision { end: String, job: i64 },
    /// Invariant 3: a job of a committed group is not Completed on the target.
    CommittedNotCompleted { job: i64, state: Option<JobState> },
    /// Invariant 3: a committed job is not Completed on a secondary, and no report names it.
    UnreportedDivergence {
        end: String,
        job: i64,
        state: Option<JobState>,
    },
    /// Invariants 1 and 6: a committed job shows other rows on an end than the backup holds
    /// for its batch, and no report names it.
    RowsWrong {
        end: String,
        job: i64,
        expected: String,
        imported: i64,
    },
    /// Invariant 3: a report names a divergence that did not happen.
    FalseDivergence { end: String, job: String },
    /// Invariant 4: a Completed job the journal never committed (a double import).
    OrphanCompleted { end: String, job: i64 },
    /// Invariant 4: two attempts both committed one collection.
    CommittedTwice { collection: String },
    /// Visible data differs from the backup's for a committed collection.
    DataMismatch {
        end: String,
        collection: String,
        detail: String,
    },
    /// Invariant 4: a restore left unfinished after the runner resumed it.
    NotConverged {
        restore: String,
        outcome: Option<Outcome>,
    },
    /// The report (or journal) says something other than what happened.
    OutcomeDisagrees { restore: String, detail: String },
    /// A process's exit code is not its report's.
    ExitCodeDisagrees {
        process: String,
        code: i32,
        outcome: Outcome,
    },
    /// Invariant 6: the host died (panic, signal) without being told to.
    HostDied { process: String, code: i32 },
    /// Invariant 6: a check that broke its bounds did not stop the restore.
    CheckIgnored { restore: String },
    /// Invariant 5: the same content submitted again ran again.
    RanTwice { detail: String },
    /// Invariant 8: a collection an attempt committed is gone from an end no report names
    /// as diverged (a stale host dropped it, say).
    CommittedGone { end: String, collection: String },
    /// Invariant 8: an attempt rolled back because its host was lost before its decision,
    /// and no later attempt ran the job, nor does its report say the attempts are spent.
    LostNotRerun { restore: String },
    /// Invariant 9: DDL on a collection answered while one of its import jobs was
    /// unfinished (milvus#53071 refuses schema DDL then, a held job included).
    DdlWhileImporting {
        collection: String,
        route: String,
        job: i64,
    },
    /// Invariant 10: a commit stamped below its rows' newest timestamp stopped a pchannel of
    /// `end` at the commit fence (milvus#51589).
    StaleCommit {
        end: String,
        job: i64,
        pchannel: String,
    },
    /// Invariant 5: every attempt was refused before it planned anything, yet `end` was
    /// written.
    RefusalWrote { end: String, route: String },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Violation::*;
        match self {
            SecondaryWritten { end, route } => {
                write!(f, "[inv 1] secondary {end} was sent {route}")
            }
            CommitBeforeUncommitted { job, end } => write!(
                f,
                "[inv 1] commit of job {job} sent before {end} reported it Uncommitted"
            ),
            CommitWithoutDecision { job } => write!(
                f,
                "[inv 1] commit of job {job} sent, but no commit decision is on record"
            ),
            CommitBeforeDecision {
                job,
                decided_ms,
                commit_ms,
            } => write!(
                f,
                "[inv 1] commit of job {job} sent at {commit_ms} before its decision at {decided_ms}"
            ),
            Held { end, job, state } => {
                write!(f, "[inv 2/4] {end} still holds job {job} in {state:?}")
            }
            AbortSkipped { job } => write!(
                f,
                "[inv 2] job {job} was held when its restore failed, but no abort was sent (it died with its collection)"
            ),
            VisibleWithoutDecision { end, job } => write!(
                f,
                "[inv 2] job {job} Completed on {end} without a commit decision"
            ),
            CommittedNotCompleted { job, state } => write!(
                f,
                "[inv 3] committed job {job} is {state:?} on the target, not Completed"
            ),
            UnreportedDivergence { end, job, state } => write!(
                f,
                "[inv 3] committed job {job} is {state:?} on {end}, and no report names it"
            ),
            RowsWrong {
                end,
                job,
                expected,
                imported,
            } => write!(
                f,
                "[inv 1/6] committed job {job} imported {imported} rows on {end}, the backup holds {expected}, and no report names it"
            ),
            FalseDivergence { end, job } => write!(
                f,
                "[inv 3] a report names job {job} on {end} as diverged, but it is Completed there"
            ),
            OrphanCompleted { end, job } => write!(
                f,
                "[inv 4] job {job} Completed on {end} but no journal record committed it"
            ),
            CommittedTwice { collection } => {
                write!(f, "[inv 4] two attempts committed {collection}")
            }
            DataMismatch {
                end,
                collection,
                detail,
            } => write!(f, "[data] {collection} on {end}: {detail}"),
            NotConverged { restore, outcome } => write!(
                f,
                "[inv 4] restore {restore} did not converge (outcome {outcome:?})"
            ),
            OutcomeDisagrees { restore, detail } => {
                write!(f, "[report] restore {restore}: {detail}")
            }
            ExitCodeDisagrees {
                process,
                code,
                outcome,
            } => write!(
                f,
                "[report] {process} exited {code} but reported {outcome:?} (exit {})",
                outcome.exit_code()
            ),
            HostDied { process, code } => {
                write!(f, "[inv 6] {process} died with exit code {code}")
            }
            CheckIgnored { restore } => write!(
                f,
                "[inv 6] restore {restore} was committed although its check broke its bounds"
            ),
            RanTwice { detail } => write!(f, "[inv 5] {detail}"),
            CommittedGone { end, collection } => write!(
                f,
                "[inv 8] {collection} was committed, but is gone from {end}, and no report names a divergence there"
            ),
            LostNotRerun { restore } => write!(
                f,
                "[inv 8] restore {restore} was lost with its host before its decision, and no later attempt ran the job"
            ),
            DdlWhileImporting {
                collection,
                route,
                job,
            } => write!(
                f,
                "[inv 9] {route} on {collection} was answered while its import job {job} was unfinished"
            ),
            StaleCommit { end, job, pchannel } => write!(
                f,
                "[inv 10] the commit of job {job} was stamped below its rows' newest timestamp: {end} stopped {pchannel} at the commit fence"
            ),
            RefusalWrote { end, route } => write!(
                f,
                "[inv 5] every attempt was refused before planning anything, yet {end} was sent {route}"
            ),
        }
    }
}

/// How a lockstep process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It ended by itself.
    Finished,
    /// The runner killed it (SIGKILL).
    Killed,
    /// It was told to die at a crash point.
    CrashPoint,
}

/// What one lockstep process left.
#[derive(Debug, Clone)]
pub struct ProcessRun {
    /// e.g. "run#1", "recover#2", "race#1".
    pub name: String,
    pub ending: Ending,
    pub code: i32,
    pub report: Option<Report>,
}

/// Invariant 5, when the runner submitted a finished job's content once more.
#[derive(Debug, Clone)]
pub struct Resubmission {
    pub first_restore_id: String,
    pub run: ProcessRun,
    /// `import/create` requests the target received before and after.
    pub creates_before: usize,
    pub creates_after: usize,
}

/// Everything the checker reads.
pub struct Evidence<'a> {
    /// Every end's final state, target first.
    pub ends: &'a [(String, ClusterSnapshot)],
    /// Every journal record (every attempt).
    pub records: &'a [RestoreRecord],
    /// Every lockstep process, in start order.
    pub processes: &'a [ProcessRun],
    pub backup: &'a GeneratedBackup,
    /// How the restore brings the backup's L0 deletes to the ends.
    pub l0: L0Logs,
    /// The job's check traps, loops or outgrows its memory.
    pub misbehaving_check: bool,
    pub resubmission: Option<&'a Resubmission>,
}

/// Import writes; a secondary must never receive one.
const IMPORT_WRITES: [&str; 3] = ["import/create", "import/commit", "import/abort"];

/// Invariant 1 from the ends alone: no secondary received an import write, and every commit
/// reached the target only after every end reported its job Uncommitted.
pub fn commits_followed_every_uncommitted(ends: &[(String, ClusterSnapshot)]) -> Vec<Violation> {
    let mut found = Vec::new();
    for (end, state) in ends.iter().skip(1) {
        for r in &state.requests {
            if IMPORT_WRITES.iter().any(|w| r.route.ends_with(w)) {
                found.push(Violation::SecondaryWritten {
                    end: end.clone(),
                    route: r.route.clone(),
                });
            }
        }
    }
    let Some((_, target)) = ends.first() else {
        return found;
    };
    for commit in target.requests_to("import/commit") {
        let Some(job) = commit.job_id.as_deref().and_then(|j| j.parse::<i64>().ok()) else {
            continue;
        };
        for (end, state) in ends {
            let uncommitted = state
                .job(job)
                .and_then(|j| j.history.iter().find(|h| h.state == JobState::Uncommitted))
                .map(|h| h.at.unix_ms);
            if uncommitted.is_none_or(|at| at > commit.at.unix_ms) {
                found.push(Violation::CommitBeforeUncommitted {
                    job,
                    end: end.clone(),
                });
            }
        }
    }
    found
}

/// DDL a restore sends on a collection after creating it: partitions, indexes, properties,
/// fields, and the load (and release) of verification.
const COLLECTION_DDL: [&str; 7] = [
    "/CreatePartition",
    "/CreateIndex",
    "/DropIndex",
    "/AlterCollection",
    "/AddCollectionField",
    "/LoadCollection",
    "/ReleaseCollection",
];

/// Invariant 9 from the target's request log: no DDL on a collection was answered (code 0)
/// while one of its import jobs was unfinished, so every DDL of the restore came before the
/// collection's first import and its load after the last one ended. A job counts from the
/// millisecond after its creation: a create sent on a DDL's answer can fall in the same one.
pub fn ddl_before_imports(ends: &[(String, ClusterSnapshot)]) -> Vec<Violation> {
    let Some((_, target)) = ends.first() else {
        return Vec::new();
    };
    let qualified =
        |db: &str, name: &str| format!("{}.{name}", if db.is_empty() { "default" } else { db });
    let mut found = Vec::new();
    for r in &target.requests {
        let Some(collection) = r.collection.as_deref() else {
            continue;
        };
        if r.code != Some(0) || !COLLECTION_DDL.iter().any(|d| r.route.ends_with(d)) {
            continue;
        }
        let at = r.at.unix_ms;
        let unfinished = target.jobs.iter().find(|j| {
            qualified(&j.db_name, &j.collection_name) == collection
                && j.created.unix_ms < at
                && !j
                    .history
                    .iter()
                    .any(|h| h.state.is_terminal() && h.at.unix_ms <= at)
        });
        if let Some(job) = unfinished {
            found.push(Violation::DdlWhileImporting {
                collection: collection.to_owned(),
                route: r.route.rsplit('/').next().unwrap_or(&r.route).to_owned(),
                job: job.job_id,
            });
        }
    }
    found
}

/// Invariants 2 and 4's end state: no job on any end short of Completed or Failed.
pub fn nothing_held(ends: &[(String, ClusterSnapshot)]) -> Vec<Violation> {
    ends.iter()
        .flat_map(|(end, state)| {
            state
                .jobs
                .iter()
                .filter(|j| !j.state.is_terminal())
                .map(|j| Violation::Held {
                    end: end.clone(),
                    job: j.job_id,
                    state: j.state,
                })
        })
        .collect()
}

/// After a rollback: nothing held, nothing Completed and no collection left on any end.
pub fn nothing_restored(ends: &[(String, ClusterSnapshot)]) -> Vec<Violation> {
    let mut found = nothing_held(ends);
    for (end, state) in ends {
        for j in state.jobs.iter().filter(|j| j.state == JobState::Completed) {
            found.push(Violation::VisibleWithoutDecision {
                end: end.clone(),
                job: j.job_id,
            });
        }
        for c in &state.collections {
            found.push(Violation::OutcomeDisagrees {
                restore: "-".into(),
                detail: format!(
                    "collection {}.{} left behind on {end} after a rollback",
                    c.db_name, c.name
                ),
            });
        }
    }
    found
}

/// Invariant 9 from the ends alone: no pchannel of any end stopped at a rejected commit
/// fence, which only a commit stamped below its rows' newest timestamp raises.
pub fn no_stale_commit(ends: &[(String, ClusterSnapshot)]) -> Vec<Violation> {
    (ends.iter())
        .flat_map(|(end, state)| {
            state.fences.iter().map(|f| Violation::StaleCommit {
                end: end.clone(),
                job: f.job_id,
                pchannel: f.pchannel.clone(),
            })
        })
        .collect()
}

/// Invariant 5's refusal: when every attempt was refused before it planned anything, no end
/// received a write.
fn refusals_wrote_nothing(e: &Evidence<'_>) -> Vec<Violation> {
    let refused = |r: &RestoreRecord| r.outcome == Some(Outcome::Refused) && r.groups.is_empty();
    if e.records.is_empty() || !e.records.iter().all(refused) {
        return Vec::new();
    }
    (e.ends.iter())
        .flat_map(|(end, state)| {
            crate::writes_in(state).map(|route| Violation::RefusalWrote {
                end: end.clone(),
                route: route.to_owned(),
            })
        })
        .collect()
}

/// A batch as the journal holds it, with its commit decision's time if it has one.
struct Submitted<'a> {
    record: &'a RestoreRecord,
    batch: &'a BatchRecord,
    committed_ms: Option<i64>,
}

fn committed_ms(group: &CommitGroup) -> Option<i64> {
    match &group.decision {
        Some(Decision::Commit { at }) => Some(at.as_millisecond()),
        _ => None,
    }
}

fn job_state(state: &ClusterSnapshot, job: i64) -> Option<JobState> {
    state.job(job).map(|j| j.state)
}

/// Every invariant, over everything a run left.
pub fn check(e: &Evidence<'_>) -> Vec<Violation> {
    let mut found = commits_followed_every_uncommitted(e.ends);
    found.extend(nothing_held(e.ends));
    found.extend(ddl_before_imports(e.ends));
    found.extend(no_stale_commit(e.ends));
    found.extend(refusals_wrote_nothing(e));
    let Some((_, target)) = e.ends.first() else {
        return found;
    };

    let mut submitted: BTreeMap<i64, Submitted<'_>> = BTreeMap::new();
    for record in e.records {
        for group in &record.groups {
            for batch in &group.batches {
                if let Some(job) = batch.job_id.as_ref().and_then(|j| j.0.parse::<i64>().ok()) {
                    submitted.insert(
                        job,
                        Submitted {
                            record,
                            batch,
                            committed_ms: committed_ms(group),
                        },
                    );
                }
            }
        }
    }

    // Invariant 1 against the journal: the decision was durable before each commit.
    for commit in target.requests_to("import/commit") {
        let Some(job) = commit.job_id.as_deref().and_then(|j| j.parse::<i64>().ok()) else {
            continue;
        };
        match submitted.get(&job).and_then(|s| s.committed_ms) {
            None => found.push(Violation::CommitWithoutDecision { job }),
            Some(decided_ms) if decided_ms > commit.at.unix_ms => {
                found.push(Violation::CommitBeforeDecision {
                    job,
                    decided_ms,
                    commit_ms: commit.at.unix_ms,
                });
            }
            Some(_) => {}
        }
    }

    let aborted: BTreeSet<i64> = target
        .requests_to("import/abort")
        .iter()
        .filter_map(|r| r.job_id.as_deref().and_then(|j| j.parse().ok()))
        .collect();
    // Invariants 2 and 3 per job; 4 for jobs nobody committed.
    for (job, s) in &submitted {
        let diverged = |end: &str| named_diverged(s, end);
        if s.committed_ms.is_some() {
            let state = job_state(target, *job);
            if state != Some(JobState::Completed) {
                found.push(Violation::CommittedNotCompleted { job: *job, state });
            }
            for (end, snapshot) in e.ends.iter().skip(1) {
                let state = job_state(snapshot, *job);
                if state != Some(JobState::Completed) && !diverged(end) {
                    found.push(Violation::UnreportedDivergence {
                        end: end.clone(),
                        job: *job,
                        state,
                    });
                }
            }
            // What describe answers for the job on each end, against the batch's account.
            if let Some(expected) = s.batch.planned.expected_rows {
                for (end, snapshot) in e.ends {
                    let Some(j) = snapshot.job(*job) else {
                        continue;
                    };
                    let imported = (j.total_rows - j.deleted_rows).max(0);
                    if j.state == JobState::Completed
                        && !expected.accepts(imported)
                        && !diverged(end)
                    {
                        found.push(Violation::RowsWrong {
                            end: end.clone(),
                            job: *job,
                            expected: expected.to_string(),
                            imported,
                        });
                    }
                }
            }
        } else {
            // A job the failure found alive must be aborted; a drop of its collection is
            // cleanup, not the abort DESIGN.md §1 asks for.
            let died_with_collection = target
                .job(*job)
                .is_some_and(|j| j.state == JobState::Failed && j.reason.ends_with(" dropped"));
            if died_with_collection && !aborted.contains(job) {
                found.push(Violation::AbortSkipped { job: *job });
            }
            for (end, snapshot) in e.ends {
                if job_state(snapshot, *job) == Some(JobState::Completed) {
                    found.push(Violation::VisibleWithoutDecision {
                        end: end.clone(),
                        job: *job,
                    });
                }
            }
        }
    }
    for (end, snapshot) in e.ends {
        for j in &snapshot.jobs {
            if j.state == JobState::Completed && !submitted.contains_key(&j.job_id) {
                found.push(Violation::OrphanCompleted {
                    end: end.clone(),
                    job: j.job_id,
                });
            }
        }
    }

    found.extend(check_data(e, &submitted));
    found.extend(check_records(e));
    found.extend(check_lost(e.records));
    found.extend(check_processes(e.processes));
    if let Some(r) = e.resubmission {
        found.extend(check_resubmission(r));
    }
    found
}

/// Visible data: each committed collection holds exactly the backup's logs, imported once,
/// and shows exactly its live rows, on every end that did not diverge; a collection nobody
/// committed shows no rows.
fn check_data(e: &Evidence<'_>, submitted: &BTreeMap<i64, Submitted<'_>>) -> Vec<Violation> {
    let mut found = Vec::new();
    for c in &e.backup.info.collection_backups {
        let name = format!("{}.{}", c.db_name, c.collection_name);
        let of_collection = |s: &&Submitted<'_>| {
            s.batch.planned.db == c.db_name && s.batch.planned.collection == c.collection_name
        };
        let committed: Vec<&Submitted<'_>> = submitted
            .values()
            .filter(of_collection)
            .filter(|s| s.committed_ms.is_some())
            .collect();
        let attempts: BTreeSet<&str> = committed.iter().map(|s| s.record.id.as_str()).collect();
        if attempts.len() > 1 {
            found.push(Violation::CommittedTwice {
                collection: name.clone(),
            });
        }
        for (end, snapshot) in e.ends {
            let collection = snapshot.collection(&c.db_name, &c.collection_name);
            let rows = collection.map_or(0, |c| c.visible_rows);
            if collection.is_none()
                && !committed.is_empty()
                && !committed
                    .iter()
                    .any(|s| named_diverged(s, end) || named_gone(s, end, &name))
            {
                found.push(Violation::CommittedGone {
                    end: end.clone(),
                    collection: name.clone(),
                });
                continue;
            }
            if committed.is_empty() {
                if rows != 0 {
                    found.push(Violation::DataMismatch {
                        end: end.clone(),
                        collection: name.clone(),
                        detail: format!("{rows} rows visible, but no attempt committed it"),
                    });
                }
                continue;
            }
            let completed = committed
                .iter()
                .filter(|s| {
                    s.batch
                        .job_id
                        .as_ref()
                        .and_then(|j| j.0.parse::<i64>().ok())
                        .and_then(|j| job_state(snapshot, j))
                        == Some(JobState::Completed)
                })
                .count();
            if completed < committed.len() {
                // A divergence on this end (named, or flagged above): its data is partial.
                continue;
            }
            let completed_here = snapshot
                .jobs
                .iter()
                .filter(|j| {
                    j.state == JobState::Completed
                        && j.db_name == c.db_name
                        && j.collection_name == c.collection_name
                })
                .count();
            if completed_here != committed.len() {
                found.push(Violation::DataMismatch {
                    end: end.clone(),
                    collection: name.clone(),
                    detail: format!(
                        "{completed_here} Completed imports for {} committed batches",
                        committed.len()
                    ),
                });
            }
            let differs = match collection {
                Some(imported) => imported_differs(imported, e.backup, c.collection_id, e.l0),
                None => Some("the collection is gone".into()),
            };
            if let Some(differs) = differs {
                found.push(Violation::DataMismatch {
                    end: end.clone(),
                    collection: name.clone(),
                    detail: format!("imported logs differ from the backup's: {differs}"),
                });
                continue;
            }
            // The right files, imported once, can still show other rows (a delete an end
            // did not apply): what a query counts must be the backup's live rows, exactly.
            let live = e
                .backup
                .live_rows
                .get(&c.collection_id)
                .copied()
                .unwrap_or(0) as i64;
            let shows = collection.map_or(0, |c| c.visible_rows - c.visible_deleted_rows);
            if shows != live
                && !committed
                    .iter()
                    .any(|s| named_by_query(s, end, &name, Shown::Count(shows)))
            {
                found.push(Violation::DataMismatch {
                    end: end.clone(),
                    collection: name.clone(),
                    detail: format!("{shows} rows live, the backup's data holds {live}"),
                });
            }
            // The right rows, counted right, can still hold a value other than the
            // backup's: a restore that compared a sample must have named it.
            let changed = collection.map_or(0, |c| c.changed_rows);
            if changed > 0
                && !committed
                    .iter()
                    .any(|s| named_by_query(s, end, &name, Shown::Changed))
            {
                found.push(Violation::DataMismatch {
                    end: end.clone(),
                    collection: name.clone(),
                    detail: format!("a query shows {changed} row(s) with a value changed"),
                });
            }
        }
    }
    found
}

/// What a query on an end shows that the backup does not hold.
#[derive(Clone, Copy)]
enum Shown {
    /// Other live rows: this many.
    Count(i64),
    /// A sampled row with a value changed.
    Changed,
}

/// Whether the report of `s`'s attempt says what a query on `end` showed of `collection`: the
/// rows the end holds, or a sampled row that differs (a mismatch it names, making the
/// restore diverged), or that it could not ask (so it claims nothing of that end's rows).
fn named_by_query(s: &Submitted<'_>, end: &str, collection: &str, seen: Shown) -> bool {
    let Some(report) = s
        .record
        .report
        .as_ref()
        .and_then(|r| r.read::<Value>().ok())
    else {
        return false;
    };
    let diverged = report["outcome"] == "diverged";
    (report["verification"]["shown"].as_array()).is_some_and(|shown| {
        shown.iter().any(|v| {
            let named = match seen {
                Shown::Count(shows) => v["shows"] == shows,
                Shown::Changed => v["sample"]["differences"].as_i64() > Some(0),
            };
            v["end"] == end
                && v["collection"] == collection
                && (v["unverifiable"].is_string() || (diverged && named))
        })
    })
}

/// The report of `s`'s attempt, when it has one that reads.
fn report_of(s: &Submitted<'_>) -> Option<Value> {
    s.record
        .report
        .as_ref()
        .and_then(|r| r.read::<Value>().ok())
}

/// Whether the report of `s`'s attempt names its job as diverged on `end`.
fn named_diverged(s: &Submitted<'_>, end: &str) -> bool {
    let Some(job) = &s.batch.job_id else {
        return false;
    };
    report_of(s).is_some_and(|r| {
        r["divergences"].as_array().is_some_and(|ds| {
            ds.iter()
                .any(|d| d["end"] == end && d["job_id"] == job.0.as_str())
        })
    })
}

/// Whether `s`'s report says its verification found `collection` gone from `end`.
fn named_gone(s: &Submitted<'_>, end: &str, collection: &str) -> bool {
    report_of(s).is_some_and(|r| {
        r["verification"]["shown"].as_array().is_some_and(|shown| {
            shown
                .iter()
                .any(|v| v["end"] == end && v["collection"] == collection && v["gone"] == true)
        })
    })
}

/// Invariant 8's second half: an attempt lost with its host before its decision is
/// followed by a later attempt of the same job, or its report says the attempts are spent.
fn check_lost(records: &[RestoreRecord]) -> Vec<Violation> {
    records
        .iter()
        .filter(|r| r.host_lost && r.outcome == Some(Outcome::RolledBack))
        .filter(|lost| {
            !records.iter().any(|r| {
                r.job_name == lost.job_name
                    && r.content_hash == lost.content_hash
                    && r.attempt > lost.attempt
            })
        })
        .filter(|lost| {
            let report = lost.report.as_ref().and_then(|r| r.read::<Value>().ok());
            !report.is_some_and(|r| {
                r["summary"]
                    .as_str()
                    .is_some_and(|s| s.contains("attempts were lost"))
            })
        })
        .map(|lost| Violation::LostNotRerun {
            restore: lost.id.to_string(),
        })
        .collect()
}

/// Each record finished, and its outcome and report say what its groups' decisions and the
/// ends show.
fn check_records(e: &Evidence<'_>) -> Vec<Violation> {
    let mut found = Vec::new();
    for record in e.records {
        let restore = record.id.to_string();
        let disagree = |detail: String| Violation::OutcomeDisagrees {
            restore: restore.clone(),
            detail,
        };
        let Some(outcome) = record.outcome.filter(|o| *o != Outcome::Incomplete) else {
            found.push(Violation::NotConverged {
                restore: restore.clone(),
                outcome: record.outcome,
            });
            continue;
        };
        let report: Option<Report> = record.report.as_ref().and_then(|r| r.read().ok());
        let Some(report) = report else {
            found.push(disagree(format!(
                "finished {outcome:?} without a readable report"
            )));
            continue;
        };
        if report.outcome != outcome {
            found.push(disagree(format!(
                "journal says {outcome:?}, its report {:?}",
                report.outcome
            )));
        }
        let committed = record.groups.iter().filter(|g| committed_ms(g).is_some());
        let committed_groups = committed.count();
        let all_committed = !record.groups.is_empty() && committed_groups == record.groups.len();
        match outcome {
            Outcome::Succeeded if !all_committed => {
                found.push(disagree(format!(
                    "reported {outcome:?} with {committed_groups} of {} groups committed",
                    record.groups.len()
                )));
            }
            // A divergence needs a commit; with collection atomicity another group may have
            // failed before its decision after it.
            Outcome::Diverged if committed_groups == 0 => {
                found.push(disagree("reported Diverged with no group committed".into()));
            }
            Outcome::PartlyCommitted if committed_groups == 0 || all_committed => {
                found.push(disagree(format!(
                    "reported {outcome:?} with {committed_groups} of {} groups committed",
                    record.groups.len()
                )));
            }
            Outcome::RolledBack | Outcome::Refused if committed_groups > 0 => {
                found.push(disagree(format!(
                    "reported {outcome:?} but {committed_groups} group(s) were committed"
                )));
            }
            _ => {}
        }
        // A divergence is a job an end failed to make visible, or rows a query showed
        // otherwise than the backup holds.
        let shown_wrong =
            (report.verification.as_ref()).is_some_and(|v| v.mismatches().next().is_some());
        if outcome == Outcome::Succeeded && (!report.divergences.is_empty() || shown_wrong) {
            found.push(disagree("succeeded with divergences".into()));
        }
        if outcome == Outcome::Diverged && report.divergences.is_empty() && !shown_wrong {
            found.push(disagree("diverged without naming a divergence".into()));
        }
        for d in &report.divergences {
            let state = e
                .ends
                .iter()
                .find(|(end, _)| *end == d.end)
                .and_then(|(_, s)| d.job_id.parse().ok().and_then(|j| job_state(s, j)));
            if state == Some(JobState::Completed) {
                found.push(Violation::FalseDivergence {
                    end: d.end.clone(),
                    job: d.job_id.clone(),
                });
            }
            if d.reason.is_empty() {
                found.push(disagree(format!(
                    "divergence of job {} on {} has no reason",
                    d.job_id, d.end
                )));
            }
        }
        if e.misbehaving_check && committed_groups > 0 {
            found.push(Violation::CheckIgnored {
                restore: restore.clone(),
            });
        }
    }
    found
}

/// Every process that was not killed ended with one of lockstep's exit codes and the report
/// its code stands for. A killed one may have printed its report before the signal landed:
/// its exit says only that it was killed.
fn check_processes(processes: &[ProcessRun]) -> Vec<Violation> {
    let mut found = Vec::new();
    for p in processes {
        if p.ending != Ending::Killed
            && let Some(report) = &p.report
            && report.exit_code() != p.code
        {
            found.push(Violation::ExitCodeDisagrees {
                process: p.name.clone(),
                code: p.code,
                outcome: report.outcome,
            });
        }
        if p.ending == Ending::Finished && !Outcome::ALL.iter().any(|o| o.exit_code() == p.code) {
            found.push(Violation::HostDied {
                process: p.name.clone(),
                code: p.code,
            });
        }
    }
    found
}

fn check_resubmission(r: &Resubmission) -> Vec<Violation> {
    let mut found = Vec::new();
    if r.creates_after != r.creates_before {
        found.push(Violation::RanTwice {
            detail: format!(
                "resubmitting finished content sent {} more import creates",
                r.creates_after - r.creates_before
            ),
        });
    }
    match &r.run.report {
        Some(report) if report.restore_id == r.first_restore_id => {}
        Some(report) => found.push(Violation::RanTwice {
            detail: format!(
                "resubmitting the content of {} answered with restore {}",
                r.first_restore_id, report.restore_id
            ),
        }),
        None => found.push(Violation::RanTwice {
            detail: format!(
                "resubmitting the content of {} printed no report (exit {})",
                r.first_restore_id, r.run.code
            ),
        }),
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(ending: Ending, code: i32, outcome: Option<Outcome>) -> ProcessRun {
        let report = outcome.map(|outcome| Report {
            outcome,
            ..Report::refused(
                lockstep::engine::report::ReportOf {
                    restore_id: "r1".into(),
                    job_name: "job".into(),
                    job_id: "job-1".into(),
                    backup: "nightly".into(),
                },
                String::new(),
                vec![],
            )
        });
        ProcessRun {
            name: "run#1".into(),
            ending,
            code,
            report,
        }
    }

    /// Seeds 3307 and 3310: a host killed after printing its report (exit -1) was flagged
    /// as exiting against its report.
    /// A report names a collection gone only on the ends its verification found it gone.
    #[test]
    fn a_collection_is_named_gone_only_where_the_verification_found_it_gone() {
        use lockstep::journal::{BatchRecord, PlannedBatch, RestoreId, StoredReport};
        let id = RestoreId::new("job", "abc", 1);
        let mut record = RestoreRecord::new(id, "job", "abc", 1, "nightly", vec![]);
        let shown = serde_json::json!({"verification": {"shown": [
            {"end": "t", "collection": "default.c", "live": 10, "shows": null, "gone": true},
            {"end": "s1", "collection": "default.c", "live": 10, "shows": 10},
        ]}});
        record.report = Some(StoredReport::of(&shown).unwrap());
        let planned: PlannedBatch = serde_json::from_value(serde_json::json!({
            "batch_id": "b", "db": "default", "collection": "c", "partition": "_default",
            "idempotency_key": "k", "files": [], "options": {},
        }))
        .unwrap();
        let batch = BatchRecord::new(planned);
        let submitted = Submitted {
            record: &record,
            batch: &batch,
            committed_ms: Some(0),
        };
        assert!(named_gone(&submitted, "t", "default.c"));
        assert!(!named_gone(&submitted, "s1", "default.c"));
        assert!(!named_gone(&submitted, "t", "default.d"));
    }

    #[test]
    fn a_host_killed_after_its_report_is_not_an_exit_code_disagreement() {
        let killed = process(Ending::Killed, -1, Some(Outcome::RolledBack));
        assert!(check_processes(&[killed]).is_empty());

        let lying = process(Ending::Finished, 0, Some(Outcome::RolledBack));
        assert!(matches!(
            check_processes(&[lying]).as_slice(),
            [Violation::ExitCodeDisagrees { code: 0, .. }]
        ));
    }
}
