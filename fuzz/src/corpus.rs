//! Where each target's inputs live: the named seeds (`seeds/TARGET/`, lockstep's own test
//! inputs), the crashes found so far (`regressions/TARGET/`, each named for what it broke),
//! and what a local `cargo fuzz` run kept (`corpus/TARGET/`, not in git).

use std::path::{Path, PathBuf};

/// A target's body, as the fuzz targets call it.
pub type Target = fn(&[u8]);

/// Every target, by the name its directories and `cargo fuzz` use.
pub const TARGETS: &[(&str, Target)] = &[
    ("job_file", crate::job_file),
    ("host_config", crate::host_config),
    ("backup_yaml", crate::backup_yaml),
    ("rest_body", crate::rest_body),
    ("backup_meta", crate::backup_meta),
    ("topology", crate::topology),
    ("binlog", crate::binlog),
    ("column_group", crate::column_group),
];

/// The body of the target named `name`.
pub fn target(name: &str) -> Target {
    TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, run)| *run)
        .unwrap_or_else(|| panic!("no fuzz target named {name}"))
}

/// `fuzz/KIND/TARGET`, for KIND one of `seeds`, `regressions`, `corpus`, `artifacts`.
pub fn dir(kind: &str, target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(kind)
        .join(target)
}

/// The files of a directory, sorted; none when it does not exist.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `target` on `data`, and says whether it panicked.
pub fn panics(target: Target, data: &[u8]) -> bool {
    std::panic::catch_unwind(|| target(data)).is_err()
}
