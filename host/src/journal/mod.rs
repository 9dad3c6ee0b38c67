//! Durable restore state: what was submitted, what was decided, how it ended.
//!
//! The journal is the coordinator's memory across crashes (docs/milvus-facts.md §6.1): every
//! import job's Idempotency-Key is written before its create is sent, the commit decision is
//! made durable before any commit is sent, and a restore found unfinished is resolved by the
//! presumption it records: no decision → abort what was submitted; decision → roll forward.
//!
//! Two backends sit behind [`Journal`]: [`embedded::FileJournal`] (one JSON file per restore,
//! written by atomic rename with fsync, a lock file per restore) and the etcd journal shared by
//! a fleet. A [`Claim`] is the right to act on one restore; every save goes through it, so a
//! host that lost its claim cannot overwrite another host's record.

pub mod embedded;
pub mod etcd;
pub mod etcd_client;
pub mod index;
pub mod measured;
mod tally;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::milvus::MilvusJobId;

/// One attempt to run one job's content: `{name}.{hash12}.{attempt}`. A new attempt after a
/// failure gets a new id, hence new Idempotency-Keys, hence fresh import jobs (a key Milvus
/// remembers would hand back the failed job).
///
/// The id names journal files, lock files, etcd keys and staging prefixes, and it reaches
/// lockstep from REST queries and CLI arguments: it is only ever made by [`RestoreId::new`]
/// or checked by [`RestoreId::parse`], so it can never be a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RestoreId(String);

/// The longest job name part of an id ([`RestoreId::content_prefix`] cuts names there).
const NAME_PART_MAX: usize = 64;
/// The hash part: the first 12 hex digits of the job content's SHA-256.
const HASH_PART_MAX: usize = 12;

/// Why a string is not a restore id (or a job identity or name). Its text names the rule,
/// never the input: it is answered to API callers, who must not learn what a path holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidId {
    #[error(
        "invalid id: expected `NAME.HASH.ATTEMPT` (a job name of up to 64 letters, digits, `_` or `-`, 1 to 12 hex digits, an attempt number)"
    )]
    RestoreId,
    #[error(
        "invalid id: expected a restore id `NAME.HASH.ATTEMPT`, a job identity `NAME.HASH` or a job name of up to 128 letters, digits, `_`, `-` or `.`"
    )]
    Lookup,
}

impl RestoreId {
    pub fn new(job_name: &str, content_hash: &str, attempt: u32) -> RestoreId {
        RestoreId(format!(
            "{}{attempt}",
            RestoreId::content_prefix(job_name, content_hash)
        ))
    }

    /// Accepts exactly what [`RestoreId::new`] makes: a name part of `[A-Za-z0-9_-]`, a hex
    /// hash part and a decimal attempt, joined by dots.
    pub fn parse(s: &str) -> Result<RestoreId, InvalidId> {
        let mut parts = s.split('.');
        let (Some(name), Some(hash), Some(attempt), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(InvalidId::RestoreId);
        };
        let name_ok = (1..=NAME_PART_MAX).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
        let hash_ok = (1..=HASH_PART_MAX).contains(&hash.len())
            && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let attempt_ok = !attempt.is_empty()
            && attempt.bytes().all(|b| b.is_ascii_digit())
            && attempt.parse::<u32>().is_ok();
        if name_ok && hash_ok && attempt_ok {
            Ok(RestoreId(s.to_owned()))
        } else {
            Err(InvalidId::RestoreId)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `{name}.{hash12}.`: what every attempt of one job content starts with. The name is
    /// reduced to characters safe in file names, etcd keys and Idempotency-Keys.
    pub fn content_prefix(job_name: &str, content_hash: &str) -> String {
        let hash = content_hash.get(..HASH_PART_MAX).unwrap_or(content_hash);
        format!("{}{hash}.", RestoreId::name_prefix(job_name))
    }

    /// `{name}.`: what every attempt of every content of the job `job_name` starts with.
    fn name_prefix(job_name: &str) -> String {
        let name: String = job_name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(NAME_PART_MAX)
            .collect();
        format!("{name}.")
    }
}

impl TryFrom<String> for RestoreId {
    type Error = InvalidId;

    fn try_from(s: String) -> Result<Self, InvalidId> {
        RestoreId::parse(&s)
    }
}

impl From<RestoreId> for String {
    fn from(id: RestoreId) -> String {
        id.0
    }
}

/// What an operator may name a restore by: its id, its job identity (`{name}.{hash12}`, every
/// attempt of one content) or its job name. Only a parsed id is ever looked up by key; the
/// text is otherwise matched against listed records, so it never becomes a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreLookup {
    text: String,
    id: Option<RestoreId>,
}

impl RestoreLookup {
    /// Letters, digits, `_`, `-` and `.`, at most 128 of them: every id, identity and job
    /// name lockstep makes or accepts, and nothing that walks a path.
    pub fn parse(s: &str) -> Result<RestoreLookup, InvalidId> {
        let allowed = (1..=128).contains(&s.len())
            && !s.bytes().all(|b| b == b'.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !allowed {
            return Err(InvalidId::Lookup);
        }
        Ok(RestoreLookup {
            text: s.to_owned(),
            id: RestoreId::parse(s).ok(),
        })
    }

    /// The restore id it is, if it is one.
    pub fn id(&self) -> Option<&RestoreId> {
        self.id.as_ref()
    }

    /// Whether `record` is one this lookup names: by id, by job identity or by job name.
    pub fn matches(&self, record: &RestoreRecord) -> bool {
        let id = record.id.as_str();
        id == self.text
            || id
                .strip_prefix(self.text.as_str())
                .is_some_and(|attempt| attempt.starts_with('.'))
            || record.job_name == self.text
    }

