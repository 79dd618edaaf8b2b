//! The workload's environment as a user sees it: the submitting shell's variables reach the
//! run and the daemon's do not, a step's `env` overrides them, the run variables the queue
//! owns cannot be set, and `job show` prints the environment only when asked.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::jobs::*;
use crate::common::{Probe, TestHome};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The `KEY=VALUE` lines of a log (an `env` dump).
fn env_of(log: &str) -> BTreeMap<String, String> {
    log.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A daemon started from a shell that exports `DAEMON_ONLY`, which later commands do not.
fn daemon_with_its_own_variable() -> TestHome {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.set_env("DAEMON_ONLY", "from the daemon's shell");
    h.set_env("SHARED_NAME", "daemon");
    h.start_daemon();
    h.unset_env("DAEMON_ONLY");
    h.unset_env("SHARED_NAME");
    h
}

/// Runs `env` as a job, `step_env` as its step's `env`; returns the dump.
fn env_seen(h: &TestHome, step_env: Option<Value>) -> BTreeMap<String, String> {
    let mut spec = h.spec("env dump").command(&["/bin/sh", "-c", "env"]);
    if let Some(env) = step_env {
        spec.0["workload"]["env"] = env;
    }
    let job = h.submit(&spec);
    let done = wait_job(h, &job, "succeeded");
    env_of(&task_log(h, runs(&done)[0]["task"].as_str().unwrap()))
}

#[test]
fn a_variable_of_the_submitting_shell_reaches_the_workload_and_one_of_the_daemons_does_not() {
    let mut h = daemon_with_its_own_variable();
    h.set_env("SUBMIT_ONLY", "from the submitter's shell");
    h.set_env("SHARED_NAME", "submitter");
    h.set_env("HOMEBASED_RESUME", "1");
    let env = env_seen(&h, None);
    assert_eq!(env["SUBMIT_ONLY"], "from the submitter's shell", "{env:#?}");
    assert_eq!(env["SHARED_NAME"], "submitter");
    assert!(!env.contains_key("DAEMON_ONLY"), "{env:#?}");
    assert_eq!(
        env["HOMEBASED_RESUME"], "0",
        "the queue owns the run variables"
    );
    assert_eq!(env["HOME"], h.tmp().join("user").display().to_string());
}

#[test]
fn a_steps_env_overrides_the_submitters_environment() {
    let mut h = daemon_with_its_own_variable();
    h.set_env("SEED", "1");
    h.set_env("KEPT", "yes");
    let env = env_seen(
        &h,
        Some(json!({"SEED": "2", "PYTHONUNBUFFERED": "1", "DAEMON_ONLY": "set by the step"})),
    );
    assert_eq!(env["SEED"], "2");
    assert_eq!(env["KEPT"], "yes");
    assert_eq!(env["PYTHONUNBUFFERED"], "1");
    assert_eq!(env["DAEMON_ONLY"], "set by the step");
}

#[test]
fn run_variables_in_a_steps_env_are_refused_with_their_pointer() {
    let h = home_with_gpus(1);
    for (name, pointer) in [
        ("HOMEBASED_RESUME", "/workload/env/HOMEBASED_RESUME"),
        ("HOMEBASED_TASK_ID", "/workload/env/HOMEBASED_TASK_ID"),
        ("CUDA_VISIBLE_DEVICES", "/workload/env/CUDA_VISIBLE_DEVICES"),
        ("NOT-A-NAME", "/workload/env/NOT-A-NAME"),
    ] {
        let mut spec = h.spec("bad env");
        spec.0["workload"]["env"] = json!({ name: "1" });
        let err = h.submit_err(&spec, None, 2);
        assert_eq!(err["code"], "invalid_spec", "{err}");
        assert_eq!(err["input"]["pointer"], pointer, "{err}");
        assert_eq!(err["input"]["value"], "1", "{err}");
    }
    h.settle();
    assert!(h.queue().is_empty(), "nothing refused was stored");
}

#[test]
fn job_show_prints_the_environment_only_when_asked() {
    let mut h = home_with_gpus(1);
    h.set_env("SECRET_TOKEN", "hunter2");
    let spec = h.spec("quiet").command(&["true"]);
    let job = h.submit(&spec);
    h.unset_env("SECRET_TOKEN");
    wait_job(&h, &job, "succeeded");
    let plain = h.cli(&["--json", "resource", "job", "show", &job]);
    assert!(!plain.stdout.contains("hunter2"), "{}", plain.stdout);
    let human = h.cli(&["resource", "job", "show", &job]);
    assert!(!human.stdout.contains("hunter2"), "{}", human.stdout);
    let asked = h.json(&["resource", "job", "show", &job, "--env"]);
    assert_eq!(asked["environment"]["SECRET_TOKEN"], "hunter2", "{asked:#}");
    let human = h.cli(&["resource", "job", "show", &job, "--env"]);
    assert!(
        human.stdout.contains("SECRET_TOKEN=hunter2"),
        "{}",
        human.stdout
    );
}
