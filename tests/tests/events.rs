//! Events as a thread receives them: the line in the inbox with every field, a command sink
//! that fails and is retried in order, delivery across a killed daemon, blocked notices with
//! short configured delays (once per episode, suppressed when no longer true),
//! `events --follow`, and a thread's cursor across a `history prune` of the newest events.
//!
//! Workloads are tiny shell scripts; anything that must stay running waits on a gate file
//! the test creates, and every loop is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::jobs::*;
use crate::common::{http, is_uuid, wait_until, Probe, Spec, TestHome, PATIENCE};
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A job that waits (at most 60 s) until `gate` exists, not preemptable once started.
fn holds_the_lane(h: &TestHome, gate: &Path) -> Spec {
    gated_spec(h, "holds the lane", "", gate, "").set("preempt", json!({"mode": "wait"}))
}

fn quick_spec(h: &TestHome, name: &str) -> Spec {
    h.spec(name).command(&["/bin/sh", "-c", "echo done"])
}

fn wait_executing(h: &TestHome, job: &str) {
    wait_until(&format!("job {job} to execute"), || {
        h.resources()
            .iter()
            .any(|r| r["run"]["job"] == job && r["run"]["phase"]["phase"] == "executing")
    });
}

/// The thread's events, read from its inbox by `events --json` (no daemon involved).
fn inbox(h: &TestHome, thread: &str) -> Vec<Value> {
    let v = h.json(&["events", "--thread", thread]);
    assert_eq!(v["thread"], thread, "{v}");
    v["events"].as_array().unwrap().clone()
}

/// Waits until `found` holds for the events read by `read`; returns them.
fn wait_events(
    what: &str,
    mut read: impl FnMut() -> Vec<Value>,
    found: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let mut events = Vec::new();
    wait_until(what, || {
        events = read();
        found(&events)
    });
    events
}

