//! Commands, output and exit codes of the `lockstep` binary.

mod backups;
#[cfg(feature = "demo")]
mod demo;
mod operate;
mod output;
mod setup;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use tracing::Instrument as _;

use lockstep::config::HostConfig;
use lockstep::engine::{self, Engine, Report};
use lockstep::job::{Job, RestoreArgs};
use lockstep::journal::{Outcome, RequestedBy, RestoreLookup, RestoreRecord};

pub use output::OutputFormat;

/// Restore milvus-backup backups into a CDC-replicating Milvus so the data becomes visible
/// at the same logical point on every end.
#[derive(Debug, Parser)]
#[command(name = "lockstep", version, about, propagate_version = true)]
pub struct Cli {
    /// Host config: a lockstep.toml, or milvus-backup's backup.yaml (by its extension).
    /// Default: ./lockstep.toml when it exists, else milvus-backup's backup.yaml where
    /// milvus-backup looks for it (here, $MILVUSCONF, ./configs).
    #[arg(long, global = true, env = "LOCKSTEP_CONFIG")]
    config: Option<PathBuf>,
    /// Override a key of milvus-backup's config (or name a credential variable):
    /// --set milvus.grpc.address=10.0.0.1; repeatable. Over the environment and the file.
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Journal and reports directory (overrides the host config's state_dir).
    #[arg(long, global = true, env = "LOCKSTEP_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// The journal: embedded in the state directory (default), or shared by a fleet at
    /// etcd://HOST:PORT/prefix.
    #[arg(long, global = true, env = "LOCKSTEP_JOURNAL")]
    journal: Option<String>,
    /// Log lines as text or JSON (to stderr).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The final report as a table for people or JSON for scripts (to stdout).
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

// Parsed once per process; the size of the restore flags does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Run job files (or every *.toml in directories), several at once; exit with the
    /// worst outcome.
    Run {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Restores running at once.
        #[arg(long, default_value_t = 2)]
        max_parallel: usize,
    },
    /// Restore a backup, with milvus-backup's restore flags plus --target, --secondaries
    /// and --strategy.
    Restore(RestoreArgs),
    /// Run preflight and print what a run would do; changes nothing anywhere.
    Plan { file: PathBuf },
    /// Check a backup (under the host config's [backups]) against its own meta: every
    /// object there, and with --level data every object decoding to the rows its segment
    /// says. Exit 0 when clean, 2 when anything is wrong; changes nothing.
    Check {
        /// The backup's name.
        name: String,
        /// meta: every object the meta names exists; data: also every binlog decodes and
        /// agrees with the meta.
        #[arg(long, value_enum, default_value_t = lockstep::backup::verify::Level::Data)]
        level: lockstep::backup::verify::Level,
    },
    /// The backups under the host config's backups root (milvus-backup's `list`): name,
    /// format, collections, rows, size, Milvus version. Reads only.
    List,
    /// One backup (milvus-backup's `get`): what `list` shows, and each collection's
    /// partitions, segments, rows and indexes. Reads only.
    Get {
        /// The backup's name.
        #[arg(short = 'n', long = "name")]
        name: String,
    },
    /// Show restores from the journal: all of them, the newest few, or one in full.
    Status {
        id: Option<String>,
        /// Only the newest N restores (by start): what is read and held grows with N, not
        /// with the journal's history.
        #[arg(long, value_name = "N", conflicts_with = "id", value_parser = clap::value_parser!(u64).range(1..))]
        last: Option<u64>,
    },
    /// Finish restores a crash left unfinished: abort without a decision, roll forward
    /// with one.
    Recover { id: Option<String> },
    /// Remove the journal records and reports of finished restores beyond the host
    /// config's [retention] (older than keep and not among the keep_last newest), never an
    /// unfinished or claimed restore nor one whose job file is still watched; print each
    /// restore with why it went or stayed.
    Prune {
        /// Say what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Ask every end of a finished restore what a query sees: count(*) of each committed
    /// collection and partition, loaded where it is not, against the live rows of the
    /// backup's data. Exit 0 when every end shows them, 3 when one shows other rows, 4 when
    /// some end could not be asked.
    Verify {
        id: String,
        /// Seconds to wait for a collection to load on every end.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// Also fetch this many keys of each collection from every end and compare every
        /// field with the backup's rows (read again from the host config's [backups]).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=lockstep::job::MAX_VERIFY_SAMPLE))]
        sample: Option<u64>,
    },
    /// Start milvus-sim in process (a primary and two secondaries), generate a backup and
    /// restore it with two-phase commit.
    #[cfg(feature = "demo")]
    Demo(demo::DemoArgs),
    /// Develop plugin checks without a cluster.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Watch a directory of job files: each new or changed one runs once; a deleted one
    /// cancels its restore unless decided. Reports and journal in the state directory
    /// (--state-dir, else the host config's state_dir), which must lie outside DIR.
    Watch(operate::WatchArgs),
    /// Serve the milvus-backup-compatible REST API (and optionally watch a directory).
    Serve(operate::ServeArgs),
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// The component's world, imports, exports, WIT version and size.
    Inspect { file: PathBuf },
    /// Run the check once against a context file; print the verdict, logs and time taken.
    Test {
        file: PathBuf,
        #[arg(long)]
        context: PathBuf,
    },
}

pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOCKSTEP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,lockstep=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(format == LogFormat::Text && output::log_colour())
        .with_writer(output::AboveBars);
    match format {
        LogFormat::Text => builder.with_target(false).init(),
        LogFormat::Json => builder.json().init(),
    }
}

impl Cli {
    fn flags(&self) -> setup::Flags<'_> {
        setup::Flags {
            config: self.config.as_deref(),
            state_dir: self.state_dir.as_deref(),
            journal: self.journal.as_deref(),
            sets: &self.set,
        }
    }
}

