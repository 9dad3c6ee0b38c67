//! An operator's first week (issue 51), tried as a new user would: the ids one command
//! prints are taken by the others, `status` lists like REST, an outcome is spelled one way,
//! a job that already ran says so, and refusals speak the caller's words.

use e2e::Output;

use crate::support::{TARGET, world};

/// `status`, `recover` and `verify` take the job identity an async REST answer gives
/// (`NAME.HASH`, the newest attempt), as `get_restore` does; `status` lists newest first under
/// a header with backup, target and renaming; the text report and `status` spell the outcome
/// as README's exit codes do; a job run again says in its first line, and in `ran`, that it
/// did not run.
#[tokio::test]
async fn every_command_takes_the_ids_the_others_print_and_a_rerun_says_it_did_not_run() {
    let world = world().await;
    let first = world
        .job("nightly", "[restore]\nsuffix = \"_a\"\n")
        .unwrap();
    let first = first.to_str().unwrap();
    let ran = world.run(&["run", first], &[]).await.unwrap();
    assert_eq!(ran.code, 0, "{}", ran.explain());
    assert_eq!(ran.report["ran"], true, "{}", ran.report);
    let id = ran.report["restore_id"].as_str().unwrap().to_owned();
    let identity = id.strip_suffix(".1").expect("attempt 1").to_owned();

    // The same content again: not run, and the report says so before anything else.
    let again = world
        .run_with(Output::Text, &["run", first], &[])
        .await
        .unwrap();
    assert_eq!(again.code, 0, "{}", again.explain());
    let first_line = again.stdout.lines().next().unwrap_or_default();
    assert!(
        first_line.starts_with(&format!("already committed as {id} at "))
            && first_line.ends_with("not run again; the report below is that run's"),
        "{}",
        again.stdout
    );
    assert!(
        again.stdout.contains(&format!("restore {id}  [succeeded]")),
        "{}",
        again.stdout
    );
    let again = world.run(&["run", first], &[]).await.unwrap();
    assert_eq!(again.report["ran"], false, "{}", again.report);

    let second = world.job("weekly", "[restore]\nsuffix = \"_b\"\n").unwrap();
    let second = world
        .run(&["run", second.to_str().unwrap()], &[])
        .await
        .unwrap();
    assert_eq!(second.code, 0, "{}", second.explain());
    let second_id = second.report["restore_id"].as_str().unwrap().to_owned();

    let listed = world
        .run_with(Output::Text, &["status"], &[])
        .await
        .unwrap();
    assert_eq!(listed.code, 0, "{}", listed.explain());
    let lines: Vec<Vec<&str>> = (listed.stdout.lines())
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(
        lines[0],
        [
            "id", "job", "backup", "target", "renaming", "outcome", "started"
        ],
        "{}",
        listed.stdout
    );
    assert_eq!(
        lines[1][..6],
        [
            &second_id,
            "weekly",
            "bak",
            TARGET,
            "suffix _b",
            "succeeded"
        ]
    );
    assert_eq!(
        lines[2][..6],
        [&id, "nightly", "bak", TARGET, "suffix _a", "succeeded"]
    );

    let status = world
        .run_with(Output::Text, &["status", &identity], &[])
        .await
        .unwrap();
    assert_eq!(status.code, 0, "{}", status.explain());
    assert!(
        status
            .stdout
            .contains(&format!("restore {id}  [succeeded]")),
        "{}",
        status.stdout
    );
    let by_name = world.run(&["status", "weekly"], &[]).await.unwrap();
    assert_eq!(
        by_name.report["id"],
        second_id.as_str(),
        "{}",
        by_name.explain()
    );

    let recovered = world.run(&["recover", &identity], &[]).await.unwrap();
    assert_eq!(recovered.code, 0, "{}", recovered.explain());
    let verified = world.run(&["verify", &identity], &[]).await.unwrap();
    assert_eq!(
        verified.report["restore_id"],
        id.as_str(),
        "{}",
        verified.explain()
    );
}

