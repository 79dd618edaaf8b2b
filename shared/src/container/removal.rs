//! Removing the run's container and proving it gone (SPEC sections 5 and 6): `docker rm`
//! without force (a container still running is stopped first, with the run's grace), then a
//! lookup that finds nothing by id, by label and by name. A removal that cannot be confirmed
//! within the cleanup bound is `container_unconfirmed`, which puts the lane into Attention.
//!
//! The bound is one deadline for the whole removal, not a bound per command: every docker
//! command of it (lookups, stop, rm) gets only the time left before that deadline, so a hung
//! engine cannot stretch the removal to a command bound per round.

use super::docker::{Docker, COMMAND_BOUND};
use super::inspect::{self, ContainerState, Seen};
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
    let within = Within(Instant::now() + config.bound);
    // What the last round found that was not only the deadline running out.
    let mut last_why = String::new();
    loop {
        let why = match present(docker, task, id, within) {
            Ok(found) if found.is_empty() => {
                note(&format!(
                    "container {name} is gone: no container by id, label or name"
                ));
                return CleanupOutcome::Clean;
            }
            Ok(found) => {
                let failures: Vec<String> = found
                    .iter()
                    .filter_map(|id| remove_one(docker, id, config, within, note).err())
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
        if last_why.is_empty() || !why.contains(OUT_OF_TIME) {
            last_why = why;
        }
        let why = &last_why;
        if within.left().is_none() {
            let message = format!(
                "removal of container {name} ({}) not confirmed within {:?}: {why}",
                id.unwrap_or("id unknown"),
                config.bound
            );
            note(&message);
            return CleanupOutcome::ContainerUnconfirmed { message };
        }
        std::thread::sleep(RETRY.min(within.left().unwrap_or_default()));
    }
}

/// What a command that was not run for want of time says.
const OUT_OF_TIME: &str = "no time left within the removal's bound";

/// The removal's one deadline.
#[derive(Debug, Clone, Copy)]
struct Within(Instant);

impl Within {
    /// The time left, `None` once the deadline has passed.
    fn left(self) -> Option<Duration> {
        Some(self.0.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
    }

    /// The bound of one command that would take up to `usual`: never past the deadline.
    fn bound(self, usual: Duration, verb: &str) -> Result<Duration, String> {
        self.left()
            .map(|left| left.min(usual))
            .ok_or_else(|| format!("docker {verb}: {OUT_OF_TIME}"))
    }
}

/// Ids of the run's containers that Docker still knows. `Err` when Docker could not answer
/// one of the three lookups (or no time was left to ask): then nothing is proven.
fn present(
    docker: &Docker,
    task: TaskId,
    id: Option<&str>,
    within: Within,
) -> Result<BTreeSet<String>, String> {
    let mut found = BTreeSet::new();
    if let Some(id) = id {
        match state(docker, id, within) {
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
        found.extend(listed(docker, &filter, within)?);
    }
    Ok(found)
}

/// [`inspect::state`], within the removal's deadline.
fn state(docker: &Docker, id: &str, within: Within) -> Seen<ContainerState> {
    match within.bound(COMMAND_BOUND, "inspect") {
        Ok(bound) => inspect::state_within(docker, id, bound),
        Err(e) => Seen::Unknown(e),
    }
}

/// [`inspect::listed`], within the removal's deadline.
fn listed(docker: &Docker, filter: &str, within: Within) -> Result<Vec<String>, String> {
    let bound = within.bound(COMMAND_BOUND, "ps")?;
    inspect::listed_within(docker, &[filter], bound)
}

fn remove_one(
    docker: &Docker,
    id: &str,
    config: &CleanupConfig,
    within: Within,
    note: &dyn Fn(&str),
) -> Result<(), String> {
    if let Seen::Present(state) = state(docker, id, within) {
        if state.running {
            note(&format!(
                "container {id} is still running at removal; stopping it"
            ));
            let bound = within.bound(stop_bound(config), "stop")?;
            run_stop(docker, id, config, bound).map_err(|e| format!("docker stop {id}: {e}"))?;
        }
    }
    note(&format!("removing container {id}"));
    let bound = within.bound(COMMAND_BOUND, "rm")?;
    match docker.run(&rm_args(id), bound) {
        Ok(reply) if reply.success || inspect::says_absent(&reply.stderr) => Ok(()),
        Ok(reply) => Err(format!("docker rm {id}: {}", reply.complaint())),
        Err(e) => Err(format!("docker rm {id}: {e}")),
    }
}

/// `docker stop -t <secs>`: Docker sends the stop signal (TERM unless the image says
/// otherwise), waits the grace, then KILLs. Bounded by the grace, the kill grace and the
/// usual command bound.
pub fn stop(docker: &Docker, id: &str, config: &CleanupConfig) -> Result<(), String> {
    run_stop(docker, id, config, stop_bound(config))
}

/// The grace, the kill grace and the usual command bound.
fn stop_bound(config: &CleanupConfig) -> Duration {
    Duration::from_secs(grace_seconds(config.term_grace)) + config.kill_grace + COMMAND_BOUND
}

fn run_stop(
    docker: &Docker,
    id: &str,
    config: &CleanupConfig,
    bound: Duration,
) -> Result<(), String> {
    let secs = grace_seconds(config.term_grace).to_string();
    match docker.run(&stop_args(&secs, id), bound) {
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
    fn no_command_outlives_the_removals_one_deadline() {
        let within = Within(Instant::now() + Duration::from_secs(2));
        let bound = within.bound(COMMAND_BOUND, "rm").unwrap();
        assert!(bound <= Duration::from_secs(2), "{bound:?}");
        assert_eq!(
            within.bound(Duration::from_millis(10), "ps").unwrap(),
            Duration::from_millis(10),
            "a shorter usual bound is kept"
        );
        let spent = Within(Instant::now());
        assert!(spent.left().is_none());
        assert!(spent.bound(COMMAND_BOUND, "rm").is_err());
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
