//! What the operators' tests add to the e2e harness: the job file an operator drops into a
//! watched directory, and the counts they check.

use std::path::{Path, PathBuf};

pub use e2e::etcd::{TestEtcd, for_test as etcd, free_port};
pub use e2e::{TARGET, World, WorldSpec, answering, eventually};

/// milvus-sim with a target replicating to one secondary, the backup `bak` and the host
/// config naming both (`lockstep.toml`).
pub async fn world() -> World {
    World::start(WorldSpec::pair())
        .await
        .expect("the world starts")
}

/// The world's host config.
pub fn host_config(world: &World) -> PathBuf {
    world.path("lockstep.toml")
}

/// A job file's text restoring `bak` with `suffix` onto the target, mirrored to the
/// secondary.
pub fn job(name: &str, suffix: &str) -> String {
    format!(
        "name = \"{name}\"\nbackup = \"bak\"\ntarget = \"{TARGET}\"\nsecondaries = [\"s1\"]\n\n\
         [restore]\nsuffix = \"{suffix}\"\n\n[two_phase]\nmirror_grace = \"20s\"\n"
    )
}

/// Import creates the target received.
pub async fn creates(world: &World) -> usize {
    world
        .requests(TARGET, "/jobs/import/create")
        .await
        .expect("the target's state")
}

/// Every file under `dir` (not recursing into dot-directories) with its bytes: job files
/// must come out of a test exactly as they went in.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| (e.path(), std::fs::read(e.path()).unwrap()))
        .collect();
    files.sort();
    files
}
