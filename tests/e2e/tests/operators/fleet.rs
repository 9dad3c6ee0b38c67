//! Fleets of `lockstep watch` processes sharing one directory and one etcd journal: every
//! restore runs once (milvus-sim's request log shows one create per batch), and a host that
//! dies holding a restore is replaced by another after its lease expires: no decision →
//! abort, decision → commit, and no end keeps an Uncommitted job. A host that pauses past
//! its lease and wakes after its restore was taken over, run again and committed touches
//! nothing: the committed collections stay visible on every end with their rows.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lockstep::journal::etcd::{EtcdJournal, EtcdLocation};
use lockstep::journal::{Journal, Outcome, RestoreRecord};

use crate::support::{TestEtcd, World, creates, etcd, eventually, host_config, job, world};

/// One `lockstep watch` process with its own state directory; killed on drop.
struct Host {
    child: Child,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a test makes a host misbehave: `LOCKSTEP_*` variables of the fault-injection build.
#[derive(Default, Clone, Copy)]
struct Faults<'a> {
    /// Dies at this point.
    crash_at: Option<&'a str>,
    /// Stops itself (SIGSTOP) at this point, until the test sends SIGCONT.
    pause_at: Option<&'a str>,
    /// Bugs planted, comma-separated.
    plant: Option<&'a str>,
}

impl Host {
    fn start(world: &World, journal: &str, dir: &Path, n: usize, crash_at: Option<&str>) -> Host {
        let faults = Faults {
            crash_at,
            ..Faults::default()
        };
        Host::start_with(world, journal, dir, n, faults)
    }

    fn start_with(world: &World, journal: &str, dir: &Path, n: usize, faults: Faults<'_>) -> Host {
        let state = world.path(&format!("host-{n}"));
        let log = std::fs::File::create(world.path(&format!("host-{n}.log"))).unwrap();
        let mut cmd = Command::new(e2e::lockstep_bin());
        cmd.arg("--config")
            .arg(host_config(world))
            .arg("--journal")
            .arg(journal)
            .arg("--state-dir")
            .arg(&state)
            .arg("watch")
            .arg(dir)
            .env("LOCKSTEP_LOG", "warn,lockstep=debug")
            .stdout(Stdio::null())
            .stderr(log);
        for (var, value) in [
            ("LOCKSTEP_CRASH_AT", faults.crash_at),
            ("LOCKSTEP_PAUSE_AT", faults.pause_at),
            ("LOCKSTEP_PLANT", faults.plant),
        ] {
            if let Some(value) = value {
                cmd.env(var, value);
            }
        }
        Host {
            child: cmd.spawn().expect("the lockstep binary starts"),
        }
    }

    /// Whether the process is gone (its crash point fired).
    fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    /// Whether the process stopped itself at its pause point (state `T` in /proc).
    fn paused(&self) -> bool {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // `pid (comm) state ...`: the state follows the last `)`.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
    }

    /// Wakes a paused process.
    fn wake(&self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("a live pid");
        rustix::process::kill_process(pid, rustix::process::Signal::CONT).expect("SIGCONT");
    }
}

/// The journal's URL for this test, with a 2 s lease so takeovers are quick.
fn journal_url(etcd: &TestEtcd, test: &str) -> String {
    format!("{}?lease_ttl=2", etcd.journal_url(test))
}

async fn records(url: &str) -> Vec<RestoreRecord> {
    let journal = EtcdJournal::connect(&EtcdLocation::parse(url).unwrap())
        .await
        .unwrap();
    journal.list().await.unwrap().whole().unwrap()
}

