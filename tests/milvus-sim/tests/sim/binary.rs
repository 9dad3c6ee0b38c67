//! The `milvus-sim` binary: `up` with --ports-file, refusal of a bad topology, and the
//! example topology.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use milvus_sim::{SimControl, Topology};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/sim/star.toml")
}

#[test]
fn the_example_topology_parses_as_a_two_secondary_star() {
    let topology = Topology::from_toml_file(example()).expect("examples/sim/star.toml is valid");
    let ids: Vec<_> = topology.clusters.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    let replication = topology.replication.expect("replicates");
    assert_eq!(
        (replication.primary.as_str(), replication.secondaries.len()),
        ("a", 2)
    );
    assert!(
        topology
            .clusters
            .iter()
            .all(|c| c.import_in_replicating_cluster)
    );
}

#[test]
fn a_malformed_topology_is_refused_with_file_line_column_and_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "[[cluster]]\nid = \"a\"\nimport_in_replicating_cluster = \"yes\"\n",
    )
    .expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_milvus-sim"))
        .arg("up")
        .arg(&file)
        .output()
        .expect("runs");
    assert_eq!(
        output.status.code(),
        Some(2),
        "a refused config has its own exit code"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let location = format!(
        "{}:3:33: cluster[0].import_in_replicating_cluster:",
        file.display()
    );
    assert!(stderr.contains(&location), "{stderr}");
}

#[tokio::test]
async fn up_writes_the_ports_file_and_serves_until_sigterm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let topology = dir.path().join("t.toml");
    std::fs::write(
        &topology,
        "[[cluster]]\nid = \"a\"\n[[cluster]]\nid = \"b\"\n[replication]\nprimary = \"a\"\nsecondaries = [\"b\"]\n",
    )
    .expect("write");
    let ports = dir.path().join("ports.json");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_milvus-sim"))
        .arg("up")
        .arg(&topology)
        .arg("--ports-file")
        .arg(&ports)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawns");
    let mut text = String::new();
    for _ in 0..500 {
        if let Ok(t) = std::fs::read_to_string(&ports) {
            text = t;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[1]["cluster"], "b");
    let uri = lines[1]["uri"].as_str().expect("uri");
    let state = SimControl::new(uri).state().await.expect("serves");
    assert_eq!(
        (state.role.as_str(), state.primary.as_deref()),
        ("secondary", Some("a"))
    );
    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits")
        .expect("waited");
    assert!(status.success(), "{status:?}");
}
