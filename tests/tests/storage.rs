//! Storage that misbehaves for a moment, as a full disk or a backup tool holding the
//! database does on a real machine: the daemon loses nothing and carries on by itself once
//! the fault is gone. Each test reproduces one finding of a hostile test run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::jobs::*;
use crate::common::{wait_until, Probe, Spec, TestHome};
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

/// Every entry under the home: its mode, and its bytes when it is a regular file, so a test
/// sees whether anything at all was written, created or removed.
fn home_entries(h: &TestHome) -> std::collections::BTreeMap<std::path::PathBuf, (u32, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut entries = std::collections::BTreeMap::new();
    let mut dirs = vec![h.home()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let bytes = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else {
                Vec::new()
            };
            if meta.is_dir() {
                dirs.push(path.clone());
            }
            entries.insert(path, (meta.mode(), bytes));
        }
    }
    entries
}

/// The page size of the database and the root page of `table`, read without writing.
fn root_page(db: &std::path::Path, table: &str) -> (u64, u64) {
    let uri = format!("file:{}?immutable=1", db.display());
    let conn = rusqlite::Connection::open_with_flags(
        uri,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    let size: u64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    let root: u64 = conn
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )
        .unwrap();
    (size, root)
}

fn overwrite(path: &std::path::Path, offset: u64, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(offset)).unwrap();
    file.write_all(bytes).unwrap();
    file.sync_all().unwrap();
}

/// A home whose daemon served one job and stopped cleanly (its WAL checkpointed away).
fn stopped_home_with_history() -> TestHome {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let job = h.submit(&sh_spec(&h, "history", "echo done", &[]));
    wait_job(&h, &job, "succeeded");
    h.stop_daemon();
    h
}

/// `daemon serve` on a damaged store: exit 1, `storage_damaged` naming the file and what to
/// do, and not a byte of the home changed.
fn assert_refused_as_damaged(h: &TestHome) {
    let before = home_entries(h);
    let out = h.cli(&["--json", "daemon", "serve"]);
    assert_eq!(out.code(), 1, "a damaged store is refused: {out:?}");
    let envelope: serde_json::Value =
        serde_json::from_str(out.stderr.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("the refusal is the JSON envelope ({e}): {out:?}"));
    let err = &envelope["error"];
    assert_eq!(err["code"], "storage_damaged", "{envelope}");
    assert_eq!(err["retryable"], false, "{envelope}");
    let message = err["message"].as_str().unwrap();
    let db = h.database();
    for part in [
        db.to_str().unwrap(),
        "-wal",
        "evidence",
        "restore",
        "never edit",
    ] {
        assert!(
            message.contains(part),
            "the message says {part:?}: {message}"
        );
    }
    let after = home_entries(h);
    assert!(
        after == before,
        "nothing in the home changed: {:?}",
        after
            .keys()
            .filter(|k| before.get(*k) != after.get(*k))
            .chain(before.keys().filter(|k| !after.contains_key(*k)))
            .collect::<Vec<_>>()
    );
    assert!(!h.socket_answers(), "no daemon came up");
}

#[test]
fn a_store_with_a_damaged_jobs_page_is_refused_at_start_and_left_as_it_was() {
    let h = stopped_home_with_history();
    let (page_size, root) = root_page(&h.database(), "jobs");
    overwrite(
        &h.database(),
        (root - 1) * page_size,
        &vec![0xA5; page_size as usize],
    );
    assert_refused_as_damaged(&h);
}

#[test]
fn a_store_with_a_damaged_header_is_refused_at_start_and_left_as_it_was() {
    let h = stopped_home_with_history();
    overwrite(&h.database(), 0, b"not a database!\0");
    assert_refused_as_damaged(&h);
}

/// A consistent copy of the live store, as a backup tool would take it.
fn copy_store(h: &TestHome, to: &std::path::Path) {
    let conn = rusqlite::Connection::open(h.database()).unwrap();
    conn.execute("VACUUM INTO ?1", [to.to_str().unwrap()])
        .unwrap();
}

/// Puts `copy` in place of the store and its WAL, as a person restoring yesterday's copy.
fn restore_store(h: &TestHome, copy: &std::path::Path) {
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(h.home().join(format!("homebased.sqlite{suffix}")));
    }
    std::fs::copy(copy, h.database()).unwrap();
}

