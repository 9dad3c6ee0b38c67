//! The world end-to-end tests run in: milvus-sim clusters in this process (a target and its
//! secondaries, each on its own storage), a backup generated in milvus-backup's layout, a host
//! config and job files on disk, and the real `lockstep` binary run as a child process.
//!
//! Tests read what happened from milvus-sim's own state (`/sim/v1/state`): jobs with their
//! state histories, visible rows and manifests, and the request log.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::TryStreamExt as _;
use milvus_sim::control::CollectionSnapshot;
use milvus_sim::fixtures::{BackupSpec, GeneratedBackup, SchemaMix, generate};
use milvus_sim::topology::{ClusterSpec, ReplicationSpec, S3Spec, StageDurations, StorageSpec};
use milvus_sim::version::{ImportFace, ServerVersion};
use milvus_sim::{ClusterSnapshot, Sim, Topology};
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use tempfile::TempDir;
use tokio::io::AsyncBufReadExt;

pub mod clouds;
pub mod etcd;
pub mod faults;
pub mod host_style;
pub mod readme;
pub mod relay;
pub mod schema;
pub mod tls;

/// What kind of world to build. `Default` is the happy one: a 3.0.2 target replicating to two
/// secondaries with the import gate on, fast stages, a small plain backup.
#[derive(Debug, Clone)]
pub struct WorldSpec {
    pub secondaries: usize,
    pub target_version: String,
    pub secondary_version: String,
    /// `dataCoord.import.enableInReplicatingCluster` on every cluster.
    pub gate_on: bool,
    /// Whether the target replicates to the secondaries at all.
    pub replicating: bool,
    pub stream_lag: Duration,
    /// Each import stage's duration on the target and on the secondaries.
    pub target_stage: Duration,
    pub secondary_stage: Duration,
    /// How long the first secondary's jobs stay Committing, when not `secondary_stage`.
    pub first_secondary_committing: Option<Duration>,
    pub max_import_job_num: usize,
    /// Whether the host config gives the secondaries their storage (so lockstep stages
    /// into it). Without it a secondary cannot read the files it is asked to import.
    pub secondary_storage_known: bool,
    /// Whether the host config gives every end its management URI (where preflight reads
    /// the replicated import gate).
    pub management_known: bool,
    /// The last this-many secondaries run but are not in the target's replication topology.
    pub unreplicated: usize,
    pub storage: StorageLayout,
    /// What the stores are: folders or S3 buckets.
    pub service: StorageService,
    /// Which store holds the backup.
    pub backup_store: BackupStore,
    /// How the target's Milvus resolves import paths, and whether the host config says so.
    pub target_paths: TargetPaths,
    /// `dataCoord.import.enableL0Import` on the ends, and what the host config says of it.
    pub l0_import: L0Import,
    /// With grants, every end checks privileges (and wants the cluster-level `ImportBinlog`
    /// for binlog imports), and lockstep signs in as the user [`RESTORER`] holding them.
    pub restorer_grants: Option<Vec<milvus_sim::rbac::Grant>>,
    /// `dataCoord.import.taskRetention` on every end; None keeps the version's default.
    pub task_retention: Option<Duration>,
    /// The requests each end keeps for `state()`: a bench that counts every call of a
    /// large restore raises it.
    pub request_log_capacity: usize,
    /// Whether lockstep reaches the target over TLS, on the target's TLS port.
    pub target_tls: TargetTls,
    /// The Milvus 3.0 rules of every end not in `end_rules` (issue 49); by default 3.0's.
    pub rules: EndRules,
    /// The rules of single ends, by end name (`t`, `s1`, …), in place of `rules`.
    pub end_rules: BTreeMap<String, EndRules>,
    pub backup: BackupSpec,
}

/// Milvus 3.0 behaviours milvus-sim switches per cluster (`milvus_sim::topology::ClusterSpec`,
/// where each is documented). `Default` is what 3.0 ships.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndRules {
    /// How far the end's clock (AllocTimestamp, the time tick of its commits) runs from the
    /// host's; negative runs behind (see [`EndRules::clock_before_generated_backups`]).
    pub clock_offset: jiff::SignedDuration,
    /// A commit below the binlogs' newest row timestamp stops the collection's pchannels.
    pub stale_commit_blocks_channel: bool,
    /// Schema DDL is refused (112) while the collection has an unfinished import job.
    pub import_blocks_schema_ddl: bool,
    /// An Idempotency-Key is looked up only after admission (job limit, gate, broadcast).
    pub admission_before_idempotency: bool,
    /// A query naming partitions of a partition-key collection is refused.
    pub partition_key_refuses_partition_names: bool,
    /// A held L0 import keeps its deletes' timestamps, and they remove none of the rows a
    /// held import committed (milvus#51247); off, they apply, as no release does.
    pub two_phase_l0_keeps_timestamps: bool,
    /// The build the end reports when it is not its version's release build.
    pub build: Option<String>,
    /// The end's `dataCoord.import.enableInReplicatingCluster`, where it is not the
    /// world's `gate_on`.
    pub replicated_import_gate: Option<bool>,
}

impl Default for EndRules {
    fn default() -> Self {
        let sim = ClusterSpec::new("default");
        EndRules {
            clock_offset: sim.clock_offset,
            stale_commit_blocks_channel: sim.stale_commit_blocks_channel,
            import_blocks_schema_ddl: sim.import_blocks_schema_ddl,
            admission_before_idempotency: sim.admission_before_idempotency,
            partition_key_refuses_partition_names: sim.partition_key_refuses_partition_names,
            two_phase_l0_keeps_timestamps: sim.two_phase_l0_keeps_timestamps,
            build: sim.build,
            replicated_import_gate: None,
        }
    }
}

impl EndRules {
    /// The 3.0 defaults on a clock that reads a day before the earliest generated backup
    /// (`milvus_sim::fixtures::FIRST_BACKUP_MS`): every generated backup's rows are newer
    /// than the end's time, so the commit fence rejects every commit of them.
    pub fn clock_before_generated_backups() -> EndRules {
        let before = milvus_sim::fixtures::FIRST_BACKUP_MS as i64 - 86_400_000;
        let now = jiff::Timestamp::now().as_millisecond();
        EndRules {
            clock_offset: jiff::SignedDuration::from_millis(before - now),
            ..EndRules::default()
        }
    }

    /// These rules on a clock that reads `by` before the newest row of the backup `backup`
    /// describes (from the host's clock now): a restore of it must wait for the clock, or
    /// be refused, before it commits.
    pub fn clock_behind_newest_row(
        self,
        backup: &BackupSpec,
        by: Duration,
    ) -> anyhow::Result<EndRules> {
        let newest = milvus_sim::fixtures::newest_row_ts(backup)?.context("a backup with rows")?;
        let newest_ms = i64::try_from(newest >> 18)?;
        let now = jiff::Timestamp::now().as_millisecond();
        let by = i64::try_from(by.as_millis())?;
        Ok(EndRules {
            clock_offset: jiff::SignedDuration::from_millis(newest_ms - by - now),
            ..self
        })
    }

    fn apply(&self, cluster: &mut ClusterSpec) {
        if let Some(on) = self.replicated_import_gate {
            cluster.import_in_replicating_cluster = on;
        }
        cluster.clock_offset = self.clock_offset;
        cluster.stale_commit_blocks_channel = self.stale_commit_blocks_channel;
        cluster.import_blocks_schema_ddl = self.import_blocks_schema_ddl;
        cluster.admission_before_idempotency = self.admission_before_idempotency;
        cluster.partition_key_refuses_partition_names = self.partition_key_refuses_partition_names;
        cluster.two_phase_l0_keeps_timestamps = self.two_phase_l0_keeps_timestamps;
        cluster.build.clone_from(&self.build);
    }
}

