//! The restore job: one validated [`Job`], reached from a TOML job file, from
//! `lockstep restore` flags, or from a REST request body.
//!
//! Two steps, as ripgrep's `LowArgs`/`HiArgs`: each form is first mapped into a
//! [`JobFile`] (the TOML's shape, values still raw and spanned), which [`validate`]
//! turns into a `Job` (clusters resolved against the [`HostConfig`], tokens read from
//! their environment variables, durations and rules parsed, no strings left to parse).
//! Validation collects every problem before refusing, each with its file, line and
//! column (or flag, or request field), field path and what was expected. Nothing is
//! contacted and nothing is written here; whether the clusters agree with the job is the
//! engine's preflight.

mod cli;
mod file;
mod rest;
mod validate;
mod vocabulary;

pub(crate) use vocabulary::Vocabulary;

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest as _, Sha256};
use url::Url;

use crate::backup::{BackupLocation, RestoreOptions, Strategy};
use crate::config::{PathForm, Secret, StorageSpec, TlsSpec};
use crate::plugins::Check;

pub use crate::diagnostic::{Error, Input, Location, Problem};
pub(crate) use crate::json_error::{json_message, json_position};
pub use cli::RestoreArgs;
pub use file::{
    Atomicity, ClusterRef, JobFile, MAX_VERIFY_SAMPLE, RestoreSection, TwoPhaseSection, VerifyRows,
    VerifySection,
};
pub use rest::{ResponseMode, RestRestore};

/// A validated restore job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// For people: reports, logs. Not part of [`Job::id`].
    pub name: String,
    pub backup: BackupSource,
    pub target: Target,
    pub secondaries: Vec<Secondary>,
    /// Where the job names no secondaries and its target's host config says `secondaries =
    /// "discover"`: the clusters preflight chooses them from.
    pub discover: Option<Discover>,
    /// The `[restore]` options, the strategy among them.
    pub restore: RestoreOptions,
    pub two_phase: TwoPhase,
    pub verify: Verify,
    pub checks: Vec<Check>,
    /// The words of the input it came in, which a refusal of it speaks. Not part of its
    /// identity: the same job given as a file or as flags is one job.
    pub(crate) vocabulary: Vocabulary,
    id: JobId,
}

impl Job {
    /// The job's content identity: the SHA-256 (hex) of its canonical validated content,
    /// so the same job written differently (whitespace, comments, key order, defaults
    /// written out or left implicit) has the same id, and the journal runs it once. The name and the
    /// tokens are not part of it: renaming a job file or rotating a token does not make a
    /// finished restore run again.
    pub fn id(&self) -> &JobId {
        &self.id
    }

    /// The strategy the job named, if any; preflight chooses the route either way.
    pub fn strategy(&self) -> Option<Strategy> {
        self.restore.strategy
    }

    /// The ends whose stores the ends import from, by end name: the target's, and each
    /// secondary's that the job names (a secondary known only by URI must already see the
    /// files some other way).
    pub fn destinations(&self) -> Vec<(String, &StorageSpec)> {
        let mut out = vec![(self.target.end.name.to_string(), &self.target.storage)];
        for s in &self.secondaries {
            if let Some(spec) = &s.storage {
                out.push((s.end.name.to_string(), spec));
            }
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        name: String,
        backup: BackupSource,
        target: Target,
        secondaries: Vec<Secondary>,
        discover: Option<Discover>,
        restore: RestoreOptions,
        two_phase: TwoPhase,
        verify: Verify,
        checks: Vec<Check>,
    ) -> Self {
        let id = JobId::of(&JobContent {
            version: JOB_CONTENT_VERSION,
            backup: &backup,
            target: &target,
            secondaries: &secondaries,
            discover: discover.is_some(),
            restore: &restore,
            two_phase: &two_phase,
            verify: (verify != Verify::default()).then_some(&verify),
            checks: &checks,
        });
        Self {
            name,
            backup,
            target,
            secondaries,
            discover,
            restore,
            two_phase,
            verify,
            checks,
            vocabulary: Vocabulary::File,
            id,
        }
    }

    /// The job with the `secondaries` its target was found to replicate to. Its identity
    /// stays its content's, which asked for them to be discovered.
    pub fn with_discovered(&self, secondaries: Vec<Secondary>) -> Job {
        Job {
            secondaries,
            discover: None,
            ..self.clone()
        }
    }
}

/// The clusters a job's secondaries are discovered among: the host config's other clusters,
/// each as a secondary or why it cannot be one.
#[derive(Debug, Clone, PartialEq)]
pub struct Discover {
    pub clusters: Vec<Result<Secondary, Box<Unfit>>>,
}

/// A cluster of the host config that cannot be a secondary of this job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    pub name: String,
    pub uri: Url,
    pub why: String,
}

