//! Runs as a user sees them through the CLI: the variables a step gets, steps that share the
//! checkpoint directory, how a run's end moves its job, lanes that run jobs side by side,
//! runs that survive a killed daemon, a lost worker, cancel of active work, and `task log`.
//!
//! Workloads are tiny shell scripts. Anything a test must observe while a run is executing
//! waits on a gate file the test creates, so no test depends on how fast the machine is, and
//! every loop is bounded so a failed test never leaves work behind for long.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::jobs::*;
use crate::common::{is_uuid, wait_until, Probe, Spec, TestHome};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A spec with one `sh -c` step per script, each getting the `args`.
fn steps_spec(h: &TestHome, name: &str, scripts: &[&str], args: &[&Path]) -> Spec {
    let steps: Vec<Value> = scripts
        .iter()
        .map(|script| {
            let mut argv = vec![json!("/bin/sh"), json!("-c"), json!(script), json!("sh")];
            argv.extend(args.iter().map(|p| json!(p)));
            json!({"type": "task", "command": argv})
        })
        .collect();
    h.spec(name)
        .set("workload", Value::Null)
        .set("steps", json!(steps))
}

/// The `KEY=VALUE` lines of a log (an `env` dump).
fn env_of(log: &str) -> BTreeMap<String, String> {
    log.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The resource entry named `name` in `resource list`.
fn lane(h: &TestHome, name: &str) -> Value {
    h.resources()
        .into_iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no resource {name}"))
}

fn run_dir(h: &TestHome, task: &str) -> PathBuf {
    h.home().join("tasks").join(task)
}

fn worker_json(h: &TestHome, task: &str) -> Value {
    let text = std::fs::read_to_string(run_dir(h, task).join("worker.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Waits until the worker recorded its spawned child; returns `(pid, start_ticks)` of it.
fn workload_process(h: &TestHome, task: &str) -> (i32, u64) {
    let path = run_dir(h, task).join("worker.json");
    wait_until("worker.json to record the workload", || {
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["child"]["process"]["pid"].is_u64())
    });
    let child = &worker_json(h, task)["child"]["process"];
    (
        i32::try_from(child["pid"].as_u64().unwrap()).unwrap(),
        child["start_ticks"].as_u64().unwrap(),
    )
}

/// Whether `(pid, start_ticks)` is still a live process (a zombie or a reused pid is not).
fn alive(pid: i32, start_ticks: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first().copied().unwrap_or("X");
    // Field 22 of stat is the start time; `rest` begins at field 3.
    let start = fields.get(19).and_then(|s| s.parse::<u64>().ok());
    !matches!(state, "Z" | "X") && start == Some(start_ticks)
}

#[test]
fn step_sees_exactly_its_run_variables() {
    let mut h = TestHome::new(Probe::Gpus(2));
    // Inherited copies in the daemon's environment must never reach a workload.
    h.set_env("HOMEBASED_TASK_ID", uuid::Uuid::new_v4().to_string());
    h.set_env("HOMEBASED_JOB_ID", "inherited-job");
    h.set_env("HOMEBASED_RESUME", "1");
    // The daemon's own allocation (both cards): a run still sees only its lane's.
    h.set_env("CUDA_VISIBLE_DEVICES", "0,1");
    h.start_daemon();
    for var in [
        "HOMEBASED_TASK_ID",
        "HOMEBASED_JOB_ID",
        "HOMEBASED_RESUME",
        "CUDA_VISIBLE_DEVICES",
    ] {
        h.unset_env(var);
    }

    let spec = h
        .spec("env dump")
        .command(&["/bin/sh", "-c", "env"])
        .set("resource", json!("gpu1"));
    let job = h.submit(&spec);
    let done = wait_job(&h, &job, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 1, "{done:#}");
    let run = &history[0];
    let task = run["task"].as_str().unwrap();
    let gpu1 = lane(&h, "gpu1");
    assert_eq!(run["resource"], gpu1["id"], "{done:#}");

    let env = env_of(&task_log(&h, task));
    let home = h.home();
    let expected: BTreeMap<String, String> = [
        ("HOMEBASED_TASK_ID", task.to_string()),
        ("HOMEBASED_JOB_ID", job.clone()),
        (
            "HOMEBASED_JOB_DIR",
            home.join("jobs")
                .join(&job)
                .join("state")
                .display()
                .to_string(),
        ),
        ("HOMEBASED_RUN_NUMBER", run["run_number"].to_string()),
        ("HOMEBASED_STEP_INDEX", run["step"].to_string()),
        ("HOMEBASED_RESUME", "0".to_string()),
        (
            "HOMEBASED_YIELD_FILE",
            run_dir(&h, task)
                .join("control/yield")
                .display()
                .to_string(),
        ),
        (
            "HOMEBASED_RESOURCE",
            gpu1["name"].as_str().unwrap().to_string(),
        ),
        ("HOMEBASED_HOME", home.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let seen: BTreeMap<String, String> = env
        .iter()
        .filter(|(k, _)| k.starts_with("HOMEBASED_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(
        seen, expected,
        "the run variables, and no other HOMEBASED_*"
    );
    assert_eq!(run["run_number"], 1);
    assert_eq!(run["step"], 0);
    assert_eq!(
        env.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
        Some(gpu1["device"].to_string().as_str()),
        "the lane's device index, not the daemon's inherited value"
    );
    assert_eq!(gpu1["device"], 1);
    assert_eq!(
        env.get("HOME").map(PathBuf::from),
        Some(h.tmp().join("user")),
        "the submitter's HOME"
    );
    assert_eq!(
        env.get("PATH"),
        std::env::var("PATH").ok().as_ref(),
        "the submitter's PATH"
    );
}

/// A run on an unindexed lane gets no device of its own: it sees what the daemon was given
/// (its `CUDA_VISIBLE_DEVICES`, inside an allocation), never every GPU of the machine, and
/// nothing of the submitter's; without a value in the daemon's environment, none.
#[test]
fn unindexed_lane_gives_the_daemons_cuda_visible_devices_or_none() {
    for daemons in [Some("3"), None] {
        let mut h = TestHome::new(Probe::Missing);
        if let Some(value) = daemons {
            h.set_env("CUDA_VISIBLE_DEVICES", value);
        }
        h.start_daemon();
        // The submitting CLI's own value is scrubbed.
        h.set_env("CUDA_VISIBLE_DEVICES", "5");
        let gpu0 = lane(&h, "gpu0");
        assert_eq!(gpu0["device"], Value::Null, "{gpu0}");
        assert_eq!(gpu0["origin"], "fallback", "{gpu0}");

        let job = h.submit(&h.spec("env dump").command(&["/bin/sh", "-c", "env"]));
        let done = wait_job(&h, &job, "succeeded");
        let task = runs(&done)[0]["task"].as_str().unwrap().to_string();
        let env = env_of(&task_log(&h, &task));
        assert_eq!(
            env.get("HOMEBASED_RESOURCE").map(String::as_str),
            Some("gpu0")
        );
        assert_eq!(
            env.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
            daemons,
            "{env:?}"
        );
    }
}

#[test]
fn steps_pass_data_through_the_private_checkpoint_directory() {
    let h = home_with_gpus(1);
    let spec = steps_spec(
        &h,
        "two steps",
        &[
            "echo prepared-by-$HOMEBASED_TASK_ID > \"$HOMEBASED_JOB_DIR/data\"",
            "echo \"step=$HOMEBASED_STEP_INDEX run=$HOMEBASED_RUN_NUMBER read=$(cat \"$HOMEBASED_JOB_DIR/data\")\"",
        ],
        &[],
    );
    let job = h.submit(&spec);
    wait_job(&h, &job, "succeeded");
    // The outcome comes with the exit; cleanup is recorded once the lane is idle again.
    wait_all_idle(&h);
    let done = show(&h, &job);
    let gpu0 = lane(&h, "gpu0");

    let history = runs(&done);
    assert_eq!(history.len(), 2, "one run per step: {done:#}");
    for (i, run) in history.iter().enumerate() {
        assert!(is_uuid(&run["task"]), "{run}");
        assert_eq!(run["step"], i, "{run}");
        assert_eq!(run["run_number"], i + 1, "{run}");
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["resource"], gpu0["id"], "{run}");
        assert_eq!(run["stop_cause"], Value::Null, "{run}");
        assert_eq!(run["process"], json!({"kind": "exit", "code": 0}), "{run}");
        assert_eq!(run["cleanup"]["result"], "clean", "{run}");
        let (started, ended) = (
            run["started_at"].as_str().unwrap(),
            run["ended_at"].as_str().unwrap(),
        );
        assert!(started <= ended, "{run}");
    }
    assert_ne!(history[0]["task"], history[1]["task"]);
    assert!(
        history[0]["ended_at"].as_str() <= history[1]["started_at"].as_str(),
        "steps run in order: {done:#}"
    );
    assert_eq!(event_names(&done), ["JOB_SUCCEEDED"], "{done:#}");
    assert_eq!(done["last_stop_cause"], Value::Null);

    let first = history[0]["task"].as_str().unwrap();
    let second = history[1]["task"].as_str().unwrap();
    assert_eq!(
        task_log(&h, second),
        format!("step=1 run=2 read=prepared-by-{first}\n")
    );
    let state = h.home().join("jobs").join(&job).join("state");
    let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the checkpoint directory is private");
}

#[test]
fn failing_step_fails_the_job_and_later_steps_never_run() {
    let h = home_with_gpus(1);
    let witness = h.tmp().join("third-step-ran");
    let spec = steps_spec(
        &h,
        "fails in the middle",
        &["echo first", "echo second; exit 3", "touch \"$1\""],
        &[&witness],
    );
    let job = h.submit(&spec);
    let failed = wait_job(&h, &job, "failed");
    wait_all_idle(&h);
    let after = show(&h, &job);
    assert_eq!(state_of(&after), "failed");

    let history = runs(&after);
    assert_eq!(history.len(), 2, "the third step never ran: {after:#}");
    assert_eq!(history[0]["status"], "succeeded");
    assert_eq!(history[1]["status"], "failed");
    assert_eq!(history[1]["step"], 1);
    assert_eq!(history[1]["process"], json!({"kind": "exit", "code": 3}));
    assert_eq!(
        after["state"]["run"], history[1]["task"],
        "the failed job names its failed run: {after:#}"
    );
    assert_eq!(event_names(&after), ["JOB_FAILED"], "{after:#}");
    let event = &after["events"][0];
    assert_eq!(event["task"], history[1]["task"], "{event}");
    assert_eq!(event["step"], 1, "{event}");
    assert_eq!(
        event["process"],
        json!({"kind": "exit", "code": 3}),
        "{event}"
    );
    assert!(!witness.exists(), "the third step never ran");
    assert_eq!(runs(&failed).len(), 2);
}

#[test]
fn exit_75_without_a_yield_request_fails() {
    let h = home_with_gpus(1);
    let spec = h
        .spec("exits 75 unasked")
        .set("preempt", json!({"mode": "yield"}))
        .command(&["/bin/sh", "-c", "exit 75"]);
    let job = h.submit(&spec);
    let failed = wait_job(&h, &job, "failed");
    let history = runs(&failed);
    assert_eq!(history.len(), 1, "{failed:#}");
    assert_eq!(history[0]["status"], "failed");
    assert_eq!(history[0]["stop_cause"], Value::Null);
    assert_eq!(history[0]["process"], json!({"kind": "exit", "code": 75}));
    assert_eq!(failed["state"]["run"], history[0]["task"]);
    assert_eq!(
        event_names(&failed),
        ["JOB_FAILED"],
        "no preemption: {failed:#}"
    );
}

#[test]
fn three_jobs_on_two_lanes_all_succeed_never_more_than_two_at_once() {
    let h = home_with_gpus(2);
    let timeline = h.tmp().join("timeline");
    let gate = h.tmp().join("gate");
    // `$1` is the shared timeline, `$2` the gate.
    let script = format!(
        "echo \"start $(date +%s.%N) $HOMEBASED_JOB_ID\" >> \"$1\"; {}; \
         echo \"end $(date +%s.%N) $HOMEBASED_JOB_ID\" >> \"$1\"",
        wait_for_gate(2)
    );
    let jobs: Vec<String> = (0..3)
        .map(|i| {
            h.submit(&sh_spec(
                &h,
                &format!("job {i}"),
                &script,
                &[&timeline, &gate],
            ))
        })
        .collect();

    let starts = || -> usize {
        std::fs::read_to_string(&timeline)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("start "))
            .count()
    };
    wait_until("two jobs to start", || starts() == 2);
    wait_until("both lanes to be executing", || {
        h.resources()
            .iter()
            .all(|r| r["run"]["phase"]["phase"] == "executing")
    });
    let third = wait_job(&h, &jobs[2], "queued");
    assert_eq!(runs(&third).len(), 0, "the third job waits for a lane");
    open_gate(&gate);
    for job in &jobs {
        let done = wait_job(&h, job, "succeeded");
        assert_eq!(runs(&done).len(), 1, "{done:#}");
    }

    let text = std::fs::read_to_string(&timeline).unwrap();
    let mut running = 0i32;
    let mut most = 0;
    for line in text.lines() {
        match line.split(' ').next() {
            Some("start") => running += 1,
            Some("end") => running -= 1,
            other => panic!("unexpected timeline line {other:?}"),
        }
        most = most.max(running);
    }
    assert_eq!(text.lines().count(), 6, "{text}");
    assert_eq!(most, 2, "never more than two at once:\n{text}");
}

#[test]
fn pinned_job_waits_while_an_any_job_uses_the_other_lane() {
    let h = home_with_gpus(2);
    let gate_a = h.tmp().join("gate-a");
    let gate_c = h.tmp().join("gate-c");
    let a = h.submit(
        &gated_spec(&h, "holds gpu0", "echo started", &gate_a, "echo finished")
            .set("resource", json!("gpu0")),
    );
    wait_phase(&h, &a, "executing");
    let b = h.submit(
        &h.spec("pinned to gpu0")
            .command(&["/bin/sh", "-c", "echo pinned"])
            .set("resource", json!("gpu0")),
    );
    let c = h.submit(&gated_spec(
        &h,
        "any lane",
        "echo started",
        &gate_c,
        "echo finished",
    ));
    let on = wait_phase(&h, &c, "executing");
    let (gpu0, gpu1) = (lane(&h, "gpu0"), lane(&h, "gpu1"));
    assert_eq!(on["id"], gpu1["id"], "the any job takes the free lane");
    assert_eq!(gpu0["run"]["job"], a.as_str());

    let queue = h.json(&["resource", "jobs"]);
    let pinned = queue["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == b.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        pinned["state"],
        json!({"state": "queued", "resume": false}),
        "{queue:#}"
    );
    assert_eq!(pinned["target"], gpu0["id"], "{pinned}");
    assert_eq!(pinned["runs"], 0, "{pinned}");
    let any = &queue["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == c.as_str())
        .unwrap()["target"];
    assert_eq!(any, "any");

    open_gate(&gate_a);
    let done = wait_job(&h, &b, "succeeded");
    assert_eq!(runs(&done)[0]["resource"], gpu0["id"], "{done:#}");
    assert_eq!(
        state_of(&show(&h, &c)),
        "active",
        "the any job kept running"
    );
    open_gate(&gate_c);
    wait_job(&h, &c, "succeeded");
    wait_job(&h, &a, "succeeded");
}

#[test]
fn resource_list_and_job_show_name_the_executing_run() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("gate");
    let job = h.submit(&gated_spec(
        &h,
        "observed",
        "echo started",
        &gate,
        "echo finished",
    ));
    let entry = wait_phase(&h, &job, "executing");
    let active = show(&h, &job);
    let task = active["active_run"].clone();
    assert!(is_uuid(&task), "{active:#}");
    let run = &entry["run"];
    assert_eq!(run["task"], task, "{entry}");
    assert_eq!(run["run_number"], 1, "{entry}");
    assert_eq!(run["step"], 0, "{entry}");
    assert_eq!(run["resume"], false, "{entry}");
    assert!(run["phase"]["started_at"].is_string(), "{entry}");
    assert_eq!(
        active["state"],
        json!({"state": "active", "resource": entry["id"], "resources": [entry["id"]]}),
        "{active:#}"
    );
    let history = runs(&active);
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["task"], task);
    assert_eq!(history[0]["status"], "running");
    assert_eq!(history[0]["ended_at"], Value::Null);
    let queue = h.json(&["resource", "jobs"]);
    assert_eq!(queue["jobs"][0]["state"]["state"], "active", "{queue}");
    assert_eq!(queue["jobs"][0]["runs"], 1, "{queue}");

    let human = h.cli(&["resource", "list"]);
    let line = human
        .stdout
        .lines()
        .find(|l| l.contains("gpu0"))
        .unwrap_or_default();
    assert!(
        line.contains("executing") && line.contains(task.as_str().unwrap()),
        "{}",
        human.stdout
    );

    open_gate(&gate);
    let done = wait_job(&h, &job, "succeeded");
    assert_eq!(done["active_run"], Value::Null);
    assert_eq!(task_log(&h, task.as_str().unwrap()), "started\nfinished\n");
}

#[test]
fn run_survives_a_killed_daemon_and_the_job_succeeds_with_one_run() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.spawn_serve();
    let gate = h.tmp().join("gate");
    let job = h.submit(&gated_spec(
        &h,
        "outlives the daemon",
        "echo started",
        &gate,
        "echo finished",
    ));
    wait_phase(&h, &job, "executing");
    let task = show(&h, &job)["active_run"].as_str().unwrap().to_string();
    let (pid, ticks) = workload_process(&h, &task);

    h.kill_serve(Signal::SIGKILL);
    assert_eq!(h.json(&["daemon", "status"])["socket"], "down");
    assert!(
        alive(pid, ticks),
        "the workload does not depend on the daemon"
    );
    // task log reads the files while the daemon is down.
    assert_eq!(task_log(&h, &task), "started\n");

    h.spawn_serve();
    wait_phase(&h, &job, "executing");
    open_gate(&gate);
    let done = wait_job(&h, &job, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 1, "the run was never repeated: {done:#}");
    assert_eq!(history[0]["task"], task.as_str());
    assert_eq!(history[0]["status"], "succeeded");
    assert_eq!(history[0]["process"], json!({"kind": "exit", "code": 0}));
    assert_eq!(event_names(&done), ["JOB_SUCCEEDED"]);
    assert_eq!(task_log(&h, &task), "started\nfinished\n");
    wait_all_idle(&h);
}

#[test]
fn run_that_ended_while_the_daemon_was_down_is_applied_at_restart() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.spawn_serve();
    let gate = h.tmp().join("gate");
    let job = h.submit(&gated_spec(
        &h,
        "ends while the daemon is down",
        "echo started",
        &gate,
        "echo finished",
    ));
    wait_phase(&h, &job, "executing");
    let task = show(&h, &job)["active_run"].as_str().unwrap().to_string();

    h.kill_serve(Signal::SIGKILL);
    open_gate(&gate);
    let dir = run_dir(&h, &task);
    wait_until("the worker to record the exit and clean up", || {
        dir.join("exit.json").exists() && dir.join("cleanup.json").exists()
    });

    h.spawn_serve();
    wait_job(&h, &job, "succeeded");
    wait_all_idle(&h);
    let done = show(&h, &job);
    let history = runs(&done);
    assert_eq!(history.len(), 1, "{done:#}");
    assert_eq!(history[0]["status"], "succeeded");
    assert_eq!(history[0]["cleanup"]["result"], "clean", "{done:#}");
    assert_eq!(event_names(&done), ["JOB_SUCCEEDED"]);
}

#[test]
fn killed_worker_makes_the_run_lost_and_the_job_failed() {
    let h = home_with_gpus(1);
    let job =
        h.submit(
            &h.spec("loses its worker")
                .command(&["/bin/sh", "-c", "echo started; sleep 60"]),
        );
    wait_phase(&h, &job, "executing");
    let task = show(&h, &job)["active_run"].as_str().unwrap().to_string();
    let (child, child_ticks) = workload_process(&h, &task);
    let worker = worker_json(&h, &task)["worker"]["pid"].as_u64().unwrap();
    kill(
        Pid::from_raw(i32::try_from(worker).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();

    let failed = wait_job(&h, &job, "failed");
    let history = runs(&failed);
    assert_eq!(history.len(), 1, "{failed:#}");
    assert_eq!(history[0]["status"], "lost", "{failed:#}");
    assert_eq!(failed["state"]["run"], task.as_str(), "{failed:#}");
    assert_eq!(event_names(&failed), ["JOB_FAILED"], "{failed:#}");
    wait_until("the lost run's workload to be gone", || {
        !alive(child, child_ticks)
    });
    wait_all_idle(&h);
    let after = show(&h, &job);
    assert_eq!(runs(&after)[0]["cleanup"]["result"], "clean", "{after:#}");
}

#[test]
fn cancel_of_an_active_job_stops_its_workload() {
    let h = home_with_gpus(1);
    let job = h.submit(&h.spec("cancelled while running").command(&[
        "/bin/sh",
        "-c",
        "echo started; sleep 60",
    ]));
    let entry = wait_phase(&h, &job, "executing");
    let task = entry["run"]["task"].as_str().unwrap().to_string();
    let (pid, ticks) = workload_process(&h, &task);

    let answer = h.json(&["resource", "job", "cancel", &job]);
    assert_eq!(
        answer,
        json!({"api_version": 1, "result": "stopping", "resource": entry["id"], "task": task}),
    );
    let cancelled = wait_job(&h, &job, "cancelled");
    let history = runs(&cancelled);
    assert_eq!(history.len(), 1, "{cancelled:#}");
    assert_eq!(history[0]["status"], "cancelled", "{cancelled:#}");
    assert_eq!(history[0]["stop_cause"], "user_cancel", "{cancelled:#}");
    assert_eq!(
        history[0]["process"],
        json!({"kind": "cancelled"}),
        "{cancelled:#}"
    );
    assert_eq!(cancelled["last_stop_cause"], "user_cancel");
    assert_eq!(event_names(&cancelled), ["JOB_CANCELLED"], "{cancelled:#}");
    wait_until("the cancelled workload to be gone", || !alive(pid, ticks));
    wait_all_idle(&h);
    assert_eq!(
        runs(&show(&h, &job))[0]["cleanup"]["result"],
        "clean",
        "cleanup finished"
    );

    let again = h.json(&["resource", "job", "cancel", &job]);
    assert_eq!(again["result"], "already_terminal", "{again}");
    assert_eq!(again["state"], "cancelled", "{again}");
}

/// A workload that catches SIGTERM, saves and exits 0 (a common training-script pattern) was
/// stopped by the cancel, not finished: automation must never take it for a success.
#[test]
fn cancel_of_a_workload_that_saves_and_exits_zero_on_term_cancels_the_job() {
    let h = home_with_gpus(1);
    let job = h.submit(&h.spec("saves on TERM").command(&[
        "/bin/sh",
        "-c",
        "trap 'echo saved; exit 0' TERM; echo ready; i=0; \
         while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
    ]));
    let entry = wait_phase(&h, &job, "executing");
    let task = entry["run"]["task"].as_str().unwrap().to_string();
    wait_until("the TERM trap to be set", || {
        task_log(&h, &task).contains("ready")
    });

    h.json(&["resource", "job", "cancel", &job]);
    let cancelled = wait_job(&h, &job, "cancelled");
    let history = runs(&cancelled);
    assert_eq!(history.len(), 1, "{cancelled:#}");
    assert_eq!(history[0]["status"], "cancelled", "{cancelled:#}");
    assert_eq!(history[0]["stop_cause"], "user_cancel", "{cancelled:#}");
    assert_eq!(
        history[0]["process"],
        json!({"kind": "cancelled"}),
        "{cancelled:#}"
    );
    assert_eq!(event_names(&cancelled), ["JOB_CANCELLED"], "{cancelled:#}");
    assert!(
        task_log(&h, &task).contains("saved"),
        "the workload got its TERM and saved"
    );
    wait_all_idle(&h);
}

#[test]
fn task_log_tail_keeps_the_last_lines_and_works_with_the_daemon_down() {
    let mut h = home_with_gpus(1);
    let job = h.submit(&h.spec("fifty lines").command(&["seq", "1", "50"]));
    let done = wait_job(&h, &job, "succeeded");
    let task = runs(&done)[0]["task"].as_str().unwrap().to_string();
    let all: String = (1..=50).map(|i| format!("{i}\n")).collect();

    let check = |h: &TestHome| {
        let tail = h.json(&["task", "log", &task, "--tail", "5"]);
        assert_eq!(
            tail,
            json!({"api_version": 1, "task": task, "log": "46\n47\n48\n49\n50\n", "truncated": true})
        );
        let whole = h.json(&["task", "log", &task, "--tail", "100"]);
        assert_eq!(whole["log"], all.as_str());
        assert_eq!(whole["truncated"], false);
        let plain = h.json(&["task", "log", &task]);
        assert_eq!(plain["log"], all.as_str());
        assert_eq!(plain["truncated"], false);
        let human = h.cli(&["task", "log", &task, "--tail", "2"]);
        assert_eq!(human.code(), 0, "{human:?}");
        assert_eq!(human.stdout, "49\n50\n");
        let missing = h.json_err(&["task", "log", &common::new_uuid()], 3);
        assert_eq!(missing["code"], "task_not_found", "{missing}");
    };
    check(&h);
    h.stop_daemon();
    check(&h);
}
