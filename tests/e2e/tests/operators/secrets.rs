//! Secrets never leave memory: every command and every refusal is run with planted secret
//! values (a cluster token, an S3 secret key, the API's token, a password written in
//! milvus-backup's config and one given with `--set`), logging at trace, and everything
//! lockstep wrote is searched for them: stdout, stderr, the journal, the reports, the
//! metrics, the status page and every REST answer.

use std::path::{Path, PathBuf};
use std::time::Duration;

use e2e::{Running, StorageService, World, WorldSpec, lockstep_command, secondary};

use crate::support::{TARGET, free_port};

const TOKEN_VAR: &str = "LOCKSTEP_SECRETS_MILVUS_TOKEN";
const TOKEN: &str = "root:planted-milvus-token-1f2e3d";
const S3_SECRET: &str = "planted-s3-secret-4b5c6d7e";
const API_TOKEN_VAR: &str = "LOCKSTEP_SECRETS_API_TOKEN";
const API_TOKEN: &str = "planted-api-token-7a8b9c0d1e2f";
const YAML_PASSWORD: &str = "planted-yaml-password-5e6f";
const SET_PASSWORD: &str = "planted-set-password-9a8b";
const PLANTED: [&str; 5] = [TOKEN, S3_SECRET, API_TOKEN, YAML_PASSWORD, SET_PASSWORD];
/// The parts of the token that would show if it were split on `:` (a user and password).
const TOKEN_PASSWORD: &str = "planted-milvus-token-1f2e3d";

/// Everything lockstep said, by where it said it.
#[derive(Default)]
struct Said(Vec<(String, String)>);

impl Said {
    fn add(&mut self, what: impl Into<String>, text: impl Into<String>) {
        self.0.push((what.into(), text.into()));
    }

    /// Every place a planted secret shows, with a little of what surrounds it.
    fn leaks(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (what, text) in &self.0 {
            for secret in PLANTED.iter().chain([&TOKEN_PASSWORD]) {
                if let Some(at) = text.find(secret) {
                    let from = text[..at]
                        .char_indices()
                        .rev()
                        .nth(80)
                        .map_or(0, |(i, _)| i);
                    let to = (at + secret.len() + 80).min(text.len());
                    let to = (to..=text.len())
                        .find(|i| text.is_char_boundary(*i))
                        .unwrap();
                    out.push(format!("{what}: …{}…", &text[from..to]));
                }
            }
        }
        out
    }
}

/// The environment of every command: the planted values, and logging at trace.
fn env() -> Vec<(&'static str, &'static str)> {
    vec![
        (TOKEN_VAR, TOKEN),
        ("LOCKSTEP_E2E_S3_SECRET", S3_SECRET),
        (API_TOKEN_VAR, API_TOKEN),
        ("LOCKSTEP_LOG", "trace"),
    ]
}

/// Runs `lockstep ARGS` with the world's host config, keeping what it printed.
async fn run(world: &World, said: &mut Said, args: &[&str]) -> e2e::RunResult {
    let run = world.run(args, &env()).await.unwrap();
    said.add(format!("stdout of {args:?}"), run.stdout.clone());
    said.add(format!("stderr of {args:?}"), run.stderr.clone());
    run
}

/// Every file under `dir` as text (lossily), but those the test itself wrote.
fn files(dir: &Path, skip: &[PathBuf], said: &mut Said) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if skip.contains(&path) {
            continue;
        }
        if path.is_dir() {
            files(&path, skip, said);
        } else if let Ok(bytes) = std::fs::read(&path) {
            said.add(path.display().to_string(), String::from_utf8_lossy(&bytes));
        }
    }
}

