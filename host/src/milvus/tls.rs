//! TLS to a Milvus, as both its clients use it: gRPC and REST share the port and the
//! certificate, so they share how it is trusted and what is presented to it.

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
