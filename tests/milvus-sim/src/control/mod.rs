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

use crate::cdc::Flow;
// The state a control request reads is the cluster's own shape.
pub use crate::cluster::{ClusterSnapshot, CollectionSnapshot, CompletedImport, FieldSnapshot};
use crate::faults::{ApiEffect, ApiFace};

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
