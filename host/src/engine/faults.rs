//! Crash points for the tests that prove invariant 4 (a host that dies at any point
//! converges), and bugs the fault runner's own tests plant to show that its checker catches
//! them. Built only with the `fault-injection` feature: a test sets
//! `LOCKSTEP_CRASH_AT=<point>` and the process dies at that point as under SIGKILL, with no
//! destructor, flush or journal write after it; or `LOCKSTEP_PLANT=<bug>` and the engine
//! breaks one invariant of DESIGN.md §2 on purpose (`LOCKSTEP_PLANT=a,b` plants several);
//! or `LOCKSTEP_FILL_DISK_AT=<point>` and the disk fills there; or
//! `LOCKSTEP_PAUSE_AT=<point>` and the process stops itself there with SIGSTOP, as a long GC
//! pause or a frozen VM would, until the test sends SIGCONT. Without the feature, and in every build
//! without debug assertions (a release binary, even one the workspace built with the
//! feature unified in by `tests/e2e`), every point and bug is a no-op the compiler removes.

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

/// Points a test may pause a process at (`LOCKSTEP_PAUSE_AT`) but that the fault runner
/// does not draw from: between reading a job's attempts and claiming the next; between a
/// fence's answer and what it guards (the first one).
pub const PAUSE_ONLY: &[&str] = &["before-claim", "fence-answered", "drop-checked"];

/// Dies here if the test asked for it (`LOCKSTEP_CRASH_AT=<point>`); or, under
/// `LOCKSTEP_FILL_DISK_AT=<point>`, fills the filesystem of the file `LOCKSTEP_FILL_DISK`
/// names the first time the point is reached, so that every write after it (the journal's
/// above all) meets a real ENOSPC at that phase and no other.
#[cfg(all(feature = "fault-injection", debug_assertions))]
pub fn crash_point(point: &str) {
    debug_assert!(
        POINTS.contains(&point) || PAUSE_ONLY.contains(&point),
        "unknown crash point {point}"
    );
    if std::env::var("LOCKSTEP_CRASH_AT").is_ok_and(|p| p == point) {
        // abort(): no unwinding, no destructors, nothing flushed: what SIGKILL leaves.
        std::process::abort();
    }
    if std::env::var("LOCKSTEP_PAUSE_AT").is_ok_and(|p| p == point) {
        static PAUSED: std::sync::Once = std::sync::Once::new();
        PAUSED.call_once(|| {
            tracing::warn!(point, "pausing this process (fault injection)");
            // The whole process stops until SIGCONT, lease renewal included.
            let me = rustix::process::getpid();
            if let Err(e) = rustix::process::kill_process(me, rustix::process::Signal::STOP) {
                tracing::error!(error = %e, "could not pause");
            }
            // Another thread may take the signal, and this one run on a little while the
            // stop spreads: asleep, it goes no further than the point (its next call, a
            // claim say, would otherwise reach etcd before the process stops).
            std::thread::sleep(std::time::Duration::from_millis(50));
        });
    }
    if std::env::var("LOCKSTEP_FILL_DISK_AT").is_ok_and(|p| p == point) {
        static FILLED: std::sync::Once = std::sync::Once::new();
        FILLED.call_once(fill_disk);
    }
}

#[cfg(all(feature = "fault-injection", debug_assertions))]
fn fill_disk() {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("LOCKSTEP_FILL_DISK") else {
        panic!("LOCKSTEP_FILL_DISK_AT without LOCKSTEP_FILL_DISK");
    };
    let mut file = std::fs::File::create(&path).expect("the filler file can be created");
    let chunk = vec![0u8; 64 << 10];
    while file.write_all(&chunk).is_ok() {}
    // The last partial chunk may leave a few bytes; take them too.
    while file.write_all(&[0]).is_ok() {}
    tracing::warn!(filler = %std::path::Path::new(&path).display(), "filled the disk (fault injection)");
}

#[cfg(not(all(feature = "fault-injection", debug_assertions)))]
#[inline(always)]
pub fn crash_point(_point: &str) {}

/// An invariant the engine breaks on purpose under `LOCKSTEP_PLANT=<name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// `commit-early`: commit without holding until every end is Uncommitted.
    CommitEarly,
    /// `skip-abort`: after a failure before the decision, abort nothing.
    SkipAbort,
    /// `no-decision`: commit without writing the decision to the journal first.
    NoDecision,
    /// `skip-rows`: decide, and report completion, without holding each end's rows against
    /// the backup's.
    SkipRows,
    /// `unfenced`: every fence check passes, as if each action fell between a check and its
    /// call (the window no check closes).
    Unfenced,
    /// `drop-by-name`: a rollback drops its collections by name, without comparing the id
    /// it recorded at creation.
    DropByName,
    /// `skip-verify`: decide the outcome without asking what a query on every end sees.
    SkipVerify,
    /// `held-l0-jobs`: a two-phase restore imports L0 segments as L0 jobs where every end
    /// takes them, as lockstep did before issue 49: the held jobs' deletes remove nothing.
    HeldL0Jobs,
    /// `index-after-release`: a collection goes to the import gate before its indexes are
    /// made, and they come a second later, after its first imports.
    IndexAfterRelease,
    /// `skip-clock`: pass preflight without holding the ends' clocks to the backup's newest
    /// row.
    SkipClock,
}

impl Bug {
    pub const ALL: [Bug; 10] = [
        Bug::CommitEarly,
        Bug::SkipAbort,
        Bug::NoDecision,
        Bug::SkipRows,
        Bug::Unfenced,
        Bug::DropByName,
        Bug::SkipVerify,
        Bug::HeldL0Jobs,
        Bug::IndexAfterRelease,
        Bug::SkipClock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Bug::CommitEarly => "commit-early",
            Bug::SkipAbort => "skip-abort",
            Bug::NoDecision => "no-decision",
            Bug::SkipRows => "skip-rows",
            Bug::Unfenced => "unfenced",
            Bug::DropByName => "drop-by-name",
            Bug::SkipVerify => "skip-verify",
            Bug::HeldL0Jobs => "held-l0-jobs",
            Bug::IndexAfterRelease => "index-after-release",
            Bug::SkipClock => "skip-clock",
        }
    }
}

/// Whether the test planted `bug`.
#[cfg(all(feature = "fault-injection", debug_assertions))]
pub fn planted(bug: Bug) -> bool {
    let planted =
        std::env::var("LOCKSTEP_PLANT").is_ok_and(|p| p.split(',').any(|name| name == bug.name()));
    if planted {
        tracing::warn!(bug = bug.name(), "planted bug active");
    }
    planted
}

#[cfg(not(all(feature = "fault-injection", debug_assertions)))]
#[inline(always)]
pub fn planted(_bug: Bug) -> bool {
    false
}
