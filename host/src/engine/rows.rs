//! Row accounting (DESIGN.md §2, invariants 1 and 6): what every end says each job imported,
//! held against what the backup says the job's batch holds.
//!
//! The expectation is the plan's ([`ExpectedRows`]: the rows read from the batch's data, or
//! the meta's range where they could not be read), never the
//! server's own `totalRows`: a Milvus 2.3 whose import listed no files completes with both
//! at 0, and a Milvus 3.0 shows `importedRows == totalRows` from Sorting on, whatever it read.
//! A list answers states only, so the rows come from one describe per job and end, read once
//! the job is Uncommitted or past it there (Milvus's figure is final from then on).

use std::fmt;

use futures::StreamExt;
use tokio::time::Instant;

use super::ends::Ends;
use super::report::Divergence;
use super::retry::retry;
use super::two_phase::Tracker;
use crate::backup::ExpectedRows;
use crate::milvus::MilvusJobId;

/// Describes in flight at once across all ends.
const READS_IN_FLIGHT: usize = 32;

/// One end's figure for one job that the batch's expectation rejects, or that differs from
/// the target's: a mirror reads the same files and must count the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMismatch {
    pub end: String,
    pub job_id: String,
    pub batch: String,
    /// `db.collection`.
    pub collection: String,
    pub against: Against,
    pub imported: i64,
}

/// What an end's figure was held against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Against {
    Backup(ExpectedRows),
    /// The target's figure for the same job.
    Target(i64),
}

impl fmt::Display for RowMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: job {} ({}) imported {} rows, ",
            self.end, self.job_id, self.batch, self.imported
        )?;
        match self.against {
            Against::Backup(expected) => write!(f, "the backup holds {expected}"),
            Against::Target(rows) => write!(f, "the target {rows}"),
        }
    }
}

/// An end that would not say how many rows a job imported.
#[derive(Debug)]
pub struct Unreadable {
    pub end: String,
    pub job_id: MilvusJobId,
    pub source: crate::milvus::Error,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot read the rows job {} imported on {}: {}",
            self.job_id, self.end, self.source
        )
    }
}