fn worker_pid(h: &TestHome, task: &str) -> u64 {
    let worker: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir(h, task).join("worker.json")).unwrap(),
    )
    .unwrap();
    worker["worker"]["pid"].as_u64().unwrap()
}

#[test]
fn a_live_run_the_restored_store_does_not_know_holds_its_lane_until_released() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.spawn_serve();
    let older = h.tmp().join("older.sqlite");
    copy_store(&h, &older);
    let gate = h.tmp().join("gate");
    let job = h.submit(&gated_spec(&h, "forgotten", "", &gate, ""));
    let running = wait_phase(&h, &job, "executing");
    let task = running["run"]["task"].as_str().unwrap().to_string();
    let pid = worker_pid(&h, &task);

    // The daemon dies and the home gets a store from before the submit.
    h.kill_serve(Signal::SIGKILL);
    restore_store(&h, &older);
    h.spawn_serve();

    let lane = resource(&h, "gpu0");
    let phase = &lane["run"]["phase"];
    assert_eq!(phase["phase"], "attention", "{lane:#}");
    let failure = &phase["failure"];
    assert_eq!(failure["result"], "unknown_live_run", "{lane:#}");
    assert_eq!(failure["task"], task.as_str(), "{lane:#}");
    assert_eq!(failure["pid"], pid, "{lane:#}");
    assert_eq!(lane["run"]["task"], task.as_str(), "{lane:#}");
    let attention = phase["id"].as_str().unwrap().to_string();

    // Nothing starts beside the forgotten run.
    let next = h.submit(&sh_spec(&h, "after the restore", "echo next", &[]));
    h.settle();
    assert_eq!(state_of(&show(&h, &next)), "queued");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the forgotten run's worker still lives"
    );

    // A restart finds the same hold, not a second one.
    h.kill_serve(Signal::SIGTERM);
    h.spawn_serve();
    assert_eq!(
        resource(&h, "gpu0")["run"]["phase"]["id"],
        attention.as_str()
    );

    // A person releases it: the lane serves again, and a later restart keeps that decision
    // while the forgotten run still lives.
    let released = h.json(&release_args(&attention, &common::new_uuid()));
    assert_eq!(released["attention"], attention.as_str(), "{released}");
    wait_job(&h, &next, "succeeded");
    h.kill_serve(Signal::SIGTERM);
    h.spawn_serve();
    h.settle();
    let lane = resource(&h, "gpu0");
    assert!(lane["run"].is_null(), "{lane:#}");
    open_gate(&gate);
}

/// A running workload that tampers with its own run directory on cue: once `tamper` exists it
/// runs `commands` (with `$d` its run directory), creates `tampered`, and waits for `gate`.
struct Tamperer {
    job: String,
    task: String,
    worker_pid: u64,
    tamper: std::path::PathBuf,
    tampered: std::path::PathBuf,
    gate: std::path::PathBuf,
}

