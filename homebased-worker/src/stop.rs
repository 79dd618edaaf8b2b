//! Stop requests and stopping the workload on one (SPEC section 4, "Stopping a run").
//!
//! A stop request is SIGTERM (unless `run.json` says `stop_on_term: false`) or SIGINT to the
//! worker, or the durable `control/stop` file, checked on a short interval so that a lost
//! signal still stops the run. `control/yield` is not a stop request here: the workload
//! watches it itself and exits 75.

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
/// `cancelled` ([`stopped`]), whatever the workload answered the signal with: an exit 0 on
/// SIGTERM is a script saving on the way out, not finished work. An end seen before any stop
/// signal went out is recorded as it really was.
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
            let sent = stop(group, reaper, signals, config, log);
            return stopped(sent, reaper.workload_ended());
        }
        signals.sleep(STOP_POLL);
    }
}

/// Whether the worker's stop signal went out to the workload: SIGTERM (or SIGKILL) to its
/// process group, or `docker stop` to its container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Sent,
    /// Every attempt to signal failed; whatever ended the workload, the worker did not.
    NotSent,
}

/// What `exit.json` says of a workload a stop request reached (SPEC section 4): once the stop
/// signal went out, the workload was stopped, and the end is `cancelled` whatever it exited
/// with, 0 included (a script that saves on TERM and exits cleanly has not finished its step;
/// recording its 0 would call a cancelled job succeeded and move a restarted one on to its
/// next step). Only an end no signal of the worker's caused keeps its real exit. A workload
/// never seen to end was stopped all the same: the cleanup ends what is left.
pub fn stopped(signal: StopSignal, ended: Option<&ExitReason>) -> ExitReason {
    match (signal, ended) {
        (StopSignal::NotSent, Some(real)) => real.clone(),
        (StopSignal::Sent, _) | (StopSignal::NotSent, None) => ExitReason::Cancelled,
    }
}

/// SIGTERM to the group, up to `term_grace` for the group to end, then SIGKILL to the group and
/// up to `kill_grace`. The signals go to the whole group, so the grace is the whole group's:
/// the workload being reaped is not the end while members it took down with it are still
/// exiting (a shell's `sleep` may be scheduled after the shell itself died), or `exit.json`
/// would call the group unconfirmed only because the worker looked too early. Whatever
/// survives SIGKILL is left to the cleanup. Answers whether a signal went out.
fn stop(
    group: ProcessGroup,
    reaper: &mut Reaper,
    signals: &Signals,
    config: &CleanupConfig,
    log: &WorkerLog,
) -> StopSignal {
    // The group test counts zombies, so it also waits for the members to be reaped.
    let ended = |r: &Reaper| r.workload_ended().is_some() && group.is_empty();
    let (teardown, sent) =
        group_cleanup::terminate(group, reaper, signals, config, log, STOP_POLL, ended);
    if let Teardown::Ended { after } = teardown {
        if let Some(reason) = reaper.workload_ended() {
            // The workload may have died of the first signal while members of its group
            // lasted until the second: say which is which.
            log.note(format!(
                "workload ended ({reason}); its process group was empty after {} was sent",
                after.as_str()
            ));
        }
        return sent;
    }
    if reaper.workload_ended().is_some() {
        log.note(format!(
            "process group {} not empty after SIGKILL; recording the stop, cleanup goes on",
            group.id()
        ));
    } else {
        log.note("workload not reaped after SIGKILL; recording the stop anyway");
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_the_stop_signal_reached_is_cancelled_whatever_it_exited_with() {
        use StopSignal::*;
        let exit = |code| ExitReason::Exit { code };
        let term = ExitReason::Signal { signal: 15 };
        #[rustfmt::skip]
        let cases = [
            // Saved on TERM and exited cleanly: stopped, not finished.
            (Sent, Some(exit(0)), ExitReason::Cancelled),
            (Sent, Some(exit(1)), ExitReason::Cancelled),
            // 75 without a yield is not a preemption the run asked for.
            (Sent, Some(exit(75)), ExitReason::Cancelled),
            (Sent, Some(term.clone()), ExitReason::Cancelled),
            (Sent, None, ExitReason::Cancelled),
            // No signal of the worker's ended it: its real exit, a genuine 0 included.
            (NotSent, Some(exit(0)), exit(0)),
            (NotSent, Some(exit(3)), exit(3)),
            (NotSent, Some(term.clone()), term),
            (NotSent, None, ExitReason::Cancelled),
        ];
        for (signal, ended, recorded) in cases {
            assert_eq!(
                stopped(signal, ended.as_ref()),
                recorded,
                "{signal:?} {ended:?}"
            );
        }
    }
}
