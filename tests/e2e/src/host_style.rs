//! A forward proxy on loopback for host-style S3 addressing (`BUCKET.oss.test`), as Aliyun
//! OSS, Tencent COS and Huawei OBS want it. Names such as `BUCKET.oss.test` resolve nowhere
//! here, so the client under test is pointed at this proxy (`HTTP_PROXY`). The proxy hands
//! every request to the S3 server with its `Host` header kept, from which moto takes the
//! bucket, and records the hosts it was asked for.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Headers of one hop, which a proxy does not pass on.
const HOP_BY_HOP: [HeaderName; 4] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

#[derive(Clone)]
struct Forward {
    /// The S3 server, `http://HOST:PORT`.
    upstream: String,
    client: reqwest::Client,
    hosts: Arc<Mutex<Vec<String>>>,
}

/// The running proxy; it stops with the test's runtime.
pub struct Proxy {
    pub address: SocketAddr,
    hosts: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` (`http://HOST:PORT`).
    pub async fn start(upstream: &str) -> anyhow::Result<Proxy> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let hosts = Arc::new(Mutex::new(Vec::new()));
        let state = Forward {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: reqwest::Client::builder().no_proxy().build()?,
            hosts: Arc::clone(&hosts),
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Proxy { address, hosts })
    }

    /// `http://127.0.0.1:PORT`, for `HTTP_PROXY`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every `Host` a request named, in order.
    pub fn hosts(&self) -> Vec<String> {
        self.hosts.lock().expect("the hosts lock").clone()
    }
}

async fn forward(State(to): State<Forward>, request: Request) -> Response {
    match pass_on(&to, request).await {
        Ok(response) => response,
        Err(e) => (StatusCode::BAD_GATEWAY, format!("{e:#}")).into_response(),
    }
}

async fn pass_on(to: &Forward, request: Request) -> anyhow::Result<Response> {
    let (parts, body) = request.into_parts();
    // A request to a proxy names its host in the URI and in `Host`; moto reads `Host`.
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .context("a request with no host")?;
    to.hosts.lock().expect("the hosts lock").push(host.clone());
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let body = axum::body::to_bytes(body, usize::MAX).await?;
    let mut headers = without_hop_headers(parts.headers);
    headers.insert(header::HOST, host.parse()?);
    let answer = to
        .client
        .request(parts.method, format!("{}{path}", to.upstream))
        .headers(headers)
        .body(body)
        .send()
        .await?;
    let status = answer.status();
    let headers = without_hop_headers(answer.headers().clone());
    let bytes: Bytes = answer.bytes().await?;
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}

fn without_hop_headers(mut headers: HeaderMap) -> HeaderMap {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers
}
