//! The seam between the sweep and the operating system: what the sweep may ask of a process
//! table, and the run marker it looks for.

use crate::ids::TaskId;
use crate::rundir::ProcessIdentity;
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io;

/// What the sweep reads about one process before deciding anything about it: all of it
/// from the one `stat` line (the owner, needed only for a possible suspect, is asked apart:
/// [`ProcessTable::uid`]), because a sweep reads it for every process born during the run,
/// twice per scan, and on a busy machine that is most of a hand-over's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub identity: ProcessIdentity,
    /// The parent's pid (`/proc/<pid>/stat` field 4, the real parent's thread group): the
    /// link the lineage net follows. An orphan's parent is its subreaper, or 1.
    pub ppid: u32,
    /// A zombie has no environment and holds nothing but its pid; it is never a target or a
    /// suspect. A thread-group leader that exited while other threads of its process run is
    /// not one: the process lives on, and is read through a live thread.
    pub zombie: bool,
    /// A kernel thread has no environment (reading it answers `ESRCH`) and runs no user work;
    /// it is never a target or a suspect.
    pub kernel_thread: bool,
    /// Being torn down (`PF_EXITING`, or no memory left): its environment may read as
    /// refused although it is neither hidden nor a suspect, so such a read unsettles the
    /// scan instead.
    pub exiting: bool,
}

/// What the lineage net reads of a parent: who it is, its own parent, and whether it has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub identity: ProcessIdentity,
    pub ppid: u32,
    /// A zombie with no live thread left: it has handed its children on.
    pub ended: bool,
}

/// Where the kernel's allocation of pids stood at one instant: enough to bound which pids
/// can have been handed out between two instants, so that a reading of the table can know a
/// pid still names the process an earlier reading found there without reading it again
/// (`super::snapshot`, a reading based on the last one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PidCursor {
    /// The pid last handed out in this pid namespace (`/proc/loadavg`, its last field).
    pub last_pid: u32,
    /// Tasks ever created on this machine, threads included (`/proc/stat`, `processes`).
    pub forks: u64,
    /// Tasks alive on this machine (`/proc/loadavg`, after the slash).
    pub tasks: u32,
    /// One above the largest pid (`/proc/sys/kernel/pid_max`).
    pub pid_max: u32,
}

/// The pids that can have been handed out between two readings of the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocated {
    /// Every pid handed out since lies after `after` up to `upto`, going round past
    /// `pid_max` when `upto` is below `after`; empty when they are equal.
    Between { after: u32, upto: u32 },
    /// The cursor may have gone round the whole range: any pid may name a new process.
    Any,
}

/// The pids below this are handed out only until the cursor first goes round
/// (`RESERVED_PIDS` in the kernel).
const RESERVED_PIDS: u64 = 300;

impl PidCursor {
    /// Which pids `later` (read after) can find handed out since `self` (read before).
    ///
    /// The kernel hands out a pid by moving its cursor forward to the next free pid, going
    /// round at `pid_max`; so, unless it went round the whole range, every pid handed out
    /// since lies between the two cursors. To go round it must pass every pid of the range
    /// once: each one it passes it either hands out (counted in `forks`, a count over every
    /// namespace, so an upper bound for this one) or skips as taken, by a task alive at the
    /// first reading or by one created since. So it cannot have gone round while
    /// `2 * forks + tasks` stays below the range. A task that chooses its own pid
    /// (`clone3` with `set_tid`, a write to `ns_last_pid`) needs `CAP_SYS_ADMIN` or
    /// `CAP_CHECKPOINT_RESTORE` over the pid namespace: the documented limit, as for a
    /// workload that can trace the worker.
    pub fn allocated_since(&self, later: &PidCursor) -> Allocated {
        let Some(forks) = later.forks.checked_sub(self.forks) else {
            return Allocated::Any;
        };
        if forks == 0 {
            return Allocated::Between {
                after: self.last_pid,
                upto: self.last_pid,
            };
        }
        let range = u64::from(self.pid_max.min(later.pid_max)).saturating_sub(RESERVED_PIDS);
        let passed = forks
            .saturating_mul(2)
            .saturating_add(u64::from(self.tasks));
        if self.pid_max != later.pid_max || passed >= range {
            return Allocated::Any;
        }
        Allocated::Between {
            after: self.last_pid,
            upto: later.last_pid,
        }
    }
}

