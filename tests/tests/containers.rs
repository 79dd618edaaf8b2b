//! Container steps through the daemon, with real Docker and an image imported from
//! busybox-static: a container step and a host step share the job's checkpoint directory,
//! the container sees the container paths of its run variables, and cancel stops and removes
//! the container. Docker must be running (CI starts it), unless HOMEBASED_TEST_SKIP_DOCKER=1.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::jobs::*;
use common::{Probe, TestHome};
use serde_json::{json, Value};

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

#[test]
fn a_lost_workers_container_is_removed_before_the_lane_serves_again() {
    let Some(image) = homebased_e2e::image() else {
        return;
    };
    let h = home();
    let (job, task) = start_long_container(&h, &image, "container of a lost worker");
    assert_ne!(containers_of(&task), "", "the container runs");
    let worker: Value = serde_json::from_slice(
        &std::fs::read(h.home().join("tasks").join(&task).join("worker.json")).unwrap(),
    )
    .unwrap();
    let pid = worker["worker"]["pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let failed = wait_job(&h, &job, "failed");
    assert_eq!(runs(&failed)[0]["status"], "lost", "{failed:#}");
    wait_all_idle(&h);
    assert_eq!(
        containers_of(&task),
        "",
        "the daemon removed the lost worker's container"
    );
    let cleanup = &runs(&show(&h, &job))[0]["cleanup"];
    assert_eq!(cleanup["result"], "clean", "{cleanup:#}");
}
