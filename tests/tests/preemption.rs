//! Preemption as a user sees it on one and two fake lanes: a yield that checkpoints and
//! resumes from the saved unit, restart, wait, `restart_within`, equal levels and moves that
//! never preempt, two urgent jobs taking two lanes at once, and a pending yield that survives
//! a killed daemon.
//!
//! The low workload counts units into `$HOMEBASED_JOB_DIR/counter` (written beside, then
//! renamed). It honours the yield file only once the test creates a "let yield" file, so the
//! test can watch the `stopping` phase for as long as it needs, and it stops counting when
//! the test creates a "finish" file. Urgent workloads wait on a gate. Every loop is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::jobs::*;
use crate::common::{wait_until, Probe, Spec, TestHome};
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The checkpointing workload: `$1` lets it honour the yield file, `$2` makes it finish.
/// It logs `run=N resume=R from=K` at start, `yield at K` when it yields, `done at K`.
const COUNTER: &str = r#"
state="$HOMEBASED_JOB_DIR/counter"
n=0
if [ "$HOMEBASED_RESUME" = 1 ] && [ -f "$state" ]; then n=$(cat "$state"); fi
echo "run=$HOMEBASED_RUN_NUMBER resume=$HOMEBASED_RESUME from=$n"
trap 'echo "got TERM at $n"; exit 143' TERM
i=0
while [ ! -e "$2" ] && [ $i -lt 600 ]; do
  i=$((i+1))
  n=$((n+1))
  sleep 0.2
  echo "$n" > "$state.tmp" && mv "$state.tmp" "$state"
  if [ -e "$1" ] && [ -e "$HOMEBASED_YIELD_FILE" ]; then echo "yield at $n"; exit 75; fi
done
echo "done at $n"
"#;

/// Files one counting job is steered with.
struct Counter {
    let_yield: PathBuf,
    finish: PathBuf,
}

impl Counter {
    fn new(h: &TestHome, name: &str) -> Counter {
        Counter {
            let_yield: h.tmp().join(format!("{name}-let-yield")),
            finish: h.tmp().join(format!("{name}-finish")),
        }
    }

    /// A low-priority counting job in `preempt`.
    fn spec(&self, h: &TestHome, name: &str, preempt: Value) -> Spec {
        h.spec(name)
            .priority("low")
            .set("preempt", preempt)
            .command(&[
                "/bin/sh",
                "-c",
                COUNTER,
                "sh",
                self.let_yield.to_str().unwrap(),
                self.finish.to_str().unwrap(),
            ])
    }
}

fn task_of(run: &Value) -> String {
    run["task"].as_str().unwrap().to_string()
}

