//! The restore report: what happened, per end, per collection and per job, with the
//! outcome a script branches on. Written as JSON and as text next to the journal, printed
//! by the CLI, served by the API.

mod text;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write as _};
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::ends::Ends;
use super::refusal::Refusal;
use crate::backup::ExpectedRows;
use crate::journal::{Outcome, RestorePhase, Role};
use crate::milvus::JobState;
use crate::plugins::Phase;
use crate::storage::Transfer;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// False when this job content had already run (committed, or, for a watched file,
    /// ended at all) and was not run again: the report is that earlier run's.
    #[serde(default = "ran_by_default")]
    pub ran: bool,
    pub restore_id: String,
    pub job_name: String,
    /// The job's content hash: the same content runs once.
    pub job_id: String,
    pub backup: String,
    pub outcome: Outcome,
    /// One line a person reads first: why it ended this way.
    pub summary: String,
    /// The import it drove (preflight's choice); none when refused before the choice.
    #[serde(default)]
    pub route: Option<super::route::Route>,
    /// The backup's format (`binlog`, `snapshot`); none when refused before it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<crate::backup::BackupFormat>,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub ends: Vec<EndReport>,
    pub collections: Vec<CollectionReport>,
    pub jobs: Vec<JobReport>,
    /// A committed job that an end failed to make visible. Non-empty means exit 3.
    pub divergences: Vec<Divergence>,
    /// Preflight's reasons, when the restore was refused.
    pub refusals: Vec<String>,
    /// The kind of each refusal, in the same order (`version_too_old`, `over_budget`, …):
    /// what a script branches on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refusal_kinds: Vec<String>,
    pub checks: Vec<CheckEntry>,
    pub staging: Option<StagingReport>,
    /// Seconds spent in each phase, in order.
    pub phases: Vec<PhaseTime>,
    /// Milliseconds from the last end reported ready (Uncommitted) to the commit going out,
    /// the decision's durable write included; the slowest commit group's.
    pub reaction_ms: Option<u64>,
    /// Why this attempt ran: the attempt before it was lost with its host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_because: Option<String>,
    /// What `count(*)` showed on every end once the restore committed (`[verify]`); none
    /// when it was not asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<crate::verify::Verification>,
    /// What preflight let through that a person should know of.
    #[serde(default, skip_serializing_if = "PreflightNotes::is_empty")]
    pub preflight: PreflightNotes,
}

/// A report read back from before `ran` was written is one of a run.
fn ran_by_default() -> bool {
    true
}

/// What preflight let through and a report says: a wait for the clocks, builds that differ,
/// gates it could not read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreflightNotes {
    /// How long it waited for every end's clock to pass the backup's newest row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_waited_ms: Option<u64>,
    /// `end build` of every end, when their builds differ and the job allowed it
    /// (`allow_mixed_builds`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mixed_builds: Vec<String>,
    /// The ends whose replicated import gate was not read: the host config gives them no
    /// management URI.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gate_not_read: Vec<String>,
}

