//! What a worker's command line says about its run: `homebased-worker <home>/tasks/<task>
//! --job <job> --lanes <a,b> ...`. The daemon puts the run's job and lanes there, and a
//! standby worker writes them over its own command line before its workload exists
//! (`homebased-worker/src/title.rs`).
//!
//! Why: a daemon whose store lost a run (restored from an older copy) meets its live worker
//! at start and must hold that run's lanes (SPEC section 1, `unknown_live_run`). Everything
//! in the run directory, `run.json` included, is the workload's to rewrite or delete, so what
//! the daemon believes there comes from a place the workload cannot write: the worker's own
//! memory, which the kernel shows as `/proc/<pid>/cmdline`. Changing another process's
//! command line takes ptrace rights over it (`/proc/<pid>/mem`); with those a workload owns
//! its worker anyway (docs/RELIABILITY.md, "What a workload can do to its cleanup").
//! A workload that starts a process of its own named like a worker can only make the daemon
//! hold more lanes, never fewer.

use crate::ids::{JobId, TaskId};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The worker binary's file name, as `argv[0]` ends.
pub const WORKER_NAME: &str = "homebased-worker";
/// The flag before the run's job id.
pub const JOB_FLAG: &str = "--job";
/// The flag before the run's lane names, joined by [`LANE_SEPARATOR`].
pub const LANES_FLAG: &str = "--lanes";
/// Lane names are `[a-z0-9-]` (SPEC section 7), so a comma never occurs in one.
pub const LANE_SEPARATOR: char = ',';

/// The lanes as one argument.
pub fn join_lanes<S: AsRef<str>>(lanes: &[S]) -> String {
    lanes
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(&LANE_SEPARATOR.to_string())
}

/// The lanes of a `--lanes` argument; empty names are dropped.
pub fn split_lanes(joined: &str) -> Vec<String> {
    joined
        .split(LANE_SEPARATOR)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A worker's command line, read from `/proc/<pid>/cmdline`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCmdline {
    /// `argv[1]`: the run directory as the daemon named it.
    pub run_dir: PathBuf,
    /// The run directory's own name.
    pub task: TaskId,
    /// `--job`, when the worker was given one (a worker of an older build was not).
    pub job: Option<JobId>,
    /// `--lanes`; empty when none was given.
    pub lanes: Vec<String>,
}

/// The worker command line in `cmdline` (its NUL-separated arguments), or `None` when it is
/// not one: `argv[0]` is not `homebased-worker` (by file name), `argv[1]` is not a run
/// directory (a standby worker that has no run yet says `--standby`). A `--job` that is not
/// a job id reads as none; what the daemon does with an unreadable one is to hold more.
pub fn parse(cmdline: &[u8]) -> Option<WorkerCmdline> {
    let mut args = cmdline
        .split(|b| *b == 0)
        .map(OsStr::from_bytes)
        .filter(|arg| !arg.is_empty());
    let argv0 = Path::new(args.next()?);
    if argv0.file_name()? != WORKER_NAME {
        return None;
    }
    let run_dir = PathBuf::from(args.next()?);
    let task = run_dir.file_name()?.to_str()?.parse::<TaskId>().ok()?;
    let (mut job, mut lanes) = (None, Vec::new());
    while let Some(arg) = args.next() {
        if arg == JOB_FLAG {
            job = args.next().and_then(|v| v.to_str()?.parse::<JobId>().ok());
        } else if arg == LANES_FLAG {
            lanes = args
                .next()
                .and_then(OsStr::to_str)
                .map(split_lanes)
                .unwrap_or_default();
        }
    }
    Some(WorkerCmdline {
        run_dir,
        task,
        job,
        lanes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmdline(args: &[&str]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for arg in args {
            bytes.extend_from_slice(arg.as_bytes());
            bytes.push(0);
        }
        bytes
    }

    #[test]
    fn a_workers_command_line_names_its_task_job_and_lanes() {
        let (task, job) = (TaskId::new(), JobId::new());
        let dir = format!("/h/tasks/{task}");
        let parsed = parse(&cmdline(&[
            "/usr/bin/homebased-worker",
            &dir,
            "--job",
            &job.to_string(),
            "--lanes",
            "gpu0,gpu1-mig-1",
            "--lock-fd",
            "3",
        ]))
        .unwrap();
        assert_eq!(parsed.run_dir, PathBuf::from(&dir));
        assert_eq!(parsed.task, task);
        assert_eq!(parsed.job, Some(job));
        assert_eq!(parsed.lanes, ["gpu0", "gpu1-mig-1"]);
    }

    #[test]
    fn a_retitled_standby_worker_reads_like_a_fresh_one_despite_its_trailing_room() {
        let task = TaskId::new();
        let dir = format!("/h/tasks/{task}");
        let mut bytes = cmdline(&["homebased-worker", &dir, "--lanes", "gpu3"]);
        bytes.extend_from_slice(&[0; 40]);
        let parsed = parse(&bytes).unwrap();
        assert_eq!((parsed.task, parsed.job), (task, None));
        assert_eq!(parsed.lanes, ["gpu3"]);
    }

    #[test]
    fn other_processes_standby_workers_and_bad_values_are_told_apart() {
        let task = TaskId::new();
        let dir = format!("/h/tasks/{task}");
        assert_eq!(parse(&cmdline(&["/bin/sh", &dir])), None);
        assert_eq!(
            parse(&cmdline(&["homebased-worker", "--standby", "   "])),
            None
        );
        assert_eq!(parse(&cmdline(&["homebased-worker", "/h/tasks/x"])), None);
        assert_eq!(parse(b""), None);
        let odd = parse(&cmdline(&[
            "homebased-worker",
            &dir,
            "--job",
            "nope",
            "--lanes",
        ]))
        .unwrap();
        assert_eq!((odd.job, odd.lanes), (None, Vec::<String>::new()));
    }

    #[test]
    fn lanes_join_and_split_back() {
        let lanes = ["gpu0".to_string(), "gpu7".to_string()];
        assert_eq!(split_lanes(&join_lanes(&lanes)), lanes);
        assert!(split_lanes("").is_empty());
    }
}
