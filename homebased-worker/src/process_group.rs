//! The workload's process group. Signalling the group, never just the pid, reaches what the
//! workload forked without a new group of its own.

use homebased_shared::process;
use homebased_shared::rundir::{RemainingProcess, RemainingReason};
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::{getpgrp, Pid};
use std::io;

/// A process group other than the worker's own, with an id above 1. `kill(-pgid)` with 0 or 1
/// would mean "my own group" or "every process", so no other value can be built.
///
/// The kernel never hands out a pid that is still in use as a process group id, so while the
/// group has members its id names only them; once it is empty, signals get ESRCH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessGroup {
    pgid: i32,
}

impl ProcessGroup {
    /// The group led by `pid` (the workload calls `setpgid(0, 0)` before exec).
    pub fn led_by(pid: u32) -> Option<ProcessGroup> {
        let pgid = i32::try_from(pid).ok().filter(|p| *p > 1)?;
        (pgid != getpgrp().as_raw()).then_some(ProcessGroup { pgid })
    }

    pub fn id(&self) -> u32 {
        // Positive by construction.
        self.pgid.unsigned_abs()
    }

    /// The pid of the process that created the group (the workload itself).
    pub fn leader(&self) -> Pid {
        Pid::from_raw(self.pgid)
    }

    /// Sends `signal` to every member. `Ok(false)` when the group has no member left.
    pub fn signal(&self, signal: Signal) -> io::Result<bool> {
        match kill(Pid::from_raw(-self.pgid), signal) {
            Ok(()) => Ok(true),
            Err(Errno::ESRCH) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// True when no process (zombies included) is in the group. A member that may not be
    /// signalled (EPERM) still counts: the group is not empty.
    pub fn is_empty(&self) -> bool {
        kill(Pid::from_raw(-self.pgid), None) == Err(Errno::ESRCH)
    }

    /// The members still present, named by identity, for the cleanup record.
    pub fn remaining(&self) -> io::Result<Vec<RemainingProcess>> {
        Ok(process::group_members(self.id())?
            .into_iter()
            .map(|m| RemainingProcess {
                pid: m.pid,
                start_ticks: m.start_ticks,
                reason: RemainingReason::Group,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_names_every_process_or_the_workers_own_group() {
        assert!(ProcessGroup::led_by(0).is_none());
        assert!(ProcessGroup::led_by(1).is_none());
        assert!(ProcessGroup::led_by(u32::MAX).is_none());
        let own = getpgrp().as_raw().unsigned_abs();
        assert!(ProcessGroup::led_by(own).is_none());
    }

    #[test]
    fn a_group_without_members_is_empty() {
        // Above the kernel's largest pid_max (2^22): no such group can exist.
        let g = ProcessGroup::led_by(5_000_000).unwrap();
        assert!(g.is_empty());
        assert!(!g.signal(Signal::SIGTERM).unwrap());
        assert!(g.remaining().unwrap().is_empty());
    }
}
