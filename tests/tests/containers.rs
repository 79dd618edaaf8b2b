//! Container steps through the daemon, with real Docker and an image imported from
//! busybox-static: a container step and a host step share the job's checkpoint directory,
//! the container sees the container paths of its run variables, cancel stops and removes
//! the container, and a container whose worker was killed is adopted by a new worker (also
//! across a daemon restart) that records its real exit. Docker must be running (CI starts it), unless HOMEBASED_TEST_SKIP_DOCKER=1.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::jobs::*;
use crate::common::{Probe, TestHome};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::path::PathBuf;

/// The lines of `docker ps -a` for the containers of `task`, found by their label.
fn containers_of(task: &str) -> String {
    homebased_e2e::docker(&[
        "ps",
        "-a",
        "-q",
        "--filter",
        &format!("label=homebased.task={task}"),
    ])
    .unwrap()
}

fn container_step(image: &str, script: &str) -> Value {
    json!({
        "type": "container",
        "image": image,
        "memory": "64m",
        "args": ["/bin/sh", "-c", script],
    })
}

/// A running daemon with the unindexed fallback lane: no GPU, so no `--gpus`.
fn home() -> TestHome {
    let mut h = TestHome::new(Probe::Missing);
    h.start_daemon();
    h
}

/// Submits a container that prints `started` and sleeps; returns its job and task once the
/// line is in its log.
fn start_long_container(h: &TestHome, image: &str, name: &str) -> (String, String) {
    let spec = h
        .spec(name)
        .set("workload", container_step(image, "echo started; sleep 300"));
    let job = h.submit(&spec);
    let lane = wait_phase(h, &job, "executing");
    let task = lane["run"]["task"].as_str().unwrap().to_string();
    common::wait_until("the container to print its first line", || {
        task_log(h, &task).contains("started")
    });
    (job, task)
}

#[test]
fn container_and_host_steps_share_the_checkpoint_directory() {
    let Some(image) = homebased_e2e::image() else {
        return;
    };
    let h = home();
    let steps = json!([
        container_step(&image, "env; echo from-container > /homebased/job/handoff"),
        {"type": "task", "command": ["/bin/sh", "-c", "cat \"$HOMEBASED_JOB_DIR/handoff\""]},
    ]);
    let spec = h
        .spec("container then host")
        .set("workload", Value::Null)
        .set("steps", steps);
    let job = h.submit(&spec);
    let done = wait_job(&h, &job, "succeeded");
    let runs = runs(&done);
    assert_eq!(runs.len(), 2, "{done:#}");
    let container_task = runs[0]["task"].as_str().unwrap();
    let env = task_log(&h, container_task);
    for expected in [
        format!("HOMEBASED_TASK_ID={container_task}"),
        format!("HOMEBASED_JOB_ID={job}"),
        "HOMEBASED_JOB_DIR=/homebased/job".to_string(),
        "HOMEBASED_YIELD_FILE=/homebased/run/yield".to_string(),
        "HOMEBASED_STEP_INDEX=0".to_string(),
        "HOMEBASED_RESOURCE=gpu0".to_string(),
    ] {
        assert!(
            env.lines().any(|l| l == expected),
            "{expected} missing from:\n{env}"
        );
    }
    assert!(
        !env.contains("CUDA_VISIBLE_DEVICES"),
        "an unindexed lane exports no device:\n{env}"
    );
    assert_eq!(runs[0]["process"], json!({"kind": "exit", "code": 0}));
    assert_eq!(
        task_log(&h, runs[1]["task"].as_str().unwrap()),
        "from-container\n"
    );
    wait_all_idle(&h);
    assert_eq!(
        containers_of(container_task),
        "",
        "the container is removed after its run"
    );
}

