//! One scan's reads of the whole process table, kept so that other workers' scans can be
//! answered from them (`super::exchange`). A snapshot records, for every listed process, the
//! reads a scan makes in the order it makes them (identity, environment, identity again, the
//! owner of an unreadable one), without deciding anything: each worker applies its own rules
//! (its marker, its lineage root, its workload start, what it protects) to the same reads.
//!
//! A snapshot is only as good as the moment it began. A worker uses one only if it began after
//! the worker asked for a scan, so that it lists every process the worker's own scan would
//! have listed. Environments are read of processes started at or after the taker's workload;
//! a worker whose workload started earlier reads the few in between itself.
//!
//! A reading need not read again what no scan it serves decides anything by. A process that
//! started before every served sweeper's horizon (the earlier of its workload's start and its
//! lineage root's) is passed over by each of their scans, and ends each of their walks up the
//! parent links as unrelated, on its identity alone. So a reading based on the last published
//! one takes such a process's entry over from it, unread, when the pid cannot have been handed
//! out since ([`PidCursor::allocated_since`]): it is the same process, and only its identity
//! is relied on. Such a reading records its `floor`; a sweeper whose horizon is earlier
//! reads the few processes taken over between the two itself, as they are now.

use super::scan::{Parents, Readings};
use super::table::{
    ended_while_read, environ_wanted, Link, Marker, PidCursor, ProcessInfo, ProcessTable, ReadError,
};
use crate::ids::TaskId;
use crate::rundir::ProcessIdentity;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io;

/// The most marker entries kept for one process. A real environment holds one; more is a
/// workload playing games, and a snapshot with such a process is not used by anyone whose
/// scan it would decide (they scan on their own).
const MOST_MARKERS: usize = 8;

/// The snapshot's version: a reader of another version scans on its own. Version 3 was the
/// first in `postcard`'s encoding, where every field is written, in order; version 4 adds the
/// pid cursor and the floor.
const VERSION: u32 = 4;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    version: u32,
    /// The boot and pid namespace the pids and start ticks belong to.
    pub(super) scope: String,
    /// The taker's uid: the owners it could read are as this user reads them.
    pub(super) uid: u32,
    /// Environments were read only of processes started at or after these ticks (`None`:
    /// of every process).
    pub(super) since: Option<u64>,
    /// `CLOCK_MONOTONIC` nanoseconds when the listing began and when the last read ended.
    pub(super) began_ns: u64,
    pub(super) ended_ns: u64,
    /// The pid cursor, read before the listing: what a later reading based on this one
    /// bounds the pids handed out since by.
    cursor: Option<PidCursor>,
    /// Of a process that started before these ticks, only the identity is as read now: its
    /// entry may be an earlier reading's, taken over unread (`None`: every entry was read
    /// by this reading).
    pub(super) floor: Option<u64>,
    processes: Vec<Observed>,
}

/// What the scan read of one listed process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Observed {
    pid: u32,
    first: Read<ProcessInfo>,
    /// Absent where no scan reads it: a process started before `since`, a zombie, a kernel
    /// thread.
    environ: Option<Environ>,
    /// The owner, read only when the environment could not be.
    uid: Option<Read<u32>>,
    second: Option<Read<ProcessInfo>>,
    /// For a process that ended while it was read: its parent links, read fresh right after,
    /// in the order a walk up them reads them (a worker judging the snapshot later would find
    /// the parents gone too, and could not tell where the process was).
    chain: Vec<(u32, Read<Link>)>,
    /// Read through one handle on the process ([`ProcessTable::read_process`]): a read that
    /// failed `Gone` after the first means it ended then, and the others were its own.
    pinned: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Read<T> {
    Ok(T),
    Gone,
    /// Refused, with the OS error number (0 when there was none).
    Unreadable(i32),
}

/// An environment as far as any sweep cares: the values of its whole
/// `HOMEBASED_TASK_ID=<value>` entries that can be a task id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Environ {
    Markers(Vec<String>),
    /// More marker entries than a snapshot keeps.
    TooMany,
    Gone,
    Unreadable(i32),
}

