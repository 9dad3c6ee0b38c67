//! The `lockstep` command line. Everything it does is in the library; this file parses
//! flags, sets up logging and output, and maps outcomes to exit codes:
//! 0 success, 1 failed and rolled back, 2 refused, 3 committed with divergence,
//! 4 not converged (`lockstep recover` continues it), 5 partly committed, 6 lockstep could
//! not do its own part, 7 lost to another host (its claim lapsed; the journal says how the
//! restore ends).

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
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
