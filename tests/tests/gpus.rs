//! Which card each lane is: detection records model and hardware UUID, and a card whose
//! index reports another UUID after a restart is flagged, never silently swapped; and what
//! runs on each card, the queue's or foreign, as the sampler attributes it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::gpus::{
    card_uuid, compute_apps, compute_apps_fail, gpu_state_hang, gpu_state_raw, mig_uuid,
    remove_gpu_state, set_cards, set_gpu_state, set_layout, set_split_cards,
};
use crate::common::jobs::*;
use crate::common::{wait_until, Probe, TestHome};
use serde_json::{json, Value};

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

/// The line of `resource list`'s table for lane `name`.
fn human_line(h: &TestHome, name: &str) -> String {
    let human = h.cli(&["resource", "list"]).stdout;
    human
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no {name} in {human}"))
        .to_string()
}

#[test]
fn each_cards_state_is_listed_by_hardware_uuid_with_unavailable_fields_as_null() {
    let mut h = TestHome::new(Probe::Gpus(0));
    // Listed as device 0 and 1 in this order, answered by the state query the other way
    // round: a card's state goes by UUID, never by position.
    set_cards(&h, &[1, 0]);
    set_gpu_state(
        &h,
        0,
        &[("temperature.gpu", "30"), ("power.draw", "[Not Supported]")],
    );
    set_gpu_state(
        &h,
        1,
        &[
            ("memory.used", "1024"),
            ("memory.total", "81559"),
            ("utilization.gpu", "37"),
            ("temperature.gpu", "45"),
            ("power.draw", "118.52"),
        ],
    );
    h.start_daemon();
    let full = wait_sampled(&h, "gpu0", "card 1's state", |gpu| {
        !gpu["memory_used_mib"].is_null()
    });
    assert_eq!(full["uuid"], card_uuid(1).as_str());
    assert_eq!(full["memory_used_mib"], 1024, "{full}");
    assert_eq!(full["memory_total_mib"], 81559, "{full}");
    assert_eq!(full["utilization_percent"], 37, "{full}");
    assert_eq!(full["temperature_c"], 45, "{full}");
    assert_eq!(full["power_w"], 118.52, "{full}");
    assert!(full["sample_error"].is_null(), "{full}");
    let partial = resource(&h, "gpu1")["gpu"].clone();
    for field in [
        "memory_used_mib",
        "memory_total_mib",
        "utilization_percent",
        "power_w",
    ] {
        assert!(partial[field].is_null(), "{field}: {partial}");
    }
    assert_eq!(partial["temperature_c"], 30, "{partial}");
    // An idle lane's row: ID NAME DEVICE STATE RUN MEM UTIL FOREIGN.
    let line = human_line(&h, "gpu0");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[5..7], ["1.0/79.6GiB", "37%"], "{line}");
    let line = human_line(&h, "gpu1");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words[5..7],
        ["?", "?"],
        "unknown is never shown as none: {line}"
    );

    // A card gone from the answer between two samples loses its state, not its lane.
    remove_gpu_state(&h, 0);
    set_gpu_state(&h, 1, &[("memory.used", "2048")]);
    wait_sampled(&h, "gpu0", "the next sample", |gpu| {
        gpu["memory_used_mib"] == 2048
    });
    let gone = resource(&h, "gpu1")["gpu"].clone();
    assert!(gone["temperature_c"].is_null(), "{gone}");
    assert!(gone["sample_error"].is_null(), "{gone}");

    // Garbage and lines with missing or extra columns are refused line by line.
    std::fs::write(
        gpu_state_raw(&h),
        format!(
            "garbage\n{one}, 4096, 81559, 5, 40, 70.5\n{zero}, 1, 2, 3\n{zero}, 1, 2, 3, 4, 5, 6\n",
            one = card_uuid(1),
            zero = card_uuid(0)
        ),
    )
    .unwrap();
    wait_sampled(&h, "gpu0", "the raw answer", |gpu| {
        gpu["memory_used_mib"] == 4096
    });
    let refused = resource(&h, "gpu1")["gpu"].clone();
    assert!(refused["memory_used_mib"].is_null(), "{refused}");
    let log = std::fs::read_to_string(h.daemon_log()).unwrap();
    assert!(
        log.contains("lines refused") && log.contains("4 fields where 6 were asked"),
        "{log}"
    );
    std::fs::remove_file(gpu_state_raw(&h)).unwrap();

    // A hung state query is bounded: the sample says so, the processes are still read, and
    // the queue goes on.
    std::fs::write(gpu_state_hang(&h), "").unwrap();
    let hung = wait_sampled(&h, "gpu0", "the hung query", |gpu| {
        gpu["sample_error"]
            .as_str()
            .is_some_and(|e| e.contains("did not answer"))
    });
    assert!(hung["memory_used_mib"].is_null(), "{hung}");
    assert!(hung["processes"].is_array(), "{hung}");
    let job = h.submit(&h.spec("while-hung").command(&["true"]));
    wait_job(&h, &job, "succeeded");
    std::fs::remove_file(gpu_state_hang(&h)).unwrap();
    wait_sampled(&h, "gpu0", "the query answering again", |gpu| {
        gpu["memory_used_mib"] == 2048 && gpu["sample_error"].is_null()
    });
}

