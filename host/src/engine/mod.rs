//! The restore, end to end (DESIGN.md §1). The modules in the order a restore meets them:
//!
//! - `restore`: [`Engine::run`] and [`Engine::plan`]: the journal's earlier attempts, a new
//!   attempt's claim and record.
//! - `run`: `run_attempt` owns one attempt: its keeper, the work, the rollback and the
//!   outcome. The work: [`preflight`] (every reason to refuse, found before anything is
//!   written: `streams` probes each replication, [`builds`] the ends' builds and gates,
//!   [`clock`] their clocks against the backup's newest row), `checks`, then `ddl` (databases, collections, partitions, indexes on the
//!   target; mirrors awaited), `staging` and the import `gate`, and the commit groups
//!   (`group`, each owning its tracker and returning how it ended; `two_phase`: hold,
//!   commit, complete, abort; `auto_commit` for the routes that cannot hold) side by side,
//!   then `verification` (what a query on every end sees, once every end completed),
//!   `rollback` (what the record's one rule names) and `outcome` (one function from facts). `error`: why a restore stops before its decision, with causes kept.
//! - `attempt`: the keeper that owns the attempt's journal record and alone writes it, and
//!   the handle the stages send it typed changes through; its `fence` is asked right
//!   before every action on an end (a host that lost its claim acts no more).
//! - `recover`: finishing what a crash or a lost host left, from the journal record.
//! - `poll` and [`schedule`]: how the ends are looked at; `ends`: the clusters;
//!   [`report`]: the outcome for people and scripts.
//!
//! Stages take the values they read and return results; only the keeper changes the
//! record. No module of the crate imports one that imports it back
//! (`tests/module_graph.rs`).

mod attempt;
mod auto_commit;
pub mod builds;
mod checks;
pub mod clock;
mod create;
mod ddl;
pub mod discover;
mod ends;
mod error;
pub mod faults;
mod fence;
mod gate;
mod group;
mod outcome;
mod poll;
mod preflight;
mod process;
pub mod progress;
mod recover;
mod refusal;
pub mod report;
mod restore;
mod retry;
mod rollback;
pub mod route;
mod rows;
mod run;
pub mod schedule;
mod staging;
mod streams;
mod two_phase;
mod verification;

pub use ends::{EndClient, Ends, RecoverError};
pub use process::{Engine, Interrupt, Interrupted};
pub use progress::{Logged, Progress, Silent};
pub use recover::{clean_left_stage, recorded_stores, recover};
pub use refusal::{EndRunning, Refusal};
pub use report::Report;
pub use restore::{EndFiles, EndPlan, PlanOutput};