    /// Whether it names the job identity `identity` (`{name}.{hash12}.`).
    pub fn names_identity(&self, identity: &str) -> bool {
        identity.trim_end_matches('.') == self.text
    }

    /// The record it names in `journal`: the restore with its id; else the newest attempt
    /// of the job identity or job name it is. Every command and route that takes an id
    /// finds it here, so each accepts what the others print.
    pub async fn find(&self, journal: &dyn Journal) -> Result<Option<RestoreRecord>> {
        if let Some(id) = &self.id
            && let Some(record) = journal.load(id).await?
        {
            return Ok(Some(record));
        }
        // Only the ids it can name are read: an identity's attempts start with `{text}.`,
        // a job name's with its name part.
        let prefixes = BTreeSet::from([
            format!("{}.", self.text),
            RestoreId::name_prefix(&self.text),
        ]);
        let mut newest: Option<RestoreRecord> = None;
        for prefix in &prefixes {
            journal
                .scan(prefix, &mut |listed| match listed {
                    Listed::Record(record) if self.matches(&record) => {
                        if newest
                            .as_ref()
                            .is_none_or(|n| started(n) < started(&record))
                        {
                            newest = Some(record);
                        }
                    }
                    Listed::Record(_) => {}
                    Listed::Unreadable(bad) => log_unreadable(&bad),
                })
                .await?;
        }
        Ok(newest)
    }
}

impl fmt::Display for RestoreLookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Display for RestoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a restore stands. The order is the order of DESIGN.md §1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestorePhase {
    Preflight,
    Ddl,
    Staging,
    Importing,
    Holding,
    /// At least one commit group has a durable decision; the rest follows it.
    Deciding,
    Completing,
    /// Nothing left to do; `outcome` says how it ended.
    Finished,
}

impl fmt::Display for RestorePhase {
    /// Its JSON value, as the log, `status` and the reports say it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RestorePhase::Preflight => "preflight",
            RestorePhase::Ddl => "ddl",
            RestorePhase::Staging => "staging",
            RestorePhase::Importing => "importing",
            RestorePhase::Holding => "holding",
            RestorePhase::Deciding => "deciding",
            RestorePhase::Completing => "completing",
            RestorePhase::Finished => "finished",
        })
    }
}

/// How a restore ended, and the exit code that tells it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Visible on every end.
    Succeeded,
    /// Visible on every end by the jobs' own counts, but a query could not be asked on
    /// every end, and the job's `[verify] required` asks for one.
    Unverified,
    /// Refused before anything was written: bad input or a preflight rule.
    Refused,
    /// Failed before its decision; every submitted job was aborted on every end.
    RolledBack,
    /// Committed, but at least one end failed to make it visible: a named divergence.
    Diverged,
    /// With collection-level atomicity: some collections were committed and are visible on
    /// every end, then another failed before its decision and was rolled back; the report
    /// says which is which.
    PartlyCommitted,
    /// Stopped without converging (an end stayed unreachable); `lockstep recover` resumes it.
    Incomplete,
    /// lockstep could not do its own part before anything was written on any end: its
    /// journal unreachable or unwritable, its state directory unusable. Not the job's fault.
    HostFailed,
    /// This host lost its claim on the restore (a pause or a partition longer than the
    /// lease, or a journal that went away) and stopped touching anything: another host has
    /// taken it over or will, and the journal's record, not this report, says how it ends.
    /// Only ever a local report: a host without the claim writes no record.
    Lost,
}

impl Outcome {
    pub const ALL: [Outcome; 9] = [
        Outcome::Succeeded,
        Outcome::Unverified,
        Outcome::Refused,
        Outcome::RolledBack,
        Outcome::Diverged,
        Outcome::PartlyCommitted,
        Outcome::Incomplete,
        Outcome::HostFailed,
        Outcome::Lost,
    ];

    /// 0 success, 1 failed and rolled back, 2 refused, 3 committed with divergence,
    /// 4 not converged (run `lockstep recover`) or committed and not verified everywhere
    /// (as `lockstep verify` says), 5 partly committed, 6 lockstep itself could not work,
    /// 7 lost to another host (its record says how the restore ends).
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Succeeded => 0,
            Outcome::RolledBack => 1,
            Outcome::Refused => 2,
            Outcome::Diverged => 3,
            Outcome::Incomplete | Outcome::Unverified => 4,
            Outcome::PartlyCommitted => 5,
            Outcome::HostFailed => 6,
            Outcome::Lost => 7,
        }
    }

    /// Whether the restore ended with data it committed: running the same job content
    /// again would only collide with it, so it is not run again.
    pub fn committed(self) -> bool {
        matches!(
            self,
            Outcome::Succeeded | Outcome::Unverified | Outcome::Diverged | Outcome::PartlyCommitted
        )
    }

    /// The worst of two outcomes, for a batch of restores: divergence and unconverged state
    /// need a person more than a rollback does.
    pub fn worst(self, other: Outcome) -> Outcome {
        fn rank(o: Outcome) -> u8 {
            match o {
                Outcome::Succeeded => 0,
                Outcome::Refused | Outcome::Unverified => 1,
                Outcome::HostFailed => 2,
                // This host's part ended; the restore goes on elsewhere.
                Outcome::Lost => 2,
                Outcome::RolledBack => 2,
                Outcome::PartlyCommitted => 3,
                Outcome::Diverged => 4,
                Outcome::Incomplete => 5,
            }
        }
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

impl fmt::Display for Outcome {
    /// The one spelling a person reads (the text report, `status`, the log, watch's lines):
    /// its JSON value in words, `rolled back` for `rolled_back`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Unverified => "unverified",
            Outcome::Refused => "refused",
            Outcome::RolledBack => "rolled back",
            Outcome::Diverged => "diverged",
            Outcome::PartlyCommitted => "partly committed",
            Outcome::Incomplete => "incomplete",
            Outcome::HostFailed => "host failed",
            Outcome::Lost => "lost",
        })
    }
}

