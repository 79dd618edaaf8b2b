//! The standby worker (`homebased-worker --standby`, ARCHITECTURE "The standby worker"): the
//! daemon keeps one per lane started ahead of need and hands one the next run; a used one is
//! replaced, a gone one costs no run, and an unused one never outlives its daemon. A worker
//! named by `HOMEBASED_WORKER` is never kept in standby.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::jobs::*;
use crate::common::{wait_until, Probe, TestHome};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The fields of `/proc/<pid>/stat` after the command name: state, then parent pid.
fn state_and_parent(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    Some((state, rest.next()?.parse().ok()?))
}

/// Whether `pid` still runs (a zombie has ended).
fn running(pid: i32) -> bool {
    state_and_parent(pid).is_some_and(|(state, _)| state != 'Z')
}

/// The daemon's children that are `homebased-worker --standby` still waiting: standard input
/// is the daemon's socket until a run is handed over (a worker that took one keeps its command
/// line, with `/dev/null` as its standard input).
fn standby_workers(daemon: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_standby =
            args.len() >= 2 && args[0].ends_with(b"homebased-worker") && args[1] == b"--standby";
        let child_of_daemon =
            state_and_parent(pid).is_some_and(|(state, parent)| state != 'Z' && parent == daemon);
        let waiting = std::fs::read_link(format!("/proc/{pid}/fd/0"))
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        if is_standby && child_of_daemon && waiting {
            found.push(pid);
        }
    }
    found
}

fn daemon_pid(h: &TestHome) -> i32 {
    h.json(&["daemon", "status"])["pid"]
        .as_i64()
        .expect("daemon status names its pid") as i32
}

/// Waits for the daemon's one standby worker and returns its pid.
fn the_standby(daemon: i32) -> i32 {
    let mut found = Vec::new();
    wait_until("the daemon's standby worker", || {
        found = standby_workers(daemon);
        found.len() == 1
    });
    found[0]
}

/// The task UUID of the job's first run.
fn first_task(h: &TestHome, job: &str) -> String {
    runs(&show(h, job))[0]["task"].as_str().unwrap().to_string()
}

/// The pid recorded in `worker.json` of the job's first run.
fn worker_of(h: &TestHome, job: &str) -> i32 {
    let task = first_task(h, job);
    let text = std::fs::read_to_string(h.home().join("tasks").join(task).join("worker.json"))
        .expect("the run's worker.json");
    let record: serde_json::Value = serde_json::from_str(&text).unwrap();
    record["worker"]["pid"].as_i64().unwrap() as i32
}

fn quick_job(h: &TestHome, name: &str) -> String {
    let job = h.submit(&sh_spec(h, name, "echo ran", &[]));
    wait_job(h, &job, "succeeded");
    job
}

/// The `Umask:` of a process, as `/proc/<pid>/status` gives it.
fn umask(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("Umask:").map(|m| m.trim().to_string()))
        .expect("a Umask line")
}

/// A running daemon on a one-GPU home, its pid, and its standby worker once it waits.
fn daemon_with_a_standby() -> (TestHome, i32, i32) {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let daemon = daemon_pid(&h);
    let standby = the_standby(daemon);
    (h, daemon, standby)
}

#[test]
fn a_run_is_handed_to_the_waiting_standby_worker_and_a_new_one_takes_its_place() {
    let (h, daemon, standby) = daemon_with_a_standby();
    // Started once the daemon served, never inside the moment its socket's bind narrows the
    // umask: its workloads get the daemon's own.
    assert_eq!(umask(standby), umask(daemon));

    let job = quick_job(&h, "handed over");
    assert_eq!(
        worker_of(&h, &job),
        standby,
        "the run's worker is the standby worker that waited"
    );
    assert_eq!(task_log(&h, &first_task(&h, &job)).trim(), "ran");

    let replacement = the_standby(daemon);
    assert_ne!(
        replacement, standby,
        "a new standby worker replaced the used one"
    );
    let next = quick_job(&h, "handed over again");
    assert_eq!(worker_of(&h, &next), replacement);
}

#[test]
fn a_standby_worker_that_is_gone_costs_no_run() {
    let (h, daemon, standby) = daemon_with_a_standby();
    kill(Pid::from_raw(standby), Signal::SIGKILL).unwrap();
    // Still the daemon's child (a zombie) until the next launch reaps it.
    wait_until("the killed standby worker to end", || !running(standby));

    let job = quick_job(&h, "started fresh");
    let shown = show(&h, &job);
    assert_eq!(
        runs(&shown).len(),
        1,
        "one run, never a lost one: {shown:#}"
    );
    assert_ne!(worker_of(&h, &job), standby);
    let log = std::fs::read_to_string(h.daemon_log()).unwrap();
    assert!(
        log.contains("the standby worker did not take the run"),
        "the daemon says why it started a fresh worker:\n{log}"
    );
    // And it keeps one in standby again.
    assert_ne!(the_standby(daemon), standby);
}

#[test]
fn an_unused_standby_worker_ends_with_its_daemon_even_a_killed_one() {
    let mut h = TestHome::new(Probe::Gpus(1));
    let daemon = h.spawn_serve() as i32;
    let standby = the_standby(daemon);
    h.kill_serve(Signal::SIGKILL);
    wait_until("the standby worker to end with its daemon", || {
        !running(standby)
    });
}

#[test]
fn a_worker_named_by_homebased_worker_is_started_per_run_and_never_kept_in_standby() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.set_env("HOMEBASED_WORKER", common::worker_bin());
    h.start_daemon();
    let daemon = daemon_pid(&h);
    let job = quick_job(&h, "fresh worker");
    assert!(worker_of(&h, &job) > 0);
    assert!(
        standby_workers(daemon).is_empty(),
        "no standby worker beside an overriding HOMEBASED_WORKER"
    );
}

