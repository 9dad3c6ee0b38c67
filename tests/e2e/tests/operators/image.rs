//! The image `scripts/image.sh` builds from `deploy/Containerfile`, run as a container
//! runtime runs it: its exported filesystem as the root, and its config's user, working
//! directory, environment and entrypoint. Then `deploy/kubernetes/`'s Deployment and Job
//! in it, each given the files and variables its ConfigMaps and Secrets would give it, on
//! a real etcd over TLS with users. No Kubernetes cluster: what a kubelet would do, the
//! test does (mounts as files, Secrets as variables, `/etc/hosts`).

use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncBufReadExt as _;
use yaml_rust2::{Yaml, YamlLoader};

use super::etcd_journal::etcd_with_tls_and_users;
use super::serve_access::{Ca, TOKEN, get_over_tls};
use crate::support::eventually;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The image as `scripts/image.sh` exported it: its filesystem and its OCI config (what
/// `buildah inspect` shows under `OCIv1.config`).
struct Image {
    rootfs: PathBuf,
    config: serde_json::Value,
}

impl Image {
    /// `None`, said (a failure under `CI=true`), when no image was exported or this test
    /// cannot become the image's user.
    fn exported(test: &str) -> Option<Image> {
        let dir = workspace().join("target/image");
        let (rootfs, inspect) = (dir.join("rootfs"), dir.join("inspect.json"));
        if !rootfs.is_dir() || !inspect.is_file() {
            let why = format!(
                "no image under {}: run `bash scripts/image.sh`",
                dir.display()
            );
            e2e::unavailable(test, &why);
            return None;
        }
        if !rustix::process::geteuid().is_root() {
            e2e::unavailable(
                test,
                "entering the image's filesystem as its user takes root",
            );
            return None;
        }
        let inspect: serde_json::Value =
            serde_json::from_slice(&std::fs::read(inspect).unwrap()).unwrap();
        let config = inspect["OCIv1"]["config"].clone();
        Some(Image { rootfs, config })
    }

    fn strings(&self, key: &str) -> Vec<&str> {
        let list = self.config[key].as_array();
        list.into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect()
    }

    /// Its environment, `NAME=value` split.
    fn env(&self) -> Vec<(&str, &str)> {
        let env = self.strings("Env").into_iter();
        env.filter_map(|pair| pair.split_once('=')).collect()
    }

    /// The numeric `uid:gid` it runs as.
    fn user(&self) -> (u32, u32) {
        let user = self.config["User"]
            .as_str()
            .expect("the image names a user");
        let ids = user
            .split_once(':')
            .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)));
        ids.unwrap_or_else(|| panic!("user {user:?} is not a numeric uid:gid"))
    }

    /// A container of it: a copy of its filesystem whose files are links to the image's,
    /// under a directory of its own, so that what the container writes stays there.
    fn container(&self) -> Container {
        let root = tempfile::Builder::new()
            .prefix("container-")
            .tempdir_in(self.rootfs.parent().unwrap())
            .unwrap();
        let copied = std::process::Command::new("cp")
            .args(["-a", "--link"])
            .arg(self.rootfs.join("."))
            .arg(root.path())
            .status()
            .unwrap();
        assert!(copied.success());
        // tempfile made it 0700: `/` as the image has it, or its user could reach nothing.
        let mode = std::fs::metadata(&self.rootfs).unwrap().permissions();
        std::fs::set_permissions(root.path(), mode).unwrap();
        // What every OCI runtime gives a container: /proc (mounted when it runs), and the
        // runtime spec's default devices; without /dev/urandom the static binary finds no
        // source of random numbers, without /proc the watcher cannot tell what it opened.
        std::fs::create_dir(root.path().join("proc")).unwrap();
        let dev = root.path().join("dev");
        std::fs::create_dir_all(&dev).unwrap();
        for (name, minor) in [
            ("null", 3),
            ("zero", 5),
            ("full", 7),
            ("random", 8),
            ("urandom", 9),
        ] {
            let node = rustix::fs::FileType::CharacterDevice;
            let mode = rustix::fs::Mode::from_raw_mode(0o666);
            let device = rustix::fs::makedev(1, minor);
            rustix::fs::mknodat(rustix::fs::CWD, dev.join(name), node, mode, device).unwrap();
            // mknod applies the umask.
            std::fs::set_permissions(dev.join(name), std::fs::Permissions::from_mode(0o666))
                .unwrap();
        }
        Container {
            root,
            user: self.user(),
            workdir: self.config["WorkingDir"].as_str().unwrap_or("/").to_owned(),
            entrypoint: self
                .strings("Entrypoint")
                .iter()
                .map(|s| s.to_string())
                .collect(),
            env: (self.env().iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }
}

struct Container {
    root: tempfile::TempDir,
    user: (u32, u32),
    workdir: String,
    entrypoint: Vec<String>,
    env: Vec<(String, String)>,
}

impl Container {
    /// Where `inside` (an absolute path in the container) is on this host.
    fn path(&self, inside: &str) -> PathBuf {
        self.root.path().join(inside.trim_start_matches('/'))
    }

    /// Writes `text` at `inside`, root's, with `mode` and group `gid`: a new file, never
    /// one linked to the image's.
    fn write(&self, inside: &str, text: &str, mode: u32, gid: u32) {
        let path = self.path(inside);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, text).unwrap();
        std::os::unix::fs::chown(&path, Some(0), Some(gid)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// The entrypoint with `args`, as the image's user in its working directory, with the
    /// image's environment and then `env`: what `podman run IMAGE ARGS` runs.
    fn command(&self, args: &[String], env: &[(String, String)]) -> tokio::process::Command {
        let (uid, gid) = self.user;
        // By its path: the container's PATH, not this one's, is set for the child.
        let mut cmd = tokio::process::Command::new(unshare());
        cmd.arg("--mount-proc=/proc")
            .arg(format!("--root={}", self.root.path().display()))
            .arg(format!("--wd={}", self.workdir))
            .args([
                "--setgid",
                &gid.to_string(),
                "--setuid",
                &uid.to_string(),
                "--",
            ])
            .args(&self.entrypoint)
            .args(args)
            .env_clear()
            .envs(self.env.iter().chain(env).map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }
}

/// util-linux's `unshare` on this process's PATH, which enters the container: its root, its
/// working directory, its user.
fn unshare() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    (std::env::split_paths(&path))
        .map(|dir| dir.join("unshare"))
        .find(|bin| bin.is_file())
        .expect("util-linux's unshare on PATH")
}

/// Whether the ELF file at `path` names a program interpreter (a dynamic loader).
fn asks_for_a_loader(path: &Path) -> bool {
    // The program headers follow the ELF header, well inside the first 64 KiB.
    let mut elf = Vec::new();
    let file = std::fs::File::open(path).unwrap();
    file.take(64 << 10).read_to_end(&mut elf).unwrap();
    assert_eq!(
        &elf[..4],
        b"\x7fELF",
        "{} is not an ELF file",
        path.display()
    );
    let at = |offset: usize, len: usize| {
        let mut bytes = [0u8; 8];
        bytes[..len].copy_from_slice(&elf[offset..offset + len]);
        u64::from_le_bytes(bytes) as usize
    };
    let (table, entry_size, entries) = (at(0x20, 8), at(0x36, 2), at(0x38, 2));
    const PT_INTERP: usize = 3;
    (0..entries).any(|i| at(table + i * entry_size, 4) == PT_INTERP)
}

/// Every path under `dir`, `dir` included.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut paths = vec![dir.to_owned()];
    if dir.is_dir() {
        for entry in std::fs::read_dir(dir).unwrap() {
            paths.extend(walk(&entry.unwrap().path()));
        }
    }
    paths
}

/// `lockstep demo` from the image: the entrypoint is `lockstep`, found on the image's PATH,
/// a static binary (the image has no libc), running as the image's non-root user, whose
/// working directory it may write; the restore commits and verifies on every end.
#[tokio::test]
async fn the_image_restores_as_its_own_user_with_its_static_lockstep() {
    let Some(image) = Image::exported("the image restores") else {
        return;
    };
    assert_eq!(image.strings("Entrypoint"), ["lockstep"]);
    let (uid, gid) = image.user();
    assert_ne!(uid, 0, "the image runs as root");
    let passwd = std::fs::read_to_string(image.rootfs.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.contains(&format!(":x:{uid}:{gid}:"))),
        "no user {uid} in the image's /etc/passwd: {passwd}"
    );
    let path = (image.env().into_iter())
        .find_map(|(k, v)| (k == "PATH").then_some(v))
        .expect("a PATH");
    let binary = (path.split(':'))
        .map(|dir| {
            image
                .rootfs
                .join(dir.trim_start_matches('/'))
                .join("lockstep")
        })
        .find(|bin| bin.is_file())
        .unwrap_or_else(|| panic!("no lockstep on the image's PATH {path}"));
    assert!(
        !asks_for_a_loader(&binary),
        "{} needs a dynamic loader the image does not have",
        binary.display()
    );

    let container = image.container();
    let args = ["--output", "json", "demo", "--dir", "demo"].map(String::from);
    let out = container.command(&args, &[]).output().await.unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let report = report["reports"].get(0).unwrap_or(&report);
    assert_eq!(report["outcome"], "succeeded", "{report}");
    let shown = report["verification"]["shown"]
        .as_array()
        .expect("a verification");
    assert!(
        !shown.is_empty() && shown.iter().all(|s| s["shows"] == s["live"]),
        "{report}"
    );
    // What it wrote (backup, host config, journal, reports) is its user's, in its working
    // directory.
    let demo = container.path(&format!("{}/demo", container.workdir));
    let written = walk(&demo);
    assert!(written.len() > 10, "{written:?}");
    for path in written {
        let owner = std::fs::symlink_metadata(&path).unwrap().uid();
        assert_eq!(owner, uid, "{} is uid {owner}'s", path.display());
    }
}

