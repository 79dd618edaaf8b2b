//! What Docker says about the run's container: its state by id (`docker inspect`), and the
//! containers listed under the run's label or name (`docker ps -a`). An answer is either a
//! fact (present, absent) or unknown; only a fact proves anything.

use super::docker::{Docker, COMMAND_BOUND};
use serde_json::Value;

/// A container's state as `docker inspect` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerState {
    pub running: bool,
    /// `created`, `running`, `exited`, ...
    pub status: String,
    /// Docker's exit code: the process's, or 128+N for a process killed by signal N.
    pub exit_code: Option<i32>,
    pub oom_killed: Option<bool>,
}

/// What a lookup established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen<T> {
    Present(T),
    /// Docker said there is no such container.
    Absent,
    /// Docker could not be asked or gave an answer that proves nothing.
    Unknown(String),
}

/// `docker inspect --type container` by id or name.
pub fn state(docker: &Docker, container: &str) -> Seen<ContainerState> {
    state_within(docker, container, COMMAND_BOUND)
}

/// [`state`] with its own bound for the `docker inspect` (a caller's deadline): the one
/// inspect of the worker's watch and the removal.
pub fn state_within(
    docker: &Docker,
    container: &str,
    bound: std::time::Duration,
) -> Seen<ContainerState> {
    let args = [
        "inspect",
        "--type",
        "container",
        "--format",
        "{{json .State}}",
        container,
    ];
    match docker.run(&args, bound) {
        Ok(reply) if reply.success => match parse_state(&reply.stdout) {
            Some(state) => Seen::Present(state),
            None => Seen::Unknown(format!(
                "docker inspect gave an unreadable state: {:?}",
                reply.stdout.trim()
            )),
        },
        Ok(reply) if says_absent(&reply.stderr) => Seen::Absent,
        Ok(reply) => Seen::Unknown(format!("docker inspect: {}", reply.complaint())),
        Err(e) => Seen::Unknown(e.to_string()),
    }
}

/// Full ids of every container, running or not, that matches `filter` (`label=..`,
/// `name=..`). An empty list is a fact only because the command succeeded.
pub fn listed(docker: &Docker, filter: &str) -> Result<Vec<String>, String> {
    listed_matching(docker, &[filter])
}

/// Full ids of every container that matches all of `filters` (Docker joins filters on
/// different keys with "and").
pub fn listed_matching(
    docker: &Docker,
    filters: &[impl AsRef<str>],
) -> Result<Vec<String>, String> {
    listed_within(docker, filters, COMMAND_BOUND)
}

/// [`listed_matching`] with its own bound for the `docker ps` (a caller's deadline).
pub fn listed_within(
    docker: &Docker,
    filters: &[impl AsRef<str>],
    bound: std::time::Duration,
) -> Result<Vec<String>, String> {
    let mut args = vec!["ps", "--all", "--quiet", "--no-trunc"];
    for filter in filters {
        args.extend(["--filter", filter.as_ref()]);
    }
    let filter = filters
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(" --filter ");
    match docker.run(&args, bound) {
        Ok(reply) if reply.success => Ok(reply
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()),
        Ok(reply) => Err(format!(
            "docker ps --filter {filter}: {}",
            reply.complaint()
        )),
        Err(e) => Err(format!("docker ps --filter {filter}: {e}")),
    }
}

/// The `.State` object printed by `docker inspect --format '{{json .State}}'`.
fn parse_state(text: &str) -> Option<ContainerState> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    Some(ContainerState {
        running: v.get("Running")?.as_bool()?,
        status: v.get("Status")?.as_str()?.to_string(),
        exit_code: v
            .get("ExitCode")
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok()),
        oom_killed: v.get("OOMKilled").and_then(Value::as_bool),
    })
}

/// True when Docker's error says the container does not exist. `docker inspect` words it
/// "No such object" without `--type`, "No such container" with it.
pub fn says_absent(stderr: &str) -> bool {
    stderr.contains("No such container") || stderr.contains("No such object")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_read_from_docker_inspect_json() {
        let text = r#"{"Status":"exited","Running":false,"Paused":false,"OOMKilled":true,
            "Dead":false,"Pid":0,"ExitCode":137,"Error":""}"#;
        assert_eq!(
            parse_state(text),
            Some(ContainerState {
                running: false,
                status: "exited".into(),
                exit_code: Some(137),
                oom_killed: Some(true),
            })
        );
        let running = r#"{"Status":"running","Running":true,"ExitCode":0}"#;
        assert_eq!(
            parse_state(running).map(|s| (s.running, s.oom_killed)),
            Some((true, None))
        );
        assert_eq!(parse_state("null"), None);
        assert_eq!(parse_state(""), None);
        assert_eq!(parse_state(r#"{"Status":"exited"}"#), None);
    }

    #[test]
    fn only_no_such_container_or_object_means_absent() {
        assert!(says_absent("Error: No such object: 0123abc\n"));
        assert!(says_absent(
            "Error response from daemon: No such container: homebased-x\n"
        ));
        assert!(!says_absent(
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
        ));
        assert!(!says_absent(""));
    }
}
