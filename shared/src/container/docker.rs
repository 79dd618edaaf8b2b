//! The `docker` CLI as the worker and the daemon run it (never a Docker API library). Every
//! docker process is a child of its caller that dies with it (`PR_SET_PDEATHSIG`), reads
//! `/dev/null`, and gets the caller's environment without inherited run variables plus this
//! run's marker, so that one left behind is the run's to sweep and never another run's.
//!
//! Short commands (`create`, `start`, `inspect`, `stop`, `rm`, `ps`) run to their end within a
//! bound, with their output captured. The followers (`wait`, `logs --follow`) are spawned and
//! left to the reaper.

use crate::ids::TaskId;
use crate::rundir::is_run_variable;
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::unistd::{getppid, Pid};
use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Resolved on the caller's `PATH`.
pub const PROGRAM: &str = "docker";

/// How long a short command may take before it is killed: generous, because a busy engine
/// is slow, but finite, because a hung one must not hold the run forever.
pub const COMMAND_BOUND: Duration = Duration::from_secs(60);

/// What a short docker command said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Reply {
    /// Docker's complaint in one line, for a log note or a `spawn_failed` message.
    pub fn complaint(&self) -> String {
        let text = if self.stderr.trim().is_empty() {
            self.stdout.trim()
        } else {
            self.stderr.trim()
        };
        if text.is_empty() {
            "docker failed without a message".into()
        } else {
            text.lines().collect::<Vec<_>>().join(" / ")
        }
    }
}

/// Why a short command gave no reply.
#[derive(Debug)]
pub enum RunError {
    /// `docker` could not be started at all (not installed, not executable): nothing it
    /// would have done has happened.
    Spawn(io::Error),
    /// It ran but its end or output could not be collected, or it outlived its bound (then
    /// it was killed): what it did is unknown.
    Lost(String),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Spawn(e) => write!(f, "cannot run {PROGRAM}: {e}"),
            RunError::Lost(message) => f.write_str(message),
        }
    }
}

/// The docker CLI with the environment of one run.
#[derive(Debug, Clone)]
pub struct Docker {
    env: Vec<(OsString, OsString)>,
}

impl Docker {
    pub fn for_run(task: TaskId) -> Docker {
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(name, _)| !is_run_variable(&name.to_string_lossy()))
            .collect();
        env.push(("HOMEBASED_TASK_ID".into(), task.to_string().into()));
        Docker { env }
    }

    /// Runs `docker <args>` to its end, killing it after `bound`.
    pub fn run(&self, args: &[&str], bound: Duration) -> Result<Reply, RunError> {
        let verb = args.first().copied().unwrap_or_default();
        let lost = |what: String| RunError::Lost(format!("docker {verb}: {what}"));
        // Memory files rather than pipes: nothing to drain while waiting, so a chatty command
        // can never block on a full pipe and a silent one needs no poll loop.
        let stdout = capture_file("docker-stdout").map_err(|e| lost(e.to_string()))?;
        let stderr = capture_file("docker-stderr").map_err(|e| lost(e.to_string()))?;
        let mut child = self
            .command(args)
            .stdout(stdout.try_clone().map_err(|e| lost(e.to_string()))?)
            .stderr(stderr.try_clone().map_err(|e| lost(e.to_string()))?)
            .spawn()
            .map_err(RunError::Spawn)?;
        let status = wait_bounded(&mut child, bound).map_err(lost)?;
        Ok(Reply {
            success: status.success(),
            stdout: read_back(stdout).map_err(|e| lost(e.to_string()))?,
            stderr: read_back(stderr).map_err(|e| lost(e.to_string()))?,
        })
    }

    /// Starts `docker <args>` and hands back the child, to be reaped by the caller. `group`:
    /// join that process group; `None` leads a new one.
    pub fn spawn(
        &self,
        args: &[&str],
        stdout: Stdio,
        stderr: Stdio,
        group: Option<u32>,
    ) -> io::Result<Child> {
        let pgid = match group {
            Some(pgid) => i32::try_from(pgid).map_err(io::Error::other)?,
            None => 0,
        };
        self.command(args)
            .stdout(stdout)
            .stderr(stderr)
            .process_group(pgid)
            .spawn()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(PROGRAM);
        command
            .args(args)
            .stdin(Stdio::null())
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        die_with_caller(&mut command);
        command
    }
}

/// `PR_SET_PDEATHSIG`: a docker process never outlives the process that would reap it.
fn die_with_caller(command: &mut Command) {
    let caller = Pid::this();
    // SAFETY: the closure runs between fork and exec and only makes two system calls through
    // nix (prctl, getppid); it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The caller may have died before the line above; then nobody would kill this.
            if getppid() != caller {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

fn capture_file(name: &str) -> io::Result<File> {
    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC)?;
    Ok(File::from(fd))
}

fn read_back(mut file: File) -> io::Result<String> {
    file.seek(SeekFrom::Start(0))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Waits for this one child (never `waitpid(-1)`: the reaper's children are not ours to take),
/// killing and collecting it after `bound`.
fn wait_bounded(child: &mut Child, bound: Duration) -> Result<std::process::ExitStatus, String> {
    let deadline = Instant::now() + bound;
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {bound:?}; killed it"));
            }
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("cannot wait for it: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_complaint_is_stderr_first_then_stdout_in_one_line() {
        let reply = |stdout: &str, stderr: &str| Reply {
            success: false,
            stdout: stdout.into(),
            stderr: stderr.into(),
        };
        assert_eq!(
            reply("x", "Error: No such object: abc\n").complaint(),
            "Error: No such object: abc"
        );
        assert_eq!(reply("out\n", " \n").complaint(), "out");
        assert_eq!(reply("", "a\nb\n").complaint(), "a / b");
        assert_eq!(reply("", "").complaint(), "docker failed without a message");
    }

    #[test]
    fn inherited_run_variables_never_reach_docker_but_the_marker_does() {
        let task = TaskId::new();
        let docker = Docker::for_run(task);
        let markers: Vec<_> = docker
            .env
            .iter()
            .filter(|(k, _)| is_run_variable(&k.to_string_lossy()))
            .collect();
        assert_eq!(
            markers,
            vec![&(
                OsString::from("HOMEBASED_TASK_ID"),
                OsString::from(task.to_string())
            )]
        );
    }
}
