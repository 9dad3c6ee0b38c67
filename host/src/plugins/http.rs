//! The HTTP GET a check may make: only to origins its job file allows, never
//! following redirects, never through a proxy, with a short timeout and a
//! capped body. A refused URL is refused before any connection is made.
//!
//! The request is lockstep's, not the check's: a check may add headers but not
//! `Host` (always the allowed origin's) nor any that change how the connection
//! or the message is framed. An allowed name is resolved once per call, by
//! lockstep, and every request of that call to it goes to those addresses, so
//! a name whose answer changes cannot move a connection elsewhere; addresses
//! that reach the host itself, its link or its cloud's metadata service are
//! refused unless an `allow_hosts` entry names the address itself.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;
use url::{Host, Url};

use super::Error;
use super::bindings::wit_host::{HttpError, HttpResponse};

/// One allowed origin: scheme, host and port must all match.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    scheme: String,
    host: Host,
    port: u16,
}

impl Origin {
    /// Reads an allow-list entry, `http://host[:port]`. A path, query or
    /// credentials in it are refused, since the grant is per origin; the
    /// error says which.
    pub fn parse(entry: &str) -> Result<Origin, String> {
        if !entry.contains("://") {
            return Err("no scheme".into());
        }
        let url = Url::parse(entry).map_err(|e| e.to_string())?;
        if url.scheme() != "http" {
            return Err("only http:// is supported".into());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("credentials do not belong in allow_hosts".into());
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err("an origin has no path, query or fragment".into());
        }
        Origin::of(&url).ok_or_else(|| "no host".to_owned())
    }

    fn of(url: &Url) -> Option<Origin> {
        Some(Origin {
            scheme: url.scheme().to_owned(),
            // The url crate lowercases names in http URLs, and writes addresses
            // in one form (`127.1` is `127.0.0.1`), so equal hosts compare equal.
            host: url.host()?.to_owned(),
            port: url.port_or_known_default()?,
        })
    }

    /// Whether this origin names `addr` by address (`http://127.0.0.1:8080`).
    fn names(&self, addr: SocketAddr) -> bool {
        let ip = match self.host {
            Host::Ipv4(ip) => IpAddr::V4(ip),
            Host::Ipv6(ip) => IpAddr::V6(ip),
            Host::Domain(_) => return false,
        };
        ip.to_canonical() == addr.ip().to_canonical() && self.port == addr.port()
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

impl Serialize for Origin {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The origins a check's HTTP GET may reach (`allow_hosts` of its table).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct AllowedHosts {
    origins: Vec<Origin>,
}

impl AllowedHosts {
    pub fn new(origins: Vec<Origin>) -> AllowedHosts {
        AllowedHosts { origins }
    }

    /// Parses every entry with [`Origin::parse`], refusing the first bad one
    /// with the check's name.
    pub fn parse(check: &str, entries: &[String]) -> Result<AllowedHosts, Error> {
        let origins = entries
            .iter()
            .map(|entry| {
                Origin::parse(entry).map_err(|reason| Error::AllowHost {
                    check: check.to_owned(),
                    entry: entry.to_owned(),
                    reason,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(AllowedHosts { origins })
    }

    fn permits(&self, url: &Url) -> bool {
        Origin::of(url).is_some_and(|origin| self.origins.contains(&origin))
    }

    /// Whether an entry names `addr` by address, which lets a reserved address
    /// be reached (by that URL, or by an allowed name that resolves to it).
    fn names(&self, addr: SocketAddr) -> bool {
        self.origins.iter().any(|origin| origin.names(addr))
    }
}

/// Bounds on one GET, the same for every check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Whole-request timeout; far below reqwest's and wasi-http's defaults
    /// because a check that waits should return `retry-after` instead.
    pub timeout: Duration,
    /// Body bytes kept; the rest is dropped and `truncated` set.
    pub max_body: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            timeout: Duration::from_secs(10),
            max_body: 1024 * 1024,
        }
    }
}

/// Looks host names up for the HTTP GET: [`SystemResolver`] unless a test
/// injects another through [`super::RuntimeConfig`].
pub trait Resolver: fmt::Debug + Send + Sync {
    /// The addresses `name` has now.
    fn lookup<'a>(&'a self, name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver (`getaddrinfo`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn lookup<'a>(&'a self, name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let found = tokio::net::lookup_host((name, 0)).await?;
            Ok(found.map(|addr| addr.ip()).collect())
        })
    }
}

/// The resolver inside every client: it answers nothing, so a name reaches a
/// connection only through the addresses [`Egress`] pinned it to.
#[derive(Debug)]
struct NoLookups;

impl reqwest::dns::Resolve for NoLookups {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let refusal = format!("{} was not resolved by lockstep", name.as_str());
        Box::pin(std::future::ready(Err(refusal.into())))
    }
}