impl Allocated {
    /// Whether `pid` can name a process created since the first reading.
    pub fn may_be_new(&self, pid: u32) -> bool {
        match *self {
            Allocated::Any => true,
            Allocated::Between { after, upto } if after <= upto => pid > after && pid <= upto,
            Allocated::Between { after, upto } => pid > after || pid <= upto,
        }
    }
}

/// Why something about a process could not be read or done.
#[derive(Debug)]
pub enum ReadError {
    /// The process is not there (any more): `ENOENT` or `ESRCH`.
    Gone,
    /// It is there, but this was refused or failed (`EACCES`, `EPERM`, anything else).
    Unreadable(io::Error),
}

impl ReadError {
    /// Sorts an OS error: a vanished process is not the same as a refused read.
    pub fn from_io(e: io::Error) -> ReadError {
        if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) {
            ReadError::Gone
        } else {
            ReadError::Unreadable(e)
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Gone => f.write_str("the process is gone"),
            ReadError::Unreadable(e) => e.fmt(f),
        }
    }
}

/// A process table the sweep can scan and act on. [`super::ProcTable`] reads `/proc`;
/// [`super::FakeTable`] is an in-memory table for tests.
///
/// The table only reads and delivers; every decision (settled or not, marked or not,
/// suspect or not, whether a pinned process is still the target) is made by the sweep, so
/// that the fake exercises the same rules as the real table.
pub trait ProcessTable {
    /// A handle that names one process for good: once taken, a reused pid is not it.
    type Pin;

    /// The sweeper's own pid: never signalled, never counted.
    fn own_pid(&self) -> u32;
    /// The sweeper's real uid: suspects are processes of this user.
    fn own_uid(&self) -> u32;
    /// Every pid at the moment of listing. An error is a failed enumeration, never an empty
    /// table.
    fn pids(&self) -> io::Result<Vec<u32>>;
    /// Identity, parent, zombie and exiting state of one process.
    fn info(&self, pid: u32) -> Result<ProcessInfo, ReadError>;
    /// The real uid (`/proc/<pid>/status`, `Uid:` first field), not the directory owner: a
    /// non-dumpable process's directory belongs to root, its status still names its user.
    /// Asked only of a process whose environment cannot be read (is it a suspect?).
    fn uid(&self, pid: u32) -> Result<u32, ReadError>;
    /// Only what a parent link needs. A table may answer it more cheaply than [`Self::info`]
    /// (the `stat` line alone).
    fn link(&self, pid: u32) -> Result<Link, ReadError> {
        self.info(pid).map(|i| Link {
            identity: i.identity,
            ppid: i.ppid,
            ended: i.zombie,
        })
    }
    /// The raw environment (`NUL`-separated `NAME=value` entries), of a live thread when the
    /// leader has exited.
    fn environ(&self, pid: u32) -> Result<Vec<u8>, ReadError>;
    /// The reads a scan makes of one process, in its order: its identity; then, if
    /// `wanted` says so of that identity, its environment, its owner if the environment was
    /// refused, and its identity again. A table
    /// that makes them through one handle on the process says so ([`ProcessReads::pinned`]):
    /// a read after the process ended then fails `Gone`, and never answers for a process
    /// that took its pid over. Without one (this default), the environment may be another
    /// process's when the pid changed hands between the reads.
    fn read_process(&self, pid: u32, wanted: &dyn Fn(&ProcessInfo) -> bool) -> ProcessReads {
        let first = self.info(pid);
        let (mut environ, mut uid, mut second) = (None, None, None);
        if matches!(&first, Ok(info) if wanted(info)) {
            let read = self.environ(pid);
            if matches!(read, Err(ReadError::Unreadable(_))) {
                uid = Some(self.uid(pid));
            }
            environ = Some(read);
            second = Some(self.info(pid));
        }
        ProcessReads {
            first,
            environ,
            uid,
            second,
            pinned: false,
        }
    }
    /// Where the allocation of pids stands now ([`PidCursor`]); `None` where it cannot be
    /// read, and then every reading reads every process.
    fn pid_cursor(&self) -> Option<PidCursor> {
        None
    }
    /// Pins whatever process holds `pid` now. The caller proves it is the one it means by
    /// reading its identity after pinning.
    fn pin(&self, pid: u32) -> Result<Self::Pin, ReadError>;
    /// Delivers `signal` to the pinned process; `Gone` once it has ended, whoever holds its
    /// pid now.
    fn send(&self, pin: &Self::Pin, signal: Signal) -> Result<(), ReadError>;
}

