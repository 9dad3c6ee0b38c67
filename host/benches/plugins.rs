//! Check-runtime figures against DESIGN.md §6: per-call time of a trivial
//! Rust check and of the Python check (median, p99), cold load of a cached
//! component, and first compile. Run by hand after `plugins/build.sh`:
//!
//! ```text
//! cargo bench -p lockstep --bench plugins
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use lockstep::plugins::{
    Allocation, CheckContext, CheckEnd, CheckGrants, CheckHost, CheckLimits, Clock, EndRole, Phase,
    Plugin, PluginRuntime, RuntimeConfig, StoreCheckHost, Verdict,
};

/// DESIGN.md §6 targets.
const CALL_MEDIAN_TARGET: Duration = Duration::from_micros(100);
const CACHED_LOAD_TARGET: Duration = Duration::from_millis(20);

fn plugin_path(name: &str) -> Result<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/dist")
        .join(format!("{name}.wasm"));
    ensure!(
        path.exists(),
        "{} is missing: run plugins/build.sh first",
        path.display()
    );
    Ok(path)
}

fn context() -> CheckContext {
    let end = |name: &str, role| CheckEnd {
        name: name.into(),
        uri: format!("http://{name}:19530"),
        role,
    };
    CheckContext {
        restore_id: "bench".into(),
        backup_name: "nightly".into(),
        phase: Phase::BeforeCommit,
        target: end("prod-a", EndRole::Target),
        secondaries: vec![end("prod-b", EndRole::Secondary)],
        collections: Vec::new(),
        jobs: Vec::new(),
    }
}

struct Stats {
    median: Duration,
    p99: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Stats {
        median: at(0.5),
        p99: at(0.99),
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "meets target" } else { "MISSES target" }
}

async fn time_calls(
    plugin: &Plugin,
    config: &BTreeMap<String, String>,
    grants: &CheckGrants,
    host: &Arc<dyn CheckHost>,
    calls: usize,
) -> Result<Stats> {
    let ctx = context();
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls + calls / 10 {
        let started = Instant::now();
        let run = plugin.check(&ctx, config, grants, Arc::clone(host)).await;
        samples.push(started.elapsed());
        ensure!(
            run.outcome == Ok(Verdict::Pass),
            "{}: {:?}",
            plugin.name(),
            run.outcome
        );
    }
    // The first tenth warms caches and the pool; drop it.
    Ok(stats(samples.split_off(calls / 10)))
}

async fn bench(allocation: Allocation) -> Result<()> {
    let cache = tempfile::tempdir()?;
    let runtime = PluginRuntime::with_config(RuntimeConfig {
        allocation,
        ..RuntimeConfig::new(cache.path())
    })?;
    println!(
        "\n== allocation: {:?} (asked for {allocation:?})",
        runtime.allocation()
    );
    let host: Arc<dyn CheckHost> =
        Arc::new(StoreCheckHost::new(BTreeMap::new(), Default::default()));

    for (name, config, grants, calls) in [
        (
            "test-guest",
            BTreeMap::from([("behaviour".to_owned(), "pass".to_owned())]),
            CheckGrants::default(),
            5_000,
        ),
        (
            "change-window",
            BTreeMap::from([("windows".to_owned(), "* 00:00-24:00".to_owned())]),
            CheckGrants {
                clock: Clock::Fixed("2026-11-26T10:00:00Z".parse()?),
                ..CheckGrants::default()
            },
            300,
        ),
    ] {
        let path = plugin_path(name)?;
        let started = Instant::now();
        let plugin = runtime.load(&path, CheckLimits::default()).await?;
        let first = started.elapsed();
        println!(
            "{name}: first compile + load {first:.2?} ({:?})",
            plugin.cache_outcome()
        );

        let mut loads = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let plugin = runtime.load(&path, CheckLimits::default()).await?;
            loads.push(started.elapsed());
            ensure!(
                *plugin.cache_outcome() == lockstep::plugins::CacheOutcome::Hit,
                "{name}: expected a cache hit"
            );
        }
        let load = stats(loads);
        println!(
            "{name}: cold load from the compile cache: median {:.2?}, p99 {:.2?} (target ≤ {CACHED_LOAD_TARGET:?}: {})",
            load.median,
            load.p99,
            verdict(load.median <= CACHED_LOAD_TARGET)
        );

        let call = time_calls(&plugin, &config, &grants, &host, calls)
            .await
            .with_context(|| format!("calling {name}"))?;
        println!(
            "{name}: per call (fresh store + instantiate + check): median {:.1?}, p99 {:.1?} (trivial-check target ≤ {CALL_MEDIAN_TARGET:?}: {})",
            call.median,
            call.p99,
            verdict(call.median <= CALL_MEDIAN_TARGET)
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    bench(Allocation::PoolingIfAvailable).await?;
    bench(Allocation::OnDemand).await?;
    Ok(())
}
