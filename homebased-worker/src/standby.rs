//! `homebased-worker --standby`: a worker the daemon started ahead of need
//! ([`homebased_shared::standby`]). It waits on its standard input, a socket from the daemon,
//! for one hand-over: the arguments of a run and its two descriptors. It puts them where a
//! fresh worker would have found them (the log as standard output and error, the lock on the
//! descriptor named by `--lock-fd`, nothing left on standard input) and from then on is that
//! run's worker. The daemon gone first (end of file) or a stop signal before any run: it
//! exits without touching anything.

use crate::cli::{self, Args, Invocation};
use crate::signals::Signals;
use homebased_shared::standby::{self, HandOver};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd};

/// What the wait ended with.
#[derive(Debug)]
pub enum Waited {
    /// A run was handed over: the arguments to run it with, and when it arrived
    /// (microseconds, the worker's first start stamp).
    Run { args: Args, received: i64 },
    /// The daemon closed its end, or a stop signal came first: nothing to do.
    Released,
}

/// Waits for the daemon's hand-over on standard input. An error is a hand-over that cannot
/// be run (the daemon then sees its launch fail as any worker that exits at start).
pub fn wait(signals: Option<&Signals>) -> Result<Waited, String> {
    // SAFETY: descriptor 0 stays open for this whole function; it is only closed (replaced
    // by /dev/null) after the last use of this borrow.
    let socket = unsafe { BorrowedFd::borrow_raw(libc::STDIN_FILENO) };
    if let Some(signals) = signals {
        if !signals.wait_readable(socket) {
            return Ok(Waited::Released);
        }
    }
    let Some(handed) = standby::receive(socket).map_err(|e| format!("standby: {e}"))? else {
        return Ok(Waited::Released);
    };
    let received = homebased_shared::time::now_us();
    let args = take_over(handed).map_err(|e| format!("standby: {e}"))?;
    match cli::parse(args).map_err(|e| format!("standby: the daemon's arguments: {e}"))? {
        Invocation::Run(args) => Ok(Waited::Run {
            args: Args {
                retitle: true,
                ..args
            },
            received,
        }),
        other => Err(format!(
            "standby: the daemon handed over {other:?}, not a run"
        )),
    }
}

/// Puts the handed descriptors in place and returns the arguments to parse, with the lock's
/// descriptor number added (it is whatever the kernel gave it here, never a fixed one, so
/// that no descriptor of this process is overwritten).
fn take_over(handed: HandOver) -> io::Result<Vec<OsString>> {
    for target in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        dup2(handed.log.as_raw_fd(), target)?;
    }
    drop(handed.log);
    // Standard input becomes /dev/null, as a fresh worker's is: this also closes the
    // socket, so the daemon can never hand this process a second run.
    let null = std::fs::File::open("/dev/null")?;
    dup2(null.as_raw_fd(), libc::STDIN_FILENO)?;
    drop(null);
    // The lock stays close-on-exec (received so); `lock::adopt` takes ownership of it.
    let lock_fd = handed.lock.into_raw_fd();
    let mut args = handed.args;
    args.push("--lock-fd".into());
    args.push(lock_fd.to_string().into());
    Ok(args)
}

fn dup2(from: i32, to: i32) -> io::Result<()> {
    loop {
        // SAFETY: dup2 on integer descriptors touches no memory; `to` is a standard stream
        // this process owns and means to replace.
        if unsafe { libc::dup2(from, to) } >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