/// The manifests of `deploy/kubernetes/`, every document of every file.
struct Manifests(Vec<Yaml>);

impl Manifests {
    fn read() -> Manifests {
        let dir = workspace().join("deploy/kubernetes");
        let mut docs = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).unwrap();
                let parsed = YamlLoader::load_from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                docs.extend(parsed);
            }
        }
        Manifests(docs)
    }

    fn find(&self, kind: &str, name: &str) -> &Yaml {
        let named = |d: &&Yaml| {
            d["kind"].as_str() == Some(kind)
                && (d["metadata"]["name"].as_str() == Some(name)
                    || d["metadata"]["generateName"].as_str() == Some(name))
        };
        (self.0.iter().find(named)).unwrap_or_else(|| panic!("no {kind} {name} in the manifests"))
    }

    /// A ConfigMap's files.
    fn config_map(&self, name: &str) -> Vec<(String, String)> {
        let data = self.find("ConfigMap", name)["data"]
            .as_hash()
            .expect("data");
        (data.iter())
            .map(|(k, v)| {
                (
                    k.as_str().unwrap().to_owned(),
                    v.as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

fn strings(list: &Yaml) -> Vec<String> {
    let list = list.as_vec().map(Vec::as_slice).unwrap_or_default();
    list.iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// The variables a host config names for its secrets (every `*_env` key).
fn env_names(value: &toml::Value) -> Vec<String> {
    match value {
        toml::Value::Table(table) => (table.iter())
            .flat_map(|(key, value)| match value.as_str() {
                Some(name) if key.ends_with("_env") => vec![name.to_owned()],
                _ => env_names(value),
            })
            .collect(),
        toml::Value::Array(values) => values.iter().flat_map(env_names).collect(),
        _ => vec![],
    }
}

/// What the test's Secrets hold: `lockstep-env`'s variables by key.
fn secret_value(key: &str) -> String {
    match key {
        "LOCKSTEP_API_TOKEN" => TOKEN.to_owned(),
        "LOCKSTEP_READ_TOKEN" => "a-read-token-for-dashboards".to_owned(),
        "LOCKSTEP_ETCD_PASSWORD" => "journal-password".to_owned(),
        other => format!("not-a-real-{other}"),
    }
}

/// The pod a workload's template makes, in a container of `image`: each volume's files at
/// its mount (ConfigMaps from the manifests, Secrets from `secrets`), `/etc/hosts` naming
/// the test's etcd, and the container's variables (a Secret's key from [`secret_value`]).
/// Returns the container, its arguments and its variables.
fn pod(
    image: &Image,
    manifests: &Manifests,
    workload: &Yaml,
    secrets: &[(&str, Vec<(&str, String)>)],
) -> (Container, Vec<String>, Vec<(String, String)>) {
    let spec = &workload["spec"]["template"]["spec"];
    let fs_group = spec["securityContext"]["fsGroup"]
        .as_i64()
        .expect("fsGroup") as u32;
    let main = &spec["containers"][0];
    let container = image.container();
    for mount in main["volumeMounts"].as_vec().unwrap() {
        let at = mount["mountPath"].as_str().unwrap();
        let volumes = spec["volumes"].as_vec().unwrap();
        let volume = (volumes.iter())
            .find(|v| v["name"] == mount["name"])
            .unwrap_or_else(|| panic!("no volume for the mount at {at}"));
        std::fs::create_dir_all(container.path(at)).unwrap();
        if let Some(name) = volume["configMap"]["name"].as_str() {
            for (file, text) in manifests.config_map(name) {
                container.write(&format!("{at}/{file}"), &text, 0o644, 0);
            }
        } else if let Some(name) = volume["secret"]["secretName"].as_str() {
            let (_, files) = (secrets.iter())
                .find(|(secret, _)| *secret == name)
                .unwrap_or_else(|| {
                    panic!("the manifests mount a Secret {name} README does not make")
                });
            for (file, text) in files {
                container.write(&format!("{at}/{file}"), text, 0o440, fs_group);
            }
        } else {
            assert!(!volume["emptyDir"].is_badvalue(), "volume {at}: {volume:?}");
            // An emptyDir is root's and open to all.
            std::fs::set_permissions(container.path(at), std::fs::Permissions::from_mode(0o777))
                .unwrap();
        }
    }
    // What the cluster's DNS would answer for etcd: the name its certificate carries.
    let hosts = format!("127.0.0.1 localhost {}\n", e2e::tls::SERVER_NAME);
    container.write("/etc/hosts", &hosts, 0o644, 0);
    let env = (main["env"].as_vec().unwrap().iter())
        .map(|var| {
            let name = var["name"].as_str().unwrap().to_owned();
            let value = match var["value"].as_str() {
                Some(value) => value.to_owned(),
                None => {
                    let from = &var["valueFrom"]["secretKeyRef"];
                    assert_eq!(from["name"].as_str(), Some("lockstep-env"), "{name}");
                    secret_value(from["key"].as_str().unwrap())
                }
            };
            (name, value)
        })
        .collect();
    (container, strings(&main["args"]), env)
}

/// Each variable `lockstep.toml` of the ConfigMap names for a secret is one `workload` sets.
fn sets_every_secret(workload: &Yaml, config: &str) {
    let config: toml::Value = toml::from_str(config).unwrap();
    let env = &workload["spec"]["template"]["spec"]["containers"][0]["env"];
    let set: Vec<&str> = (env.as_vec().unwrap().iter())
        .filter_map(|v| v["name"].as_str())
        .collect();
    for name in env_names(&config) {
        assert!(
            set.contains(&name.as_str()),
            "the host config names {name}, unset"
        );
    }
}

/// The manifests' own tests: the etcd, the certificates of the API and of etcd's client,
/// and the three Secrets as README makes them.
struct Cluster {
    _dir: tempfile::TempDir,
    etcd: e2e::etcd::EtcdServer,
    secrets: Vec<(&'static str, Vec<(&'static str, String)>)>,
    ca: Ca,
}

impl Cluster {
    async fn start(test: &str) -> Option<Cluster> {
        let dir = tempfile::tempdir().unwrap();
        let (etcd, certs) = etcd_with_tls_and_users(test, dir.path()).await?;
        let read = |path: &Path| std::fs::read_to_string(path).unwrap();
        let ca = Ca::new();
        let (cert, key) = ca.leaf();
        let secrets = vec![
            ("lockstep-tls", vec![("tls.crt", cert), ("tls.key", key)]),
            (
                "lockstep-etcd-tls",
                vec![
                    ("ca.crt", read(&certs.ca)),
                    ("tls.crt", read(&certs.client_cert)),
                    ("tls.key", read(&certs.client_key)),
                ],
            ),
        ];
        Some(Cluster {
            _dir: dir,
            etcd,
            secrets,
            ca,
        })
    }

    /// The ConfigMap's etcd members are the cluster's Services; here the journal is the
    /// test's etcd, under the prefix its user may write.
    fn journal(&self) -> (String, String) {
        let port = self.etcd.address().rsplit_once(':').unwrap().1.to_owned();
        let url = format!("etcd://{}:{port}/j", e2e::tls::SERVER_NAME);
        ("LOCKSTEP_JOURNAL".to_owned(), url)
    }
}

/// The report a restore of the pod wrote: in the host config's state directory, its
/// user's alone.
fn report(container: &Container, uid: u32) -> Option<serde_json::Value> {
    let reports = container.path("/var/lib/lockstep/state/reports");
    let found = std::fs::read_dir(reports).ok()?.filter_map(Result::ok);
    let json = found
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))?;
    let meta = std::fs::metadata(&json).unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o777),
        (uid, 0o600),
        "{}",
        json.display()
    );
    Some(serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap())
}

