//! A service that runs for months stays bounded (issue 52): `serve` answers 429 with
//! `Retry-After` once `max_queued` restores wait, and its runner forgets what ended; and
//! `lockstep prune` (and `serve`, as it starts) removes only the finished restores
//! `[retention]` lets go, from the embedded journal and from etcd alike, while `--dry-run`
//! changes nothing. A job file without room waits for it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use lockstep::config::HostConfig;
use lockstep::job::Job;
use lockstep::journal::embedded::FileJournal;
use lockstep::journal::etcd::{EtcdJournal, EtcdLocation};
use lockstep::journal::{Claim, Journal, Outcome, RequestedBy, RestoreId, RestoreRecord};
use serde_json::{Value, json};

use crate::support::{TARGET, etcd, eventually, free_port, host_config, job, world};

/// Restores asked for at once beyond one running and `max_queued = 1` waiting are refused
/// with 429, `Retry-After` and the envelope (data null); asking again for a job that runs
/// joins it. Once they ended, the runner holds nothing: its maps are back to 0.
#[tokio::test]
async fn a_full_queue_answers_429_with_retry_after_and_the_runner_forgets_what_ended() {
    let world = world().await;
    let config = host_config(&world);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.insert_str(0, "max_queued = 1\n");
    std::fs::write(&config, text).unwrap();
    // Every gRPC answer of the target late for a while: the first restore is still
    // running when the others are asked for.
    world
        .slow_grpc(TARGET, Duration::from_millis(500), Duration::from_secs(4))
        .await
        .unwrap();
    let port = free_port().unwrap();
    let listen = format!("127.0.0.1:{port}");
    let serve = world.lockstep_with(
        e2e::Output::Json,
        &[
            "--state-dir",
            world.path("state").to_str().unwrap(),
            "serve",
            "--listen",
            &listen,
            "--max-parallel",
            "1",
        ],
        &[],
    );
    let _serve = e2e::Running::start(serve).unwrap();
    let base = format!("http://{listen}");
    let client = reqwest::Client::new();
    eventually(Duration::from_secs(30), || async {
        let up = client.get(format!("{base}/healthz")).send().await;
        up.ok().filter(|r| r.status().is_success())
    })
    .await
    .expect("serve answers");

    let restore = |suffix: &str| {
        let body = json!({
            "backup_name": "bak", "async": true, "target": TARGET, "secondaries": ["s1"],
            "collection_suffix": suffix,
        });
        client
            .post(format!("{base}/api/v1/restore"))
            .json(&body)
            .send()
    };
    let first = restore("_a").await.unwrap();
    assert_eq!(first.status(), 200);
    let second = restore("_b").await.unwrap();
    assert_eq!(second.status(), 200);
    let refused = restore("_c").await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(
        refused.headers()["retry-after"],
        lockstep::serve::runner::RETRY_AFTER.as_secs().to_string()
    );
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], 3, "{body}");
    assert_eq!(body["data"], Value::Null, "{body}");
    let msg = body["msg"].as_str().unwrap();
    assert!(msg.contains("max_queued 1"), "{msg}");
    // The same job again joins its task: no room needed.
    assert_eq!(restore("_a").await.unwrap().status(), 200);

    let tracked = |metrics: &str| -> (String, String) {
        let value = |map: &str| {
            let line = format!("lockstep_runner_tracked_jobs{{map=\"{map}\"}} ");
            (metrics.lines())
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or_else(|| panic!("no {line}in {metrics}"))
                .to_owned()
        };
        (value("tasks"), value("wanted"))
    };
    let during = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(
        tracked(&during.text().await.unwrap()),
        ("2".into(), "2".into())
    );
    // Both end; then nothing of them stays in memory, and both are in the journal.
    let metrics = eventually(Duration::from_secs(120), || async {
        let text = (client.get(format!("{base}/metrics")).send().await.ok()?)
            .text()
            .await
            .ok()?;
        (tracked(&text) == ("0".into(), "0".into())).then_some(text)
    })
    .await
    .expect("the runner forgets the restores that ended");
    let finished: u64 = (metrics.lines())
        .filter(|l| l.starts_with("lockstep_restores{") && !l.contains("running"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(finished, 2, "{metrics}");
}

/// A job file the runner has no room for waits, said once in the log, unread again, and
/// runs when the restore before it ended.
#[tokio::test]
async fn a_job_file_without_room_waits_and_runs_when_a_restore_ended() {
    let world = world().await;
    let config = host_config(&world);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.insert_str(0, "max_queued = 0\n");
    std::fs::write(&config, text).unwrap();
    let jobs = world.path("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    for name in ["one", "two"] {
        std::fs::write(
            jobs.join(format!("{name}.toml")),
            job(name, &format!("_{name}")),
        )
        .unwrap();
    }
    let state = world.path("state");
    let mut watching = world
        .spawn(
            &[
                "--state-dir",
                state.to_str().unwrap(),
                "watch",
                jobs.to_str().unwrap(),
                "--max-parallel",
                "1",
            ],
            &[],
        )
        .unwrap();
    let limit = Duration::from_secs(120);
    watching
        .wait_for_log("job file waits for room", 1, limit)
        .await
        .unwrap();
    watching
        .wait_for_log("job file no longer waits", 1, limit)
        .await
        .unwrap();
    for name in ["one", "two"] {
        let report = eventually(limit, || async {
            let report = lockstep::serve::reports::read_latest(&state.join("reports"), name)?;
            (report.outcome == Outcome::Succeeded).then_some(report)
        })
        .await;
        assert!(
            report.is_ok(),
            "{name} did not succeed:\n{}",
            watching.log()
        );
    }
    let log = watching.log();
    assert_eq!(watching.logged("job file waits for room"), 1, "{log}");
    // Each file's job taken once: the waiting one was kept, not read again.
    assert_eq!(watching.logged("job file ready"), 2, "{log}");
}

const DAY: i64 = 86_400;

/// A finished (or not) record of `job` started and last written `days_ago`, asked for by
/// `requested_by`.
fn record(
    (job, hash): (&str, &str),
    days_ago: i64,
    outcome: Option<Outcome>,
    requested_by: RequestedBy,
) -> RestoreRecord {
    let at = Timestamp::now() - SignedDuration::from_secs(days_ago * DAY);
    RestoreRecord {
        started_at: at,
        updated_at: at,
        outcome,
        requested_by: Some(requested_by),
        ..RestoreRecord::new(RestoreId::new(job, hash, 1), job, hash, 1, "b", vec![])
    }
}

/// What a retention test plants and expects.
struct Planted {
    root: tempfile::TempDir,
    config: PathBuf,
    /// The restore whose claim the test holds while `prune` runs.
    claimed: RestoreId,
    /// Removed by `[retention] keep = "30d"`, `keep_last = 2`.
    removed: Vec<RestoreId>,
    kept: Vec<RestoreId>,
}

impl Planted {
    fn state(&self) -> PathBuf {
        self.root.path().join("state")
    }

    fn reports(&self) -> PathBuf {
        self.state().join("reports")
    }
}

/// A host config with `[retention] keep = "30d"`, `keep_last = 2`, a watched directory
/// holding one job file, and in `journal` restores of every kind, each with its report
/// files: which `prune` must remove and which it must keep.
async fn plant(journal: &dyn Journal, root: tempfile::TempDir) -> (Planted, Box<dyn Claim>) {
    let dir = root.path();
    let config = dir.join("lockstep.toml");
    std::fs::write(
        &config,
        format!(
            "[clusters.t]\nuri = \"http://127.0.0.1:1\"\nstorage = {{ url = \"file://{0}/t\" }}\n\n\
             [backups]\nstorage = {{ url = \"file://{0}/backups\" }}\n\n\
             [retention]\nkeep = \"30d\"\nkeep_last = 2\n",
            dir.display()
        ),
    )
    .unwrap();
    let host = HostConfig::load(&config).unwrap();
    let jobs = dir.join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    let present = jobs.join("present.toml");
    std::fs::write(
        &present,
        "name = \"present\"\nbackup = \"b\"\ntarget = \"t\"\n",
    )
    .unwrap();
    let job = Job::from_file(&present, &host).unwrap();
    let watched = |file: &Path| RequestedBy::Watch {
        file: Some(file.display().to_string()),
    };
    let cli = RequestedBy::Cli { file: None };
    let succeeded = Some(Outcome::Succeeded);
    let records = [
        // Removed: old, finished, nothing asks for them; the file one was read from now
        // holds another job.
        record(("old", "a1"), 100, succeeded, cli.clone()),
        record(("rolled", "a2"), 60, Some(Outcome::RolledBack), cli.clone()),
        record(("edited", "a3"), 90, succeeded, watched(&present)),
        // Kept: the two newest finished (keep_last), one of them also within keep.
        record(("second", "b1"), 40, succeeded, cli.clone()),
        record(("recent", "b2"), 5, succeeded, cli.clone()),
        // Kept: unfinished, however old.
        record(("unfinished", "c1"), 200, None, cli.clone()),
        record(
            ("incomplete", "c2"),
            200,
            Some(Outcome::Incomplete),
            cli.clone(),
        ),
        // Kept: its job file is still in the watched directory.
        record(
            (&job.name, job.id().as_str()),
            300,
            Some(Outcome::Refused),
            watched(&present),
        ),
        // Kept: claimed while prune runs.
        record(("claimed", "d1"), 120, succeeded, cli.clone()),
    ];
    let reports = dir.join("state/reports");
    std::fs::create_dir_all(reports.join("latest")).unwrap();
    for r in &records {
        let claim = journal.claim(&r.id).await.unwrap();
        journal.save(claim.as_ref(), r).await.unwrap();
        for ext in ["json", "txt"] {
            std::fs::write(reports.join(format!("{}.{ext}", r.id)), "{}").unwrap();
            std::os::unix::fs::symlink(
                format!("../{}.{ext}", r.id),
                reports.join(format!("latest/{}.{ext}", r.job_name)),
            )
            .unwrap();
        }
    }
    // Reports of refusals, which have no record: kept by keep_last (the two newest), and
    // removed beyond both bounds.
    for (name, days_ago) in [("new", 0), ("mid", 60), ("old", 100)] {
        for ext in ["json", "txt"] {
            let file =
                std::fs::File::create(reports.join(format!("{name}.abc.refused.{ext}"))).unwrap();
            let at = std::time::SystemTime::now() - Duration::from_secs((days_ago * DAY) as u64);
            file.set_modified(at).unwrap();
        }
    }
    let ids: Vec<RestoreId> = records.iter().map(|r| r.id.clone()).collect();
    let claimed = ids[8].clone();
    let claim = eventually(Duration::from_secs(10), || async {
        journal.claim(&claimed).await.ok()
    })
    .await
    .expect("the claim");
    let planted = Planted {
        root,
        config,
        claimed,
        removed: ids[..3].to_vec(),
        kept: ids[3..].to_vec(),
    };
    (planted, claim)
}

/// `lockstep prune` over `planted`, with `journal_flag` (none: the state directory's).
async fn prune(planted: &Planted, journal_flag: Option<&str>, dry_run: bool) -> Value {
    let mut cmd = e2e::lockstep_command(planted.root.path(), e2e::Output::Json);
    cmd.arg("--config")
        .arg(&planted.config)
        .arg("--state-dir")
        .arg(planted.state());
    if let Some(url) = journal_flag {
        cmd.arg("--journal").arg(url);
    }
    cmd.arg("prune");
    if dry_run {
        cmd.arg("--dry-run");
    }
    let run = e2e::run_to_end(cmd).await.unwrap();
    assert_eq!(run.code, 0, "{}", run.explain());
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// Every file under `dir` with its bytes, links as where they lead.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            out.extend(tree(&path));
        } else if kind.is_symlink() {
            let to = std::fs::read_link(&path).unwrap();
            out.push((path, to.into_os_string().into_encoded_bytes()));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out.sort();
    out
}

/// The ids of records `answer` gives `action`, sorted.
fn with_action(answer: &Value, action: &str) -> Vec<String> {
    let mut ids: Vec<String> = (answer.as_array().unwrap().iter())
        .filter(|p| p["action"] == action && !p["id"].as_str().unwrap().ends_with(".refused"))
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn sorted(ids: &[RestoreId]) -> Vec<String> {
    let mut ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
    ids.sort();
    ids
}

/// Checks a dry run and then a pass of `prune` over `planted` in `journal`.
async fn prunes_only_what_it_may(journal: &dyn Journal, planted: &Planted, flag: Option<&str>) {
    let before = tree(planted.root.path());
    let dry = prune(planted, flag, true).await;
    assert_eq!(tree(planted.root.path()), before, "--dry-run changed files");
    // A dry run does not ask for claims (asking takes one): the claimed restore would go
    // but for its claim.
    let mut would = planted.removed.clone();
    would.push(planted.claimed.clone());
    assert_eq!(with_action(&dry, "would_remove"), sorted(&would));
    assert_eq!(journal.list().await.unwrap().whole().unwrap().len(), 9);

    let done = prune(planted, flag, false).await;
    assert_eq!(with_action(&done, "removed"), sorted(&planted.removed));
    assert_eq!(with_action(&done, "kept"), sorted(&planted.kept));
    let why = |id: &RestoreId| {
        (done.as_array().unwrap().iter())
            .find(|p| p["id"] == id.as_str())
            .map(|p| p["why"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert!(why(&planted.claimed).starts_with("claimed by"), "{done}");
    assert!(why(&planted.kept[0]).contains("keep_last"), "{done}");
    assert!(
        why(&planted.kept[4]).contains("still in the watched directory"),
        "{done}"
    );
    let left = journal.list().await.unwrap().whole().unwrap();
    let mut left: Vec<String> = left.iter().map(|r| r.id.to_string()).collect();
    left.sort();
    assert_eq!(left, sorted(&planted.kept));
    for id in &planted.removed {
        for ext in ["json", "txt"] {
            assert!(!planted.reports().join(format!("{id}.{ext}")).exists());
        }
        assert_eq!(journal.load(id).await.unwrap(), None);
    }
    for id in &planted.kept {
        assert!(planted.reports().join(format!("{id}.json")).exists());
    }
    let refusals: Vec<(&str, &str)> = (done.as_array().unwrap().iter())
        .filter(|p| p["id"].as_str().unwrap().ends_with(".refused"))
        .map(|p| (p["id"].as_str().unwrap(), p["action"].as_str().unwrap()))
        .collect();
    assert_eq!(
        refusals,
        [
            ("new.abc.refused", "kept"),
            ("mid.abc.refused", "kept"),
            ("old.abc.refused", "removed")
        ]
    );
    for (name, there) in [("new", true), ("mid", true), ("old", false)] {
        let report = planted.reports().join(format!("{name}.abc.refused.txt"));
        assert_eq!(report.exists(), there, "{}", report.display());
    }
    // No link is left leading to a removed report.
    for link in std::fs::read_dir(planted.reports().join("latest")).unwrap() {
        let link = link.unwrap().path();
        assert!(link.exists(), "{} dangles", link.display());
    }
}

#[tokio::test]
async fn prune_removes_only_what_retention_lets_go_from_the_state_directory() {
    let root = tempfile::tempdir().unwrap();
    let journal = FileJournal::open(&root.path().join("state")).unwrap();
    let (planted, claim) = plant(&journal, root).await;
    prunes_only_what_it_may(&journal, &planted, None).await;
    // The removed restores' lock files went with their records.
    for id in &planted.removed {
        assert!(!journal.dir().join(format!("{id}.lock")).exists());
    }
    drop(claim);
}

#[tokio::test]
async fn prune_removes_only_what_retention_lets_go_from_etcd() {
    let Some(etcd) = etcd("prune").await else {
        return;
    };
    let url = etcd.journal_url("prune");
    let journal = EtcdJournal::connect(&EtcdLocation::parse(&url).unwrap())
        .await
        .unwrap();
    let (planted, claim) = plant(&journal, tempfile::tempdir().unwrap()).await;
    prunes_only_what_it_may(&journal, &planted, Some(&url)).await;
    drop(claim);
}

/// `serve` applies `[retention]` as it starts, by the same rules as `prune`.
#[tokio::test]
async fn serve_applies_retention_as_it_starts() {
    let root = tempfile::tempdir().unwrap();
    let journal = FileJournal::open(&root.path().join("state")).unwrap();
    let (planted, claim) = plant(&journal, root).await;
    let mut cmd = e2e::lockstep_command(planted.root.path(), e2e::Output::Json);
    cmd.arg("--config")
        .arg(&planted.config)
        .arg("--state-dir")
        .arg(planted.state())
        .arg("serve")
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", free_port().unwrap()));
    let mut serve = e2e::Running::start(cmd).unwrap();
    serve
        .wait_for_log("retention applied", 1, Duration::from_secs(60))
        .await
        .unwrap();
    let left = journal.list().await.unwrap().whole().unwrap();
    let mut left: Vec<String> = left.iter().map(|r| r.id.to_string()).collect();
    left.sort();
    assert_eq!(left, sorted(&planted.kept), "{}", serve.log());
    drop(claim);
}
