//! Import jobs as a client drives them: create (REST create, gRPC Import), describe, list,
//! commit and abort, with Milvus 3.0's checks in Milvus's order (docs/milvus-facts.md §1, §2).
//! A created job is put on the stream to each secondary ([`super::mirror`]) and handed to its
//! task ([`super::driver`]).

use std::collections::BTreeMap;

use tokio::sync::watch;

use super::{Cluster, JobEntry, State};
use crate::Protocol;
use crate::cdc::{CdcMessage, MirrorImport};
use crate::fence::{self, Fence};
use crate::jobs::{ImportJob, JobOrigin, JobState, Stamp};
use crate::merr::MilvusError;
use crate::options::{self, CommitMode, ImportSource};
use crate::replication;
use crate::version::ImportFace;

/// Reason a rollback gives a job (Milvus's `import_job.go`, docs/milvus-facts.md §2.3).
pub const ABORTED_BY_USER: &str = "aborted by user";
/// Why an L0 import is refused, or a replicated one created Failed, with
/// `dataCoord.import.enableL0Import` off (Milvus 3.0's default, `services.go`).
pub const L0_IMPORT_DISABLED: &str = "l0 import is disabled (dataCoord.import.enableL0Import=false); fold L0 deletes into data segment deltalogs before restore, or set the config to true to re-enable the legacy L0 import";
/// Milvus's `streaming.idempotency.maxKeyLength`.
const MAX_IDEMPOTENCY_KEY_LEN: usize = 256;

/// A create request from either face, after the face's own parsing.
#[derive(Debug, Clone)]
pub struct CreateImport {
    pub db_name: String,
    pub collection_name: String,
    pub partition_name: String,
    pub files: Vec<Vec<String>>,
    pub options: BTreeMap<String, String>,
    pub idempotency_key: Option<String>,
    pub protocol: Protocol,
}

impl Cluster {
    /// REST create / gRPC Import on this cluster (docs/milvus-facts.md §1, §2.1).
    pub fn create_import(&self, req: CreateImport) -> Result<i64, MilvusError> {
        let mut state = self.lock();
        let collection = state
            .catalog
            .collection(&req.db_name, &req.collection_name)?;
        let (collection_id, db_name) = (collection.id, collection.db_name.clone());
        collection
            .check_import_partition(&req.partition_name, options::import_source(&req.options))?;
        if req.files.is_empty() {
            return Err(MilvusError::import_failed("import request is empty"));
        }
        let mut parsed = options::parse(&req.options, &req.partition_name)?;
        if parsed.source == ImportSource::L0Deltas && !self.l0_import_enabled() {
            return Err(MilvusError::import_failed(L0_IMPORT_DISABLED));
        }
        // Before 3.0 `auto_commit` is an option Milvus does not know: every job commits
        // itself.
        if self.import_face() != ImportFace::TwoPhase {
            parsed.commit = CommitMode::Auto;
        }
        let key = self.idempotency_key(req.idempotency_key.as_deref())?;
        // The job a known key names; looked up before admission, or after it when the
        // cluster follows milvus#53228 (docs/milvus-facts.md §1.6).
        let known = |state: &State| {
            let key = key.clone()?;
            state.idempotency.get(&(collection_id, key)).copied()
        };
        let after_admission = self.0.spec.admission_before_idempotency;
        if let Some(existing) = known(&state).filter(|_| !after_admission) {
            return Ok(existing);
        }
        // Only as many jobs as the limit can hold that many active ones: counting them at
        // every create made a restore of 40,000 jobs quadratic.
        let limit = self.0.spec.max_import_job_num;
        let at_limit = state.jobs.len() >= limit
            && state
                .jobs
                .values()
                .filter(|e| e.job.state.is_active())
                .count()
                >= limit;
        if at_limit {
            return Err(MilvusError::import_sys_failed(
                "The number of jobs has reached the limit, please try again later. If your request is set to only import a single file, please consider importing multiple files in one request for better efficiency.",
            ));
        }
        // Milvus validates the job limit, then the replication gate, then broadcasts; a
        // standby's broadcast is what fails.
        if replication::is_replicating(state.replicate_config.as_ref()) {
            let gate = if !self.0.spec.import_in_replicating_cluster {
                Some("import in replicating cluster is not supported yet")
            } else if parsed.commit == CommitMode::Auto {
                Some("auto_commit=true import in replicating cluster is not supported")
            } else {
                None
            };
            if let Some(msg) = gate {
                let inner = MilvusError::operation_not_supported(msg);
                return Err(MilvusError::new(
                    inner.code,
                    format!("failed to validate import request: {}", inner.message),
                ));
            }
        }
        self.refuse_on_secondary(&state).map_err(|e| {
            MilvusError::new(
                e.code,
                format!(
                    "failed to broadcast import: failed to start broadcast with collection id: {}",
                    e.message
                ),
            )
        })?;
        if let Some(existing) = known(&state) {
            return Ok(existing);
        }
        let job_id = self.next_id();
        let mirror = MirrorImport {
            job_id,
            db_name,
            collection_name: req.collection_name,
            collection_id,
            partition_name: req.partition_name,
            files: req.files,
            options: req.options,
        };
        if let Some(key) = &key {
            state
                .idempotency
                .insert((collection_id, key.clone()), job_id);
        }
        self.insert_job(
            &mut state,
            &mirror,
            parsed,
            JobOrigin::Client {
                protocol: req.protocol,
            },
            key,
        );
        self.broadcast(&mut state, CdcMessage::Import(mirror));
        drop(state);
        self.spawn_driver(job_id);
        Ok(job_id)
    }

