//! Validation of a `lockstep.toml`: names resolved, URLs parsed, files checked, every
//! problem found before the file is refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;
use url::Url;

use crate::diagnostic::{Error, Input, Kind, RawProblem, locate_in_file, read_toml};

use super::etcd::{EtcdAccess, EtcdLocation, JournalSpec, MAX_VALUE_KIB, ValueLimit};
use super::file::{
    ClusterFile, HostConfigFile, JournalFile, RetentionFile, StorageFile, StorageRef, TlsFile,
};
use super::secret::TokenSource;
use super::spec::{
    BackupsSpec, ClusterSpec, DEFAULT_BACKUP_ROOT, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_IMPORT_JOBS,
    DEFAULT_MAX_QUEUED, DEFAULT_STATE_DIR, HostConfig, PathForm, Retention, StorageSpec,
};
use super::tls::TlsSpec;

impl HostConfig {
    /// Validates `lockstep.toml` text; `path` locates messages and relative paths. `base`
    /// reads the milvus-backup config the file names as its `base`, or answers `None` for a
    /// path that names none; `overridden`: `--set` was given, which only a base can take.
    pub(super) fn from_toml(
        text: &str,
        path: &Path,
        base: &dyn Fn(&Path) -> Option<Result<HostConfig, Error>>,
        overridden: bool,
    ) -> Result<Self, Error> {
        let read = read_toml::<HostConfigFile>(text);
        let mut problems = read.problems;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        let base = match read.value.as_ref().and_then(|f| f.base.as_ref()) {
            Some(named) => match base(&base_dir.join(named.get_ref())) {
                Some(read) => Some(read?),
                None => {
                    problems.push(RawProblem::new(
                        "base",
                        Some(named.span()),
                        format!(
                            "`{}`: a base is a milvus-backup config, a .yaml file",
                            named.get_ref()
                        ),
                    ));
                    None
                }
            },
            None if overridden => {
                problems.push(RawProblem::new(
                    "base",
                    None,
                    "--set overrides a milvus-backup config's keys, and this file names no `base` backup.yaml",
                ));
                None
            }
            None => None,
        };
        let config = read
            .value
            .and_then(|file| validate(file, path, base, &mut problems));
        match config {
            Some(config) if problems.is_empty() => Ok(config),
            _ => Err(Error::Invalid {
                input: Input::HostConfig(path.to_owned()),
                problems: locate_in_file(path, text, problems),
            }),
        }
    }
}

fn validate(
    file: HostConfigFile,
    path: &Path,
    base: Option<HostConfig>,
    problems: &mut Vec<RawProblem>,
) -> Option<HostConfig> {
    let base_name = file.base.as_ref().map(|b| b.get_ref().clone());
    let (mut storages, mut clusters, base_backups, base_target, restore) = match base {
        Some(base) => (
            base.storages,
            base.clusters,
            base.backups,
            base.default_target,
            base.restore,
        ),
        None => Default::default(),
    };
    let defined_by_base = |what: &str, name: &str, span, problems: &mut Vec<RawProblem>| {
        problems.push(RawProblem::new(
            format!("{what}.{name}"),
            Some(span),
            format!(
                "`{name}` is defined by the base {}; name this one differently",
                base_name.as_deref().unwrap_or_default()
            ),
        ));
    };
    for (name, storage) in &file.storages {
        if storages.contains_key(name) {
            defined_by_base("storages", name, storage.span(), problems);
            continue;
        }
        check_name(name, &format!("storages.{name}"), storage.span(), problems);
        if let Some(spec) = storage_spec(
            storage.get_ref(),
            &format!("storages.{name}"),
            storage.span(),
            Author::Host,
            problems,
        ) {
            storages.insert(name.clone(), spec);
        }
    }
    for (name, cluster) in &file.clusters {
        if clusters.contains_key(name) {
            defined_by_base("clusters", name, cluster.span(), problems);
            continue;
        }
        let field = format!("clusters.{name}");
        check_name(name, &field, cluster.span(), problems);
        if let Some(spec) = cluster_spec(
            cluster.get_ref(),
            &field,
            cluster.span(),
            &storages,
            Author::Host,
            problems,
        ) {
            clusters.insert(name.clone(), spec);
        }
    }
    let backups = file.backups.as_ref().and_then(|backups| {
        let storage = match &backups.get_ref().storage {
            Some(storage) => {
                resolve_storage(storage, "backups.storage", &storages, Author::Host, problems)
            }
            None => {
                problems.push(RawProblem::of_kind(
                Kind::Missing,
                    "backups.storage",
                    Some(backups.span()),
                    "missing field `storage`: expected the name of a [storages.NAME] or a table with `url`",
                ));
                None
            }
        }?;
        let root = backups.get_ref().root.as_ref().map_or(DEFAULT_BACKUP_ROOT, |r| r.get_ref().as_str());
        Some(BackupsSpec { storage, root: root.trim_matches('/').to_owned() })
    }).or(base_backups);
    if let Some(target) = &file.default_target
        && !clusters.contains_key(target.get_ref())
        && !file.clusters.contains_key(target.get_ref())
    {
        problems.push(RawProblem::new(
            "default_target",
            Some(target.span()),
            format!(
                "unknown cluster `{}`; expected one of: {}",
                target.get_ref(),
                names(file.clusters.keys(), "cluster")
            ),
        ));
    }
    let max_attempts = count(
        file.max_attempts.as_ref(),
        ("max_attempts", "attempts"),
        1..=100,
        DEFAULT_MAX_ATTEMPTS,
        problems,
    );
    let max_queued = count(
        file.max_queued.as_ref(),
        ("max_queued", "restores"),
        0..=100_000,
        DEFAULT_MAX_QUEUED,
        problems,
    );
    let retention =
        (file.retention.as_ref()).and_then(|r| retention(r.get_ref(), r.span(), problems));
    let base = path.parent().unwrap_or(Path::new("."));
    let state_dir = file
        .state_dir
        .as_ref()
        .map_or(DEFAULT_STATE_DIR, |s| s.get_ref().as_str());
    Some(HostConfig {
        clusters,
        storages,
        backups,
        default_target: file.default_target.map(Spanned::into_inner).or(base_target),
        state_dir: base.join(state_dir),
        max_attempts,
        restore,
        named_ends_only: file.named_ends_only.unwrap_or(false),
        journal: (file.journal.as_ref())
            .map(|journal| journal_spec(journal.get_ref(), problems))
            .unwrap_or_default(),
        max_queued,
        retention,
    })
}

