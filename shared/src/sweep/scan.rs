//! One pass over the process table, and one signal to one target. Both apply the rules of
//! SPEC section 6 to whatever table they are given: a process is the run's by its marker or
//! by its ancestry (the lineage net); readability of its environment decides between
//! signalling it and suspecting it.

use super::table::{
    ended_while_read, environ_wanted, Link, Marker, ProcessInfo, ProcessReads, ProcessTable,
    ReadError,
};
use crate::rundir::ProcessIdentity;
use nix::sys::signal::Signal;
use std::collections::{HashMap, HashSet};
use std::io;

/// What decides, for one sweep, which processes matter.
#[derive(Debug)]
pub(super) struct Rules<'a> {
    pub marker: &'a Marker,
    /// Start ticks of the workload; `None` when it was not recorded (no suspects then).
    pub since: Option<u64>,
    /// The sweeper's uid: only its processes can be suspects.
    pub uid: u32,
    /// The sweeper: never signalled, never counted (its pid cannot be reused while it runs).
    pub own_pid: u32,
    /// Never signalled, never counted, matched by identity: a process that took the pid of a
    /// protected one that ended is not protected.
    pub protected: &'a [ProcessIdentity],
    /// The process whose descendants (and itself) are the run's: the worker, the workload's
    /// subreaper. `None`: the marker alone decides.
    pub lineage: Option<ProcessIdentity>,
}

impl Rules<'_> {
    /// The earliest start this sweep's scans need read as they are now: its workload's, or
    /// its lineage root's when that is earlier. A process that started before it is passed
    /// over by the scan and ends a walk up the parent links as unrelated ([`ancestry`]), on
    /// its identity alone. `None` (no workload start): every process is looked at.
    pub fn horizon(&self) -> Option<u64> {
        let since = self.since?;
        Some(
            self.lineage
                .map_or(since, |root| since.min(root.start_ticks)),
        )
    }

    fn is_protected(&self, identity: ProcessIdentity) -> bool {
        identity.pid <= 1 || identity.pid == self.own_pid || self.protected.contains(&identity)
    }

    /// Same user, started at or after the workload: unreadable, it may be the run's. The
    /// owner is read only here, for the few processes that hide their environment; one that
    /// cannot be read (gone, or hidden by `hidepid`) is not this user's.
    fn is_suspect<R: Readings>(&self, readings: &mut R, info: &ProcessInfo) -> bool {
        self.since
            .is_some_and(|since| info.identity.start_ticks >= since)
            && matches!(readings.uid(info.identity.pid), Ok(uid) if uid == self.uid)
    }
}

/// Why a target is the run's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claim {
    /// Its environment holds the run's marker.
    Marked,
    /// Its environment is readable and lacks the marker, but its parent links reach the
    /// lineage root: it cleared or rewrote its environment.
    Descendant,
}

/// A process the sweep signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Target {
    pub identity: ProcessIdentity,
    pub claim: Claim,
}

/// The result of one scan.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Scan {
    /// Processes that are the run's by marker or ancestry, with a readable environment.
    pub targets: Vec<Target>,
    /// Processes that may be the run's but whose environment cannot be read.
    pub suspects: Vec<ProcessIdentity>,
    /// No process vanished, started exiting or changed identity while it was read (between
    /// its two identity reads, its ancestry included). Such a process may have been misread
    /// as not the run's just as it forked, so an empty scan is believed only when settled.
    pub settled: bool,
}

impl Scan {
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty() && self.suspects.is_empty()
    }
}

/// What the parent links of one process say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ancestry {
    /// The links reach the lineage root, which still holds its pid.
    Descendant,
    Unrelated,
    /// A link moved while it was followed (a parent exited, or its pid names a younger
    /// process): the process is being re-parented, and a later scan reads it again.
    Moving,
}

/// Where a walk up the parent links reads them.
pub(super) trait Parents {
    fn link(&mut self, pid: u32) -> Result<Link, ReadError>;
}

