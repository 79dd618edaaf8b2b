//! The sweep with the real process table: real processes, real `/proc`, real pidfds.
//!
//! These run as whatever user runs the tests; as root every environment is readable, so the
//! suspect path for real processes is covered end to end with an unprivileged daemon.
// Helpers outside `#[test]` functions panic on purpose: a broken fixture fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use homebased_shared::config::CleanupConfig;
use homebased_shared::ids::TaskId;
use homebased_shared::process;
use homebased_shared::rundir::{CleanupOutcome, ProcessIdentity};
use homebased_shared::sweep::{Marker, ProcTable, Sweep, SystemClock};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the copy of this test binary that runs a sweep while carrying the marker itself.
const MARKED_SWEEPER: &str = "HOMEBASED_TEST_MARKED_SWEEPER";

fn sweep(task: TaskId, workload_start: Option<u64>, protected: Vec<u32>) -> Sweep {
    Sweep {
        task,
        workload_start,
        config: CleanupConfig {
            term_grace: Duration::from_millis(300),
            kill_grace: Duration::from_secs(1),
            rescan: Duration::from_millis(20),
            bound: Duration::from_secs(20),
        },
        protected,
    }
}

/// `sh -c script` carrying `task`'s marker, its output away from the test's.
fn marked_shell(task: TaskId, script: &str) -> Child {
    Command::new("/bin/sh")
        .args(["-c", script])
        .env(Marker::NAME, task.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits for a pid written by a script.
fn pid_from(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Ok(pid) = text.trim().parse() {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Gone, or a zombie nobody reaped yet: either way it ended.
fn ended(id: ProcessIdentity) -> bool {
    match process::read_stat(id.pid) {
        Ok(stat) => stat.start_ticks != id.start_ticks || stat.is_zombie(),
        Err(_) => true,
    }
}

fn identity(pid: u32) -> ProcessIdentity {
    process::identity(pid).unwrap()
}

/// Ends a process the test left alive on purpose, if it is still the same one.
fn kill_leftover(id: ProcessIdentity) {
    if process::is_same_process(id) {
        let _ = kill(Pid::from_raw(id.pid as i32), Signal::SIGKILL);
    }
}

#[test]
fn the_sweep_kills_a_marked_child_and_its_term_ignoring_setsid_grandchild() {
    let tmp = tempfile::tempdir().unwrap();
    let grandchild_file = tmp.path().join("grandchild.pid");
    let task = TaskId::new();
    let script = format!(
        "setsid sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 100' & sleep 100",
        grandchild_file.display()
    );
    let mut child = marked_shell(task, &script);
    let child_id = identity(child.id());
    let grandchild = identity(pid_from(&grandchild_file));
    assert_ne!(
        process::read_stat(grandchild.pid).unwrap().session,
        process::read_stat(child_id.pid).unwrap().session,
        "the grandchild escaped into a session of its own"
    );

    let swept = sweep(task, Some(child_id.start_ticks), Vec::new())
        .run(&ProcTable::new(), &mut SystemClock);

    assert_eq!(swept.outcome, CleanupOutcome::Clean, "{swept:?}");
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert!(ended(child_id));
    assert!(ended(grandchild), "the TERM-ignoring grandchild was killed");
    let signals_to = |id: ProcessIdentity| {
        swept
            .signalled
            .iter()
            .filter(|s| s.process == id)
            .map(|s| s.signal)
            .collect::<Vec<_>>()
    };
    assert_eq!(signals_to(child_id), vec![Signal::SIGTERM]);
    assert_eq!(
        signals_to(grandchild),
        vec![Signal::SIGTERM, Signal::SIGKILL]
    );
}

#[test]
fn a_process_that_cleared_its_environment_is_not_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let cleared_file = tmp.path().join("cleared.pid");
    let task = TaskId::new();
    let script = format!(
        "env -i sleep 100 & echo $! > {}; wait",
        cleared_file.display()
    );
    let mut child = marked_shell(task, &script);
    let child_id = identity(child.id());
    let cleared = identity(pid_from(&cleared_file));

    let swept = sweep(task, Some(child_id.start_ticks), Vec::new())
        .run(&ProcTable::new(), &mut SystemClock);

    assert_eq!(swept.outcome, CleanupOutcome::Clean, "{swept:?}");
    child.wait().unwrap();
    assert!(
        process::is_same_process(cleared) && !ended(cleared),
        "the unmarked process lives on"
    );
    assert!(swept.signalled.iter().all(|s| s.process != cleared));
    kill_leftover(cleared);
}

#[test]
fn a_protected_marked_process_is_never_signalled() {
    let task = TaskId::new();
    let mut protected = marked_shell(task, "exec sleep 100");
    let protected_id = identity(protected.id());

    let swept = sweep(task, Some(protected_id.start_ticks), vec![protected_id.pid])
        .run(&ProcTable::new(), &mut SystemClock);

    assert_eq!(swept.outcome, CleanupOutcome::Clean, "{swept:?}");
    assert!(swept.signalled.is_empty());
    assert_eq!(protected.try_wait().unwrap(), None, "still running");
    protected.kill().unwrap();
    protected.wait().unwrap();
}

#[test]
fn the_sweeper_never_signals_itself() {
    if std::env::var_os(MARKED_SWEEPER).is_some() {
        // The re-executed copy: this very process carries the marker.
        let task: TaskId = std::env::var(Marker::NAME).unwrap().parse().unwrap();
        let me = identity(std::process::id());
        let environ = std::fs::read("/proc/self/environ").unwrap();
        assert!(Marker::for_task(task).is_in(&environ));
        let swept =
            sweep(task, Some(me.start_ticks), Vec::new()).run(&ProcTable::new(), &mut SystemClock);
        assert_eq!(swept.outcome, CleanupOutcome::Clean, "{swept:?}");
        assert!(swept.signalled.is_empty());
        return;
    }
    let task = TaskId::new();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "the_sweeper_never_signals_itself", "--nocapture"])
        .env(Marker::NAME, task.to_string())
        .env(MARKED_SWEEPER, "1")
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the marked sweeper: {status}");
}
