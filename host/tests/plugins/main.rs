//! Host tests for the wasm check runtime, against the real components that
//! `plugins/build.sh` builds into `plugins/dist/`.

mod cache;
mod examples;
mod memory;
mod run_checks;
mod sandbox;
mod support;
