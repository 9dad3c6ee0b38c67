//! Retention: which finished restores' journal records and report files go (`[retention]`
//! of the host config), for `lockstep prune` and, at start and every [`PRUNE_EVERY`], for
//! `serve` and `watch`.
//!
//! A finished restore goes once it ended more than `keep` ago *and* it is not among the
//! `keep_last` newest finished restores (by start): either bound alone keeps it. Whatever the
//! bounds, a restore stays when it is unfinished (no outcome, or incomplete: a recovery still
//! has work), claimed (a host works on it; the journal's delete checks the claim in the same
//! step, [`Journal::remove`]), or asked for by a job file that is still in its watched
//! directory: the journal is what tells a watcher that a file's content already ran, so
//! removing its record would run it again. A record that does not read is never removed.
//! The reports of restores refused before they had a record are held to the same bounds
//! by their file's time.

use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

use crate::config::{HostConfig, Retention};
use crate::journal::{self, Journal, Outcome, Removal, RequestedBy, RestoreId, RestoreRecord};

/// How often `serve` and `watch` apply retention: bounds of days do not need more, and each
/// pass lists the whole journal.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Whether a pass removes what it may, or only says what it would remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Remove,
    /// Writes nothing, so asks for no claim (asking takes one): a restore claimed when the
    /// pass runs for real stays.
    DryRun,
}

/// What became of one restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Removed,
    WouldRemove,
    Kept,
}

/// One restore a pass looked at, and why it went or stayed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pruned {
    /// The restore id, or the key of a record that does not read.
    pub id: String,
    pub started: Option<Timestamp>,
    pub outcome: Option<Outcome>,
    pub action: Action,
    pub why: String,
}

/// Applies `retention` to `journal` and the report files in `reports_dir`, as of `now`.
/// `wanted` says whether a job here asks for a job identity (`serve`'s runner: the files
/// its watcher sees); a record that names its job file is also held to that file.
pub async fn prune(
    journal: &dyn Journal,
    reports_dir: &Path,
    host: &HostConfig,
    retention: Retention,
    wanted: &(dyn Fn(&str) -> bool + Sync),
    (mode, now): (Mode, Timestamp),
) -> journal::Result<Vec<Pruned>> {
    let listing = journal.list().await?;
    let mut pruned: Vec<Pruned> = (listing.unreadable.iter())
        .map(|bad| Pruned {
            id: bad.key.clone(),
            started: None,
            outcome: None,
            action: Action::Kept,
            why: "the record does not read: a person must look at it".into(),
        })
        .collect();
    let mut records = listing.records;
    // Newest first: the first keep_last finished ones are kept.
    records.reverse();
    let mut finished_seen = 0;
    for record in records {
        let kept = |why: String| Pruned {
            id: record.id.to_string(),
            started: Some(record.started_at),
            outcome: record.outcome,
            action: Action::Kept,
            why,
        };
        if record.is_unfinished() {
            pruned.push(kept(
                "unfinished: a recovery (`lockstep recover`, or a sweep) still has work".into(),
            ));
            continue;
        }
        finished_seen += 1;
        let age = Duration::try_from(now.duration_since(record.updated_at)).unwrap_or_default();
        let beyond = match beyond(retention, finished_seen, age) {
            Ok(beyond) => beyond,
            Err(within) => {
                pruned.push(kept(within));
                continue;
            }
        };
        if let Some(why) = job_file_present(&record, host, wanted) {
            pruned.push(kept(why));
            continue;
        }
        let action = match mode {
            Mode::DryRun => Action::WouldRemove,
            Mode::Remove => match journal.remove(&record).await? {
                Removal::Removed => {
                    remove_reports(reports_dir, record.id.as_str());
                    Action::Removed
                }
                Removal::Claimed { holder } => {
                    pruned.push(kept(format!("claimed by {holder}")));
                    continue;
                }
                Removal::Changed => {
                    pruned.push(kept("written again since it was listed".into()));
                    continue;
                }
            },
        };
        pruned.push(Pruned {
            id: record.id.to_string(),
            started: Some(record.started_at),
            outcome: record.outcome,
            action,
            why: beyond,
        });
    }
    pruned.extend(refusals(reports_dir, retention, (mode, now)));
    Ok(pruned)
}

/// Whether a finished restore, the `rank`-th newest (from 1), that ended `age` ago is
/// beyond both bounds: `Ok` with why it goes, `Err` with why it stays.
fn beyond(retention: Retention, rank: usize, age: Duration) -> Result<String, String> {
    if rank <= retention.keep_last {
        return Err(format!(
            "among the {} newest finished restores (keep_last)",
            retention.keep_last
        ));
    }
    if age < retention.keep {
        return Err(format!(
            "ended {} ago, within keep = {}",
            friendly(age),
            friendly(retention.keep)
        ));
    }
    let mut beyond = format!("ended {} ago", friendly(age));
    if retention.keep > Duration::ZERO {
        beyond += &format!(", beyond keep = {}", friendly(retention.keep));
    }
    if retention.keep_last > 0 {
        beyond += &format!(
            ", not among the {} newest finished restores (keep_last)",
            retention.keep_last
        );
    }
    Ok(beyond)
}

