//! TLS as Milvus serves it (`common.security.tlsMode` 1 and 2): a second port beside the
//! plain one, serving the same gRPC and REST over TLS, and with `client_ca` asking every
//! client for a certificate that CA signed. The plain port stays for the control API and
//! for ends that replicate to or from this one.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

/// The certificate the TLS port presents, and the CA its clients must be signed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSpec {
    /// PEM certificate chain and key (Milvus's `tls.serverPemPath`, `tls.serverKeyPath`).
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With it, mutual TLS: a client without a certificate this CA signed is refused
    /// (`tls.caPemPath` with `tlsMode: 2`).
    pub client_ca: Option<PathBuf>,
}

/// Why a TLS port cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("TLS configuration: {0}")]
    Config(String),
}

impl TlsSpec {
    /// The acceptor for this spec, with ALPN for HTTP/2 (gRPC) and HTTP/1.1 (REST).
    pub fn acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let read = |path: &PathBuf| TlsError::Read {
            path: path.clone(),
            source: rustls::pki_types::pem::Error::NoItemsFound,
        };
        let certs = CertificateDer::pem_file_iter(&self.cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|source| TlsError::Read {
                path: self.cert.clone(),
                source,
            })?;
        if certs.is_empty() {
            return Err(read(&self.cert));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|source| TlsError::Read {
            path: self.key.clone(),
            source,
        })?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(ca).map_err(|source| TlsError::Read {
                    path: ca.clone(),
                    source,
                })? {
                    let cert = cert.map_err(|source| TlsError::Read {
                        path: ca.clone(),
                        source,
                    })?;
                    roots
                        .add(cert)
                        .map_err(|e| TlsError::Config(e.to_string()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| TlsError::Config(e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| TlsError::Config(e.to_string()))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}
