//! lockstep restores milvus-backup backups into a Milvus cluster that replicates to other
//! clusters over CDC, so that the restored data becomes visible at the same logical point
//! on every end. It drives Milvus's two-phase import (`auto_commit=false`): every job is
//! held Uncommitted until its mirror is Uncommitted on every secondary, checks run, the
//! decision is made durable, and the target alone is committed.
//!
//! # Layout
//!
//! - [`config`]: the host config (`lockstep.toml` or milvus-backup's `backup.yaml`): clusters,
//!   stores and credentials.
//! - [`job`]: the validated restore job, reached from a TOML file, CLI flags or a REST body.
//! - [`backup`]: milvus-backup's format: meta reading, paths, batch planning.
//! - [`milvus`]: REST v2 and gRPC clients, version and replication topology.
//! - [`storage`]: object storage per end, staging of binlogs, probes.
//! - [`engine`]: preflight, DDL, the two-phase state machine and the report.
//! - [`journal`]: durable restore state, embedded or shared through etcd.
//! - [`plugins`]: the wasmtime host that runs pre-commit checks.
//! - [`serve`]: the watched job directory and the REST API.
//! - [`verify`]: what a query on every end sees of a finished restore.
//! - [`owner_only`]: the state directory's files and directories, its user's alone.

pub mod backup;
pub mod config;
pub mod diagnostic;
pub mod engine;
pub mod job;
pub mod journal;
mod json_error;
pub mod milvus;
pub mod owner_only;
pub mod plugins;
pub mod serve;
pub mod storage;
pub mod verify;
