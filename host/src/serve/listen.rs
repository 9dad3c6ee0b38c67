//! Where `serve` listens: plain TCP, or TLS with certificates re-read as they are rotated
//! ([`CertFiles`]). Each request learns its connection ([`Conn`]): the peer it came from
//! (what the journal records of who asked) and the local address and scheme it arrived by
//! (what the same-origin check holds its `Host` and `Origin` to).
//!
//! No client holds a connection, or a stop, for as long as it likes: a handshake, a
//! request's headers (and an idle kept-alive connection's next ones) and its body each have
//! a limit, and once `serve` stops accepting, the requests under way get [`STOP_LIMIT`] to
//! finish before their connections are cut.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;
use tower::ServiceExt as _;

use super::certs::CertFiles;
use super::envelope::{Code, refused};

/// How long a client may take over its TLS handshake before it is dropped, so that
/// connections that never finish one do not pile up.
pub const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// How long a client may take to send a request's headers, counted from when its
/// connection is ready for one: the first request's and, on a kept-alive connection, the
/// next one's, so it is also how long an idle connection stays open (HTTP/1).
pub const HEADER_LIMIT: Duration = Duration::from_secs(10);

/// How long a request's body may take to arrive once its headers did.
pub const BODY_LIMIT: Duration = Duration::from_secs(10);

/// The largest body a route that changes something reads: a restore request is a few
/// kilobytes, and what would not fit is refused before it is read on.
const BODY_BYTES: usize = 1 << 20;

/// How long the requests under way may take to finish once `serve` stops accepting (Ctrl-C,
/// SIGTERM): restores run apart from the connections that asked for them, and a slow
/// client does not hold the stop any longer.
pub const STOP_LIMIT: Duration = Duration::from_secs(5);

/// How long accepting waits after an error that is not one connection's (out of file
/// descriptors, most often): trying again at once would spin while nothing is freed.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Connections whose handshake finished and that the server has not taken yet.
const ACCEPTED_QUEUE: usize = 64;

/// `http` or `https`: how this server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// The port a client leaves out of a URL, `Host` or `Origin`.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        })
    }
}

/// One connection as a request sees it.
#[derive(Debug, Clone, Copy)]
pub struct Conn {
    pub peer: SocketAddr,
    /// The address it arrived at: the listener's, or for a listener on every address
    /// (`0.0.0.0`, `[::]`) the one the client connected to.
    pub local: SocketAddr,
    pub scheme: Scheme,
}

type Stream = Either<TcpStream, TlsStream<TcpStream>>;

impl Conn {
    /// The connection `stream` from `peer`.
    fn of(stream: &Stream, peer: SocketAddr) -> Conn {
        let (tcp, scheme) = match stream {
            Either::Left(tcp) => (tcp, Scheme::Http),
            Either::Right(tls) => (tls.get_ref().0, Scheme::Https),
        };
        // Without its local address no Host matches it, and every request is refused.
        let local = tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        Conn {
            peer,
            local,
            scheme,
        }
    }
}

/// Serves `app` on `tcp` (over TLS with `tls`'s certificates) until `shutdown` resolves;
/// requests under way then get [`STOP_LIMIT`] to finish.
pub async fn serve(
    tcp: TcpListener,
    tls: Option<Arc<CertFiles>>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let (sender, mut accepted) = mpsc::channel(ACCEPTED_QUEUE);
    tokio::spawn(accept(tcp, tls, sender));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    (builder.http1())
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_LIMIT);
    let connections = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            next = accepted.recv() => match next {
                Some(next) => next,
                None => break,
            },
        };
        let conn = Conn::of(&stream, peer);
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: Request<_>| {
            request.extensions_mut().insert(ConnectInfo(conn));
            app.clone().oneshot(request.map(Body::new))
        });
        let served = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
        let served = connections.watch(served.into_owned());
        tokio::spawn(async move {
            if let Err(e) = served.await {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        });
    }
    // The accepting task ends with its receiver.
    drop(accepted);
    if tokio::time::timeout(STOP_LIMIT, connections.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still under way {}s after the stop were cut off",
            STOP_LIMIT.as_secs()
        );
    }
    Ok(())
}

/// Reads a request's body within [`BODY_LIMIT`] before its route sees it: 408 for a body
/// that does not arrive in time, 413 for one over [`BODY_BYTES`]. On the routes that take
/// one, so that a client that sends half a body holds no handler.
pub(super) async fn body_in_time(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let refuse = |status: StatusCode, msg: String| {
        tracing::warn!(status = status.as_u16(), reason = %msg, "refused a request");
        refused(status, Code::ParameterError, &parts.headers, msg)
    };
    match tokio::time::timeout(BODY_LIMIT, axum::body::to_bytes(body, BODY_BYTES)).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(e)) => refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body did not read ({e}); at most {BODY_BYTES} bytes are taken"),
        ),
        Err(_) => {
            let mut answer = refuse(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the body did not arrive within {}s of its headers",
                    BODY_LIMIT.as_secs()
                ),
            );
            // The rest of the body may still come: the connection cannot be read on.
            (answer.headers_mut()).insert(header::CONNECTION, HeaderValue::from_static("close"));
            answer
        }
    }
}

/// Accepts connections until the listener is dropped, each TLS handshake on a task of its
/// own.
async fn accept(
    tcp: TcpListener,
    tls: Option<Arc<CertFiles>>,
    sender: mpsc::Sender<(Stream, SocketAddr)>,
) {
    let tls = tls.map(|certs| {
        let acceptor = certs.acceptor();
        (certs, acceptor)
    });
    loop {
        let accepted = tokio::select! {
            () = sender.closed() => return,
            accepted = tcp.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::error!(error = %e, "cannot accept connections; trying again");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // A response's last frame must not wait for the client's delayed ACK (Nagle's
        // algorithm holds a small write behind an unacknowledged one for up to 40 ms).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let Some((certs, acceptor)) = &tls else {
            if sender.send((Either::Left(stream), peer)).await.is_err() {
                return;
            }
            continue;
        };
        let (certs, acceptor, sender) = (Arc::clone(certs), acceptor.clone(), sender.clone());
        tokio::spawn(async move {
            certs.refresh().await;
            match tokio::time::timeout(HANDSHAKE_LIMIT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = sender.send((Either::Right(tls), peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake not finished in time"),
            }
        });
    }
}

/// An error of one connection (gone before it was accepted), not of the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