/// Reads parent links, fresh or remembered for the length of one scan. One run's processes
/// share their ancestors (another lane's worker, the daemon and what started it), so a scan
/// that remembers them reads each once instead of once per process below it: at 56 lanes
/// ending together that is most of the reads a sweep makes. A remembered link is a snapshot
/// as old as the scan; the scan confirms a verdict of descent from it with fresh reads
/// before it acts on it, and a missed descendant is read again by the next scan, fresh.
pub(super) struct Links<'t, T> {
    table: &'t T,
    remembered: Option<HashMap<u32, Link>>,
}

impl<'t, T: ProcessTable> Links<'t, T> {
    pub(super) fn fresh(table: &'t T) -> Self {
        Links {
            table,
            remembered: None,
        }
    }

    fn remembered(table: &'t T) -> Self {
        Links {
            table,
            remembered: Some(HashMap::new()),
        }
    }
}

impl<T: ProcessTable> Parents for Links<'_, T> {
    fn link(&mut self, pid: u32) -> Result<Link, ReadError> {
        let Some(remembered) = &mut self.remembered else {
            return self.table.link(pid);
        };
        if let Some(link) = remembered.get(&pid) {
            return Ok(*link);
        }
        // Failures are not remembered: a vanished parent is news the walk must see.
        let link = self.table.link(pid)?;
        remembered.insert(pid, link);
        Ok(link)
    }
}

/// What one scan reads, in the order it reads it: for each listed process its identity, its
/// environment (as whether it holds the marker), its parent links, its identity again, and
/// its owner where a suspect is possible. [`Live`] reads the table as the scan goes; a
/// snapshot (`super::snapshot`) answers with what another worker's scan of the same table
/// read in the same order, so that one reading of the table serves every worker that asked
/// for a scan before it began.
pub(super) trait Readings: Parents {
    fn pids(&mut self) -> io::Result<Vec<u32>>;
    /// The first identity read, before the environment.
    fn first(&mut self, pid: u32) -> Result<ProcessInfo, ReadError>;
    fn marked(&mut self, pid: u32, marker: &Marker) -> Result<bool, ReadError>;
    /// The second identity read, after the environment and the links.
    fn second(&mut self, pid: u32) -> Result<ProcessInfo, ReadError>;
    fn uid(&mut self, pid: u32) -> Result<u32, ReadError>;
    /// `judge` given the parent links as fresh reads had them right after the second read of
    /// `pid`, a process that ended while it was read.
    fn after_end(&mut self, pid: u32, judge: impl FnOnce(&mut dyn Parents) -> bool) -> bool;
    /// Whether `pid` was read through one handle on the process
    /// ([`super::table::ProcessReads::pinned`]): a second read that failed `Gone` then means
    /// it ended after the environment was read, and what was read was its own.
    fn pinned(&mut self, _pid: u32) -> bool {
        false
    }
}

/// The table itself, read now; parent links remembered for the length of the scan. Each
/// process is read as a snapshot reads it ([`ProcessTable::read_process`]: its identity, its
/// environment if it started since `since`, its identity again), the reads kept until the
/// scan asks for them.
pub(super) struct Live<'t, T> {
    table: &'t T,
    links: Links<'t, T>,
    since: Option<u64>,
    /// The reads of the process the scan is at, after its first identity.
    current: Option<(u32, ProcessReads)>,
}

impl<'t, T: ProcessTable> Live<'t, T> {
    pub(super) fn new(table: &'t T, since: Option<u64>) -> Self {
        Live {
            table,
            links: Links::remembered(table),
            since,
            current: None,
        }
    }

    /// The kept reads of `pid`, if the scan is at it.
    fn kept(&mut self, pid: u32) -> Option<&mut ProcessReads> {
        self.current
            .as_mut()
            .filter(|(at, _)| *at == pid)
            .map(|(_, reads)| reads)
    }
}

impl<T: ProcessTable> Parents for Live<'_, T> {
    fn link(&mut self, pid: u32) -> Result<Link, ReadError> {
        self.links.link(pid)
    }
}

