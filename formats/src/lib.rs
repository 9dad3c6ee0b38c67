//! Milvus's storage formats, as a backup holds them: what lockstep reads to count and check
//! a backup's rows, and what milvus-sim reads when it imports and writes when it generates a
//! backup. One codec for both, so the emulator and the tool cannot drift apart.
//!
//! - [`binlog`]: binlog objects in storage version 1 (and 0): the event envelope around a
//!   Parquet payload, insert logs of one field each, delta logs in both of their forms.

pub mod binlog;
