//! approval-gate: before the commit, a person must approve the restore. The
//! check never blocks: until an approval shows up it answers `retry-after`,
//! and lockstep waits (up to the check's `max_wait_ms`) with every job held
//! Uncommitted on every end.
//!
//! An approval is either an object in the target's storage or an HTTP
//! endpoint on the check's `allow_hosts` answering 200. Config:
//! - `object`: path of the approval object in the target's storage.
//! - `rejected_object` (default `<object>.rejected`): its presence rejects.
//! - `url`: an endpoint; 200 approves, 403 or 410 rejects, anything else waits.
//!   At least one of `object` and `url` is required.
//! - `expires_at` (RFC 3339, e.g. `2026-11-29T18:00:00Z`): no approval by then
//!   fails the check.
//! - `max_age` (e.g. `2h`, `30m`): an approval object older than this is
//!   stale and fails the check (approve again to go on).
//! - `poll` (default `30s`): how long to wait between looks.

use jiff::{SignedDuration, Timestamp};
use lockstep_check::{Check, CheckError, Context, Verdict, log, storage};

struct ApprovalGate;

/// What one look found.
enum Decision {
    Approved(String),
    Rejected(String),
    Pending(String),
}

impl Check for ApprovalGate {
    fn check(ctx: &Context) -> Result<Verdict, CheckError> {
        let object = ctx.config("object");
        let url = ctx.config("url");
        if object.is_none() && url.is_none() {
            return Err("config needs `object` or `url` (or both)".into());
        }
        let now = Timestamp::from_millisecond(lockstep_check::now_ms())?;
        let expires_at: Option<Timestamp> = ctx.config_parse("expires_at")?;
        let max_age: Option<SignedDuration> = ctx.config_parse("max_age")?;
        let poll: SignedDuration = ctx
            .config_parse("poll")?
            .unwrap_or(SignedDuration::from_secs(30));

        let decision = match object {
            Some(path) => {
                let rejected_default = format!("{path}.rejected");
                let rejected = ctx.config("rejected_object").unwrap_or(&rejected_default);
                look_at_object(&ctx.target.name, path, rejected, now, max_age)?
            }
            None => Decision::Pending(String::new()),
        };
        let decision = match (decision, url) {
            (Decision::Pending(_), Some(url)) => look_at_url(url)?,
            (decision, _) => decision,
        };

        Ok(match decision {
            Decision::Approved(by) => {
                log::info("approved", &[("by", &by)]);
                Verdict::Pass
            }
            Decision::Rejected(why) => Verdict::Fail(format!("restore rejected: {why}")),
            Decision::Pending(what) => match expires_at {
                Some(deadline) if now >= deadline => Verdict::Fail(format!(
                    "approval expired at {deadline} without an approval ({what})"
                )),
                _ => {
                    let wait = match expires_at {
                        Some(deadline) => poll.min(now.duration_until(deadline)),
                        None => poll,
                    };
                    lockstep_check::retry_after(
                        wait.unsigned_abs(),
                        format!("waiting for approval ({what})"),
                    )
                }
            },
        })
    }
}

fn look_at_object(
    end: &str,
    path: &str,
    rejected: &str,
    now: Timestamp,
    max_age: Option<SignedDuration>,
) -> Result<Decision, CheckError> {
    if storage::head(end, rejected)?.is_some() {
        return Ok(Decision::Rejected(format!("`{rejected}` exists on {end}")));
    }
    let Some(meta) = storage::head(end, path)? else {
        return Ok(Decision::Pending(format!("no `{path}` on {end} yet")));
    };
    let approved_at = Timestamp::from_millisecond(meta.last_modified_ms)?;
    if let Some(max_age) = max_age {
        let age = now.duration_since(approved_at);
        if age > max_age {
            return Ok(Decision::Rejected(format!(
                "approval `{path}` from {approved_at} is older than max_age {max_age:#}"
            )));
        }
    }
    Ok(Decision::Approved(format!(
        "`{path}` on {end} at {approved_at}"
    )))
}

fn look_at_url(url: &str) -> Result<Decision, CheckError> {
    let response = lockstep_check::http_get(url, &[("accept", "text/plain")]);
    Ok(match response {
        Ok(r) if r.status == 200 => Decision::Approved(url.to_owned()),
        Ok(r) if r.status == 403 || r.status == 410 => Decision::Rejected(format!(
            "{url} answered {}: {}",
            r.status,
            String::from_utf8_lossy(&r.body).trim()
        )),
        Ok(r) => Decision::Pending(format!("{url} answered {}", r.status)),
        // A refused URL is a configuration error, not something waiting fixes.
        Err(e @ lockstep_check::HttpError::NotAllowed(_)) => return Err(e.into()),
        Err(e) => Decision::Pending(format!("{url}: {e}")),
    })
}

lockstep_check::export_check!(ApprovalGate);
