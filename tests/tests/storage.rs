//! Storage that misbehaves for a moment, as a full disk or a backup tool holding the
//! database does on a real machine: the daemon loses nothing and carries on by itself once
//! the fault is gone. Each test reproduces one finding of a hostile test run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::jobs::*;
use common::{wait_until, Probe, TestHome};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::process::Stdio;

fn run_dir(h: &TestHome, task: &str) -> std::path::PathBuf {
    h.home().join("tasks").join(task)
}

/// Holds the database as `sqlite3 db 'BEGIN EXCLUSIVE'` would, until dropped.
struct ExclusiveHold(rusqlite::Connection);

impl ExclusiveHold {
    fn take(h: &TestHome) -> ExclusiveHold {
        let conn = rusqlite::Connection::open(h.database()).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
        ExclusiveHold(conn)
    }
}

impl Drop for ExclusiveHold {
    fn drop(&mut self) {
        let _ = self.0.execute_batch("ROLLBACK");
    }
}

#[test]
fn a_run_that_ends_while_the_database_is_locked_is_applied_once_the_lock_is_gone() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("gate");
    let job = h.submit(&gated_spec(&h, "ends under a lock", "", &gate, "echo done"));
    let running = wait_phase(&h, &job, "executing");
    let task = running["run"]["task"].as_str().unwrap().to_string();
    {
        let _lock = ExclusiveHold::take(&h);
        open_gate(&gate);
        // The worker records the exit and its cleanup; the daemon cannot commit them.
        let dir = run_dir(&h, &task);
        wait_until("the worker to finish its records", || {
            dir.join("cleanup.json").exists()
        });
        wait_until("the daemon to meet the lock", || {
            std::fs::read_to_string(h.daemon_log())
                .unwrap_or_default()
                .contains("cannot apply a run observation")
        });
    }
    // No new hint comes from the worker, which is gone: the daemon retries on its own.
    let done = wait_job(&h, &job, "succeeded");
    assert_eq!(event_names(&done), ["JOB_SUCCEEDED"], "{done:#}");
    assert_eq!(runs(&done)[0]["cleanup"]["result"], "clean", "{done:#}");
    wait_idle(&h, "gpu0");
    // And a daemon that met a lock still stops when asked.
    let mut h = h;
    h.stop_daemon();
}

#[test]
fn a_daemon_whose_log_cannot_be_written_keeps_serving_the_queue() {
    let h = TestHome::new(Probe::Gpus(1));
    // `daemon serve` with its log on a device that is always full.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut serve = h
        .homebased()
        .args(["daemon", "serve"])
        .stdin(Stdio::null())
        .stdout(full.try_clone().unwrap())
        .stderr(full)
        .spawn()
        .unwrap();
    wait_until("the daemon to answer with its log on /dev/full", || {
        assert!(
            serve.try_wait().unwrap().is_none(),
            "daemon serve died with its log on /dev/full"
        );
        h.socket_answers()
    });
    let job = h.submit(&sh_spec(&h, "logs nothing", "echo fine", &[]));
    let done = wait_job(&h, &job, "succeeded");
    assert_eq!(event_names(&done), ["JOB_SUCCEEDED"], "{done:#}");
    let stopped = h.json(&["daemon", "stop"]);
    assert_eq!(stopped["socket"], "down", "{stopped}");
    let exit = serve.wait().unwrap();
    assert!(exit.success(), "daemon serve exited {exit}");
}

#[test]
fn a_lost_run_whose_directory_is_gone_ends_in_attention_after_bounded_cleanup_attempts() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.spawn_serve();
    let gate = h.tmp().join("gate");
    let job = h.submit(&gated_spec(&h, "directory deleted", "", &gate, ""));
    let running = wait_phase(&h, &job, "executing");
    let task = running["run"]["task"].as_str().unwrap().to_string();
    // The daemon goes away, the worker is killed, and its run directory is deleted.
    h.kill_serve(Signal::SIGKILL);
    let dir = run_dir(&h, &task);
    let worker: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("worker.json")).unwrap()).unwrap();
    let pid = worker["worker"]["pid"].as_i64().unwrap() as i32;
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    wait_until("the worker to be gone", || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
    });
    std::fs::remove_dir_all(&dir).unwrap();
    h.spawn_serve();
    let held = wait_phase_on(&h, "gpu0", &job, "attention");
    let failure = &held["run"]["phase"]["failure"];
    assert_eq!(failure["result"], "enumeration_failed", "{held:#}");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("did not complete after"),
        "{held:#}"
    );
    // Bounded: the daemon settles in Attention instead of spinning on new attempts.
    h.settle();
    let again = resource(&h, "gpu0");
    assert_eq!(again["run"]["phase"], held["run"]["phase"], "{again:#}");
    let lost = show(&h, &job);
    assert_eq!(runs(&lost)[0]["status"], "lost", "{lost:#}");
    let attention = failure["attempt"].as_u64().unwrap();
    assert!(attention <= 5, "{held:#}");
}

