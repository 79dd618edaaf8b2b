//! GPU lanes as a user sees them: detection at daemon start with a fake `nvidia-smi` (two
//! GPUs, not installed, failing, no devices), adoption of the fallback by a later detection,
//! and manual registration with its name rules and conflicts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{is_uuid, new_uuid, Probe, TestHome};
use serde_json::{json, Value};

fn by_name<'a>(resources: &'a [Value], name: &str) -> &'a Value {
    resources
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no resource named {name} in {resources:?}"))
}

fn daemon_log_warnings(h: &TestHome) -> Vec<String> {
    std::fs::read_to_string(h.daemon_log())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("WARN"))
        .map(str::to_string)
        .collect()
}

#[test]
fn two_detected_gpus_become_gpu0_and_gpu1_with_their_devices() {
    let mut h = TestHome::new(Probe::Gpus(2));
    let status = h.start_daemon();
    let list = h.json(&["resource", "list"]);
    assert_eq!(list["machine"], status["machine"], "one machine: {list}");
    let resources = list["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 2, "{list}");
    for (i, r) in resources.iter().enumerate() {
        assert_eq!(r["name"], format!("gpu{i}"), "{list}");
        assert_eq!(r["device"], json!(i), "{list}");
        assert_eq!(r["origin"], "detected", "{list}");
        assert_eq!(r["run"], Value::Null, "{list}");
        assert!(is_uuid(&r["id"]), "resource ids are full UUIDs: {list}");
    }
    assert_ne!(resources[0]["id"], resources[1]["id"]);

    let human = h.cli(&["resource", "list"]);
    assert_eq!(human.code(), 0, "{human:?}");
    let mut lines = human.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["ID", "NAME", "DEVICE", "STATE", "RUN", "/", "YIELD", "AGE", "MEM", "UTIL", "FOREIGN"],
        "{}",
        human.stdout
    );
    for (i, r) in resources.iter().enumerate() {
        let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let device = i.to_string();
        let name = format!("gpu{i}");
        assert_eq!(
            row,
            // The default fake answers no query: the card is unknown, not free or idle.
            [
                r["id"].as_str().unwrap(),
                &name,
                &device,
                "idle",
                "-",
                "?",
                "?",
                "?"
            ],
            "{}",
            human.stdout
        );
    }
}

#[test]
fn missing_probe_gives_one_unindexed_fallback_gpu0() {
    let mut h = TestHome::new(Probe::Missing);
    h.start_daemon();
    let resources = h.resources();
    assert_eq!(resources.len(), 1, "{resources:?}");
    assert_eq!(resources[0]["name"], "gpu0");
    assert_eq!(resources[0]["device"], Value::Null);
    assert_eq!(resources[0]["origin"], "fallback");
    assert_eq!(resources[0]["run"], Value::Null);
}

#[test]
fn failing_probe_gives_no_resources_and_logs_a_warning() {
    let mut h = TestHome::new(Probe::Fails);
    h.start_daemon();
    assert_eq!(h.resources(), Vec::<Value>::new());
    let warnings = daemon_log_warnings(&h);
    assert!(
        !warnings.is_empty(),
        "a failing probe is logged as a warning in daemon.log:\n{}",
        std::fs::read_to_string(h.daemon_log()).unwrap_or_default()
    );
}

#[test]
fn probe_listing_no_devices_gives_no_resources_and_logs_a_warning() {
    let mut h = TestHome::new(Probe::NoDevices);
    h.start_daemon();
    assert_eq!(h.resources(), Vec::<Value>::new());
    assert!(
        !daemon_log_warnings(&h).is_empty(),
        "an empty device list is logged as a warning in daemon.log:\n{}",
        std::fs::read_to_string(h.daemon_log()).unwrap_or_default()
    );
}

#[test]
fn a_failed_probe_waits_for_a_later_start_to_detect() {
    let mut h = TestHome::new(Probe::Fails);
    h.start_daemon();
    assert!(h.resources().is_empty());
    h.stop_daemon();
    h.set_probe(Probe::Gpus(1));
    h.start_daemon();
    let resources = h.resources();
    assert_eq!(resources.len(), 1, "{resources:?}");
    assert_eq!(resources[0]["name"], "gpu0");
    assert_eq!(resources[0]["device"], 0);
    assert_eq!(resources[0]["origin"], "detected");
}

