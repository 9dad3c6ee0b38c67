//! A cluster's object storage, built from its [`StorageSpec`]. Import paths are bucket-relative
//! (the local directory plays the bucket), as Milvus reads them from its own bucket.

use std::sync::Arc;

use object_store::{ObjectStore, aws::AmazonS3Builder, local::LocalFileSystem, memory::InMemory};

use crate::topology::StorageSpec;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("cannot create storage directory {path}: {source}")]
    CreateDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open storage {what}: {source}")]
    Open {
        what: String,
        #[source]
        source: object_store::Error,
    },
}

/// A cluster's store, as [`open`] made it.
pub struct Opened {
    pub store: Arc<dyn ObjectStore>,
    /// The directory a local store keeps its objects in, as files at their paths.
    pub dir: Option<std::path::PathBuf>,
    /// The temporary directory backing it when the spec asked for one.
    pub temp_dir: Option<tempfile::TempDir>,
}

pub fn open(spec: &StorageSpec) -> Result<Opened, StorageError> {
    let opened = |(store, dir): (Arc<dyn ObjectStore>, Option<std::path::PathBuf>)| Opened {
        store,
        dir,
        temp_dir: None,
    };
    match spec {
        StorageSpec::Memory => Ok(opened((Arc::new(InMemory::new()), None))),
        StorageSpec::TempDir => {
            let dir = tempfile::Builder::new()
                .prefix("milvus-sim-")
                .tempdir()
                .map_err(|source| StorageError::CreateDir {
                    path: "(temp)".into(),
                    source,
                })?;
            let store = local(dir.path())?;
            Ok(Opened {
                temp_dir: Some(dir),
                ..opened(store)
            })
        }
        StorageSpec::Local(path) => {
            std::fs::create_dir_all(path).map_err(|source| StorageError::CreateDir {
                path: path.display().to_string(),
                source,
            })?;
            Ok(opened(local(path)?))
        }
        StorageSpec::S3(s3) => {
            let mut builder = AmazonS3Builder::new()
                .with_bucket_name(&s3.bucket)
                .with_allow_http(s3.allow_http)
                .with_region(s3.region.as_deref().unwrap_or("us-east-1"));
            if let Some(endpoint) = &s3.endpoint {
                // Loopback S3 servers (moto, MinIO) want path-style requests.
                builder = builder
                    .with_endpoint(endpoint)
                    .with_virtual_hosted_style_request(false);
            }
            if let Some(key) = &s3.access_key_id {
                builder = builder.with_access_key_id(key);
            }
            if let Some(secret) = &s3.secret_access_key {
                builder = builder.with_secret_access_key(secret);
            }
            let store = builder.build().map_err(|source| StorageError::Open {
                what: format!("s3://{}", s3.bucket),
                source,
            })?;
            Ok(opened((Arc::new(store), None)))
        }
    }
}

/// A store over directory `path`, and the directory it keeps its files in (`path`
/// canonicalised, as the store resolves it).
fn local(
    path: &std::path::Path,
) -> Result<(Arc<dyn ObjectStore>, Option<std::path::PathBuf>), StorageError> {
    let store = LocalFileSystem::new_with_prefix(path).map_err(|source| StorageError::Open {
        what: path.display().to_string(),
        source,
    })?;
    let dir = path
        .canonicalize()
        .map_err(|source| StorageError::CreateDir {
            path: path.display().to_string(),
            source,
        })?;
    Ok((Arc::new(store), Some(dir)))
}