/// The reports of restores refused before they had a record (a job file or request that did
/// not validate, a preflight refusal): `{name}.{hash}.refused.json` and `.txt`, which no
/// journal lists. Each is held to the same bounds by its file's time, counted among the
/// refusals.
fn refusals(
    reports_dir: &Path,
    retention: Retention,
    (mode, now): (Mode, Timestamp),
) -> Vec<Pruned> {
    let Ok(entries) = std::fs::read_dir(reports_dir) else {
        return vec![];
    };
    let mut found: Vec<(String, Timestamp)> = (entries.flatten())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let id = name
                .strip_suffix(".json")
                .filter(|id| id.ends_with(".refused"))?;
            let written = entry.metadata().ok()?.modified().ok()?;
            Some((id.to_owned(), Timestamp::try_from(written).ok()?))
        })
        .collect();
    // Newest first, as the records.
    found.sort_by_key(|(_, written)| std::cmp::Reverse(*written));
    (found.into_iter().enumerate())
        .map(|(i, (id, written))| {
            let age = Duration::try_from(now.duration_since(written)).unwrap_or_default();
            let (action, why) = match (beyond(retention, i + 1, age), mode) {
                (Err(within), _) => (Action::Kept, within),
                (Ok(beyond), Mode::DryRun) => (Action::WouldRemove, beyond),
                (Ok(beyond), Mode::Remove) => {
                    remove_reports(reports_dir, &id);
                    (Action::Removed, beyond)
                }
            };
            Pruned {
                id,
                started: None,
                outcome: Some(Outcome::Refused),
                action,
                why,
            }
        })
        .collect()
}

/// Why `record` stays for its job file, if it does: a job here asks for its content, or the
/// file it was read from holds that content still.
fn job_file_present(
    record: &RestoreRecord,
    host: &HostConfig,
    wanted: &dyn Fn(&str) -> bool,
) -> Option<String> {
    let identity = RestoreId::content_prefix(&record.job_name, &record.content_hash);
    if wanted(&identity) {
        return Some("a job file or request here asks for its content".into());
    }
    match &record.requested_by {
        Some(RequestedBy::Watch { file: Some(file) }) => {
            let file = Path::new(file);
            (super::watch::identity_of(file, host).as_deref() == Some(identity.as_str()))
                .then(|| format!("its job file {} is still in the watched directory", file.display()))
        }
        // Recorded before the file's path was: it may still be there.
        Some(RequestedBy::Watch { file: None }) => Some(
            "a watched job file's, recorded before lockstep kept the file's path: it may still be there; remove the record by hand once it is not".into(),
        ),
        _ => None,
    }
}

/// Deletes `id`'s report files and the `latest` links that lead to them; what is not
/// there is not an error, anything else is logged.
fn remove_reports(reports_dir: &Path, id: &str) {
    let names = ["json", "txt"].map(|ext| format!("{id}.{ext}"));
    if let Ok(links) = std::fs::read_dir(reports_dir.join("latest")) {
        for link in links.flatten() {
            let leads_to = std::fs::read_link(link.path()).ok();
            let ours = leads_to
                .as_ref()
                .and_then(|target| target.file_name())
                .is_some_and(|name| names.iter().any(|n| name == n.as_str()));
            if ours {
                remove_file(&link.path());
            }
        }
    }
    for name in &names {
        remove_file(&reports_dir.join(name));
    }
}

fn remove_file(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(file = %path.display(), error = %e, "retention: cannot remove"),
    }
}

/// A duration as a person reads it, to the second, in days of 24 hours as `keep` is
/// written: `90d`, `1d 2h`, `1m 1s`.
fn friendly(d: Duration) -> String {
    let s = d.as_secs();
    let parts: Vec<String> = [
        (s / 86_400, "d"),
        (s % 86_400 / 3600, "h"),
        (s % 3600 / 60, "m"),
        (s % 60, "s"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, unit)| format!("{n}{unit}"))
    .collect();
    if parts.is_empty() {
        "0s".into()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_writes_them() {
        assert_eq!(friendly(Duration::from_secs(90 * 86_400)), "90d");
        assert_eq!(friendly(Duration::from_secs(93_600)), "1d 2h");
        assert_eq!(friendly(Duration::from_secs(61)), "1m 1s");
        assert_eq!(friendly(Duration::ZERO), "0s");
    }
}
