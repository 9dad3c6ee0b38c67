//! Staging throughput on local files against `cp -r` of the same files in the same run
//! (DESIGN.md §6: staging ≥ 0.9 of `cp -r`).
//!
//! `cargo bench -p lockstep --bench staging [-- MIB]` writes MIB (default 320) of binlog-like
//! files (mostly 4 MiB, some 40 MiB that take the multipart path, some 64 KiB), then, for
//! each of three rounds, copies them with `cp -r` and stages them with `storage::stage`
//! into another directory, and prints the median throughputs and their ratio.
//!
//! Staging fsyncs what it writes (resume trusts staged sizes), `cp -r` does not; so the
//! bench also times `cp -r` followed by `sync`, the like-for-like durable copy.

use std::path::Path as FsPath;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use lockstep::job::StorageSpec;
use lockstep::journal::RestoreId;
use lockstep::storage::{
    BackupFile, Destination, StageOptions, StageSource, StagingPrefix, Transfer, open, stage,
};
use object_store::path::Path;

const ROUNDS: usize = 3;
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
    let (mut cp, mut cp_sync, mut staged) = (Vec::new(), Vec::new(), Vec::new());
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

        let target = open(&StorageSpec::local(
            &work.path().join(format!("stage-{round}")),
        )?)?;
        let prefix = StagingPrefix::for_restore(&RestoreId(format!("bench-{round}")))?;
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
            StageOptions::default(),
            &|_| {},
        ))?;
        staged.push(started.elapsed());
        ensure!(
            result.iter().all(|f| f.transfer == Transfer::Streamed),
            "expected streamed copies"
        );
        sync()?;
        std::fs::remove_dir_all(&cp_dir)?;
        std::fs::remove_dir_all(work.path().join(format!("stage-{round}")))?;
    }

    let rate = |d: Duration| bytes as f64 / MIB as f64 / d.as_secs_f64();
    let (cp, cp_sync, staged) = (median(cp), median(cp_sync), median(staged));
    println!(
        "staging bench: {} files, {:.0} MiB, median of {ROUNDS} rounds",
        files.len(),
        bytes as f64 / MIB as f64
    );
    println!(
        "  cp -r           {:>8.1} MiB/s  ({:.3} s)",
        rate(cp),
        cp.as_secs_f64()
    );
    println!(
        "  cp -r; sync     {:>8.1} MiB/s  ({:.3} s)",
        rate(cp_sync),
        cp_sync.as_secs_f64()
    );
    println!(
        "  storage::stage  {:>8.1} MiB/s  ({:.3} s, fsync, verified)",
        rate(staged),
        staged.as_secs_f64()
    );
    println!(
        "  ratio stage / cp -r         {:.2}",
        rate(staged) / rate(cp)
    );
    println!(
        "  ratio stage / (cp -r; sync) {:.2}",
        rate(staged) / rate(cp_sync)
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
        files.push(BackupFile { path, size });
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
