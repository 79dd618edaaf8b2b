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
    /// `attempt`, and tells the core.
    fn clean_up_lost(
        &mut self,
        core: CoreHandle,
        dir: &RunDir,
        task: TaskId,
        attempt: u32,
        config: CleanupConfig,
        protected: Vec<u32>,
    );
}

/// Real workers: `homebased-worker` processes, lock watchers and the shared sweep.
pub struct Supervisor;

impl Launcher for Supervisor {
    fn start(&mut self, core: CoreHandle, dir: &RunDir, task: TaskId) -> io::Result<()> {
        let child = supervisor::start_worker(dir)?;
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

    fn clean_up_lost(
        &mut self,
        core: CoreHandle,
        dir: &RunDir,
        task: TaskId,
        attempt: u32,
        config: CleanupConfig,
        protected: Vec<u32>,
    ) {
        supervisor::clean_up_lost(core, dir.clone(), task, attempt, config, protected);
    }
}