impl<T: ProcessTable> Readings for Live<'_, T> {
    fn pids(&mut self) -> io::Result<Vec<u32>> {
        self.table.pids()
    }
    fn first(&mut self, pid: u32) -> Result<ProcessInfo, ReadError> {
        let since = self.since;
        let mut reads = self
            .table
            .read_process(pid, &|info| environ_wanted(since, info));
        let first = std::mem::replace(&mut reads.first, Err(ReadError::Gone));
        self.current = Some((pid, reads));
        first
    }
    fn marked(&mut self, pid: u32, marker: &Marker) -> Result<bool, ReadError> {
        let read = match self.kept(pid).and_then(|reads| reads.environ.take()) {
            Some(read) => read,
            None => self.table.environ(pid),
        };
        read.map(|bytes| marker.is_in(&bytes))
    }
    fn second(&mut self, pid: u32) -> Result<ProcessInfo, ReadError> {
        match self.kept(pid).and_then(|reads| reads.second.take()) {
            Some(read) => read,
            None => self.table.info(pid),
        }
    }
    fn uid(&mut self, pid: u32) -> Result<u32, ReadError> {
        match self.kept(pid).and_then(|reads| reads.uid.take()) {
            Some(read) => read,
            None => self.table.uid(pid),
        }
    }
    fn after_end(&mut self, _pid: u32, judge: impl FnOnce(&mut dyn Parents) -> bool) -> bool {
        judge(&mut Links::fresh(self.table))
    }
    fn pinned(&mut self, pid: u32) -> bool {
        self.kept(pid).is_some_and(|reads| reads.pinned)
    }
}

/// Follows the parent links of `info` up to the root. A link is trusted only if the parent
/// started no later than the child (a younger process under the parent's pid means the parent
/// ended and the pid was reused), and the root only if it still is the same live process after
/// the walk (so the last link really named it). A descendant of the worker stays one: orphans
/// are re-parented to the nearest subreaper, which is the worker or one of its descendants.
fn ancestry<P: Parents + ?Sized>(
    links: &mut P,
    root: ProcessIdentity,
    info: &ProcessInfo,
) -> Ancestry {
    if info.identity == root {
        return root_holds(links, root);
    }
    let (mut parent, mut child_start) = (info.ppid, info.identity.start_ticks);
    // No chain is longer than the kernel's largest pid_max (2^22); this only bounds a table
    // whose links form a loop.
    for _ in 0..1u32 << 22 {
        if parent == root.pid {
            if root.start_ticks > child_start {
                return Ancestry::Moving;
            }
            return root_holds(links, root);
        }
        if parent <= 1 {
            return Ancestry::Unrelated;
        }
        let link = match links.link(parent) {
            Ok(link) => link,
            Err(ReadError::Gone) => return Ancestry::Moving,
            // Another user's process that hides even its stat: the chain cannot be followed.
            Err(ReadError::Unreadable(_)) => return Ancestry::Unrelated,
        };
        // A parent older than the root is neither the root nor one of its descendants, so
        // the child is not one now, whatever this parent's state: what the run forks has
        // the root or a descendant of it for its parent, and what the run orphans goes to
        // the root (a subreaper) or to a descendant of it, never to an older process. The
        // walk ends here without reading further up: a reading based on an earlier one
        // (`super::snapshot`) knows of such a process only that it is still the same one.
        if link.identity.start_ticks < root.start_ticks {
            return Ancestry::Unrelated;
        }
        // A parent that has ended (a zombie) has already handed its children on.
        if link.ended || link.identity.start_ticks > child_start {
            return Ancestry::Moving;
        }
        (parent, child_start) = (link.ppid, link.identity.start_ticks);
    }
    Ancestry::Unrelated
}

fn root_holds<P: Parents + ?Sized>(links: &mut P, root: ProcessIdentity) -> Ancestry {
    match links.link(root.pid) {
        Ok(link) if link.identity == root && !link.ended => Ancestry::Descendant,
        // The root ended: what it left behind is re-parented elsewhere and out of reach.
        _ => Ancestry::Unrelated,
    }
}

