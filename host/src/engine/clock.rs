//! Preflight's look at every end's clock against the backup's newest row.
//!
//! A backup import keeps the source cluster's row timestamps, and its commit makes the rows
//! visible at the commit's time tick, which the committing cluster's clock (its TSO) gives.
//! Since milvus#51589 (every 3.0 release) the commit fence refuses a commit stamped below the
//! newest row of the job's binlogs and retries it without end: the job stays Committing and
//! the collection's pchannels apply nothing more until an operator steps in
//! (docs/milvus-facts.md §2.7). A restore onto a cluster whose clock runs behind the one the
//! backup came from meets that on its first commit, after its point of no return.
//!
//! So once the backup's rows are read, every end's clock (`AllocTimestamp`) is held to the
//! newest of them: an end behind it by more than [`MARGIN`] is refused by name
//! (`clock_behind`), with both times and how far apart; one behind it by less is waited for,
//! since a clock that keeps time passes the row within the margin. Every end is asked,
//! though the target's clock stamps the commit: a secondary running behind the backup is one
//! failover away from being the cluster that stamps it. An end before 3.0 has no fence.

use std::time::Duration;

use futures::future::join_all;
use jiff::Timestamp;
use tokio::time::Instant;

use super::ends::{EndClient, Ends};
use super::refusal::Refusal;
use crate::milvus::ServerVersion;

/// How far behind the backup's newest row an end's clock may stand and be waited for rather
/// than refused. Clocks kept by NTP agree within milliseconds, so a row newer than an end's
/// clock means either a backup restored seconds after it was taken, onto a cluster whose
/// clock trails the source's by a little (a wait of seconds, less than any import takes), or
/// a clock that is wrong (a VM restored from an image, a host without NTP), which a wait
/// would not mend and an operator must hear about.
pub const MARGIN: Duration = Duration::from_secs(10);

/// How long past [`MARGIN`] a wait may last: clocks are read a round trip apart, and one
/// that has not passed the row by then does not keep time.
const SLACK: Duration = Duration::from_secs(1);

/// What one end's clock says against the newest row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    /// The clock is past the row: a commit it stamps now passes the fence.
    Passed,
    /// Behind the row by this much, within [`MARGIN`]: waited for.
    Wait(Duration),
    /// Behind the row by this much, beyond [`MARGIN`].
    Behind(Duration),
}

/// Clock `clock` against the newest row `newest`, both hybrid timestamps (TSOs).
fn judge(newest: u64, clock: u64) -> Judged {
    if clock > newest {
        return Judged::Passed;
    }
    // Milliseconds, and one more: the row's own millisecond is not past it.
    let behind = Duration::from_millis(millis(newest) - millis(clock) + 1);
    match behind > MARGIN {
        true => Judged::Behind(behind),
        false => Judged::Wait(behind),
    }
}

/// A TSO's physical part: milliseconds since the epoch.
fn millis(tso: u64) -> u64 {
    tso >> 18
}

/// A TSO as a UTC time, to the millisecond.
fn utc(tso: u64) -> String {
    match i64::try_from(millis(tso)).map(Timestamp::from_millisecond) {
        Ok(Ok(at)) => format!("{at:.3}"),
        _ => format!("time tick {tso}"),
    }
}

/// `d` in words: seconds below a minute, else days, hours, minutes and seconds.
fn in_words(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        return format!("{:.1} s", d.as_secs_f64());
    }
    let parts = [
        (secs / 86_400, "d"),
        (secs / 3_600 % 24, "h"),
        (secs / 60 % 60, "min"),
        (secs % 60, "s"),
    ];
    (parts.iter())
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n} {unit}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Holds the clock of every end of `ends` that has the fence (by its version in `versions`)
/// to `newest`, the backup's newest row (in plan collection `collection`). Refuses each end
/// behind it by more than [`MARGIN`] and each that cannot say; waits for those behind it by
/// less, unless the restore is refused already. Returns how long it waited.
pub(super) async fn hold(
    ends: &Ends,
    versions: &[ServerVersion],
    newest: u64,
    collection: &str,
    refusals: &mut Vec<Refusal>,
) -> Duration {
    let fenced: Vec<&EndClient> = (ends.all().iter())
        .zip(versions)
        .filter(|(_, v)| v.supports_two_phase_import())
        .map(|(end, _)| end)
        .collect();
    let started = Instant::now();
    let deadline = started + MARGIN + SLACK;
    loop {
        let clocks = join_all(fenced.iter().map(|e| e.grpc.alloc_timestamp())).await;
        let mut wait = Duration::ZERO;
        let mut behind = Vec::new();
        for (end, clock) in fenced.iter().zip(clocks) {
            let clock = match clock {
                Ok(clock) => clock,
                Err(e) => {
                    refusals.push(Refusal::ClockUnreadable {
                        role: end.role,
                        end: end.name.clone(),
                        reason: e.to_string(),
                    });
                    continue;
                }
            };
            match judge(newest, clock) {
                Judged::Passed => {}
                Judged::Wait(gap) if Instant::now() < deadline => wait = wait.max(gap),
                Judged::Wait(gap) | Judged::Behind(gap) => behind.push((end, clock, gap)),
            }
        }
        refusals.extend(
            behind
                .into_iter()
                .map(|(end, clock, gap)| Refusal::ClockBehind {
                    role: end.role,
                    end: end.name.clone(),
                    clock: utc(clock),
                    newest_row: utc(newest),
                    behind: in_words(gap),
                    collection: collection.to_owned(),
                }),
        );
        if wait.is_zero() || !refusals.is_empty() {
            let waited = started.elapsed();
            if !waited.is_zero() && refusals.is_empty() {
                tracing::info!(waited_ms = waited.as_millis() as u64, newest_row = %utc(newest), "every end's clock passed the backup's newest row");
            }
            return waited;
        }
        tracing::info!(
            wait_ms = wait.as_millis() as u64,
            newest_row = %utc(newest),
            "an end's clock stands behind the backup's newest row: waiting for it to pass, as a \
             commit stamped before the row would stop the collection's channels (milvus#51589)"
        );
        tokio::time::sleep(wait.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tso(ms: u64) -> u64 {
        ms << 18
    }

    #[test]
    fn a_clock_past_the_row_passes_one_within_the_margin_waits_one_beyond_is_behind() {
        let row = tso(1_780_000_000_000) | 5;
        assert_eq!(judge(row, row + 1), Judged::Passed);
        assert_eq!(judge(row, tso(1_780_000_000_001)), Judged::Passed);
        // The row's own millisecond is not past it.
        assert_eq!(judge(row, row), Judged::Wait(Duration::from_millis(1)));
        assert_eq!(
            judge(row, tso(1_780_000_000_000 - 2_000)),
            Judged::Wait(Duration::from_millis(2_001))
        );
        assert_eq!(
            judge(row, tso(1_780_000_000_000 - 9_999)),
            Judged::Wait(MARGIN)
        );
        assert_eq!(
            judge(row, tso(1_780_000_000_000 - 86_400_000)),
            Judged::Behind(Duration::from_millis(86_400_001))
        );
    }

    #[test]
    fn times_read_in_utc_and_gaps_in_words() {
        assert_eq!(utc(tso(1_780_000_000_123)), "2026-05-28T20:26:40.123Z");
        assert_eq!(in_words(Duration::from_millis(2_345)), "2.3 s");
        assert_eq!(in_words(Duration::from_millis(86_400_001)), "1 d");
        assert_eq!(in_words(Duration::from_secs(90_061)), "1 d 1 h 1 min 1 s");
    }
}
