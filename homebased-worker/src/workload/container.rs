//! A container step (SPEC sections 3 and 5, DESIGN "The worker"), driven through the `docker`
//! CLI ([`homebased_shared::container`]): `create` (fixed name and label, `--cidfile`), `start`, then two followers in one
//! process group of the worker's children, `docker wait` (its end is the container's end;
//! it leads the group and stands for the workload in `worker.json`) and `docker logs
//! --follow` (the container's stdout and stderr, appended to `output.log`). The exit code
//! and OOM kill are read with `docker inspect`; on a stop request the container gets
//! `docker stop` with the run's grace. After `exit.json` the container is removed without
//! force and its absence proven ([`Container::remove`]), before the marker sweep.
//!
//! Exit codes are Docker's: a process killed by signal N inside the container is reported by
//! Docker (through its init) as exit code 128+N, and recorded as that exit code, because
//! Docker says nothing more. Docker copies the container's stdout and stderr separately, so
//! in `output.log` lines keep their order within a stream but not between the two.
//!
//! A worker that dies without a stop request takes its followers with it (they die with the
//! worker) and leaves the container running. The next worker of the run, started with
//! `--adopt`, finds it again ([`adopt`]: by the saved id in the cidfile, then by name and
//! label), follows it like its own (a new `docker wait`, and `docker logs --follow` whose
//! replay is appended to `output.log` only past what the vanished worker had copied), records
//! its real exit and removes it.

mod create_args;

pub use create_args::{container_variables, docker_create_args};
pub use homebased_shared::container::{container_name, task_label};

use super::{Ended, Running, StartError};
use crate::clock::now_ms;
use crate::log::WorkerLog;
use crate::process_group::ProcessGroup;
use crate::reap::Reaper;
use crate::signals::Signals;
use crate::stop::{self, StopSignal, STOP_POLL};
use homebased_shared::config::CleanupConfig;
use homebased_shared::container::docker::{Docker, RunError, COMMAND_BOUND};
use homebased_shared::container::inspect::{self, ContainerState, Seen};
use homebased_shared::container::lookup::{self, Found};
use homebased_shared::container::{removal, saved_id};
use homebased_shared::ids::TaskId;
use homebased_shared::process;
use homebased_shared::rundir::write_atomic;
use homebased_shared::rundir::{ChildRecord, CleanupOutcome, ExitReason, RunDir, RunSpec};
use homebased_shared::spec::ContainerStep;
use homebased_shared::time::Millis;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::signal::Signal;
use serde_json::json;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where the job's state directory is mounted, read-write (`HOMEBASED_JOB_DIR`).
pub const JOB_DIR_TARGET: &str = "/homebased/job";
/// Where the run's `control/` directory is mounted, read-only (`yield` is seen there).
pub const CONTROL_TARGET: &str = "/homebased/run";

/// How often the container is inspected when `docker wait` could not say how it ended.
const INSPECT_POLL: Duration = Duration::from_secs(1);

/// A created and started container, followed until it ends and then removed.
#[derive(Debug)]
pub struct Container {
    task: TaskId,
    name: String,
    /// The full id, from the cidfile.
    id: String,
    docker: Docker,
    /// The read end of `docker wait`'s stdout: the exit code it prints when the container ends.
    wait_output: File,
    /// For an adopted container: the thread that appends the replayed logs to `output.log`.
    copier: Option<JoinHandle<()>>,
}

/// Where `docker logs --follow` writes.
#[derive(Debug, Clone, Copy)]
enum Logs {
    /// Straight onto `output.log` (appended): a container this worker started.
    Append,
    /// Through the worker, which drops the first `skip` bytes of the replay (what a vanished
    /// worker had already copied) and appends the rest: an adopted container.
    After { skip: u64 },
}

/// Why an adopting worker has no container to follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdoptError {
    /// Docker knows no container of the run (or could not say within the cleanup bound), or
    /// it cannot be followed: nothing is recorded, and the daemon takes the run for lost.
    Gone(String),
    /// The worker could not prepare the run or its followers.
    Worker(String),
}

