//! The watched directory against milvus-sim: each case ends with the expected reports, the
//! expected restores in milvus-sim's request log, and every job file exactly as written.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lockstep::config::HostConfig;
use lockstep::engine::{Interrupt, Report, Silent};
use lockstep::journal::embedded::FileJournal;
use lockstep::journal::{Journal as _, Outcome, RequestedBy, RestoreId};
use lockstep::serve::watch::WatchStats;
use lockstep::serve::{LiveProgress, Runner, WatchOptions, reports, watch};

use crate::support::{World, creates, eventually, host_config, job, snapshot, world};

/// A watcher on `World`'s `jobs/` directory, in process, with its state in `state/`, outside
/// it.
pub struct Watching {
    pub jobs: PathBuf,
    pub reports: PathBuf,
    pub stats: Arc<WatchStats>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Watching {
    pub async fn start(world: &World) -> Watching {
        let jobs = world.path("jobs");
        std::fs::create_dir_all(&jobs).unwrap();
        Self::start_in(world, jobs).await
    }

    pub async fn start_in(world: &World, jobs: PathBuf) -> Watching {
        let state = world.path("state");
        let mut host = HostConfig::load(&host_config(world)).expect("host config");
        host.state_dir = state.clone();
        let journal = Arc::new(FileJournal::open(&state).unwrap());
        let (stop, shutdown) = Interrupt::new();
        let runner = Runner::new(
            journal,
            host.clone(),
            state.clone(),
            Arc::new(LiveProgress::new(Arc::new(Silent))),
            shutdown.clone(),
            4,
        );
        let stats = Arc::new(WatchStats::default());
        let task = tokio::spawn({
            let (jobs, stats) = (jobs.clone(), Arc::clone(&stats));
            async move {
                watch(WatchOptions::new(jobs), host, runner, stats, shutdown)
                    .await
                    .expect("the watcher runs");
            }
        });
        // Ready once the first listing is done: events from then on are seen.
        eventually(Duration::from_secs(10), || async {
            (stats.relists.load(Ordering::Relaxed) > 0).then_some(())
        })
        .await
        .expect("the watcher's first listing");
        Watching {
            jobs,
            reports: state.join("reports"),
            stats,
            stop,
            task,
        }
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// The report the `latest` link of `job` points at, once it has `outcome`.
    pub async fn latest(&self, job: &str, outcome: Outcome) -> Report {
        eventually(Duration::from_secs(60), || async {
            reports::read_latest(&self.reports, job).filter(|r| r.outcome == outcome)
        })
        .await
        .unwrap_or_else(|e| panic!("{job} {outcome:?}: {e}"))
    }

    /// Report files (`*.json` directly in the reports directory).
    pub fn report_count(&self) -> usize {
        std::fs::read_dir(&self.reports)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .count()
            })
            .unwrap_or(0)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.jobs.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// Waits long enough for the watcher to have seen and settled any change (debounce +
/// settle, several times over), for the cases that assert nothing happens.
async fn quiet() {
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

fn unchanged(dir: &Path, before: &[(PathBuf, Vec<u8>)]) {
    assert_eq!(snapshot(dir), before, "job files must not be touched");
}

#[tokio::test]
async fn a_dropped_file_runs_once_and_the_same_content_never_again() {
    let world = world().await;
    let w = Watching::start(&world).await;
    let text = job("orders", "_w");
    w.write("orders.toml", &text);
    let report = w.latest("orders", Outcome::Succeeded).await;
    let batches = report.jobs.len();
    assert!(batches >= 4, "2 collections x 2 partitions: {batches}");
    // Its record says which job file asked for it, by an absolute path (what retention
    // holds the record to).
    let record = FileJournal::open(&world.path("state"))
        .unwrap()
        .load(&RestoreId::parse(&report.restore_id).unwrap())
        .await
        .unwrap()
        .unwrap();
    let file = std::path::absolute(w.jobs.join("orders.toml")).unwrap();
    assert_eq!(
        record.requested_by,
        Some(RequestedBy::Watch {
            file: Some(file.display().to_string())
        })
    );
    assert_eq!(creates(&world).await, batches, "one create per batch");
    world.assert_nothing_held().await.unwrap();
    for end in ["t", "s1"] {
        assert_eq!(
            world
                .collections_with_suffix(end, "_w")
                .await
                .unwrap()
                .len(),
            2,
            "{end}"
        );
    }

    // The same content again: touched, copied under another file name (same job name),
    // rewritten with a comment and other whitespace: nothing runs.
    let before_reports = w.report_count();
    std::fs::write(w.jobs.join("orders.toml"), &text).unwrap();
    w.write("orders-copy.toml", &text);
    w.write(
        "orders.toml",
        &format!("# reviewed\n{}\n\n", text.replace(" = ", "=")),
    );
    quiet().await;
    assert_eq!(
        creates(&world).await,
        batches,
        "the same content never runs twice"
    );
    assert_eq!(w.report_count(), before_reports);
    let files = snapshot(&w.jobs);
    w.stop().await;
    unchanged(&world.path("jobs"), &files);
}

#[tokio::test]
async fn a_rewrite_is_a_new_restore_and_a_rename_into_place_runs_once() {
    let world = world().await;
    let w = Watching::start(&world).await;
    w.write("orders.toml", &job("orders", "_a"));
    let first = w.latest("orders", Outcome::Succeeded).await;
    let batches = first.jobs.len();

    // Changed content: a new restore, reported under a new id, `latest` moved.
    w.write("orders.toml", &job("orders", "_b"));
    let second = eventually(Duration::from_secs(60), || async {
        reports::read_latest(&w.reports, "orders")
            .filter(|r| r.restore_id != first.restore_id && r.outcome == Outcome::Succeeded)
    })
    .await
    .expect("the rewrite's restore");
    assert_ne!(second.job_id, first.job_id);
    assert_eq!(
        world
            .collections_with_suffix("s1", "_b")
            .await
            .unwrap()
            .len(),
        2
    );

    // Written under a temporary name, renamed into place: one restore.
    let tmp = w.jobs.join("moved.toml.tmp");
    std::fs::write(&tmp, job("moved", "_m")).unwrap();
    std::fs::rename(&tmp, w.jobs.join("moved.toml")).unwrap();
    w.latest("moved", Outcome::Succeeded).await;
    quiet().await;
    assert_eq!(creates(&world).await, 3 * batches);
    let files = snapshot(&w.jobs);
    w.stop().await;
    unchanged(&world.path("jobs"), &files);
}

/// A writer that pauses mid-file with the file open: the prefix alone is a valid job
/// (without its secondaries), so reading it early would run the wrong restore.
#[tokio::test]
async fn a_half_written_file_is_not_read_until_its_writer_closes_it() {
    use std::io::Write as _;
    let world = world().await;
    let w = Watching::start(&world).await;
    let text = job("half", "_h");
    let (head, tail) = text.split_at(text.find("secondaries").unwrap());
    let mut file = std::fs::File::create(w.jobs.join("half.toml")).unwrap();
    file.write_all(head.as_bytes()).unwrap();
    file.flush().unwrap();
    quiet().await;
    assert_eq!(
        creates(&world).await,
        0,
        "nothing runs while the writer holds the file"
    );
    assert_eq!(w.report_count(), 0);
    file.write_all(tail.as_bytes()).unwrap();
    drop(file);
    let report = w.latest("half", Outcome::Succeeded).await;
    assert_eq!(
        report.ends.len(),
        2,
        "the whole file was read: {:?}",
        report.ends
    );
    w.stop().await;
}

#[tokio::test]
async fn editor_files_are_ignored_and_a_bad_file_gets_a_located_report_and_runs_nothing() {
    let world = world().await;
    let w = Watching::start(&world).await;
    for name in [".orders.toml.swp", "orders.toml~", ".#orders.toml", "4913"] {
        w.write(name, "garbage [[[");
    }
    w.write(
        "bad.toml",
        "backup = \"bak\"\ntarget = \"primary\"\n\n[restore]\nsufix = \"_x\"\n",
    );
    let report = w.latest("bad", Outcome::Refused).await;
    assert!(
        report
            .refusals
            .iter()
            .any(|r| r.contains("bad.toml:5:1") && r.contains("sufix")),
        "{:?}",
        report.refusals
    );
    let text = std::fs::read_to_string(w.reports.join("latest/bad.txt")).unwrap();
    assert!(
        text.contains("[refused]") && text.contains("sufix"),
        "{text}"
    );
    quiet().await;
    assert_eq!(creates(&world).await, 0);
    assert_eq!(w.report_count(), 1, "only the bad file's report");
    assert_eq!(w.stats.refused.load(Ordering::Relaxed), 1);
    w.stop().await;
}

/// Deleting the file of a restore that has not decided cancels it: it rolls back and leaves
/// nothing anywhere. (The stream to the standby lags 4 s behind, so the restore waits for
/// its DDL to be mirrored when the file goes. A lag, not a pause: preflight refuses a stream
/// that stands still, and one whose lag just grew stands still only that long.)
#[tokio::test]
async fn deleting_the_file_of_an_undecided_restore_rolls_it_back() {
    let world = world().await;
    let primary = world.sim.cluster("t").control();
    primary
        .set_stream_lag("s1", Duration::from_secs(4))
        .await
        .unwrap();
    let w = Watching::start(&world).await;
    let path = w.write("slow.toml", &job("slow", "_s"));
    eventually(Duration::from_secs(30), || async {
        (world
            .collections_with_suffix("t", "_s")
            .await
            .unwrap()
            .len()
            == 2)
            .then_some(())
    })
    .await
    .expect("the target's DDL");
    std::fs::remove_file(&path).unwrap();
    primary.set_stream_lag("s1", Duration::ZERO).await.unwrap();
    let report = w.latest("slow", Outcome::RolledBack).await;
    assert!(report.collections.iter().all(|c| !c.committed));
    eventually(Duration::from_secs(30), || async {
        world.assert_nothing_held().await.is_ok().then_some(())
    })
    .await
    .expect("no Uncommitted job left");
    for end in ["t", "s1"] {
        assert_eq!(
            world
                .collections_with_suffix(end, "_s")
                .await
                .unwrap()
                .len(),
            0,
            "{end}"
        );
    }
    w.stop().await;
}

/// 10,000 job files at start (one job written 10,000 ways) run one restore, and a file
/// dropped afterwards is still picked up promptly: the watcher re-lists and stats, but only
/// reads what changed.
#[tokio::test]
async fn ten_thousand_files_at_start_do_not_stall_the_watcher() {
    let world = world().await;
    let jobs = world.path("many");
    std::fs::create_dir_all(&jobs).unwrap();
    let text = job("bulk", "_bulk");
    for i in 0..10_000 {
        std::fs::write(
            jobs.join(format!("bulk-{i:05}.toml")),
            format!("# copy {i}\n{text}"),
        )
        .unwrap();
    }
    let w = Watching::start_in(&world, jobs.clone()).await;
    let bulk = w.latest("bulk", Outcome::Succeeded).await;
    assert_eq!(w.stats.reads.load(Ordering::Relaxed), 10_000);

    let started = std::time::Instant::now();
    w.write("late.toml", &job("late", "_late"));
    w.latest("late", Outcome::Succeeded).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "a new file waited {took:?}");
    // Only the new file was read again, however many listings that took.
    assert_eq!(w.stats.reads.load(Ordering::Relaxed), 10_001);
    assert_eq!(creates(&world).await, 2 * bulk.jobs.len());
    w.stop().await;
}

/// `lockstep watch` with no directory watches `jobs/` of the working directory, and keeps
/// its state where every command does: the host config's state directory (`.lockstep`
/// beside it), not in the watched directory.
#[test]
fn watch_with_no_directory_watches_jobs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("jobs")).unwrap();
    std::fs::write(dir.path().join("jobs/bad.toml"), "backup = 3\n").unwrap();
    std::fs::write(dir.path().join("lockstep.toml"), "").unwrap();
    let mut watch = std::process::Command::new(e2e::lockstep_bin())
        .arg("watch")
        .current_dir(dir.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let reports = dir.path().join(".lockstep/reports");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let refused = loop {
        let found = std::fs::read_dir(&reports).ok().and_then(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|name| name.starts_with("bad.") && name.ends_with("refused.json"))
        });
        if found.is_some() || std::time::Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        refused.is_some(),
        "no refusal report for jobs/bad.toml under {}",
        reports.display()
    );
    assert!(!dir.path().join("jobs/.lockstep").exists());
}

