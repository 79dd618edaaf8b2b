//! Retention of finished jobs: `history prune` (with and without `--dry-run`) and the
//! `[history] keep` setting. Nothing live or undelivered is ever removed; a dry run changes
//! nothing; a pruned job is `job_not_found` and its run directory is gone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::jobs::*;
use crate::common::{wait_until, TestHome};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn run_dir(h: &TestHome, show: &Value) -> PathBuf {
    let task = runs(show)[0]["task"].as_str().unwrap().to_string();
    h.home().join("tasks").join(task)
}

/// Waits until the thread's inbox holds `n` events: they were delivered.
fn wait_delivered(h: &TestHome, thread: &str, n: usize) {
    wait_until(&format!("{n} events delivered to the inbox"), || {
        let v = h.json(&["events", "--thread", thread]);
        v["events"].as_array().unwrap().len() >= n
    });
}

fn ids(v: &Value) -> BTreeSet<String> {
    v["job_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_str().unwrap().to_string())
        .collect()
}

fn job_not_found(h: &TestHome, job: &str) {
    let err = h.json_err(&["resource", "job", "show", job], 3);
    assert_eq!(err["code"], "job_not_found", "{job}: {err}");
}

#[test]
fn prune_removes_finished_jobs_and_their_run_dirs_and_never_live_ones() {
    let h = home_with_gpus(1);
    let spec = h.spec("quick").command(&["/bin/sh", "-c", "echo done"]);
    let finished = h.submit(&spec);
    h.settle();
    let finished_show = wait_job(&h, &finished, "succeeded");
    let finished_dir = run_dir(&h, &finished_show);
    wait_all_idle(&h);
    // A holder keeps the lane (active, its run directory live); one job waits behind it;
    // one queued job is cancelled (finished without a run).
    let gate = h.tmp().join("gate");
    let holder = h.submit(&gated_spec(&h, "holder", "", &gate, ""));
    wait_phase(&h, &holder, "executing");
    let holder_dir = run_dir(&h, &show(&h, &holder));
    let waiting = h.submit(&spec.clone().set("name", "waiting".into()));
    let cancelled = h.submit(&spec.clone().set("name", "cancelled".into()));
    h.json(&["resource", "job", "cancel", &cancelled]);
    // Until their events are delivered the finished jobs are kept back.
    let mut dry = Value::Null;
    wait_until("the finished jobs' events to be delivered", || {
        dry = h.json(&["history", "prune", "--before", "0s", "--dry-run"]);
        dry["kept_undelivered"] == 0
    });
    assert_eq!(dry["dry_run"], true, "{dry}");
    let expected: BTreeSet<String> = [finished.clone(), cancelled.clone()].into();
    assert_eq!(ids(&dry), expected, "{dry}");
    assert_eq!(
        (dry["jobs"].as_u64(), dry["runs"].as_u64()),
        (Some(2), Some(1)),
        "{dry}"
    );
    assert_eq!(dry["run_dirs"], 1, "{dry}");
    // Nothing changed.
    assert_eq!(state_of(&show(&h, &finished)), "succeeded");
    assert_eq!(state_of(&show(&h, &cancelled)), "cancelled");
    assert!(
        finished_dir.is_dir(),
        "a dry run keeps {}",
        finished_dir.display()
    );

    let pruned = h.json(&["history", "prune", "--before", "0s"]);
    assert_eq!(pruned["dry_run"], false, "{pruned}");
    assert_eq!(ids(&pruned), expected, "{pruned}");
    assert_eq!(pruned["run_dirs"], 1, "{pruned}");
    assert!(pruned["events"].as_u64().unwrap() >= 2, "{pruned}");
    job_not_found(&h, &finished);
    job_not_found(&h, &cancelled);
    assert!(
        !finished_dir.exists(),
        "{} is removed",
        finished_dir.display()
    );
    // The live ones are untouched.
    assert!(holder_dir.is_dir(), "the holder's run directory stays");
    assert_eq!(state_of(&show(&h, &holder)), "active");
    assert_eq!(state_of(&show(&h, &waiting)), "queued");
    let queue = h.json(&["resource", "jobs"]);
    assert_eq!(queue["jobs"].as_array().unwrap().len(), 2, "{queue}");

    // A second prune finds nothing more; the quiet form prints only ids (none).
    let again = h.json(&["history", "prune", "--before", "0s"]);
    assert_eq!(again["jobs"], 0, "{again}");
    let quiet = h.cli(&["--quiet", "history", "prune", "--before", "0s"]);
    assert_eq!((quiet.code(), quiet.stdout.trim()), (0, ""), "{quiet:?}");
    open_gate(&gate);
    wait_job(&h, &holder, "succeeded");
}

#[test]
fn a_job_with_an_undelivered_event_is_kept() {
    // No lane: jobs stay queued, and a cancel ends them at once.
    let mut h = TestHome::without_resources();
    let sink = h.write_file("sink.sh", "#!/bin/sh\nexit 1\n");
    std::fs::set_permissions(&sink, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    h.use_config(&format!(
        "[events]\ncommand = [{:?}]\n",
        sink.display().to_string()
    ));
    h.start_daemon();
    let job = h.submit(&h.spec("owed"));
    h.json(&["resource", "job", "cancel", &job]);
    h.settle();
    let pruned = h.json(&["history", "prune", "--before", "0s"]);
    assert_eq!(pruned["jobs"], 0, "{pruned}");
    assert_eq!(pruned["kept_undelivered"], 1, "{pruned}");
    assert_eq!(state_of(&show(&h, &job)), "cancelled");
}

#[test]
fn keep_prunes_by_itself_once_a_job_is_old_enough() {
    let mut h = TestHome::new(common::Probe::Gpus(1));
    h.use_config("[history]\nkeep = \"1s\"\n");
    h.start_daemon();
    let spec = h.spec("old").command(&["/bin/sh", "-c", "echo done"]);
    let thread = spec.thread();
    let job = h.submit(&spec);
    let dir = run_dir(&h, &wait_job(&h, &job, "succeeded"));
    wait_all_idle(&h);
    wait_delivered(&h, &thread, 1);
    h.settle();
    // Not a second old yet (the settle ran retention): still there.
    assert_eq!(state_of(&show(&h, &job)), "succeeded");
    assert!(dir.is_dir());
    // A second and more passes for the daemon: old enough, pruned by itself.
    h.advance_clock(std::time::Duration::from_secs(2));
    h.settle();
    job_not_found(&h, &job);
    assert!(!dir.exists(), "{} is removed", dir.display());
    // `daemon status` says how much the run directories take and how fresh that is.
    let mut status = Value::Null;
    wait_until("the first disk usage walk", || {
        status = h.json(&["daemon", "status"]);
        !status["run_dirs"].is_null()
    });
    let usage = &status["run_dirs"];
    assert!(
        usage["bytes"].is_u64() && usage["dirs"].is_u64(),
        "{status}"
    );
    assert!(usage["measured_at"].as_i64().unwrap() > 0, "{status}");
    let human = h.cli(&["daemon", "status"]).stdout;
    assert!(
        human.contains("run directories") && human.contains("ago"),
        "{human}"
    );
    // Jobs submitted afterwards run as usual.
    let next = h.submit(&spec.clone().set("name", "next".into()));
    wait_job(&h, &next, "succeeded");
}

#[test]
fn daemon_status_counts_a_big_runs_output_once_it_ended_not_minutes_later() {
    let mut h = TestHome::new(common::Probe::Gpus(1));
    h.start_daemon();
    let mut status = Value::Null;
    wait_until("the first disk usage walk", || {
        status = h.json(&["daemon", "status"]);
        !status["run_dirs"].is_null()
    });
    let before = status["run_dirs"]["bytes"].as_u64().unwrap();
    // 8 MiB of output: the periodic walk is minutes away, the run's end is now.
    let spec =
        h.spec("big output")
            .command(&["/bin/sh", "-c", "head -c 8388608 /dev/zero | tr '\\0' x"]);
    let job = h.submit(&spec);
    wait_job(&h, &job, "succeeded");
    wait_until("daemon status to count the run's output", || {
        status = h.json(&["daemon", "status"]);
        status["run_dirs"]["bytes"].as_u64().unwrap() >= before + 8 * 1024 * 1024
    });
    assert!(
        status["run_dirs"]["dirs"].as_u64().unwrap() >= 1,
        "{status}"
    );
}

#[test]
fn keep_and_before_refuse_what_is_not_a_duration() {
    let h = TestHome::without_resources();
    for bad in ["\"0s\"", "\"soon\"", "90"] {
        let config = h.write_file("bad.toml", &format!("[history]\nkeep = {bad}\n"));
        let err = h.json_err(
            &["--config", config.to_str().unwrap(), "config", "validate"],
            2,
        );
        assert_eq!(err["code"], "config_invalid", "{bad}: {err}");
        assert!(err["message"].as_str().unwrap().contains("keep"), "{err}");
    }
    let err = h.json_err(&["history", "prune", "--before", "last week"], 2);
    assert_eq!(err["code"], "usage", "{err}");
}
