//! Jobs that hold several lanes at once (`gpus`, `resources`) on four fake GPUs, as a user
//! sees them: the environment of a two-GPU run, all or nothing, the reservation that keeps a
//! later one-GPU job off the lane a two-GPU job gathers, an urgent pair that preempts two low
//! runs, one that cannot gather and stops nothing, refusals at submit, and one Attention for
//! a run on two lanes.
//!
//! Workloads wait on gate files the test opens; every loop is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::attention::Held;
use crate::common::jobs::*;
use crate::common::{Probe, TestHome};
use serde_json::{json, Value};
use std::path::PathBuf;

/// The lanes `job`'s run holds in `resource list`, by name, in resource order.
fn lanes_of(h: &TestHome, job: &str) -> Vec<String> {
    h.resources()
        .into_iter()
        .filter(|r| r["run"]["job"] == job)
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

/// A gated one-lane job that runs until `gate` exists.
fn held_lane(h: &TestHome, name: &str, level: &str, preempt: Value) -> (String, PathBuf) {
    let gate = h.tmp().join(format!("{name}-gate"));
    let spec = gated_spec(h, name, "", &gate, "")
        .priority(level)
        .set("preempt", preempt);
    (h.submit(&spec), gate)
}

fn wait_mode() -> Value {
    json!({"mode": "wait"})
}

#[test]
fn a_two_gpu_job_sees_both_devices_in_pci_order_and_holds_both_lanes_as_one_run() {
    let h = home_with_gpus(4);
    // gpu0 is busy, so the pair is the next two lanes in resource order.
    let (first, first_gate) = held_lane(&h, "one lane", "low", wait_mode());
    wait_phase_on(&h, "gpu0", &first, "executing");
    let gate = h.tmp().join("pair-gate");
    let spec = gated_spec(
        &h,
        "pair",
        r#"echo "devices=$CUDA_VISIBLE_DEVICES lanes=$HOMEBASED_RESOURCE order=$CUDA_DEVICE_ORDER""#,
        &gate,
        "",
    )
    .set("gpus", json!(2));
    let pair = h.submit(&spec);
    wait_phase(&h, &pair, "executing");
    assert_eq!(lanes_of(&h, &pair), ["gpu1", "gpu2"]);
    let list = h.resources();
    let tasks: Vec<&Value> = list
        .iter()
        .filter(|r| r["run"]["job"] == pair.as_str())
        .map(|r| &r["run"]["task"])
        .collect();
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[0], tasks[1], "one run, one task UUID, on both lanes");
    let listed = listed(&h, &pair);
    assert_eq!(listed["gpus"], 2, "{listed}");
    assert_eq!(listed["target"], "any", "{listed}");
    let held = listed["state"]["resources"].as_array().unwrap();
    assert_eq!(held.len(), 2, "{listed}");
    assert_eq!(listed["state"]["resource"], held[0], "{listed}");
    assert_eq!(
        held[0],
        resource(&h, "gpu1")["id"],
        "the first lane in resource order"
    );

    // A person's views name both lanes and the count.
    let shown = h.cli(&["resource", "job", "show", &pair]);
    let shown = &shown.stdout;
    assert!(shown.contains("state active on gpu1,gpu2"), "{shown}");
    let table = h.cli(&["resource", "jobs"]);
    let table = &table.stdout;
    assert!(table.contains("2 x any / pair"), "{table}");

    open_gate(&gate);
    let done = wait_job(&h, &pair, "succeeded");
    let run = &runs(&done)[0];
    assert_eq!(run["resources"].as_array().unwrap().len(), 2, "{run}");
    let log = task_log(&h, run["task"].as_str().unwrap());
    assert!(
        log.contains("devices=1,2 lanes=gpu1,gpu2 order=PCI_BUS_ID"),
        "{log}"
    );
    // Both lanes are free again together; the one-lane job kept its lane throughout.
    wait_idle(&h, "gpu1");
    wait_idle(&h, "gpu2");
    assert_eq!(lanes_of(&h, &first), ["gpu0"]);
    open_gate(&first_gate);
    wait_job(&h, &first, "succeeded");
}

