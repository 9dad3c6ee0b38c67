//! The example star as a user starts it: `milvus-sim up examples/sim/star.toml` (Milvus 3.0
//! on every end, L0 import left off as 3.0 leaves it), a backup from `milvus-sim gen-backup`
//! (L0 segments among its deletes), and `lockstep run` of a job naming it. The L0 deletes are
//! folded in the stage, so the restore lands on every end, verified by a sample.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `milvus-sim` of this build, beside `lockstep`.
fn sim_bin() -> PathBuf {
    e2e::lockstep_bin().with_file_name("milvus-sim")
}

/// Each cluster's URI, from the ports file `up` writes once it serves: a JSON line per
/// cluster.
async fn uris(file: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let text = e2e::eventually(Duration::from_secs(30), || async {
        std::fs::read_to_string(file).ok()
    })
    .await
    .context("milvus-sim up wrote no ports file")?;
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line)?;
            let (Some(id), Some(uri)) = (v["cluster"].as_str(), v["uri"].as_str()) else {
                anyhow::bail!("a ports line without cluster and uri: {line}");
            };
            Ok((id.to_owned(), uri.to_owned()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_star_restores_a_generated_backup_with_its_l0_deletes_folded()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // The example by name, beside the data directories its relative storage paths make.
    let topology = dir.path().join("star.toml");
    std::fs::copy(repo().join("examples/sim/star.toml"), &topology)?;
    let ports_file = dir.path().join("ports.json");
    let _sim = tokio::process::Command::new(sim_bin())
        .args(["up".as_ref(), topology.as_os_str(), "--ports-file".as_ref()])
        .arg(&ports_file)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("milvus-sim up")?;
    let uris = uris(&ports_file).await?;

    let backups = dir.path().join("backups");
    let generated = std::process::Command::new(sim_bin())
        .args(["gen-backup", "--name", "star_bak", "--root"])
        .arg(&backups)
        .output()?;
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );

    let mut host = format!(
        "state_dir = \"state\"\n[backups]\nstorage = {{ url = \"file://{}\" }}\nroot = \"\"\n",
        backups.display()
    );
    for end in ["a", "b", "c"] {
        let uri = uris
            .get(end)
            .with_context(|| format!("no {end} in {uris:?}"))?;
        host.push_str(&format!(
            "\n[clusters.{end}]\nuri = \"{uri}\"\nstorage = {{ url = \"file://{}\" }}\n",
            dir.path().join("data").join(end).display()
        ));
    }
    std::fs::write(dir.path().join("lockstep.toml"), host)?;
    let job = dir.path().join("star.job.toml");
    std::fs::write(
        &job,
        "backup = \"star_bak\"\ntarget = \"a\"\nsecondaries = [\"b\", \"c\"]\n\
         [restore]\nrebuild_index = true\n[verify]\nrows = \"sample\"\n",
    )?;
    let run = e2e::lockstep_command(dir.path(), e2e::Output::Json)
        .args(["--config", "lockstep.toml", "run"])
        .arg(&job)
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout)?;
    let report = report["reports"].get(0).unwrap_or(&report);
    let collections = report["collections"].as_array().context("collections")?;
    assert!(!collections.is_empty());
    for c in collections {
        assert!(c["deleted"].as_i64() > Some(0), "{c}");
        for end in ["a", "b", "c"] {
            assert_eq!(c["imported"][end], c["live"], "{end}: {c}");
        }
    }
    let shown = report["verification"]["shown"]
        .as_array()
        .context("shown")?;
    assert_eq!(shown.len(), collections.len() * 3, "{stdout}");
    for s in shown {
        assert!(s["unverifiable"].is_null(), "{s}");
        assert_eq!(s["shows"], s["live"], "{s}");
        assert_eq!(s["sample"]["differences"], 0, "{s}");
    }
    Ok(())
}