#[test]
fn later_detection_adopts_the_fallback_keeping_its_uuid_and_adds_the_rest() {
    let mut h = TestHome::new(Probe::Missing);
    h.start_daemon();
    let fallback = h.resources()[0].clone();
    assert_eq!(fallback["origin"], "fallback");
    let manual = h.json(&[
        "resource",
        "register",
        "--name",
        "auxiliary",
        "--device",
        "7",
    ]);
    h.stop_daemon();

    h.set_probe(Probe::Gpus(2));
    h.start_daemon();
    let resources = h.resources();
    assert_eq!(resources.len(), 3, "{resources:?}");
    let gpu0 = by_name(&resources, "gpu0");
    assert_eq!(gpu0["id"], fallback["id"], "the fallback keeps its UUID");
    assert_eq!(gpu0["device"], 0);
    assert_eq!(gpu0["origin"], "detected");
    let gpu1 = by_name(&resources, "gpu1");
    assert_ne!(gpu1["id"], fallback["id"]);
    assert_eq!(gpu1["device"], 1);
    assert_eq!(gpu1["origin"], "detected");
    let aux = by_name(&resources, "auxiliary");
    assert_eq!(aux["id"], manual["id"], "manual registrations never change");
    assert_eq!(aux["device"], 7);
    assert_eq!(aux["origin"], "manual");
}

#[test]
fn a_later_start_without_a_working_probe_changes_no_resources() {
    let mut h = TestHome::new(Probe::Gpus(2));
    h.start_daemon();
    // What the sampler last saw (when, what failed) is a sample, not a resource.
    let unsampled = |mut lanes: Vec<serde_json::Value>| {
        for lane in &mut lanes {
            if let Some(gpu) = lane["gpu"].as_object_mut() {
                for key in ["processes", "sample_error", "sampled_at"] {
                    gpu.remove(key);
                }
            }
        }
        lanes
    };
    let before = unsampled(h.resources());
    h.stop_daemon();
    for probe in [
        Probe::Missing,
        Probe::Fails,
        Probe::NoDevices,
        Probe::Gpus(1),
    ] {
        h.set_probe(probe.clone());
        h.start_daemon();
        // A device no longer listed is flagged on its lane (gpu.changed), nothing more.
        let mut now = unsampled(h.resources());
        for lane in &mut now {
            lane["gpu"]["changed"] = false.into();
        }
        assert_eq!(
            now, before,
            "with {probe:?}: no fallback beside indexed GPUs, nothing removed"
        );
        h.stop_daemon();
    }
}

#[test]
fn manual_registration_adds_a_lane_and_refuses_duplicate_names_and_devices() {
    let mut h = TestHome::new(Probe::Gpus(2));
    h.start_daemon();

    let aux = h.json(&["resource", "register", "--name", "auxiliary"]);
    assert!(is_uuid(&aux["id"]), "{aux}");
    assert_eq!(aux["name"], "auxiliary");
    assert_eq!(aux["device"], Value::Null);
    assert_eq!(aux["origin"], "manual");
    let indexed = h.json(&["resource", "register", "--name", "spare", "--device", "7"]);
    assert_eq!(indexed["device"], 7);
    assert_eq!(indexed["origin"], "manual");

    let listed = h.resources();
    assert_eq!(listed.len(), 4, "{listed:?}");
    assert_eq!(by_name(&listed, "auxiliary")["id"], aux["id"]);
    assert_eq!(by_name(&listed, "spare")["id"], indexed["id"]);

    let bytes = h.database_bytes();
    for args in [
        vec!["--name", "auxiliary"],
        vec!["--name", "gpu0"],
        vec!["--name", "other", "--device", "7"],
        vec!["--name", "other", "--device", "1"],
    ] {
        let mut all = vec!["resource", "register"];
        all.extend(args.iter());
        let err = h.json_err(&all, 5);
        assert_eq!(err["code"], "resource_conflict", "{args:?}: {err}");
        assert_eq!(err["retryable"], false);
    }
    assert_eq!(
        h.resources(),
        listed,
        "a refused registration changes nothing"
    );
    assert!(
        h.database_bytes() == bytes,
        "a refused registration leaves the database bytes unchanged"
    );
}

#[test]
fn registration_refuses_bad_names_with_invalid_queue_input() {
    let mut h = TestHome::without_resources();
    h.start_daemon();
    let long = "x".repeat(64);
    let uuid_name = new_uuid();
    for name in [
        "",
        "GPU0",
        "has space",
        "under_score",
        "-lead",
        "trail-",
        "dot.ted",
        long.as_str(),
        uuid_name.as_str(),
    ] {
        let flag = format!("--name={name}");
        let err = h.json_err(&["resource", "register", &flag], 2);
        assert_eq!(err["code"], "invalid_queue_input", "name {name:?}: {err}");
    }
    assert!(h.resources().is_empty(), "refused names register nothing");

    let longest = "a".repeat(63);
    let ok = h.json(&["resource", "register", "--name", &longest]);
    assert_eq!(ok["name"], longest.as_str(), "63 characters are allowed");
}