#[test]
fn cancel_stops_and_removes_a_running_container() {
    let Some(image) = homebased_e2e::image() else {
        return;
    };
    let h = home();
    let (job, task) = start_long_container(&h, &image, "long container");
    let answer = h.json(&["resource", "job", "cancel", &job]);
    assert_eq!(answer["result"], "stopping", "{answer:#}");
    let cancelled = wait_job(&h, &job, "cancelled");
    assert_eq!(runs(&cancelled)[0]["status"], "cancelled", "{cancelled:#}");
    assert_eq!(event_names(&cancelled), ["JOB_CANCELLED"]);
    wait_all_idle(&h);
    assert_eq!(containers_of(&task), "", "the stopped container is removed");
}

/// The pid of the run's worker as `worker.json` names it now.
fn worker_pid(h: &TestHome, task: &str) -> i32 {
    let worker: Value = serde_json::from_slice(
        &std::fs::read(h.home().join("tasks").join(task).join("worker.json")).unwrap(),
    )
    .unwrap();
    worker["worker"]["pid"].as_i64().unwrap() as i32
}

fn kill_worker(h: &TestHome, task: &str, signal: Signal) -> i32 {
    let pid = worker_pid(h, task);
    kill(Pid::from_raw(pid), signal).unwrap();
    pid
}

/// Docker's word for the state of the run's container.
fn container_status(task: &str) -> String {
    let name = format!("homebased-{task}");
    homebased_e2e::docker(&["inspect", "--format", "{{.State.Status}}", &name])
        .unwrap()
        .trim()
        .to_string()
}

/// Submits a container that prints `started`, then waits for `go` in its job directory and
/// exits `code`; returns its job, task and the host path of `go` once `started` is logged.
fn start_gated_container(h: &TestHome, image: &str, code: i32) -> (String, String, PathBuf) {
    let script =
        format!("echo started; while [ ! -e /homebased/job/go ]; do sleep 0.1; done; exit {code}");
    let spec = h
        .spec("adopted container")
        .set("workload", container_step(image, &script));
    let job = h.submit(&spec);
    let lane = wait_phase(h, &job, "executing");
    let task = lane["run"]["task"].as_str().unwrap().to_string();
    common::wait_until("the container to print its first line", || {
        task_log(h, &task).contains("started")
    });
    let gate = h.home().join("jobs").join(&job).join("state").join("go");
    (job, task, gate)
}

/// After the worker of `task` was killed: the container ran on, a new worker (the `nth` to
/// adopt it) took it over.
fn wait_adopted(h: &TestHome, task: &str, killed: i32, nth: usize) {
    assert_eq!(container_status(task), "running", "the container runs on");
    common::wait_until("an adopting worker", || {
        let pid = worker_pid(h, task);
        pid != killed && kill(Pid::from_raw(pid), None).is_ok()
    });
    let log = h.home().join("tasks").join(task).join("worker.log");
    common::wait_until("the new worker to adopt the container", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.matches("adopting container").count() == nth)
    });
    assert_eq!(container_status(task), "running");
}

/// The job's one run ended with the container's `code`, output kept whole, container gone.
fn assert_recorded_once(h: &TestHome, done: &Value, task: &str, code: i32) {
    let history = runs(done);
    assert_eq!(history.len(), 1, "the step ran once: {done:#}");
    assert_eq!(history[0]["task"], task);
    assert_eq!(
        history[0]["process"],
        json!({"kind": "exit", "code": code}),
        "{done:#}"
    );
    assert_eq!(
        task_log(h, task),
        "started\n",
        "output.log is whole, nothing twice"
    );
    wait_all_idle(h);
    assert_eq!(containers_of(task), "", "the adopted container is removed");
    let cleanup = &runs(&show(h, done["id"].as_str().unwrap()))[0]["cleanup"];
    assert_eq!(cleanup["result"], "clean", "{cleanup:#}");
}

