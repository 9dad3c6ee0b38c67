//! TLS to a server of the host config's (a Milvus over `https://`, the journal's etcd): what
//! is trusted and what is presented, as files the config names.

use std::path::PathBuf;

use serde::Serialize;

/// TLS to a cluster whose URI is `https://`, for gRPC and REST alike: the CA that signed its
/// certificate (default: the system's roots), the name that certificate carries when the
/// URI's host is not it, and the certificate and key lockstep presents to a cluster that
/// asks for one (Milvus's `tlsMode` 2). Files are read as given, relative to the working
/// directory as milvus-backup reads them, and checked when the config is loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TlsSpec {
    pub ca_cert: Option<PathBuf>,
    pub server_name: Option<String>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}
