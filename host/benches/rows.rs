//! What reading a backup's data costs preflight (issue 27): every segment's primary keys and
//! timestamps, every delete, and the L0 deletes folded, against reading and planning the same
//! backup from its meta alone (the baseline), in the same run.
//!
//! `cargo bench -p lockstep --bench rows [-- COLLECTIONS]` generates a backup of COLLECTIONS
//! (default 100) collections × 4 partitions × 2 segments of 1,000 rows, with delete logs and
//! L0 segments, in a local directory; then, for five rounds, times `backup::read` +
//! `backup::plan` (the baseline), and the baseline followed by `rows::count` with L0 imported
//! and with L0 folded. It prints the medians, the cost per segment, and the peak RSS after
//! the baseline and after counting, so that the memory counting adds shows.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use lockstep::backup::{self, BackupLocation, L0Route, RestoreOptions, Strategy};
use lockstep::config::StorageSpec;
use milvus_sim::fixtures::{BackupSpec, L0Segments, generate};
use object_store::path::Path;

const ROUNDS: usize = 5;

fn main() -> anyhow::Result<()> {
    let collections: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100);
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).context("work dir")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let spec = BackupSpec {
        name: "bench".into(),
        collections,
        partitions: 4,
        segments_per_partition: 2,
        rows_per_segment: 1_000,
        binlogs_per_field: 1,
        deletes_per_segment: 20,
        l0_segments: L0Segments::Present,
        dim: 8,
        ..BackupSpec::default()
    };
    let storage = lockstep::storage::open(&StorageSpec::local(work.path())?)?;
    let generated = runtime.block_on(generate(
        &spec,
        storage.store.clone(),
        &Path::from("backup"),
    ))?;
    let segments = (collections * 4 * 2) as f64;
    println!(
        "backup: {collections} collections × 4 partitions × 2 segments of 1,000 rows, {} log objects, {} bytes",
        generated.logs.len(),
        generated.log_bytes()
    );

    let location = BackupLocation::new("file://bench", "backup", "bench");
    let store = storage.store.as_ref();
    let planned = || async {
        let read = backup::read(store, &location).await?;
        let plan = backup::plan(&read, &RestoreOptions::default(), Strategy::Merged)?;
        anyhow::Ok((read, plan))
    };
    let mut base = Vec::new();
    let mut times = [Vec::new(), Vec::new()];
    let mut peak_base = 0;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        runtime.block_on(planned())?;
        base.push(started.elapsed());
        peak_base = peak_base.max(peak_rss_kib());
        for (i, route) in [L0Route::Import, L0Route::Fold].into_iter().enumerate() {
            let started = Instant::now();
            runtime.block_on(async {
                let (read, mut plan) = planned().await?;
                let counted = backup::rows::count(store, &read, &mut plan, route).await;
                anyhow::ensure!(
                    counted.unreadable.is_empty() && counted.disagreements.is_empty(),
                    "the generated backup reads: {counted:?}"
                );
                let live: i64 = plan
                    .collections
                    .iter()
                    .filter_map(|c| c.rows.as_ref())
                    .map(|r| r.live)
                    .sum();
                anyhow::ensure!(live == generated.live_total() as i64, "live rows {live}");
                Ok(())
            })?;
            times[i].push(started.elapsed());
        }
    }
    let peak_counted = peak_rss_kib();
    let base = median(base);
    println!("read + plan (baseline)          {:>9.1} ms", ms(base));
    for (name, t) in ["+ exact rows, L0 imported", "+ exact rows, L0 folded"]
        .iter()
        .zip(times)
    {
        let t = median(t);
        println!(
            "{name:<32}{:>9.1} ms   counting {:>8.1} ms, {:.3} ms a segment, {:.2}× the baseline",
            ms(t),
            ms(t.saturating_sub(base)),
            ms(t.saturating_sub(base)) / segments,
            t.as_secs_f64() / base.as_secs_f64()
        );
    }
    println!("peak RSS: {peak_base} KiB after the baseline, {peak_counted} KiB after counting");
    Ok(())
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The process's peak resident set so far, in KiB (`VmHWM` of /proc/self/status).
fn peak_rss_kib() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(-1)
}