/// A count the file may set, within `range`: `default` when it sets none, or (reported as
/// `field`, counting `what`) one out of range.
fn count<T>(
    value: Option<&Spanned<i64>>,
    (field, what): (&str, &str),
    range: std::ops::RangeInclusive<T>,
    default: T,
    problems: &mut Vec<RawProblem>,
) -> T
where
    T: TryFrom<i64> + PartialOrd + std::fmt::Display,
{
    let Some(n) = value else { return default };
    match T::try_from(*n.get_ref()) {
        Ok(counted) if range.contains(&counted) => counted,
        _ => {
            problems.push(RawProblem::new(
                field,
                Some(n.span()),
                format!(
                    "{} {what}: expected {} to {}",
                    n.get_ref(),
                    range.start(),
                    range.end()
                ),
            ));
            default
        }
    }
}

/// Validates `[retention]`: at least one bound, a duration in jiff's friendly format whose
/// days are 24 hours ("90d"), a count of at least 0.
fn retention(
    file: &RetentionFile,
    span: std::ops::Range<usize>,
    problems: &mut Vec<RawProblem>,
) -> Option<Retention> {
    let before = problems.len();
    let keep = file.keep.as_ref().and_then(|keep| {
        let parsed = (keep.get_ref().parse::<jiff::Span>())
            .ok()
            .and_then(|span| {
                span.to_duration(jiff::SpanRelativeTo::days_are_24_hours())
                    .ok()
            })
            .and_then(|d| std::time::Duration::try_from(d).ok());
        if parsed.is_none() {
            problems.push(RawProblem::new(
                "retention.keep",
                Some(keep.span()),
                format!(
                    "invalid duration `{}`: expected a duration such as \"90d\", \"12h\" or \"1d12h\"",
                    keep.get_ref()
                ),
            ));
        }
        parsed
    });
    let keep_last = file.keep_last.as_ref().and_then(|n| {
        let parsed = usize::try_from(*n.get_ref()).ok();
        if parsed.is_none() {
            problems.push(RawProblem::new(
                "retention.keep_last",
                Some(n.span()),
                format!("{} restores: expected 0 or more", n.get_ref()),
            ));
        }
        parsed
    });
    if file.keep.is_none() && file.keep_last.is_none() {
        problems.push(RawProblem::new(
            "retention",
            Some(span),
            "[retention] removes nothing without a bound: give keep (\"90d\") or keep_last (a count), or both",
        ));
    }
    if problems.len() > before {
        return None;
    }
    Some(Retention {
        keep: keep.unwrap_or_default(),
        keep_last: keep_last.unwrap_or_default(),
    })
}

/// Validates `[journal]`.
fn journal_spec(file: &JournalFile, problems: &mut Vec<RawProblem>) -> JournalSpec {
    let before = problems.len();
    let tls = (file.tls.as_ref())
        .and_then(|tls| tls_table(tls.get_ref(), "journal.tls", Author::Host, problems));
    let half = |field: &str, span, problems: &mut Vec<RawProblem>| {
        problems.push(RawProblem::new(
            field,
            Some(span),
            "etcd's authentication takes a user and the variable holding its password: give user and password_env",
        ));
    };
    let user = match (&file.user, &file.password_env) {
        (Some(user), Some(var)) => {
            check_env_name(var, "journal.password_env", problems);
            Some((
                user.get_ref().clone(),
                TokenSource::Env(var.get_ref().clone()),
            ))
        }
        (Some(user), None) => {
            half("journal.password_env", user.span(), problems);
            None
        }
        (None, Some(var)) => {
            half("journal.user", var.span(), problems);
            None
        }
        (None, None) => None,
    };
    let access = EtcdAccess {
        tls,
        user,
        insecure: file.insecure.unwrap_or(false),
    };
    let value_limit = match &file.max_value_kib {
        None => ValueLimit::default(),
        Some(kib) if (1..=MAX_VALUE_KIB).contains(kib.get_ref()) => {
            ValueLimit(kib.get_ref() * 1024)
        }
        Some(kib) => {
            problems.push(RawProblem::new(
                "journal.max_value_kib",
                Some(kib.span()),
                format!(
                    "expected a size in KiB from 1 to {MAX_VALUE_KIB}, well under the etcd server's --max-request-bytes (512 when it keeps its default)"
                ),
            ));
            ValueLimit::default()
        }
    };
    let etcd = file.etcd.as_ref().and_then(|url: &Spanned<String>| {
        match EtcdLocation::parse(url.get_ref()) {
            Ok(location) => Some(EtcdLocation {
                access: access.clone(),
                value_limit,
                ..location
            }),
            Err(e) => {
                problems.push(RawProblem::new(
                    "journal.etcd",
                    Some(url.span()),
                    e.to_string(),
                ));
                None
            }
        }
    });
    if problems.len() > before {
        return JournalSpec::default();
    }
    JournalSpec {
        etcd,
        access,
        value_limit,
    }
}

/// Names of clusters and storages end up in messages, file names and metrics labels.
fn check_name(
    name: &str,
    field: &str,
    span: std::ops::Range<usize>,
    problems: &mut Vec<RawProblem>,
) {
    if !is_name(name) {
        problems.push(RawProblem::new(
            field,
            Some(span),
            format!("invalid name `{name}`: expected letters, digits, `_`, `-` or `.`"),
        ));
    }
}

pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// An S3 bucket name: 3 to 63 lowercase letters, digits, `.` and `-`, starting and ending
/// with a letter or digit.
pub(crate) fn is_bucket_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// `what`s the host config names, for "expected one of" messages.
pub(crate) fn names<'a>(names: impl Iterator<Item = &'a String>, what: &str) -> String {
    let list: Vec<_> = names.map(|n| format!("`{n}`")).collect();
    if list.is_empty() {
        format!("(none: the host config names no {what})")
    } else {
        list.join(", ")
    }
}

/// Who wrote a cluster or store table, which says what it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Author {
    /// The host config: its operator's own file, the one place credentials are named.
    Host,
    /// A job (a job file, flags, a REST body), which whoever may submit one wrote: it may name
    /// the host config's clusters and stores, and describe others only without credentials,
    /// so that no job can send a credential of this host to an address the job chose.
    Job,
}

/// A field a job may not write, and what to do instead.
fn credential_refused(field: &str, span: std::ops::Range<usize>, instead: &str) -> RawProblem {
    RawProblem::new(
        field,
        Some(span),
        format!("a job cannot name credentials, which come only from the host config: {instead}"),
    )
}

/// Validates a cluster table (host config or inline in a job).
pub(crate) fn cluster_spec(
    file: &ClusterFile,
    field: &str,
    span: std::ops::Range<usize>,
    storages: &BTreeMap<String, StorageSpec>,
    author: Author,
    problems: &mut Vec<RawProblem>,
) -> Option<ClusterSpec> {
    let uri = match &file.uri {
        Some(uri) => cluster_uri(
            uri.get_ref(),
            &format!("{field}.uri"),
            Some(uri.span()),
            problems,
        ),
        None => {
            problems.push(RawProblem::of_kind(
                Kind::Missing,
                format!("{field}.uri"),
                Some(span),
                "missing field `uri`: expected the cluster's address, e.g. \"http://10.0.0.1:19530\"",
            ));
            None
        }
    };
    let storage = (file.storage.as_ref())
        .and_then(|s| resolve_storage(s, &format!("{field}.storage"), storages, author, problems));
    let max_import_jobs = match &file.max_import_jobs {
        None => Some(DEFAULT_MAX_IMPORT_JOBS),
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(n) if n > 0 => Some(n),
            _ => {
                problems.push(RawProblem::new(
                    format!("{field}.max_import_jobs"),
                    Some(n.span()),
                    format!(
                        "invalid value {}: expected a positive number of import jobs",
                        n.get_ref()
                    ),
                ));
                None
            }
        },
    };
    let token = file
        .token_env
        .as_ref()
        .map(|t| TokenSource::Env(t.get_ref().clone()));
    match &file.token_env {
        Some(token_env) if author == Author::Job => problems.push(credential_refused(
            &format!("{field}.token_env"),
            token_env.span(),
            "name a cluster of the host config whose token_env holds the token",
        )),
        Some(token_env) => check_env_name(token_env, &format!("{field}.token_env"), problems),
        None => {}
    }

    let storage_ok = file.storage.is_none() || storage.is_some();
    let paths = path_form(file, field, storage.as_ref(), problems);
    let tls = tls_spec(file, field, uri.as_ref(), author, problems);
    // Given but invalid: `Some(None)`.
    let management = (file.management.as_ref()).map(|m| {
        let field = format!("{field}.management");
        http_uri(
            m.get_ref(),
            &field,
            Some(m.span()),
            "management URI",
            problems,
        )
    });
    let discover_secondaries = discover_secondaries(file, field, author, problems);
    Some(ClusterSpec {
        uri: uri?,
        token,
        storage,
        max_import_jobs: max_import_jobs?,
        paths: paths?,
        require_staging: file.require_staging.as_ref().is_some_and(|r| *r.get_ref()),
        l0_import: file.l0_import.as_ref().map(|l| *l.get_ref()),
        tls: tls?,
        management: match management {
            Some(given) => Some(given?),
            None => None,
        },
        discover_secondaries: discover_secondaries?,
    })
    .filter(|_| storage_ok)
}

/// `secondaries = "discover"`, the one value there is; the host config's to say, since what
/// it finds is restored into with the host's credentials.
fn discover_secondaries(
    file: &ClusterFile,
    field: &str,
    author: Author,
    problems: &mut Vec<RawProblem>,
) -> Option<bool> {
    let Some(given) = &file.secondaries else {
        return Some(false);
    };
    let field = format!("{field}.secondaries");
    let message = match given.get_ref().as_str() {
        _ if author == Author::Job => {
            "a job names its secondaries in its own `secondaries`; `secondaries = \"discover\"` belongs to a cluster of the host config".to_owned()
        }
        "discover" => return Some(true),
        other => format!(
            "invalid value `{other}`: expected \"discover\" (a job that names no secondaries then restores into every cluster this one replicates to)"
        ),
    };
    problems.push(RawProblem::new(field, Some(given.span()), message));
    None
}

/// `tls`: only for an `https://` URI; a client certificate comes with its key; every file
/// is there and holds PEM.
fn tls_spec(
    file: &ClusterFile,
    field: &str,
    uri: Option<&Url>,
    author: Author,
    problems: &mut Vec<RawProblem>,
) -> Option<TlsSpec> {
    let Some(tls) = &file.tls else {
        return Some(TlsSpec::default());
    };
    if uri.is_some_and(|u| u.scheme() != "https") {
        problems.push(RawProblem::new(
            format!("{field}.tls"),
            Some(tls.span()),
            "tls applies to a cluster reached over TLS: write its uri as https://",
        ));
        return None;
    }
    tls_table(tls.get_ref(), &format!("{field}.tls"), author, problems)
}

