//! The marker sweep after the group: what escaped the workload's process group is found by
//! `HOMEBASED_TASK_ID` and stopped; what dropped the marker, and protected pids, are not.

use crate::support::{eventually, Run};
use homebased_shared::process;
use homebased_shared::rundir::{CleanupOutcome, ProcessIdentity};
use homebased_shared::sweep::Marker;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A process the test must end itself, whatever happens to the assertions.
struct Leftover(ProcessIdentity);

impl Drop for Leftover {
    fn drop(&mut self) {
        if process::is_same_process(self.0) {
            let _ = kill(Pid::from_raw(self.0.pid as i32), Signal::SIGKILL);
        }
    }
}

/// The identity of the process whose pid a script wrote to `path`.
fn written_pid(path: &Path) -> ProcessIdentity {
    eventually(&format!("a pid in {}", path.display()), || {
        let text = std::fs::read_to_string(path).ok()?;
        process::identity(text.trim().parse().ok()?).ok()
    })
}

/// Gone, or a zombie not reaped yet: either way it ended.
fn ended(id: ProcessIdentity) -> bool {
    match process::read_stat(id.pid) {
        Ok(stat) => stat.start_ticks != id.start_ticks || stat.is_zombie(),
        Err(_) => true,
    }
}

/// A run whose workload runs `escape` (which starts a process in the background and writes
/// its pid to `PIDFILE`), then holds until the test creates `go`, so that the test reads the
/// escaped process's identity while it surely lives.
struct Escape {
    run: Run,
    _probe: tempfile::TempDir,
    pid_file: PathBuf,
    go: PathBuf,
}

impl Escape {
    fn new(escape: &str) -> Escape {
        let probe = tempfile::tempdir().unwrap();
        let pid_file = probe.path().join("escaped.pid");
        let go = probe.path().join("go");
        let escape = escape.replace("PIDFILE", &pid_file.display().to_string());
        let script = format!(
            "{escape}\nwhile [ ! -e {go} ]; do sleep 0.05; done",
            go = go.display()
        );
        Escape {
            run: Run::shell(&script),
            _probe: probe,
            pid_file,
            go,
        }
    }

    fn release(&self) {
        std::fs::write(&self.go, b"").unwrap();
    }
}

#[test]
fn a_term_ignoring_setsid_grandchild_is_found_by_its_marker_and_killed() {
    let escape = Escape::new("setsid sh -c 'trap \"\" TERM; echo $$ > PIDFILE; exec sleep 1000' &");
    let run = &escape.run;
    let mut worker = run.start();
    let child = run.child();
    let escaped = written_pid(&escape.pid_file);
    let _leftover = Leftover(escaped);
    assert_ne!(
        process::read_stat(escaped.pid).unwrap().pgrp,
        child.pgid,
        "the grandchild left the workload's process group"
    );
    escape.release();

    assert!(worker.wait().success(), "{}", run.diagnose());
    assert_eq!(
        run.cleanup().outcome,
        CleanupOutcome::Clean,
        "{}",
        run.diagnose()
    );
    assert!(ended(escaped), "{}", run.diagnose());
    let log = run.worker_log();
    assert!(
        log.contains(&format!("SIGTERM sent to pid {}", escaped.pid))
            && log.contains(&format!("SIGKILL sent to pid {}", escaped.pid)),
        "{log}"
    );
}

#[test]
fn a_process_that_cleared_its_environment_is_not_touched() {
    let escape = Escape::new("setsid env -i sleep 1000 & echo $! > PIDFILE");
    let run = &escape.run;
    let mut worker = run.start();
    let cleared = written_pid(&escape.pid_file);
    let _leftover = Leftover(cleared);
    escape.release();

    assert!(worker.wait().success(), "{}", run.diagnose());
    assert_eq!(
        run.cleanup().outcome,
        CleanupOutcome::Clean,
        "{}",
        run.diagnose()
    );
    assert!(
        !ended(cleared),
        "a process without the marker lives on\n{}",
        run.diagnose()
    );
    assert!(!run.worker_log().contains(&format!("pid {} ", cleared.pid)));
}

#[test]
fn protected_pids_are_never_signalled_even_with_the_marker() {
    let mut run = Run::shell("exit 0");
    // Stands for the daemon: carries this run's marker, and is protected.
    let mut marked = Command::new("sleep")
        .arg("1000")
        .env(Marker::NAME, run.task.to_string())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let marked_id = process::identity(marked.id()).unwrap();
    let _leftover = Leftover(marked_id);
    run.set("protected_pids", json!([std::process::id(), marked_id.pid]));

    run.run_to_end();

    assert_eq!(
        run.cleanup().outcome,
        CleanupOutcome::Clean,
        "{}",
        run.diagnose()
    );
    assert_eq!(marked.try_wait().unwrap(), None, "{}", run.diagnose());
    assert!(!run.worker_log().contains("sweep:"), "{}", run.diagnose());
    marked.kill().unwrap();
    marked.wait().unwrap();
}
