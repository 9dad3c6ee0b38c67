//! Milvus's gRPC wire types, generated from the subset of `milvus-proto` in `proto/`.
//!
//! The package names (`milvus.proto.milvus`, `milvus.proto.common`, `milvus.proto.schema`),
//! the service name and every field number are Milvus's own, so a real Milvus, pymilvus
//! and milvus-sim all read what these types write. Messages carry only the fields lockstep
//! and milvus-sim use; protobuf skips the fields a peer sends that are not listed here.
//! Both the host's client and milvus-sim's server are built from these same files.

#![allow(clippy::large_enum_variant, clippy::doc_overindented_list_items)]

pub mod common {
    tonic::include_proto!("milvus.proto.common");
}

pub mod schema {
    tonic::include_proto!("milvus.proto.schema");
}

pub mod milvus {
    tonic::include_proto!("milvus.proto.milvus");
}

/// `msgpb`: a position in a channel's WAL, as milvus-backup keeps a backup's checkpoints.
pub mod msg {
    tonic::include_proto!("milvus.proto.msg");
}

/// The Avro schema of a Milvus snapshot manifest (`SegmentDescription`) of metadata format 2,
/// as Milvus's `internal/snapshotio` declares it: the reader of snapshot bundles edits it
/// into the other formats' schemas, and milvus-sim writes its bundles with it.
pub const SNAPSHOT_MANIFEST_SCHEMA_V2: &str = include_str!("../proto/snapshot_manifest_v2.avsc");

/// The part of etcd v3's API the lockstep journal calls (a fleet's shared journal), built
/// here with protox like Milvus's, so no build of lockstep needs a system `protoc`.
pub mod etcd {
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }

    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}
