//! The `milvus-sim` binary: `up` starts a topology, `gen-backup` writes a backup fixture.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use milvus_sim::{Sim, Topology, fixtures};

#[derive(Parser)]
#[command(
    name = "milvus-sim",
    about = "A faithful multi-cluster Milvus emulator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per process; boxing buys nothing"
)]
enum Command {
    /// Start the clusters of a topology file; prints one JSON line per cluster.
    Up {
        /// The topology file (see examples/sim/).
        topology: PathBuf,
        /// Also write the JSON lines to this file, for a test that spawns the binary.
        #[arg(long)]
        ports_file: Option<PathBuf>,
    },
    /// Write a backup in milvus-backup's layout.
    GenBackup(fixtures::GenBackupArgs),
}

/// Exit code of a refused topology file, distinct from a failure to start.
const EXIT_CONFIG: u8 = 2;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up {
            topology,
            ports_file,
        } => {
            let topology = match Topology::from_toml_file(&topology) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            up(topology, ports_file).await
        }
        Command::GenBackup(args) => fixtures::run(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("milvus-sim: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn up(topology: Topology, ports_file: Option<PathBuf>) -> anyhow::Result<()> {
    let sim = Sim::start(topology)
        .await
        .context("starting the clusters")?;
    let lines: Vec<String> = sim
        .clusters()
        .iter()
        .map(|c| {
            let line = serde_json::json!({
                "cluster": c.id(),
                "uri": c.uri(),
                "management_uri": c.management_uri(),
            });
            line.to_string()
        })
        .collect();
    let text = lines.join("\n") + "\n";
    if let Some(path) = ports_file {
        // Written whole then renamed, so a reader never sees half a file.
        let partial = path.with_extension("partial");
        std::fs::write(&partial, &text)
            .with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, &path).with_context(|| format!("writing {}", path.display()))?;
    }
    print!("{text}");
    wait_for_stop().await?;
    sim.shutdown().await;
    Ok(())
}

async fn wait_for_stop() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
    }
    Ok(())
}
