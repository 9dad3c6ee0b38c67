//! Import jobs: the model every face reads (REST describe, gRPC GetImportState, the control
//! API's state), the internal state machine of Milvus's import checker, and how internal states
//! show over REST (docs/milvus-facts.md §1.4). The task that walks a job through its stages
//! lives in [`crate::executor`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::options::{CommitMode, ImportOptions};

/// Internal job state (`internalpb.ImportJobState`, V1 pipeline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobState {
    Pending,
    PreImporting,
    Importing,
    Sorting,
    IndexBuilding,
    Uncommitted,
    Committing,
    Completed,
    Failed,
}

impl JobState {
    /// Completed or Failed: nothing happens to the job any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Completed | JobState::Failed)
    }

    /// Counts toward `maxImportJobNum` (Uncommitted included, docs/milvus-facts.md §2.1).
    pub fn is_active(self) -> bool {
        !self.is_terminal()
    }

    /// Any state before Committing can go to Failed (docs/milvus-facts.md §1.4).
    pub fn can_fail(self) -> bool {
        !matches!(
            self,
            JobState::Committing | JobState::Completed | JobState::Failed
        )
    }

    /// The state after this one; Uncommitted moves on to Committing only once committed.
    pub fn next_stage(self) -> Option<JobState> {
        Some(match self {
            JobState::Pending => JobState::PreImporting,
            JobState::PreImporting => JobState::Importing,
            JobState::Importing => JobState::Sorting,
            JobState::Sorting => JobState::IndexBuilding,
            JobState::IndexBuilding => JobState::Uncommitted,
            JobState::Uncommitted => JobState::Committing,
            JobState::Committing => JobState::Completed,
            JobState::Completed | JobState::Failed => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            JobState::Pending => "Pending",
            JobState::PreImporting => "PreImporting",
            JobState::Importing => "Importing",
            JobState::Sorting => "Sorting",
            JobState::IndexBuilding => "IndexBuilding",
            JobState::Uncommitted => "Uncommitted",
            JobState::Committing => "Committing",
            JobState::Completed => "Completed",
            JobState::Failed => "Failed",
        }
    }

    pub fn parse(name: &str) -> Option<JobState> {
        [
            JobState::Pending,
            JobState::PreImporting,
            JobState::Importing,
            JobState::Sorting,
            JobState::IndexBuilding,
            JobState::Uncommitted,
            JobState::Committing,
            JobState::Completed,
            JobState::Failed,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }
}

/// The state REST shows (docs/milvus-facts.md §1.4): PreImporting, Sorting and IndexBuilding
/// never appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExternalState {
    Pending,
    Importing,
    Uncommitted,
    Committing,
    Completed,
    Failed,
}

impl ExternalState {
    pub fn name(self) -> &'static str {
        match self {
            ExternalState::Pending => "Pending",
            ExternalState::Importing => "Importing",
            ExternalState::Uncommitted => "Uncommitted",
            ExternalState::Committing => "Committing",
            ExternalState::Completed => "Completed",
            ExternalState::Failed => "Failed",
        }
    }
}

/// Wall-clock time in both forms tests and benchmarks read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// RFC3339 with the local offset Milvus's `time.Format` would print (UTC here).
    pub rfc3339: jiff::Timestamp,
    pub unix_ms: i64,
}

impl Stamp {
    pub fn now() -> Stamp {
        let now = jiff::Timestamp::now();
        Stamp {
            rfc3339: now,
            unix_ms: now.as_millisecond(),
        }
    }

    /// Go's `time.RFC3339` ("2006-01-02T15:04:05Z07:00"): seconds, no fraction.
    pub fn go_rfc3339(&self) -> String {
        self.rfc3339.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }
}

/// One entry of a job's state history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StateChange {
    pub state: JobState,
    pub at: Stamp,
}

/// How the job came to be on this cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum JobOrigin {
    /// A client created it (REST create or gRPC Import).
    Client { protocol: crate::Protocol },
    /// The mirror of the source cluster's job, created from its replicated ImportMsg.
    Mirror { source: String },
}

/// One imported object: what a test compares across ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    pub path: String,
    pub size: u64,
    pub crc32c: u32,
}

/// What one file group yielded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupResult {
    pub files: Vec<String>,
    pub size: u64,
    pub rows: i64,
    pub deleted_rows: i64,
}

/// One row a job imported: its key and timestamp, and where its values lie, for a query
/// that returns them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub pk: milvus_formats::binlog::Pk,
    pub ts: u64,
    /// The job's file group that holds it, and its row number in that group.
    pub group: usize,
    pub index: usize,
}

