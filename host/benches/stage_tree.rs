//! What staging a large backup by hard link costs the kernel, against the shell doing the
//! same in the same run (issue 30: a ratio ≤ 1.0 in system CPU and in wall time).
//!
//! `cargo bench -p lockstep --bench stage_tree [-- COLLECTIONS]` writes the binlog tree of a
//! backup of COLLECTIONS (default 1,000) collections × 4 partitions × one segment of 10
//! fields, a small file each (40,000 files in 49,000 directories, as Milvus lays them out),
//! then alternates, five rounds each:
//! - `cp -al` of the tree, then `rm -rf` of the copy;
//! - `storage::stage` of every file (hard links, on one filesystem), then `cleanup` with the
//!   staged names (what a restore does);
//! - the same stage, then `cleanup` walking the prefix (what a recovery does, with no plan).
//!
//! System and user CPU are read from `/proc/self/stat`: the process's own for the stage
//! (its blocking threads do the file-system calls), and its waited-for children's for `cp`
//! and `rm`. Each part starts after a `sync`, and after dropping the kernel's caches where
//! this process may (as root): the page cache as well as the dentry and inode caches. The
//! cost of a walk grows with what the dentry cache holds; and on ext4 without a journal (as
//! this machine's disk is), making an inode skips, one by one, every free inode whose table
//! block is still cached and whose deletion is under 30 seconds old. Each part here follows
//! the removal of some 50,000 directories, so with that block cache kept, most of the
//! system time went to skipping the inodes the part before freed (in a profile at 300
//! collections, 69 % of the stage's and cleanup's samples and 78 % of `cp`'s were in ext4's
//! `recently_deleted`), and the figures depended on which part came after which.

use std::path::Path as FsPath;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use lockstep::backup::BackupFile;
use lockstep::config::StorageSpec;
use lockstep::journal::RestoreId;
use lockstep::storage::{
    Destination, StageOptions, StageSource, StagingPrefix, TempFiles, cleanup, open, stage,
};
use object_store::path::Path;

const ROUNDS: usize = 5;
const PARTITIONS: usize = 4;
const FIELDS: [i64; 10] = [0, 1, 100, 101, 102, 103, 104, 105, 106, 107];

/// CPU time so far, user and system, of this process and of its waited-for children.
#[derive(Clone, Copy, Default)]
struct Cpu {
    user: Duration,
    system: Duration,
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, rhs: Cpu) -> Cpu {
        Cpu {
            user: self.user.saturating_sub(rhs.user),
            system: self.system.saturating_sub(rhs.system),
        }
    }
}

/// `/proc/self/stat`'s utime and stime (fields 14 and 15), or cutime and cstime (16 and 17),
/// in the kernel's USER_HZ ticks (100 a second on Linux's usual targets).
fn cpu(children: bool) -> anyhow::Result<Cpu> {
    const TICK: Duration = Duration::from_millis(10);
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let after = stat.rsplit_once(')').context("a stat line")?.1;
    let mut fields = after
        .split_whitespace()
        .skip(if children { 13 } else { 11 });
    let mut ticks =
        || -> anyhow::Result<u32> { Ok(fields.next().context("a stat field")?.parse()?) };
    Ok(Cpu {
        user: TICK * ticks()?,
        system: TICK * ticks()?,
    })
}

/// One measured piece of work: wall time and the CPU it took.
#[derive(Clone, Copy)]
struct Cost {
    wall: Duration,
    cpu: Cpu,
}