/// Refused for the one reason a cluster-less test has: no Milvus answers at the
/// ConfigMap's Service names. Anything else would be the manifests' fault.
fn refused_as_unreachable(report: &serde_json::Value) {
    assert_eq!(report["outcome"], "refused", "{report}");
    let kinds = strings_of(&report["refusal_kinds"]);
    assert!(
        kinds.iter().all(|k| k == "unreachable") && !kinds.is_empty(),
        "{report}"
    );
}

fn strings_of(list: &serde_json::Value) -> Vec<String> {
    let list = list.as_array().map(Vec::as_slice).unwrap_or_default();
    list.iter()
        .filter_map(|s| s.as_str())
        .map(str::to_owned)
        .collect()
}

/// deployment.yaml's pod from the image: `serve --watch` with the ConfigMap's host config and
/// jobs, the Secrets' variables and files, off loopback as the Service needs it. It starts
/// (so TLS and a token are configured), its probes answer over TLS, `/readyz` says the
/// journal answers (etcd over TLS with its user, by name), and the ConfigMap's job is read
/// and run, refused only because no Milvus is there.
#[tokio::test]
async fn the_deployment_serves_its_jobs_from_the_image() {
    let test = "the Deployment from the image";
    let manifests = Manifests::read();
    let deployment = manifests.find("Deployment", "lockstep");
    let config = manifests.config_map("lockstep-config");
    let (_, host_config) = config.iter().find(|(k, _)| k == "lockstep.toml").unwrap();
    sets_every_secret(deployment, host_config);
    let Some(image) = Image::exported(test) else {
        return;
    };
    let Some(cluster) = Cluster::start(test).await else {
        return;
    };
    let (container, args, mut env) = pod(&image, &manifests, deployment, &cluster.secrets);
    // Any free port, still on every address: off loopback, as the Service reaches it.
    for (name, value) in &mut env {
        if name == "LOCKSTEP_LISTEN" {
            *value = "0.0.0.0:0".to_owned();
        }
    }
    env.push(cluster.journal());
    let mut serve = (container.command(&args, &env))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(serve.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("serve says where it listens")
        .unwrap()
        .unwrap_or_default();
    let port: u16 = (line.strip_prefix("listening on https://0.0.0.0:"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    for probe in ["/healthz", "/readyz"] {
        let (_, status) = get_over_tls(port, cluster.ca.roots(), probe).await.unwrap();
        assert_eq!(status, "HTTP/1.1 200 OK", "{probe}");
    }
    let (uid, _) = image.user();
    let report = eventually(Duration::from_secs(60), || async {
        report(&container, uid)
    })
    .await
    .expect("the ConfigMap's job ran");
    assert_eq!(report["job_name"], "orders-2026-11-29", "{report}");
    refused_as_unreachable(&report);
    serve.kill().await.unwrap();
}

/// job.yaml's pod from the image: its one-shot restore reads the ConfigMap's host config,
/// reaches the journal with the Secrets' credentials, and exits with its outcome: refused,
/// only because no Milvus is there.
#[tokio::test]
async fn the_job_restores_once_from_the_image() {
    let test = "the Job from the image";
    let manifests = Manifests::read();
    let job = manifests.find("Job", "lockstep-restore-");
    let config = manifests.config_map("lockstep-config");
    let (_, host_config) = config.iter().find(|(k, _)| k == "lockstep.toml").unwrap();
    sets_every_secret(job, host_config);
    let Some(image) = Image::exported(test) else {
        return;
    };
    let Some(cluster) = Cluster::start(test).await else {
        return;
    };
    let (container, args, mut env) = pod(&image, &manifests, job, &cluster.secrets);
    env.push(cluster.journal());
    let out = container.command(&args, &env).output().await.unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{log}");
    let (uid, _) = image.user();
    refused_as_unreachable(&report(&container, uid).expect("a report"));
}