/// How the following ended, before Docker is asked for the details.
enum End {
    /// The container ended by itself; the code as `docker wait` or `docker inspect` gave it.
    Exited(Option<i32>),
    /// Stopped by the worker on a stop request.
    Stopped,
    /// Docker no longer knows the container: it was removed outside the run.
    Vanished,
}

pub fn start(run: &RunSpec, dir: &RunDir, step: &ContainerStep) -> Result<Running, StartError> {
    super::host::prepare_folders(run, dir).map_err(StartError::Worker)?;
    // The daemon writes `run.json` without an fsync; a worker that adopts this container after
    // a machine crash reads the step from it, so it is made durable before the container can
    // exist (its name already is: the first `worker.json` fsynced the folder).
    homebased_shared::rundir::open_record(&dir.run_json())
        .and_then(|f| f.sync_all())
        .map_err(|e| {
            StartError::Worker(format!("cannot sync {}: {e}", dir.run_json().display()))
        })?;
    // Docker resolves nothing against the worker's cwd: mount sources and the cidfile must be
    // absolute, whatever run directory the worker was given.
    let dir = &std::path::absolute(dir.root())
        .map(RunDir::new)
        .map_err(|e| StartError::Worker(format!("{}: {e}", dir.root().display())))?;
    let log = WorkerLog::new(dir.worker_log());
    let docker = Docker::for_run(run.task);
    let name = container_name(run.task);
    // Taken before the create, like a host step's before its spawn; `HOMEBASED_DEADLINE`
    // counts from it, as the daemon's time limit does.
    let started_at = now_ms();
    let abandon = |id: Option<&str>, message: String| StartError::Container {
        removal: removal::remove(&docker, run.task, id, &run.cleanup, &|m| log.note(m)),
        message,
    };

    let args = docker_create_args(run, step, dir, started_at);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    log.note(format!("creating container {name} from {}", step.image));
    let id = match docker.run(&args, COMMAND_BOUND) {
        Ok(reply) if reply.success => saved_id(dir, &reply.stdout),
        Ok(reply) => {
            let message = format!("docker create failed: {}", reply.complaint());
            return Err(abandon(None, message));
        }
        // Docker never ran, so nothing was created: there is nothing to look for.
        Err(e @ RunError::Spawn(_)) => return Err(StartError::Workload(e.to_string())),
        Err(e) => return Err(abandon(None, e.to_string())),
    };
    let Some(id) = id else {
        let message = format!(
            "docker create gave no container id in {}",
            dir.container_id().display()
        );
        return Err(abandon(None, message));
    };

    log.note(format!("starting container {name} ({id})"));
    match docker.run(&["start", &id], COMMAND_BOUND) {
        Ok(reply) if reply.success => {}
        Ok(reply) => {
            let message = format!("docker start failed: {}", reply.complaint());
            return Err(abandon(Some(&id), message));
        }
        Err(e) => return Err(abandon(Some(&id), e.to_string())),
    }

    let followers = match follow_container(&docker, &id, dir, started_at, Logs::Append) {
        Ok(followers) => followers,
        Err(message) => return Err(abandon(Some(&id), message)),
    };
    Ok(followers.running(run.task, name, id, docker))
}

