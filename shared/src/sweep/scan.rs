//! One pass over the process table, and one signal to one target. Both apply the rules of
//! SPEC section 6 to whatever table they are given.

use super::table::{Marker, ProcessInfo, ProcessTable, ReadError};
use crate::rundir::ProcessIdentity;
use nix::sys::signal::Signal;
use std::io;

/// What decides, for one sweep, which processes matter.
#[derive(Debug)]
pub(super) struct Rules<'a> {
    pub marker: &'a Marker,
    /// Start ticks of the workload; `None` when it was not recorded (no suspects then).
    pub since: Option<u64>,
    /// The sweeper's uid: only its processes can be suspects.
    pub uid: u32,
    /// Never signalled, never counted: the caller's list, the sweeper itself and pid 1.
    pub protected: Vec<u32>,
}

impl Rules<'_> {
    fn is_protected(&self, pid: u32) -> bool {
        pid <= 1 || self.protected.contains(&pid)
    }

    /// Same user, started at or after the workload: unreadable, it may be the run's.
    fn is_suspect(&self, info: &ProcessInfo) -> bool {
        info.uid == self.uid
            && self
                .since
                .is_some_and(|since| info.identity.start_ticks >= since)
    }
}

/// The result of one scan.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Scan {
    /// Processes whose environment holds the marker.
    pub targets: Vec<ProcessIdentity>,
    /// Processes that may be the run's but whose environment cannot be read.
    pub suspects: Vec<ProcessIdentity>,
    /// No process vanished, started exiting or changed identity while it was read (between
    /// its two identity reads). Such a process may have been misread as unmarked just as
    /// it forked, so an empty scan is believed only when settled.
    pub settled: bool,
}

impl Scan {
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty() && self.suspects.is_empty()
    }
}

pub(super) fn scan<T: ProcessTable>(table: &T, rules: &Rules<'_>) -> io::Result<Scan> {
    let mut scan = Scan {
        settled: true,
        ..Scan::default()
    };
    for pid in table.pids()? {
        if rules.is_protected(pid) {
            continue;
        }
        // A process that started before the workload cannot be one the run started: the
        // environment is fixed at exec, so it could only carry the marker by exec-ing with an
        // environment the run handed to it, which is work handed to a server and beyond what
        // cleanup can attribute (the documented limit). Passing over it with one `stat` read
        // keeps a sweep's cost to the processes born during the run, not the whole machine.
        if let Some(since) = rules.since {
            match table.start_ticks(pid) {
                Ok(ticks) if ticks < since => continue,
                Ok(_) => {}
                Err(_) => continue,
            }
        }
        let first = match table.info(pid) {
            Ok(info) => info,
            // Gone before it was read: nothing of it was misread. Only a vanish *while* a
            // process is read unsettles the scan; on a busy machine some listed process has
            // nearly always exited by the time its turn comes, and counting those would
            // keep every scan unsettled.
            Err(ReadError::Gone) => continue,
            // Only another user's process hides its stat and status (`hidepid`): it can
            // neither be read for a marker nor be a suspect.
            Err(ReadError::Unreadable(_)) => continue,
        };
        if first.zombie || first.kernel_thread {
            continue;
        }
        let environ = table.environ(pid);
        // The environment belongs to `first` only if it is still there, unchanged and not
        // exiting, after the read.
        let exiting = match table.info(pid) {
            Ok(second) if second.identity == first.identity && !second.zombie => second.exiting,
            _ => {
                scan.settled = false;
                continue;
            }
        };
        match environ {
            Ok(bytes) if rules.marker.is_in(&bytes) => scan.targets.push(first.identity),
            Ok(_) => {}
            // Still there but without memory: it is exiting, and may have just forked. An
            // exiting process's environment can also read as refused (the kernel hands its
            // /proc files to root once its memory is gone): not a suspect either.
            Err(ReadError::Gone) => scan.settled = false,
            Err(ReadError::Unreadable(_)) if exiting => scan.settled = false,
            Err(ReadError::Unreadable(_)) if rules.is_suspect(&first) => {
                scan.suspects.push(first.identity);
            }
            Err(ReadError::Unreadable(_)) => {}
        }
    }
    Ok(scan)
}

/// What became of one signal.
#[derive(Debug)]
pub(super) enum Delivery {
    Sent,
    /// The target ended before the signal.
    Gone,
    /// The pid no longer names the target with its marker: nothing was sent.
    NotTheTarget(&'static str),
    /// The target is there but could not be checked or signalled.
    Failed(String),
}

/// Signals `target` only if, after pinning its pid, it is still the same process and still
/// carries the marker. A pid reused since the scan, or a process that dropped its marker, is
/// never hit.
pub(super) fn signal_target<T: ProcessTable>(
    table: &T,
    target: ProcessIdentity,
    marker: &Marker,
    signal: Signal,
) -> Delivery {
    let pin = match table.pin(target.pid) {
        Ok(pin) => pin,
        Err(ReadError::Gone) => return Delivery::Gone,
        Err(ReadError::Unreadable(e)) => return Delivery::Failed(format!("cannot pin: {e}")),
    };
    // The target was alive before the pin; alive with the same start after it, it held the
    // pid throughout, so the pin holds the target.
    if let Some(refused) = still_the_target(table, target) {
        return refused;
    }
    match table.environ(target.pid) {
        Ok(bytes) if marker.is_in(&bytes) => {}
        Ok(_) => return Delivery::NotTheTarget("its environment no longer holds the marker"),
        Err(ReadError::Gone) => return Delivery::Gone,
        Err(ReadError::Unreadable(_)) => {
            return Delivery::NotTheTarget("its environment is no longer readable")
        }
    }
    // The environment just read was the target's, not a successor's.
    if let Some(refused) = still_the_target(table, target) {
        return refused;
    }
    match table.send(&pin, signal) {
        Ok(()) => Delivery::Sent,
        Err(ReadError::Gone) => Delivery::Gone,
        Err(ReadError::Unreadable(e)) => Delivery::Failed(format!("cannot signal: {e}")),
    }
}

fn still_the_target<T: ProcessTable>(table: &T, target: ProcessIdentity) -> Option<Delivery> {
    match table.info(target.pid) {
        Ok(info) if info.identity == target && !info.zombie => None,
        Ok(info) if info.identity == target => Some(Delivery::Gone),
        Ok(_) => Some(Delivery::NotTheTarget("its pid now names another process")),
        Err(ReadError::Gone) => Some(Delivery::Gone),
        Err(ReadError::Unreadable(e)) => Some(Delivery::Failed(format!(
            "cannot re-read its identity: {e}"
        ))),
    }
}