/// A `tls = { ca_cert, server_name, client_cert, client_key }` table, its files read and
/// checked. A job's client certificate and key are refused unread: the job names a file of
/// this host, and the key is a credential.
pub(super) fn tls_table(
    tls: &TlsFile,
    field: &str,
    author: Author,
    problems: &mut Vec<RawProblem>,
) -> Option<TlsSpec> {
    let before = problems.len();
    let at = |name: &str| format!("{field}.{name}");
    if author == Author::Job {
        for (name, given) in [
            ("client_cert", &tls.client_cert),
            ("client_key", &tls.client_key),
        ] {
            if let Some(path) = given {
                problems.push(credential_refused(
                    &at(name),
                    path.span(),
                    "a client certificate and key are presented only to a cluster of the host config",
                ));
            }
        }
    } else if tls.client_cert.is_some() != tls.client_key.is_some() {
        problems.push(RawProblem::new(
            at(if tls.client_cert.is_some() {
                "client_key"
            } else {
                "client_cert"
            }),
            tls.client_cert
                .as_ref()
                .or(tls.client_key.as_ref())
                .map(|p| p.span()),
            "a client certificate is presented with its key: give client_cert and client_key",
        ));
    }
    let mut pem = |name: &str, path: &Option<Spanned<String>>| {
        let path = path.as_ref()?;
        if let Err(reason) = read_pem(Path::new(path.get_ref())) {
            problems.push(RawProblem::new(at(name), Some(path.span()), reason));
        }
        Some(PathBuf::from(path.get_ref()))
    };
    let spec = TlsSpec {
        ca_cert: pem("ca_cert", &tls.ca_cert),
        client_cert: (author == Author::Host)
            .then(|| pem("client_cert", &tls.client_cert))
            .flatten(),
        client_key: (author == Author::Host)
            .then(|| pem("client_key", &tls.client_key))
            .flatten(),
        server_name: tls.server_name.as_ref().map(|n| n.get_ref().clone()),
    };
    (problems.len() == before).then_some(spec)
}

/// A PEM file's bytes, or why it is not one.
pub fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(format!("`{}` holds no PEM block", path.display()));
    }
    Ok(bytes)
}

/// `storage_type` and `local_storage_path`: how the cluster's Milvus reads import paths.
fn path_form(
    file: &ClusterFile,
    field: &str,
    storage: Option<&StorageSpec>,
    problems: &mut Vec<RawProblem>,
) -> Option<PathForm> {
    let local = match &file.storage_type {
        None => false,
        Some(t) => match t.get_ref().as_str() {
            "minio" => false,
            "local" => true,
            other => {
                problems.push(RawProblem::new(
                    format!("{field}.storage_type"),
                    Some(t.span()),
                    format!(
                        "invalid storage_type `{other}`: expected \"minio\" (any object storage) or \"local\", as Milvus's common.storageType"
                    ),
                ));
                return None;
            }
        },
    };
    if !local {
        if let Some(path) = &file.local_storage_path {
            problems.push(RawProblem::new(
                format!("{field}.local_storage_path"),
                Some(path.span()),
                "local_storage_path applies only with storage_type = \"local\"",
            ));
            return None;
        }
        return Some(PathForm::Minio);
    }
    let seen_dir = storage
        .filter(|s| s.url.scheme() == "file")
        .and_then(|s| s.url.to_file_path().ok());
    let local_storage_path = match (&file.local_storage_path, seen_dir) {
        (Some(path), _) if !path.get_ref().starts_with('/') => {
            problems.push(RawProblem::new(
                format!("{field}.local_storage_path"),
                Some(path.span()),
                format!(
                    "invalid local_storage_path `{}`: expected an absolute path, Milvus's localStorage.path as the server sees it",
                    path.get_ref()
                ),
            ));
            return None;
        }
        (Some(path), Some(_)) => path.get_ref().clone(),
        (None, Some(dir)) => dir.display().to_string(),
        (_, None) => {
            let span = file.storage_type.as_ref().map(Spanned::span);
            problems.push(RawProblem::new(
                format!("{field}.storage"),
                span,
                "storage_type = \"local\" needs `storage` to be the file:/// directory where lockstep sees Milvus's localStorage.path",
            ));
            return None;
        }
    };
    Some(PathForm::Local { local_storage_path })
}

/// Parses a cluster address: `http://` or `https://` with a host, and no user or password.
pub(crate) fn cluster_uri(
    uri: &str,
    field: &str,
    span: Option<std::ops::Range<usize>>,
    problems: &mut Vec<RawProblem>,
) -> Option<Url> {
    http_uri(uri, field, span, "cluster URI", problems)
}

/// Parses one of a cluster's addresses (`what`): `http://` or `https://` with a host, and no
/// user or password.
fn http_uri(
    uri: &str,
    field: &str,
    span: Option<std::ops::Range<usize>>,
    what: &str,
    problems: &mut Vec<RawProblem>,
) -> Option<Url> {
    match Url::parse(uri) {
        Ok(url) if has_userinfo(&url) => {
            problems.push(userinfo_refused(
                field,
                span,
                uri,
                "put `user:password` in the variable the cluster's token_env names",
            ));
            None
        }
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Some(url),
        _ => {
            problems.push(RawProblem::new(
                field,
                span,
                format!(
                    "invalid {what} `{}`: expected http://host:port or https://host:port",
                    without_userinfo(uri)
                ),
            ));
            None
        }
    }
}

fn has_userinfo(url: &Url) -> bool {
    !url.username().is_empty() || url.password().is_some()
}

/// A URI with a user or a password in it: whatever names the URI (output, the journal, a
/// report, a metric label) would write the password down.
fn userinfo_refused(
    field: &str,
    span: Option<std::ops::Range<usize>>,
    uri: &str,
    instead: &str,
) -> RawProblem {
    RawProblem::new(
        field,
        span,
        format!(
            "`{}` carries a user or password, which would be written wherever the URI is shown: {instead}",
            without_userinfo(uri)
        ),
    )
}

/// `uri` with whatever stands between `://` and an `@` before the path replaced by `…`, so a
/// refusal can show it.
pub(crate) fn without_userinfo(uri: &str) -> std::borrow::Cow<'_, str> {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.into();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://…@{}", &rest[at + 1..]).into(),
        None => uri.into(),
    }
}

