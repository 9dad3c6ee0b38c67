//! What the API's handlers share.

use std::sync::Arc;

use super::access::Tokens;
use super::origin::AllowedOrigins;
use super::runner::Runner;
use super::watch::WatchStats;

/// What the handlers share.
pub struct ApiState {
    pub runner: Arc<Runner>,
    /// The bearer tokens clients must send, and what each may do; none only on loopback.
    pub tokens: Tokens,
    /// The names and origins requests may come through beyond the listener's own.
    pub allowed: AllowedOrigins,
    /// The watcher's counters when `serve` also watches a directory.
    pub watch: Option<Arc<WatchStats>>,
}
