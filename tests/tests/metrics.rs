//! `GET /metrics` as Prometheus reads it (SPEC section 11): a daemon with a queue this test
//! built (queued and active jobs at two priorities, a run that ended, a preemption by
//! yield, an Attention, a foreign process on a card, a Fleet peer that does not answer) is
//! scraped on its socket, on its TCP listener and through `homebased metrics`, and every
//! exposition is read by a real parser of the text format: Debian's
//! `python3-prometheus-client` (`.ci/run` installs it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::gpus::{card_uuid, compute_apps, set_cards, set_gpu_state};
use crate::common::http;
use crate::common::jobs::*;
use crate::common::{wait_until, Probe, TestHome};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Debian's interpreter, where `python3-prometheus-client` installs (a pyenv shim first on
/// `PATH` would not see it).
const PYTHON: &str = "/usr/bin/python3";

/// Parses an exposition with `prometheus_client.parser` and prints every family's type and
/// every sample as JSON.
const PARSER: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
families = {}
samples = []
for family in text_string_to_metric_families(sys.stdin.read()):
    families[family.name] = family.type
    for s in family.samples:
        samples.append([s.name, s.labels, s.value])
print(json.dumps({"families": families, "samples": samples}))
"#;

/// One parsed exposition.
struct Parsed {
    families: BTreeMap<String, String>,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Parsed {
    /// The value of the one sample `name` with exactly `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let found: Vec<f64> = self
            .samples
            .iter()
            .filter(|(n, l, _)| n == name && *l == want)
            .map(|(_, _, v)| *v)
            .collect();
        assert!(found.len() <= 1, "{name} {labels:?} appears twice");
        found.first().copied()
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels)
            .unwrap_or_else(|| panic!("no sample {name} {labels:?} in {:?}", self.samples))
    }
}

fn parse(text: &str) -> Parsed {
    let mut child = Command::new(PYTHON)
        .args(["-c", PARSER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{PYTHON} is needed to parse the exposition (apt-get install python3-prometheus-client): {e}")
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named"),
        "the parser is missing: apt-get install -y python3-prometheus-client ({stderr})"
    );
    assert!(
        out.status.success(),
        "the exposition does not parse: {stderr}\n{text}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    Parsed {
        families: serde_json::from_value(v["families"].clone()).unwrap(),
        samples: v["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s[0].as_str().unwrap().to_string(),
                    serde_json::from_value(s[1].clone()).unwrap(),
                    s[2].as_f64().unwrap(),
                )
            })
            .collect(),
    }
}

/// Every worker goes through this wrapper; the worker of a run whose step names
/// `HELD_MARKER` is a stand-in that records an exit 0 and a failed cleanup, so its lane goes
/// to Attention. Every other run gets the real worker.
const HELD_MARKER: &str = "metrics-test-held";

fn install_worker_wrapper(h: &mut TestHome) {
    let script = format!(
        r#"#!/bin/sh
dir="$1"
if grep -q {HELD_MARKER} "$dir/run.json"; then
  now=$(date +%s%3N); ticks=$(cut -d' ' -f22 /proc/$$/stat)
  printf '{{"worker":{{"pid":%s,"start_ticks":%s}},"child":{{"process":{{"pid":%s,"start_ticks":%s}},"pgid":%s,"started_at":%s}}}}' $$ "$ticks" $$ "$ticks" $$ "$now" > "$dir/.w" && mv "$dir/.w" "$dir/worker.json"
  printf '{{"reason":{{"kind":"exit","code":0}},"group":"confirmed_exited","ended_at":%s}}' "$now" > "$dir/.e" && mv "$dir/.e" "$dir/exit.json"
  printf '{{"attempt":1,"outcome":{{"result":"enumeration_failed","message":"stand-in"}},"finished_at":%s}}' "$now" > "$dir/.c" && mv "$dir/.c" "$dir/cleanup.json"
  exit 0
fi
exec '{real}' "$@"
"#,
        real = common::worker_bin().display()
    );
    let path = h.tmp().join("bin/worker-wrapper");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    h.set_env("HOMEBASED_WORKER", &path);
}

