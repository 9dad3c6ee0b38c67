//! The text report: what a person reads at the end of a restore, from the [`Report`] its JSON
//! is written from. The verdict first, then ends, collections, staging, verification, checks,
//! divergences and the jobs, failures grouped by cause so that a thousand failed jobs read as
//! a few lines.

use std::fmt::{self, Write as _};

use super::Report;
use crate::journal::Outcome;
use crate::milvus::JobState;

/// Up to this many jobs, the text report lists each one.
const FEW_JOBS: usize = 20;

/// Causes the text report lists; the rest are counted and left to the JSON report.
const CAUSES_SHOWN: usize = 12;

/// Failures grouped by cause: the same reason on many jobs and ends reads as one line.
struct Failures<'a> {
    /// In order of first appearance.
    causes: Vec<Cause<'a>>,
}

/// One masked reason: the ends it was seen on, how often, and the first job.
struct Cause<'a> {
    reason: String,
    ends: std::collections::BTreeSet<&'a str>,
    count: usize,
    first_job: &'a str,
    /// Its batch, or for a divergence its collection.
    first_of: &'a str,
}

impl<'a> Failures<'a> {
    /// From (end, reason, job id, batch or collection).
    fn of(failures: impl Iterator<Item = (&'a str, &'a str, &'a str, &'a str)>) -> Self {
        let mut causes: Vec<Cause<'a>> = Vec::new();
        for (end, reason, job, what) in failures {
            let reason = masked(reason);
            match causes.iter_mut().find(|c| c.reason == reason) {
                Some(cause) => {
                    cause.ends.insert(end);
                    cause.count += 1;
                }
                None => causes.push(Cause {
                    reason,
                    ends: [end].into(),
                    count: 1,
                    first_job: job,
                    first_of: what,
                }),
            }
        }
        Failures { causes }
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, verb: &str) -> fmt::Result {
        for c in self.causes.iter().take(CAUSES_SHOWN) {
            let ends: Vec<&str> = c.ends.iter().copied().collect();
            writeln!(
                f,
                "  {} {verb} on {}: {} (first: job {}, {})",
                c.count,
                ends.join(", "),
                c.reason,
                c.first_job,
                c.first_of
            )?;
        }
        if self.causes.len() > CAUSES_SHOWN {
            writeln!(
                f,
                "  … {} more causes in the JSON report",
                self.causes.len() - CAUSES_SHOWN
            )?;
        }
        Ok(())
    }
}

/// `reason` with what differs from one job to the next masked, so one cause groups: the
/// restore id in staging paths, and every run of five digits or more (job, segment and
/// collection ids), each kept as its first digits and an ellipsis.
fn masked(reason: &str) -> String {
    let staging = format!("{}/", crate::storage::STAGING_ROOT);
    let mut text = String::with_capacity(reason.len());
    let mut rest = reason;
    while let Some(at) = rest.find(&staging) {
        text.push_str(&rest[..at + staging.len()]);
        text.push_str("<restore>");
        rest = &rest[at + staging.len()..];
        rest = rest.find('/').map_or("", |end| &rest[end..]);
    }
    text.push_str(rest);
    let mut out = String::with_capacity(text.len());
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        if digits.len() >= 5 {
            out.push_str(&digits[..2]);
            out.push('…');
        } else {
            out.push_str(digits);
        }
        digits.clear();
    };
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

impl fmt::Display for Report {
    /// The text report: the verdict first, then ends, collections, divergences, checks and
    /// the jobs that did not end Completed (all of them when there are few).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_verdict(f)?;
        self.write_ends(f)?;
        self.write_collections(f)?;
        self.write_staging(f)?;
        self.write_verification(f)?;
        self.write_checks(f)?;
        self.write_divergences(f)?;
        self.write_jobs(f)
    }
}

