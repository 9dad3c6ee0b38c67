//! Runs one scenario: builds its world, starts lockstep, applies the schedule's faults at
//! their moments, heals every fault, brings a killed host back until the restore finished,
//! then hands what the run left to the checker.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use lockstep::engine::Report;
use lockstep::engine::faults::Bug;
use lockstep::journal::embedded::FileJournal;
use lockstep::journal::etcd::{EtcdJournal, EtcdLocation};
use lockstep::journal::{Journal, Outcome, RestoreRecord};
use milvus_sim::control::DeleteObjects;
use milvus_sim::faults::{JobFailure, JobSelector, ShortImport};
use tokio::time::Instant;

use super::checker::{self, Ending, Evidence, ProcessRun, Resubmission, Violation};
use super::schedule::{CheckBehaviour, Fault, JournalKind, Resume, Scenario};
use super::trace::{RunnerLog, Trace};
use crate::{Running, TARGET, World, WorldSpec, plugin, secondary};

/// How many times a host that did not finish is brought back before the run gives up.
const RESUMES: usize = 5;

/// What the runner needs besides the scenario.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// A bug every lockstep process plants (`LOCKSTEP_PLANT`), for the runner's own tests.
    pub plant: Option<Bug>,
    /// `host:port` of the etcd that `JournalKind::Etcd` scenarios use.
    pub etcd: Option<String>,
    /// A compile cache every world shares, so the check is compiled once per build.
    pub plugin_cache: PathBuf,
}

impl RunnerConfig {
    /// From the environment: etcd from `LOCKSTEP_TEST_ETCD`, the cache next to lockstep.
    pub fn from_env(plant: Option<Bug>) -> RunnerConfig {
        let etcd = std::env::var("LOCKSTEP_TEST_ETCD").ok().map(|url| {
            url.trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned()
        });
        let plugin_cache = crate::lockstep_bin()
            .parent()
            .expect("the lockstep binary is in a folder")
            .join("faults-plugin-cache");
        RunnerConfig {
            plant,
            etcd,
            plugin_cache,
        }
    }
}

/// What one seed's run found.
pub struct SeedRun {
    pub violations: Vec<Violation>,
    pub trace: Trace,
    /// Faults applied, by kind (a fault whose control call failed is not counted).
    pub injected: BTreeMap<&'static str, usize>,
    /// The outcome of the last report the main line printed.
    pub outcome: Option<Outcome>,
}

/// A lockstep process the runner started.
struct Process {
    name: String,
    running: Running,
    killed: bool,
    crash_point: bool,
}

impl Process {
    async fn finish(self, log: &mut RunnerLog) -> anyhow::Result<ProcessRun> {
        let result = self
            .running
            .finish()
            .await
            .with_context(|| format!("{} did not end", self.name))?;
        let report: Option<Report> = serde_json::from_value(result.report.clone()).ok();
        let ending = if self.killed {
            Ending::Killed
        } else if self.crash_point && report.is_none() {
            Ending::CrashPoint
        } else {
            Ending::Finished
        };
        log.note(format!(
            "{} ended {ending:?}, exit {}{}",
            self.name,
            result.code,
            report.as_ref().map_or(String::new(), |r| format!(
                ", {:?}: {}",
                r.outcome, r.summary
            ))
        ));
        Ok(ProcessRun {
            name: self.name,
            ending,
            code: result.code,
            report,
        })
    }
}

/// One scenario's world and the runner's record of it.
struct Run<'a> {
    scenario: &'a Scenario,
    config: &'a RunnerConfig,
    world: World,
    job: String,
    journal: Option<String>,
    log: RunnerLog,
    processes: Vec<ProcessRun>,
    injected: BTreeMap<&'static str, usize>,
    started: usize,
}