/// A state directory inside the watched one (given by flag, or by the host config) is
/// refused before anything is made: whoever writes job files there could plant journal
/// records beside them.
#[test]
fn a_state_directory_inside_the_watched_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    std::fs::write(dir.path().join("lockstep.toml"), "").unwrap();
    std::fs::write(
        dir.path().join("inside.toml"),
        "state_dir = \"jobs/state\"\n",
    )
    .unwrap();
    for args in [
        vec!["--state-dir", "jobs/.lockstep", "watch", "jobs"],
        vec!["--config", "inside.toml", "watch", "jobs"],
        vec![
            "--config",
            "inside.toml",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--watch",
            "jobs",
        ],
    ] {
        let out = std::process::Command::new(e2e::lockstep_bin())
            .args(&args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("lies inside the watched directory") && stderr.contains("--state-dir"),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            std::fs::read_dir(&jobs).unwrap().count(),
            0,
            "{args:?}: nothing made in jobs/"
        );
    }
}

/// Every file under `dir`, recursively, with its bytes.
fn every_file(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            found.extend(every_file(&path));
        } else if kind.is_file() {
            found.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    found
}

/// A job file that is a link out of the watched directory (to a file holding a secret,
/// directly or through a `..data`-style directory link) is refused naming where it points,
/// and never opened; a file over the size limit is refused naming its size and the limit.
/// The secret appears nowhere: not on stdout or stderr, not in the journal or the reports.
/// A valid job beside them runs as usual.
#[tokio::test]
async fn links_out_of_the_directory_and_oversized_files_are_refused_unread() {
    const SECRET: &str = "PLANTED-SECRET-41c9";
    let world = world().await;
    let jobs = world.path("jobs");
    let outside = world.path("outside");
    std::fs::create_dir_all(&jobs).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    // A valid job, so a watcher that read it would run it and log its fields.
    let secret_file = outside.join("token.toml");
    std::fs::write(&secret_file, job("stolen", SECRET)).unwrap();
    std::os::unix::fs::symlink(&secret_file, jobs.join("stolen.toml")).unwrap();
    std::os::unix::fs::symlink("../outside", jobs.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/token.toml", jobs.join("via.toml")).unwrap();
    let mut big = job("big", "_big");
    big.push_str(&format!("# {SECRET}\n"));
    big.push_str(&"#".repeat(1 << 20));
    std::fs::write(jobs.join("big.toml"), &big).unwrap();
    std::fs::write(jobs.join("fine.toml"), job("fine", "_fine")).unwrap();

    let mut inotify = inotify::Inotify::init().unwrap();
    inotify
        .watches()
        .add(&outside, inotify::WatchMask::OPEN)
        .unwrap();
    let mut running = world
        .spawn(&["watch", jobs.to_str().unwrap()], &[])
        .unwrap();
    let reports = world.path("state/reports");
    let refused = |name: &'static str| {
        let reports = reports.clone();
        async move {
            eventually(Duration::from_secs(60), || async {
                reports::read_latest(&reports, name).filter(|r| r.outcome == Outcome::Refused)
            })
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
        }
    };
    let target = secret_file.canonicalize().unwrap().display().to_string();
    for name in ["stolen", "via"] {
        let report = refused(name).await;
        assert!(
            report
                .refusals
                .iter()
                .any(|r| r.contains(&format!("{name}.toml")) && r.contains(&target)),
            "{name}: {:?}",
            report.refusals
        );
    }
    let report = refused("big").await;
    assert!(
        report
            .refusals
            .iter()
            .any(|r| r.contains(&format!("{} bytes", big.len())) && r.contains("1048576")),
        "{:?}",
        report.refusals
    );
    eventually(Duration::from_secs(60), || async {
        reports::read_latest(&reports, "fine").filter(|r| r.outcome == Outcome::Succeeded)
    })
    .await
    .expect("the valid job runs beside the refused ones");
    running.kill().unwrap();
    let ran = running.finish().await.unwrap();

    let mut buffer = [0u8; 4096];
    let opened = match inotify.read_events(&mut buffer) {
        Ok(events) => events.count(),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) => panic!("inotify: {e}"),
    };
    assert_eq!(opened, 0, "the file outside the directory was opened");
    assert!(
        !ran.stdout.contains(SECRET) && !ran.stderr.contains(SECRET),
        "{}",
        ran.explain()
    );
    for (path, bytes) in every_file(&world.path("state")) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(SECRET),
            "{} holds the secret",
            path.display()
        );
    }
    assert_eq!(creates(&world).await, creates_of(&world, "fine").await);
}

