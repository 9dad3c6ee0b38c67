//! The READMEs' walkthroughs run as written (issue 51): the demo, the job directory beside
//! it, the watched directory, `serve` on a network with the curl calls against it, and the
//! fleet's etcd journal (the seed's command line with URIs is `e2e::drop_in`'s). Every `sh`
//! block of the READMEs that tell an operator what to type is run by one of them, or named
//! below with why it is not.

use std::path::Path;
use std::time::Duration;

use e2e::{Running, readme, run_to_end};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

use crate::support::{TARGET, World, WorldSpec, eventually};

/// A walkthrough's long-running command (`demo --keep-running`, `watch`, `serve`) says what
/// a reader waits for within this.
const SAYS_WITHIN: Duration = Duration::from_secs(120);

/// The name examples/serve/README.md publishes `serve` under.
const PUBLISHED: &str = "lockstep.example.com";

/// The READMEs whose `sh` blocks are walkthroughs.
const READMES: [&str; 3] = ["README.md", "jobs/README.md", "examples/serve/README.md"];

/// Each block a test here (or `e2e::drop_in`) runs, by file and the start of its first
/// command.
const RUN: [(&str, &str); 7] = [
    ("README.md", "cargo run -p lockstep -- demo"),
    ("README.md", "lockstep restore -n"),
    ("jobs/README.md", "cargo run -p lockstep -- demo --dir"),
    (
        "examples/serve/README.md",
        "lockstep --config lockstep.toml watch",
    ),
    ("examples/serve/README.md", "export LOCKSTEP_API_TOKEN"),
    ("examples/serve/README.md", "curl -s --cacert ca.pem"),
    ("examples/serve/README.md", "lockstep --journal \"etcd://"),
];

/// Each block not run, and why.
const NOT_RUN: [(&str, &str, &str); 2] = [
    (
        "README.md",
        "bash .ci/run",
        "it installs and starts what the suite needs, then runs the suite this test is part of",
    ),
    (
        "README.md",
        "kubectl create namespace lockstep",
        "no Kubernetes here: operators::image runs the Deployment's and the Job's pods from \
         the image, with the ConfigMaps and the Secrets these commands make mounted as the \
         kubelet mounts them",
    ),
];

/// Every walkthrough block is run by a test or said not to be: a new one cannot be left
/// out by accident.
#[test]
fn every_walkthrough_block_is_run_or_said_why_not() {
    let mut unaccounted = Vec::new();
    for file in READMES {
        for block in readme::blocks(file).unwrap() {
            let first = block.commands.first().cloned().unwrap_or_default();
            let named = |f: &str, start: &str| f == file && first.starts_with(start);
            let run = RUN.iter().filter(|(f, s)| named(f, s)).count();
            let not_run = NOT_RUN.iter().filter(|(f, s, _)| named(f, s)).count();
            if run + not_run != 1 {
                unaccounted.push(format!("{file}:{} ({first})", block.line));
            }
        }
    }
    assert!(
        unaccounted.is_empty(),
        "blocks neither run by a test nor named in NOT_RUN (or named twice): {unaccounted:?}"
    );
    // And each named block is still there, once.
    for (file, start) in RUN
        .iter()
        .copied()
        .chain(NOT_RUN.iter().map(|&(f, s, _)| (f, s)))
    {
        readme::block(file, start).unwrap();
    }
}

/// README's first command, then jobs/README.md's: the demo kept running, the example job
/// copied into its directory, and a watcher started from another directory, which prints a
/// line per restore: the demo's own job already ran, the example succeeded on every end.
#[tokio::test]
async fn the_demo_and_the_example_job_run_as_the_readmes_say() {
    let anywhere = tempfile::tempdir().unwrap();
    let first = readme::block("README.md", "cargo run -p lockstep -- demo").unwrap();
    let demo = readme::edit(first.command(0).unwrap(), &[readme::CARGO_RUN]).unwrap();
    let run = run_to_end(readme::sh(anywhere.path(), &demo).unwrap())
        .await
        .unwrap();
    assert_eq!(run.code, 0, "{}", run.explain());
    assert!(run.stdout.contains("succeeded"), "{}", run.explain());

    let block = readme::block("jobs/README.md", "cargo run -p lockstep -- demo --dir").unwrap();
    let dir = anywhere.path().join("demo");
    let dir = dir.to_str().unwrap();
    let built = [readme::CARGO_RUN, ("/tmp/demo", dir)];
    let at =
        |n: usize, edits: &[(&str, &str)]| readme::edit(block.command(n).unwrap(), edits).unwrap();
    let mut demo = Running::start(readme::exec(anywhere.path(), &at(0, &built)).unwrap()).unwrap();
    demo.wait_for_log("milvus-sim stays up until Ctrl-C", 1, SAYS_WITHIN)
        .await
        .unwrap();
    // The copy names the repository's jobs/ folder: it runs at the repository's top.
    let copy = run_to_end(readme::sh(&readme::repository(), &at(1, &built[1..])).unwrap())
        .await
        .unwrap();
    assert_eq!(copy.code, 0, "{}", copy.explain());
    let mut watch = Running::start(readme::exec(anywhere.path(), &at(2, &built)).unwrap()).unwrap();
    watch
        .wait_for_output("restore ", 2, SAYS_WITHIN)
        .await
        .unwrap();
    let printed = watch.printed();
    let line = |job: &str| {
        printed
            .lines()
            .find(|l| l.contains(&format!("/{job}.toml)")))
            .unwrap_or_else(|| panic!("no line for {job}: {printed}"))
    };
    assert!(
        line("demo-restore").contains(": succeeded, already: not run again;"),
        "{printed}"
    );
    let example = line("demo-from-jobs");
    assert!(
        example.contains(": succeeded; 3 of 3 collection(s) committed;")
            && example.ends_with("; exit 0"),
        "{example}"
    );
    same_rows_on(example, &["primary", "standby-1", "standby-2"]);

    watch.interrupt().unwrap();
    let watched = watch.finish().await.unwrap();
    assert_eq!(watched.code, 0, "{}", watched.explain());
    demo.interrupt().unwrap();
    let demo = demo.finish().await.unwrap();
    assert_eq!(demo.code, 0, "{}", demo.explain());
}