/// Finds the container a vanished worker of this run left and follows it from where that
/// worker was. `previous` is the vanished worker's child record, if it wrote one: its start
/// is kept (the suspect window), and its followers are let die before `output.log` is
/// measured.
pub fn adopt(
    run: &RunSpec,
    dir: &RunDir,
    previous: Option<&ChildRecord>,
) -> Result<Running, AdoptError> {
    super::host::prepare_folders(run, dir).map_err(AdoptError::Worker)?;
    let dir = &std::path::absolute(dir.root())
        .map(RunDir::new)
        .map_err(|e| AdoptError::Worker(format!("{}: {e}", dir.root().display())))?;
    let log = WorkerLog::new(dir.worker_log());
    let docker = Docker::for_run(run.task);
    let name = container_name(run.task);
    let found = find_within(&docker, dir, run, &log)?;
    let Found { id, state, by } = found;
    log.note(format!(
        "adopting container {name} ({id}), found by {by}: {}",
        state.status
    ));
    if state.status == "created" {
        // Never started: following it would wait forever, and starting it is not adopting.
        return Err(AdoptError::Gone(format!(
            "container {name} ({id}) was created but never started"
        )));
    }
    if homebased_shared::container::saved_id(dir, "").as_deref() != Some(id.as_str()) {
        // Found by name and label: save its id, for the removal and for a later adopter.
        if let Err(e) = write_atomic(&dir.container_id(), format!("{id}\n").as_bytes()) {
            log.note(format!("cannot save the container id: {e}"));
        }
    }
    let started_at = previous.map_or_else(now_ms, |c| c.started_at);
    if let Some(previous) = previous {
        let gone = wait_followers_gone(previous, run.cleanup.kill_grace);
        if !gone {
            log.note(format!(
                "the vanished worker's docker followers (group {}) are still there; \
                 adopting all the same",
                previous.pgid
            ));
        }
    }
    // What the vanished worker copied: the log's length, plus what cuts removed from it.
    let skip = std::fs::File::open(dir.output_log()).map_or(0, |log| {
        let len = log.metadata().map_or(0, |m| m.len());
        len + homebased_shared::output_cap::read_shift(&log, run.output_limit).unwrap_or(0)
    });
    let followers = follow_container(&docker, &id, dir, started_at, Logs::After { skip })
        .map_err(AdoptError::Worker)?;
    Ok(followers.running(run.task, name, id, docker))
}

/// The vanished worker's followers die with it (`PR_SET_PDEATHSIG`), a moment after its lock
/// was freed: until they are gone the old `docker logs` may still append to `output.log`.
fn wait_followers_gone(previous: &ChildRecord, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        let alive = process::group_members(previous.pgid).map(|members| {
            members
                .iter()
                .any(|p| !p.is_zombie() && p.start_ticks >= previous.process.start_ticks)
        });
        if !alive.unwrap_or(true) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lookup, asked again within the cleanup bound while Docker cannot answer.
fn find_within(
    docker: &Docker,
    dir: &RunDir,
    run: &RunSpec,
    log: &WorkerLog,
) -> Result<Found, AdoptError> {
    let deadline = Instant::now() + run.cleanup.bound;
    let mut last_failure = String::new();
    loop {
        match lookup::find(docker, dir, run.task) {
            Seen::Present(found) => return Ok(found),
            Seen::Absent => {
                return Err(AdoptError::Gone(format!(
                    "no container of the run by saved id, or by name {} and label {}",
                    container_name(run.task),
                    homebased_shared::container::task_label(run.task)
                )))
            }
            Seen::Unknown(e) if Instant::now() >= deadline => {
                return Err(AdoptError::Gone(format!(
                    "Docker could not say where the run's container is within {:?}: {e}",
                    run.cleanup.bound
                )))
            }
            Seen::Unknown(e) => {
                if e != last_failure {
                    log.note(format!("cannot look for the run's container yet: {e}"));
                    last_failure = e;
                }
                std::thread::sleep(INSPECT_POLL);
            }
        }
    }
}

/// The followers of a container, before they are wrapped as the running workload.
struct Followers {
    child: ChildRecord,
    group: ProcessGroup,
    wait_output: File,
    copier: Option<JoinHandle<()>>,
}

impl Followers {
    fn running(self, task: TaskId, name: String, id: String, docker: Docker) -> Running {
        Running {
            child: self.child,
            group: self.group,
            container: Some(Container {
                task,
                name,
                id,
                docker,
                wait_output: self.wait_output,
                copier: self.copier,
            }),
        }
    }
}

/// Spawns `docker wait` (leading a new process group) and `docker logs --follow` (joining
/// it), and returns the record of the leader, the group, the leader's stdout and the copier
/// of the logs when they pass through the worker.
fn follow_container(
    docker: &Docker,
    id: &str,
    dir: &RunDir,
    started_at: Millis,
    logs_to: Logs,
) -> Result<Followers, String> {
    let append = |path: &std::path::Path| {
        homebased_shared::rundir::open_append(path, 0o666)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))
    };
    // The followers' own complaints are the worker's to read, not the workload's output.
    let notes = append(&dir.worker_log())?;
    let mut wait = docker
        .spawn(&["wait", id], Stdio::piped(), Stdio::from(notes), None)
        .map_err(|e| format!("cannot run docker wait: {e}"))?;
    let leader = wait.id();
    let wait_output = wait.stdout.take().map(|out| File::from(OwnedFd::from(out)));
    // `Child` is dropped without waiting: the reaper collects the status with waitpid(-1).
    drop(wait);
    let Some(group) = ProcessGroup::led_by(leader) else {
        kill_and_collect(&[leader], None);
        return Err(format!(
            "docker wait pid {leader} cannot lead a process group"
        ));
    };
    let Some(wait_output) = wait_output else {
        kill_and_collect(&[leader], Some(group));
        return Err("docker wait has no stdout".into());
    };

    let output = append(&dir.output_log());
    let mut copier = None;
    // One open file description for both streams, so their writes interleave in order.
    let streams = output.and_then(|out| {
        let out = match logs_to {
            Logs::Append => out,
            Logs::After { skip } => {
                let (from, to) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
                    .map_err(|e| format!("cannot make a pipe for docker logs: {e}"))?;
                copier = Some(copy_logs(File::from(from), out, skip)?);
                File::from(to)
            }
        };
        let err = out
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", dir.output_log().display()))?;
        Ok((out, err))
    });
    // The leader is not reaped before the reaper runs, so its group exists to be joined even
    // if the container (and with it `docker wait`) already ended.
    let logs = streams.and_then(|(out, err)| {
        docker
            .spawn(
                &["logs", "--follow", id],
                out.into(),
                err.into(),
                Some(group.id()),
            )
            .map_err(|e| format!("cannot run docker logs: {e}"))
    });
    let logs = match logs {
        Ok(logs) => logs,
        Err(message) => {
            kill_and_collect(&[leader], Some(group));
            return Err(message);
        }
    };
    let logs_pid = logs.id();
    drop(logs);

    match process::identity(leader) {
        Ok(identity) => Ok(Followers {
            child: ChildRecord {
                process: identity,
                pgid: group.id(),
                started_at,
            },
            group,
            wait_output,
            copier,
        }),
        Err(e) => {
            kill_and_collect(&[leader, logs_pid], Some(group));
            Err(format!(
                "cannot read the identity of docker wait pid {leader} ({e}); killed it"
            ))
        }
    }
}

