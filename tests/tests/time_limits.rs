//! Time limits (SPEC sections 3, 4 and 5): a run still executing at its start plus its job's
//! `time_limit` is stopped as a restart is and its job fails with `JOB_FAILED`,
//! `detail.cause` `time_limit`; the workload is told the instant in `HOMEBASED_DEADLINE`, and
//! a GPU's index comes with `CUDA_DEVICE_ORDER=PCI_BUS_ID`.
//!
//! The shortest limit is a minute, which a test cannot wait out: the daemon of the tests that
//! reach a limit runs with the crash-point build's `time_limit.as` point
//! (`FAILPOINTS=time_limit.as=return(3s)`), which gives every limited run that limit instead.

use crate::common::crash::BUILD_HINT;
use crate::common::jobs::{
    event_names, runs, sh_spec, show, task_log, wait_all_idle, wait_job, wait_phase,
};
use crate::common::{wait_until, Probe, TestHome};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

/// An RFC 3339 time of `job show` or of the environment, in epoch milliseconds.
fn millis(text: &Value) -> i64 {
    homebased_shared::time::serde_rfc3339::deserialize(text.clone())
        .unwrap_or_else(|e| panic!("{text} is not an RFC 3339 time: {e}"))
}

/// A step that reports what it was told, then runs until a TERM, which it answers the way a
/// script that saves on TERM does: it says so and exits 0 (once `$1` exists, when given).
const REPORTS_THEN_SAVES_ON_TERM: &str = r#"
trap 'echo got-term; i=0; while [ -n "$1" ] && [ ! -e "$1" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; exit 0' TERM
echo "deadline=$HOMEBASED_DEADLINE"
echo "order=$CUDA_DEVICE_ORDER"
echo "devices=$CUDA_VISIBLE_DEVICES"
echo ready
while :; do sleep 0.1; done
"#;

/// A daemon (a `serve` child) whose limited runs get `limit` instead of their spec's.
fn serve_with_limits_of(h: &mut TestHome, limit: &str) {
    h.set_env("FAILPOINTS", format!("time_limit.as=return({limit})"));
    h.spawn_serve();
    h.unset_env("FAILPOINTS");
}

/// The value the workload printed for `name=` in its log.
fn told(log: &str, name: &str) -> String {
    log.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("the workload printed no {name}= line: {log:?}"))
        .to_string()
}

fn wait_ready(h: &TestHome, task: &str) -> String {
    let mut log = String::new();
    wait_until("the workload to report what it was told", || {
        log = task_log(h, task);
        log.contains("ready\n")
    });
    log
}

#[test]
fn a_limited_run_is_told_its_deadline_and_the_pci_bus_order() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    // The submitter's own values never reach the workload: the queue owns both.
    h.set_env("CUDA_DEVICE_ORDER", "FASTEST_FIRST");
    h.set_env("HOMEBASED_DEADLINE", "2000-01-01T00:00:00Z");
    let spec =
        sh_spec(&h, "limited", REPORTS_THEN_SAVES_ON_TERM, &[]).set("time_limit", json!("1m"));
    let job = h.submit(&spec);
    h.unset_env("CUDA_DEVICE_ORDER");
    h.unset_env("HOMEBASED_DEADLINE");
    wait_phase(&h, &job, "executing");
    let shown = show(&h, &job);
    let task = shown["active_run"].as_str().unwrap().to_string();
    let log = wait_ready(&h, &task);

    assert_eq!(told(&log, "order"), "PCI_BUS_ID", "{log}");
    assert_eq!(told(&log, "devices"), "0", "{log}");
    let deadline = told(&log, "deadline");
    assert!(deadline.ends_with('Z'), "UTC: {deadline}");
    let started_at = millis(&runs(&shown)[0]["started_at"]);
    let expected = started_at + 60_000;
    let deadline_ms = millis(&json!(deadline));
    assert!(
        deadline_ms <= expected && expected - deadline_ms < 1000,
        "HOMEBASED_DEADLINE {deadline} is not the run's start {} plus 1m",
        runs(&shown)[0]["started_at"]
    );
    assert_eq!(shown["spec"]["time_limit"], "1m");
    let human = h.cli(&["resource", "job", "show", &job]).stdout;
    assert!(human.contains("time limit 1m per run"), "{human}");

    h.json(&["resource", "job", "cancel", &job]);
    wait_job(&h, &job, "cancelled");
    wait_all_idle(&h);
}