/// Runs a command; returns the process exit code.
pub async fn dispatch(cli: Cli) -> i32 {
    let output = cli.output;
    match run_command(cli).await {
        Ok(code) => code,
        Err(e) => {
            output::error(output, &e);
            // lockstep's own parts failing is not the job's problem; bad input is a refusal.
            // Nothing was done either way.
            if e.downcast_ref::<setup::JournalUnusable>().is_some()
                || e.downcast_ref::<setup::StateDirUnusable>().is_some()
            {
                Outcome::HostFailed.exit_code()
            } else {
                Outcome::Refused.exit_code()
            }
        }
    }
}

async fn run_command(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        #[cfg(feature = "demo")]
        Command::Demo(args) => return demo::run(args, cli.output).await,
        Command::Plugin(cmd) => {
            return plugin_command(cmd, cli.output, &state_dir_for(&cli.state_dir, None)).await;
        }
        Command::Watch(ref args) => {
            return operate::run_watch(cli.flags(), args, cli.output).await;
        }
        Command::Serve(ref args) => return operate::run_serve(cli.flags(), args).await,
        _ => {}
    }
    let need = match cli.command {
        Command::Status { .. } => setup::Need::StateDir,
        _ => setup::Need::Config,
    };
    let host = setup::load_host_config(cli.flags(), cli.state_dir.as_deref(), need)?;
    // The backup commands read the backups and nothing else: no journal, no state directory.
    match &cli.command {
        Command::Check { name, level } => {
            return backups::check(&host, name, *level, cli.output).await;
        }
        Command::List => return backups::list(&host, cli.output).await,
        Command::Get { name } => return backups::get(&host, name, cli.output).await,
        _ => {}
    }
    let journal = setup::open_journal(cli.journal.as_deref(), &host).await?;
    let engine = setup::engine_with(journal, &host.state_dir, output::progress_for(cli.output));
    match cli.command {
        Command::Run {
            paths,
            max_parallel,
        } => {
            let files = job_files(&paths)?;
            run_files(&engine, &host, &files, max_parallel, cli.output).await
        }
        Command::Restore(args) => {
            let job = Job::from_cli(&args, &host).map_err(anyhow::Error::new)?;
            let report = engine.run(&job, RequestedBy::Cli { file: None }).await;
            output::report(cli.output, &report);
            Ok(report.exit_code())
        }
        Command::Plan { file } => {
            let job = Job::from_file(&file, &host).map_err(anyhow::Error::new)?;
            match engine.plan(&job).await {
                Ok(plan) => {
                    output::plan(cli.output, &job, &plan);
                    Ok(0)
                }
                Err(refusals) => {
                    output::refusals(cli.output, &job, &refusals);
                    Ok(Outcome::Refused.exit_code())
                }
            }
        }
        Command::Status { id, last } => status(&engine, id.as_deref(), last, cli.output).await,
        Command::Recover { id } => recover(&engine, &host, id.as_deref(), cli.output).await,
        Command::Prune { dry_run } => {
            let retention = host.retention.with_context(|| {
                format!(
                    "the host config has no [retention], so nothing is to be removed: add one \
                     to {} (keep = \"90d\", keep_last = 100)",
                    cli.config
                        .as_deref()
                        .map_or("lockstep.toml".into(), |c| c.display().to_string())
                )
            })?;
            let mode = match dry_run {
                true => lockstep::serve::retention::Mode::DryRun,
                false => lockstep::serve::retention::Mode::Remove,
            };
            let pruned = lockstep::serve::retention::prune(
                engine.journal.as_ref(),
                &engine.reports_dir,
                &host,
                retention,
                &|_| false,
                (mode, jiff::Timestamp::now()),
            )
            .await?;
            output::pruned(cli.output, &pruned);
            Ok(0)
        }
        Command::Verify {
            id,
            timeout,
            sample,
        } => {
            let sample = sample.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
            verify(
                &engine,
                &host,
                &id,
                (Duration::from_secs(timeout), sample),
                cli.output,
            )
            .await
        }
        #[cfg(feature = "demo")]
        Command::Demo(_) => unreachable!("handled above"),
        Command::Plugin(_)
        | Command::Watch(_)
        | Command::Serve(_)
        | Command::Check { .. }
        | Command::List
        | Command::Get { .. } => unreachable!("handled above"),
    }
}

