//! The sweep (SPEC section 6, steps 2 to 4): after a run's process group is empty, find every
//! process that is the run's and stop it, within a bound. Used by the worker after its
//! workload, and by the daemon for a lost worker.
//!
//! A process is the run's by its marker (`HOMEBASED_TASK_ID=<task>` in its environment) or by
//! its ancestry (the lineage net: its parent links reach the [`Sweep::lineage`] root, the
//! worker that is the workload's subreaper), whatever its environment says. Readability
//! decides what is done with it: a readable environment makes it a target (signalled), an
//! unreadable one at most a suspect (rule 4: same user, started during the run; never
//! signalled). A process with neither marker nor ancestry is never touched.
//!
//! The loop: scan; TERM every target; rescan every `rescan`; KILL a target still the run's
//! `term_grace` after its TERM; give up at `bound`. The table is empty only after two
//! consecutive settled scans (no process vanished, started exiting, changed identity or was
//! re-parented while it was read) found no target and no suspect, so a process forked by one
//! that exited while a scan read it is caught by a later scan.
//! Every signal goes through a pin and a fresh identity, readability and marker-or-ancestry
//! check; protected processes (by identity) are never signalled and never counted; suspects
//! are never signalled.

mod exchange;
mod fake;
mod key;
mod proc_table;
mod scan;
#[cfg(test)]
mod sharing_tests;
mod snapshot;
mod table;
#[cfg(test)]
mod tests;

pub use exchange::Exchange;
use exchange::Unshared;
pub use fake::{FakeClock, FakeEvent, FakeProcess, FakeTable, FakeTrigger};
pub use key::SweepKey;
pub use proc_table::ProcTable;
pub use table::{Link, Marker, ProcessInfo, ProcessTable, ReadError};

use crate::config::CleanupConfig;
use crate::ids::TaskId;
use crate::process;
use crate::rundir::{
    CleanupOutcome, ProcessIdentity, ProtectedProcess, RemainingProcess, RemainingReason,
};
use nix::sys::signal::Signal;
use scan::{Claim, Delivery, Rules, Scan, Target};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Time as the sweep sees it. Injected so that unit tests with a fake table never sleep, and
/// so that the worker can reap its orphans while it waits.
pub trait Clock {
    fn now(&self) -> Instant;
    /// Waits about `duration` (less is fine: the sweep re-reads the clock).
    fn sleep(&mut self, duration: Duration);
}

/// The real clock and a plain sleep.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn sleep(&mut self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// One sweep for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    /// The run whose marker is looked for.
    pub task: TaskId,
    /// Kernel start ticks of the workload (`ChildRecord.process.start_ticks`): a same-user
    /// unreadable process started at or after it is a suspect. `None` when the start was not
    /// recorded: unreadable processes are then ignored.
    pub workload_start: Option<u64>,
    pub config: CleanupConfig,
    /// Never signalled, never counted: the daemon, live workers, by identity (a process that
    /// took the pid of one that ended is not protected). The sweeper itself and pid 1 always
    /// are.
    pub protected: Vec<ProcessIdentity>,
    /// The lineage root: the process whose descendants (to any depth, by parent links) are the
    /// run's even without the marker. The worker passes itself (the workload's subreaper, so
    /// orphans come back under it); `None`: the marker alone decides.
    pub lineage: Option<ProcessIdentity>,
}

/// The identities of the processes `run.json` protects. A bare pid (an older `run.json`) is
/// resolved to whatever holds that pid now, as the old match by number did; a pid that names
/// no process protects nothing.
pub fn protected_identities(list: &[ProtectedProcess]) -> Vec<ProcessIdentity> {
    list.iter()
        .filter_map(|p| match p {
            ProtectedProcess::Identity(identity) => Some(*identity),
            ProtectedProcess::Pid(pid) => process::identity(*pid).ok(),
        })
        .collect()
}

/// A signal the sweep (or the fake table) delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signalled {
    pub process: ProcessIdentity,
    pub signal: Signal,
}

/// What a sweep found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swept {
    pub outcome: CleanupOutcome,
    /// Every signal delivered, in order.
    pub signalled: Vec<Signalled>,
    /// The targets that were the run's by ancestry alone (no marker), once each, when first
    /// signalled.
    pub descendants: Vec<ProcessIdentity>,
    /// Lines worth a log entry: signals withheld or refused, and why.
    pub notes: Vec<String>,
    pub scans: u32,
    /// Of the scans, those answered by another worker's reading of the table
    /// ([`Exchange`]).
    pub shared: u32,
}

impl Swept {
    /// Keeps each note once: a refusal that repeats on every rescan is one line.
    fn note(&mut self, line: String) {
        if !self.notes.contains(&line) {
            self.notes.push(line);
        }
    }
}

