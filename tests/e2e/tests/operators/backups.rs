//! milvus-backup's read-only habits: `lockstep list` shows every backup under the root (one
//! that does not read says why, the others still show), `lockstep get -n NAME` one backup
//! by collection. Neither makes a state directory.

use std::process::Command;

fn lockstep(world: &crate::support::World, args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(e2e::lockstep_bin())
        .arg("--config")
        .arg(crate::support::host_config(world))
        .args(["--output", "json"])
        .args(args)
        .output()
        .expect("lockstep runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), json, stdout)
}

#[tokio::test]
async fn list_and_get_show_the_backups_under_the_root() {
    let world = crate::support::world().await;
    let broken = world.dir.path().join("backups/backup/broken/meta");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("backup_meta.json"), "{ not json").unwrap();

    let (code, listed, stdout) = lockstep(&world, &["list"]);
    assert_eq!(code, 0, "{stdout}");
    let backups = listed["backups"].as_array().expect("a list of backups");
    let names: Vec<&str> = backups.iter().filter_map(|b| b["name"].as_str()).collect();
    assert_eq!(names, ["bak", "broken"]);
    let bak = &backups[0];
    assert_eq!(bak["format"], "binlog");
    assert_eq!(bak["collections"], 2);
    assert!(bak["inserted"].as_i64().is_some_and(|r| r > 0), "{bak}");
    assert!(
        backups[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("broken")),
        "{}",
        backups[1]
    );

    let (code, got, stdout) = lockstep(&world, &["get", "-n", "bak"]);
    assert_eq!(code, 0, "{stdout}");
    for key in [
        "id",
        "format",
        "collections",
        "segments",
        "l0_segments",
        "inserted",
        "size",
    ] {
        assert_eq!(got["backup"][key], bak[key], "get and list agree on {key}");
    }
    let collections = got["collections"].as_array().expect("collections");
    assert_eq!(collections.len(), 2);
    let rows: i64 = collections
        .iter()
        .filter_map(|c| c["inserted"].as_i64())
        .sum();
    assert_eq!(
        Some(rows),
        bak["inserted"].as_i64(),
        "the collections add up"
    );
    assert!(collections.iter().all(|c| c["partitions"] == 2), "{got}");

    let (code, _, stdout) = lockstep(&world, &["get", "-n", "absent"]);
    assert_eq!(code, 2, "a missing backup is refused: {stdout}");
    assert!(!world.dir.path().join(".lockstep").exists());
}

/// The figures of README's table, as a view of a backup gives them.
#[derive(Debug, Default, PartialEq)]
struct Figures {
    segments: i64,
    l0_segments: i64,
    inserted: i64,
    deleted: i64,
    live: i64,
}

impl Figures {
    fn of(json: &serde_json::Value) -> Figures {
        let n = |key: &str| json[key].as_i64().unwrap_or(-1);
        Figures {
            segments: n("segments"),
            l0_segments: n("l0_segments"),
            inserted: n("inserted"),
            deleted: n("deleted"),
            live: n("live"),
        }
    }

    /// From gen-backup's line: `… 12 segments + 9 L0, … rows inserted=12000 deleted=30 live=11970`.
    fn of_line(line: &str) -> Figures {
        let word_before = |marker: &str| -> i64 {
            let head = &line[..line
                .find(marker)
                .unwrap_or_else(|| panic!("{marker}: {line}"))];
            head.rsplit(' ')
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(-1)
        };
        let after = |key: &str| -> i64 {
            let tail =
                &line[line.find(key).unwrap_or_else(|| panic!("{key}: {line}")) + key.len()..];
            tail.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(-1)
        };
        Figures {
            segments: word_before("segments + "),
            l0_segments: after("segments + "),
            inserted: after("inserted="),
            deleted: after("deleted="),
            live: after("live="),
        }
    }

    /// The parts summed.
    fn total(parts: impl Iterator<Item = Figures>) -> Figures {
        parts.fold(Figures::default(), |t, p| Figures {
            segments: t.segments + p.segments,
            l0_segments: t.l0_segments + p.l0_segments,
            inserted: t.inserted + p.inserted,
            deleted: t.deleted + p.deleted,
            live: t.live + p.live,
        })
    }
}

/// One backup with deletes in delta logs and in L0 segments shows the same segments and rows
/// in every view: gen-backup's line, `list`, `get`, `plan`, and the restore's report, whose
/// every end imported its live rows. An L0 segment's `num_of_rows` (its deletes) is never
/// counted as rows or as a data segment.
#[tokio::test]
async fn every_view_of_one_backup_gives_the_same_figures() {
    let world = crate::support::world().await;
    let sim = e2e::lockstep_bin().with_file_name("milvus-sim");
    let root = world.dir.path().join("backups/backup");
    let generated = Command::new(&sim)
        .args([
            "gen-backup",
            "--name",
            "fig",
            "--seed",
            "7",
            "--collections",
            "2",
        ])
        .args(["--partitions", "2", "--l0-segments", "present", "--root"])
        .arg(&root)
        .output()
        .expect("milvus-sim gen-backup runs");
    let line = String::from_utf8_lossy(&generated.stdout).into_owned();
    assert!(generated.status.success(), "{line}");
    let want = Figures::of_line(&line);
    assert!(
        want.l0_segments > 0 && want.deleted > 0,
        "deletes of both kinds: {line}"
    );
    assert_eq!(want.inserted - want.deleted, want.live, "{line}");

    let (code, listed, stdout) = lockstep(&world, &["list"]);
    assert_eq!(code, 0, "{stdout}");
    let fig = (listed["backups"].as_array().expect("backups").iter())
        .find(|b| b["name"] == "fig")
        .expect("fig listed");
    let meta_only = Figures::of(fig);
    assert_eq!(
        (
            meta_only.segments,
            meta_only.l0_segments,
            meta_only.inserted
        ),
        (want.segments, want.l0_segments, want.inserted),
        "list: {fig}"
    );

    let (code, got, stdout) = lockstep(&world, &["get", "-n", "fig"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(Figures::of(&got["backup"]), want, "get: {stdout}");
    let collections = got["collections"].as_array().expect("collections");
    assert_eq!(
        Figures::total(collections.iter().map(Figures::of)),
        want,
        "get's collections"
    );

    let job = world
        .write_job(
            "fig",
            &format!(
                "backup = \"fig\"\ntarget = \"{}\"\nsecondaries = [\"s1\"]\n",
                crate::support::TARGET
            ),
        )
        .expect("job file");
    let plan = world
        .run(&["plan", job.to_str().unwrap()], &[])
        .await
        .expect("plan runs");
    assert_eq!(plan.code, 0, "{}", plan.explain());
    assert_eq!(
        Figures::of(&plan.report["totals"]),
        want,
        "plan: {}",
        plan.stdout
    );

    let run = world
        .run(&["run", job.to_str().unwrap()], &[])
        .await
        .expect("run runs");
    assert_eq!(run.code, 0, "{}", run.explain());
    let collections = run.report["collections"].as_array().expect("collections");
    let rows = |key: &str| {
        collections
            .iter()
            .map(|c| c[key].as_i64().unwrap_or(-1))
            .sum::<i64>()
    };
    assert_eq!(
        (rows("inserted"), rows("deleted"), rows("live")),
        (want.inserted, want.deleted, want.live),
        "the report: {}",
        run.stdout
    );
    for end in world.ends() {
        let imported: i64 = (collections.iter())
            .map(|c| c["imported"][end.as_str()].as_i64().unwrap_or(-1))
            .sum();
        assert_eq!(imported, want.live, "{end} imported the live rows");
    }
}