/// Appends what `from` gives to `to`, past its first `skip` bytes, until `from` ends (every
/// writer, `docker logs`, is gone). A thread, so that the logs flow whatever the worker waits
/// on; a write that fails (a full disk) loses that much output, never the run.
fn copy_logs(mut from: File, mut to: File, mut skip: u64) -> Result<JoinHandle<()>, String> {
    let copy = move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let dropped = usize::try_from(skip).unwrap_or(usize::MAX).min(n);
            skip -= dropped as u64;
            let _ = to.write_all(&buf[dropped..n]);
        }
    };
    std::thread::Builder::new()
        .name("docker-logs".into())
        .spawn(copy)
        .map_err(|e| format!("cannot start copying the container's logs: {e}"))
}

/// How long after a SIGKILL exit Docker is asked again whether it was an OOM kill, and how
/// often: its OOM event and its exit event arrive apart, under load the OOM one last.
const OOM_MARK_LATE: Duration = Duration::from_secs(1);
const OOM_ASK_AGAIN: Duration = Duration::from_millis(50);

/// A container that ended by SIGKILL (Docker's 137) without Docker's OOM mark: the kernel's OOM
/// killer sends SIGKILL, and the mark may still be on its way.
fn oom_may_be_marked_late(state: &inspect::ContainerState) -> bool {
    !state.running && state.exit_code == Some(128 + 9) && state.oom_killed == Some(false)
}

/// Untracked followers must not run: kill them and collect them before reporting.
fn kill_and_collect(pids: &[u32], group: Option<ProcessGroup>) {
    if let Some(group) = group {
        let _ = group.signal(Signal::SIGKILL);
    }
    for pid in pids {
        if let Ok(pid) = i32::try_from(*pid) {
            let pid = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(pid, None);
        }
    }
}