impl<T> Read<T> {
    fn from_result(read: Result<T, ReadError>) -> Read<T> {
        match read {
            Ok(value) => Read::Ok(value),
            Err(ReadError::Gone) => Read::Gone,
            Err(ReadError::Unreadable(e)) => Read::Unreadable(e.raw_os_error().unwrap_or(0)),
        }
    }

    fn to_result(&self) -> Result<T, ReadError>
    where
        T: Copy,
    {
        match self {
            Read::Ok(value) => Ok(*value),
            Read::Gone => Err(ReadError::Gone),
            Read::Unreadable(code) => Err(unreadable(*code)),
        }
    }
}

fn unreadable(code: i32) -> ReadError {
    ReadError::Unreadable(if code == 0 {
        io::Error::other("refused")
    } else {
        io::Error::from_raw_os_error(code)
    })
}

impl Environ {
    fn of(read: Result<Vec<u8>, ReadError>) -> Environ {
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(ReadError::Gone) => return Environ::Gone,
            Err(ReadError::Unreadable(e)) => {
                return Environ::Unreadable(e.raw_os_error().unwrap_or(0))
            }
        };
        // Found by a vectorised search for the name, then checked to start a whole entry:
        // the taker reads the environment of every process born during its run, and a
        // split of each one into its entries was the largest of its own costs.
        const PREFIX: &[u8] = b"HOMEBASED_TASK_ID=";
        debug_assert_eq!(&PREFIX[..PREFIX.len() - 1], Marker::NAME.as_bytes());
        let mut markers = Vec::new();
        for at in memchr::memmem::find_iter(&bytes, PREFIX) {
            if at > 0 && bytes[at - 1] != 0 {
                continue;
            }
            let rest = &bytes[at + PREFIX.len()..];
            let value = &rest[..memchr::memchr(0, rest).unwrap_or(rest.len())];
            // Only a task id can be any sweep's marker value; anything else matches none.
            let Some(value) = std::str::from_utf8(value)
                .ok()
                .filter(|v| v.parse::<TaskId>().is_ok())
            else {
                continue;
            };
            if markers.len() == MOST_MARKERS {
                return Environ::TooMany;
            }
            markers.push(value.to_owned());
        }
        Environ::Markers(markers)
    }
}

/// The most links of one chain kept: a walk that needs more reads a link the snapshot does not
/// have, which counts as a parent gone (the scan is not trusted), never as unrelated.
const LONGEST_CHAIN: usize = 64;

/// The parent links of `info` up to pid 1 as a walk reads them, fresh, up to the first that
/// ends the walk whatever its root: a failed read, an ended parent, a younger one.
fn chain<T: ProcessTable>(table: &T, info: &ProcessInfo) -> Vec<(u32, Read<Link>)> {
    let (mut parent, mut child_start) = (info.ppid, info.identity.start_ticks);
    let mut chain = Vec::new();
    while parent > 1 && chain.len() < LONGEST_CHAIN {
        let link = table.link(parent);
        let next = match &link {
            Ok(link) if !link.ended && link.identity.start_ticks <= child_start => {
                Some((link.ppid, link.identity.start_ticks))
            }
            _ => None,
        };
        chain.push((parent, Read::from_result(link)));
        let Some(next) = next else { break };
        (parent, child_start) = next;
    }
    chain
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: comparable between the processes of one boot.
pub(super) fn monotonic_ns() -> io::Result<u64> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)?;
    let secs = u64::try_from(now.tv_sec()).map_err(io::Error::other)?;
    let nanos = u64::try_from(now.tv_nsec()).map_err(io::Error::other)?;
    Ok(secs * 1_000_000_000 + nanos)
}

