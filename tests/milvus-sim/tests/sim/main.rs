//! Integration tests of milvus-sim: clusters on loopback ports driven over REST, gRPC and the
//! control API, one module per behaviour. Stage durations are a few milliseconds, so waits are
//! short; tests wait for states, never for fixed times.

mod common;

mod auth;
mod binary;
mod commit_fence;
mod faults;
mod grpc;
mod import_rules;
mod management;
mod mirroring;
mod partition_key;
mod replication_config;
mod restart;
mod scale;
mod schema_ddl;
mod two_phase;