/// What was decided for a commit group. Only `Commit` must be durable before it acts
/// (presumed abort); aborts are recorded so the report and `status` can say why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Decision {
    Commit { at: Timestamp },
    Abort { at: Timestamp, reason: String },
}

/// One import batch as submitted to the target: the batch as planned, shared by every copy
/// of the record and every stage that reads it (at tens of thousands of batches a copy of
/// each per holder was most of a restore's memory), and what became of its create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRecord {
    #[serde(flatten)]
    pub planned: Arc<PlannedBatch>,
    /// Written when the target answered the create. `None` with `create_sent` means the answer
    /// was lost: recovery looks the job up by its key.
    pub job_id: Option<MilvusJobId>,
    pub create_sent: bool,
}

/// What a batch is, fixed when the restore is planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedBatch {
    pub batch_id: String,
    pub db: String,
    pub collection: String,
    pub partition: String,
    /// Sent as `Idempotency-Key`; derived from the restore id and the batch id.
    pub idempotency_key: String,
    /// The import paths, one inner list per file group; recovery matches a job whose create
    /// answer was lost by them when the target ignores Idempotency-Key.
    pub files: Vec<Vec<String>>,
    /// The import options sent (without `auto_commit`, which the strategy decides). Batches
    /// planned with the same options share one map: at 10,000 collections a map each was
    /// 20 MB held through the restore.
    pub options: Arc<std::collections::BTreeMap<String, String>>,
    /// What every end must import of the batch, so that recovery holds a roll-forward to
    /// the same account; absent in records written before row accounting.
    #[serde(default)]
    pub expected_rows: Option<crate::backup::ExpectedRows>,
}

/// The jobs that are committed together: the whole restore (`atomicity = "restore"`) or one
/// collection (`atomicity = "collection"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitGroup {
    pub id: String,
    pub batches: Vec<BatchRecord>,
    pub decision: Option<Decision>,
}

/// Whether an end is written to (the target) or only read (a secondary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Target,
    Secondary,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Target => "target",
            Role::Secondary => "secondary",
        })
    }
}

/// An end as the record keeps it: enough to reach it again during recovery (its token is
/// read again from the host config's environment variable, never stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedEnd {
    pub name: String,
    pub role: Role,
    pub uri: String,
}

/// Everything the journal keeps about one restore.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoreRecord {
    pub id: RestoreId,
    pub job_name: String,
    pub content_hash: String,
    pub attempt: u32,
    pub backup: String,
    /// Target first, then the secondaries.
    pub ends: Vec<RecordedEnd>,
    /// How long a mirror may trail its target job; recovery waits as long for mirrors to
    /// settle after an abort.
    pub mirror_grace_ms: u64,
    pub keep_temp_files: bool,
    pub phase: RestorePhase,
    pub started_at: Timestamp,
    pub updated_at: Timestamp,
    /// The prefix staged files live under, and the ends staged into, for cleanup after a
    /// crash.
    pub staging_prefix: Option<String>,
    pub staged_ends: Vec<String>,
    /// How the restore names what it creates, as `status` lists it: `suffix _r` or
    /// `rename …`; empty when every collection keeps the backup's name, or in records
    /// written before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub renaming: String,
    /// Collections this restore created, with the ids the target gave them: dropped again
    /// if it rolls back, each only while its name still holds that id.
    pub created_collections: Vec<CreatedCollection>,
    /// Collections the DDL is to create that did not exist at preflight, recorded before it
    /// starts: recovery drops them too (a missing one drops as a no-op), so a crash before
    /// the write that lists a created collection leaves nothing behind.
    #[serde(default)]
    pub to_create: Vec<(String, String)>,
    pub groups: Vec<CommitGroup>,
    pub outcome: Option<Outcome>,
    /// The final report, once the restore finished.
    pub report: Option<StoredReport>,
    /// What the ends were doing at the restore's last write (at each phase change and at
    /// most every few seconds while it holds or completes): read by `status` and the status
    /// page of any host that shares the journal, not by recovery.
    #[serde(default)]
    pub progress: Option<ProgressSnapshot>,
    /// Ended by recovery's presumed abort: the process that ran it was lost before its
    /// decision, and nothing about the job was found wrong. A fleet runs such a job again,
    /// up to the host config's `max_attempts`.
    #[serde(default)]
    pub host_lost: bool,
    /// The staged files are still on some end: the recovery that finished the restore
    /// could not delete them. The sweep of `serve`/`watch` and `lockstep recover` retry
    /// until they can; `status` lists them.
    #[serde(default)]
    pub stage_left: bool,
    /// Why this attempt runs: the earlier attempt whose host was lost.
    #[serde(default)]
    pub rerun_because: Option<String>,
    /// What the job's `[verify]` asks once every end completed, recorded with the plan so
    /// that a recovery that rolls the restore forward asks it too; none when it is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<RecordedVerify>,
    /// Who asked for this attempt and through what; none in records written before it was
    /// kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<RequestedBy>,
}

/// Who asked for a restore, as its record keeps it: an API request says with which token,
/// from which peer, when and under which request id, so that a restore that dropped
/// collections can be traced to whoever asked for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum RequestedBy {
    /// `POST /api/v1/restore` of `lockstep serve`.
    Api {
        /// The scope of the token the request carried: `restore`, or `none` on a server
        /// that requires no token.
        scope: TokenScope,
        /// The address the request came from, as the server's socket saw it (behind a proxy,
        /// the proxy's).
        peer: String,
        /// When it arrived (UTC).
        at: Timestamp,
        /// Its `requestId`, or the one the server made for it.
        request_id: String,
    },
    /// A job file in a directory `watch` (or `serve --watch`) watches, by its absolute path
    /// (none in records written before it was kept): retention keeps the record while the
    /// file holds the same job.
    Watch {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<String>,
    },
    /// The command line: `lockstep run FILE` names its file; `lockstep restore` (flags) and
    /// `lockstep demo` name none.
    Cli {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<String>,
    },
}