impl Container {
    /// Follows the container until it ends, stopping it on a stop request. The end is
    /// `cancelled` only if the worker stopped a container that was still running.
    pub fn follow(
        &mut self,
        group: ProcessGroup,
        reaper: &mut Reaper,
        signals: &Signals,
        dir: &RunDir,
        config: &CleanupConfig,
        log: &WorkerLog,
    ) -> Ended {
        let end = self.watch(reaper, signals, dir, config, log);
        // `docker logs --follow` ends by itself once the container stopped; let it copy the
        // last lines, so that `output.log` is whole when `exit.json` is written. If it does not
        // end, the group cleanup stops it.
        let drained = reaper.wait_until(
            signals,
            Instant::now() + config.term_grace,
            STOP_POLL,
            |_| group.is_empty(),
        );
        if !drained {
            log.note(format!(
                "docker followers of {} still running after the container ended",
                self.name
            ));
        } else if let Some(copier) = self.copier.take() {
            // `docker logs` is gone, so the pipe has ended: the copy is whole.
            let _ = copier.join();
        }
        let mut state = match inspect::state(&self.docker, &self.id) {
            Seen::Present(state) => Some(state),
            Seen::Absent => None,
            Seen::Unknown(e) => {
                log.note(format!("cannot inspect container {}: {e}", self.id));
                None
            }
        };
        // Docker learns of an OOM kill from an event of its own, which can reach it after the
        // exit: a container killed by SIGKILL and not (yet) marked is asked again, briefly.
        let asked_until = Instant::now() + OOM_MARK_LATE;
        while state.as_ref().is_some_and(oom_may_be_marked_late) && Instant::now() < asked_until {
            std::thread::sleep(OOM_ASK_AGAIN);
            match inspect::state(&self.docker, &self.id) {
                Seen::Present(again) => state = Some(again),
                Seen::Absent | Seen::Unknown(_) => break,
            }
        }
        let reason = self.reason(end, state.as_ref());
        Ended {
            reason,
            container: Some(json!({
                "id": self.id,
                "name": self.name,
                "exit_code": state.as_ref().and_then(|s| s.exit_code),
                "oom_killed": state.as_ref().and_then(|s| s.oom_killed),
            })),
        }
    }

    /// Removes the container and proves it gone: `Clean` or `ContainerUnconfirmed`. Must run
    /// after `exit.json` and before the marker sweep: the container's processes carry the
    /// run's marker, and Docker, not the sweep, is the one to end them.
    pub fn remove(&self, config: &CleanupConfig, log: &WorkerLog) -> CleanupOutcome {
        removal::remove(&self.docker, self.task, Some(&self.id), config, &|m| {
            log.note(m)
        })
    }

    fn watch(
        &mut self,
        reaper: &mut Reaper,
        signals: &Signals,
        dir: &RunDir,
        config: &CleanupConfig,
        log: &WorkerLog,
    ) -> End {
        // While `docker wait` runs, its end is the container's end. Without it (it failed, for
        // instance across an engine restart) the container is inspected on an interval.
        let mut waiting = true;
        let mut next_look = Instant::now();
        let mut last_failure = String::new();
        loop {
            // Look for the end before looking for a request: an end that came first is real.
            reaper.reap();
            if waiting {
                if let Some(ended) = reaper.workload_ended().cloned() {
                    waiting = false;
                    let printed = self.printed_code();
                    if let (ExitReason::Exit { code: 0 }, Some(code)) = (&ended, printed) {
                        return End::Exited(Some(code));
                    }
                    log.note(format!(
                        "docker wait ended ({ended:?}) without the container's exit code; \
                         inspecting the container instead"
                    ));
                }
            }
            if !waiting && Instant::now() >= next_look {
                match inspect::state(&self.docker, &self.id) {
                    Seen::Present(state) if !state.running => return End::Exited(state.exit_code),
                    Seen::Present(_) => {}
                    Seen::Absent => return End::Vanished,
                    Seen::Unknown(e) if e != last_failure => {
                        log.note(format!("cannot inspect container {}: {e}", self.id));
                        last_failure = e;
                    }
                    Seen::Unknown(_) => {}
                }
                next_look = Instant::now() + INSPECT_POLL;
            }
            if let Some(source) = stop::pending(signals, dir) {
                log.note(format!("stop requested by {source}"));
                return self.stop(waiting, reaper, signals, config, log);
            }
            signals.sleep(STOP_POLL);
        }
    }