/// What [`ProcessTable::read_process`] read of one process.
#[derive(Debug)]
pub struct ProcessReads {
    pub first: Result<ProcessInfo, ReadError>,
    /// Read only when the first identity was wanted.
    pub environ: Option<Result<Vec<u8>, ReadError>>,
    /// Read only when the environment was refused.
    pub uid: Option<Result<u32, ReadError>>,
    pub second: Option<Result<ProcessInfo, ReadError>>,
    /// All three were read through one handle on the process: whatever succeeded was that
    /// process's own, and a read that failed `Gone` after the first means it ended then.
    pub pinned: bool,
}

/// Whether a scan that looks at processes started at or after `since` reads this one's
/// environment: a kernel thread and a zombie have none.
pub fn environ_wanted(since: Option<u64>, info: &ProcessInfo) -> bool {
    since.is_none_or(|since| info.identity.start_ticks >= since)
        && !info.zombie
        && !info.kernel_thread
}

/// Whether the process `first` names ended while it was read, with what was read its own: the
/// second read finds it a zombie under its own identity (a zombie keeps its pid), or, read
/// through a pinned handle, finds it gone.
pub fn ended_while_read(
    first: &ProcessInfo,
    second: &Result<ProcessInfo, ReadError>,
    pinned: bool,
) -> bool {
    match second {
        Ok(second) => second.identity == first.identity && second.zombie,
        Err(ReadError::Gone) => pinned,
        Err(ReadError::Unreadable(_)) => false,
    }
}

/// The run marker: the exact environment entry `HOMEBASED_TASK_ID=<task>`.
#[derive(Debug, Clone)]
pub struct Marker {
    /// The entry's searcher (it owns the entry, its needle), built once: a sweep searches
    /// every environment it reads.
    finder: memchr::memmem::Finder<'static>,
}

impl PartialEq for Marker {
    fn eq(&self, other: &Marker) -> bool {
        self.entry() == other.entry()
    }
}

impl Eq for Marker {}

impl Marker {
    pub const NAME: &'static str = "HOMEBASED_TASK_ID";

    pub fn for_task(task: TaskId) -> Marker {
        let entry = format!("{}={task}", Marker::NAME).into_bytes();
        Marker {
            finder: memchr::memmem::Finder::new(&entry).into_owned(),
        }
    }

    /// The entry as it appears in an environment.
    pub fn entry(&self) -> &[u8] {
        self.finder.needle()
    }