/// The job's saved unit count, 0 before the first checkpoint.
fn counter(h: &TestHome, job: &str) -> u64 {
    let path = h.home().join("jobs").join(job).join("state/counter");
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// The number `K` in the log line `<prefix>K`.
fn logged_number(log: &str, prefix: &str) -> u64 {
    log.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in {log:?}"))
        .trim()
        .parse()
        .unwrap()
}

/// Checks that `job`'s run keeps executing untouched and `waiting` stays queued. A wrong
/// preemption is committed by the pass that follows a submit or move: once the daemon has
/// settled, that pass has run, so one look catches it; the final `job show` checks that no
/// stop was ever recorded.
fn keeps_running(h: &TestHome, job: &str, waiting: &str) {
    h.settle();
    let holder = h
        .resources()
        .into_iter()
        .find(|r| r["run"]["job"] == job)
        .unwrap_or_else(|| panic!("job {job} lost its lane"));
    assert_eq!(
        holder["run"]["phase"]["phase"], "executing",
        "no stop for {job}: {holder}"
    );
    assert_eq!(state_of(&show(h, waiting)), "queued", "{waiting} waits");
}

/// Asserts that a finished job ran once, never asked to stop.
fn never_stopped(show: &Value) {
    let history = runs(show);
    assert_eq!(history.len(), 1, "{show:#}");
    assert_eq!(history[0]["stop_cause"], Value::Null, "{show:#}");
    assert_eq!(show["last_stop_cause"], Value::Null, "{show:#}");
    assert_eq!(event_names(show), ["JOB_SUCCEEDED"], "{show:#}");
}

/// Asserts that the run `first` ended no later than the run `then` started.
fn ran_after(first: &Value, then: &Value) {
    let (ended, started) = (
        first["ended_at"].as_str().unwrap(),
        then["started_at"].as_str().unwrap(),
    );
    assert!(ended <= started, "{then} started before {first} ended");
}

/// Waits until the counting job saved at least `units`.
fn wait_units(h: &TestHome, job: &str, units: u64) {
    wait_until(&format!("job {job} to save {units} units"), || {
        counter(h, job) >= units
    });
}

/// The second half of every yield test: the urgent job is running, the low job is queued to
/// resume; then the urgent job ends and the low job resumes from its checkpoint and succeeds.
fn urgent_then_resume(h: &TestHome, low: &str, first_task: &str, steer: &Counter, gate: &Path) {
    let queued = wait_job(h, low, "queued");
    assert_eq!(
        queued["state"],
        json!({"state": "queued", "resume": true}),
        "{queued:#}"
    );
    assert_eq!(queued["position"], 1, "the yielded job keeps its slot");
    let first = &runs(&queued)[0];
    assert_eq!(first["status"], "preempted", "{queued:#}");
    assert_eq!(first["stop_cause"], "yield", "{queued:#}");
    assert_eq!(first["process"], json!({"kind": "exit", "code": 75}));
    assert_eq!(queued["last_stop_cause"], "yield");
    assert_eq!(event_names(&queued), ["JOB_PREEMPTED"], "{queued:#}");
    let event = &queued["events"][0];
    assert_eq!(event["task"], first_task, "{event}");
    assert_eq!(event["run_number"], 1, "{event}");
    assert_eq!(event["step"], 0, "{event}");
    let saved = logged_number(&task_log(h, first_task), "yield at ");

    open_gate(gate);
    wait_phase(h, low, "executing");
    wait_units(h, low, saved + 2);
    open_gate(&steer.finish);
    let done = wait_job(h, low, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 2, "{done:#}");
    let second = &history[1];
    let second_task = task_of(second);
    assert_ne!(second_task, first_task, "a new task UUID per attempt");
    assert_eq!(second["run_number"], 2);
    assert_eq!(second["step"], 0, "the same step again");
    assert_eq!(second["resume"], true, "{second}");
    assert_eq!(second["status"], "succeeded");
    assert_eq!(second["stop_cause"], Value::Null);
    let log = task_log(h, &second_task);
    assert!(
        log.starts_with(&format!("run=2 resume=1 from={saved}\n")),
        "the resumed attempt continues from unit {saved}: {log:?}"
    );
    assert!(logged_number(&log, "done at ") > saved, "{log:?}");
    assert_eq!(done["last_stop_cause"], "yield", "{done:#}");
    assert_eq!(event_names(&done), ["JOB_PREEMPTED", "JOB_SUCCEEDED"]);
}

#[test]
fn yield_checkpoints_and_resumes_from_the_saved_unit() {
    let h = home_with_gpus(1);
    let steer = Counter::new(&h, "low");
    let low = h.submit(&steer.spec(&h, "low counter", json!({"mode": "yield"})));
    wait_phase(&h, &low, "executing");
    wait_units(&h, &low, 2);
    let first_task = show(&h, &low)["active_run"].as_str().unwrap().to_string();
    let first_log = task_log(&h, &first_task);
    assert!(
        first_log.starts_with("run=1 resume=0 from=0\n"),
        "{first_log:?}"
    );

    // A later job of the same level: the preempted job keeps its slot ahead of it.
    let later = h.submit(&h.spec("later low").priority("low").command(&["true"]));
    let gate = h.tmp().join("urgent-gate");
    let urgent = h.submit(&gated_spec(&h, "urgent", "echo urgent", &gate, "").priority("high"));
    let stopping = wait_phase(&h, &low, "stopping");
    let phase = &stopping["run"]["phase"];
    assert_eq!(phase["cause"], "yield", "{stopping}");
    assert!(phase["requested_at"].is_string(), "{stopping}");
    assert!(phase["started_at"].is_string(), "{stopping}");
    assert_eq!(stopping["run"]["task"], first_task.as_str());
    let yield_file = h
        .home()
        .join("tasks")
        .join(&first_task)
        .join("control/yield");
    assert!(yield_file.exists(), "the yield request is the file");
    let human = h.cli(&["resource", "list"]).stdout;
    let line = human.lines().find(|l| l.contains("gpu0")).unwrap();
    assert!(
        line.contains("stopping") && line.contains(&format!("{first_task} / ")),
        "the human list shows the yield age: {human}"
    );
    let waiting = show(&h, &urgent);
    assert_eq!(state_of(&waiting), "queued", "{waiting:#}");
    let during = show(&h, &low);
    assert_eq!(runs(&during)[0]["stop_cause"], "yield", "{during:#}");
    assert_eq!(runs(&during)[0]["status"], "running", "{during:#}");

    open_gate(&steer.let_yield);
    wait_phase(&h, &urgent, "executing");
    urgent_then_resume(&h, &low, &first_task, &steer, &gate);
    let urgent_done = wait_job(&h, &urgent, "succeeded");
    never_stopped(&urgent_done);
    let low_done = show(&h, &low);
    ran_after(&runs(&low_done)[0], &runs(&urgent_done)[0]);
    ran_after(&runs(&urgent_done)[0], &runs(&low_done)[1]);
    let later_done = wait_job(&h, &later, "succeeded");
    ran_after(&runs(&low_done)[1], &runs(&later_done)[0]);
}

#[test]
fn exit_0_while_a_yield_is_pending_completes_the_step() {
    let h = home_with_gpus(1);
    let steer = Counter::new(&h, "low");
    let low = h.submit(&steer.spec(&h, "finishes instead", json!({"mode": "yield"})));
    wait_phase(&h, &low, "executing");
    let urgent = h.submit(&h.spec("urgent").priority("high").command(&["true"]));
    wait_phase(&h, &low, "stopping");
    open_gate(&steer.finish);
    let done = wait_job(&h, &low, "succeeded");
    let history = runs(&done);
    assert_eq!(
        history.len(),
        1,
        "finished work is never repeated: {done:#}"
    );
    assert_eq!(history[0]["status"], "succeeded");
    assert_eq!(history[0]["stop_cause"], "yield");
    assert_eq!(history[0]["process"], json!({"kind": "exit", "code": 0}));
    assert_eq!(event_names(&done), ["JOB_SUCCEEDED"], "{done:#}");
    wait_job(&h, &urgent, "succeeded");
}

#[test]
fn restart_stops_the_run_and_reruns_the_step_from_the_start() {
    let h = home_with_gpus(1);
    let steer = Counter::new(&h, "low");
    open_gate(&steer.let_yield);
    let low = h.submit(&steer.spec(&h, "restartable", json!({"mode": "restart"})));
    wait_phase(&h, &low, "executing");
    wait_units(&h, &low, 2);
    let first_task = show(&h, &low)["active_run"].as_str().unwrap().to_string();

    let gate = h.tmp().join("urgent-gate");
    let urgent = h.submit(&gated_spec(&h, "urgent", "echo urgent", &gate, "").priority("high"));
    wait_phase(&h, &urgent, "executing");
    let queued = wait_job(&h, &low, "queued");
    assert_eq!(
        queued["state"],
        json!({"state": "queued", "resume": false}),
        "{queued:#}"
    );
    let first = &runs(&queued)[0];
    assert_eq!(first["status"], "preempted", "{queued:#}");
    assert_eq!(first["stop_cause"], "restart", "{queued:#}");
    assert_eq!(first["process"], json!({"kind": "cancelled"}), "{queued:#}");
    assert_eq!(queued["last_stop_cause"], "restart");
    assert_eq!(event_names(&queued), ["JOB_PREEMPTED"], "{queued:#}");
    let first_log = task_log(&h, &first_task);
    assert!(
        first_log.contains("got TERM at "),
        "stopped by SIGTERM: {first_log:?}"
    );
    assert!(
        !first_log.contains("yield at "),
        "restart writes no yield request"
    );

    open_gate(&gate);
    wait_phase(&h, &low, "executing");
    open_gate(&steer.finish);
    let done = wait_job(&h, &low, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 2, "{done:#}");
    assert_eq!(history[1]["run_number"], 2);
    assert_eq!(history[1]["step"], 0);
    assert_eq!(history[1]["resume"], false);
    let log = task_log(&h, &task_of(&history[1]));
    assert!(
        log.starts_with("run=2 resume=0 from=0\n"),
        "a restarted step starts over: {log:?}"
    );
    assert_eq!(event_names(&done), ["JOB_PREEMPTED", "JOB_SUCCEEDED"]);
    let urgent_done = wait_job(&h, &urgent, "succeeded");
    ran_after(&history[0], &runs(&urgent_done)[0]);
}

/// A step that saves on SIGTERM and exits 0 was stopped by the restart, not finished: its job
/// is queued again at that step, never moved on to the next one with half its work done.
#[test]
fn a_step_that_exits_zero_on_term_under_a_restart_is_requeued_at_that_step() {
    let h = home_with_gpus(1);
    let finish = h.tmp().join("finish");
    let first_step = format!(
        "echo \"run=$HOMEBASED_RUN_NUMBER step=$HOMEBASED_STEP_INDEX\"; \
         trap 'echo saved; exit 0' TERM; echo ready; {}",
        wait_for_gate(1)
    );
    let steps = json!([
        {"type": "task", "command": ["/bin/sh", "-c", first_step, "sh", finish]},
        {"type": "task", "command": ["/bin/sh", "-c", "echo \"second step=$HOMEBASED_STEP_INDEX\""]},
    ]);
    let spec = h
        .spec("saves on TERM")
        .priority("low")
        .set("preempt", json!({"mode": "restart"}))
        .set("workload", Value::Null)
        .set("steps", steps);
    let low = h.submit(&spec);
    wait_phase(&h, &low, "executing");
    let first_task = show(&h, &low)["active_run"].as_str().unwrap().to_string();
    wait_until("the TERM trap to be set", || {
        task_log(&h, &first_task).contains("ready")
    });

    let gate = h.tmp().join("urgent-gate");
    let urgent = h.submit(&gated_spec(&h, "urgent", "", &gate, "").priority("high"));
    wait_phase(&h, &urgent, "executing");
    let queued = wait_job(&h, &low, "queued");
    assert_eq!(queued["step"], 0, "still at its first step: {queued:#}");
    assert_eq!(
        queued["state"],
        json!({"state": "queued", "resume": false}),
        "{queued:#}"
    );
    let first = &runs(&queued)[0];
    assert_eq!(first["status"], "preempted", "{queued:#}");
    assert_eq!(first["stop_cause"], "restart", "{queued:#}");
    assert_eq!(first["process"], json!({"kind": "cancelled"}), "{queued:#}");
    assert_eq!(event_names(&queued), ["JOB_PREEMPTED"], "{queued:#}");
    assert!(
        task_log(&h, &first_task).contains("saved"),
        "it got its TERM"
    );

    open_gate(&gate);
    wait_job(&h, &urgent, "succeeded");
    wait_until("the first step to run again", || {
        let s = show(&h, &low);
        runs(&s).len() == 2 && state_of(&s) == "active"
    });
    let again = show(&h, &low);
    assert_eq!(runs(&again)[1]["step"], 0, "{again:#}");
    open_gate(&finish);
    let done = wait_job(&h, &low, "succeeded");
    let history = runs(&done);
    let steps: Vec<&Value> = history.iter().map(|r| &r["step"]).collect();
    assert_eq!(steps, [&json!(0), &json!(0), &json!(1)], "{done:#}");
    assert_eq!(event_names(&done), ["JOB_PREEMPTED", "JOB_SUCCEEDED"]);
}

#[test]
fn wait_mode_keeps_running_while_the_urgent_job_waits() {
    let h = home_with_gpus(1);
    let steer = Counter::new(&h, "low");
    open_gate(&steer.let_yield);
    let low = h.submit(&steer.spec(&h, "not preemptable", json!({"mode": "wait"})));
    wait_phase(&h, &low, "executing");
    let gate = h.tmp().join("urgent-gate");
    open_gate(&gate);
    let urgent = h.submit(&gated_spec(&h, "urgent", "echo urgent", &gate, "").priority("high"));
    keeps_running(&h, &low, &urgent);

    open_gate(&steer.finish);
    let done = wait_job(&h, &low, "succeeded");
    never_stopped(&done);
    let urgent_done = wait_job(&h, &urgent, "succeeded");
    ran_after(&runs(&done)[0], &runs(&urgent_done)[0]);
}

#[test]
fn young_wait_mode_run_inside_restart_within_is_restarted() {
    let h = home_with_gpus(1);
    let steer = Counter::new(&h, "low");
    let low = h.submit(&steer.spec(
        &h,
        "young wait",
        json!({"mode": "wait", "restart_within": "1m"}),
    ));
    wait_phase(&h, &low, "executing");
    let gate = h.tmp().join("urgent-gate");
    let urgent = h.submit(&gated_spec(&h, "urgent", "echo urgent", &gate, "").priority("high"));
    wait_phase(&h, &urgent, "executing");
    let queued = wait_job(&h, &low, "queued");
    let first = &runs(&queued)[0];
    assert_eq!(first["status"], "preempted", "{queued:#}");
    assert_eq!(first["stop_cause"], "restart", "{queued:#}");
    assert_eq!(queued["state"]["resume"], false, "{queued:#}");
    assert_eq!(event_names(&queued), ["JOB_PREEMPTED"]);

    open_gate(&gate);
    wait_phase(&h, &low, "executing");
    open_gate(&steer.finish);
    let done = wait_job(&h, &low, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 2, "{done:#}");
    let log = task_log(&h, &task_of(&history[1]));
    assert!(log.starts_with("run=2 resume=0 from=0\n"), "{log:?}");
}

#[test]
fn young_yield_mode_run_inside_restart_within_is_restarted_not_asked_to_yield() {
    let h = home_with_gpus(1);
    let steer = Counter::new(&h, "low");
    open_gate(&steer.let_yield);
    let low = h.submit(&steer.spec(
        &h,
        "young yield",
        json!({"mode": "yield", "restart_within": "1m"}),
    ));
    wait_phase(&h, &low, "executing");
    let first_task = show(&h, &low)["active_run"].as_str().unwrap().to_string();
    let urgent = h.submit(&h.spec("urgent").priority("high").command(&["true"]));
    wait_job(&h, &urgent, "succeeded");
    wait_phase(&h, &low, "executing");
    open_gate(&steer.finish);
    let done = wait_job(&h, &low, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 2, "{done:#}");
    assert_eq!(history[0]["stop_cause"], "restart", "{done:#}");
    assert_eq!(history[0]["process"], json!({"kind": "cancelled"}));
    assert!(!task_log(&h, &first_task).contains("yield at "));
    assert_eq!(history[1]["resume"], false);
    assert_eq!(done["last_stop_cause"], "restart");
}

#[test]
fn equal_priority_never_preempts() {
    let h = home_with_gpus(1);
    let steer = Counter::new(&h, "first");
    open_gate(&steer.let_yield);
    let first = h.submit(
        &steer
            .spec(&h, "first", json!({"mode": "restart"}))
            .priority("medium"),
    );
    wait_phase(&h, &first, "executing");
    let gate = h.tmp().join("second-gate");
    open_gate(&gate);
    let second = h.submit(&gated_spec(&h, "second", "echo urgent", &gate, "").priority("medium"));
    keeps_running(&h, &first, &second);

    open_gate(&steer.finish);
    let done = wait_job(&h, &first, "succeeded");
    never_stopped(&done);
    let second_done = wait_job(&h, &second, "succeeded");
    ran_after(&runs(&done)[0], &runs(&second_done)[0]);
}

#[test]
fn moving_a_job_to_the_front_of_its_level_does_not_preempt() {
    let h = home_with_gpus(1);
    let steer = Counter::new(&h, "running");
    open_gate(&steer.let_yield);
    let running = h.submit(
        &steer
            .spec(&h, "running", json!({"mode": "restart"}))
            .priority("medium"),
    );
    wait_phase(&h, &running, "executing");
    let gate = h.tmp().join("gate");
    open_gate(&gate);
    let waiting =
        h.submit(&gated_spec(&h, "moved up", "echo urgent", &gate, "").priority("medium"));
    let moved = h.json(&["resource", "job", "move", &waiting, "--front"]);
    assert_eq!(moved["position"], 1, "{moved}");
    assert_eq!(h.queue()[0].0, waiting, "first in serving order");
    keeps_running(&h, &running, &waiting);
    let moved = h.json(&[
        "resource",
        "job",
        "move",
        &waiting,
        "--priority",
        "medium",
        "--front",
    ]);
    assert_eq!(moved["priority"], "medium", "{moved}");
    keeps_running(&h, &running, &waiting);

    open_gate(&steer.finish);
    never_stopped(&wait_job(&h, &running, "succeeded"));
    wait_job(&h, &waiting, "succeeded");
}

#[test]
fn urgent_pinned_job_preempts_only_on_its_own_lane() {
    let h = home_with_gpus(2);
    let old = Counter::new(&h, "old");
    let young = Counter::new(&h, "young");
    open_gate(&old.let_yield);
    open_gate(&young.let_yield);
    let on_gpu0 = h.submit(
        &old.spec(&h, "older, on gpu0", json!({"mode": "restart"}))
            .set("resource", json!("gpu0")),
    );
    wait_phase(&h, &on_gpu0, "executing");
    wait_units(&h, &on_gpu0, 1);
    let on_gpu1 = h.submit(
        &young
            .spec(&h, "younger, on gpu1", json!({"mode": "restart"}))
            .set("resource", json!("gpu1")),
    );
    wait_phase(&h, &on_gpu1, "executing");

    let gate = h.tmp().join("gate");
    let urgent = h.submit(
        &gated_spec(&h, "urgent for gpu0", "echo urgent", &gate, "")
            .priority("high")
            .set("resource", json!("gpu0")),
    );
    let on = wait_phase(&h, &urgent, "executing");
    assert_eq!(on["name"], "gpu0");
    let holder = h
        .resources()
        .into_iter()
        .find(|r| r["name"] == "gpu1")
        .unwrap();
    assert_eq!(holder["run"]["job"], on_gpu1.as_str(), "{holder}");
    assert_eq!(holder["run"]["phase"]["phase"], "executing", "{holder}");

    open_gate(&young.finish);
    never_stopped(&wait_job(&h, &on_gpu1, "succeeded"));
    open_gate(&gate);
    open_gate(&old.finish);
    let done = wait_job(&h, &on_gpu0, "succeeded");
    assert_eq!(runs(&done)[0]["stop_cause"], "restart", "{done:#}");
    wait_job(&h, &urgent, "succeeded");
}

#[test]
fn two_urgent_jobs_preempt_two_victims_at_once() {
    let h = home_with_gpus(2);
    let steers = [Counter::new(&h, "low-a"), Counter::new(&h, "low-b")];
    let lows: Vec<String> = steers
        .iter()
        .enumerate()
        .map(|(i, s)| h.submit(&s.spec(&h, &format!("low {i}"), json!({"mode": "yield"}))))
        .collect();
    for low in &lows {
        wait_phase(&h, low, "executing");
        wait_units(&h, low, 1);
    }
    let tasks: Vec<String> = lows
        .iter()
        .map(|l| show(&h, l)["active_run"].as_str().unwrap().to_string())
        .collect();

    let stopping = |h: &TestHome| -> Vec<Value> {
        h.resources()
            .into_iter()
            .filter(|r| r["run"]["phase"]["phase"] == "stopping")
            .collect()
    };
    let gate = h.tmp().join("urgent-gate");
    let first = h.submit(&gated_spec(&h, "urgent 1", "echo urgent", &gate, "").priority("high"));
    wait_until("one yield requested", || !stopping(&h).is_empty());
    assert_eq!(
        stopping(&h).len(),
        1,
        "one waiting job stops one victim, not more"
    );
    let second = h.submit(&gated_spec(&h, "urgent 2", "echo urgent", &gate, "").priority("high"));
    wait_until("both lanes stopping", || stopping(&h).len() == 2);
    for lane in stopping(&h) {
        assert_eq!(lane["run"]["phase"]["cause"], "yield", "{lane}");
        assert!(lane["run"]["phase"]["requested_at"].is_string(), "{lane}");
    }
    for urgent in [&first, &second] {
        assert_eq!(state_of(&show(&h, urgent)), "queued");
    }

    for steer in &steers {
        open_gate(&steer.let_yield);
    }
    let a = wait_phase(&h, &first, "executing");
    let b = wait_phase(&h, &second, "executing");
    assert_ne!(a["id"], b["id"], "both urgent jobs run at once");
    for (low, task) in lows.iter().zip(&tasks) {
        let queued = wait_job(&h, low, "queued");
        assert_eq!(runs(&queued)[0]["status"], "preempted", "{queued:#}");
        assert_eq!(runs(&queued)[0]["stop_cause"], "yield", "{queued:#}");
        assert_eq!(runs(&queued)[0]["task"], task.as_str());
    }
    open_gate(&gate);
    for urgent in [&first, &second] {
        never_stopped(&wait_job(&h, urgent, "succeeded"));
    }
    for (low, steer) in lows.iter().zip(&steers) {
        wait_phase(&h, low, "executing");
        open_gate(&steer.finish);
        let done = wait_job(&h, low, "succeeded");
        assert_eq!(runs(&done).len(), 2, "{done:#}");
        assert_eq!(runs(&done)[1]["resume"], true, "{done:#}");
    }
}

/// Starts a low yield job that will not honour the yield yet, an urgent job that asks for
/// the lane, and returns `(low, urgent, first task, steering, urgent gate, requested_at)`
/// once the yield is pending.
fn pending_yield(h: &TestHome) -> (String, String, String, Counter, PathBuf, Value) {
    let steer = Counter::new(h, "low");
    let low = h.submit(&steer.spec(h, "low counter", json!({"mode": "yield"})));
    wait_phase(h, &low, "executing");
    wait_units(h, &low, 1);
    let task = show(h, &low)["active_run"].as_str().unwrap().to_string();
    let gate = h.tmp().join("urgent-gate");
    let urgent = h.submit(&gated_spec(h, "urgent", "echo urgent", &gate, "").priority("high"));
    let stopping = wait_phase(h, &low, "stopping");
    assert_eq!(stopping["run"]["phase"]["cause"], "yield", "{stopping}");
    let requested_at = stopping["run"]["phase"]["requested_at"].clone();
    (low, urgent, task, steer, gate, requested_at)
}

#[test]
fn pending_yield_survives_a_killed_daemon_and_the_job_resumes() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.spawn_serve();
    let (low, urgent, task, steer, gate, requested_at) = pending_yield(&h);

    h.kill_serve(Signal::SIGKILL);
    h.spawn_serve();
    let stopping = wait_phase(&h, &low, "stopping");
    let phase = &stopping["run"]["phase"];
    assert_eq!(phase["cause"], "yield", "{stopping}");
    assert_eq!(
        phase["requested_at"], requested_at,
        "the first request is kept"
    );
    assert_eq!(state_of(&show(&h, &urgent)), "queued");

    open_gate(&steer.let_yield);
    wait_phase(&h, &urgent, "executing");
    urgent_then_resume(&h, &low, &task, &steer, &gate);
    never_stopped(&wait_job(&h, &urgent, "succeeded"));
}