/// The text report's sections, in the order [`Report`]'s `Display` writes them.
impl Report {
    /// The verdict, the job, the summary (or the refusals) and the time taken.
    fn write_verdict(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.ran {
            let how = match self.outcome.committed() {
                true => "committed",
                false => "ran",
            };
            writeln!(
                f,
                "already {how} as {} at {}: not run again; the report below is that run's",
                self.restore_id, self.finished_at
            )?;
        }
        // The outcome in its one spelling (README's exit codes), and what to do where a
        // person must act.
        let hint = match self.outcome {
            Outcome::Incomplete => ": run `lockstep recover`",
            Outcome::Unverified => ": `lockstep verify` once it can be asked",
            Outcome::HostFailed => ": nothing was written on any end",
            Outcome::Lost => ": the journal's record says how it ends",
            _ => "",
        };
        writeln!(f, "restore {}  [{}{hint}]", self.restore_id, self.outcome)?;
        writeln!(
            f,
            "  job {} (backup {}), exit code {}",
            self.job_name,
            self.backup,
            self.exit_code()
        )?;
        // A refusal's summary is its reasons, listed below: said once.
        if self.refusals.is_empty() {
            writeln!(f, "  {}", self.summary)?;
        } else {
            let n = self.refusals.len();
            writeln!(
                f,
                "  refused for {n} reason{}:",
                if n == 1 { "" } else { "s" }
            )?;
            for reason in &self.refusals {
                writeln!(f, "  refused: {reason}")?;
            }
        }
        if let Some(why) = &self.rerun_because {
            writeln!(f, "  run again: {why}")?;
        }
        let notes = &self.preflight;
        if let Some(ms) = notes.clock_waited_ms {
            let waited = match ms {
                0..1000 => format!("{ms} ms"),
                _ => format!("{:.1} s", ms as f64 / 1000.0),
            };
            writeln!(
                f,
                "  waited {waited} for every end's clock to pass the backup's newest row"
            )?;
        }
        if !notes.mixed_builds.is_empty() {
            writeln!(
                f,
                "  the ends run different builds ({}), restored as allow_mixed_builds allows",
                notes.mixed_builds.join(", ")
            )?;
        }
        if !notes.gate_not_read.is_empty() {
            writeln!(
                f,
                "  replicated import gate not read on {}: no management URI in the host config",
                notes.gate_not_read.join(", ")
            )?;
        }
        let secs = self
            .finished_at
            .duration_since(self.started_at)
            .as_secs_f64();
        writeln!(f, "  started {} · took {secs:.1}s", self.started_at)?;
        Ok(())
    }

