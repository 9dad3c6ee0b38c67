//! The wasmtime host that runs pre-commit checks.
//!
//! A check is a WebAssembly component built against `wit/lockstep-plugin@0.1.0`
//! (world `check`). This module owns everything between a validated
//! [`Check`] and a verdict: compiling and caching components,
//! refusing ones whose imports do not match the WIT, running each call in a
//! fresh sandboxed store with CPU, memory and wall-time bounds, serving the
//! host imports (log, storage heads and lists through [`CheckHost`], the
//! allow-listed HTTP GET, the clock), and looping `retry-after` verdicts until
//! a check decides or its `max_wait` runs out. It leaves to the job module the
//! validation of a `[[check]]` table, to the engine when checks run and
//! what a failure aborts, and to the storage module how an end's storage is
//! reached: the engine hands a [`CheckHost`] in.
//!
//! Three lifetimes live in three places, as in Spin's core crate:
//! - [`PluginRuntime`], built once per process: the `Engine` (epoch
//!   interruption, pooling allocator when the machine allows it), the `Linker`
//!   with WASI p2 and the lockstep host interface, the epoch ticker thread and
//!   the on-disk compile cache.
//! - [`Plugin`], one per component file: compiled once (or deserialized from
//!   the cache) into an `InstancePre` whose imports were type-checked at load.
//! - A `Store<CheckState>` per call, with its limits and grants, dropped after
//!   the call whatever happened (a trap poisons the whole store).

mod bindings;
mod cache;
mod context;
mod host_services;
mod http;
mod inspect;
mod run_checks;
mod runtime;
mod spec;
mod state;
mod test_file;

use std::path::PathBuf;

pub use cache::CacheOutcome;
pub use context::{
    CheckCollection, CheckContext, CheckEnd, CheckImportJob, EndJobState, EndRole, JobState, Phase,
};
pub use host_services::{
    CheckHost, HostError, ObjectInfo, ObjectListing, StagedFiles, StagedListing, StagedObject,
    StoreCheckHost,
};
pub use http::{AllowedHosts, HttpLimits, Origin, Resolver, SystemResolver};
pub use inspect::{Inspection, inspect};
pub use run_checks::{CheckFailure, CheckReport, CheckStatus, LoadedCheck, run_checks};
pub use runtime::{
    Allocation, CheckError, CheckGrants, CheckRun, Plugin, PluginRuntime, RuntimeConfig, Verdict,
};
pub use spec::{
    Check, CheckLimits, CheckLimitsSection, CheckSection, MAX_CHECK_CALL_MS, MAX_CHECK_MEMORY_MIB,
    MAX_CHECK_WAIT_MS, OnError,
};
pub use state::{Clock, LogLevel, LogLine, LogSource};
pub use test_file::{TestFile, test_check};

/// Why a plugin could not be loaded or a check could not be set up. Returned
/// before a restore starts; a check that misbehaves while running is a
/// [`CheckError`] inside its [`CheckRun`] instead.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read plugin {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a wasm component: {reason}")]
    NotAComponent { path: PathBuf, reason: String },
    #[error(
        "{path} imports `{import}`, which lockstep does not provide (a check may import only \
         lockstep:plugin/host@0.1 and wasi:{{cli,clocks,filesystem,io,random,sockets}}@0.2)"
    )]
    UnknownImport { path: PathBuf, import: String },
    #[error("{path} does not match the check world of lockstep:plugin@0.1.0: {reason}")]
    WorldMismatch { path: PathBuf, reason: String },
    #[error("plugin compile cache in {dir}: {reason}")]
    Cache { dir: PathBuf, reason: String },
    #[error("cannot set up the wasm engine: {reason}")]
    Engine { reason: String },
    #[error("check `{check}`: allow_hosts entry `{entry}`: {reason}")]
    AllowHost {
        check: String,
        entry: String,
        reason: String,
    },
    #[error("cannot read test file {path}: {reason}")]
    TestFile { path: PathBuf, reason: String },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
