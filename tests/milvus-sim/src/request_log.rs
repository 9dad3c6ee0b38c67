//! The record of REST and gRPC requests a cluster answered, kept as a ring of the most recent
//! ones so a long benchmark cannot grow the sim without bound. What fell off is counted, so a
//! test that reads call counts can tell a short log from a quiet cluster.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::Protocol;
use crate::faults::ApiEffect;
use crate::jobs::Stamp;

/// One request a cluster received on REST or gRPC (control requests are not logged, so polling
/// state does not skew the call counts tests read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub at: Stamp,
    pub protocol: Protocol,
    /// REST path (`/v2/vectordb/jobs/import/create`) or gRPC method path
    /// (`/milvus.proto.milvus.MilvusService/GetVersion`).
    pub route: String,
    pub job_id: Option<String>,
    /// The Milvus code of what the cluster did; None when an injected fault answered before
    /// it did anything.
    pub code: Option<i32>,
    /// The fault that answered instead of the cluster. With a `code` too, the cluster did
    /// the work and its answer was lost ([`crate::faults::LostAnswer`]).
    pub fault: Option<ApiEffect>,
    /// The collection the request was about, as `db.name` (DDL, describes, import creates),
    /// so that a test can tell the order of what one collection was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection: Option<String>,
}

impl RequestRecord {
    /// A request answered now, about no collection.
    pub fn new(
        protocol: Protocol,
        route: &str,
        job_id: Option<i64>,
        code: Option<i32>,
        fault: Option<ApiEffect>,
    ) -> RequestRecord {
        RequestRecord {
            at: Stamp::now(),
            protocol,
            route: route.to_owned(),
            job_id: job_id.map(|id| id.to_string()),
            code,
            fault,
            collection: None,
        }
    }
}

/// The last `capacity` requests, oldest first, and how many older ones were dropped.
#[derive(Debug, Clone)]
pub struct RequestLog {
    capacity: usize,
    records: VecDeque<RequestRecord>,
    dropped: u64,
}

impl RequestLog {
    /// A log that keeps at most `capacity` records; 0 keeps none and only counts.
    pub fn new(capacity: usize) -> Self {
        RequestLog {
            capacity,
            // Grows as requests arrive: most clusters never see `capacity` of them.
            records: VecDeque::new(),
            dropped: 0,
        }
    }

    /// Appends `record`, dropping the oldest one when the log is full.
    pub fn push(&mut self, record: RequestRecord) {
        if self.capacity == 0 {
            self.dropped += 1;
            return;
        }
        if self.records.len() == self.capacity {
            self.records.pop_front();
            self.dropped += 1;
        }
        self.records.push_back(record);
    }

    /// The kept records, oldest first.
    pub fn records(&self) -> impl Iterator<Item = &RequestRecord> {
        self.records.iter()
    }

    /// Records dropped because the log was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(route: &str) -> RequestRecord {
        RequestRecord::new(Protocol::Rest, route, None, Some(0), None)
    }

    fn routes(log: &RequestLog) -> Vec<&str> {
        log.records().map(|r| r.route.as_str()).collect()
    }

    #[test]
    fn keeps_the_newest_records_and_counts_the_dropped_ones() {
        let mut log = RequestLog::new(3);
        for route in ["1", "2", "3"] {
            log.push(record(route));
        }
        assert_eq!((routes(&log), log.dropped()), (vec!["1", "2", "3"], 0));
        for route in ["4", "5"] {
            log.push(record(route));
        }
        assert_eq!((routes(&log), log.dropped()), (vec!["3", "4", "5"], 2));
    }

    #[test]
    fn capacity_zero_keeps_nothing_and_counts_everything() {
        let mut log = RequestLog::new(0);
        log.push(record("1"));
        log.push(record("2"));
        assert_eq!((routes(&log).len(), log.dropped()), (0, 2));
    }
}
