//! milvus-backup's config file (`backup.yaml`) read as a host config, so its users restore
//! with the file they have. It fills the same [`HostConfig`] `lockstep.toml` fills:
//!
//! - the cluster `milvus`, from `milvus.grpc.*` and `milvus.user`/`password` (the token
//!   `user:password`), importing from the storage `milvus` (`milvus.storage.*`), with
//!   `restore.concurrency.importJobs` as its import-job budget; it is the default target;
//! - the storage `backup` (`backup.storage.*`, which takes what it leaves out from
//!   `milvus.storage` except `rootPath`), where the backups are, under its `rootPath`;
//! - `restore.maxSegmentsPerImportJob` and `restore.keepTempFiles` as the defaults of every
//!   job's `max_segments_per_job` and `keep_temp_files`.
//!
//! Values resolve as milvus-backup resolves them: `--set KEY=VALUE` over its environment
//! variables (credentials only) over the file over the default. A v1 file (no
//! `configVersion`) is translated with milvus-backup's key map and its own variables, with
//! a warning. Keys that serve only backups (`backup.concurrency`, `log`, `zillizCloud`, ...)
//! are accepted and unused. Unlike milvus-backup, which warns about keys it does not know
//! and goes on, an unknown key is refused: a misspelt `bucketNmae` would otherwise restore
//! from the default bucket. So is a setting lockstep cannot honour, by name.

mod settings;
mod tree;
mod v1;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use url::Url;

use super::secret::{Env, Secret, TokenSource};
use super::spec::{
    BackupsSpec, ClusterSpec, DEFAULT_MAX_ATTEMPTS, DEFAULT_STATE_DIR, GivenKeys, HostConfig,
    PathForm, RestoreDefaults, StorageSpec,
};
use super::tls::TlsSpec;
use super::validate::read_pem;
use crate::diagnostic::{Error, Input, Kind, Location, Problem, RawProblem, line_column};
use settings::{Given, Origin, Settings};

/// The cluster a milvus-backup config describes, by the name it has in the host model.
pub const CLUSTER: &str = "milvus";
/// Its storage (`milvus.storage`).
pub const MILVUS_STORAGE: &str = "milvus";
/// Where the backups are (`backup.storage`).
pub const BACKUP_STORAGE: &str = "backup";

/// The cluster's management API (Milvus's metrics port), where milvus-backup pauses GC.
const MANAGEMENT: &str = "milvus.management.endpoint";

/// The most segments Milvus takes in one import request that lockstep batches.
const MAX_SEGMENTS_PER_JOB: i64 = crate::backup::DEFAULT_MAX_SEGMENTS_PER_JOB as i64;

/// Whether `path` names a milvus-backup config rather than a `lockstep.toml`.
pub fn is_yaml(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

/// Splits `--set KEY=VALUE` items; an item without `=` is refused.
pub fn parse_sets(items: &[String]) -> Result<Vec<(String, String)>, Error> {
    let mut sets = Vec::new();
    let mut problems = Vec::new();
    for item in items {
        match item.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => {
                sets.push((key.trim().to_owned(), value.to_owned()));
            }
            _ => problems.push(Problem {
                location: Location::Flag("--set".to_owned()),
                field: String::new(),
                kind: Kind::Syntax,
                message: format!("`{item}`: expected KEY=VALUE"),
            }),
        }
    }
    if problems.is_empty() {
        Ok(sets)
    } else {
        Err(Error::Invalid {
            input: Input::Flags,
            problems,
        })
    }
}

/// The `--set` items that put a secret on the command line, where any user of the host sees
/// it in the process list and the shell keeps it in its history: each key, with the variable
/// that would keep it off the command line (none for a key without one).
pub fn secrets_set(sets: &[(String, String)]) -> Vec<(&str, Option<String>)> {
    (sets.iter())
        .filter_map(|(key, _)| settings::secret_set(key).map(|var| (key.as_str(), var)))
        .collect()
}

/// Reads and validates the milvus-backup config at `path`.
pub fn load(path: &Path, sets: &[(String, String)], env: Env<'_>) -> Result<HostConfig, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        input: Input::HostConfig(path.to_owned()),
        source,
    })?;
    parse_str(&text, path, sets, env)
}

/// Validates milvus-backup config text; `path` locates messages, and the state directory is
/// `.lockstep` beside it.
pub fn parse_str(
    text: &str,
    path: &Path,
    sets: &[(String, String)],
    env: Env<'_>,
) -> Result<HostConfig, Error> {
    let mut reader = Reader {
        text,
        path,
        problems: Vec::new(),
    };
    let config = reader.read(sets, env);
    match config {
        Some(config) if reader.problems.is_empty() => Ok(config),
        _ => Err(Error::Invalid {
            input: Input::HostConfig(path.to_owned()),
            problems: reader.problems,
        }),
    }
}

/// The version a file declares.
enum Version {
    V1,
    V2,
}

/// How a provider is reached, and so which auth types it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavour {
    /// minio, s3, aws: buckets by path, and instance credentials through AWS's chain.
    Aws,
    /// gcp: Cloud Storage's S3 interoperability, with HMAC keys.
    GcsInterop,
    /// aliyun, tencent, hwc: buckets by host name (milvus-backup's clients look buckets up
    /// by DNS for these three), with static keys.
    HostStyle,
    /// azure: Blob Storage, with the account's shared key or Azure's credential chain.
    Azure,
    /// gcpnative: Cloud Storage's own API, with a service-account key file.
    GcsNative,
}

struct Reader<'a> {
    text: &'a str,
    path: &'a Path,
    problems: Vec<Problem>,
}