/// The world on moto, each end's token and the S3 secret key planted, and a cluster nobody
/// answers at.
async fn world() -> Option<World> {
    let endpoint = e2e::s3_endpoint("secrets")?;
    let world = World::start(WorldSpec {
        service: StorageService::S3 { endpoint },
        ..WorldSpec::pair()
    })
    .await
    .unwrap();
    let path = world.path("lockstep.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    for end in [TARGET.to_owned(), secondary(0)] {
        let header = format!("[clusters.{end}]\n");
        config = config.replace(&header, &format!("{header}token_env = \"{TOKEN_VAR}\"\n"));
    }
    config.push_str(&format!(
        "\n[clusters.dead]\nuri = \"http://127.0.0.1:{}\"\ntoken_env = \"{TOKEN_VAR}\"\n",
        free_port().unwrap()
    ));
    std::fs::write(&path, config).unwrap();
    Some(world)
}

/// `lockstep serve` on a free port with the API token and the job directory watched, once
/// it answers.
async fn serve(world: &World, watched: &Path) -> (Running, String) {
    let listen = format!("127.0.0.1:{}", free_port().unwrap());
    let running = world
        .spawn(
            &[
                "serve",
                "--listen",
                &listen,
                "--token-env",
                API_TOKEN_VAR,
                "--watch",
                watched.to_str().unwrap(),
            ],
            &env(),
        )
        .unwrap();
    let base = format!("http://{listen}");
    crate::support::answering(&base).await.unwrap();
    (running, base)
}

