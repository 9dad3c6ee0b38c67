//! Where a fleet's shared journal is and how it is reached: `etcd://HOST:PORT[,...]/prefix`
//! (from `--journal` or the host config's `[journal] etcd`), and the host config's TLS, user
//! and password for it.
//!
//! ```toml
//! [journal]
//! etcd = "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/lockstep"
//! tls = { ca_cert = "etcd-ca.pem", client_cert = "client.pem", client_key = "client.key" }
//! user = "lockstep"
//! password_env = "LOCKSTEP_ETCD_PASSWORD"
//! # insecure = true              # plain http to an etcd that is not on loopback
//! # max_value_kib = 512          # the largest value the journal writes; a record is split
//! ```
//!
//! Milvus's own etcd holds its metadata; a journal written there by anyone who can reach it
//! without credentials is a journal an attacker can write. So plain http is taken only on
//! loopback unless the config says `insecure = true`.

use std::net::IpAddr;
use std::time::Duration;

use super::secret::TokenSource;
use super::tls::TlsSpec;

/// How long a claim outlives its host's last renewal, unless `?lease_ttl=` says otherwise.
/// Another host takes an unfinished restore over this long after its holder died; shorter
/// means quicker takeovers but a claim lost to any pause (GC, a slow disk, a partition)
/// longer than it.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// The largest value the journal writes into etcd, unless `[journal] max_value_kib` says
/// otherwise: a third of etcd's default request limit (`--max-request-bytes`, 1.5 MiB), so
/// that a value and the transaction around it pass a server left at its defaults, and a
/// page of a listing stays a few megabytes.
pub const DEFAULT_VALUE_LIMIT: ValueLimit = ValueLimit(512 * 1024);

/// The most `[journal] max_value_kib` may say: values are read back a page at a time, in
/// answers the client takes up to 16 MiB of.
pub const MAX_VALUE_KIB: usize = 4 * 1024;

/// The largest value, in bytes, the etcd journal writes: a record larger than it is split
/// into parts no larger (`journal::etcd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueLimit(pub usize);

impl Default for ValueLimit {
    fn default() -> ValueLimit {
        DEFAULT_VALUE_LIMIT
    }
}

/// Where the journal lives, and how it is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdLocation {
    /// `HOST:PORT` of each member.
    pub endpoints: Vec<String>,
    /// Key prefix without a trailing slash, e.g. `/lockstep`.
    pub prefix: String,
    /// The claims' lease TTL.
    pub lease_ttl: Duration,
    /// TLS, user and password: the host config's `[journal]`; none for a bare `--journal`.
    pub access: EtcdAccess,
    /// The largest value written: the host config's `[journal] max_value_kib`.
    pub value_limit: ValueLimit,
}

/// TLS and authentication to etcd: only the host config says them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdAccess {
    /// `https` to every member, trusting this CA (else the system's roots) and presenting
    /// this certificate when etcd asks for one (`--client-cert-auth`).
    pub tls: Option<TlsSpec>,
    /// etcd's own authentication: the user, and where its password is read from.
    pub user: Option<(String, TokenSource)>,
    /// Plain http to members that are not on loopback is taken.
    pub insecure: bool,
}

/// Why an `etcd://` location was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocationError {
    #[error("journal `{0}`: expected etcd://HOST:PORT/prefix")]
    NotEtcd(String),
    #[error("journal `{0}`: no HOST:PORT before the prefix")]
    NoEndpoint(String),
    #[error(
        "journal `{0}`: expected a key prefix after HOST:PORT, e.g. etcd://127.0.0.1:2379/lockstep"
    )]
    NoPrefix(String),
    #[error("journal `{0}`: expected ?lease_ttl=SECONDS with whole seconds of at least 2")]
    BadLeaseTtl(String),
}

impl EtcdLocation {
    /// `etcd://HOST:PORT[,HOST:PORT...]/prefix[?lease_ttl=SECONDS]`, reached as `access`
    /// says; a bare location takes [`EtcdAccess::default`] (plain http, no user).
    pub fn parse(url: &str) -> Result<EtcdLocation, LocationError> {
        let rest = url
            .strip_prefix("etcd://")
            .ok_or_else(|| LocationError::NotEtcd(url.to_string()))?;
        let (rest, lease_ttl) = match rest.split_once('?') {
            None => (rest, DEFAULT_LEASE_TTL),
            Some((rest, query)) => {
                let secs = query
                    .strip_prefix("lease_ttl=")
                    .and_then(|s| s.parse::<u64>().ok())
                    .filter(|s| *s >= 2)
                    .ok_or_else(|| LocationError::BadLeaseTtl(url.to_string()))?;
                (rest, Duration::from_secs(secs))
            }
        };
        let (hosts, prefix) = rest
            .split_once('/')
            .ok_or_else(|| LocationError::NoPrefix(url.to_string()))?;
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            return Err(LocationError::NoPrefix(url.to_string()));
        }
        let endpoints: Vec<String> = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        if endpoints.is_empty() {
            return Err(LocationError::NoEndpoint(url.to_string()));
        }
        Ok(EtcdLocation {
            endpoints,
            prefix: format!("/{prefix}"),
            lease_ttl,
            access: EtcdAccess::default(),
            value_limit: ValueLimit::default(),
        })
    }

    /// Each member's URL: `https://` with TLS, else `http://`.
    pub fn urls(&self) -> Vec<String> {
        let scheme = if self.access.tls.is_some() {
            "https"
        } else {
            "http"
        };
        (self.endpoints.iter())
            .map(|e| format!("{scheme}://{e}"))
            .collect()
    }

    /// The members reached over plain http that are not on this host, unless the access
    /// says `insecure`: whoever is on the path sees and can change the journal.
    pub fn exposed(&self) -> Vec<&str> {
        if self.access.tls.is_some() || self.access.insecure {
            return Vec::new();
        }
        (self.endpoints.iter())
            .filter(|e| !on_loopback(e))
            .map(String::as_str)
            .collect()
    }
}

