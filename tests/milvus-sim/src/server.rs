//! Starting clusters and serving them: one loopback port per cluster answers gRPC (HTTP/2,
//! h2c), REST v2 and the control API (HTTP/1.1), as a Milvus proxy answers on 19530; a
//! second answers the management API, as Milvus's metrics port does on 9091.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use axum::serve::ListenerExt as _;
use milvus_proto::common::{
    ConnectionParam, CrossClusterTopology, MilvusCluster, ReplicateConfiguration,
};
use milvus_proto::milvus::milvus_service_server::MilvusServiceServer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tower::ServiceExt;

use crate::cluster::{Cluster, Ports, Registry, Serving};
use crate::merr::MilvusError;
use crate::storage::{self, StorageError};
use crate::topology::{ReplicationSpec, Topology};
use crate::{control, grpc, management, rest};

/// How long a stopping server waits for in-flight requests before it lets them go.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// How long a restart the control API asked for waits before the port closes: the 202 that
/// answers the request goes out first.
const RESTART_ANSWER_GRACE: Duration = Duration::from_millis(20);

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cluster '{cluster}': {source}")]
    Storage {
        cluster: String,
        #[source]
        source: StorageError,
    },
    #[error("cluster '{cluster}': cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        cluster: String,
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("cluster '{cluster}': cannot serve TLS: {source}")]
    Tls {
        cluster: String,
        #[source]
        source: crate::tls::TlsError,
    },
    #[error("cluster '{cluster}': the topology's replication config was refused: {source}")]
    Replication {
        cluster: String,
        #[source]
        source: MilvusError,
    },
}

/// Clusters started from one topology, serving on loopback until dropped or shut down.
pub struct Sim {
    registry: Arc<Registry>,
    order: Vec<String>,
}

impl Sim {
    /// Starts every cluster of `topology`, then applies its replication short form (if any) to
    /// every cluster in it, with each cluster's real URI and pchannels.
    pub async fn start(topology: Topology) -> Result<Sim, SimError> {
        let registry = Arc::new(Registry::default());
        let mut order = Vec::new();
        for spec in topology.clusters {
            let id = spec.id.clone();
            let port = spec.port;
            let storage = storage::open(&spec.storage).map_err(|source| SimError::Storage {
                cluster: id.clone(),
                source,
            })?;
            let management_port = spec.management_port;
            let cluster = Cluster::new(spec, storage, Arc::downgrade(&registry));
            let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
            let wanted = Ports {
                plain: loopback(port),
                tls: Some(loopback(0)),
                management: loopback(management_port),
            };
            let listeners = Listeners::bind(&cluster, wanted).await?;
            start_serving(&cluster, listeners).await;
            registry.insert(cluster);
            order.push(id);
        }
        let sim = Sim { registry, order };
        if let Some(replication) = &topology.replication {
            sim.apply_short_form(replication)?;
        }
        Ok(sim)
    }

    fn apply_short_form(&self, replication: &ReplicationSpec) -> Result<(), SimError> {
        let members: Vec<Cluster> = std::iter::once(&replication.primary)
            .chain(&replication.secondaries)
            .map(|id| self.cluster(id))
            .collect();
        let config = ReplicateConfiguration {
            clusters: members
                .iter()
                .map(|c| MilvusCluster {
                    cluster_id: c.id().to_owned(),
                    connection_param: Some(ConnectionParam {
                        uri: c.uri(),
                        token: c.spec().token.clone().unwrap_or_default(),
                    }),
                    pchannels: c.pchannels().to_vec(),
                })
                .collect(),
            cross_cluster_topology: replication
                .secondaries
                .iter()
                .map(|s| CrossClusterTopology {
                    source_cluster_id: replication.primary.clone(),
                    target_cluster_id: s.clone(),
                })
                .collect(),
        };
        for cluster in &members {
            cluster.set_default_lag(replication.stream_lag);
            cluster
                .apply_configuration(&config)
                .map_err(|source| SimError::Replication {
                    cluster: cluster.id().to_owned(),
                    source,
                })?;
        }
        Ok(())
    }

