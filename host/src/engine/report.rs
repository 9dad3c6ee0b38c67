//! The restore report: what happened, per end, per collection and per job, with the
//! outcome a script branches on. Written as JSON and as text next to the journal, printed
//! by the CLI, served by the API.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::backup::ExpectedRows;
use crate::journal::Outcome;
use crate::journal::Role;
use crate::milvus::JobState;
use crate::storage::Transfer;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
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
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub ends: Vec<EndReport>,
    pub collections: Vec<CollectionReport>,
    pub jobs: Vec<JobReport>,
    /// A committed job that an end failed to make visible. Non-empty means exit 3.
    pub divergences: Vec<Divergence>,
    /// Preflight's reasons, when the restore was refused.
    pub refusals: Vec<String>,
    pub checks: Vec<CheckEntry>,
    pub staging: Option<StagingReport>,
    /// Seconds spent in each phase, in order.
    pub phases: Vec<PhaseTime>,
    /// Milliseconds from the last end reported ready (Uncommitted) to the commit going out,
    /// the decision's durable write included; the slowest commit group's.
    pub reaction_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndReport {
    pub name: String,
    pub role: Role,
    pub uri: String,
    pub version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionReport {
    pub source: String,
    pub target: String,
    pub partitions: usize,
    pub batches: usize,
    /// Rows the backup holds for the collection (before deletes).
    pub rows: i64,
    /// Whether its jobs were committed (the decision of its commit group).
    pub committed: bool,
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
    pub phase: String,
    pub status: String,
    pub detail: Option<String>,
    pub elapsed_ms: u64,
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
    pub phase: String,
    pub seconds: f64,
}

/// Which restore a report is of.
pub struct ReportOf {
    pub restore_id: String,
    pub job_name: String,
    /// The job's content hash.
    pub job_id: String,
    pub backup: String,
}

impl Report {
    /// The report of a restore that started at `started` on `ends`, before anything is
    /// known of how it went: the engine fills in the rest, and seals the outcome.
    pub fn new(of: ReportOf, ends: Vec<EndReport>, started: Timestamp) -> Report {
        Report {
            restore_id: of.restore_id,
            job_name: of.job_name,
            job_id: of.job_id,
            backup: of.backup,
            outcome: Outcome::Refused,
            summary: String::new(),
            route: None,
            started_at: started,
            finished_at: started,
            ends,
            collections: vec![],
            jobs: vec![],
            divergences: vec![],
            refusals: vec![],
            checks: vec![],
            staging: None,
            phases: vec![],
            reaction_ms: None,
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

    pub fn exit_code(&self) -> i32 {
        self.outcome.exit_code()
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

impl fmt::Display for Report {
    /// The text report: the verdict first, then ends, collections, divergences, checks and
    /// the jobs that did not end Completed (all of them when there are few).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.outcome {
            Outcome::Succeeded => "SUCCEEDED",
            Outcome::Refused => "REFUSED",
            Outcome::RolledBack => "FAILED, ROLLED BACK",
            Outcome::Diverged => "COMMITTED WITH DIVERGENCE",
            Outcome::PartlyCommitted => "PARTLY COMMITTED, THE REST ROLLED BACK",
            Outcome::Incomplete => "INCOMPLETE (run `lockstep recover`)",
        };
        writeln!(f, "restore {}  [{verdict}]", self.restore_id)?;
        writeln!(
            f,
            "  job {} (backup {}), exit code {}",
            self.job_name,
            self.backup,
            self.exit_code()
        )?;
        writeln!(f, "  {}", self.summary)?;
        let secs = self
            .finished_at
            .duration_since(self.started_at)
            .as_secs_f64();
        writeln!(f, "  started {} · took {secs:.1}s", self.started_at)?;
        for reason in &self.refusals {
            writeln!(f, "  refused: {reason}")?;
        }
        if !self.ends.is_empty() {
            writeln!(f, "\nends")?;
            let states = self.states_per_end();
            for end in &self.ends {
                let counts = states.get(&end.name).map_or(String::new(), |m| {
                    m.iter()
                        .map(|(s, n)| format!("{s}={n}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                });
                writeln!(
                    f,
                    "  {:<10} {:<16} {:<28} {:<12} {counts}",
                    end.role.to_string(),
                    end.name,
                    end.uri,
                    end.version.as_deref().unwrap_or("?"),
                )?;
            }
        }
        if !self.collections.is_empty() {
            writeln!(f, "\ncollections")?;
            for c in &self.collections {
                writeln!(
                    f,
                    "  {:<36} ← {:<30} partitions={} batches={} rows={} {}",
                    c.target,
                    c.source,
                    c.partitions,
                    c.batches,
                    c.rows,
                    if c.committed {
                        "committed"
                    } else {
                        "not committed"
                    },
                )?;
            }
        }
        if let Some(s) = &self.staging {
            writeln!(
                f,
                "\nstaging  {} files, {} bytes ({} through this host) under {} on {}{}",
                s.files,
                s.bytes,
                s.bytes_streamed,
                s.prefix,
                s.destinations.join(", "),
                if s.cleaned_up { "; cleaned up" } else { "" },
            )?;
            if !s.transfers.is_empty() {
                let ways: Vec<String> = s
                    .transfers
                    .iter()
                    .map(|(way, n)| format!("{n} {}", way.label()))
                    .collect();
                writeln!(f, "         {}", ways.join(", "))?;
            }
        }
        if !self.checks.is_empty() {
            writeln!(f, "\nchecks")?;
            for c in &self.checks {
                writeln!(
                    f,
                    "  {:<24} {:<14} {:<8} {}ms {}",
                    c.name,
                    c.phase,
                    c.status,
                    c.elapsed_ms,
                    c.detail.as_deref().unwrap_or("")
                )?;
            }
        }
        if !self.divergences.is_empty() {
            writeln!(
                f,
                "\nDIVERGENCES (committed on the target, not visible on these ends)"
            )?;
            for d in &self.divergences {
                writeln!(
                    f,
                    "  {} job {} ({}): {}",
                    d.end, d.job_id, d.collection, d.reason
                )?;
            }
        }
        let unusual: Vec<&JobReport> = self
            .jobs
            .iter()
            .filter(|j| {
                self.jobs.len() <= 20
                    || j.states
                        .iter()
                        .any(|s| s.state != Some(JobState::Completed))
            })
            .collect();
        if !unusual.is_empty() {
            writeln!(f, "\njobs")?;
            for j in unusual.iter().take(200) {
                let mut line = String::new();
                for s in &j.states {
                    let state = s.state.map_or("-".to_string(), |s| s.to_string());
                    let _ = write!(line, " {}={state}", s.end);
                    if let Some(r) = &s.reason {
                        let _ = write!(line, " ({r})");
                    }
                }
                writeln!(
                    f,
                    "  {:<48} job {:<20}{line}",
                    j.batch,
                    j.job_id.as_deref().unwrap_or("-"),
                )?;
            }
            if unusual.len() > 200 {
                writeln!(f, "  … {} more in the JSON report", unusual.len() - 200)?;
            }
        }
        Ok(())
    }
}
