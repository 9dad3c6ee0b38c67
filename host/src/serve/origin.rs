//! What a web page in someone's browser could make the browser send to `serve`, and why
//! it is refused. Loopback is no boundary for a browser: any page it shows can send
//! requests to `127.0.0.1`, and a page whose name an attacker rebinds to `127.0.0.1` (DNS
//! rebinding) even reads the answers, as the browser takes them for the page's own.
//!
//! - A request must name this server: its `Host` (HTTP/2's `:authority`) is a name of the
//!   address it arrived at (for a loopback one also `localhost`, `127.0.0.1` and `[::1]`), or
//!   one the operator allowed (`--allowed-origin`: what a proxy, ingress or load balancer
//!   publishes). A rebinding page's requests carry the attacker's name and are refused (403).
//! - A request a page of another origin sends carries that `Origin`, which must be this
//!   server's or an allowed one (403 otherwise).
//! - A route that changes something takes only `Content-Type: application/json` (415
//!   otherwise). A browser sends a cross-origin form or `no-cors` request only with a form
//!   or `text/plain` body; JSON needs a CORS preflight, which this server never answers
//!   with a grant.
//!
//! The probes (`/healthz`, `/readyz`) are left out: they say only how the process is, and
//! probes reach them by whatever address.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::Response;

use super::envelope::{Code, refused};
use super::listen::{Conn, Scheme};

/// Why an `--allowed-origin` is refused at start.
#[derive(Debug, thiserror::Error)]
#[error(
    "--allowed-origin {given:?}: {why}; give an origin (`https://lockstep.example.com`, \
     `http://10.0.0.5:8080`) or a host and port (`lockstep.example.com:443`)"
)]
pub struct OriginError {
    given: String,
    why: &'static str,
}

/// The names and origins a server answers to beyond the address each connection arrived
/// at.
#[derive(Debug, Clone, Default)]
pub struct AllowedOrigins {
    entries: Vec<Allowed>,
}

/// One `--allowed-origin`: a host and port, with the scheme an origin named (none for a
/// `host:port`, which is allowed under either scheme).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Allowed {
    scheme: Option<Scheme>,
    host: Host,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Ip(IpAddr),
    /// A DNS name, in lower case.
    Name(String),
}

/// A `Host` header or `:authority`: a host and, when given, a port.
#[derive(Debug, PartialEq, Eq)]
struct Authority {
    host: Host,
    port: Option<u16>,
}

/// An `Origin` header's scheme, host and port (the scheme's default when not given).
#[derive(Debug, PartialEq, Eq)]
struct Origin {
    scheme: Scheme,
    host: Host,
    port: u16,
}

/// Why a request is not this server's, as its 403 says.
#[derive(Debug, thiserror::Error)]
enum Foreign {
    #[error("the request names no host (no Host header)")]
    NoHost,
    #[error(
        "Host {given:?} is not a name of this server ({own}): a page that reached it under \
         another name (DNS rebinding) may not use it; behind a proxy, ingress or load \
         balancer, start serve with --allowed-origin naming the host:port it publishes"
    )]
    Host { given: String, own: String },
    #[error(
        "Origin {given:?} is not this server's ({own}): a page of another origin may not use \
         this API; if that page is yours, start serve with --allowed-origin naming its origin"
    )]
    Origin { given: String, own: String },
}