impl Tamperer {
    /// Submits it with `spec_extra` applied and waits until it executes.
    fn start(h: &TestHome, commands: &str, spec_extra: impl FnOnce(Spec) -> Spec) -> Tamperer {
        let (tamper, tampered, gate) = (
            h.tmp().join("tamper"),
            h.tmp().join("tampered"),
            h.tmp().join("gate"),
        );
        let script = format!(
            r#"d="$HOMEBASED_HOME/tasks/$HOMEBASED_TASK_ID"
wait_for() {{ i=0; while [ ! -e "$1" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; }}
wait_for "$1"
{commands}
: > "$2"
wait_for "$3"
echo finished"#
        );
        let spec = sh_spec(h, "tampers", &script, &[&tamper, &tampered, &gate]);
        let job = h.submit(&spec_extra(spec));
        let running = wait_phase(h, &job, "executing");
        let task = running["run"]["task"].as_str().unwrap().to_string();
        let worker_pid = worker_pid(h, &task);
        Tamperer {
            job,
            task,
            worker_pid,
            tamper,
            tampered,
            gate,
        }
    }

    /// Lets it tamper, and waits until it has.
    fn tamper(&self) {
        open_gate(&self.tamper);
        wait_until("the workload to tamper with its run directory", || {
            self.tampered.exists()
        });
    }
}

/// A workload that rewrites its run directory before a restored store meets it (issue 44):
/// its `run.json` replaced by one that names no lane, its `worker.json` and `runner.lock`
/// deleted. The daemon finds its worker by its command line all the same: the run's own lane
/// (and only it) is held in `unknown_live_run` Attention under the run's real job and worker
/// pid, until a person releases it. On the code before it, nothing was held and a job pinned
/// to that lane started beside the live run.
#[test]
fn a_live_run_that_rewrote_its_run_json_is_still_held_on_its_lane_after_a_restore() {
    let mut h = TestHome::new(Probe::Gpus(2));
    h.spawn_serve();
    let older = h.tmp().join("older.sqlite");
    copy_store(&h, &older);
    let run = Tamperer::start(
        &h,
        r#"printf '{"lanes":[]}' > "$d/run.json"
rm -f "$d/runner.lock" "$d/worker.json""#,
        |spec| spec.set("resource", serde_json::json!("gpu1")),
    );
    let (job, task, pid) = (run.job.clone(), run.task.clone(), run.worker_pid);

    // The daemon dies; the workload rewrites its records; the home gets an older store.
    h.kill_serve(Signal::SIGKILL);
    run.tamper();
    assert!(!run_dir(&h, &task).join("runner.lock").exists());
    restore_store(&h, &older);
    h.spawn_serve();

    let lane = resource(&h, "gpu1");
    let phase = &lane["run"]["phase"];
    assert_eq!(phase["phase"], "attention", "{lane:#}");
    let failure = &phase["failure"];
    assert_eq!(failure["result"], "unknown_live_run", "{lane:#}");
    assert_eq!(failure["task"], task.as_str(), "{lane:#}");
    assert_eq!(failure["job"], job.as_str(), "{lane:#}");
    assert_eq!(failure["pid"], pid, "{lane:#}");
    assert_eq!(
        failure["resources"],
        serde_json::json!(["gpu1"]),
        "{lane:#}"
    );
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("run.json cannot be used"),
        "{lane:#}"
    );
    let attention = phase["id"].as_str().unwrap().to_string();
    assert!(
        resource(&h, "gpu0")["run"].is_null(),
        "only its own lane is held"
    );

    // The other lane serves; nothing starts beside the live run on its own.
    let beside = h.submit(&sh_spec(&h, "on the other lane", "true", &[]));
    let pinned = h.submit(
        &sh_spec(&h, "pinned beside it", "true", &[]).set("resource", serde_json::json!("gpu1")),
    );
    wait_job(&h, &beside, "succeeded");
    h.settle();
    assert_eq!(state_of(&show(&h, &pinned)), "queued");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the forgotten run's worker still lives"
    );

    let released = h.json(&release_args(&attention, &common::new_uuid()));
    assert_eq!(released["attention"], attention.as_str(), "{released}");
    wait_job(&h, &pinned, "succeeded");
    open_gate(&run.gate);
}

/// A workload that deletes its `runner.lock` and `worker.json` while the daemon is down: the
/// restarted daemon (its store intact) still finds the run's worker, by its command line, and
/// re-attaches to it; the run ends as its workload does. On the code before, a missing lock
/// was taken for a gone worker: the live run was cleaned up as lost and its lane handed on.
#[test]
fn a_run_whose_workload_deleted_its_lock_is_reattached_after_a_daemon_restart() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.spawn_serve();
    let run = Tamperer::start(&h, r#"rm -f "$d/runner.lock" "$d/worker.json""#, |spec| {
        spec
    });
    let (job, task, pid) = (run.job.clone(), run.task.clone(), run.worker_pid);

    h.kill_serve(Signal::SIGKILL);
    run.tamper();
    h.spawn_serve();
    h.settle();

    let lane = resource(&h, "gpu0");
    assert_eq!(lane["run"]["task"], task.as_str(), "{lane:#}");
    assert_eq!(lane["run"]["phase"]["phase"], "executing", "{lane:#}");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the run's worker still lives"
    );
    let next = h.submit(&sh_spec(&h, "after it", "true", &[]));
    h.settle();
    assert_eq!(state_of(&show(&h, &next)), "queued");

    open_gate(&run.gate);
    wait_job(&h, &job, "succeeded");
    // The job's end may be applied before its cleanup record; the lane is handed on only
    // after the cleanup, so once the next job has run, the cleanup is on record.
    wait_job(&h, &next, "succeeded");
    let done = show(&h, &job);
    assert_eq!(done["runs"][0]["cleanup"]["result"], "clean", "{done:#}");
}

