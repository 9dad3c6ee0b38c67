//! TLS to a Milvus, as both its clients use it: gRPC and REST share the port and the
//! certificate, so they share how it is trusted and what is presented to it. The journal's
//! etcd client takes the same.

use crate::config::{TlsSpec, read_pem};

/// PEM material for an `https://` end. Empty, an `https://` end is trusted through the
/// system's roots and asks for no client certificate.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// The CA that signed the end's certificate, trusted in place of the system's roots.
    pub ca: Option<Vec<u8>>,
    /// The name the certificate carries, where the URI's host is not it (an IP address, a
    /// load balancer's name).
    pub server_name: Option<String>,
    /// The certificate and key presented to an end that asks for one (mutual TLS).
    pub identity: Option<Identity>,
}

#[derive(Debug, Clone)]
pub struct Identity {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl Tls {
    /// The PEM files `spec` names, read. They were checked when the config was loaded; one
    /// gone since is named in the error.
    pub fn read(spec: &TlsSpec) -> Result<Tls, String> {
        let identity = match (&spec.client_cert, &spec.client_key) {
            (Some(cert), Some(key)) => Some(Identity {
                cert: read_pem(cert)?,
                key: read_pem(key)?,
            }),
            _ => None,
        };
        Ok(Tls {
            ca: spec.ca_cert.as_deref().map(read_pem).transpose()?,
            server_name: spec.server_name.clone(),
            identity,
        })
    }

    /// A gRPC client's TLS: the given CA or the system's roots, the certificate's name, and
    /// the identity to present.
    pub fn tonic_config(&self) -> tonic::transport::ClientTlsConfig {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let mut config = match &self.ca {
            Some(ca) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)),
            None => ClientTlsConfig::new().with_native_roots(),
        };
        if let Some(name) = &self.server_name {
            config = config.domain_name(name);
        }
        if let Some(id) = &self.identity {
            config = config.identity(Identity::from_pem(&id.cert, &id.key));
        }
        config
    }
}
