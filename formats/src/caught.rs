//! The Parquet reader panics on some damaged files where it should fail (a page shorter than
//! its levels need, a fixed-size column whose bytes run short). A backup's damaged object
//! must be refused by name, not stop the process or the task reading it, so every Parquet
//! read here, in either layout, goes through [`reading`].

use std::cell::Cell;
use std::panic::AssertUnwindSafe;

thread_local! {
    /// Whether this thread is inside [`reading`].
    static READING: Cell<bool> = const { Cell::new(false) };
}

/// Whether a panic on this thread now is one the readers catch and report as a bad file,
/// naming it. A program's panic hook can leave those unprinted: the error says what the
/// panic message would, and an operator checking a damaged backup should not read a crash
/// into it.
pub fn panic_is_a_bad_payload() -> bool {
    READING.get()
}

/// Runs `read`, a panic in it becoming `failed("the Parquet reader failed on it: ...")`.
pub(crate) fn reading<T, E>(
    read: impl FnOnce() -> Result<T, E>,
    failed: impl FnOnce(String) -> E,
) -> Result<T, E> {
    // What `read` touched is its own, dropped by the unwind; a thread's zstd decompressor
    // (binlog pages) is reset by every frame it decompresses.
    let outer = READING.replace(true);
    let read = std::panic::catch_unwind(AssertUnwindSafe(read));
    READING.set(outer);
    read.unwrap_or_else(|panic| {
        let why = (panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(failed(format!("the Parquet reader failed on it: {why}")))
    })
}