#[test]
fn yield_completed_while_the_daemon_was_down_resumes_after_restart() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.spawn_serve();
    let (low, urgent, task, steer, gate, _) = pending_yield(&h);

    h.kill_serve(Signal::SIGKILL);
    open_gate(&steer.let_yield);
    let dir = h.home().join("tasks").join(&task);
    wait_until("the yielded run's worker to finish", || {
        dir.join("exit.json").exists() && dir.join("cleanup.json").exists()
    });
    h.spawn_serve();
    wait_phase(&h, &urgent, "executing");
    urgent_then_resume(&h, &low, &task, &steer, &gate);
    never_stopped(&wait_job(&h, &urgent, "succeeded"));
}

#[test]
fn cancel_during_a_pending_yield_upgrades_the_stop_to_user_cancel() {
    let h = home_with_gpus(1);
    let (low, urgent, task, _steer, gate, _) = pending_yield(&h);
    let lane_id = h.resources()[0]["id"].clone();
    let answer = h.json(&["resource", "job", "cancel", &low]);
    assert_eq!(
        answer,
        json!({"api_version": 1, "result": "stopping", "resource": lane_id, "task": task})
    );
    let cancelled = wait_job(&h, &low, "cancelled");
    let history = runs(&cancelled);
    assert_eq!(history.len(), 1, "{cancelled:#}");
    assert_eq!(history[0]["status"], "cancelled", "{cancelled:#}");
    assert_eq!(history[0]["stop_cause"], "user_cancel", "{cancelled:#}");
    assert_eq!(cancelled["last_stop_cause"], "user_cancel", "{cancelled:#}");
    assert_eq!(event_names(&cancelled), ["JOB_CANCELLED"], "{cancelled:#}");
    let log = task_log(&h, &task);
    assert!(log.contains("got TERM at "), "a cancel signals: {log:?}");
    open_gate(&gate);
    never_stopped(&wait_job(&h, &urgent, "succeeded"));
}