/// Import creates of the restore of job `name`, by its report.
async fn creates_of(world: &World, name: &str) -> usize {
    let reports = world.path("state/reports");
    reports::read_latest(&reports, name)
        .map(|r| r.jobs.len())
        .unwrap_or_else(|| panic!("no report of {name}"))
}

/// Points the link `link` at `target` the way kubelet and git-sync do: a new link under a
/// temporary name, renamed over the old one, so the name is never missing.
fn swap_link(link: &Path, target: &str) {
    let tmp = link.with_file_name(format!(
        "{}_tmp",
        link.file_name().unwrap().to_string_lossy()
    ));
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

/// A Kubernetes ConfigMap volume: every key is `NAME -> ..data/NAME`, `..data` a link to a
/// timestamped directory. An update writes a new timestamped directory, swaps `..data` to it
/// (a `..data_tmp` link renamed over it), adds the links of new keys, removes those of
/// deleted keys and the old directory. The new job runs; the unchanged one does not again.
#[tokio::test]
async fn a_configmap_volume_runs_a_new_job_and_not_an_unchanged_one() {
    let world = world().await;
    let jobs = world.path("jobs");
    let first = jobs.join("..2026_12_06_10_00_00.1");
    std::fs::create_dir_all(&first).unwrap();
    std::fs::write(first.join("orders.toml"), job("orders", "_cm")).unwrap();
    std::fs::write(first.join("notes.txt"), "not a job\n").unwrap();
    std::os::unix::fs::symlink("..2026_12_06_10_00_00.1", jobs.join("..data")).unwrap();
    for key in ["orders.toml", "notes.txt"] {
        std::os::unix::fs::symlink(format!("..data/{key}"), jobs.join(key)).unwrap();
    }
    let w = Watching::start(&world).await;
    let orders = w.latest("orders", Outcome::Succeeded).await;

    let second = jobs.join("..2026_12_06_10_05_00.2");
    std::fs::create_dir_all(&second).unwrap();
    std::fs::write(second.join("orders.toml"), job("orders", "_cm")).unwrap();
    std::fs::write(second.join("later.toml"), job("later", "_cm2")).unwrap();
    swap_link(&jobs.join("..data"), "..2026_12_06_10_05_00.2");
    std::os::unix::fs::symlink("..data/later.toml", jobs.join("later.toml")).unwrap();
    std::fs::remove_file(jobs.join("notes.txt")).unwrap();
    std::fs::remove_dir_all(&first).unwrap();
    let later = w.latest("later", Outcome::Succeeded).await;
    quiet().await;
    assert_eq!(
        creates(&world).await,
        orders.jobs.len() + later.jobs.len(),
        "the unchanged job did not run again"
    );
    assert_eq!(w.stats.refused.load(Ordering::Relaxed), 0);
    w.stop().await;
}

/// A git-sync checkout: the watched path is a link to the current commit's worktree, which
/// each sync swaps to a new one. The watcher follows the swap: the new commit's new job
/// runs, its unchanged one does not again, and a file written in the new worktree later is
/// seen, so the watch itself moved there too.
#[tokio::test]
async fn a_git_sync_checkout_is_followed_across_the_swap() {
    let world = world().await;
    let root = world.path("git");
    let first = root.join(".worktrees/aaaa");
    std::fs::create_dir_all(&first).unwrap();
    std::fs::write(first.join("orders.toml"), job("orders", "_gs")).unwrap();
    std::os::unix::fs::symlink(".worktrees/aaaa", root.join("repo")).unwrap();
    let w = Watching::start_in(&world, root.join("repo")).await;
    let orders = w.latest("orders", Outcome::Succeeded).await;

    let second = root.join(".worktrees/bbbb");
    std::fs::create_dir_all(&second).unwrap();
    std::fs::write(second.join("orders.toml"), job("orders", "_gs")).unwrap();
    std::fs::write(second.join("later.toml"), job("later", "_gs2")).unwrap();
    swap_link(&root.join("repo"), ".worktrees/bbbb");
    std::fs::remove_dir_all(&first).unwrap();
    let later = w.latest("later", Outcome::Succeeded).await;

    w.write("third.toml", &job("third", "_gs3"));
    let third = w.latest("third", Outcome::Succeeded).await;
    quiet().await;
    assert_eq!(
        creates(&world).await,
        orders.jobs.len() + later.jobs.len() + third.jobs.len(),
        "the unchanged job did not run again"
    );
    w.stop().await;
}
