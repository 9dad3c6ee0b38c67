//! `lockstep demo`: the whole product on one machine. milvus-sim runs in process with a
//! primary and two secondaries replicating over CDC, each with its own storage; a backup is
//! generated in milvus-backup's layout; the host config and a job file are written as an
//! operator would write them; and the two-phase restore runs with progress and a report.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use object_store::local::LocalFileSystem;

use lockstep::config::HostConfig;
use lockstep::job::Job;
use milvus_sim::fixtures::{BackupSpec, generate};
use milvus_sim::{Sim, Topology};

use super::output::{self, OutputFormat};
use super::setup;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Keep the demo's files (topology, backup, host config, job, journal, reports) here;
    /// default: a temporary directory removed afterwards.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Collections in the generated backup.
    #[arg(long, default_value_t = 3)]
    collections: u32,
    /// Partitions per collection.
    #[arg(long, default_value_t = 2)]
    partitions: u32,
    /// After the restore, keep milvus-sim up until Ctrl-C, so that other jobs (those in
    /// `jobs/`, say) can run against DIR/lockstep.toml.
    #[arg(long, requires = "dir")]
    keep_running: bool,
}

// Milvus 3.0's defaults: no cluster imports L0 segments (`dataCoord.import.enableL0Import`
// is off), so the demo backup's L0 deletes are folded into its data imports.
const TOPOLOGY: &str = r#"# Written by `lockstep demo`: a primary replicating to two secondaries.
[[cluster]]
id = "primary"
version = "3.0.2"
import_in_replicating_cluster = true
pchannels = 2
[cluster.storage]
url = "storage/primary"
[cluster.durations]
pending = "100ms"
preimport = "200ms"
importing = "400ms"
sorting = "100ms"
index_building = "200ms"
committing = "100ms"

[[cluster]]
id = "standby-1"
version = "3.0.2"
import_in_replicating_cluster = true
pchannels = 2
[cluster.storage]
url = "storage/standby-1"
[cluster.durations]
pending = "100ms"
preimport = "200ms"
importing = "400ms"
sorting = "100ms"
index_building = "200ms"
committing = "100ms"

[[cluster]]
id = "standby-2"
version = "3.0.2"
import_in_replicating_cluster = true
pchannels = 2
[cluster.storage]
url = "storage/standby-2"
[cluster.durations]
pending = "100ms"
preimport = "300ms"
importing = "600ms"
sorting = "100ms"
index_building = "300ms"
committing = "100ms"

[replication]
primary = "primary"
secondaries = ["standby-1", "standby-2"]
stream_lag = "250ms"
"#;

pub async fn run(args: DemoArgs, format: OutputFormat) -> anyhow::Result<i32> {
    let temp;
    let dir: PathBuf = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.canonicalize()?
        }
        None => {
            temp = tempfile::tempdir().context("creating a temporary directory")?;
            temp.path().to_path_buf()
        }
    };
    let topology_file = dir.join("topology.toml");
    std::fs::write(&topology_file, TOPOLOGY)?;
    let topology = Topology::from_toml_file(&topology_file).map_err(|e| anyhow::anyhow!("{e}"))?;
    let sim = Sim::start(topology)
        .await
        .map_err(|e| anyhow::anyhow!("starting milvus-sim: {e}"))?;
    eprintln!(
        "milvus-sim: primary {} → standby-1 {}, standby-2 {}",
        sim.uri("primary"),
        sim.uri("standby-1"),
        sim.uri("standby-2")
    );

    let backups = dir.join("backups");
    std::fs::create_dir_all(&backups)?;
    let spec = BackupSpec {
        name: "demo_backup".into(),
        collections: args.collections,
        partitions: args.partitions,
        schema: milvus_sim::fixtures::SchemaMix::Plain,
        ..BackupSpec::default()
    };
    let store = Arc::new(LocalFileSystem::new_with_prefix(&backups)?);
    let generated = generate(&spec, store, &object_store::path::Path::from("backup"))
        .await
        .context("generating the demo backup")?;
    eprintln!(
        "backup demo_backup: {} binlog objects under {}",
        generated.logs.len(),
        backups.display()
    );

    let host_file = write_host_config(&dir, &sim, &backups)?;
    let jobs_dir = dir.join("jobs");
    let job_file = jobs_dir.join("demo-restore.toml");
    std::fs::create_dir_all(&jobs_dir)?;
    std::fs::write(
        &job_file,
        "# Written by `lockstep demo`.\nbackup = \"demo_backup\"\ntarget = \"primary\"\n\
         secondaries = [\"standby-1\", \"standby-2\"]\n\n[restore]\nsuffix = \"_restored\"\n\
         rebuild_index = true\n\n\
         [two_phase]\nmirror_grace = \"30s\"\n",
    )?;
    let host = HostConfig::load(&host_file).map_err(anyhow::Error::new)?;
    let job = Job::from_file(&job_file, &host).map_err(anyhow::Error::new)?;
    let journal = setup::open_journal(None, &host).await?;
    let engine = setup::engine_with(journal, &host.state_dir, output::progress_for(format));
    let report = engine.run(&job, setup::requested_by_file(&job_file)).await;
    output::report(format, &report);

    if format == OutputFormat::Text && args.dir.is_some() {
        println!("files kept in {}", dir.display());
    }
    if args.keep_running {
        // Absolute paths, so that the hint works from whatever directory it is run in.
        eprintln!(
            "milvus-sim stays up until Ctrl-C; in another terminal: lockstep --config {} \
             watch {} (a job file dropped there runs, e.g. the repository's \
             jobs/demo-from-jobs.toml)",
            host_file.display(),
            jobs_dir.display()
        );
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
    }
    sim.shutdown().await;
    Ok(report.exit_code())
}

fn write_host_config(dir: &Path, sim: &Sim, backups: &Path) -> anyhow::Result<PathBuf> {
    let mut text =
        String::from("# Written by `lockstep demo`.\nstate_dir = \"state\"\n\n[backups]\n");
    text.push_str(&format!(
        "storage = {{ url = \"{}\" }}\nroot = \"backup\"\n",
        file_url(backups)
    ));
    // Each cluster's management API too, which says whether replicated import is on.
    for id in ["primary", "standby-1", "standby-2"] {
        text.push_str(&format!(
            "\n[clusters.{id}]\nuri = \"{}\"\nmanagement = \"{}\"\nstorage = {{ url = \"{}\" }}\n",
            sim.uri(id),
            sim.cluster(id).management_uri(),
            file_url(&dir.join("storage").join(id))
        ));
    }
    let path = dir.join("lockstep.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

fn file_url(p: &Path) -> String {
    format!("file://{}", p.display())
}
