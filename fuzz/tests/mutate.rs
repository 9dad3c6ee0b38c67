//! A bounded fuzz of every target from its named seeds, for CI: `LOCKSTEP_FUZZ_SECS` seconds a
//! target (2 by default), from `LOCKSTEP_FUZZ_SEED` or the clock. An input that panics is
//! written to fuzz/artifacts/TARGET/, and the failure names it and the seed that drew it.

use std::time::{Duration, Instant};

use lockstep_fuzz::corpus;
use lockstep_fuzz::mutate::{Mutator, dictionary};

fn fuzz(name: &str) {
    let secs: u64 = std::env::var("LOCKSTEP_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let seed: u64 = std::env::var("LOCKSTEP_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
    let seeds: Vec<Vec<u8>> = ["seeds", "regressions"]
        .into_iter()
        .flat_map(|kind| corpus::files(&corpus::dir(kind, name)))
        .map(|f| std::fs::read(f).expect("a readable seed"))
        .collect();
    let run = corpus::target(name);
    let mut mutator = Mutator::new(seed, seeds, dictionary());
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tried = 0u64;
    while Instant::now() < deadline {
        let input = mutator.next_input();
        tried += 1;
        if corpus::panics(run, &input) {
            let dir = corpus::dir("artifacts", name);
            std::fs::create_dir_all(&dir).expect("the artifacts directory");
            let path = dir.join(format!("mutated-{seed}-{tried}"));
            std::fs::write(&path, &input).expect("the failing input is kept");
            panic!(
                "{name} panicked on input {tried} of LOCKSTEP_FUZZ_SEED={seed}, kept at {}",
                path.display()
            );
        }
    }
    eprintln!("{name}: {tried} inputs in {secs} s from LOCKSTEP_FUZZ_SEED={seed}");
}

#[test]
fn job_file() {
    fuzz("job_file");
}

#[test]
fn host_config() {
    fuzz("host_config");
}

#[test]
fn backup_yaml() {
    fuzz("backup_yaml");
}

#[test]
fn rest_body() {
    fuzz("rest_body");
}

#[test]
fn backup_meta() {
    fuzz("backup_meta");
}

#[test]
fn topology() {
    fuzz("topology");
}

#[test]
fn binlog() {
    fuzz("binlog");
}

#[test]
fn column_group() {
    fuzz("column_group");
}
