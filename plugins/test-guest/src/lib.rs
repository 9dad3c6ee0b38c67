//! A check that misbehaves on request, for the host's sandbox tests.
//!
//! Config `behaviour` picks what it does; a behaviour that reaches outside the
//! sandbox returns `pass` if it got through (the host is broken) and
//! `fail(<the error it saw>)` if the sandbox refused it.

use std::hint::black_box;
use std::time::Duration;

use lockstep_check::{Check, CheckError, Context, Verdict};

struct TestGuest;

impl Check for TestGuest {
    fn check(ctx: &Context) -> Result<Verdict, CheckError> {
        match ctx.config_required("behaviour")? {
            "pass" => Ok(Verdict::Pass),
            "loop-forever" => loop_forever(),
            "allocate" => allocate_without_bound(),
            "trap" => trap_here(),
            "http-get" => http_get(ctx),
            "slow-http" => http_get_until_answered(ctx.config_required("url")?),
            "wasi-sleep" => {
                std::thread::sleep(Duration::from_secs(3600));
                Ok(Verdict::Pass)
            }
            "open-file" => {
                let path = ctx.config("path").unwrap_or("/etc/passwd");
                Ok(match std::fs::read(path) {
                    Ok(bytes) => Verdict::Pass.tap(|| format!("read {} bytes", bytes.len())),
                    Err(e) => lockstep_check::fail(format!("open {path}: {e}")),
                })
            }
            "connect-socket" => {
                let addr = ctx.config_required("addr")?;
                Ok(match std::net::TcpStream::connect(addr) {
                    Ok(_) => Verdict::Pass,
                    Err(e) => lockstep_check::fail(format!("connect {addr}: {e}")),
                })
            }
            "echo" => {
                lockstep_check::log::info(
                    "echo",
                    &[("restore", &ctx.restore_id), ("backup", &ctx.backup_name)],
                );
                println!("to stdout");
                eprintln!("to stderr");
                Ok(Verdict::Pass)
            }
            // What the host handed it, as a failure's reason the report shows.
            "context" => {
                let batches = |list: Vec<u32>| {
                    list.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                };
                let staged = lockstep_check::storage::staged_files()
                    .map_err(|e| format!("staged files: {e:?}"))?;
                let mut staged_batches: Vec<u32> = staged.iter().map(|f| f.batch).collect();
                staged_batches.dedup();
                let with_ids = ctx.jobs.iter().filter(|j| !j.id.is_empty()).count();
                Ok(lockstep_check::fail(format!(
                    "collections={} jobs={} with-ids={with_ids} batches={} staged={} staged-batches={}",
                    ctx.collections.len(),
                    ctx.jobs.len(),
                    batches(ctx.jobs.iter().map(|j| j.batch).collect()),
                    staged.len(),
                    batches(staged_batches),
                )))
            }
            "retry" => Ok(lockstep_check::retry_after(
                Duration::from_millis(ctx.config_parse("after_ms")?.unwrap_or(10)),
                "told to retry",
            )),
            other => Err(format!("unknown behaviour `{other}`").into()),
        }
    }
}

trait Tap {
    fn tap(self, message: impl FnOnce() -> String) -> Self;
}

impl Tap for Verdict {
    /// Logs what got through before returning the verdict, so a failing
    /// sandbox test shows what the guest managed to do.
    fn tap(self, message: impl FnOnce() -> String) -> Self {
        lockstep_check::log::error(&message(), &[]);
        self
    }
}

#[inline(never)]
fn loop_forever() -> Result<Verdict, CheckError> {
    let mut state = 1u64;
    loop {
        state = black_box(state.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

#[inline(never)]
fn allocate_without_bound() -> Result<Verdict, CheckError> {
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        held.push(black_box(vec![1u8; 1 << 20]));
    }
}

#[inline(never)]
fn trap_here() -> Result<Verdict, CheckError> {
    core::arch::wasm32::unreachable()
}

/// GETs config `url` `times` times (default once), with the request header
/// `header` (`name: value`) when set; passes when every GET got an answer.
fn http_get(ctx: &Context) -> Result<Verdict, CheckError> {
    let url = ctx.config_required("url")?;
    let headers: Vec<(&str, &str)> = ctx
        .config("header")
        .and_then(|header| header.split_once(": "))
        .into_iter()
        .collect();
    let times = ctx.config_parse::<u32>("times")?.unwrap_or(1);
    for _ in 0..times {
        if let Err(e) = lockstep_check::http_get(url, &headers) {
            return Ok(lockstep_check::fail(e.to_string()));
        }
    }
    Ok(Verdict::Pass.tap(|| format!("{url} answered {times} times")))
}

/// Keeps asking a slow host, so the guest spends its time waiting inside host
/// calls rather than running: only the wall-time limit can stop it.
fn http_get_until_answered(url: &str) -> Result<Verdict, CheckError> {
    loop {
        if let Ok(response) = lockstep_check::http_get(url, &[]) {
            if response.status == 200 {
                return Ok(Verdict::Pass);
            }
        }
    }
}

lockstep_check::export_check!(TestGuest);