/// The inode of `path`, once it exists.
fn inode_when_there(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut inode = 0;
    wait_until(
        &format!("{} to be staged", path.display()),
        || match std::fs::metadata(path) {
            Ok(meta) => {
                inode = meta.ino();
                true
            }
            Err(_) => false,
        },
    );
    inode
}

#[test]
fn a_run_gets_the_directories_staged_ahead_of_it_and_new_ones_are_staged() {
    use std::os::unix::fs::MetadataExt;
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let staged = h.home().join("staged");
    // One lane: one skeleton of each kind.
    let run_skeleton = inode_when_there(&staged.join("run.0"));
    let job_skeleton = inode_when_there(&staged.join("job.0"));

    let job = quick_job(&h, "staged");
    let run_dir = h.home().join("tasks").join(first_task(&h, &job));
    assert_eq!(std::fs::metadata(&run_dir).unwrap().ino(), run_skeleton);
    let job_dir = h.home().join("jobs").join(&job);
    assert_eq!(std::fs::metadata(&job_dir).unwrap().ino(), job_skeleton);
    // The job succeeds with exit.json; the worker's cleanup record comes a moment later.
    wait_until("the worker's cleanup record", || {
        run_dir.join("cleanup.json").exists()
    });
    for name in ["run.json", "worker.json", "exit.json", "runner.lock"] {
        assert!(
            run_dir.join(name).exists(),
            "{name} in the claimed directory"
        );
    }
    assert!(job_dir.join("state").is_dir());

    wait_until("new directories to be staged", || {
        std::fs::metadata(staged.join("run.0")).is_ok_and(|m| m.ino() != run_skeleton)
            && std::fs::metadata(staged.join("job.0")).is_ok_and(|m| m.ino() != job_skeleton)
    });
}

#[test]
fn a_daemon_of_four_lanes_keeps_four_standby_workers_and_a_burst_of_four_starts_takes_them_all() {
    let mut h = TestHome::new(Probe::Gpus(4));
    h.start_daemon();
    let daemon = daemon_pid(&h);
    let mut pool = Vec::new();
    wait_until("a standby worker for each of the four lanes", || {
        pool = standby_workers(daemon);
        pool.len() == 4
    });
    let skeletons = |prefix: &str| {
        std::fs::read_dir(h.home().join("staged"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .count()
    };
    wait_until("four run and four job directories staged", || {
        skeletons("run.") == 4 && skeletons("job.") == 4
    });

    // Four jobs at once, one per lane, each held until all four run.
    let gate = h.tmp().join("gate");
    let jobs: Vec<String> = (0..4)
        .map(|i| h.submit(&gated_spec(&h, &format!("burst {i}"), "", &gate, "")))
        .collect();
    for job in &jobs {
        wait_phase(&h, job, "executing");
    }
    let mut workers: Vec<i32> = jobs.iter().map(|job| worker_of(&h, job)).collect();
    workers.sort_unstable();
    pool.sort_unstable();
    assert_eq!(
        workers, pool,
        "every start of the burst was a hand-over to a waiting worker"
    );

    std::fs::write(&gate, "").unwrap();
    for job in &jobs {
        wait_job(&h, job, "succeeded");
    }
    wait_until("the pool refilled with new workers", || {
        let now = standby_workers(daemon);
        now.len() == 4 && now.iter().all(|pid| !pool.contains(pid))
    });
}

/// `/proc/<pid>/cmdline` as its arguments (a trailing run of NULs, the rest of a rewritten
/// command line's area, holds none).
fn arguments(pid: i32) -> Vec<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let used = cmdline
        .iter()
        .rposition(|b| *b != 0)
        .map_or(0, |last| last + 1);
    cmdline[..used]
        .split(|b| *b == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

#[test]
fn a_worker_taken_from_standby_names_its_run_in_its_command_line() {
    let (h, _daemon, standby) = daemon_with_a_standby();
    let gate = h.tmp().join("gate");
    let job = h.submit(&gated_spec(&h, "named", "", &gate, ""));
    wait_phase(&h, &job, "executing");
    assert_eq!(worker_of(&h, &job), standby);
    let run_dir = h.home().join("tasks").join(first_task(&h, &job));
    let run_dir = run_dir.to_string_lossy().into_owned();

    // As a fresh worker of that run shows: `homebased-worker <run-dir> --lock-fd N ...`.
    let mut shown = Vec::new();
    wait_until("the worker's command line to name its run", || {
        shown = arguments(standby);
        shown.get(1) == Some(&run_dir)
    });
    assert!(shown[0].ends_with("homebased-worker"), "{shown:?}");
    assert!(
        !shown.iter().any(|arg| arg == "--standby"),
        "no trace of the standby command line: {shown:?}"
    );
    let lock_fd = shown.iter().position(|arg| arg == "--lock-fd").unwrap();
    let fd = &shown[lock_fd + 1];
    assert!(
        std::fs::read_link(format!("/proc/{standby}/fd/{fd}"))
            .unwrap()
            .ends_with("runner.lock"),
        "--lock-fd {fd} names the run's lock"
    );
    // `ps` reads the same area.
    let ps = std::process::Command::new("ps")
        .args(["-o", "args=", "-p", &standby.to_string()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&ps.stdout).contains(&run_dir));

    open_gate(&gate);
    wait_job(&h, &job, "succeeded");
}
