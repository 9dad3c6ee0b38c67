//! Opening an end's object store from its [`StorageSpec`], and the [`StoreId`] that says
//! when two ends share one store.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use serde::{Deserialize, Serialize};
use url::Url;

use super::Error;

/// AWS's default region, used when a spec names none (S3-compatible servers ignore it).
const DEFAULT_REGION: &str = "us-east-1";

/// An object store as the host config or a job names it.
///
/// `url` is `s3://bucket[/root]` or `file:///dir` (a plain path also works). For S3 the
/// bucket is the store and `root` is Milvus's `rootPath` inside it; for a local directory
/// the directory itself is the store. Import paths handed to Milvus are relative to the
/// store (bucket-relative keys, as milvus-backup stages them).
///
/// Credentials are given either inline or, better, as the names of environment variables
/// read when the store is opened; with neither, the S3 client's default chain applies.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSpec {
    /// `s3://bucket[/root]`, `file:///dir` or a directory path.
    pub url: String,
    /// S3-compatible endpoint, e.g. `http://127.0.0.1:9000`; default AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Default `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// Environment variable holding the access key id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id_env: Option<String>,
    /// Never serialized back out, so reports and journals do not carry it.
    #[serde(default, skip_serializing)]
    pub secret_access_key: Option<String>,
    /// Environment variable holding the secret access key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key_env: Option<String>,
    /// Environment variable holding a session token (temporary credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token_env: Option<String>,
    /// Allow a plain-http endpoint (local S3 servers); default false.
    #[serde(default)]
    pub allow_http: bool,
}

impl fmt::Debug for StorageSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageSpec")
            .field("url", &self.url)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("access_key_id_env", &self.access_key_id_env)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("secret_access_key_env", &self.secret_access_key_env)
            .field("session_token_env", &self.session_token_env)
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

/// Which physical store an end's storage is: two ends with equal ids can copy between each
/// other server-side, and an end whose id is the backup's can import the backup in place.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StoreId {
    /// A local directory, canonicalised (symlinks and `..` resolved).
    Local { dir: PathBuf },
    /// An S3 bucket at an endpoint (scheme, host and port, lowercased, no trailing slash).
    S3 { endpoint: String, bucket: String },
}

impl fmt::Display for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreId::Local { dir } => write!(f, "file://{}", dir.display()),
            StoreId::S3 { endpoint, bucket } => write!(f, "s3://{bucket} at {endpoint}"),
        }
    }
}

/// An open store: the client, its identity, and the root path the URL named inside it.
#[derive(Debug, Clone)]
pub struct OpenedStore {
    pub id: StoreId,
    pub store: Arc<dyn ObjectStore>,
    /// The path part of an `s3://bucket/root` URL (empty for local directories).
    pub root: Path,
}

impl StorageSpec {
    /// A spec for a local directory, with nothing else set.
    pub fn local(dir: impl Into<PathBuf>) -> Self {
        StorageSpec {
            url: dir.into().to_string_lossy().into_owned(),
            ..StorageSpec::default()
        }
    }