/// Resolves a storage reference against the host config's `[storages]`.
pub(crate) fn resolve_storage(
    storage: &Spanned<StorageRef>,
    field: &str,
    storages: &BTreeMap<String, StorageSpec>,
    author: Author,
    problems: &mut Vec<RawProblem>,
) -> Option<StorageSpec> {
    match storage.get_ref() {
        StorageRef::Inline(file) => storage_spec(file, field, storage.span(), author, problems),
        StorageRef::Named(name) => match storages.get(name) {
            Some(spec) => Some(spec.clone()),
            None => {
                problems.push(RawProblem::new(
                    field,
                    Some(storage.span()),
                    format!(
                        "unknown storage `{name}`; expected one of: {}",
                        names(storages.keys(), "valid storage")
                    ),
                ));
                None
            }
        },
    }
}

fn storage_spec(
    file: &StorageFile,
    field: &str,
    span: std::ops::Range<usize>,
    author: Author,
    problems: &mut Vec<RawProblem>,
) -> Option<StorageSpec> {
    let before = problems.len();
    for (name, given) in [("url", &file.url), ("endpoint", &file.endpoint)] {
        if let Some(given) = given
            && Url::parse(given.get_ref()).is_ok_and(|u| has_userinfo(&u))
        {
            problems.push(userinfo_refused(
                &format!("{field}.{name}"),
                Some(given.span()),
                given.get_ref(),
                "name the variables that hold the keys (access_key_id_env, secret_access_key_env)",
            ));
            return None;
        }
    }
    if author == Author::Job {
        for (name, given) in [
            ("access_key_id_env", &file.access_key_id_env),
            ("secret_access_key_env", &file.secret_access_key_env),
            ("session_token_env", &file.session_token_env),
            ("azure_key_env", &file.azure_key_env),
            ("service_account_file", &file.service_account_file),
        ] {
            if let Some(given) = given {
                problems.push(credential_refused(
                    &format!("{field}.{name}"),
                    given.span(),
                    "name a storage of the host config (storage = \"NAME\"); a store a job describes is reached without credentials",
                ));
            }
        }
        if problems.len() > before {
            return None;
        }
    }
    let url = match &file.url {
        None => {
            problems.push(RawProblem::of_kind(
                Kind::Missing,
                format!("{field}.url"),
                Some(span),
                "missing field `url`: expected s3://bucket/root, az://container/root, gs://bucket/root or file:///dir/root",
            ));
            None
        }
        Some(url) => {
            match Url::parse(url.get_ref()) {
                Ok(parsed)
                    if matches!(parsed.scheme(), "s3" | "az" | "gs")
                        && parsed.host_str().is_some_and(|h| !h.is_empty()) =>
                {
                    Some(parsed)
                }
                // `file://host/dir` parses, but names no local directory.
                Ok(parsed) if parsed.scheme() == "file" && parsed.to_file_path().is_ok() => {
                    Some(parsed)
                }
                _ => {
                    problems.push(RawProblem::new(
                    format!("{field}.url"),
                    Some(url.span()),
                    format!("invalid storage URL `{}`: expected s3://bucket/root, az://container/root, gs://bucket/root or file:///dir/root", url.get_ref()),
                ));
                    None
                }
            }
        }
    };
    let allow_http = file.allow_http.unwrap_or(false);
    let endpoint =
        file.endpoint
            .as_ref()
            .and_then(|endpoint| match Url::parse(endpoint.get_ref()) {
                Ok(parsed)
                    if parsed.scheme() == "https" || (parsed.scheme() == "http" && allow_http) =>
                {
                    Some(parsed)
                }
                Ok(parsed) if parsed.scheme() == "http" => {
                    problems.push(RawProblem::new(
                        format!("{field}.endpoint"),
                        Some(endpoint.span()),
                        format!(
                            "endpoint `{}` is plain http: set allow_http = true to use it",
                            endpoint.get_ref()
                        ),
                    ));
                    None
                }
                _ => {
                    problems.push(RawProblem::new(
                        format!("{field}.endpoint"),
                        Some(endpoint.span()),
                        format!(
                            "invalid endpoint `{}`: expected http(s)://host:port",
                            endpoint.get_ref()
                        ),
                    ));
                    None
                }
            });
    for (name, env) in [
        ("access_key_id_env", &file.access_key_id_env),
        ("secret_access_key_env", &file.secret_access_key_env),
        ("session_token_env", &file.session_token_env),
        ("azure_key_env", &file.azure_key_env),
    ] {
        if let Some(env) = env {
            check_env_name(env, &format!("{field}.{name}"), problems);
        }
    }
    cloud_fields(file, field, url.as_ref(), problems);
    if problems.len() > before {
        return None;
    }
    Some(StorageSpec {
        url: url?,
        endpoint,
        region: file.region.as_ref().map(|r| r.get_ref().clone()),
        access_key_id_env: file.access_key_id_env.as_ref().map(|e| e.get_ref().clone()),
        secret_access_key_env: file
            .secret_access_key_env
            .as_ref()
            .map(|e| e.get_ref().clone()),
        session_token_env: file.session_token_env.as_ref().map(|e| e.get_ref().clone()),
        given: None,
        allow_http,
        virtual_hosted: file.virtual_hosted.unwrap_or(false),
        azure_account: file.azure_account.as_ref().map(|a| a.get_ref().clone()),
        azure_key_env: file.azure_key_env.as_ref().map(|e| e.get_ref().clone()),
        service_account_file: file
            .service_account_file
            .as_ref()
            .map(|f| PathBuf::from(f.get_ref())),
        anonymous: author == Author::Job,
    })
}

