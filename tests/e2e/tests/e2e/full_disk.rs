//! Full disks and damaged state. A journal on a disk that fills while the restore holds its
//! jobs: the commit decision cannot be made durable, so no commit goes out; the run ends
//! incomplete saying why, and `lockstep recover` converges once space returns. A staging
//! store that fills mid-stage: the restore aborts before any decision. A record cut short
//! and a damaged stored report: named, never a panic or a silent skip. The full disks are
//! small tmpfs mounts the tests make (they run as root, here and in CI).

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use e2e::{TARGET, World, WorldSpec, eventually};
use milvus_sim::jobs::JobState;

/// Mounts a tmpfs of `size` at `dir` for the life of the guard.
struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    fn mount(dir: &'a Path, size: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()?;
        anyhow::ensure!(
            status.success(),
            "mount -t tmpfs {} failed: {status}",
            dir.display()
        );
        Ok(Tmpfs(dir))
    }

    /// Writes a file until the filesystem is full.
    fn fill(&self) -> anyhow::Result<std::path::PathBuf> {
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path)?;
        let chunk = vec![0u8; 64 << 10];
        loop {
            match file.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => return Err(e.into()),
            }
        }
        // The last partial chunk may leave a few bytes; take them too.
        while file.write_all(&[0]).is_ok() {}
        Ok(path)
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_journal_disk_that_fills_while_holding_sends_no_commit_and_recover_converges()
-> anyhow::Result<()> {
    // The secondaries take seconds to hold their mirrors: the window in which the disk fills.
    let world = World::start(WorldSpec {
        secondary_stage: Duration::from_millis(800),
        ..WorldSpec::default()
    })
    .await?;
    let state = world.path("state");
    let tmpfs = Tmpfs::mount(&state, "8m")?;
    let job = world.job("full", "")?;
    let running = world.spawn(&["run", job.to_str().unwrap()], &[])?;
    let target = world.sim.cluster(TARGET);
    eventually(Duration::from_secs(30), || async {
        let jobs = target.snapshot().jobs;
        Ok(!jobs.is_empty() && jobs.iter().all(|j| j.state == JobState::Uncommitted))
    })
    .await?;
    let filler = tmpfs.fill()?;

    // As after a crash: incomplete, the jobs held, nothing claimed committed.
    let run = running.finish().await?;
    assert_eq!(run.code, 4, "{}", run.explain());
    assert_eq!(run.outcome(), "incomplete", "{}", run.explain());
    let summary = run.summary();
    for needle in [
        "the commit decision could not be made durable",
        "No space left on device",
        "nothing was committed",
        "lockstep recover",
    ] {
        assert!(summary.contains(needle), "{needle:?} in {summary}");
    }
    assert!(!summary.contains("visible on every end"), "{summary}");
    assert_eq!(
        world.requests(TARGET, "import/commit").await?,
        0,
        "no commit without a durable decision"
    );

    std::fs::remove_file(filler)?;
    // The failed write did not land (the journal writes a temporary file and renames it):
    // no decision on record, so recover presumes the abort.
    let recovered = world.run(&["recover"], &[]).await?;
    assert_eq!(recovered.code, 1, "{}", recovered.explain());
    assert_eq!(
        recovered.outcome(),
        "rolled_back",
        "{}",
        recovered.explain()
    );
    world.assert_nothing_held().await?;
    crate::invariants::nothing_restored_eventually(&world).await?;
    Ok(())
}

