//! milvus-backup's v2 config keys, and each one's value resolved as milvus-backup resolves
//! it: `--set` over the environment over the file over the default, per key. Only
//! credentials have environment variables in v2 (Kubernetes injects `MILVUS_PORT` and the
//! like for every service, which a connection setting must not pick up), and
//! `backup.storage` takes what it leaves out from `milvus.storage`, except its root path.

use std::collections::BTreeMap;
use std::ops::Range;

use super::tree::Value;

/// How a key's text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    Int,
    Bool,
    List,
}

/// One key of the v2 schema.
#[derive(Debug, Clone)]
pub(super) struct Key {
    /// As milvus-backup spells it, e.g. `milvus.grpc.tlsMode`.
    pub name: String,
    pub kind: Kind,
    pub default: &'static str,
    /// Its credential variable, for the few that have one.
    pub env: Option<String>,
    /// The `milvus.storage` key a `backup.storage` key takes its default from.
    pub inherits: Option<String>,
}

fn key(name: &str, kind: Kind, default: &'static str) -> Key {
    Key {
        name: name.to_owned(),
        kind,
        default,
        env: None,
        inherits: None,
    }
}

fn with_env(mut key: Key, env: &str) -> Key {
    key.env = Some(env.to_owned());
    key
}

/// The storage keys under `prefix` (`milvus.storage`, `backup.storage`), credentials read
/// from `{env}_...`.
fn storage_keys(prefix: &str, env: &str, root_default: &'static str) -> Vec<Key> {
    use Kind::*;
    let k = |name: &str, kind, default| key(&format!("{prefix}.{name}"), kind, default);
    let e = |name: &str, var: &str| with_env(k(name, Text, ""), &format!("{env}_{var}"));
    vec![
        k("provider", Text, "minio"),
        k("address", Text, "localhost"),
        k("port", Int, "9000"),
        k("region", Text, ""),
        k("useSSL", Bool, "false"),
        e("accountName", "ACCOUNT_NAME"),
        k("bucketName", Text, "a-bucket"),
        k("rootPath", Text, root_default),
        k("localPath", Text, ""),
        k("milvusAddress", Text, ""),
        k("milvusPort", Int, "0"),
        k("auth.type", Text, "static"),
        with_env(
            k("auth.accessKeyID", Text, "minioadmin"),
            &format!("{env}_AUTH_ACCESS_KEY_ID"),
        ),
        with_env(
            k("auth.secretAccessKey", Text, "minioadmin"),
            &format!("{env}_AUTH_SECRET_ACCESS_KEY"),
        ),
        e("auth.sessionToken", "AUTH_SESSION_TOKEN"),
        e("auth.accountKey", "AUTH_ACCOUNT_KEY"),
        e("auth.credentialsFile", "AUTH_CREDENTIALS_FILE"),
        k("auth.endpoint", Text, ""),
    ]
}

/// The `backup.storage` keys that default to `milvus.storage`'s resolved values.
const INHERITED: &[&str] = &[
    "provider",
    "address",
    "port",
    "region",
    "useSSL",
    "accountName",
    "bucketName",
    "auth.type",
    "auth.accessKeyID",
    "auth.secretAccessKey",
    "auth.sessionToken",
    "auth.accountKey",
    "auth.credentialsFile",
    "auth.endpoint",
];