impl Snapshot {
    /// Reads `table` as a scan would, for every process (the taker's own included: it is
    /// another worker to the others), reading environments of processes started at or after
    /// `since`. `began_ns` is now, read before the listing. Given a `base` (the last
    /// published reading) and a `floor` (at most the taker's own horizon), a process that
    /// started before `floor` and still holds the pid `base` found it under is taken over
    /// from `base` unread ([`Snapshot::still_the_same`]).
    pub(super) fn take<T: ProcessTable>(
        table: &T,
        scope: &str,
        since: Option<u64>,
        (floor, base): (Option<u64>, Option<&Snapshot>),
        began_ns: u64,
    ) -> io::Result<Snapshot> {
        let cursor = table.pid_cursor();
        let pids = table.pids()?;
        let mut carried = match (floor, base) {
            (Some(floor), Some(base)) if base.scope == scope && base.uid == table.own_uid() => {
                base.still_the_same(table, floor)
            }
            _ => HashMap::new(),
        };
        let floor = floor.filter(|_| !carried.is_empty());
        let mut processes = Vec::with_capacity(pids.len());
        for pid in pids {
            if pid <= 1 {
                continue;
            }
            if let Some(observed) = carried.remove(&pid) {
                processes.push(observed);
                continue;
            }
            let reads = table.read_process(pid, &|info| environ_wanted(since, info));
            let mut observed = Observed {
                pid,
                first: Read::from_result(reads.first),
                environ: reads.environ.map(Environ::of),
                uid: reads.uid.map(Read::from_result),
                second: None,
                chain: Vec::new(),
                pinned: reads.pinned,
            };
            if let (Read::Ok(info), Some(second)) = (&observed.first, reads.second) {
                if ended_while_read(info, &second, reads.pinned) {
                    observed.chain = chain(table, info);
                }
                observed.second = Some(Read::from_result(second));
            }
            processes.push(observed);
        }
        Ok(Snapshot {
            version: VERSION,
            scope: scope.to_owned(),
            uid: table.own_uid(),
            since,
            began_ns,
            // Never earlier than it began: a clock that cannot be read now ends it there.
            ended_ns: monotonic_ns().unwrap_or(began_ns),
            cursor,
            floor,
            processes,
        })
    }

    /// The entries of this reading that a reading listing the table now can take over
    /// unread, by pid: each of a process that started before `floor` and whose pid cannot
    /// have been handed out since this reading's cursor, as `table`'s cursor reads now
    /// (after the new listing, so that whatever it listed was created before). Only the
    /// identity is kept: whatever else it said of the process may have changed.
    fn still_the_same<T: ProcessTable>(&self, table: &T, floor: u64) -> HashMap<u32, Observed> {
        let (Some(then), Some(now)) = (self.cursor, table.pid_cursor()) else {
            return HashMap::new();
        };
        let allocated = then.allocated_since(&now);
        self.processes
            .iter()
            .filter_map(|p| match p.first {
                Read::Ok(info)
                    if info.identity.start_ticks < floor && !allocated.may_be_new(p.pid) =>
                {
                    Some((
                        p.pid,
                        Observed {
                            pid: p.pid,
                            first: Read::Ok(info),
                            environ: None,
                            uid: None,
                            second: None,
                            chain: Vec::new(),
                            pinned: p.pinned,
                        },
                    ))
                }
                _ => None,
            })
            .collect()
    }

    /// The snapshot as the exchange stores it, after its signed first line. `postcard`: a
    /// reading of a few hundred processes is read back by every sweep a burst serves, and
    /// in JSON its parsing and its MAC were a tenth of a worker's CPU (docs/BENCHMARKS.md,
    /// "Issue 45: where one run's CPU goes").
    pub(super) fn encode(&self) -> io::Result<Vec<u8>> {
        postcard::to_allocvec(self).map_err(io::Error::other)
    }

    /// A stored snapshot; `None` for anything that is not one of this version whole (a
    /// reader of another version, or bytes left over, scans on its own).
    pub(super) fn decode(bytes: &[u8]) -> Option<Snapshot> {
        match postcard::take_from_bytes::<Snapshot>(bytes) {
            Ok((snapshot, rest)) if rest.is_empty() && snapshot.version == VERSION => {
                Some(snapshot)
            }
            _ => None,
        }
    }