    /// True when `value` is the marker's value: an environment entry `HOMEBASED_TASK_ID=value`
    /// is then the marker.
    pub fn has_value(&self, value: &[u8]) -> bool {
        self.entry()
            .strip_prefix(Marker::NAME.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
            .is_some_and(|own| own == value)
    }

    /// True when one whole entry of `environ` is the marker (a longer value, or the marker
    /// inside another variable's value, is not).
    pub fn is_in(&self, environ: &[u8]) -> bool {
        // Found by a vectorised search, then checked to be a whole entry: every sweep reads
        // the environment of each process born during the run, so this is its hottest loop.
        self.finder.find_iter(environ).any(|at| {
            let end = at + self.entry().len();
            (at == 0 || environ[at - 1] == 0) && environ.get(end).is_none_or(|b| *b == 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_matches_whole_entries_only() {
        let task = TaskId::new();
        let marker = Marker::for_task(task);
        let exact = format!("PATH=/bin\0HOMEBASED_TASK_ID={task}\0HOME=/x\0");
        assert!(marker.is_in(exact.as_bytes()));
        let last = format!("A=1\0HOMEBASED_TASK_ID={task}");
        assert!(marker.is_in(last.as_bytes()), "no trailing NUL is needed");
        let longer = format!("HOMEBASED_TASK_ID={task}x\0");
        assert!(!marker.is_in(longer.as_bytes()));
        let inside = format!("OTHER=HOMEBASED_TASK_ID={task}\0");
        assert!(!marker.is_in(inside.as_bytes()));
        let other = format!("HOMEBASED_TASK_ID={}\0", TaskId::new());
        assert!(!marker.is_in(other.as_bytes()));
        assert!(!marker.is_in(b""));
        let first = format!("HOMEBASED_TASK_ID={task}\0A=1\0");
        assert!(
            marker.is_in(first.as_bytes()),
            "the first entry needs no NUL before it"
        );
        let later = format!("OTHER=HOMEBASED_TASK_ID={task}\0HOMEBASED_TASK_ID={task}\0");
        assert!(
            marker.is_in(later.as_bytes()),
            "an occurrence inside a value does not hide a whole entry after it"
        );
        let prefix = format!("XHOMEBASED_TASK_ID={task}\0");
        assert!(!marker.is_in(prefix.as_bytes()));
    }

    fn cursor(last_pid: u32, forks: u64) -> PidCursor {
        PidCursor {
            last_pid,
            forks,
            tasks: 200,
            pid_max: 32768,
        }
    }

    #[test]
    fn the_pids_handed_out_between_two_cursors_lie_between_them_unless_it_may_have_gone_round() {
        let before = cursor(5000, 1_000);
        let same = before.allocated_since(&cursor(5000, 1_000));
        assert!(
            !(1..32768).any(|pid| same.may_be_new(pid)),
            "no fork, no new pid"
        );
        let on = before.allocated_since(&cursor(5100, 1_150));
        assert_eq!(
            on,
            Allocated::Between {
                after: 5000,
                upto: 5100
            }
        );
        assert!(!on.may_be_new(5000) && on.may_be_new(5001) && on.may_be_new(5100));
        assert!(!on.may_be_new(5101) && !on.may_be_new(300));
        // Round past pid_max once: the new pids are above the first cursor or at most the
        // second.
        let round = cursor(32000, 1_000).allocated_since(&cursor(400, 2_000));
        assert!(round.may_be_new(32767) && round.may_be_new(300) && round.may_be_new(400));
        assert!(!round.may_be_new(401) && !round.may_be_new(32000) && !round.may_be_new(5000));
        // Enough forks to have passed every pid (2 forks + tasks alive >= the range): any.
        assert_eq!(
            before.allocated_since(&cursor(5100, 1_000 + 16_200)),
            Allocated::Any
        );
        assert_ne!(
            before.allocated_since(&cursor(5100, 1_000 + 16_000)),
            Allocated::Any
        );
        // A count that went back (another boot, a forged reading) or another pid_max proves
        // nothing.
        assert_eq!(before.allocated_since(&cursor(5000, 999)), Allocated::Any);
        let wider = PidCursor {
            pid_max: 4_194_304,
            ..cursor(5100, 1_001)
        };
        assert_eq!(before.allocated_since(&wider), Allocated::Any);
    }

    #[test]
    fn vanished_and_refused_reads_are_told_apart() {
        assert!(matches!(
            ReadError::from_io(io::Error::from_raw_os_error(libc::ENOENT)),
            ReadError::Gone
        ));
        assert!(matches!(
            ReadError::from_io(io::Error::from_raw_os_error(libc::ESRCH)),
            ReadError::Gone
        ));
        assert!(matches!(
            ReadError::from_io(io::Error::from_raw_os_error(libc::EACCES)),
            ReadError::Unreadable(_)
        ));
    }
}
