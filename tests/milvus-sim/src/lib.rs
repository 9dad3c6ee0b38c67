//! milvus-sim: a faithful multi-cluster Milvus emulator.

pub mod fixtures;