/// Redirects off so a 30x cannot lead outside the allow list, no proxy from the
/// environment so the request goes exactly where the allow list says, and no
/// name lookups of the client's own.
fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(NoLookups)
}

/// The client every check shares (connection pool) for origins named by
/// address; it cannot resolve a name.
pub(crate) fn client() -> reqwest::Client {
    client_builder()
        .build()
        .expect("a client with no TLS and no proxy always builds")
}

/// Why an address is not reached through a name: it is the host lockstep runs
/// on (loopback, unspecified), its link (link-local), or the cloud's instance
/// metadata service, which hands out the machine's credentials. AWS, GCP,
/// Azure and Oracle serve it at 169.254.169.254 (link-local anyway), AWS also
/// at fd00:ec2::254, Alibaba at 100.100.100.200. `None`: an ordinary address.
fn reserved(ip: IpAddr) -> Option<&'static str> {
    const METADATA_V4: [Ipv4Addr; 2] = [
        Ipv4Addr::new(169, 254, 169, 254),
        Ipv4Addr::new(100, 100, 100, 200),
    ];
    const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
    // `::ffff:127.0.0.1` connects to 127.0.0.1: judge the IPv4 address.
    match ip.to_canonical() {
        IpAddr::V4(ip) if METADATA_V4.contains(&ip) => Some("a cloud metadata address"),
        IpAddr::V4(ip) if ip.is_loopback() => Some("a loopback address"),
        IpAddr::V4(ip) if ip.is_link_local() => Some("a link-local address"),
        // 0.0.0.0/8: Linux connects 0.0.0.0 to the host itself.
        IpAddr::V4(ip) if ip.octets()[0] == 0 => Some("an unspecified address"),
        IpAddr::V6(ip) if ip == METADATA_V6 => Some("a cloud metadata address"),
        IpAddr::V6(ip) if ip.is_loopback() => Some("a loopback address"),
        IpAddr::V6(ip) if ip.is_unicast_link_local() => Some("a link-local address"),
        IpAddr::V6(ip) if ip.is_unspecified() => Some("an unspecified address"),
        _ => None,
    }
}

/// Request headers a check may not set: `host` (lockstep sends the allowed
/// origin's), the hop-by-hop ones and those that frame the message (on a
/// pooled connection they could smuggle a second request), and HTTP/2's
/// settings: wasmtime-wasi-http's forbidden list plus TE, Trailer and
/// Content-Length. Any `proxy-*` header and any `:pseudo` name too.
const FORBIDDEN_HEADERS: [&str; 9] = [
    "host",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "content-length",
    "upgrade",
    "http2-settings",
];

