//! milvus-backup's v1 config (0.5 and before, no `configVersion`), translated to v2 keys
//! with milvus-backup's own key map: its values and its own environment variables read as
//! v1 reads them, then each one moved to its v2 key.

use std::collections::BTreeMap;

use super::super::secret::Env;
use super::settings::{Given, Origin, parse_bool, split_list};
use super::tree::{Leaves, Value};
use crate::diagnostic::RawProblem;

/// v1 keys that keep their meaning under a new name.
const RENAMED: &[(&str, &str)] = &[
    ("milvus.address", "milvus.grpc.address"),
    ("milvus.port", "milvus.grpc.port"),
    ("milvus.user", "milvus.user"),
    ("milvus.password", "milvus.password"),
    ("milvus.caCertPath", "milvus.grpc.caCertPath"),
    ("milvus.serverName", "milvus.grpc.serverName"),
    ("milvus.mtlsCertPath", "milvus.grpc.mtlsCertPath"),
    ("milvus.mtlsKeyPath", "milvus.grpc.mtlsKeyPath"),
    ("milvus.rpcChannelName", "milvus.replicate.rpcChannelName"),
    ("milvus.etcd.rootPath", "milvus.etcd.rootPath"),
    ("http.debugMode", "server.debugMode"),
    ("http.swaggerBasePath", "server.swaggerBasePath"),
    ("log.level", "log.level"),
    ("log.console", "log.console"),
    ("log.file.filename", "log.file.path"),
    ("log.file.maxSize", "log.file.maxSizeMiB"),
    ("log.file.maxDays", "log.file.maxDays"),
    ("log.file.maxBackups", "log.file.maxBackups"),
    ("cloud.address", "zillizCloud.endpoint"),
    ("cloud.apikey", "zillizCloud.apiKey"),
    ("minio.address", "milvus.storage.address"),
    ("minio.port", "milvus.storage.port"),
    ("minio.region", "milvus.storage.region"),
    ("minio.bucketName", "milvus.storage.bucketName"),
    ("minio.rootPath", "milvus.storage.rootPath"),
    ("minio.backupAddress", "backup.storage.address"),
    ("minio.backupPort", "backup.storage.port"),
    ("minio.backupRegion", "backup.storage.region"),
    ("minio.backupBucketName", "backup.storage.bucketName"),
    (
        "minio.multipartCopyThresholdMiB",
        "transfer.multipartCopyThresholdMiB",
    ),
    ("backup.parallelism.copydata", "transfer.concurrency"),
    (
        "backup.parallelism.backupCollection",
        "backup.concurrency.collections",
    ),
    (
        "backup.parallelism.backupSegment",
        "backup.concurrency.segments",
    ),
    (
        "backup.parallelism.restoreCollection",
        "restore.concurrency.collections",
    ),
    (
        "backup.parallelism.importJob",
        "restore.concurrency.importJobs",
    ),
    ("backup.keepTempFiles", "restore.keepTempFiles"),
    ("backup.gcPause.enable", "backup.pauseGC"),
    ("backup.gcPause.address", "milvus.management.endpoint"),
];

/// v1 keys read by the rules below rather than renamed; `None`: no single v2 key.
const TRANSLATED: &[(&str, Option<&str>)] = &[
    ("milvus.tlsMode", Some("milvus.grpc.tlsMode")),
    ("milvus.etcd.endpoints", Some("milvus.etcd.endpoints")),
    ("http.enabled", None),
    ("storage.storageType", Some("milvus.storage.provider")),
    ("minio.storageType", Some("milvus.storage.provider")),
    ("minio.cloudProvider", Some("milvus.storage.provider")),
    ("storage.backupStorageType", Some("backup.storage.provider")),
    ("minio.backupStorageType", Some("backup.storage.provider")),
    ("minio.crossStorage", Some("transfer.mode")),
    ("minio.useSSL", Some("milvus.storage.useSSL")),
    ("minio.backupUseSSL", Some("backup.storage.useSSL")),
    ("minio.backupRootPath", Some("backup.storage.rootPath")),
    ("minio.accessKeyID", Some("milvus.storage.auth.accessKeyID")),
    (
        "minio.secretAccessKey",
        Some("milvus.storage.auth.secretAccessKey"),
    ),
    ("minio.token", Some("milvus.storage.auth.sessionToken")),
    (
        "minio.gcpCredentialJSON",
        Some("milvus.storage.auth.credentialsFile"),
    ),
    ("minio.useIAM", Some("milvus.storage.auth.type")),
    ("minio.iamEndpoint", Some("milvus.storage.auth.endpoint")),
    (
        "minio.backupAccessKeyID",
        Some("backup.storage.auth.accessKeyID"),
    ),
    (
        "minio.backupSecretAccessKey",
        Some("backup.storage.auth.secretAccessKey"),
    ),
    (
        "minio.backupToken",
        Some("backup.storage.auth.sessionToken"),
    ),
    (
        "minio.backupGcpCredentialJSON",
        Some("backup.storage.auth.credentialsFile"),
    ),
    ("minio.backupUseIAM", Some("backup.storage.auth.type")),
    (
        "minio.backupIamEndpoint",
        Some("backup.storage.auth.endpoint"),
    ),
];

