//! Where `serve` listens: plain TCP, or TLS with certificates re-read as they are rotated
//! ([`CertFiles`]). Each request learns its connection ([`Conn`]): the peer it came from
//! (what the journal records of who asked) and the local address and scheme it arrived by
//! (what the same-origin check holds its `Host` and `Origin` to).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;

use super::certs::CertFiles;

/// How long a client may take over its TLS handshake before it is dropped, so that
/// connections that never finish one do not pile up.
pub const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

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

/// The connections `serve` takes: accepted (and for TLS, past their handshake) by a task of
/// their own, so that one slow handshake holds no other connection back.
struct ApiListener {
    accepted: mpsc::Receiver<(Stream, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for ApiListener {
    type Io = Stream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(accepted) => accepted,
            // The accepting task ends only once this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

impl Connected<IncomingStream<'_, ApiListener>> for Conn {
    fn connect_info(stream: IncomingStream<'_, ApiListener>) -> Conn {
        let (tcp, scheme) = match stream.io() {
            Either::Left(tcp) => (tcp, Scheme::Http),
            Either::Right(tls) => (tls.get_ref().0, Scheme::Https),
        };
        // Without its local address no Host matches it, and every request is refused.
        let local = tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        Conn {
            peer: *stream.remote_addr(),
            local,
            scheme,
        }
    }
}

/// Serves `app` on `tcp` (over TLS with `tls`'s certificates) until `shutdown` resolves;
/// requests under way then finish.
pub async fn serve(
    tcp: TcpListener,
    tls: Option<Arc<CertFiles>>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let local = tcp.local_addr()?;
    let (sender, accepted) = mpsc::channel(ACCEPTED_QUEUE);
    tokio::spawn(accept(tcp, tls, sender));
    let listener = ApiListener { accepted, local };
    axum::serve(listener, app.into_make_service_with_connect_info::<Conn>())
        .with_graceful_shutdown(shutdown)
        .await
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