/// What a job imported, by key: what queries read. Not part of a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportedData {
    /// Each row the job imported that its own deletes left; `None` where the keys were not
    /// read (row files, whose keys the sim does not parse).
    pub keys: Option<Vec<Row>>,
    /// The deletes of an L0 import, which apply to the rows of other jobs.
    pub deletes: Vec<milvus_formats::binlog::Delete>,
    /// The first row the job's own deletes removed, for the lost-delete fault.
    pub first_removed: Option<Row>,
    /// The key of a row a query shows with one value changed (the changed-row fault).
    pub changed: Option<milvus_formats::binlog::Pk>,
    /// Where each file group's insert logs were kept once imported, by group.
    pub kept: Vec<String>,
    /// The newest row timestamp of a binlog import's insert logs (the source cluster's, which
    /// a backup import keeps): what the commit fence holds the commit to ([`crate::fence`]).
    pub max_row_ts: Option<u64>,
}

/// An import job as a cluster holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportJob {
    #[serde(with = "id_string")]
    pub job_id: i64,
    pub db_name: String,
    pub collection_name: String,
    pub collection_id: i64,
    pub partition_name: String,
    pub files: Vec<Vec<String>>,
    /// The options exactly as sent.
    pub options: BTreeMap<String, String>,
    pub parsed_options: ImportOptions,
    pub origin: JobOrigin,
    pub idempotency_key: Option<String>,
    pub state: JobState,
    /// Why it failed; empty otherwise.
    pub reason: String,
    pub history: Vec<StateChange>,
    pub created: Stamp,
    pub completed: Option<Stamp>,
    /// When the `timeout` option runs out, as wall time.
    pub deadline: Option<Stamp>,
    pub total_rows: i64,
    pub imported_rows: i64,
    pub deleted_rows: i64,
    pub groups: Vec<GroupResult>,
    pub manifest: Vec<ManifestEntry>,
    #[serde(skip)]
    pub data: std::sync::Arc<ImportedData>,
    /// When the current state was entered (for progress within a stage).
    pub state_entered_ms: i64,
    /// The deadline on tokio's clock, so timeout tests can run on paused time.
    #[serde(skip)]
    pub timeout_at: Option<tokio::time::Instant>,
}

/// Job ids travel as decimal strings, as Milvus's REST API sends them.
pub mod id_string {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&id.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl ImportJob {
    pub fn commit_mode(&self) -> CommitMode {
        self.parsed_options.commit
    }

    /// Moves to `state` and records it.
    pub fn enter(&mut self, state: JobState) {
        let at = Stamp::now();
        self.state = state;
        self.state_entered_ms = at.unix_ms;
        self.history.push(StateChange { state, at });
        if state.is_terminal() {
            self.completed = Some(at);
        }
    }

    pub fn fail(&mut self, reason: impl Into<String>) {
        self.reason = reason.into();
        self.imported_rows = 0;
        self.enter(JobState::Failed);
    }

    /// The REST state (docs/milvus-facts.md §1.4): an auto-commit job shows Importing while
    /// Uncommitted or Committing, because its client never has to act on those states.
    pub fn external_state(&self) -> ExternalState {
        match (self.state, self.commit_mode()) {
            (JobState::Pending, _) => ExternalState::Pending,
            (JobState::Uncommitted, CommitMode::Manual) => ExternalState::Uncommitted,
            (JobState::Committing, CommitMode::Manual) => ExternalState::Committing,
            (JobState::Completed, _) => ExternalState::Completed,
            (JobState::Failed, _) => ExternalState::Failed,
            _ => ExternalState::Importing,
        }
    }

    /// Progress 0–100 of the V1 pipeline (docs/milvus-facts.md §1.4), interpolated within a stage
    /// by the time spent in it against the stage's configured duration.
    pub fn progress(&self, stage_fraction: f64) -> i64 {
        let (low, high) = match self.state {
            JobState::Pending => (0, 10),
            JobState::PreImporting => (10, 40),
            JobState::Importing => (40, 70),
            JobState::Sorting => (70, 80),
            JobState::IndexBuilding => (80, 90),
            JobState::Uncommitted | JobState::Committing => return 99,
            JobState::Completed => return 100,
            JobState::Failed => return 0,
        };
        low + ((high - low) as f64 * stage_fraction.clamp(0.0, 0.999)) as i64
    }