    /// The `Idempotency-Key` of a create, checked as the proxy checks it; None when the
    /// version ignores the header or none was sent.
    fn idempotency_key(&self, key: Option<&str>) -> Result<Option<String>, MilvusError> {
        let Some(key) = key.filter(|k| !k.is_empty()) else {
            return Ok(None);
        };
        if !self.0.version.honours_idempotency_key() {
            return Ok(None);
        }
        if key.len() > MAX_IDEMPOTENCY_KEY_LEN || !key.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(MilvusError::parameter_invalid(
                "idempotency key of printable ASCII, at most 256 bytes",
                format!("{} bytes", key.len()),
            ));
        }
        Ok(Some(key.to_owned()))
    }

    pub(super) fn insert_job(
        &self,
        state: &mut State,
        spec: &MirrorImport,
        parsed: options::ImportOptions,
        origin: JobOrigin,
        idempotency_key: Option<String>,
    ) {
        let created = Stamp::now();
        let timeout_at = parsed.timeout.map(|t| tokio::time::Instant::now() + t);
        let deadline = parsed.timeout.map(|t| {
            let at = created.rfc3339 + t;
            Stamp {
                rfc3339: at,
                unix_ms: at.as_millisecond(),
            }
        });
        let mut job = ImportJob {
            job_id: spec.job_id,
            db_name: spec.db_name.clone(),
            collection_name: spec.collection_name.clone(),
            collection_id: spec.collection_id,
            partition_name: spec.partition_name.clone(),
            files: spec.files.clone(),
            options: spec.options.clone(),
            parsed_options: parsed,
            origin,
            idempotency_key,
            state: JobState::Pending,
            reason: String::new(),
            history: Vec::new(),
            created,
            completed: None,
            deadline,
            total_rows: 0,
            imported_rows: 0,
            deleted_rows: 0,
            groups: Vec::new(),
            manifest: Vec::new(),
            data: Default::default(),
            state_entered_ms: created.unix_ms,
            timeout_at,
        };
        job.enter(JobState::Pending);
        state.faults.bind_next(spec.job_id);
        (state.by_collection.entry(job.collection_id).or_default()).insert(spec.job_id);
        state.jobs.insert(
            spec.job_id,
            JobEntry {
                job,
                watch: watch::channel(JobState::Pending).0,
            },
        );
        self.0.job_created.notify_waiters();
    }

    /// A copy of a job.
    pub fn job(&self, job_id: i64) -> Option<ImportJob> {
        self.lock().jobs.get(&job_id).map(|e| e.job.clone())
    }

    /// describe / get_progress: the job under a string id (docs/milvus-facts.md §1.3).
    pub fn describe_import(&self, raw_id: &str) -> Result<ImportJob, MilvusError> {
        let job_id: i64 = raw_id.parse().map_err(|_| {
            MilvusError::new(
                crate::merr::code::PARAMETER_INVALID,
                format!(
                    "parse job id failed: strconv.ParseInt: parsing \"{raw_id}\": invalid syntax"
                ),
            )
        })?;
        self.job(job_id)
            .filter(|j| self.retained(j))
            .ok_or_else(|| job_not_found(job_id))
    }

    /// Whether a job is still known to clients: a finished one is forgotten
    /// `dataCoord.import.taskRetention` after it finished (the sim's own record keeps it).
    fn retained(&self, job: &ImportJob) -> bool {
        let retention = self.task_retention();
        job.completed
            .is_none_or(|done| Stamp::now().unix_ms - done.unix_ms <= retention.as_millis() as i64)
    }

    /// list: what `row` makes of every job, optionally of one collection of a database.
    /// `row` runs under the state's lock (it must not take it): a whole job is not cloned
    /// for the few fields a list shows (with 40,000 jobs on an end, each poll of a whole-end
    /// list cloned every one, with its files, options, history and manifest).
    pub fn list_imports<T>(
        &self,
        db: &str,
        collection: Option<&str>,
        row: impl FnMut(&ImportJob) -> T,
    ) -> Result<Vec<T>, MilvusError> {
        let state = self.lock();
        let collection_id = match collection {
            Some(name) if !name.is_empty() => Some(state.catalog.collection(db, name)?.id),
            _ => None,
        };
        Ok(state
            .jobs_of(collection_id)
            .filter(|job| self.retained(job))
            .map(row)
            .collect())
    }

    /// How far into its current stage a job is, for progress interpolation.
    pub fn stage_fraction(&self, job: &ImportJob) -> f64 {
        let d = &self.0.spec.durations;
        let stage = match job.state {
            JobState::Pending => d.pending,
            JobState::PreImporting => d.preimport,
            JobState::Importing => d.importing,
            JobState::Sorting => d.sorting,
            JobState::IndexBuilding => d.index_building,
            _ => return 0.0,
        };
        if stage.is_zero() {
            return 0.0;
        }
        let elapsed_ms = (Stamp::now().unix_ms - job.state_entered_ms).max(0) as f64;
        elapsed_ms / stage.as_millis() as f64
    }

    fn parse_job_id(raw: &str) -> Result<i64, MilvusError> {
        raw.parse()
            .map_err(|_| MilvusError::parameter_invalid("int64 jobId", raw))
    }

    /// The job a commit or abort names, while the cluster still knows it (2101 otherwise).
    fn known_job<'s>(&self, state: &'s State, job_id: i64) -> Result<&'s ImportJob, MilvusError> {
        let job = state.jobs.get(&job_id).map(|e| &e.job);
        job.filter(|j| self.retained(j))
            .ok_or_else(|| MilvusError::import_sys_failed(format!("job {job_id} not found")))
    }

    /// REST commit, its checks in Milvus 3.0's order (docs/milvus-facts.md §2.3): the job must
    /// exist (2101); Committing or Completed is a no-op, anything but Uncommitted is refused
    /// (2100); then an auto-commit job is refused; and only the broadcast, last, fails on a
    /// standby, so a standby answers for its mirror's state first.
    pub fn commit_import(&self, raw_id: &str) -> Result<i64, MilvusError> {
        let job_id = Self::parse_job_id(raw_id)?;
        let mut state = self.lock();
        let job = self.known_job(&state, job_id)?;
        match job.state {
            JobState::Committing | JobState::Completed => return Ok(job_id),
            JobState::Uncommitted => {}
            other => {
                return Err(MilvusError::import_failed(format!(
                    "job {job_id} is in state {}, expected Uncommitted",
                    other.name()
                )));
            }
        }
        if job.commit_mode() == CommitMode::Auto {
            return Err(manual_not_allowed(job_id));
        }
        self.refuse_on_secondary(&state)?;
        let commit_ts = self.clock();
        self.enter_committing(&mut state, job_id, commit_ts, None);
        self.broadcast(&mut state, CdcMessage::CommitImport { job_id, commit_ts });
        Ok(job_id)
    }

    /// A commit stamped `commit_ts` reaching job `job_id`: the job is Committing. A commit the
    /// fence rejects ([`fence::rejected`]) also stops the pchannels of the job's collection,
    /// and a secondary's replication `checkpoint` with them (docs/milvus-facts.md §2.7).
    pub(super) fn enter_committing(
        &self,
        state: &mut State,
        job_id: i64,
        commit_ts: u64,
        checkpoint: Option<u64>,
    ) {
        let Some(entry) = state.jobs.get_mut(&job_id) else {
            return;
        };
        set_state(entry, JobState::Committing);
        let Some(max_row_ts) = fence::rejected(&entry.job, commit_ts)
            .filter(|_| self.0.spec.stale_commit_blocks_channel)
        else {
            return;
        };
        let collection_id = entry.job.collection_id;
        let Some(collection) = state.catalog.collection_by_id(collection_id) else {
            return;
        };
        tracing::warn!(
            cluster = self.id(),
            job_id,
            commit_ts,
            max_row_ts,
            pchannels = ?collection.physical_channels,
            "commit timestamp is below the binlogs' newest row timestamp: the commit fence is rejected and retried without end"
        );
        let pchannels = collection.physical_channels.clone();
        let fence = Fence {
            pchannel: String::new(),
            job_id,
            commit_ts,
            max_row_ts,
            checkpoint,
        };
        state.fences.raise(&pchannels, &fence);
    }

    /// Whether job `job_id`'s commit cannot complete: a pchannel of its collection stopped at
    /// a rejected commit fence (its own, or an earlier job's).
    pub(super) fn commit_blocked(&self, job_id: i64) -> bool {
        let state = self.lock();
        let Some(entry) = state.jobs.get(&job_id) else {
            return false;
        };
        let collection = state.catalog.collection_by_id(entry.job.collection_id);
        collection.is_some_and(|c| state.fences.blocks(&c.physical_channels))
    }

    /// REST abort (docs/milvus-facts.md §2.3): a job already aborted by the user is a no-op; a
    /// committing or completed one is refused; any other state, a job that failed on its own
    /// included, is rolled back everywhere (it keeps its own reason here), after the
    /// auto-commit guard and, on a standby, the refusal of the broadcast.
    pub fn abort_import(&self, raw_id: &str) -> Result<i64, MilvusError> {
        let job_id = Self::parse_job_id(raw_id)?;
        let mut state = self.lock();
        let job = self.known_job(&state, job_id)?;
        match job.state {
            JobState::Failed if job.reason == ABORTED_BY_USER => return Ok(job_id),
            s @ (JobState::Committing | JobState::Completed) => {
                return Err(MilvusError::import_failed(format!(
                    "job {job_id} is in terminal/committed state {}, abort not allowed",
                    s.name()
                )));
            }
            _ => {}
        }
        if job.commit_mode() == CommitMode::Auto {
            return Err(manual_not_allowed(job_id));
        }
        self.refuse_on_secondary(&state)?;
        if let Some(entry) = state.jobs.get_mut(&job_id)
            && entry.job.state != JobState::Failed
        {
            entry.job.fail(ABORTED_BY_USER);
            entry.watch.send_replace(JobState::Failed);
        }
        self.broadcast(&mut state, CdcMessage::RollbackImport { job_id });
        Ok(job_id)
    }

    /// Subscribes to a job's state.
    pub(super) fn job_watch(&self, job_id: i64) -> Option<watch::Receiver<JobState>> {
        self.lock().jobs.get(&job_id).map(|e| e.watch.subscribe())
    }

    /// Runs `f` on a job still in state `from`; a job that moved meanwhile is left alone.
    pub(super) fn update_job_in<R>(
        &self,
        job_id: i64,
        from: JobState,
        f: impl FnOnce(&mut ImportJob) -> R,
    ) -> Option<R> {
        let mut state = self.lock();
        let entry = state.jobs.get_mut(&job_id)?;
        if entry.job.state != from {
            return None;
        }
        let result = f(&mut entry.job);
        if entry.job.state != from {
            entry.watch.send_replace(entry.job.state);
        }
        Some(result)
    }
}

fn set_state(entry: &mut JobEntry, state: JobState) {
    entry.job.enter(state);
    entry.watch.send_replace(state);
}

/// describe / get_progress of an unknown job: 2101 since Milvus #50221.
fn job_not_found(job_id: i64) -> MilvusError {
    MilvusError::import_sys_failed(format!("import job does not exist, jobID={job_id}"))
}

fn manual_not_allowed(job_id: i64) -> MilvusError {
    MilvusError::import_failed(format!(
        "job {job_id} is auto-commit, manual commit/abort not allowed"
    ))
}