/// Keys that milvus-backup's shipped v1 files once held and no release reads any more: a
/// file copied forward from 0.4 still has them, and they change nothing.
const RETIRED: &[&str] = &[
    "backup.copydata.parallelism",
    "backup.gcPause.seconds",
    "backup.maxSegmentGroupSize",
    "backup.parallelism",
    "backup.parallelism.importJobNum",
    "http.simpleResponse",
    "log.file.rootPath",
    "milvus.authorizationEnabled",
    "milvus.tlsCertPath",
    "restore.parallelism",
];

/// v1's environment variables, by the v1 key each one sets.
const ENV: &[(&str, &str)] = &[
    ("MILVUS_ADDRESS", "milvus.address"),
    ("MILVUS_PORT", "milvus.port"),
    ("MILVUS_USER", "milvus.user"),
    ("MILVUS_PASSWORD", "milvus.password"),
    ("MILVUS_TLS_MODE", "milvus.tlsMode"),
    ("MILVUS_CA_CERT_PATH", "milvus.caCertPath"),
    ("MILVUS_SERVER_NAME", "milvus.serverName"),
    ("MILVUS_MTLS_CERT_PATH", "milvus.mtlsCertPath"),
    ("MILVUS_MTLS_KEY_PATH", "milvus.mtlsKeyPath"),
    ("MILVUS_RPC_CHANNEL_NAME", "milvus.rpcChannelName"),
    ("MINIO_ADDRESS", "minio.address"),
    ("MINIO_PORT", "minio.port"),
    ("MINIO_REGION", "minio.region"),
    ("MINIO_ACCESS_KEY", "minio.accessKeyID"),
    ("MINIO_SECRET_KEY", "minio.secretAccessKey"),
    ("MINIO_TOKEN", "minio.token"),
    ("GCP_KEY_JSON", "minio.gcpCredentialJSON"),
    ("MINIO_USE_SSL", "minio.useSSL"),
    ("MINIO_BUCKET_NAME", "minio.bucketName"),
    ("MINIO_ROOT_PATH", "minio.rootPath"),
    ("MINIO_USE_IAM", "minio.useIAM"),
    ("MINIO_IAM_ENDPOINT", "minio.iamEndpoint"),
    ("MINIO_BACKUP_ADDRESS", "minio.backupAddress"),
    ("MINIO_BACKUP_PORT", "minio.backupPort"),
    ("MINIO_BACKUP_REGION", "minio.backupRegion"),
    ("MINIO_BACKUP_ACCESS_KEY", "minio.backupAccessKeyID"),
    ("MINIO_BACKUP_SECRET_KEY", "minio.backupSecretAccessKey"),
    ("MINIO_BACKUP_TOKEN", "minio.backupToken"),
    ("BACKUP_GCP_KEY_JSON", "minio.backupGcpCredentialJSON"),
    ("MINIO_BACKUP_USE_SSL", "minio.backupUseSSL"),
    ("MINIO_BACKUP_BUCKET_NAME", "minio.backupBucketName"),
    ("MINIO_BACKUP_ROOT_PATH", "minio.backupRootPath"),
    ("MINIO_BACKUP_USE_IAM", "minio.backupUseIAM"),
    ("MINIO_BACKUP_IAM_ENDPOINT", "minio.backupIamEndpoint"),
    ("BACKUP_PARALLELISM_COPYDATA", "backup.parallelism.copydata"),
    (
        "BACKUP_PARALLELISM_BACKUP_COLLECTION",
        "backup.parallelism.backupCollection",
    ),
    (
        "BACKUP_PARALLELISM_RESTORE_COLLECTION",
        "backup.parallelism.restoreCollection",
    ),
    ("BACKUP_KEEP_TEMP_FILES", "backup.keepTempFiles"),
    ("BACKUP_GC_PAUSE_ENABLE", "backup.gcPause.enable"),
    ("BACKUP_GC_PAUSE_ADDRESS", "backup.gcPause.address"),
];

/// The v2 key a v1 key became, for a v1 key found in a v2 file; `Err(())` when v2 has no
/// such setting, `None` when `key` (lower-cased) is not a v1 key.
pub(super) fn successor(key: &str) -> Option<Result<&'static str, ()>> {
    RENAMED
        .iter()
        .map(|(v1, v2)| (*v1, Some(*v2)))
        .chain(TRANSLATED.iter().copied())
        .find(|(v1, _)| v1.eq_ignore_ascii_case(key))
        .map(|(_, v2)| v2.ok_or(()))
}