#[test]
fn committed_yield_is_not_withdrawn_when_the_urgent_job_is_cancelled() {
    let h = home_with_gpus(1);
    let (low, urgent, task, steer, _gate, requested_at) = pending_yield(&h);
    let answer = h.json(&["resource", "job", "cancel", &urgent]);
    assert_eq!(answer["result"], "cancelled", "{answer}");
    let still = wait_phase(&h, &low, "stopping");
    assert_eq!(still["run"]["task"], task.as_str(), "{still}");
    assert_eq!(still["run"]["phase"]["cause"], "yield", "{still}");
    assert_eq!(still["run"]["phase"]["requested_at"], requested_at);

    open_gate(&steer.let_yield);
    let preempted = wait_until_resumed(&h, &low);
    let history = runs(&preempted);
    assert_eq!(history[0]["status"], "preempted", "{preempted:#}");
    assert_eq!(history[0]["stop_cause"], "yield", "{preempted:#}");
    assert_eq!(history[1]["resume"], true, "{preempted:#}");
    open_gate(&steer.finish);
    let done = wait_job(&h, &low, "succeeded");
    assert_eq!(event_names(&done), ["JOB_PREEMPTED", "JOB_SUCCEEDED"]);
    let log = task_log(&h, &task_of(&runs(&done)[1]));
    assert!(log.contains(" resume=1 "), "{log:?}");
}

/// Waits until `job` runs its second attempt; returns `job show` then.
fn wait_until_resumed(h: &TestHome, job: &str) -> Value {
    let mut last = Value::Null;
    wait_until(&format!("job {job} to run again"), || {
        last = show(h, job);
        runs(&last).len() == 2 && state_of(&last) == "active"
    });
    last
}
