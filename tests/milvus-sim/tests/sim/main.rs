//! Integration tests of milvus-sim: clusters on loopback ports driven over REST, gRPC and the
//! control API, one module per behaviour. Stage durations are a few milliseconds, so waits are
//! short; tests wait for states, never for fixed times.

mod common;

mod auth;
mod binary;
mod faults;
mod grpc;
mod import_rules;
mod mirroring;
mod partition_key;
mod replication_config;
mod restart;
mod scale;
mod two_phase;