fn state_dir_for(flag: &Option<PathBuf>, host: Option<&HostConfig>) -> PathBuf {
    flag.clone()
        .or_else(|| host.map(|h| h.state_dir.clone()))
        .unwrap_or_else(|| PathBuf::from(lockstep::config::DEFAULT_STATE_DIR))
}

/// Job files named, or every `*.toml` directly in a named directory, sorted.
fn job_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "toml") && f.is_file())
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    anyhow::ensure!(!files.is_empty(), "no job files found in {paths:?}");
    Ok(files)
}

/// Validates every file first (a bad one is refused and nothing of it runs), then runs the
/// valid ones with bounded parallelism; one summary, the worst exit code.
async fn run_files(
    engine: &Engine,
    host: &HostConfig,
    files: &[PathBuf],
    max_parallel: usize,
    format: OutputFormat,
) -> anyhow::Result<i32> {
    use futures::StreamExt as _;
    let mut worst = Outcome::Succeeded;
    let mut jobs = Vec::new();
    let mut refused = Vec::new();
    for f in files {
        match Job::from_file(f, host) {
            Ok(job) => jobs.push((job, setup::requested_by_file(f))),
            Err(e) => {
                worst = worst.worst(Outcome::Refused);
                refused.push((f.clone(), e));
            }
        }
    }
    for (f, e) in &refused {
        output::refused_file(format, f, &e.to_string());
    }
    let reports: Vec<Report> = futures::stream::iter(jobs)
        .map(|(job, requested_by)| async move { engine.run(&job, requested_by).await })
        .buffer_unordered(max_parallel.max(1))
        .collect()
        .await;
    for r in &reports {
        worst = worst.worst(r.outcome);
    }
    output::reports(format, &reports, &refused);
    Ok(worst.exit_code())
}

async fn status(
    engine: &Engine,
    id: Option<&str>,
    last: Option<u64>,
    format: OutputFormat,
) -> anyhow::Result<i32> {
    match id {
        Some(id) => output::record(format, &named(engine, id).await?),
        None => {
            let listing = match last {
                Some(n) => engine
                    .journal
                    .newest(usize::try_from(n).unwrap_or(usize::MAX)),
                None => engine.journal.list(),
            };
            let mut records = listing.await?.readable();
            // Newest first, as `list_restores` answers.
            records.reverse();
            output::records(format, &records);
        }
    }
    Ok(0)
}

/// The restore an operator named: by its id, or by the job identity (`NAME.HASH`, what an
/// async REST answer gives) or job name it ran, meaning its newest attempt, as `get_restore`
/// finds it. The CLI may show what it refused; the API never does.
async fn named(engine: &Engine, id: &str) -> anyhow::Result<RestoreRecord> {
    let lookup = RestoreLookup::parse(id)
        .with_context(|| format!("`{id}` is not a restore id, job identity or job name"))?;
    lookup
        .find(engine.journal.as_ref())
        .await?
        .with_context(|| format!("no restore {id} in the journal (`lockstep status` lists them)"))
}

