//! Ids that are paths: every entry point that takes a restore id refuses one, opens nothing
//! outside the state directory (watched with inotify on a decoy's directory), answers the
//! API without naming a path or quoting a file, and `recover` contacts no URI a planted
//! record names.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use inotify::{Inotify, WatchMask};

/// What a planted record holds: a secret, and URIs that point at a listener the test owns,
/// so a lockstep that loaded it and contacted its ends would be seen.
const SECRET: &str = "DECOY-SECRET-9f3e21";

/// The ids an attacker tries, as a CLI argument takes them (the API gets them encoded).
fn hostile_ids() -> Vec<String> {
    vec![
        "../../decoy/x".into(),
        "../../../etc/passwd".into(),
        "/tmp/decoy/x".into(),
        "..%2f..%2fdecoy%2fx".into(),
        "%2e%2e%2f%2e%2e%2fdecoy%2fx".into(),
        format!("../../decoy/{}", "x".repeat(300)),
    ]
}

/// `{root}/decoy/x.json`, a record whose ends point at a listener of the test's, and an
/// inotify watch on its directory.
struct Decoy {
    dir: PathBuf,
    inotify: Inotify,
    listener: TcpListener,
}

impl Decoy {
    fn plant(root: &Path) -> Decoy {
        let dir = root.join("decoy");
        std::fs::create_dir_all(&dir).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        let record = serde_json::json!({
            "id": "x", "secret": SECRET, "job_name": "x", "content_hash": "ab",
            "ends": [{"name": "t", "uri": uri, "role": "target"}],
        });
        std::fs::write(dir.join("x.json"), record.to_string()).unwrap();
        let inotify = Inotify::init().unwrap();
        inotify.watches().add(&dir, WatchMask::OPEN).unwrap();
        let mut decoy = Decoy {
            dir,
            inotify,
            listener,
        };
        // The control: the watch sees an open.
        std::fs::read(decoy.dir.join("x.json")).unwrap();
        assert!(decoy.opened() > 0, "the inotify watch sees nothing");
        decoy
    }

    /// Opens of anything in the decoy's directory since the last call.
    fn opened(&mut self) -> usize {
        let mut buffer = [0u8; 4096];
        let mut count = 0;
        loop {
            match self.inotify.read_events(&mut buffer) {
                Ok(events) => {
                    let n = events.count();
                    if n == 0 {
                        return count;
                    }
                    count += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return count,
                Err(e) => panic!("inotify: {e}"),
            }
        }
    }

    /// Whether anything connected to the URIs the planted record names.
    fn contacted(&self) -> bool {
        self.listener.accept().is_ok()
    }

    /// Files now in the decoy's directory.
    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

/// A state directory two levels below the decoy's parent, so `../../decoy/x` from its
/// journal directory names the decoy; and a host config with no cluster.
fn layout(root: &Path) -> (PathBuf, PathBuf) {
    let state = root.join("state");
    std::fs::create_dir_all(state.join("journal")).unwrap();
    let config = root.join("lockstep.toml");
    std::fs::write(&config, "").unwrap();
    (state, config)
}

fn lockstep(config: &Path, state: &Path, args: &[&str]) -> std::process::Output {
    Command::new(e2e::lockstep_bin())
        .arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .output()
        .expect("lockstep runs")
}

#[test]
fn status_and_recover_refuse_an_id_that_is_a_path_and_touch_nothing_outside() {
    let root = tempfile::tempdir().unwrap();
    let (state, config) = layout(root.path());
    let mut decoy = Decoy::plant(root.path());
    let before = decoy.files();
    // Listing the directory opened it: only what lockstep opens from here on counts.
    decoy.opened();
    for id in hostile_ids() {
        for command in ["status", "recover"] {
            let out = lockstep(&config, &state, &[command, &id]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {id}: {stderr}");
            assert!(
                stderr.contains("is not a restore id"),
                "{command} {id}: {stderr}"
            );
            assert!(!stderr.contains(SECRET), "{command} {id}: {stderr}");
        }
    }
    assert_eq!(decoy.opened(), 0, "a file beside the decoy was opened");
    assert!(
        !decoy.contacted(),
        "recover contacted a planted record's end"
    );
    assert_eq!(decoy.files(), before, "a file was written beside the decoy");
}

#[test]
fn an_id_with_a_nul_is_refused_by_the_cli() {
    // A NUL cannot be a process argument; the parser refuses it where it can arrive (the
    // API), and the CLI refuses the nearest thing, an id that ends in garbage.
    let root = tempfile::tempdir().unwrap();
    let (state, config) = layout(root.path());
    let out = lockstep(&config, &state, &["status", "orders.0123456789ab.1\u{1}"]);
    assert_eq!(out.status.code(), Some(2));
}

mod api {
    use std::sync::Arc;

    use lockstep::config::HostConfig;
    use lockstep::engine::{Interrupt, Silent};
    use lockstep::journal::embedded::FileJournal;
    use lockstep::serve::access::Tokens;
    use lockstep::serve::api::router;
    use lockstep::serve::origin::AllowedOrigins;
    use lockstep::serve::{ApiState, LiveProgress, Runner, listen};

    use super::*;

    #[tokio::test(flavor = "multi_thread")]
    async fn get_restore_refuses_an_id_that_is_a_path_and_names_no_path_in_its_answer() {
        let root = tempfile::tempdir().unwrap();
        let (state, config) = layout(root.path());
        let mut decoy = Decoy::plant(root.path());
        let mut host = HostConfig::load(&config).unwrap();
        host.state_dir = state.clone();
        let (_stop, shutdown) = Interrupt::new();
        let runner = Runner::new(
            Arc::new(FileJournal::open(&state).unwrap()),
            host,
            state.clone(),
            Arc::new(LiveProgress::new(Arc::new(Silent))),
            shutdown,
            1,
        );
        let app = router(Arc::new(ApiState {
            runner,
            tokens: Tokens::none(),
            allowed: AllowedOrigins::default(),
            watch: None,
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(listen::serve(listener, None, app, std::future::pending()));

        let client = reqwest::Client::new();
        let mut queries: Vec<String> = hostile_ids()
            .iter()
            .map(|id| url::form_urlencoded::byte_serialize(id.as_bytes()).collect())
            .collect();
        // Already encoded: a NUL, and a traversal spelled in escapes.
        queries.push("orders.0123456789ab.1%00".into());
        queries.push("%2e%2e%2f%2e%2e%2fdecoy%2fx".into());
        for query in queries {
            let resp = client
                .get(format!("{base}/api/v1/get_restore?id={query}"))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 200, "{query}");
            let body: serde_json::Value = resp.json().await.unwrap();
            assert_eq!(body["code"], 400, "{query}: {body}");
            let msg = body["msg"].as_str().unwrap();
            assert!(msg.starts_with("invalid id"), "{query}: {msg}");
            for leak in [SECRET, "decoy", "/", root.path().to_str().unwrap()] {
                assert!(
                    !msg.contains(leak),
                    "{query}: the answer names {leak:?}: {msg}"
                );
            }
        }
        assert_eq!(decoy.opened(), 0, "a file beside the decoy was opened");
        server.abort();
    }
}