impl Run<'_> {
    fn start(&mut self, verb: &str, crash_at: Option<&str>) -> anyhow::Result<Process> {
        self.started += 1;
        let name = format!("{verb}#{}", self.started);
        let mut args: Vec<&str> = Vec::new();
        if let Some(journal) = &self.journal {
            args.extend(["--journal", journal.as_str()]);
        }
        match verb {
            "recover" => args.push("recover"),
            _ => args.extend(["run", self.job.as_str()]),
        }
        let mut env = Vec::new();
        if let Some(bug) = self.config.plant {
            env.push(("LOCKSTEP_PLANT", bug.name()));
        }
        if let Some(point) = crash_at {
            env.push(("LOCKSTEP_CRASH_AT", point));
        }
        let running = self.world.spawn(&args, &env)?;
        self.log.note(format!(
            "started {name}: lockstep {}{}",
            args.join(" "),
            crash_at.map_or(String::new(), |p| format!(" (crash at {p})"))
        ));
        Ok(Process {
            name,
            running,
            killed: false,
            crash_point: crash_at.is_some(),
        })
    }

    fn resume_verb(&self) -> &'static str {
        match self.scenario.resume {
            Resume::Recover => "recover",
            Resume::RunAgain => "run",
        }
    }

    /// Applies one fault; `main` and `race` are the processes it may act on.
    async fn apply(
        &mut self,
        fault: &Fault,
        main: &mut Option<Process>,
        race: &mut Option<Process>,
        resumes: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> anyhow::Result<()> {
        let control = |end: &str| self.world.sim.cluster(end).control();
        let applied: Result<(), String> = match fault {
            Fault::StreamLag { to, lag_ms } => control(TARGET)
                .set_stream_lag(to, Duration::from_millis(*lag_ms))
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
            Fault::StreamPause { to, for_ms } => {
                let target = control(TARGET);
                let paused = target.pause_stream(to).await.map(drop);
                let to = to.clone();
                let for_ms = *for_ms;
                resumes.push(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(for_ms)).await;
                    // A pause is an outage that ends: it must end even when the target is
                    // restarting just then (seed 53164 lost its resume to a restart, and the
                    // restore waited on s3 for ever). The heal comes only after the restore.
                    let until = Instant::now() + Duration::from_secs(60);
                    while target.resume_stream(&to).await.is_err() && Instant::now() < until {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }));
                paused.map_err(|e| e.to_string())
            }
            Fault::JobFails { end, nth, state } => control(end)
                .fail_job(&JobFailure {
                    job: JobSelector::Nth(*nth),
                    state: *state,
                    reason: format!("injected failure at {state:?}"),
                })
                .await
                .map_err(|e| e.to_string()),
            Fault::ShortImport { end, nth, rows } => control(end)
                .short_import(&ShortImport {
                    job: JobSelector::Nth(*nth),
                    rows: *rows,
                })
                .await
                .map_err(|e| e.to_string()),
            Fault::Api {
                end,
                face,
                effect,
                for_ms,
            } => control(end)
                .api_fault(*face, *effect, Duration::from_millis(*for_ms))
                .await
                .map_err(|e| e.to_string()),
            Fault::DeleteStaged { end } => control(end)
                .delete_objects(&DeleteObjects::Prefix(
                    lockstep::storage::STAGING_ROOT.to_owned(),
                ))
                .await
                .map(|n| {
                    self.log
                        .note(format!("deleted {n} staged objects on {end}"))
                })
                .map_err(|e| e.to_string()),
            Fault::Restart { end, down_ms } => control(end)
                .restart(Duration::from_millis(*down_ms))
                .await
                .map_err(|e| e.to_string()),
            Fault::KillHost => {
                let running = match main.as_mut() {
                    Some(p) => p.running.is_running()?,
                    None => false,
                };
                match main.take() {
                    Some(mut p) if running => {
                        p.running.kill()?;
                        p.killed = true;
                        let run = p.finish(&mut self.log).await?;
                        self.processes.push(run);
                        *main = Some(self.start(self.resume_verb(), None)?);
                        Ok(())
                    }
                    other => {
                        *main = other;
                        Err("no lockstep process was running".into())
                    }
                }
            }
            Fault::RaceHost => {
                if race.is_some() {
                    Err("a second host already runs".into())
                } else {
                    *race = Some(self.start("race", None)?);
                    Ok(())
                }
            }
        };
        match applied {
            Ok(()) => {
                *self.injected.entry(fault.kind()).or_default() += 1;
                self.log.note(format!("fault {fault:?}"));
            }
            Err(why) => self.log.note(format!("fault {fault:?} not applied: {why}")),
        }
        Ok(())
    }

    /// Undoes every fault: API faults and pending job failures cleared, every end up, every
    /// stream flowing at the base lag.
    async fn heal(&mut self) -> anyhow::Result<()> {
        for end in self.world.ends() {
            let control = self.world.sim.cluster(&end).control();
            // A restart answers before its port closes (20 ms later): an end restarted just
            // before the heal can look up and then go down, so the clear is retried once it
            // is back.
            let mut tries = 0;
            loop {
                control
                    .wait_ready(Duration::from_secs(30))
                    .await
                    .with_context(|| format!("{end} did not come back"))?;
                match control.clear_faults().await {
                    Ok(()) => break,
                    Err(_) if tries < 3 => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => return Err(e).with_context(|| format!("clearing faults on {end}")),
                }
            }
        }
        let target = self.world.sim.cluster(TARGET).control();
        for i in 0..self.scenario.secondaries {
            let to = secondary(i);
            target
                .resume_stream(&to)
                .await
                .with_context(|| format!("resuming the stream to {to}"))?;
            target
                .set_stream_lag(&to, WorldSpec::default().stream_lag)
                .await
                .with_context(|| format!("resetting the lag to {to}"))?;
        }
        self.log.note("healed every fault");
        Ok(())
    }

    async fn records(&self) -> anyhow::Result<Vec<RestoreRecord>> {
        let records = match &self.journal {
            Some(url) => {
                let location = EtcdLocation::parse(url)?;
                EtcdJournal::connect(&location).await?.list().await?
            }
            None => FileJournal::open(&self.world.path("state"))?.list().await?,
        };
        Ok(records)
    }
}

