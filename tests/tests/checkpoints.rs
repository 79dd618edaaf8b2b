//! The checkpoint contract as a workload sees it: `HOMEBASED_RESUME=1` means "an earlier
//! attempt of this step yielded, a checkpoint exists", so a restart after a yield resumes
//! from the checkpoint rather than starting the step over.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::jobs::*;
use common::{wait_until, TestHome};
use serde_json::json;
use std::path::Path;

/// Counts units into `$HOMEBASED_JOB_DIR/counter`, loading it when `HOMEBASED_RESUME=1`; logs
/// `run=N resume=R from=K` at start; yields (exit 75) when asked; stops when `$1` exists.
const COUNTER: &str = r#"
state="$HOMEBASED_JOB_DIR/counter"
n=0
if [ "$HOMEBASED_RESUME" = 1 ] && [ -f "$state" ]; then n=$(cat "$state"); fi
echo "run=$HOMEBASED_RUN_NUMBER resume=$HOMEBASED_RESUME from=$n"
trap 'echo "got TERM at $n"; exit 143' TERM
i=0
while [ ! -e "$1" ] && [ $i -lt 600 ]; do
  i=$((i+1))
  n=$((n+1))
  sleep 0.2
  echo "$n" > "$state.tmp" && mv "$state.tmp" "$state"
  if [ -e "$HOMEBASED_YIELD_FILE" ]; then echo "yield at $n"; exit 75; fi
done
echo "done at $n"
"#;

