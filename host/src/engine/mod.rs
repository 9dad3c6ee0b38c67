//! The restore, end to end (DESIGN.md §1): preflight, plan, DDL, staging, checks, import,
//! hold, decision, commit, completion and report. Stages take and return values; this module
//! is the only caller of each, and owns abort and roll-forward.

pub mod schedule;