    /// Whether this snapshot can stand for a scan by a sweeper of `uid` in `scope`, looking
    /// at processes started at or after `since`, that it asked for at `asked_ns`. A snapshot
    /// that left out the environments of processes the sweeper looks at (its `since` is
    /// later) still serves: those few are read by the sweeper itself ([`SnapshotReadings`]),
    /// as are those it took over from an earlier reading that started at or after the
    /// sweeper's horizon (its floor is later than the horizon).
    pub(super) fn serves(&self, scope: &str, uid: u32, since: Option<u64>, asked_ns: u64) -> bool {
        self.version == VERSION
            && self.scope == scope
            && self.uid == uid
            && self.began_ns > asked_ns
            && !self.processes.iter().any(|p| {
                // A process whose markers were not all kept decides nothing for anyone whose
                // scan reads it.
                matches!(p.environ, Some(Environ::TooMany))
                    && matches!(p.first, Read::Ok(info)
                        if since.is_none_or(|since| info.identity.start_ticks >= since))
            })
    }

    /// The reads, for one scan with `horizon` ([`super::scan::Rules::horizon`]) that looks at
    /// processes started at or after `since`; `table` reads what the snapshot left out.
    pub(super) fn readings<'s, T: ProcessTable>(
        &'s self,
        table: &'s T,
        (since, horizon): (Option<u64>, Option<u64>),
    ) -> SnapshotReadings<'s, T> {
        SnapshotReadings {
            snapshot: self,
            table,
            since,
            horizon,
            by_pid: self
                .processes
                .iter()
                .enumerate()
                .map(|(at, p)| (p.pid, at))
                .collect(),
            read_here: HashMap::new(),
        }
    }
}

/// A snapshot answering a scan's reads. A process it listed but whose environment it did not
/// read (it started before the snapshot's `since`, yet the sweeper looks at it) is read here,
/// now: its environment, its identity again and its owner, as a live scan reads them. The
/// listing and the first identity stay the snapshot's. A process it took over from an earlier
/// reading (before its floor) that started at or after the sweeper's horizon is read here
/// whole, its first identity and its parent link included: of it the snapshot vouches only
/// that the pid still named it when the listing was made.
pub(super) struct SnapshotReadings<'s, T> {
    snapshot: &'s Snapshot,
    table: &'s T,
    since: Option<u64>,
    horizon: Option<u64>,
    by_pid: HashMap<u32, usize>,
    /// What was read here, now, of a process the snapshot listed but did not read whole.
    read_here: HashMap<u32, ReadHere>,
}

impl<T> SnapshotReadings<'_, T> {
    /// A pid the snapshot did not list was not there when it was taken: a parent that is not
    /// listed ended before, so its child is being re-parented.
    fn observed(&self, pid: u32) -> Option<&Observed> {
        self.by_pid
            .get(&pid)
            .map(|at| &self.snapshot.processes[*at])
    }

    /// The identity the snapshot lists under `pid`, if what it says of the process past
    /// that is as old as the reading it was taken over from, and this scan decides by it.
    fn taken_over(&self, observed: &Observed) -> Option<ProcessIdentity> {
        let Read::Ok(info) = &observed.first else {
            return None;
        };
        let start = info.identity.start_ticks;
        (self.snapshot.floor.is_some_and(|floor| start < floor)
            && self.horizon.is_none_or(|horizon| start >= horizon))
        .then_some(info.identity)
    }

    /// One recorded read of `pid`; a read the snapshot did not make is of a process gone.
    fn recorded<V: Copy>(
        &self,
        pid: u32,
        read: impl FnOnce(&Observed) -> Option<&Read<V>>,
    ) -> Result<V, ReadError> {
        self.observed(pid)
            .and_then(read)
            .map_or(Err(ReadError::Gone), Read::to_result)
    }
}

