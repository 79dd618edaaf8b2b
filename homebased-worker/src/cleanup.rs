//! Everything that must be gone after the workload ended, before the resource serves again
//! (SPEC section 6), summed up as the `cleanup.json` outcome: first the process group (and
//! the orphans that came back to this subreaper), then, once the group is confirmed empty,
//! the sweep for whatever escaped it: by the run's marker, and by the lineage net (every
//! descendant of this worker, which is the workload's subreaper, even one that cleared or
//! rewrote its environment).

use crate::group_cleanup;
use crate::log::WorkerLog;
use crate::reap::Reaper;
use crate::signals::Signals;
use crate::workload::Running;
use homebased_shared::home::Home;
use homebased_shared::process;
use homebased_shared::rundir::{CleanupOutcome, RunSpec};
use homebased_shared::sweep::{self, Clock, Exchange, ProcTable, Sweep, SweepKey};
use std::time::{Duration, Instant};

/// `workload` is `None` when no workload was ever spawned: nothing can carry the marker.
pub fn clean_up(
    workload: Option<&Running>,
    run: &RunSpec,
    reaper: &mut Reaper,
    signals: &Signals,
    log: &WorkerLog,
    sweep_key: Option<&SweepKey>,
) -> CleanupOutcome {
    let Some(workload) = workload else {
        return CleanupOutcome::Clean;
    };
    fail::fail_point!("worker.cleanup-started", |_| std::process::abort());
    let group = group_cleanup::empty_group(workload.group, reaper, signals, &run.cleanup, log);
    // Orphans that ended outside the group came back here too; leave no zombie behind.
    reaper.reap();
    if !group.is_clean() {
        // The group's failure is the outcome; the sweep runs only after a confirmed group.
        return group;
    }
    // The lineage root is this worker: orphans of the workload are re-parented to it.
    let lineage = match process::identity(std::process::id()) {
        Ok(worker) => Some(worker),
        Err(e) => {
            log.note(format!(
                "sweep: cannot read the worker's own identity ({e}); the marker alone decides"
            ));
            None
        }
    };
    let sweep = Sweep {
        task: run.task,
        workload_start: Some(workload.child.process.start_ticks),
        config: run.cleanup,
        // The daemon; the worker itself is always protected by the sweep.
        protected: sweep::protected_identities(&run.protected_pids),
        lineage,
    };
    let mut clock = ReapingClock { reaper, signals };
    let began = Instant::now();
    let cpu_began = thread_cpu();
    let table = ProcTable::new();
    // Runs that end together share their readings of the table instead of each reading it.
    let exchange =
        sweep_key.map(|key| Exchange::at(Home::at(&run.home).sweep_exchange(), key.clone()));
    let swept = match exchange {
        Some(Ok(exchange)) => sweep.run_sharing(&table, &mut clock, &exchange),
        // Started without the daemon's key (by hand, by a test): nothing to prove another
        // worker's reading with; the summary line below says no scan was shared.
        None => sweep.run(&table, &mut clock),
        Some(Err(e)) => {
            log.note(format!(
                "sweep: scanning alone, without the home's exchange ({e})"
            ));
            sweep.run(&table, &mut clock)
        }
    };
    // One line per run: what a slow cleanup cost is the first thing a person asks of it, and
    // what it cost this machine (the benchmarks' split of a run's CPU reads it).
    let cpu = match (cpu_began, thread_cpu()) {
        (Some(began), Some(now)) => format!(", {:.2} ms of CPU", (now - began).as_secs_f64() * 1e3),
        _ => String::new(),
    };
    log.note(format!(
        "cleanup: the process table swept in {} scans ({} read by another worker), {} ms{cpu}",
        swept.scans,
        swept.shared,
        began.elapsed().as_millis()
    ));
    for sent in &swept.signalled {
        let why = if swept.descendants.contains(&sent.process) {
            "which descends from this worker without the run marker"
        } else {
            "which carries the run marker"
        };
        log.note(format!(
            "sweep: {} sent to pid {} (start {}), {why}",
            sent.signal, sent.process.pid, sent.process.start_ticks
        ));
    }
    for note in &swept.notes {
        log.note(format!("sweep: {note}"));
    }
    clock.reaper.reap();
    swept.outcome
}

/// The CPU this thread has used (the sweep runs on it, readings of the table included).
fn thread_cpu() -> Option<Duration> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .ok()
        .map(Duration::from)
}

/// Real time, with the reaping kept up while the sweep waits: marked descendants it kills
/// come back to this subreaper and must not linger as zombies. A child exit wakes the wait.
struct ReapingClock<'a> {
    reaper: &'a mut Reaper,
    signals: &'a Signals,
}

impl Clock for ReapingClock<'_> {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&mut self, duration: Duration) {
        self.reaper.reap();
        self.signals.sleep(duration);
        self.reaper.reap();
    }
}
