//! The step's workload: starting it, following it to its end, and removing what it left
//! outside the worker's process tree. Each kind of step starts in its own way and hands back
//! what the rest of the attempt follows: the child's record and its process group, and for a
//! container step the container.

pub mod container;
pub mod host;

use crate::log::WorkerLog;
use crate::process_group::ProcessGroup;
use crate::reap::Reaper;
use crate::signals::Signals;
use crate::stop;
use homebased_shared::config::CleanupConfig;
use homebased_shared::rundir::{ChildRecord, CleanupOutcome, ExitReason, RunDir, RunSpec};
use homebased_shared::spec::Step;

/// A workload that has been spawned and not yet reaped.
#[derive(Debug)]
pub struct Running {
    /// The process that stands for the workload: the host command itself, or for a container
    /// the `docker wait` that ends with it.
    pub child: ChildRecord,
    /// The child's process group: the host command and its descendants, or the container's
    /// docker followers.
    pub group: ProcessGroup,
    /// A container step's container, which lives outside the worker's process tree.
    pub container: Option<container::Container>,
}

/// How the workload ended, for `exit.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub reason: ExitReason,
    /// A container's id, name, exit code and OOM kill as Docker reported them.
    pub container: Option<serde_json::Value>,
}

/// Why no workload is running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// The workload itself could not start (missing program, bad cwd, unsupported step):
    /// the attempt's outcome, recorded as `spawn_failed`.
    Workload(String),
    /// The worker could not prepare the run (files, folders, `/proc`): also recorded as
    /// `spawn_failed`, and the worker exits with an error.
    Worker(String),
    /// A container step that did not start once Docker was asked to create its container:
    /// recorded as `spawn_failed`, and `removal` (`clean` once the container is proven gone,
    /// else `container_unconfirmed`) is the attempt's cleanup outcome.
    Container {
        message: String,
        removal: CleanupOutcome,
    },
}

pub fn start(run: &RunSpec, dir: &RunDir) -> Result<Running, StartError> {
    match &run.step {
        Step::Task { command, .. } => host::start(run, dir, command),
        Step::Container(step) => container::start(run, dir, step),
    }
}

/// Follows the workload until it ends, stopping it on a stop request (SPEC section 4).
pub fn follow(
    running: &mut Running,
    reaper: &mut Reaper,
    signals: &Signals,
    dir: &RunDir,
    config: &CleanupConfig,
    log: &WorkerLog,
) -> Ended {
    match &mut running.container {
        None => Ended {
            reason: stop::follow(running.group, reaper, signals, dir, config, log),
            container: None,
        },
        Some(container) => container.follow(running.group, reaper, signals, dir, config, log),
    }
}

/// Removes what the workload left outside the worker's process tree: a container step's
/// container, proven gone (`clean`) or `container_unconfirmed`; `clean` for a host step.
/// Called after `exit.json` and before [`crate::cleanup::clean_up`]: the container's processes
/// carry the run's marker, and Docker, not the marker sweep, is the one to end them.
pub fn remove_container(
    running: &Running,
    config: &CleanupConfig,
    log: &WorkerLog,
) -> CleanupOutcome {
    match &running.container {
        None => CleanupOutcome::Clean,
        Some(container) => container.remove(config, log),
    }
}