/// Unmounts (lazily, so a daemon still inside lets go) what the test mounted.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the filesystem under `dir` until a write fails for want of space.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("fill");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOSPC as i32) => break,
            Err(e) => panic!("cannot fill {}: {e}", dir.display()),
        }
    }
    // Small writes too, until not a byte fits.
    while file.write(&[0u8; 512]).map(|n| n > 0).unwrap_or(false) {}
    path
}

#[test]
fn a_full_disk_refuses_a_submit_retryably_and_everything_goes_on_once_space_returns() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("note: skipped: mounting a small tmpfs home needs root");
        return;
    }
    let mut h = TestHome::new(Probe::Gpus(1));
    let home = h.home();
    std::fs::create_dir_all(&home).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
        .arg(&home)
        .status()
        .unwrap();
    assert!(mounted.success(), "mount a tmpfs home");
    let _mount = Mounted(home.clone());
    h.start_daemon();
    let gate = h.tmp().join("gate");
    let running = h.submit(&gated_spec(&h, "runs through it", "", &gate, "echo done"));
    wait_phase(&h, &running, "executing");
    let before = h.queue();

    let filler = fill(&home);
    let spec = h.spec("while full");
    let err = h.submit_err(&spec, None, 1);
    assert_eq!(err["code"], "storage_unavailable", "{err}");
    assert_eq!(err["retryable"], true, "{err}");
    // Reads go on, and the refused submit changed nothing.
    assert_eq!(h.queue(), before);

    std::fs::remove_file(filler).unwrap();
    open_gate(&gate);
    let done = wait_job(&h, &running, "succeeded");
    assert_eq!(event_names(&done), ["JOB_SUCCEEDED"], "{done:#}");
    let later = h.submit(&sh_spec(&h, "after the disk was freed", "echo later", &[]));
    wait_job(&h, &later, "succeeded");
    h.stop_daemon();
}

#[test]
fn a_launch_whose_run_directory_cannot_be_made_waits_visibly_and_starts_once_space_returns() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("note: skipped: mounting a small tmpfs for the run directories needs root");
        return;
    }
    let mut h = TestHome::new(Probe::Gpus(1));
    // Only the run directories are on the small filesystem: the store has room, so the
    // launch is reserved and then cannot make its directory, as on a disk that filled up
    // under a chatty job.
    let tasks = h.home().join("tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m,nr_inodes=64", "tmpfs"])
        .arg(&tasks)
        .status()
        .unwrap();
    assert!(mounted.success(), "mount a tmpfs for the run directories");
    let _mount = Mounted(tasks.clone());
    h.start_daemon();
    let filler = fill(&tasks);

    let job = h.submit(&sh_spec(&h, "while full", "echo ran", &[]));
    let mut listed = serde_json::Value::Null;
    wait_until("the job to wait for storage", || {
        listed = h.json(&["resource", "jobs"]);
        listed["jobs"][0]["waiting"]["reason"] == "storage_unavailable"
    });
    assert_eq!(listed["jobs"][0]["state"]["state"], "queued", "{listed:#}");
    // The lane is not left launching, and the status and the metrics say why.
    assert!(
        h.resources().iter().all(|r| r["run"].is_null()),
        "{:#}",
        h.resources()[0]
    );
    let status = h.json(&["daemon", "status"]);
    assert_eq!(status["storage"]["available"], false, "{status:#}");
    assert!(
        status["storage"]["error"]
            .as_str()
            .unwrap()
            .contains(&tasks.display().to_string()),
        "{status:#}"
    );
    let human = h.cli(&["daemon", "status"]).stdout;
    assert!(human.contains("storage unavailable"), "{human}");
    let metrics = h.cli(&["metrics"]).stdout;
    assert!(
        metrics.contains("homebased_storage_unavailable 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("homebased_launch_storage_failures_total 0"),
        "{metrics}"
    );

    std::fs::remove_file(filler).unwrap();
    wait_job(&h, &job, "succeeded");
    let status = h.json(&["daemon", "status"]);
    assert_eq!(status["storage"]["available"], true, "{status:#}");
    assert!(h
        .cli(&["metrics"])
        .stdout
        .contains("homebased_storage_unavailable 0"));
    h.stop_daemon();
}