/// Bumped when `JobContent` changes shape or meaning, so that an old journal's ids are not
/// mistaken for new content (2: an unnamed strategy is no longer "merged").
const JOB_CONTENT_VERSION: u32 = 2;

/// The SHA-256 hex of a job's canonical content.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct JobId(String);

impl JobId {
    fn of(content: &JobContent<'_>) -> Self {
        let canonical = serde_json::to_vec(content)
            .expect("job content has string keys and no non-finite floats");
        Self(hex::encode(Sha256::digest(&canonical)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What [`Job::id`] hashes: everything but the name. Serialized as JSON, whose map keys
/// are all from `BTreeMap`s or struct fields, so the bytes are the same on every run.
#[derive(Serialize)]
struct JobContent<'a> {
    version: u32,
    backup: &'a BackupSource,
    target: &'a Target,
    secondaries: &'a [Secondary],
    /// Left out when false, so that the jobs written before it keep their ids.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    discover: bool,
    restore: &'a RestoreOptions,
    two_phase: &'a TwoPhase,
    /// Left out at its default, so that the jobs written before it keep their ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    verify: Option<&'a Verify>,
    checks: &'a [Check],
}

/// Where the backup is read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackupSource {
    /// The backup's name, its directory under `root`.
    pub name: String,
    /// The store holding the backups (the host config's `[backups]`).
    pub storage: StorageSpec,
    /// The backups' directory within the store.
    pub root: String,
}

impl BackupSource {
    /// The backup's location, with paths relative to the root of `storage.url` (the store
    /// the storage module builds for that URL).
    pub fn location(&self) -> BackupLocation {
        BackupLocation::new(self.storage.url.as_str(), &self.root, &self.name)
    }
}

/// A cluster's name as lockstep reports it: its host config name, or its URI when the
/// job gave one inline.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct EndName(String);

impl EndName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EndName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One Milvus cluster the restore talks to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct End {
    pub name: EndName,
    /// `http(s)://host:port`, serving gRPC and REST.
    #[serde(serialize_with = "crate::config::serialize_url")]
    pub uri: Url,
    /// The token from the cluster's `token_env`; none when it has none.
    #[serde(skip)]
    pub token: Option<Secret>,
    /// How its Milvus reads import paths.
    pub paths: PathForm,
    /// Its `dataCoord.import.enableL0Import` as the host config says; `None`: as its version
    /// has it ([`End::imports_l0`]).
    pub l0_import: Option<bool>,
    /// How to reach it over TLS: transport, not part of what a restore is.
    #[serde(skip)]
    pub tls: TlsSpec,
    /// Its management API, where preflight reads its settings: transport too.
    #[serde(skip)]
    pub management: Option<Url>,
}

impl End {
    /// Whether this end imports L0 segments, running Milvus `version`: as the host config
    /// says, else as Milvus defaults ([`ServerVersion::imports_l0_by_default`]).
    ///
    /// [`ServerVersion::imports_l0_by_default`]: crate::milvus::ServerVersion::imports_l0_by_default
    pub fn imports_l0(&self, version: &crate::milvus::ServerVersion) -> bool {
        self.l0_import
            .unwrap_or_else(|| version.imports_l0_by_default())
    }
}

/// The cluster restored into: DDL, staging, imports and commits go here only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    pub end: End,
    /// The target's Milvus object storage, where binlogs are staged for import. A target
    /// must have one: a bare URI does not say where Milvus reads its files from.
    pub storage: StorageSpec,
    /// `dataCoord.import.maxImportJobNum`: the budget restore-level atomicity must fit.
    pub max_import_jobs: u32,
}

/// A cluster replicating the target; lockstep only reads from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Secondary {
    pub end: End,
    /// The secondary's own object storage, for checks that probe it; none when the job
    /// named the secondary by URI only.
    pub storage: Option<StorageSpec>,
    /// Its `dataCoord.import.maxImportJobNum`: the mirrors of held jobs count against it too.
    pub max_import_jobs: u32,
}

