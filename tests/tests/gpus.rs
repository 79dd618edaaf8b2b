//! Which card each lane is: detection records model and hardware UUID, and a card whose
//! index reports another UUID after a restart is flagged, never silently swapped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::gpus::{card_uuid, set_cards};
use common::jobs::resource;
use common::{Probe, TestHome};

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
