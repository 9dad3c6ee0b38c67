//! Issue 52: a journal with a long history still lists. 10,000 finished restores and one
//! record that does not read, on each journal, written as a lockstep from before the index
//! left them: the first process indexes them; `status`, `list_restores` and `/metrics` of
//! the real binary show them all (or the newest few, through the index) and name the bad
//! one, where one etcd range holding every record (4 MiB at most) failed at about a
//! thousand.

use std::os::unix::fs::DirBuilderExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use jiff::Timestamp;
use lockstep::journal::etcd::EtcdLocation;
use lockstep::journal::etcd_client::{self, EtcdClient};
use lockstep::journal::{Outcome, RestoreId, RestorePhase, RestoreRecord, StoredReport};

use crate::support::free_port;

const RECORDS: usize = 10_000;

/// The `i`th finished restore: started a second after the one before, its report giving the
/// figures `/metrics` reads, and some 2 KB in all: 10,000 of them are more than the 16 MiB
/// the etcd client takes in one answer, so only a listing by pages reads them.
fn finished(i: usize) -> RestoreRecord {
    let id = RestoreId::new(&format!("job{i:05}"), "abcdef0123456789", 1);
    RestoreRecord {
        outcome: Some(Outcome::Succeeded),
        phase: RestorePhase::Finished,
        started_at: Timestamp::from_second(1_700_000_000 + i as i64).unwrap(),
        report: Some(
            StoredReport::of(&serde_json::json!({
                "reaction_ms": 120,
                "staging": {"bytes": 3},
                "summary": "x".repeat(1800),
            }))
            .unwrap(),
        ),
        ..RestoreRecord::new(
            id,
            &format!("job{i:05}"),
            "abcdef0123456789",
            1,
            "bak",
            vec![],
        )
    }
}

/// The newest `n` ids, newest first.
fn newest(n: usize) -> Vec<String> {
    (0..n)
        .map(|k| finished(RECORDS - 1 - k).id.to_string())
        .collect()
}

/// `lockstep ARGS` on an empty host config and `root`'s state directory.
fn lockstep(root: &Path, args: &[&str]) -> tokio::process::Command {
    let config = root.join("lockstep.toml");
    std::fs::write(&config, "").unwrap();
    let mut cmd = tokio::process::Command::new(e2e::lockstep_bin());
    cmd.arg("--output")
        .arg("json")
        .arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(root.join("state"))
        .args(args)
        .env("LOCKSTEP_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// `lockstep status` (with `extra`): the ids it lists, in its order, and its log.
async fn status(root: &Path, journal: &[&str], extra: &[&str]) -> (Vec<String>, String) {
    let args: Vec<&str> = (journal.iter().copied())
        .chain(["status"])
        .chain(extra.iter().copied())
        .collect();
    let out = lockstep(root, &args).output().await.unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{log}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids = (listed.as_array().unwrap().iter())
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    (ids, log)
}

/// `status`, `list_restores` and `/metrics` on the journal `journal` names (none: the state
/// directory's), which holds [`RECORDS`] finished restores and the bad record `bad`.
async fn every_view_lists_them(root: &Path, journal: &[&str], bad: &str) {
    let (all, log) = status(root, journal, &[]).await;
    assert_eq!(all.len(), RECORDS, "{log}");
    assert_eq!(all[..3], newest(3), "newest first");
    assert!(log.contains(bad), "the bad record is named: {log}");
    let (last, _) = status(root, journal, &["--last", "4"]).await;
    assert_eq!(last, newest(4));

    let listen = format!("127.0.0.1:{}", free_port().unwrap());
    let args: Vec<&str> = (journal.iter().copied())
        .chain(["serve", "--listen", &listen])
        .collect();
    let _serve = lockstep(root, &args).spawn().unwrap();
    let base = format!("http://{listen}");
    crate::support::answering(&base).await.unwrap();
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let request = http.get(format!("{base}{path}"));
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    // `serve` reads the whole journal once at start: the bad record is known from then on.
    let metrics = crate::support::eventually(Duration::from_secs(60), || async {
        let metrics = get("/metrics").await;
        metrics
            .contains("lockstep_journal_unreadable_records 1")
            .then_some(metrics)
    })
    .await
    .expect("the bad record counted once serve read the journal");
    for line in [
        format!("lockstep_restores{{outcome=\"succeeded\"}} {RECORDS}"),
        "lockstep_restores{outcome=\"running\"} 0".to_owned(),
        "lockstep_journal_listed 1".to_owned(),
        // The restores' reactions are this process's figures: it finished none.
        "lockstep_reaction_seconds_count 0".to_owned(),
    ] {
        assert!(metrics.contains(&line), "no {line}:\n{metrics}");
    }
    let listed: serde_json::Value =
        serde_json::from_str(&get("/api/v1/list_restores?limit=5").await).unwrap();
    let ids: Vec<&str> = (listed["data"].as_array().unwrap().iter())
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, newest(5), "{listed}");
    let msg = listed["msg"].as_str().unwrap();
    assert!(
        msg.contains("1 journal record(s) do not read") && msg.contains(bad),
        "{msg}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&get("/api/v1/list_restores").await).unwrap();
    assert_eq!(listed["data"].as_array().unwrap().len(), RECORDS);
    let bad_limit: serde_json::Value =
        serde_json::from_str(&get("/api/v1/list_restores?limit=0").await).unwrap();
    assert_eq!(bad_limit["code"], 400, "{bad_limit}");
}

#[tokio::test]
async fn ten_thousand_records_list_in_the_state_directory() {
    let root = tempfile::tempdir().unwrap();
    // The journal's own directory (owner-only), filled as saves before the index left it.
    let journal = root.path().join("state").join("journal");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&journal)
        .unwrap();
    for i in 0..RECORDS {
        let record = finished(i);
        let path = journal.join(format!("{}.json", record.id));
        std::fs::write(path, serde_json::to_vec(&record).unwrap()).unwrap();
    }
    let bad = "broken.ffff00000000.1.json";
    std::fs::write(journal.join(bad), "{ not a record").unwrap();
    every_view_lists_them(root.path(), &[], bad).await;
}

#[tokio::test]
async fn ten_thousand_records_list_in_etcd() {
    let Some(etcd) = crate::support::etcd("long-history").await else {
        return;
    };
    let url = etcd.journal_url("long-history");
    let location = EtcdLocation::parse(&url).unwrap();
    let raw = EtcdClient::connect(&location, Duration::from_secs(5))
        .await
        .unwrap();
    let put = |id: &str, value: Vec<u8>| {
        etcd_client::op_put(&format!("{}/record/{id}", location.prefix), value, 0)
    };
    let mut puts: Vec<_> = (0..RECORDS)
        .map(|i| {
            let record = finished(i);
            put(record.id.as_str(), serde_json::to_vec(&record).unwrap())
        })
        .collect();
    let bad = "broken.ffff00000000.1";
    puts.push(put(bad, b"{ not a record".to_vec()));
    // etcd takes 128 operations in a transaction by default.
    for chunk in puts.chunks(100) {
        raw.txn(vec![], chunk.to_vec(), vec![]).await.unwrap();
    }
    let root = tempfile::tempdir().unwrap();
    every_view_lists_them(root.path(), &["--journal", &url], bad).await;
}