/// Resolves unfinished restores (one, or every one), reaching their ends through the URIs
/// in the journal and the host config's tokens; then deletes the staged files finished
/// restores left, where the host config names their stores.
async fn recover(
    engine: &Engine,
    host: &HostConfig,
    id: Option<&str>,
    format: OutputFormat,
) -> anyhow::Result<i32> {
    let chosen = match id {
        Some(id) => Some(named(engine, id).await?),
        None => None,
    };
    // A record that does not read may be a restore left unfinished: the others are
    // recovered, and then the command fails naming it, since a person must look at it.
    let mut unreadable = Vec::new();
    let records = match &chosen {
        Some(record) => vec![record.clone()],
        None => {
            let listing = engine
                .journal
                .list_where(&RestoreRecord::is_unfinished)
                .await?;
            unreadable = (listing.unreadable.iter())
                .map(|bad| lockstep::diagnostic::error_chain(&bad.error))
                .collect();
            listing.records
        }
    };
    let mut worst = Outcome::Succeeded;
    let mut reports = Vec::new();
    for record in records {
        let ends = engine::Ends::from_recorded(&record.ends, host)?;
        let stores = engine::recorded_stores(&record, host).unwrap_or_default();
        let span = tracing::info_span!("restore", job = %record.job_name, id = %record.id);
        let report = engine::recover(engine, record, ends, None, &stores)
            .instrument(span)
            .await;
        worst = worst.worst(report.outcome);
        reports.push(report);
    }
    let stage_left = |r: &RestoreRecord| {
        r.stage_left && !r.is_unfinished() && chosen.as_ref().is_none_or(|c| r.id == c.id)
    };
    let left = (engine.journal.list_where(&stage_left).await?).readable();
    for record in left {
        let Some(stores) = engine::recorded_stores(&record, host) else {
            let ends = record.staged_ends.join(", ");
            tracing::warn!(restore = %record.id, %ends, "staged files left: the host config names no storage for every end staged into");
            continue;
        };
        if let Err(e) = engine::clean_left_stage(engine, &record.id, &stores).await {
            tracing::warn!(restore = %record.id, error = %e, "staged files left: not deleted yet");
        }
    }
    output::reports(format, &reports, &[]);
    anyhow::ensure!(
        unreadable.is_empty(),
        "{} journal record(s) do not read, and what they hold was not recovered: {}",
        unreadable.len(),
        unreadable.join("; ")
    );
    Ok(worst.exit_code())
}

/// `lockstep verify ID`: the committed collections of a finished restore, counted on every end
/// it restored into, and with `sample` keys of each compared field by field.
async fn verify(
    engine: &Engine,
    host: &HostConfig,
    id: &str,
    (timeout, sample): (Duration, Option<usize>),
    format: OutputFormat,
) -> anyhow::Result<i32> {
    let record = named(engine, id).await?;
    let id = &record.id;
    let report: engine::Report = record
        .report
        .clone()
        .filter(|_| !record.is_unfinished())
        .with_context(|| format!("restore {id} has not finished: `lockstep recover {id}` first"))
        .and_then(|r| r.read().context("the restore's report does not read"))?;
    let expected = engine::report::to_verify(&report.collections)
        .with_context(|| format!("a collection in the report of {id}"))?;
    let ends = engine::Ends::from_recorded(&record.ends, host)?;
    let reopened = match sample {
        Some(_) => {
            let backups = (host.backups.as_ref())
                .context("--sample reads the backup again, and the host config has no [backups]")?;
            let reopened =
                lockstep::verify::Reopened::open(&backups.storage, &backups.root, &record.backup);
            Some(reopened.await?)
        }
        None => None,
    };
    let sampler = (reopened.as_ref().zip(sample)).map(|(reopened, keys)| reopened.sampler(keys));
    let verification =
        lockstep::verify::run(&ends.to_verify(), &expected, sampler.as_ref(), timeout).await;
    output::verification(format, &record.id.to_string(), &verification);
    Ok(if verification.mismatches().next().is_some() {
        Outcome::Diverged.exit_code()
    } else if verification.unverifiable().next().is_some() {
        Outcome::Incomplete.exit_code()
    } else {
        0
    })
}

async fn plugin_command(
    cmd: PluginCommand,
    format: OutputFormat,
    state_dir: &Path,
) -> anyhow::Result<i32> {
    match cmd {
        PluginCommand::Inspect { file } => {
            let inspection = lockstep::plugins::inspect(&file)?;
            output::inspection(format, &inspection);
            Ok(0)
        }
        PluginCommand::Test { file, context } => {
            let runtime = lockstep::plugins::PluginRuntime::new(state_dir.join("plugin-cache"))?;
            let run = lockstep::plugins::test_check(&runtime, &file, &context).await?;
            Ok(output::check_run(format, &run))
        }
    }
}