/// What a bearer token of `lockstep serve` may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    /// The restore token (`--token-env`): every route.
    Restore,
    /// The read token (`--read-token-env`): the routes that only read.
    Read,
    /// No token: the server requires none (loopback without `--token-env`).
    None,
}

impl fmt::Display for TokenScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenScope::Restore => "restore",
            TokenScope::Read => "read",
            TokenScope::None => "none",
        })
    }
}

/// A finished restore's report as its record holds it: the report's JSON text, kept as
/// text rather than as a tree of values, which for a restore of tens of thousands of jobs
/// is several times the size, built just to be written once; shared, so that a copy of the
/// record handed to a journal's writer does not copy it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StoredReport(Arc<serde_json::value::RawValue>);

impl StoredReport {
    /// `report` as a record stores it.
    pub fn of(report: &impl Serialize) -> serde_json::Result<StoredReport> {
        serde_json::value::to_raw_value(report).map(|raw| StoredReport(raw.into()))
    }

    /// The report read back as `T`: the engine's `Report`, or a `serde_json::Value` to look
    /// into.
    pub fn read<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(self.0.get())
    }
}

impl PartialEq for StoredReport {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Eq for StoredReport {}

/// `[verify]`'s question as a record keeps it: how long to wait for a load, and the live
/// rows the backup's data holds for each collection the plan restores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedVerify {
    pub timeout_ms: u64,
    /// `[verify] required`: a recovery ends a restore it could not verify `unverified`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// With `rows = "sample"`, the keys of each collection compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<usize>,
    pub collections: Vec<RecordedLive>,
}

/// One collection's live rows, as the plan counted them from the backup's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedLive {
    /// `db.collection` as restored.
    pub target: String,
    /// Its name in the backup, where a sample of it is read; empty in records written
    /// before samples were.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// `None` where the data could not be read.
    pub live: Option<i64>,
    #[serde(default)]
    pub live_by_partition: std::collections::BTreeMap<String, i64>,
}

/// A collection a restore created on the target, and the id the target gave it: what a
/// rollback compares with the target's answer right before it drops the name, so that a
/// collection another attempt made under the same name is never dropped. Records written
/// before ids were kept hold `[db, name]`, read with no id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "CreatedForm")]
pub struct CreatedCollection {
    pub db: String,
    pub name: String,
    /// `None` when the id could not be read after the create (or the record predates ids).
    pub id: Option<i64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CreatedForm {
    Identified {
        db: String,
        name: String,
        id: Option<i64>,
    },
    Named(String, String),
}

impl From<CreatedForm> for CreatedCollection {
    fn from(form: CreatedForm) -> CreatedCollection {
        match form {
            CreatedForm::Identified { db, name, id } => CreatedCollection { db, name, id },
            CreatedForm::Named(db, name) => CreatedCollection { db, name, id: None },
        }
    }
}

/// A running restore's import jobs and rows, per end, at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressSnapshot {
    /// Target first, then the secondaries.
    pub ends: Vec<EndProgress>,
    /// The rows the submitted data jobs must show on every end: their segments' rows less
    /// the deletes the backup's meta counts.
    pub rows_expected: i64,
    /// Whether `rows_expected` is exact: false when some batch's deletes are not counted,
    /// so fewer rows may be right.
    pub rows_exact: bool,
}

/// One end in a [`ProgressSnapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndProgress {
    pub end: String,
    /// Import jobs by their state on this end (`Uncommitted`: 3); jobs the end has not
    /// shown yet are not counted.
    pub jobs: std::collections::BTreeMap<crate::milvus::JobState, usize>,
    /// The rows this end says it imported, for the jobs it held or completed so far.
    pub rows_imported: i64,
}

impl BatchRecord {
    /// The record of a batch planned, its create not sent.
    pub fn new(planned: PlannedBatch) -> BatchRecord {
        BatchRecord {
            planned: Arc::new(planned),
            job_id: None,
            create_sent: false,
        }
    }
}

impl PlannedBatch {
    /// The collection the batch imports into.
    pub fn namespace(&self) -> crate::backup::Namespace {
        crate::backup::Namespace::new(&self.db, &self.collection)
    }

    /// The create of this batch's import job, with the options its record holds: what an
    /// auto-commit route sends.
    pub fn create_import(&self) -> crate::milvus::CreateImport {
        crate::milvus::CreateImport {
            db_name: self.db.clone(),
            collection_name: self.collection.clone(),
            partition_name: (!self.partition.is_empty()).then(|| self.partition.clone()),
            files: self.files.clone(),
            options: (*self.options).clone(),
        }
    }

    /// The create of this batch's job held Uncommitted for the restore's commit:
    /// `auto_commit=false`, and never a `timeout`, whatever the record holds. Milvus 3.0.0
    /// and 3.0.1 fail a Committing job whose timeout runs out (`tryTimeoutJob` skips only
    /// Failed and Completed), which can leave its vchannels partly visible
    /// (docs/milvus-facts.md §2.6). Without one, a held job waits for the commit as long as
    /// it takes.
    pub fn create_held_import(&self) -> crate::milvus::CreateImport {
        let mut create = self.create_import();
        create.options.remove("timeout");
        create.options.insert("auto_commit".into(), "false".into());
        create
    }
}