/// A low job that yields (exit 75) as soon as it is asked to, and otherwise waits for `gate`.
fn yielding_spec(h: &TestHome, gate: &Path) -> common::Spec {
    let script = r#"i=0
while [ ! -e "$1" ] && [ $i -lt 600 ]; do
  if [ -e "$HOMEBASED_YIELD_FILE" ]; then exit 75; fi
  sleep 0.1; i=$((i+1))
done"#;
    sh_spec(h, "low yielder", script, &[gate])
        .priority("low")
        .set("preempt", json!({"mode": "yield"}))
}

fn get_metrics(conn: &mut impl http::Conn, host: &str) -> http::Answer {
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n");
    http::exchange(conn, request.as_bytes(), Duration::from_secs(30))
}

fn events_of(h: &TestHome, jobs: &[&str]) -> usize {
    jobs.iter()
        .map(|j| show(h, j)["events"].as_array().map_or(0, Vec::len))
        .sum()
}

#[test]
fn metrics_on_socket_tcp_and_cli_match_the_queue_as_a_prometheus_parser_reads_them() {
    let mut h = TestHome::new(Probe::Gpus(0));
    set_cards(&h, &[0, 1]);
    install_worker_wrapper(&mut h);
    let port = http::free_port();
    // A peer nobody answers at: it is down.
    let peer = format!("http://127.0.0.1:{}", http::free_port());
    h.use_config(&format!(
        "[web]\nlisten = \"127.0.0.1:{port}\"\n[fleet]\nenabled = true\n\
         [[fleet.machines]]\naddress = \"{peer}\"\n\
         [events]\ncommand = [\"/bin/false\"]\n"
    ));
    h.start_daemon();

    // An Attention: the held run exits 0 and its cleanup fails.
    let held = h.submit(
        &h.spec("held")
            .command(&["/bin/sh", "-c", "true", HELD_MARKER]),
    );
    let held_lane = wait_phase(&h, &held, "attention")["name"]
        .as_str()
        .unwrap()
        .to_string();
    let (other_lane, held_card) = if held_lane == "gpu0" {
        ("gpu1", 0)
    } else {
        ("gpu0", 1)
    };
    // A yield: the low job runs on the other lane, a high one takes it.
    let low_gate = h.tmp().join("low-gate");
    let low = h.submit(&yielding_spec(&h, &low_gate));
    wait_phase_on(&h, other_lane, &low, "executing");
    let high_gate = h.tmp().join("high-gate");
    let high = h.submit(&gated_spec(&h, "urgent", "", &high_gate, "").priority("high"));
    wait_phase_on(&h, other_lane, &high, "executing");
    wait_job(&h, &low, "queued");
    // Queued at medium too: nothing can serve it now.
    let medium = h.submit(&h.spec("waits").command(&["true"]));
    // A process outside the queue on the held lane's card: the test itself.
    std::fs::write(
        compute_apps(&h),
        format!("{}, {}, 2048\n", card_uuid(held_card), std::process::id()),
    )
    .unwrap();

    // The sampler is kept awake by reading metrics, as by `resource list`.
    let foreign = [("resource", held_lane.as_str())];
    let socket = h.socket();
    wait_until("the foreign process in the metrics", || {
        let answer = get_metrics(&mut http::unix(&socket), "localhost");
        let parsed = parse(&String::from_utf8_lossy(&answer.body));
        parsed.value("homebased_gpu_foreign_processes", &foreign) == Some(1.0)
    });
    h.settle();
    let events = events_of(&h, &[&held, &low, &high, &medium]);

    let on_socket = get_metrics(&mut http::unix(&socket), "localhost");
    let addr = format!("127.0.0.1:{port}");
    let on_tcp = get_metrics(&mut http::tcp(&addr), &addr);
    let cli = h.cli(&["metrics"]);
    assert_eq!(cli.code(), 0, "{cli:?}");
    let cli_json = h.json(&["metrics"]);
    assert_eq!(cli_json["content_type"], "text/plain; version=0.0.4");
    assert_eq!(
        cli_json["exposition"].as_str().unwrap().trim_end(),
        cli.stdout.trim_end()
    );

    for (answer, via) in [(&on_socket, "socket"), (&on_tcp, "tcp")] {
        assert_eq!(answer.status, 200, "{via}: {answer:?}");
        assert_eq!(
            answer.header("content-type").as_deref(),
            Some("text/plain; version=0.0.4"),
            "{via}"
        );
    }
    for (text, via) in [
        (
            String::from_utf8_lossy(&on_socket.body).into_owned(),
            "socket",
        ),
        (String::from_utf8_lossy(&on_tcp.body).into_owned(), "tcp"),
        (cli.stdout.clone(), "cli"),
    ] {
        let m = parse(&text);
        check(&m, &held_lane, other_lane, events, &peer, via);
    }
    open_gate(&high_gate);
    open_gate(&low_gate);
}