impl Reader<'_> {
    fn at(&mut self, origin: &Origin, key: &str, message: impl Into<String>) {
        self.problems.push(Problem {
            location: self.location(origin),
            field: key.to_owned(),
            kind: Kind::Invalid,
            message: message.into(),
        });
    }

    /// Where a value came from; an inherited one is shown where its source was set.
    fn location(&self, origin: &Origin) -> Location {
        match origin {
            Origin::File(span) => {
                let (line, column) = line_column(self.text, span.start);
                Location::File {
                    path: self.path.to_owned(),
                    line,
                    column,
                }
            }
            Origin::Set(given) => Location::Flag(format!("--set {given}")),
            Origin::Env(var) => Location::Env(var.clone()),
            Origin::Inherited(from) => self.location(from),
            Origin::Default => Location::File {
                path: self.path.to_owned(),
                line: 1,
                column: 1,
            },
        }
    }

    fn raw(&mut self, raw: RawProblem) {
        let origin = raw.span.map_or(Origin::Default, Origin::File);
        self.at(&origin, &raw.field, raw.message);
    }

    fn read(&mut self, sets: &[(String, String)], env: Env<'_>) -> Option<HostConfig> {
        let mut leaves = match tree::flatten(self.text) {
            Ok(leaves) => leaves,
            Err(raw) => {
                self.raw(raw);
                return None;
            }
        };
        let version = match leaves.remove("configversion") {
            None => Version::V1,
            Some(leaf) => match &leaf.value {
                tree::Value::Scalar(v) if v.eq_ignore_ascii_case("v2") => Version::V2,
                tree::Value::Scalar(v) if v.eq_ignore_ascii_case("v1") => Version::V1,
                other => {
                    let shown = match other {
                        tree::Value::Scalar(v) => v.clone(),
                        tree::Value::List(_) => "a list".to_owned(),
                    };
                    self.at(
                        &Origin::File(leaf.span.clone()),
                        &leaf.key,
                        format!("configVersion `{shown}` is not a schema version: expected \"v1\" or \"v2\""),
                    );
                    return None;
                }
            },
        };
        let schema = settings::schema();
        let file = match version {
            Version::V2 => self.v2_keys(leaves, &schema),
            Version::V1 => {
                tracing::warn!(
                    config = %self.path.display(),
                    "a v1 milvus-backup config (no configVersion), translated to v2 with milvus-backup's key map; `milvus-backup config migrate` converts the file itself"
                );
                let (file, problems) = v1::translate(leaves, env);
                for raw in problems {
                    self.raw(raw);
                }
                file
            }
        };
        for (key, _) in sets {
            let known = schema.iter().any(|k| {
                k.name.eq_ignore_ascii_case(key)
                    || k.env.as_ref().is_some_and(|e| e.eq_ignore_ascii_case(key))
            });
            if !known {
                self.at(
                    &Origin::Set(key.clone()),
                    key,
                    "not a key of milvus-backup's v2 config, nor one's credential variable",
                );
            }
        }
        let (settings, bad) =
            Settings::resolve(&schema, &file, sets, env, matches!(version, Version::V2));
        for b in bad {
            self.at(&b.origin, &b.key, b.message);
        }
        self.host_config(&settings)
    }

    /// A v2 file's leaves under its schema's keys; v1 keys and unknown keys are problems.
    fn v2_keys(
        &mut self,
        leaves: tree::Leaves,
        schema: &[settings::Key],
    ) -> BTreeMap<String, Given> {
        let mut file = BTreeMap::new();
        for (lower, leaf) in leaves {
            let origin = Origin::File(leaf.span.clone());
            if schema.iter().any(|k| k.name.eq_ignore_ascii_case(&lower)) {
                file.insert(
                    lower,
                    Given {
                        value: leaf.value,
                        origin,
                    },
                );
                continue;
            }
            let message = match v1::successor(&lower) {
                Some(Ok(v2)) => format!(
                    "`{}` is a v1 key; a v2 config writes it as `{v2}`",
                    leaf.key
                ),
                Some(Err(())) => format!("`{}` is a v1 key that v2 removed", leaf.key),
                None => format!("unknown key `{}` in milvus-backup's v2 config", leaf.key),
            };
            self.at(&origin, &leaf.key, message);
        }
        file
    }

    fn host_config(&mut self, s: &Settings) -> Option<HostConfig> {
        for key in [
            "backup.concurrency.collections",
            "backup.concurrency.segments",
            "restore.concurrency.collections",
            "restore.concurrency.importJobs",
            "restore.maxSegmentsPerImportJob",
            "transfer.concurrency",
            "transfer.multipartCopyThresholdMiB",
        ] {
            if s.int(key).is_some_and(|n| n <= 0) {
                self.at(&s.origin(key), key, "must be greater than 0");
            }
        }
        let segments = s.int("restore.maxSegmentsPerImportJob").unwrap_or(0);
        if segments > MAX_SEGMENTS_PER_JOB {
            self.at(
                &s.origin("restore.maxSegmentsPerImportJob"),
                "restore.maxSegmentsPerImportJob",
                format!("{segments} segments per import job: lockstep batches at most {MAX_SEGMENTS_PER_JOB}, Milvus's own cap on a request's files"),
            );
        }
        let mode = s.text("transfer.mode");
        if !["auto", "direct", "streaming"].contains(&mode.to_lowercase().as_str()) {
            self.at(
                &s.origin("transfer.mode"),
                "transfer.mode",
                format!("`{mode}`: expected auto, direct or streaming"),
            );
        }
        if s.list("milvus.etcd.endpoints").is_empty() {
            self.at(
                &s.origin("milvus.etcd.endpoints"),
                "milvus.etcd.endpoints",
                "must name at least one endpoint",
            );
        }
        let milvus = self.storage(s, "milvus.storage");
        let backup = self.storage(s, "backup.storage");
        let cluster = self.cluster(s, milvus.as_ref());
        let (milvus, _) = milvus?;
        let (backup, root) = backup?;
        let cluster = cluster?;
        let base = self.path.parent().unwrap_or(Path::new("."));
        Some(HostConfig {
            clusters: BTreeMap::from([(CLUSTER.to_owned(), cluster)]),
            storages: BTreeMap::from([
                (MILVUS_STORAGE.to_owned(), milvus),
                (BACKUP_STORAGE.to_owned(), backup.clone()),
            ]),
            backups: Some(BackupsSpec {
                storage: backup,
                root,
            }),
            default_target: Some(CLUSTER.to_owned()),
            state_dir: base.join(DEFAULT_STATE_DIR),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            named_ends_only: false,
            max_queued: crate::config::DEFAULT_MAX_QUEUED,
            retention: None,
            journal: Default::default(),
            restore: RestoreDefaults {
                max_segments_per_job: usize::try_from(segments)
                    .ok()
                    .filter(|n| (1..=MAX_SEGMENTS_PER_JOB as usize).contains(n))?,
                keep_temp_files: s.bool("restore.keepTempFiles"),
            },
        })
    }

    /// An empty value or an absolute http(s) URL with a host.
    fn http_url(&mut self, s: &Settings, key: &str) -> Option<Url> {
        let text = s.text(key);
        if text.is_empty() {
            return None;
        }
        match Url::parse(text) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Some(url),
            _ => {
                self.at(
                    &s.origin(key),
                    key,
                    format!("`{text}`: expected an absolute http(s):// URL"),
                );
                None
            }
        }
    }

    /// `text`, a URL built from the address at `key`, or a problem at that key.
    fn address_url(&mut self, s: &Settings, key: &str, text: &str) -> Option<Url> {
        match Url::parse(text) {
            Ok(url) if url.has_host() => Some(url),
            _ => {
                self.at(
                    &s.origin(key),
                    key,
                    format!("`{}` is not a host name or address", s.text(key)),
                );
                None
            }
        }
    }

    fn port(&mut self, s: &Settings, key: &str) -> Option<u16> {
        let port = s.int(key)?;
        match u16::try_from(port) {
            Ok(port @ 1..) => Some(port),
            _ => {
                self.at(
                    &s.origin(key),
                    key,
                    format!("port {port}: expected 1 to 65535"),
                );
                None
            }
        }
    }

    /// The cluster `milvus`: gRPC and REST on one address, over TLS as `tlsMode` says.
    fn cluster(
        &mut self,
        s: &Settings,
        storage: Option<&(StorageSpec, String)>,
    ) -> Option<ClusterSpec> {
        let (scheme, tls) = self.tls(s);
        let port = self.port(s, "milvus.grpc.port");
        let address = s.text("milvus.grpc.address");
        let uri = port.and_then(|port| {
            self.address_url(
                s,
                "milvus.grpc.address",
                &format!("{scheme}://{address}:{port}"),
            )
        })?;
        if let Some(rest) = self.http_url(s, "milvus.rest.endpoint")
            && (rest.scheme() != uri.scheme()
                || rest.host_str() != uri.host_str()
                || rest.port_or_known_default() != uri.port_or_known_default())
        {
            self.at(
                &s.origin("milvus.rest.endpoint"),
                "milvus.rest.endpoint",
                format!("{rest}: lockstep reaches Milvus's REST and gRPC at one address, {uri}; leave it empty or give that address"),
            );
        }
        // milvus-backup pauses GC at its default (`http://localhost:9091`) whoever wrote
        // nothing: only an address someone wrote is the cluster's management API.
        let management = self.http_url(s, MANAGEMENT);
        let management = management.filter(|_| s.origin(MANAGEMENT).is_set());
        let (user, password) = (s.text("milvus.user"), s.text("milvus.password"));
        let token = (!user.is_empty() || !password.is_empty())
            .then(|| TokenSource::Given(Secret(format!("{user}:{password}"))));
        let jobs = s.int("restore.concurrency.importJobs")?;
        let (storage, local_path) = storage?;
        let paths = if storage.url.scheme() == "file" {
            PathForm::Local {
                local_storage_path: local_path.clone(),
            }
        } else {
            PathForm::Minio
        };
        Some(ClusterSpec {
            uri,
            token,
            storage: Some(storage.clone()),
            max_import_jobs: u32::try_from(jobs).ok().filter(|n| *n > 0)?,
            paths,
            require_staging: false,
            l0_import: None,
            tls: tls?,
            management,
            // milvus-backup's YAML cannot say it; a lockstep.toml over it can.
            discover_secondaries: false,
        })
    }

    /// `milvus.grpc.tlsMode` and its files: the URI's scheme and how to trust and answer
    /// the server. Both `server` and `mutual` verify the server's certificate (against
    /// `caCertPath`, else the system's roots); `mutual` also presents `mtlsCertPath` and
    /// `mtlsKeyPath`, which it requires, as milvus-backup's v2 validation does.
    /// With problems, the scheme is still the mode's, so the rest of the cluster is checked.
    fn tls(&mut self, s: &Settings) -> (&'static str, Option<TlsSpec>) {
        let key = |name: &str| format!("milvus.grpc.{name}");
        let mode = s.text(&key("tlsMode")).to_lowercase();
        let mutual = match mode.as_str() {
            "disabled" => return ("http", Some(TlsSpec::default())),
            "server" => false,
            "mutual" => true,
            "0" | "1" | "2" => {
                let name = ["disabled", "server", "mutual"][mode.parse::<usize>().unwrap_or(0)];
                self.at(
                    &s.origin(&key("tlsMode")),
                    &key("tlsMode"),
                    format!("`{mode}` is the v1 spelling of this mode: write it as \"{name}\""),
                );
                return ("http", None);
            }
            other => {
                self.at(
                    &s.origin(&key("tlsMode")),
                    &key("tlsMode"),
                    format!("`{other}`: expected disabled, server or mutual"),
                );
                return ("http", None);
            }
        };
        let before = self.problems.len();
        let pem = |reader: &mut Self, name: &str| {
            let path = s.text(&key(name));
            if path.is_empty() {
                return None;
            }
            if let Err(reason) = read_pem(Path::new(path)) {
                reader.at(&s.origin(&key(name)), &key(name), reason);
            }
            Some(PathBuf::from(path))
        };
        let ca_cert = pem(self, "caCertPath");
        let (client_cert, client_key) = if mutual {
            let pair = (pem(self, "mtlsCertPath"), pem(self, "mtlsKeyPath"));
            for (name, given) in [("mtlsCertPath", &pair.0), ("mtlsKeyPath", &pair.1)] {
                if given.is_none() {
                    self.at(
                        &s.origin(&key(name)),
                        &key(name),
                        "tlsMode mutual presents a client certificate: give mtlsCertPath and mtlsKeyPath",
                    );
                }
            }
            pair
        } else {
            (None, None)
        };
        let server_name = Some(s.text(&key("serverName")).to_owned()).filter(|n| !n.is_empty());
        let spec = TlsSpec {
            ca_cert,
            server_name,
            client_cert,
            client_key,
        };
        ("https", (self.problems.len() == before).then_some(spec))
    }

    /// One side's store, and beside it: for `milvus.storage`, the directory Milvus reads a
    /// local store from (`localPath`, else `rootPath`); for `backup.storage`, the backups'
    /// root in the store.
    fn storage(&mut self, s: &Settings, side: &str) -> Option<(StorageSpec, String)> {
        let key = format!("{side}.provider");
        let provider = s.text(&key).to_lowercase();
        match provider.as_str() {
            "local" => self.local_store(s, side),
            "minio" | "s3" | "aws" => self.s3_store(s, side, Flavour::Aws),
            "gcp" => self.s3_store(s, side, Flavour::GcsInterop),
            "aliyun" | "tencent" | "hwc" => self.s3_store(s, side, Flavour::HostStyle),
            "azure" => self.cloud_store(s, side, Flavour::Azure),
            "gcpnative" => self.cloud_store(s, side, Flavour::GcsNative),
            other => {
                self.at(
                    &s.origin(&key),
                    &key,
                    format!("`{other}`: expected one of local, minio, s3, aws, gcp, gcpnative, azure, aliyun, tencent, hwc"),
                );
                None
            }
        }
    }

    /// A `local` store: its `rootPath` as a directory, and for Milvus's side the directory
    /// Milvus reads import paths under.
    fn local_store(&mut self, s: &Settings, side: &str) -> Option<(StorageSpec, String)> {
        let key = |name: &str| format!("{side}.{name}");
        let is_backup = side == "backup.storage";
        if !s.text(&key("milvusAddress")).is_empty() {
            self.at(
                &s.origin(&key("milvusAddress")),
                &key("milvusAddress"),
                "applies only to an object store, not the local provider",
            );
        }
        let written = s.text(&key("rootPath"));
        let Some(spec) = Some(written)
            .filter(|w| !w.is_empty())
            .and_then(|w| StorageSpec::local(Path::new(w)).ok())
        else {
            self.at(
                &s.origin(&key("rootPath")),
                &key("rootPath"),
                format!("`{written}`: expected the directory of the local store"),
            );
            return None;
        };
        let dir = spec.url.to_file_path().ok()?;
        let beside = if is_backup {
            String::new()
        } else {
            match s.text(&key("localPath")) {
                "" => dir.display().to_string(),
                local => local.to_owned(),
            }
        };
        Some((spec, beside))
    }

    /// An S3-compatible store: the bucket (with Milvus's root for Milvus's side) at
    /// `address:port`, and for the backups' side the backups' root.
    fn s3_store(
        &mut self,
        s: &Settings,
        side: &str,
        flavour: Flavour,
    ) -> Option<(StorageSpec, String)> {
        let key = |name: &str| format!("{side}.{name}");
        self.object_store_checks(s, side);
        let port = self.port(s, &key("port"));
        let (url, backups_root) = self.store_url(s, side, "s3");
        let ssl = s.bool(&key("useSSL"));
        let address = s.text(&key("address"));
        let scheme = if ssl { "https" } else { "http" };
        let endpoint = port.and_then(|port| {
            self.address_url(s, &key("address"), &format!("{scheme}://{address}:{port}"))
        });
        let given = self.auth(s, side, flavour)?;
        let region = Some(s.text(&key("region")).to_owned()).filter(|r| !r.is_empty());
        Some((
            StorageSpec {
                url: url?,
                endpoint: Some(endpoint?),
                region,
                access_key_id_env: None,
                secret_access_key_env: None,
                session_token_env: None,
                given,
                allow_http: !ssl,
                virtual_hosted: flavour == Flavour::HostStyle,
                azure_account: None,
                azure_key_env: None,
                service_account_file: None,
                anonymous: false,
            },
            backups_root,
        ))
    }

    /// An Azure container or a native GCS bucket: `bucketName` and `rootPath` as for S3, and
    /// the endpoint milvus-backup builds. Azure's is `https://ACCOUNT.blob.ADDRESS` (`:443`
    /// dropped); GCS's is Google's own unless `address` names another host (an emulator).
    fn cloud_store(
        &mut self,
        s: &Settings,
        side: &str,
        flavour: Flavour,
    ) -> Option<(StorageSpec, String)> {
        let key = |name: &str| format!("{side}.{name}");
        let scheme = if flavour == Flavour::Azure {
            "az"
        } else {
            "gs"
        };
        let port = self.port(s, &key("port"));
        let (url, backups_root) = self.store_url(s, side, scheme);
        let address = s.text(&key("address"));
        let account = s.text(&key("accountName")).to_owned();
        let ssl = s.bool(&key("useSSL"));
        let endpoint = match flavour {
            Flavour::Azure => {
                if account.is_empty() {
                    self.at(
                        &s.origin(&key("accountName")),
                        &key("accountName"),
                        "an azure store names its storage account",
                    );
                }
                let host = match port? {
                    443 => address.to_owned(),
                    port => format!("{address}:{port}"),
                };
                (host != "core.windows.net").then(|| format!("https://{account}.blob.{host}"))
            }
            _ => {
                let standard = address.is_empty()
                    || address == "storage.googleapis.com"
                    || address.ends_with(".storage.googleapis.com")
                    || address == "www.googleapis.com"
                    || address == "googleapis.com";
                let scheme = if ssl { "https" } else { "http" };
                (!standard).then(|| format!("{scheme}://{address}:{}", port.unwrap_or(443)))
            }
        };
        let endpoint = match endpoint {
            None => None,
            Some(text) => Some(self.address_url(s, &key("address"), &text)?),
        };
        let given = self.auth(s, side, flavour)?;
        let credentials = s.text(&format!("{side}.auth.credentialsFile"));
        Some((
            StorageSpec {
                url: url?,
                allow_http: endpoint.as_ref().is_some_and(|e| e.scheme() == "http"),
                endpoint,
                region: None,
                access_key_id_env: None,
                secret_access_key_env: None,
                session_token_env: None,
                given,
                virtual_hosted: false,
                azure_account: (flavour == Flavour::Azure).then_some(account),
                azure_key_env: None,
                service_account_file: (!credentials.is_empty()).then(|| PathBuf::from(credentials)),
                anonymous: false,
            },
            backups_root,
        ))
    }

    /// A side's store as `SCHEME://bucketName/rootPath`, and beside it the backups' root.
    /// `backup.storage`'s `rootPath` is where the backups are in the bucket, not part of
    /// the store; `milvus.storage`'s is Milvus's root, and so the store's.
    fn store_url(&mut self, s: &Settings, side: &str, scheme: &str) -> (Option<Url>, String) {
        let key = |name: &str| format!("{side}.{name}");
        let is_backup = side == "backup.storage";
        let root = s.text(&key("rootPath")).trim_matches('/').to_owned();
        let bucket = s.text(&key("bucketName"));
        let text = if is_backup || root.is_empty() {
            format!("{scheme}://{bucket}")
        } else {
            format!("{scheme}://{bucket}/{root}")
        };
        let url = match Url::parse(&text) {
            Ok(url) if url.host_str().is_some_and(|h| !h.is_empty()) => Some(url),
            _ => {
                self.at(
                    &s.origin(&key("bucketName")),
                    &key("bucketName"),
                    format!("`{bucket}` is not a bucket name"),
                );
                None
            }
        };
        (url, if is_backup { root } else { String::new() })
    }

    /// milvus-backup's checks of an object store's keys that only some stores use.
    fn object_store_checks(&mut self, s: &Settings, side: &str) {
        let key = |name: &str| format!("{side}.{name}");
        for (name, reason) in [
            (
                "accountName",
                "is Azure's storage account, and this store is not Azure",
            ),
            ("localPath", "applies only to the local provider"),
        ] {
            if !s.text(&key(name)).is_empty() {
                self.at(&s.origin(&key(name)), &key(name), reason);
            }
        }
        let milvus_address = s.text(&key("milvusAddress"));
        if milvus_address.contains("://") {
            self.at(
                &s.origin(&key("milvusAddress")),
                &key("milvusAddress"),
                format!("`{milvus_address}`: expected a bare host, without a scheme"),
            );
        }
        if s.int(&key("milvusPort")).is_some_and(|p| p != 0) {
            if milvus_address.is_empty() {
                self.at(
                    &s.origin(&key("milvusPort")),
                    &key("milvusPort"),
                    "applies only with milvusAddress",
                );
            } else {
                self.port(s, &key("milvusPort"));
            }
        }
    }

    /// An S3 store's credentials: static keys, or none for `iam` and `default` (the
    /// object store's own instance-credential chain). A credential the type does not use
    /// is refused when anyone set it, as milvus-backup refuses it.
    fn auth(&mut self, s: &Settings, side: &str, flavour: Flavour) -> Option<Option<GivenKeys>> {
        let key = |name: &str| format!("{side}.auth.{name}");
        let kind = s.text(&key("type")).to_lowercase();
        let provider = s.text(&format!("{side}.provider")).to_lowercase();
        let uses: &[&str] = match (flavour, kind.as_str()) {
            (Flavour::Azure, "sharedkey") => &["accountKey"],
            (Flavour::Azure, "default") => &[],
            (Flavour::GcsNative, "serviceaccount") => &["credentialsFile"],
            (Flavour::Azure | Flavour::GcsNative, other) => {
                let expected = if flavour == Flavour::Azure {
                    "sharedKey or default"
                } else {
                    "serviceAccount"
                };
                self.at(
                    &s.origin(&key("type")),
                    &key("type"),
                    format!("auth type `{other}` does not apply to provider `{provider}`: expected {expected}"),
                );
                return None;
            }
            (_, "static") => &["accessKeyID", "secretAccessKey", "sessionToken"],
            (_, "iam" | "default") if flavour != Flavour::Aws => {
                self.at(&s.origin(&key("type")), &key("type"), format!("auth type `{kind}` with provider `{provider}` takes its credentials from that cloud's own metadata service, which lockstep does not reach; give static keys (accessKeyID, secretAccessKey)"));
                return None;
            }
            (_, "iam") => &["endpoint"],
            (_, "default") => &[],
            (_, "sharedkey" | "serviceaccount") => {
                self.at(&s.origin(&key("type")), &key("type"), format!("auth type `{}` is for Azure or native GCS; an S3-compatible store takes static, iam or default", s.text(&key("type"))));
                return None;
            }
            (_, other) => {
                self.at(
                    &s.origin(&key("type")),
                    &key("type"),
                    format!("`{other}`: expected static, iam or default"),
                );
                return None;
            }
        };
        let before = self.problems.len();
        for name in [
            "accessKeyID",
            "secretAccessKey",
            "sessionToken",
            "accountKey",
            "credentialsFile",
            "endpoint",
        ] {
            if !uses.contains(&name) && s.origin(&key(name)).is_set() {
                self.at(
                    &s.origin(&key(name)),
                    &key(name),
                    format!("does not apply when {} is \"{kind}\"", key("type")),
                );
            }
        }
        if kind == "iam" && !s.text(&key("endpoint")).is_empty() {
            self.at(&s.origin(&key("endpoint")), &key("endpoint"), "lockstep fetches instance credentials from the standard metadata endpoint; a custom IAM endpoint is not supported");
        }
        match kind.as_str() {
            "sharedkey" => return self.shared_key(s, side, before),
            "serviceaccount" => {
                let file = s.text(&key("credentialsFile"));
                if let Err(e) = std::fs::metadata(file)
                    .map_err(|e| e.to_string())
                    .and_then(|m| {
                        m.is_file()
                            .then_some(())
                            .ok_or_else(|| "not a file".to_owned())
                    })
                {
                    self.at(
                        &s.origin(&key("credentialsFile")),
                        &key("credentialsFile"),
                        format!("serviceAccount reads a key file: `{file}`: {e}"),
                    );
                }
                return (self.problems.len() == before).then_some(None);
            }
            "static" => {}
            _ => return (self.problems.len() == before).then_some(None),
        }
        for name in ["accessKeyID", "secretAccessKey"] {
            if s.text(&key(name)).is_empty() {
                self.at(
                    &s.origin(&key(name)),
                    &key(name),
                    "static credentials need an access key ID and a secret access key",
                );
            }
        }
        if self.problems.len() > before {
            return None;
        }
        let token = s.text(&key("sessionToken"));
        Some(Some(GivenKeys {
            from: format!("{} {side}.auth", self.path.display()),
            access_key_id: Secret(s.text(&key("accessKeyID")).to_owned()),
            secret_access_key: Secret(s.text(&key("secretAccessKey")).to_owned()),
            session_token: (!token.is_empty()).then(|| Secret(token.to_owned())),
        }))
    }
}

