//! milvus-sim: a faithful multi-cluster Milvus emulator.