#[test]
fn a_run_past_its_time_limit_is_stopped_like_a_restart_and_its_job_fails() {
    let mut h = TestHome::new(Probe::Gpus(1));
    // The stop's grace outlasts anything the test waits for: the workload ends by itself.
    h.use_config("[resource.cleanup]\nterm_grace = \"60s\"\n");
    serve_with_limits_of(&mut h, "3s");
    let release = h.tmp().join("release");
    let spec = sh_spec(&h, "runs too long", REPORTS_THEN_SAVES_ON_TERM, &[&release])
        .set("time_limit", json!("1m"));
    let job = h.submit(&spec);
    wait_phase(&h, &job, "executing");
    let task = show(&h, &job)["active_run"].as_str().unwrap().to_string();

    // The limit's stop is committed, shown where stop causes show, and sent as a restart's.
    let lane = wait_phase(&h, &job, "stopping");
    assert_eq!(
        lane["run"]["phase"]["cause"], "time_limit",
        "{lane:#} ({BUILD_HINT})"
    );
    let human = h.cli(&["resource", "list"]).stdout;
    assert!(human.contains("(time_limit)"), "{human}");
    wait_until("the workload to get the TERM", || {
        task_log(&h, &task).contains("got-term")
    });
    let log = task_log(&h, &task);
    std::fs::write(&release, "").unwrap();

    // It exited 0 after the TERM: stopped, so the job failed, never succeeded.
    let done = wait_job(&h, &job, "failed");
    let history = runs(&done);
    assert_eq!(history.len(), 1, "never run again: {done:#}");
    assert_eq!(history[0]["task"], task.as_str());
    assert_eq!(history[0]["status"], "failed");
    assert_eq!(history[0]["stop_cause"], "time_limit");
    assert_eq!(history[0]["process"], json!({"kind": "cancelled"}));
    assert_eq!(done["last_stop_cause"], "time_limit");
    // Stopped no earlier than the deadline it announced.
    let started_at = millis(&history[0]["started_at"]);
    assert!(
        millis(&history[0]["ended_at"]) >= started_at + 3000,
        "{done:#}"
    );
    let deadline = millis(&json!(told(&log, "deadline")));
    assert!(deadline <= started_at + 3000 && started_at + 3000 - deadline < 1000);

    assert_eq!(event_names(&done), ["JOB_FAILED"]);
    let event = &done["events"][0];
    assert_eq!(event["detail"], json!({"cause": "time_limit"}), "{event:#}");
    assert_eq!(event["process"], json!({"kind": "cancelled"}), "{event:#}");
    assert_eq!(event["task"], task.as_str());
    let human = h.cli(&["resource", "job", "show", &job]).stdout;
    assert!(human.contains("time_limit"), "{human}");

    // The lane is free once its cleanup is done, and serves the next job.
    wait_all_idle(&h);
    let next = h.submit(&h.spec("next").command(&["/bin/sh", "-c", "echo next"]));
    wait_job(&h, &next, "succeeded");
}

#[test]
fn a_limit_that_passed_while_the_daemon_was_down_stops_the_run_at_its_next_start() {
    let mut h = TestHome::new(Probe::Gpus(1));
    serve_with_limits_of(&mut h, "5s");
    let spec = sh_spec(&h, "outlives its limit", REPORTS_THEN_SAVES_ON_TERM, &[])
        .set("time_limit", json!("1m"));
    let job = h.submit(&spec);
    wait_phase(&h, &job, "executing");
    let shown = show(&h, &job);
    h.kill_serve(Signal::SIGKILL);
    let task = shown["active_run"].as_str().unwrap().to_string();
    let deadline = millis(&runs(&shown)[0]["started_at"]) + 5000;
    wait_until("the run's limit to pass with the daemon down", || {
        homebased_shared::time::now_ms() > deadline + 500
    });
    assert!(
        !task_log(&h, &task).contains("got-term"),
        "nothing stops a run while the daemon is down"
    );

    serve_with_limits_of(&mut h, "5s");
    let done = wait_job(&h, &job, "failed");
    let history = runs(&done);
    assert_eq!(history.len(), 1, "{done:#}");
    assert_eq!(history[0]["stop_cause"], "time_limit", "{done:#}");
    assert_eq!(history[0]["process"], json!({"kind": "cancelled"}));
    assert_eq!(event_names(&done), ["JOB_FAILED"]);
    assert_eq!(done["events"][0]["detail"], json!({"cause": "time_limit"}));
    assert!(task_log(&h, &task).contains("got-term"));
    wait_all_idle(&h);
}

#[test]
fn a_bad_time_limit_is_refused_with_its_pointer_and_nothing_is_stored() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    for bad in [json!("59s"), json!("30days 1s"), json!("abc"), json!(3600)] {
        let spec = h.spec("bad limit").set("time_limit", bad.clone());
        let err = h.submit_err(&spec, None, 2);
        assert_eq!(err["code"], "invalid_spec", "{bad}: {err}");
        assert_eq!(err["input"]["pointer"], "/time_limit", "{bad}: {err}");
        assert_eq!(err["input"]["value"], bad, "{err}");
    }
    // The flag is checked as the field is.
    let file = h.spec_file(&h.spec("bad flag"));
    let err = h.json_err(
        &[
            "resource",
            "job",
            "submit",
            "--spec",
            file.to_str().unwrap(),
            "--time-limit",
            "10s",
        ],
        2,
    );
    assert_eq!(err["input"]["pointer"], "/time_limit", "{err}");
    let jobs = h.json(&["resource", "jobs"]);
    assert_eq!(jobs["jobs"], json!([]), "nothing stored: {jobs}");

    // The bounds themselves are accepted, by the field and by the flag.
    let at_most = h.submit(&h.spec("thirty days").set("time_limit", json!("30days")));
    let shown = h.json(&[
        "resource",
        "job",
        "submit",
        "--spec",
        file.to_str().unwrap(),
        "--time-limit",
        "1m",
    ]);
    let at_least = shown["job"].as_str().unwrap().to_string();
    assert_eq!(show(&h, &at_least)["spec"]["time_limit"], "1m");
    assert_eq!(show(&h, &at_most)["spec"]["time_limit"], "30days");
    for job in [at_most, at_least] {
        h.json(&["resource", "job", "cancel", &job]);
    }
    wait_all_idle(&h);
}
