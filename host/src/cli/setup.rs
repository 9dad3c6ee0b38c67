//! What a command runs on: the host config, the journal and the engine over them, from the
//! global flags. Below every command module, so each of them (and `mod.rs`'s dispatch) stands
//! on it without standing on the others.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use lockstep::config::{HostConfig, backup_yaml};
use lockstep::engine::{self, Engine, Interrupt};
use lockstep::journal::embedded::FileJournal;
use lockstep::journal::{Outcome, RequestedBy};

/// The global flags a command's engine is made from.
#[derive(Debug, Clone, Copy)]
pub struct Flags<'a> {
    pub config: Option<&'a Path>,
    pub state_dir: Option<&'a Path>,
    pub journal: Option<&'a str>,
    /// milvus-backup's `--set KEY=VALUE` items.
    pub sets: &'a [String],
}

/// Whether a command can work without a host config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// It reaches clusters or backups, which only a host config names: with none found, it
    /// is refused saying where it looked.
    Config,
    /// It reads only the state directory (`status`): the default one serves.
    StateDir,
}

/// The host config from `--config`; else `./lockstep.toml`; else milvus-backup's config
/// where milvus-backup looks for it (`backup.yaml`, `$MILVUSCONF/backup.yaml`,
/// `configs/backup.yaml`); else none, which only a command that needs no config (`need`)
/// accepts. `state_dir` overrides its state directory.
pub fn load_host_config(
    flags: Flags<'_>,
    state_dir: Option<&Path>,
    need: Need,
) -> anyhow::Result<HostConfig> {
    let env = |name: &str| std::env::var(name).ok();
    let sets = backup_yaml::parse_sets(flags.sets)?;
    for (key, instead) in backup_yaml::secrets_set(&sets) {
        let instead = match instead {
            Some(var) => format!("set {var} in the environment instead"),
            None => "write it in the config file, readable by this user alone".to_owned(),
        };
        tracing::warn!(
            "--set {key} puts a secret on the command line, where any user of this host sees it \
             in the process list and the shell keeps it in its history: {instead}"
        );
    }
    let default = Path::new("lockstep.toml");
    let path = match flags.config {
        Some(p) => Some(p.to_path_buf()),
        None if default.exists() => Some(default.to_path_buf()),
        None => backup_yaml::default_path(&env).inspect(|found| {
            tracing::info!(config = %found.display(), "no lockstep.toml here: reading milvus-backup's config");
        }),
    };
    let mut host = match path {
        Some(p) => HostConfig::load_with(&p, &sets, &env)?,
        None => {
            anyhow::ensure!(
                sets.is_empty(),
                "--set overrides keys of milvus-backup's config, and none was found (--config, \
                 backup.yaml, $MILVUSCONF/backup.yaml or configs/backup.yaml)"
            );
            anyhow::ensure!(
                need == Need::StateDir,
                "no lockstep.toml or backup.yaml found (looked in: {}); name one with --config \
                 FILE or LOCKSTEP_CONFIG",
                looked_in(default, &env)
            );
            HostConfig::empty(PathBuf::from(lockstep::config::DEFAULT_STATE_DIR))
        }
    };
    if let Some(dir) = state_dir {
        host.state_dir = dir.to_path_buf();
    }
    Ok(host)
}

/// Where a host config was looked for, as absolute paths: `default`, then milvus-backup's
/// places for its `backup.yaml`.
fn looked_in(default: &Path, env: &dyn Fn(&str) -> Option<String>) -> String {
    let mut places = vec![default.to_path_buf(), PathBuf::from("backup.yaml")];
    if let Some(dir) = env("MILVUSCONF").filter(|d| !d.is_empty()) {
        places.push(Path::new(&dir).join("backup.yaml"));
    }
    places.push(Path::new("configs").join("backup.yaml"));
    let shown: Vec<String> = (places.iter())
        .map(|p| {
            std::path::absolute(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string()
        })
        .collect();
    shown.join(", ")
}

/// The journal could not be reached or opened: lockstep's own part failed (exit 6).
#[derive(Debug)]
pub struct JournalUnusable(String);

impl std::fmt::Display for JournalUnusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot use the journal at {}", self.0)
    }
}

/// The state directory could not be made its user's alone: lockstep's own part failed
/// (exit 6).
#[derive(Debug)]
pub struct StateDirUnusable(PathBuf);

impl std::fmt::Display for StateDirUnusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot use the state directory {}", self.0.display())
    }
}

/// The journal `--journal` names (`etcd://...`), else the host config's `[journal] etcd`,
/// reached as its `[journal]` says; else the embedded one in the state directory. The state
/// directory is made its user's alone first, whichever journal it is: reports and the plugin
/// cache live there too.
pub async fn open_journal(
    flag: Option<&str>,
    host: &HostConfig,
) -> anyhow::Result<Arc<dyn lockstep::journal::Journal>> {
    use lockstep::journal::etcd::EtcdJournal;
    let state_dir = &host.state_dir;
    lockstep::owner_only::dir(state_dir).context(StateDirUnusable(state_dir.to_owned()))?;
    Ok(match host.journal.location(flag)? {
        Some(location) => {
            let journal = EtcdJournal::connect(&location)
                .await
                .context(JournalUnusable(format!(
                    "etcd://{}{}",
                    location.endpoints.join(","),
                    location.prefix
                )))?;
            Arc::new(journal)
        }
        None => Arc::new(FileJournal::open(&host.state_dir).context(JournalUnusable(
            host.state_dir.join("journal").display().to_string(),
        ))?),
    })
}

/// An engine over `journal` whose interrupt is Ctrl-C.
pub fn engine_with(
    journal: Arc<dyn lockstep::journal::Journal>,
    state_dir: &Path,
    progress: Arc<dyn engine::Progress>,
) -> Engine {
    let (raise, interrupt) = Interrupt::new();
    // First Ctrl-C: abort before a decision (after one, nothing changes: only forward).
    // Second: leave now; the journal lets `lockstep recover` finish.
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::warn!(
                "interrupted: aborting restores that have not decided (Ctrl-C again to leave now)"
            );
            let _ = raise.send(true);
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(Outcome::Incomplete.exit_code());
            }
        }
    });
    Engine {
        journal,
        reports_dir: state_dir.join("reports"),
        plugins: lockstep::plugins::LazyRuntime::new(state_dir.join("plugin-cache")),
        progress,
        interrupt,
    }
}

/// A restore a job file on the command line asked for, as its record keeps it.
pub fn requested_by_file(file: &Path) -> RequestedBy {
    let file = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    RequestedBy::Cli {
        file: Some(file.display().to_string()),
    }
}
