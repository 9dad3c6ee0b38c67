//! What the control API's `GET /sim/v1/state` shows of a cluster: its role, collections with
//! the rows a query sees, jobs, streams, pending faults, fences and recent requests.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::Cluster;
use super::rows::{live_keys, live_rows};
use crate::cdc::{CdcStream, StreamSnapshot};
use crate::faults::JobFailure;
use crate::fence::Fence;
use crate::jobs::{ImportJob, JobState, ManifestEntry};
use crate::replication::{self, Role};
use crate::request_log::RequestRecord;

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
    pub fences: Vec<Fence>,
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

impl Cluster {
    /// Everything the control API's `GET /sim/v1/state` shows.
    pub fn snapshot(&self) -> ClusterSnapshot {
        let state = self.lock();
        let role = replication::role_of(state.replicate_config.as_ref(), self.id());
        let mut completed: HashMap<i64, Vec<&ImportJob>> = HashMap::new();
        for entry in state.jobs.values() {
            if entry.job.state == JobState::Completed {
                completed
                    .entry(entry.job.collection_id)
                    .or_default()
                    .push(&entry.job);
            }
        }
        let collections = state
            .catalog
            .databases
            .values()
            .flat_map(|d| d.collections.values())
            .map(|c| {
                let done = completed.get(&c.id).map(Vec::as_slice).unwrap_or_default();
                CollectionSnapshot {
                    db_name: c.db_name.clone(),
                    name: c.name.clone(),
                    id: c.id,
                    fields: c
                        .schema
                        .fields
                        .iter()
                        .map(|f| FieldSnapshot {
                            field_id: f.field_id,
                            name: f.name.clone(),
                            is_dynamic: f.is_dynamic,
                        })
                        .collect(),
                    partitions: c.partitions.iter().map(|p| p.name.clone()).collect(),
                    indexes: c.indexes.iter().map(|i| i.index_name.clone()).collect(),
                    loaded: c.loaded,
                    visible_rows: done.iter().map(|j| j.total_rows).sum(),
                    visible_deleted_rows: done.iter().map(|j| j.total_rows).sum::<i64>()
                        - live_rows(done, None, &self.0.spec),
                    changed_rows: live_keys(done, None, &self.0.spec)
                        .filter(|(job, row)| job.data.changed.as_ref() == Some(&row.pk))
                        .count() as i64,
                    completed_imports: done
                        .iter()
                        .map(|j| CompletedImport {
                            job_id: j.job_id.to_string(),
                            partition_name: j.partition_name.clone(),
                            rows: j.total_rows,
                            manifest: j.manifest.clone(),
                        })
                        .collect(),
                }
            })
            .collect();
        ClusterSnapshot {
            cluster_id: self.id().to_owned(),
            version: self.version().to_owned(),
            build: self.build().to_owned(),
            role: role.name().to_owned(),
            primary: match &role {
                Role::Secondary { primary } => Some(primary.clone()),
                _ => None,
            },
            secondaries: match &role {
                Role::Primary { secondaries } => secondaries.clone(),
                _ => Vec::new(),
            },
            pchannels: self.0.pchannels.clone(),
            collections,
            jobs: state.jobs.values().map(|e| e.job.clone()).collect(),
            streams: state.streams.values().map(CdcStream::snapshot).collect(),
            pending_job_failures: state.faults.pending_job_failures(),
            fences: state.fences.list(),
            requests: state.requests.records().cloned().collect(),
            requests_dropped: state.requests.dropped(),
        }
    }
}
