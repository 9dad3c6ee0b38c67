//! The ends of a restore: the target and its secondaries, each with its REST and gRPC client.

use crate::config::{TlsSpec, read_pem};
use crate::job::{End, Job};
use crate::journal::{RecordedEnd, Role};
use crate::milvus::{self, GrpcClient, Identity, RestClient, Tls};

/// One cluster lockstep talks to.
#[derive(Clone)]
pub struct EndClient {
    pub name: String,
    pub role: Role,
    pub uri: String,
    pub rest: RestClient,
    pub grpc: GrpcClient,
}

impl EndClient {
    fn new(end: &End, role: Role) -> Result<EndClient, milvus::Error> {
        let token = end.token.as_ref().map(|t| t.expose().to_string());
        let tls = tls(end.name.as_str(), end.uri.as_str(), &end.tls)?;
        EndClient::connect(end.name.as_str(), role, end.uri.as_str(), token, &tls)
    }

    /// A client for an end known by name and URI (recovery reads them from the journal).
    pub fn connect(
        name: &str,
        role: Role,
        uri: &str,
        token: Option<String>,
        tls: &Tls,
    ) -> Result<EndClient, milvus::Error> {
        let uri = uri.trim_end_matches('/').to_string();
        Ok(EndClient {
            name: name.to_string(),
            role,
            rest: RestClient::new(name, &uri, token.clone(), tls)?,
            grpc: GrpcClient::new(name, &uri, token.as_deref(), tls)?,
            uri,
        })
    }

    pub fn recorded(&self) -> RecordedEnd {
        RecordedEnd {
            name: self.name.clone(),
            role: self.role,
            uri: self.uri.clone(),
        }
    }
}

/// The PEM files `spec` names, read. They were checked when the config was loaded; one
/// gone since makes the end unreachable, naming the file.
fn tls(name: &str, uri: &str, spec: &TlsSpec) -> Result<Tls, milvus::Error> {
    let read = |path: &std::path::Path| {
        read_pem(path).map_err(|reason| milvus::Error::Unreachable {
            end: name.to_owned(),
            uri: uri.to_owned(),
            source: reason.into(),
        })
    };
    let identity = match (&spec.client_cert, &spec.client_key) {
        (Some(cert), Some(key)) => Some(Identity {
            cert: read(cert)?,
            key: read(key)?,
        }),
        _ => None,
    };
    Ok(Tls {
        ca: spec.ca_cert.as_deref().map(read).transpose()?,
        server_name: spec.server_name.clone(),
        identity,
    })
}

/// The target first, then the secondaries in the job's order. Index 0 is the target
/// everywhere an end is referred to by position.
#[derive(Clone)]
pub struct Ends {
    all: Vec<EndClient>,
}

/// An end no client can be made for from what the job gives: a URI that does not parse,
/// a token that cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{end} ({uri}): {reason}; check its URI and token")]
pub struct NoClient {
    pub end: String,
    pub uri: String,
    pub reason: String,
}

impl Ends {
    /// The job's ends, target first; which one no client can be made for.
    pub fn for_job(job: &Job) -> Result<Ends, NoClient> {
        let client = |end: &End, role| {
            EndClient::new(end, role).map_err(|e| NoClient {
                end: end.name.to_string(),
                uri: end.uri.to_string(),
                reason: match e {
                    // Its end and URI are the refusal's own.
                    milvus::Error::Unreachable { source, .. } => source.to_string(),
                    milvus::Error::Protocol { detail, .. } => detail,
                    other => other.to_string(),
                },
            })
        };
        let mut all = vec![client(&job.target.end, Role::Target)?];
        for s in &job.secondaries {
            all.push(client(&s.end, Role::Secondary)?);
        }
        Ok(Ends { all })
    }

    /// Ends as a journal record names them, with tokens from the host config's clusters of
    /// the same name (an end given by URI alone has none).
    pub fn from_recorded(
        recorded: &[RecordedEnd],
        host: &crate::config::HostConfig,
    ) -> Result<Ends, RecoverError> {
        let mut all = Vec::new();
        for e in recorded {
            let token = match host.clusters.get(&e.name).and_then(|c| c.token.as_ref()) {
                Some(source) => Some(
                    source
                        .read(&crate::config::process_env)
                        .map_err(|missing| RecoverError::MissingToken {
                            end: e.name.clone(),
                            variable: missing.0,
                        })?
                        .expose()
                        .to_owned(),
                ),
                None => None,
            };
            let tls = match host.clusters.get(&e.name) {
                Some(cluster) => tls(&e.name, &e.uri, &cluster.tls)?,
                None => Tls::default(),
            };
            all.push(EndClient::connect(&e.name, e.role, &e.uri, token, &tls)?);
        }
        if all.first().is_none_or(|e| e.role != Role::Target) {
            return Err(RecoverError::NoTarget);
        }
        Ok(Ends { all })
    }

    /// Ends from their clients, the target first.
    pub fn from_clients(all: Vec<EndClient>) -> Ends {
        debug_assert!(all.first().is_some_and(|e| e.role == Role::Target));
        Ends { all }
    }

    pub fn target(&self) -> &EndClient {
        &self.all[0]
    }

    pub fn secondaries(&self) -> &[EndClient] {
        &self.all[1..]
    }

    pub fn all(&self) -> &[EndClient] {
        &self.all
    }

    /// Every end as verification asks it, the target the one that takes load and release.
    pub fn to_verify(&self) -> Vec<crate::verify::End<'_>> {
        (self.all.iter())
            .map(|e| crate::verify::End {
                name: &e.name,
                target: e.role == crate::journal::Role::Target,
                grpc: &e.grpc,
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }
}

/// Why a recorded restore's ends cannot be reached again.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("end {end}: its token variable {variable} is not set")]
    MissingToken { end: String, variable: String },
    #[error("the journal record names no target")]
    NoTarget,
    #[error(transparent)]
    Client(#[from] milvus::Error),
}
