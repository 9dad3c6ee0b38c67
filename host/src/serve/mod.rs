//! lockstep as a long-running service: a watched job directory and the REST API, both
//! running restores through one [`Runner`] over one journal (embedded, or etcd for a
//! fleet). The engine does each restore; this module decides which restores to run, when,
//! how many at once, and which to cancel, and answers what the journal says about them.
//!
//! - [`runner`]: starting, deduplicating, cancelling and recovering restores; the fleet's
//!   takeover of restores whose host died.
//! - [`watch`]: the directory watcher (notify + a debouncer, used only as a trigger to
//!   re-list the directory); [`told`]: the line it tells of each restore's end.
//! - [`api`]: milvus-backup-compatible REST routes, health, metrics, the OpenAPI document;
//!   `backups` serves milvus-backup's read-only routes beside them, `envelope` the answer
//!   every route gives, and `state` what their handlers share.
//! - Who may call it: [`access`] (bearer tokens and their scopes), [`origin`] (requests a
//!   web page could make a browser send), [`listen`] (plain TCP or TLS, and what a request
//!   knows of its connection), [`certs`] (the TLS certificate, re-read when rotated).
//! - [`progress`]: the live view of running restores, for `get_restore` and `/metrics`.
//! - [`reports`]: the report files and the `latest` links; [`retention`]: which finished
//!   restores' records and reports go.

pub mod access;
pub mod api;
mod backups;
pub mod certs;
mod envelope;
pub mod listen;
mod metrics;
pub mod openapi;
pub mod origin;
pub mod progress;
pub mod reports;
pub mod retention;
pub mod runner;
mod state;
pub mod told;
pub mod watch;

pub use progress::LiveProgress;
pub use runner::{Rerun, RestoreHandle, Runner};
pub use state::ApiState;
pub use watch::{WatchOptions, watch};