/// Whether a main-line process left the restore finished: it printed a final report, or
/// (`recover`) found nothing to resume.
fn finished(p: &ProcessRun) -> bool {
    p.ending == Ending::Finished
        && p.report
            .as_ref()
            .is_none_or(|r| r.outcome != Outcome::Incomplete)
}

/// The `[two_phase]` and `[[check]]` tables of the scenario's job.
fn job_tables(s: &Scenario) -> anyhow::Result<String> {
    let mut text = format!(
        "[two_phase]\natomicity = \"{}\"\nmirror_grace = \"{}ms\"\n",
        s.atomicity.name(),
        s.mirror_grace_ms
    );
    if let Some(check) = s.check {
        text.push_str(&format!(
            "\n[[check]]\nplugin = \"{}\"\nphase = \"{}\"\nconfig = {{ behaviour = \"{}\" }}\n\
             limits = {{ cpu_ms = 200, memory_mib = 16 }}\n",
            plugin("test-guest")?.display(),
            check.phase.name(),
            check.behaviour.config()
        ));
    }
    Ok(text)
}

/// Runs `scenario` start to end and checks what it left.
pub async fn run_seed(scenario: &Scenario, config: &RunnerConfig) -> anyhow::Result<SeedRun> {
    let world = World::start(scenario.world_spec()).await?;
    let mut injected = BTreeMap::new();
    if let Some(check) = scenario.check {
        world.share_plugin_cache(&config.plugin_cache)?;
        *injected
            .entry(match check.behaviour {
                CheckBehaviour::Pass => "check-passes",
                CheckBehaviour::Trap => "check-traps",
                CheckBehaviour::LoopForever => "check-loops",
                CheckBehaviour::Allocate => "check-outgrows-memory",
            })
            .or_default() += 1;
    }
    if scenario.crash_at.is_some() {
        *injected.entry("crash-point").or_default() += 1;
    }
    let job = world.job("faults", &job_tables(scenario)?)?;
    let journal = match (scenario.journal, &config.etcd) {
        (JournalKind::Etcd, Some(etcd)) => Some(format!(
            "etcd://{etcd}/lockstep-faults/{}-{}?lease_ttl=2",
            scenario.seed,
            super::trace::now_ms()
        )),
        (JournalKind::Etcd, None) => anyhow::bail!(
            "seed {} uses etcd, but LOCKSTEP_TEST_ETCD is not set",
            scenario.seed
        ),
        (JournalKind::Embedded, _) => None,
    };
    let mut run = Run {
        scenario,
        config,
        job: job.to_str().context("the job path is UTF-8")?.to_owned(),
        world,
        journal,
        log: RunnerLog::default(),
        processes: Vec::new(),
        injected,
        started: 0,
    };

    let t0 = Instant::now();
    let mut main = Some(run.start("run", scenario.crash_at)?);
    let mut race = None;
    let mut resumes = Vec::new();
    for t in &scenario.schedule {
        tokio::time::sleep_until(t0 + Duration::from_millis(t.at_ms)).await;
        run.apply(&t.fault, &mut main, &mut race, &mut resumes)
            .await?;
    }
    if let Some(p) = race.take() {
        let ended = p.finish(&mut run.log).await?;
        run.processes.push(ended);
    }
    let mut last = match main.take() {
        Some(p) => p.finish(&mut run.log).await?,
        None => anyhow::bail!("the main line has no process"),
    };
    for handle in resumes {
        handle.abort();
    }
    run.heal().await?;

    let mut tries = 0;
    while !finished(&last) {
        anyhow::ensure!(
            tries < RESUMES,
            "the restore did not finish after {RESUMES} resumes"
        );
        tries += 1;
        run.processes.push(last);
        if tries > 1 {
            // An etcd claim outlives a killed host by its lease.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let p = run.start(run.resume_verb(), None)?;
        last = p.finish(&mut run.log).await?;
    }
    let outcome = last.report.as_ref().map(|r| r.outcome);
    let first_restore_id = last.report.as_ref().map(|r| r.restore_id.clone());
    run.processes.push(last);

    // Mirrors settle: an abort or commit may still be travelling a lagging stream.
    let settle_until = Instant::now() + run.scenario.longest_lag() + Duration::from_secs(3);
    let mut ends = run.world.snapshots().await?;
    while !checker::nothing_held(&ends).is_empty() && Instant::now() < settle_until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        ends = run.world.snapshots().await?;
    }

    // Invariant 5: the same content again is a no-op once it committed.
    let resubmission = match (outcome, first_restore_id) {
        (Some(Outcome::Succeeded | Outcome::Diverged), Some(first_restore_id)) => {
            let creates_before = ends[0].1.requests_to("import/create").len();
            let p = run.start("resubmit", None)?;
            let resubmitted = p.finish(&mut run.log).await?;
            let creates_after = run.world.requests(TARGET, "import/create").await?;
            Some(Resubmission {
                first_restore_id,
                run: resubmitted,
                creates_before,
                creates_after,
            })
        }
        _ => None,
    };

    let records = run.records().await?;
    let misbehaving_check = scenario
        .check
        .is_some_and(|c| c.behaviour != CheckBehaviour::Pass);
    let violations = checker::check(&Evidence {
        ends: &ends,
        records: &records,
        processes: &run.processes,
        backup: &run.world.backup,
        misbehaving_check,
        resubmission: resubmission.as_ref(),
    });
    let trace = Trace::build(&run.log, &ends);
    Ok(SeedRun {
        violations,
        trace,
        injected: run.injected,
        outcome,
    })
}