/// `[two_phase]`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TwoPhase {
    pub mirror_grace: Duration,
    pub commit_timeout: Option<Duration>,
    pub completion_timeout: Option<Duration>,
    pub atomicity: Atomicity,
    /// Ends that run different builds are restored into rather than refused. Left out of
    /// the job's identity when off, so that the jobs written before it keep their ids.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_mixed_builds: bool,
}

/// `[verify]`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verify {
    pub rows: VerifyRows,
    /// With [`VerifyRows::Sample`], the keys of each collection compared; `None` otherwise
    /// (and left out of the job's identity, which jobs written before sampling keep).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<usize>,
    /// The longest wait for one collection to load on every end.
    pub timeout: Duration,
    /// A restore not verified everywhere ends `unverified`, not succeeded; left out of the
    /// job's identity when false, which jobs written before it keep.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

/// The keys of each collection `rows = "sample"` compares when `[verify]` sets no `sample`.
pub const DEFAULT_VERIFY_SAMPLE: usize = 100;

/// How long a collection may take to load on every end when `[verify]` sets no `timeout`.
pub const DEFAULT_VERIFY_TIMEOUT: Duration = Duration::from_secs(5 * 60);

impl Default for Verify {
    fn default() -> Self {
        Verify {
            rows: VerifyRows::default(),
            sample: None,
            timeout: DEFAULT_VERIFY_TIMEOUT,
            required: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use toml::Spanned;

    use crate::backup::{CollectionCreation, Filter, Namespace, Renaming};

    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;
    use crate::config::testing::{data_dir, env, host};
    use crate::config::{HostConfig, Secret};
    use crate::plugins::{AllowedHosts, CheckLimits, OnError, Phase};

    fn job(text: &str) -> Result<Job, Error> {
        Job::from_str_with_env(text, Path::new("jobs/test.toml"), &host(), &env)
    }

    /// Each `bad_jobs/NAME.toml` is refused with exactly the text of `NAME.expected`.
    #[test]
    fn bad_job_corpus_is_refused_with_the_expected_messages() {
        let dir = data_dir().join("bad_jobs");
        let mut jobs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "toml"))
            .collect();
        jobs.sort();
        assert!(jobs.len() >= 20, "the corpus is there");
        for path in jobs {
            let text = std::fs::read_to_string(&path).unwrap();
            let expected = std::fs::read_to_string(path.with_extension("expected"))
                .unwrap_or_else(|_| panic!("{} has an .expected file", path.display()));
            let shown = Path::new("bad_jobs").join(path.file_name().unwrap());
            let err = Job::from_str_with_env(&text, &shown, &host(), &env).unwrap_err();
            assert_eq!(format!("{err}\n"), expected, "{}", shown.display());
            assert!(!err.problems().is_empty());
        }
    }

