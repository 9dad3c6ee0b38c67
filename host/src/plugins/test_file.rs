//! `lockstep plugin test`: run one check once against a JSON file that holds
//! the context, the check's config and grants, and local folders standing in
//! for each end's storage, so authors can develop without a cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use serde::Deserialize;

use super::spec::{CheckLimits, CheckLimitsSection};
use super::{
    AllowedHosts, CheckContext, CheckGrants, CheckRun, Clock, Error, PluginRuntime, StagedObject,
    StoreCheckHost,
};

/// The `--context` file of `lockstep plugin test` (JSON).
///
/// ```json
/// {
///   "context": { "restore_id": "r1", "backup_name": "b", "phase": "before-import",
///                "target": {"name": "prod-a", "uri": "http://a:19530", "role": "target"} },
///   "config": { "sample": "4" },
///   "storage": { "prod-a": "./storage/prod-a" },
///   "staged_files": [ {"path": "staged/r1/1/0.log", "size": 10, "batch": 0} ],
///   "now": "2026-11-29T10:00:00Z"
/// }
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestFile {
    pub context: CheckContext,
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// End name → local folder used as that end's storage (relative paths
    /// are relative to the file). Ends not listed answer `unknown-end`.
    #[serde(default)]
    pub storage: BTreeMap<String, PathBuf>,
    #[serde(default)]
    pub staged_files: Vec<StagedObject>,
    /// Fixes the clock; the system clock when absent.
    #[serde(default)]
    pub now: Option<jiff::Timestamp>,
    /// Per-call bounds, read as a job file's `[check.limits]`.
    #[serde(default)]
    pub limits: CheckLimitsSection,
}

/// Loads `plugin` and runs it once against `test_file`; the run carries the
/// verdict (or error), the logs and the time the call took.
pub async fn test_check(
    runtime: &PluginRuntime,
    plugin: &Path,
    test_file: &Path,
) -> Result<CheckRun, Error> {
    let failed = |reason: String| Error::TestFile {
        path: test_file.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(test_file).map_err(|e| failed(e.to_string()))?;
    let file: TestFile = serde_json::from_str(&text).map_err(|e| failed(e.to_string()))?;
    let base = test_file.parent().unwrap_or(Path::new("."));
    let mut ends: BTreeMap<String, Arc<dyn ObjectStore>> = BTreeMap::new();
    for (end, dir) in &file.storage {
        let dir = base.join(dir);
        let store = LocalFileSystem::new_with_prefix(&dir)
            .map_err(|e| failed(format!("storage.{end} = {}: {e}", dir.display())))?;
        ends.insert(end.clone(), Arc::new(store));
    }
    let plugin = runtime
        .load(plugin, CheckLimits::from_section(&file.limits))
        .await?;
    let grants = CheckGrants {
        allow_hosts: AllowedHosts::parse(plugin.name(), &file.allow_hosts)?,
        clock: file.now.map_or(Clock::System, Clock::Fixed),
    };
    let host = Arc::new(StoreCheckHost::new(ends, file.staged_files.into()));
    Ok(plugin
        .check(&file.context, &file.config, &grants, host)
        .await)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The context file's `limits` are read as a job file's `[check.limits]`:
    /// a bound out of range is refused before any plugin is loaded.
    #[tokio::test]
    async fn limits_out_of_range_are_refused_by_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("ctx.json");
        std::fs::write(
            &file,
            r#"{"context": {"restore_id": "r", "backup_name": "b", "phase": "before-import",
                            "target": {"name": "t", "uri": "http://t:19530", "role": "target"}},
                "limits": {"memory_mib": 0}}"#,
        )
        .expect("context file");
        let runtime = PluginRuntime::new(dir.path().join("cache")).expect("runtime");
        let error = test_check(&runtime, &dir.path().join("absent.wasm"), &file)
            .await
            .expect_err("refused");
        let shown = error.to_string();
        assert!(
            matches!(error, Error::TestFile { .. })
                && shown
                    .contains("invalid value: integer `0`, expected a whole number from 1 to 4096"),
            "{shown}"
        );
    }
}
