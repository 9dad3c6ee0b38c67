//! Opening an end's object store from its validated [`StorageSpec`] (the job module's, the
//! one spec every part uses), and the [`StoreId`] that says when two ends share one store.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use url::Url;

use super::Error;
use crate::config::{Env, StorageSpec, process_env};

/// AWS's default region, used when a spec names none (S3-compatible servers ignore it).
const DEFAULT_REGION: &str = "us-east-1";

/// Which physical store an end's storage is: two ends with equal ids can copy between each
/// other server-side, and an end whose id is the backup's can import the backup in place.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StoreId {
    /// A local directory, canonicalised (symlinks and `..` resolved).
    Local { dir: PathBuf },
    /// An S3 bucket at an endpoint (scheme, host and port, lowercased, no trailing slash).
    S3 { endpoint: String, bucket: String },
    /// An Azure Blob container at its account's endpoint.
    Azure { endpoint: String, container: String },
    /// A Google Cloud Storage bucket at its endpoint.
    Gcs { endpoint: String, bucket: String },
}

impl fmt::Display for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreId::Local { dir } => write!(f, "file://{}", dir.display()),
            StoreId::S3 { endpoint, bucket } => write!(f, "s3://{bucket} at {endpoint}"),
            StoreId::Azure {
                endpoint,
                container,
            } => write!(f, "az://{container} at {endpoint}"),
            StoreId::Gcs { endpoint, bucket } => write!(f, "gs://{bucket} at {endpoint}"),
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
    /// The directory of `store` when it is a local one, for what only files have: staging
    /// maps object paths to files (as `store` does) to link, copy with the kernel, stat,
    /// delete and fsync them.
    local: Option<LocalFiles>,
}

impl OpenedStore {
    /// The local directory store's files, `None` for S3.
    pub(super) fn local(&self) -> Option<&LocalFiles> {
        self.local.as_ref()
    }

    /// A store in memory, standing in for a remote one where no S3 server runs: like S3 it
    /// is no local directory, so staging streams into it, whole or in parts.
    #[cfg(test)]
    pub(super) fn in_memory(bucket: &str) -> OpenedStore {
        OpenedStore {
            id: StoreId::S3 {
                endpoint: "memory://".to_owned(),
                bucket: bucket.to_owned(),
            },
            store: Arc::new(object_store::memory::InMemory::new()),
            root: Path::default(),
            local: None,
        }
    }
}

/// Opens the store `spec` describes, reading its credential variables from the process
/// environment now.
///
/// `file:///dir` is the directory itself (created if missing). `s3://bucket/root` is the
/// bucket, `root` being Milvus's `rootPath` inside it; import paths handed to Milvus are
/// relative to the store (bucket-relative keys, as milvus-backup stages them). With no
/// credential variables the S3 client asks the instance metadata service (IMDS); a store a job
/// described ([`StorageSpec::anonymous`]) is asked unsigned, with no credential at all.
///
/// A local store writes without fsync: [`stage`](super::stage) makes what it wrote durable
/// in one pass at its end, so no copy waits on the disk.
pub fn open(spec: &StorageSpec) -> Result<OpenedStore, Error> {
    open_with_env(spec, &process_env)
}

/// [`open`], reading credential variables through `env` (tests pass their own).
pub(crate) fn open_with_env(spec: &StorageSpec, env: Env<'_>) -> Result<OpenedStore, Error> {
    let invalid = |reason: &str| Error::InvalidUrl {
        url: spec.url.to_string(),
        reason: reason.to_owned(),
    };
    match spec.url.scheme() {
        "file" => {
            let dir = spec
                .url
                .to_file_path()
                .map_err(|()| invalid("a file URL names a local directory: file:///dir"))?;
            open_local(spec, dir)
        }
        "s3" => {
            let bucket = spec
                .url
                .host_str()
                .filter(|b| !b.is_empty())
                .ok_or_else(|| invalid("an s3 URL names a bucket"))?;
            let root = Path::parse(spec.url.path()).map_err(|e| invalid(&e.to_string()))?;
            open_s3(spec, bucket, root, env)
        }
        "az" | "gs" => {
            let name = spec
                .url
                .host_str()
                .filter(|b| !b.is_empty())
                .ok_or_else(|| invalid("the URL names a container or bucket"))?;
            let root = Path::parse(spec.url.path()).map_err(|e| invalid(&e.to_string()))?;
            if spec.url.scheme() == "az" {
                open_azure(spec, name, root, env)
            } else {
                open_gcs(spec, name, root)
            }
        }
        other => Err(invalid(&format!(
            "scheme `{other}` is not supported; use s3://, az://, gs:// or file://"
        ))),
    }
}

