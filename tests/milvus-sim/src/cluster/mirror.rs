//! CDC on a cluster: the ordered stream from a primary to each of its secondaries, and what a
//! secondary does with each message that arrives (docs/milvus-facts.md §2.2). A message
//! reaches its target through the sim's [`Registry`](super::Registry), never through a face.

use std::sync::Arc;
use std::time::Duration;

use super::import::{ABORTED_BY_USER, L0_IMPORT_DISABLED};
use super::{Cluster, State};
use crate::cdc::{CdcMessage, CdcStream, Deliver, Flow, MirrorImport, StreamSnapshot};
use crate::jobs::{JobOrigin, JobState};
use crate::options::{self, ImportSource};
use crate::replication::{self, Role};

impl Cluster {
    /// Puts `message` on the stream of every secondary of this cluster (none unless primary).
    pub(super) fn broadcast(&self, state: &mut State, message: CdcMessage) {
        let Role::Primary { secondaries } =
            replication::role_of(state.replicate_config.as_ref(), self.id())
        else {
            return;
        };
        for target in secondaries {
            self.stream(state, &target).send(message.clone());
        }
    }

    fn stream<'s>(&self, state: &'s mut State, target: &str) -> &'s CdcStream {
        state.streams.entry(target.to_owned()).or_insert_with(|| {
            let lag = *self
                .0
                .default_lag
                .lock()
                .expect("lag lock is never poisoned");
            CdcStream::start(
                target.to_owned(),
                lag,
                self.0.spec.clock_offset,
                self.deliver_to(target.to_owned()),
            )
        })
    }

    fn deliver_to(&self, target: String) -> Deliver {
        let registry = self.0.registry.clone();
        let source = self.id().to_owned();
        Arc::new(move |message| {
            let registry = registry.clone();
            let source = source.clone();
            let target = target.clone();
            Box::pin(async move {
                let Some(cluster) = registry.upgrade().and_then(|r| r.get(&target)) else {
                    tracing::warn!(%source, %target, kind = message.kind(), "cdc target is not a cluster of this sim; message dropped");
                    return;
                };
                // A restarting secondary receives what was sent once it is back, as CDC retries.
                cluster.wait_serving().await;
                cluster.apply_replicated(&source, message);
            })
        })
    }

    /// How far the stream from `source` to this cluster has come (see [`CdcStream`]).
    pub(super) fn stream_checkpoint(&self, source: &str) -> Option<u64> {
        let primary = self.0.registry.upgrade()?.get(source)?;
        let mut state = primary.lock();
        Some(primary.stream(&mut state, self.id()).checkpoint())
    }

    /// Sets the lag or flow of the stream to `target`, creating it if no message went yet.
    pub fn configure_stream(
        &self,
        target: &str,
        lag: Option<Duration>,
        flow: Option<Flow>,
    ) -> StreamSnapshot {
        let mut state = self.lock();
        let stream = self.stream(&mut state, target);
        if let Some(lag) = lag {
            stream.set_lag(lag);
        }
        if let Some(flow) = flow {
            stream.set_flow(flow);
        }
        stream.snapshot()
    }

    /// Stops every stream this cluster sends (the sim shuts down): their tasks reach the
    /// registry, so a stream left running would keep every cluster alive.
    pub(crate) fn stop_streams(&self) {
        self.lock().streams.clear();
    }

    pub(crate) fn set_default_lag(&self, lag: Duration) {
        *self
            .0
            .default_lag
            .lock()
            .expect("lag lock is never poisoned") = lag;
    }

    /// A secondary applies one replicated message (docs/milvus-facts.md §2.2).
    pub(crate) fn apply_replicated(&self, source: &str, message: CdcMessage) {
        tracing::debug!(
            cluster = self.id(),
            source,
            kind = message.kind(),
            "cdc apply"
        );
        match message {
            CdcMessage::Ddl(op) => {
                let result = self.apply_ddl(&mut self.lock(), &op);
                if let Err(e) = result {
                    tracing::warn!(cluster = self.id(), op = op.name(), error = %e, "replicated DDL failed");
                }
            }
            CdcMessage::Import(spec) => self.apply_mirror_import(source, spec),
            CdcMessage::CommitImport { job_id, commit_ts } => {
                let cluster = self.clone();
                let source = source.to_owned();
                // Retried until the mirror is Uncommitted, without holding up later messages.
                tokio::spawn(
                    async move { cluster.replay_commit(&source, job_id, commit_ts).await },
                );
            }
            CdcMessage::RollbackImport { job_id } => {
                let mut state = self.lock();
                if let Some(entry) = state.jobs.get_mut(&job_id)
                    && entry.job.state.can_fail()
                {
                    entry.job.fail(ABORTED_BY_USER);
                    entry.watch.send_replace(JobState::Failed);
                }
            }
            CdcMessage::ReplicateConfig(config) => {
                let mut state = self.lock();
                match self.validate_config(&config, state.replicate_config.as_ref()) {
                    Ok(validated) => self.store_config(&mut state, validated),
                    Err(e) => {
                        tracing::warn!(cluster = self.id(), error = %e, "replicated config refused")
                    }
                }
            }
        }
    }

    fn apply_mirror_import(&self, source: &str, spec: MirrorImport) {
        let mut state = self.lock();
        if state.jobs.contains_key(&spec.job_id) {
            return;
        }
        if state.catalog.collection_by_id(spec.collection_id).is_none() {
            tracing::info!(
                cluster = self.id(),
                job_id = spec.job_id,
                "collection not found; replicated import skipped"
            );
            return;
        }
        let parsed = options::parse(&spec.options, &spec.partition_name).unwrap_or_default();
        let l0_refused = parsed.source == ImportSource::L0Deltas && !self.l0_import_enabled();
        let origin = JobOrigin::Mirror {
            source: source.to_owned(),
        };
        self.insert_job(&mut state, &spec, parsed, origin, None);
        if l0_refused {
            // The peer's own gate: the job exists, Failed from the start.
            if let Some(entry) = state.jobs.get_mut(&spec.job_id) {
                entry.job.fail(L0_IMPORT_DISABLED);
                entry.watch.send_replace(JobState::Failed);
            }
            return;
        }
        drop(state);
        self.spawn_driver(spec.job_id);
    }

    /// `commitImportV2AckCallback` on a secondary: waits (unbounded, as Milvus retries) for the
    /// mirror to exist and reach Uncommitted; a Failed mirror is a logged divergence. The
    /// commit keeps the primary's time tick, so the fence judges it as the primary's did.
    async fn replay_commit(&self, source: &str, job_id: i64, commit_ts: u64) {
        let mut watch = loop {
            let created = self.0.job_created.notified();
            tokio::pin!(created);
            created.as_mut().enable();
            if let Some(w) = self.job_watch(job_id) {
                break w;
            }
            created.await;
        };
        loop {
            let current = *watch.borrow_and_update();
            match current {
                JobState::Uncommitted => {
                    // Read before the lock: it takes the primary's.
                    let checkpoint = self.stream_checkpoint(source);
                    let mut state = self.lock();
                    if state.jobs.get(&job_id).map(|e| e.job.state) == Some(JobState::Uncommitted) {
                        self.enter_committing(&mut state, job_id, commit_ts, checkpoint);
                        return;
                    }
                }
                JobState::Committing | JobState::Completed => return,
                JobState::Failed => {
                    tracing::warn!(
                        cluster = self.id(),
                        job_id,
                        "job is Failed; this replica will NOT commit while the source commits — potential primary/standby divergence"
                    );
                    return;
                }
                _ => {
                    if watch.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}
