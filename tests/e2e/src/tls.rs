//! Certificates for a world whose target serves TLS: a CA made for the world, the target's
//! certificate for [`SERVER_NAME`] alone (so a client must be told that name to trust it at
//! 127.0.0.1), and a client certificate for mutual TLS, all written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// The name the target's certificate carries (and no address).
pub const SERVER_NAME: &str = "milvus.test";

/// The PEM files of a world's TLS.
#[derive(Debug, Clone)]
pub struct Certs {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Certs {
    /// A new CA and the certificates it signs, written under `dir`.
    pub fn generate(dir: &Path) -> anyhow::Result<Certs> {
        std::fs::create_dir_all(dir)?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca.distinguished_name
            .push(DnType::CommonName, "lockstep e2e CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        let leaf = |names: Vec<String>, usage| -> anyhow::Result<(String, String)> {
            let mut params = CertificateParams::new(names)?;
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate()?;
            let cert = params.signed_by(&key, &ca)?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        let (server_cert, server_key) = leaf(
            vec![SERVER_NAME.to_owned()],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let (client_cert, client_key) = leaf(
            vec!["lockstep.client".to_owned()],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let write = |name: &str, pem: &str| -> anyhow::Result<PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, pem)?;
            Ok(path)
        };
        Ok(Certs {
            ca: write("ca.pem", &ca.pem())?,
            server_cert: write("server.pem", &server_cert)?,
            server_key: write("server.key", &server_key)?,
            client_cert: write("client.pem", &client_cert)?,
            client_key: write("client.key", &client_key)?,
        })
    }
}
