//! Starting the step's workload. Each kind of step starts in its own way and hands back what
//! the rest of the attempt follows: the child's record and its process group.

pub mod container;
pub mod host;

use crate::process_group::ProcessGroup;
use homebased_shared::rundir::{ChildRecord, RunDir, RunSpec};
use homebased_shared::spec::Step;

/// A workload that has been spawned and not yet reaped.
#[derive(Debug, Clone)]
pub struct Running {
    pub child: ChildRecord,
    pub group: ProcessGroup,
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
}

pub fn start(run: &RunSpec, dir: &RunDir) -> Result<Running, StartError> {
    match &run.step {
        Step::Task { command } => host::start(run, dir, command),
        Step::Container(step) => container::start(run, dir, step),
    }
}
