//! Finding the run's container again, for a worker that adopts it: first by the id saved in
//! the run directory (the cidfile `container.id`, which `docker create --cidfile` wrote), then
//! by its fixed name together with its label (a container with the run's name but not its
//! label is not the run's and is never adopted).

use super::docker::Docker;
use super::inspect::{self, ContainerState, Seen};
use super::{container_name, saved_id, task_label};
use crate::ids::TaskId;
use crate::rundir::RunDir;

/// The run's container as Docker knows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The full id.
    pub id: String,
    pub state: ContainerState,
    /// How it was found: `saved id` or `name and label`.
    pub by: &'static str,
}

/// Looks for the container of run `task`. `Absent` only when Docker answered every lookup
/// and none found it; `Unknown` when one could not be answered.
pub fn find(docker: &Docker, dir: &RunDir, task: TaskId) -> Seen<Found> {
    if let Some(id) = saved_id(dir, "") {
        match inspect::state(docker, &id) {
            Seen::Present(state) => {
                return Seen::Present(Found {
                    id,
                    state,
                    by: "saved id",
                })
            }
            Seen::Absent => {}
            Seen::Unknown(e) => return Seen::Unknown(e),
        }
    }
    let filters = [
        format!("name=^{}$", container_name(task)),
        format!("label={}", task_label(task)),
    ];
    let ids = match inspect::listed_matching(docker, &filters) {
        Ok(ids) => ids,
        Err(e) => return Seen::Unknown(e),
    };
    match ids.as_slice() {
        [] => Seen::Absent,
        [id] => match inspect::state(docker, id) {
            Seen::Present(state) => Seen::Present(Found {
                id: id.clone(),
                state,
                by: "name and label",
            }),
            Seen::Absent => Seen::Absent,
            Seen::Unknown(e) => Seen::Unknown(e),
        },
        many => Seen::Unknown(format!(
            "several containers carry the run's name and label: {}",
            many.join(", ")
        )),
    }
}
