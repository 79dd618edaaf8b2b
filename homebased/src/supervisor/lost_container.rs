//! The container of a container step whose worker vanished: the worker would have removed
//! it, so the daemon does, through the docker CLI as the worker does (stop with the run's
//! grace, `rm` without force), and proves that no container of the run is left. What cannot
//! be proven gone within the cleanup bound is `container_unconfirmed` (Attention).

use homebased_shared::config::CleanupConfig;
use homebased_shared::ids::TaskId;
use homebased_shared::rundir::CleanupOutcome;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one docker command may take before it counts as failed.
const COMMAND_BOUND: Duration = Duration::from_secs(60);
/// Pause between two removal rounds.
const RETRY: Duration = Duration::from_millis(500);

pub fn remove(task: TaskId, config: &CleanupConfig) -> CleanupOutcome {
    let deadline = Instant::now() + config.bound;
    let grace = config.term_grace.as_secs_f64().ceil().max(1.0) as u64;
    loop {
        let why = match containers_of(task) {
            Ok(ids) if ids.is_empty() => return CleanupOutcome::Clean,
            Ok(ids) => {
                for id in &ids {
                    // Stopping an exited container is harmless; rm refuses a running one.
                    let _ = docker(&["stop", "-t", &grace.to_string(), id]);
                    if let Err(e) = docker(&["rm", "--volumes", id]) {
                        tracing::warn!(%task, container = %id, "docker rm: {e}");
                    }
                }
                format!("still present: {}", ids.join(", "))
            }
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return CleanupOutcome::ContainerUnconfirmed {
                message: format!(
                    "the container of run {task} could not be proven removed within {:?}: {why}",
                    config.bound
                ),
            };
        }
        std::thread::sleep(RETRY);
    }
}

/// Every container, running or not, that carries the run's label.
fn containers_of(task: TaskId) -> Result<Vec<String>, String> {
    let label = format!("label=homebased.task={task}");
    let out = docker(&["ps", "-a", "-q", "--no-trunc", "--filter", &label])?;
    Ok(out.split_whitespace().map(String::from).collect())
}

/// `docker <args>` with a bound: its stdout, or why it failed.
fn docker(args: &[&str]) -> Result<String, String> {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > COMMAND_BOUND => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "docker {} did not finish within {COMMAND_BOUND:?}",
                    args[0]
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for docker: {e}")),
        }
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    if status.success() {
        Ok(stdout)
    } else {
        Err(format!("docker {}: {}", args.join(" "), stderr.trim()))
    }
}
