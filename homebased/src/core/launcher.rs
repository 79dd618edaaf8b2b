//! The seam between the core and the processes it supervises. The core decides; a
//! [`Launcher`] starts workers, watches them, signals them and cleans up after lost ones.
//! [`Supervisor`] is the real one (the `supervisor` module); the core's unit tests use a
//! fake that records what it was asked and lets the test play the worker's part by
//! writing the run directory's files.

use super::CoreHandle;
use crate::supervisor;
use homebased_shared::config::CleanupConfig;
use homebased_shared::ids::TaskId;
use homebased_shared::rundir::RunDir;
use std::io;

pub trait Launcher: Send {
    /// The daemon serves now, on `lanes` lanes: what is prepared ahead of need (standby
    /// workers, staged directories, as many as lanes may start at once) may be started. Not
    /// before: binding the socket changes the process's umask for a moment, which a worker
    /// or folder made then would keep.
    fn ready(&mut self, _lanes: usize) {}

    /// Starts the worker of a created run directory and watches it: when the worker is
    /// gone, the core is told through `core`.
    fn start(&mut self, core: CoreHandle, dir: &RunDir, task: TaskId) -> io::Result<()>;

    /// Watches a worker that was already running when the daemon started.
    fn reattach(&mut self, core: CoreHandle, dir: &RunDir, task: TaskId);

    /// Whether a live worker holds the run's lock, without waiting.
    fn worker_alive(&self, dir: &RunDir) -> bool;

    /// Asks the worker to stop its workload now (the stop request file is already written).
    fn signal_stop(&mut self, dir: &RunDir);

    /// Starts a worker that adopts the container a vanished worker left in `dir` (the
    /// `adoption`th for the run), and watches it like any worker.
    fn adopt(
        &mut self,
        core: CoreHandle,
        dir: &RunDir,
        task: TaskId,
        adoption: u32,
    ) -> io::Result<()>;

    /// Cleans up after a lost worker off the core thread, writes `cleanup.json` as attempt
    /// `lost.attempt`, and tells the core.
    fn clean_up_lost(&mut self, core: CoreHandle, dir: &RunDir, task: TaskId, lost: LostCleanup);
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

/// Real workers: `homebased-worker` processes (a pool kept in standby, see
/// `supervisor::standby`), lock watchers and the shared sweep.
pub struct Supervisor {
    standby: Option<supervisor::standby::Keeper>,
}

impl Supervisor {
    /// The real launcher with its standby keeper for `home`, which prepares nothing before
    /// [`Launcher::ready`].
    pub fn start(home: &homebased_shared::home::Home) -> Supervisor {
        Supervisor {
            standby: supervisor::standby::Keeper::start(home.clone()),
        }
    }
}

impl Launcher for Supervisor {
    fn ready(&mut self, lanes: usize) {
        if let Some(keeper) = &self.standby {
            keeper.prepare(lanes);
        }
    }

    fn start(&mut self, core: CoreHandle, dir: &RunDir, task: TaskId) -> io::Result<()> {
        let standby = self.standby.as_ref().and_then(|keeper| keeper.take());
        let child = supervisor::start_worker(dir, standby)?;
        supervisor::watch(core, dir.clone(), task, Some(child));
        Ok(())
    }

    fn reattach(&mut self, core: CoreHandle, dir: &RunDir, task: TaskId) {
        supervisor::watch(core, dir.clone(), task, None);
    }

    fn adopt(
        &mut self,
        core: CoreHandle,
        dir: &RunDir,
        task: TaskId,
        adoption: u32,
    ) -> io::Result<()> {
        let child = supervisor::start_adopting_worker(dir, adoption)?;
        supervisor::watch(core, dir.clone(), task, Some(child));
        Ok(())
    }

    fn worker_alive(&self, dir: &RunDir) -> bool {
        supervisor::worker_alive(dir)
    }

    fn signal_stop(&mut self, dir: &RunDir) {
        supervisor::signal_worker(dir, nix::sys::signal::Signal::SIGTERM);
    }

    fn clean_up_lost(&mut self, core: CoreHandle, dir: &RunDir, task: TaskId, lost: LostCleanup) {
        supervisor::clean_up_lost(core, dir.clone(), task, lost);
    }
}