fn check(m: &Parsed, held: &str, other: &str, events: usize, peer: &str, via: &str) {
    let types = [
        ("homebased_resource_phase", "gauge"),
        ("homebased_jobs", "gauge"),
        ("homebased_job_wait_seconds", "histogram"),
        ("homebased_runs_ended", "counter"),
        ("homebased_preemptions", "counter"),
        ("homebased_attentions_opened", "counter"),
        ("homebased_events_pending", "gauge"),
        ("homebased_gpu_foreign_processes", "gauge"),
        ("homebased_gpu_foreign_memory_bytes", "gauge"),
        ("homebased_fleet_peer_up", "gauge"),
    ];
    for (family, kind) in types {
        assert_eq!(
            m.families.get(family).map(String::as_str),
            Some(kind),
            "{via}: {family} in {:?}",
            m.families
        );
    }
    let phase = |resource: &str, phase: &str| {
        m.get(
            "homebased_resource_phase",
            &[("resource", resource), ("phase", phase)],
        )
    };
    assert_eq!(phase(held, "attention"), 1.0, "{via}");
    assert_eq!(phase(held, "idle"), 0.0, "{via}");
    assert_eq!(phase(other, "executing"), 1.0, "{via}");
    for p in ["idle", "launching", "stopping", "cleaning", "attention"] {
        assert_eq!(phase(other, p), 0.0, "{via}: {other} {p}");
    }

    let jobs = |priority: &str, state: &str| {
        m.get(
            "homebased_jobs",
            &[("priority", priority), ("state", state)],
        )
    };
    assert_eq!(jobs("high", "active"), 1.0, "{via}");
    assert_eq!(jobs("high", "queued"), 0.0, "{via}");
    assert_eq!(jobs("medium", "queued"), 1.0, "{via}");
    assert_eq!(
        jobs("medium", "active"),
        0.0,
        "{via}: the held job is finished"
    );
    assert_eq!(jobs("low", "queued"), 1.0, "{via}");
    assert_eq!(jobs("low", "active"), 0.0, "{via}");

    let ended = |status: &str| m.get("homebased_runs_ended_total", &[("status", status)]);
    assert_eq!(ended("succeeded"), 1.0, "{via}: the held run exited 0");
    assert_eq!(ended("preempted"), 1.0, "{via}: the low run yielded");
    for status in ["failed", "cancelled", "lost"] {
        assert_eq!(ended(status), 0.0, "{via}: {status}");
    }
    let preemptions = |cause: &str| m.get("homebased_preemptions_total", &[("cause", cause)]);
    assert_eq!(preemptions("yield"), 1.0, "{via}");
    assert_eq!(preemptions("restart"), 0.0, "{via}");
    assert_eq!(
        m.get("homebased_attentions_opened_total", &[]),
        1.0,
        "{via}"
    );

    // One run start at each level that started: held (medium), low, then high.
    for priority in ["high", "medium", "low"] {
        let count = m.get(
            "homebased_job_wait_seconds_count",
            &[("priority", priority)],
        );
        assert_eq!(count, 1.0, "{via}: {priority}");
        let inf = m.get(
            "homebased_job_wait_seconds_bucket",
            &[("priority", priority), ("le", "+Inf")],
        );
        assert_eq!(inf, 1.0, "{via}: {priority}");
        let sum = m.get("homebased_job_wait_seconds_sum", &[("priority", priority)]);
        assert!(
            (0.0..3600.0).contains(&sum),
            "{via}: {priority} waited {sum}s"
        );
    }

    // The delivery command always fails: every event is still pending.
    assert_eq!(
        m.get("homebased_events_pending", &[]),
        events as f64,
        "{via}"
    );
    assert!(
        events >= 2,
        "{via}: at least the held job's end and its Attention, got {events}"
    );

    let foreign = |name: &str, resource: &str| m.get(name, &[("resource", resource)]);
    assert_eq!(
        foreign("homebased_gpu_foreign_processes", held),
        1.0,
        "{via}"
    );
    assert_eq!(
        foreign("homebased_gpu_foreign_memory_bytes", held),
        2048.0 * 1024.0 * 1024.0,
        "{via}"
    );
    assert_eq!(
        foreign("homebased_gpu_foreign_processes", other),
        0.0,
        "{via}"
    );

    assert_eq!(
        m.get(
            "homebased_fleet_peer_up",
            &[("machine", ""), ("name", peer)]
        ),
        0.0,
        "{via}: a peer that never answered is down"
    );
}

