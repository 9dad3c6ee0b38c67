//! DDL on a cluster: a client's, checked, applied and put on the stream to each secondary, and
//! a primary's, applied as it arrives (docs/milvus-facts.md §2.2, §2.8).

use std::sync::atomic::Ordering;

use super::{Cluster, State};
use crate::catalog::{Catalog, DdlOp, DdlOutcome, NewCollection};
use crate::cdc::CdcMessage;
use crate::jobs::JobState;
use crate::merr::MilvusError;

impl Cluster {
    /// CreateCollection from a client: checked, ids and shard pchannels decided, applied and
    /// replicated.
    pub fn create_collection(&self, request: NewCollection) -> Result<DdlOutcome, MilvusError> {
        let op = request.into_op(
            self.0.version.preserves_field_ids(),
            self.0.pchannels.len(),
            || self.next_id(),
            || self.0.pchannel_cursor.fetch_add(1, Ordering::Relaxed),
        )?;
        self.execute_ddl(op)
    }

    /// Applies a client's DDL (ids already allocated) and replicates it when it changed
    /// anything; refused on a secondary, where DDL only arrives through the stream.
    pub fn execute_ddl(&self, op: DdlOp) -> Result<DdlOutcome, MilvusError> {
        let mut state = self.lock();
        self.refuse_on_secondary(&state)?;
        self.refuse_schema_ddl_while_importing(&state, &op)?;
        let outcome = self.apply_ddl(&mut state, &op)?;
        if outcome != DdlOutcome::AlreadyThere {
            self.broadcast(&mut state, CdcMessage::Ddl(op));
        }
        Ok(outcome)
    }

    /// With `import_blocks_schema_ddl` (milvus#53071), DDL changing the schema of a collection
    /// with an unfinished import job, Uncommitted included, is refused with code 112 before it
    /// is applied or broadcast (docs/milvus-facts.md §2.8). Only a client's DDL is checked: a
    /// secondary applies what its primary already let through.
    fn refuse_schema_ddl_while_importing(
        &self,
        state: &State,
        op: &DdlOp,
    ) -> Result<(), MilvusError> {
        let Some((db, name)) = op.changes_schema_of() else {
            return Ok(());
        };
        if !self.0.spec.import_blocks_schema_ddl {
            return Ok(());
        }
        let id = state.catalog.collection(db, name)?.id;
        match state.jobs_of(Some(id)).find(|j| j.state.is_active()) {
            Some(job) => Err(MilvusError::collection_ddl_import_conflict(
                name,
                job.job_id,
                job.state.name(),
            )),
            None => Ok(()),
        }
    }

    /// Applies DDL from a client or the stream; a dropped collection fails its active jobs
    /// with "collection %d dropped", as Milvus's `checkCollection` does.
    pub(super) fn apply_ddl(
        &self,
        state: &mut State,
        op: &DdlOp,
    ) -> Result<DdlOutcome, MilvusError> {
        let outcome = state.catalog.apply(op, &self.0.pchannels)?;
        if let DdlOutcome::DroppedCollection(collection_id) = outcome {
            for entry in state.jobs.values_mut() {
                if entry.job.collection_id == collection_id && entry.job.state.can_fail() {
                    entry
                        .job
                        .fail(format!("collection {collection_id} dropped"));
                    entry.watch.send_replace(JobState::Failed);
                }
            }
        }
        Ok(outcome)
    }

    /// Reads the catalog.
    pub fn with_catalog<R>(&self, f: impl FnOnce(&Catalog) -> R) -> R {
        f(&self.lock().catalog)
    }
}