fn measure(children: bool, work: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Cost> {
    let (before, started) = (cpu(children)?, Instant::now());
    work()?;
    Ok(Cost {
        wall: started.elapsed(),
        cpu: cpu(children)? - before,
    })
}

/// A quiet start for a part: nothing dirty, and the kernel's caches dropped where this
/// process may (the page cache too: see the module's doc).
fn settle() -> anyhow::Result<()> {
    ensure!(Command::new("sync").status()?.success(), "sync failed");
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    Ok(())
}

fn write_tree(backup_dir: &FsPath, collections: usize) -> anyhow::Result<Vec<BackupFile>> {
    let mut files = Vec::new();
    for c in 0..collections {
        for p in 0..PARTITIONS {
            let segment = format!(
                "binlogs/insert_log/{}/{}/{}",
                1000 + c,
                5000 + p,
                9000 + c * 8 + p
            );
            for field in FIELDS {
                let path = format!("{segment}/{field}/1");
                let at = backup_dir.join(&path);
                std::fs::create_dir_all(at.parent().context("a parent")?)?;
                std::fs::write(&at, [7u8; 512])?;
                files.push(BackupFile {
                    path,
                    size: 512,
                    source: None,
                    written: None,
                });
            }
        }
    }
    Ok(files)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let collections: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1000);
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).context("work dir")?;
    let source_dir = work.path().join("source");
    let backup_path = source_dir.join("backup/scale");
    let files = write_tree(&backup_path, collections)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let backup = open(&StorageSpec::local(&source_dir)?)?;
    let backup_dir = Path::from("backup/scale");
    let names: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();

    // One stage into `name` and its cleanup, by name or walking.
    let stage_and_clean = |name: &str, by_name: bool| -> anyhow::Result<(Cost, Cost)> {
        let target_dir = work.path().join(name);
        std::fs::create_dir_all(&target_dir)?;
        let target = open(&StorageSpec::local(&target_dir)?)?;
        let prefix = StagingPrefix::for_restore(RestoreId::new(name, "ab", 1).as_str());
        let destinations = [Destination {
            end: "target",
            store: &target,
        }];
        settle()?;
        let staged = measure(false, || {
            runtime.block_on(stage(
                StageSource {
                    store: &backup,
                    backup_dir: &backup_dir,
                },
                &files,
                &destinations,
                &prefix,
                StageOptions::default(),
                &|_| {},
                &|_| {},
                &tokio_util::sync::CancellationToken::new(),
            ))?;
            Ok(())
        })?;
        settle()?;
        let known: &[&str] = if by_name { &names } else { &[] };
        let cleaned = measure(false, || {
            let deleted =
                runtime.block_on(cleanup(&destinations, &prefix, TempFiles::Delete, known))?;
            ensure!(
                deleted == files.len() as u64,
                "deleted {deleted} of {}",
                files.len()
            );
            Ok(())
        })?;
        ensure!(
            !target_dir.join("lockstep-staging").exists(),
            "the prefix is gone"
        );
        Ok((staged, cleaned))
    };

    let mut rows: Vec<(&str, Vec<Cost>)> = vec![
        ("cp -al", Vec::new()),
        ("rm -rf", Vec::new()),
        ("stage, links", Vec::new()),
        ("cleanup by name", Vec::new()),
        ("stage, links (2)", Vec::new()),
        ("cleanup walking", Vec::new()),
    ];
    for round in 0..ROUNDS {
        let copy_dir = work.path().join(format!("cp-{round}"));
        settle()?;
        rows[0].1.push(measure(true, || {
            let status = Command::new("cp")
                .arg("-al")
                .arg(&backup_path)
                .arg(&copy_dir)
                .status()?;
            ensure!(status.success(), "cp -al failed: {status}");
            Ok(())
        })?);
        settle()?;
        rows[1].1.push(measure(true, || {
            let status = Command::new("rm").arg("-rf").arg(&copy_dir).status()?;
            ensure!(status.success(), "rm -rf failed: {status}");
            Ok(())
        })?);
        let (staged, cleaned) = stage_and_clean(&format!("named-{round}"), true)?;
        rows[2].1.push(staged);
        rows[3].1.push(cleaned);
        let (staged, cleaned) = stage_and_clean(&format!("walked-{round}"), false)?;
        rows[4].1.push(staged);
        rows[5].1.push(cleaned);
    }

    println!(
        "stage_tree: {} files in {collections} collections × {PARTITIONS} partitions × {} fields, medians of {ROUNDS} rounds",
        files.len(),
        FIELDS.len()
    );
    let medians: Vec<(f64, f64, f64)> = rows
        .iter()
        .map(|(_, costs)| {
            (
                median(costs.iter().map(|c| c.wall.as_secs_f64()).collect()),
                median(costs.iter().map(|c| c.cpu.system.as_secs_f64()).collect()),
                median(costs.iter().map(|c| c.cpu.user.as_secs_f64()).collect()),
            )
        })
        .collect();
    for ((name, _), (wall, system, user)) in rows.iter().zip(&medians) {
        println!("  {name:<18} wall {wall:6.2} s   system {system:6.2} s   user {user:6.2} s");
    }
    let sum = |a: usize, b: usize| (medians[a].0 + medians[b].0, medians[a].1 + medians[b].1);
    let shell = sum(0, 1);
    for (name, (a, b)) in [("by name", (2, 3)), ("walking", (4, 5))] {
        let ours = sum(a, b);
        println!(
            "  stage + cleanup {name} / cp -al + rm -rf: wall {:.2}, system {:.2}   (target ≤ 1.0)",
            ours.0 / shell.0,
            ours.1 / shell.1
        );
    }
    Ok(())
}
