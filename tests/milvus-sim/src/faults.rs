//! Faults a test or the fault runner injects into one cluster: a job that fails at a named
//! state, REST or gRPC answers that fail (HTTP 503 / gRPC Unavailable) or come late, for a
//! while, and the answer to one create lost after the job was made. The control API is never
//! affected, so a test can always observe and undo a fault.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::jobs::JobState;

/// Which job a failure is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobSelector {
    /// The next job created on the cluster after the fault is set (a mirror counts).
    Next,
    /// The n-th job created on the cluster after the fault is set (a mirror counts; `nth: 1`
    /// is `next`), so a test can pick, before a restore starts, the job it creates last.
    Nth(u32),
    /// A job by id.
    Id(#[serde(with = "crate::jobs::id_string")] i64),
}

/// Fail a job when it reaches `state`, with `reason`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFailure {
    pub job: JobSelector,
    pub state: JobState,
    pub reason: String,
}

/// A job that imports `rows` fewer rows than its files hold and still completes, its
/// imported and total rows alike: what Milvus 2.3 does with an insert prefix that lists
/// nothing (`logsCount=0`), so a restore that trusts the server's own `totalRows` is fooled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShortImport {
    pub job: JobSelector,
    pub rows: i64,
}

/// The REST create that makes the selected job makes it, and its answer is then lost: the
/// client gets HTTP 503, as from a proxy whose upstream went away after doing the work, and
/// cannot tell whether the job exists (docs/milvus-facts.md §1.6). Only a create that makes a
/// job fires it; one that answers a known Idempotency-Key with its job does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LostAnswer {
    pub job: JobSelector,
}

/// The next job whose own deletes remove a row keeps one of those rows, and still reports
/// the rows it should have: its imported-row count is right and what a query sees is not, the
/// kind of drift only a query finds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LostDelete {}

/// The next job that imports a row shows one of its rows to a query with one value changed,
/// and reports the rows it should have: a drift no count finds, only a comparison of values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangedRow {}

/// A drift between what a job reports and what a query sees, armed by a fault and taken by
/// the next job it can apply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drift {
    LostDelete,
    ChangedRow,
}

impl From<LostDelete> for Drift {
    fn from(_: LostDelete) -> Self {
        Drift::LostDelete
    }
}

impl From<ChangedRow> for Drift {
    fn from(_: ChangedRow) -> Self {
        Drift::ChangedRow
    }
}

impl JobSelector {
    /// This selector once the job `job_id` was created.
    fn bind(self, job_id: i64) -> JobSelector {
        match self {
            JobSelector::Next | JobSelector::Nth(0 | 1) => JobSelector::Id(job_id),
            JobSelector::Nth(n) => JobSelector::Nth(n - 1),
            id @ JobSelector::Id(_) => id,
        }
    }
}

/// Which API face a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiFace {
    Rest,
    Grpc,
    Both,
}

impl ApiFace {
    fn covers(self, protocol: crate::Protocol) -> bool {
        matches!(
            (self, protocol),
            (ApiFace::Both, _)
                | (ApiFace::Rest, crate::Protocol::Rest)
                | (ApiFace::Grpc, crate::Protocol::Grpc)
        )
    }
}

/// What a faulted request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ApiEffect {
    /// HTTP 503 for REST, gRPC `Unavailable`.
    Unavailable,
    /// The answer is delayed by `delay_ms`, then served normally.
    Delay { delay_ms: u64 },
}

#[derive(Debug, Clone)]
struct ApiFault {
    face: ApiFace,
    effect: ApiEffect,
    until: Instant,
}

/// One cluster's injected faults. Kept behind the cluster's std Mutex; never held across await.
#[derive(Debug, Default)]
pub struct Faults {
    job_failures: Vec<JobFailure>,
    short_imports: Vec<ShortImport>,
    lost_answers: Vec<JobSelector>,
    drifts: Vec<Drift>,
    api: Vec<ApiFault>,
}

impl Faults {
    pub fn add_job_failure(&mut self, failure: JobFailure) {
        self.job_failures.push(failure);
    }

    pub fn add_short_import(&mut self, short: ShortImport) {
        self.short_imports.push(short);
    }

    pub fn add_lost_answer(&mut self, lost: LostAnswer) {
        self.lost_answers.push(lost.job);
    }

    pub fn add_drift(&mut self, drift: Drift) {
        self.drifts.push(drift);
    }

