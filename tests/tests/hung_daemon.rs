//! A daemon that does not answer (SPEC 2): stopped with `SIGSTOP`, or running with its socket
//! deleted. The CLI never hangs on it: every request is bounded (30 s, `daemon_unavailable`,
//! naming the pid of `daemon.lock`), `daemon status` answers from the home's files within 5 s
//! and tells a hung daemon and a missing socket from a daemon that is down, `stop` and
//! `restart` act on the pid of `daemon.lock`, and a submit that got no answer names the job id
//! it made, so that its retry makes no second job. A regular file where the socket belongs is
//! refused, not deleted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{is_uuid, TestHome};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// Sends SIGCONT to the daemon when dropped, so that a failing assertion never leaves a
/// stopped daemon behind (its home's cleanup could not stop it).
struct Stopped(Pid);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        let pid = Pid::from_raw(i32::try_from(pid).unwrap());
        kill(pid, Signal::SIGSTOP).unwrap();
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

fn pid_of(status: &serde_json::Value) -> u32 {
    u32::try_from(
        status["pid"]
            .as_u64()
            .expect("a running daemon names its pid"),
    )
    .unwrap()
}

#[test]
fn a_stopped_daemon_never_hangs_the_cli_and_a_submit_names_the_job_id_to_retry_with() {
    let mut h = TestHome::without_resources();
    let pid = pid_of(&h.start_daemon());
    let spec = h.spec("stalled");
    let file = h.spec_file(&spec);
    let stopped = Stopped::new(pid);

    // `daemon status` reads the home instead, and says whose lock holds it.
    let started = Instant::now();
    let status = h.json(&["daemon", "status"]);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "daemon status took {took:?}");
    assert_eq!(status["socket"], "down", "{status}");
    assert_eq!(status["daemon"], "unresponsive", "{status}");
    assert_eq!(status["pid"], pid, "{status}");
    let human = h.cli(&["daemon", "status"]);
    assert!(
        human.stdout.contains(&format!("pid {pid}")) && human.stdout.contains("SIGSTOP"),
        "{human:?}"
    );

    // A read and a submit, at once: each ends with `daemon_unavailable` within the bound.
    let (list, submit) = std::thread::scope(|s| {
        let list = s.spawn(|| {
            let started = Instant::now();
            let error = h.json_err(&["resource", "list"], 1);
            (error, started.elapsed())
        });
        let submit = s.spawn(|| {
            let path = file.to_str().unwrap();
            h.json_err(&["resource", "job", "submit", "--spec", path], 1)
        });
        (list.join().unwrap(), submit.join().unwrap())
    });
    let (error, took) = list;
    assert!(
        took < Duration::from_secs(35),
        "resource list took {took:?}"
    );
    assert_eq!(error["code"], "daemon_unavailable", "{error}");
    assert_eq!(error["retryable"], true, "{error}");
    assert_eq!(error["input"]["pid"], pid, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {pid}")),
        "{error}"
    );
    assert_eq!(submit["code"], "daemon_unavailable", "{submit}");
    assert!(is_uuid(&submit["input"]["job"]), "{submit}");
    let job = submit["input"]["job"].as_str().unwrap().to_string();
    assert!(
        submit["message"]
            .as_str()
            .unwrap()
            .contains(&format!("retry with --job-id {job}")),
        "{submit}"
    );

    // The daemon wakes and may take the stalled request; the retry with the named id is the
    // same job either way, and the queue holds it once.
    drop(stopped);
    let retried = h.submit_json(&spec, Some(&job));
    assert_eq!(retried["job"], job.as_str(), "{retried}");
    h.settle();
    let queue = h.queue();
    assert_eq!(queue.len(), 1, "one job, not two: {queue:?}");
    assert_eq!(queue[0].0, job);
}

#[test]
fn a_daemon_whose_socket_was_deleted_is_told_apart_and_stopped_and_restarted_by_its_lock() {
    let mut h = TestHome::without_resources();
    let pid = pid_of(&h.start_daemon());
    std::fs::remove_file(h.socket()).unwrap();

    let status = h.json(&["daemon", "status"]);
    assert_eq!(status["socket"], "down", "{status}");
    assert_eq!(status["daemon"], "socket_missing", "{status}");
    assert_eq!(status["pid"], pid, "{status}");

    // Not a second daemon beside it: `start` refuses and says what helps.
    let refused = h.json_err(&["daemon", "start"], 5);
    assert_eq!(refused["code"], "daemon_already_running", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("daemon restart"),
        "{refused}"
    );

    // `restart` stops the old one through its lock and starts a new one that answers.
    let restarted = h.json(&["daemon", "restart"]);
    assert_eq!(restarted["socket"], "up", "{restarted}");
    let new_pid = pid_of(&restarted);
    assert_ne!(new_pid, pid, "{restarted}");
    assert!(h.json(&["resource", "list"])["resources"].is_array());

    // `stop` too, with the socket gone again.
    std::fs::remove_file(h.socket()).unwrap();
    let stopped = h.json(&["daemon", "stop"]);
    assert_eq!(stopped["socket"], "down", "{stopped}");
    let after = h.json(&["daemon", "status"]);
    assert_eq!(after["daemon"], "stopped", "{after}");
    assert!(!alive(new_pid), "the daemon exited");
}

/// Whether `pid` runs (a zombie, left to a reaper, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        !state.is_some_and(|s| s.starts_with('Z') || s.starts_with('X'))
    })
}

#[test]
fn a_regular_file_where_the_socket_belongs_is_refused_and_left_as_it_is() {
    let h = TestHome::without_resources();
    std::fs::create_dir_all(h.home()).unwrap();
    std::fs::write(h.socket(), "not a socket: keep me").unwrap();
    let out = h.cli(&["--json", "daemon", "start"]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(h.socket()).unwrap(),
        "not a socket: keep me"
    );
    let log = std::fs::read_to_string(h.daemon_log()).unwrap_or_default();
    assert!(log.contains("not a socket"), "{log}");
    let status = h.json(&["daemon", "status"]);
    assert_eq!(status["daemon"], "stopped", "{status}");
}