/// `(job, seq, event)` of each event, in the order given.
fn summary(events: &[Value]) -> Vec<(String, u64, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["job"].as_str().unwrap().to_string(),
                e["seq"].as_u64().unwrap(),
                e["event"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The `(seq, event)` of `job`'s events, duplicates dropped (consumers deduplicate on
/// `(job, seq)`), in order of first arrival.
fn of_job(events: &[Value], job: &str) -> Vec<(u64, String)> {
    let mut out: Vec<(u64, String)> = Vec::new();
    for (j, seq, event) in summary(events) {
        if j == job && !out.iter().any(|(s, _)| *s == seq) {
            out.push((seq, event));
        }
    }
    out
}

fn callback_log(h: &TestHome, job: &str) -> String {
    std::fs::read_to_string(delivery_dir(h, job).join("callback.log")).unwrap_or_default()
}

fn delivery_dir(h: &TestHome, job: &str) -> PathBuf {
    h.home().join("jobs").join(job).join("delivery")
}

/// A config file with short blocked-notice delays and, optionally, an events command.
fn config(h: &mut TestHome, command: Option<&Path>) -> PathBuf {
    let mut text = String::from("[resource.notify_blocked_after]\nyield = \"1s\"\nwait = \"2s\"\n");
    if let Some(cmd) = command {
        text.push_str(&format!(
            "\n[events]\ncommand = [{:?}]\n",
            cmd.to_str().unwrap()
        ));
    }
    let path = h.write_file("config.toml", &text);
    h.set_env("HOMEBASED_CONFIG", &path);
    path
}

/// An events command that appends each line it gets to `<tmp>/received` and its
/// environment to `<tmp>/env`. It fails while `<tmp>/hold` exists, and for its first
/// `fail_first` calls.
fn command_sink(h: &TestHome, fail_first: u32) -> PathBuf {
    let tmp = h.tmp();
    let script = format!(
        "#!/bin/sh\n\
         n=$(cat {calls} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {calls}\n\
         if [ $n -le {fail_first} ]; then echo \"failing call $n\"; exit 1; fi\n\
         if [ -e {hold} ]; then echo held; exit 1; fi\n\
         echo \"$HOMEBASED_THREAD $HOMEBASED_EVENT\" >> {env}\n\
         cat >> {received}\n\
         echo \"took call $n\"\n",
        calls = tmp.join("calls").display(),
        hold = tmp.join("hold").display(),
        env = tmp.join("env").display(),
        received = tmp.join("received").display(),
    );
    let path = h.write_file("sink.sh", &script);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The events the command sink took, in arrival order.
fn received(h: &TestHome) -> Vec<Value> {
    let text = std::fs::read_to_string(h.tmp().join("received")).unwrap_or_default();
    text.lines()
        .map(|l| {
            let json = l
                .strip_prefix("HOMEBASED_EVENT ")
                .unwrap_or_else(|| panic!("not an event line: {l:?}"));
            serde_json::from_str(json).unwrap()
        })
        .collect()
}

#[test]
fn succeeded_job_puts_a_line_with_every_field_in_the_thread_inbox() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let machine = h.json(&["daemon", "status"])["machine"].clone();
    let spec = quick_spec(&h, "inbox line");
    let thread = spec.thread();
    let job = h.submit(&spec);
    let done = wait_job(&h, &job, "succeeded");
    let run = &done["runs"][0];
    let events = wait_events(
        "the success in the inbox",
        || inbox(&h, &thread),
        |e| !e.is_empty(),
    );
    assert_eq!(events.len(), 1, "{events:#?}");
    let e = &events[0];
    let mut fields: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort();
    let mut expected = vec![
        "api_version",
        "at",
        "event",
        "job",
        "machine",
        "name",
        "process",
        "resource",
        "run_number",
        "seq",
        "step",
        "task",
        "thread",
    ];
    expected.sort();
    assert_eq!(fields, expected, "{e}");
    assert_eq!(e["api_version"], 1);
    assert_eq!(e["event"], "JOB_SUCCEEDED");
    assert_eq!(e["job"], job.as_str());
    assert_eq!(e["seq"], 1);
    assert!(e["at"].as_str().unwrap().ends_with('Z'), "{e}");
    assert_eq!(e["thread"], thread.as_str());
    assert_eq!(e["name"], "inbox line");
    assert_eq!(e["machine"], machine);
    assert!(is_uuid(&e["resource"]), "{e}");
    assert_eq!(e["resource"], h.resources()[0]["id"]);
    assert_eq!(e["task"], run["task"]);
    assert_eq!(e["run_number"], 1);
    assert_eq!(e["step"], 0);
    assert_eq!(e["process"], json!({"kind": "exit", "code": 0}));

    // The raw file: one `HOMEBASED_EVENT {...}` line, private.
    let path = h.home().join("threads").join(format!("{thread}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert!(text.starts_with("HOMEBASED_EVENT {"), "{text}");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    // Human output is a table; --after skips inbox positions.
    let human = h.cli(&["events", "--thread", &thread]).stdout;
    let mut rows = human.lines();
    assert!(
        rows.next().unwrap().starts_with("AT  "),
        "a header first: {human}"
    );
    let row = rows.next().unwrap();
    for cell in [
        job.as_str(),
        "JOB_SUCCEEDED",
        "inbox line",
        "exit 0",
        "1 (step 0)",
    ] {
        assert!(row.contains(cell), "{cell} in {row}");
    }
    let v = h.json(&["events", "--thread", &thread]);
    assert_eq!(v["position"], 1, "{v}");
    assert!(inbox_after(&h, &thread, 1).is_empty());

    // Evidence of delivery on the origin.
    // The inbox line is written before the attempt's end is logged: wait for the log line.
    let dir = delivery_dir(&h, &job);
    assert!(dir.join("delivery.lock").exists());
    wait_until("the delivery to be logged", || {
        callback_log(&h, &job).contains("seq=1 event=JOB_SUCCEEDED attempt=1 sink=inbox delivered")
    });
}

fn inbox_after(h: &TestHome, thread: &str, after: u64) -> Vec<Value> {
    let after = after.to_string();
    h.json(&["events", "--thread", thread, "--after", &after])["events"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn cancel_of_a_never_started_job_has_null_run_fields_and_no_process() {
    let mut h = TestHome::without_resources();
    h.start_daemon();
    let spec = h.spec("never started");
    let thread = spec.thread();
    let job = h.submit(&spec);
    h.json(&["resource", "job", "cancel", &job]);
    let events = wait_events(
        "the cancel in the inbox",
        || inbox(&h, &thread),
        |e| !e.is_empty(),
    );
    let e = &events[0];
    assert_eq!(e["event"], "JOB_CANCELLED", "{e}");
    assert_eq!(e["seq"], 1);
    for field in ["resource", "task", "run_number", "step"] {
        assert_eq!(
            e.get(field),
            Some(&Value::Null),
            "{field} is an explicit null: {e}"
        );
    }
    assert!(e.get("process").is_none(), "{e}");
}

#[test]
fn failing_command_sink_is_retried_and_delivers_every_event_in_order() {
    let mut h = TestHome::new(Probe::Gpus(1));
    let sink = command_sink(&h, 2);
    config(&mut h, Some(&sink));
    h.start_daemon();
    let gate = h.tmp().join("gate");
    let first = h.submit(&holds_the_lane(&h, &gate));
    wait_executing(&h, &first);
    let blocked = h.submit(&quick_spec(&h, "waits behind it"));
    // The blocked notice (seq 1) fails twice, then is delivered while still true.
    wait_events(
        "the blocked notice",
        || received(&h),
        |e| of_job(e, &blocked).len() == 1,
    );
    open_gate(&gate);
    let all = wait_events(
        "every event",
        || received(&h),
        |e| of_job(e, &blocked).len() == 2 && of_job(e, &first).len() == 1,
    );
    assert_eq!(
        of_job(&all, &blocked),
        [
            (1, "JOB_BLOCKED".to_string()),
            (2, "JOB_SUCCEEDED".to_string())
        ]
    );
    assert_eq!(of_job(&all, &first), [(1, "JOB_SUCCEEDED".to_string())]);
    assert!(
        !h.home().join("threads").exists(),
        "a configured command replaces the inbox"
    );
    let env = std::fs::read_to_string(h.tmp().join("env")).unwrap();
    let thread = all.iter().find(|e| e["job"] == blocked.as_str()).unwrap()["thread"].clone();
    assert!(
        env.lines()
            .any(|l| l == format!("{} JOB_BLOCKED", thread.as_str().unwrap())),
        "{env}"
    );

    // The sink has the event before its attempt's end is logged: wait for the third end.
    let ended = |log: &str| {
        log.lines()
            .filter(|l| l.contains("seq=1 ") && (l.contains("failed") || l.contains("delivered")))
            .count()
    };
    wait_until("the third attempt to be logged", || {
        ended(&callback_log(&h, &blocked)) >= 3
    });
    let log = callback_log(&h, &blocked);
    let attempts: Vec<&str> = log.lines().filter(|l| l.contains("seq=1 ")).collect();
    let ends: Vec<&str> = attempts
        .iter()
        .copied()
        .filter(|l| l.contains("failed") || l.contains("delivered"))
        .collect();
    assert_eq!(ends.len(), 3, "{log}");
    assert!(
        ends[0].contains("attempt=1 sink=command exit=1 failed"),
        "{log}"
    );
    assert!(
        ends[1].contains("attempt=2 sink=command exit=1 failed"),
        "{log}"
    );
    assert!(
        ends[2].contains("attempt=3 sink=command exit=0 delivered"),
        "{log}"
    );
    assert!(
        log.contains("failing call 1\n") && log.contains("failing call 2\n"),
        "{log}"
    );
    let seq1 = log.find("seq=1 event=JOB_BLOCKED attempt=3").unwrap();
    let seq2 = log.find("seq=2 event=JOB_SUCCEEDED").unwrap();
    assert!(seq1 < seq2, "in seq order: {log}");
}

#[test]
fn daemon_killed_between_two_events_of_a_job_delivers_the_rest_after_restart() {
    let mut h = TestHome::new(Probe::Gpus(1));
    config(&mut h, None);
    h.spawn_serve();
    let gate = h.tmp().join("gate");
    let first = h.submit(&holds_the_lane(&h, &gate));
    wait_executing(&h, &first);
    let spec = quick_spec(&h, "blocked, then done");
    let thread = spec.thread();
    let blocked = h.submit(&spec);
    wait_events(
        "the blocked notice",
        || inbox(&h, &thread),
        |e| e.len() == 1,
    );

    h.kill_serve(Signal::SIGKILL);
    open_gate(&gate);
    h.spawn_serve();
    let events = wait_events(
        "the success after the restart",
        || inbox(&h, &thread),
        |e| of_job(e, &blocked).len() == 2,
    );
    assert_eq!(
        of_job(&events, &blocked),
        [
            (1, "JOB_BLOCKED".to_string()),
            (2, "JOB_SUCCEEDED".to_string())
        ]
    );
}

#[test]
fn pending_event_when_the_daemon_is_killed_is_delivered_after_restart() {
    let mut h = TestHome::new(Probe::Gpus(1));
    let sink = command_sink(&h, 0);
    config(&mut h, Some(&sink));
    let hold = h.tmp().join("hold");
    open_gate(&hold);
    h.spawn_serve();
    let job = h.submit(&quick_spec(&h, "done while the sink holds"));
    wait_until("a failed attempt", || {
        callback_log(&h, &job).contains("exit=1 failed")
    });
    h.kill_serve(Signal::SIGKILL);
    std::fs::remove_file(&hold).unwrap();
    assert!(received(&h).is_empty(), "not delivered before the kill");

    h.spawn_serve();
    let events = wait_events(
        "the event after the restart",
        || received(&h),
        |e| !e.is_empty(),
    );
    assert_eq!(of_job(&events, &job), [(1, "JOB_SUCCEEDED".to_string())]);
    wait_until("the delivery to be recorded", || {
        callback_log(&h, &job).contains("exit=0 delivered")
    });
}

#[test]
fn blocked_notice_arrives_once_per_episode_with_its_blockers() {
    let mut h = TestHome::new(Probe::Gpus(1));
    let file = config(&mut h, None);
    let effective = h.json(&["--config", file.to_str().unwrap(), "config", "validate"]);
    let delays = &effective["settings"]["resource"]["notify_blocked_after"];
    assert_eq!(delays["wait"], "2s", "{effective}");
    assert_eq!(delays["yield"], "1s", "{effective}");
    h.start_daemon();
    let gate = h.tmp().join("gate");
    let running = h.submit(&holds_the_lane(&h, &gate));
    wait_executing(&h, &running);
    let lane = h.resources()[0].clone();
    let task = lane["run"]["task"].clone();

    let medium = h.spec("medium waits");
    let medium_thread = medium.thread();
    let medium = h.submit(&medium);
    let first = wait_events(
        "the medium job's notice",
        || inbox(&h, &medium_thread),
        |e| !e.is_empty(),
    );
    let notice = &first[0];
    assert_eq!(notice["event"], "JOB_BLOCKED", "{notice}");
    assert_eq!(notice["job"], medium.as_str());
    for field in ["resource", "task", "run_number", "step"] {
        assert_eq!(notice.get(field), Some(&Value::Null), "{notice}");
    }
    let blocked = &notice["blocked"];
    assert!(is_uuid(&blocked["episode"]), "{notice}");
    assert!(
        blocked["blocked_since"].as_str().unwrap().ends_with('Z'),
        "{notice}"
    );
    assert_eq!(
        blocked["blockers"],
        json!([{"kind": "run", "resource": lane["id"], "job": running, "task": task}]),
        "{notice}"
    );

    // Same head: no second notice, however long it waits. The delay has passed (the first
    // notice fired), so the timers that would fire a second one run now.
    h.settle();
    let shown = h.json(&["resource", "job", "show", &medium]);
    assert_eq!(event_names(&shown), ["JOB_BLOCKED"], "{shown:#}");
    assert_eq!(inbox(&h, &medium_thread).len(), 1);

    // A high job becomes the first blocked: a new episode with its own notice.
    let high = h.spec("high waits").priority("high");
    let high_thread = high.thread();
    let high = h.submit(&high);
    let high_events = wait_events(
        "the high job's notice",
        || inbox(&h, &high_thread),
        |e| !e.is_empty(),
    );
    assert_eq!(high_events[0]["event"], "JOB_BLOCKED");
    assert_ne!(high_events[0]["blocked"]["episode"], blocked["episode"]);

    // The high job leaves: the medium job is first blocked again, in a new episode.
    h.json(&["resource", "job", "cancel", &high]);
    let again = wait_events(
        "the medium job's second notice",
        || inbox(&h, &medium_thread),
        |e| e.len() == 2,
    );
    assert_eq!(again[1]["event"], "JOB_BLOCKED");
    assert_eq!(again[1]["seq"], 2);
    assert_ne!(again[1]["blocked"]["episode"], blocked["episode"]);
    assert_eq!(
        h.resources()[0]["run"]["task"],
        task,
        "notices never stop a run"
    );
}

#[test]
fn notice_no_longer_true_at_its_turn_is_suppressed_and_keeps_its_seq() {
    let mut h = TestHome::new(Probe::Gpus(1));
    let sink = command_sink(&h, 0);
    config(&mut h, Some(&sink));
    let hold = h.tmp().join("hold");
    open_gate(&hold);
    h.start_daemon();
    let gate = h.tmp().join("gate");
    let running = h.submit(&holds_the_lane(&h, &gate));
    wait_executing(&h, &running);
    let blocked = h.submit(&h.spec("blocked, then cancelled"));
    wait_until("the notice to be tried", || {
        callback_log(&h, &blocked).contains("seq=1 event=JOB_BLOCKED attempt=1 sink=command exit=1")
    });
    h.json(&["resource", "job", "cancel", &blocked]);
    std::fs::remove_file(&hold).unwrap();
    let events = wait_events(
        "the cancel",
        || received(&h),
        |e| !of_job(e, &blocked).is_empty(),
    );
    assert_eq!(
        of_job(&events, &blocked),
        [(2, "JOB_CANCELLED".to_string())]
    );
    let recorded: Vec<(u64, String)> = show(&h, &blocked)["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["seq"].as_u64().unwrap(),
                e["event"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        recorded,
        [
            (1, "JOB_BLOCKED".to_string()),
            (2, "JOB_CANCELLED".to_string())
        ]
    );
    let log = callback_log(&h, &blocked);
    assert!(
        !log.contains("seq=1 event=JOB_BLOCKED attempt=1 sink=command exit=0"),
        "{log}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("seq=1") && l.contains("delivered")),
        "{log}"
    );
}

/// The first event `events --follow` printed, and its line; the follower is then ended.
fn first_followed(
    mut child: std::process::Child,
    rx: &std::sync::mpsc::Receiver<String>,
) -> (Value, String) {
    let line = rx.recv_timeout(PATIENCE);
    let _ = child.kill();
    let _ = child.wait();
    let line = line.expect("events --follow printed the new event");
    (serde_json::from_str(&line).unwrap(), line)
}

#[test]
fn events_follow_shows_a_new_event_as_it_happens() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let spec = quick_spec(&h, "followed");
    let thread = spec.thread();
    let (child, rx) = follow_events(&h, &thread);
    let job = h.submit(&spec);
    let (event, line) = first_followed(child, &rx);
    assert_eq!(event["event"], "JOB_SUCCEEDED", "{line}");
    assert_eq!(event["job"], job.as_str());
}

#[test]
fn events_follow_reads_the_store_whatever_the_sink_and_waits_out_a_daemon_restart() {
    let mut h = TestHome::new(Probe::Gpus(1));
    // A command sink that never takes an event: no inbox is ever written.
    let sink = command_sink(&h, u32::MAX);
    config(&mut h, Some(&sink));
    h.start_daemon();
    let spec = quick_spec(&h, "followed without an inbox");
    let thread = spec.thread();
    let (child, rx) = follow_events(&h, &thread);
    h.json(&["daemon", "restart"]);
    let job = h.submit(&spec);
    let (event, line) = first_followed(child, &rx);
    assert_eq!(event["event"], "JOB_SUCCEEDED", "{line}");
    assert_eq!(event["job"], job.as_str());
    assert!(
        inbox(&h, &thread).is_empty(),
        "the inbox was never the sink"
    );
    assert!(
        !h.home()
            .join("threads")
            .join(format!("{thread}.jsonl"))
            .exists(),
        "no inbox file"
    );
}

/// One read of the thread's events from the daemon's store (`GET
/// /v1/threads/{thread}/events`, no wait): the `(job, seq)` of each event answered, and the
/// cursor to pass back.
fn thread_read(h: &TestHome, thread: &str, after: Option<&str>) -> (Vec<(String, u64)>, String) {
    let query = after.map_or(String::new(), |a| format!("?after={a}"));
    let request =
        format!("GET /v1/threads/{thread}/events{query} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let answer = http::exchange(
        &mut http::unix(&h.socket()),
        request.as_bytes(),
        std::time::Duration::from_secs(30),
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    let v: Value = serde_json::from_slice(&answer.body).unwrap();
    let events = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["thread"], thread, "{e}");
            (
                e["job"].as_str().unwrap().to_string(),
                e["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    (events, v["cursor"].as_str().unwrap().to_string())
}

/// Retention deletes the newest events of the store (a thread's finished jobs; an older
/// event of another job is kept, undelivered) and the thread goes on: a reader at the cursor
/// it holds reads each new event once, and a reader with an older cursor reads no other
/// event under an id it saw. Before events had an id of their own the cursor was the rowid,
/// which the next event took again, so the reader at its cursor never saw it.
#[test]
fn a_thread_cursor_neither_skips_nor_repeats_after_history_prune_deletes_the_newest_events() {
    let mut h = TestHome::without_resources();
    let kept_spec = h.spec("kept");
    // The sink refuses the kept job's thread only: its event stays owed, its job stays.
    let sink = h.write_file(
        "sink.sh",
        &format!(
            "#!/bin/sh\nif [ \"$HOMEBASED_THREAD\" = {} ]; then exit 1; fi\ncat > /dev/null\n",
            kept_spec.thread()
        ),
    );
    std::fs::set_permissions(&sink, std::fs::Permissions::from_mode(0o755)).unwrap();
    h.use_config(&format!(
        "[events]\ncommand = [{:?}]\n",
        sink.display().to_string()
    ));
    h.start_daemon();
    let cancel = |spec: &Spec| {
        let job = h.submit(spec);
        h.json(&["resource", "job", "cancel", &job]);
        job
    };
    let kept = cancel(&kept_spec);

    let spec = h.spec("first");
    let thread = spec.thread();
    let a = cancel(&spec);
    let (read, at_a) = thread_read(&h, &thread, None);
    assert_eq!(read, vec![(a.clone(), 1)]);
    let b = cancel(&spec.clone().set("name", "second".into()));
    let (read, at_b) = thread_read(&h, &thread, Some(&at_a));
    assert_eq!(read, vec![(b.clone(), 1)]);
    let mut followed = vec![(a.clone(), 1), (b.clone(), 1)];

    // Both of the thread's jobs go, with the newest events of the store; the kept one stays.
    let mut dry = Value::Null;
    wait_until("the thread's events to be delivered", || {
        dry = h.json(&["history", "prune", "--before", "0s", "--dry-run"]);
        dry["jobs"] == 2 && dry["kept_undelivered"] == 1
    });
    let pruned = h.json(&["history", "prune", "--before", "0s"]);
    assert_eq!(pruned["jobs"], 2, "{pruned}");
    for gone in [&a, &b] {
        let err = h.json_err(&["resource", "job", "show", gone], 3);
        assert_eq!(err["code"], "job_not_found", "{gone}: {err}");
    }
    assert_eq!(state_of(&show(&h, &kept)), "cancelled");
    assert_eq!(thread_read(&h, &thread, None).0, vec![]);
    let (read, cursor) = thread_read(&h, &thread, Some(&at_b));
    assert_eq!((read, cursor.as_str()), (vec![], at_b.as_str()));

    // The thread goes on: each new event is read once at the cursor the reader holds.
    let mut cursor = at_b;
    for name in ["third", "fourth"] {
        let job = cancel(&spec.clone().set("name", name.into()));
        let (read, next) = thread_read(&h, &thread, Some(&cursor));
        assert_eq!(
            read,
            vec![(job.clone(), 1)],
            "the {name} job's event at cursor {cursor} (the pruned ones were {a} and {b})"
        );
        followed.extend(read);
        cursor = next;
        assert_eq!(thread_read(&h, &thread, Some(&cursor)).0, vec![], "once");
    }
    let mut seen = followed.clone();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), followed.len(), "nothing repeated: {followed:?}");
    // A reader still at an older cursor reads only what came after it: the new events.
    let (late, _) = thread_read(&h, &thread, Some(&at_a));
    assert_eq!(late, followed[2..], "after the first cursor");
    assert_eq!(thread_read(&h, &thread, None).0, followed[2..]);
}