/// Every key of the v2 schema, `milvus.storage` before `backup.storage` so inherited
/// defaults resolve in order.
pub(super) fn schema() -> Vec<Key> {
    use Kind::*;
    let mut keys = vec![
        key("log.level", Text, "info"),
        key("log.console", Bool, "true"),
        key("log.file.path", Text, "logs/backup.log"),
        key("log.file.maxSizeMiB", Int, "300"),
        key("log.file.maxDays", Int, "0"),
        key("log.file.maxBackups", Int, "0"),
        key("server.debugMode", Bool, "false"),
        key("server.swaggerBasePath", Text, ""),
        with_env(key("milvus.user", Text, ""), "MILVUS_USER"),
        with_env(key("milvus.password", Text, ""), "MILVUS_PASSWORD"),
        key("milvus.grpc.address", Text, "localhost"),
        key("milvus.grpc.port", Int, "19530"),
        key("milvus.grpc.tlsMode", Text, "disabled"),
        key("milvus.grpc.caCertPath", Text, ""),
        key("milvus.grpc.serverName", Text, ""),
        key("milvus.grpc.mtlsCertPath", Text, ""),
        key("milvus.grpc.mtlsKeyPath", Text, ""),
        key("milvus.rest.endpoint", Text, ""),
        key("milvus.management.endpoint", Text, "http://localhost:9091"),
        key(
            "milvus.replicate.rpcChannelName",
            Text,
            "by-dev-replicate-msg",
        ),
        key("milvus.etcd.endpoints", List, "localhost:2379"),
        key("milvus.etcd.rootPath", Text, "by-dev"),
    ];
    keys.extend(storage_keys("milvus.storage", "MILVUS_STORAGE", "files"));
    keys.extend(
        storage_keys("backup.storage", "BACKUP_STORAGE", "backup")
            .into_iter()
            .map(|mut k| {
                let name = &k.name["backup.storage.".len()..];
                if INHERITED.contains(&name) {
                    k.inherits = Some(format!("milvus.storage.{name}"));
                }
                k
            }),
    );
    keys.extend([
        key("backup.concurrency.collections", Int, "4"),
        key("backup.concurrency.segments", Int, "1024"),
        key("backup.pauseGC", Bool, "true"),
        key("restore.concurrency.collections", Int, "2"),
        key("restore.concurrency.importJobs", Int, "768"),
        key("restore.maxSegmentsPerImportJob", Int, "256"),
        key("restore.keepTempFiles", Bool, "false"),
        key("transfer.mode", Text, "auto"),
        key("transfer.concurrency", Int, "128"),
        key("transfer.multipartCopyThresholdMiB", Int, "500"),
        key("zillizCloud.endpoint", Text, "https://api.cloud.zilliz.com"),
        with_env(key("zillizCloud.apiKey", Text, ""), "ZILLIZ_CLOUD_API_KEY"),
    ]);
    keys
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Origin {
    /// `--set KEY=VALUE`, by the key as given.
    Set(String),
    Env(String),
    /// The config file, at this byte offset (of a v1 key, for a translated file).
    File(Range<usize>),
    Default,
    /// `backup.storage`'s default from `milvus.storage`, with where that one came from.
    Inherited(Box<Origin>),
}

impl Origin {
    /// Whether someone set it: defaults and inherited values are nobody's choice.
    pub fn is_set(&self) -> bool {
        !matches!(self, Origin::Default | Origin::Inherited(_))
    }
}

/// A value before its key's schema reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Given {
    pub value: Value,
    pub origin: Origin,
}

/// A key's value, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Typed {
    Text(String),
    Int(i64),
    Bool(bool),
    List(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Setting {
    pub value: Typed,
    pub origin: Origin,
}

/// A value that does not read as its key's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BadValue {
    pub key: String,
    pub origin: Origin,
    pub message: String,
}

/// Every key's value, by lower-cased key.
#[derive(Debug, Default)]
pub(super) struct Settings(BTreeMap<String, Setting>);

/// Whether a key holds a secret: a password, a secret key, a session token, an account key.
fn is_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "secretaccesskey", "sessiontoken", "accountkey"]
        .iter()
        .any(|secret| name.ends_with(secret))
}

/// For a `--set` key (a key of the schema, or its credential variable's name) that holds a
/// secret: the variable that would keep it off the command line, when the key has one.
pub(super) fn secret_set(set: &str) -> Option<Option<String>> {
    schema()
        .into_iter()
        .find(|key| {
            key.name.eq_ignore_ascii_case(set)
                || key
                    .env
                    .as_ref()
                    .is_some_and(|e| e.eq_ignore_ascii_case(set))
        })
        .filter(|key| is_secret(&key.name))
        .map(|key| key.env)
}

