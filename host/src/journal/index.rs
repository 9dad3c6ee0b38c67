//! What a journal finds records by without reading every record: the names of its index
//! entries, the same in both backends (a file name under `journal/index/`, a key under
//! `{prefix}/index/`). Each entry is a name with nothing in it; the record stays the one
//! source of truth, and a reader checks every record an entry leads it to.
//!
//! - `started/…/{started}.{attempt}.{id}`: every record, in the order listings show them,
//!   so the newest `n` are the last `n` names.
//! - `open/{id}`: every record a sweep has work with (unfinished, or its staged files left).
//! - `outcome/{label}/{id}`: every record under its outcome, counted by `/metrics`.
//!
//! A save writes its entries before the record and removes the ones it no longer has after
//! it, so a crash between the two leaves an entry too many, never one too few: a record is
//! always found by the entries it needs (the etcd journal writes both in one transaction).

use super::{Outcome, RestoreId, RestoreRecord};

/// The label of each outcome in `/metrics` and in the outcome index, `running` for none yet.
pub fn outcome_label(o: Option<Outcome>) -> &'static str {
    match o {
        None => "running",
        Some(Outcome::Succeeded) => "succeeded",
        Some(Outcome::Unverified) => "unverified",
        Some(Outcome::Refused) => "refused",
        Some(Outcome::RolledBack) => "rolled_back",
        Some(Outcome::Diverged) => "diverged",
        Some(Outcome::PartlyCommitted) => "partly_committed",
        Some(Outcome::Incomplete) => "incomplete",
        Some(Outcome::HostFailed) => "host_failed",
        Some(Outcome::Lost) => "lost",
    }
}

/// Every label of [`outcome_label`], running first.
pub fn outcome_labels() -> impl Iterator<Item = &'static str> {
    std::iter::once(None)
        .chain(Outcome::ALL.map(Some))
        .map(outcome_label)
}

/// Microseconds in a day: the file journal keeps one directory of `started` names a day, so
/// that finding the newest reads today's names, not every name there is.
const DAY_MICROS: i64 = 86_400_000_000;

/// The name of `record` in the `started` index: when it started, in microseconds zero-padded
/// so that names sort as times do, then its attempt, then its id (unique).
pub fn started_name(record: &RestoreRecord) -> String {
    let micros = record.started_at.as_microsecond().max(0);
    format!("{micros:016}.{:05}.{}", record.attempt, record.id)
}

/// The file journal's directory of a `started` name: its day.
pub fn started_day(record: &RestoreRecord) -> String {
    let days = record.started_at.as_microsecond().max(0) / DAY_MICROS;
    format!("{days:06}")
}

/// The id a `started` name leads to; `None` for a name no save writes (the entry is skipped).
pub fn id_of_started(name: &str) -> Option<RestoreId> {
    let mut parts = name.splitn(3, '.');
    let (_, _, id) = (parts.next()?, parts.next()?, parts.next()?);
    RestoreId::parse(id).ok()
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;

    fn record(second: i64, attempt: u32) -> RestoreRecord {
        let id = RestoreId::new("job_v2", "abcdef012345", attempt);
        RestoreRecord {
            started_at: Timestamp::from_second(second).unwrap(),
            ..RestoreRecord::new(id, "job_v2", "abcdef012345", attempt, "bak", vec![])
        }
    }

    /// Names sort as listings do (by start, then attempt), across a change in the number of
    /// digits, and lead back to their id (whose own dots the split leaves alone).
    #[test]
    fn started_names_sort_by_start_then_attempt_and_name_their_id() {
        let records = [
            record(9, 2),
            record(9, 10),
            record(10, 1),
            record(1_700_000_000, 1),
        ];
        let names: Vec<String> = records.iter().map(started_name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names);
        for (r, name) in records.iter().zip(&names) {
            assert_eq!(id_of_started(name), Some(r.id.clone()), "{name}");
        }
        assert_eq!(started_day(&records[3]), "019675");
        assert_eq!(id_of_started("0000000001.00001"), None);
        assert_eq!(id_of_started("1.1.../etc/passwd"), None);
    }

    #[test]
    fn every_outcome_has_a_label_of_its_own() {
        let labels: std::collections::BTreeSet<_> = outcome_labels().collect();
        assert_eq!(labels.len(), Outcome::ALL.len() + 1);
    }
}