/// `known`: the processes earlier scans of this sweep found to be the run's descendants. A
/// descendant stays the run's by identity whatever becomes of its parent links: once the
/// daemon's root (the workload) ends, its descendants are re-parented out of reach.
/// `readings` are the scan's reads of `table`; the fresh reads that confirm a verdict of
/// ancestry before it counts are `table`'s, now.
pub(super) fn scan<T: ProcessTable, R: Readings>(
    table: &T,
    readings: &mut R,
    rules: &Rules<'_>,
    known: &HashSet<ProcessIdentity>,
) -> io::Result<Scan> {
    let mut scan = Scan {
        settled: true,
        ..Scan::default()
    };
    for pid in readings.pids()? {
        if pid <= 1 || pid == rules.own_pid {
            continue;
        }
        // A process that started before the workload cannot be one the run started: the
        // environment is fixed at exec, so it could only carry the marker by exec-ing with an
        // environment the run handed to it, which is work handed to a server and beyond what
        // cleanup can attribute (the documented limit); nor can it descend from the workload.
        // Passing over it after its one `stat` read keeps a sweep's cost to the processes born
        // during the run, not the whole machine.
        let first = match readings.first(pid) {
            Ok(info) => info,
            // Gone before it was read: nothing of it was misread. Only a vanish *while* a
            // process is read unsettles the scan; on a busy machine some listed process has
            // nearly always exited by the time its turn comes, and counting those would
            // keep every scan unsettled.
            Err(ReadError::Gone) => continue,
            // Only another user's process hides its stat and status (`hidepid`): it can
            // neither be read for a marker, nor followed up its parents, nor be a suspect.
            Err(ReadError::Unreadable(_)) => continue,
        };
        if rules
            .since
            .is_some_and(|since| first.identity.start_ticks < since)
        {
            continue;
        }
        if first.zombie || first.kernel_thread || rules.is_protected(first.identity) {
            continue;
        }
        let environ = readings.marked(pid, rules.marker);
        if matches!(environ, Err(ReadError::Gone)) && readings.pinned(pid) {
            // Reaped before its environment was read, through a handle no successor answers
            // for: nothing of it was misread, as with a process gone before its first read.
            continue;
        }
        // Only an unmarked, readable process needs its parent links.
        let lineage = match (&environ, rules.lineage) {
            (Ok(false), Some(root)) => {
                Some(if known.contains(&first.identity) {
                    Ancestry::Descendant
                } else {
                    match ancestry(readings, root, &first) {
                        // Acted on only as fresh reads have it.
                        Ancestry::Descendant => ancestry(&mut Links::fresh(table), root, &first),
                        verdict => verdict,
                    }
                })
            }
            _ => None,
        };
        // The environment (and the links) belong to `first` only if it is still there,
        // unchanged, after the read, or if it was read through a handle on it that no
        // successor under its pid can answer for.
        let second = readings.second(pid);
        let exiting = match second {
            Ok(second) if second.identity == first.identity && !second.zombie => second.exiting,
            // It ended while it was read, but what was read is its own: a zombie keeps its
            // pid, and a pinned handle reads nobody else. Read as neither marked nor the
            // run's by ancestry, it is not the run's, and nothing it forked is: a child
            // inherits its environment and its ancestry. Another run's process ending as
            // this one is swept (lanes that end together) leaves this scan settled.
            // The links it was read with may be as old as the scan: the verdict stands
            // only as fresh reads have it.
            ref ended
                if ended_while_read(&first, ended, readings.pinned(pid))
                    && is_anothers(&environ, lineage)
                    && rules.lineage.is_none_or(|root| {
                        readings.after_end(pid, |links| {
                            ancestry(links, root, &first) == Ancestry::Unrelated
                        })
                    }) =>
            {
                continue;
            }
            // Gone, or another process under its pid: what was read may not have been its.
            _ => {
                scan.settled = false;
                continue;
            }
        };
        let target = |claim| Target {
            identity: first.identity,
            claim,
        };
        match (environ, lineage) {
            (Ok(true), _) => scan.targets.push(target(Claim::Marked)),
            (Ok(_), Some(Ancestry::Descendant)) => scan.targets.push(target(Claim::Descendant)),
            (Ok(_), Some(Ancestry::Moving)) => scan.settled = false,
            (Ok(_), _) => {}
            // Still there but without memory: it is exiting, and may have just forked. An
            // exiting process's environment can also read as refused (the kernel hands its
            // /proc files to root once its memory is gone): not a suspect either.
            (Err(ReadError::Gone), _) => scan.settled = false,
            (Err(ReadError::Unreadable(_)), _) if exiting => scan.settled = false,
            // Marker or ancestry, an unreadable environment authorises no signal. Whether it
            // is a suspect is rule 4's alone (same user, started during the run): another
            // user's unreadable descendant is ignored, as the runbook says.
            (Err(ReadError::Unreadable(_)), _) if rules.is_suspect(readings, &first) => {
                scan.suspects.push(first.identity);
            }
            (Err(ReadError::Unreadable(_)), _) => {}
        }
    }
    Ok(scan)
}