fn jobs_dir(world: &World) -> PathBuf {
    let dir = world.path("jobs");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn each_restore_runs_once(hosts: usize) {
    let Some(etcd) = etcd("each_restore_runs_once").await else {
        return;
    };
    let world = world().await;
    let url = journal_url(&etcd, &format!("once-{hosts}"));
    let dir = jobs_dir(&world);
    let _hosts: Vec<Host> = (0..hosts)
        .map(|n| Host::start(&world, &url, &dir, n, None))
        .collect();
    let names = ["alpha", "beta", "gamma"];
    for name in names {
        std::fs::write(
            dir.join(format!("{name}.toml")),
            job(name, &format!("_{name}")),
        )
        .unwrap();
    }
    let done = eventually(Duration::from_secs(120), || async {
        let r = records(&url).await;
        (r.len() == names.len() && r.iter().all(|r| r.outcome == Some(Outcome::Succeeded)))
            .then_some(r)
    })
    .await
    .expect("every restore finished");
    // Give the other hosts time to (wrongly) run anything again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let batches: usize = done
        .iter()
        .map(|r| r.groups.iter().map(|g| g.batches.len()).sum::<usize>())
        .sum();
    assert_eq!(
        creates(&world).await,
        batches,
        "one create per batch across {hosts} hosts"
    );
    assert_eq!(
        records(&url).await.len(),
        names.len(),
        "one attempt per job"
    );
    world.assert_nothing_held().await.unwrap();
    for name in names {
        assert_eq!(
            world
                .collections_with_suffix("s1", &format!("_{name}"))
                .await
                .unwrap()
                .len(),
            2
        );
    }
}

#[tokio::test]
async fn two_hosts_run_each_restore_once() {
    each_restore_runs_once(2).await;
}

#[tokio::test]
async fn three_hosts_run_each_restore_once() {
    each_restore_runs_once(3).await;
}

/// Host 0 claims the restore and dies at `crash_at`; host 1, watching the same directory,
/// takes it over once host 0's lease expired. Returns once some record of the job has
/// `outcome`, with every record.
async fn takeover(
    test: &str,
    crash_at: &str,
    outcome: Outcome,
) -> Option<(World, Vec<RestoreRecord>)> {
    let etcd = etcd(test).await?;
    let world = world().await;
    let url = journal_url(&etcd, test);
    let dir = jobs_dir(&world);
    let mut doomed = Host::start(&world, &url, &dir, 0, Some(crash_at));
    std::fs::write(dir.join("orders.toml"), job("orders", "_o")).unwrap();
    // Host 0 holds the claim: its record is in the journal.
    eventually(Duration::from_secs(30), || async {
        (!records(&url).await.is_empty()).then_some(())
    })
    .await
    .expect("host 0's record");
    let _survivor = Host::start(&world, &url, &dir, 1, None);
    eventually(Duration::from_secs(60), || {
        let exited = doomed.exited();
        async move { exited.then_some(()) }
    })
    .await
    .expect("host 0 dying at its crash point");
    eventually(Duration::from_secs(90), || async {
        let all = records(&url).await;
        all.iter().any(|r| r.outcome == Some(outcome)).then_some(())
    })
    .await
    .expect("the takeover's outcome");
    eventually(Duration::from_secs(30), || async {
        world.assert_nothing_held().await.is_ok().then_some(())
    })
    .await
    .expect("no Uncommitted job on any end");
    Some((world, records(&url).await))
}

/// Staged objects left on `end`'s store.
fn staged_left(world: &World, end: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&world.storage_dir(end).join("lockstep-staging"), &mut out);
    out
}

/// The owner dies holding every job Uncommitted: the survivor aborts its attempt by
/// presumed abort, deletes what it staged on every end, and, since the host was lost and
/// not the job at fault, runs the job again to completion.
#[tokio::test]
async fn a_host_killed_while_holding_is_aborted_cleaned_and_run_again() {
    let Some((world, records)) = takeover("holding", "holding", Outcome::Succeeded).await else {
        return;
    };
    assert_eq!(records.len(), 2, "{records:?}");
    let (lost, again) = (&records[0], &records[1]);
    assert_eq!((lost.attempt, again.attempt), (1, 2));
    assert_eq!(lost.outcome, Some(Outcome::RolledBack), "{lost:?}");
    assert!(lost.host_lost && !lost.has_commit_decision(), "{lost:?}");
    assert!(!lost.stage_left, "{lost:?}");
    let why = again.rerun_because.as_deref().unwrap_or_default();
    assert!(
        why.contains(&format!("attempt 1 ({})", lost.id)) && why.contains("host was lost"),
        "{why}"
    );
    let report: serde_json::Value = again
        .report
        .as_ref()
        .expect("a finished attempt has its report")
        .read()
        .expect("its report reads");
    assert_eq!(report["rerun_because"], why);
    for end in ["t", "s1"] {
        assert_eq!(staged_left(&world, end), Vec::<PathBuf>::new(), "{end}");
        let collections = world.collections_with_suffix(end, "_o").await.unwrap();
        assert_eq!(collections.len(), 2, "{end}");
        let shown = world.collections(end).await.unwrap();
        for c in collections {
            assert!(shown[&c] > 0, "{end} {c}: {}", shown[&c]);
        }
    }
}