/// What a consumer read itself, through [`ProcessTable::read_process`], of a process the
/// snapshot listed without reading its environment, or took over unread.
struct ReadHere {
    /// Of a process taken over from an earlier reading: its environment, read here with its
    /// first identity, until the scan asks for it.
    environ: Option<Result<Vec<u8>, ReadError>>,
    second: Result<ProcessInfo, ReadError>,
    /// Read only when the environment was refused.
    uid: Option<Result<u32, ReadError>>,
    pinned: bool,
}

/// The links a snapshot read fresh for one process.
struct Chain<'s>(&'s [(u32, Read<Link>)]);

impl Parents for Chain<'_> {
    fn link(&mut self, pid: u32) -> Result<Link, ReadError> {
        match self.0.iter().find(|(at, _)| *at == pid) {
            Some((_, read)) => read.to_result(),
            None => Err(ReadError::Gone),
        }
    }
}

impl<T: ProcessTable> Parents for SnapshotReadings<'_, T> {
    fn link(&mut self, pid: u32) -> Result<Link, ReadError> {
        let observed = self.observed(pid).ok_or(ReadError::Gone)?;
        if let Some(listed) = self.taken_over(observed) {
            // As it is now, if the pid still names the process listed.
            return match self.table.link(pid) {
                Ok(link) if link.identity == listed => Ok(link),
                Ok(_) => Err(ReadError::Gone),
                Err(e) => Err(e),
            };
        }
        let info = observed.first.to_result()?;
        Ok(Link {
            identity: info.identity,
            ppid: info.ppid,
            ended: info.zombie,
        })
    }
}

