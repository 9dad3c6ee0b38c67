//! Exit code 6: lockstep could not do its own part (its journal unreachable, its state
//! directory unusable), which is neither the job's fault (2) nor a restore that failed (1).

use std::process::Command;

fn lockstep(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::fs::write(dir.join("lockstep.toml"), "").unwrap();
    std::fs::write(dir.join("job.toml"), "backup = \"b\"\n").unwrap();
    Command::new(e2e::lockstep_bin())
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
    assert!(
        stderr.contains("cannot use the state directory"),
        "{stderr}"
    );
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

/// `lockstep check`: a sound backup exits 0 and says so; one whose object does not decode
/// exits 2 naming the object, its segment and collection. No state directory is made.
#[tokio::test]
async fn check_names_a_bad_object_and_exits_2() {
    let world = crate::support::world().await;
    let check = |level: &str| check(&world, level);
    let sound = check("data");
    let stdout = String::from_utf8_lossy(&sound.stdout);
    assert_eq!(sound.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("backup bak is sound at level data"),
        "{stdout}"
    );

    let binlogs = world
        .dir
        .path()
        .join("backups/backup/bak/binlogs/insert_log");
    let victim = walk(&binlogs).into_iter().next().expect("an insert log");
    std::fs::write(&victim, b"not a binlog").unwrap();
    let meta_only = check("meta");
    assert_eq!(meta_only.status.code(), Some(0), "the object is there");
    let bad = check("data");
    assert_names(
        &world,
        &victim,
        &bad,
        "does not decode: parse magic number failed",
    );
    assert!(!world.dir.path().join(".lockstep").exists());
}

/// A damaged page the Parquet reader panics on (it should fail) is a bad object like any
/// other: named with the reader's message, and no panic printed, which would read as
/// lockstep crashing.
#[tokio::test]
async fn check_reports_a_page_the_parquet_reader_panics_on_without_printing_a_panic() {
    use milvus_formats::binlog;
    let world = crate::support::world().await;
    let binlogs = world
        .dir
        .path()
        .join("backups/backup/bak/binlogs/insert_log");
    // The first one-byte damage, over every insert log, that the reader reports as a panic.
    let reader_panics = |bytes: &[u8]| {
        binlog::parse(bytes)
            .and_then(|log| binlog::insert_rows(&log))
            .is_err_and(|e| e.to_string().contains("the Parquet reader failed on it"))
    };
    let (victim, damaged) = walk(&binlogs)
        .into_iter()
        .find_map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (0..bytes.len()).find_map(|at| {
                let mut damaged = bytes.clone();
                damaged[at] ^= 0x5a;
                reader_panics(&damaged).then(|| (path.clone(), damaged))
            })
        })
        .expect(
            "a one-byte damage the Parquet reader panics on; if it fails on every one now, \
             lockstep's panic hook and this test can go",
        );
    std::fs::write(&victim, damaged).unwrap();

    let out = check(&world, "data");
    assert_names(&world, &victim, &out, "the Parquet reader failed on it");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `lockstep check bak --level LEVEL` on the world's backup.
fn check(world: &e2e::World, level: &str) -> std::process::Output {
    Command::new(e2e::lockstep_bin())
        .arg("--config")
        .arg(crate::support::host_config(world))
        .args(["check", "bak", "--level", level])
        .output()
        .expect("lockstep runs")
}

/// `check` exited 2 and its report names `victim` (by its path in the backup), its segment
/// and `why`.
fn assert_names(
    world: &e2e::World,
    victim: &std::path::Path,
    out: &std::process::Output,
    why: &str,
) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    let relative = victim
        .strip_prefix(world.dir.path().join("backups/backup/bak"))
        .unwrap();
    assert!(
        stdout.contains(&format!("{} (segment ", relative.display())) && stdout.contains(why),
        "{stdout}"
    );
}

/// Every file under `dir`, depth first.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}