    /// The cluster with this id.
    ///
    /// # Panics
    /// If the topology had no such cluster: a mistake in the test that asked.
    pub fn cluster(&self, id: &str) -> Cluster {
        self.registry
            .get(id)
            .unwrap_or_else(|| panic!("no cluster '{id}' in this sim (clusters: {:?})", self.order))
    }

    /// `http://127.0.0.1:PORT` of a cluster (see [`Sim::cluster`] for the panic).
    pub fn uri(&self, id: &str) -> String {
        self.cluster(id).uri()
    }

    /// Every cluster, in topology order.
    pub fn clusters(&self) -> Vec<Cluster> {
        self.order.iter().map(|id| self.cluster(id)).collect()
    }

    /// Stops serving every cluster and every job task.
    pub async fn shutdown(self) {
        for cluster in self.clusters() {
            stop_serving(&cluster).await;
            cluster.stop_drivers();
            cluster.stop_streams();
        }
        self.registry.clear();
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        // Streams hold tasks that reach the registry; clearing it ends the cycle.
        self.registry.clear();
    }
}

/// One port, three faces: REST and control routes by path; everything else goes to gRPC when
/// it is a gRPC request, and is a 404 as gin answers it otherwise (tonic's own fallback would
/// answer an unknown REST path with a gRPC "unimplemented" that HTTP clients cannot read).
fn app(cluster: &Cluster) -> axum::Router {
    let grpc = tonic::service::Routes::new(MilvusServiceServer::new(grpc::MilvusGrpc::new(
        cluster.clone(),
    )))
    .prepare()
    .into_axum_router();
    let to_grpc = move |request: axum::extract::Request| {
        let grpc = grpc.clone();
        async move {
            let is_grpc = request
                .headers()
                .get(http::header::CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
            if is_grpc {
                let response = grpc.oneshot(request).await;
                response.into_response()
            } else {
                (http::StatusCode::NOT_FOUND, "404 page not found").into_response()
            }
        }
    };
    axum::Router::new()
        .merge(rest::router(cluster.clone()))
        .merge(control::router(cluster.clone()))
        .fallback(to_grpc)
}

/// The ports of one cluster, bound: its own, its TLS port when it has one, and its
/// management port ([`crate::management`]).
struct Listeners {
    plain: TcpListener,
    tls: Option<TlsListener>,
    management: TcpListener,
}

impl Listeners {
    /// Binds each port on the address `wanted` gives it (port 0: any free one) and records
    /// where they are; `wanted.tls` is where the TLS port goes when the cluster's spec asks
    /// for one.
    async fn bind(cluster: &Cluster, wanted: Ports) -> Result<Listeners, SimError> {
        let (plain, plain_addr) = bind(cluster, wanted.plain).await?;
        let tls = match wanted.tls {
            Some(addr) => bind_tls(cluster, addr).await?,
            None => None,
        };
        let (management, management_addr) = bind(cluster, wanted.management).await?;
        cluster.bound(Ports {
            plain: plain_addr,
            tls: tls.as_ref().map(|(_, addr)| *addr),
            management: management_addr,
        });
        Ok(Listeners {
            plain,
            tls: tls.map(|(listener, _)| listener),
            management,
        })
    }
}

/// A listener whose connections have finished their TLS handshake. A client that fails it
/// (no certificate where one is asked for, a CA it does not trust) is dropped, as Milvus
/// drops it.
struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((mut stream, addr)) = self.tcp.accept().await else {
                continue;
            };
            no_delay(&mut stream);
            match self.acceptor.accept(stream).await {
                Ok(tls) => return (tls, addr),
                Err(e) => tracing::debug!(%addr, error = %e, "TLS handshake failed"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

async fn start_serving(cluster: &Cluster, listeners: Listeners) {
    let (stop, stopped) = oneshot::channel::<()>();
    let app = app(cluster);
    let management = management::router(cluster.clone());
    let id = cluster.id().to_owned();
    let restarts = cluster.clone();
    let task = tokio::spawn(async move {
        let stopped = async {
            let _ = stopped.await;
        };
        // Milvus's Go server answers with Nagle off, as Go's net package sets every TCP
        // connection. With it on, a response's trailers wait for the client's delayed ACK
        // (40 ms on Linux) behind its body: every unary call took 40 ms.
        let listener = listeners.plain.tap_io(no_delay);
        let plain = axum::serve(listener, app.clone()).with_graceful_shutdown(stopped);
        let tls = async {
            match listeners.tls {
                Some(tls) => axum::serve(tls, app).await,
                None => std::future::pending().await,
            }
        };
        // A restart the control API asked for runs on a task of its own: it stops this one.
        let restart_asked = async {
            let down_for = restarts.restart_requested().await;
            tokio::spawn(restart_asked_for(restarts.clone(), down_for));
            std::future::pending().await
        };
        // The other ports stop with the plain one: a restart takes them all down.
        let result = tokio::select! {
            r = plain => r,
            r = tls => r,
            r = axum::serve(listeners.management.tap_io(no_delay), management) => r,
            r = restart_asked => r,
        };
        if let Err(e) = result {
            tracing::error!(cluster = %id, error = %e, "server stopped");
        }
    });
    cluster.serving_started(Serving { stop, task }).await;
}

/// A restart the control API asked for, once the answer to the request went out. Boxed as a
/// `Send` future: the restart starts serving again, and serving is what waits for the
/// request, so the future would otherwise contain itself.
fn restart_asked_for(
    cluster: Cluster,
    down_for: Duration,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        tokio::time::sleep(RESTART_ANSWER_GRACE).await;
        if let Err(e) = restart(&cluster, down_for).await {
            tracing::error!(cluster = cluster.id(), error = %e, "restart failed");
        }
    })
}

/// Turns Nagle's algorithm off on an accepted connection (see [`start_serving`]).
pub(crate) fn no_delay(tcp: &mut tokio::net::TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY");
    }
}