/// Each card's state as Prometheus reads it: base units, labelled with the lane and the
/// card's UUID, and no series at all for a value the driver did not give.
#[test]
fn each_cards_state_is_a_gauge_by_resource_and_uuid_and_an_unknown_value_is_absent() {
    let mut h = TestHome::new(Probe::Gpus(0));
    set_cards(&h, &[0, 1]);
    set_gpu_state(
        &h,
        0,
        &[
            ("memory.used", "1024"),
            ("memory.total", "81559"),
            ("utilization.gpu", "37"),
            ("temperature.gpu", "45"),
            ("power.draw", "118.5"),
        ],
    );
    set_gpu_state(&h, 1, &[("temperature.gpu", "30"), ("power.draw", "[N/A]")]);
    h.start_daemon();
    let (zero, one) = (card_uuid(0), card_uuid(1));
    let gpu0 = [("resource", "gpu0"), ("uuid", zero.as_str())];
    let gpu1 = [("resource", "gpu1"), ("uuid", one.as_str())];
    let mut m = parse("");
    wait_until("the card state in the metrics", || {
        m = parse(&h.cli(&["metrics"]).stdout);
        m.value("homebased_gpu_memory_used_bytes", &gpu0).is_some()
    });
    let names = [
        "homebased_gpu_memory_used_bytes",
        "homebased_gpu_memory_total_bytes",
        "homebased_gpu_utilization_ratio",
        "homebased_gpu_temperature_celsius",
        "homebased_gpu_power_watts",
    ];
    for name in names {
        assert_eq!(
            m.families.get(name).map(String::as_str),
            Some("gauge"),
            "{name}"
        );
    }
    let expected = [1024.0 * 1048576.0, 81559.0 * 1048576.0, 0.37, 45.0, 118.5];
    for (name, value) in names.iter().zip(expected) {
        assert_eq!(m.get(name, &gpu0), value, "{name}");
    }
    assert_eq!(m.get("homebased_gpu_temperature_celsius", &gpu1), 30.0);
    for name in [names[0], names[1], names[2], names[4]] {
        assert_eq!(m.value(name, &gpu1), None, "{name} is unknown on card 1");
    }
}
