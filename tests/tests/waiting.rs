//! Why a queued job waits, as `resource jobs` and `job show` tell it: the run in front of a
//! low job, the yield requested for a high one, and a machine with no resource at all.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::jobs::*;
use crate::common::{wait_until, TestHome};
use serde_json::{json, Value};

/// The human `resource jobs` line of `job`.
fn human_line(h: &TestHome, job: &str) -> String {
    let human = h.cli(&["resource", "jobs"]).stdout;
    assert!(human.lines().next().unwrap().ends_with("REASON"), "{human}");
    human
        .lines()
        .find(|l| l.starts_with(job))
        .unwrap_or_else(|| panic!("no line for {job}: {human}"))
        .to_string()
}

#[test]
fn a_low_job_behind_a_running_high_job_names_it() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("gate");
    let high = h.submit(&gated_spec(&h, "train-7", "", &gate, "").priority("high"));
    let run = wait_phase(&h, &high, "executing");
    let low = h.submit(&h.spec("low").priority("low").command(&["true"]));
    h.settle();

    let expected = json!({
        "reason": "resources",
        "blockers": [{
            "resource": run["id"],
            "job": high,
            "task": run["run"]["task"],
            "phase": "executing",
            "priority": "high",
        }],
    });
    assert_eq!(listed(&h, &low)["waiting"], expected);
    assert_eq!(show(&h, &low)["waiting"], expected);
    assert!(listed(&h, &high)["waiting"].is_null());
    let line = human_line(&h, &low);
    assert!(line.ends_with("behind gpu0: train-7 (high)"), "{line}");

    open_gate(&gate);
    wait_job(&h, &low, "succeeded");
}

#[test]
fn a_high_job_waiting_for_a_yield_names_the_victim_task_and_yield() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("gate");
    // Ignores the yield file until the gate opens, so the stop stays in flight.
    let low = h.submit(
        &gated_spec(&h, "low", "", &gate, "")
            .priority("low")
            .set("preempt", json!({"mode": "yield"})),
    );
    let run = wait_phase(&h, &low, "executing");
    let high = h.submit(&h.spec("urgent").priority("high").command(&["true"]));
    let stopping = wait_phase(&h, &low, "stopping");
    h.settle();

    let waiting = listed(&h, &high)["waiting"].clone();
    assert_eq!(waiting["reason"], "stopping", "{waiting}");
    assert_eq!(waiting["resource"], run["id"]);
    assert_eq!(waiting["task"], run["run"]["task"]);
    assert_eq!(waiting["cause"], "yield");
    assert_eq!(
        waiting["requested_at"],
        stopping["run"]["phase"]["requested_at"]
    );
    assert_eq!(show(&h, &high)["waiting"], waiting);
    let line = human_line(&h, &high);
    assert!(
        line.contains("yield requested ") && line.ends_with("s ago on gpu0"),
        "{line}"
    );

    open_gate(&gate);
    wait_job(&h, &high, "succeeded");
}

#[test]
fn a_job_on_a_machine_without_resources_says_so() {
    let mut h = TestHome::without_resources();
    h.start_daemon();
    let job = h.submit(&h.spec("nowhere").command(&["true"]));
    let mut waiting = Value::Null;
    wait_until("the job's waiting reason", || {
        h.settle();
        waiting = listed(&h, &job)["waiting"].clone();
        !waiting.is_null()
    });
    assert_eq!(waiting, json!({"reason": "no_resources"}));
    let line = human_line(&h, &job);
    assert!(line.ends_with("no resource it may use"), "{line}");
}
