//! End-to-end tests: the `lockstep` binary against milvus-sim, one module per behaviour.

mod access;
mod atomicity;
mod browser;
mod clocks_and_builds;
mod clouds;
mod crash;
mod cross_origin;
mod drop_in;
mod fault_runner;
mod full_disk;
mod held_imports;
mod invariants;
mod plugins;
mod refusals;
mod rows;
mod s3;
mod snapshot;
mod star;
mod status_page;
mod tls;
mod two_phase;
mod verify;
mod versions;
