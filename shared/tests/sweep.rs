//! The sweep with the real process table: real processes, real `/proc`, real pidfds.
//!
//! These run as whatever user runs the tests; as root every environment is readable, so the
//! suspect path for real processes is covered end to end with an unprivileged daemon.
//!
//! The lineage tests run their sweep in a fresh copy of this test binary that is a child
//! subreaper and its own lineage root, as the worker is: tests of one binary may share a
//! process, and a root's descendants must be only what that one test started. The process
//! that rewrites its environment, and the one whose leader thread exits, are a small C program
//! (`programs/probe.c`) compiled with `cc`: overwriting the environment block in place is what
//! `setproctitle` does, needs no privilege, and is exactly what `/proc/<pid>/environ` reads.
// Helpers outside `#[test]` functions panic on purpose: a broken fixture fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use homebased_shared::config::CleanupConfig;
use homebased_shared::ids::TaskId;
use homebased_shared::process;
use homebased_shared::rundir::{CleanupOutcome, ProcessIdentity};
use homebased_shared::sweep::{Marker, ProcTable, ProcessTable, Sweep, SystemClock};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the copy of this test binary that runs a sweep while carrying the marker itself.
const MARKED_SWEEPER: &str = "HOMEBASED_TEST_MARKED_SWEEPER";
/// Set (to a folder shared with the test) in the copy that sweeps as a lineage root.
const LINEAGE_ROOT: &str = "HOMEBASED_TEST_LINEAGE_ROOT";

fn sweep(task: TaskId, workload_start: Option<u64>, protected: Vec<ProcessIdentity>) -> Sweep {
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
        lineage: None,
    }
}

/// The sweep of a worker: this process is the lineage root.
fn lineage_sweep(task: TaskId, workload_start: u64) -> Sweep {
    Sweep {
        lineage: Some(identity(std::process::id())),
        ..sweep(task, Some(workload_start), Vec::new())
    }
}