    #[test]
    fn every_field_parses() {
        let path = data_dir().join("jobs/full.toml");
        let job = Job::from_file_with_env(&path, &host(), &env).unwrap();
        assert_eq!(job.name, "orders-2026-11-29");

        assert_eq!(job.backup.name, "orders_bak");
        assert_eq!(job.backup.root, "backup");
        assert_eq!(job.backup.storage.url.as_str(), "s3://milvus-a/files");
        assert_eq!(
            job.backup.location().to_string(),
            "s3://milvus-a/files/backup/orders_bak/"
        );

        let target = &job.target;
        assert_eq!(target.end.name.as_str(), "prod-a");
        assert_eq!(target.end.uri.as_str(), "http://127.0.0.1:19530/");
        assert_eq!(
            target.end.token.as_ref().map(Secret::expose),
            Some("root:Milvus")
        );
        assert_eq!(target.max_import_jobs, 2048);
        let storage = &target.storage;
        assert_eq!(
            storage.endpoint.as_ref().map(Url::as_str),
            Some("http://127.0.0.1:9000/")
        );
        assert_eq!(storage.region.as_deref(), Some("us-east-1"));
        assert_eq!(storage.access_key_id_env.as_deref(), Some("MINIO_A_KEY"));
        assert_eq!(
            storage.secret_access_key_env.as_deref(),
            Some("MINIO_A_SECRET")
        );
        assert_eq!(storage.session_token_env, None);
        assert!(storage.allow_http);

        assert_eq!(job.secondaries.len(), 2);
        assert_eq!(job.secondaries[0].end.name.as_str(), "prod-b");
        assert_eq!(job.secondaries[0].end.token, None);
        assert_eq!(
            job.secondaries[0].storage.as_ref().map(|s| s.url.as_str()),
            Some("s3://milvus-b/files")
        );
        assert_eq!(
            job.secondaries[1].end.name.as_str(),
            "http://10.0.0.9:19530"
        );
        assert_eq!(job.secondaries[1].storage, None);

        let restore = &job.restore;
        assert_eq!(job.strategy(), Some(Strategy::Merged));
        assert_eq!(
            restore.filter,
            Filter::parse("default.orders_r,db2.*").unwrap()
        );
        assert!(restore.filter.allows(&Namespace::new("db2", "anything")));
        assert_eq!(
            restore.backup_filter,
            Filter::parse("default.orders,db2.").unwrap()
        );
        assert_eq!(restore.renaming, Renaming::suffix("_r").unwrap());
        assert_eq!(
            restore.collection_creation,
            CollectionCreation::DropAndCreate
        );
        assert!(!restore.meta_only);
        assert!(restore.rebuild_index && restore.use_auto_index && restore.drop_exist_index);
        assert!(restore.rbac && restore.keep_temp_files && restore.truncate_binlog_by_ts);
        assert_eq!(restore.max_segments_per_job, 128);
        assert_eq!(restore.max_shard_num, Some(4));
        assert_eq!(
            restore.ezk_mapping,
            BTreeMap::from([("old-key".to_string(), "new-key".to_string())])
        );

        assert_eq!(
            job.two_phase,
            TwoPhase {
                mirror_grace: Duration::from_secs(90),
                commit_timeout: Some(Duration::from_secs(5400)),
                completion_timeout: Some(Duration::from_secs(7200)),
                atomicity: Atomicity::Collection,
                allow_mixed_builds: true,
            }
        );

        assert_eq!(job.checks.len(), 2);
        let probe = &job.checks[0];
        assert_eq!(
            probe.plugin,
            data_dir().join("jobs/plugins/storage-probe.wasm")
        );
        assert_eq!(probe.name, "probe");
        assert_eq!(probe.phase, Phase::BeforeImport);
        assert_eq!(
            probe.config,
            BTreeMap::from([("sample".to_string(), "64".to_string())])
        );
        assert_eq!(probe.on_error, OnError::Fail);
        assert_eq!(
            serde_json::to_value(&probe.allow_hosts).unwrap(),
            serde_json::json!(["http://approvals.example:8443", "http://10.0.0.5:80"])
        );
        assert_eq!(probe.max_wait, Duration::from_secs(900));
        assert_eq!(
            probe.limits,
            CheckLimits {
                memory_bytes: 32 << 20,
                cpu: Duration::from_millis(500),
                wall: Duration::from_secs(10),
            }
        );
        let approval = &job.checks[1];
        assert_eq!(approval.plugin, PathBuf::from("/opt/checks/approval.wasm"));
        assert_eq!(approval.name, "approval", "the plugin's file stem");
        assert_eq!(approval.phase, Phase::BeforeCommit);
        assert_eq!(approval.on_error, OnError::Warn);
        assert_eq!(approval.allow_hosts, AllowedHosts::default());
        assert_eq!(approval.max_wait, Duration::ZERO, "asking to wait fails");
        assert_eq!(
            approval.limits,
            CheckLimits {
                memory_bytes: 64 << 20,
                cpu: Duration::from_secs(1),
                wall: Duration::from_secs(30),
            }
        );
        assert_eq!(approval.limits, CheckLimits::default());
    }