impl PreflightNotes {
    pub fn is_empty(&self) -> bool {
        *self == PreflightNotes::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndReport {
    pub name: String,
    pub role: Role,
    pub uri: String,
    pub version: Option<String>,
}

impl EndReport {
    /// Every end as the report names it, its version not known yet.
    pub fn of_ends(ends: &Ends) -> Vec<EndReport> {
        (ends.all().iter())
            .map(|e| EndReport {
                name: e.name.clone(),
                role: e.role,
                uri: e.uri.clone(),
                version: None,
            })
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionReport {
    pub source: String,
    pub target: String,
    pub partitions: usize,
    pub batches: usize,
    /// The rows the backup's data segments hold for the collection, before any delete.
    #[serde(alias = "rows")]
    pub inserted: i64,
    /// The rows some delete removes (a segment's own delta logs, or an L0 segment); `None`
    /// where the backup's data could not be read.
    #[serde(default)]
    pub deleted: Option<i64>,
    /// `inserted - deleted`: the rows a query sees once the restore is visible.
    #[serde(default)]
    pub live: Option<i64>,
    /// The live rows of each partition, where the data was read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub live_by_partition: BTreeMap<String, i64>,
    /// Per end, the rows its jobs imported (Milvus's `importedRows`, counted after each
    /// job's own deletes, folded L0 deletes included); ends that reported none are left out.
    #[serde(default)]
    pub imported: BTreeMap<String, i64>,
    /// Whether its jobs were committed (the decision of its commit group).
    pub committed: bool,
    /// How its L0 deletes reached the ends, when it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l0_deletes: Option<crate::backup::L0Route>,
}

impl CollectionReport {
    /// The collection as planned, its rows as the backup's data holds them.
    pub fn planned(c: &crate::backup::CollectionPlan) -> Self {
        let figures = c.figures();
        CollectionReport {
            source: c.source.to_string(),
            target: c.target.to_string(),
            partitions: c.partitions.len(),
            batches: c.batches.len(),
            inserted: figures.inserted,
            deleted: figures.deleted,
            live: figures.live,
            live_by_partition: c
                .rows
                .as_ref()
                .map(|r| r.partitions.clone())
                .unwrap_or_default(),
            imported: BTreeMap::new(),
            committed: false,
            l0_deletes: c.l0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobReport {
    pub batch: String,
    pub collection: String,
    pub partition: String,
    pub job_id: Option<String>,
    /// The rows the backup's segments hold for the batch, before deletes.
    pub rows: i64,
    /// What every end had to import (a range when the batch carries deletes); absent for
    /// L0 batches.
    #[serde(default)]
    pub expected_rows: Option<ExpectedRows>,
    /// The last state seen on each end, target first.
    pub states: Vec<EndJobState>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndJobState {
    pub end: String,
    pub state: Option<JobState>,
    pub reason: Option<String>,
    /// The rows the end said it imported, once it held the job Uncommitted or past it.
    #[serde(default)]
    pub imported_rows: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    pub end: String,
    pub job_id: String,
    pub collection: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckEntry {
    pub name: String,
    pub phase: Phase,
    pub status: CheckVerdict,
    pub detail: Option<String>,
    pub elapsed_ms: u64,
}

/// How a check's run ended, as the report says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckVerdict {
    Passed,
    Failed,
    /// It kept asking to wait until its `max_wait` ran out.
    Expired,
    /// It trapped, ran out of a limit or could not be called: the restore stopped.
    Errored,
    /// It errored, and its `on_error = "warn"` let the restore go on.
    Warned,
}

impl fmt::Display for CheckVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            CheckVerdict::Passed => "passed",
            CheckVerdict::Failed => "failed",
            CheckVerdict::Expired => "expired",
            CheckVerdict::Errored => "errored",
            CheckVerdict::Warned => "warned",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagingReport {
    /// Where the ends import from.
    pub prefix: String,
    pub files: u64,
    pub bytes: u64,
    /// Bytes that passed through this host (zero for server-side copies and in-place imports).
    pub bytes_streamed: u64,
    /// How the files got to the ends: one count per file and end, by way of transfer.
    #[serde(default)]
    pub transfers: BTreeMap<Transfer, u64>,
    pub destinations: Vec<String>,
    pub cleaned_up: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseTime {
    pub phase: RestorePhase,
    pub seconds: f64,
}

/// Each phase's time from when it began to when the next one did (the last one to
/// `finished`); preflight runs from `started` to the first phase entered.
pub fn phase_times(
    starts: &[(RestorePhase, Timestamp)],
    started: Timestamp,
    finished: Timestamp,
) -> Vec<PhaseTime> {
    let seconds = |from: Timestamp, to: Timestamp| to.duration_since(from).as_secs_f64().max(0.0);
    let mut out = Vec::new();
    let first = starts.first().map_or(finished, |(_, at)| *at);
    out.push(PhaseTime {
        phase: RestorePhase::Preflight,
        seconds: seconds(started, first),
    });
    for (i, (phase, at)) in starts.iter().enumerate() {
        if *phase == RestorePhase::Finished {
            continue;
        }
        let end = starts.get(i + 1).map_or(finished, |(_, next)| *next);
        out.push(PhaseTime {
            phase: *phase,
            seconds: seconds(*at, end),
        });
    }
    out
}

/// Which restore a report is of.
pub struct ReportOf {
    pub restore_id: String,
    pub job_name: String,
    /// The job's content hash.
    pub job_id: String,
    pub backup: String,
}

impl ReportOf {
    /// A restore before it has a journal record (refused early, or lockstep could not run).
    pub fn job(job: &crate::job::Job) -> Self {
        ReportOf {
            restore_id: String::new(),
            job_name: job.name.clone(),
            job_id: job.id().to_string(),
            backup: job.backup.name.clone(),
        }
    }

    /// The attempt `record` keeps.
    pub fn record(record: &crate::journal::RestoreRecord) -> Self {
        ReportOf {
            restore_id: record.id.to_string(),
            job_name: record.job_name.clone(),
            job_id: record.content_hash.clone(),
            backup: record.backup.clone(),
        }
    }
}

impl Report {
    /// Writes `{dir}/{restore_id}.json` and `.txt` as they are encoded, a buffer at a time:
    /// a report of thousands of collections is tens of megabytes of text (20 MB of JSON at
    /// 3,000), which was made whole beside the report, at the restore's peak. Returns the
    /// JSON file's path. Both are their user's alone, in a directory that is too
    /// ([`crate::owner_only`]): a report names every end and can quote a job file.
    pub fn write_files(&self, dir: &Path) -> io::Result<PathBuf> {
        crate::owner_only::dir(dir)?;
        let json = dir.join(format!("{}.json", self.restore_id));
        write_file(&json, |out| Ok(serde_json::to_writer_pretty(out, self)?))?;
        write_file(&dir.join(format!("{}.txt", self.restore_id)), |out| {
            write!(out, "{self}")
        })?;
        Ok(json)
    }
}

fn write_file(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let mut out = BufWriter::new(crate::owner_only::create(path)?);
    body(&mut out)?;
    out.flush()
}

impl Report {
    /// The report of a restore that started at `started` on `ends`, before anything is
    /// known of how it went: the engine fills in the rest, and seals the outcome.
    pub fn new(of: ReportOf, ends: Vec<EndReport>, started: Timestamp) -> Report {
        Report {
            ran: true,
            restore_id: of.restore_id,
            job_name: of.job_name,
            job_id: of.job_id,
            backup: of.backup,
            outcome: Outcome::Refused,
            summary: String::new(),
            route: None,
            format: None,
            started_at: started,
            finished_at: started,
            ends,
            collections: vec![],
            jobs: vec![],
            divergences: vec![],
            refusals: vec![],
            refusal_kinds: vec![],
            checks: vec![],
            staging: None,
            phases: vec![],
            reaction_ms: None,
            rerun_because: None,
            verification: None,
            preflight: PreflightNotes::default(),
        }
    }

    /// The report of a restore refused before anything ran: no end was written, so it has
    /// no ends, collections, jobs or phases.
    pub fn refused(of: ReportOf, summary: String, refusals: Vec<String>) -> Report {
        Report {
            summary,
            refusals,
            ..Report::new(of, vec![], Timestamp::now())
        }
    }

    /// Records why the restore was refused: each reason's text and kind.
    pub fn set_refusals(&mut self, refusals: &[Refusal]) {
        self.refusals = Refusal::texts(refusals);
        self.refusal_kinds = refusals.iter().map(|r| r.kind().to_string()).collect();
    }

    pub fn exit_code(&self) -> i32 {
        self.outcome.exit_code()
    }

    /// This report, handed back for a request of the same job content that did not run
    /// again: its first line and `ran` say so.
    pub fn not_run_again(self) -> Report {
        Report { ran: false, ..self }
    }

    /// Counts of job states per end, e.g. for the text report's header.
    pub fn states_per_end(&self) -> BTreeMap<String, BTreeMap<String, usize>> {
        let mut out: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        for job in &self.jobs {
            for s in &job.states {
                let state = s.state.map_or("unknown".to_string(), |s| s.to_string());
                *out.entry(s.end.clone())
                    .or_default()
                    .entry(state)
                    .or_default() += 1;
            }
        }
        out
    }
}

impl Report {
    /// The collections marked committed, by target name.
    /// What a query on every end must show of the committed collections: their live rows,
    /// in all and per partition. For the restore's own verification and `lockstep verify`.
    /// Sets each collection's `imported` from its jobs' rows on every end, in one pass over
    /// the jobs (each collection's own pass over every job was 400 million comparisons at
    /// 10,000 collections).
    pub fn tally_imported(&mut self) {
        let mut tallied: HashMap<&str, BTreeMap<String, i64>> = HashMap::new();
        for j in &self.jobs {
            for s in &j.states {
                if let Some(rows) = s.imported_rows {
                    let by_end = tallied.entry(j.collection.as_str()).or_default();
                    *by_end.entry(s.end.clone()).or_default() += rows;
                }
            }
        }
        for c in &mut self.collections {
            c.imported = tallied.remove(c.target.as_str()).unwrap_or_default();
        }
    }
}

/// What a query must show of `collections`' committed ones.
pub fn to_verify(
    collections: &[CollectionReport],
) -> Result<Vec<crate::verify::Expected>, crate::backup::NamespaceError> {
    (collections.iter())
        .filter(|c| c.committed)
        .map(|c| {
            Ok(crate::verify::Expected {
                collection: crate::backup::Namespace::parse(&c.target)?,
                source: c.source.clone(),
                live: c.live,
                partitions: (c.live_by_partition.iter())
                    .filter(|(p, _)| !p.is_empty())
                    .map(|(p, n)| (p.clone(), *n))
                    .collect(),
            })
        })
        .collect()
}

/// The targets of `collections`' committed ones.
pub fn committed(collections: &[CollectionReport]) -> Vec<String> {
    (collections.iter())
        .filter(|c| c.committed)
        .map(|c| c.target.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_said_once_not_again_as_the_summary() {
        let of = ReportOf {
            restore_id: String::new(),
            job_name: "orders".into(),
            job_id: "0123456789ab".into(),
            backup: "nightly".into(),
        };
        let reason = "target a (Milvus 3.0.1), secondary b (Milvus 3.0.1) import no L0";
        let mut report = Report::refused(
            of,
            format!("refused by preflight: {reason}"),
            vec![reason.to_owned()],
        );
        report.outcome = Outcome::Refused;
        let text = report.to_string();
        assert_eq!(text.matches(reason).count(), 1, "{text}");
        assert!(
            text.contains("  refused for 1 reason:\n  refused: target a"),
            "{text}"
        );
    }

    fn failed_report(jobs: usize) -> Report {
        let of = ReportOf {
            restore_id: "orders.0123456789ab.1".into(),
            job_name: "orders".into(),
            job_id: "0123456789ab".into(),
            backup: "nightly".into(),
        };
        let mut report = Report::new(of, vec![], Timestamp::now());
        report.outcome = Outcome::RolledBack;
        report.jobs = (0..jobs)
            .map(|i| JobReport {
                batch: format!("default.orders_{i}/_default/data-0"),
                collection: format!("default.orders_{i}"),
                partition: "_default".into(),
                job_id: Some(format!("47081234567{i:04}")),
                rows: 100,
                expected_rows: None,
                states: ["t", "b", "c"]
                    .iter()
                    .map(|end| EndJobState {
                        end: (*end).into(),
                        state: Some(if *end == "t" {
                            JobState::Uncommitted
                        } else {
                            JobState::Failed
                        }),
                        reason: (*end != "t").then(|| {
                            format!(
                                "no binlog to import, prefix=lockstep-staging/orders.0123456789ab.1/binlogs/insert_log/4492163792008{i:05}/4492163792008{i:05}/: key not found"
                            )
                        }),
                        imported_rows: None,
                    })
                    .collect(),
            })
            .collect();
        report
    }

    #[test]
    fn a_failure_of_any_size_stays_under_a_screen_with_one_line_per_cause() {
        let text = failed_report(400).to_string();
        assert!(
            text.lines().count() < 60,
            "{} lines:\n{text}",
            text.lines().count()
        );
        assert!(
            text.contains(
                "800 did not complete on b, c: no binlog to import, prefix=lockstep-staging/<restore>/binlogs/insert_log/44…/44…/: key not found (first: job 470812345670000, default.orders_0/_default/data-0)"
            ),
            "{text}"
        );
        assert!(
            text.contains("400 did not complete on t: left Uncommitted"),
            "{text}"
        );
    }

    #[test]
    fn each_collection_tallies_its_own_jobs_rows_by_end() {
        let mut report = failed_report(3);
        report.collections = ["default.orders_0", "default.orders_1", "default.empty"]
            .iter()
            .map(|target| CollectionReport {
                source: (*target).into(),
                target: (*target).into(),
                partitions: 1,
                batches: 1,
                inserted: 100,
                deleted: None,
                live: None,
                live_by_partition: BTreeMap::new(),
                imported: BTreeMap::from([("stale".to_owned(), 1)]),
                committed: false,
                l0_deletes: None,
            })
            .collect();
        // Two jobs of orders_0 (the second moved over from orders_2), one of orders_1; an
        // end that reported no rows is left out.
        report.jobs[2].collection = "default.orders_0".into();
        for (j, rows) in [(0, [10, 20]), (1, [30, 40]), (2, [5, 6])] {
            report.jobs[j].states[0].imported_rows = Some(rows[0]);
            report.jobs[j].states[1].imported_rows = Some(rows[1]);
        }
        report.tally_imported();
        let imported: Vec<Vec<(&str, i64)>> = (report.collections.iter())
            .map(|c| c.imported.iter().map(|(e, n)| (e.as_str(), *n)).collect())
            .collect();
        assert_eq!(
            imported,
            [
                vec![("b", 26), ("t", 15)],
                vec![("b", 40), ("t", 30)],
                vec![]
            ]
        );
    }

    #[test]
    fn few_jobs_are_listed_each_with_its_rows() {
        let mut report = failed_report(2);
        report.jobs[0].states[0].imported_rows = Some(100);
        let text = report.to_string();
        assert!(text.contains("t=Uncommitted (100 rows)"), "{text}");
    }

    #[test]
    fn each_phase_runs_until_the_next_begins() {
        let at = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
        let times = phase_times(
            &[(RestorePhase::Ddl, at(2)), (RestorePhase::Holding, at(5))],
            at(0),
            at(9),
        );
        let shown: Vec<(RestorePhase, f64)> = times.iter().map(|p| (p.phase, p.seconds)).collect();
        assert_eq!(
            shown,
            [
                (RestorePhase::Preflight, 2.0),
                (RestorePhase::Ddl, 3.0),
                (RestorePhase::Holding, 4.0)
            ]
        );
        // Served as the journal spells each phase, as before the phases were typed.
        let json = serde_json::to_value(&times[1]).expect("a phase time serializes");
        assert_eq!(json, serde_json::json!({"phase": "ddl", "seconds": 3.0}));
    }
}
