//! `/metrics` in Prometheus's text format, gathered at scrape time: restores by outcome from
//! the journal's outcome index (so they survive restarts and cover the fleet, and cost the
//! same however long the history), the reaction-time histogram and staged bytes of what this
//! process finished and runs, its journal calls, and the watcher's counters.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::progress::LiveProgress;
use super::watch::WatchStats;
use crate::journal::index::outcome_labels;
use crate::journal::measured::{BUCKETS, Op, REACTION_BUCKETS, Stats};

/// The metrics of the journal's records by outcome (`None` when they could not be counted),
/// what this host's journal calls met and finished, its running restores, what its runner
/// holds (tasks, wanted jobs) and its watched directory.
pub fn render(
    outcomes: Option<&BTreeMap<&'static str, u64>>,
    calls: &Stats,
    live: &LiveProgress,
    (tasks, wanted): (usize, usize),
    watch: Option<&WatchStats>,
) -> String {
    let finished = calls.finished();
    let mut out = String::new();
    // Every outcome has a line, a zero included, so a dashboard's rate has a series.
    let by_outcome = outcome_labels().map(|label| {
        let n = outcomes.and_then(|o| o.get(label)).copied();
        (label, n.unwrap_or(0))
    });
    let _ = writeln!(
        out,
        "# HELP lockstep_restores Restores in the journal by outcome (running: no outcome yet)."
    );
    let _ = writeln!(out, "# TYPE lockstep_restores gauge");
    for (outcome, n) in by_outcome {
        let _ = writeln!(out, "lockstep_restores{{outcome=\"{outcome}\"}} {n}");
    }

    let _ = writeln!(
        out,
        "# HELP lockstep_import_jobs Import jobs of this host's running restores, per end and state."
    );
    let _ = writeln!(out, "# TYPE lockstep_import_jobs gauge");
    let mut jobs: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (_, l) in live.running() {
        for (end, states) in &l.jobs {
            for (state, n) in states {
                *jobs.entry((end.clone(), state.to_string())).or_default() += n;
            }
        }
    }
    for ((end, state), n) in &jobs {
        let _ = writeln!(
            out,
            "lockstep_import_jobs{{end=\"{}\",state=\"{state}\"}} {n}",
            escape(end)
        );
    }

    let _ = writeln!(
        out,
        "# HELP lockstep_reaction_seconds From the last end reporting Uncommitted to the commit going out, per restore this process finished."
    );
    let _ = writeln!(out, "# TYPE lockstep_reaction_seconds histogram");
    for (le, n) in REACTION_BUCKETS.iter().zip(finished.reaction_buckets) {
        let _ = writeln!(out, "lockstep_reaction_seconds_bucket{{le=\"{le}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "lockstep_reaction_seconds_bucket{{le=\"+Inf\"}} {}",
        finished.reactions
    );
    let _ = writeln!(
        out,
        "lockstep_reaction_seconds_sum {}",
        finished.reaction_sum
    );
    let _ = writeln!(
        out,
        "lockstep_reaction_seconds_count {}",
        finished.reactions
    );

    let _ = writeln!(
        out,
        "# HELP lockstep_staged_bytes Bytes staged by the restores this process finished and those it runs."
    );
    let _ = writeln!(out, "# TYPE lockstep_staged_bytes gauge");
    let running_staged: u64 = live
        .running()
        .iter()
        .filter_map(|(_, l)| l.staging.map(|s| s.bytes_done))
        .sum();
    let _ = writeln!(
        out,
        "lockstep_staged_bytes {}",
        finished.staged_bytes + running_staged
    );

    // A journal that cannot be counted, or a record in it that does not read, is seen here
    // rather than as restores that went missing.
    for (name, help, v) in [
        (
            "lockstep_journal_listed",
            "1 when the journal's records could be counted for this scrape, 0 when not (the counts above are then empty).",
            u64::from(outcomes.is_some()),
        ),
        (
            "lockstep_journal_unreadable_records",
            "Journal records that do not read (the log names each), as the last whole read of the journal (at start, then every 10 minutes, or a whole listing) and the listings since met them.",
            calls.unreadable().len() as u64,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name} {v}");
    }

    let _ = writeln!(
        out,
        "# HELP lockstep_runner_tracked_jobs Jobs this host's runner holds in memory: tasks running or waiting for a slot, and jobs a request or a watched job file wants. Back to 0 once every request ended and no job file is watched."
    );
    let _ = writeln!(out, "# TYPE lockstep_runner_tracked_jobs gauge");
    let _ = writeln!(out, "lockstep_runner_tracked_jobs{{map=\"tasks\"}} {tasks}");
    let _ = writeln!(
        out,
        "lockstep_runner_tracked_jobs{{map=\"wanted\"}} {wanted}"
    );
    journal_calls(calls, &mut out);

    if let Some(w) = watch {
        for (name, help, v) in [
            (
                "lockstep_watch_relists_total",
                "Listings of the watched directory.",
                &w.relists,
            ),
            (
                "lockstep_watch_reads_total",
                "Job files read because their size, mtime or inode changed.",
                &w.reads,
            ),
            (
                "lockstep_watch_refused_total",
                "Job files refused as invalid.",
                &w.refused,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", v.load(Ordering::Relaxed));
        }
    }
    out
}

/// A label value with `\`, `"` and newlines escaped, as the text format requires.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The journal's calls by operation: a latency histogram and the calls it could not answer.
fn journal_calls(calls: &Stats, out: &mut String) {
    let _ = writeln!(
        out,
        "# HELP lockstep_journal_seconds How long this host's journal calls took, by operation."
    );
    let _ = writeln!(out, "# TYPE lockstep_journal_seconds histogram");
    for op in Op::ALL {
        let (stats, op) = (calls.of(op), op.label());
        for (n, le) in stats.buckets.iter().zip(BUCKETS) {
            let n = n.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "lockstep_journal_seconds_bucket{{op=\"{op}\",le=\"{le}\"}} {n}"
            );
        }
        let calls = stats.calls.load(Ordering::Relaxed);
        let seconds = stats.micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(
            out,
            "lockstep_journal_seconds_bucket{{op=\"{op}\",le=\"+Inf\"}} {calls}"
        );
        let _ = writeln!(out, "lockstep_journal_seconds_sum{{op=\"{op}\"}} {seconds}");
        let _ = writeln!(out, "lockstep_journal_seconds_count{{op=\"{op}\"}} {calls}");
    }
    let _ = writeln!(
        out,
        "# HELP lockstep_journal_failures_total Journal calls the journal could not answer (a busy or lost claim is an answer), by operation."
    );
    let _ = writeln!(out, "# TYPE lockstep_journal_failures_total counter");
    for op in Op::ALL {
        let n = calls.of(op).failures.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "lockstep_journal_failures_total{{op=\"{}\"}} {n}",
            op.label()
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::Silent;

    /// Every query of `examples/serve/grafana.json` names a metric `/metrics` serves (a
    /// histogram by its `_bucket`, `_sum` or `_count` series), and every metric served is on
    /// the dashboard.
    #[test]
    fn the_grafana_dashboard_queries_only_served_metrics() {
        fn exprs<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
            match v {
                serde_json::Value::Object(map) => {
                    for (key, value) in map {
                        match (key.as_str(), value.as_str()) {
                            ("expr", Some(expr)) => out.push(expr),
                            _ => exprs(value, out),
                        }
                    }
                }
                serde_json::Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
                _ => {}
            }
        }
        let text = render(
            Some(&BTreeMap::new()),
            &Stats::default(),
            &LiveProgress::new(Arc::new(Silent)),
            (0, 0),
            Some(&WatchStats::default()),
        );
        let served: BTreeMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .collect();
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../examples/serve/grafana.json"))
                .expect("the dashboard is JSON");
        let mut queries = Vec::new();
        exprs(&dashboard, &mut queries);
        assert!(queries.len() >= 7, "{queries:?}");
        let mut used = std::collections::BTreeSet::new();
        for query in queries {
            let names = query.match_indices("lockstep_").map(|(at, _)| {
                let rest = &query[at..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            });
            for name in names {
                let metric = if served.contains_key(name) {
                    name
                } else {
                    ["_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|suffix| name.strip_suffix(suffix))
                        .filter(|base| served.get(base) == Some(&"histogram"))
                        .unwrap_or_else(|| panic!("{query}: `{name}` is not served:\n{text}"))
                };
                used.insert(metric);
            }
        }
        let unused: Vec<_> = served.keys().filter(|m| !used.contains(*m)).collect();
        assert!(unused.is_empty(), "not on the dashboard: {unused:?}");
    }

    #[test]
    fn an_empty_journal_has_a_zero_for_every_outcome_and_no_negative_zero() {
        let text = render(
            Some(&BTreeMap::new()),
            &Stats::default(),
            &LiveProgress::new(Arc::new(Silent)),
            (0, 0),
            None,
        );
        assert!(text.contains("lockstep_reaction_seconds_sum 0\n"), "{text}");
        assert!(!text.contains("-0"), "{text}");
        for outcome in outcome_labels() {
            let line = format!("lockstep_restores{{outcome=\"{outcome}\"}} 0");
            assert!(text.contains(&line), "no {line}:\n{text}");
        }
    }
}