    #[test]
    fn a_minimal_job_takes_the_defaults() {
        let job = job("backup = \"orders_bak\"\ntarget = \"prod-a\"\n").unwrap();
        assert_eq!(job.name, "test");
        assert!(job.secondaries.is_empty());
        assert_eq!(job.restore, RestoreOptions::default());
        assert_eq!(
            job.two_phase,
            TwoPhase {
                mirror_grace: Duration::from_secs(300),
                commit_timeout: None,
                completion_timeout: None,
                atomicity: Atomicity::Restore,
                allow_mixed_builds: false,
            }
        );
        assert!(job.checks.is_empty());
    }

    #[test]
    fn the_id_is_the_content_not_its_writing_nor_the_name() {
        let a = job("backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n")
            .unwrap();
        let b = job(
            "# the same job, written otherwise\nname = \"other\"\nsecondaries = [ \"prod-b\" ]\n\n\
             target = 'prod-a'\nbackup = \"orders_bak\"\n[two_phase]\nmirror_grace = \"300s\"\n",
        )
        .unwrap();
        assert_ne!(a.name, b.name);
        assert_eq!(a.id(), b.id());
        assert_eq!(a.id().as_str().len(), 64);

        let other_token = |name: &str| {
            if name == "PROD_A_TOKEN" {
                Some("other".to_owned())
            } else {
                env(name)
            }
        };
        let c = Job::from_str_with_env(
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n",
            Path::new("x.toml"),
            &host(),
            &other_token,
        )
        .unwrap();
        assert_eq!(a.id(), c.id(), "rotating a token does not make a new job");

        // `[verify]` at its defaults, written out or not, is the same job as before it
        // existed; anything else is other content.
        let verified = "[verify]\nrows = \"count\"\ntimeout = \"5m\"\nrequired = false\n";
        let written_out = format!(
            "{}{verified}",
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n"
        );
        assert_eq!(a.id(), job(&written_out).unwrap().id());
        assert_eq!(a.verify, Verify::default());
        for changed in [
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n[verify]\nrows = \"off\"\n",
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n[verify]\ntimeout = \"30s\"\n",
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n[verify]\nrequired = true\n",
        ] {
            assert_ne!(a.id(), job(changed).unwrap().id(), "{changed}");
        }
        for changed in [
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\n",
            "backup = \"other_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n",
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n[restore]\nsuffix = \"_r\"\n",
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n[two_phase]\nmirror_grace = \"301s\"\n",
        ] {
            assert_ne!(a.id(), job(changed).unwrap().id(), "{changed}");
        }
        // A check, and each of its bounds, is part of the content.
        let with_check = |limits: &str| {
            job(&format!(
                "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n\
                 [[check]]\nplugin = \"p.wasm\"\nphase = \"before-commit\"\n[check.limits]\n{limits}"
            ))
            .unwrap()
        };
        let checked = with_check("");
        assert_ne!(a.id(), checked.id());
        assert_eq!(
            checked.id(),
            with_check("memory_mib = 64\n").id(),
            "defaults written out"
        );
        for changed in ["memory_mib = 65\n", "cpu_ms = 999\n", "wall_ms = 29999\n"] {
            assert_ne!(checked.id(), with_check(changed).id(), "{changed}");
        }
        for changed in [
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n[[check]]\nplugin = \"p.wasm\"\nphase = \"before-commit\"\nmax_wait_ms = 1\n",
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n[[check]]\nplugin = \"p.wasm\"\nphase = \"before-commit\"\nallow_hosts = [\"http://h\"]\n",
        ] {
            assert_ne!(checked.id(), job(changed).unwrap().id(), "{changed}");
        }
    }