impl RestoreRecord {
    /// The record of a new attempt: in preflight, nothing done yet, started now.
    pub fn new(
        id: RestoreId,
        job_name: &str,
        content_hash: &str,
        attempt: u32,
        backup: &str,
        ends: Vec<RecordedEnd>,
    ) -> RestoreRecord {
        let now = Timestamp::now();
        RestoreRecord {
            id,
            job_name: job_name.to_owned(),
            content_hash: content_hash.to_owned(),
            attempt,
            backup: backup.to_owned(),
            ends,
            mirror_grace_ms: 0,
            keep_temp_files: false,
            phase: RestorePhase::Preflight,
            started_at: now,
            updated_at: now,
            staging_prefix: None,
            staged_ends: vec![],
            renaming: String::new(),
            created_collections: vec![],
            to_create: vec![],
            groups: vec![],
            outcome: None,
            report: None,
            progress: None,
            host_lost: false,
            stage_left: false,
            rerun_because: None,
            verify: None,
            requested_by: None,
        }
    }

    /// Still needs work: no outcome, or an outcome that did not converge.
    pub fn is_unfinished(&self) -> bool {
        matches!(self.outcome, None | Some(Outcome::Incomplete))
    }

    /// A sweep has work with it: unfinished, or finished with its staged files left behind.
    pub fn is_open(&self) -> bool {
        self.is_unfinished() || self.stage_left
    }

    /// What a rollback of this record drops, in a run and in a recovery alike. Before any
    /// commit decision: every collection the restore created or may have created (one it
    /// was to create and never recorded has no id: its create's answer, or the write after
    /// it, was lost). Once some group is decided for commit, only those of the groups that
    /// are not: the committed ones are visible. A collection that existed before the
    /// restore is never among them unless the restore dropped and recreated it.
    ///
    /// Each name is looked up in a set: at 10,000 collections, scanning the list for each
    /// was 10⁸ comparisons, and scanning the batches for each 4 × 10⁸.
    pub fn collections_to_drop(&self) -> Vec<CreatedCollection> {
        let mut all = self.created_collections.clone();
        let mut recorded: HashSet<(&str, &str)> = (self.created_collections.iter())
            .map(|c| (c.db.as_str(), c.name.as_str()))
            .collect();
        for (db, name) in &self.to_create {
            if recorded.insert((db.as_str(), name.as_str())) {
                all.push(CreatedCollection {
                    db: db.clone(),
                    name: name.clone(),
                    id: None,
                });
            }
        }
        if self.has_commit_decision() {
            let undecided: HashSet<(&str, &str)> = (self.groups.iter())
                .filter(|g| !matches!(g.decision, Some(Decision::Commit { .. })))
                .flat_map(|g| g.batches.iter())
                .map(|b| (b.planned.db.as_str(), b.planned.collection.as_str()))
                .collect();
            all.retain(|c| undecided.contains(&(c.db.as_str(), c.name.as_str())));
        }
        all
    }

    /// Whether any commit group was decided for commit: from then on, only forward.
    pub fn has_commit_decision(&self) -> bool {
        self.groups
            .iter()
            .any(|g| matches!(g.decision, Some(Decision::Commit { .. })))
    }
}

/// The right to act on one restore until dropped. Backends check it on every save: the
/// embedded journal holds a file lock, etcd a lease.
pub trait Claim: Send + Sync {
    fn restore_id(&self) -> &RestoreId;
}

/// Errors of the journal. Callers branch on `Busy` (someone else works on the restore).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("restore {id} is being worked on by {holder}")]
    Busy { id: RestoreId, holder: String },
    #[error("journal at {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("journal record {path} is corrupt: {source}")]
    Corrupt {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "journal record {key} is split into parts, and they are not all there however often it is read"
    )]
    Torn { key: String },
    #[error("journal backend: {0}")]
    Backend(String),
    #[error(
        "the claim on restore {0} was lost: its lease expired or went unrenewed, or its record \
         changed hands"
    )]
    ClaimLost(RestoreId),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a listing found: every record that reads, and each that does not.
#[derive(Debug, Default)]
pub struct Listing {
    /// Oldest first.
    pub records: Vec<RestoreRecord>,
    /// Records that do not read, each by its key (a file, an etcd key) with why: one bad
    /// record is reported as one, never as a journal that cannot be listed.
    pub unreadable: Vec<Unreadable>,
}

/// A record that does not read.
#[derive(Debug)]
pub struct Unreadable {
    pub key: String,
    pub error: Error,
}

/// One record a scan came to: read, or not.
#[derive(Debug)]
// Each lives for one call of a visitor, which moves the record out: a box would be one more
// allocation per record listed, for nothing held.
#[allow(clippy::large_enum_variant)]
pub enum Listed {
    Record(RestoreRecord),
    Unreadable(Unreadable),
}

/// What a scan hands each record to, one at a time: a caller keeps what it shows, so a
/// listing holds what is shown, never every record of a journal's history.
pub type Visit<'a> = dyn FnMut(Listed) + Send + 'a;

impl Listing {
    /// The records, provided every one read: what a caller that must see every record (a
    /// test's checker, whether a job already ran) takes.
    pub fn whole(self) -> Result<Vec<RestoreRecord>> {
        match self.unreadable.into_iter().next() {
            Some(bad) => Err(bad.error),
            None => Ok(self.records),
        }
    }

    /// The records that read, each that did not logged by its key: for a listing a person
    /// or a sweep reads, which one bad record must not stop.
    pub fn readable(self) -> Vec<RestoreRecord> {
        self.log_unreadable();
        self.records
    }

    /// Logs each record that did not read, by its key, with why.
    pub fn log_unreadable(&self) {
        for bad in &self.unreadable {
            log_unreadable(bad);
        }
    }