#[test]
fn a_killed_workers_container_runs_on_and_its_real_exit_is_recorded_by_an_adopting_worker() {
    let Some(image) = homebased_e2e::image() else {
        return;
    };
    let h = home();
    let (job, task, gate) = start_gated_container(&h, &image, 3);
    let killed = kill_worker(&h, &task, Signal::SIGKILL);
    wait_adopted(&h, &task, killed, 1);
    assert_eq!(state_of(&show(&h, &job)), "active");
    // The adopting worker is killed too: another one takes over.
    let killed = kill_worker(&h, &task, Signal::SIGKILL);
    wait_adopted(&h, &task, killed, 2);
    let adoption: Value = serde_json::from_slice(
        &std::fs::read(h.home().join("tasks").join(&task).join("adoption.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(adoption["adoption"], 2, "{adoption}");

    std::fs::write(&gate, b"").unwrap();
    let failed = wait_job(&h, &job, "failed");
    assert_eq!(runs(&failed)[0]["status"], "failed", "{failed:#}");
    assert_eq!(event_names(&failed), ["JOB_FAILED"]);
    assert_recorded_once(&h, &failed, &task, 3);
}

#[test]
fn a_container_is_adopted_across_a_daemon_restart_and_its_exit_0_succeeds() {
    let Some(image) = homebased_e2e::image() else {
        return;
    };
    let mut h = TestHome::new(Probe::Missing);
    h.spawn_serve();
    let (job, task, gate) = start_gated_container(&h, &image, 0);
    h.kill_serve(Signal::SIGKILL);
    let killed = kill_worker(&h, &task, Signal::SIGKILL);
    common::wait_until("the worker to be gone", || {
        kill(Pid::from_raw(killed), None).is_err()
    });
    assert_eq!(container_status(&task), "running", "nobody follows it now");

    h.spawn_serve();
    wait_adopted(&h, &task, killed, 1);
    std::fs::write(&gate, b"").unwrap();
    let done = wait_job(&h, &job, "succeeded");
    assert_eq!(runs(&done)[0]["status"], "succeeded", "{done:#}");
    assert_eq!(event_names(&done), ["JOB_SUCCEEDED"]);
    assert_recorded_once(&h, &done, &task, 0);
}

#[test]
fn a_lost_workers_container_is_removed_when_its_run_was_asked_to_stop() {
    let Some(image) = homebased_e2e::image() else {
        return;
    };
    let h = home();
    let (job, task) = start_long_container(&h, &image, "container of a lost worker");
    assert_ne!(containers_of(&task), "", "the container runs");
    // The worker cannot act on the cancel; it dies with the stop request pending.
    kill_worker(&h, &task, Signal::SIGSTOP);
    let answer = h.json(&["resource", "job", "cancel", &job]);
    assert_eq!(answer["result"], "stopping", "{answer:#}");
    let stop = h
        .home()
        .join("tasks")
        .join(&task)
        .join("control")
        .join("stop");
    common::wait_until("the stop request", || stop.exists());
    kill_worker(&h, &task, Signal::SIGKILL);

    let cancelled = wait_job(&h, &job, "cancelled");
    let run = &runs(&cancelled)[0];
    assert_eq!(run["status"], "cancelled", "{cancelled:#}");
    assert_eq!(
        run["process"],
        Value::Null,
        "no exit was recorded: {cancelled:#}"
    );
    wait_all_idle(&h);
    assert_eq!(
        containers_of(&task),
        "",
        "the daemon removed the lost worker's container"
    );
    let cleanup = &runs(&show(&h, &job))[0]["cleanup"];
    assert_eq!(cleanup["result"], "clean", "{cleanup:#}");
}

#[test]
fn a_vanished_workers_run_is_lost_when_its_container_is_gone_too() {
    let Some(image) = homebased_e2e::image() else {
        return;
    };
    let h = home();
    let (job, task) = start_long_container(&h, &image, "container removed by hand");
    kill_worker(&h, &task, Signal::SIGSTOP);
    homebased_e2e::docker(&["rm", "--force", &format!("homebased-{task}")]).unwrap();
    kill_worker(&h, &task, Signal::SIGKILL);

    let failed = wait_job(&h, &job, "failed");
    assert_eq!(runs(&failed)[0]["status"], "lost", "{failed:#}");
    assert_eq!(event_names(&failed), ["JOB_FAILED"]);
    wait_all_idle(&h);
    let cleanup = &runs(&show(&h, &job))[0]["cleanup"];
    assert_eq!(cleanup["result"], "clean", "{cleanup:#}");
}