/// The check's headers as a request's, or the reason the first bad one is refused.
fn request_headers(headers: &[(String, String)]) -> Result<HeaderMap, HttpError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if FORBIDDEN_HEADERS.contains(&lower.as_str())
            || lower.starts_with("proxy-")
            || lower.starts_with(':')
        {
            return Err(HttpError::NotAllowed(format!(
                "request header `{name}`: lockstep sets Host from the URL and does not let a \
                 check set hop-by-hop or framing headers"
            )));
        }
        let invalid =
            |what: &str| HttpError::NotAllowed(format!("request header `{name}`: {what}"));
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid("not a header name"))?;
        let value =
            HeaderValue::from_str(value).map_err(|_| invalid("its value is not a header value"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// One call's HTTP GETs: the check's grant, and each allowed name pinned, for
/// the rest of the call, to what it resolved to on first use. Per call rather
/// than per check run: a check that waits with `retry-after` may wait for
/// hours, across which a service may move; within one call (seconds) nothing
/// legitimate changes, and a name that answers differently is not followed.
pub(crate) struct Egress {
    /// The process's client, for origins named by address.
    client: reqwest::Client,
    resolver: Arc<dyn Resolver>,
    allowed: AllowedHosts,
    limits: HttpLimits,
    /// Per name and port: a client that connects that name only to the
    /// addresses it resolved to, or why none of them may be reached.
    pinned: HashMap<(String, u16), Result<reqwest::Client, HttpError>>,
}

impl Egress {
    pub(crate) fn new(
        client: reqwest::Client,
        resolver: Arc<dyn Resolver>,
        allowed: AllowedHosts,
        limits: HttpLimits,
    ) -> Egress {
        Egress {
            client,
            resolver,
            allowed,
            limits,
            pinned: HashMap::new(),
        }
    }

    pub(crate) async fn get(
        &mut self,
        url: &str,
        headers: &[(String, String)],
    ) -> Result<HttpResponse, HttpError> {
        let parsed = Url::parse(url).map_err(|e| HttpError::InvalidUrl(format!("{url}: {e}")))?;
        if parsed.scheme() != "http" {
            return Err(HttpError::InvalidUrl(format!(
                "{url}: only http:// is supported"
            )));
        }
        if !self.allowed.permits(&parsed) {
            return Err(HttpError::NotAllowed(url.to_owned()));
        }
        let headers = request_headers(headers)?;
        let client = match (parsed.host(), parsed.port_or_known_default()) {
            (Some(Host::Domain(name)), Some(port)) => self.pinned(name, port).await?,
            _ => self.client.clone(),
        };
        let request = client
            .get(parsed)
            .headers(headers)
            .timeout(self.limits.timeout);
        fetch(request, self.limits.max_body).await.map_err(|e| {
            if e.is_timeout() {
                HttpError::Timeout
            } else {
                HttpError::Failed(format!("{url}: {e}"))
            }
        })
    }

    /// The client pinned to `name`'s addresses, resolving it on first use. A
    /// failed lookup is not kept (the check may try again); an answer is, even
    /// one that only names reserved addresses.
    async fn pinned(&mut self, name: &str, port: u16) -> Result<reqwest::Client, HttpError> {
        let key = (name.to_owned(), port);
        if let Some(pinned) = self.pinned.get(&key) {
            return pinned.clone();
        }
        let found = tokio::time::timeout(self.limits.timeout, self.resolver.lookup(name))
            .await
            .map_err(|_| HttpError::Timeout)?
            .map_err(|e| HttpError::Failed(format!("cannot resolve {name}: {e}")))?;
        if found.is_empty() {
            return Err(HttpError::Failed(format!("{name} has no address")));
        }
        let mut usable = Vec::new();
        let mut refused = Vec::new();
        for ip in found {
            let addr = SocketAddr::new(ip, port);
            match reserved(ip) {
                Some(kind) if !self.allowed.names(addr) => refused.push(format!("{ip} ({kind})")),
                _ => usable.push(addr),
            }
        }
        let pinned = if usable.is_empty() {
            Err(HttpError::NotAllowed(format!(
                "{name} resolves to {}, which lockstep does not reach through a name; to \
                 allow an address, list it in allow_hosts by address (http://ADDRESS:{port})",
                refused.join(", ")
            )))
        } else {
            client_builder()
                .resolve_to_addrs(name, &usable)
                .build()
                .map_err(|e| HttpError::Failed(format!("{name}: {e}")))
        };
        self.pinned.insert(key, pinned.clone());
        pinned
    }
}

async fn fetch(
    request: reqwest::RequestBuilder,
    max_body: usize,
) -> Result<HttpResponse, reqwest::Error> {
    let mut response = request.send().await?;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = response.chunk().await? {
        let room = max_body - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(entries: &[&str]) -> AllowedHosts {
        let entries: Vec<String> = entries.iter().map(|e| (*e).to_owned()).collect();
        AllowedHosts::parse("t", &entries).expect("valid entries")
    }

    #[test]
    fn matches_scheme_host_and_port() {
        let hosts = allowed(&["http://approvals.internal:8080", "http://Example.com"]);
        let permits = |u: &str| hosts.permits(&Url::parse(u).expect("url"));
        assert!(permits("http://approvals.internal:8080/a?b=c"));
        assert!(!permits("http://approvals.internal:8081/a"));
        assert!(!permits("http://approvals.internal/a"));
        assert!(permits("http://example.com:80/x"), "default port matches");
        assert!(!permits("http://evil.example.com/"));
        assert!(!permits("http://approvals.internal.evil:8080/"));
    }

    #[test]
    fn refuses_entries_that_are_not_origins() {
        for entry in [
            "approvals.internal",
            "http://h/path",
            "http://u:p@h",
            "https://h",
            "ftp://h",
        ] {
            let result = AllowedHosts::parse("t", &[entry.to_owned()]);
            assert!(result.is_err(), "{entry} should be refused");
        }
    }

    fn egress(hosts: AllowedHosts) -> Egress {
        Egress::new(
            client(),
            Arc::new(SystemResolver),
            hosts,
            HttpLimits::default(),
        )
    }

    /// Nothing listens on port 9 of loopback: a request that got as far as
    /// connecting would fail with `Failed`, not the refusal.
    #[tokio::test]
    async fn refuses_before_connecting() {
        let mut egress = egress(allowed(&["http://127.0.0.1:9"]));
        let result = egress.get("http://127.0.0.2:9/", &[]).await;
        assert!(matches!(result, Err(HttpError::NotAllowed(_))));
        let result = egress.get("not a url", &[]).await;
        assert!(matches!(result, Err(HttpError::InvalidUrl(_))));
    }

    #[tokio::test]
    async fn refuses_host_hop_by_hop_and_framing_headers_before_connecting() {
        let mut egress = egress(allowed(&["http://127.0.0.1:9"]));
        for name in [
            "Host",
            "connection",
            "Keep-Alive",
            "proxy-authorization",
            "Proxy-Connection",
            "TE",
            "trailer",
            "Transfer-Encoding",
            "content-length",
            "upgrade",
            "HTTP2-Settings",
            ":authority",
            "bad name",
        ] {
            let headers = [(name.to_owned(), "x".to_owned())];
            match egress.get("http://127.0.0.1:9/", &headers).await {
                Err(HttpError::NotAllowed(reason)) => {
                    assert!(
                        reason.starts_with(&format!("request header `{name}`")),
                        "{reason}"
                    )
                }
                other => panic!("{name}: expected a refusal, got {other:?}"),
            }
        }
        let headers = [("x-ok".to_owned(), "line\r\nhost: evil".to_owned())];
        let result = egress.get("http://127.0.0.1:9/", &headers).await;
        assert!(
            matches!(result, Err(HttpError::NotAllowed(_))),
            "{result:?}"
        );
        // An ordinary header goes through to the connection (which fails: port 9).
        let headers = [("authorization".to_owned(), "Bearer t".to_owned())];
        let result = egress.get("http://127.0.0.1:9/", &headers).await;
        assert!(matches!(result, Err(HttpError::Failed(_))), "{result:?}");
    }

    #[test]
    fn reserved_addresses_are_the_hosts_own_its_links_and_metadata() {
        for reserved_ip in [
            "127.0.0.1",
            "127.8.9.10",
            "::1",
            "::ffff:127.0.0.1",
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "169.254.1.1",
            "fe80::1",
            "0.0.0.0",
            "0.1.2.3",
            "::",
            "fd00:ec2::254",
            "100.100.100.200",
        ] {
            let ip: IpAddr = reserved_ip.parse().expect("an address");
            assert!(reserved(ip).is_some(), "{ip} should be reserved");
        }
        for ordinary in [
            "10.0.0.5",
            "192.168.1.1",
            "172.16.0.1",
            "8.8.8.8",
            "fd00::1",
            "2001:db8::1",
        ] {
            let ip: IpAddr = ordinary.parse().expect("an address");
            assert_eq!(reserved(ip), None, "{ip}");
        }
    }

    #[test]
    fn an_entry_names_an_address_with_its_port() {
        let hosts = allowed(&[
            "http://127.0.0.1:8080",
            "http://[::1]:9090",
            "http://localhost:7070",
        ]);
        let names = |addr: &str| hosts.names(addr.parse().expect("socket address"));
        assert!(names("127.0.0.1:8080"));
        assert!(names("[::ffff:127.0.0.1]:8080"));
        assert!(names("[::1]:9090"));
        assert!(!names("127.0.0.1:8081"));
        assert!(!names("127.0.0.1:7070"), "a name is not an address");
    }

    /// `localhost` resolves (through the system's resolver) to loopback only.
    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused() {
        let mut egress = egress(allowed(&["http://localhost:9"]));
        match egress.get("http://localhost:9/", &[]).await {
            Err(HttpError::NotAllowed(reason)) => {
                assert!(reason.starts_with("localhost resolves to "), "{reason}");
                assert!(reason.contains("(a loopback address)"), "{reason}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