    /// Opens the store, reading credential variables now. A local directory is created if
    /// missing and written with fsync: resume trusts a staged file whose size is right, so
    /// that size must not outlive its data after a power loss.
    pub fn open(&self) -> Result<OpenedStore, Error> {
        let invalid = |reason: &str| Error::InvalidUrl {
            url: self.url.clone(),
            reason: reason.to_owned(),
        };
        if !self.url.contains("://") {
            return self.open_local(PathBuf::from(&self.url));
        }
        let url = Url::parse(&self.url).map_err(|e| invalid(&e.to_string()))?;
        match url.scheme() {
            "file" => {
                let dir = url
                    .to_file_path()
                    .map_err(|()| invalid("a file URL needs an absolute path"))?;
                self.open_local(dir)
            }
            "s3" => {
                let bucket = url
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| invalid("an s3 URL names a bucket"))?;
                let root = Path::parse(url.path()).map_err(|e| invalid(&e.to_string()))?;
                self.open_s3(bucket, root)
            }
            other => Err(invalid(&format!(
                "scheme `{other}` is not supported; use s3:// or file://"
            ))),
        }
    }

    fn open_local(&self, dir: PathBuf) -> Result<OpenedStore, Error> {
        let io_error = |source| Error::LocalDir {
            dir: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(io_error)?;
        let dir = dir.canonicalize().map_err(io_error)?;
        let store = LocalFileSystem::new_with_prefix(&dir)
            .map_err(|source| Error::Open {
                url: self.url.clone(),
                source,
            })?
            .with_fsync(true)
            // Deleting a staged prefix removes its emptied directories too (up to the root).
            .with_automatic_cleanup(true);
        Ok(OpenedStore {
            id: StoreId::Local { dir },
            store: Arc::new(store),
            root: Path::default(),
        })
    }

    fn open_s3(&self, bucket: &str, root: Path) -> Result<OpenedStore, Error> {
        let region = self.region.as_deref().unwrap_or(DEFAULT_REGION);
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(region)
            .with_allow_http(self.allow_http)
            // Path-style requests: local S3 servers (moto, MinIO) do not serve buckets by host name.
            .with_virtual_hosted_style_request(false);
        let endpoint = match &self.endpoint {
            Some(endpoint) => {
                builder = builder.with_endpoint(endpoint);
                normalize_endpoint(endpoint).map_err(|reason| Error::InvalidUrl {
                    url: endpoint.clone(),
                    reason,
                })?
            }
            None => format!("https://s3.{region}.amazonaws.com"),
        };
        if let Some(key) = credential(
            "access_key_id",
            &self.access_key_id,
            &self.access_key_id_env,
        )? {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = credential(
            "secret_access_key",
            &self.secret_access_key,
            &self.secret_access_key_env,
        )? {
            builder = builder.with_secret_access_key(secret);
        }
        if let Some(token) = credential("session_token", &None, &self.session_token_env)? {
            builder = builder.with_token(token);
        }
        let store = builder.build().map_err(|source| Error::Open {
            url: self.url.clone(),
            source,
        })?;
        Ok(OpenedStore {
            id: StoreId::S3 {
                endpoint,
                bucket: bucket.to_owned(),
            },
            store: Arc::new(store),
            root,
        })
    }
}

/// A credential given inline or through an environment variable (not both).
fn credential(
    field: &'static str,
    inline: &Option<String>,
    env: &Option<String>,
) -> Result<Option<String>, Error> {
    match (inline, env) {
        (Some(_), Some(_)) => Err(Error::ConflictingCredential { field }),
        (Some(value), None) => Ok(Some(value.clone())),
        (None, Some(variable)) => match std::env::var(variable) {
            Ok(value) => Ok(Some(value)),
            Err(_) => Err(Error::MissingCredential {
                field,
                variable: variable.clone(),
            }),
        },
        (None, None) => Ok(None),
    }
}

/// `scheme://host[:port]`, lowercased: what makes two endpoint spellings the same server.
fn normalize_endpoint(endpoint: &str) -> Result<String, String> {
    let url = Url::parse(endpoint).map_err(|e| e.to_string())?;
    let host = url.host_str().ok_or("the endpoint has no host")?;
    let port = url
        .port_or_known_default()
        .map(|p| format!(":{p}"))
        .unwrap_or_default();
    Ok(format!(
        "{}://{}{port}",
        url.scheme(),
        host.to_ascii_lowercase()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(url: &str, endpoint: &str) -> StorageSpec {
        StorageSpec {
            url: url.into(),
            endpoint: Some(endpoint.into()),
            access_key_id: Some("key".into()),
            secret_access_key: Some("secret".into()),
            allow_http: true,
            ..StorageSpec::default()
        }
    }

    #[test]
    fn s3_ids_compare_endpoint_and_bucket_not_root() {
        let a = s3("s3://milvus-a/files", "http://LOCALHOST:9000/")
            .open()
            .expect("open");
        let b = s3("s3://milvus-a/backup", "http://localhost:9000")
            .open()
            .expect("open");
        let c = s3("s3://milvus-b/files", "http://localhost:9000")
            .open()
            .expect("open");
        let d = s3("s3://milvus-a/files", "http://localhost:9001")
            .open()
            .expect("open");
        assert_eq!(a.id, b.id);
        assert_eq!(
            a.id,
            StoreId::S3 {
                endpoint: "http://localhost:9000".into(),
                bucket: "milvus-a".into()
            }
        );
        assert_ne!(a.id, c.id);
        assert_ne!(a.id, d.id);
        assert_eq!(a.root.as_ref(), "files");
    }

    #[test]
    fn local_ids_are_canonical_directories() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plain = StorageSpec::local(dir.path().join("x"))
            .open()
            .expect("open");
        let url = StorageSpec {
            url: format!("file://{}/y/../x", dir.path().display()),
            ..StorageSpec::default()
        };
        let dotted = url.open().expect("open");
        assert_eq!(plain.id, dotted.id);
        assert!(dir.path().join("x").is_dir());
    }

    #[test]
    fn credentials_come_from_one_place() {
        let both = StorageSpec {
            access_key_id: Some("k".into()),
            access_key_id_env: Some("KEY_VAR".into()),
            ..s3("s3://b", "http://localhost:9000")
        };
        assert!(matches!(
            both.open(),
            Err(Error::ConflictingCredential {
                field: "access_key_id"
            })
        ));
        let unset = StorageSpec {
            access_key_id: None,
            access_key_id_env: Some("LOCKSTEP_TEST_SURELY_UNSET_VARIABLE".into()),
            ..s3("s3://b", "http://localhost:9000")
        };
        match unset.open() {
            Err(Error::MissingCredential { variable, .. }) => {
                assert_eq!(variable, "LOCKSTEP_TEST_SURELY_UNSET_VARIABLE")
            }
            other => panic!("expected MissingCredential, got {other:?}"),
        }
    }

    #[test]
    fn specs_refuse_unknown_fields_and_hide_secrets() {
        let err = toml::from_str::<StorageSpec>("url = \"s3://b\"\nsecret = \"x\"")
            .expect_err("unknown field");
        assert!(err.to_string().contains("unknown field `secret`"), "{err}");
        let spec: StorageSpec =
            toml::from_str("url = \"s3://b\"\nsecret_access_key = \"hunter2\"").expect("parse");
        assert!(!format!("{spec:?}").contains("hunter2"));
        assert!(
            !serde_json::to_string(&spec)
                .expect("json")
                .contains("hunter2")
        );
    }

    #[test]
    fn unsupported_urls_are_refused() {
        for url in ["gs://bucket", "s3:///root"] {
            let spec = StorageSpec {
                url: url.into(),
                ..StorageSpec::default()
            };
            assert!(
                matches!(spec.open(), Err(Error::InvalidUrl { .. })),
                "{url}"
            );
        }
    }
}
