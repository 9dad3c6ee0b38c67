//! Every input `cargo fuzz` kept (fuzz/corpus/TARGET/) and every crash it found
//! (fuzz/artifacts/TARGET/, kept after the fix) run through their target again, so that what
//! was found once stays fixed. A panic in a target fails the test and names the file.

use std::path::{Path, PathBuf};

/// A target's body, as the fuzz targets call it.
type Target = fn(&[u8]);

const TARGETS: &[(&str, Target)] = &[
    ("job_file", lockstep_fuzz::job_file),
    ("host_config", lockstep_fuzz::host_config),
    ("rest_body", lockstep_fuzz::rest_body),
    ("backup_meta", lockstep_fuzz::backup_meta),
    ("topology", lockstep_fuzz::topology),
];

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: &str) {
    let (_, run) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .expect("a known target");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = inputs(&root.join("corpus").join(target));
    // The seeds are committed; an empty corpus would make this test pass on nothing.
    assert!(
        corpus.len() >= 5,
        "{target}: only {} corpus inputs",
        corpus.len()
    );
    for file in corpus
        .iter()
        .chain(&inputs(&root.join("artifacts").join(target)))
    {
        let data = std::fs::read(file).expect("a readable input");
        if std::panic::catch_unwind(|| run(&data)).is_err() {
            panic!("{target} panicked on {}", file.display());
        }
    }
}

#[test]
fn job_file_corpus() {
    replay("job_file");
}

#[test]
fn host_config_corpus() {
    replay("host_config");
}

#[test]
fn rest_body_corpus() {
    replay("rest_body");
}

#[test]
fn backup_meta_corpus() {
    replay("backup_meta");
}

#[test]
fn topology_corpus() {
    replay("topology");
}