impl<T: ProcessTable> Readings for SnapshotReadings<'_, T> {
    fn pids(&mut self) -> io::Result<Vec<u32>> {
        Ok(self.snapshot.processes.iter().map(|p| p.pid).collect())
    }

    fn first(&mut self, pid: u32) -> Result<ProcessInfo, ReadError> {
        let observed = self.observed(pid).ok_or(ReadError::Gone)?;
        let Some(listed) = self.taken_over(observed) else {
            return observed.first.to_result();
        };
        let since = self.since;
        let mut reads = self.table.read_process(pid, &|now| {
            now.identity == listed && environ_wanted(since, now)
        });
        match reads.first {
            Ok(now) if now.identity == listed => {
                self.read_here.insert(
                    pid,
                    ReadHere {
                        environ: reads.environ.take(),
                        second: reads.second.take().unwrap_or(Err(ReadError::Gone)),
                        uid: reads.uid.take(),
                        pinned: reads.pinned,
                    },
                );
                Ok(now)
            }
            // The listed process ended since the listing: nothing of it is misread (whoever
            // holds its pid now is listed by the next scan).
            Ok(_) | Err(ReadError::Gone) => Err(ReadError::Gone),
            Err(e) => Err(e),
        }
    }

    fn marked(&mut self, pid: u32, marker: &Marker) -> Result<bool, ReadError> {
        if let Some(environ) = self
            .read_here
            .get_mut(&pid)
            .and_then(|here| here.environ.take())
        {
            return environ.map(|bytes| marker.is_in(&bytes));
        }
        let Some(observed) = self.observed(pid) else {
            return Err(ReadError::Gone);
        };
        match &observed.environ {
            Some(Environ::Markers(values)) => {
                Ok(values.iter().any(|v| marker.has_value(v.as_bytes())))
            }
            Some(Environ::Unreadable(code)) => Err(unreadable(*code)),
            // `serves` keeps a snapshot with too many markers from any scan that reads them.
            Some(Environ::TooMany | Environ::Gone) => Err(ReadError::Gone),
            // Older than the snapshot's `since`, not than this scan's: read it here.
            None => {
                let listed = observed.first.to_result().ok().map(|info| info.identity);
                let mut reads = self
                    .table
                    .read_process(pid, &|now| Some(now.identity) == listed);
                let (marked, here) = if matches!(&reads.first, Ok(now) if Some(now.identity) == listed)
                {
                    let marked = reads
                        .environ
                        .take()
                        .unwrap_or(Err(ReadError::Gone))
                        .map(|bytes| marker.is_in(&bytes));
                    let here = ReadHere {
                        environ: None,
                        second: reads.second.take().unwrap_or(Err(ReadError::Gone)),
                        uid: reads.uid.take(),
                        pinned: reads.pinned,
                    };
                    (marked, here)
                } else {
                    // The listed process ended before its environment could be read here:
                    // nothing of it was misread (whoever holds its pid now is listed by the
                    // next scan).
                    let here = ReadHere {
                        environ: None,
                        second: Err(ReadError::Gone),
                        uid: None,
                        pinned: true,
                    };
                    (Err(ReadError::Gone), here)
                };
                self.read_here.insert(pid, here);
                marked
            }
        }
    }

    fn second(&mut self, pid: u32) -> Result<ProcessInfo, ReadError> {
        if let Some(here) = self.read_here.get_mut(&pid) {
            return std::mem::replace(&mut here.second, Err(ReadError::Gone));
        }
        self.recorded(pid, |p| p.second.as_ref())
    }

    fn after_end(&mut self, pid: u32, judge: impl FnOnce(&mut dyn Parents) -> bool) -> bool {
        if self.read_here.contains_key(&pid) {
            return judge(&mut super::scan::Links::fresh(self.table));
        }
        let chain = self.observed(pid).map_or(&[][..], |p| &p.chain[..]);
        judge(&mut Chain(chain))
    }

    fn pinned(&mut self, pid: u32) -> bool {
        match self.read_here.get(&pid) {
            Some(here) => here.pinned,
            None => self.observed(pid).is_some_and(|p| p.pinned),
        }
    }

    fn uid(&mut self, pid: u32) -> Result<u32, ReadError> {
        if let Some(here) = self.read_here.get_mut(&pid) {
            return here.uid.take().unwrap_or_else(|| self.table.uid(pid));
        }
        self.recorded(pid, |p| p.uid.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn markers(environ: &str) -> Environ {
        Environ::of(Ok(environ.as_bytes().to_vec()))
    }

    #[test]
    fn an_environment_keeps_the_task_ids_of_its_whole_marker_entries_only() {
        let (one, two) = (TaskId::new(), TaskId::new());
        assert_eq!(
            markers(&format!(
                "HOMEBASED_TASK_ID={one}\0A=HOMEBASED_TASK_ID={two}\0XHOMEBASED_TASK_ID={two}\0\
                 HOMEBASED_TASK_ID=not-a-task\0HOMEBASED_TASK_ID={two}x\0B=1\0HOMEBASED_TASK_ID={two}"
            )),
            Environ::Markers(vec![one.to_string(), two.to_string()])
        );
        assert_eq!(markers(""), Environ::Markers(vec![]));
        assert_eq!(markers("HOMEBASED_TASK_ID="), Environ::Markers(vec![]));
        let many: String = (0..=MOST_MARKERS)
            .map(|_| format!("HOMEBASED_TASK_ID={}\0", TaskId::new()))
            .collect();
        assert_eq!(markers(&many), Environ::TooMany);
        assert_eq!(Environ::of(Err(ReadError::Gone)), Environ::Gone);
    }

    #[test]
    fn a_stored_snapshot_reads_back_whole_and_nothing_else_does() {
        let table = super::super::fake::FakeTable::new(100, 1000);
        table.insert(
            200,
            super::super::fake::FakeProcess::marked(6000, 1000, TaskId::new()),
        );
        let snapshot = Snapshot::take(&table, "boot/ns", Some(5000), (None, None), 7).unwrap();
        let bytes = snapshot.encode().unwrap();
        assert_eq!(Snapshot::decode(&bytes), Some(snapshot.clone()));
        assert_eq!(Snapshot::decode(&bytes[..bytes.len() - 1]), None);
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Snapshot::decode(&longer), None);
        let older = Snapshot {
            version: 3,
            ..snapshot
        };
        assert_eq!(Snapshot::decode(&older.encode().unwrap()), None);
        assert_eq!(
            Snapshot::decode(b"{\"version\": 2, \"processes\": []}"),
            None
        );
    }
}