#[test]
fn a_pinned_set_runs_on_exactly_its_lanes_and_a_bad_set_is_refused_with_its_pointer() {
    let h = home_with_gpus(4);
    let gate = h.tmp().join("gate");
    let spec = gated_spec(&h, "pinned pair", "", &gate, "")
        .set("gpus", json!(2))
        .set("resources", json!(["gpu3", "gpu1"]));
    let job = h.submit(&spec);
    wait_phase(&h, &job, "executing");
    assert_eq!(lanes_of(&h, &job), ["gpu1", "gpu3"]);
    let listed = listed(&h, &job);
    let target = listed["target"].as_array().unwrap();
    assert_eq!(target[0], resource(&h, "gpu3")["id"], "in the order given");
    assert_eq!(target[1], resource(&h, "gpu1")["id"]);

    // (what, fields, code, exit status, pointer)
    let refusals: [(&str, Value, &str, i32, &str); 4] = [
        (
            "more than the machine",
            json!({"gpus": 5}),
            "invalid_spec",
            2,
            "/gpus",
        ),
        (
            "an unknown lane",
            json!({"gpus": 2, "resources": ["gpu0", "gpu9"]}),
            "resource_not_found",
            3,
            "/resources/1",
        ),
        (
            "a lane twice under two names",
            // The UUID in capitals: resolved as `resource` is, in any case.
            json!({"gpus": 2, "resources": ["gpu0", resource(&h, "gpu0")["id"].as_str().unwrap().to_uppercase()]}),
            "invalid_spec",
            2,
            "/resources/1",
        ),
        (
            "a set of the wrong length",
            json!({"gpus": 3, "resources": ["gpu0", "gpu1"]}),
            "invalid_spec",
            2,
            "/resources",
        ),
    ];
    let before = h.json(&["resource", "jobs"])["jobs"]
        .as_array()
        .unwrap()
        .len();
    for (what, fields, code, exit, pointer) in refusals {
        let mut spec = h.spec(what).command(&["true"]);
        for (key, value) in fields.as_object().unwrap() {
            spec = spec.set(key, value.clone());
        }
        let err = h.submit_err(&spec, None, exit);
        assert_eq!(err["code"], code, "{what}: {err}");
        assert_eq!(err["input"]["pointer"], pointer, "{what}: {err}");
    }
    let message = {
        let spec = h.spec("five").command(&["true"]).set("gpus", json!(5));
        h.submit_err(&spec, None, 2)["message"].clone()
    };
    assert!(
        message.as_str().unwrap().contains("4 lanes of whole GPUs"),
        "the count is in the message: {message}"
    );
    assert_eq!(
        h.json(&["resource", "jobs"])["jobs"]
            .as_array()
            .unwrap()
            .len(),
        before,
        "nothing stored"
    );
    open_gate(&gate);
    wait_job(&h, &job, "succeeded");
}

/// Three lanes busy, one free: the pair never starts on one lane (all or nothing), it gathers
/// the free lane, and a later one-lane job without a time limit is kept off that lane.
#[test]
fn a_pair_gathers_all_or_nothing_and_its_reservation_keeps_a_later_job_off_the_free_lane() {
    let h = home_with_gpus(4);
    let mut gates = Vec::new();
    let mut busy = Vec::new();
    for name in ["a", "b", "c"] {
        let (job, gate) = held_lane(&h, name, "low", wait_mode());
        busy.push(job);
        gates.push(gate);
    }
    for job in &busy {
        wait_phase(&h, job, "executing");
    }
    let pair_gate = h.tmp().join("pair-gate");
    let pair = h.submit(
        &gated_spec(&h, "pair", "", &pair_gate, "")
            .priority("low")
            .set("gpus", json!(2)),
    );
    let (later, later_gate) = held_lane(&h, "later", "low", wait_mode());
    h.settle();
    assert!(
        resource(&h, "gpu3")["run"].is_null(),
        "the free lane stays free"
    );
    let pair_entry = listed(&h, &pair);
    assert_eq!(pair_entry["state"]["state"], "queued", "{pair_entry}");
    assert_eq!(pair_entry["waiting"]["reason"], "gathering", "{pair_entry}");
    assert_eq!(
        pair_entry["waiting"]["free"],
        json!([resource(&h, "gpu3")["id"]]),
        "{pair_entry}"
    );
    assert!(
        pair_entry["waiting"]["estimated_start"].is_null(),
        "no run has a time limit: {pair_entry}"
    );
    let later_entry = listed(&h, &later);
    assert_eq!(
        later_entry["waiting"]["reason"], "reserved",
        "{later_entry}"
    );
    assert_eq!(later_entry["waiting"]["job"], pair, "{later_entry}");

    // One lane frees: the pair starts on it and the reserved one, the later job still waits.
    open_gate(&gates[0]);
    wait_job(&h, &busy[0], "succeeded");
    wait_phase(&h, &pair, "executing");
    assert_eq!(lanes_of(&h, &pair), ["gpu0", "gpu3"]);
    assert_eq!(state_of(&show(&h, &later)), "queued");
    open_gate(&pair_gate);
    wait_job(&h, &pair, "succeeded");
    wait_phase(&h, &later, "executing");
    for gate in gates.iter().skip(1).chain([&later_gate]) {
        open_gate(gate);
    }
    for job in busy.iter().skip(1).chain([&later]) {
        wait_job(&h, job, "succeeded");
    }
}

