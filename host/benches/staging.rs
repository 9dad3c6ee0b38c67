//! Staging throughput on local files against `cp -r` of the same files in the same run
//! (DESIGN.md §6: staging ≥ 0.9 of `cp -r`).
//!
//! `cargo bench -p lockstep --bench staging [-- MIB]` writes MIB (default 320) of binlog-like
//! files (mostly 4 MiB, some 40 MiB, some 64 KiB and 4 KiB ones), then, for each of five
//! rounds, copies them with `cp -r` and stages them with `storage::stage` into another
//! directory, copying (`hard_links: false`, the path between filesystems) and then linking
//! (the default on one filesystem), and prints the median times and ratios.
//!
//! `storage::stage` returns only once what it wrote is on stable storage (the imports read
//! it and a resumed stage trusts it), while `cp -r` leaves it in the page cache. So the bench
//! prints three comparisons: the stage's copies alone (until its last file is reported, before
//! its verifying listing and its flush) against `cp -r`; the whole, durable stage against
//! `cp -r`; and against `cp -r; sync`, the like-for-like durable copy. Every round starts with
//! nothing dirty, so no copy pays for another's writeback.

use std::path::Path as FsPath;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use lockstep::backup::BackupFile;
use lockstep::config::StorageSpec;
use lockstep::journal::RestoreId;
use lockstep::storage::{
    Destination, StageOptions, StageProgress, StageSource, StagingPrefix, Transfer, open, stage,
};
use object_store::path::Path;

/// Rounds per copy; the medians are printed. Five, because a shared machine's page-cache
/// copies vary by 2x from round to round.
const ROUNDS: usize = 5;
const MIB: u64 = 1 << 20;

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; the first number is the size.
    let total_mib: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(320);
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).context("work dir")?;
    let source_dir = work.path().join("source");
    let files = write_files(&source_dir.join("backup/nightly"), total_mib * MIB)?;
    let bytes: u64 = files.iter().map(|f| f.size).sum();
    // Read everything once so every round reads from the page cache, as the second of two
    // back-to-back copies would.
    for file in &files {
        std::fs::read(source_dir.join("backup/nightly").join(&file.path))?;
    }
    sync()?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let backup = open(&StorageSpec::local(&source_dir)?)?;
    let backup_dir = Path::from("backup/nightly");
    // One stage of every file into a fresh directory: (durable, copies only).
    let stage_round = |name: String, options: StageOptions, way: Transfer| {
        let stage_dir = work.path().join(&name);
        let target = open(&StorageSpec::local(&stage_dir)?)?;
        let prefix = StagingPrefix::for_restore(RestoreId::new(&name, "ab", 1).as_str());
        let copied_at = std::sync::Mutex::new(None);
        let on_progress = |p: StageProgress| {
            if p.files_done == p.files_total {
                *copied_at.lock().expect("no panic under the lock") = Some(Instant::now());
            }
        };
        let started = Instant::now();
        let result = runtime.block_on(stage(
            StageSource {
                store: &backup,
                backup_dir: &backup_dir,
            },
            &files,
            &[Destination {
                end: "target",
                store: &target,
            }],
            &prefix,
            options,
            &on_progress,
            &|_| {},
            &tokio_util::sync::CancellationToken::new(),
        ))?;
        let durable = started.elapsed();
        let copied_at = copied_at
            .into_inner()
            .expect("no panic under the lock")
            .context("the last file's progress was reported")?;
        ensure!(
            (result.stores.iter())
                .flat_map(|s| &s.transfers)
                .all(|t| *t == way),
            "expected every file {}",
            way.label()
        );
        sync()?;
        std::fs::remove_dir_all(&stage_dir)?;
        sync()?;
        anyhow::Ok((durable, copied_at - started))
    };
    let copies = StageOptions {
        hard_links: false,
        ..StageOptions::default()
    };
    let (mut cp, mut cp_sync, mut staged, mut stage_copy, mut linked) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let cp_dir = work.path().join(format!("cp-{round}"));
        let started = Instant::now();
        let status = Command::new("cp")
            .arg("-r")
            .arg(&source_dir)
            .arg(&cp_dir)
            .status()?;
        ensure!(status.success(), "cp -r failed: {status}");
        let copied = started.elapsed();
        sync()?;
        cp.push(copied);
        cp_sync.push(started.elapsed());
        std::fs::remove_dir_all(&cp_dir)?;
        sync()?;

        let (durable, copies_only) =
            stage_round(format!("stage-{round}"), copies, Transfer::Streamed)?;
        staged.push(durable);
        stage_copy.push(copies_only);
        let (durable, _) = stage_round(
            format!("link-{round}"),
            StageOptions::default(),
            Transfer::Linked,
        )?;
        linked.push(durable);
    }

    let rate = |d: Duration| bytes as f64 / MIB as f64 / d.as_secs_f64();
    let (cp, cp_sync, staged, stage_copy, linked) = (
        median(cp),
        median(cp_sync),
        median(staged),
        median(stage_copy),
        median(linked),
    );
    println!(
        "staging bench: {} files, {:.0} MiB, median of {ROUNDS} rounds",
        files.len(),
        bytes as f64 / MIB as f64
    );
    let line = |what: &str, d: Duration| {
        println!(
            "  {what:<28} {:>8.1} MiB/s  ({:.3} s)",
            rate(d),
            d.as_secs_f64()
        )
    };
    line("cp -r", cp);
    line("cp -r; sync", cp_sync);
    line("storage::stage, copies only", stage_copy);
    line("storage::stage (durable)", staged);
    line("storage::stage, hard links", linked);
    println!(
        "  ratio stage copies / cp -r   {:.2}",
        rate(stage_copy) / rate(cp)
    );
    println!(
        "  ratio stage / cp -r          {:.2}",
        rate(staged) / rate(cp)
    );
    println!(
        "  ratio stage / (cp -r; sync)  {:.2}",
        rate(staged) / rate(cp_sync)
    );
    println!(
        "  ratio linked stage / cp -r   {:.2}   (one filesystem: the default)",
        rate(linked) / rate(cp)
    );
    Ok(())
}

/// Binlog-like files totalling about `total` bytes, under the backup's layout.
fn write_files(backup_dir: &FsPath, total: u64) -> anyhow::Result<Vec<BackupFile>> {
    let sizes = [
        4 * MIB,
        4 * MIB,
        4 * MIB,
        4 * MIB,
        40 * MIB,
        64 << 10,
        64 << 10,
        4 << 10,
        4 << 10,
    ];
    let mut files = Vec::new();
    let mut written = 0;
    let mut i = 0u64;
    while written < total {
        let size = sizes[(i % sizes.len() as u64) as usize];
        let path = format!(
            "binlogs/insert_log/1/2/{}/{}/{}/{}",
            i / 40,
            i / 40,
            100 + i % 4,
            10_000 + i
        );
        let full = backup_dir.join(&path);
        std::fs::create_dir_all(full.parent().context("file has a parent")?)?;
        let data: Vec<u8> = (0..size)
            .map(|b| (b as u8).wrapping_mul(31).wrapping_add(i as u8))
            .collect();
        std::fs::write(&full, data)?;
        files.push(BackupFile {
            path,
            size,
            source: None,
            written: None,
        });
        written += size;
        i += 1;
    }
    Ok(files)
}

fn sync() -> anyhow::Result<()> {
    ensure!(Command::new("sync").status()?.success(), "sync failed");
    Ok(())
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}
