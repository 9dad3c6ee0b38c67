//! `lockstep watch DIR` and `lockstep serve`: the long-running modes. Both run restores
//! through one `serve::Runner` over the journal `--journal` names (the embedded one in the
//! state directory by default, or etcd for a fleet), stop on Ctrl-C or SIGTERM (restores that
//! have not decided abort; decided ones finish). `watch` prints a line per restore as it
//! ends; `serve` prints only where it listens, and logs that line. `serve`
//! refuses at start what would expose the API: a listener off loopback without TLS and a
//! token, a short token, a certificate that does not load.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;

use lockstep::config::{HostConfig, Retention};
use lockstep::engine::{Interrupt, Logged, Progress};
use lockstep::journal::Journal;
use lockstep::serve::ApiState;
use lockstep::serve::access::Tokens;
use lockstep::serve::api::router;
use lockstep::serve::certs::CertFiles;
use lockstep::serve::listen::{self, Scheme};
use lockstep::serve::origin::AllowedOrigins;
use lockstep::serve::retention;
use lockstep::serve::watch::WatchStats;
use lockstep::serve::{LiveProgress, Runner, WatchOptions, watch};

use super::output::{self, OutputFormat};
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
    /// Where to listen. Anything but loopback requires TLS (--tls-cert, --tls-key) and
    /// --token-env.
    #[arg(long, default_value = "127.0.0.1:8080", env = "LOCKSTEP_LISTEN")]
    pub listen: SocketAddr,
    /// Name of the environment variable holding the restore token: a bearer token of at
    /// least 16 bytes that every route but /healthz and / then requires.
    #[arg(long, env = "LOCKSTEP_TOKEN_ENV")]
    pub token_env: Option<String>,
    /// Name of the environment variable holding the read token (at least 16 bytes, with
    /// --token-env): it may only read (GET: /metrics, list, list_restores, get_*, hello,
    /// the OpenAPI document), so a dashboard or Prometheus cannot start a restore.
    #[arg(long, env = "LOCKSTEP_READ_TOKEN_ENV")]
    pub read_token_env: Option<String>,
    /// PEM certificate chain to serve HTTPS with (with --tls-key); read again when the file
    /// changes, so a rotated certificate needs no restart.
    #[arg(long, env = "LOCKSTEP_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "LOCKSTEP_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Another name clients reach this server by, beyond the listen address: an origin
    /// (`https://lockstep.example.com`) or a host:port, as a proxy, ingress or load balancer
    /// publishes it. Requests whose Host or Origin is neither are refused. Repeatable;
    /// LOCKSTEP_ALLOWED_ORIGINS takes them comma-separated.
    #[arg(
        long = "allowed-origin",
        env = "LOCKSTEP_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,
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
    let host = setup::load_host_config(flags, flags.state_dir, setup::Need::Config)?;
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
    tokio::spawn(Arc::clone(&runner).audit());
    if let Some(retention) = host.retention {
        tokio::spawn(prune_every(
            Arc::clone(&runner),
            retention,
            shutdown.clone(),
        ));
    }
    Ok(Daemon {
        host,
        runner,
        shutdown,
    })
}

pub async fn run_watch(
    flags: Flags<'_>,
    args: &WatchArgs,
    format: OutputFormat,
) -> anyhow::Result<i32> {
    let d = daemon(flags, Some(&args.dir), args.max_parallel).await?;
    watch(
        WatchOptions {
            dir: args.dir.clone(),
            tell: Arc::new(output::Told(format)),
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
    exposure(args)?;
    let tokens = Tokens::from_env(args.token_env.as_deref(), args.read_token_env.as_deref())?;
    let allowed = AllowedOrigins::parse(&args.allowed_origins)?;
    let certs = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(CertFiles::load(cert, key)?),
        _ => None,
    };
    let d = daemon(flags, args.watch.as_deref(), args.max_parallel).await?;
    let stats = args.watch.as_ref().map(|_| Arc::new(WatchStats::default()));
    let state = Arc::new(ApiState {
        runner: Arc::clone(&d.runner),
        tokens,
        allowed,
        watch: stats.clone(),
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let scheme = if certs.is_some() {
        Scheme::Https
    } else {
        Scheme::Http
    };
    // The CLI's own output: where it listens (port 0 picks one).
    println!("listening on {scheme}://{addr}");
    let watcher = match (&args.watch, stats) {
        (Some(dir), Some(stats)) => Some(tokio::spawn(watch(
            WatchOptions::new(dir.clone()),
            d.host.clone(),
            Arc::clone(&d.runner),
            stats,
            d.shutdown.clone(),
        ))),
        _ => None,
    };
    let shutdown = d.shutdown.clone();
    listen::serve(listener, certs, router(state), async move {
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

/// Refuses a listener off loopback that lacks TLS or a token: the API can drop collections
/// on every cluster the host config names, and off loopback anyone on the network could
/// read its token from plain HTTP, or call it without one.
fn exposure(args: &ServeArgs) -> anyhow::Result<()> {
    if args.listen.ip().is_loopback() {
        return Ok(());
    }
    let mut missing = vec![];
    if args.tls_cert.is_none() {
        missing.push("--tls-cert FILE --tls-key FILE (TLS)");
    }
    if args.token_env.is_none() {
        missing.push("--token-env NAME (a restore token of at least 16 bytes in $NAME)");
    }
    anyhow::ensure!(
        missing.is_empty(),
        "listening on {} (not loopback) requires TLS and a bearer token: add {}",
        args.listen,
        missing.join(" and ")
    );
    Ok(())
}

/// Applies `[retention]` at start and every `PRUNE_EVERY`, sparing what the runner's jobs
/// ask for; logs what went.
async fn prune_every(runner: Arc<Runner>, retention: Retention, shutdown: Interrupt) {
    loop {
        let wanted = |identity: &str| runner.wants(identity);
        let pass = retention::prune(
            runner.journal().as_ref(),
            runner.reports_dir(),
            runner.host(),
            retention,
            &wanted,
            (retention::Mode::Remove, jiff::Timestamp::now()),
        );
        match pass.await {
            Ok(pruned) => {
                let removed: Vec<&str> = (pruned.iter())
                    .filter(|p| p.action == retention::Action::Removed)
                    .map(|p| p.id.as_str())
                    .collect();
                tracing::info!(removed = removed.len(), kept = pruned.len() - removed.len(), ids = %removed.join(","), "retention applied");
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention: the journal could not be listed; trying again later")
            }
        }
        let later = tokio::time::sleep(retention::PRUNE_EVERY);
        if shutdown.race(later).await.is_err() {
            return;
        }
    }
}

/// Waits for the restores still running (they abort or roll forward after the interrupt).
async fn drain(runner: &Runner) {
    while !runner.active().is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
