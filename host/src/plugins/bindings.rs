//! Typed bindings for the `check` world, generated from the WIT at build time.
//!
//! Storage and HTTP imports are async so a check waiting on them suspends its
//! fiber instead of blocking a tokio worker, and the wall-time limit (a
//! `tokio::time::timeout` around the call) bounds those waits too: epochs
//! only fire while wasm runs.

wasmtime::component::bindgen!({
    world: "check",
    path: "../wit/lockstep-plugin@0.1.0",
    imports: {
        "lockstep:plugin/host.head-object": async,
        "lockstep:plugin/host.list-objects": async,
        "lockstep:plugin/host.staged-files": async,
        "lockstep:plugin/host.http-get": async,
        default: trappable,
    },
    exports: { default: async },
});

pub(crate) use lockstep::plugin::host as wit_host;
pub(crate) use lockstep::plugin::types as wit_types;
