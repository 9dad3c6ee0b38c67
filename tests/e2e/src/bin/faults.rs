//! `faults`: runs seeded fault schedules over whole restores and checks DESIGN.md §2 after
//! each (issue 6).
//!
//! ```text
//! cargo run -p e2e --bin faults -- --seeds 1..60      # seeds 1 to 59
//! cargo run -p e2e --bin faults -- --seed 17 --verbose  # replay one seed, trace included
//! cargo run -p e2e --bin faults -- --fleet --seeds 1..1001 --parallel 4
//! ```
//!
//! `--fleet` draws fleet scenarios (`Scenario::draw_fleet`): the etcd journal, and in each a
//! host paused past its lease and woken later, a host killed while it takes a restore over,
//! or etcd killed and started again. Etcd scenarios need the `etcd` binary on `PATH`; under
//! `CI=true` a missing one is an error rather than fewer scenarios.
//!
//! A violation prints the seed, its scenario and the event trace; the exit code is 1 when
//! any seed broke an invariant or could not run, 0 otherwise.

use std::collections::BTreeMap;
use std::ops::Range;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use e2e::faults::runner::{RunnerConfig, SeedRun, run_seed};
use e2e::faults::schedule::Scenario;

const USAGE: &str = "usage: faults (--seeds A..B | --seed N) [--fleet] [--parallel N] [--verbose]";

struct Args {
    seeds: Range<u64>,
    fleet: bool,
    parallel: usize,
    verbose: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut seeds = None;
    let mut parallel = 1;
    let mut verbose = false;
    let mut fleet = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .with_context(|| format!("{arg} needs a value; {USAGE}"))
        };
        match arg.as_str() {
            "--seeds" => {
                let v = value()?;
                let (a, b) = v
                    .split_once("..")
                    .with_context(|| format!("--seeds {v}: expected A..B; {USAGE}"))?;
                let a: u64 = a.parse().with_context(|| format!("--seeds {v}"))?;
                let b: u64 = b.parse().with_context(|| format!("--seeds {v}"))?;
                if b <= a {
                    bail!("--seeds {v}: the range is empty");
                }
                seeds = Some(a..b);
            }
            "--seed" => {
                let v = value()?;
                let n: u64 = v.parse().with_context(|| format!("--seed {v}"))?;
                seeds = Some(n..n + 1);
            }
            "--parallel" => {
                let v = value()?;
                parallel = v.parse().with_context(|| format!("--parallel {v}"))?;
                if parallel == 0 {
                    bail!("--parallel must be at least 1");
                }
            }
            "--verbose" => verbose = true,
            "--fleet" => fleet = true,
            other => bail!("unknown argument {other}; {USAGE}"),
        }
    }
    Ok(Args {
        seeds: seeds.with_context(|| USAGE.to_string())?,
        fleet,
        parallel,
        verbose,
    })
}

/// What the whole batch saw.
#[derive(Default)]
struct Summary {
    /// The seeds are fleet seeds (`--fleet`), which a replay must say too.
    fleet: bool,
    runs: usize,
    outcomes: BTreeMap<String, usize>,
    injected: BTreeMap<&'static str, usize>,
    violations: BTreeMap<String, usize>,
    failed_seeds: Vec<u64>,
    errors: Vec<(u64, String)>,
}

impl Summary {
    fn add(
        &mut self,
        seed: u64,
        scenario: &Scenario,
        result: anyhow::Result<SeedRun>,
        verbose: bool,
    ) {
        self.runs += 1;
        let run = match result {
            Ok(run) => run,
            Err(e) => {
                println!("seed {seed}: the runner could not finish it: {e:#}\n{scenario}");
                self.errors.push((seed, format!("{e:#}")));
                return;
            }
        };
        let outcome = run
            .outcome
            .map_or("no report".to_string(), |o| format!("{o:?}"));
        *self.outcomes.entry(outcome.clone()).or_default() += 1;
        for (kind, n) in &run.injected {
            *self.injected.entry(kind).or_default() += n;
        }
        if run.violations.is_empty() {
            if verbose {
                println!("seed {seed}: ok ({outcome})\n{scenario}\n{}", run.trace);
            } else {
                println!(
                    "seed {seed}: ok ({outcome}, {} faults)",
                    scenario.schedule.len()
                );
            }
            return;
        }
        self.failed_seeds.push(seed);
        println!(
            "seed {seed}: {} VIOLATION(S) ({outcome})",
            run.violations.len()
        );
        for v in &run.violations {
            println!("  {v}");
            let kind = format!("{v:?}");
            let kind = kind.split([' ', '{']).next().unwrap_or("?").to_owned();
            *self.violations.entry(kind).or_default() += 1;
        }
        println!(
            "{scenario}replay: cargo run -p e2e --bin faults -- --seed {seed}{} --verbose\nevent trace:\n{}",
            if self.fleet { " --fleet" } else { "" },
            run.trace
        );
    }

    fn print(&self) {
        println!("\n== {} runs", self.runs);
        println!("outcomes: {:?}", self.outcomes);
        println!("faults injected by kind:");
        for (kind, n) in &self.injected {
            println!("  {kind:<24} {n}");
        }
        let total: usize = self.violations.values().sum();
        println!(
            "violations: {total} in {} seed(s) {:?}",
            self.failed_seeds.len(),
            self.failed_seeds
        );
        for (kind, n) in &self.violations {
            println!("  {kind:<24} {n}");
        }
        if !self.errors.is_empty() {
            println!(
                "seeds the runner could not finish: {:?}",
                self.errors.iter().map(|(s, _)| s).collect::<Vec<_>>()
            );
        }
    }

    fn ok(&self) -> bool {
        self.failed_seeds.is_empty() && self.errors.is_empty()
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::from(2);
        }
    };
    let config = RunnerConfig::from_env(Vec::new());
    let etcd = config.etcd.is_some();
    if !etcd && (args.fleet || std::env::var("CI").is_ok_and(|v| v == "true")) {
        eprintln!("faults: no etcd binary on PATH; the etcd and fleet scenarios need one");
        return ExitCode::from(2);
    }
    let fleet = args.fleet;
    let mut summary = Summary {
        fleet,
        ..Summary::default()
    };
    let mut seeds = args.seeds.clone();
    let mut running = tokio::task::JoinSet::new();
    loop {
        while running.len() < args.parallel
            && let Some(seed) = seeds.next()
        {
            let config = config.clone();
            running.spawn(async move {
                let scenario = if fleet {
                    Scenario::draw_fleet(seed)
                } else {
                    Scenario::draw(seed, etcd)
                };
                let result = run_seed(&scenario, &config).await;
                (seed, scenario, result)
            });
        }
        let Some(done) = running.join_next().await else {
            break;
        };
        match done {
            Ok((seed, scenario, result)) => summary.add(seed, &scenario, result, args.verbose),
            Err(e) => {
                eprintln!("a seed's task failed: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    summary.print();
    if summary.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
