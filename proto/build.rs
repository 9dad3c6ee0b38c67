//! Compiles the .proto subset with protox, so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/common.proto",
        "proto/schema.proto",
        "proto/milvus.proto",
        "proto/msg.proto",
        "proto/etcd/kv.proto",
        "proto/etcd/rpc.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // MilvusService has an RPC named `Connect`; the transport helper `connect()` would
        // clash with it, so clients are built from a `tonic::transport::Channel` instead.
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}