/// Whether `HOST:PORT` names this host: a loopback address, or `localhost`.
fn on_loopback(endpoint: &str) -> bool {
    let host = endpoint
        .rsplit_once(':')
        .map_or(endpoint, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The host config's `[journal]`: where the journal is, when the config says, and how etcd
/// is reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalSpec {
    /// `[journal] etcd`, with [`JournalSpec::access`]; `--journal` overrides it.
    pub etcd: Option<EtcdLocation>,
    pub access: EtcdAccess,
    /// `[journal] max_value_kib`, for `--journal` too.
    pub value_limit: ValueLimit,
}

impl JournalSpec {
    /// The etcd journal `flag` names (`--journal`), else the config's, reached as the config
    /// says; `None`: the embedded journal.
    pub fn location(&self, flag: Option<&str>) -> Result<Option<EtcdLocation>, LocationError> {
        match flag {
            Some(url) => Ok(Some(EtcdLocation {
                access: self.access.clone(),
                value_limit: self.value_limit,
                ..EtcdLocation::parse(url)?
            })),
            None => Ok(self.etcd.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_parses_with_its_members_prefix_and_lease() {
        assert_eq!(
            EtcdLocation::parse("etcd://127.0.0.1:2379/lockstep/prod").unwrap(),
            EtcdLocation {
                endpoints: vec!["127.0.0.1:2379".into()],
                prefix: "/lockstep/prod".into(),
                lease_ttl: DEFAULT_LEASE_TTL,
                access: EtcdAccess::default(),
                value_limit: DEFAULT_VALUE_LIMIT,
            }
        );
        assert_eq!(
            EtcdLocation::parse("etcd://a:1/x?lease_ttl=3")
                .unwrap()
                .lease_ttl,
            Duration::from_secs(3)
        );
        for bad in [
            "etcd://a:1/x?lease_ttl=1",
            "etcd://a:1/x?ttl=3",
            "etcd://a:1/x?lease_ttl=3s",
        ] {
            assert!(
                matches!(EtcdLocation::parse(bad), Err(LocationError::BadLeaseTtl(_))),
                "{bad}"
            );
        }
        let two = EtcdLocation::parse("etcd://a:1,b:2/x/").unwrap();
        assert_eq!(two.urls(), ["http://a:1", "http://b:2"]);
        assert!(matches!(
            EtcdLocation::parse("http://a:1/x"),
            Err(LocationError::NotEtcd(_))
        ));
        assert!(matches!(
            EtcdLocation::parse("etcd://a:1"),
            Err(LocationError::NoPrefix(_))
        ));
        assert!(matches!(
            EtcdLocation::parse("etcd://a:1/"),
            Err(LocationError::NoPrefix(_))
        ));
        assert!(matches!(
            EtcdLocation::parse("etcd:///x"),
            Err(LocationError::NoEndpoint(_))
        ));
    }

    /// Plain http is exposed off this host, unless TLS or `insecure` says otherwise.
    #[test]
    fn plain_http_off_loopback_is_exposed() {
        let plain = EtcdLocation::parse(
            "etcd://127.0.0.1:2379,localhost:2379,[::1]:2379,10.0.0.1:2379,etcd.internal:2379/x",
        )
        .unwrap();
        assert_eq!(plain.exposed(), ["10.0.0.1:2379", "etcd.internal:2379"]);
        let with = |access: EtcdAccess| EtcdLocation {
            access,
            ..plain.clone()
        };
        let tls = with(EtcdAccess {
            tls: Some(TlsSpec::default()),
            ..EtcdAccess::default()
        });
        assert!(tls.exposed().is_empty());
        assert_eq!(tls.urls()[3], "https://10.0.0.1:2379");
        let insecure = with(EtcdAccess {
            insecure: true,
            ..EtcdAccess::default()
        });
        assert!(insecure.exposed().is_empty());
    }
}