    /// A job file's plugin path is the job file's: relative to its directory, wherever
    /// lockstep was started, so a job kept in git names its plugins the same on every host.
    #[test]
    fn plugin_paths_are_relative_to_the_job_file() {
        let dir = Path::new("/srv/jobs/nightly");
        let job = Job::from_str_with_env(
            "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"prod-b\"]\n\
             [[check]]\nplugin = \"probe.wasm\"\nphase = \"before-commit\"\n\
             [[check]]\nplugin = \"../shared/gate.wasm\"\nphase = \"before-import\"\n",
            &dir.join("orders.toml"),
            &host(),
            &env,
        )
        .unwrap();
        let plugins: Vec<&Path> = job.checks.iter().map(|c| c.plugin.as_path()).collect();
        assert_eq!(
            plugins,
            [dir.join("probe.wasm"), dir.join("../shared/gate.wasm")]
        );
    }

    #[test]
    fn inline_target_and_default_target() {
        let inline = job(
            "backup = \"orders_bak\"\n[target]\nuri = \"http://10.1.1.1:19530\"\nstorage = \"minio-a\"\nmax_import_jobs = 10\n",
        )
        .unwrap();
        assert_eq!(inline.target.end.name.as_str(), "http://10.1.1.1:19530");
        assert_eq!(inline.target.end.token, None);
        assert_eq!(inline.target.max_import_jobs, 10);
        assert_eq!(inline.target.storage.url.as_str(), "s3://milvus-a/files");

        let text = std::fs::read_to_string(data_dir().join("jobs/lockstep.toml")).unwrap();
        let with_default = HostConfig::parse_str(
            &format!("default_target = \"prod-b\"\n{text}"),
            Path::new("jobs/lockstep.toml"),
        )
        .unwrap();
        let job = Job::from_str_with_env(
            "backup = \"orders_bak\"\n",
            Path::new("j.toml"),
            &with_default,
            &env,
        )
        .unwrap();
        assert_eq!(job.target.end.name.as_str(), "prod-b");
        assert_eq!(
            job.target.storage.endpoint.as_ref().map(Url::as_str),
            Some("https://minio-b.example:9000/")
        );
    }

    /// A URI that a cluster of the host config has is that cluster: its name in reports, its
    /// token and its storage. One that no cluster has gets nothing of the host's.
    #[test]
    fn a_uri_names_the_cluster_that_has_it() {
        let job = job(
            "backup = \"orders_bak\"\ntarget = \"http://127.0.0.1:19530/\"\n\
             secondaries = [\"http://127.0.0.2:19530\", \"http://10.9.9.9:19530\"]\n",
        )
        .unwrap();
        assert_eq!(job.target.end.name.as_str(), "prod-a");
        assert_eq!(
            job.target.end.token.as_ref().map(Secret::expose),
            Some("root:Milvus")
        );
        assert_eq!(job.target.storage.url.as_str(), "s3://milvus-a/files");
        assert_eq!(job.target.max_import_jobs, 2048);
        assert_eq!(job.secondaries[0].end.name.as_str(), "prod-b");
        assert!(job.secondaries[0].storage.is_some());
        let stranger = &job.secondaries[1];
        assert_eq!(stranger.end.name.as_str(), "http://10.9.9.9:19530");
        assert_eq!(stranger.end.token, None);
        assert_eq!(stranger.storage, None);
    }

