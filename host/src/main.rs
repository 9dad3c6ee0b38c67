//! The `lockstep` command line. Everything it does is in the library; this file parses
//! flags, sets up logging and output, and maps outcomes to exit codes:
//! 0 success, 1 failed and rolled back, 2 refused, 3 committed with divergence,
//! 4 not converged (`lockstep recover` continues it), 5 partly committed, 6 lockstep could
//! not do its own part, 7 lost to another host (its claim lapsed; the journal says how the
//! restore ends).

mod cli;

use std::process::ExitCode;

use clap::Parser;

/// jemalloc, not the C library's malloc: a restore's largest allocations (the backup's meta
/// tree, its plan) are made early and freed, and glibc's per-thread arenas kept what was
/// freed and mixed it with what the rest of the restore allocated. At 10,000 collections
/// (one run each, on tmpfs) the same build peaked at 435 MB resident on glibc and 326 MB on
/// jemalloc, with the same heap (a 252 MB peak).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, which it reads from this symbol before `main` (the environment's
/// `_RJEM_MALLOC_CONF` still comes after and wins). Two arenas rather than four a core: the
/// count decodes on tokio's blocking threads, which jemalloc spreads over its arenas, and
/// what each arena freed stayed resident in it. At 10,000 collections the peak was 291 to 300 MB
/// over five runs with eight arenas (293.6 on average), 281 to 294 MB over six with two
/// (288.5), at the same speed.
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 10] = b"narenas:2\0";

fn main() -> ExitCode {
    let printed = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // The backup readers turn the Parquet reader's panics on damaged files into an error
        // naming the object (which `check` and preflight print); the panic's own message on
        // stderr would read as lockstep crashing.
        if !milvus_formats::panic_is_a_bad_payload() {
            printed(info)
        }
    }));
    let args = cli::Cli::parse();
    cli::init_logging(args.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lockstep: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(cli::dispatch(args));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
