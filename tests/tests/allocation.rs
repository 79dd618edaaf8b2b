//! A daemon inside an allocation (issue 46). When its environment sets
//! `CUDA_VISIBLE_DEVICES`, as Slurm, a container runtime or another queue sets it, detection
//! makes lanes only for the GPUs it selects, and a run only ever sees its own lane's GPU of
//! those (the fake `nvidia-smi -L` lists four cards whatever the variable says, as the real
//! one does). On SIGUSR1, the signal Slurm sends before the end (`--signal=B:USR1@N`), the
//! daemon drains: nothing starts, every run yields or stops, and it exits with the queue kept
//! for the next allocation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::jobs::*;
use crate::common::{wait_until, Probe, TestHome};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

fn lane_names(h: &TestHome) -> Vec<String> {
    h.resources()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

/// What the run printed as its `CUDA_VISIBLE_DEVICES` (`unset` when it had none).
fn visible_of_runs(h: &TestHome, jobs: &[String]) -> Vec<String> {
    let mut seen: Vec<String> = jobs
        .iter()
        .map(|job| {
            let task = show(h, job)["runs"][0]["task"]
                .as_str()
                .unwrap()
                .to_string();
            let log: Value = h.json(&["task", "log", &task]);
            log["log"].as_str().unwrap().trim().to_string()
        })
        .collect();
    seen.sort();
    seen
}

fn home_in_allocation(visible: &str) -> TestHome {
    let mut h = TestHome::new(Probe::Gpus(4));
    h.set_env("CUDA_VISIBLE_DEVICES", visible);
    h.start_daemon();
    h
}

const PRINT_VISIBLE: &str = r#"echo "${CUDA_VISIBLE_DEVICES-unset}"; sleep 0.5"#;

#[test]
fn a_daemon_given_two_of_four_gpus_makes_lanes_for_those_two_and_runs_see_only_their_own() {
    let h = home_in_allocation("1,3");
    assert_eq!(lane_names(&h), ["gpu1", "gpu3"]);
    let listed = h.json(&["resource", "list"]);
    assert_eq!(
        listed["lanes_from"],
        json!({"source": "cuda_visible_devices", "cuda_visible_devices": "1,3"}),
        "{listed:#}"
    );
    let jobs: Vec<String> = (0..4)
        .map(|i| h.submit(&sh_spec(&h, &format!("sees {i}"), PRINT_VISIBLE, &[])))
        .collect();
    for job in &jobs {
        wait_job(&h, job, "succeeded");
    }
    let seen = visible_of_runs(&h, &jobs);
    assert!(seen.iter().all(|v| v == "1" || v == "3"), "{seen:?}");
    assert!(
        seen.contains(&"1".to_string()) && seen.contains(&"3".to_string()),
        "{seen:?}"
    );
    // A job of two GPUs gets both, and nothing else.
    let pair = h.submit(&sh_spec(&h, "sees both", PRINT_VISIBLE, &[]).set("gpus", json!(2)));
    wait_job(&h, &pair, "succeeded");
    assert_eq!(visible_of_runs(&h, &[pair]), ["1,3"]);
}

#[test]
fn cards_named_by_uuid_are_matched_by_uuid() {
    let h = home_in_allocation("GPU-00000002-1111-2222-3333-444455556666,GPU-00000000");
    assert_eq!(lane_names(&h), ["gpu0", "gpu2"]);
    let listed = h.json(&["resource", "list"]);
    assert_eq!(listed["lanes_from"]["source"], "cuda_visible_devices");
    assert!(listed["lanes_from"]["warning"].is_null(), "{listed:#}");
}

/// An allocation that selects no GPU (empty, or a value CUDA cannot use) makes no lane: a
/// job waits, with the warning in `resource list`, rather than run on a GPU outside it.
#[test]
fn an_empty_or_unusable_value_is_a_warning_and_never_every_gpu() {
    for visible in ["", "all"] {
        let h = home_in_allocation(visible);
        let listed = h.json(&["resource", "list"]);
        let warning = listed["lanes_from"]["warning"].as_str().unwrap_or_default();
        assert!(
            warning.contains("CUDA_VISIBLE_DEVICES"),
            "{visible:?}: {listed:#}"
        );
        assert_eq!(listed["resources"], json!([]), "{visible:?}: {listed:#}");
        let job = h.submit(&sh_spec(&h, "waits", PRINT_VISIBLE, &[]));
        h.settle();
        assert_eq!(state_of(&show(&h, &job)), "queued", "{visible:?}");
    }
}

#[test]
fn without_the_variable_every_listed_card_is_a_lane_and_resource_list_says_so() {
    let h = home_with_gpus(4);
    assert_eq!(lane_names(&h), ["gpu0", "gpu1", "gpu2", "gpu3"]);
    let listed = h.json(&["resource", "list"]);
    assert_eq!(listed["lanes_from"], json!({"source": "nvidia_smi"}));
}

/// The final weights logged by a run of an example.
fn weights_of(h: &TestHome, run: &Value) -> String {
    final_weights(&task_log(h, run["task"].as_str().unwrap())).to_string()
}

fn stored_state(h: &TestHome, job: &str) -> (String, bool) {
    let conn = rusqlite::Connection::open(h.database()).unwrap();
    conn.query_row("SELECT state, resume FROM jobs WHERE id = ?1", [job], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .unwrap()
}

/// The drill before an allocation's end: SIGUSR1 to `daemon serve` while a checkpointing
/// loop (yield mode) and a step that cannot yield (restart mode) run and a third job waits.
/// The loop yields, the other step is stopped, nothing new starts, and the daemon exits 0 once
/// both ended, with all three jobs queued in the store (the loop to resume). The next
/// daemon on the home (the requeued allocation) resumes the loop from its checkpoint to the
/// weights of an uninterrupted run, and runs the others.
#[test]
fn sigusr1_drains_yields_and_exits_and_the_next_daemon_resumes_to_the_same_result() {
    let mut h = TestHome::new(Probe::Gpus(2));
    h.spawn_serve();
    let whole = h.submit(&example_spec(&h, "training", "pytorch_loop.py", 60, "0"));
    let whole = wait_job(&h, &whole, "succeeded");
    let expected = weights_of(&h, &runs(&whole)[0]);

    let looped = h.submit(&example_spec(&h, "training", "pytorch_loop.py", 60, "0.05"));
    let gate = h.tmp().join("gate");
    let other = h.submit(
        &gated_spec(&h, "cannot yield", "", &gate, "").set("preempt", json!({"mode": "restart"})),
    );
    let waiting = h.submit(&sh_spec(&h, "waits for a lane", "true", &[]));
    wait_phase(&h, &looped, "executing");
    let first = show(&h, &looped)["active_run"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until("the loop to take a step", || {
        task_log(&h, &first).contains("start at step")
    });
    wait_phase(&h, &other, "executing");
    assert_eq!(state_of(&show(&h, &waiting)), "queued");

    let status = h.kill_serve(Signal::SIGUSR1);
    assert!(status.success(), "daemon serve exited {status}");
    for job in [&looped, &other, &waiting] {
        let (state, _) = stored_state(&h, job);
        assert_eq!(state, "queued", "{job} is kept queued");
    }
    assert!(stored_state(&h, &looped).1, "the loop resumes next time");

    h.spawn_serve();
    let done = wait_job(&h, &looped, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 2, "{done:#}");
    assert_eq!(history[0]["stop_cause"], "yield", "{done:#}");
    assert_eq!(history[0]["process"], json!({"kind": "exit", "code": 75}));
    assert_eq!(weights_of(&h, &history[1]), expected);
    let stopped = show(&h, &other);
    assert_eq!(runs(&stopped)[0]["stop_cause"], "restart", "{stopped:#}");
    open_gate(&gate);
    wait_job(&h, &other, "succeeded");
    let waited = wait_job(&h, &waiting, "succeeded");
    assert_eq!(runs(&waited).len(), 1, "it never started during the drain");
}
