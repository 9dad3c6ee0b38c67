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

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// The modules each engine module names through `super::` or `crate::engine::` (a name
    /// that is not a module comes through this one's re-exports: `mod`), tests left out.
    fn uses() -> BTreeMap<String, BTreeSet<String>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
        let files: BTreeMap<String, String> = std::fs::read_dir(&dir)
            .expect("src/engine")
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "rs"))
            .map(|path| {
                let name = path.file_stem().expect("a file name");
                let text = std::fs::read_to_string(&path).expect("a source file");
                (name.to_string_lossy().into_owned(), text)
            })
            .collect();
        let reference =
            regex::Regex::new(r"(?:super|crate::engine)::(\{[^}]*\}|\w+)").expect("the pattern");
        let re_export = regex::Regex::new(r"(?m)^pub use (\w+)::").expect("the pattern");
        let mut graph = BTreeMap::new();
        for (module, text) in &files {
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
            let names: Vec<&str> = if module == "mod" {
                re_export
                    .captures_iter(code)
                    .filter_map(|c| c.get(1))
                    .map(|m| m.as_str())
                    .collect()
            } else {
                reference
                    .captures_iter(code)
                    .filter_map(|c| c.get(1))
                    .flat_map(|m| m.as_str().trim_matches(['{', '}']).split(','))
                    .filter_map(|item| item.trim().split("::").next())
                    .filter(|name| !name.is_empty())
                    .collect()
            };
            let named = names
                .into_iter()
                .map(|name| match files.contains_key(name) {
                    true => name.to_string(),
                    false => "mod".to_string(),
                })
                .filter(|name| name != module)
                .collect();
            graph.insert(module.clone(), named);
        }
        graph
    }

    /// A cycle through `from`, if there is one: the modules in order.
    fn cycle_from(
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        let last = path.last().expect("a start").clone();
        for next in graph.get(&last).into_iter().flatten() {
            if let Some(at) = path.iter().position(|m| m == next) {
                let mut cycle = path[at..].to_vec();
                cycle.push(next.clone());
                return Some(cycle);
            }
            path.push(next.clone());
            if let Some(cycle) = cycle_from(graph, path) {
                return Some(cycle);
            }
            path.pop();
        }
        None
    }

    #[test]
    fn the_engine_modules_form_no_cycle() {
        let graph = uses();
        assert!(graph.len() > 20, "read the engine's modules: {graph:?}");
        assert!(
            graph["run"].contains("staging") && graph["staging"].contains("gate"),
            "the reader sees the uses: {graph:?}"
        );
        for module in graph.keys() {
            if let Some(cycle) = cycle_from(&graph, &mut vec![module.clone()]) {
                panic!("engine modules import each other: {}", cycle.join(" → "));
            }
        }
    }

    #[test]
    fn the_cycle_finder_finds_one() {
        let graph = BTreeMap::from([
            ("a".to_string(), BTreeSet::from(["b".to_string()])),
            ("b".to_string(), BTreeSet::from(["c".to_string()])),
            ("c".to_string(), BTreeSet::from(["a".to_string()])),
        ]);
        assert_eq!(
            cycle_from(&graph, &mut vec!["a".into()]),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
    }
}
