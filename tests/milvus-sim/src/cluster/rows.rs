//! What a query of a cluster sees: the rows of its Completed imports, less those an L0
//! delete removes by Milvus's rule, counted or found by key.

use std::collections::HashSet;

use milvus_formats::binlog::{self, Delete, Pk};

use super::{Cluster, State};
use crate::jobs::{ImportJob, JobState, Row};
use crate::merr::MilvusError;
use crate::options::CommitMode;
use crate::topology::ClusterSpec;

/// One live row a query found by its key.
#[derive(Debug, Clone)]
pub struct FoundRow {
    /// The insert prefix of the file group that holds its values, and its row there.
    pub insert_prefix: String,
    pub index: usize,
    pub pk: Pk,
    /// The changed-row fault took it: a query shows one of its values changed.
    pub changed: bool,
}

impl Cluster {
    /// The rows a query of `collection` counts now, in `partitions` (all when `None`); an
    /// error when the collection does not exist.
    pub fn count_rows(
        &self,
        db: &str,
        collection: &str,
        partitions: Option<&[String]>,
    ) -> Result<i64, MilvusError> {
        let state = self.lock();
        let id = state.catalog.collection(db, collection)?.id;
        Ok(live_rows(&completed(&state, id), partitions, &self.0.spec))
    }

    /// The live rows of `collection` in `partitions` (all when `None`) whose key is one of
    /// `keys`, each with the file group its values lie in, and the collection's schema.
    pub fn rows_with_keys(
        &self,
        db: &str,
        collection: &str,
        partitions: Option<&[String]>,
        keys: &HashSet<Pk>,
    ) -> Result<(milvus_proto::schema::CollectionSchema, Vec<FoundRow>), MilvusError> {
        let state = self.lock();
        let coll = state.catalog.collection(db, collection)?;
        let done = completed(&state, coll.id);
        let found = live_keys(&done, partitions, &self.0.spec)
            .filter(|(_, row)| keys.contains(&row.pk))
            .map(|(job, row)| FoundRow {
                insert_prefix: job.data.kept[row.group].clone(),
                index: row.index,
                pk: row.pk.clone(),
                changed: job.data.changed.as_ref() == Some(&row.pk),
            })
            .collect();
        Ok((coll.schema.clone(), found))
    }

    /// Rows visible in a collection: those of its Completed imports.
    pub fn visible_rows(&self, db: &str, collection: &str) -> i64 {
        let state = self.lock();
        let Ok(id) = state.catalog.collection(db, collection).map(|c| c.id) else {
            return 0;
        };
        state
            .jobs
            .values()
            .filter(|e| e.job.collection_id == id && e.job.state == JobState::Completed)
            .map(|e| e.job.total_rows)
            .sum()
    }
}

/// The Completed imports of collection `id`: what a query reads.
fn completed(state: &State, id: i64) -> Vec<&ImportJob> {
    state
        .jobs_of(Some(id))
        .filter(|j| j.state == JobState::Completed)
        .collect()
}

/// The L0 deletes of `done` that apply to the rows of `rows` (a job of `done`): those of its
/// partition, and those of L0 imports into no partition, which apply to every partition. On a
/// cluster whose held L0 imports keep their timestamps (`two_phase_l0_keeps_timestamps`, as
/// 3.0 does), a held L0 import's deletes keep the backup's timestamps while the rows of a
/// held data import take the commit's, later than every one of them: they remove none of
/// those rows (milvus#51247).
fn deletes_for(done: &[&ImportJob], rows: &ImportJob, spec: &ClusterSpec) -> Vec<Delete> {
    let committed_later = rows.commit_mode() == CommitMode::Manual;
    done.iter()
        .filter(|j| j.partition_name.is_empty() || j.partition_name == rows.partition_name)
        .filter(|j| {
            let kept_timestamps =
                spec.two_phase_l0_keeps_timestamps && j.commit_mode() == CommitMode::Manual;
            !(kept_timestamps && committed_later)
        })
        .flat_map(|j| j.data.deletes.iter().cloned())
        .collect()
}

/// The keys of the rows of `done` (Completed imports of one collection on the cluster of
/// `spec`) in `partitions` (all when `None`) that no L0 delete removes, by Milvus's rule: a
/// delete removes the rows of its key written before it.
pub(super) fn live_keys<'a>(
    done: &'a [&'a ImportJob],
    partitions: Option<&'a [String]>,
    spec: &'a ClusterSpec,
) -> impl Iterator<Item = (&'a ImportJob, &'a Row)> + 'a {
    done.iter()
        .filter(move |j| partitions.is_none_or(|p| p.contains(&j.partition_name)))
        .filter_map(|j| j.data.keys.as_ref().map(|keys| (*j, keys)))
        .flat_map(move |(j, keys)| {
            let deletes = deletes_for(done, j, spec);
            let removed = binlog::removed(keys.iter().map(|r| (&r.pk, r.ts)), &deletes);
            keys.iter()
                .zip(removed)
                .filter(|(_, gone)| !gone)
                .map(move |(row, _)| (j, row))
        })
}

/// How many rows of `done` in `partitions` a query counts: the rows whose keys were read, less
/// those an L0 delete removes, and the rows of imports whose keys were not read (row files),
/// as imported.
pub(super) fn live_rows(
    done: &[&ImportJob],
    partitions: Option<&[String]>,
    spec: &ClusterSpec,
) -> i64 {
    let unkeyed: i64 = done
        .iter()
        .filter(|j| partitions.is_none_or(|p| p.contains(&j.partition_name)))
        .filter(|j| j.data.keys.is_none())
        .map(|j| j.total_rows - j.deleted_rows)
        .sum();
    unkeyed + live_keys(done, partitions, spec).count() as i64
}
