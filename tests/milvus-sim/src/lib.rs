//! milvus-sim: a faithful multi-cluster Milvus emulator.
//!
//! It behaves like Milvus 3.0 where lockstep touches it, closely enough that pymilvus cannot
//! tell the difference, and it can be told to fail as real deployments fail. Each cluster
//! listens on one loopback port serving gRPC (`milvus.proto.milvus.MilvusService`), the REST v2
//! import API and the control API `/sim/v1/...`. The contract is `docs/milvus-facts.md` §1–4.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use milvus_sim::{Sim, Topology};
//! let topology = Topology::from_toml_file("examples/sim/star.toml")?;
//! let sim = Sim::start(topology).await?;
//! let state = sim.cluster("b").control().state().await?;
//! println!("{} is {}", state.cluster_id, state.role);
//! # Ok(()) }
//! ```
//!
//! Layout:
//! - [`topology`]: the topology file, parsed and validated with located errors.
//! - [`server`]: [`Sim`], starting clusters, serving, restarts.
//! - [`cluster`]: one cluster's state, its one owner, and every rule that does not depend on
//!   the wire, split by concern (imports and the task that runs them, DDL, replication, CDC,
//!   queries, the control API's view, injected faults); the faces call it, it calls no face.
//! - [`catalog`]: databases, collections, partitions, indexes; the DDL ops.
//! - [`jobs`], [`options`], [`import_reader`]: import jobs, their options, and reading files
//!   from the cluster's storage.
//! - [`cdc`]: ordered streams from a primary to each secondary, with lag and pause.
//! - [`replication`]: the ReplicateConfiguration rules and roles.
//! - [`rest`], [`grpc`], [`control`]: the three faces of a cluster's port.
//! - [`management`]: the management API on a port of its own, as Milvus's metrics port.
//! - [`faults`]: injected job failures and API faults.
//! - [`fence`]: the commit fence, and the pchannels a rejected one stopped.
//! - [`request_log`]: the bounded record of requests each cluster answered.
//! - [`merr`], [`go_duration`], [`version`], [`storage`], [`tso`]: Milvus's error codes, Go
//!   durations, version rules, object storage, hybrid timestamps.
//! - [`fixtures`]: `gen-backup`, backups in milvus-backup's layout.

pub mod catalog;
pub mod cdc;
pub mod cluster;
pub mod control;
pub mod faults;
pub mod fence;
pub mod fixtures;
pub mod go_duration;
pub mod grpc;
pub mod import_reader;
pub mod jobs;
pub mod management;
pub mod merr;
pub mod options;
pub mod query;
pub mod rbac;
pub mod replication;
pub mod request_log;
pub mod rest;
pub mod server;
pub mod storage;
pub mod tls;
pub mod topology;
pub mod tso;
pub mod version;

pub use cluster::Cluster;
pub use control::{ClusterSnapshot, SimControl};
pub use server::{Sim, SimError};
pub use topology::Topology;

/// The face a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Rest,
    Grpc,
}