    /// Imported and total rows as describe shows them: 0/0 before Importing, the share of the
    /// stage spent so far while Importing, total/total after. Milvus's binlog reader drops
    /// the rows the file group's own delta logs delete before it counts (`FilterWithDelete`
    /// in `importutilv2/binlog`), so both figures are after the job's deletes.
    pub fn row_counts(&self, stage_fraction: f64) -> (i64, i64) {
        let total = (self.total_rows - self.deleted_rows).max(0);
        match self.state {
            JobState::Pending | JobState::PreImporting | JobState::Failed => (0, 0),
            JobState::Importing => (
                (total as f64 * stage_fraction.clamp(0.0, 1.0)) as i64,
                total,
            ),
            _ => (total, total),
        }
    }

    /// The task state of each file group's detail entry.
    pub fn task_state(&self) -> &'static str {
        match self.state {
            JobState::Pending => "Pending",
            JobState::Failed => "Failed",
            JobState::PreImporting
            | JobState::Importing
            | JobState::Sorting
            | JobState::IndexBuilding => "InProgress",
            JobState::Uncommitted | JobState::Committing | JobState::Completed => "Completed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::ImportSource;

    fn job(commit: CommitMode) -> ImportJob {
        ImportJob {
            job_id: 1,
            db_name: "default".into(),
            collection_name: "c".into(),
            collection_id: 2,
            partition_name: String::new(),
            files: vec![],
            options: BTreeMap::new(),
            parsed_options: ImportOptions {
                commit,
                source: ImportSource::RowFiles,
                ..ImportOptions::default()
            },
            origin: JobOrigin::Client {
                protocol: crate::Protocol::Rest,
            },
            idempotency_key: None,
            state: JobState::Pending,
            reason: String::new(),
            history: vec![],
            created: Stamp::now(),
            completed: None,
            deadline: None,
            total_rows: 10,
            imported_rows: 0,
            deleted_rows: 0,
            groups: vec![],
            manifest: vec![],
            data: Default::default(),
            state_entered_ms: 0,
            timeout_at: None,
        }
    }

    #[test]
    fn external_states_and_progress_follow_the_reference_table() {
        let cases = [
            (
                JobState::Pending,
                CommitMode::Manual,
                ExternalState::Pending,
                0,
                (0, 0),
            ),
            (
                JobState::PreImporting,
                CommitMode::Manual,
                ExternalState::Importing,
                10,
                (0, 0),
            ),
            (
                JobState::Importing,
                CommitMode::Manual,
                ExternalState::Importing,
                40,
                (0, 10),
            ),
            (
                JobState::Sorting,
                CommitMode::Manual,
                ExternalState::Importing,
                70,
                (10, 10),
            ),
            (
                JobState::IndexBuilding,
                CommitMode::Manual,
                ExternalState::Importing,
                80,
                (10, 10),
            ),
            (
                JobState::Uncommitted,
                CommitMode::Manual,
                ExternalState::Uncommitted,
                99,
                (10, 10),
            ),
            (
                JobState::Uncommitted,
                CommitMode::Auto,
                ExternalState::Importing,
                99,
                (10, 10),
            ),
            (
                JobState::Committing,
                CommitMode::Manual,
                ExternalState::Committing,
                99,
                (10, 10),
            ),
            (
                JobState::Committing,
                CommitMode::Auto,
                ExternalState::Importing,
                99,
                (10, 10),
            ),
            (
                JobState::Completed,
                CommitMode::Auto,
                ExternalState::Completed,
                100,
                (10, 10),
            ),
            (
                JobState::Failed,
                CommitMode::Manual,
                ExternalState::Failed,
                0,
                (0, 0),
            ),
        ];
        for (state, commit, external, progress, rows) in cases {
            let mut j = job(commit);
            j.state = state;
            assert_eq!(j.external_state(), external, "{state:?} {commit:?}");
            assert_eq!(j.progress(0.0), progress, "{state:?}");
            assert_eq!(j.row_counts(0.0), rows, "{state:?}");
        }
        let mut j = job(CommitMode::Manual);
        j.state = JobState::PreImporting;
        assert_eq!(j.progress(0.5), 25);
        j.state = JobState::Importing;
        assert_eq!(j.row_counts(0.5), (5, 10));
    }

    #[test]
    fn job_id_is_a_decimal_string_on_the_wire() {
        let mut j = job(CommitMode::Manual);
        j.job_id = 448_293_190_903_759_186;
        let v = serde_json::to_value(&j).expect("serializes");
        assert_eq!(v["job_id"], "448293190903759186");
        let back: ImportJob = serde_json::from_value(v).expect("round trip");
        assert_eq!(back.job_id, j.job_id);
    }
}
