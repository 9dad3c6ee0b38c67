//! The ends of a restore: the target and its secondaries, each with its REST and gRPC client.

use crate::config::TlsSpec;
use crate::job::{End, Job};
use crate::journal::{RecordedEnd, Role};
use crate::milvus::{self, GrpcClient, ManagementClient, RestClient, Tls};
use url::Url;

/// One cluster lockstep talks to.
#[derive(Clone)]
pub struct EndClient {
    pub name: String,
    pub role: Role,
    pub uri: String,
    pub rest: RestClient,
    pub grpc: GrpcClient,
    /// Its management API, where the host config gives one: only preflight asks it, so an
    /// end a recovery reaches has none.
    pub management: Option<ManagementClient>,
}

impl EndClient {
    fn new(end: &End, role: Role) -> Result<EndClient, milvus::Error> {
        let token = end.token.as_ref().map(|t| t.expose().to_string());
        let tls = tls(end.name.as_str(), end.uri.as_str(), &end.tls)?;
        let management = (end.management.as_ref())
            .map(|uri| {
                warn_if_exposed(end.name.as_str(), uri.as_str(), token.is_some());
                ManagementClient::new(end.name.as_str(), uri.as_str(), token.clone(), &tls)
            })
            .transpose()?;
        let client = EndClient::connect(end.name.as_str(), role, end.uri.as_str(), token, &tls)?;
        Ok(EndClient {
            management,
            ..client
        })
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
        warn_if_exposed(name, &uri, token.is_some());
        Ok(EndClient {
            name: name.to_string(),
            role,
            rest: RestClient::new(name, &uri, token.clone(), tls)?,
            grpc: GrpcClient::new(name, &uri, token.as_deref(), tls)?,
            uri,
            management: None,
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

/// Warns when `name`'s token (`with_token`) would go to `uri` in the clear.
fn warn_if_exposed(name: &str, uri: &str, with_token: bool) {
    if with_token && exposed(uri) {
        tracing::warn!(
            end = name,
            uri,
            "the end's token goes over plain http, where anyone on the path can read it: \
             reach it at an https:// URI"
        );
    }
}

/// Whether `uri` is plain http to another host: loopback traffic never leaves this one.
fn exposed(uri: &str) -> bool {
    Url::parse(uri).is_ok_and(|url| {
        url.scheme() == "http"
            && !matches!(url.host(), Some(url::Host::Ipv4(ip)) if ip.is_loopback())
            && !matches!(url.host(), Some(url::Host::Ipv6(ip)) if ip.is_loopback())
            && url.host_str() != Some("localhost")
    })
}

/// The PEM files `spec` names, read; one gone since the config was loaded makes the end
/// unreachable, naming the file.
fn tls(name: &str, uri: &str, spec: &TlsSpec) -> Result<Tls, milvus::Error> {
    Tls::read(spec).map_err(|reason| milvus::Error::Unreachable {
        end: name.to_owned(),
        uri: uri.to_owned(),
        source: reason.into(),
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

    /// Ends as a journal record names them, each resolved by its name in the host config:
    /// the config says where the cluster is and what it is reached with, and the record only
    /// which clusters the restore touched. A record that puts a cluster elsewhere than the
    /// config does is refused before anything is contacted: whoever can write a record (an
    /// etcd shared with Milvus, a state directory) must not be able to send a token of this
    /// host to an address of their choosing. An end the job named by URI alone is recorded by
    /// that URI and gets no credential, as it had none.
    pub fn from_recorded(
        recorded: &[RecordedEnd],
        host: &crate::config::HostConfig,
    ) -> Result<Ends, RecoverError> {
        let mut all = Vec::new();
        for e in recorded {
            let uri = Url::parse(&e.uri).map_err(|_| RecoverError::NotAUri {
                end: e.name.clone(),
            })?;
            let (name, cluster) = match host.clusters.get(&e.name) {
                Some(cluster) => (e.name.as_str(), Some(cluster)),
                None => match bare_uri(&e.name, &uri) {
                    // A URI the config names is that cluster, as it was when the job named it.
                    true => match host.cluster_at(&uri) {
                        Ok(Some((name, cluster))) => (name, Some(cluster)),
                        Ok(None) if !host.named_ends_only => (e.name.as_str(), None),
                        _ => {
                            return Err(RecoverError::Unknown {
                                end: e.name.clone(),
                            });
                        }
                    },
                    false => {
                        return Err(RecoverError::Unknown {
                            end: e.name.clone(),
                        });
                    }
                },
            };
            let Some(cluster) = cluster else {
                all.push(EndClient::connect(
                    name,
                    e.role,
                    uri.as_str(),
                    None,
                    &Tls::default(),
                )?);
                continue;
            };
            if !crate::config::same_endpoint(cluster.uri.as_str(), uri.as_str()) {
                return Err(RecoverError::Moved {
                    end: e.name.clone(),
                    recorded: crate::config::without_userinfo(&e.uri).into_owned(),
                    configured: cluster.uri.to_string(),
                });
            }
            let token = match &cluster.token {
                Some(source) => Some(
                    source
                        .read(&crate::config::process_env)
                        .map_err(|missing| RecoverError::MissingToken {
                            end: name.to_owned(),
                            variable: missing.0,
                        })?
                        .expose()
                        .to_owned(),
                ),
                None => None,
            };
            let tls = tls(name, cluster.uri.as_str(), &cluster.tls)?;
            all.push(EndClient::connect(
                name,
                e.role,
                cluster.uri.as_str(),
                token,
                &tls,
            )?);
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

/// Whether an end's recorded name is the URI it was recorded at: how an end the job named by
/// URI alone is kept.
fn bare_uri(name: &str, uri: &Url) -> bool {
    Url::parse(name).is_ok_and(|named| crate::config::same_endpoint(named.as_str(), uri.as_str()))
}

/// Why a recorded restore's ends cannot be reached again.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error(
        "the journal record puts end {end} at {recorded}, where the host config has {configured}: \
         a record never says where a cluster is, so nothing was contacted (a cluster that moved \
         is recovered with the host config it was restored under)"
    )]
    Moved {
        end: String,
        recorded: String,
        configured: String,
    },
    #[error(
        "the journal record names end {end}, which is no cluster of the host config nor the URI \
         it was recorded at: nothing was contacted"
    )]
    Unknown { end: String },
    #[error("the journal record's end {end} has no URI that parses")]
    NotAUri { end: String },
    #[error("end {end}: its token variable {variable} is not set")]
    MissingToken { end: String, variable: String },
    #[error("the journal record names no target")]
    NoTarget,
    #[error(transparent)]
    Client(#[from] milvus::Error),
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::HostConfig;

    fn host(extra: &str) -> HostConfig {
        let text = format!(
            "{extra}[clusters.prod]\nuri = \"http://10.0.0.1:19530\"\n\n[clusters.dr]\nuri = \"https://10.0.0.2:19530\"\n"
        );
        HostConfig::parse_str(&text, Path::new("/etc/lockstep/lockstep.toml")).unwrap()
    }

    fn end(name: &str, role: Role, uri: &str) -> RecordedEnd {
        RecordedEnd {
            name: name.to_owned(),
            role,
            uri: uri.to_owned(),
        }
    }

    /// Each end is where the host config puts it, whatever the record says; a record that
    /// says otherwise, or names what the config does not know, is refused whole.
    /// A token over plain http to another host is said once for the end, naming it; over
    /// https, or to this host, nothing is said.
    #[tokio::test]
    async fn a_token_over_plain_http_to_another_host_is_warned_about() {
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = {
            let log = std::sync::Arc::clone(&log);
            move || Capture(std::sync::Arc::clone(&log))
        };
        let subscriber = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let token = || Some("root:secret-token".to_owned());
        for (name, uri) in [
            ("far", "http://10.0.0.1:19530"),
            ("tls", "https://10.0.0.1:19530"),
            ("here", "http://127.0.0.1:19530"),
            ("local", "http://localhost:19530"),
        ] {
            EndClient::connect(name, Role::Target, uri, token(), &Tls::default()).unwrap();
        }
        EndClient::connect(
            "open",
            Role::Target,
            "http://10.0.0.2:19530",
            None,
            &Tls::default(),
        )
        .unwrap();
        let shown = String::from_utf8(log.lock().unwrap().clone()).unwrap();
        let warned: Vec<&str> = shown.lines().filter(|l| l.contains("plain http")).collect();
        assert_eq!(warned.len(), 1, "{shown}");
        assert!(
            warned[0].contains("end=\"far\"") || warned[0].contains("end=far"),
            "{shown}"
        );
        assert!(!shown.contains("secret-token"), "{shown}");
    }

    /// A writer into a shared buffer, for reading what was logged.
    struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_record_names_clusters_and_the_host_config_says_where_they_are() {
        let ends = Ends::from_recorded(
            &[
                end("prod", Role::Target, "http://10.0.0.1:19530/"),
                end("dr", Role::Secondary, "https://10.0.0.2:19530"),
                end(
                    "http://10.9.9.9:19530",
                    Role::Secondary,
                    "http://10.9.9.9:19530/",
                ),
                // Recorded by the URI the job gave, which the config now names.
                end(
                    "http://10.0.0.1:19530",
                    Role::Secondary,
                    "http://10.0.0.1:19530",
                ),
            ],
            &host(""),
        )
        .unwrap();
        let shown: Vec<(&str, &str)> = (ends.all().iter())
            .map(|e| (e.name.as_str(), e.uri.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("prod", "http://10.0.0.1:19530"),
                ("dr", "https://10.0.0.2:19530"),
                ("http://10.9.9.9:19530", "http://10.9.9.9:19530"),
                ("prod", "http://10.0.0.1:19530"),
            ]
        );

        let refused = |recorded: &[RecordedEnd], host: &HostConfig| {
            Ends::from_recorded(recorded, host)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let moved = refused(
            &[end(
                "prod",
                Role::Target,
                "http://user:pw@attacker.example:9000",
            )],
            &host(""),
        );
        assert!(
            moved.starts_with("the journal record puts end prod at http://…@attacker.example:9000, where the host config has http://10.0.0.1:19530/"),
            "{moved}"
        );
        assert!(!moved.contains("pw"), "{moved}");
        for recorded in [
            // A name the config does not have, at any URI.
            end("prod-old", Role::Target, "http://10.0.0.1:19530"),
            // A URI recorded under another URI's name.
            end(
                "http://10.0.0.1:19530",
                Role::Target,
                "http://attacker.example:9000",
            ),
        ] {
            let why = refused(&[recorded], &host(""));
            assert!(why.contains("is no cluster of the host config"), "{why}");
        }
        let strict = refused(
            &[end(
                "http://10.9.9.9:19530",
                Role::Target,
                "http://10.9.9.9:19530",
            )],
            &host("named_ends_only = true\n"),
        );
        assert!(
            strict.contains("is no cluster of the host config"),
            "{strict}"
        );
    }
}
