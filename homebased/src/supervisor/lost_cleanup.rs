//! Cleanup after a worker that vanished before it wrote `cleanup.json`: the daemon empties
//! the workload's process group itself, signalling each member only after re-checking its
//! identity, and never a protected pid.

use homebased_shared::config::CleanupConfig;
use homebased_shared::process::{self, ProcStat};
use homebased_shared::rundir::{CleanupOutcome, RemainingProcess, RemainingReason, RunDir};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::time::Instant;

/// Live (non-zombie) members of the workload's group that started no earlier than the
/// workload itself: an older process in that group cannot be the run's.
fn members(pgid: u32, since_ticks: u64, protected: &[u32]) -> std::io::Result<Vec<ProcStat>> {
    Ok(process::group_members(pgid)?
        .into_iter()
        .filter(|p| !p.is_zombie() && p.start_ticks >= since_ticks && !protected.contains(&p.pid))
        .collect())
}

pub fn clean(dir: &RunDir, config: &CleanupConfig, protected: &[u32]) -> CleanupOutcome {
    let child = match dir.read_worker() {
        Ok(Some(record)) => record.child,
        Ok(None) => None,
        Err(e) => {
            return CleanupOutcome::EnumerationFailed {
                message: format!("worker.json is unreadable: {e}"),
            }
        }
    };
    let Some(child) = child else {
        return CleanupOutcome::Clean;
    };
    let (pgid, since) = (child.pgid, child.process.start_ticks);
    for (signal, grace) in [
        (Signal::SIGTERM, config.term_grace),
        (Signal::SIGKILL, config.kill_grace),
    ] {
        let found = match members(pgid, since, protected) {
            Ok(found) => found,
            Err(e) => return enumeration_failed(pgid, e),
        };
        if found.is_empty() {
            return CleanupOutcome::Clean;
        }
        for p in &found {
            // Re-check right before the signal: a reused pid is never hit.
            if process::is_same_process(p.identity()) {
                let _ = kill(Pid::from_raw(p.pid as i32), signal);
            }
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            match members(pgid, since, protected) {
                Ok(found) if found.is_empty() => return CleanupOutcome::Clean,
                Ok(_) => std::thread::sleep(config.rescan),
                Err(e) => return enumeration_failed(pgid, e),
            }
        }
    }
    match members(pgid, since, protected) {
        Ok(found) if found.is_empty() => CleanupOutcome::Clean,
        Ok(found) => CleanupOutcome::GroupUnconfirmed {
            remaining: found
                .iter()
                .map(|p| RemainingProcess {
                    pid: p.pid,
                    start_ticks: p.start_ticks,
                    reason: RemainingReason::Group,
                })
                .collect(),
        },
        Err(e) => enumeration_failed(pgid, e),
    }
}

fn enumeration_failed(pgid: u32, e: std::io::Error) -> CleanupOutcome {
    CleanupOutcome::EnumerationFailed {
        message: format!("cannot list the members of process group {pgid}: {e}"),
    }
}