impl Settings {
    /// Resolves every key of `schema`. `file` holds the file's values (v2 keys, lower-cased);
    /// `env` is consulted for keys with a variable when `with_env` (a v1 file has its own
    /// variables, already in `file`).
    pub fn resolve(
        schema: &[Key],
        file: &BTreeMap<String, Given>,
        sets: &[(String, String)],
        env: super::super::secret::Env<'_>,
        with_env: bool,
    ) -> (Settings, Vec<BadValue>) {
        let mut settings = Settings::default();
        let mut bad = Vec::new();
        for key in schema {
            let lower = key.name.to_lowercase();
            let set = sets.iter().rev().find(|(k, _)| {
                k.eq_ignore_ascii_case(&key.name)
                    || key.env.as_ref().is_some_and(|e| k.eq_ignore_ascii_case(e))
            });
            let given = match set {
                Some((k, v)) => Given {
                    value: Value::Scalar(v.clone()),
                    origin: Origin::Set(k.clone()),
                },
                None => match key.env.as_ref().filter(|_| with_env).and_then(|var| {
                    env(var).map(|v| Given {
                        value: Value::Scalar(v),
                        origin: Origin::Env(var.clone()),
                    })
                }) {
                    Some(from_env) => from_env,
                    None => match file.get(&lower) {
                        Some(given) => given.clone(),
                        None => {
                            let inherited = key
                                .inherits
                                .as_ref()
                                .and_then(|from| settings.0.get(&from.to_lowercase()));
                            if let Some(inherited) = inherited {
                                let value = inherited.value.clone();
                                let from = Box::new(inherited.origin.clone());
                                settings.0.insert(
                                    lower,
                                    Setting {
                                        value,
                                        origin: Origin::Inherited(from),
                                    },
                                );
                                continue;
                            }
                            Given {
                                value: Value::Scalar(key.default.to_owned()),
                                origin: Origin::Default,
                            }
                        }
                    },
                },
            };
            match read(
                key.kind,
                &given.value,
                !matches!(given.origin, Origin::File(_)),
            ) {
                Ok(value) => {
                    settings.0.insert(
                        lower,
                        Setting {
                            value,
                            origin: given.origin,
                        },
                    );
                }
                Err(message) => bad.push(BadValue {
                    key: key.name.clone(),
                    origin: given.origin,
                    message,
                }),
            }
        }
        (settings, bad)
    }

    pub fn get(&self, key: &str) -> Option<&Setting> {
        self.0.get(&key.to_lowercase())
    }

    /// A text key's value; empty for a key that did not resolve (its problem is reported).
    pub fn text(&self, key: &str) -> &str {
        match self.get(key).map(|s| &s.value) {
            Some(Typed::Text(t)) => t,
            _ => "",
        }
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        match self.get(key).map(|s| &s.value) {
            Some(Typed::Int(n)) => Some(*n),
            _ => None,
        }
    }

    pub fn bool(&self, key: &str) -> bool {
        matches!(self.get(key).map(|s| &s.value), Some(Typed::Bool(true)))
    }

    pub fn list(&self, key: &str) -> &[String] {
        match self.get(key).map(|s| &s.value) {
            Some(Typed::List(items)) => items,
            _ => &[],
        }
    }

    /// Where `key`'s value came from; [`Origin::Default`] for one that did not resolve.
    pub fn origin(&self, key: &str) -> Origin {
        self.get(key).map_or(Origin::Default, |s| s.origin.clone())
    }
}

/// Reads a value as `kind`. `flat` text (from `--set`, the environment or a default) splits
/// lists on commas; a file's list must be a YAML list.
fn read(kind: Kind, value: &Value, flat: bool) -> Result<Typed, String> {
    match (kind, value) {
        (Kind::List, Value::List(items)) => Ok(Typed::List(items.clone())),
        (Kind::List, Value::Scalar(text)) if flat => Ok(Typed::List(split_list(text))),
        (Kind::List, Value::Scalar(_)) => Err("must be a YAML list".to_owned()),
        (_, Value::List(_)) => Err("expected a single value, not a list".to_owned()),
        (Kind::Text, Value::Scalar(text)) => Ok(Typed::Text(text.clone())),
        (Kind::Int, Value::Scalar(text)) => text
            .trim()
            .parse()
            .map(Typed::Int)
            .map_err(|_| format!("`{text}` is not a whole number")),
        (Kind::Bool, Value::Scalar(text)) => parse_bool(text)
            .map(Typed::Bool)
            .ok_or_else(|| format!("`{text}` is not true or false")),
    }
}

