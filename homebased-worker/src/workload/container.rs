//! Container steps (SPEC section 5, DESIGN "Containers"): driven through the `docker` CLI.
//! Not implemented by this worker yet; it says so honestly instead of running something else.

use super::{Running, StartError};
use homebased_shared::rundir::{RunDir, RunSpec};
use homebased_shared::spec::ContainerStep;

pub const UNSUPPORTED: &str = "container steps are not supported by this worker yet";

pub fn start(_run: &RunSpec, _dir: &RunDir, _step: &ContainerStep) -> Result<Running, StartError> {
    Err(StartError::Workload(UNSUPPORTED.into()))
}