    /// Takes in what a scan came to: a record that reads if `keep` wants it, and every one
    /// that does not.
    fn take(&mut self, listed: Listed, keep: impl Fn(&RestoreRecord) -> bool) {
        match listed {
            Listed::Record(record) if keep(&record) => self.records.push(record),
            Listed::Record(_) => {}
            Listed::Unreadable(bad) => self.unreadable.push(bad),
        }
    }

    fn sort(&mut self) {
        self.records.sort_by_key(started);
    }
}

/// Logs a record that did not read, by its key, with why.
pub fn log_unreadable(bad: &Unreadable) {
    tracing::warn!(record = %bad.key, error = %bad.error, "a journal record does not read; it is left as it is");
}

/// The order of a listing: when a restore started, then its attempt.
fn started(record: &RestoreRecord) -> (Timestamp, u32) {
    (record.started_at, record.attempt)
}

/// A durable store of restore records.
pub trait Journal: Send + Sync {
    /// Takes the exclusive right to act on `id` (waiting for nobody: `Busy` if held).
    fn claim(&self, id: &RestoreId) -> BoxFuture<'_, Result<Box<dyn Claim>>>;

    /// Writes the record durably (fsync or quorum) before returning.
    fn save<'a>(
        &'a self,
        claim: &'a dyn Claim,
        record: &'a RestoreRecord,
    ) -> BoxFuture<'a, Result<()>>;

    /// Whether `claim` still holds, asked right before an action on an end: its lease is
    /// alive and the record is as this claim last wrote it (nobody else wrote it since).
    /// [`Error::ClaimLost`] when it does not; any other error when that cannot be read,
    /// which the caller must take as not holding either.
    fn fence<'a>(&'a self, claim: &'a dyn Claim) -> BoxFuture<'a, Result<()>>;

    /// How soon a [`Journal::fence`] answer must arrive to be acted on: one that took longer
    /// may have waited out a pause of this host while another took the restore over, so it
    /// is asked again. `None` where a claim cannot lapse while its process lives (a file
    /// lock, which a stopped process keeps).
    fn fence_fresh(&self) -> Option<std::time::Duration> {
        None
    }

    fn load<'a>(&'a self, id: &'a RestoreId) -> BoxFuture<'a, Result<Option<RestoreRecord>>>;

    /// Hands `visit` every record whose id starts with `id_prefix`, in no set order, and each
    /// that does not read, reading a page at a time: no more than a page of stored values
    /// is held at once, and what is kept is the visitor's to choose. `Err` only when the
    /// journal itself cannot be listed (some records may have been visited by then).
    fn scan<'a>(
        &'a self,
        id_prefix: &'a str,
        visit: &'a mut Visit<'_>,
    ) -> BoxFuture<'a, Result<()>>;

    /// Whether the journal can be written and read now, by a write of its own that no
    /// record depends on: what a readiness probe asks, without reading any record (one that
    /// does not parse is not the journal's unreadiness).
    fn ready(&self) -> BoxFuture<'_, Result<()>>;

    /// Removes the record of a finished restore, as `listed` shows it, unless someone claims
    /// it or it changed since it was listed (retention's delete). The check and the delete
    /// are one step against a claimer: it either finds the record whole, or none.
    fn remove<'a>(&'a self, listed: &'a RestoreRecord) -> BoxFuture<'a, Result<Removal>>;

    /// Every attempt of one job content (same name and hash), oldest first. Whether the job
    /// ran must be read from every attempt: one that does not read is the error.
    fn attempts<'a>(
        &'a self,
        job_name: &'a str,
        content_hash: &'a str,
    ) -> BoxFuture<'a, Result<Vec<RestoreRecord>>> {
        Box::pin(async move {
            let prefix = RestoreId::content_prefix(job_name, content_hash);
            let mut listing = Listing::default();
            self.scan(&prefix, &mut |listed| listing.take(listed, |_| true))
                .await?;
            listing.sort();
            listing.whole()
        })
    }

    /// Every record that `keep` wants, oldest first, and every one that does not read.
    fn list_where<'a>(
        &'a self,
        keep: &'a (dyn Fn(&RestoreRecord) -> bool + Sync),
    ) -> BoxFuture<'a, Result<Listing>> {
        Box::pin(async move {
            let mut listing = Listing::default();
            self.scan("", &mut |listed| listing.take(listed, keep))
                .await?;
            listing.sort();
            Ok(listing)
        })
    }

    /// Every record, oldest first, and those that do not read: for a caller that must see
    /// them all (a test's checker, retention); one that shows some takes [`Journal::newest`],
    /// and a sweep [`Journal::list_open`].
    fn list(&self) -> BoxFuture<'_, Result<Listing>> {
        self.list_where(&|_| true)
    }

    /// The newest `n` records (by start, then attempt), oldest first, and each that does not
    /// read among the newest: what `status --last` and `list_restores` show. Found through
    /// the `started` index ([`index`]): it reads the records it shows, whatever the history.
    fn newest(&self, n: usize) -> BoxFuture<'_, Result<Listing>>;

    /// Hands `visit` every open record ([`RestoreRecord::is_open`]) and each that does not
    /// read among those the `open` index names: what a sweep reads, whatever the history.
    fn scan_open<'a>(&'a self, visit: &'a mut Visit<'_>) -> BoxFuture<'a, Result<()>>;

    /// How many records there are under each outcome label ([`index::outcome_label`]), read
    /// from the `outcome` index's names without reading a record.
    fn count_outcomes(&self) -> BoxFuture<'_, Result<BTreeMap<&'static str, u64>>>;

    /// Every open record, oldest first, and each that does not read.
    fn list_open(&self) -> BoxFuture<'_, Result<Listing>> {
        Box::pin(async move {
            let mut listing = Listing::default();
            self.scan_open(&mut |listed| listing.take(listed, RestoreRecord::is_open))
                .await?;
            listing.sort();
            Ok(listing)
        })
    }
}

