//! Emptying the workload's process group (SPEC section 6, step 1): SIGTERM, up to
//! `term_grace`, SIGKILL, up to `kill_grace`, until the group is confirmed empty. Members are
//! reaped as they die (they are this subreaper's children or descendants), because a zombie
//! still counts as a member. The same [`terminate`] stops the group on a stop request.

use crate::log::WorkerLog;
use crate::process_group::ProcessGroup;
use crate::reap::Reaper;
use crate::signals::Signals;
use crate::stop::StopSignal;
use homebased_shared::config::CleanupConfig;
use homebased_shared::process::{self, Teardown};
use homebased_shared::rundir::CleanupOutcome;
use std::convert::Infallible;
use std::time::Duration;

pub fn empty_group(
    group: ProcessGroup,
    reaper: &mut Reaper,
    signals: &Signals,
    config: &CleanupConfig,
    log: &WorkerLog,
) -> CleanupOutcome {
    reaper.reap();
    if group.is_empty() {
        return CleanupOutcome::Clean;
    }
    log.note(format!(
        "process group {} still has members after the workload",
        group.id()
    ));
    let empty = |_: &Reaper| group.is_empty();
    if let (Teardown::Ended { .. }, _) =
        terminate(group, reaper, signals, config, log, config.rescan, empty)
    {
        return CleanupOutcome::Clean;
    }
    match group.remaining() {
        // A member that left between the last check and the scan may have emptied the group.
        Ok(remaining) if remaining.is_empty() && group.is_empty() => CleanupOutcome::Clean,
        Ok(remaining) => {
            let pids: Vec<u32> = remaining.iter().map(|r| r.pid).collect();
            log.note(format!(
                "process group {} not confirmed empty; remaining pids {pids:?}",
                group.id()
            ));
            CleanupOutcome::GroupUnconfirmed { remaining }
        }
        Err(e) => CleanupOutcome::EnumerationFailed {
            message: format!(
                "cannot list the members of process group {}: {e}",
                group.id()
            ),
        },
    }
}

/// The worker's TERM, grace, KILL of the workload's group ([`process::terminate_group`]):
/// each signal noted in `worker.log` (a failed one too), the reaper kept up while it waits,
/// looking every `poll` (and at once on a signal) whether the group counts as `ended`. Also
/// answers whether any signal was delivered: what the worker sent decides how a stopped
/// workload's end is recorded ([`crate::stop::stopped`]).
pub fn terminate(
    group: ProcessGroup,
    reaper: &mut Reaper,
    signals: &Signals,
    config: &CleanupConfig,
    log: &WorkerLog,
    poll: Duration,
    mut ended: impl FnMut(&Reaper) -> bool,
) -> (Teardown, StopSignal) {
    let mut sent = StopSignal::NotSent;
    let teardown = process::terminate_group(
        config,
        |signal, grace| {
            log.note(format!(
                "sending {signal} to process group {}, waiting up to {grace:?}",
                group.id()
            ));
            match group.signal(signal) {
                Ok(true) => sent = StopSignal::Sent,
                // No process left in the group to receive it.
                Ok(false) => {}
                Err(e) => log.note(format!("cannot signal process group {}: {e}", group.id())),
            }
            Ok::<_, Infallible>(())
        },
        |deadline| Ok(reaper.wait_until(signals, deadline, poll, &mut ended)),
    );
    let Ok(teardown) = teardown;
    (teardown, sent)
}
