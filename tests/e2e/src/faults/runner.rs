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
use milvus_proto::common::KeyValuePair;
use milvus_sim::Cluster;
use milvus_sim::catalog::{DdlOp, db_or_default};
use milvus_sim::control::DeleteObjects;
use milvus_sim::faults::{
    ChangedRow, JobFailure, JobSelector, LostAnswer, LostDelete, ShortImport,
};
use milvus_sim::jobs::JobState;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::checker::{self, Ending, Evidence, ProcessRun, Resubmission, Violation};
use super::schedule::{CheckBehaviour, Fault, JournalKind, Pause, Resume, Scenario};
use super::trace::{RunnerLog, Trace};
use crate::etcd::EtcdCluster;
use crate::relay::Relay;
use crate::{Running, TARGET, World, WorldSpec, plugin, secondary};

/// How many times a host that did not finish is brought back before the run gives up.
const RESUMES: usize = 5;

/// How long the other client of [`Fault::SchemaDdl`] waits for a held job of its collection
/// before it sends its DDL all the same.
const HELD_WITHIN: Duration = Duration::from_secs(10);

/// The claims' lease in every etcd scenario (`?lease_ttl=2`), and how long the runner waits
/// after a host stops renewing it before another host takes the restore over.
const LEASE: Duration = Duration::from_secs(2);
const PAST_THE_LEASE: Duration = Duration::from_millis(2_500);

/// The job's `completion_timeout` where an end's clock runs behind: were a commit stamped
/// below the backup's rows, its jobs would stay Committing for ever and the run with them.
/// Long beside what a healthy completion takes here, with every fault of a schedule.
const CLOCK_COMPLETION: Duration = Duration::from_secs(60);

/// What the runner needs besides the scenario.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Bugs every lockstep process plants (`LOCKSTEP_PLANT`), for the runner's own tests.
    pub plant: Vec<Bug>,
    /// The `etcd` binary: each `JournalKind::Etcd` scenario runs one of its own, which its
    /// faults may stop and start again.
    pub etcd: Option<PathBuf>,
    /// A compile cache every world shares, so the check is compiled once per build.
    pub plugin_cache: PathBuf,
}

impl RunnerConfig {
    /// From the environment: etcd from `PATH`, the cache next to lockstep.
    pub fn from_env(plant: Vec<Bug>) -> RunnerConfig {
        let etcd = crate::etcd::binary();
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
    /// Started with `LOCKSTEP_PAUSE_AT`: it may stop itself.
    pause_armed: bool,
    /// Its own way to each etcd member, when a partition may cut it off.
    relays: Vec<Relay>,
}

/// How a stale host was taken out of the fleet: stopped, or cut off from etcd while it
/// runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stall {
    Paused,
    Partitioned,
}

/// A host paused past its lease, and when it wakes (`None`: once the main line finished).
struct Stale {
    process: Process,
    how: Stall,
    wake_at: Option<Instant>,
    woken: bool,
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
    /// When the last restart applied has its end back up at the earliest: the sim answers
    /// a restart before its port closes, so a heal that only polled for readiness could
    /// see the end up, then have it go down under the checker (seed 37).
    restarted_until: Option<Instant>,
    /// The seed's own etcd, for `JournalKind::Etcd`.
    etcd: Option<EtcdCluster>,
    /// Hosts paused past their lease, in pause order.
    stale: Vec<Stale>,
    /// The jobs the restore creates, when every end's budget holds exactly those.
    restore_jobs: Option<u32>,
    /// Other clients' schema DDL, each waiting for a held job: the kind of its answer, and
    /// the answer.
    other_clients: Vec<JoinHandle<(&'static str, String)>>,
}

impl Run<'_> {
    fn start(
        &mut self,
        verb: &str,
        crash_at: Option<&str>,
        pause_at: Option<&str>,
    ) -> anyhow::Result<Process> {
        self.started += 1;
        let name = format!("{verb}#{}", self.started);
        let (journal, relays) = self.journal_for_a_host()?;
        let mut args: Vec<&str> = Vec::new();
        if let Some(journal) = &journal {
            args.extend(["--journal", journal.as_str()]);
        }
        match verb {
            "recover" => args.push("recover"),
            _ => args.extend(["run", self.job.as_str()]),
        }
        let plant = self
            .config
            .plant
            .iter()
            .map(|b| b.name())
            .collect::<Vec<_>>()
            .join(",");
        let mut env = Vec::new();
        if !plant.is_empty() {
            env.push(("LOCKSTEP_PLANT", plant.as_str()));
        }
        if let Some(point) = crash_at {
            env.push(("LOCKSTEP_CRASH_AT", point));
        }
        if let Some(point) = pause_at {
            env.push(("LOCKSTEP_PAUSE_AT", point));
        }
        let running = self.world.spawn(&args, &env)?;
        self.log.note(format!(
            "started {name}: lockstep {}{}{}",
            args.join(" "),
            crash_at.map_or(String::new(), |p| format!(" (crash at {p})")),
            pause_at.map_or(String::new(), |p| format!(" (pause at {p})"))
        ));
        Ok(Process {
            name,
            running,
            killed: false,
            crash_point: crash_at.is_some(),
            pause_armed: pause_at.is_some(),
            relays,
        })
    }