/// Whether a readable process is, as read, nobody this sweep looks for: its environment lacks
/// the marker and its parent links lead elsewhere than the lineage root (or there is no
/// root). A process still being re-parented (`Moving`) is undecided, not another's.
fn is_anothers(marked: &Result<bool, ReadError>, lineage: Option<Ancestry>) -> bool {
    matches!(marked, Ok(false)) && matches!(lineage, None | Some(Ancestry::Unrelated))
}

/// What became of one signal.
#[derive(Debug)]
pub(super) enum Delivery {
    Sent,
    /// The target ended before the signal.
    Gone,
    /// The pid no longer names the target, or the target is no longer the run's: nothing
    /// was sent.
    NotTheTarget(&'static str),
    /// The target is there but could not be checked or signalled.
    Failed(String),
}

/// Signals `target` only if, after pinning its pid, it is still the same process, its
/// environment is still readable, and it is still the run's: by its marker, or by its
/// ancestry (a descendant found by the scan stays one by identity: it was forked inside the
/// lineage, whoever its parent is now). A pid reused since the scan, or a process that became
/// unreadable, is never hit.
pub(super) fn signal_target<T: ProcessTable>(
    table: &T,
    Target {
        identity: target,
        claim,
    }: Target,
    rules: &Rules<'_>,
    signal: Signal,
) -> Delivery {
    let pin = match table.pin(target.pid) {
        Ok(pin) => pin,
        Err(ReadError::Gone) => return Delivery::Gone,
        Err(ReadError::Unreadable(e)) => return Delivery::Failed(format!("cannot pin: {e}")),
    };
    // The target was alive before the pin; alive with the same start after it, it held the
    // pid throughout, so the pin holds the target.
    let info = match still_the_target(table, target) {
        Ok(info) => info,
        Err(refused) => return refused,
    };
    match table.environ(target.pid) {
        Ok(bytes) if rules.marker.is_in(&bytes) => {}
        Ok(_) => {
            let descends = claim == Claim::Descendant
                || rules.lineage.is_some_and(|root| {
                    ancestry(&mut Links::fresh(table), root, &info) == Ancestry::Descendant
                });
            if !descends {
                return Delivery::NotTheTarget(
                    "it holds neither the marker nor the run's ancestry any more",
                );
            }
        }
        Err(ReadError::Gone) => return Delivery::Gone,
        Err(ReadError::Unreadable(_)) => {
            return Delivery::NotTheTarget("its environment is no longer readable")
        }
    }
    // The environment just read was the target's, not a successor's.
    if let Err(refused) = still_the_target(table, target) {
        return refused;
    }
    match table.send(&pin, signal) {
        Ok(()) => Delivery::Sent,
        Err(ReadError::Gone) => Delivery::Gone,
        Err(ReadError::Unreadable(e)) => Delivery::Failed(format!("cannot signal: {e}")),
    }
}

fn still_the_target<T: ProcessTable>(
    table: &T,
    target: ProcessIdentity,
) -> Result<ProcessInfo, Delivery> {
    match table.info(target.pid) {
        Ok(info) if info.identity == target && !info.zombie => Ok(info),
        Ok(info) if info.identity == target => Err(Delivery::Gone),
        Ok(_) => Err(Delivery::NotTheTarget("its pid now names another process")),
        Err(ReadError::Gone) => Err(Delivery::Gone),
        Err(ReadError::Unreadable(e)) => Err(Delivery::Failed(format!(
            "cannot re-read its identity: {e}"
        ))),
    }
}