/// A job whose attempts kill their host every time (both hosts die at the same point and
/// are started again, as a service manager would): it stops after `max_attempts`.
#[tokio::test]
async fn a_job_that_kills_every_host_stops_after_max_attempts() {
    let Some(etcd) = etcd("every-host").await else {
        return;
    };
    let world = world().await;
    let config = std::fs::read_to_string(host_config(&world)).unwrap();
    std::fs::write(host_config(&world), format!("max_attempts = 2\n{config}")).unwrap();
    let url = journal_url(&etcd, "every-host");
    let dir = jobs_dir(&world);
    let mut hosts: Vec<Host> = (0..2)
        .map(|n| Host::start(&world, &url, &dir, n, Some("holding")))
        .collect();
    std::fs::write(dir.join("orders.toml"), job("orders", "_o")).unwrap();
    let lost_both = |all: &[RestoreRecord]| {
        all.len() == 2
            && all
                .iter()
                .all(|r| r.outcome == Some(Outcome::RolledBack) && r.host_lost)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        for (n, host) in hosts.iter_mut().enumerate() {
            if host.exited() {
                *host = Host::start(&world, &url, &dir, n, Some("holding"));
            }
        }
        if lost_both(&records(&url).await) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "two lost attempts: {:?}",
            records(&url).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Time for a (wrong) third attempt: two sweeps and more than a lease.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let all = records(&url).await;
    assert!(lost_both(&all), "no third attempt: {all:?}");
    world.assert_nothing_held().await.unwrap();
    let logs: String = (0..2)
        .map(|n| std::fs::read_to_string(world.path(&format!("host-{n}.log"))).unwrap_or_default())
        .collect();
    assert!(
        logs.contains("every attempt was lost with its host; not running it again"),
        "{logs}"
    );
}

#[tokio::test]
async fn a_host_killed_right_after_its_decision_is_taken_over_and_committed() {
    let Some((world, records)) = takeover("decision", "after-decision", Outcome::Succeeded).await
    else {
        return;
    };
    assert_eq!(records.len(), 1, "recovered, not run again: {records:?}");
    let record = &records[0];
    assert_eq!(record.outcome, Some(Outcome::Succeeded), "{record:?}");
    assert!(record.has_commit_decision());
    assert!(!record.host_lost, "{record:?}");
    let collections = world.collections_with_suffix("s1", "_o").await.unwrap();
    assert_eq!(collections.len(), 2);
    for end in world.ends() {
        let shown = world.collections(&end).await.unwrap();
        for c in &collections {
            assert!(
                shown.get(c).is_some_and(|&rows| rows > 0),
                "{end} {c}: {shown:?}"
            );
        }
    }
}

/// Every collection of `suffix` with its visible rows, per end.
async fn visible(world: &World, suffix: &str) -> Vec<(String, String, i64)> {
    let mut out = Vec::new();
    for end in world.ends() {
        for (c, rows) in world.collections(&end).await.unwrap() {
            if c.ends_with(suffix) {
                out.push((end.clone(), c, rows));
            }
        }
    }
    out.sort();
    out
}

/// Host 0 with `faults` (a pause point among them), given the job `orders`; returns once it
/// stopped itself at its pause point.
async fn paused_owner(world: &World, url: &str, dir: &Path, faults: Faults<'_>) -> Host {
    let owner = Host::start_with(world, url, dir, 0, faults);
    std::fs::write(dir.join("orders.toml"), job("orders", "_o")).unwrap();
    eventually(Duration::from_secs(60), || {
        let paused = owner.paused();
        async move { paused.then_some(()) }
    })
    .await
    .expect("host 0 pausing");
    owner
}

/// What a stale host left after it woke.
struct Woken {
    world: World,
    /// The collections attempt 2 committed, with their rows on each end, before the wake.
    before: Vec<(String, String, i64)>,
    /// The report the woken host wrote for its own attempt.
    stale_report: serde_json::Value,
    records: Vec<RestoreRecord>,
}

/// Host 0 pauses at `pause_at` (with `plant` planted), host 1 watching the same directory
/// takes the restore over after the lease, and the job runs to `Succeeded`; then host 0
/// wakes. Returns once host 0 wrote its report for its own attempt and a few seconds more
/// went by, for anything it does after that to show.
async fn stale_host_wakes(test: &str, pause_at: &str, plant: Option<&str>) -> Option<Woken> {
    let etcd = etcd(test).await?;
    let world = world().await;
    let url = journal_url(&etcd, test);
    let dir = jobs_dir(&world);
    let faults = Faults {
        pause_at: Some(pause_at),
        plant,
        ..Faults::default()
    };
    let stale = paused_owner(&world, &url, &dir, faults).await;
    let _survivor = Host::start(&world, &url, &dir, 1, None);
    eventually(Duration::from_secs(90), || async {
        let all = records(&url).await;
        all.iter()
            .any(|r| r.outcome == Some(Outcome::Succeeded))
            .then_some(())
    })
    .await
    .expect("the survivor's commit");
    let before = visible(&world, "_o").await;
    assert_eq!(before.len(), 4, "2 collections on 2 ends: {before:?}");
    let ids: Vec<String> = records(&url)
        .await
        .iter()
        .map(|r| r.id.to_string())
        .collect();
    stale.wake();
    let first_id = ids.first().cloned().expect("host 0's attempt has a record");
    let report_path = world.path(&format!("host-0/reports/{first_id}.json"));
    let stale_report = eventually(Duration::from_secs(60), || async {
        std::fs::read(&report_path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    })
    .await
    .expect("the woken host's report");
    // Time for a (wrong) drop or delete after the report: it would show in this.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let records = records(&url).await;
    Some(Woken {
        world,
        before,
        stale_report,
        records,
    })
}

/// The sequence: host 0 pauses in Holding, host 1 presumes the abort, runs the job
/// again and commits it, host 0 wakes. Its first action is fenced: it stops, drops nothing,
/// and its report says it lost the restore (exit 7).
#[tokio::test]
async fn a_host_paused_while_holding_wakes_and_touches_nothing() {
    let Some(w) = stale_host_wakes("paused-holding", "holding", None).await else {
        return;
    };
    assert_eq!(
        visible(&w.world, "_o").await,
        w.before,
        "attempt 2's data stays"
    );
    assert_eq!(w.stale_report["outcome"], "lost", "{}", w.stale_report);
    let summary = w.stale_report["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("lost restore"), "{summary}");
    assert_eq!(w.records.len(), 2, "{:?}", w.records);
    assert!(w.records[0].host_lost, "{:?}", w.records[0]);
    assert_eq!(w.records[1].outcome, Some(Outcome::Succeeded));
    w.world.assert_nothing_held().await.unwrap();
}

/// The window no fence check closes: every check passes, as if each of the woken host's
/// actions fell between its check and its call. Its rollback then reaches the collections,
/// and leaves them because their ids are not the ones it created.
#[tokio::test]
async fn a_woken_host_past_every_fence_drops_nothing_it_did_not_create() {
    let Some(w) = stale_host_wakes("paused-unfenced", "holding", Some("unfenced")).await else {
        return;
    };
    assert_eq!(
        visible(&w.world, "_o").await,
        w.before,
        "attempt 2's data stays"
    );
    assert_eq!(w.records.len(), 2, "{:?}", w.records);
    assert_eq!(w.records[1].outcome, Some(Outcome::Succeeded));
}

/// The test above is one that fails without the identity check: with the rollback planted
/// back to dropping by name, the woken host destroys attempt 2's committed collections.
#[tokio::test]
async fn without_the_identity_check_a_woken_host_destroys_the_new_attempt() {
    let plant = Some("unfenced,drop-by-name");
    let Some(w) = stale_host_wakes("paused-by-name", "holding", plant).await else {
        return;
    };
    let after = visible(&w.world, "_o").await;
    assert!(after.is_empty(), "the planted bug dropped them: {after:?}");
}

/// Paused between its decision and its commit: host 1 finds the decision and rolls it
/// forward; host 0's commit after the wake is fenced (and would be harmless), and its report
/// says it lost the restore.
#[tokio::test]
async fn a_host_paused_after_its_decision_wakes_to_a_restore_already_committed() {
    let Some(w) = stale_host_wakes("paused-decided", "after-decision", None).await else {
        return;
    };
    assert_eq!(visible(&w.world, "_o").await, w.before);
    assert_eq!(w.stale_report["outcome"], "lost", "{}", w.stale_report);
    assert_eq!(
        w.records.len(),
        1,
        "rolled forward, not run again: {:?}",
        w.records
    );
    assert!(w.records[0].has_commit_decision());
    assert_eq!(w.records[0].outcome, Some(Outcome::Succeeded));
}

/// The other takeover path: the host that finds the orphan has no job file for it (it
/// watches another directory), so its sweep recovers it from the record alone. The job runs
/// again all the same: its own host, woken, finds its attempt lost and asks the journal,
/// which gives the next attempt by the same rule.
#[tokio::test]
async fn a_restore_the_sweep_took_over_runs_again_where_its_job_is() {
    let Some(etcd) = etcd("sweep-rerun").await else {
        return;
    };
    let world = world().await;
    let url = journal_url(&etcd, "sweep-rerun");
    let dir = jobs_dir(&world);
    let faults = Faults {
        pause_at: Some("holding"),
        ..Faults::default()
    };
    let owner = paused_owner(&world, &url, &dir, faults).await;
    let elsewhere = world.path("other-jobs");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let _sweeper = Host::start(&world, &url, &elsewhere, 1, None);
    let lost = eventually(Duration::from_secs(60), || async {
        let all = records(&url).await;
        all.first()
            .filter(|r| r.outcome == Some(Outcome::RolledBack) && r.host_lost)
            .cloned()
    })
    .await
    .expect("the sweep's presumed abort");
    assert_eq!(
        records(&url).await.len(),
        1,
        "the sweeper has no job to run"
    );
    owner.wake();
    let again = eventually(Duration::from_secs(90), || async {
        records(&url)
            .await
            .into_iter()
            .find(|r| r.attempt == 2 && r.outcome == Some(Outcome::Succeeded))
    })
    .await
    .expect("attempt 2, run by the job's own host");
    let why = again.rerun_because.as_deref().unwrap_or_default();
    assert!(why.contains(&format!("attempt 1 ({})", lost.id)), "{why}");
    for end in ["t", "s1"] {
        assert_eq!(
            world
                .collections_with_suffix(end, "_o")
                .await
                .unwrap()
                .len(),
            2,
            "{end}"
        );
    }
    world.assert_nothing_held().await.unwrap();
}

/// A host held up between reading a job's attempts and claiming the next (here paused; a
/// partition from etcd does the same) wakes to find that attempt run by another host. It
/// reads the attempts again and reports that run, instead of writing a fresh record over it:
/// the record keeps the other host's commit decision, and nothing is imported twice.
#[tokio::test]
async fn a_host_held_up_before_its_claim_does_not_write_over_the_attempt_another_ran() {
    let Some(etcd) = etcd("held_up_before_claim").await else {
        return;
    };
    let world = world().await;
    let url = journal_url(&etcd, "held-up-before-claim");
    let file = world.job("orders", "[restore]\nsuffix = \"_h\"\n").unwrap();
    let file = file.to_str().unwrap();
    let args = ["--journal", url.as_str(), "run", file];
    let mut slow = world
        .spawn(&args, &[("LOCKSTEP_PAUSE_AT", "before-claim")])
        .unwrap();
    eventually(Duration::from_secs(30), || async {
        slow.is_paused().then_some(())
    })
    .await
    .expect("the first host stops before its claim");

    let other = world.run(&args, &[]).await.unwrap();
    assert_eq!(other.code, 0, "{}", other.explain());
    let id = other.report["restore_id"].as_str().unwrap().to_owned();
    let creates_after = creates(&world).await;

    // The other host's claim may outlive its process by the lease (its revocation is sent
    // as it exits, not awaited): past that, the attempt is free to claim again.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    slow.wake().unwrap();
    let woken = slow.finish().await.unwrap();
    assert_eq!(woken.code, 0, "{}", woken.explain());
    assert_eq!(woken.report["ran"], false, "{}", woken.report);
    assert_eq!(woken.report["restore_id"], id.as_str(), "{}", woken.report);
    assert_eq!(
        creates(&world).await,
        creates_after,
        "nothing imported twice"
    );
    let records = records(&url).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].id.to_string(), id);
    assert_eq!(records[0].outcome, Some(Outcome::Succeeded));
    assert!(
        records[0].groups.iter().all(|g| g.decision.is_some()),
        "the commit decision is still on record: {records:?}"
    );
}

/// Starts `args` on a host that stops itself at `point`, and once it has, past its lease
/// (2 s), runs them to the end on another host, which takes the restore over and commits.
/// The first host is returned still stopped.
async fn paused_then_taken_over(world: &World, args: &[&str], point: &str) -> e2e::Running {
    let slow = world.spawn(args, &[("LOCKSTEP_PAUSE_AT", point)]).unwrap();
    eventually(Duration::from_secs(30), || async {
        slow.is_paused().then_some(())
    })
    .await
    .unwrap_or_else(|_| panic!("the first host stops at {point}"));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let other = world.run(args, &[]).await.unwrap();
    assert_eq!(other.code, 0, "{}", other.explain());
    slow
}

/// A host stopped after its fence check passed, right before its drop leaves (the window
/// fleet seed 114 hit), wakes after another host took the restore over, dropped the same
/// collection, made it anew and committed it. Its drop goes out on a connection that writes
/// nothing once the check stopped counting, so it never reaches the target: the woken host
/// is lost, and the committed collections stay, with their rows, on every end.
#[tokio::test]
async fn a_drop_whose_fence_check_waited_out_a_pause_never_leaves() {
    let Some(etcd) = etcd("drop_checked").await else {
        return;
    };
    let world = world().await;
    let url = journal_url(&etcd, "drop-checked");
    // An earlier restore made the collections the paused host is about to drop.
    let earlier = world.job("orders", "[restore]\nsuffix = \"_g\"\n").unwrap();
    let earlier = ["--journal", url.as_str(), "run", earlier.to_str().unwrap()];
    let made = world.run(&earlier, &[]).await.unwrap();
    assert_eq!(made.code, 0, "{}", made.explain());
    let again = "[restore]\nsuffix = \"_g\"\ndrop_exist_collection = true\n";
    let file = world.job("orders-again", again).unwrap();
    let args = ["--journal", url.as_str(), "run", file.to_str().unwrap()];
    let mut slow = paused_then_taken_over(&world, &args, "drop-checked").await;
    let drops = world.requests("t", "/DropCollection").await.unwrap();

    slow.wake().unwrap();
    let woken = slow.finish().await.unwrap();
    assert_eq!(woken.code, 7, "lost: {}", woken.explain());
    assert_eq!(
        world.requests("t", "/DropCollection").await.unwrap(),
        drops,
        "the woken host's drop reached the target"
    );
    for end in ["t", "s1"] {
        let all = world.collections(end).await.unwrap();
        let made: Vec<_> = all.iter().filter(|(c, _)| c.ends_with("_g")).collect();
        assert_eq!(made.len(), 2, "{end}: {all:?}");
        assert!(made.iter().all(|(_, rows)| **rows > 0), "{end}: {all:?}");
    }
    world.assert_nothing_held().await.unwrap();
}

/// A host stopped right after the journal said its claim holds (a VM frozen with the answer
/// in a socket) wakes after another host took the restore over and committed it under the
/// same collection names. The answer is older than a lease's quarter: asked again, it is
/// lost, and the woken host sends nothing to any end (fleet seed 492: a rollback's drop,
/// woken 9 s late, dropped the collection the next attempt had committed).
#[tokio::test]
async fn a_fence_answer_that_waited_out_a_pause_is_not_acted_on() {
    let Some(etcd) = etcd("fence_answered").await else {
        return;
    };
    let world = world().await;
    let url = journal_url(&etcd, "fence-answered");
    let file = world.job("orders", "[restore]\nsuffix = \"_f\"\n").unwrap();
    let file = file.to_str().unwrap();
    let args = ["--journal", url.as_str(), "run", file];
    let mut slow = paused_then_taken_over(&world, &args, "fence-answered").await;
    let writes = world.writes_received().await.unwrap();

    slow.wake().unwrap();
    let woken = slow.finish().await.unwrap();
    assert_eq!(woken.code, 7, "lost: {}", woken.explain());
    assert_eq!(
        world.writes_received().await.unwrap(),
        writes,
        "the woken host wrote nothing"
    );
    for end in ["t", "s1"] {
        let made = world.collections_with_suffix(end, "_f").await.unwrap();
        assert_eq!(made.len(), 2, "{end}");
    }
    world.assert_nothing_held().await.unwrap();
}
