//! A TCP relay on loopback between one host and one server, which a test can cut: what a
//! network partition looks like from the host. While cut, the connections it carried are
//! dropped and new ones are accepted and then never answered, as a peer whose packets are
//! lost is never answered; healed, it relays again.

use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// One relay; stops relaying when dropped.
pub struct Relay {
    address: String,
    cut: Arc<watch::Sender<bool>>,
    /// The host's side of every connection the cut silenced, kept open (so the host sees no
    /// close) until the cut heals.
    silenced: Silenced,
    task: JoinHandle<()>,
}

type Silenced = Arc<Mutex<Vec<TcpStream>>>;

impl Relay {
    /// A relay on a free loopback port to `to` (`host:port`). Within a Tokio runtime.
    pub fn start(to: &str) -> anyhow::Result<Relay> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a relay")?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let address = listener.local_addr()?.to_string();
        let cut = Arc::new(watch::channel(false).0);
        let silenced = Silenced::default();
        let task = tokio::spawn(relay(
            listener,
            to.to_owned(),
            Arc::clone(&cut),
            Arc::clone(&silenced),
        ));
        Ok(Relay {
            address,
            cut,
            silenced,
            task,
        })
    }

    /// `host:port` the host connects to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Cuts the host off: what it had open goes dead, and nothing new gets through.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Relays again. The connections the cut silenced close now, as a host's connections
    /// across a long partition are reset when it heals.
    pub fn heal(&self) {
        self.cut.send_replace(false);
        self.silenced.lock().expect("no panics under it").clear();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(
    listener: TcpListener,
    to: String,
    cut: Arc<watch::Sender<bool>>,
    silenced: Silenced,
) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            return;
        };
        if *cut.borrow() {
            silenced.lock().expect("no panics under it").push(inbound);
            continue;
        }
        let carried = carry(inbound, to.clone(), cut.subscribe(), Arc::clone(&silenced));
        tokio::spawn(carried);
    }
}

/// Relays one connection until either side closes it or the relay is cut.
async fn carry(
    mut inbound: TcpStream,
    to: String,
    mut cut: watch::Receiver<bool>,
    silenced: Silenced,
) {
    let Ok(mut outbound) = TcpStream::connect(&to).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        _ = async { drop(cut.wait_for(|cut| *cut).await) } => {
            // A partition does not say goodbye: the host's side goes quiet, open, with
            // nothing answering (the server's side may close: the server sees the host go).
            let _ = outbound.shutdown().await;
            silenced.lock().expect("no panics under it").push(inbound);
        }
    }
}