    /// The journal a new host is given, and the relays it reaches etcd through when a
    /// partition may cut it off (each host its own, so a cut hides one host).
    fn journal_for_a_host(&self) -> anyhow::Result<(Option<String>, Vec<Relay>)> {
        let (Some(journal), Some(etcd)) = (&self.journal, &self.etcd) else {
            return Ok((self.journal.clone(), Vec::new()));
        };
        if !self.scenario.partitions() {
            return Ok((Some(journal.clone()), Vec::new()));
        }
        let relays = (etcd.members.iter())
            .map(|member| Relay::start(&member.address()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let through = (relays.iter()).map(Relay::address).collect::<Vec<_>>();
        let journal = journal.replacen(&etcd.endpoints(), &through.join(","), 1);
        Ok((Some(journal), relays))
    }

    /// The main line's host is paused (by the runner or by itself): it stays paused past
    /// its lease, another host takes the job over from its job file, as a fleet's job-file
    /// loop does (and is killed during that, if `pause` says so), and the paused one waits
    /// for its wake.
    async fn stall_main(
        &mut self,
        pause: Pause,
        how: Stall,
        main: &mut Option<Process>,
    ) -> anyhow::Result<()> {
        let Some(mut stale) = main.take() else {
            anyhow::bail!("the main line has no process");
        };
        let paused_at = Instant::now();
        match how {
            Stall::Paused => {
                stale.running.pause()?;
                self.log.note(format!("{} paused", stale.name));
            }
            Stall::Partitioned => {
                stale.relays.iter().for_each(Relay::cut);
                self.log.note(format!("{} cut off from etcd", stale.name));
            }
        }
        tokio::time::sleep(PAST_THE_LEASE).await;
        let mut takeover = self.start("takeover", None, None)?;
        if let Some(after) = pause.kill_takeover_after_ms {
            tokio::time::sleep(Duration::from_millis(after)).await;
            if takeover.running.is_running()? {
                takeover.running.kill()?;
                takeover.killed = true;
            }
            let killed = takeover.finish(&mut self.log).await?;
            self.processes.push(killed);
            tokio::time::sleep(PAST_THE_LEASE).await;
            takeover = self.start("takeover", None, None)?;
        }
        *main = Some(takeover);
        self.stale.push(Stale {
            process: stale,
            how,
            wake_at: pause
                .wake_after_ms
                .map(|ms| paused_at + Duration::from_millis(ms)),
            woken: false,
        });
        Ok(())
    }

    /// Wakes every paused host whose time came (`all`: every one, waiting for those with a
    /// time still ahead).
    async fn wake(&mut self, all: bool) -> anyhow::Result<()> {
        for stale in &mut self.stale {
            if stale.woken {
                continue;
            }
            match stale.wake_at {
                Some(at) if all => tokio::time::sleep_until(at).await,
                Some(at) if at <= Instant::now() => {}
                Some(_) => continue,
                None if all => {}
                None => continue,
            }
            match stale.how {
                Stall::Paused => {
                    stale.process.running.wake()?;
                    self.log.note(format!("{} woken", stale.process.name));
                }
                Stall::Partitioned => {
                    stale.process.relays.iter().for_each(Relay::heal);
                    self.log
                        .note(format!("{} reaches etcd again", stale.process.name));
                }
            }
            stale.woken = true;
        }
        Ok(())
    }

    /// Whether a paused host still waits for a wake at a set time.
    fn wake_pending(&self) -> bool {
        self.stale.iter().any(|s| !s.woken && s.wake_at.is_some())
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
            Fault::LostDelete { end } => control(end)
                .lost_delete(&LostDelete::default())
                .await
                .map_err(|e| e.to_string()),
            Fault::ChangedRow { end } => control(end)
                .changed_row(&ChangedRow::default())
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
            // In the world since it started (`Scenario::world_spec`).
            Fault::L0ImportOn { .. } => Ok(()),
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
            Fault::Restart { end, down_ms } => {
                let down = Duration::from_millis(*down_ms);
                let restarted = control(end).restart(down).await.map_err(|e| e.to_string());
                if restarted.is_ok() {
                    // The port closes 20 ms after the answer; a margin beyond that.
                    let up = Instant::now() + down + Duration::from_millis(100);
                    self.restarted_until = self.restarted_until.max(Some(up));
                }
                restarted
            }
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
                        *main = Some(self.start(self.resume_verb(), None, None)?);
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
                    *race = Some(self.start("race", None, None)?);
                    Ok(())
                }
            }
            Fault::PauseHost(pause) => {
                let running = match main.as_mut() {
                    Some(p) => p.running.is_running()? && !p.running.is_paused(),
                    None => false,
                };
                if running {
                    self.stall_main(*pause, Stall::Paused, main).await?;
                    Ok(())
                } else {
                    Err("no lockstep process was running".into())
                }
            }
            // Set up with the world (`Scenario::world_spec`).
            Fault::ClockBehind { .. } => Ok(()),
            Fault::EtcdRestart { down_ms } => match self.etcd.as_mut() {
                Some(etcd) => {
                    etcd.kill_all().await?;
                    tokio::time::sleep(Duration::from_millis(*down_ms)).await;
                    etcd.up_all().await?;
                    Ok(())
                }
                None => Err("the scenario has no etcd".into()),
            },
            Fault::MemberDown { member, down_ms } => {
                match self.etcd.as_mut().and_then(|e| e.members.get_mut(*member)) {
                    Some(member) => {
                        member.kill().await?;
                        tokio::time::sleep(Duration::from_millis(*down_ms)).await;
                        member.up().await?;
                        Ok(())
                    }
                    None => Err("the scenario's etcd has no such member".into()),
                }
            }
            Fault::LeaderMoves => match self.etcd.as_ref() {
                Some(etcd) => etcd
                    .move_leader()
                    .await
                    .map(drop)
                    .map_err(|e| format!("{e:#}")),
                None => Err("the scenario has no etcd".into()),
            },
            Fault::PartitionHost(pause) => {
                let running = match main.as_mut() {
                    Some(p) => p.running.is_running()? && !p.running.is_paused(),
                    None => false,
                };
                if running {
                    self.stall_main(*pause, Stall::Partitioned, main).await?;
                    Ok(())
                } else {
                    Err("no lockstep process was running".into())
                }
            }
            Fault::LostCreateAnswer { from_last } => match self.restore_jobs {
                Some(jobs) => {
                    let lost = LostAnswer {
                        job: JobSelector::Nth(jobs.saturating_sub(*from_last).max(1)),
                    };
                    let lose = control(TARGET).lose_answer(&lost).await;
                    lose.map_err(|e| e.to_string())
                }
                None => Err("the budget was not set to the restore's jobs".into()),
            },
            Fault::SchemaDdl { collection } => {
                match self
                    .world
                    .backup
                    .info
                    .collection_backups
                    .get(*collection as usize)
                {
                    Some(c) => {
                        let target = self.world.sim.cluster(TARGET);
                        let (db, name) = (c.db_name.clone(), c.collection_name.clone());
                        let ddl = schema_ddl_once_held(target, db, name);
                        self.other_clients.push(tokio::spawn(ddl));
                        Ok(())
                    }
                    None => Err("the backup has no such collection".into()),
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
        if let Some(until) = self.restarted_until {
            tokio::time::sleep_until(until).await;
        }
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

    /// Runs the main line to its end: the last process finishes, and while the restore is
    /// not finished (no final report, an unfinished record, or an attempt rolled back
    /// because its host was lost, which a fleet's job-file loop runs again) the resume verb
    /// (or `run`, for the lost attempt) runs once more.
    async fn converge(&mut self, mut last: ProcessRun) -> anyhow::Result<ProcessRun> {
        let mut tries = 0;
        loop {
            let records = self.records().await?;
            let unfinished = records.iter().any(RestoreRecord::is_unfinished);
            let lost = records
                .iter()
                .max_by_key(|r| r.attempt)
                .is_some_and(|r| r.host_lost && r.outcome == Some(Outcome::RolledBack));
            if finished(&last) && !unfinished && !lost {
                return Ok(last);
            }
            anyhow::ensure!(
                tries < RESUMES,
                "the restore did not finish after {RESUMES} resumes"
            );
            tries += 1;
            self.processes.push(last);
            // An etcd claim outlives a killed host by its lease.
            if self.journal.is_some() {
                tokio::time::sleep(PAST_THE_LEASE).await;
            }
            let verb = if lost && !unfinished {
                "run"
            } else {
                self.resume_verb()
            };
            let p = self.start(verb, None, None)?;
            last = p.finish(&mut self.log).await?;
        }
    }

    async fn records(&self) -> anyhow::Result<Vec<RestoreRecord>> {
        let listing = match &self.journal {
            Some(url) => {
                let location = EtcdLocation::parse(url)?;
                EtcdJournal::connect(&location).await?.list().await?
            }
            None => FileJournal::open(&self.world.path("state"))?.list().await?,
        };
        // The checker holds every record to the invariants: one that does not read is a
        // finding of its own.
        Ok(listing.whole()?)
    }
}

/// Another client's schema DDL (a property of `collection` altered) on the target, sent once
/// one of the collection's jobs is held there, or after [`HELD_WITHIN`] all the same: the
/// kind of what Milvus answered, for the counts, and the answer.
async fn schema_ddl_once_held(
    target: Cluster,
    db: String,
    collection: String,
) -> (&'static str, String) {
    let db = db_or_default(&db).to_owned();
    let until = Instant::now() + HELD_WITHIN;
    let held = loop {
        let held = (target.snapshot().jobs.iter()).any(|j| {
            j.db_name == db && j.collection_name == collection && j.state == JobState::Uncommitted
        });
        if held || Instant::now() >= until {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let op = DdlOp::AlterCollection {
        db: db.clone(),
        collection: collection.clone(),
        properties: vec![KeyValuePair {
            key: "e2e.other_client".into(),
            value: "1".into(),
        }],
        delete_keys: Vec::new(),
    };
    let held = if held { "held" } else { "not held" };
    match target.execute_ddl(op) {
        Err(e) if e.code == 112 => (
            "schema-ddl-refused-112",
            format!(
                "schema DDL on {db}.{collection} ({held}) refused: {}",
                e.message
            ),
        ),
        Err(e) => (
            "schema-ddl-failed",
            format!(
                "schema DDL on {db}.{collection} ({held}) failed: {}",
                e.message
            ),
        ),
        Ok(_) => (
            "schema-ddl-applied",
            format!(
                "schema DDL on {db}.{collection} ({held}) applied: no import of it was unfinished"
            ),
        ),
    }
}

/// Whether a main-line process left the restore finished: it printed a final report, or
/// (`recover`) found nothing to resume. A host that lost its claim finished nothing.
fn finished(p: &ProcessRun) -> bool {
    p.ending == Ending::Finished
        && p.report
            .as_ref()
            .is_none_or(|r| !matches!(r.outcome, Outcome::Incomplete | Outcome::Lost))
}

/// The `[two_phase]` and `[[check]]` tables of the scenario's job; with a lost delete or a
/// changed row, the indexes a load needs, so that the restore's verification can ask every
/// end, and with a changed row a sample that takes every key.
fn job_tables(s: &Scenario) -> anyhow::Result<String> {
    let mut text = format!(
        "[two_phase]\natomicity = \"{}\"\nmirror_grace = \"{}ms\"\n",
        s.atomicity.name(),
        s.mirror_grace_ms
    );
    if s.clock_behind() {
        text.push_str(&format!(
            "completion_timeout = \"{}s\"\n",
            CLOCK_COMPLETION.as_secs()
        ));
    }
    let drifts = |changed: bool| {
        (s.schedule.iter()).any(|t| match t.fault {
            Fault::LostDelete { .. } => !changed,
            Fault::ChangedRow { .. } => true,
            _ => false,
        })
    };
    if drifts(false) {
        text.push_str("[restore]\nrebuild_index = true\n");
    }
    if drifts(true) {
        text.push_str("[verify]\nrows = \"sample\"\nsample = 10000\n");
    }
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
    let mut spec = scenario.world_spec()?;
    let mut restore_jobs = None;
    if scenario.fills_the_budget() {
        let jobs = spec.restore_jobs(&job_tables(scenario)?).await?;
        spec.max_import_job_num = jobs as usize;
        restore_jobs = Some(jobs);
    }
    let world = World::start(spec).await?;
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
    let etcd = match (scenario.journal, &config.etcd) {
        (JournalKind::Etcd, Some(binary)) => {
            let members = scenario.etcd_members;
            Some(EtcdCluster::start(binary, &world.path(""), members).await?)
        }
        (JournalKind::Etcd, None) => anyhow::bail!(
            "seed {} uses etcd, but there is no etcd binary on PATH",
            scenario.seed
        ),
        (JournalKind::Embedded, _) => None,
    };
    let journal = etcd.as_ref().map(|etcd| {
        format!(
            "etcd://{}/lockstep-faults/{}?lease_ttl={}",
            etcd.endpoints(),
            scenario.seed,
            LEASE.as_secs()
        )
    });
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
        restarted_until: None,
        etcd,
        stale: Vec::new(),
        restore_jobs,
        other_clients: Vec::new(),
    };

    let t0 = Instant::now();
    let mut main = Some(run.start(
        "run",
        scenario.crash_at,
        scenario.pause_at.map(|(point, _)| point),
    )?);
    let mut self_pause = scenario.pause_at;
    let mut race = None;
    let mut resumes = Vec::new();
    let mut schedule = scenario.schedule.iter().peekable();
    loop {
        // The first host stopped itself at its pause point.
        if let Some((point, pause)) = self_pause
            && let Some(p) = main.as_mut()
            && p.pause_armed
            && p.running.is_paused()
        {
            self_pause = None;
            // Counted apart where it stops a drop its fence check allowed (DESIGN.md §2.1).
            let kind = match point {
                "drop-checked" => "host-paused-before-drop",
                _ => "host-paused",
            };
            *run.injected.entry(kind).or_default() += 1;
            run.stall_main(pause, Stall::Paused, &mut main).await?;
            continue;
        }
        run.wake(false).await?;
        if let Some(t) = schedule.next_if(|t| t0 + Duration::from_millis(t.at_ms) <= Instant::now())
        {
            run.apply(&t.fault, &mut main, &mut race, &mut resumes)
                .await?;
            continue;
        }
        let may_pause = match main.as_mut() {
            Some(p) => self_pause.is_some() && p.pause_armed && p.running.is_running()?,
            None => false,
        };
        if schedule.peek().is_none() && !may_pause && !run.wake_pending() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Some(p) = race.take() {
        let ended = p.finish(&mut run.log).await?;
        run.processes.push(ended);
    }
    let last = match main.take() {
        Some(p) => p.finish(&mut run.log).await?,
        None => anyhow::bail!("the main line has no process"),
    };
    for handle in resumes {
        handle.abort();
    }
    for client in std::mem::take(&mut run.other_clients) {
        let (kind, answer) = client.await.context("the other client's DDL")?;
        *run.injected.entry(kind).or_default() += 1;
        run.log.note(answer);
    }
    run.heal().await?;
    let mut last = run.converge(last).await?;
    // Every paused host wakes (those woken after this point: after the new attempt's
    // commit) and runs to its end; then the restore is brought to its end again, in case a
    // woken host left anything.
    if !run.stale.is_empty() {
        run.wake(true).await?;
        for mut stale in std::mem::take(&mut run.stale) {
            // A host paused by the runner may still reach its own pause point after it
            // woke: it is woken again until it ends.
            let until = Instant::now() + Duration::from_secs(120);
            while stale.process.running.is_running()? && Instant::now() < until {
                if stale.process.running.is_paused() {
                    stale.process.running.wake()?;
                    run.log.note(format!("{} woken again", stale.process.name));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let ended = stale.process.finish(&mut run.log).await?;
            run.processes.push(ended);
        }
        last = run.converge(last).await?;
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

    // Whether a lost create answer's retry met the full budget (it can come before the
    // last job was made), for the counts.
    if let Some((_, target)) = ends.first() {
        let creates = target.requests_to("import/create");
        let lost = creates
            .iter()
            .position(|r| r.fault.is_some() && r.code == Some(0));
        if lost.is_some_and(|at| creates[at..].iter().any(|r| r.code == Some(2101))) {
            *run.injected.entry("lost-answer-retry-refused").or_default() += 1;
        }
    }

    // Invariant 5: the same content again is a no-op once it committed.
    let resubmission = match (outcome, first_restore_id) {
        (Some(Outcome::Succeeded | Outcome::Diverged), Some(first_restore_id)) => {
            let creates_before = ends[0].1.requests_to("import/create").len();
            let p = run.start("resubmit", None, None)?;
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
        l0: run.world.l0_logs(),
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
