//! `homebased-worker <run-dir> [--lock-fd N]`: one run attempt. See the library for the
//! sequence; this file only reads the arguments and turns the result into an exit code.

use homebased_worker::cli::{self, Invocation};
use homebased_worker::signals::Signals;
use homebased_worker::standby::{self, Waited};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The first of the start stamps (`rundir::StartStamps`): one clock read.
    let began = homebased_shared::time::now_us();
    // Before anything else: from here on a SIGTERM is a stop request, never an instant death
    // that would leave the run directory without its records.
    let signals = Signals::install();
    // Named crash points (docs/RELIABILITY.md): configured from FAILPOINTS, inert without it.
    #[cfg(feature = "failpoints")]
    let _crash_points = fail::FailScenario::setup();
    match cli::parse(std::env::args_os().skip(1)) {
        Ok(Invocation::Help) => {
            // Never println!: it panics when stdout is a full disk or a closed pipe.
            let _ = writeln!(std::io::stdout(), "{}", cli::USAGE);
            ExitCode::SUCCESS
        }
        Ok(Invocation::Run(args)) => {
            ExitCode::from(homebased_worker::attempt::run(args, signals, began))
        }
        Ok(Invocation::Standby { sweep_key_fd }) => match standby::wait(signals.as_ref().ok()) {
            Ok(Waited::Run { args, received }) => {
                // The key came with the standby's own command line, not with the run.
                let args = homebased_worker::cli::Args {
                    sweep_key_fd,
                    ..args
                };
                ExitCode::from(homebased_worker::attempt::run(args, signals, received))
            }
            Ok(Waited::Released) => ExitCode::SUCCESS,
            Err(message) => {
                let _ = writeln!(std::io::stderr(), "homebased-worker: {message}");
                ExitCode::from(homebased_worker::attempt::EXIT_FAILED)
            }
        },
        Err(message) => {
            let _ = writeln!(
                std::io::stderr(),
                "homebased-worker: {message}\n\n{}",
                cli::USAGE
            );
            ExitCode::from(cli::EXIT_USAGE)
        }
    }
}
