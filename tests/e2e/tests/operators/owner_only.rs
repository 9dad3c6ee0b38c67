//! What lockstep keeps under its state directory is its user's alone, whatever the umask: a
//! watcher that runs a job with a check (journal, lock and report files, `latest` links,
//! the plugin compile cache) and refuses a bad file leaves every file 0600 and every
//! directory 0700, under umask 022 and 000. A state directory another user owns is refused
//! (exit 6) and left as it was.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::time::Duration;

use e2e::Running;
use lockstep::journal::Outcome;
use lockstep::serve::reports;

use crate::support::{eventually, job, world};

/// Every directory and regular file under `dir` (links aside: a link has no mode of its
/// own), with its mode bits.
fn modes(dir: &Path) -> Vec<(String, u32, bool)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = std::fs::symlink_metadata(entry.path()).unwrap();
        let name = entry.path().display().to_string();
        if meta.is_dir() {
            found.push((name, meta.mode() & 0o7777, true));
            found.extend(modes(&entry.path()));
        } else if meta.is_file() {
            found.push((name, meta.mode() & 0o7777, false));
        }
    }
    found
}

async fn watch_under_umask(umask: u32) {
    let world = world().await;
    let jobs = world.path("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    let check = format!(
        "\n[[check]]\nplugin = \"{}\"\nphase = \"before-import\"\nconfig = {{ behaviour = \"pass\" }}\n",
        e2e::plugin("test-guest").unwrap().display()
    );
    std::fs::write(jobs.join("fine.toml"), job("fine", "_m") + &check).unwrap();
    std::fs::write(jobs.join("bad.toml"), "backup = 3\n").unwrap();
    let state = world.path("state");
    let mut cmd = world.lockstep(
        &[
            "--state-dir",
            state.to_str().unwrap(),
            "watch",
            jobs.to_str().unwrap(),
        ],
        &[],
    );
    let mask = rustix::fs::Mode::from_raw_mode(umask);
    // SAFETY: umask(2) is one async-signal-safe system call, all the child does before exec.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::umask(mask);
            Ok(())
        });
    }
    let mut running = Running::start(cmd).unwrap();
    let reports = state.join("reports");
    for (name, outcome) in [("fine", Outcome::Succeeded), ("bad", Outcome::Refused)] {
        eventually(Duration::from_secs(120), || async {
            reports::read_latest(&reports, name).filter(|r| r.outcome == outcome)
        })
        .await
        .unwrap_or_else(|e| panic!("umask {umask:03o}: {name}: {e}\n{}", running.log()));
    }
    running.kill().unwrap();
    running.finish().await.unwrap();

    let found = modes(&state);
    for part in [
        "journal/",
        "reports/latest",
        "plugin-cache/cache.key",
        ".cwasm",
        ".lock",
    ] {
        assert!(
            found.iter().any(|(name, _, _)| name.contains(part)),
            "umask {umask:03o}: nothing like {part} written: {found:?}"
        );
    }
    let wider: Vec<String> = found
        .iter()
        .filter(|(_, mode, is_dir)| *mode != if *is_dir { 0o700 } else { 0o600 })
        .map(|(name, mode, _)| format!("{name} {mode:03o}"))
        .collect();
    assert!(wider.is_empty(), "umask {umask:03o}: {wider:?}");
    let own = std::fs::metadata(&state).unwrap().mode() & 0o7777;
    assert_eq!(own, 0o700, "umask {umask:03o}: the state directory");
}

#[tokio::test]
async fn the_state_directory_is_owner_only_under_umask_022() {
    watch_under_umask(0o022).await;
}

#[tokio::test]
async fn the_state_directory_is_owner_only_under_umask_000() {
    watch_under_umask(0o000).await;
}

/// Another user's state directory is refused with what to do, and nothing is made in it or
/// changed of it. Under root the test makes one (a directory given to uid 4242); otherwise
/// `/`, which root owns.
#[test]
fn another_users_state_directory_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    let root = rustix::process::geteuid().is_root();
    let (state, owner) = if root {
        let state = temp.path().join("theirs");
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::chown(&state, Some(4242), Some(4242)).unwrap();
        (state, 4242)
    } else {
        (Path::new("/").to_owned(), 0)
    };
    let before = std::fs::metadata(&state).unwrap();
    std::fs::write(temp.path().join("lockstep.toml"), "").unwrap();
    let out = std::process::Command::new(e2e::lockstep_bin())
        .arg("--state-dir")
        .arg(&state)
        .arg("status")
        .current_dir(temp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains(&format!("belongs to uid {owner}")) && stderr.contains("chown"),
        "{stderr}"
    );
    let after = std::fs::metadata(&state).unwrap();
    assert_eq!(
        (after.mode(), after.uid()),
        (before.mode(), before.uid()),
        "left as it was"
    );
    if root {
        assert_eq!(
            std::fs::read_dir(&state).unwrap().count(),
            0,
            "nothing made in it"
        );
    }
}