/// The fields one cloud's store takes: an `az://` store names its account, and neither
/// cloud's fields go with another's URL. A service-account file must be there.
fn cloud_fields(
    file: &StorageFile,
    field: &str,
    url: Option<&Url>,
    problems: &mut Vec<RawProblem>,
) {
    let scheme = url.map(Url::scheme);
    let only = |name: &str, given: Option<std::ops::Range<usize>>, on: &str| {
        given
            .filter(|_| scheme.is_some_and(|s| s != on))
            .map(|span| {
                RawProblem::new(
                    format!("{field}.{name}"),
                    Some(span),
                    format!("applies only to an {on}:// store"),
                )
            })
    };
    problems.extend(only(
        "azure_account",
        file.azure_account.as_ref().map(Spanned::span),
        "az",
    ));
    problems.extend(only(
        "azure_key_env",
        file.azure_key_env.as_ref().map(Spanned::span),
        "az",
    ));
    problems.extend(only(
        "service_account_file",
        file.service_account_file.as_ref().map(Spanned::span),
        "gs",
    ));
    if scheme == Some("az") && file.azure_account.is_none() {
        problems.push(RawProblem::new(
            format!("{field}.azure_account"),
            file.url.as_ref().map(Spanned::span),
            "an az:// store names its storage account: azure_account",
        ));
    }
    if let Some(path) = &file.service_account_file
        && let Err(e) = std::fs::metadata(path.get_ref())
    {
        problems.push(RawProblem::new(
            format!("{field}.service_account_file"),
            Some(path.span()),
            format!("cannot read `{}`: {e}", path.get_ref()),
        ));
    }
}

pub(super) fn check_env_name(env: &Spanned<String>, field: &str, problems: &mut Vec<RawProblem>) {
    let name = env.get_ref();
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        problems.push(RawProblem::new(
            field,
            Some(env.span()),
            format!("invalid environment variable name `{name}`: expected letters, digits and `_`"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::data_dir;
    use super::*;

    fn parse(text: &str) -> Result<HostConfig, Error> {
        HostConfig::parse_str(text, Path::new("/etc/lockstep/lockstep.toml"))
    }

    #[test]
    fn max_attempts_defaults_to_three_and_is_bounded() {
        assert_eq!(parse("").unwrap().max_attempts, DEFAULT_MAX_ATTEMPTS);
        assert_eq!(parse("max_attempts = 1\n").unwrap().max_attempts, 1);
        for bad in ["0", "101", "-2"] {
            let err = parse(&format!("max_attempts = {bad}\n")).unwrap_err();
            let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
            assert_eq!(
                shown,
                [format!(
                    "/etc/lockstep/lockstep.toml:1:16: max_attempts: {bad} attempts: expected 1 to 100"
                )]
            );
        }
    }

    /// `max_value_kib` reaches the etcd location, and `--journal` too; a size etcd could
    /// not take, or none at all, is refused by its field.
    #[test]
    fn the_journal_value_limit_is_read_and_bounded() {
        let config =
            parse("[journal]\netcd = \"etcd://127.0.0.1:2379/x\"\nmax_value_kib = 64\n").unwrap();
        let location = config.journal.etcd.as_ref().unwrap();
        assert_eq!(location.value_limit, ValueLimit(64 * 1024));
        let flagged = config
            .journal
            .location(Some("etcd://127.0.0.1:2379/y"))
            .unwrap();
        assert_eq!(flagged.unwrap().value_limit, ValueLimit(64 * 1024));
        assert_eq!(
            parse("")
                .unwrap()
                .journal
                .location(Some("etcd://a:1/x"))
                .unwrap()
                .unwrap()
                .value_limit,
            ValueLimit(512 * 1024)
        );
        for bad in ["0", "4097"] {
            let err = parse(&format!("[journal]\nmax_value_kib = {bad}\n")).unwrap_err();
            let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
            assert_eq!(shown.len(), 1, "{shown:?}");
            assert!(
                shown[0].starts_with("/etc/lockstep/lockstep.toml:2:17: journal.max_value_kib: expected a size in KiB from 1 to 4096"),
                "{shown:?}"
            );
        }
        let err = parse("[journal]\nmax_value = 64\n").unwrap_err();
        assert!(err.to_string().contains("max_value"), "{err}");
    }

    #[test]
    fn max_queued_and_retention_are_read_and_bad_values_refused_at_their_place() {
        let empty = parse("").unwrap();
        assert_eq!(empty.max_queued, DEFAULT_MAX_QUEUED);
        assert_eq!(empty.retention, None);
        let set = parse("max_queued = 3\n[retention]\nkeep = \"90d\"\nkeep_last = 5\n").unwrap();
        assert_eq!(set.max_queued, 3);
        assert_eq!(
            set.retention,
            Some(Retention {
                keep: std::time::Duration::from_secs(90 * 86_400),
                keep_last: 5
            })
        );
        let only_count = parse("[retention]\nkeep_last = 2\n").unwrap();
        assert_eq!(
            only_count.retention,
            Some(Retention {
                keep: std::time::Duration::ZERO,
                keep_last: 2
            })
        );
        let err = parse(
            "max_queued = -1\n[retention]\nkeep = \"forever\"\nkeep_last = -3\nkeep_forever = true\n",
        )
        .unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "/etc/lockstep/lockstep.toml:5:1: retention.keep_forever: unknown field `keep_forever`, expected `keep` or `keep_last`",
                "/etc/lockstep/lockstep.toml:1:14: max_queued: -1 restores: expected 0 to 100000",
                "/etc/lockstep/lockstep.toml:3:8: retention.keep: invalid duration `forever`: expected a duration such as \"90d\", \"12h\" or \"1d12h\"",
                "/etc/lockstep/lockstep.toml:4:13: retention.keep_last: -3 restores: expected 0 or more",
            ]
        );
        let err = parse("[retention]\n").unwrap_err();
        assert!(err.to_string().contains("without a bound"), "{err}");
    }

    #[test]
    fn test_host_config_resolves_names() {
        let path = data_dir().join("jobs/lockstep.toml");
        let config = HostConfig::load(&path).unwrap();
        assert_eq!(config.state_dir, data_dir().join("jobs/state"));
        let a = &config.clusters["prod-a"];
        assert_eq!(a.uri.as_str(), "http://127.0.0.1:19530/");
        assert_eq!(a.token, Some(TokenSource::Env("PROD_A_TOKEN".into())));
        assert_eq!(a.max_import_jobs, 2048);
        assert_eq!(a.storage.as_ref(), config.storages.get("minio-a"));
        let b = &config.clusters["prod-b"];
        assert_eq!(b.max_import_jobs, DEFAULT_MAX_IMPORT_JOBS);
        assert_eq!(
            b.storage.as_ref().map(|s| s.url.as_str()),
            Some("s3://milvus-b/files")
        );
        assert!(!b.storage.as_ref().unwrap().allow_http);
        assert_eq!(config.clusters["prod-c"].storage, None);
        let backups = config.backups.as_ref().unwrap();
        assert_eq!(backups.root, "backup");
        assert_eq!(
            backups.storage.credential_envs().collect::<Vec<_>>(),
            vec!["MINIO_A_KEY", "MINIO_A_SECRET"]
        );
        assert_eq!(config.default_target, None);
    }

    #[test]
    fn defaults_of_an_empty_config() {
        let config = parse("").unwrap();
        assert!(config.clusters.is_empty());
        assert_eq!(config.backups, None);
        assert_eq!(config.state_dir, PathBuf::from("/etc/lockstep/.lockstep"));
        let local = parse("[backups]\nstorage = { url = \"file:///srv/backups\" }\n").unwrap();
        assert_eq!(local.backups.unwrap().root, DEFAULT_BACKUP_ROOT);
    }

    #[test]
    fn storage_urls_name_a_bucket_or_a_local_directory() {
        let err = parse("[storages.s]\nurl = \"file://server/share\"\n").unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "/etc/lockstep/lockstep.toml:2:7: storages.s.url: invalid storage URL `file://server/share`: expected s3://bucket/root, az://container/root, gs://bucket/root or file:///dir/root"
            ]
        );
        let config = parse("[storages.s]\nurl = \"file:///srv/backups\"\n").unwrap();
        assert_eq!(
            config.storages["s"],
            StorageSpec::local(Path::new("/srv/backups")).unwrap(),
            "a spec built for a directory equals the validated file URL"
        );
    }

    #[test]
    fn each_clouds_store_takes_its_own_fields() {
        let text = r#"[storages.blob]
url = "az://container/root"
azure_key_env = "AZURE_KEY"

[storages.bucket]
url = "s3://bucket"
azure_account = "acct"

[storages.gcs]
url = "gs://bucket/root"
service_account_file = "/nonexistent/sa.json"
"#;
        let err = parse(text).unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        let fields: Vec<&str> = shown
            .iter()
            .map(|p| p.split(": ").nth(1).unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "storages.blob.azure_account",
                "storages.bucket.azure_account",
                "storages.gcs.service_account_file",
            ],
            "{shown:#?}"
        );
        assert!(shown[0].contains("names its storage account"), "{shown:#?}");
        assert!(
            shown[1].contains("applies only to an az:// store"),
            "{shown:#?}"
        );
        assert!(
            shown[2].contains("cannot read `/nonexistent/sa.json`"),
            "{shown:#?}"
        );

        let good = r#"[storages.blob]