/// One fixed key for the unit tests' exchanges.
#[cfg(test)]
fn test_key() -> SweepKey {
    SweepKey::from_bytes([42; key::KEY_LEN])
}

/// The longest a scan waits for the exchange's lock before the sweep goes on alone.
const SHARING_PATIENCE: Duration = Duration::from_secs(1);

/// A marked target's progress: when it got TERM, and whether it got KILL.
#[derive(Debug, Clone, Copy)]
struct Stage {
    termed_at: Instant,
    killed: bool,
}

impl Sweep {
    pub fn run<T: ProcessTable, C: Clock>(&self, table: &T, clock: &mut C) -> Swept {
        self.run_with(table, clock, None)
    }

    /// [`Sweep::run`], each scan answered through `exchange` by a reading of the table that
    /// began after the scan was asked for (this worker's own, or another's). Given up for the
    /// rest of the sweep, with a note, the first time the exchange cannot answer.
    pub fn run_sharing<T: ProcessTable, C: Clock>(
        &self,
        table: &T,
        clock: &mut C,
        exchange: &Exchange,
    ) -> Swept {
        self.run_with(table, clock, Some(exchange))
    }

    fn run_with<T: ProcessTable, C: Clock>(
        &self,
        table: &T,
        clock: &mut C,
        mut exchange: Option<&Exchange>,
    ) -> Swept {
        let marker = Marker::for_task(self.task);
        let rules = Rules {
            marker: &marker,
            since: self.workload_start,
            uid: table.own_uid(),
            own_pid: table.own_pid(),
            protected: &self.protected,
            lineage: self.lineage,
        };
        let mut swept = Swept {
            outcome: CleanupOutcome::Clean,
            signalled: Vec::new(),
            descendants: Vec::new(),
            notes: Vec::new(),
            scans: 0,
            shared: 0,
        };
        let deadline = clock.now() + self.config.bound;
        let mut stages: HashMap<ProcessIdentity, Stage> = HashMap::new();
        let mut descendants: HashSet<ProcessIdentity> = HashSet::new();
        let mut settled_empty = 0u32;
        let mut last_ended_ns = None;
        // Consecutive scans that found nothing to signal but could not be trusted.
        let mut untrusted = 0u32;
        loop {
            // A stopped worker holding the exchange waits up nobody past the bound.
            let patience = SHARING_PATIENCE.min(deadline.saturating_duration_since(clock.now()));
            // A confirming scan only has to begin after the scan it confirms ended: a process
            // forked while that one read the table is listed by any later listing.
            let asked_ns = match (settled_empty, last_ended_ns) {
                (1, Some(ended)) => Some(ended),
                _ => snapshot::monotonic_ns().ok(),
            };
            let found = match Self::scan_once(
                table,
                &rules,
                &descendants,
                (&mut exchange, asked_ns, patience),
                &mut swept,
            ) {
                Ok((found, ended_ns)) => {
                    last_ended_ns = ended_ns;
                    found
                }
                Err(e) => {
                    swept.outcome = CleanupOutcome::EnumerationFailed {
                        message: format!("cannot list processes: {e}"),
                    };
                    return swept;
                }
            };
            swept.scans += 1;
            descendants.extend(
                found
                    .targets
                    .iter()
                    .filter(|t| t.claim == Claim::Descendant)
                    .map(|t| t.identity),
            );
            settled_empty = if found.is_empty() && found.settled {
                settled_empty + 1
            } else {
                0
            };
            if settled_empty >= 2 {
                return swept;
            }
            untrusted = if found.is_empty() && !found.settled {
                untrusted + 1
            } else {
                0
            };
            // Nothing marked or suspect, and nothing moved while it was read: confirm with a
            // second scan at once. The rescan pace is for waiting on signalled processes;
            // a process forked during the first scan is listed by the second either way.
            if settled_empty == 1 {
                // A zero wait still lets the clock do its chores: the worker's clock reaps,
                // so a target killed a moment ago does not outlive the sweep as a zombie.
                clock.sleep(Duration::ZERO);
                continue;
            }
            let now = clock.now();
            for target in &found.targets {
                self.advance(table, &rules, *target, now, &mut stages, &mut swept);
            }
            if now >= deadline {
                // One settled empty scan already: a second, at once, may still confirm it.
                if settled_empty == 1 {
                    continue;
                }
                swept.outcome = self.at_bound(found);
                return swept;
            }
            clock.sleep(self.pause(untrusted).min(deadline - now));
        }
    }

    /// The wait before the next scan. The rescan pace is for signalled processes to end; a
    /// scan that signalled nothing, only saw the table move as it read it (at 56 lanes, other
    /// runs' processes ending at that instant), is repeated sooner: 5 ms, doubling up to the
    /// pace while the table keeps moving.
    fn pause(&self, untrusted: u32) -> Duration {
        if untrusted == 0 {
            return self.config.rescan;
        }
        let first = Duration::from_millis(5);
        first
            .saturating_mul(1 << (untrusted - 1).min(16))
            .min(self.config.rescan)
    }

