//! What every restore of one process shares: the journal, where reports go, the plugin
//! cache, the progress display, and the interrupt.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch as signal;

use super::progress::Progress;
use crate::journal::Journal;
use crate::plugins::LazyRuntime;

/// What every restore of one process shares.
pub struct Engine {
    pub journal: Arc<dyn Journal>,
    /// Where JSON and text reports are written, one pair per restore.
    pub reports_dir: PathBuf,
    /// The plugin runtime it lends its restores' checks.
    pub plugins: LazyRuntime,
    pub progress: Arc<dyn Progress>,
    pub interrupt: Interrupt,
}

/// Ctrl-C, as the engine sees it: before a decision it aborts the restore; after a decision
/// it changes nothing (only forward).
#[derive(Clone)]
pub struct Interrupt(signal::Receiver<bool>);

/// The restore was interrupted.
#[derive(Debug, Clone, Copy)]
pub struct Interrupted;

impl Interrupt {
    /// An interrupt and the handle that raises it.
    pub fn new() -> (signal::Sender<bool>, Interrupt) {
        let (tx, rx) = signal::channel(false);
        (tx, Interrupt(rx))
    }

    /// One that never fires.
    pub fn never() -> Interrupt {
        let (tx, rx) = signal::channel(false);
        // Keep the channel open forever: a dropped sender would read as "closed".
        std::mem::forget(tx);
        Interrupt(rx)
    }

    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Returns once the interrupt fires; never if it does not.
    pub async fn fired(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|set| *set).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Runs `fut` unless the interrupt fires first.
    pub async fn race<T>(&self, fut: impl Future<Output = T>) -> Result<T, Interrupted> {
        if self.is_set() {
            return Err(Interrupted);
        }
        let mut rx = self.0.clone();
        tokio::select! {
            out = fut => Ok(out),
            _ = rx.wait_for(|set| *set) => Err(Interrupted),
        }
    }
}