url = "az://container/root"
azure_account = "acct"
azure_key_env = "AZURE_KEY"
"#;
        let config = parse(good).unwrap();
        let blob = &config.storages["blob"];
        assert_eq!(blob.azure_account.as_deref(), Some("acct"));
        assert_eq!(blob.credential_envs().collect::<Vec<_>>(), ["AZURE_KEY"]);
    }

    #[test]
    fn tls_is_read_for_an_https_cluster_and_its_files_checked() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(
            &pem,
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let not_pem = dir.path().join("key.txt");
        std::fs::write(&not_pem, "a key, not PEM").unwrap();
        let text = format!(
            r#"[clusters.a]
uri = "https://10.0.0.1:19530"
tls = {{ ca_cert = "{pem}", server_name = "milvus.example" }}
"#,
            pem = pem.display()
        );
        let config = parse(&text).unwrap();
        assert_eq!(
            config.clusters["a"].tls,
            TlsSpec {
                ca_cert: Some(pem.clone()),
                server_name: Some("milvus.example".into()),
                client_cert: None,
                client_key: None,
            }
        );

        let text = format!(
            r#"[clusters.plain]
uri = "http://10.0.0.1:19530"
tls = {{ ca_cert = "{pem}" }}

[clusters.half]
uri = "https://10.0.0.2:19530"
tls = {{ client_cert = "{pem}" }}

[clusters.files]
uri = "https://10.0.0.3:19530"
tls = {{ ca_cert = "{gone}", client_cert = "{pem}", client_key = "{not_pem}" }}
"#,
            pem = pem.display(),
            gone = dir.path().join("gone.pem").display(),
            not_pem = not_pem.display(),
        );
        let err = parse(&text).unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        let fields: Vec<&str> = shown
            .iter()
            .map(|p| p.split(": ").nth(1).unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "clusters.files.tls.ca_cert",
                "clusters.files.tls.client_key",
                "clusters.half.tls.client_key",
                "clusters.plain.tls",
            ],
            "{shown:#?}"
        );
        assert!(shown[0].contains("cannot read"), "{shown:#?}");
        assert!(shown[1].contains("holds no PEM block"), "{shown:#?}");
        assert!(
            shown[2].contains("give client_cert and client_key"),
            "{shown:#?}"
        );
        assert!(shown[3].contains("write its uri as https://"), "{shown:#?}");
    }

    /// A password in a URI would be written wherever the URI is shown; the refusal shows
    /// the URI without it and says where the secret goes.
    #[test]
    fn a_uri_holding_a_password_is_refused_without_showing_it() {
        let text = r#"[clusters.a]
uri = "https://root:hunter2-secret@10.0.0.1:19530"

[storages.s]
url = "s3://bucket/root"
endpoint = "https://AKIA:s3cr3t-key@minio:9000"
"#;
        let err = parse(text).unwrap_err();
        let mut shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        shown.sort();
        assert_eq!(shown.len(), 2, "{shown:#?}");
        assert!(
            shown[0]
                .contains("clusters.a.uri: `https://…@10.0.0.1:19530` carries a user or password")
                && shown[0].contains("token_env"),
            "{shown:#?}"
        );
        assert!(
            shown[1].contains("storages.s.endpoint: `https://…@minio:9000`")
                && shown[1].contains("access_key_id_env"),
            "{shown:#?}"
        );
        for secret in ["hunter2", "s3cr3t", "AKIA"] {
            assert!(!err.to_string().contains(secret), "{err}");
        }
    }

    /// `secondaries = "discover"` is the one value a cluster's `secondaries` takes; any other
    /// is refused at its place.
    #[test]
    fn a_cluster_may_say_its_secondaries_are_discovered() {
        let config = parse(
            "[clusters.a]\nuri = \"http://10.0.0.1:19530\"\nsecondaries = \"discover\"\n\
             [clusters.b]\nuri = \"http://10.0.0.2:19530\"\n",
        )
        .unwrap();
        assert!(config.clusters["a"].discover_secondaries);
        assert!(!config.clusters["b"].discover_secondaries);

        let err = parse("[clusters.a]\nuri = \"http://10.0.0.1:19530\"\nsecondaries = \"all\"\n")
            .unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 1, "{shown:#?}");
        assert!(
            shown[0].starts_with(
                "/etc/lockstep/lockstep.toml:3:15: clusters.a.secondaries: invalid value `all`: expected \"discover\""
            ),
            "{shown:#?}"
        );
    }

    /// Issue 49: a cluster's management API (Milvus's metrics port), where preflight reads
    /// the replicated import gate; a URI that is none is refused at its place, and so is one
    /// holding a password.
    #[test]
    fn a_clusters_management_uri_is_read_and_a_bad_one_refused_at_its_place() {
        let config = parse(
            "[clusters.a]\nuri = \"http://10.0.0.1:19530\"\nmanagement = \"http://10.0.0.1:9091\"\n\
             [clusters.b]\nuri = \"http://10.0.0.2:19530\"\n",
        )
        .unwrap();
        let a = config.clusters["a"].management.as_ref();
        assert_eq!(a.map(Url::as_str), Some("http://10.0.0.1:9091/"));
        assert_eq!(config.clusters["b"].management, None);

        let err = parse(
            "[clusters.a]\nuri = \"http://10.0.0.1:19530\"\nmanagement = \"10.0.0.1:9091\"\n\
             [clusters.b]\nuri = \"http://10.0.0.2:19530\"\nmanagement = \"http://root:Milvus@10.0.0.2:9091\"\n",
        )
        .unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        let path = "/etc/lockstep/lockstep.toml";
        assert_eq!(
            shown[0],
            format!(
                "{path}:3:14: clusters.a.management: invalid management URI `10.0.0.1:9091`: expected http://host:port or https://host:port"
            )
        );
        assert!(
            shown[1].starts_with(&format!(
                "{path}:6:14: clusters.b.management: `http://…@10.0.0.2:9091` carries a user or password"
            )),
            "{shown:#?}"
        );
        assert_eq!(shown.len(), 2, "{shown:#?}");
        assert!(!err.to_string().contains("Milvus@"), "{err}");
    }

    #[test]
    fn every_problem_is_reported_with_its_place() {
        let text = r#"default_target = "prod-z"

[storages.s]
url = "gcs://bucket"
endpoint = "http://minio:9000"

[clusters.a]
uri = "grpc://10.0.0.1:19530"
storage = "nope"
max_import_jobs = 0
token_env = "1TOKEN"

[clusters."bad name"]
uri = "http://10.0.0.2:19530"

[clusters.c]
storage = { url = "s3://b/r" }
tokens = "x"

[backups]
root = "backup"
"#;
        let err = parse(text).unwrap_err();
        let shown: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        let path = "/etc/lockstep/lockstep.toml";
        let mut expected = vec![
            format!(
                "{path}:18:1: clusters.c.tokens: unknown field `tokens`, expected one of `uri`, `token_env`, `storage`, `max_import_jobs`, `storage_type`, `local_storage_path`, `require_staging`, `l0_import`, `tls`, `management`, `secondaries`"
            ),
            format!(
                "{path}:4:7: storages.s.url: invalid storage URL `gcs://bucket`: expected s3://bucket/root, az://container/root, gs://bucket/root or file:///dir/root"
            ),
            format!(
                "{path}:5:12: storages.s.endpoint: endpoint `http://minio:9000` is plain http: set allow_http = true to use it"
            ),
            format!(
                "{path}:8:7: clusters.a.uri: invalid cluster URI `grpc://10.0.0.1:19530`: expected http://host:port or https://host:port"
            ),
            format!(
                "{path}:9:11: clusters.a.storage: unknown storage `nope`; expected one of: (none: the host config names no valid storage)"
            ),
            format!(
                "{path}:10:19: clusters.a.max_import_jobs: invalid value 0: expected a positive number of import jobs"
            ),
            format!(
                "{path}:11:13: clusters.a.token_env: invalid environment variable name `1TOKEN`: expected letters, digits and `_`"
            ),
            format!(
                "{path}:13:1: clusters.bad name: invalid name `bad name`: expected letters, digits, `_`, `-` or `.`"
            ),
            format!(
                "{path}:16:1: clusters.c.uri: missing field `uri`: expected the cluster's address, e.g. \"http://10.0.0.1:19530\""
            ),
            format!(
                "{path}:20:1: backups.storage: missing field `storage`: expected the name of a [storages.NAME] or a table with `url`"
            ),
            format!(
                "{path}:1:18: default_target: unknown cluster `prod-z`; expected one of: `a`, `bad name`, `c`"
            ),
        ];
        let mut shown_sorted = shown.clone();
        shown_sorted.sort();
        expected.sort();
        assert_eq!(shown_sorted, expected);
        assert!(
            err.to_string()
                .starts_with(&format!("host config {path} refused (11 problems):"))
        );
    }
}
