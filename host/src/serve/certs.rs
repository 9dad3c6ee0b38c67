//! The certificate `serve` presents over TLS, read from PEM files and read again when they
//! change: cert-manager and certbot rotate a certificate by writing new files in place (or,
//! in a Kubernetes secret volume, by swapping a symbolic link), and a restart would abort
//! the restores that have not decided.
//!
//! A new pair is looked for before a handshake, at most every [`RELOAD_CHECK_EVERY`]: the
//! files' inode, size and modification time are compared with those last read. A pair
//! that does not load (a certificate written before its key, a key of another
//! certificate) leaves the previous certificate in use and is logged; it is tried again
//! once the files change again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject as _};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};

/// How often, at most, the files are looked at: a rotation is served within this of the
/// first connection after it, and a busy server stats two files this often, not per
/// connection.
pub const RELOAD_CHECK_EVERY: Duration = Duration::from_secs(2);

/// Why a certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a PEM certificate chain: {source}", path.display())]
    Certificates {
        path: PathBuf,
        #[source]
        source: pem::Error,
    },
    #[error("{}: holds no certificate (expected PEM `CERTIFICATE` blocks)", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: not a PEM private key: {source}", path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: pem::Error,
    },
    #[error("{} and {} are not a certificate and its key: {source}", cert.display(), key.display())]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

/// A certificate file and its key, and the pair last loaded from them.
#[derive(Debug)]
pub struct CertFiles {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    // Std locks: none is held across an await, and a handshake only clones the Arc.
    current: RwLock<Arc<CertifiedKey>>,
    seen: Mutex<Stamps>,
    checked: Mutex<Instant>,
}

/// What tells a file was replaced or rewritten: for each of the two files, its device and
/// inode (a rename or a link swap), size and modification time (a rewrite in place).
type Stamps = [FileStamp; 2];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    fn of(path: &Path) -> Result<FileStamp, CertError> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).map_err(|source| CertError::Unreadable {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

impl CertFiles {
    /// Loads the pair, or says why it cannot be served.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<CertFiles>, CertError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let seen = [FileStamp::of(cert)?, FileStamp::of(key)?];
        let pair = read_pair(cert, key, &provider)?;
        Ok(Arc::new(CertFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
            current: RwLock::new(Arc::new(pair)),
            seen: Mutex::new(seen),
            checked: Mutex::new(Instant::now()),
        }))
    }

    /// A TLS acceptor that presents the current pair, for HTTP/2 and HTTP/1.1.
    pub(super) fn acceptor(self: &Arc<Self>) -> TlsAcceptor {
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .expect("aws-lc-rs serves TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(config))
    }

    /// Loads the files again if they changed, at most every [`RELOAD_CHECK_EVERY`].
    pub(super) async fn refresh(self: &Arc<Self>) {
        {
            let mut checked = self.checked.lock().expect("no panics under the check lock");
            if checked.elapsed() < RELOAD_CHECK_EVERY {
                return;
            }
            *checked = Instant::now();
        }
        let files = Arc::clone(self);
        let reloaded = tokio::task::spawn_blocking(move || files.reload_if_changed())
            .await
            .expect("reading two files does not panic");
        match reloaded {
            Ok(true) => tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded"),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                error = %e,
                "the TLS certificate files changed but do not load; still serving the previous certificate"
            ),
        }
    }

    /// Loads the pair again if the files changed since they were last read: `Ok(true)` when
    /// a new pair is served. A pair that does not load is not tried again until the files
    /// change again.
    fn reload_if_changed(&self) -> Result<bool, CertError> {
        let stamps = [FileStamp::of(&self.cert)?, FileStamp::of(&self.key)?];
        {
            let mut seen = self.seen.lock().expect("no panics under the stamps lock");
            if *seen == stamps {
                return Ok(false);
            }
            *seen = stamps;
        }
        let pair = read_pair(&self.cert, &self.key, &self.provider)?;
        *self.current.write().expect("no panics under the pair lock") = Arc::new(pair);
        Ok(true)
    }
}

impl ResolvesServerCert for CertFiles {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.current.read().expect("no panics under the pair lock"),
        ))
    }
}

/// The chain and key in `cert` and `key`, held to be a pair.
fn read_pair(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, CertError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| CertError::Certificates {
            path: cert.to_path_buf(),
            source,
        })?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|source| CertError::Key {
        path: key.to_path_buf(),
        source,
    })?;
    CertifiedKey::from_der(chain, private, provider).map_err(|source| CertError::Pair {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `name` and its key, as PEM.
    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn served(files: &CertFiles) -> Vec<u8> {
        files.current.read().unwrap().cert[0].to_vec()
    }

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    /// Writes `text` to `path` by renaming a new file over it, as a rotation does.
    fn replace(path: &Path, text: &str) {
        let part = path.with_extension("part");
        std::fs::write(&part, text).unwrap();
        std::fs::rename(&part, path).unwrap();
    }

    #[test]
    fn a_rotated_pair_is_served_and_a_broken_one_keeps_the_previous() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let (first_cert, first_key) = pair("first.test");
        replace(&cert, &first_cert);
        replace(&key, &first_key);
        let files = CertFiles::load(&cert, &key).unwrap();
        assert_eq!(served(&files), der(&first_cert));
        assert!(!files.reload_if_changed().unwrap(), "nothing changed");

        // The new certificate lands before its key: that is no pair, and the first stays.
        let (second_cert, second_key) = pair("second.test");
        replace(&cert, &second_cert);
        let broken = files.reload_if_changed().unwrap_err();
        assert!(matches!(broken, CertError::Pair { .. }), "{broken}");
        assert_eq!(served(&files), der(&first_cert));
        assert!(!files.reload_if_changed().unwrap(), "tried once per change");

        replace(&key, &second_key);
        assert!(files.reload_if_changed().unwrap());
        assert_eq!(served(&files), der(&second_cert));

        // A key that is not PEM at all, in place: the second pair stays.
        std::fs::write(&key, "not a key").unwrap();
        assert!(matches!(
            files.reload_if_changed(),
            Err(CertError::Key { .. })
        ));
        assert_eq!(served(&files), der(&second_cert));
    }

    #[test]
    fn a_pair_that_does_not_load_is_refused_at_start_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let missing = CertFiles::load(&cert, &key).unwrap_err();
        assert!(missing.to_string().contains("tls.crt"), "{missing}");
        std::fs::write(&cert, "no PEM here").unwrap();
        std::fs::write(&key, pair("x.test").1).unwrap();
        let empty = CertFiles::load(&cert, &key).unwrap_err();
        assert!(matches!(empty, CertError::NoCertificate { .. }), "{empty}");
    }
}
