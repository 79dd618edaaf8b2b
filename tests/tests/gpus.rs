//! Which card each lane is: detection records model and hardware UUID, and a card whose
//! index reports another UUID after a restart is flagged, never silently swapped; and what
//! runs on each card, the queue's or foreign, as the sampler attributes it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::gpus::{card_uuid, compute_apps, compute_apps_fail, set_cards};
use common::jobs::*;
use common::{wait_until, Probe, TestHome};
use serde_json::Value;

#[test]
fn detection_records_each_cards_model_and_uuid() {
    let mut h = TestHome::new(Probe::Gpus(0));
    set_cards(&h, &[0, 1]);
    h.start_daemon();
    for (name, card) in [("gpu0", 0), ("gpu1", 1)] {
        let gpu = &resource(&h, name)["gpu"];
        assert_eq!(gpu["uuid"], card_uuid(card).as_str(), "{gpu}");
        assert_eq!(gpu["model"], "NVIDIA H200", "{gpu}");
        assert_eq!(gpu["changed"], false, "{gpu}");
    }
    let manual = h.json(&["resource", "register", "--name", "aux"]);
    assert!(manual["gpu"].is_null(), "{manual}");
    assert!(resource(&h, "aux")["gpu"].is_null());
}

#[test]
fn a_shifted_index_is_flagged_after_a_restart_and_clears_when_the_card_returns() {
    let mut h = TestHome::new(Probe::Gpus(0));
    set_cards(&h, &[0, 1]);
    h.start_daemon();
    let before = resource(&h, "gpu1");
    h.stop_daemon();

    // Card 0 fell off the bus: card 1 is now device 0.
    set_cards(&h, &[1]);
    h.start_daemon();
    let gpu0 = resource(&h, "gpu0");
    let gpu1 = resource(&h, "gpu1");
    assert_eq!(gpu1["id"], before["id"], "the lane keeps its UUID");
    for (lane, card) in [(&gpu0, 0), (&gpu1, 1)] {
        assert_eq!(lane["gpu"]["changed"], true, "{lane}");
        assert_eq!(
            lane["gpu"]["uuid"],
            card_uuid(card).as_str(),
            "the recorded card stays: {lane}"
        );
    }
    let log = std::fs::read_to_string(h.daemon_log()).unwrap();
    assert!(
        log.contains(&format!("now reports {}", card_uuid(1))),
        "the change is logged: {log}"
    );
    let human = h.cli(&["resource", "list"]).stdout;
    let line = human.lines().find(|l| l.contains("gpu0")).unwrap();
    assert!(line.contains("0 (changed)"), "{human}");
    h.stop_daemon();

    set_cards(&h, &[0, 1]);
    h.start_daemon();
    assert_eq!(resource(&h, "gpu0")["gpu"]["changed"], false);
    assert_eq!(resource(&h, "gpu1")["gpu"]["changed"], false);
}

/// Polls `resource list` until `name`'s card has been sampled without error.
fn wait_sampled(
    h: &TestHome,
    name: &str,
    what: &str,
    mut done: impl FnMut(&Value) -> bool,
) -> Value {
    let mut gpu = Value::Null;
    wait_until(what, || {
        gpu = resource(h, name)["gpu"].clone();
        done(&gpu)
    });
    gpu
}

#[test]
fn queue_and_foreign_processes_are_attributed_on_two_cards_and_never_block_a_job() {
    let mut h = TestHome::new(Probe::Gpus(0));
    set_cards(&h, &[0, 1]);
    h.start_daemon();
    let gate = h.tmp().join("gate");
    let pid_file = h.tmp().join("workload.pid");
    let job = h.submit(&sh_spec(
        &h,
        "train-7",
        &format!("echo $$ > \"$2\"; {}", wait_for_gate(1)),
        &[&gate, &pid_file],
    ));
    let run = wait_phase(&h, &job, "executing");
    let lane = run["name"].as_str().unwrap().to_string();
    let other = if lane == "gpu0" { "gpu1" } else { "gpu0" };
    let busy_card = if lane == "gpu0" { 0 } else { 1 };
    wait_until("the workload's pid", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let workload: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The test itself stands for a hand-started server on the other card.
    let foreign = std::process::id();
    std::fs::write(
        compute_apps(&h),
        format!(
            "{}, {workload}, 1024\n{}, {foreign}, 2048\n",
            card_uuid(busy_card),
            card_uuid(1 - busy_card)
        ),
    )
    .unwrap();

    let on_lane = wait_sampled(&h, &lane, "the workload on its card", |gpu| {
        gpu["processes"].as_array().is_some_and(|p| !p.is_empty())
    });
    let process = &on_lane["processes"][0];
    assert_eq!(process["pid"], workload, "{on_lane}");
    assert_eq!(process["used_memory_mib"], 1024);
    assert_eq!(process["queue"]["job"], job.as_str(), "{on_lane}");
    assert_eq!(process["queue"]["task"], run["run"]["task"]);
    assert!(on_lane["sampled_at"].is_string());
    let on_other = wait_sampled(&h, other, "the foreign process", |gpu| {
        gpu["processes"].as_array().is_some_and(|p| !p.is_empty())
    });
    let process = &on_other["processes"][0];
    assert_eq!(process["pid"], foreign, "{on_other}");
    assert!(process["queue"].is_null(), "{on_other}");
    assert!(
        process["user"].is_string() && process["command"].is_string(),
        "{on_other}"
    );
    let human = h.cli(&["resource", "list"]).stdout;
    let line = human.lines().find(|l| l.contains(other)).unwrap();
    assert!(line.ends_with("1 proc 2.0GiB"), "{human}");
    let line = human
        .lines()
        .find(|l| l.contains(&format!(" {lane} ")))
        .unwrap();
    assert!(
        line.ends_with(" -"),
        "the queue's own process is not foreign: {human}"
    );

    // The card with a foreign process is free for the queue all the same.
    let second = h.submit(&h.spec("second").command(&["true"]));
    wait_job(&h, &second, "succeeded");

    // A failing query is shown as such, never as an empty (free-looking) list.
    std::fs::write(compute_apps_fail(&h), "").unwrap();
    let failed = wait_sampled(&h, other, "the failing sample", |gpu| {
        gpu["processes"].is_null()
    });
    assert!(
        failed["sample_error"]
            .as_str()
            .is_some_and(|e| e.contains("query failed")),
        "{failed}"
    );
    let human = h.cli(&["resource", "list"]).stdout;
    assert!(human.lines().nth(1).unwrap().ends_with(" ?"), "{human}");
    open_gate(&gate);
    wait_job(&h, &job, "succeeded");
}