/// TLS to the target ([`tls`]): its certificate names only [`tls::SERVER_NAME`], so the
/// host config gives lockstep the world's CA and that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetTls {
    Off,
    /// The target presents its certificate (Milvus's `tlsMode` 1).
    Server,
    /// The target also asks for a client certificate the world's CA signed (`tlsMode` 2),
    /// and the host config gives lockstep one.
    Mutual,
}

/// Whether the ends import L0 segments (Milvus 3.0 does not by default), and what the host
/// config tells lockstep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L0Import {
    /// On everywhere, and the host config says `l0_import = true` for every end.
    On,
    /// Milvus's default everywhere (off on 3.0), and the host config says nothing.
    Default,
    /// The host config says `l0_import = true` for every end, but these ends have it off.
    ClaimedButOff(Vec<String>),
    /// On at these ends, and the host config says `l0_import = true` for them; Milvus's
    /// default elsewhere (off on 3.0), and the host config says nothing of those.
    OnAt(Vec<String>),
}

impl WorldSpec {
    /// What every end shares besides its role: its 3.0 rules, L0 import, the task
    /// retention, and the restorer user when the world checks privileges.
    fn shared_settings(&self, cluster: &mut ClusterSpec) {
        (self.end_rules.get(&cluster.id))
            .unwrap_or(&self.rules)
            .apply(cluster);
        cluster.enable_l0_import = self.l0_import.in_sim(&cluster.id);
        cluster.task_retention = self.task_retention;
        cluster.request_log_capacity = self.request_log_capacity;
        if let Some(grants) = &self.restorer_grants {
            cluster.users = vec![milvus_sim::rbac::User {
                name: RESTORER.0.into(),
                password: RESTORER.1.into(),
                grants: grants.clone(),
            }];
            cluster.import_binlog_privilege = true;
        }
    }
}

impl L0Import {
    /// The sim's `enable_l0_import` for `end`: unset keeps Milvus's default.
    fn in_sim(&self, end: &str) -> Option<bool> {
        match self {
            L0Import::On => Some(true),
            L0Import::Default => None,
            L0Import::ClaimedButOff(off) => Some(!off.iter().any(|o| o == end)),
            L0Import::OnAt(on) => on.iter().any(|o| o == end).then_some(true),
        }
    }

    /// Whether the host config says `l0_import = true` for `end`.
    fn claimed(&self, end: &str) -> bool {
        match self {
            L0Import::On | L0Import::ClaimedButOff(_) => true,
            L0Import::Default => false,
            L0Import::OnAt(on) => on.iter().any(|o| o == end),
        }
    }
}

/// The target's `common.storageType`, and what the host config tells lockstep of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetPaths {
    /// Object storage, as every other end: bucket-relative keys.
    Object,
    /// Local storage (absolute file paths), declared with `storage_type = "local"`.
    LocalDeclared,
    /// Local storage the host config does not mention: lockstep sends bucket-style paths.
    LocalUndeclared,
}

/// Where the ends keep their objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageLayout {
    /// Each end has its own storage: lockstep stages into every one.
    Separate,
    /// Every end reads the target's storage, as clusters sharing one bucket do.
    Shared,
}

/// What the world's stores (the ends' storage and the backup's) are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageService {
    /// Folders under the world's directory.
    LocalDirs,
    /// Buckets on an S3 server (moto in tests), one per store, named for this world alone.
    S3 { endpoint: String },
}

/// Which store holds the backup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupStore {
    /// A store no end reads: lockstep stages the files into every end's store.
    Own,
    /// The target's store, as when milvus-backup writes into the cluster's own bucket:
    /// staging into the target copies inside that store.
    Target,
}

impl Default for WorldSpec {
    fn default() -> Self {
        WorldSpec {
            secondaries: 2,
            target_version: "3.0.2".into(),
            secondary_version: "3.0.2".into(),
            gate_on: true,
            replicating: true,
            stream_lag: Duration::from_millis(50),
            target_stage: Duration::from_millis(30),
            secondary_stage: Duration::from_millis(30),
            first_secondary_committing: None,
            max_import_job_num: 1024,
            secondary_storage_known: true,
            management_known: true,
            unreplicated: 0,
            storage: StorageLayout::Separate,
            service: StorageService::LocalDirs,
            backup_store: BackupStore::Own,
            target_paths: TargetPaths::Object,
            l0_import: L0Import::On,
            restorer_grants: None,
            task_retention: None,
            request_log_capacity: milvus_sim::topology::DEFAULT_REQUEST_LOG_CAPACITY,
            target_tls: TargetTls::Off,
            rules: EndRules::default(),
            end_rules: BTreeMap::new(),
            backup: BackupSpec {
                name: "e2e_backup".into(),
                collections: 2,
                partitions: 2,
                segments_per_partition: 2,
                rows_per_segment: 100,
                dim: 8,
                schema: SchemaMix::Plain,
                ..BackupSpec::default()
            },
        }
    }
}

impl WorldSpec {
    /// A target replicating to one secondary, with the backup `bak`: the world the
    /// operators' modes (watch, serve, fleets of hosts) are tested in.
    pub fn pair() -> WorldSpec {
        let mut spec = WorldSpec {
            secondaries: 1,
            ..WorldSpec::default()
        };
        spec.backup.name = "bak".into();
        spec
    }

    /// The default world with a backup of `n` collections.
    pub fn with_collections(n: u32) -> WorldSpec {
        let mut spec = WorldSpec::default();
        spec.backup.collections = n;
        spec
    }

    /// How many import jobs a restore of this world's backup with the job tables `extra`
    /// creates, counted with `lockstep plan` in a world of its own: what a world whose job
    /// budget the restore fills exactly needs before it starts.
    pub async fn restore_jobs(&self, extra: &str) -> anyhow::Result<u32> {
        // The count does not depend on the ends' clocks, and preflight refuses to plan onto
        // one far behind the backup: the probe's keep time.
        let mut spec = self.clone();
        for rules in std::iter::once(&mut spec.rules).chain(spec.end_rules.values_mut()) {
            rules.clock_offset = jiff::SignedDuration::ZERO;
        }
        let probe = World::start(spec).await?;
        let job = probe.job("count", extra)?;
        probe.planned_batches(&job).await
    }
}

/// A running world. Dropping it stops the clusters and removes the files.
pub struct World {
    pub dir: TempDir,
    pub sim: Sim,
    pub backup: GeneratedBackup,
    pub spec: WorldSpec,
    /// Names this world's buckets apart from those of every other world on the same server.
    bucket_tag: String,
    /// The world's CA and certificates, when the target serves TLS.
    pub certs: Option<tls::Certs>,
}

/// The user lockstep signs in as on ends with privilege checks, and its password.
pub const RESTORER: (&str, &str) = ("restorer", "restorer-password");
/// The variable the host config's `token_env` names for it.
const RESTORER_TOKEN_VAR: &str = "LOCKSTEP_E2E_RESTORER_TOKEN";

/// The target is always `t`, the secondaries `s1`, `s2`, …
pub const TARGET: &str = "t";

pub fn secondary(i: usize) -> String {
    format!("s{}", i + 1)
}

/// What one `lockstep` run left.
#[derive(Debug)]
pub struct RunResult {
    pub code: i32,
    /// The JSON report (`--output json`), or `Null` when stdout held none.
    pub report: serde_json::Value,
    pub stdout: String,
    pub stderr: String,
}

impl RunResult {
    /// What a finished process left: its exit code and output, with stdout read as the
    /// JSON report when it holds one.
    fn new(code: i32, stdout: String, stderr: String) -> RunResult {
        let mut report: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
        // `run` prints a batch (`{reports, refused_files}`); tests run one job at a time.
        if let Some(first) = report.get("reports").and_then(|r| r.get(0)).cloned() {
            report = first;
        }
        RunResult {
            code,
            report,
            stdout,
            stderr,
        }
    }

    pub fn outcome(&self) -> &str {
        self.report["outcome"].as_str().unwrap_or("")
    }

    pub fn summary(&self) -> &str {
        self.report["summary"].as_str().unwrap_or("")
    }

