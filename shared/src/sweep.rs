//! The marker sweep (SPEC section 6, steps 2 to 4): after a run's process group is empty,
//! find every process that carries the run's marker `HOMEBASED_TASK_ID=<task>` and stop it,
//! within a bound. Used by the worker after its workload, and by the daemon for a lost worker.
//!
//! The loop: scan; TERM every marked target; rescan every `rescan`; KILL a target still
//! marked `term_grace` after its TERM; give up at `bound`. The table is empty only after two
//! consecutive settled scans (no process vanished, started exiting or changed identity while
//! its environment was read) found no target and no suspect, so a process forked by one that
//! exited while a scan read it is caught by a later scan.
//! Every signal goes through a pin and a fresh identity and marker check; protected pids are
//! never signalled and never counted; suspects are never signalled.

mod fake;
mod proc_table;
mod scan;
mod table;
#[cfg(test)]
mod tests;

pub use fake::{FakeClock, FakeEvent, FakeProcess, FakeTable, FakeTrigger};
pub use proc_table::ProcTable;
pub use table::{Marker, ProcessInfo, ProcessTable, ReadError};

use crate::config::CleanupConfig;
use crate::ids::TaskId;
use crate::rundir::{CleanupOutcome, ProcessIdentity, RemainingProcess, RemainingReason};
use nix::sys::signal::Signal;
use scan::{Delivery, Rules, Scan};
use std::collections::HashMap;
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
    /// Never signalled, never counted: the daemon, live workers. The sweeper's own pid and
    /// pid 1 are always added.
    pub protected: Vec<u32>,
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
    /// Lines worth a log entry: signals withheld or refused, and why.
    pub notes: Vec<String>,
    pub scans: u32,
}

impl Swept {
    /// Keeps each note once: a refusal that repeats on every rescan is one line.
    fn note(&mut self, line: String) {
        if !self.notes.contains(&line) {
            self.notes.push(line);
        }
    }
}

/// A marked target's progress: when it got TERM, and whether it got KILL.
#[derive(Debug, Clone, Copy)]
struct Stage {
    termed_at: Instant,
    killed: bool,
}

impl Sweep {
    pub fn run<T: ProcessTable, C: Clock>(&self, table: &T, clock: &mut C) -> Swept {
        let marker = Marker::for_task(self.task);
        let mut protected = self.protected.clone();
        protected.push(table.own_pid());
        let rules = Rules {
            marker: &marker,
            since: self.workload_start,
            uid: table.own_uid(),
            protected,
        };
        let mut swept = Swept {
            outcome: CleanupOutcome::Clean,
            signalled: Vec::new(),
            notes: Vec::new(),
            scans: 0,
        };
        let deadline = clock.now() + self.config.bound;
        let mut stages: HashMap<ProcessIdentity, Stage> = HashMap::new();
        let mut settled_empty = 0u32;
        loop {
            let found = match scan::scan(table, &rules) {
                Ok(found) => found,
                Err(e) => {
                    swept.outcome = CleanupOutcome::EnumerationFailed {
                        message: format!("cannot list processes: {e}"),
                    };
                    return swept;
                }
            };
            swept.scans += 1;
            settled_empty = if found.is_empty() && found.settled {
                settled_empty + 1
            } else {
                0
            };
            if settled_empty >= 2 {
                return swept;
            }
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
                self.advance(table, &marker, *target, now, &mut stages, &mut swept);
            }
            if now >= deadline {
                // One settled empty scan already: a second, at once, may still confirm it.
                if settled_empty == 1 {
                    continue;
                }
                swept.outcome = self.at_bound(found);
                return swept;
            }
            clock.sleep(self.config.rescan.min(deadline - now));
        }
    }

    /// TERM on first sight, KILL once `term_grace` has passed since the TERM.
    fn advance<T: ProcessTable>(
        &self,
        table: &T,
        marker: &Marker,
        target: ProcessIdentity,
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
            "pid {} (start {}) with the marker",
            target.pid, target.start_ticks
        );
        match scan::signal_target(table, target, marker, signal) {
            Delivery::Sent => {
                swept.signalled.push(Signalled {
                    process: target,
                    signal,
                });
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
            let remaining = listed(last.targets, RemainingReason::Marked)
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