impl AllowedOrigins {
    /// The `--allowed-origin` values (`LOCKSTEP_ALLOWED_ORIGINS`).
    pub fn parse(given: &[String]) -> Result<AllowedOrigins, OriginError> {
        let entries = given
            .iter()
            .map(|g| {
                Allowed::parse(g.trim()).map_err(|why| OriginError {
                    given: g.clone(),
                    why,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(AllowedOrigins { entries })
    }

    /// Whether a request that arrived over `conn` with `uri` and `headers` is this
    /// server's: every host it names, and its origin when it has one.
    fn admits(&self, conn: &Conn, uri: &Uri, headers: &HeaderMap) -> Result<(), Foreign> {
        let own = || own_names(conn);
        let from_header = headers.get(header::HOST).map(|h| h.to_str().unwrap_or("?"));
        let named: Vec<&str> = uri
            .authority()
            .map(|a| a.as_str())
            .into_iter()
            .chain(from_header)
            .collect();
        if named.is_empty() {
            return Err(Foreign::NoHost);
        }
        for given in named {
            let admitted = Authority::parse(given).is_some_and(|a| {
                own_host(conn, &a) || self.entries.iter().any(|e| e.admits_host(&a))
            });
            if !admitted {
                return Err(Foreign::Host {
                    given: shortened(given),
                    own: own(),
                });
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let given = origin.to_str().unwrap_or("?");
            let admitted = Origin::parse(given).is_some_and(|o| {
                own_origin(conn, &o) || self.entries.iter().any(|e| e.admits_origin(&o))
            });
            if !admitted {
                return Err(Foreign::Origin {
                    given: shortened(given),
                    own: own(),
                });
            }
        }
        Ok(())
    }
}

/// At most 100 characters of what a request said, for its answer and the log.
fn shortened(given: &str) -> String {
    given.chars().take(100).collect()
}

impl Allowed {
    fn parse(given: &str) -> Result<Allowed, &'static str> {
        if given.contains("://") {
            let origin = Origin::parse(given).ok_or("not an origin (scheme://host[:port])")?;
            return Ok(Allowed {
                scheme: Some(origin.scheme),
                host: origin.host,
                port: origin.port,
            });
        }
        let authority = Authority::parse(given).ok_or("not a host and port")?;
        let port = authority.port.ok_or("a host needs its port")?;
        Ok(Allowed {
            scheme: None,
            host: authority.host,
            port,
        })
    }

    fn admits_host(&self, given: &Authority) -> bool {
        given.host == self.host
            && match given.port {
                Some(port) => port == self.port,
                // A client leaves the port out where it is its scheme's default.
                None => match self.scheme {
                    Some(scheme) => scheme.default_port() == self.port,
                    None => [Scheme::Http, Scheme::Https]
                        .iter()
                        .any(|s| s.default_port() == self.port),
                },
            }
    }

    fn admits_origin(&self, given: &Origin) -> bool {
        self.scheme.is_none_or(|s| s == given.scheme)
            && given.host == self.host
            && given.port == self.port
    }
}

impl Host {
    fn parse(given: &str) -> Option<Host> {
        if let Some(v6) = given.strip_prefix('[').and_then(|g| g.strip_suffix(']')) {
            return v6
                .parse::<Ipv6Addr>()
                .ok()
                .map(|ip| Host::Ip(IpAddr::V6(ip).to_canonical()));
        }
        if let Ok(ip) = given.parse::<std::net::Ipv4Addr>() {
            return Some(Host::Ip(IpAddr::V4(ip)));
        }
        let name = !given.is_empty()
            && given
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        name.then(|| Host::Name(given.to_ascii_lowercase()))
    }

    fn of_ip(ip: IpAddr) -> Host {
        Host::Ip(ip.to_canonical())
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
            Host::Name(name) => f.write_str(name),
        }
    }
}

impl Authority {
    fn parse(given: &str) -> Option<Authority> {
        // An IPv6 address is bracketed and holds colons of its own.
        let (host, port) = match given.rfind(':') {
            Some(colon) if !given[colon..].contains(']') => {
                (&given[..colon], Some(given[colon + 1..].parse().ok()?))
            }
            _ => (given, None),
        };
        Some(Authority {
            host: Host::parse(host)?,
            port,
        })
    }
}

impl Origin {
    fn parse(given: &str) -> Option<Origin> {
        let (scheme, rest) = given.split_once("://")?;
        let scheme = match scheme {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return None,
        };
        let authority = Authority::parse(rest)?;
        Some(Origin {
            scheme,
            host: authority.host,
            port: authority.port.unwrap_or(scheme.default_port()),
        })
    }
}

/// The hosts a connection's own address goes by: that address, and for a loopback one the
/// other loopback names, which reach the same listener.
fn own_hosts(local: SocketAddr) -> Vec<Host> {
    let ip = local.ip().to_canonical();
    let mut hosts = vec![Host::of_ip(ip)];
    if ip.is_loopback() {
        for other in [
            Host::Ip(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
            Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            Host::Name("localhost".into()),
        ] {
            if !hosts.contains(&other) {
                hosts.push(other);
            }
        }
    }
    hosts
}

fn own_host(conn: &Conn, given: &Authority) -> bool {
    own_hosts(conn.local).contains(&given.host)
        && given.port.unwrap_or(conn.scheme.default_port()) == conn.local.port()
}

fn own_origin(conn: &Conn, given: &Origin) -> bool {
    given.scheme == conn.scheme
        && own_hosts(conn.local).contains(&given.host)
        && given.port == conn.local.port()
}

/// The origins a connection's server is, for a refusal's message.
fn own_names(conn: &Conn) -> String {
    let names: Vec<String> = own_hosts(conn.local)
        .iter()
        .map(|h| format!("{}://{h}:{}", conn.scheme, conn.local.port()))
        .collect();
    names.join(", ")
}

/// Refuses (403) a request that is not this server's: see the module's doc.
pub(super) async fn same_origin(
    State(allowed): State<Arc<AllowedOrigins>>,
    ConnectInfo(conn): ConnectInfo<Conn>,
    request: Request,
    next: Next,
) -> Response {
    match allowed.admits(&conn, request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(why) => {
            tracing::warn!(peer = %conn.peer, status = 403, reason = %why, "refused a request");
            refused(
                StatusCode::FORBIDDEN,
                Code::NoPermission,
                request.headers(),
                why.to_string(),
            )
        }
    }
}

/// Refuses (415) a request whose body is not declared JSON, on the routes that change
/// something.
pub(super) async fn json_only(
    ConnectInfo(conn): ConnectInfo<Conn>,
    request: Request,
    next: Next,
) -> Response {
    if is_json(request.headers()) {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::CONTENT_TYPE)
        .map_or("none".to_owned(), |v| shortened(v.to_str().unwrap_or("?")));
    let msg = format!(
        "Content-Type {given:?} is not application/json: send the body as JSON with \
         `Content-Type: application/json` ({} {} takes nothing else, so that no web page \
         can post a form or text to it)",
        request.method(),
        request.uri().path()
    );
    tracing::warn!(peer = %conn.peer, status = 415, reason = %msg, "refused a request");
    refused(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Code::ParameterError,
        request.headers(),
        msg,
    )
}

/// `application/json`, with any parameters (`; charset=utf-8`).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(local: &str, scheme: Scheme) -> Conn {
        Conn {
            peer: "127.0.0.1:50000".parse().unwrap(),
            local: local.parse().unwrap(),
            scheme,
        }
    }

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, host.parse().unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, o.parse().unwrap());
        }
        h
    }

    fn admits(allowed: &AllowedOrigins, c: &Conn, host: &str, origin: Option<&str>) -> bool {
        allowed
            .admits(
                c,
                &Uri::from_static("/api/v1/list_restores"),
                &headers(host, origin),
            )
            .is_ok()
    }

    #[test]
    fn a_loopback_listener_answers_to_its_loopback_names_and_port_only() {
        let none = AllowedOrigins::default();
        let c = conn("127.0.0.1:8080", Scheme::Http);
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "[::1]:8080",
        ] {
            assert!(admits(&none, &c, host, None), "{host}");
        }
        for host in [
            "evil.example:8080",
            "127.0.0.1:8081",
            "localhost",
            "localhost.:8080",
            "127.0.0.1.evil.example:8080",
            "",
        ] {
            assert!(!admits(&none, &c, host, None), "{host}");
        }
        assert!(admits(
            &none,
            &c,
            "localhost:8080",
            Some("http://localhost:8080")
        ));
        assert!(admits(
            &none,
            &c,
            "localhost:8080",
            Some("http://127.0.0.1:8080")
        ));
        for origin in [
            "http://127.0.0.1:9999",
            "https://127.0.0.1:8080",
            "null",
            "http://evil.example:8080",
        ] {
            assert!(
                !admits(&none, &c, "127.0.0.1:8080", Some(origin)),
                "{origin}"
            );
        }
        let missing = none.admits(&c, &Uri::from_static("/"), &HeaderMap::new());
        assert!(matches!(missing, Err(Foreign::NoHost)));
    }

    #[test]
    fn a_listener_on_every_address_answers_to_the_address_a_connection_arrived_at() {
        let none = AllowedOrigins::default();
        let c = conn("10.0.0.5:8443", Scheme::Https);
        assert!(admits(
            &none,
            &c,
            "10.0.0.5:8443",
            Some("https://10.0.0.5:8443")
        ));
        assert!(!admits(&none, &c, "localhost:8443", None));
        assert!(!admits(
            &none,
            &c,
            "10.0.0.5:8443",
            Some("http://10.0.0.5:8443")
        ));
        let mapped = conn("[::ffff:10.0.0.5]:8443", Scheme::Https);
        assert!(admits(&none, &mapped, "10.0.0.5:8443", None));
    }

    #[test]
    fn allowed_origins_add_what_a_proxy_publishes() {
        let allowed = AllowedOrigins::parse(&[
            "https://Lockstep.Example.com".to_owned(),
            "ops.example:8443".to_owned(),
        ])
        .unwrap();
        let c = conn("10.0.0.5:8443", Scheme::Https);
        assert!(admits(
            &allowed,
            &c,
            "lockstep.example.com",
            Some("https://lockstep.example.com")
        ));
        assert!(admits(&allowed, &c, "lockstep.example.com:443", None));
        assert!(!admits(
            &allowed,
            &c,
            "lockstep.example.com",
            Some("http://lockstep.example.com")
        ));
        assert!(!admits(&allowed, &c, "lockstep.example.com:8080", None));
        assert!(admits(
            &allowed,
            &c,
            "ops.example:8443",
            Some("http://ops.example:8443")
        ));
        assert!(admits(
            &allowed,
            &c,
            "ops.example:8443",
            Some("https://ops.example:8443")
        ));
        assert!(!admits(&allowed, &c, "ops.example", None));
        for bad in [
            "lockstep.example.com",
            "ftp://x.example",
            "https://x.example/path",
            "*",
            "",
        ] {
            let e = AllowedOrigins::parse(&[bad.to_owned()]).unwrap_err();
            assert!(e.to_string().contains("--allowed-origin"), "{e}");
        }
    }

    #[test]
    fn json_is_application_json_with_any_parameters() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            h
        };
        assert!(is_json(&with("application/json")));
        assert!(is_json(&with("Application/JSON; charset=utf-8")));
        for not in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
        ] {
            assert!(!is_json(&with(not)), "{not}");
        }
        assert!(!is_json(&HeaderMap::new()));
    }
}