/// The rows a watcher's line gives each of `ends` (`rows a=N b=N`): above 0, and the same.
fn same_rows_on(line: &str, ends: &[&str]) {
    let rows = line
        .split("; ")
        .find_map(|part| part.strip_prefix("rows "))
        .unwrap_or_else(|| panic!("no rows in {line}"));
    let shown: Vec<(&str, i64)> = rows
        .split(' ')
        .map(|pair| {
            let (end, n) = pair.split_once('=').expect("end=rows");
            (end, n.parse().expect("a row count"))
        })
        .collect();
    let names: Vec<&str> = shown.iter().map(|(end, _)| *end).collect();
    assert_eq!(names, ends, "{line}");
    assert!(
        shown.iter().all(|(_, n)| *n > 0 && *n == shown[0].1),
        "{line}"
    );
}

/// examples/serve/README.md, in a world whose clusters and backup stand for the README's
/// (`prod-a` is the target, `prod-b` its secondary, `nightly` the backup): the watched
/// directory; `serve` on every address with TLS and both tokens made as it says, and its
/// two curl calls through the name it is published under; and the fleet's command line on
/// the suite's etcd. Each restore shows the backup's live rows on both ends.
#[tokio::test]
async fn the_service_walkthroughs_run_as_written() {
    let test = "walkthroughs::the_service_walkthroughs_run_as_written";
    let Some(etcd) = crate::support::etcd(test).await else {
        return;
    };
    let world = World::start(WorldSpec::pair()).await.unwrap();
    let file = "examples/serve/README.md";
    let cwd = world.path("");
    let job = |dir: &str, name: &str, suffix: &str| {
        let dir = world.path(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("{name}.toml")),
            crate::support::job(name, suffix),
        )
        .unwrap();
    };

    // The watched directory, word for word.
    job("jobs", "watched", "_w");
    let watch = readme::block(file, "lockstep --config lockstep.toml watch").unwrap();
    watcher_runs(&world, &cwd, watch.command(0).unwrap(), "watched", "_w").await;

    // `serve` on a network: its tokens as README makes them, TLS for the name it is
    // published under, every address, and the optional flags given.
    let serve = readme::block(file, "export LOCKSTEP_API_TOKEN").unwrap();
    let tokens = run_to_end(
        readme::sh(
            &cwd,
            &format!(
                "{}; printf '%s %s' \"$LOCKSTEP_API_TOKEN\" \"$LOCKSTEP_READ_TOKEN\"",
                serve.command(0).unwrap()
            ),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let (api_token, read_token) = tokens.stdout.split_once(' ').expect("two tokens");
    assert_eq!(
        (api_token.len(), read_token.len()),
        (64, 64),
        "{}",
        tokens.stdout
    );
    let tls = world.path("tls");
    std::fs::create_dir_all(&tls).unwrap();
    published_certificate(&tls, &cwd.join("ca.pem"));
    let tls_dir = format!("{}/", tls.display());
    let command = readme::edit(
        serve.command(1).unwrap(),
        &[
            // A port of its own, which it prints.
            ("0.0.0.0:8443", "0.0.0.0:0"),
            ("/etc/lockstep/tls/", &tls_dir),
            // README's brackets mark flags a reader may leave out; both are given here.
            (
                "[--watch jobs/] [--max-parallel 4]",
                "--watch jobs/ --max-parallel 4",
            ),
        ],
    )
    .unwrap();
    let mut cmd = readme::exec(&cwd, &command).unwrap();
    cmd.env("LOCKSTEP_API_TOKEN", api_token)
        .env("LOCKSTEP_READ_TOKEN", read_token);
    let mut serving = Running::start(cmd).unwrap();
    serving
        .wait_for_output("listening on https://0.0.0.0:", 1, SAYS_WITHIN)
        .await
        .unwrap();
    let port = serving
        .printed()
        .lines()
        .find_map(|l| l.strip_prefix("listening on https://0.0.0.0:"))
        .and_then(|p| p.trim().parse::<u16>().ok())
        .expect("the port serve listens on");

    // The curl calls as written, reaching the published name at this port (what its DNS
    // name and load balancer would do) with the world's names for the README's.
    let calls = readme::block(file, "curl -s --cacert ca.pem").unwrap();
    let connect = format!("curl -s --connect-to {PUBLISHED}:443:127.0.0.1:{port}");
    let curl = |n: usize, edits: &[(&str, &str)]| {
        let mut edits = edits.to_vec();
        edits.push(("curl -s", &connect));
        let command = readme::edit(calls.command(n).unwrap(), &edits).unwrap();
        let mut cmd = readme::sh(&cwd, &command).unwrap();
        cmd.env("LOCKSTEP_API_TOKEN", api_token)
            .env("LOCKSTEP_READ_TOKEN", read_token);
        async move {
            let out = run_to_end(cmd).await.unwrap();
            assert_eq!(out.code, 0, "{}", out.explain());
            serde_json::from_str::<serde_json::Value>(&out.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
        }
    };
    let secondary = e2e::secondary(0);
    let started = curl(
        0,
        &[
            ("\"nightly\"", "\"bak\""),
            ("\"prod-a\"", &format!("\"{TARGET}\"")),
            ("\"prod-b\"", &format!("\"{secondary}\"")),
        ],
    )
    .await;
    let id = started["data"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {started}"))
        .to_owned();
    let done = eventually(SAYS_WITHIN, || async {
        let answer = curl(1, &[("nightly.0123456789ab", &id)]).await;
        (answer["data"]["state_code"] != 1 && answer["data"]["state_code"] != 0).then_some(answer)
    })
    .await
    .unwrap();
    assert_eq!(done["data"]["state_code"], 2, "{done}");
    shows_the_backup(&world, "_r").await;
    serving.interrupt().unwrap();
    let served = serving.finish().await.unwrap();
    assert_eq!(served.code, 0, "{}", served.explain());

    // The fleet's command line on the suite's etcd, with this test's own prefix, state
    // directory and job directory.
    let fleet = readme::block(file, "lockstep --journal \"etcd://").unwrap();
    job("srv-jobs", "fleet", "_f");
    let journal = etcd.journal_url(test);
    let (endpoints, prefix) = journal
        .strip_prefix("etcd://")
        .and_then(|rest| rest.split_once('/'))
        .expect("etcd://HOST:PORT/prefix");
    let (state, jobs) = (world.path("fleet-state"), world.path("srv-jobs"));
    let command = readme::edit(
        fleet.command(0).unwrap(),
        &[
            (
                "10.0.0.5:2379,10.0.0.6:2379",
                &format!("{endpoints},{endpoints}"),
            ),
            ("/lockstep/prod", &format!("/{prefix}")),
            ("/var/lib/lockstep", state.to_str().unwrap()),
            ("/srv/jobs", jobs.to_str().unwrap()),
        ],
    )
    .unwrap();
    watcher_runs(&world, &cwd, &command, "fleet", "_f").await;
}

/// A watcher started with `command` in `cwd` prints that the job `name` succeeded, stops at
/// Ctrl-C, and every end shows the backup's rows in the collections named with `suffix`.
async fn watcher_runs(world: &World, cwd: &Path, command: &str, name: &str, suffix: &str) {
    let mut running = Running::start(readme::exec(cwd, command).unwrap()).unwrap();
    running
        .wait_for_output("restore ", 1, SAYS_WITHIN)
        .await
        .unwrap();
    running.interrupt().unwrap();
    let watched = running.finish().await.unwrap();
    assert!(
        watched
            .stdout
            .contains(&format!("/{name}.toml): succeeded;")),
        "{}",
        watched.explain()
    );
    shows_the_backup(world, suffix).await;
}

/// Every end of `world` holds the backup's live rows in the collections named with `suffix`.
async fn shows_the_backup(world: &World, suffix: &str) {
    for end in world.ends() {
        let rows: i64 = (world.collections(&end).await.unwrap())
            .iter()
            .filter(|(name, _)| name.ends_with(suffix))
            .map(|(_, rows)| rows)
            .sum();
        assert_eq!(rows, world.rows_after_deletes(), "{end}, {suffix}");
    }
}

/// A CA (written to `ca`) and the certificate it signs for [`PUBLISHED`], written
/// where README's `serve` reads them (`tls.crt`, `tls.key` in `dir`).
fn published_certificate(dir: &Path, ca: &Path) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    // A subject of its own: curl (OpenSSL) takes a leaf whose subject is its issuer's for
    // a self-signed certificate, and refuses it.
    params
        .distinguished_name
        .push(DnType::CommonName, "walkthrough CA");
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec![PUBLISHED.to_owned()]).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, PUBLISHED);
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    std::fs::write(ca, issuer.pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
}