#[tokio::test]
async fn no_secret_leaves_memory() {
    let Some(world) = world().await else {
        return;
    };
    let mut said = Said::default();
    let job = |name: &str, text: &str| world.write_job(name, text).unwrap();
    let good = job(
        "good",
        &format!(
            "backup = \"bak\"\ntarget = \"{TARGET}\"\nsecondaries = [\"s1\"]\n[restore]\nsuffix = \"_good\"\nrebuild_index = true\n[verify]\nrows = \"sample\"\n"
        ),
    );
    let good = good.to_str().unwrap();

    // What a restore does, and what reads it back.
    run(&world, &mut said, &["plan", good]).await;
    let ran = run(&world, &mut said, &["run", good]).await;
    assert_eq!(ran.code, 0, "{}", ran.explain());
    assert!(
        ran.stderr.lines().filter(|l| l.contains("TRACE")).count() > 100,
        "logging at trace: {}",
        ran.explain()
    );
    let id = ran.report["restore_id"].as_str().unwrap().to_owned();
    for args in [
        &["status"][..],
        &["status", &id],
        &["verify", &id, "--sample", "10"],
        &["recover"],
        &["list"],
        &["get", "-n", "bak"],
        &["check", "bak", "--level", "data"],
    ] {
        let r = run(&world, &mut said, args).await;
        assert!(r.code == 0, "{args:?}: {}", r.explain());
    }
    let restored = run(
        &world,
        &mut said,
        &[
            "restore",
            "-n",
            "bak",
            "--target",
            TARGET,
            "--secondaries",
            "s1",
            "--suffix",
            "_cli",
        ],
    )
    .await;
    assert_eq!(restored.code, 0, "{}", restored.explain());

    // Every refusal: a job that names credentials, one that names no cluster, an end that
    // does not answer, a token that is not set, a bad --set.
    let refused = [
        job(
            "inline",
            &format!(
                "backup = \"bak\"\n[target]\nuri = \"http://10.9.9.9:19530\"\ntoken_env = \"{TOKEN_VAR}\"\nstorage = {{ url = \"s3://x/y\" }}\n"
            ),
        ),
        job("unknown", "backup = \"bak\"\ntarget = \"nope\"\n"),
        job(
            "dead",
            "backup = \"bak\"\ntarget = \"dead\"\n[restore]\nsuffix = \"_dead\"\n",
        ),
    ];
    for job in &refused {
        let r = run(&world, &mut said, &["run", job.to_str().unwrap()]).await;
        assert_ne!(r.code, 0, "{}", r.explain());
    }
    let unset = world
        .run(&["run", good], &[("LOCKSTEP_LOG", "trace")])
        .await
        .unwrap();
    said.add("stdout without the token", unset.stdout);
    said.add("stderr without the token", unset.stderr);
    let bad_set = run(&world, &mut said, &["--set", "nokey", "list"]).await;
    assert_eq!(bad_set.code, 2, "{}", bad_set.explain());

    // milvus-backup's config, a password written in it and another given with --set.
    let yaml = world.milvus_backup_yaml().unwrap().replace(
        "milvus:\n",
        &format!("milvus:\n  user: root\n  password: {YAML_PASSWORD}\n"),
    );
    let yaml_path = world.path("backup.yaml");
    std::fs::write(&yaml_path, yaml).unwrap();
    for args in [
        vec!["list"],
        vec![
            "--set",
            &format!("milvus.password={SET_PASSWORD}"),
            "get",
            "-n",
            "bak",
        ],
        vec!["restore", "-n", "bak", "--suffix", "_yaml"],
    ] {
        let mut cmd = lockstep_command(world.dir.path(), e2e::Output::Json);
        cmd.arg("--config").arg(&yaml_path).args(&args);
        for (k, v) in env() {
            cmd.env(k, v);
        }
        let r = e2e::run_to_end(cmd).await.unwrap();
        if args.contains(&"get") {
            assert!(
                r.stderr
                    .contains("--set milvus.password puts a secret on the command line")
                    && r.stderr.contains("MILVUS_PASSWORD"),
                "{}",
                r.explain()
            );
        }
        said.add(format!("stdout of yaml {args:?}"), r.stdout);
        said.add(format!("stderr of yaml {args:?}"), r.stderr);
    }

    // serve: every read route, a restore asked over REST, a wrong token, and a job file the
    // watcher runs.
    let watched = world.path("watched");
    std::fs::create_dir_all(&watched).unwrap();
    let (mut server, base) = serve(&world, &watched).await;
    let http = reqwest::Client::new();
    let get = |path: String| {
        let http = http.clone();
        let base = base.clone();
        async move {
            let resp = http
                .get(format!("{base}{path}"))
                .bearer_auth(API_TOKEN)
                .send()
                .await
                .unwrap();
            (resp.status(), resp.text().await.unwrap())
        }
    };
    let body = serde_json::json!({
        "backup_name": "bak", "target": TARGET, "secondaries": ["s1"],
        "collection_suffix": "_rest", "async": false,
    });
    let posted = http
        .post(format!("{base}/api/v1/restore"))
        .bearer_auth(API_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    said.add("POST /api/v1/restore", posted.clone());
    let wrong = http
        .get(format!("{base}/api/v1/list_restores"))
        .bearer_auth("not-the-token-but-long-enough")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    said.add("a wrong token's answer", wrong);
    std::fs::write(
        watched.join("watched.toml"),
        format!("backup = \"bak\"\ntarget = \"{TARGET}\"\nsecondaries = [\"s1\"]\n[restore]\nsuffix = \"_watched\"\n"),
    )
    .unwrap();
    server
        .wait_for_log("phase=finished", 2, Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| panic!("{e}: {}", server.log()));
    for path in [
        "/".to_owned(),
        "/metrics".to_owned(),
        "/healthz".to_owned(),
        "/api/v1/list_restores".to_owned(),
        format!("/api/v1/get_restore?id={id}"),
        "/api/v1/list".to_owned(),
        "/api/v1/get_backup?backup_name=bak".to_owned(),
        "/api/v1/hello".to_owned(),
        "/api/v1/openapi.json".to_owned(),
    ] {
        let (status, text) = get(path.clone()).await;
        assert!(status.is_success(), "{path}: {status} {text}");
        said.add(format!("GET {path}"), text);
    }
    server.kill().unwrap();
    said.add("serve's log", server.log());

    // Everything written under the world's directory, but what the test wrote itself.
    files(
        world.dir.path(),
        &[yaml_path, world.path("lockstep.toml")],
        &mut said,
    );
    assert!(
        said.0.iter().any(|(what, _)| what.contains("/journal/")),
        "the journal was read: {:?}",
        said.0.iter().map(|(w, _)| w).collect::<Vec<_>>()
    );
    assert!(said.0.len() > 40, "everything was read");
    let leaks = said.leaks();
    assert!(
        leaks.is_empty(),
        "planted secrets were written:\n{}",
        leaks.join("\n")
    );
}