/// Go's strconv.ParseBool, which milvus-backup reads booleans with.
pub(super) fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// A list written as one comma-separated text (`--set`, a variable, v1's etcd endpoints).
pub(super) fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret set on the command line is found whether it is named by key or by variable,
    /// with the variable that would keep it off the command line; other keys are not.
    #[test]
    fn secrets_set_on_the_command_line_are_found_by_key_or_variable() {
        assert_eq!(
            secret_set("milvus.password"),
            Some(Some("MILVUS_PASSWORD".into()))
        );
        assert_eq!(
            secret_set("MILVUS_PASSWORD"),
            Some(Some("MILVUS_PASSWORD".into()))
        );
        assert_eq!(
            secret_set("backup.storage.auth.secretAccessKey"),
            Some(Some("BACKUP_STORAGE_AUTH_SECRET_ACCESS_KEY".into()))
        );
        assert_eq!(
            secret_set("milvus.storage.auth.accountKey"),
            Some(Some("MILVUS_STORAGE_AUTH_ACCOUNT_KEY".into()))
        );
        for plain in [
            "milvus.user",
            "milvus.grpc.address",
            "backup.storage.auth.accessKeyID",
        ] {
            assert_eq!(secret_set(plain), None, "{plain}");
        }
    }

    fn file(entries: &[(&str, &str)]) -> BTreeMap<String, Given> {
        entries
            .iter()
            .map(|(k, v)| {
                (
                    k.to_lowercase(),
                    Given {
                        value: Value::Scalar((*v).to_owned()),
                        origin: Origin::File(0..0),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn set_beats_env_beats_file_beats_default() {
        let schema = schema();
        let file = file(&[("milvus.user", "from-file"), ("milvus.password", "p-file")]);
        let env = |v: &str| (v == "MILVUS_USER").then(|| "from-env".to_owned());
        let (s, bad) = Settings::resolve(&schema, &file, &[], &env, true);
        assert!(bad.is_empty());
        assert_eq!(s.text("milvus.user"), "from-env");
        assert_eq!(s.origin("milvus.user"), Origin::Env("MILVUS_USER".into()));
        assert_eq!(s.text("milvus.password"), "p-file");
        assert_eq!(s.int("milvus.grpc.port"), Some(19530));
        assert_eq!(s.origin("milvus.grpc.port"), Origin::Default);
        // A `--set` names the key or its variable, in any case.
        let sets = [("MILVUS_user".to_owned(), "from-set".to_owned())];
        let (s, _) = Settings::resolve(&schema, &file, &sets, &env, true);
        assert_eq!(s.text("milvus.user"), "from-set");
        // A v1 file's variables are not v2's.
        let (s, _) = Settings::resolve(&schema, &file, &[], &env, false);
        assert_eq!(s.text("milvus.user"), "from-file");
    }

    #[test]
    fn only_credentials_have_variables() {
        let env = |v: &str| (v == "MILVUS_GRPC_PORT").then(|| "tcp://10.0.0.1:19530".to_owned());
        let (s, bad) = Settings::resolve(&schema(), &BTreeMap::new(), &[], &env, true);
        assert!(bad.is_empty());
        assert_eq!(s.int("milvus.grpc.port"), Some(19530));
    }

    #[test]
    fn backup_storage_inherits_all_but_its_root() {
        let file = file(&[
            ("milvus.storage.bucketName", "milvus-bucket"),
            ("milvus.storage.rootPath", "milvus-root"),
            ("milvus.storage.port", "9100"),
        ]);
        let sets = [(
            "milvus.storage.auth.accessKeyID".to_owned(),
            "ak".to_owned(),
        )];
        let (s, _) = Settings::resolve(&schema(), &file, &sets, &|_| None, true);
        assert_eq!(s.text("backup.storage.bucketName"), "milvus-bucket");
        assert_eq!(s.int("backup.storage.port"), Some(9100));
        assert_eq!(s.text("backup.storage.auth.accessKeyID"), "ak");
        assert_eq!(
            s.origin("backup.storage.auth.accessKeyID"),
            Origin::Inherited(Box::new(Origin::Set(
                "milvus.storage.auth.accessKeyID".to_owned()
            )))
        );
        assert_eq!(s.text("backup.storage.rootPath"), "backup");
    }

    #[test]
    fn values_read_as_their_kind() {
        let file = file(&[
            ("milvus.grpc.port", "port"),
            ("backup.pauseGC", "yes"),
            ("milvus.etcd.endpoints", "a:1,b:2"),
        ]);
        let (_, bad) = Settings::resolve(&schema(), &file, &[], &|_| None, true);
        let shown: Vec<_> = bad
            .iter()
            .map(|b| format!("{}: {}", b.key, b.message))
            .collect();
        assert_eq!(
            shown,
            [
                "milvus.grpc.port: `port` is not a whole number",
                "milvus.etcd.endpoints: must be a YAML list",
                "backup.pauseGC: `yes` is not true or false",
            ]
        );
        let sets = [("milvus.etcd.endpoints".to_owned(), "a:1, b:2".to_owned())];
        let (s, _) = Settings::resolve(&schema(), &BTreeMap::new(), &sets, &|_| None, true);
        assert_eq!(s.list("milvus.etcd.endpoints"), ["a:1", "b:2"]);
    }
}
