//! Reading a run's log, which its workload can tamper with (SPEC sections 5 and 9): a log
//! the workload replaced with a symlink is refused by `task log`, `resource job log` and both
//! listeners, never followed, while the daemon goes on; the worker does not write through a
//! link planted in the run directory either; and a follower far behind a fast writer holds
//! one chunk of the log, not the distance.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::http;
use crate::common::jobs::*;
use crate::common::{wait_until, TestHome};
use std::io::Read;
use std::process::{Child, Stdio};
use std::time::Duration;

const ANSWER: Duration = Duration::from_secs(30);
const SECRET: &str = "hunter2-do-not-serve";

/// The run directory, found from the yield file the workload is given.
const RUN_DIR: &str = r#"d=$(dirname "$(dirname "$HOMEBASED_YIELD_FILE")")"#;

fn get(path: &str, host: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}

#[test]
fn a_log_replaced_by_a_symlink_is_refused_everywhere_and_the_daemon_goes_on() {
    let mut h = TestHome::new(common::Probe::Gpus(1));
    let addr = format!("127.0.0.1:{}", http::free_port());
    h.set_env("HOMEBASED_WEB_LISTEN", &addr);
    h.start_daemon();
    let secret = h.write_file("secret", &format!("{SECRET}\n"));
    let victim = h.write_file("victim", "untouched\n");
    let gate = h.tmp().join("may-finish");
    // The workload swaps its own output.log for a link to the secret, and worker.log for a
    // link to a file the worker must not append to, then waits.
    let script = format!(
        "echo visible; {RUN_DIR}; \
         rm -f \"$d/output.log\" \"$d/worker.log\"; \
         ln -s \"$1\" \"$d/output.log\"; ln -s \"$2\" \"$d/worker.log\"; \
         echo swapped; {}",
        wait_for_gate(3)
    );
    let job = h.submit(&sh_spec(&h, "swap", &script, &[&secret, &victim, &gate]));
    wait_phase(&h, &job, "executing");
    let task = show(&h, &job)["active_run"].as_str().unwrap().to_string();
    let log = h.home().join("tasks").join(&task).join("output.log");
    wait_until("the workload to plant its link", || {
        std::fs::symlink_metadata(&log).is_ok_and(|m| m.file_type().is_symlink())
    });

    // The CLI, from the files: exit 4 `permission`, naming the file, never its target's text.
    for args in [
        vec!["task", "log", task.as_str()],
        vec!["task", "log", task.as_str(), "--tail", "5"],
        vec!["task", "log", task.as_str(), "--follow"],
        vec!["resource", "job", "log", job.as_str()],
    ] {
        let out = h.cli(&[&["--json"], args.as_slice()].concat());
        assert!(
            !out.stdout.contains(SECRET) && !out.stderr.contains(SECRET),
            "{out:?}"
        );
        assert_eq!(out.code(), 4, "{args:?}: {out:?}");
        let error = common::parse_one(&out.stderr);
        assert_eq!(error["error"]["code"], "permission", "{error}");
        assert_eq!(
            error["error"]["input"]["found"], "a symbolic link",
            "{error}"
        );
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("output.log"),
            "{error}"
        );
    }

    // Both listeners: 403 with the same error, never the secret.
    let path = format!("/v1/tasks/{task}/log?tail=10");
    let answers = [
        http::exchange(
            &mut http::unix(&h.socket()),
            &get(&path, "localhost"),
            ANSWER,
        ),
        http::exchange(&mut http::tcp(&addr), &get(&path, &addr), ANSWER),
    ];
    for answer in answers {
        let body = String::from_utf8_lossy(&answer.body);
        assert!(!body.contains(SECRET), "{body}");
        assert_eq!(answer.status, 403, "{body}");
        assert_eq!(answer.error()["code"], "permission", "{body}");
    }

    // The run goes on and ends as it would; the worker wrote nothing through the link.
    open_gate(&gate);
    wait_job(&h, &job, "succeeded");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    // The daemon serves the next job as before.
    let next = h.submit(&sh_spec(&h, "next", "echo next", &[]));
    let done = wait_job(&h, &next, "succeeded");
    let next_task = runs(&done)[0]["task"].as_str().unwrap().to_string();
    assert_eq!(task_log(&h, &next_task), "next\n");
}

/// The peak resident memory of a process (`VmHWM`), in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Reads `child`'s stdout until `total` bytes came; answers the count read and the child's
/// peak memory then.
fn drain(mut child: Child, total: u64) -> (Child, u64, u64) {
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut count = 0u64;
    while count < total {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "the follower ended early after {count} bytes");
        count += n as u64;
    }
    let peak = peak_memory(child.id());
    child.stdout = Some(stdout);
    (child, count, peak)
}

