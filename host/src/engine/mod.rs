//! The restore, end to end (DESIGN.md §1). The modules in the order a restore meets them:
//!
//! - `restore`: [`Engine::run`] and [`Engine::plan`]: the journal's earlier attempts, a new
//!   attempt's claim and record.
//! - `run`: one attempt, top to bottom: [`preflight`] (every reason to refuse, found before
//!   anything is written), `checks`, `ddl` (databases, collections, partitions, indexes on
//!   the target; mirrors awaited), `staging` and the import `gate`, the commit groups
//!   (`group`, each owning its tracker; `two_phase`: hold, commit, complete, abort;
//!   `auto_commit` for the routes that cannot hold), `rollback` (one, for every stop
//!   before a decision), and the outcome (`outcome`, one function from facts). `error`:
//!   why a restore stops before its decision, and the stages' typed failures.
//! - `attempt`: what the engine keeps of an attempt: its journal record and writes, phases,
//!   the first failure and the stop token it cancels, the sealed report; and its `fence`,
//!   asked right before every action on an end (a host that lost its claim acts no more).
//! - `recover`: finishing what a crash or a lost host left, from the journal record.
//! - `poll` and [`schedule`]: how the ends are looked at; `ends`: the clusters;
//!   [`report`]: the outcome for people and scripts.
//!
//! Stages take the values they read and return results; only `run`, `group` and `recover`
//! record phases, failures and outcomes. No module here imports one that imports it back
//! (`tests::the_engine_modules_form_no_cycle`).

mod attempt;
mod auto_commit;
mod checks;
mod ddl;
mod ends;
mod error;
pub mod faults;
mod fence;
mod gate;
mod group;
mod outcome;
mod poll;
pub mod preflight;
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

pub use ends::{EndClient, Ends, RecoverError};
pub use process::{Engine, Interrupt, Interrupted};
pub use progress::{Logged, Progress, Silent};
pub use recover::{clean_left_stage, recorded_stores, recover};
pub use refusal::Refusal;
pub use report::Report;
pub use restore::{EndFiles, EndPlan, PlanOutput};