    /// One scan, and when it ended: through the exchange (a reading of the table that began
    /// after `asked_ns`) while it answers, else of the table alone. Without a clock
    /// (`asked_ns` unknown) no snapshot can be shown to be recent enough.
    fn scan_once<T: ProcessTable>(
        table: &T,
        rules: &Rules<'_>,
        known: &HashSet<ProcessIdentity>,
        (exchange, asked_ns, patience): (&mut Option<&Exchange>, Option<u64>, Duration),
        swept: &mut Swept,
    ) -> std::io::Result<(Scan, Option<u64>)> {
        if let (Some(_), None) = (*exchange, asked_ns) {
            swept.note("scans no longer shared with other workers: no monotonic clock".into());
            *exchange = None;
        }
        if let (Some(shared), Some(asked_ns)) = (*exchange, asked_ns) {
            match shared.snapshot_after(table, (rules.since, rules.horizon()), asked_ns, patience) {
                Ok(had) => {
                    swept.shared += u32::from(!had.taken);
                    let found = scan::scan(
                        table,
                        &mut had.snapshot.readings(table, (rules.since, rules.horizon())),
                        rules,
                        known,
                    )?;
                    return Ok((found, Some(had.snapshot.ended_ns)));
                }
                Err(Unshared::Listing(e)) => return Err(e),
                Err(Unshared::Exchange(e)) => {
                    swept.note(format!("scans no longer shared with other workers: {e}"));
                    *exchange = None;
                }
            }
        }
        let found = scan::scan(
            table,
            &mut scan::Live::new(table, rules.since),
            rules,
            known,
        )?;
        Ok((found, snapshot::monotonic_ns().ok()))
    }

    /// TERM on first sight, KILL once `term_grace` has passed since the TERM.
    fn advance<T: ProcessTable>(
        &self,
        table: &T,
        rules: &Rules<'_>,
        Target {
            identity: target,
            claim,
        }: Target,
        now: Instant,
        stages: &mut HashMap<ProcessIdentity, Stage>,
        swept: &mut Swept,
    ) {
        let signal = match stages.get(&target) {
            None => Signal::SIGTERM,
            Some(stage)
                if !stage.killed
                    && now.duration_since(stage.termed_at) >= self.config.term_grace =>
            {
                Signal::SIGKILL
            }
            Some(_) => return,
        };
        let name = format!(
            "pid {} (start {}) {}",
            target.pid,
            target.start_ticks,
            match claim {
                Claim::Marked => "with the marker",
                Claim::Descendant => "of the run by its ancestry, without the marker",
            }
        );
        match scan::signal_target(
            table,
            Target {
                identity: target,
                claim,
            },
            rules,
            signal,
        ) {
            Delivery::Sent => {
                swept.signalled.push(Signalled {
                    process: target,
                    signal,
                });
                if claim == Claim::Descendant && !swept.descendants.contains(&target) {
                    swept.descendants.push(target);
                }
                let stage = stages.entry(target).or_insert(Stage {
                    termed_at: now,
                    killed: false,
                });
                stage.killed |= signal == Signal::SIGKILL;
            }
            Delivery::Gone => {}
            Delivery::NotTheTarget(why) => {
                swept.note(format!("{signal} withheld from {name}: {why}"))
            }
            Delivery::Failed(why) => swept.note(format!("{signal} not delivered to {name}: {why}")),
        }
    }

    /// The failure at the bound, from the last scan: every remaining process by identity.
    fn at_bound(&self, last: Scan) -> CleanupOutcome {
        let listed = |ids: Vec<ProcessIdentity>, reason| {
            ids.into_iter().map(move |id| RemainingProcess {
                pid: id.pid,
                start_ticks: id.start_ticks,
                reason,
            })
        };
        if !last.targets.is_empty() {
            // `marked` stands for both claims: the record has no reason of its own for a
            // descendant without the marker.
            let targets = last.targets.iter().map(|t| t.identity).collect();
            let remaining = listed(targets, RemainingReason::Marked)
                .chain(listed(last.suspects, RemainingReason::Suspect))
                .collect();
            return CleanupOutcome::TargetsSurvived { remaining };
        }
        if !last.suspects.is_empty() {
            let remaining = listed(last.suspects, RemainingReason::Suspect).collect();
            return CleanupOutcome::UnreadableSuspects { remaining };
        }
        CleanupOutcome::EnumerationFailed {
            message: format!(
                "the process table never settled within {:?}: processes kept vanishing or \
                 changing while they were read, so no empty scan could be trusted",
                self.config.bound
            ),
        }
    }
}