/// Keeps the newest `n` records a walk comes to, for a backend's [`Journal::newest`]: the
/// walk goes newest first through the `started` index and stops once this is full.
struct Newest {
    want: usize,
    listing: Listing,
}

impl Newest {
    fn of(want: usize) -> Newest {
        Newest {
            want,
            listing: Listing::default(),
        }
    }

    /// Takes what an entry led to.
    fn take(&mut self, listed: Listed) {
        self.listing.take(listed, |_| true);
    }

    /// Whether the walk can stop: it has the `n` it wants.
    fn full(&self) -> bool {
        self.listing.records.len() >= self.want
    }

    fn done(mut self) -> Listing {
        self.listing.sort();
        self.listing
    }
}

/// What [`Journal::remove`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    Removed,
    /// Someone holds the restore's claim: it is being worked on, and stays.
    Claimed {
        holder: String,
    },
    /// The record is gone, unfinished or other than listed: someone wrote it since.
    Changed,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared plan changes nothing in the journal: a batch reads as records written
    /// before it hold one (its plan's fields beside the job id), and writes back the same.
    #[test]
    fn a_batch_record_keeps_its_journal_form() {
        let written = serde_json::json!({
            "batch_id": "default.c/p/data-0",
            "db": "default",
            "collection": "c",
            "partition": "p",
            "idempotency_key": "k",
            "files": [["stage/binlogs/insert_log/1/2/3/"]],
            "options": {"backup": "true"},
            "job_id": "4470",
            "create_sent": true,
            "expected_rows": {"inserted": 10, "deletes": 2, "exact": 8},
        });
        let batch: BatchRecord = serde_json::from_value(written.clone()).expect("reads");
        assert_eq!(batch.job_id, Some(MilvusJobId("4470".into())));
        assert!(batch.create_sent);
        assert_eq!(batch.planned.idempotency_key, "k");
        assert_eq!(
            batch
                .planned
                .expected_rows
                .map(|e| (e.inserted, e.deletes, e.exact)),
            Some((10, Some(2), Some(8)))
        );
        assert_eq!(serde_json::to_value(&batch).expect("writes"), written);
        // A record from before row accounting has no `expected_rows`.
        let mut older = written;
        older.as_object_mut().unwrap().remove("expected_rows");
        let batch: BatchRecord = serde_json::from_value(older).expect("reads");
        assert_eq!(batch.planned.expected_rows, None);
    }

    #[test]
    fn a_held_job_is_created_without_auto_commit_and_never_with_a_timeout() {
        let record = PlannedBatch {
            batch_id: "default.c/p/data-0".into(),
            db: "default".into(),
            collection: "c".into(),
            partition: "p".into(),
            idempotency_key: String::new(),
            files: vec![vec!["bk/1/".into()]],
            // A record as an older or edited journal might hold it.
            options: Arc::new(std::collections::BTreeMap::from([
                ("backup".to_owned(), "true".to_owned()),
                ("timeout".to_owned(), "300s".to_owned()),
                ("auto_commit".to_owned(), "true".to_owned()),
            ])),
            expected_rows: None,
        };
        let held = record.create_held_import();
        assert_eq!(
            held.options,
            std::collections::BTreeMap::from([
                ("auto_commit".to_owned(), "false".to_owned()),
                ("backup".to_owned(), "true".to_owned()),
            ])
        );
        assert_eq!(held.partition_name.as_deref(), Some("p"));
        assert_eq!(held.files, record.files);
        assert_eq!(record.create_import().options, *record.options);
    }

    /// A restore that created c0, c1, … (one more than it has groups), group i importing
    /// into c{i} and decided as `decisions[i]` says (`Some(true)`: commit).
    fn record(decisions: &[Option<bool>]) -> RestoreRecord {
        let mut record =
            RestoreRecord::new(RestoreId::new("r", "ab", 1), "r", "ab", 1, "b", vec![]);
        record.created_collections = (0..=decisions.len())
            .map(|i| CreatedCollection {
                db: "default".into(),
                name: format!("c{i}"),
                id: Some(i as i64),
            })
            .collect();
        record.groups = (decisions.iter().enumerate())
            .map(|(i, decided)| CommitGroup {
                id: format!("g{i}"),
                batches: vec![BatchRecord {
                    planned: Arc::new(PlannedBatch {
                        batch_id: format!("b{i}"),
                        db: "default".into(),
                        collection: format!("c{i}"),
                        partition: "_default".into(),
                        idempotency_key: format!("k{i}"),
                        files: vec![],
                        options: Default::default(),
                        expected_rows: None,
                    }),
                    job_id: None,
                    create_sent: true,
                }],
                decision: decided.map(|commit| match commit {
                    true => Decision::Commit {
                        at: jiff::Timestamp::now(),
                    },
                    false => Decision::Abort {
                        at: jiff::Timestamp::now(),
                        reason: "stop".into(),
                    },
                }),
            })
            .collect();
        record
    }

    fn names(collections: Vec<CreatedCollection>) -> Vec<String> {
        collections.into_iter().map(|c| c.name).collect()
    }

    #[test]
    fn before_any_decision_everything_created_is_dropped() {
        let r = record(&[None, Some(false)]);
        assert_eq!(names(r.collections_to_drop()), ["c0", "c1", "c2"]);
    }

    #[test]
    fn a_committed_groups_collections_stay() {
        // c0 is committed, c1 aborted; c2 was created but is in no group.
        let r = record(&[Some(true), Some(false)]);
        assert_eq!(names(r.collections_to_drop()), ["c1"]);
    }

    /// A create whose answer was lost left only its name in `to_create`: it is dropped by
    /// name, before a decision and, once one is made, when its group is undecided.
    #[test]
    fn a_collection_the_restore_may_have_created_is_dropped_by_name() {
        let mut r = record(&[None]);
        r.to_create = vec![
            ("default".into(), "c0".into()),
            ("default".into(), "c9".into()),
        ];
        let dropped = r.collections_to_drop();
        assert_eq!(names(dropped.clone()), ["c0", "c1", "c9"]);
        assert_eq!(dropped[2].id, None);
        let mut decided = record(&[Some(true), None]);
        decided.to_create = vec![("default".into(), "c1".into())];
        decided.created_collections.truncate(1);
        assert_eq!(names(decided.collections_to_drop()), ["c1"]);
    }

    /// One word set: a person reads the JSON value in words, so `status`, the log and the
    /// text report say what a script branches on.
    #[test]
    fn an_outcome_reads_as_its_json_value_in_words() {
        for outcome in Outcome::ALL {
            let json = serde_json::to_value(outcome).unwrap();
            assert_eq!(
                outcome.to_string(),
                json.as_str().unwrap().replace('_', " ")
            );
        }
        let phase = serde_json::to_value(RestorePhase::Holding).unwrap();
        assert_eq!(RestorePhase::Holding.to_string(), phase.as_str().unwrap());
    }

    #[test]
    fn restore_ids_are_readable_and_key_safe() {
        let id = RestoreId::new("orders 2026/11", "0123456789abcdef0123", 2);
        assert_eq!(id.as_str(), "orders_2026_11.0123456789ab.2");
        assert!(id.as_str().starts_with(&RestoreId::content_prefix(
            "orders 2026/11",
            "0123456789abcdef0123"
        )));
        assert_eq!(RestoreId::parse(id.as_str()), Ok(id));
    }

    #[test]
    fn ids_that_are_paths_or_odd_bytes_are_refused() {
        let long_name = format!("{}.0123456789ab.1", "n".repeat(65));
        for bad in [
            "",
            "..",
            "../../../secret/x",
            "/etc/passwd",
            "orders.0123456789ab.1/../x",
            "%2e%2e%2fx.ab.1",
            "orders.0123456789ab.1\0",
            "orders\0.ab.1",
            "orders.0123456789abc.1",
            "orders.XYZ.1",
            "orders.ab.",
            "orders.ab.99999999999",
            ".ab.1",
            "a.b.c.d",
            long_name.as_str(),
        ] {
            assert_eq!(RestoreId::parse(bad), Err(InvalidId::RestoreId), "{bad:?}");
        }
        // The error text is answered to API callers: it must not echo what it refused.
        assert!(!InvalidId::RestoreId.to_string().contains("secret"));
    }

    #[test]
    fn a_journal_record_with_a_path_for_an_id_does_not_deserialize() {
        let err = serde_json::from_str::<RestoreId>("\"../../x\"").unwrap_err();
        assert!(err.to_string().starts_with("invalid id"), "{err}");
        let ok: RestoreId = serde_json::from_str("\"orders.0123456789ab.3\"").unwrap();
        assert_eq!(ok.as_str(), "orders.0123456789ab.3");
    }

    #[test]
    fn lookups_are_an_id_an_identity_or_a_job_name_and_nothing_else() {
        let id = RestoreLookup::parse("orders.0123456789ab.2").unwrap();
        assert_eq!(
            id.id().map(RestoreId::as_str),
            Some("orders.0123456789ab.2")
        );
        let identity = RestoreLookup::parse("orders.0123456789ab").unwrap();
        assert_eq!(identity.id(), None);
        assert!(identity.names_identity("orders.0123456789ab."));
        assert!(!identity.names_identity("orders.0123456789ab0."));
        assert!(RestoreLookup::parse("orders-2026.11").is_ok());
        for bad in [
            "../../x",
            "a/b",
            "",
            "..",
            "x\0",
            "%2e%2e%2f",
            &"n".repeat(129),
        ] {
            assert_eq!(RestoreLookup::parse(bad), Err(InvalidId::Lookup), "{bad:?}");
        }
    }

    #[test]
    fn created_collections_read_with_their_ids_and_from_older_records_without() {
        let read: Vec<CreatedCollection> =
            serde_json::from_str(r#"[{"db":"d","name":"a","id":7},["d","b"]]"#).unwrap();
        assert_eq!(
            read,
            [
                CreatedCollection {
                    db: "d".into(),
                    name: "a".into(),
                    id: Some(7)
                },
                CreatedCollection {
                    db: "d".into(),
                    name: "b".into(),
                    id: None
                },
            ]
        );
        let written = serde_json::to_string(&read[0]).unwrap();
        assert_eq!(written, r#"{"db":"d","name":"a","id":7}"#);
    }

    #[test]
    fn worst_outcome_orders_by_need_for_a_person() {
        use Outcome::*;
        assert_eq!(Succeeded.worst(RolledBack), RolledBack);
        assert_eq!(Diverged.worst(RolledBack), Diverged);
        assert_eq!(Refused.worst(Succeeded), Refused);
        assert_eq!(Incomplete.worst(Diverged), Incomplete);
        assert_eq!(PartlyCommitted.worst(RolledBack), PartlyCommitted);
        assert_eq!(Diverged.worst(PartlyCommitted), Diverged);
        assert_eq!(
            [
                Succeeded,
                Diverged,
                RolledBack,
                Refused,
                Incomplete,
                PartlyCommitted,
                Lost
            ]
            .map(|o| o.exit_code()),
            [0, 3, 1, 2, 4, 5, 7]
        );
    }
}