    /// A store a job describes is reached without signing: no variable it could name, and not
    /// the instance's own credentials either, which a client would otherwise fall back to.
    #[test]
    fn a_store_a_job_describes_is_anonymous() {
        let inline = job(
            "backup = \"orders_bak\"\n[target]\nuri = \"http://10.1.1.1:19530\"\n\
             storage = { url = \"s3://public/files\", endpoint = \"https://s3.example:9000\" }\n",
        )
        .unwrap();
        assert!(inline.target.storage.anonymous);
        assert_eq!(inline.target.storage.credential_envs().count(), 0);
        let named = job(
            "backup = \"orders_bak\"\n[target]\nuri = \"http://10.1.1.1:19530\"\nstorage = \"minio-a\"\n",
        )
        .unwrap();
        assert!(
            !named.target.storage.anonymous,
            "the host's own store keeps its keys"
        );
        assert!(!host().storages["minio-a"].anonymous);
    }

    /// With `named_ends_only`, a job names the host config's clusters or nothing.
    #[test]
    fn named_ends_only_refuses_what_the_host_config_does_not_name() {
        let text = std::fs::read_to_string(data_dir().join("jobs/lockstep.toml")).unwrap();
        let strict = HostConfig::parse_str(
            &format!("named_ends_only = true\n{text}"),
            Path::new("jobs/lockstep.toml"),
        )
        .unwrap();
        let run = |text: &str| {
            Job::from_str_with_env(text, Path::new("j.toml"), &strict, &env)
                .map(|j| j.target.end.name)
        };
        assert_eq!(
            run("backup = \"orders_bak\"\ntarget = \"http://127.0.0.1:19530\"\n")
                .unwrap()
                .as_str(),
            "prod-a"
        );
        for (text, what) in [
            (
                "backup = \"orders_bak\"\ntarget = \"prod-a\"\nsecondaries = [\"http://10.9.9.9:19530\"]\n",
                "`http://10.9.9.9:19530` is the URI of no cluster",
            ),
            (
                "backup = \"orders_bak\"\n[target]\nuri = \"http://10.1.1.1:19530\"\nstorage = \"minio-a\"\n",
                "a job may not describe a cluster",
            ),
        ] {
            let err = run(text).unwrap_err();
            let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
            assert_eq!(shown.len(), 1, "{shown:?}");
            assert!(
                shown[0].contains(what) && shown[0].contains("named_ends_only = true"),
                "{shown:?}"
            );
        }
    }

    #[test]
    fn missing_credentials_of_a_used_storage_are_named() {
        let no_keys = |name: &str| {
            if name.starts_with("MINIO") {
                None
            } else {
                env(name)
            }
        };
        let err = Job::from_str_with_env(
            "backup = \"b\"\ntarget = \"prod-a\"\n",
            Path::new("j.toml"),
            &host(),
            &no_keys,
        )
        .unwrap_err();
        let messages: Vec<&str> = err.problems().iter().map(|p| p.message.as_str()).collect();
        assert_eq!(
            messages,
            vec![
                "environment variable MINIO_A_KEY (credentials of the host's [backups] storage) is not set",
                "environment variable MINIO_A_SECRET (credentials of the host's [backups] storage) is not set",
                "environment variable MINIO_A_KEY (credentials of cluster prod-a's storage) is not set",
                "environment variable MINIO_A_SECRET (credentials of cluster prod-a's storage) is not set",
            ]
        );
    }

    #[test]
    fn an_unreadable_job_file_is_a_read_error() {
        let err =
            Job::from_file_with_env(Path::new("/nonexistent/job.toml"), &host(), &env).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Read {
                    input: Input::JobFile(_),
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with("cannot read job file /nonexistent/job.toml: ")
        );
    }

    #[test]
    fn job_file_parse_reports_shape_problems_alone() {
        let err = JobFile::parse_str("backup = 1\nextra = 2\n", Path::new("j.toml")).unwrap_err();
        assert_eq!(err.problems().len(), 2);
        let file = JobFile::parse_str("backup = \"b\"\n", Path::new("j.toml")).unwrap();
        assert_eq!(file.backup.map(Spanned::into_inner), Some("b".to_owned()));
    }
}
