//! The compile cache: a second load deserializes what the first compiled,
//! and an entry the host did not write (corrupted, or signed under another
//! cache's key) is recompiled, never loaded. A folder, or an entry, that is not
//! its user's alone is not trusted whatever its signature says.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use lockstep::plugins::{CacheOutcome, CheckGrants, CheckLimits, Phase, PluginRuntime, Verdict};

use super::support::{config, context, no_storage, plugin};

fn entries(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("cache dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .collect();
    found.sort();
    found
}

async fn load_and_call(cache: &Path) -> CacheOutcome {
    let runtime = PluginRuntime::new(cache).expect("runtime");
    let plugin = runtime
        .load(&plugin("test-guest"), CheckLimits::default())
        .await
        .expect("loads");
    let run = plugin
        .check(
            &context(Phase::BeforeImport),
            &config(&[("behaviour", "pass")]),
            &CheckGrants::default(),
            no_storage(),
        )
        .await;
    assert_eq!(run.outcome, Ok(Verdict::Pass), "the loaded code runs");
    plugin.cache_outcome().clone()
}

#[tokio::test]
async fn second_load_comes_from_the_cache() {
    let cache = tempfile::tempdir().expect("temp dir");
    assert_eq!(load_and_call(cache.path()).await, CacheOutcome::Compiled);
    assert_eq!(entries(cache.path(), "cwasm").len(), 1);
    assert_eq!(load_and_call(cache.path()).await, CacheOutcome::Hit);
}

#[tokio::test]
async fn a_corrupted_entry_is_recompiled_not_loaded() {
    let cache = tempfile::tempdir().expect("temp dir");
    load_and_call(cache.path()).await;
    let entry = &entries(cache.path(), "cwasm")[0];
    let mut bytes = std::fs::read(entry).expect("entry");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(entry, &bytes).expect("corrupt");

    let outcome = load_and_call(cache.path()).await;
    assert!(
        matches!(&outcome, CacheOutcome::Rejected(reason) if reason.contains("signature")),
        "{outcome:?}"
    );
    assert_eq!(
        load_and_call(cache.path()).await,
        CacheOutcome::Hit,
        "rewritten"
    );
}

#[tokio::test]
async fn an_entry_from_another_cache_is_not_trusted() {
    let ours = tempfile::tempdir().expect("temp dir");
    let theirs = tempfile::tempdir().expect("temp dir");
    load_and_call(ours.path()).await;
    load_and_call(theirs.path()).await;
    // Same component, same wasmtime: same entry name, different signing key.
    for extension in ["cwasm", "tag"] {
        let foreign = &entries(theirs.path(), extension)[0];
        let target = ours.path().join(foreign.file_name().expect("name"));
        std::fs::copy(foreign, target).expect("plant foreign entry");
    }
    let outcome = load_and_call(ours.path()).await;
    assert!(matches!(outcome, CacheOutcome::Rejected(_)), "{outcome:?}");
}

#[tokio::test]
async fn an_unsigned_entry_is_not_trusted() {
    let cache = tempfile::tempdir().expect("temp dir");
    load_and_call(cache.path()).await;
    std::fs::remove_file(&entries(cache.path(), "tag")[0]).expect("drop signature");
    let outcome = load_and_call(cache.path()).await;
    assert!(matches!(outcome, CacheOutcome::Rejected(_)), "{outcome:?}");
}

#[test]
fn one_runtime_per_cache_directory_per_process() {
    let dir = tempfile::tempdir().unwrap();
    let a = PluginRuntime::shared(dir.path()).expect("runtime");
    let b = PluginRuntime::shared(dir.path()).expect("runtime");
    assert!(
        a.is(&b),
        "a second restore gets the same engine, linker and pool"
    );
    let other = tempfile::tempdir().unwrap();
    assert!(!a.is(&PluginRuntime::shared(other.path()).expect("runtime")));
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Issue 48: a key and an entry signed with it, planted in a cache folder that others
/// can write, are never deserialized. The plant is a whole cache copied from another
/// folder, which a folder only its user can write loads (the control); once the folder is
/// mode 0777, the check still runs, compiled in memory, and the folder is left as found.
#[tokio::test]
async fn a_folder_others_can_write_is_not_used() {
    let elsewhere = tempfile::tempdir().expect("temp dir");
    assert_eq!(
        load_and_call(elsewhere.path()).await,
        CacheOutcome::Compiled
    );
    let temp = tempfile::tempdir().expect("temp dir");
    let planted = temp.path().join("plugin-cache");
    std::fs::create_dir(&planted).expect("plant folder");
    for file in std::fs::read_dir(elsewhere.path()).expect("cache dir") {
        let file = file.expect("entry").path();
        std::fs::copy(&file, planted.join(file.file_name().expect("name"))).expect("plant");
    }
    assert_eq!(
        load_and_call(&planted).await,
        CacheOutcome::Hit,
        "the plant is a cache today's code would load"
    );

    chmod(&planted, 0o777);
    let before: Vec<_> = entries(&planted, "cwasm");
    let outcome = load_and_call(&planted).await;
    assert!(
        matches!(&outcome, CacheOutcome::Unused(reason)
            if reason.contains(&planted.display().to_string())
                && reason.contains("written by its group or by others")),
        "{outcome:?}"
    );
    let mode = std::fs::metadata(&planted)
        .expect("folder")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o777,
        "left as found: narrowing it would trust the plant"
    );
    assert_eq!(entries(&planted, "cwasm"), before, "nothing written there");
}

/// In a folder only its user can write, an entry others can write is recompiled and
/// replaced by one only its user can.
#[tokio::test]
async fn an_entry_others_can_write_is_recompiled() {
    let cache = tempfile::tempdir().expect("temp dir");
    load_and_call(cache.path()).await;
    let entry = &entries(cache.path(), "cwasm")[0];
    chmod(entry, 0o666);
    let outcome = load_and_call(cache.path()).await;
    assert!(
        matches!(&outcome, CacheOutcome::Rejected(reason) if reason.contains("by others")),
        "{outcome:?}"
    );
    let mode = std::fs::metadata(entry)
        .expect("entry")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(load_and_call(cache.path()).await, CacheOutcome::Hit);
}
