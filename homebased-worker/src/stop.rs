//! Stop requests and stopping the workload on one (SPEC section 4, "Stopping a run").
//!
//! A stop request is SIGTERM or SIGINT to the worker, or the durable `control/stop` file,
//! checked on a short interval so that a lost signal still stops the run. `control/yield` is
//! not a stop request here: the workload watches it itself and exits 75.

use crate::group_cleanup;
use crate::log::WorkerLog;
use crate::process_group::ProcessGroup;
use crate::reap::Reaper;
use crate::signals::Signals;
use homebased_shared::config::CleanupConfig;
use homebased_shared::process::Teardown;
use homebased_shared::queue::StopCause;
use homebased_shared::rundir::{ExitReason, RunDir};
use std::fmt;
use std::time::Duration;

/// How often `control/stop` is looked for while nothing else wakes the worker. The daemon
/// also signals the worker, so this only bounds how late a lost signal is noticed; children
/// ending wake the worker at once (SIGCHLD).
pub const STOP_POLL: Duration = Duration::from_millis(250);

/// Where a stop request came from; only for the log, every source stops the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSource {
    Signal,
    /// The file exists; its cause when it could be read.
    StopFile(Option<StopCause>),
}

impl fmt::Display for StopSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopSource::Signal => f.write_str("a signal to the worker"),
            StopSource::StopFile(Some(cause)) => write!(f, "control/stop ({})", cause.as_str()),
            StopSource::StopFile(None) => f.write_str("control/stop"),
        }
    }
}

/// The stop request that has arrived, if any.
pub fn pending(signals: &Signals, dir: &RunDir) -> Option<StopSource> {
    if signals.stop_signalled() {
        return Some(StopSource::Signal);
    }
    // Existence is the request; the cause inside is informational, so a file caught half
    // written still stops the run.
    match dir.stop_file().try_exists() {
        Ok(true) => Some(StopSource::StopFile(
            dir.read_stop().ok().flatten().map(|r| r.cause),
        )),
        _ => None,
    }
}

/// Follows the workload until it ends. On a stop request it is stopped and the end is
/// `cancelled`, unless the workload answered the stop signal by exiting 0: a genuine exit 0 is
/// finished work and is recorded as it was (SPEC section 4), so the job is never repeated. An
/// end seen before any request is recorded as it really was.
pub fn follow(
    group: ProcessGroup,
    reaper: &mut Reaper,
    signals: &Signals,
    dir: &RunDir,
    config: &CleanupConfig,
    log: &WorkerLog,
) -> ExitReason {
    loop {
        // Reap before looking for a request: a workload that already ended keeps its real exit.
        reaper.reap();
        if let Some(reason) = reaper.workload_ended() {
            return reason.clone();
        }
        if let Some(source) = pending(signals, dir) {
            log.note(format!("stop requested by {source}"));
            // The workload may have ended on its own while the request arrived: then no stop
            // signal reached it, and its real exit is what it did.
            reaper.reap();
            if let Some(reason) = reaper.workload_ended() {
                return reason.clone();
            }
            stop(group, reaper, signals, config, log);
            return stopped(reaper.workload_ended());
        }
        signals.sleep(STOP_POLL);
    }
}

/// The end of a workload that was stopped: `cancelled`, unless it exited 0 on the signal.
fn stopped(ended: Option<&ExitReason>) -> ExitReason {
    match ended {
        Some(ExitReason::Exit { code: 0 }) => ExitReason::Exit { code: 0 },
        _ => ExitReason::Cancelled,
    }
}

/// SIGTERM to the group, up to `term_grace` for the group to end, then SIGKILL to the group and
/// up to `kill_grace`. The signals go to the whole group, so the grace is the whole group's:
/// the workload being reaped is not the end while members it took down with it are still
/// exiting (a shell's `sleep` may be scheduled after the shell itself died), or `exit.json`
/// would call the group unconfirmed only because the worker looked too early. Whatever
/// survives SIGKILL is left to the cleanup.
fn stop(
    group: ProcessGroup,
    reaper: &mut Reaper,
    signals: &Signals,
    config: &CleanupConfig,
    log: &WorkerLog,
) {
    // The group test counts zombies, so it also waits for the members to be reaped.
    let ended = |r: &Reaper| r.workload_ended().is_some() && group.is_empty();
    let teardown = group_cleanup::terminate(group, reaper, signals, config, log, STOP_POLL, ended);
    if let Teardown::Ended { after } = teardown {
        if let Some(reason) = reaper.workload_ended() {
            // The workload may have died of the first signal while members of its group
            // lasted until the second: say which is which.
            log.note(format!(
                "workload ended ({reason}); its process group was empty after {} was sent",
                after.as_str()
            ));
        }
        return;
    }
    if reaper.workload_ended().is_some() {
        log.note(format!(
            "process group {} not empty after SIGKILL; recording the stop, cleanup goes on",
            group.id()
        ));
    } else {
        log.note("workload not reaped after SIGKILL; recording the stop anyway");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_workload_is_cancelled_unless_it_exited_zero() {
        let zero = ExitReason::Exit { code: 0 };
        assert_eq!(stopped(Some(&zero)), zero);
        assert_eq!(
            stopped(Some(&ExitReason::Exit { code: 1 })),
            ExitReason::Cancelled
        );
        assert_eq!(
            stopped(Some(&ExitReason::Exit { code: 75 })),
            ExitReason::Cancelled,
            "75 without a yield is not a preemption the run asked for"
        );
        assert_eq!(
            stopped(Some(&ExitReason::Signal { signal: 15 })),
            ExitReason::Cancelled
        );
        assert_eq!(stopped(None), ExitReason::Cancelled);
    }
}