impl std::error::Error for Unreadable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Reads, with one describe each, the imported rows of every job of `jobs` on every end
/// where the tracker last saw it Uncommitted or past it and its rows are not known yet,
/// into `tracker.jobs[j].imported`. Each describe is retried until `deadline`.
pub async fn read(
    ends: &Ends,
    tracker: &mut Tracker,
    jobs: &[usize],
    deadline: Instant,
) -> Result<(), Unreadable> {
    let mut wanted = Vec::new();
    for &j in jobs {
        let job = &tracker.jobs[j];
        let Some(id) = &job.job_id else { continue };
        for (end, seen) in job.seen.iter().enumerate() {
            let final_count = seen.as_ref().is_some_and(|s| s.state.is_ready_to_commit());
            if final_count && job.imported[end].is_none() {
                wanted.push((j, end, job.db.clone(), id.clone()));
            }
        }
    }
    let all = ends.all();
    let mut reads = futures::stream::iter(wanted)
        .map(|(j, end, db, id)| async move {
            let described = retry(deadline, || all[end].rest.describe(&db, &id)).await;
            (j, end, id, described)
        })
        .buffer_unordered(READS_IN_FLIGHT);
    while let Some((j, end, job_id, described)) = reads.next().await {
        match described {
            Ok(progress) => tracker.jobs[j].imported[end] = Some(progress.imported_rows),
            Err(source) => {
                return Err(Unreadable {
                    end: all[end].name.clone(),
                    job_id,
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Every (job, end) of `jobs` whose known imported rows the batch's expectation rejects, or,
/// on a mirror, differ from the target's. Jobs without an expectation (L0 batches, records
/// older than row accounting) and ends whose rows are not read yet are not judged.
pub fn mismatches(tracker: &Tracker, jobs: &[usize]) -> Vec<RowMismatch> {
    let mut out = Vec::new();
    for &j in jobs {
        let job = &tracker.jobs[j];
        let (Some(expected), Some(id)) = (job.expected, &job.job_id) else {
            continue;
        };
        let target = job.imported.first().copied().flatten();
        for (end, imported) in job.imported.iter().enumerate() {
            let Some(imported) = *imported else { continue };
            let against = if !expected.accepts(imported) {
                Against::Backup(expected)
            } else if let Some(target) = target.filter(|&t| end > 0 && t != imported) {
                Against::Target(target)
            } else {
                continue;
            };
            out.push(RowMismatch {
                end: tracker.end_names[end].clone(),
                job_id: id.to_string(),
                batch: job.batch_id.clone(),
                collection: job.collection.to_string(),
                against,
                imported,
            });
        }
    }
    out
}

/// After the decision, a job whose rows an end reports otherwise than the backup holds is
/// visible there with other data: a divergence, named like any other. Rows read before the
/// decision stand (Milvus's figure is final from Uncommitted on); only ends not read then,
/// such as those of a restore recovered past its decision, are read now.
pub async fn after_commit(
    ends: &Ends,
    tracker: &mut Tracker,
    jobs: &[usize],
    deadline: Instant,
) -> Vec<Divergence> {
    let mut divergences = Vec::new();
    if let Err(e) = read(ends, tracker, jobs, deadline).await {
        let collection = jobs
            .iter()
            .map(|&j| &tracker.jobs[j])
            .find(|j| j.job_id.as_ref() == Some(&e.job_id))
            .map(|j| j.collection.to_string())
            .unwrap_or_default();
        divergences.push(Divergence {
            end: e.end.clone(),
            job_id: e.job_id.to_string(),
            collection,
            reason: e.to_string(),
        });
    }
    for m in mismatches(tracker, jobs) {
        divergences.push(Divergence {
            reason: m.to_string(),
            end: m.end,
            job_id: m.job_id,
            collection: m.collection,
        });
    }
    divergences
}

/// The reason a restore stops for `found` (not empty): the first few mismatches, and how
/// many more there are.
pub fn failure(found: &[RowMismatch]) -> String {
    const SHOWN: usize = 3;
    let mut text = found
        .iter()
        .take(SHOWN)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if found.len() > SHOWN {
        text.push_str(&format!("; and {} more", found.len() - SHOWN));
    }
    format!("row accounting failed: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::poll::Seen;
    use crate::engine::two_phase::Tracked;
    use crate::milvus::JobState;

    fn tracker(expected: Option<ExpectedRows>, imported: [Option<i64>; 2]) -> Tracker {
        Tracker {
            end_names: vec!["a".into(), "b".into()],
            jobs: vec![Tracked {
                batch_id: "default.c/_default/data-0".into(),
                db: "default".into(),
                collection: "default.c".into(),
                partition: "_default".into(),
                expected,
                job_id: Some(MilvusJobId("7".into())),
                seen: vec![
                    Some(Seen {
                        state: JobState::Uncommitted,
                        progress: 99,
                        reason: None,
                    });
                    2
                ],
                imported: imported.to_vec(),
            }],
        }
    }

    const EXACT: ExpectedRows = ExpectedRows {
        inserted: 100,
        deletes: Some(0),
        exact: None,
    };

    #[test]
    fn a_batch_without_deletes_must_match_exactly_on_every_end() {
        assert!(mismatches(&tracker(Some(EXACT), [Some(100), Some(100)]), &[0]).is_empty());
        let short = mismatches(&tracker(Some(EXACT), [Some(100), Some(90)]), &[0]);
        assert_eq!(short.len(), 1);
        assert_eq!(short[0].end, "b");
        assert_eq!(short[0].imported, 90);
        assert_eq!(
            short[0].to_string(),
            "b: job 7 (default.c/_default/data-0) imported 90 rows, the backup holds 100"
        );
        let over = mismatches(&tracker(Some(EXACT), [Some(101), Some(100)]), &[0]);
        assert_eq!(over[0].end, "a");
    }

    #[test]
    fn deletes_allow_a_range_down_to_inserted_less_deletes() {
        let with_deletes = ExpectedRows {
            inserted: 1200,
            deletes: Some(37),
            exact: None,
        };
        for ok in [1163, 1200, 1180] {
            assert!(with_deletes.accepts(ok), "{ok}");
        }
        for bad in [1162, 1201, 0] {
            assert!(!with_deletes.accepts(bad), "{bad}");
        }
        assert_eq!(
            with_deletes.to_string(),
            "1163 to 1200 (1200 inserted, 37 deleted)"
        );
    }

    /// Issue 27's case: deletes the meta does not count, a segment 50 rows short. The range
    /// took it; the figure read from the data does not.
    #[test]
    fn an_exact_figure_from_the_data_accepts_nothing_else() {
        let read = ExpectedRows {
            inserted: 1250,
            deletes: None,
            exact: Some(1213),
        };
        assert!(read.accepts(1213));
        for bad in [1163, 1212, 1214, 1250] {
            assert!(!read.accepts(bad), "{bad}");
        }
        let range = ExpectedRows {
            exact: None,
            ..read
        };
        assert!(
            range.accepts(1163),
            "the meta's range passes the short segment"
        );
        assert_eq!(
            read.to_string(),
            "1213 (1250 inserted, 37 deleted by the batch's own deletes)"
        );
        let no_deletes = ExpectedRows {
            exact: Some(1250),
            ..read
        };
        assert_eq!(no_deletes.to_string(), "1250");
    }

    #[test]
    fn a_batch_with_rows_that_imports_nothing_fails_even_when_deletes_could_explain_it() {
        let all_deleted = ExpectedRows {
            inserted: 5,
            deletes: Some(5),
            exact: None,
        };
        assert!(!all_deleted.accepts(0));
        let uncounted = ExpectedRows {
            inserted: 5,
            deletes: None,
            exact: None,
        };
        assert!(!uncounted.accepts(0));
        assert!(uncounted.accepts(1));
        assert!(!uncounted.accepts(6));
        let empty = ExpectedRows {
            inserted: 0,
            deletes: Some(0),
            exact: None,
        };
        assert!(empty.accepts(0));
    }

    #[test]
    fn a_mirror_inside_the_range_that_counts_otherwise_than_its_target_is_a_mismatch() {
        let with_deletes = ExpectedRows {
            inserted: 100,
            deletes: Some(10),
            exact: None,
        };
        let found = mismatches(&tracker(Some(with_deletes), [Some(95), Some(91)]), &[0]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].against, Against::Target(95));
        assert_eq!(
            found[0].to_string(),
            "b: job 7 (default.c/_default/data-0) imported 91 rows, the target 95"
        );
        assert!(mismatches(&tracker(Some(with_deletes), [Some(95), Some(95)]), &[0]).is_empty());
    }

    #[test]
    fn unread_ends_and_batches_without_an_expectation_are_not_judged() {
        assert!(mismatches(&tracker(Some(EXACT), [None, Some(100)]), &[0]).is_empty());
        assert!(mismatches(&tracker(None, [Some(0), Some(3)]), &[0]).is_empty());
    }

    #[test]
    fn the_failure_names_the_first_mismatches_and_counts_the_rest() {
        let one = RowMismatch {
            end: "b".into(),
            job_id: "7".into(),
            batch: "x".into(),
            collection: "default.c".into(),
            against: Against::Backup(EXACT),
            imported: 0,
        };
        let text = failure(&vec![one; 5]);
        assert!(text.starts_with("row accounting failed: b: job 7 (x) imported 0 rows"));
        assert!(text.ends_with("; and 2 more"), "{text}");
    }
}