/// The target's store fills while lockstep stages into it: the restore aborts before any
/// decision, and no end holds anything.
#[tokio::test(flavor = "multi_thread")]
async fn a_staging_store_that_fills_mid_stage_aborts_before_any_decision() -> anyhow::Result<()> {
    // A backup of some megabytes, so that half of it is many objects.
    let base = WorldSpec::default();
    let world = World::start(WorldSpec {
        backup: milvus_sim::fixtures::BackupSpec {
            rows_per_segment: 2000,
            dim: 64,
            ..base.backup.clone()
        },
        ..base
    })
    .await?;
    // Room for about half the backup's objects.
    let half = world.backup.log_bytes() / 2;
    assert!(half > 1 << 20, "{half}");
    let store = world.storage_dir(TARGET);
    let _tmpfs = Tmpfs::mount(&store, &format!("{half}"))?;
    let job = world.job("stage-full", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    assert_eq!(run.outcome(), "rolled_back", "{}", run.explain());
    let text = format!("{}\n{}", run.stdout, run.stderr);
    assert!(
        text.contains("No space left on device"),
        "{}",
        run.explain()
    );
    assert_eq!(world.requests(TARGET, "import/commit").await?, 0);
    world.assert_nothing_held().await?;
    for end in world.ends() {
        assert_eq!(world.visible(&end).await?.values().sum::<i64>(), 0, "{end}");
    }
    Ok(())
}

/// Damaged state: a journal record cut short, and a finished record whose stored report no
/// longer parses. Each is named by its path or id; nothing panics, nothing is skipped in
/// silence, and a finished restore is not run again.
#[tokio::test(flavor = "multi_thread")]
async fn a_truncated_record_and_a_damaged_report_are_named_and_nothing_runs_again()
-> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let job = world.job("damaged", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    let id = run.report["restore_id"]
        .as_str()
        .expect("restore id")
        .to_owned();
    let record_path = world.path(&format!("state/journal/{id}.json"));
    let original = std::fs::read(&record_path)?;

    // The stored report replaced by something that is not one.
    let mut record: serde_json::Value = serde_json::from_slice(&original)?;
    record["report"] = serde_json::json!({"not": "a report"});
    std::fs::write(&record_path, serde_json::to_vec(&record)?)?;
    let before = world.requests(TARGET, "import/create").await?;
    let recovered = world.run(&["recover", &id], &[]).await?;
    assert_eq!(
        recovered.code,
        0,
        "the recorded outcome: {}",
        recovered.explain()
    );
    assert!(
        recovered.summary().contains(&format!(
            "restore {id} finished (Succeeded), but the report in its journal record is damaged"
        )),
        "{}",
        recovered.explain()
    );
    assert_eq!(
        world.requests(TARGET, "import/create").await?,
        before,
        "not run again"
    );

    // The record cut in half.
    std::fs::write(&record_path, &original[..original.len() / 2])?;
    for args in [vec!["recover"], vec!["status", id.as_str()]] {
        let refused = world.run(&args, &[]).await?;
        assert_eq!(refused.code, 2, "{args:?}: {}", refused.explain());
        let text = format!("{}\n{}", refused.stdout, refused.stderr);
        assert!(
            text.contains(&format!("{id}.json is corrupt: EOF while parsing")),
            "{args:?} names the record: {}",
            refused.explain()
        );
        assert!(!text.contains("panicked"), "{}", refused.explain());
    }
    Ok(())
}

/// The journal's disk fills at `point` (the process fills its own tmpfs there, through the
/// `fault-injection` feature, so the phase is exact): no commit is sent unless the decision
/// was durable before the disk filled; the run fails saying the disk is full (or, when only
/// the outcome's write failed, succeeds saying the journal lags); and once space
/// returns, `lockstep recover` converges: every row on every end when the commit was decided,
/// nothing restored and nothing held when it was not.
async fn the_journal_disk_fills_at(point: &str, decided: bool) -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let state = world.path("state");
    let _tmpfs = Tmpfs::mount(&state, "8m")?;
    let filler = state.join("filler");
    let job = world.job("fills", "")?;
    let run = world
        .run(
            &["run", job.to_str().unwrap()],
            &[
                ("LOCKSTEP_FILL_DISK_AT", point),
                ("LOCKSTEP_FILL_DISK", filler.to_str().unwrap()),
            ],
        )
        .await?;
    assert!(
        filler.exists(),
        "the point {point} was not reached: {}",
        run.explain()
    );
    if point == "before-report" {
        // Every end is done; only the outcome's write failed, and the report says so.
        assert_eq!(run.code, 0, "at {point}: {}", run.explain());
        assert!(
            run.summary()
                .contains("The journal could not record this outcome")
                && run.summary().contains("lockstep recover"),
            "{}",
            run.explain()
        );
    } else {
        assert_ne!(run.code, 0, "at {point}: {}", run.explain());
    }
    let text = format!("{}\n{}", run.stdout, run.stderr);
    assert!(
        text.contains("No space left on device"),
        "at {point}: {}",
        run.explain()
    );
    assert!(!text.contains("panicked"), "at {point}: {}", run.explain());
    let commits = world.requests(TARGET, "import/commit").await?;
    if decided {
        assert!(commits > 0, "at {point}: the decision was durable");
    } else {
        assert_eq!(
            commits, 0,
            "at {point}: no commit without a durable decision"
        );
    }

    std::fs::remove_file(&filler)?;
    let recovered = world.run(&["recover"], &[]).await?;
    assert!(
        !format!("{}{}", recovered.stdout, recovered.stderr).contains("panicked"),
        "{}",
        recovered.explain()
    );
    world.assert_nothing_held().await?;
    let status = world.run(&["status", "--output", "json"], &[]).await?;
    if decided {
        let expected = world.rows_after_deletes();
        for end in world.ends() {
            let visible: i64 = world.visible(&end).await?.values().sum();
            assert_eq!(visible, expected, "{end} after the disk filled at {point}");
        }
        assert!(
            status.stdout.contains("\"succeeded\""),
            "at {point}: {}",
            status.explain()
        );
    } else {
        crate::invariants::nothing_restored_eventually(&world).await?;
        assert!(
            status.stdout.contains("\"rolled_back\""),
            "at {point}: {}",
            status.explain()
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_disk_fills_after_ddl() -> anyhow::Result<()> {
    the_journal_disk_fills_at("after-ddl", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_disk_fills_after_staging() -> anyhow::Result<()> {
    the_journal_disk_fills_at("after-stage", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_disk_fills_after_recording_the_keys() -> anyhow::Result<()> {
    the_journal_disk_fills_at("after-intent", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_disk_fills_after_submitting() -> anyhow::Result<()> {
    the_journal_disk_fills_at("after-submit", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_disk_fills_while_holding() -> anyhow::Result<()> {
    the_journal_disk_fills_at("holding", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_disk_fills_after_the_decision() -> anyhow::Result<()> {
    the_journal_disk_fills_at("after-decision", true).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_disk_fills_after_the_commit() -> anyhow::Result<()> {
    the_journal_disk_fills_at("after-commit", true).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_disk_fills_before_the_report() -> anyhow::Result<()> {
    the_journal_disk_fills_at("before-report", true).await
}

/// The reports' disk is full from the start, the journal's is not: the restore runs to its
/// end on every end and the journal records the outcome; only the report files are lost,
/// and the log says so, with the directory. The report is still printed, and `status`
/// reads the outcome from the journal.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_report_disk_loses_the_report_files_and_nothing_else() -> anyhow::Result<()> {
    let world = World::start(WorldSpec::default()).await?;
    let reports = world.path("state/reports");
    let tmpfs = Tmpfs::mount(&reports, "1m")?;
    let filler = tmpfs.fill()?;
    let job = world.job("reports-full", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert!(
        run.stderr.contains("could not write the report files")
            && run.stderr.contains("No space left on device"),
        "{}",
        run.explain()
    );
    assert!(run.stdout.contains("\"succeeded\""), "{}", run.explain());
    let expected = world.rows_after_deletes();
    for end in world.ends() {
        let visible: i64 = world.visible(&end).await?.values().sum();
        assert_eq!(visible, expected, "{end}");
    }
    let status = world.run(&["status", "--output", "json"], &[]).await?;
    assert!(
        status.stdout.contains("\"succeeded\""),
        "{}",
        status.explain()
    );
    std::fs::remove_file(&filler)?;
    world.assert_nothing_held().await?;
    Ok(())
}
