//! What a watcher tells of each restore a job file asked for, once it ended: one line a
//! person reads (`lockstep watch` prints it, `serve --watch` logs it), or the same as one
//! JSON object a script reads. Without it a watcher said only `phase=finished`, and the
//! outcome was in a report file to be looked for.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::engine::Report;
use crate::journal::Outcome;

/// One restore's end as the watcher tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Told {
    pub restore_id: String,
    /// The job file, as the watched directory names it.
    pub file: String,
    /// False when the content had already run and was not run again.
    pub ran: bool,
    pub outcome: Outcome,
    /// The collections the restore covers, and how many of them were committed.
    pub collections: usize,
    pub committed: usize,
    /// Per end, the rows its jobs imported into the committed collections: what a query
    /// there sees once the restore is visible.
    pub rows: BTreeMap<String, i64>,
    pub exit_code: i32,
    /// Why it ended so, where it did not succeed: the report's summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Told {
    pub fn of(file: &Path, report: &Report) -> Told {
        let committed = report.collections.iter().filter(|c| c.committed);
        let mut rows = BTreeMap::new();
        for c in committed.clone() {
            for (end, n) in &c.imported {
                *rows.entry(end.clone()).or_insert(0) += n;
            }
        }
        Told {
            restore_id: report.restore_id.clone(),
            file: file.display().to_string(),
            ran: report.ran,
            outcome: report.outcome,
            collections: report.collections.len(),
            committed: committed.count(),
            rows,
            exit_code: report.exit_code(),
            why: (report.outcome != Outcome::Succeeded).then(|| report.summary.clone()),
        }
    }
}

impl fmt::Display for Told {
    /// `restore ID (FILE): OUTCOME; N collection(s) committed; rows END=N …; exit CODE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "restore {} ({}): {}",
            self.restore_id, self.file, self.outcome
        )?;
        if !self.ran {
            f.write_str(", already: not run again")?;
        }
        write!(
            f,
            "; {} of {} collection(s) committed",
            self.committed, self.collections
        )?;
        if !self.rows.is_empty() {
            let rows: Vec<String> = (self.rows.iter())
                .map(|(end, n)| format!("{end}={n}"))
                .collect();
            write!(f, "; rows {}", rows.join(" "))?;
        }
        write!(f, "; exit {}", self.exit_code)?;
        if let Some(why) = &self.why {
            write!(f, ": {why}")?;
        }
        Ok(())
    }
}

/// Where a watcher tells what it did: `lockstep watch` prints to stdout, `serve --watch`
/// logs.
pub trait Tell: Send + Sync {
    fn tell(&self, told: &Told);
}

/// Tells in the log: the watcher of `serve --watch`, whose stdout is not a person's.
#[derive(Debug, Default)]
pub struct InTheLog;

impl Tell for InTheLog {
    fn tell(&self, told: &Told) {
        tracing::info!("{told}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::report::{CollectionReport, ReportOf};

    #[test]
    fn a_line_says_outcome_collections_rows_per_end_and_exit_code() {
        let of = ReportOf {
            restore_id: "orders.0123456789ab.1".into(),
            job_name: "orders".into(),
            job_id: "0123456789ab".into(),
            backup: "bak".into(),
        };
        let mut report = Report::new(of, vec![], jiff::Timestamp::now());
        report.outcome = Outcome::Succeeded;
        let collection = |target: &str, committed: bool| CollectionReport {
            source: "default.c".into(),
            target: target.into(),
            partitions: 1,
            batches: 1,
            inserted: 10,
            deleted: Some(0),
            live: Some(10),
            live_by_partition: BTreeMap::new(),
            imported: BTreeMap::from([("t".into(), 10), ("s1".into(), 10)]),
            committed,
            l0_deletes: None,
        };
        report.collections = vec![collection("default.a", true), collection("default.b", true)];
        let told = Told::of(Path::new("jobs/orders.toml"), &report);
        assert_eq!(
            told.to_string(),
            "restore orders.0123456789ab.1 (jobs/orders.toml): succeeded; 2 of 2 collection(s) \
             committed; rows s1=20 t=20; exit 0"
        );
        report.collections[1].committed = false;
        report.outcome = Outcome::PartlyCommitted;
        report.summary = "b failed".into();
        let told = Told::of(Path::new("jobs/orders.toml"), &report.not_run_again());
        assert_eq!(
            told.to_string(),
            "restore orders.0123456789ab.1 (jobs/orders.toml): partly committed, already: not \
             run again; 1 of 2 collection(s) committed; rows s1=10 t=10; exit 5: b failed"
        );
    }
}
