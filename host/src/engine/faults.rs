//! Crash points for the tests that prove invariant 4 (a host that dies at any point
//! converges). Built only with the `fault-injection` feature: a test sets
//! `LOCKSTEP_CRASH_AT=<point>` and the process dies at that point as under SIGKILL, with no
//! destructor, flush or journal write after it. Without the feature every point is a no-op
//! the compiler removes.

/// Where a crash can be injected, in the order a restore passes them.
pub const POINTS: &[&str] = &[
    "after-ddl",
    "after-stage",
    "after-intent",
    "after-submit",
    "holding",
    "after-decision",
    "after-commit",
    "before-report",
];

/// Dies here if the test asked for it.
#[cfg(feature = "fault-injection")]
pub fn crash_point(point: &str) {
    debug_assert!(POINTS.contains(&point), "unknown crash point {point}");
    if std::env::var("LOCKSTEP_CRASH_AT").is_ok_and(|p| p == point) {
        // abort(): no unwinding, no destructors, nothing flushed: what SIGKILL leaves.
        std::process::abort();
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn crash_point(_point: &str) {}