/// A v1 file's values as v2 keys, lower-cased; unknown keys and unreadable values are
/// problems.
pub(super) fn translate(
    leaves: Leaves,
    env: Env<'_>,
) -> (BTreeMap<String, Given>, Vec<RawProblem>) {
    let mut problems = Vec::new();
    let mut v1: BTreeMap<String, Given> = BTreeMap::new();
    for (lower, leaf) in leaves {
        if RETIRED.iter().any(|r| r.eq_ignore_ascii_case(&lower)) {
            tracing::warn!(key = %leaf.key, "a v1 config key no milvus-backup release reads any more; ignored");
            continue;
        }
        if successor(&lower).is_none() {
            problems.push(RawProblem::new(
                leaf.key.as_str(),
                Some(leaf.span.clone()),
                format!(
                    "unknown key `{}` in a v1 config (one without configVersion)",
                    leaf.key
                ),
            ));
            continue;
        }
        v1.insert(
            lower,
            Given {
                value: leaf.value,
                origin: Origin::File(leaf.span),
            },
        );
    }
    for (var, key) in ENV {
        if let Some(value) = env(var) {
            v1.insert(
                key.to_lowercase(),
                Given {
                    value: Value::Scalar(value),
                    origin: Origin::Env((*var).to_owned()),
                },
            );
        }
    }
    let mut v2 = Translation {
        v1: &v1,
        out: BTreeMap::new(),
        problems: &mut problems,
    };
    for (from, to) in RENAMED {
        v2.copy(from, to);
    }
    v2.tls_mode();
    if let Some(endpoints) = v2.get("milvus.etcd.endpoints") {
        // v1 wrote the endpoints as one comma-separated string.
        let value = match &endpoints.value {
            Value::Scalar(text) => Value::List(split_list(text)),
            list => list.clone(),
        };
        let origin = endpoints.origin.clone();
        v2.put("milvus.etcd.endpoints", value, origin);
    }
    if let Some(cross) = v2.get("minio.crossStorage") {
        let origin = cross.origin.clone();
        let streaming = v2.flag("minio.crossStorage");
        v2.put(
            "transfer.mode",
            scalar(if streaming { "streaming" } else { "auto" }),
            origin,
        );
    }
    v2.storage_sides();
    (v2.out, problems)
}

fn scalar(text: &str) -> Value {
    Value::Scalar(text.to_owned())
}

struct Translation<'a> {
    v1: &'a BTreeMap<String, Given>,
    out: BTreeMap<String, Given>,
    problems: &'a mut Vec<RawProblem>,
}

