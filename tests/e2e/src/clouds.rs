//! Azure Blob Storage, emulated on loopback by Azurite (`LOCKSTEP_TEST_AZURITE`), which CI
//! starts. A test copies a world's backup into a new container there and points lockstep at
//! it. (No Cloud Storage emulator that can be installed here speaks the XML API
//! object_store's GCS client uses, so `gs://` stores are tested no further than their
//! config.)

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use futures::TryStreamExt as _;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::{ObjectStore, ObjectStoreExt as _};

/// Azurite's well-known development account and key (public, in Azure's docs).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The emulator at `variable`, or `None` once [`crate::unavailable`] let `test` skip.
fn endpoint(variable: &str, test: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(url) => Some(url.trim_end_matches('/').to_owned()),
        Err(_) => {
            crate::unavailable(
                test,
                &format!("{variable} is not set (CI starts the emulator)"),
            );
            None
        }
    }
}

/// A name no other test uses, for a bucket or container (lowercase letters, digits, `-`).
fn fresh_name(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// Copies every object of `from` into `to`, keys unchanged.
pub async fn copy_all(from: &dyn ObjectStore, to: &dyn ObjectStore) -> anyhow::Result<usize> {
    let objects: Vec<_> = from.list(None).try_collect().await?;
    for meta in &objects {
        let bytes = from.get(&meta.location).await?.bytes().await?;
        to.put(&meta.location, bytes.into()).await?;
    }
    Ok(objects.len())
}

/// A new container on Azurite.
pub struct Azure {
    /// `http://127.0.0.1:PORT/devstoreaccount1`.
    pub endpoint: String,
    pub container: String,
    pub store: Arc<dyn ObjectStore>,
}

impl Azure {
    /// Creates the container with the Python SDK in the repository's `.venv` (object_store
    /// reads and writes blobs but creates no container).
    pub async fn new_container(test: &str) -> anyhow::Result<Option<Azure>> {
        let Some(endpoint) = endpoint("LOCKSTEP_TEST_AZURITE", test) else {
            return Ok(None);
        };
        let container = fresh_name("lockstep");
        let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
        let connection = format!(
            "DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
        );
        let created = tokio::process::Command::new(&python)
            .args([
                "-c",
                "import sys; from azure.storage.blob import BlobServiceClient; \
                 BlobServiceClient.from_connection_string(sys.argv[1]).create_container(sys.argv[2])",
                &connection,
                &container,
            ])
            .output()
            .await
            .with_context(|| format!("running {}", python.display()))?;
        anyhow::ensure!(
            created.status.success(),
            "creating the container: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        let store = Arc::new(
            MicrosoftAzureBuilder::new()
                .with_account(AZURITE_ACCOUNT)
                .with_access_key(AZURITE_KEY)
                .with_container_name(&container)
                .with_endpoint(endpoint.clone())
                .with_allow_http(true)
                .build()?,
        );
        Ok(Some(Azure {
            endpoint,
            container,
            store,
        }))
    }
}
