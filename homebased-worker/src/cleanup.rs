//! Everything that must be gone after the workload ended, before the resource serves again
//! (SPEC section 6), summed up as the `cleanup.json` outcome. Today: the process group and
//! the orphans that came back to this subreaper. The marker sweep slots in after the group.

use crate::group_cleanup;
use crate::log::WorkerLog;
use crate::process_group::ProcessGroup;
use crate::reap::Reaper;
use crate::signals::Signals;
use homebased_shared::config::CleanupConfig;
use homebased_shared::rundir::CleanupOutcome;

/// `group` is `None` when no workload was ever spawned.
pub fn clean_up(
    group: Option<ProcessGroup>,
    reaper: &mut Reaper,
    signals: &Signals,
    config: &CleanupConfig,
    log: &WorkerLog,
) -> CleanupOutcome {
    let outcome = match group {
        None => CleanupOutcome::Clean,
        Some(group) => group_cleanup::empty_group(group, reaper, signals, config, log),
    };
    // Orphans that ended outside the group came back here too; leave no zombie behind.
    reaper.reap();
    outcome
}
