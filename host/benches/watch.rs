//! The watched directory, measured with the real binary against milvus-sim:
//! - from a job file landing in the directory (its rename into place) to the first import
//!   create milvus-sim logs for it, over sequential restores: median and p95;
//! - the resident memory of `lockstep watch` on a directory of 10,000 job files, once it has
//!   read all of them and their restore finished.
//!
//! Run by hand: `cargo bench -p lockstep --bench watch`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use milvus_sim::fixtures::{BackupSpec, SchemaMix, generate};
use milvus_sim::{Sim, Topology};
use object_store::local::LocalFileSystem;

const RESTORES: usize = 20;
const FILES: usize = 10_000;

fn topology(root: &Path) -> String {
    let mut text = String::new();
    for id in ["primary", "standby"] {
        text.push_str(&format!(
            "[[cluster]]\nid = \"{id}\"\nversion = \"3.0.2\"\nimport_in_replicating_cluster = true\nenable_l0_import = true\n\
             pchannels = 2\n[cluster.storage]\nurl = \"{}\"\n[cluster.durations]\npending = \"10ms\"\n\
             preimport = \"10ms\"\nimporting = \"10ms\"\nsorting = \"10ms\"\nindex_building = \"10ms\"\n\
             committing = \"10ms\"\n\n",
            root.join("storage").join(id).display()
        ));
    }
    text.push_str("[replication]\nprimary = \"primary\"\nsecondaries = [\"standby\"]\nstream_lag = \"10ms\"\n");
    text
}

fn job(name: &str) -> String {
    format!(
        "name = \"{name}\"\nbackup = \"bak\"\ntarget = \"primary\"\nsecondaries = [\"standby\"]\n\
         [restore]\nsuffix = \"_{name}\"\n"
    )
}

struct Watcher(Child);

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn watch(host_config: &Path, dir: &Path) -> Watcher {
    Watcher(
        Command::new(env!("CARGO_BIN_EXE_lockstep"))
            .arg("--config")
            .arg(host_config)
            .arg("watch")
            .arg(dir)
            .arg("--max-parallel")
            .arg("4")
            .env("LOCKSTEP_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the lockstep binary starts"),
    )
}

/// `VmRSS` and `VmHWM` of `pid`, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    for id in ["primary", "standby"] {
        std::fs::create_dir_all(root.join("storage").join(id))?;
    }
    std::fs::write(root.join("topology.toml"), topology(root))?;
    let sim = Sim::start(Topology::from_toml_file(root.join("topology.toml"))?).await?;
    let backups = root.join("backups");
    std::fs::create_dir_all(&backups)?;
    let spec = BackupSpec {
        name: "bak".into(),
        collections: 1,
        partitions: 1,
        schema: SchemaMix::Plain,
        ..BackupSpec::default()
    };
    generate(
        &spec,
        Arc::new(LocalFileSystem::new_with_prefix(&backups)?),
        &object_store::path::Path::from("backup"),
    )
    .await?;
    let mut host = format!(
        "[backups]\nstorage = {{ url = \"file://{}\" }}\nroot = \"backup\"\n",
        backups.display()
    );
    for id in ["primary", "standby"] {
        host.push_str(&format!(
            "\n[clusters.{id}]\nuri = \"{}\"\nstorage = {{ url = \"file://{}\" }}\nl0_import = true\n",
            sim.uri(id),
            root.join("storage").join(id).display()
        ));
    }
    let host_config = root.join("lockstep.toml");
    std::fs::write(&host_config, host)?;
    let primary = sim.cluster("primary").control();
    let creates = || async {
        primary
            .state()
            .await
            .map(|s| {
                s.requests_to("/jobs/import/create")
                    .iter()
                    .map(|r| r.at.unix_ms)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };

    // Landing → first import create.
    let jobs = root.join("jobs");
    std::fs::create_dir_all(&jobs)?;
    let watcher = watch(&host_config, &jobs);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut latencies = Vec::new();
    for i in 0..RESTORES {
        let seen = creates().await.len();
        let tmp = jobs.join(format!("r{i}.toml.tmp"));
        std::fs::write(&tmp, job(&format!("r{i}")))?;
        let landed = jiff::Timestamp::now().as_millisecond();
        std::fs::rename(&tmp, jobs.join(format!("r{i}.toml")))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let first = loop {
            let all = creates().await;
            if all.len() > seen {
                break all[seen];
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "no import create for r{i} within 30s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        latencies.push(Duration::from_millis((first - landed).max(0) as u64));
        // Let the restore finish before the next lands, so each is measured alone.
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
    drop(watcher);
    latencies.sort();
    println!(
        "file landing → first import create ({RESTORES} restores): median {:?}, p95 {:?}, max {:?}",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.95),
        latencies[latencies.len() - 1]
    );

    // 10,000 files.
    let many = root.join("many");
    std::fs::create_dir_all(&many)?;
    let text = job("bulk");
    for i in 0..FILES {
        std::fs::write(
            many.join(format!("bulk-{i:05}.toml")),
            format!("# copy {i}\n{text}"),
        )?;
    }
    let started = Instant::now();
    let watcher = watch(&host_config, &many);
    // The host config's state directory, `.lockstep` beside it.
    let latest = root.join(".lockstep/reports/latest/bulk.json");
    while !latest.exists() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the bulk restore did not finish"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (rss, peak) = memory_kib(watcher.0.id());
    println!(
        "lockstep watch on {FILES} job files: all read and their one restore finished in {:?}; RSS {} MiB (peak {} MiB)",
        started.elapsed(),
        rss / 1024,
        peak / 1024
    );
    drop(watcher);
    sim.shutdown().await;
    Ok(())
}