fn open_local(spec: &StorageSpec, dir: PathBuf) -> Result<OpenedStore, Error> {
    let io_error = |source| Error::LocalDir {
        dir: dir.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(io_error)?;
    let dir = dir.canonicalize().map_err(io_error)?;
    let store = LocalFileSystem::new_with_prefix(&dir)
        .map_err(|source| Error::Open {
            url: spec.url.to_string(),
            source,
        })?
        // Deleting a staged prefix removes its emptied directories too (up to the root).
        .with_automatic_cleanup(true);
    Ok(OpenedStore {
        local: Some(LocalFiles { dir: dir.clone() }),
        id: StoreId::Local { dir },
        store: Arc::new(store),
        root: Path::default(),
    })
}

/// Whether a local store takes file `name` for one of its part-written copies (`{name}#N`),
/// which it neither lists nor lets be read or written: its first `#` is followed by digits
/// only.
pub(super) fn part_written(name: &str) -> bool {
    name.split_once('#')
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Where a local directory store keeps its objects: each is the file at its path under the
/// store's (canonical) directory.
#[derive(Debug, Clone)]
pub struct LocalFiles {
    dir: PathBuf,
}

impl LocalFiles {
    /// The file of the object at `location`: the directory joined with the path's parts as
    /// they stand. `LocalFileSystem::path_to_filesystem` gives the same file by way of a
    /// `file://` URL (each part percent-encoded into it, `%` included, and decoded out of it
    /// again), and that round trip was a sixth of the host's CPU in a restore of 1,000
    /// collections: a stage maps every file three to five times. A [`Path`] has no empty, `.`
    /// or `..` part, so the join stays under the directory. Like the store, it refuses a
    /// name whose first `#` only digits follow, the form of a part-written copy that
    /// listings skip (the stage writes its own copies so before renaming them), and an empty
    /// path.
    pub fn path(&self, location: &Path) -> object_store::Result<PathBuf> {
        match location.filename() {
            Some(name) if !part_written(name) => Ok(self.dir.join(location.as_ref())),
            _ => Err(object_store::Error::Generic {
                store: "LocalFileSystem",
                source: format!("{location:?} is not a valid file path").into(),
            }),
        }
    }
}

fn open_s3(
    spec: &StorageSpec,
    bucket: &str,
    root: Path,
    env: Env<'_>,
) -> Result<OpenedStore, Error> {
    let region = spec.region.as_deref().unwrap_or(DEFAULT_REGION);
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region(region)
        .with_allow_http(spec.allow_http)
        // Path-style requests unless the spec asks otherwise: local S3 servers (moto, MinIO)
        // do not serve buckets by host name, and Aliyun, Tencent and Huawei serve them only so.
        .with_virtual_hosted_style_request(spec.virtual_hosted)
        .with_skip_signature(spec.anonymous);
    let endpoint = match &spec.endpoint {
        Some(endpoint) => {
            // The client appends `/{bucket}` to a path-style endpoint and uses a host-style
            // one as it is, so that one must name the bucket already. A parsed URL ends its
            // empty path with `/`.
            let bucket_endpoint = if spec.virtual_hosted {
                bucket_host(endpoint, bucket)?
            } else {
                endpoint.clone()
            };
            builder = builder.with_endpoint(bucket_endpoint.as_str().trim_end_matches('/'));
            normalize_endpoint(endpoint).map_err(|reason| Error::InvalidUrl {
                url: endpoint.to_string(),
                reason: reason.to_owned(),
            })?
        }
        None => format!("https://s3.{region}.amazonaws.com"),
    };
    if let Some(given) = &spec.given {
        builder = builder
            .with_access_key_id(given.access_key_id.expose())
            .with_secret_access_key(given.secret_access_key.expose());
        if let Some(token) = &given.session_token {
            builder = builder.with_token(token.expose());
        }
    }
    if let Some(key) = credential("access_key_id", &spec.access_key_id_env, env)? {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = credential("secret_access_key", &spec.secret_access_key_env, env)? {
        builder = builder.with_secret_access_key(secret);
    }
    if let Some(token) = credential("session_token", &spec.session_token_env, env)? {
        builder = builder.with_token(token);
    }
    let store = builder.build().map_err(|source| Error::Open {
        url: spec.url.to_string(),
        source,
    })?;
    Ok(OpenedStore {
        id: StoreId::S3 {
            endpoint,
            bucket: bucket.to_owned(),
        },
        store: Arc::new(store),
        root,
        local: None,
    })
}

/// An Azure Blob container: the account's endpoint (`https://ACCOUNT.blob.core.windows.net`
/// unless the spec names one, as for an emulator), its shared key from the config or the
/// spec's variable, else Azure's credential chain.
fn open_azure(
    spec: &StorageSpec,
    container: &str,
    root: Path,
    env: Env<'_>,
) -> Result<OpenedStore, Error> {
    let account = spec
        .azure_account
        .as_deref()
        .ok_or_else(|| Error::InvalidUrl {
            url: spec.url.to_string(),
            reason: "an az:// store names its storage account (azure_account)".to_owned(),
        })?;
    let mut builder = MicrosoftAzureBuilder::new()
        .with_account(account)
        .with_container_name(container)
        .with_allow_http(spec.allow_http)
        .with_skip_signature(spec.anonymous);
    let endpoint = match &spec.endpoint {
        Some(endpoint) => {
            builder = builder.with_endpoint(endpoint.as_str().trim_end_matches('/').to_owned());
            endpoint.as_str().trim_end_matches('/').to_lowercase()
        }
        None => format!("https://{account}.blob.core.windows.net"),
    };
    if let Some(given) = &spec.given {
        builder = builder.with_access_key(given.secret_access_key.expose());
    }
    if let Some(key) = credential("azure_key", &spec.azure_key_env, env)? {
        builder = builder.with_access_key(key);
    }
    let store = builder.build().map_err(|source| Error::Open {
        url: spec.url.to_string(),
        source,
    })?;
    Ok(OpenedStore {
        id: StoreId::Azure {
            endpoint,
            container: container.to_owned(),
        },
        store: Arc::new(store),
        root,
        local: None,
    })
}

/// A Google Cloud Storage bucket, signed in with the spec's service-account file (else the
/// instance's credentials), at the spec's endpoint when it names one (an emulator).
fn open_gcs(spec: &StorageSpec, bucket: &str, root: Path) -> Result<OpenedStore, Error> {
    let mut builder = GoogleCloudStorageBuilder::new()
        .with_bucket_name(bucket)
        .with_skip_signature(spec.anonymous);
    if let Some(file) = &spec.service_account_file {
        builder = builder.with_service_account_path(file.to_string_lossy());
    }
    let endpoint = match &spec.endpoint {
        Some(endpoint) => {
            let base = endpoint.as_str().trim_end_matches('/');
            builder = builder.with_base_url(base);
            base.to_lowercase()
        }
        None => "https://storage.googleapis.com".to_owned(),
    };
    let store = builder.build().map_err(|source| Error::Open {
        url: spec.url.to_string(),
        source,
    })?;
    Ok(OpenedStore {
        id: StoreId::Gcs {
            endpoint,
            bucket: bucket.to_owned(),
        },
        store: Arc::new(store),
        root,
        local: None,
    })
}

/// `endpoint` with `bucket` as the first label of its host: `https://oss.example.com` becomes
/// `https://BUCKET.oss.example.com`.
fn bucket_host(endpoint: &Url, bucket: &str) -> Result<Url, Error> {
    let invalid = |reason: &str| Error::InvalidUrl {
        url: endpoint.to_string(),
        reason: reason.to_owned(),
    };
    let host = endpoint
        .host_str()
        .ok_or_else(|| invalid("a host-style endpoint names a host"))?;
    if endpoint
        .host()
        .is_some_and(|h| !matches!(h, url::Host::Domain(_)))
    {
        return Err(invalid(
            "a host-style endpoint is a host name: an IP address cannot carry the bucket's name",
        ));
    }
    let mut with_bucket = endpoint.clone();
    with_bucket
        .set_host(Some(&format!("{bucket}.{host}")))
        .map_err(|e| invalid(&e.to_string()))?;
    Ok(with_bucket)
}

/// A credential from the environment variable the spec names, if it names one.
fn credential(
    field: &'static str,
    variable: &Option<String>,
    env: Env<'_>,
) -> Result<Option<String>, Error> {
    let Some(variable) = variable else {
        return Ok(None);
    };
    match env(variable) {
        Some(value) => Ok(Some(value)),
        None => Err(Error::MissingCredential {
            field,
            variable: variable.clone(),
        }),
    }
}

/// `scheme://host[:port]`, lowercased: what makes two endpoint spellings the same server.
fn normalize_endpoint(endpoint: &Url) -> Result<String, &'static str> {
    let host = endpoint.host_str().ok_or("the endpoint has no host")?;
    let port = endpoint
        .port_or_known_default()
        .map(|p| format!(":{p}"))
        .unwrap_or_default();
    Ok(format!(
        "{}://{}{port}",
        endpoint.scheme(),
        host.to_ascii_lowercase()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_style_endpoint_carries_the_bucket_in_its_host() {
        let endpoint = Url::parse("https://oss-cn-hangzhou.aliyuncs.com:443").unwrap();
        assert_eq!(
            bucket_host(&endpoint, "milvus-files").unwrap().as_str(),
            "https://milvus-files.oss-cn-hangzhou.aliyuncs.com/"
        );
        let ip = Url::parse("http://10.0.0.9:9000").unwrap();
        let err = bucket_host(&ip, "milvus-files").unwrap_err();
        assert!(err.to_string().contains("IP address"), "{err}");
    }

    const KEY_VAR: &str = "TEST_S3_KEY";
    const SECRET_VAR: &str = "TEST_S3_SECRET";
    const SECRET: &str = "hunter2";

    /// The environment the tests' specs read their credentials from.
    fn test_env(name: &str) -> Option<String> {
        match name {
            KEY_VAR => Some("key".to_owned()),
            SECRET_VAR => Some(SECRET.to_owned()),
            _ => None,
        }
    }

    fn s3(url: &str, endpoint: &str) -> StorageSpec {
        StorageSpec {
            url: Url::parse(url).expect("url"),
            endpoint: Some(Url::parse(endpoint).expect("endpoint")),
            region: None,
            access_key_id_env: Some(KEY_VAR.into()),
            secret_access_key_env: Some(SECRET_VAR.into()),
            session_token_env: None,
            given: None,
            allow_http: true,
            virtual_hosted: false,
            azure_account: None,
            azure_key_env: None,
            service_account_file: None,
            anonymous: false,
        }
    }

    fn open_s3_spec(url: &str, endpoint: &str) -> OpenedStore {
        open_with_env(&s3(url, endpoint), &test_env).expect("open")
    }

    #[test]
    fn s3_ids_compare_endpoint_and_bucket_not_root() {
        let a = open_s3_spec("s3://milvus-a/files", "http://LOCALHOST:9000/");
        let b = open_s3_spec("s3://milvus-a/backup", "http://localhost:9000");
        let c = open_s3_spec("s3://milvus-b/files", "http://localhost:9000");
        let d = open_s3_spec("s3://milvus-a/files", "http://localhost:9001");
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
        let plain = open(&StorageSpec::local(&dir.path().join("x")).expect("spec")).expect("open");
        assert!(
            dir.path().join("x").is_dir(),
            "a missing directory is created"
        );
        std::os::unix::fs::symlink(dir.path().join("x"), dir.path().join("link")).expect("symlink");
        let linked =
            open(&StorageSpec::local(&dir.path().join("link")).expect("spec")).expect("open");
        assert_eq!(plain.id, linked.id);
        let other = open(&StorageSpec::local(&dir.path().join("y")).expect("spec")).expect("open");
        assert_ne!(plain.id, other.id);
    }

    /// Staging maps paths to files itself; it must find the file the store's own calls
    /// read and write, for every name a backup can hold, and refuse what the store refuses.
    #[test]
    fn local_files_are_where_the_store_puts_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opened = open(&StorageSpec::local(dir.path()).expect("spec")).expect("open");
        let files = opened.local().expect("a local store");
        let store = LocalFileSystem::new_with_prefix(dir.path()).expect("store");
        let parts = |parts: &[&str]| Path::from_iter(parts.iter().copied());
        for path in [
            Path::from("a/b/c"),
            Path::from("lockstep-staging/r.1/binlogs/insert_log/1/2/3/100/449"),
            parts(&["with space", "per%cent", "hash#tag", "ü"]),
            parts(&["slash/inside", "question?", "x#1y", "a#b#1"]),
            parts(&["..", ".", "%2E"]),
            parts(&["#", "name#"]),
            // Parsed, not built: `#` stays as it is, as in the paths staging joins.
            Path::parse("with space/x#1y/a#b#1/name#").expect("a path"),
        ] {
            assert_eq!(
                files.path(&path).expect("a valid file path"),
                store.path_to_filesystem(&path).expect("the store's file"),
                "{path:?}"
            );
        }
        for refused in ["a/part#1", "x#0042", ""] {
            let refused = Path::parse(refused).expect("a path");
            assert!(store.path_to_filesystem(&refused).is_err(), "{refused:?}");
            assert!(files.path(&refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn credentials_are_read_from_the_named_variables_at_open() {
        let unset = StorageSpec {
            secret_access_key_env: Some("LOCKSTEP_TEST_SURELY_UNSET_VARIABLE".into()),
            ..s3("s3://b", "http://localhost:9000")
        };
        match open_with_env(&unset, &test_env) {
            Err(Error::MissingCredential { field, variable }) => {
                assert_eq!(
                    (field, variable.as_str()),
                    ("secret_access_key", "LOCKSTEP_TEST_SURELY_UNSET_VARIABLE")
                )
            }
            other => panic!("expected MissingCredential, got {other:?}"),
        }
    }

    #[test]
    fn an_opened_store_does_not_show_its_secret() {
        let opened = open_s3_spec("s3://b/root", "http://localhost:9000");
        let shown = format!("{opened:?}");
        assert!(
            shown.contains("key"),
            "the credential is in the client: {shown}"
        );
        assert!(!shown.contains(SECRET), "{shown}");
    }

    /// The first request a store sends to `endpoint` for a `head`, as raw text.
    async fn first_request(spec: &StorageSpec) -> String {
        use object_store::ObjectStoreExt as _;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let spec = StorageSpec {
            endpoint: Some(Url::parse(&endpoint).unwrap()),
            ..spec.clone()
        };
        let store = open_with_env(&spec, &test_env).expect("open");
        let head = tokio::spawn(async move { store.store.head(&Path::from("a/b")).await });
        // A store that looks for credentials elsewhere first (the instance's metadata
        // service) may never get here: that is a failure too, not a hang.
        let accepted = tokio::time::timeout(std::time::Duration::from_secs(20), listener.accept());
        let (mut conn, _) = accepted
            .await
            .expect("the store sent its request within 20 s")
            .unwrap();
        let mut buf = vec![0; 8192];
        let n = conn.read(&mut buf).await.unwrap();
        conn.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        let _ = head.await;
        String::from_utf8_lossy(&buf[..n]).to_lowercase()
    }

    /// A store a job described sends no credential: neither a signature nor a session token,
    /// where the host's own store signs with its keys.
    #[tokio::test]
    async fn an_anonymous_store_signs_nothing() {
        let keyed = s3("s3://b/root", "http://localhost:9000");
        let signed = first_request(&keyed).await;
        assert!(
            signed.contains("authorization: aws4-hmac-sha256"),
            "{signed}"
        );
        let anonymous = StorageSpec {
            access_key_id_env: None,
            secret_access_key_env: None,
            anonymous: true,
            ..keyed
        };
        let unsigned = first_request(&anonymous).await;
        assert!(unsigned.starts_with("head /b/a/b"), "{unsigned}");
        assert!(
            !unsigned.contains("authorization") && !unsigned.contains("x-amz-security-token"),
            "{unsigned}"
        );
    }

    #[test]
    fn urls_naming_no_store_are_refused() {
        for url in [
            "gcs://bucket",
            "s3:///root",
            "az:///root",
            "file://server/share",
        ] {
            let spec = StorageSpec {
                url: Url::parse(url).expect("url"),
                ..s3("s3://b", "http://localhost:9000")
            };
            assert!(
                matches!(
                    open_with_env(&spec, &test_env),
                    Err(Error::InvalidUrl { .. })
                ),
                "{url}"
            );
        }
        // An Azure container is found in its account, which the spec must name.
        let spec = StorageSpec {
            url: Url::parse("az://container/root").expect("url"),
            ..s3("s3://b", "http://localhost:10000")
        };
        let err = open_with_env(&spec, &test_env).unwrap_err();
        assert!(err.to_string().contains("azure_account"), "{err}");
    }
}
