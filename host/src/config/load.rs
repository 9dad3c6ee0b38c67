//! Which reader a host config file takes: milvus-backup's `backup.yaml` by its extension,
//! else `lockstep.toml`, whose `base` is read here too. Above both readers, so neither
//! depends on the other.

use std::path::Path;

use super::secret::{Env, process_env};
use super::{HostConfig, backup_yaml};
use crate::diagnostic::{Error, Input};

impl HostConfig {
    /// Reads and validates the host config at `path`: a `lockstep.toml`, or a milvus-backup
    /// `backup.yaml` by its extension.
    pub fn load(path: &Path) -> Result<Self, Error> {
        Self::load_with(path, &[], &process_env)
    }

    /// [`HostConfig::load`] with milvus-backup's `--set KEY=VALUE` overrides, reading its
    /// credential variables through `env`. The overrides apply to a milvus-backup config,
    /// given directly or as a `lockstep.toml`'s `base`.
    pub fn load_with(path: &Path, sets: &[(String, String)], env: Env<'_>) -> Result<Self, Error> {
        if backup_yaml::is_yaml(path) {
            return backup_yaml::load(path, sets, env);
        }
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            input: Input::HostConfig(path.to_owned()),
            source,
        })?;
        Self::parse_str_with(&text, path, sets, env)
    }

    /// Validates `lockstep.toml` text; `path` locates messages and relative paths.
    pub fn parse_str(text: &str, path: &Path) -> Result<Self, Error> {
        Self::parse_str_with(text, path, &[], &process_env)
    }

    fn parse_str_with(
        text: &str,
        path: &Path,
        sets: &[(String, String)],
        env: Env<'_>,
    ) -> Result<Self, Error> {
        let base =
            |base: &Path| backup_yaml::is_yaml(base).then(|| backup_yaml::load(base, sets, env));
        HostConfig::from_toml(text, path, &base, !sets.is_empty())
    }
}