fn counter(h: &TestHome, job: &str) -> u64 {
    let path = h.home().join("jobs").join(job).join("state/counter");
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// Makes `task`'s run look two minutes old to the scheduler, which measures a run's age from
/// its stored start time (SPEC section 4): the test needs a run past its `restart_within`
/// without waiting a minute.
fn age_run(h: &TestHome, task: &str) {
    let db = rusqlite::Connection::open(h.database()).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let changed = db
        .execute(
            "UPDATE runs SET started_at = started_at - 120000 WHERE task = ?1 AND phase = 'executing'",
            [task],
        )
        .unwrap();
    assert_eq!(changed, 1, "the run {task} executes");
}

fn active_task(h: &TestHome, job: &str) -> String {
    show(h, job)["active_run"].as_str().unwrap().to_string()
}

/// An urgent job that holds the lane until `gate` exists.
fn urgent(h: &TestHome, gate: &Path) -> String {
    h.submit(&gated_spec(h, "urgent", "", gate, "").priority("high"))
}

/// Waits until `job` executes its `n`th attempt; returns that attempt's task.
fn wait_attempt(h: &TestHome, job: &str, n: usize) -> String {
    wait_until(&format!("attempt {n} of {job} to execute"), || {
        let s = show(h, job);
        runs(&s).len() == n && state_of(&s) == "active"
    });
    wait_phase(h, job, "executing");
    active_task(h, job)
}

fn first_line(h: &TestHome, task: &str) -> String {
    let mut line = String::new();
    wait_until(&format!("{task} to log its start"), || {
        line = task_log(h, task)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        !line.is_empty()
    });
    line
}

#[test]
fn a_restart_inside_the_window_after_a_yield_resumes_from_the_checkpoint() {
    let h = home_with_gpus(1);
    let finish = h.tmp().join("finish");
    let spec = h
        .spec("trainer")
        .priority("low")
        .set("preempt", json!({"mode": "yield", "restart_within": "1m"}))
        .command(&["/bin/sh", "-c", COUNTER, "sh", finish.to_str().unwrap()]);
    let job = h.submit(&spec);
    wait_phase(&h, &job, "executing");
    let first = active_task(&h, &job);
    wait_until("two units saved", || counter(&h, &job) >= 2);
    assert_eq!(first_line(&h, &first), "run=1 resume=0 from=0");

    // Past its window, the first attempt is asked to yield and checkpoints.
    age_run(&h, &first);
    let gate1 = h.tmp().join("gate1");
    let urgent1 = urgent(&h, &gate1);
    wait_job(&h, &urgent1, "active");
    let yielded = runs(&show(&h, &job))[0].clone();
    assert_eq!(yielded["stop_cause"], "yield", "{yielded}");
    assert_eq!(yielded["process"], json!({"kind": "exit", "code": 75}));
    open_gate(&gate1);

    // Young again, the second attempt resumes and is then restarted inside its window.
    let second = wait_attempt(&h, &job, 2);
    let line = first_line(&h, &second);
    assert!(line.starts_with("run=2 resume=1 from="), "{line}");
    let from_second: u64 = line.rsplit('=').next().unwrap().parse().unwrap();
    assert!(from_second >= 2, "{line}");
    wait_until("the second attempt to save a unit", || {
        counter(&h, &job) > from_second
    });
    let gate2 = h.tmp().join("gate2");
    let urgent2 = urgent(&h, &gate2);
    wait_job(&h, &urgent2, "active");
    let restarted = runs(&show(&h, &job))[1].clone();
    assert_eq!(restarted["stop_cause"], "restart", "{restarted}");
    assert_eq!(restarted["status"], "preempted", "{restarted}");
    let queued = show(&h, &job);
    assert_eq!(
        queued["state"],
        json!({"state": "queued", "resume": true}),
        "{queued:#}"
    );
    let human = h.cli(&["resource", "job", "show", &job]).stdout;
    assert!(human.contains("\nresume yes: "), "{human}");
    open_gate(&gate2);

    // The third attempt still sees the checkpoint: RESUME=1, and it loads it.
    let third = wait_attempt(&h, &job, 3);
    let line = first_line(&h, &third);
    assert!(line.starts_with("run=3 resume=1 from="), "{line}");
    let from_third: u64 = line.rsplit('=').next().unwrap().parse().unwrap();
    assert!(from_third > from_second, "{line}");
    open_gate(&finish);
    let done = wait_job(&h, &job, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 3, "{done:#}");
    assert_eq!(history[2]["resume"], true);
    assert_eq!(
        event_names(&done),
        ["JOB_PREEMPTED", "JOB_PREEMPTED", "JOB_SUCCEEDED"]
    );
}

/// The repository's `examples/` folder.
fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// A low-priority yield job running `examples/<script>` unbuffered with the plain-Python
/// stand-ins for torch and transformers (`examples/standin`), `steps` steps of `delay` s.
fn example_job(h: &TestHome, script: &str, steps: u32, delay: &str) -> String {
    let mut spec = h
        .spec(script)
        .priority("low")
        .set("preempt", json!({"mode": "yield"}))
        .command(&["python3", "-u", examples().join(script).to_str().unwrap()]);
    spec.0["workload"]["env"] = json!({
        "PYTHONPATH": examples().join("standin"),
        "EXAMPLE_STEPS": steps.to_string(),
        "EXAMPLE_STEP_DELAY": delay,
        "PYTHONDONTWRITEBYTECODE": "1",
    });
    h.submit(&spec)
}

/// Runs the example once without interruption and once preempted by an urgent job; returns
/// the logs of the uninterrupted run and of the preempted job's two attempts.
fn run_example_twice(h: &TestHome, script: &str, steps: u32) -> (String, String, String) {
    let whole = example_job(h, script, steps, "0");
    let done = wait_job(h, &whole, "succeeded");
    let whole_log = task_log(h, runs(&done)[0]["task"].as_str().unwrap());

    let job = example_job(h, script, steps, "0.01");
    wait_phase(h, &job, "executing");
    let first = active_task(h, &job);
    first_line(h, &first);
    let urgent = h.submit(&h.spec("urgent").priority("high").command(&["true"]));
    wait_job(h, &urgent, "succeeded");
    let done = wait_job(h, &job, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 2, "{done:#}");
    assert_eq!(history[0]["process"], json!({"kind": "exit", "code": 75}));
    assert_eq!(history[0]["stop_cause"], "yield");
    let logs = |i: usize| task_log(h, history[i]["task"].as_str().unwrap());
    (whole_log, logs(0), logs(1))
}

fn final_weights(log: &str) -> &str {
    log.lines()
        .find(|l| l.starts_with("final weights "))
        .unwrap_or_else(|| panic!("no final weights in {log:?}"))
}

#[test]
fn the_pytorch_loop_example_yields_resumes_and_ends_with_the_weights_of_an_uninterrupted_run() {
    let h = home_with_gpus(1);
    let (whole, first, second) = run_example_twice(&h, "pytorch_loop.py", 600);
    assert!(
        first.starts_with("start at step 0 (HOMEBASED_RESUME=0)\n"),
        "{first}"
    );
    assert!(first.contains("\nyielding at step "), "{first}");
    let resumed = second.lines().next().unwrap();
    assert!(
        resumed.starts_with("start at step ") && resumed.ends_with("(HOMEBASED_RESUME=1)"),
        "{second}"
    );
    assert_ne!(resumed, "start at step 0 (HOMEBASED_RESUME=1)", "{second}");
    assert_eq!(final_weights(&second), final_weights(&whole));
}

#[test]
fn the_trainer_callback_example_yields_after_train_returns_and_resumes_from_its_checkpoint() {
    let h = home_with_gpus(1);
    let (whole, first, second) = run_example_twice(&h, "hf_trainer.py", 600);
    assert!(whole.starts_with("starting afresh\n"), "{whole}");
    assert!(whole.ends_with("done at step 600\n"), "{whole}");
    assert!(first.starts_with("starting afresh\n"), "{first}");
    let yielded_at = first
        .lines()
        .find_map(|l| l.strip_prefix("yielding at step "))
        .unwrap_or_else(|| panic!("{first}"));
    assert!(second.starts_with("resuming from "), "{second}");
    assert!(
        second
            .lines()
            .next()
            .unwrap()
            .ends_with(&format!("/checkpoint-{yielded_at}")),
        "the checkpoint saved at the yield: {second}"
    );
    assert!(second.ends_with("done at step 600\n"), "{second}");
}
