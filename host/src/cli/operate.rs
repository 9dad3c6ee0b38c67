//! `lockstep watch DIR` and `lockstep serve`: the long-running modes. Both run restores
//! through one `serve::Runner` over the journal `--journal` names (the embedded one in the
//! state directory by default, or etcd for a fleet), stop on Ctrl-C or SIGTERM (restores that
//! have not decided abort; decided ones finish), and print only where they listen.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use axum::serve::ListenerExt as _;

use lockstep::config::HostConfig;
use lockstep::engine::{Interrupt, Logged, Progress};
use lockstep::journal::Journal;
use lockstep::serve::ApiState;
use lockstep::serve::api::router;
use lockstep::serve::watch::WatchStats;
use lockstep::serve::{LiveProgress, Runner, WatchOptions, watch};

use super::setup::{self, Flags};

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The job directory: every `*.toml` in it is a restore job.
    #[arg(default_value = "jobs")]
    pub dir: PathBuf,
    /// Restores running at once.
    #[arg(long, default_value_t = 2)]
    pub max_parallel: usize,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Where to listen. Anything but loopback requires --token-env.
    #[arg(long, default_value = "127.0.0.1:8080", env = "LOCKSTEP_LISTEN")]
    pub listen: SocketAddr,
    /// Name of the environment variable holding the bearer token clients must send.
    #[arg(long, env = "LOCKSTEP_TOKEN_ENV")]
    pub token_env: Option<String>,
    /// Also watch this job directory (`--watch` alone: `jobs`).
    #[arg(long, num_args = 0..=1, default_missing_value = "jobs")]
    pub watch: Option<PathBuf>,
    /// Restores running at once (API and directory together).
    #[arg(long, default_value_t = 2)]
    pub max_parallel: usize,
}

/// What both modes need: the host config, the runner, the process-wide interrupt.
struct Daemon {
    host: HostConfig,
    runner: Arc<Runner>,
    shutdown: Interrupt,
}

async fn daemon(
    flags: Flags<'_>,
    watched: Option<&Path>,
    max_parallel: usize,
) -> anyhow::Result<Daemon> {
    if let Some(dir) = watched {
        anyhow::ensure!(dir.is_dir(), "{} is not a directory", dir.display());
    }
    // The state directory is every command's (`--state-dir`, else the host config's), and
    // never one the job-file authors write in: checked before anything is made.
    let host = setup::load_host_config(flags, flags.state_dir)?;
    if let Some(dir) = watched {
        lockstep::serve::watch::state_dir_outside(dir, &host.state_dir)?;
    }
    let journal: Arc<dyn Journal> = setup::open_journal(flags.journal, &host).await?;
    let progress: Arc<dyn Progress> = Arc::new(Logged::default());
    let engine = setup::engine_with(Arc::clone(&journal), &host.state_dir, progress);
    let (raise, shutdown) = Interrupt::new();
    // Ctrl-C (the engine's interrupt) or SIGTERM (systemd, container runtimes) stop it.
    let ctrl_c = engine.interrupt.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM can be handled");
        tokio::select! {
            _ = ctrl_c.race(std::future::pending::<()>()) => {}
            _ = term.recv() => tracing::warn!("SIGTERM: stopping; restores that have not decided abort"),
        }
        let _ = raise.send(true);
    });
    let live = Arc::new(LiveProgress::new(Arc::clone(&engine.progress)));
    let runner = Runner::new(
        journal,
        host.clone(),
        host.state_dir.clone(),
        live,
        shutdown.clone(),
        max_parallel,
    );
    tokio::spawn(Arc::clone(&runner).sweep());
    Ok(Daemon {
        host,
        runner,
        shutdown,
    })
}

pub async fn run_watch(flags: Flags<'_>, args: &WatchArgs) -> anyhow::Result<i32> {
    let d = daemon(flags, Some(&args.dir), args.max_parallel).await?;
    watch(
        WatchOptions {
            dir: args.dir.clone(),
        },
        d.host,
        Arc::clone(&d.runner),
        Arc::new(WatchStats::default()),
        d.shutdown,
    )
    .await?;
    drain(&d.runner).await;
    Ok(0)
}

pub async fn run_serve(flags: Flags<'_>, args: &ServeArgs) -> anyhow::Result<i32> {
    let token = match &args.token_env {
        Some(var) => Some(
            std::env::var(var)
                .ok()
                .filter(|t| !t.is_empty())
                .with_context(|| format!("--token-env {var}: the variable is not set"))?,
        ),
        None => None,
    };
    anyhow::ensure!(
        token.is_some() || args.listen.ip().is_loopback(),
        "listening on {} (not loopback) requires a bearer token: set --token-env NAME with the token in $NAME",
        args.listen
    );
    let d = daemon(flags, args.watch.as_deref(), args.max_parallel).await?;
    let stats = args.watch.as_ref().map(|_| Arc::new(WatchStats::default()));
    let state = Arc::new(ApiState {
        runner: Arc::clone(&d.runner),
        token,
        watch: stats.clone(),
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    // The CLI's own output: where it listens (port 0 picks one).
    println!("listening on http://{addr}");
    let watcher = match (&args.watch, stats) {
        (Some(dir), Some(stats)) => Some(tokio::spawn(watch(
            WatchOptions { dir: dir.clone() },
            d.host.clone(),
            Arc::clone(&d.runner),
            stats,
            d.shutdown.clone(),
        ))),
        _ => None,
    };
    let shutdown = d.shutdown.clone();
    // A response's last frame must not wait for the client's delayed ACK (Nagle's
    // algorithm holds a small write behind an unacknowledged one for up to 40 ms).
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            let _ = shutdown.race(std::future::pending::<()>()).await;
        })
        .await
        .context("serving the API")?;
    if let Some(w) = watcher {
        w.await.context("the watcher task")??;
    }
    drain(&d.runner).await;
    Ok(0)
}

/// Waits for the restores still running (they abort or roll forward after the interrupt).
async fn drain(runner: &Runner) {
    while !runner.active().is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
