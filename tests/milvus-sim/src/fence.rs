//! The commit fence of a two-phase import (Milvus's `UpdateCommitTimestamp`, milvus#51589;
//! docs/milvus-facts.md §2.7). A binlog import keeps the source cluster's row timestamps,
//! and its commit makes the segments visible at the commit's time tick; a commit below the
//! newest row timestamp of the job's binlogs would publish rows newer than the moment they
//! became visible, so the fence rejects it. Milvus's flusher retries a rejected fence without
//! end, so the pchannel's WAL replay stops there until an operator steps in: the job stays
//! Committing, no later commit on that pchannel completes, and on a secondary the
//! replication checkpoint of the pchannel stops moving.
//!
//! The rule and the record of stopped pchannels live here; [`crate::cluster`] raises a fence
//! when a commit reaches a job, the job's task keeps a job whose pchannel stopped in
//! Committing, and `GetReplicateInfo` answers a stopped pchannel's checkpoint.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::jobs::ImportJob;

/// A pchannel whose WAL replay stopped at a commit fence it rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub pchannel: String,
    /// The job whose commit was rejected.
    #[serde(with = "crate::jobs::id_string")]
    pub job_id: i64,
    /// The commit's time tick.
    pub commit_ts: u64,
    /// The newest row timestamp of the job's binlogs, above `commit_ts`.
    pub max_row_ts: u64,
    /// On a secondary, the replication checkpoint of the pchannel when its replay stopped:
    /// where `GetReplicateInfo` leaves it.
    pub checkpoint: Option<u64>,
}

/// The newest row timestamp of `job`'s binlogs when a commit at `commit_ts` is below it: the
/// fence rejects that commit. Row files and L0 deletes carry no source timestamps of their
/// own here, so only a binlog import can be rejected.
pub fn rejected(job: &ImportJob, commit_ts: u64) -> Option<u64> {
    job.data.max_row_ts.filter(|newest| commit_ts < *newest)
}

/// The stopped pchannels of one cluster, by name. What survives a restart, as the WAL does:
/// a restarted node replays to the same fence.
#[derive(Debug, Default)]
pub(crate) struct Fences(BTreeMap<String, Fence>);

impl Fences {
    /// Stops `pchannels` at `fence` (its `pchannel` is filled in for each). A pchannel already
    /// stopped keeps its first fence: its replay never got past it.
    pub fn raise(&mut self, pchannels: &[String], fence: &Fence) {
        for pchannel in pchannels {
            self.0.entry(pchannel.clone()).or_insert_with(|| Fence {
                pchannel: pchannel.clone(),
                ..fence.clone()
            });
        }
    }

    /// Whether any of `pchannels` stopped.
    pub fn blocks(&self, pchannels: &[String]) -> bool {
        pchannels.iter().any(|p| self.0.contains_key(p))
    }

    /// The checkpoint a stopped `pchannel` stays at, when it stopped on a secondary.
    pub fn checkpoint(&self, pchannel: &str) -> Option<u64> {
        self.0.get(pchannel).and_then(|f| f.checkpoint)
    }

    pub fn list(&self) -> Vec<Fence> {
        self.0.values().cloned().collect()
    }
}
