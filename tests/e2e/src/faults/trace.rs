//! The event trace a violation prints: every request each end received, every job state
//! change, and what the runner did (faults, process starts and ends), in time order.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use milvus_sim::ClusterSnapshot;

/// Wall-clock milliseconds, the clock milvus-sim stamps its records with.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub at_ms: i64,
    /// Who saw it: an end's name, or "runner".
    pub source: String,
    pub what: String,
}

/// What the runner did, stamped as it happened.
#[derive(Debug, Clone, Default)]
pub struct RunnerLog {
    events: Vec<Event>,
}

impl RunnerLog {
    pub fn note(&mut self, what: impl Into<String>) {
        self.events.push(Event {
            at_ms: now_ms(),
            source: "runner".into(),
            what: what.into(),
        });
    }
}

/// Every event of a run, oldest first.
#[derive(Debug, Clone)]
pub struct Trace {
    events: Vec<Event>,
}

impl Trace {
    pub fn build(runner: &RunnerLog, ends: &[(String, ClusterSnapshot)]) -> Trace {
        let mut events = runner.events.clone();
        for (end, state) in ends {
            if state.requests_dropped > 0 {
                events.push(Event {
                    at_ms: 0,
                    source: end.clone(),
                    what: format!("{} older requests fell off the log", state.requests_dropped),
                });
            }
            for r in &state.requests {
                let outcome = match (&r.fault, r.code) {
                    (Some(fault), _) => format!("fault {fault:?}"),
                    (None, Some(code)) => format!("code {code}"),
                    (None, None) => "no answer".into(),
                };
                let job = r
                    .job_id
                    .as_deref()
                    .map_or(String::new(), |j| format!(" job {j}"));
                events.push(Event {
                    at_ms: r.at.unix_ms,
                    source: end.clone(),
                    what: format!("{:?} {}{job} -> {outcome}", r.protocol, r.route),
                });
            }
            for j in &state.jobs {
                for h in &j.history {
                    events.push(Event {
                        at_ms: h.at.unix_ms,
                        source: end.clone(),
                        what: format!(
                            "job {} ({}.{}/{}) -> {:?}{}",
                            j.job_id,
                            j.db_name,
                            j.collection_name,
                            j.partition_name,
                            h.state,
                            if h.state == milvus_sim::jobs::JobState::Failed {
                                format!(": {}", j.reason)
                            } else {
                                String::new()
                            }
                        ),
                    });
                }
            }
        }
        // Stable: events of one source at one millisecond keep their order.
        events.sort_by_key(|e| e.at_ms);
        Trace { events }
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let start = self.events.iter().map(|e| e.at_ms).find(|&t| t > 0);
        for e in &self.events {
            let rel = start.map_or(0, |s| e.at_ms - s);
            writeln!(f, "{rel:>7} ms  {:<6} {}", e.source, e.what)?;
        }
        Ok(())
    }
}