/// A forgotten run on two lanes is held on both by one Attention: nothing starts on either,
/// `/metrics` shows both in Attention, and one release frees both.
#[test]
fn a_live_two_lane_run_the_restored_store_does_not_know_holds_both_lanes_under_one_attention() {
    let mut h = TestHome::new(Probe::Gpus(2));
    h.spawn_serve();
    let older = h.tmp().join("older.sqlite");
    copy_store(&h, &older);
    let gate = h.tmp().join("gate");
    let pair = h
        .submit(&gated_spec(&h, "forgotten pair", "", &gate, "").set("gpus", serde_json::json!(2)));
    let running = wait_phase(&h, &pair, "executing");
    let task = running["run"]["task"].as_str().unwrap().to_string();
    let pid = worker_pid(&h, &task);

    h.kill_serve(Signal::SIGKILL);
    restore_store(&h, &older);
    h.spawn_serve();

    let lanes = [resource(&h, "gpu0"), resource(&h, "gpu1")];
    let attention = lanes[0]["run"]["phase"]["id"].as_str().unwrap().to_string();
    for lane in &lanes {
        let phase = &lane["run"]["phase"];
        assert_eq!(phase["phase"], "attention", "{lane:#}");
        assert_eq!(phase["id"], attention.as_str(), "one Attention: {lane:#}");
        assert_eq!(phase["failure"]["result"], "unknown_live_run", "{lane:#}");
        assert_eq!(
            phase["failure"]["resources"],
            serde_json::json!(["gpu0", "gpu1"]),
            "{lane:#}"
        );
        assert_eq!(lane["run"]["task"], task.as_str(), "{lane:#}");
    }
    let metrics = h.cli(&["metrics"]).stdout;
    for name in ["gpu0", "gpu1"] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("homebased_resource_phase{")
                    && l.contains(&format!("resource=\"{name}\""))
                    && l.contains("phase=\"attention\"")
            })
            .unwrap_or_else(|| panic!("no attention phase for {name}: {metrics}"));
        assert!(line.ends_with(" 1"), "{line}");
    }

    // A one-lane job starts on neither lane.
    let next = h.submit(&sh_spec(&h, "after the restore", "echo next", &[]));
    h.settle();
    assert_eq!(state_of(&show(&h, &next)), "queued");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the forgotten run's worker still lives"
    );

    // One release frees both lanes; the UUID is then spent.
    let released = h.json(&release_args(&attention, &common::new_uuid()));
    assert_eq!(released["attention"], attention.as_str(), "{released}");
    assert_eq!(released["resource"], lanes[0]["id"], "{released}");
    wait_job(&h, &next, "succeeded");
    h.settle();
    for name in ["gpu0", "gpu1"] {
        let lane = resource(&h, name);
        assert!(lane["run"].is_null(), "{lane:#}");
    }
    let again = h.json_err(&release_args(&attention, &common::new_uuid()), 3);
    assert_eq!(again["code"], "attention_not_found", "{again}");
    open_gate(&gate);
}

/// `resource release --attention A --operation-id O`, as a person types it.
fn release_args<'a>(attention: &'a str, operation: &'a str) -> [&'a str; 6] {
    [
        "resource",
        "release",
        "--attention",
        attention,
        "--operation-id",
        operation,
    ]
}

/// A store its daemon closed cleanly is sealed: the next start does not read every page of
/// a long history again. A start after a kill (or of a store changed in any way) checks it in
/// full.
#[test]
fn a_store_closed_cleanly_skips_the_full_check_and_one_after_a_kill_does_not() {
    let mut h = TestHome::without_resources();
    h.start_daemon();
    h.submit(&h.spec("kept"));
    h.json(&["daemon", "restart"]);
    let path = h.daemon_log();
    let log = || std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(log().matches("full check skipped").count(), 1, "{}", log());
    assert_eq!(log().matches("store checked").count(), 0, "{}", log());
    let pid = h.json(&["daemon", "status"])["pid"].as_u64().unwrap();
    kill(Pid::from_raw(i32::try_from(pid).unwrap()), Signal::SIGKILL).unwrap();
    wait_until("the killed daemon's lock to be free", || {
        h.json(&["daemon", "status"])["daemon"] == "stopped"
    });
    h.start_daemon();
    assert_eq!(log().matches("store checked").count(), 1, "{}", log());
    assert_eq!(h.queue().len(), 1, "the job is still there");
}