#[test]
fn a_runs_gpu_memory_peak_is_recorded_from_its_samples_and_null_when_never_sampled() {
    let mut h = TestHome::new(Probe::Gpus(0));
    set_cards(&h, &[0]);
    h.start_daemon();
    let gate = h.tmp().join("gate");
    let pid_file = h.tmp().join("workload.pid");
    let job = h.submit(&sh_spec(
        &h,
        "sized",
        &format!("echo $$ > \"$2\"; {}", wait_for_gate(1)),
        &[&gate, &pid_file],
    ));
    wait_phase(&h, &job, "executing");
    wait_until("the workload's pid", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let workload: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let peak = |h: &TestHome| runs(&show(h, &job))[0]["gpu_memory_peak_mib"].clone();
    // Each memory level is seen by a sample before the next is written: 1 GiB, then 3 GiB,
    // then down to 512 MiB.
    let mut highest = 0;
    for mib in [1024, 3072, 512] {
        std::fs::write(
            compute_apps(&h),
            format!("{}, {workload}, {mib}\n", card_uuid(0)),
        )
        .unwrap();
        wait_sampled(&h, "gpu0", &format!("the workload at {mib} MiB"), |gpu| {
            gpu["processes"][0]["used_memory_mib"] == mib
        });
        highest = highest.max(mib);
        assert_eq!(peak(&h), highest, "the peak so far");
    }
    open_gate(&gate);
    wait_job(&h, &job, "succeeded");
    assert_eq!(peak(&h), 3072, "the peak stays with the run");
    let human = h.cli(&["resource", "job", "show", &job]).stdout;
    let row = human
        .lines()
        .skip_while(|l| !l.starts_with("TASK"))
        .nth(1)
        .unwrap();
    assert!(row.contains(" 3.0GiB "), "{human}");

    // Not sampled is not 0: a run that successful samples saw using nothing has 0, and one
    // that lived through samples which all failed has null. Each runs across samples (one
    // ended before any sample would show null whatever sampling did).
    std::fs::remove_file(compute_apps(&h)).unwrap();
    let idle = run_across_two_samples(&h, "idle", "gpu0", |gpu| gpu["processes"] == json!([]));
    let run = &runs(&show(&h, &idle))[0];
    assert_eq!(run["gpu_memory_peak_mib"], 0, "seen using none: {run}");
    std::fs::write(compute_apps_fail(&h), "").unwrap();
    let unsampled = run_across_two_samples(&h, "unsampled", "gpu0", |gpu| {
        gpu["processes"].is_null() && gpu["sample_error"].is_string()
    });
    let run = &runs(&show(&h, &unsampled))[0];
    assert!(run["gpu_memory_peak_mib"].is_null(), "{run}");
}

/// An RFC 3339 time of `resource list` or `job show`, in epoch milliseconds.
fn millis(text: &Value) -> i64 {
    homebased_shared::time::serde_rfc3339::deserialize(text.clone())
        .unwrap_or_else(|e| panic!("{text} is not an RFC 3339 time: {e}"))
}

/// Runs a job `name` on lane `lane` until two samples asked after its run started have been
/// shown, each as `sampled` says; returns the job once it has succeeded. The second sample
/// read the lanes after the first was asked, so the run was among them.
fn run_across_two_samples(
    h: &TestHome,
    name: &str,
    lane: &str,
    sampled: impl Fn(&Value) -> bool,
) -> String {
    let gate = h.tmp().join(format!("{name}.gate"));
    let job = h.submit(&sh_spec(h, name, &wait_for_gate(1), &[&gate]));
    assert_eq!(wait_phase(h, &job, "executing")["name"], lane);
    let mut after = millis(&runs(&show(h, &job))[0]["started_at"]);
    for nth in ["first", "second"] {
        let gpu = wait_sampled(h, lane, &format!("the {nth} sample during {name}"), |gpu| {
            !gpu["sampled_at"].is_null() && millis(&gpu["sampled_at"]) > after
        });
        assert!(sampled(&gpu), "the {nth} sample during {name}: {gpu}");
        after = millis(&gpu["sampled_at"]);
    }
    open_gate(&gate);
    wait_job(h, &job, "succeeded");
    job
}

#[test]
fn an_answer_of_2000_processes_is_sampled_well_within_the_bound() {
    let mut h = TestHome::new(Probe::Gpus(0));
    set_cards(&h, &[0]);
    h.start_daemon();
    wait_sampled(&h, "gpu0", "a first sample", |gpu| {
        gpu["processes"].is_array()
    });

    // 2,000 processes of 64 MiB, each with a pid above Linux's largest (2^22), so none is
    // a process of this machine: an answer well over a pipe's 64 KiB.
    let mut answer = String::new();
    for n in 0..2000 {
        answer.push_str(&format!("{}, {}, 64\n", card_uuid(0), 5_000_000 + n));
    }
    assert!(answer.len() > 100 * 1024, "{}", answer.len());
    let staging = h.tmp().join(".compute-apps.new");
    std::fs::write(&staging, &answer).unwrap();
    std::fs::rename(&staging, compute_apps(&h)).unwrap();
    let written = homebased_shared::time::now_ms();

    let gpu = wait_sampled(&h, "gpu0", "a sample asked after the answer grew", |gpu| {
        !gpu["sampled_at"].is_null() && millis(&gpu["sampled_at"]) > written
    });
    // A sample is shown once answered and stamped when it was asked, so this measures its
    // answer, plus a poll and a `resource list` at most. The bound (5 s) is the contract: an
    // answer the sampler does not read while the query runs fills the pipe, blocks the query
    // until the bound kills it, and the sample fails 5 s after it was asked. Answered within
    // 1 s means it was read, not waited out; the margin is wide for a loaded machine.
    let waited = homebased_shared::time::now_ms() - millis(&gpu["sampled_at"]);
    assert!(
        waited < 1000,
        "the sample came {waited} ms after it was asked: {}",
        gpu["sample_error"]
    );
    let processes = gpu["processes"].as_array().expect("a process list");
    assert_eq!(processes.len(), 2000, "{}", gpu["sample_error"]);
    assert!(processes
        .iter()
        .all(|p| p["used_memory_mib"] == 64 && p["queue"].is_null()));
    assert!(
        human_line(&h, "gpu0").ends_with(" 2000 proc 125.0GiB"),
        "{}",
        human_line(&h, "gpu0")
    );
}

#[test]
fn a_split_card_gives_a_lane_per_mig_instance_whose_run_gets_its_mig_uuid_and_a_new_layout_is_flagged(
) {
    let mut h = TestHome::new(Probe::Gpus(0));
    // Card 0 split in two, card 1 whole.
    set_split_cards(&h, &[(0, &[0, 1]), (1, &[])]);
    h.start_daemon();
    let mut names: Vec<String> = h
        .resources()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["gpu0-mig0", "gpu0-mig1", "gpu1"],
        "no lane for the split card"
    );
    let slice = resource(&h, "gpu0-mig1");
    assert_eq!(slice["device"], mig_uuid(0, 1, 0).as_str(), "{slice}");
    assert_eq!(slice["origin"], "detected");
    assert_eq!(slice["gpu"]["uuid"], mig_uuid(0, 1, 0).as_str(), "{slice}");
    assert_eq!(slice["gpu"]["model"], "NVIDIA H200 MIG 3g.71gb", "{slice}");
    assert_eq!(slice["gpu"]["changed"], false);
    assert_eq!(resource(&h, "gpu1")["device"], 1);
    let human = human_line(&h, "gpu0-mig1");
    assert!(human.contains(&mig_uuid(0, 1, 0)), "{human}");

    // A slice's telemetry: its memory from the processes on its MIG UUID (the state query
    // reports whole cards), its utilization unknown.
    set_gpu_state(&h, 1, &[("memory.used", "10"), ("utilization.gpu", "3")]);
    std::fs::write(
        compute_apps(&h),
        format!("{}, {}, 2048\n", mig_uuid(0, 0, 0), std::process::id()),
    )
    .unwrap();
    let on_slice = wait_sampled(&h, "gpu0-mig0", "the process on the slice", |gpu| {
        gpu["processes"].as_array().is_some_and(|p| !p.is_empty())
    });
    assert_eq!(on_slice["memory_used_mib"], 2048, "{on_slice}");
    assert!(on_slice["utilization_percent"].is_null(), "{on_slice}");
    assert!(on_slice["processes"][0]["queue"].is_null(), "{on_slice}");
    let other = resource(&h, "gpu0-mig1")["gpu"].clone();
    assert_eq!(other["memory_used_mib"], 0, "{other}");
    assert_eq!(resource(&h, "gpu1")["gpu"]["utilization_percent"], 3);
    // A driver that names the card, not the slice: which slice is not known, so the process
    // is outside the queue on both.
    std::fs::write(
        compute_apps(&h),
        format!("{}, {}, 512\n", card_uuid(0), std::process::id()),
    )
    .unwrap();
    for name in ["gpu0-mig0", "gpu0-mig1"] {
        let gpu = wait_sampled(&h, name, "the process by its card's UUID", |gpu| {
            gpu["processes"][0]["used_memory_mib"] == 512
        });
        assert!(gpu["processes"][0]["queue"].is_null(), "{gpu}");
    }
    std::fs::remove_file(compute_apps(&h)).unwrap();

    // A run on a slice sees that slice, by its MIG UUID, and nothing else.
    let job = h.submit(
        &sh_spec(&h, "on-a-slice", "echo \"cuda=$CUDA_VISIBLE_DEVICES\"", &[])
            .set("resource", serde_json::json!("gpu0-mig1")),
    );
    let done = wait_job(&h, &job, "succeeded");
    let task = runs(&done)[0]["task"].as_str().unwrap().to_string();
    assert_eq!(runs(&done)[0]["resource"], slice["id"]);
    let log = h.json(&["task", "log", &task]);
    assert_eq!(
        log["log"].as_str().unwrap().trim(),
        format!("cuda={}", mig_uuid(0, 1, 0)),
        "{log}"
    );
    h.stop_daemon();

    // Resized: card 0 is now one slice with another UUID; instance 1 is gone.
    set_layout(&h, &[(0, &[0]), (1, &[])], 1);
    h.start_daemon();
    for name in ["gpu0-mig0", "gpu0-mig1"] {
        let lane = resource(&h, name);
        assert_eq!(lane["gpu"]["changed"], true, "{lane}");
    }
    assert_eq!(
        resource(&h, "gpu0-mig0")["gpu"]["uuid"],
        mig_uuid(0, 0, 0).as_str(),
        "the recorded slice stays"
    );
    assert_eq!(resource(&h, "gpu1")["gpu"]["changed"], false);
    let daemon_log = std::fs::read_to_string(h.daemon_log()).unwrap();
    assert!(
        daemon_log.contains(&format!("now reports {}", mig_uuid(0, 0, 1)))
            && daemon_log.contains("the MIG layout changed"),
        "the change is logged: {daemon_log}"
    );
    // No new work on a slice that may not exist; the whole card still serves.
    let pinned = h.submit(
        &h.spec("pinned-to-a-gone-slice")
            .command(&["true"])
            .set("resource", serde_json::json!("gpu0-mig1")),
    );
    let any = h.submit(&h.spec("anywhere").command(&["true"]));
    let ran = wait_job(&h, &any, "succeeded");
    assert_eq!(runs(&ran)[0]["resource"], resource(&h, "gpu1")["id"]);
    h.settle();
    assert_eq!(show(&h, &pinned)["state"]["state"], "queued");
}
