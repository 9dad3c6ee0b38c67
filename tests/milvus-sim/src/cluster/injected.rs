//! What tests inject into a cluster and read back: job failures, short imports, drift and
//! API faults ([`crate::faults`]), and the log of the requests it answered
//! ([`crate::request_log`]). A face records each request here; the job's task takes the
//! faults that apply to it.

use std::time::Duration;

use super::Cluster;
use crate::Protocol;
use crate::faults::ApiEffect;
use crate::jobs::JobState;
use crate::request_log::RequestRecord;

impl Cluster {
    pub fn record_request(
        &self,
        protocol: Protocol,
        route: &str,
        job_id: Option<i64>,
        code: Option<i32>,
        fault: Option<ApiEffect>,
    ) {
        self.log_request(RequestRecord::new(protocol, route, job_id, code, fault));
    }

    /// Logs `record` as it stands (one about a collection names it).
    pub fn log_request(&self, record: RequestRecord) {
        self.lock().requests.push(record);
    }

    /// The injected effect for a request arriving now on `protocol`.
    pub fn api_effect(&self, protocol: Protocol) -> Option<ApiEffect> {
        self.lock().faults.api_effect(protocol)
    }

    /// Fails a job when it reaches `failure.state`; a named job already in that state fails
    /// now (an Uncommitted job waits for its commit, not for another transition).
    pub fn add_job_failure(&self, failure: crate::faults::JobFailure) {
        if let crate::faults::JobSelector::Id(id) = failure.job
            && self
                .update_job_in(id, failure.state, |j| j.fail(failure.reason.clone()))
                .is_some()
        {
            return;
        }
        self.lock().faults.add_job_failure(failure);
    }

    /// The next job (or a named one) imports fewer rows than its files hold.
    pub fn add_short_import(&self, short: crate::faults::ShortImport) {
        self.lock().faults.add_short_import(short);
    }

    /// The answer to the REST create that makes the selected job is lost after the job was
    /// made.
    pub fn add_lost_answer(&self, lost: crate::faults::LostAnswer) {
        self.lock().faults.add_lost_answer(lost);
    }

    /// Whether the answer to the create that made `job_id` is to be lost, consuming the
    /// fault.
    pub(crate) fn take_lost_answer(&self, job_id: i64) -> bool {
        self.lock().faults.take_lost_answer(job_id)
    }

    /// The next job that can drift so reports its rows and shows a query others: a lost
    /// delete, a changed value.
    pub fn add_drift(&self, drift: impl Into<crate::faults::Drift>) {
        self.lock().faults.add_drift(drift.into());
    }

    pub fn add_api_fault(
        &self,
        face: crate::faults::ApiFace,
        effect: ApiEffect,
        duration: Duration,
    ) {
        self.lock().faults.add_api_fault(face, effect, duration);
    }

    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// The rows an injected short import takes from `job_id`, consumed.
    pub(super) fn take_short_import(&self, job_id: i64) -> Option<i64> {
        self.lock().faults.take_short_import(job_id)
    }

    /// Whether an injected drift applies to a job that can drift so, consumed.
    pub(super) fn take_drift(&self, drift: crate::faults::Drift) -> bool {
        self.lock().faults.take_drift(drift)
    }

    /// The injected failure for a job arriving in `state`, consumed.
    pub(super) fn take_job_failure(&self, job_id: i64, state: JobState) -> Option<String> {
        self.lock().faults.take_job_failure(job_id, state)
    }
}
