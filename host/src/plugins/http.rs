//! The HTTP GET a check may make: only to origins its job file allows, never
//! following redirects, never through a proxy, with a short timeout and a
//! capped body. A refused URL is refused before any connection is made.

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use url::Url;

use super::Error;
use super::bindings::wit_host::{HttpError, HttpResponse};

/// One allowed origin: scheme, host and port must all match.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    scheme: String,
    host: String,
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
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default()?,
        })
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

/// The client every check shares (connection pool); redirects off so a 30x
/// cannot lead outside the allow list, and no proxy from the environment so
/// the request goes exactly where the allow list says.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .expect("a client with no TLS and no proxy always builds")
}

pub(crate) async fn get(
    client: &reqwest::Client,
    allowed: &AllowedHosts,
    limits: HttpLimits,
    url: &str,
    headers: &[(String, String)],
) -> Result<HttpResponse, HttpError> {
    let parsed = Url::parse(url).map_err(|e| HttpError::InvalidUrl(format!("{url}: {e}")))?;
    if parsed.scheme() != "http" {
        return Err(HttpError::InvalidUrl(format!(
            "{url}: only http:// is supported"
        )));
    }
    if !allowed.permits(&parsed) {
        return Err(HttpError::NotAllowed(url.to_owned()));
    }
    let mut request = client.get(parsed).timeout(limits.timeout);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let fetch = async {
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
            let room = limits.max_body - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        Ok::<_, reqwest::Error>(HttpResponse {
            status,
            headers,
            body,
            truncated,
        })
    };
    fetch.await.map_err(|e| {
        if e.is_timeout() {
            HttpError::Timeout
        } else {
            HttpError::Failed(format!("{url}: {e}"))
        }
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

    #[tokio::test]
    async fn refuses_before_connecting() {
        let hosts = allowed(&["http://127.0.0.1:9"]);
        let result = get(
            &client(),
            &hosts,
            HttpLimits::default(),
            "http://127.0.0.2:9/",
            &[],
        )
        .await;
        assert!(matches!(result, Err(HttpError::NotAllowed(_))));
        let result = get(&client(), &hosts, HttpLimits::default(), "not a url", &[]).await;
        assert!(matches!(result, Err(HttpError::InvalidUrl(_))));
    }
}
