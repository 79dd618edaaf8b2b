//! The seam between the core and the processes it supervises. The core decides; a
//! [`Launcher`] prepares run directories, starts workers, watches them, signals them and
//! cleans up after lost ones, and tells what it saw to an [`Observer`] (built by
//! `daemon::serve` from the core's handle). [`Supervisor`] is the real one; the core's unit
//! tests use a fake that records what it was asked and lets the test play the worker's part
//! by writing the run directory's files. The seam points one way: the core imports it, the
//! supervisor never imports the core.

use crate::clock::Clock;
use homebased_shared::config::CleanupConfig;
use homebased_shared::home::Home;
use homebased_shared::ids::{JobId, TaskId};
use homebased_shared::rundir::{RunDir, RunSpec};
use homebased_shared::sweep::SweepKey;
use homebased_shared::worker_cmdline::{self, WorkerCmdline};
use std::io;
use std::sync::Arc;

pub trait Launcher: Send {
    /// The daemon serves now, on `lanes` lanes: what is prepared ahead of need (standby
    /// workers, staged directories, as many as lanes may start at once) may be started. Not
    /// before: binding the socket changes the process's umask for a moment, which a worker
    /// or folder made then would keep.
    fn ready(&mut self, _lanes: usize) {}

    /// Creates the run directory of `spec` (`control/`, the job's checkpoint directory and
    /// `run.json`), ready for [`Launcher::start`].
    fn create_run_dir(&mut self, spec: &RunSpec) -> io::Result<RunDir>;

    /// Starts the worker of a created run directory and watches it: when the worker is
    /// gone, the observer is told [`WorkerEvent::WorkerGone`]. `names` go in the worker's
    /// command line.
    fn start(&mut self, dir: &RunDir, task: TaskId, names: &RunNames) -> io::Result<()>;

    /// Watches a worker that was already running when the daemon started.
    fn reattach(&mut self, dir: &RunDir, task: TaskId);

    /// Whether a live worker holds the run's lock, without waiting.
    fn worker_alive(&self, dir: &RunDir) -> bool;

    /// The live workers of this home, found by their command lines in the process table,
    /// whatever their run directories say (`homebased_shared::worker_cmdline`).
    fn live_workers(&self) -> Vec<LiveWorker>;

    /// Asks the worker to stop its workload now (the stop request file is already written).
    fn signal_stop(&mut self, dir: &RunDir);

    /// Records that adopting worker number `adoption` is about to start (`adoption.json`),
    /// before [`Launcher::adopt`] starts it.
    fn request_adoption(&mut self, dir: &RunDir, adoption: u32) -> io::Result<()>;

    /// Starts a worker that adopts the container a vanished worker left in `dir` (the
    /// `adoption`th for the run), and watches it like any worker.
    fn adopt(
        &mut self,
        dir: &RunDir,
        task: TaskId,
        adoption: u32,
        names: &RunNames,
    ) -> io::Result<()>;

    /// Cleans up after a lost worker off the core thread, writes `cleanup.json` as attempt
    /// `lost.attempt`, and tells the observer [`WorkerEvent::LostCleanupDone`].
    fn clean_up_lost(&mut self, dir: &RunDir, task: TaskId, lost: LostCleanup);
}

/// What a worker's command line names besides its run directory: the run's job and lanes,
/// which a daemon whose store lost the run trusts over anything in the run directory
/// (`core::unknown_runs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunNames {
    pub job: JobId,
    /// Lane names, in the run's order.
    pub lanes: Vec<String>,
}

/// A live process whose command line is a worker's of this home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveWorker {
    pub pid: u32,
    pub cmdline: WorkerCmdline,
}

/// What the daemon's cleanup after a lost worker needs besides the run directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostCleanup {
    /// The cleanup attempt this is (`cleanup.json`'s `attempt`).
    pub attempt: u32,
    pub config: CleanupConfig,
    /// Processes never signalled, whatever they carry (the daemon).
    pub protected: Vec<u32>,
    /// Whether the run's step runs a container (its container is removed first), as the
    /// store keeps the step: `run.json` is not read for it, since after a machine crash it
    /// may be empty (its content is never fsynced, ARCHITECTURE "The run directory is the
    /// contract").
    pub container_step: bool,
}