/// A listener on `addr` (port 0: any free one) for `cluster`, with the address it got.
async fn bind(cluster: &Cluster, addr: SocketAddr) -> Result<(TcpListener, SocketAddr), SimError> {
    let failed = |source| SimError::Bind {
        cluster: cluster.id().to_owned(),
        port: addr.port(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    Ok((listener, bound))
}

/// The cluster's TLS port, bound on `addr` (port 0: any) when its spec has one, with the
/// address it got.
async fn bind_tls(
    cluster: &Cluster,
    addr: SocketAddr,
) -> Result<Option<(TlsListener, SocketAddr)>, SimError> {
    let Some(spec) = &cluster.spec().tls else {
        return Ok(None);
    };
    let acceptor = spec.acceptor().map_err(|source| SimError::Tls {
        cluster: cluster.id().to_owned(),
        source,
    })?;
    let (tcp, bound) = bind(cluster, addr).await?;
    Ok(Some((TlsListener { tcp, acceptor }, bound)))
}

async fn stop_serving(cluster: &Cluster) {
    if let Some(serving) = cluster.serving_stopped().await {
        let _ = serving.stop.send(());
        let abort = serving.task.abort_handle();
        if tokio::time::timeout(SHUTDOWN_GRACE, serving.task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

/// Restarts a cluster as a Milvus whose processes restart with etcd intact: the port refuses
/// connections for `down_for`, job tasks stop, and everything resumes from the kept state.
pub async fn restart(cluster: &Cluster, down_for: Duration) -> Result<(), SimError> {
    let ports = cluster.ports();
    tracing::info!(cluster = cluster.id(), ?down_for, "restarting");
    stop_serving(cluster).await;
    cluster.stop_drivers();
    tokio::time::sleep(down_for).await;
    let listeners = Listeners::bind(cluster, ports).await?;
    start_serving(cluster, listeners).await;
    cluster.resume_drivers();
    Ok(())
}

impl Cluster {
    /// Restarts this cluster (see [`restart`]).
    pub async fn restart(&self, down_for: Duration) -> Result<(), SimError> {
        restart(self, down_for).await
    }
}