#[test]
fn with_reservations_off_a_later_one_lane_job_takes_the_free_lane() {
    let mut h = TestHome::new(Probe::Gpus(2));
    h.use_config("[resource]\nreservations = false\n");
    h.start_daemon();
    let (busy, busy_gate) = held_lane(&h, "busy", "low", wait_mode());
    wait_phase(&h, &busy, "executing");
    let pair = h.submit(&h.spec("pair").command(&["true"]).set("gpus", json!(2)));
    let (later, later_gate) = held_lane(&h, "later", "low", wait_mode());
    wait_phase(&h, &later, "executing");
    assert_eq!(state_of(&show(&h, &pair)), "queued");
    open_gate(&busy_gate);
    open_gate(&later_gate);
    wait_job(&h, &pair, "succeeded");
}

#[test]
fn an_urgent_pair_preempts_two_low_runs_at_once() {
    let h = home_with_gpus(2);
    let (low_a, gate_a) = held_lane(&h, "low a", "low", json!({"mode": "restart"}));
    let (low_b, gate_b) = held_lane(&h, "low b", "low", json!({"mode": "restart"}));
    wait_phase(&h, &low_a, "executing");
    wait_phase(&h, &low_b, "executing");
    let urgent = h.submit(
        &h.spec("urgent pair")
            .priority("high")
            .set("gpus", json!(2))
            .command(&["true"]),
    );
    let done = wait_job(&h, &urgent, "succeeded");
    assert_eq!(runs(&done)[0]["resources"].as_array().unwrap().len(), 2);
    // Both low runs were stopped for it and run again afterwards.
    for low in [&low_a, &low_b] {
        wait_until_requeued_and_back(&h, low);
    }
    open_gate(&gate_a);
    open_gate(&gate_b);
    wait_job(&h, &low_a, "succeeded");
    wait_job(&h, &low_b, "succeeded");
}

/// A low job that was preempted by restart has two runs, the first one `preempted`.
fn wait_until_requeued_and_back(h: &TestHome, job: &str) {
    crate::common::wait_until(&format!("job {job} to run again"), || {
        let shown = show(h, job);
        let history = runs(&shown);
        history.len() >= 2 && history[0]["status"] == "preempted"
    });
}

#[test]
fn an_urgent_pair_that_cannot_gather_stops_nothing() {
    let h = home_with_gpus(2);
    let (low, low_gate) = held_lane(&h, "low", "low", json!({"mode": "restart"}));
    wait_phase(&h, &low, "executing");
    // The other lane's run is at the urgent level: it may not be stopped for it.
    let (high, high_gate) = held_lane(&h, "high", "high", wait_mode());
    wait_phase(&h, &high, "executing");
    let urgent = h.submit(
        &h.spec("urgent pair")
            .priority("high")
            .set("gpus", json!(2))
            .command(&["true"]),
    );
    h.settle();
    h.settle();
    let low_now = show(&h, &low);
    assert_eq!(runs(&low_now).len(), 1, "never stopped: {low_now:#}");
    assert!(
        low_now["last_stop_cause"].is_null(),
        "no stop was committed: {low_now:#}"
    );
    assert_eq!(lanes_of(&h, &low), ["gpu0"]);
    assert_eq!(state_of(&show(&h, &urgent)), "queued");
    open_gate(&high_gate);
    // Now the pair can gather: the low run is stopped for it.
    wait_job(&h, &urgent, "succeeded");
    open_gate(&low_gate);
    wait_job(&h, &low, "succeeded");
}