/// Runs `inner` in a fresh copy of this test binary (test `name`) that is a child subreaper,
/// with a folder shared with `outer`, which runs here meanwhile; what `outer` returns is
/// dropped once the copy has ended.
fn as_lineage_root<T>(name: &str, outer: impl FnOnce(&Path) -> T, inner: impl FnOnce(&Path)) {
    if let Some(dir) = std::env::var_os(LINEAGE_ROOT) {
        nix::sys::prctl::set_child_subreaper(true).unwrap();
        inner(Path::new(&dir));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut copy = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env(LINEAGE_ROOT, tmp.path())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let kept = outer(tmp.path());
    let status = copy.wait().unwrap();
    drop(kept);
    assert!(status.success(), "the lineage root: {status}");
}

fn probe(dir: &std::path::Path) -> std::path::PathBuf {
    homebased_e2e::compile_probe(dir)
}

/// A process the test must end itself, whatever happens to the assertions.
struct Leftover(ProcessIdentity);

impl Drop for Leftover {
    fn drop(&mut self) {
        kill_leftover(self.0);
    }
}

fn signals_to(swept: &homebased_shared::sweep::Swept, id: ProcessIdentity) -> Vec<Signal> {
    swept
        .signalled
        .iter()
        .filter(|s| s.process == id)
        .map(|s| s.signal)
        .collect()
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

/// Waits until `pid` runs `program` (its exec is done).
fn wait_for_program(pid: u32, program: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
        if argv0.ends_with(program.as_bytes()) {
            return;
        }
        assert!(Instant::now() < deadline, "{pid} never ran {program}");
        std::thread::sleep(Duration::from_millis(5));
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
fn without_a_lineage_root_a_process_that_cleared_its_environment_is_not_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let cleared_file = tmp.path().join("cleared.pid");
    let task = TaskId::new();
    let script = format!(
        "env -i sleep 100 & echo $! > {}; wait",
        cleared_file.display()
    );
    let mut child = marked_shell(task, &script);
    let child_id = identity(child.id());
    let cleared_pid = pid_from(&cleared_file);
    // Until `env -i` has exec'd `sleep`, the forked shell still carries the marker: sweep only
    // once the process really has no environment.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read(format!("/proc/{cleared_pid}/environ")).is_ok_and(|e| e.is_empty()) {
        assert!(
            Instant::now() < deadline,
            "{cleared_pid} never cleared its environment"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let cleared = identity(cleared_pid);

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

    let swept = sweep(task, Some(protected_id.start_ticks), vec![protected_id])
        .run(&ProcTable::new(), &mut SystemClock);

    assert_eq!(swept.outcome, CleanupOutcome::Clean, "{swept:?}");
    assert!(swept.signalled.is_empty());
    assert_eq!(protected.try_wait().unwrap(), None, "still running");
    protected.kill().unwrap();
    protected.wait().unwrap();
}

#[test]
fn a_protected_pid_is_matched_by_its_start_time_too() {
    let task = TaskId::new();
    let mut marked = marked_shell(task, "exec sleep 100");
    // While the shell execs `sleep`, its environment can read empty for a moment: sweep once
    // `sleep` runs, so the marker is certainly there to be seen.
    wait_for_program(marked.id(), "sleep");
    let marked_id = identity(marked.id());
    // What the list would hold had the protected process ended and this one taken its pid.
    let earlier = ProcessIdentity {
        pid: marked_id.pid,
        start_ticks: marked_id.start_ticks - 1,
    };

    let swept = sweep(task, Some(earlier.start_ticks), vec![earlier])
        .run(&ProcTable::new(), &mut SystemClock);

    assert_eq!(swept.outcome, CleanupOutcome::Clean, "{swept:?}");
    assert_eq!(signals_to(&swept, marked_id), vec![Signal::SIGTERM]);
    assert!(!marked.wait().unwrap().success());
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

#[test]
fn an_env_cleared_grandchild_in_a_new_session_ignoring_term_is_killed_by_its_ancestry() {
    as_lineage_root(
        "an_env_cleared_grandchild_in_a_new_session_ignoring_term_is_killed_by_its_ancestry",
        |_| (),
        |dir| {
            let pidfile = dir.join("cleared.pid");
            let task = TaskId::new();
            let me = identity(std::process::id());
            let script = format!(
                "setsid env -i /bin/sh -c 'trap \"\" TERM; echo $$ > {f}; exec /bin/sleep 100' & \
                 while [ ! -s {f} ]; do sleep 0.01; done",
                f = pidfile.display()
            );
            let mut child = marked_shell(task, &script);
            let cleared = identity(pid_from(&pidfile));
            let _leftover = Leftover(cleared);
            assert!(child.wait().unwrap().success());
            let environ = std::fs::read(format!("/proc/{}/environ", cleared.pid)).unwrap();
            assert!(
                !Marker::for_task(task).is_in(&environ),
                "env -i dropped the marker: {}",
                String::from_utf8_lossy(&environ)
            );
            let stat = process::read_stat(cleared.pid).unwrap();
            assert_eq!(stat.ppid, me.pid, "the orphan came back to its subreaper");
            assert_ne!(stat.session, process::read_stat(me.pid).unwrap().session);

            let swept =
                lineage_sweep(task, me.start_ticks).run(&ProcTable::new(), &mut SystemClock);

            assert_eq!(swept.outcome, CleanupOutcome::Clean, "{swept:?}");
            assert!(ended(cleared), "the TERM-ignoring grandchild was killed");
            assert_eq!(
                signals_to(&swept, cleared),
                vec![Signal::SIGTERM, Signal::SIGKILL]
            );
            assert_eq!(swept.descendants, vec![cleared]);
        },
    );
}

#[test]
fn a_descendant_that_rewrote_its_environment_is_killed_by_its_ancestry() {
    as_lineage_root(
        "a_descendant_that_rewrote_its_environment_is_killed_by_its_ancestry",
        |_| (),
        |dir| {
            let probe = probe(dir);
            let pidfile = dir.join("rewritten.pid");
            let task = TaskId::new();
            let me = identity(std::process::id());
            let script = format!(
                "{probe} rewrite {f} & while [ ! -s {f} ]; do sleep 0.01; done",
                probe = probe.display(),
                f = pidfile.display()
            );
            let mut child = marked_shell(task, &script);
            let rewritten = identity(pid_from(&pidfile));
            let _leftover = Leftover(rewritten);
            assert!(child.wait().unwrap().success());
            let environ = std::fs::read(format!("/proc/{}/environ", rewritten.pid)).unwrap();
            assert!(
                !Marker::for_task(task).is_in(&environ) && environ.starts_with(b"probe:"),
                "the marker was overwritten: {}",
                String::from_utf8_lossy(&environ)
            );

            let swept =
                lineage_sweep(task, me.start_ticks).run(&ProcTable::new(), &mut SystemClock);

            assert_eq!(swept.outcome, CleanupOutcome::Clean, "{swept:?}");
            assert!(ended(rewritten));
            assert_eq!(
                signals_to(&swept, rewritten),
                vec![Signal::SIGTERM, Signal::SIGKILL]
            );
        },
    );
}

#[test]
fn an_unrelated_same_user_process_started_during_the_run_is_left_alone() {
    as_lineage_root(
        "an_unrelated_same_user_process_started_during_the_run_is_left_alone",
        |dir| {
            // Started here, after the lineage root: during its run, but not under it.
            let unrelated = Command::new("/bin/sleep")
                .arg("100")
                .env_remove(Marker::NAME)
                .stdin(Stdio::null())
                .spawn()
                .unwrap();
            let pid = unrelated.id();
            std::fs::write(dir.join("unrelated.pid.tmp"), pid.to_string()).unwrap();
            std::fs::rename(dir.join("unrelated.pid.tmp"), dir.join("unrelated.pid")).unwrap();
            struct Ends(Child);
            impl Drop for Ends {
                fn drop(&mut self) {
                    let _ = self.0.kill();
                    let _ = self.0.wait();
                }
            }
            Ends(unrelated)
        },
        |dir| {
            let task = TaskId::new();
            let me = identity(std::process::id());
            let unrelated = identity(pid_from(&dir.join("unrelated.pid")));
            assert!(
                unrelated.start_ticks >= me.start_ticks,
                "started during the run"
            );
            // The run's own workload, so that the sweep has something of its lineage to do.
            let mut child = marked_shell(task, "exec env -i /bin/sleep 100");
            let workload = identity(child.id());

            let swept =
                lineage_sweep(task, me.start_ticks).run(&ProcTable::new(), &mut SystemClock);

            assert_eq!(swept.outcome, CleanupOutcome::Clean, "{swept:?}");
            assert!(!child.wait().unwrap().success());
            assert_eq!(signals_to(&swept, workload), vec![Signal::SIGTERM]);
            assert!(
                process::is_same_process(unrelated) && !ended(unrelated),
                "the unrelated process lives on"
            );
            assert!(signals_to(&swept, unrelated).is_empty());
        },
    );
}

#[test]
fn a_marked_process_whose_leader_thread_exited_is_still_found_and_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let probe = probe(tmp.path());
    let pidfile = tmp.path().join("leader.pid");
    let task = TaskId::new();
    let mut child = Command::new(&probe)
        .arg("leader-exits")
        .arg(&pidfile)
        .env(Marker::NAME, task.to_string())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let id = identity(pid_from(&pidfile));
    assert_eq!(id.pid, child.id());
    let _leftover = Leftover(id);
    let stat = process::read_stat(id.pid).unwrap();
    assert!(stat.is_zombie(), "the leader reads as a zombie");
    assert!(!process::has_ended(&stat), "its process lives on");
    let info = ProcTable::new().info(id.pid).unwrap();
    assert!(!info.zombie && !info.exiting, "{info:?}");
    assert!(!ProcTable::new().link(id.pid).unwrap().ended);

    let swept =
        sweep(task, Some(id.start_ticks), Vec::new()).run(&ProcTable::new(), &mut SystemClock);

    assert_eq!(swept.outcome, CleanupOutcome::Clean, "{swept:?}");
    assert_eq!(
        signals_to(&swept, id),
        vec![Signal::SIGTERM, Signal::SIGKILL]
    );
    child.wait().unwrap();
    assert!(ended(id));
}