#[test]
fn following_a_log_far_behind_its_writer_holds_a_bounded_chunk() {
    // Far more than the bound, little enough to pass through two followers quickly.
    const GROWN: u64 = 96 << 20;
    const BOUND: u64 = 64 << 20;
    // What each follower prints while the run goes on: all but the unfinished line it holds
    // back (at most `terminal::MAX_PARTIAL` and a chunk), far more than the bound.
    const AHEAD: u64 = GROWN - (4 << 20);
    let h = home_with_gpus(1);
    let grow = h.tmp().join("grow");
    let end = h.tmp().join("end");
    // After "ready", the log jumps to 96 MiB at once (a sparse extension: no disk used),
    // as far ahead of its readers as a writer can get.
    let script = format!(
        "echo ready; {}; {RUN_DIR}; truncate -s {GROWN} \"$d/output.log\"; {}",
        wait_for_gate(1),
        wait_for_gate(2)
    );
    let job = h.submit(&sh_spec(&h, "grow", &script, &[&grow, &end]));
    wait_phase(&h, &job, "executing");
    let task = show(&h, &job)["active_run"].as_str().unwrap().to_string();
    wait_until("the workload to be ready", || {
        task_log(&h, &task).contains("ready")
    });
    let follow = |args: &[&str]| {
        h.homebased()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let followers = [
        follow(&["task", "log", &task, "--follow"]),
        follow(&["resource", "job", "log", &job, "--follow"]),
    ];
    // Both have printed "ready" (and so follow from there) before the log grows.
    let mut readers = Vec::new();
    for mut child in followers {
        let mut stdout = child.stdout.take().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !String::from_utf8_lossy(&head).contains("ready\n") {
            assert_eq!(stdout.read(&mut byte).unwrap(), 1, "{head:?}");
            head.push(byte[0]);
        }
        child.stdout = Some(stdout);
        readers.push(child);
    }
    open_gate(&grow);
    let handles: Vec<_> = readers
        .into_iter()
        .map(|child| std::thread::spawn(move || drain(child, AHEAD)))
        .collect();
    let mut children = Vec::new();
    for handle in handles {
        let (child, count, peak) = handle.join().unwrap();
        assert!(peak < BOUND, "a follower peaked at {} MiB", peak >> 20);
        children.push((child, count));
    }
    open_gate(&end);
    wait_job(&h, &job, "succeeded");
    for (mut child, count) in children {
        // The rest, the held line included, once the run ended: every byte came through,
        // and the unfinished line was ended.
        let rest = std::io::copy(&mut child.stdout.take().unwrap(), &mut std::io::sink());
        assert_eq!(count + rest.unwrap(), GROWN - "ready\n".len() as u64 + 1);
        assert!(child.wait().unwrap().success());
    }
    // The tail of that log reads its last MiB only.
    let tailed = h.json(&["task", "log", &task, "--tail", "3"]);
    assert_eq!(tailed["truncated"], true);
}

/// A workload can replace its run's `runner.lock` (here with a FIFO, which would grant any
/// lock at once): the daemon must not take its live worker for gone, across a restart too.
/// It watches the worker's own process instead, and the run ends as it would have.
#[test]
fn a_run_that_replaces_its_runner_lock_is_still_taken_for_alive_until_its_worker_ends() {
    for replacement in [
        "mkfifo \"$d/runner.lock\"",
        "ln -s /etc/hostname \"$d/runner.lock\"",
    ] {
        let mut h = home_with_gpus(1);
        let gate = h.tmp().join("gate");
        let script = format!(
            "d=$(dirname \"$(dirname \"$HOMEBASED_YIELD_FILE\")\"); rm -f \"$d/runner.lock\"; \
             {replacement}; echo replaced; {}; echo done",
            wait_for_gate(1)
        );
        let job = h.submit(&sh_spec(&h, "replaces its lock", &script, &[&gate]));
        wait_phase(&h, &job, "executing");
        let task = show(&h, &job)["active_run"].as_str().unwrap().to_string();
        wait_until("the lock to be replaced", || {
            h.cli(&["task", "log", &task]).stdout.contains("replaced")
        });
        // A new daemon looks at the run afresh, through the replaced file.
        let restarted = h.json(&["daemon", "restart"]);
        assert_eq!(restarted["socket"], "up", "{restarted}");
        h.settle();
        let shown = show(&h, &job);
        assert_eq!(
            shown["state"]["state"], "active",
            "{replacement}: {shown:#}"
        );
        assert_eq!(
            resource(&h, "gpu0")["run"]["phase"]["phase"],
            "executing",
            "{replacement}"
        );
        open_gate(&gate);
        let done = wait_job(&h, &job, "succeeded");
        assert_eq!(runs(&done).len(), 1, "{replacement}: {done:#}");
        h.stop_daemon();
    }
}
