//! Milvus's storage formats, as a backup holds them: what lockstep reads to count and check
//! a backup's rows, and what milvus-sim reads when it imports and writes when it generates a
//! backup. One codec for both, so the emulator and the tool cannot drift apart.
//!
//! - [`storage`]: which codec a segment's `storage_version` calls for; an unknown one is
//!   named as unreadable.
//! - [`binlog`]: binlog objects in storage version 1 (and 0): the event envelope around a
//!   Parquet payload, insert logs of one field each, delta logs in both of their forms.
//! - [`column_group`]: storage versions 2 and 3, plain Parquet files whose columns carry
//!   their field ids.
//! - [`value`]: one row's value of one field, read from either layout or from a query's
//!   answer, and compared as Milvus keeps it.
//!
//! A panic of the Parquet reader on a damaged file is that file's error in both layouts;
//! [`panic_is_a_bad_payload`] lets a program's panic hook tell those from its own.

pub mod binlog;
mod caught;
pub mod column_group;
pub mod storage;
pub mod value;

pub use caught::panic_is_a_bad_payload;