    /// `docker stop` with the run's grace, unless the container already ended on its own.
    fn stop(
        &self,
        waiting: bool,
        reaper: &mut Reaper,
        signals: &Signals,
        config: &CleanupConfig,
        log: &WorkerLog,
    ) -> End {
        match inspect::state(&self.docker, &self.id) {
            Seen::Present(state) if !state.running => {
                log.note(format!(
                    "container {} had already ended on its own; recording its exit",
                    self.name
                ));
                return End::Exited(state.exit_code);
            }
            Seen::Absent => return End::Vanished,
            _ => {}
        }
        log.note(format!(
            "stopping container {}: docker stop -t {}",
            self.name,
            removal::grace_seconds(config.term_grace)
        ));
        if let Err(e) = removal::stop(&self.docker, &self.id, config) {
            // Recorded as stopped all the same; the removal finds a container still running
            // and reports it if it cannot end it either.
            log.note(format!("docker stop of {} failed: {e}", self.name));
        }
        if waiting {
            // Let `docker wait` see the end, so that the followers' group can empty.
            reaper.wait_until(
                signals,
                Instant::now() + config.kill_grace,
                STOP_POLL,
                |r| r.workload_ended().is_some(),
            );
        }
        End::Stopped
    }

    fn reason(&self, end: End, state: Option<&ContainerState>) -> ExitReason {
        match end {
            // `docker stop` went out to a container still running: it was stopped, whatever its
            // process answered the signal with, 0 included (the rule of `stop::stopped`; the
            // exit code Docker saw stays in the container record).
            End::Stopped => stop::stopped(StopSignal::Sent, None),
            End::Exited(code) => {
                let inspected = state.filter(|s| !s.running).and_then(|s| s.exit_code);
                match inspected.or(code) {
                    Some(code) => ExitReason::Exit { code },
                    None => ExitReason::SpawnFailed {
                        message: format!(
                            "container {} ({}) ended but Docker gave no exit code",
                            self.name, self.id
                        ),
                    },
                }
            }
            // No exit kind says "gone without an exit"; a failure that names the cause is the
            // honest record (the job fails rather than being repeated or called a success).
            End::Vanished => ExitReason::SpawnFailed {
                message: format!(
                    "container {} ({}) was removed outside the run before its exit could be read",
                    self.name, self.id
                ),
            },
        }
    }

    /// What `docker wait` printed: the exit code on its last line. Read without blocking
    /// (its writer has exited, but a descriptor leaked elsewhere must not hang the worker).
    fn printed_code(&mut self) -> Option<i32> {
        if let Ok(flags) = fcntl(&self.wait_output, FcntlArg::F_GETFL) {
            let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
            let _ = fcntl(&self.wait_output, FcntlArg::F_SETFL(flags));
        }
        let mut text = String::new();
        let _ = self.wait_output.read_to_string(&mut text);
        text.lines().last()?.trim().parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(exit_code: i32, oom_killed: Option<bool>) -> inspect::ContainerState {
        inspect::ContainerState {
            running: false,
            status: "exited".into(),
            exit_code: Some(exit_code),
            oom_killed,
        }
    }

    #[test]
    fn only_a_sigkill_exit_without_the_oom_mark_is_asked_again() {
        assert!(oom_may_be_marked_late(&ended(137, Some(false))));
        assert!(
            !oom_may_be_marked_late(&ended(137, Some(true))),
            "marked already"
        );
        assert!(
            !oom_may_be_marked_late(&ended(137, None)),
            "a Docker without the field"
        );
        assert!(!oom_may_be_marked_late(&ended(1, Some(false))));
        assert!(
            !oom_may_be_marked_late(&ended(143, Some(false))),
            "SIGTERM is no OOM kill"
        );
        let running = inspect::ContainerState {
            running: true,
            ..ended(137, Some(false))
        };
        assert!(!oom_may_be_marked_late(&running));
    }
}
