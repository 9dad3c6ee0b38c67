//! What the API's handlers share.

use std::sync::Arc;

use super::runner::Runner;
use super::watch::WatchStats;

/// What the handlers share.
pub struct ApiState {
    pub runner: Arc<Runner>,
    /// The bearer token clients must send; `None` only on loopback.
    pub token: Option<String>,
    /// The watcher's counters when `serve` also watches a directory.
    pub watch: Option<Arc<WatchStats>>,
}
