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
    assert!(bak["rows"].as_i64().is_some_and(|r| r > 0), "{bak}");
    assert!(
        backups[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("broken")),
        "{}",
        backups[1]
    );

    let (code, got, stdout) = lockstep(&world, &["get", "-n", "bak"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(got["backup"], *bak, "get and list agree");
    let collections = got["collections"].as_array().expect("collections");
    assert_eq!(collections.len(), 2);
    let rows: i64 = collections.iter().filter_map(|c| c["rows"].as_i64()).sum();
    assert_eq!(Some(rows), bak["rows"].as_i64(), "the collections add up");
    assert!(collections.iter().all(|c| c["partitions"] == 2), "{got}");

    let (code, _, stdout) = lockstep(&world, &["get", "-n", "absent"]);
    assert_eq!(code, 2, "a missing backup is refused: {stdout}");
    assert!(!world.dir.path().join(".lockstep").exists());
}
