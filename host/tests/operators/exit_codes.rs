//! Exit code 6: lockstep could not do its own part (its journal unreachable, its state
//! directory unusable), which is neither the job's fault (2) nor a restore that failed (1).

use std::process::Command;

fn lockstep(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::fs::write(dir.join("lockstep.toml"), "").unwrap();
    std::fs::write(dir.join("job.toml"), "backup = \"b\"\n").unwrap();
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .arg("--config")
        .arg(dir.join("lockstep.toml"))
        .args(args)
        .output()
        .expect("lockstep runs")
}

#[test]
fn an_unreachable_etcd_journal_is_lockstep_failing_not_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1.
    let out = lockstep(
        dir.path(),
        &[
            "--journal",
            "etcd://127.0.0.1:1/lockstep",
            "run",
            "job.toml",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("cannot use the journal at etcd://127.0.0.1:1/lockstep"),
        "{stderr}"
    );
}

#[test]
fn a_state_directory_that_is_a_file_is_lockstep_failing_not_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::write(&state, "not a directory").unwrap();
    let out = lockstep(
        dir.path(),
        &["--state-dir", state.to_str().unwrap(), "run", "job.toml"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("cannot use the journal at"), "{stderr}");
}

#[test]
fn a_bad_job_file_is_still_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let out = lockstep(
        dir.path(),
        &["run", dir.path().join("job.toml").to_str().unwrap()],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
