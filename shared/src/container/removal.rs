//! Removing the run's container and proving it gone (SPEC sections 5 and 6): `docker rm`
//! without force (a container still running is stopped first, with the run's grace), then a
//! lookup that finds nothing by id, by label and by name. A removal that cannot be confirmed
//! within the cleanup bound is `container_unconfirmed`, which puts the lane into Attention.

use super::docker::{Docker, COMMAND_BOUND};
use super::inspect::{self, Seen};
use super::{container_name, task_label};
use crate::config::CleanupConfig;
use crate::ids::TaskId;
use crate::rundir::CleanupOutcome;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Pause between two removal rounds.
const RETRY: Duration = Duration::from_millis(500);

/// Removes every container of run `task` (the saved `id`, and whatever its label or name
/// still finds) and proves that none is left. `note` takes what the removal did, for the
/// caller's log.
pub fn remove(
    docker: &Docker,
    task: TaskId,
    id: Option<&str>,
    config: &CleanupConfig,
    note: &dyn Fn(&str),
) -> CleanupOutcome {
    let name = container_name(task);
    let deadline = Instant::now() + config.bound;
    loop {
        let why = match present(docker, task, id) {
            Ok(found) if found.is_empty() => {
                note(&format!(
                    "container {name} is gone: no container by id, label or name"
                ));
                return CleanupOutcome::Clean;
            }
            Ok(found) => {
                let failures: Vec<String> = found
                    .iter()
                    .filter_map(|id| remove_one(docker, id, config, note).err())
                    .collect();
                format!(
                    "still present: {}{}",
                    found.into_iter().collect::<Vec<_>>().join(", "),
                    if failures.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", failures.join("; "))
                    }
                )
            }
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            let message = format!(
                "removal of container {name} ({}) not confirmed within {:?}: {why}",
                id.unwrap_or("id unknown"),
                config.bound
            );
            note(&message);
            return CleanupOutcome::ContainerUnconfirmed { message };
        }
        std::thread::sleep(RETRY.min(deadline.saturating_duration_since(Instant::now())));
    }
}

/// Ids of the run's containers that Docker still knows. `Err` when Docker could not answer
/// one of the three lookups: then nothing is proven.
fn present(docker: &Docker, task: TaskId, id: Option<&str>) -> Result<BTreeSet<String>, String> {
    let mut found = BTreeSet::new();
    if let Some(id) = id {
        match inspect::state(docker, id) {
            Seen::Present(_) => {
                found.insert(id.to_string());
            }
            Seen::Absent => {}
            Seen::Unknown(e) => return Err(e),
        }
    }
    let by_label = format!("label={}", task_label(task));
    let by_name = format!("name=^{}$", container_name(task));
    for filter in [by_label, by_name] {
        found.extend(inspect::listed(docker, &filter)?);
    }
    Ok(found)
}

fn remove_one(
    docker: &Docker,
    id: &str,
    config: &CleanupConfig,
    note: &dyn Fn(&str),
) -> Result<(), String> {
    if let Seen::Present(state) = inspect::state(docker, id) {
        if state.running {
            note(&format!(
                "container {id} is still running at removal; stopping it"
            ));
            stop(docker, id, config).map_err(|e| format!("docker stop {id}: {e}"))?;
        }
    }
    note(&format!("removing container {id}"));
    match docker.run(&rm_args(id), COMMAND_BOUND) {
        Ok(reply) if reply.success || inspect::says_absent(&reply.stderr) => Ok(()),
        Ok(reply) => Err(format!("docker rm {id}: {}", reply.complaint())),
        Err(e) => Err(format!("docker rm {id}: {e}")),
    }
}

/// `docker stop -t <secs>`: Docker sends the stop signal (TERM unless the image says
/// otherwise), waits the grace, then KILLs. Bounded by the grace, the kill grace and the
/// usual command bound.
pub fn stop(docker: &Docker, id: &str, config: &CleanupConfig) -> Result<(), String> {
    let secs = grace_seconds(config.term_grace).to_string();
    let bound = Duration::from_secs(grace_seconds(config.term_grace)) + config.kill_grace;
    match docker.run(&stop_args(&secs, id), bound + COMMAND_BOUND) {
        Ok(reply) if reply.success => Ok(()),
        Ok(reply) => Err(reply.complaint()),
        Err(e) => Err(e.to_string()),
    }
}

/// Docker's stop grace is whole seconds: rounded up, so the workload never gets less.
pub fn grace_seconds(grace: Duration) -> u64 {
    grace.as_secs() + u64::from(grace.subsec_nanos() > 0)
}

/// `-t` rather than `--time`: the short flag means the grace in every docker CLI, where
/// newer ones deprecate `--time` (with a warning) in favour of `--timeout`.
fn stop_args<'a>(secs: &'a str, id: &'a str) -> [&'a str; 4] {
    ["stop", "-t", secs, id]
}

/// Never `--force`: a container that will not go is reported, not torn down blind.
/// `--volumes` removes the container's anonymous volumes with it (never named ones or binds).
fn rm_args(id: &str) -> [&str; 3] {
    ["rm", "--volumes", id]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_grace_is_rounded_up_to_whole_seconds() {
        assert_eq!(grace_seconds(Duration::from_secs(10)), 10);
        assert_eq!(grace_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(grace_seconds(Duration::from_millis(1)), 1);
        assert_eq!(grace_seconds(Duration::ZERO), 0);
    }

    #[test]
    fn removal_and_stop_never_force() {
        assert_eq!(rm_args("abc"), ["rm", "--volumes", "abc"]);
        assert_eq!(stop_args("10", "abc"), ["stop", "-t", "10", "abc"]);
        for arg in rm_args("abc").iter().chain(&stop_args("1", "abc")) {
            assert!(*arg != "--force" && *arg != "-f", "{arg}");
        }
    }
}