impl Reader<'_> {
    /// Azure's shared key, held as given keys: the account and its key.
    fn shared_key(&mut self, s: &Settings, side: &str, before: usize) -> Option<Option<GivenKeys>> {
        let key = format!("{side}.auth.accountKey");
        if s.text(&key).is_empty() {
            self.at(&s.origin(&key), &key, "sharedKey needs the account's key");
        }
        if self.problems.len() > before {
            return None;
        }
        Some(Some(GivenKeys {
            from: format!("{} {side}.auth", self.path.display()),
            access_key_id: Secret(s.text(&format!("{side}.accountName")).to_owned()),
            secret_access_key: Secret(s.text(&key).to_owned()),
            session_token: None,
        }))
    }
}

/// milvus-backup's places for its config when `--config` names none: `backup.yaml` here,
/// in `$MILVUSCONF`, or in `./configs`.
pub fn default_path(env: Env<'_>) -> Option<PathBuf> {
    let mut candidates = vec![PathBuf::from("backup.yaml")];
    if let Some(dir) = env("MILVUSCONF").filter(|d| !d.is_empty()) {
        candidates.push(Path::new(&dir).join("backup.yaml"));
    }
    candidates.push(Path::new("configs").join("backup.yaml"));
    candidates.into_iter().find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::super::testing::data_dir;
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        data_dir().join("backup-yaml").join(name)
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse(text: &str, sets: &[(&str, &str)], env: Env<'_>) -> Result<HostConfig, Error> {
        let sets: Vec<_> = sets
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        parse_str(
            text,
            Path::new("/etc/milvus-backup/backup.yaml"),
            &sets,
            env,
        )
    }

    fn shown(err: Error) -> Vec<String> {
        err.problems().iter().map(ToString::to_string).collect()
    }

    /// The keys as the test files write them.
    fn minioadmin(from: &Path, side: &str) -> Option<GivenKeys> {
        Some(GivenKeys {
            from: format!("{} {side}.auth", from.display()),
            access_key_id: Secret("minioadmin".into()),
            secret_access_key: Secret("minioadmin".into()),
            session_token: None,
        })
    }

    #[test]
    fn the_shipped_v2_shape_is_the_host_model() {
        let path = fixture("v2-minio.yaml");
        let config = load(&path, &[], &no_env).unwrap();
        let milvus_store = StorageSpec {
            url: Url::parse("s3://milvus-bucket/files").unwrap(),
            endpoint: Some(Url::parse("http://10.0.0.9:9000").unwrap()),
            region: None,
            access_key_id_env: None,
            secret_access_key_env: None,
            session_token_env: None,
            given: minioadmin(&path, "milvus.storage"),
            allow_http: true,
            virtual_hosted: false,
            azure_account: None,
            azure_key_env: None,
            service_account_file: None,
            anonymous: false,
        };
        let backup_store = StorageSpec {
            url: Url::parse("s3://backup-bucket").unwrap(),
            given: minioadmin(&path, "backup.storage"),
            ..milvus_store.clone()
        };
        let expected = HostConfig {
            clusters: BTreeMap::from([(
                "milvus".to_owned(),
                ClusterSpec {
                    uri: Url::parse("http://10.0.0.1:19530").unwrap(),
                    token: Some(TokenSource::Given(Secret("root:Milvus".into()))),
                    storage: Some(milvus_store.clone()),
                    max_import_jobs: 512,
                    paths: PathForm::Minio,
                    require_staging: false,
                    l0_import: None,
                    tls: TlsSpec::default(),
                    management: Some(Url::parse("http://10.0.0.1:9091").unwrap()),
                    discover_secondaries: false,
                },
            )]),
            storages: BTreeMap::from([
                ("milvus".to_owned(), milvus_store),
                ("backup".to_owned(), backup_store.clone()),
            ]),
            backups: Some(BackupsSpec {
                storage: backup_store,
                root: "backup".into(),
            }),
            default_target: Some("milvus".into()),
            state_dir: data_dir().join("backup-yaml/.lockstep"),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            named_ends_only: false,
            max_queued: crate::config::DEFAULT_MAX_QUEUED,
            retention: None,
            journal: Default::default(),
            restore: RestoreDefaults {
                max_segments_per_job: 128,
                keep_temp_files: true,
            },
        };
        assert_eq!(config, expected);
    }

    #[test]
    fn the_v1_form_of_the_same_file_is_the_same_model() {
        let v2_path = fixture("v2-minio.yaml");
        let v1_path = fixture("v1-minio.yaml");
        let v2 = load(&v2_path, &[], &no_env).unwrap();
        let mut v1 = load(&v1_path, &[], &no_env).unwrap();
        // The keys' origin names the file they were read from; nothing else may differ.
        let v2_origin = v2_path.display().to_string();
        let v1_origin = v1_path.display().to_string();
        let renamed = |spec: &mut StorageSpec| {
            if let Some(given) = &mut spec.given {
                given.from = given.from.replace(&v1_origin, &v2_origin);
            }
        };
        v1.storages.values_mut().for_each(renamed);
        v1.clusters
            .values_mut()
            .filter_map(|c| c.storage.as_mut())
            .for_each(renamed);
        v1.backups.iter_mut().for_each(|b| renamed(&mut b.storage));
        // v1 has no batch size: milvus-backup's default.
        assert_eq!(v1.restore.max_segments_per_job, 256);
        v1.restore.max_segments_per_job = v2.restore.max_segments_per_job;
        assert_eq!(v1, v2);
    }

    #[test]
    fn v1_takes_its_own_variables_and_not_v2s() {
        let text = "milvus:\n  address: localhost\n";
        let env = |v: &str| match v {
            "MILVUS_ADDRESS" => Some("10.1.1.1".to_owned()),
            "MILVUS_STORAGE_AUTH_ACCESS_KEY_ID" => Some("v2-only".to_owned()),
            _ => None,
        };
        let config = parse(text, &[], &env).unwrap();
        assert_eq!(
            config.clusters["milvus"].uri.as_str(),
            "http://10.1.1.1:19530/"
        );
        let given = config.storages["milvus"].given.as_ref().unwrap();
        assert_eq!(given.access_key_id.expose(), "minioadmin");
    }

    #[test]
    fn a_local_milvus_imports_from_where_milvus_sees_its_files() {
        let config = load(&fixture("v2-local-milvus.yaml"), &[], &no_env).unwrap();
        let milvus = &config.clusters["milvus"];
        assert_eq!(
            milvus.paths,
            PathForm::Local {
                local_storage_path: "/milvus/data".into()
            }
        );
        assert_eq!(
            milvus.storage,
            Some(StorageSpec::local(Path::new("/var/lib/milvus/data")).unwrap())
        );
        let backups = config.backups.unwrap();
        assert_eq!(
            backups.storage,
            StorageSpec::local(Path::new("/srv/milvus-backups")).unwrap()
        );
        assert_eq!(backups.root, "");
        // Without localPath, Milvus is taken to see the directory where lockstep does.
        let text = "configVersion: v2\nmilvus:\n  storage:\n    provider: local\n    rootPath: /data/milvus\n";
        let config = parse(text, &[], &no_env).unwrap();
        assert_eq!(
            config.clusters["milvus"].paths,
            PathForm::Local {
                local_storage_path: "/data/milvus".into()
            }
        );
    }

    #[test]
    fn credentials_come_from_the_environment_and_set_beats_it() {
        let text = "configVersion: v2\nmilvus:\n  storage:\n    auth:\n      type: static\n";
        let env = |v: &str| match v {
            "MILVUS_USER" => Some("reader".to_owned()),
            "MILVUS_PASSWORD" => Some("from-env".to_owned()),
            "MILVUS_STORAGE_AUTH_ACCESS_KEY_ID" => Some("env-ak".to_owned()),
            "MILVUS_STORAGE_AUTH_SECRET_ACCESS_KEY" => Some("env-sk".to_owned()),
            _ => None,
        };
        let config = parse(text, &[("milvus.password", "from-set")], &env).unwrap();
        assert_eq!(
            config.clusters["milvus"].token,
            Some(TokenSource::Given(Secret("reader:from-set".into())))
        );
        for store in ["milvus", "backup"] {
            let given = config.storages[store].given.as_ref().unwrap();
            assert_eq!(given.access_key_id.expose(), "env-ak", "{store}");
            assert_eq!(given.secret_access_key.expose(), "env-sk", "{store}");
        }
        // What is written down names where the keys came from, never the keys.
        let json = serde_json::to_string(&config.storages["milvus"]).unwrap();
        assert!(
            !json.contains("env-sk") && !json.contains("env-ak"),
            "{json}"
        );
        assert!(
            json.contains(
                r#""given":{"from":"/etc/milvus-backup/backup.yaml milvus.storage.auth"}"#
            ),
            "{json}"
        );
    }

    #[test]
    fn misspelt_v1_and_unused_keys_are_refused_with_their_line() {
        let text = "configVersion: v2
milvus:
  address: 10.0.0.1
  storage:
    bucketNmae: milvus
    auth:
      type: iam
      accessKeyID: AKIA
backup:
  storage:
    auth:
      type: default
";
        let env = |v: &str| (v == "BACKUP_STORAGE_AUTH_SECRET_ACCESS_KEY").then(String::new);
        let err = parse(text, &[("milvus.grpc.adress", "x")], &env).unwrap_err();
        assert_eq!(
            shown(err),
            [
                "/etc/milvus-backup/backup.yaml:3:3: milvus.address: `milvus.address` is a v1 key; a v2 config writes it as `milvus.grpc.address`",
                "/etc/milvus-backup/backup.yaml:5:5: milvus.storage.bucketNmae: unknown key `milvus.storage.bucketNmae` in milvus-backup's v2 config",
                "--set milvus.grpc.adress: not a key of milvus-backup's v2 config, nor one's credential variable",
                "/etc/milvus-backup/backup.yaml:8:7: milvus.storage.auth.accessKeyID: does not apply when milvus.storage.auth.type is \"iam\"",
                "environment variable BACKUP_STORAGE_AUTH_SECRET_ACCESS_KEY: does not apply when backup.storage.auth.type is \"default\"",
            ]
        );
    }

    #[test]
    fn an_address_that_names_no_host_is_refused_at_its_key() {
        let text = "configVersion: v2
milvus:
  grpc:
    address: \"bad host\"
  storage:
    address: \"also bad\"
";
        let refused = shown(parse(text, &[], &no_env).unwrap_err());
        let fields: Vec<&str> = refused
            .iter()
            .map(|p| p.split(": ").nth(1).unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "milvus.storage.address",
                "backup.storage.address",
                "milvus.grpc.address"
            ],
            "{refused:#?}"
        );
        // backup.storage inherits the address, and is shown where it was written.
        assert!(refused[1].contains("backup.yaml:6:5: "), "{refused:#?}");
        assert!(
            refused[2].ends_with("`bad host` is not a host name or address"),
            "{refused:#?}"
        );
    }

    /// Issue 49: `milvus.management.endpoint` (where milvus-backup pauses GC) is the
    /// cluster's management API when someone wrote it; its default, `http://localhost:9091`,
    /// is nobody's address for a remote Milvus and is not taken. A bad one is refused at its
    /// line.
    #[test]
    fn a_written_management_endpoint_is_the_clusters_management_api() {
        let management = |text: &str, sets: &[(&str, &str)]| {
            let config = parse(text, sets, &no_env).unwrap();
            config.clusters[CLUSTER]
                .management
                .clone()
                .map(String::from)
        };
        let head = "configVersion: v2\nmilvus:\n  grpc:\n    address: 10.0.0.1\n";
        assert_eq!(management(head, &[]), None);
        let written = format!("{head}  management:\n    endpoint: http://10.0.0.1:9091\n");
        assert_eq!(
            management(&written, &[]).as_deref(),
            Some("http://10.0.0.1:9091/")
        );
        let set = [("milvus.management.endpoint", "https://10.0.0.1:9091")];
        assert_eq!(
            management(head, &set).as_deref(),
            Some("https://10.0.0.1:9091/")
        );
        let bad = format!("{head}  management:\n    endpoint: 10.0.0.1:9091\n");
        let refused = shown(parse(&bad, &[], &no_env).unwrap_err());
        assert_eq!(
            refused,
            [
                "/etc/milvus-backup/backup.yaml:6:5: milvus.management.endpoint: `10.0.0.1:9091`: expected an absolute http(s):// URL"
            ],
        );
    }

    #[test]
    fn tls_mode_makes_an_https_cluster_with_the_files_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let pem = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, "-----BEGIN X-----\nAA==\n-----END X-----\n").unwrap();
            path
        };
        let (ca, cert, key) = (pem("ca.pem"), pem("client.pem"), pem("client.key"));
        let text = format!(
            "configVersion: v2
milvus:
  grpc:
    address: 10.0.0.1
    tlsMode: mutual
    caCertPath: {}
    serverName: milvus.example
    mtlsCertPath: {}
    mtlsKeyPath: {}
",
            ca.display(),
            cert.display(),
            key.display()
        );
        let config = parse(&text, &[], &no_env).unwrap();
        let milvus = &config.clusters["milvus"];
        assert_eq!(milvus.uri.as_str(), "https://10.0.0.1:19530/");
        assert_eq!(
            milvus.tls,
            TlsSpec {
                ca_cert: Some(ca),
                server_name: Some("milvus.example".into()),
                client_cert: Some(cert),
                client_key: Some(key),
            }
        );
        // server: the system's roots when no CA is named, and no client certificate.
        let server = "configVersion: v2\nmilvus:\n  grpc:\n    tlsMode: server\n";
        let config = parse(server, &[], &no_env).unwrap();
        assert_eq!(config.clusters["milvus"].uri.scheme(), "https");
        assert_eq!(config.clusters["milvus"].tls, TlsSpec::default());
    }

    #[test]
    fn azure_and_native_gcs_are_their_clouds_stores() {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("sa.json");
        std::fs::write(&key_file, "{}").unwrap();
        let text = format!(
            "configVersion: v2
milvus:
  storage:
    provider: azure
    address: core.windows.net
    port: 443
    accountName: acct
    bucketName: milvus
    rootPath: files
    auth:
      type: sharedKey
      accountKey: the-key
backup:
  storage:
    provider: gcpnative
    address: storage.googleapis.com
    useSSL: true
    bucketName: backups
    auth:
      type: serviceAccount
      credentialsFile: {}
",
            key_file.display()
        );
        let config = parse(&text, &[], &no_env).unwrap();
        let milvus = config.clusters["milvus"].storage.as_ref().unwrap();
        assert_eq!(milvus.url.as_str(), "az://milvus/files");
        assert_eq!(milvus.endpoint, None, "Azure's own endpoint");
        assert_eq!(milvus.azure_account.as_deref(), Some("acct"));
        let given = milvus.given.as_ref().unwrap();
        assert_eq!(given.secret_access_key.expose(), "the-key");
        let backups = &config.backups.as_ref().unwrap().storage;
        assert_eq!(backups.url.as_str(), "gs://backups");
        assert_eq!(backups.endpoint, None, "Google's own endpoint");
        assert_eq!(
            backups.service_account_file.as_deref(),
            Some(key_file.as_path())
        );
        assert_eq!(backups.azure_account, None);

        // Another host is an emulator for GCS, and a sovereign cloud's suffix for Azure,
        // as milvus-backup builds them.
        let elsewhere = text
            .replace(
                "address: core.windows.net",
                "address: blob.core.chinacloudapi.cn",
            )
            .replace(
                "address: storage.googleapis.com",
                "address: 127.0.0.1\n    port: 4443",
            )
            .replace("useSSL: true", "useSSL: false");
        let config = parse(&elsewhere, &[], &no_env).unwrap();
        let milvus = config.clusters["milvus"].storage.as_ref().unwrap();
        assert_eq!(
            milvus.endpoint.as_ref().map(Url::as_str),
            Some("https://acct.blob.blob.core.chinacloudapi.cn/")
        );
        let backups = &config.backups.as_ref().unwrap().storage;
        assert_eq!(
            backups.endpoint.as_ref().map(Url::as_str),
            Some("http://127.0.0.1:4443/")
        );
        assert!(backups.allow_http);

        // Each cloud takes its own auth types.
        let wrong = text.replace("type: sharedKey", "type: static");
        let refused = shown(parse(&wrong, &[], &no_env).unwrap_err());
        assert!(
            refused[0].contains("auth type `static` does not apply to provider `azure`: expected sharedKey or default"),
            "{refused:#?}"
        );
    }

    #[test]
    fn host_style_providers_address_buckets_by_host_and_take_static_keys() {
        let text = "configVersion: v2
milvus:
  storage:
    provider: aliyun
    address: oss-cn-hangzhou.aliyuncs.com
    port: 443
    useSSL: true
    bucketName: milvus-files
    rootPath: files
    auth:
      type: static
      accessKeyID: ak
      secretAccessKey: sk
backup:
  storage:
    provider: tencent
    address: cos.ap-guangzhou.myqcloud.com
    port: 443
    useSSL: true
    bucketName: backups-1250000000
";
        let config = parse(text, &[], &no_env).unwrap();
        let milvus = config.clusters["milvus"].storage.as_ref().unwrap();
        assert!(milvus.virtual_hosted && !milvus.allow_http);
        assert_eq!(milvus.url.as_str(), "s3://milvus-files/files");
        assert_eq!(
            milvus.endpoint.as_ref().map(Url::as_str),
            Some("https://oss-cn-hangzhou.aliyuncs.com/")
        );
        let backups = config.backups.as_ref().unwrap();
        assert!(backups.storage.virtual_hosted);
        assert_eq!(backups.storage.url.as_str(), "s3://backups-1250000000");

        // Their clouds' own credential services are not reached: static keys only.
        let iam = text
            .replace("type: static", "type: iam")
            .replace("      accessKeyID: ak\n      secretAccessKey: sk\n", "");
        let refused = shown(parse(&iam, &[], &no_env).unwrap_err());
        // backup.storage inherits the type, and is shown where that was written.
        assert_eq!(
            refused
                .iter()
                .map(|p| p.split(" takes ").next().unwrap())
                .collect::<Vec<_>>(),
            [
                "/etc/milvus-backup/backup.yaml:11:7: milvus.storage.auth.type: auth type `iam` with provider `aliyun`",
                "/etc/milvus-backup/backup.yaml:11:7: backup.storage.auth.type: auth type `iam` with provider `tencent`",
            ],
        );
        // GCS's S3 interoperability takes HMAC keys; its instance credentials are OAuth
        // tokens from Google's metadata server, which the S3 client cannot use.
        let gcp = iam.replace("aliyun", "gcp").replace("tencent", "gcp");
        let refused = shown(parse(&gcp, &[], &no_env).unwrap_err());
        assert!(
            refused
                .iter()
                .all(|p| p.contains("auth type `iam` with provider `gcp`")),
            "{refused:#?}"
        );
    }

    #[test]
    fn what_lockstep_cannot_honour_is_refused_by_name() {
        let text = "configVersion: v2
milvus:
  grpc:
    tlsMode: mutual
  rest:
    endpoint: http://10.0.0.2:8080
  storage:
    provider: azure
backup:
  storage:
    provider: minio
restore:
  maxSegmentsPerImportJob: 1024
";
        let err = parse(text, &[], &no_env).unwrap_err();
        let shown = shown(err);
        let fields: Vec<&str> = shown
            .iter()
            .map(|p| p.split(": ").nth(1).unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "restore.maxSegmentsPerImportJob",
                "milvus.storage.accountName",
                "milvus.storage.auth.type",
                "milvus.grpc.mtlsCertPath",
                "milvus.grpc.mtlsKeyPath",
                "milvus.rest.endpoint",
            ],
            "{shown:#?}"
        );
        assert!(shown[1].contains("an azure store names its storage account"));
        assert!(shown[2].contains("auth type `static` does not apply to provider `azure`"));
        assert!(shown[3].contains("tlsMode mutual presents a client certificate"));
    }

    #[test]
    fn versions_and_documents_it_does_not_know_are_refused() {
        let err = parse("configVersion: v3\n", &[], &no_env).unwrap_err();
        assert_eq!(
            shown(err),
            [
                "/etc/milvus-backup/backup.yaml:1:1: configVersion: configVersion `v3` is not a schema version: expected \"v1\" or \"v2\""
            ]
        );
        let err = parse("- milvus\n", &[], &no_env).unwrap_err();
        assert_eq!(shown(err).len(), 1);
        let err = parse(
            "configVersion: v2\nmilvus:\n  grpc:\n    port: 70000\n",
            &[],
            &no_env,
        )
        .unwrap_err();
        assert_eq!(
            shown(err),
            [
                "/etc/milvus-backup/backup.yaml:4:5: milvus.grpc.port: port 70000: expected 1 to 65535"
            ]
        );
    }

    #[test]
    fn set_items_are_key_equals_value() {
        assert_eq!(
            parse_sets(&["milvus.user=a=b".into()]).unwrap(),
            [("milvus.user".to_owned(), "a=b".to_owned())]
        );
        let err = parse_sets(&["milvus.user".into()]).unwrap_err();
        assert_eq!(shown(err), ["--set: `milvus.user`: expected KEY=VALUE"]);
    }

    #[test]
    fn a_lockstep_toml_adds_to_its_base() {
        let text = r#"base = "v2-minio.yaml"
state_dir = "state"

[clusters.mirror]
uri = "http://10.0.0.2:19530"
storage = "milvus"
"#;
        let path = fixture("lockstep.toml");
        let config = HostConfig::parse_str(text, &path).unwrap();
        let base = load(&fixture("v2-minio.yaml"), &[], &no_env).unwrap();
        assert_eq!(config.default_target.as_deref(), Some("milvus"));
        assert_eq!(config.clusters["milvus"], base.clusters["milvus"]);
        assert_eq!(
            config.clusters["mirror"].storage,
            base.clusters["milvus"].storage
        );
        assert_eq!(config.backups, base.backups);
        assert_eq!(config.restore, base.restore);
        assert_eq!(config.state_dir, data_dir().join("backup-yaml/state"));
        let clash = "base = \"v2-minio.yaml\"\n[storages.backup]\nurl = \"s3://b\"\n";
        let err = HostConfig::parse_str(clash, &path).unwrap_err();
        assert_eq!(
            shown(err),
            [format!(
                "{}:2:1: storages.backup: `backup` is defined by the base v2-minio.yaml; name this one differently",
                path.display()
            )]
        );
        let err = HostConfig::parse_str("base = \"other.toml\"\n", &path).unwrap_err();
        assert_eq!(
            shown(err),
            [format!(
                "{}:1:8: base: `other.toml`: a base is a milvus-backup config, a .yaml file",
                path.display()
            )]
        );
    }
}
