//! The sweep after the group: what escaped the workload's process group is found by
//! `HOMEBASED_TASK_ID`, or by the lineage net (it descends from the worker, the workload's
//! subreaper, even without the marker), and stopped; unrelated processes and protected ones
//! are not.

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

fn probe(dir: &std::path::Path) -> std::path::PathBuf {
    homebased_e2e::compile_probe(dir)
}

/// The worker's log says the sweep killed `id` as a descendant without the marker.
fn assert_killed_by_lineage(run: &Run, id: ProcessIdentity) {
    assert!(ended(id), "{}", run.diagnose());
    let log = run.worker_log();
    for signal in ["SIGTERM", "SIGKILL"] {
        let line = format!(
            "sweep: {signal} sent to pid {} (start {}), which descends from this worker",
            id.pid, id.start_ticks
        );
        assert!(log.contains(&line), "no {line:?} in\n{log}");
    }
}

#[test]
fn an_env_cleared_grandchild_in_a_new_session_ignoring_term_is_stopped_by_the_lineage_net() {
    let escape = Escape::new(
        "setsid env -i /bin/sh -c 'trap \"\" TERM; echo $$ > PIDFILE; exec /bin/sleep 1000' &",
    );
    let run = &escape.run;
    let mut worker = run.start();
    let child = run.child();
    let cleared = written_pid(&escape.pid_file);
    let _leftover = Leftover(cleared);
    let stat = process::read_stat(cleared.pid).unwrap();
    assert!(stat.pgrp != child.pgid && stat.session != child.pgid);
    let environ = std::fs::read(format!("/proc/{}/environ", cleared.pid)).unwrap();
    assert!(!Marker::for_task(run.task).is_in(&environ));
    escape.release();

    assert!(worker.wait().success(), "{}", run.diagnose());
    assert_eq!(
        run.cleanup().outcome,
        CleanupOutcome::Clean,
        "{}",
        run.diagnose()
    );
    assert_killed_by_lineage(run, cleared);
}

#[test]
fn a_process_that_rewrote_its_environment_is_stopped_by_the_lineage_net() {
    let programs = tempfile::tempdir().unwrap();
    let probe = probe(programs.path());
    let escape = Escape::new(&format!("setsid {} rewrite PIDFILE &", probe.display()));
    let run = &escape.run;
    let mut worker = run.start();
    let rewritten = written_pid(&escape.pid_file);
    let _leftover = Leftover(rewritten);
    let environ = std::fs::read(format!("/proc/{}/environ", rewritten.pid)).unwrap();
    assert!(
        !Marker::for_task(run.task).is_in(&environ) && environ.starts_with(b"probe:"),
        "{}",
        String::from_utf8_lossy(&environ)
    );
    escape.release();

    assert!(worker.wait().success(), "{}", run.diagnose());
    assert_eq!(
        run.cleanup().outcome,
        CleanupOutcome::Clean,
        "{}",
        run.diagnose()
    );
    assert_killed_by_lineage(run, rewritten);
}

#[test]
fn an_unrelated_same_user_process_started_during_the_run_is_left_alone() {
    let escape = Escape::new("true");
    let run = &escape.run;
    let mut worker = run.start();
    let child = run.child();
    // Started by the test while the workload runs: same user, readable, no marker, and not
    // under the worker.
    let mut unrelated = Command::new("/bin/sleep")
        .arg("1000")
        .env_remove(Marker::NAME)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let unrelated_id = process::identity(unrelated.id()).unwrap();
    let _leftover = Leftover(unrelated_id);
    assert!(unrelated_id.start_ticks >= child.process.start_ticks);
    escape.release();

    assert!(worker.wait().success(), "{}", run.diagnose());
    assert_eq!(
        run.cleanup().outcome,
        CleanupOutcome::Clean,
        "{}",
        run.diagnose()
    );
    assert_eq!(unrelated.try_wait().unwrap(), None, "{}", run.diagnose());
    assert!(
        !run.worker_log()
            .contains(&format!("pid {} ", unrelated_id.pid)),
        "{}",
        run.diagnose()
    );
    unrelated.kill().unwrap();
    unrelated.wait().unwrap();
}

/// `run.json` names the daemon by identity. (A process older than the workload is passed
/// over by the sweep anyway; the match by identity itself is tested on the sweep.)
#[test]
fn protected_identities_are_never_signalled_even_with_the_marker() {
    let mut run = Run::shell("exit 0");
    let mut marked = Command::new("sleep")
        .arg("1000")
        .env(Marker::NAME, run.task.to_string())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let marked_id = process::identity(marked.id()).unwrap();
    let _leftover = Leftover(marked_id);
    run.set("protected_pids", json!([marked_id]));

    run.run_to_end();

    assert_eq!(
        run.cleanup().outcome,
        CleanupOutcome::Clean,
        "{}",
        run.diagnose()
    );
    assert_eq!(marked.try_wait().unwrap(), None, "{}", run.diagnose());
    marked.kill().unwrap();
    marked.wait().unwrap();
}

/// A `run.json` of an older daemon names bare pids: they still protect.
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