impl Translation<'_> {
    fn get(&self, v1_key: &str) -> Option<&Given> {
        self.v1.get(&v1_key.to_lowercase())
    }

    fn text(&self, v1_key: &str) -> Option<(String, Origin)> {
        match self.get(v1_key)? {
            Given {
                value: Value::Scalar(text),
                origin,
            } => Some((text.clone(), origin.clone())),
            Given { .. } => None,
        }
    }

    fn flag(&self, v1_key: &str) -> bool {
        self.text(v1_key)
            .is_some_and(|(t, _)| parse_bool(&t) == Some(true))
    }

    fn put(&mut self, v2_key: &str, value: Value, origin: Origin) {
        self.out
            .insert(v2_key.to_lowercase(), Given { value, origin });
    }

    fn copy(&mut self, from: &str, to: &str) {
        if let Some(given) = self.get(from).cloned() {
            self.out.insert(to.to_lowercase(), given);
        }
    }

    /// `milvus.tlsMode` was Milvus's 0/1/2; 2 without a client certificate is `server`.
    fn tls_mode(&mut self) {
        let Some((mode, origin)) = self.text("milvus.tlsMode") else {
            return;
        };
        let Ok(mode) = mode.trim().parse::<i64>() else {
            let span = match &origin {
                Origin::File(span) => Some(span.clone()),
                _ => None,
            };
            self.problems.push(RawProblem::new(
                "milvus.tlsMode",
                span,
                format!("`{mode}` is not a v1 TLS mode: expected 0, 1 or 2"),
            ));
            return;
        };
        let has_cert = self
            .text("milvus.mtlsCertPath")
            .is_some_and(|(t, _)| !t.is_empty())
            && self
                .text("milvus.mtlsKeyPath")
                .is_some_and(|(t, _)| !t.is_empty());
        let name = match mode {
            1 => "server",
            2 if has_cert => "mutual",
            2 => "server",
            _ => "disabled",
        };
        self.put("milvus.grpc.tlsMode", scalar(name), origin);
    }

    /// The two `minio.*` sides, each with its provider and the auth type its v1 flags imply.
    fn storage_sides(&mut self) {
        let milvus_provider = [
            "storage.storageType",
            "minio.storageType",
            "minio.cloudProvider",
        ]
        .iter()
        .find_map(|k| self.text(k));
        let backup_provider = ["storage.backupStorageType", "minio.backupStorageType"]
            .iter()
            .find_map(|k| self.text(k))
            .filter(|(p, _)| !p.is_empty());
        let milvus = milvus_provider
            .as_ref()
            .map_or("minio".to_owned(), |(p, _)| fold_provider(p));
        if let Some((_, origin)) = &milvus_provider {
            self.put("milvus.storage.provider", scalar(&milvus), origin.clone());
        }
        let backup = match &backup_provider {
            Some((p, origin)) => {
                let folded = fold_provider(p);
                self.put("backup.storage.provider", scalar(&folded), origin.clone());
                folded
            }
            None => milvus.clone(),
        };
        self.copy("minio.useSSL", "milvus.storage.useSSL");
        // v1 ORs the two sides' TLS and IAM flags.
        if self.flag("minio.useSSL") || self.flag("minio.backupUseSSL") {
            let origin = self
                .get("minio.backupUseSSL")
                .or(self.get("minio.useSSL"))
                .map_or(Origin::Default, |g| g.origin.clone());
            self.put("backup.storage.useSSL", scalar("true"), origin);
        }
        let root = ["minio.backupRootPath", "minio.rootPath"]
            .iter()
            .find_map(|k| self.text(k).filter(|(t, _)| !t.is_empty()));
        if let Some((root, origin)) = root {
            self.put("backup.storage.rootPath", scalar(&root), origin);
        }
        let milvus_iam = self.flag("minio.useIAM");
        let backup_iam = milvus_iam || self.flag("minio.backupUseIAM");
        self.auth("milvus.storage", "minio.", &milvus, milvus_iam);
        self.auth("backup.storage", "minio.backup", &backup, backup_iam);
    }

    /// One side's credentials, moved to the keys its auth type uses (milvus-backup's
    /// migration rule); `v1` is the side's v1 key prefix (`minio.` or `minio.backup`).
    fn auth(&mut self, side: &str, v1: &str, provider: &str, iam: bool) {
        let key = |name: &str| {
            if v1.ends_with('.') {
                format!("{v1}{name}")
            } else {
                // `minio.backup` + `AccessKeyID`
                let mut chars = name.chars();
                let first = chars.next().map(|c| c.to_ascii_uppercase());
                format!(
                    "{v1}{}{}",
                    first.map(String::from).unwrap_or_default(),
                    chars.as_str()
                )
            }
        };
        let origin_of = |this: &Self, name: &str| {
            this.get(&key(name))
                .map_or(Origin::Default, |g| g.origin.clone())
        };
        let auth = format!("{side}.auth");
        match provider {
            "local" => {}
            "azure" => {
                self.copy(&key("accessKeyID"), &format!("{side}.accountName"));
                if iam {
                    let origin = origin_of(self, "useIAM");
                    self.put(&format!("{auth}.type"), scalar("default"), origin);
                } else {
                    let origin = origin_of(self, "secretAccessKey");
                    self.put(&format!("{auth}.type"), scalar("sharedKey"), origin);
                    self.copy(&key("secretAccessKey"), &format!("{auth}.accountKey"));
                }
            }
            "gcpnative" => {
                let origin = origin_of(self, "gcpCredentialJSON");
                self.put(&format!("{auth}.type"), scalar("serviceAccount"), origin);
                self.copy(
                    &key("gcpCredentialJSON"),
                    &format!("{auth}.credentialsFile"),
                );
            }
            _ if iam => {
                let origin = origin_of(self, "useIAM");
                self.put(&format!("{auth}.type"), scalar("iam"), origin);
                self.copy(&key("iamEndpoint"), &format!("{auth}.endpoint"));
            }
            _ => {
                self.copy(&key("accessKeyID"), &format!("{auth}.accessKeyID"));
                self.copy(&key("secretAccessKey"), &format!("{auth}.secretAccessKey"));
                self.copy(&key("token"), &format!("{auth}.sessionToken"));
            }
        }
    }
}

/// v1's provider spellings, folded to v2's one name each.
fn fold_provider(provider: &str) -> String {
    match provider.to_lowercase().as_str() {
        "ali" | "alibaba" | "alicloud" | "aliyun" => "aliyun".to_owned(),
        "tc" | "tencent" => "tencent".to_owned(),
        other => other.to_owned(),
    }
}