    /// Each end with its role, address, version and job states.
    fn write_ends(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.ends.is_empty() {
            writeln!(f, "\nends")?;
            let states = self.states_per_end();
            for end in &self.ends {
                let counts = states.get(&end.name).map_or(String::new(), |m| {
                    m.iter()
                        .map(|(s, n)| format!("{s}={n}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                });
                writeln!(
                    f,
                    "  {:<10} {:<16} {:<28} {:<12} {counts}",
                    end.role.to_string(),
                    end.name,
                    end.uri,
                    end.version.as_deref().unwrap_or("?"),
                )?;
            }
        }
        Ok(())
    }

    /// Each collection with its rows and where it was committed.
    fn write_collections(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.collections.is_empty() {
            writeln!(f, "\ncollections")?;
            for c in &self.collections {
                let rows = match (c.deleted, c.live) {
                    (Some(deleted), Some(live)) => {
                        format!("inserted={} deleted={deleted} live={live}", c.inserted)
                    }
                    _ => format!("inserted={} (deletes not read)", c.inserted),
                };
                let imported = match c.imported.is_empty() {
                    true => String::new(),
                    false => {
                        let per_end: Vec<String> = c
                            .imported
                            .iter()
                            .map(|(end, n)| format!("{end}={n}"))
                            .collect();
                        format!(" imported {}", per_end.join(" "))
                    }
                };
                writeln!(
                    f,
                    "  {:<36} ← {:<30} partitions={} batches={} {rows}{imported} {}",
                    c.target,
                    c.source,
                    c.partitions,
                    c.batches,
                    if c.committed {
                        "committed"
                    } else {
                        "not committed"
                    },
                )?;
                if let Some(route) = c.l0_deletes {
                    writeln!(f, "    L0 deletes {route}")?;
                }
            }
        }
        Ok(())
    }

    /// What was staged, where and how.
    fn write_staging(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = &self.staging {
            writeln!(
                f,
                "\nstaging  {} files, {} bytes ({} through this host) under {} on {}{}",
                s.files,
                s.bytes,
                s.bytes_streamed,
                s.prefix,
                s.destinations.join(", "),
                if s.cleaned_up { "; cleaned up" } else { "" },
            )?;
            if !s.transfers.is_empty() {
                let ways: Vec<String> = s
                    .transfers
                    .iter()
                    .map(|(way, n)| format!("{n} {}", way.label()))
                    .collect();
                writeln!(f, "         {}", ways.join(", "))?;
            }
        }
        Ok(())
    }

    /// What a query on every end showed.
    fn write_verification(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(v) = &self.verification {
            let verdict = match (v.passed(), v.mismatches().next()) {
                (true, _) => "every end shows the live rows",
                (false, Some(_)) => "SOME END SHOWS OTHER ROWS",
                (false, None) => "not every collection could be asked",
            };
            writeln!(f, "\nverified by count(*): {verdict}")?;
            write!(f, "{v}")?;
        }
        Ok(())
    }

    /// Each check with its verdict.
    fn write_checks(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.checks.is_empty() {
            writeln!(f, "\nchecks")?;
            for c in &self.checks {
                writeln!(
                    f,
                    "  {:<24} {:<14} {:<8} {}ms {}",
                    c.name,
                    // Phase's Display writes without padding.
                    c.phase.to_string(),
                    c.status,
                    c.elapsed_ms,
                    c.detail.as_deref().unwrap_or("")
                )?;
            }
        }
        Ok(())
    }

    /// The ends that did not show what the target committed, one line per cause.
    fn write_divergences(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.divergences.is_empty() {
            writeln!(
                f,
                "\nDIVERGENCES (committed on the target, not visible on these ends)"
            )?;
            let groups = Failures::of(self.divergences.iter().map(|d| {
                (
                    d.end.as_str(),
                    d.reason.as_str(),
                    d.job_id.as_str(),
                    d.collection.as_str(),
                )
            }));
            groups.write(f, "diverged")?;
        }
        Ok(())
    }

    /// The jobs (all when few) and why those that did not complete did not.
    fn write_jobs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let every_job_done = self.jobs.iter().all(|j| {
            j.states
                .iter()
                .all(|s| s.state == Some(JobState::Completed))
        });
        if !self.jobs.is_empty() && (self.jobs.len() <= FEW_JOBS || !every_job_done) {
            writeln!(f, "\njobs")?;
        }
        if self.jobs.len() <= FEW_JOBS {
            for j in &self.jobs {
                let mut line = String::new();
                for s in &j.states {
                    let state = s.state.map_or("-".to_string(), |s| s.to_string());
                    let _ = write!(line, " {}={state}", s.end);
                    if let Some(rows) = s.imported_rows {
                        let _ = write!(line, " ({rows} rows)");
                    }
                }
                writeln!(
                    f,
                    "  {:<48} job {:<20}{line}",
                    j.batch,
                    j.job_id.as_deref().unwrap_or("-"),
                )?;
            }
        }
        // Why jobs did not end Completed, one line per cause whatever their number: the
        // JSON report has every job on every end.
        let unfinished = self.jobs.iter().flat_map(|j| {
            j.states
                .iter()
                .filter(|s| s.state != Some(JobState::Completed))
                .map(move |s| {
                    let why = match (&s.reason, s.state) {
                        (Some(reason), _) => reason.clone(),
                        (None, Some(state)) => format!("left {state}"),
                        (None, None) => "never seen".to_string(),
                    };
                    (
                        s.end.as_str(),
                        why,
                        j.job_id.as_deref().unwrap_or("-"),
                        j.batch.as_str(),
                    )
                })
        });
        let unfinished: Vec<(&str, String, &str, &str)> = unfinished.collect();
        if !unfinished.is_empty() {
            Failures::of(
                unfinished
                    .iter()
                    .map(|(e, r, j, b)| (*e, r.as_str(), *j, *b)),
            )
            .write(f, "did not complete")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_keeps_the_cause_and_drops_the_ids() {
        assert_eq!(
            masked("job 448293190903759186 failed at lockstep-staging/a.b.1/x/12"),
            "job 44… failed at lockstep-staging/<restore>/x/12"
        );
    }
}