    /// Everything the run said, for assertion messages.
    pub fn explain(&self) -> String {
        format!(
            "exit {}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl World {
    pub async fn start(spec: WorldSpec) -> anyhow::Result<World> {
        let dir = tempfile::tempdir()?;
        let bucket_tag = bucket_tag();
        let location = |store: Store<'_>| store_location(dir.path(), &spec, &bucket_tag, store);
        for end in end_names(spec.secondaries) {
            location(Store::End(&end)).create().await?;
        }
        location(Store::Backups).create().await?;
        let mut clusters = Vec::new();
        let stage = |d: Duration| StageDurations::uniform(d);
        let mut target = ClusterSpec::new(TARGET);
        target.version = spec.target_version.clone();
        target.import_in_replicating_cluster = spec.gate_on;
        target.storage = location(Store::End(TARGET)).sim_storage();
        if spec.target_paths != TargetPaths::Object {
            target.storage_type = milvus_sim::topology::StorageType::Local;
        }
        target.durations = stage(spec.target_stage);
        target.max_import_job_num = spec.max_import_job_num;
        spec.shared_settings(&mut target);
        let certs = match spec.target_tls {
            TargetTls::Off => None,
            mode => {
                let certs = tls::Certs::generate(&dir.path().join("tls"))?;
                target.tls = Some(milvus_sim::tls::TlsSpec {
                    cert: certs.server_cert.clone(),
                    key: certs.server_key.clone(),
                    client_ca: (mode == TargetTls::Mutual).then(|| certs.ca.clone()),
                });
                Some(certs)
            }
        };
        clusters.push(target);
        for i in 0..spec.secondaries {
            let mut s = ClusterSpec::new(secondary(i));
            s.version = spec.secondary_version.clone();
            s.import_in_replicating_cluster = spec.gate_on;
            s.storage = location(Store::End(&secondary(i))).sim_storage();
            s.durations = stage(spec.secondary_stage);
            if let (0, Some(committing)) = (i, spec.first_secondary_committing) {
                s.durations.committing = committing;
            }
            s.max_import_job_num = spec.max_import_job_num;
            spec.shared_settings(&mut s);
            clusters.push(s);
        }
        let replication = (spec.replicating && spec.secondaries > 0).then(|| ReplicationSpec {
            primary: TARGET.into(),
            secondaries: (0..spec.secondaries - spec.unreplicated.min(spec.secondaries))
                .map(secondary)
                .collect(),
            stream_lag: spec.stream_lag,
        });
        let sim = Sim::start(Topology {
            clusters,
            replication,
        })
        .await
        .map_err(|e| anyhow::anyhow!("starting milvus-sim: {e}"))?;
        let backup = generate(
            &spec.backup,
            location(Store::Backups).open()?,
            &object_store::path::Path::from("backup"),
        )
        .await
        .context("generating the backup")?;
        let world = World {
            dir,
            sim,
            backup,
            spec,
            bucket_tag,
            certs,
        };
        world.write_host_config()?;
        Ok(world)
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The URI lockstep reaches `end` at: the target's TLS port when it serves TLS.
    pub fn uri(&self, end: &str) -> String {
        match (end, self.sim.cluster(end).tls_uri()) {
            (TARGET, Some(tls)) => tls,
            _ => self.sim.uri(end),
        }
    }

    /// The folder that is `end`'s object storage in a [`StorageService::LocalDirs`] world:
    /// where milvus-sim reads its import files and, when the host config gives the end a
    /// storage, where lockstep stages them.
    pub fn storage_dir(&self, end: &str) -> PathBuf {
        storage_dir(self.dir.path(), self.spec.storage, end)
    }

    pub fn ends(&self) -> Vec<String> {
        end_names(self.spec.secondaries)
    }

    fn location(&self, store: Store<'_>) -> StoreLocation {
        store_location(self.dir.path(), &self.spec, &self.bucket_tag, store)
    }

    /// The keys under `prefix` in `end`'s store, read from the store itself.
    pub async fn objects_under(&self, end: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
        let store = self.location(Store::End(end)).open()?;
        let prefix = object_store::path::Path::from(prefix);
        let listed: Vec<_> = store.list(Some(&prefix)).try_collect().await?;
        Ok(listed.into_iter().map(|o| o.location.to_string()).collect())
    }

    fn write_host_config(&self) -> anyhow::Result<()> {
        let mut text = format!(
            "state_dir = \"state\"\n\n[backups]\nstorage = {}\nroot = \"backup\"\n",
            self.location(Store::Backups).host_storage()
        );
        for end in self.ends() {
            text.push_str(&format!(
                "\n[clusters.{end}]\nuri = \"{}\"\n",
                self.uri(&end)
            ));
            if let (TARGET, Some(certs)) = (end.as_str(), &self.certs) {
                text.push_str(&format!(
                    "tls = {{ ca_cert = \"{}\", server_name = \"{}\"",
                    certs.ca.display(),
                    tls::SERVER_NAME
                ));
                if self.spec.target_tls == TargetTls::Mutual {
                    text.push_str(&format!(
                        ", client_cert = \"{}\", client_key = \"{}\"",
                        certs.client_cert.display(),
                        certs.client_key.display()
                    ));
                }
                text.push_str(" }\n");
            }
            if self.spec.max_import_job_num != 1024 {
                text.push_str(&format!(
                    "max_import_jobs = {}\n",
                    self.spec.max_import_job_num
                ));
            }
            if end == TARGET || self.spec.secondary_storage_known {
                text.push_str(&format!(
                    "storage = {}\n",
                    self.location(Store::End(&end)).host_storage()
                ));
            }
            if end == TARGET && self.spec.target_paths == TargetPaths::LocalDeclared {
                text.push_str("storage_type = \"local\"\n");
            }
            if self.spec.l0_import.claimed(&end) {
                text.push_str("l0_import = true\n");
            }
            if self.spec.restorer_grants.is_some() {
                text.push_str(&format!("token_env = \"{RESTORER_TOKEN_VAR}\"\n"));
            }
            if self.spec.management_known {
                text.push_str(&format!(
                    "management = \"{}\"\n",
                    self.sim.cluster(&end).management_uri()
                ));
            }
        }
        std::fs::write(self.path("lockstep.toml"), text)?;
        Ok(())
    }

    /// The world as milvus-backup's v2 `backup.yaml` describes it: the target's address and
    /// bucket, and the backups' bucket, with moto's static keys written in. Only an S3 world
    /// has one: milvus-backup's local provider is a directory the target reads by absolute
    /// path, which a world of bucket-style ends does not have.
    pub fn milvus_backup_yaml(&self) -> anyhow::Result<String> {
        let (endpoint, _) = self.bucket(None)?;
        let endpoint = url::Url::parse(&endpoint)?;
        self.milvus_backup_yaml_as(
            "minio",
            endpoint.host_str().context("the S3 host")?,
            endpoint.port_or_known_default().context("the S3 port")?,
        )
    }

    /// [`World::milvus_backup_yaml`] with the stores' `provider`, `address` and `port`
    /// written as given.
    pub fn milvus_backup_yaml_as(
        &self,
        provider: &str,
        address: &str,
        port: u16,
    ) -> anyhow::Result<String> {
        let (_, target_bucket) = self.bucket(Some(TARGET))?;
        let (_, backup_bucket) = self.bucket(None)?;
        let target = url::Url::parse(&self.uri(TARGET))?;
        let mut lines = vec![
            "configVersion: v2".to_owned(),
            "milvus:".to_owned(),
            "  grpc:".to_owned(),
            format!(
                "    address: {}",
                target.host_str().context("the target's host")?
            ),
            format!("    port: {}", target.port().context("the target's port")?),
        ];
        if let Some(certs) = &self.certs {
            let mutual = self.spec.target_tls == TargetTls::Mutual;
            lines.push(format!(
                "    tlsMode: {}",
                if mutual { "mutual" } else { "server" }
            ));
            lines.push(format!("    caCertPath: {}", certs.ca.display()));
            lines.push(format!("    serverName: {}", tls::SERVER_NAME));
            if mutual {
                lines.push(format!("    mtlsCertPath: {}", certs.client_cert.display()));
                lines.push(format!("    mtlsKeyPath: {}", certs.client_key.display()));
            }
        }
        lines.extend([
            "  storage:".to_owned(),
            format!("    provider: {provider}"),
            format!("    address: {address}"),
            format!("    port: {port}"),
            "    useSSL: false".to_owned(),
            format!("    bucketName: {target_bucket}"),
            "    rootPath: \"\"".to_owned(),
            "    auth:".to_owned(),
            "      type: static".to_owned(),
            format!("      accessKeyID: {S3_CREDENTIAL}"),
            format!("      secretAccessKey: {S3_CREDENTIAL}"),
            "backup:".to_owned(),
            "  storage:".to_owned(),
            format!("    bucketName: {backup_bucket}"),
            "    rootPath: backup".to_owned(),
        ]);
        Ok(lines.join("\n") + "\n")
    }

    /// The store holding the backup, as the world wrote it.
    pub fn backup_store(&self) -> anyhow::Result<Arc<dyn ObjectStore>> {
        self.location(Store::Backups).open()
    }

    /// The S3 server and bucket of `end`'s store, or of the backups' store for `None`.
    pub fn bucket(&self, end: Option<&str>) -> anyhow::Result<(String, String)> {
        let store = end.map_or(Store::Backups, Store::End);
        match self.location(store) {
            StoreLocation::Bucket { endpoint, bucket } => Ok((endpoint, bucket)),
            StoreLocation::Dir(_) => anyhow::bail!("a folder world has no buckets"),
        }
    }

    /// A job file restoring the world's backup into the target with every secondary, plus
    /// `extra` TOML (tables such as `[restore]` or `[two_phase]`).
    pub fn job(&self, name: &str, extra: &str) -> anyhow::Result<PathBuf> {
        let secondaries: Vec<String> = (0..self.spec.secondaries)
            .map(|i| format!("\"{}\"", secondary(i)))
            .collect();
        let text = format!(
            "backup = \"{}\"\ntarget = \"{TARGET}\"\nsecondaries = [{}]\n{extra}\n",
            self.spec.backup.name,
            secondaries.join(", ")
        );
        self.write_job(name, &text)
    }

    /// A job file restoring the world's backup into the target alone, plus `extra` TOML.
    pub fn job_alone(&self, name: &str, extra: &str) -> anyhow::Result<PathBuf> {
        let text = format!(
            "backup = \"{}\"\ntarget = \"{TARGET}\"\n{extra}",
            self.spec.backup.name
        );
        self.write_job(name, &text)
    }

    /// A delta log of an L0 segment of the backup, if it has one.
    pub fn l0_log(&self) -> Option<&milvus_sim::fixtures::WrittenLog> {
        let l0: std::collections::HashSet<i64> = self
            .backup
            .info
            .collection_backups
            .iter()
            .flat_map(|c| {
                c.l0_segments
                    .iter()
                    .chain(c.partition_backups.iter().flat_map(|p| &p.segment_backups))
            })
            .filter(|s| s.is_l0)
            .map(|s| s.segment_id)
            .collect();
        self.backup
            .logs
            .iter()
            .find(|log| l0.contains(&log.segment_id))
    }

    /// The rows a query of the restored backup counts: the generator's own count of the
    /// rows no delete removes, exact where deletes overlap.
    pub fn rows_after_deletes(&self) -> i64 {
        self.backup.live_total() as i64
    }

    pub fn write_job(&self, name: &str, text: &str) -> anyhow::Result<PathBuf> {
        let path = self.path("jobs").join(format!("{name}.toml"));
        std::fs::create_dir_all(path.parent().expect("jobs/"))?;
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Points this world's compile cache (`state/plugin-cache`) at `shared`, so a check
    /// component is compiled once for every world that shares it rather than once per
    /// world: the 18 MB Python check takes most of a minute to compile in a debug build.
    /// Sharing is safe across processes: the cache writes entries atomically and settles
    /// the race for its signing key. The folder is made owner-only, as lockstep makes its
    /// own: one its group could write (under a umask of 002) would not be used.
    pub fn share_plugin_cache(&self, shared: &Path) -> anyhow::Result<()> {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(shared)?;
        std::fs::create_dir_all(self.path("state"))?;
        std::os::unix::fs::symlink(shared, self.path("state/plugin-cache"))
            .context("linking the shared plugin cache")
    }

    /// The `lockstep` binary with this world's host config, JSON output and `env`.
    pub fn lockstep(&self, args: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
        self.lockstep_with(Output::Json, args, env)
    }

    /// The `lockstep` binary with this world's host config, `output` and `env`.
    pub fn lockstep_with(
        &self,
        output: Output,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> tokio::process::Command {
        let mut cmd = lockstep_command(self.dir.path(), output);
        cmd.arg("--config").arg(self.path("lockstep.toml"));
        cmd.args(args);
        if let StorageService::S3 { .. } = self.spec.service {
            cmd.env(S3_KEY_VAR, S3_CREDENTIAL)
                .env(S3_SECRET_VAR, S3_CREDENTIAL);
        }
        if self.spec.restorer_grants.is_some() {
            cmd.env(RESTORER_TOKEN_VAR, format!("{}:{}", RESTORER.0, RESTORER.1));
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `lockstep ARGS` to its end.
    pub async fn run(&self, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<RunResult> {
        run_to_end(self.lockstep(args, env)).await
    }

    /// Runs `lockstep ARGS` with `output` to its end.
    pub async fn run_with(
        &self,
        output: Output,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<RunResult> {
        let result = run_to_end(self.lockstep_with(output, args, env)).await?;
        // Every JSON output is held to the schema its command promises (docs/schema/).
        if output == Output::Json
            && let Ok(printed) = serde_json::from_str::<serde_json::Value>(&result.stdout)
            && let Some(name) = schema::of_command(args, &printed)
        {
            schema::check(name, &printed)
                .with_context(|| format!("lockstep {}", args.join(" ")))?;
        }
        Ok(result)
    }

    /// Starts `lockstep ARGS` and returns while it runs, collecting its log (stderr) as it
    /// comes, so a test can act at a moment the log marks.
    pub fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Running> {
        Running::start(self.lockstep(args, env))
    }

    /// Makes the last job `lockstep run JOB` will create on the target (counted with
    /// `lockstep plan`) fail with `reason` as it becomes Uncommitted, when the other jobs are
    /// held. Set before the run starts, so it cannot miss a job that raced past the state.
    pub async fn fail_last_job_at_uncommitted(
        &self,
        job: &Path,
        reason: &str,
    ) -> anyhow::Result<()> {
        let batches = self.planned_batches(job).await?;
        ensure!(batches >= 2, "the plan has fewer than 2 batches");
        self.fail_job(
            TARGET,
            milvus_sim::faults::JobSelector::Nth(batches),
            milvus_sim::jobs::JobState::Uncommitted,
            reason,
        )
        .await
    }

    /// The import jobs `lockstep run JOB` will create on the target: its plan's batches.
    pub async fn planned_batches(&self, job: &Path) -> anyhow::Result<u32> {
        let job = job.to_str().context("a UTF-8 job path")?;
        let plan = self.run(&["plan", job], &[]).await?;
        ensure!(plan.code == 0, "plan failed: {}", plan.explain());
        let batches = (plan.report["totals"]["batches"].as_u64())
            .with_context(|| format!("no batch count in the plan: {}", plan.stdout))?;
        Ok(u32::try_from(batches)?)
    }

    /// The answer to the create that makes the `nth` job on the target from now is lost
    /// after the job was made.
    pub async fn lose_create_answer(&self, nth: u32) -> anyhow::Result<()> {
        let lost = milvus_sim::faults::LostAnswer {
            job: milvus_sim::faults::JobSelector::Nth(nth),
        };
        (self.sim.cluster(TARGET).control().lose_answer(&lost).await)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Fails the next job created on `end` (a mirror counts) when it reaches `state`.
    pub async fn fail_next_job(
        &self,
        end: &str,
        state: milvus_sim::jobs::JobState,
        reason: &str,
    ) -> anyhow::Result<()> {
        self.fail_job(end, milvus_sim::faults::JobSelector::Next, state, reason)
            .await
    }

    /// Fails the `job` of `end` with `reason` when it reaches `state`.
    pub async fn fail_job(
        &self,
        end: &str,
        job: milvus_sim::faults::JobSelector,
        state: milvus_sim::jobs::JobState,
        reason: &str,
    ) -> anyhow::Result<()> {
        self.sim
            .cluster(end)
            .control()
            .fail_job(&milvus_sim::faults::JobFailure {
                job,
                state,
                reason: reason.into(),
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Makes the next job created on `end` (a mirror counts) import `rows` fewer rows than its
    /// files hold and complete all the same: its imported and total rows alike.
    pub async fn short_next_import(&self, end: &str, rows: i64) -> anyhow::Result<()> {
        self.sim
            .cluster(end)
            .control()
            .short_import(&milvus_sim::faults::ShortImport {
                job: milvus_sim::faults::JobSelector::Next,
                rows,
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The next import on `end` whose own deletes remove a row keeps one of them, and still
    /// reports the rows it should have.
    pub async fn lose_next_delete(&self, end: &str) -> anyhow::Result<()> {
        self.sim
            .cluster(end)
            .control()
            .lost_delete(&milvus_sim::faults::LostDelete::default())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The next import on `end` shows one of its rows to a query with one value changed, and
    /// reports the rows it should have.
    pub async fn change_next_row(&self, end: &str) -> anyhow::Result<()> {
        self.sim
            .cluster(end)
            .control()
            .changed_row(&milvus_sim::faults::ChangedRow::default())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Delays every gRPC answer of `end` (DDL among them) by `delay`, for `lasting`.
    pub async fn slow_grpc(
        &self,
        end: &str,
        delay: Duration,
        lasting: Duration,
    ) -> anyhow::Result<()> {
        let delay_ms = u64::try_from(delay.as_millis())?;
        self.sim
            .cluster(end)
            .control()
            .api_fault(
                milvus_sim::faults::ApiFace::Grpc,
                milvus_sim::faults::ApiEffect::Delay { delay_ms },
                lasting,
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    pub async fn state(&self, end: &str) -> anyhow::Result<ClusterSnapshot> {
        self.sim
            .cluster(end)
            .control()
            .state()
            .await
            .map_err(|e| anyhow::anyhow!("state of {end}: {e}"))
    }

    /// Every end's state, target first.
    pub async fn snapshots(&self) -> anyhow::Result<Vec<(String, ClusterSnapshot)>> {
        let mut snapshots = Vec::new();
        for end in self.ends() {
            let state = self.state(&end).await?;
            snapshots.push((end, state));
        }
        Ok(snapshots)
    }

    /// Invariant 2 and 4's end state: no job Uncommitted (or on its way there) on any end.
    pub async fn assert_nothing_held(&self) -> anyhow::Result<()> {
        let held = faults::checker::nothing_held(&self.snapshots().await?);
        if let Some(first) = held.first() {
            bail!("{first} ({} held in all)", held.len());
        }
        Ok(())
    }

    /// Every end imported exactly the backup's files, byte for byte (size and crc32c, as
    /// milvus-sim read them), with its L0 deletes as this world's restores bring them
    /// ([`World::l0_logs`]), and shows every row of it: inserted less deleted.
    pub async fn assert_every_end_has_the_backup(&self) -> anyhow::Result<()> {
        for c in &self.backup.info.collection_backups {
            for end in self.ends() {
                if let Some(differs) = self.imported_differs(&end, &c.collection_name).await? {
                    bail!(
                        "{end}: {} imported other files than the backup holds: {differs}",
                        c.collection_name
                    );
                }
            }
        }
        self.assert_every_end_shows(self.rows_after_deletes()).await
    }

    /// How a restore in this world brings the backup's L0 deletes. Only an auto-commit
    /// import (a 2.4 to 2.6 target, whose ends import L0 by default) takes them as L0 jobs:
    /// a two-phase one always folds them (milvus#51247), and 2.3 has no L0 import.
    pub fn l0_logs(&self) -> L0Logs {
        match ServerVersion::parse(&self.spec.target_version).import_face() {
            ImportFace::RestAutoCommit => L0Logs::Imported,
            ImportFace::V1Only | ImportFace::TwoPhase => L0Logs::Folded,
        }
    }

    /// The backup's logs a restore in this world stages and imports, as (files, bytes):
    /// every one, less the L0 logs where their deletes are folded.
    pub fn logs_to_stage(&self) -> (usize, u64) {
        let l0 = l0_segments(&self.backup);
        let folded = self.l0_logs() == L0Logs::Folded;
        let logs = (self.backup.logs.iter()).filter(|l| !(folded && l0.contains(&l.segment_id)));
        logs.fold((0, 0), |(n, bytes), l| (n + 1, bytes + l.size))
    }

    /// The delta logs lockstep wrote for folded L0 deletes that `end` imported, as (files,
    /// bytes).
    pub async fn folded_logs(&self, end: &str) -> anyhow::Result<(usize, u64)> {
        let highest = self.backup.logs.iter().map(|l| l.log_id).max().unwrap_or(0);
        let state = self.state(end).await?;
        let written: BTreeMap<&str, u64> = (state.collections.iter())
            .flat_map(|c| &c.completed_imports)
            .flat_map(|i| &i.manifest)
            .filter(|m| folded_log(&m.path, highest).is_some())
            .map(|m| (m.path.as_str(), m.size))
            .collect();
        Ok((written.len(), written.values().sum()))
    }

    /// How what `end` imported into `collection` of the default database (Completed jobs
    /// only) differs from what a restore of the backup imports ([`imported_differs`]);
    /// `None` when it does not.
    pub async fn imported_differs(
        &self,
        end: &str,
        collection: &str,
    ) -> anyhow::Result<Option<String>> {
        let state = self.state(end).await?;
        let c = state
            .collection("default", collection)
            .with_context(|| format!("{end} has no default.{collection}"))?;
        let source = self
            .backup
            .info
            .collection_backups
            .iter()
            .find(|b| b.collection_name == collection)
            .with_context(|| format!("the backup has no {collection}"))?;
        Ok(imported_differs(
            c,
            &self.backup,
            source.collection_id,
            self.l0_logs(),
        ))
    }

    /// Every end shows `rows` rows in all: inserted less deleted.
    pub async fn assert_every_end_shows(&self, rows: i64) -> anyhow::Result<()> {
        for end in self.ends() {
            let visible: i64 = self.visible(&end).await?.values().sum();
            ensure!(visible == rows, "{end}: {visible} rows visible, not {rows}");
        }
        Ok(())
    }

    /// Every end imported the backup with its L0 deletes folded into the data imports: no
    /// L0 job anywhere, and the live rows (the generator's own count, exact where deletes
    /// overlap) visible on every end.
    pub async fn assert_l0_folded(&self) -> anyhow::Result<()> {
        for (end, state) in self.snapshots().await? {
            ensure!(!state.jobs.is_empty(), "{end} imported nothing");
            let l0_jobs = state
                .jobs
                .iter()
                .filter(|j| j.options.get("l0_import").is_some_and(|v| v == "true"))
                .count();
            ensure!(l0_jobs == 0, "{end} got {l0_jobs} L0 jobs");
            let visible: i64 = self.visible(&end).await?.values().sum();
            let live = self.backup.live_total() as i64;
            ensure!(
                visible == live,
                "{end}: {visible} rows visible, {live} live"
            );
        }
        Ok(())
    }

    /// Visible rows (inserted minus deleted) per collection on `end`.
    pub async fn visible(&self, end: &str) -> anyhow::Result<BTreeMap<String, i64>> {
        let state = self.state(end).await?;
        Ok(state
            .collections
            .iter()
            .filter(|c| c.visible_rows > 0 || !c.completed_imports.is_empty())
            .map(shown)
            .collect())
    }

    /// Every collection on `end` (`db.name`), empty ones too, with its visible rows.
    pub async fn collections(&self, end: &str) -> anyhow::Result<BTreeMap<String, i64>> {
        let state = self.state(end).await?;
        Ok(state.collections.iter().map(shown).collect())
    }

    /// The collections on `end` (`db.name`) whose name ends with `suffix`.
    pub async fn collections_with_suffix(
        &self,
        end: &str,
        suffix: &str,
    ) -> anyhow::Result<Vec<String>> {
        let all = self.collections(end).await?;
        Ok(all.into_keys().filter(|c| c.ends_with(suffix)).collect())
    }

    /// Requests to `route_suffix` that `end` received.
    pub async fn requests(&self, end: &str, route_suffix: &str) -> anyhow::Result<usize> {
        Ok(self.state(end).await?.requests_to(route_suffix).len())
    }

    /// Whether any end received a write: DDL, import create, commit or abort.
    pub async fn writes_received(&self) -> anyhow::Result<Vec<String>> {
        let mut seen = Vec::new();
        for end in self.ends() {
            let state = self.state(&end).await?;
            seen.extend(writes_in(&state).map(|route| format!("{end} {route}")));
        }
        Ok(seen)
    }
}

/// The routes of the requests that change an end: import writes and DDL.
const WRITE_ROUTES: &[&str] = &[
    "import/create",
    "import/commit",
    "import/abort",
    "/CreateCollection",
    "/CreateDatabase",
    "/CreatePartition",
    "/CreateIndex",
    "/DropCollection",
];

/// The routes of the requests in `state`'s log that changed the end.
pub fn writes_in(state: &ClusterSnapshot) -> impl Iterator<Item = &str> {
    (state.requests.iter())
        .map(|r| r.route.as_str())
        .filter(|route| WRITE_ROUTES.iter().any(|w| route.ends_with(w)))
}

/// A collection's `db.name` and the rows a query sees in it: inserted less deleted.
fn shown(c: &CollectionSnapshot) -> (String, i64) {
    (
        format!("{}.{}", c.db_name, c.name),
        c.visible_rows - c.visible_deleted_rows,
    )
}

/// How a restore brings a backup's L0 deletes to the ends, as the logs they imported show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L0Logs {
    /// As L0 jobs (an auto-commit import): the backup's L0 delta logs are imported too.
    Imported,
    /// Folded into the data imports: none of the backup's L0 delta logs is imported; a file
    /// group whose keys they delete imports one more delta log instead, which lockstep wrote
    /// under the restore's staging prefix with a log id above every one of the backup's.
    Folded,
}

/// How what collection `c` imported (its Completed jobs' files) differs from what a restore
/// of the collection with source id `collection_id` in `backup` imports, or `None`: every
/// log the backup holds for it, byte for byte (size and crc32c), its L0 logs only with
/// [`L0Logs::Imported`], and besides them only folded delta logs, at most one a segment.
pub fn imported_differs(
    c: &CollectionSnapshot,
    backup: &GeneratedBackup,
    collection_id: i64,
    l0: L0Logs,
) -> Option<String> {
    let l0_segments = l0_segments(backup);
    let own = format!("/{collection_id}/");
    let want: BTreeSet<(String, u64, u32)> = (backup.logs.iter())
        .filter(|l| l.relative_path.contains(&own))
        .filter(|l| l0 == L0Logs::Imported || !l0_segments.contains(&l.segment_id))
        .map(|l| (binlog_relative(&l.relative_path), l.size, l.crc32c))
        .collect();
    let highest = backup.logs.iter().map(|l| l.log_id).max().unwrap_or(0);
    let mut found = BTreeSet::new();
    let mut extra = BTreeSet::new();
    let mut folded: BTreeMap<String, usize> = BTreeMap::new();
    for file in c.completed_imports.iter().flat_map(|i| i.manifest.iter()) {
        let log = (binlog_relative(&file.path), file.size, file.crc32c);
        if want.contains(&log) {
            found.insert(log);
        } else if let (L0Logs::Folded, Some(segment)) = (l0, folded_log(&file.path, highest)) {
            *folded.entry(segment.to_owned()).or_default() += 1;
        } else {
            extra.insert(log.0);
        }
    }
    let missing: Vec<&String> = want.difference(&found).map(|(path, ..)| path).collect();
    let twice: Vec<&String> = (folded.iter())
        .filter(|(_, n)| **n > 1)
        .map(|(dir, _)| dir)
        .collect();
    if missing.is_empty() && extra.is_empty() && twice.is_empty() {
        return None;
    }
    Some(format!(
        "{} of the backup's logs missing (first {:?}), {} not in the backup (first {:?}), \
         {} segments with more than one folded delta log",
        missing.len(),
        missing.first(),
        extra.len(),
        extra.first(),
        twice.len()
    ))
}

/// The ids of `backup`'s L0 segments: the partitions' and those of every partition.
fn l0_segments(backup: &GeneratedBackup) -> BTreeSet<i64> {
    let collections = backup.info.collection_backups.iter();
    let partitions = (collections.clone().flat_map(|c| &c.partition_backups))
        .flat_map(|p| &p.segment_backups)
        .filter(|s| s.is_l0);
    (partitions.chain(collections.flat_map(|c| &c.l0_segments)))
        .map(|s| s.segment_id)
        .collect()
}

/// The segment directory of `path` when it is a delta log lockstep wrote for folded L0
/// deletes: under a restore's staging prefix, with a log id above `highest`, every log id of
/// the backup.
fn folded_log(path: &str, highest: i64) -> Option<&str> {
    let (_, staged) = path.split_once(&format!("{}/", lockstep::storage::STAGING_ROOT))?;
    let (_, relative) = staged.split_once("/binlogs/delta_log/")?;
    let (segment, log_id) = relative.rsplit_once('/')?;
    (log_id.parse::<i64>().ok()? > highest).then_some(segment)
}

/// The folder that is `end`'s object storage in a world rooted at `root`.
fn storage_dir(root: &Path, layout: StorageLayout, end: &str) -> PathBuf {
    let owner = match layout {
        StorageLayout::Separate => end,
        StorageLayout::Shared => TARGET,
    };
    root.join("storage").join(owner)
}

/// The environment variables lockstep reads its S3 credentials from in an S3 world (the host
/// config names them; the values go only to the lockstep process).
const S3_KEY_VAR: &str = "LOCKSTEP_E2E_S3_KEY";
const S3_SECRET_VAR: &str = "LOCKSTEP_E2E_S3_SECRET";
/// moto accepts any credentials; requests must still be signed with some.
const S3_CREDENTIAL: &str = "testing";
const S3_ENDPOINT_VAR: &str = "LOCKSTEP_TEST_S3_ENDPOINT";

/// The S3 server S3 tests run against (`LOCKSTEP_TEST_S3_ENDPOINT`, which CI sets), or
/// `None` once [`unavailable`] let `test` skip.
pub fn s3_endpoint(test: &str) -> Option<String> {
    match std::env::var(S3_ENDPOINT_VAR) {
        Ok(endpoint) => Some(endpoint.trim_end_matches('/').to_owned()),
        Err(_) => {
            unavailable(
                test,
                &format!("{S3_ENDPOINT_VAR} is not set; set it to run the S3 path against moto"),
            );
            None
        }
    }
}

/// A service `test` needs is not there. On a developer's machine the test says so and
/// skips; under `CI=true` it fails, so a CI run that lost a service cannot pass by skipping.
pub fn unavailable(test: &str, why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {why} (CI=true: a test whose service is missing fails)");
    }
    eprintln!("SKIPPED {test}: {why}");
}

/// The target first, then the secondaries.
fn end_names(secondaries: usize) -> Vec<String> {
    std::iter::once(TARGET.to_string())
        .chain((0..secondaries).map(secondary))
        .collect()
}

/// A store of the world, by what it holds.
#[derive(Debug, Clone, Copy)]
enum Store<'a> {
    Backups,
    End(&'a str),
}

/// Where a store keeps its objects.
#[derive(Debug, Clone)]
enum StoreLocation {
    Dir(PathBuf),
    Bucket { endpoint: String, bucket: String },
}

/// `store`'s location in a world rooted at `root`, following the spec's layout, service and
/// backup store. Stores that resolve to the same location are one store.
fn store_location(
    root: &Path,
    spec: &WorldSpec,
    bucket_tag: &str,
    store: Store<'_>,
) -> StoreLocation {
    let owner = match (store, spec.backup_store) {
        (Store::Backups, BackupStore::Own) => None,
        (Store::Backups, BackupStore::Target) => Some(TARGET),
        (Store::End(end), _) => Some(end),
    };
    match &spec.service {
        StorageService::LocalDirs => StoreLocation::Dir(match owner {
            None => root.join("backups"),
            Some(end) => storage_dir(root, spec.storage, end),
        }),
        StorageService::S3 { endpoint } => {
            let owner = match (owner, spec.storage) {
                (None, _) => "backups",
                (Some(_), StorageLayout::Shared) => TARGET,
                (Some(end), StorageLayout::Separate) => end,
            };
            StoreLocation::Bucket {
                endpoint: endpoint.clone(),
                bucket: format!("{bucket_tag}-{owner}"),
            }
        }
    }
}

/// A bucket-name prefix no other world uses: S3 bucket names are lowercase letters, digits
/// and hyphens, and moto's buckets outlive the world.
fn bucket_tag() -> String {
    static WORLDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    let n = WORLDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("e2e-{}-{nanos}-{n}", std::process::id())
}

impl StoreLocation {
    /// Makes the folder or bucket; one that already exists is kept.
    async fn create(&self) -> anyhow::Result<()> {
        match self {
            StoreLocation::Dir(dir) => {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
            }
            StoreLocation::Bucket { endpoint, bucket } => {
                // object_store cannot create buckets; S3's CreateBucket is a PUT on the bucket.
                let response = reqwest::Client::new()
                    .put(format!("{endpoint}/{bucket}"))
                    .send()
                    .await
                    .with_context(|| format!("creating bucket {bucket} on {endpoint}"))?;
                let status = response.status();
                anyhow::ensure!(
                    status.is_success() || status == reqwest::StatusCode::CONFLICT,
                    "creating bucket {bucket} on {endpoint}: {status}"
                );
                Ok(())
            }
        }
    }

    /// The store, opened the way a Milvus cluster on it would open it.
    fn open(&self) -> anyhow::Result<Arc<dyn ObjectStore>> {
        Ok(match self {
            StoreLocation::Dir(dir) => Arc::new(LocalFileSystem::new_with_prefix(dir)?),
            StoreLocation::Bucket { endpoint, bucket } => Arc::new(
                AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_endpoint(endpoint)
                    .with_allow_http(endpoint.starts_with("http://"))
                    // moto serves buckets by path, not by host name.
                    .with_virtual_hosted_style_request(false)
                    .with_region("us-east-1")
                    .with_access_key_id(S3_CREDENTIAL)
                    .with_secret_access_key(S3_CREDENTIAL)
                    .build()?,
            ),
        })
    }

    /// The storage milvus-sim gives a cluster on this store.
    fn sim_storage(&self) -> StorageSpec {
        match self {
            StoreLocation::Dir(dir) => StorageSpec::Local(dir.clone()),
            StoreLocation::Bucket { endpoint, bucket } => StorageSpec::S3(S3Spec {
                bucket: bucket.clone(),
                endpoint: Some(endpoint.clone()),
                region: None,
                access_key_id: Some(S3_CREDENTIAL.into()),
                secret_access_key: Some(S3_CREDENTIAL.into()),
                allow_http: endpoint.starts_with("http://"),
            }),
        }
    }

    /// The store as an inline table of the host config; credentials by variable name only.
    fn host_storage(&self) -> String {
        match self {
            StoreLocation::Dir(dir) => format!("{{ url = \"file://{}\" }}", dir.display()),
            StoreLocation::Bucket { endpoint, bucket } => format!(
                "{{ url = \"s3://{bucket}\", endpoint = \"{endpoint}\", allow_http = {}, \
                 access_key_id_env = \"{S3_KEY_VAR}\", secret_access_key_env = \"{S3_SECRET_VAR}\" }}",
                endpoint.starts_with("http://")
            ),
        }
    }
}

/// `.../binlogs/insert_log/...` → `insert_log/...`: the part of a path staging keeps.
fn binlog_relative(path: &str) -> String {
    path.split_once("binlogs/")
        .map_or(path.to_string(), |(_, rest)| rest.to_string())
}

/// How `lockstep` prints its result (its `--output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
}

/// The `lockstep` binary with `--output`, run in `dir` with lockstep's debug log on stderr.
/// Without `--config` it needs no cluster: for `lockstep plugin …`.
pub fn lockstep_command(dir: &Path, output: Output) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(lockstep_bin());
    cmd.arg("--output").arg(match output {
        Output::Text => "text",
        Output::Json => "json",
    });
    cmd.current_dir(dir);
    cmd.env("LOCKSTEP_LOG", "warn,lockstep=debug");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs `cmd` to its end (at most 180 s).
pub async fn run_to_end(mut cmd: tokio::process::Command) -> anyhow::Result<RunResult> {
    let out = tokio::time::timeout(RUN_LIMIT, cmd.output())
        .await
        .context("lockstep did not finish within 180 s")??;
    Ok(RunResult::new(
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The longest a test waits for one `lockstep` process: a restore here takes seconds, the
/// first compile of the Python check about ten.
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// A `lockstep` process started by [`World::spawn`] (or any command with piped output):
/// what it prints (stdout) and logs (stderr) is collected line by line as it comes, so a test
/// can act at a moment either marks.
pub struct Running {
    child: tokio::process::Child,
    printed: Collected,
    log: Collected,
}

/// The lines of one of a child's streams so far, read by a task of their own.
struct Collected {
    /// A std Mutex: held only to append or copy, never across an await.
    text: Arc<Mutex<String>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Collected {
    fn start(stream: impl tokio::io::AsyncRead + Unpin + Send + 'static) -> Collected {
        let text = Arc::new(Mutex::new(String::new()));
        let reader = tokio::spawn({
            let text = Arc::clone(&text);
            async move {
                let mut lines = tokio::io::BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut text = text.lock().expect("no panics while the lock is held");
                    text.push_str(&line);
                    text.push('\n');
                }
            }
        });
        Collected { text, reader }
    }

    fn text(&self) -> String {
        self.text
            .lock()
            .expect("no panics while the lock is held")
            .clone()
    }

    /// Everything, once the stream has ended.
    async fn rest(self) -> anyhow::Result<String> {
        self.reader.await?;
        Ok(std::mem::take(
            &mut *self.text.lock().expect("no panics while the lock is held"),
        ))
    }
}

impl Running {
    /// Starts `cmd` (a command with piped stdout and stderr, such as [`World::lockstep`]
    /// makes) and returns while it runs.
    pub fn start(mut cmd: tokio::process::Command) -> anyhow::Result<Running> {
        let mut child = cmd.spawn().context("starting lockstep")?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        Ok(Running {
            child,
            printed: Collected::start(stdout),
            log: Collected::start(stderr),
        })
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        self.log.text()
    }

    /// What the process printed on stdout so far.
    pub fn printed(&self) -> String {
        self.printed.text()
    }

    /// How many log lines so far contain `needle`.
    pub fn logged(&self, needle: &str) -> usize {
        count_lines(&self.log(), needle)
    }

    /// Waits until `times` log lines contain `needle`; fails at once if the process ends
    /// first, and after `limit` otherwise, showing the log.
    pub async fn wait_for_log(
        &mut self,
        needle: &str,
        times: usize,
        limit: Duration,
    ) -> anyhow::Result<()> {
        self.wait_for(Stream::Log, needle, times, limit).await
    }

    /// [`Running::wait_for_log`] for what it prints on stdout.
    pub async fn wait_for_output(
        &mut self,
        needle: &str,
        times: usize,
        limit: Duration,
    ) -> anyhow::Result<()> {
        self.wait_for(Stream::Printed, needle, times, limit).await
    }

    async fn wait_for(
        &mut self,
        stream: Stream,
        needle: &str,
        times: usize,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let (collected, what) = match stream {
            Stream::Log => (&self.log, "logging"),
            Stream::Printed => (&self.printed, "printing"),
        };
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if count_lines(&collected.text(), needle) >= times {
                return Ok(());
            }
            let ended = self.child.try_wait()?;
            if ended.is_some() || tokio::time::Instant::now() > deadline {
                let when = match ended {
                    Some(status) => format!("ended ({status})"),
                    None => format!("went on for {limit:?}"),
                };
                bail!(
                    "lockstep {when} without {what} {needle:?} {times} time(s); it printed:\n{}\n\
                     its log:\n{}",
                    self.printed(),
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process has not ended yet.
    pub fn is_running(&mut self) -> std::io::Result<bool> {
        Ok(self.child.try_wait()?.is_none())
    }

    /// Sends SIGSTOP: the whole process stops, lease renewal included, as under a long GC
    /// pause or a frozen VM. A process that already ended is left as it is.
    pub fn pause(&mut self) -> std::io::Result<()> {
        self.signal(rustix::process::Signal::STOP)
    }

    /// Sends SIGCONT to a paused process.
    pub fn wake(&mut self) -> std::io::Result<()> {
        self.signal(rustix::process::Signal::CONT)
    }

    /// Sends SIGINT, as Ctrl-C on its terminal would.
    pub fn interrupt(&mut self) -> std::io::Result<()> {
        self.signal(rustix::process::Signal::INT)
    }

    /// Whether the process is stopped (by [`Running::pause`], or by itself under
    /// `LOCKSTEP_PAUSE_AT`).
    pub fn is_paused(&self) -> bool {
        let Some(pid) = self.child.id() else {
            return false;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // `pid (comm) state ...`: the state follows the last `)`.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
    }

    fn signal(&mut self, signal: rustix::process::Signal) -> std::io::Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = self
            .child
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32))
            .ok_or_else(|| std::io::Error::other("the process has no pid"))?;
        rustix::process::kill_process(pid, signal).map_err(std::io::Error::from)
    }

    /// Sends SIGKILL: the process dies at once, as in a machine crash, with nothing flushed.
    /// A process that already ended is left as it is.
    pub fn kill(&mut self) -> std::io::Result<()> {
        match self.child.try_wait()? {
            Some(_) => Ok(()),
            None => self.child.start_kill(),
        }
    }

    /// Waits for the process to end (at most 180 s) and returns what it left; a process
    /// that does not end is killed, and the error shows what it logged.
    pub async fn finish(mut self) -> anyhow::Result<RunResult> {
        let Ok(status) = tokio::time::timeout(RUN_LIMIT, self.child.wait()).await else {
            let _ = self.child.start_kill();
            bail!(
                "lockstep did not finish within 180 s; its log:\n{}",
                self.log()
            );
        };
        let status = status?;
        Ok(RunResult::new(
            status.code().unwrap_or(-1),
            self.printed.rest().await?,
            self.log.rest().await?,
        ))
    }
}

/// Which of a [`Running`] process's streams a wait reads.
enum Stream {
    Printed,
    Log,
}

/// How many lines of `text` contain `needle`.
fn count_lines(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// The check component `name` as `plugins/build.sh` builds it (`plugins/dist/NAME.wasm`).
pub fn plugin(name: &str) -> anyhow::Result<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugins/dist")
        .join(format!("{name}.wasm"));
    anyhow::ensure!(
        path.exists(),
        "{} is missing: run plugins/build.sh first (it builds every check into plugins/dist)",
        path.display()
    );
    Ok(path.canonicalize()?)
}

/// The `lockstep` binary of this build (`target/<profile>/lockstep`): next to a binary such as
/// the fault runner, or one folder up from a test executable (`target/<profile>/deps/`).
pub fn lockstep_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable has a path");
    let bin = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("lockstep"))
        .find(|bin| bin.exists());
    bin.unwrap_or_else(|| {
        panic!(
            "no lockstep binary next to {} or one folder up: run `cargo build --workspace --bins` first",
            exe.display()
        )
    })
}

/// A process's CPU time, user and system.
#[derive(Debug, Default, Clone, Copy)]
pub struct Cpu {
    pub user: Duration,
    pub system: Duration,
}

/// The process's CPU time so far from /proc: `utime` and `stime`, the 14th and 15th fields
/// of its `stat`, in the kernel's USER_HZ ticks (100 a second on Linux's usual targets).
pub fn cpu_time(pid: u32) -> Option<Cpu> {
    const TICK: Duration = Duration::from_millis(10);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let mut ticks = || fields.next()?.parse::<u32>().ok();
    Some(Cpu {
        user: TICK * ticks()?,
        system: TICK * ticks()?,
    })
}

/// Waits (30 s at most) until a `serve` at `base` answers `/healthz`.
pub async fn answering(base: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    eventually(Duration::from_secs(30), || async {
        Ok(http.get(format!("{base}/healthz")).send().await.is_ok())
    })
    .await
    .with_context(|| format!("serve at {base} did not answer /healthz"))
}

/// Polls `check` every 20 ms for up to `limit`, until it is ready: `Ok(true)`, or `Some`
/// of the value to return.
pub async fn eventually<R, F, Fut>(limit: Duration, mut check: F) -> anyhow::Result<R::Value>
where
    R: Ready,
    F: FnMut() -> Fut,
    Fut: Future<Output = R>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await.ready()? {
            return Ok(value);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("condition not met within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What an [`eventually`] check answers: whether the condition holds (with the value it
/// found), or an error that ends the wait.
pub trait Ready {
    type Value;
    fn ready(self) -> anyhow::Result<Option<Self::Value>>;
}

impl Ready for anyhow::Result<bool> {
    type Value = ();
    fn ready(self) -> anyhow::Result<Option<()>> {
        self.map(|ok| ok.then_some(()))
    }
}

impl<T> Ready for Option<T> {
    type Value = T;
    fn ready(self) -> anyhow::Result<Option<T>> {
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each end gets its own rules where `end_rules` names it, the world's otherwise.
    #[test]
    fn an_end_takes_its_own_rules_else_the_worlds() {
        let mut spec = WorldSpec::default();
        spec.rules.partition_key_refuses_partition_names = false;
        let behind = EndRules::clock_before_generated_backups();
        spec.end_rules.insert(TARGET.into(), behind.clone());
        let (mut target, mut secondary) = (ClusterSpec::new(TARGET), ClusterSpec::new("s1"));
        spec.shared_settings(&mut target);
        spec.shared_settings(&mut secondary);
        assert_eq!(target.clock_offset, behind.clock_offset);
        assert!(target.partition_key_refuses_partition_names);
        let now = jiff::Timestamp::now().as_millisecond();
        let clock = now + target.clock_offset.as_millis() as i64;
        assert!(clock < milvus_sim::fixtures::FIRST_BACKUP_MS as i64);
        assert_eq!(secondary.clock_offset, jiff::SignedDuration::ZERO);
        assert!(!secondary.partition_key_refuses_partition_names);
        assert!(secondary.stale_commit_blocks_channel && secondary.admission_before_idempotency);
    }
}