    /// Binds every `Next` (and `Nth(1)`) fault to the job just created, and counts the
    /// other `Nth` faults one job closer.
    pub fn bind_next(&mut self, job_id: i64) {
        for failure in &mut self.job_failures {
            failure.job = failure.job.bind(job_id);
        }
        for short in &mut self.short_imports {
            short.job = short.job.bind(job_id);
        }
        for lost in &mut self.lost_answers {
            *lost = lost.bind(job_id);
        }
    }

    /// Whether the answer to the create that made `job_id` is lost, consuming the fault.
    pub fn take_lost_answer(&mut self, job_id: i64) -> bool {
        let index = (self.lost_answers.iter()).position(|j| *j == JobSelector::Id(job_id));
        index.map(|i| self.lost_answers.remove(i)).is_some()
    }

    /// The rows `job_id` must come up short by, consuming the fault.
    pub fn take_short_import(&mut self, job_id: i64) -> Option<i64> {
        let index = self
            .short_imports
            .iter()
            .position(|s| s.job == JobSelector::Id(job_id))?;
        Some(self.short_imports.remove(index).rows)
    }

    /// Whether a job that can drift so must, consuming the fault.
    pub fn take_drift(&mut self, drift: Drift) -> bool {
        let armed = self.drifts.iter().position(|d| *d == drift);
        armed.map(|i| self.drifts.remove(i)).is_some()
    }

    /// The reason `job_id` must fail with on reaching `state`, consuming the fault.
    pub fn take_job_failure(&mut self, job_id: i64, state: JobState) -> Option<String> {
        let index = self
            .job_failures
            .iter()
            .position(|f| f.job == JobSelector::Id(job_id) && f.state == state)?;
        Some(self.job_failures.remove(index).reason)
    }

    pub fn add_api_fault(&mut self, face: ApiFace, effect: ApiEffect, duration: Duration) {
        self.api.push(ApiFault {
            face,
            effect,
            until: Instant::now() + duration,
        });
    }

    /// The effect a request on `protocol` gets now, if any; expired faults are dropped.
    pub fn api_effect(&mut self, protocol: crate::Protocol) -> Option<ApiEffect> {
        let now = Instant::now();
        self.api.retain(|f| f.until > now);
        self.api
            .iter()
            .find(|f| f.face.covers(protocol))
            .map(|f| f.effect)
    }

    pub fn clear(&mut self) {
        *self = Faults::default();
    }

    pub fn pending_job_failures(&self) -> Vec<JobFailure> {
        self.job_failures.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Protocol;

    #[test]
    fn next_binds_to_one_job_and_fires_once() {
        let mut f = Faults::default();
        f.add_job_failure(JobFailure {
            job: JobSelector::Next,
            state: JobState::Importing,
            reason: "boom".into(),
        });
        f.bind_next(7);
        f.bind_next(8);
        assert_eq!(f.take_job_failure(8, JobState::Importing), None);
        assert_eq!(f.take_job_failure(7, JobState::Sorting), None);
        assert_eq!(
            f.take_job_failure(7, JobState::Importing).as_deref(),
            Some("boom")
        );
        assert_eq!(f.take_job_failure(7, JobState::Importing), None);
    }

    #[test]
    fn nth_binds_to_the_nth_job_created() {
        let mut f = Faults::default();
        f.add_job_failure(JobFailure {
            job: JobSelector::Nth(3),
            state: JobState::Uncommitted,
            reason: "third".into(),
        });
        for id in [7, 8, 9, 10] {
            f.bind_next(id);
        }
        for id in [7, 8, 10] {
            assert_eq!(f.take_job_failure(id, JobState::Uncommitted), None);
        }
        assert_eq!(
            f.take_job_failure(9, JobState::Uncommitted).as_deref(),
            Some("third")
        );
    }

    #[test]
    fn a_short_import_binds_like_a_failure_and_fires_once() {
        let mut f = Faults::default();
        f.add_short_import(ShortImport {
            job: JobSelector::Nth(2),
            rows: 10,
        });
        f.bind_next(7);
        f.bind_next(8);
        assert_eq!(f.take_short_import(7), None);
        assert_eq!(f.take_short_import(8), Some(10));
        assert_eq!(f.take_short_import(8), None);
    }

    #[tokio::test(start_paused = true)]
    async fn api_faults_expire() {
        let mut f = Faults::default();
        f.add_api_fault(
            ApiFace::Rest,
            ApiEffect::Unavailable,
            Duration::from_secs(2),
        );
        assert_eq!(f.api_effect(Protocol::Rest), Some(ApiEffect::Unavailable));
        assert_eq!(f.api_effect(Protocol::Grpc), None);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(f.api_effect(Protocol::Rest), None);
    }
}