#[test]
fn a_run_on_two_lanes_in_attention_holds_both_under_one_uuid_released_once() {
    let Some(held) = Held::new_on_lanes(json!({"gpus": 2})) else {
        return;
    };
    let h = &held.h;
    let lanes: Vec<Value> = h
        .resources()
        .into_iter()
        .filter(|r| r["run"]["job"] == held.job.as_str())
        .collect();
    assert_eq!(lanes.len(), 2, "{lanes:#?}");
    for lane in &lanes {
        assert_eq!(lane["run"]["phase"]["phase"], "attention", "{lane}");
        assert_eq!(
            lane["run"]["phase"]["id"],
            held.attention.as_str(),
            "{lane}"
        );
    }
    let released = h.json(&[
        "resource",
        "release",
        "--attention",
        &held.attention,
        "--operation-id",
        &crate::common::new_uuid(),
    ]);
    assert_eq!(released["attention"], held.attention.as_str(), "{released}");
    wait_idle(h, "gpu0");
    wait_idle(h, "gpu1");
    let again = h.json_err(
        &[
            "resource",
            "release",
            "--attention",
            &held.attention,
            "--operation-id",
            &crate::common::new_uuid(),
        ],
        3,
    );
    assert_eq!(again["code"], "attention_not_found", "{again}");
}

/// The runs in front of the pair have time limits, so the reservation has an estimated start:
/// a later short job whose own limit ends before it takes the reserved free lane (backfill);
/// a later job without a limit does not.
#[test]
fn a_short_job_with_a_time_limit_backfills_the_lane_a_pair_gathers() {
    let h = home_with_gpus(4);
    let mut gates = Vec::new();
    let mut busy = Vec::new();
    for name in ["a", "b", "c"] {
        let gate = h.tmp().join(format!("{name}-gate"));
        let spec = gated_spec(&h, name, "", &gate, "").set("time_limit", json!("2h"));
        busy.push(h.submit(&spec));
        gates.push(gate);
    }
    for job in &busy {
        wait_phase(&h, job, "executing");
    }
    let pair = h.submit(&h.spec("pair").command(&["true"]).set("gpus", json!(2)));
    let (unlimited, unlimited_gate) = held_lane(&h, "no limit", "medium", wait_mode());
    let short_gate = h.tmp().join("short-gate");
    let short =
        h.submit(&gated_spec(&h, "short", "", &short_gate, "").set("time_limit", json!("10m")));
    wait_phase(&h, &short, "executing");
    assert_eq!(
        lanes_of(&h, &short),
        ["gpu3"],
        "it backfilled the free lane"
    );
    h.settle();
    let pair_entry = listed(&h, &pair);
    assert_eq!(pair_entry["waiting"]["reason"], "gathering", "{pair_entry}");
    assert!(
        pair_entry["waiting"]["estimated_start"].is_string(),
        "every run in front has a limit: {pair_entry}"
    );
    assert_eq!(state_of(&show(&h, &unlimited)), "queued");
    for gate in gates.iter().chain([&short_gate, &unlimited_gate]) {
        open_gate(gate);
    }
    for job in busy.iter().chain([&pair, &short, &unlimited]) {
        wait_job(&h, job, "succeeded");
    }
}

/// A machine of three lanes, two of them MIG slices of one card: a process sees one slice
/// at most, so `gpus: 2` counts whole cards and is refused, and so is a set naming a slice.
#[test]
fn a_two_gpu_job_is_refused_on_a_machine_with_one_whole_card_and_two_slices() {
    let mut h = TestHome::new(Probe::Gpus(0));
    crate::common::gpus::set_split_cards(&h, &[(0, &[0, 1]), (1, &[])]);
    h.start_daemon();
    assert_eq!(h.resources().len(), 3);
    let spec = h.spec("pair").command(&["true"]).set("gpus", json!(2));
    let err = h.submit_err(&spec, None, 2);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/gpus", "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("1 lane of a whole GPU (gpu1)"),
        "{err}"
    );
    let slices = spec.set("resources", json!(["gpu1", "gpu0-mig0"]));
    let err = h.submit_err(&slices, None, 2);
    assert_eq!(err["input"]["pointer"], "/resources/1", "{err}");
    assert!(h.queue().is_empty(), "nothing stored");
}
