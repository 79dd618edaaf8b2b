//! `runner.lock`: held for the worker's whole life, never inherited by the workload.

use crate::support::{eventually, Run};
use homebased_shared::rundir::{CleanupOutcome, ExitReason};
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::Path;

fn open(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap()
}

fn try_lock(path: &Path) -> bool {
    Flock::lock(open(path), FlockArg::LockExclusiveNonblock).is_ok()
}

/// Paths of the workload shell's open descriptors, as printed by it.
const LIST_FDS: &str = "for f in /proc/$$/fd/*; do readlink \"$f\"; done; exit 0";

fn assert_lock_not_inherited(run: &Run) {
    assert_eq!(run.exit().reason, ExitReason::Exit { code: 0 });
    let fds = run.output();
    assert!(fds.contains("output.log"), "listing ran: {fds}");
    assert!(
        !fds.lines().any(|l| l.ends_with("runner.lock")),
        "the workload holds runner.lock: {fds}"
    );
}

#[test]
fn the_workload_never_inherits_a_lock_the_worker_took() {
    let run = Run::shell(LIST_FDS);
    run.run_to_end();
    assert_lock_not_inherited(&run);
}

/// Starts the worker the way the daemon does: the lock taken first and handed over as fd 3.
fn start_with_handed_lock(run: &Run, target: &Path) -> (std::process::Child, Flock<File>) {
    let held = Flock::lock(open(target), FlockArg::LockExclusiveNonblock).unwrap();
    let fd: RawFd = held.as_raw_fd();
    let mut cmd = run.command();
    cmd.args(["--lock-fd", "3"]);
    // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 clears close-on-exec on the copy; an fd already at 3 needs it cleared.
            let ok = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0) != -1
            } else {
                libc::dup2(fd, 3) != -1
            };
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    (cmd.spawn().unwrap(), held)
}

#[test]
fn the_workload_never_inherits_a_handed_lock() {
    let run = Run::shell(LIST_FDS);
    let (mut worker, held) = start_with_handed_lock(&run, &run.dir.runner_lock());
    // The daemon keeps its copy open; the lock is the worker's through the shared description.
    let status = eventually("the worker to exit", || worker.try_wait().unwrap());
    assert!(status.success(), "{}", run.diagnose());
    assert_lock_not_inherited(&run);
    drop(held);
}

#[test]
fn a_handed_descriptor_for_another_file_is_refused() {
    let run = Run::shell("echo ran");
    let other = run.home.join("other.lock");
    drop(open(&run.dir.runner_lock()));
    let (mut worker, _held) = start_with_handed_lock(&run, &other);
    let status = eventually("the worker to exit", || worker.try_wait().unwrap());
    assert_eq!(status.code(), Some(1));
    assert!(
        !run.dir.exit_json().exists(),
        "no record without the run's lock"
    );
    assert!(run.worker_log().contains("is not"), "{}", run.diagnose());
}

#[test]
fn the_lock_is_held_exactly_while_the_worker_lives() {
    let run = Run::shell("sleep 30");
    let mut worker = run.start();
    run.child();
    assert!(
        !try_lock(&run.dir.runner_lock()),
        "held while the workload runs"
    );
    run.request_stop();
    assert!(worker.wait().success(), "{}", run.diagnose());
    assert!(
        try_lock(&run.dir.runner_lock()),
        "free once the worker is gone"
    );
}

#[test]
fn a_second_worker_refuses_a_held_lock() {
    let run = Run::shell("echo ran");
    let _held = Flock::lock(
        open(&run.dir.runner_lock()),
        FlockArg::LockExclusiveNonblock,
    )
    .unwrap();
    let status = run.start().wait();
    assert_eq!(status.code(), Some(1));
    assert!(
        !run.dir.exit_json().exists(),
        "another worker's records are not touched"
    );
    assert!(!run.dir.worker_json().exists());
    assert!(run.worker_log().contains("held"), "{}", run.diagnose());
}

#[test]
fn each_record_is_followed_by_a_poke() {
    let run = Run::shell("exit 0");
    let socket = UnixDatagram::bind(run.home.join("poke.sock")).unwrap();
    run.run_to_end();
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    socket.set_nonblocking(true).unwrap();
    let mut pokes = Vec::new();
    let mut buf = [0u8; 128];
    while let Ok(n) = socket.recv(&mut buf) {
        pokes.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    let task = run.task.to_string();
    assert_eq!(
        pokes,
        vec![task.clone(), task.clone(), task],
        "child, exit, cleanup"
    );
}

#[test]
fn a_missing_poke_socket_changes_nothing() {
    let run = Run::shell("exit 0");
    run.run_to_end();
    assert_eq!(run.exit().reason, ExitReason::Exit { code: 0 });
}

#[test]
fn bad_arguments_print_usage_and_exit_2() {
    let out = std::process::Command::new(crate::support::WORKER)
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: homebased-worker"));
}
