//! The control API under `/sim/v1/` on every cluster's port: what tests, benchmarks and the
//! fault runner use to observe a cluster and to make it fail. Injected API faults never touch
//! these routes, so a test can always read state and undo a fault.
//!
//! | Method | Route | Body | Answer |
//! |---|---|---|---|
//! | GET | `/sim/v1/state` | – | [`ClusterSnapshot`] |
//! | POST | `/sim/v1/streams/{target}` | [`StreamUpdate`] | [`StreamSnapshot`](crate::cdc::StreamSnapshot) |
//! | POST | `/sim/v1/faults/job` | [`JobFailure`](crate::faults::JobFailure) | `{}` |
//! | POST | `/sim/v1/faults/short_import` | [`ShortImport`](crate::faults::ShortImport) | `{}` |
//! | POST | `/sim/v1/faults/lost_delete` | [`LostDelete`](crate::faults::LostDelete) | `{}` |
//! | POST | `/sim/v1/faults/changed_row` | [`ChangedRow`](crate::faults::ChangedRow) | `{}` |
//! | POST | `/sim/v1/faults/api` | [`ApiFaultRequest`] | `{}` |
//! | POST | `/sim/v1/faults/lost_answer` | [`LostAnswer`](crate::faults::LostAnswer) | `{}` |
//! | DELETE | `/sim/v1/faults` | – | `{}` |
//! | POST | `/sim/v1/storage/delete` | [`DeleteObjects`] | [`Deleted`] |
//! | POST | `/sim/v1/restart` | [`RestartRequest`] | 202 `{}`, then the port goes down |
//!
//! Refusals are HTTP 400 (404 for an unknown stream target) with `{"error": "..."}`.

mod client;
mod routes;

pub use client::{ControlError, SimControl};
pub(crate) use routes::router;

use serde::{Deserialize, Serialize};

use crate::Protocol;
use crate::cdc::{Flow, StreamSnapshot};
use crate::faults::{ApiEffect, ApiFace, JobFailure};
use crate::jobs::{ImportJob, ManifestEntry, Stamp};

/// `POST /sim/v1/streams/{target}`: change the lag and/or flow of the stream to `target`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamUpdate {
    /// Go duration, e.g. "500ms".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<Flow>,
}

/// `POST /sim/v1/faults/api`: REST and/or gRPC answers fail or are delayed for `duration`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiFaultRequest {
    pub face: ApiFace,
    pub effect: ApiEffect,
    /// Go duration, e.g. "2s".
    pub duration: String,
}

/// `POST /sim/v1/storage/delete`: objects to remove from the cluster's storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum DeleteObjects {
    /// These exact paths (bucket-relative).
    Paths(Vec<String>),
    /// Everything under this prefix.
    Prefix(String),
}

/// How many objects a delete removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deleted {
    pub deleted: usize,
}

/// `POST /sim/v1/restart`: the port refuses connections for `down_for`, then serves again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartRequest {
    /// Go duration, e.g. "1s".
    pub down_for: String,
}

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

/// A finished import as the collection shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletedImport {
    pub job_id: String,
    pub partition_name: String,
    pub rows: i64,
    pub manifest: Vec<ManifestEntry>,
}

/// A field of a collection's stored schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldSnapshot {
    pub field_id: i64,
    pub name: String,
    pub is_dynamic: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionSnapshot {
    pub db_name: String,
    pub name: String,
    pub id: i64,
    /// The stored schema's fields, the dynamic `$meta` included (DescribeCollection hides it,
    /// as Milvus's proxy does).
    pub fields: Vec<FieldSnapshot>,
    pub partitions: Vec<String>,
    pub indexes: Vec<String>,
    pub loaded: bool,
    /// Rows of Completed imports only: data is visible once committed, never before.
    pub visible_rows: i64,
    pub visible_deleted_rows: i64,
    /// Live rows a query shows with a value changed (the changed-row fault).
    #[serde(default)]
    pub changed_rows: i64,
    pub completed_imports: Vec<CompletedImport>,
}

/// `GET /sim/v1/state`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterSnapshot {
    pub cluster_id: String,
    pub version: String,
    /// The build it reports (its `build`, else its version).
    #[serde(default)]
    pub build: String,
    /// "standalone", "primary" or "secondary".
    pub role: String,
    pub primary: Option<String>,
    pub secondaries: Vec<String>,
    pub pchannels: Vec<String>,
    pub collections: Vec<CollectionSnapshot>,
    pub jobs: Vec<ImportJob>,
    pub streams: Vec<StreamSnapshot>,
    pub pending_job_failures: Vec<JobFailure>,
    /// Pchannels whose replay stopped at a rejected commit fence ([`crate::fence`]).
    #[serde(default)]
    pub fences: Vec<crate::fence::Fence>,
    /// The most recent requests, oldest first: at most the cluster's `request_log_capacity`.
    pub requests: Vec<RequestRecord>,
    /// Older requests that no longer fit in the log.
    pub requests_dropped: u64,
}

impl ClusterSnapshot {
    pub fn job(&self, job_id: i64) -> Option<&ImportJob> {
        self.jobs.iter().find(|j| j.job_id == job_id)
    }

    pub fn collection(&self, db: &str, name: &str) -> Option<&CollectionSnapshot> {
        self.collections
            .iter()
            .find(|c| c.db_name == db && c.name == name)
    }

    /// Requests whose route ends with `suffix` (e.g. "import/describe" or "/GetVersion").
    pub fn requests_to(&self, suffix: &str) -> Vec<&RequestRecord> {
        self.requests
            .iter()
            .filter(|r| r.route.ends_with(suffix))
            .collect()
    }
}
