//! The seeded fault-schedule runner (issue 6): for each seed, a whole restore under a
//! schedule of faults drawn from that seed, then every invariant of DESIGN.md §2 checked
//! against what the run left. The way FoundationDB and TigerBeetle test themselves
//! (docs/milvus-facts.md §6.3): cases nobody thought of, replayable by seed.
//!
//! - [`schedule`]: what a seed draws (world, job, timed faults), as printable data.
//! - [`runner`]: runs one scenario against milvus-sim and the real `lockstep` binary.
//! - [`checker`]: the invariants over the ends' final states, the journal and the reports.
//! - [`crate::etcd`]: a seed's own etcd, which a fault can stop and start again.
//! - [`trace`]: the event trace a violation prints.

pub mod checker;
pub mod runner;
pub mod schedule;
pub mod trace;
