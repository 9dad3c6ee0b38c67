//! A template check: fails when the restore holds more import jobs than the
//! `max_jobs` config allows, and otherwise passes. Replace the body of
//! `check` with your own rule.

use lockstep_check::{Check, CheckError, Context, Verdict, log};

struct MyCheck;

impl Check for MyCheck {
    fn check(ctx: &Context) -> Result<Verdict, CheckError> {
        // Config values are strings from the job file's `config` table; a bad
        // value becomes a `fail` naming the key, through `?`.
        let max_jobs: usize = ctx.config_parse("max_jobs")?.unwrap_or(usize::MAX);
        log::info(
            "counting jobs",
            &[("restore", &ctx.restore_id), ("jobs", &ctx.jobs.len().to_string())],
        );
        if ctx.jobs.len() > max_jobs {
            return Ok(lockstep_check::fail(format!(
                "{} import jobs, more than max_jobs = {max_jobs}",
                ctx.jobs.len()
            )));
        }
        Ok(Verdict::Pass)
    }
}

lockstep_check::export_check!(MyCheck);