/// Refusals in the words of whoever asked: a flag to a CLI user (never the job file's
/// `backup = …`), one line per unreachable end with its cause and no Debug dump of the
/// transport's error, and, with no host config at all, where one was looked for.
#[tokio::test]
async fn refusals_speak_the_callers_words() {
    let world = world().await;
    let out = world
        .run_with(Output::Text, &["restore", "--suffix", "_x"], &[])
        .await
        .unwrap();
    assert_eq!(out.code, 2, "{}", out.explain());
    assert!(
        out.stderr.contains(
            "-n/--name: missing: expected the name of the backup to restore, e.g. `--name my_backup`"
        ) && !out.stderr.contains("backup ="),
        "{}",
        out.explain()
    );

    // Nothing listens there; an end given by its URI alone is named by it.
    let closed = format!("http://127.0.0.1:{}", crate::support::free_port().unwrap());
    let storage = format!("file://{}", world.path("gone").display());
    let job = world
        .write_job(
            "gone",
            &format!("backup = \"bak\"\ntarget = {{ uri = \"{closed}\", storage = {{ url = \"{storage}\" }} }}\n"),
        )
        .unwrap();
    let out = world
        .run_with(Output::Text, &["run", job.to_str().unwrap()], &[])
        .await
        .unwrap();
    assert_eq!(out.code, 2, "{}", out.explain());
    let refused: Vec<&str> = (out.stdout.lines())
        .filter(|l| l.trim_start().starts_with("refused:"))
        .collect();
    assert_eq!(refused.len(), 1, "{}", out.stdout);
    assert!(
        refused[0].contains("is unreachable: Connection refused"),
        "{}",
        out.stdout
    );
    assert_eq!(refused[0].matches(&closed).count(), 1, "{}", out.stdout);
    for debug in ["Error(", "Some(", "MetadataMap", "status: Unavailable"] {
        assert!(!out.stdout.contains(debug), "{debug}: {}", out.stdout);
    }

    let bare = tempfile::tempdir().unwrap();
    let in_bare = |args: &[&str]| {
        std::process::Command::new(e2e::lockstep_bin())
            .args(args)
            .current_dir(bare.path())
            .env_remove("MILVUSCONF")
            .env_remove("LOCKSTEP_CONFIG")
            .output()
            .unwrap()
    };
    let out = in_bare(&["list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let root = bare.path().display();
    assert!(
        stderr.contains(&format!(
            "no lockstep.toml or backup.yaml found (looked in: {root}/lockstep.toml, \
             {root}/backup.yaml, {root}/configs/backup.yaml)"
        )),
        "{stderr}"
    );
    // `status` needs none: the default state directory serves.
    let out = in_bare(&["status"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `lockstep watch` says what it did: a line per restore as it ends (id, job file, outcome,
/// collections, rows per end, exit code), one JSON object a line with `--output json`; a
/// watcher started again over the same files says each already ran and runs nothing.
#[tokio::test]
async fn watch_tells_each_restore_as_it_ends() {
    use tokio::io::AsyncBufReadExt as _;
    let world = world().await;
    let jobs = world.path("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    let file = jobs.join("orders.toml");
    std::fs::write(&file, crate::support::job("orders", "_w")).unwrap();
    let jobs = jobs.to_str().unwrap();

    // The first line a watcher prints, then it is stopped.
    let first_line = |output: Output| {
        let mut cmd = world.lockstep_with(output, &["watch", jobs], &[]);
        async move {
            let mut child = cmd.spawn().unwrap();
            let stdout = child.stdout.take().unwrap();
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            let line = tokio::time::timeout(std::time::Duration::from_secs(120), lines.next_line())
                .await
                .expect("a line within 120 s")
                .unwrap()
                .expect("a line before the end");
            child.kill().await.unwrap();
            line
        }
    };
    let told: serde_json::Value = serde_json::from_str(&first_line(Output::Json).await).unwrap();
    e2e::schema::check("told.json", &told).unwrap();
    assert_eq!(told["file"], file.display().to_string(), "{told}");
    assert_eq!(told["outcome"], "succeeded", "{told}");
    assert_eq!(told["ran"], true, "{told}");
    assert_eq!(told["exit_code"], 0, "{told}");
    assert_eq!(told["collections"], 2, "{told}");
    assert_eq!(told["committed"], 2, "{told}");
    let rows = told["rows"].as_object().expect("rows per end");
    assert_eq!(rows.keys().collect::<Vec<_>>(), ["s1", TARGET], "{told}");
    assert!(
        rows.values()
            .all(|n| n.as_i64() > Some(0) && *n == rows["s1"]),
        "{told}"
    );
    let id = told["restore_id"].as_str().unwrap();
    let creates = crate::support::creates(&world).await;

    let again = first_line(Output::Text).await;
    assert_eq!(
        again,
        format!(
            "restore {id} ({}): succeeded, already: not run again; 2 of 2 collection(s) \
             committed; rows s1={} {TARGET}={}; exit 0",
            file.display(),
            rows["s1"],
            rows[TARGET]
        )
    );
    assert_eq!(
        crate::support::creates(&world).await,
        creates,
        "it ran once"
    );
}

/// Automation written for milvus-backup names no secondaries. With `secondaries = "discover"`
/// on the target's cluster, `restore -n bak` restores into every cluster the target
/// replicates to, each with what the host config gives it; a replication target the host
/// config does not name is refused before anything is made. Without the key the refusal
/// says how to name them, and says the key.
#[tokio::test]
async fn secondaries_are_discovered_from_the_targets_topology() {
    let spec = e2e::WorldSpec {
        secondaries: 2,
        ..e2e::WorldSpec::pair()
    };
    let world = e2e::World::start(spec).await.expect("the world starts");
    let config = world.path("lockstep.toml");
    // milvus-backup's restore names no target either: its Milvus is the default.
    let written = format!(
        "default_target = \"{TARGET}\"\n{}",
        std::fs::read_to_string(&config).unwrap()
    );
    std::fs::write(&config, &written).unwrap();
    let restore = |suffix: &'static str| {
        let world = &world;
        async move {
            let out = world
                .run(&["restore", "-n", "bak", "--suffix", suffix], &[])
                .await
                .unwrap();
            let kinds: Vec<String> = (out.report["refusal_kinds"].as_array().into_iter())
                .flatten()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect();
            (out, kinds)
        }
    };

    let (out, kinds) = restore("_unnamed").await;
    assert_eq!(
        (out.code, &kinds[..]),
        (2, &["secondaries_unnamed".to_owned()][..]),
        "{}",
        out.explain()
    );
    assert!(
        out.stdout.contains(r#"secondaries = \"discover\""#),
        "{}",
        out.stdout
    );
    // In the words of the command line that asked, with the clusters to give.
    let fix = (out.stdout.split("--secondaries ").nth(1))
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_default();
    let mut named: Vec<String> = fix.split(',').map(str::to_owned).collect();
    let mut want = vec![world.uri("s1"), world.uri("s2")];
    named.sort();
    want.sort();
    assert_eq!(named, want, "{}", out.stdout);
    assert!(!out.stdout.contains("secondaries = ["), "{}", out.stdout);

    let discovering = written.replace(
        &format!("[clusters.{TARGET}]\n"),
        &format!("[clusters.{TARGET}]\nsecondaries = \"discover\"\n"),
    );
    assert_ne!(
        discovering, written,
        "the target's table is in the host config"
    );
    let s2 = discovering.find("\n[clusters.s2]").expect("s2's table");
    let s2_end = discovering[s2 + 1..]
        .find("\n[")
        .map_or(discovering.len(), |n| s2 + 1 + n);
    let without_s2 = format!("{}{}", &discovering[..s2], &discovering[s2_end..]);
    std::fs::write(&config, &without_s2).unwrap();
    let (out, kinds) = restore("_unknown").await;
    assert_eq!(
        (out.code, &kinds[..]),
        (2, &["discovered_unknown".to_owned()][..]),
        "{}",
        out.explain()
    );
    assert!(
        out.stdout.contains(&world.uri("s2")),
        "names where: {}",
        out.stdout
    );
    assert_eq!(
        crate::support::creates(&world).await,
        0,
        "a refusal makes nothing"
    );

    std::fs::write(&config, &discovering).unwrap();
    let (out, kinds) = restore("_found").await;
    assert_eq!(out.code, 0, "{}", out.explain());
    assert!(kinds.is_empty(), "{kinds:?}");
    let ends: Vec<&str> = (out.report["ends"].as_array().expect("ends").iter())
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(ends, [TARGET, "s1", "s2"], "{}", out.stdout);
    for c in out.report["collections"].as_array().expect("collections") {
        let live = c["live"].as_i64().expect("live rows");
        for end in &ends {
            assert_eq!(c["imported"][end].as_i64(), Some(live), "{end}: {c}");
        }
    }
}