/// What the supervisor saw happen to a run, off the core thread. Either way the run's
/// directory has news (the worker's last records, or `cleanup.json`) and its worker is gone.
/// The task names the run: its directory is `Home::task_dir(task)`, which the core knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerEvent {
    /// The run's worker is gone: its `runner.lock` was granted (or, where the workload
    /// replaced the lock, its process ended), and a child of the daemon's was reaped.
    WorkerGone { task: TaskId },
    /// The cleanup after the run's lost worker finished and wrote `cleanup.json`.
    LostCleanupDone { task: TaskId },
}

/// Told of every [`WorkerEvent`], from the watcher and cleanup threads; it must not block
/// them for long.
pub type Observer = Arc<dyn Fn(WorkerEvent) + Send + Sync>;

/// Real workers: `homebased-worker` processes (a pool kept in standby, see
/// [`super::standby`]), lock watchers and the shared sweep.
pub struct Supervisor {
    home: Home,
    /// The daemon's clock (crate::clock): the times the supervisor records, and how far
    /// ahead of the system's a test moved it, which each worker it starts is told.
    clock: Clock,
    standby: Option<super::standby::Keeper>,
    observer: Observer,
    /// This daemon's key for its workers' shared readings of the process table, drawn at
    /// start and handed to every worker it starts (`homebased_shared::sweep::SweepKey`).
    sweep_key: Option<SweepKey>,
}

impl Supervisor {
    /// The real launcher for `home` with its standby keeper, which prepares nothing before
    /// [`Launcher::ready`]; what its watchers and cleanups see goes to `observer`.
    pub fn start(home: &Home, clock: Clock, observer: Observer) -> Supervisor {
        let sweep_key = SweepKey::generate()
            .map_err(|e| tracing::warn!(error = %e, "no key for the sweeps' shared readings: every worker's sweep reads the table alone"))
            .ok();
        Supervisor {
            home: home.clone(),
            clock,
            standby: super::standby::Keeper::start(home.clone(), sweep_key.clone()),
            observer,
            sweep_key,
        }
    }
}

impl Launcher for Supervisor {
    fn ready(&mut self, lanes: usize) {
        if let Some(keeper) = &self.standby {
            keeper.prepare(lanes);
        }
    }

    fn create_run_dir(&mut self, spec: &RunSpec) -> io::Result<RunDir> {
        super::create_run_dir(&self.home, spec)
    }

    fn start(&mut self, dir: &RunDir, task: TaskId, names: &RunNames) -> io::Result<()> {
        // A standby worker's command line has room for so many lanes: a run with more starts
        // a fresh worker, whose command line holds them all, and the standby stays for the next.
        let fits = homebased_shared::standby::fits_room(&worker_cmdline::join_lanes(&names.lanes));
        let standby = self
            .standby
            .as_ref()
            .filter(|_| fits)
            .and_then(|keeper| keeper.take());
        let child = super::start_worker(dir, names, standby, &self.clock, self.sweep_key.as_ref())?;
        super::watch(self.observer.clone(), dir.clone(), task, Some(child));
        Ok(())
    }

    fn reattach(&mut self, dir: &RunDir, task: TaskId) {
        super::watch(self.observer.clone(), dir.clone(), task, None);
    }

    fn worker_alive(&self, dir: &RunDir) -> bool {
        super::worker_alive(dir)
    }

    fn live_workers(&self) -> Vec<LiveWorker> {
        super::live_workers(&self.home)
    }

    fn signal_stop(&mut self, dir: &RunDir) {
        super::signal_worker(dir, nix::sys::signal::Signal::SIGTERM);
    }

    fn request_adoption(&mut self, dir: &RunDir, adoption: u32) -> io::Result<()> {
        super::request_adoption(dir, adoption, self.clock.now_ms())
    }

    fn adopt(
        &mut self,
        dir: &RunDir,
        task: TaskId,
        adoption: u32,
        names: &RunNames,
    ) -> io::Result<()> {
        let child = super::start_adopting_worker(
            dir,
            names,
            adoption,
            &self.clock,
            self.sweep_key.as_ref(),
        )?;
        super::watch(self.observer.clone(), dir.clone(), task, Some(child));
        Ok(())
    }

    fn clean_up_lost(&mut self, dir: &RunDir, task: TaskId, lost: LostCleanup) {
        super::clean_up_lost(
            self.observer.clone(),
            dir.clone(),
            task,
            lost,
            self.clock.clone(),
        );
    }
}
