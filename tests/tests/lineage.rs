//! The lineage net as a user sees it (SPEC section 6, rule 3): the worker is the subreaper of
//! its workload, so a process the run left behind is the run's by its ancestry even after it
//! cleared its environment (`env -i`) or rewrote it in place (as `setproctitle` does); it is
//! stopped before the lane serves its next job. A same-user process started during the run,
//! not under the worker and without the marker, is never touched.
//!
//! Each step leaves its process in a new session (so it escapes the step's process group),
//! writes its pid, and holds until the test opens a gate, so that the test knows the exact
//! process `(pid, kernel start time)` before cleanup can begin. The next job on the same lane
//! records whether that process still existed when it started.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::procs::{parse_stat, Proc};

use crate::common::jobs::{open_gate, runs, sh_spec, show, wait_for_gate, wait_job, wait_phase};
use crate::common::{Probe, TestHome};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Kills the process on drop if it is still the same one, whatever the test's assertions did.
struct Leftover(Proc);

impl Drop for Leftover {
    fn drop(&mut self) {
        if self.0.alive() {
            let _ = kill(Pid::from_raw(self.0.pid as i32), Signal::SIGKILL);
        }
    }
}

/// A same-user process the test starts itself, killed and reaped on drop.
struct Unrelated(Child);

impl Drop for Unrelated {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A home with one GPU lane and a short term grace, and its daemon.
fn lane() -> TestHome {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.use_config("[resource.cleanup]\nterm_grace = \"1s\"\n");
    h.start_daemon();
    h
}

/// A job whose step runs `escape` (which leaves a process behind that writes its pid to
/// `$1`), then holds until the gate `$2` exists.
fn escaping_job(h: &TestHome, name: &str, escape: &str, pidfile: &Path, gate: &Path) -> String {
    let script = format!("{escape}\n{}", wait_for_gate(2));
    h.submit(&sh_spec(h, name, &script, &[pidfile, gate]))
}

/// The next job on the lane: records the `/proc/<pid>/stat` line of the process named in
/// `$1` (or `gone`) in `$2` as soon as it starts.
fn next_job(h: &TestHome, pidfile: &Path, seen: &Path) -> String {
    let script = r#"p=$(cat "$1"); cat "/proc/$p/stat" > "$2.tmp" 2>/dev/null || echo gone > "$2.tmp"; mv "$2.tmp" "$2""#;
    h.submit(&sh_spec(h, "serves-next", script, &[pidfile, seen]))
}

/// What the next job saw: `escaped` was gone (or its pid named another process) before the
/// lane served again.
fn assert_gone_when_the_lane_served_again(seen: &Path, escaped: Proc) {
    let text = std::fs::read_to_string(seen).unwrap();
    let still_there = parse_stat(&text)
        .is_some_and(|(state, start)| start == escaped.start && !matches!(state, 'Z' | 'X'));
    assert!(
        !still_there,
        "{escaped:?} still ran when the next job started: {text}"
    );
}

/// The first run's cleanup and what its worker noted.
fn first_run(h: &TestHome, job: &str) -> (serde_json::Value, String) {
    let done = show(h, job);
    let run = runs(&done)[0].clone();
    let task = run["task"].as_str().unwrap().to_string();
    let log = std::fs::read_to_string(h.home().join("tasks").join(task).join("worker.log"))
        .unwrap_or_default();
    (run, log)
}

fn killed_by_lineage(log: &str, p: Proc) -> bool {
    ["SIGTERM", "SIGKILL"].iter().all(|signal| {
        log.contains(&format!(
            "sweep: {signal} sent to pid {} (start {}), which descends from this worker",
            p.pid, p.start
        ))
    })
}

#[test]
fn an_env_cleared_grandchild_ignoring_term_is_stopped_before_its_lane_serves_again_and_an_unrelated_process_is_not(
) {
    let h = lane();
    let pidfile = h.tmp().join("cleared.pid");
    let gate = h.tmp().join("gate");
    let seen = h.tmp().join("seen");
    let escape = r#"setsid env -i /bin/sh -c 'trap "" TERM; echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec /bin/sleep 1000' sh "$1" &"#;
    let first = escaping_job(&h, "leaves-a-cleared-process", escape, &pidfile, &gate);
    wait_phase(&h, &first, "executing");
    let cleared = Proc::written(&pidfile);
    let _leftover = Leftover(cleared);
    let environ = std::fs::read(format!("/proc/{}/environ", cleared.pid)).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&environ).contains("HOMEBASED_TASK_ID"),
        "env -i dropped the marker: {}",
        String::from_utf8_lossy(&environ)
    );
    // Started by the test during the run: same user, readable, no marker, not under the worker.
    let unrelated = Command::new("/bin/sleep")
        .arg("1000")
        .env_remove("HOMEBASED_TASK_ID")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let unrelated_proc = Proc::now(unrelated.id()).unwrap();
    let _unrelated = Unrelated(unrelated);
    let second = next_job(&h, &pidfile, &seen);

    open_gate(&gate);
    wait_job(&h, &first, "succeeded");
    wait_job(&h, &second, "succeeded");

    assert_gone_when_the_lane_served_again(&seen, cleared);
    assert!(!cleared.alive());
    let (run, log) = first_run(&h, &first);
    assert_eq!(run["cleanup"]["result"], "clean", "{run:#}");
    assert!(killed_by_lineage(&log, cleared), "{log}");
    assert!(
        unrelated_proc.alive(),
        "cleanup touched {unrelated_proc:?}, which is not the run's"
    );
    assert!(
        !log.contains(&format!("pid {} ", unrelated_proc.pid)),
        "{log}"
    );
}

fn probe(dir: &std::path::Path) -> std::path::PathBuf {
    homebased_e2e::compile_probe(dir)
}

#[test]
fn a_process_that_rewrote_its_environment_is_stopped_before_its_lane_serves_again() {
    let h = lane();
    let probe = probe(h.tmp());
    let pidfile = h.tmp().join("rewritten.pid");
    let gate = h.tmp().join("gate");
    let seen = h.tmp().join("seen");
    let escape = format!("setsid '{}' rewrite \"$1\" &", probe.display());
    let first = escaping_job(&h, "rewrites-its-environment", &escape, &pidfile, &gate);
    wait_phase(&h, &first, "executing");
    let rewritten = Proc::written(&pidfile);
    let _leftover = Leftover(rewritten);
    let environ = std::fs::read(format!("/proc/{}/environ", rewritten.pid)).unwrap_or_default();
    assert!(
        environ.starts_with(b"probe:") && !String::from_utf8_lossy(&environ).contains("HOMEBASED"),
        "the environment was rewritten: {}",
        String::from_utf8_lossy(&environ)
    );
    let second = next_job(&h, &pidfile, &seen);

    open_gate(&gate);
    wait_job(&h, &first, "succeeded");
    wait_job(&h, &second, "succeeded");

    assert_gone_when_the_lane_served_again(&seen, rewritten);
    let (run, log) = first_run(&h, &first);
    assert_eq!(run["cleanup"]["result"], "clean", "{run:#}");
    assert!(killed_by_lineage(&log, rewritten), "{log}");
}
