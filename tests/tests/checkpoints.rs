//! The checkpoint contract as a workload sees it: `HOMEBASED_RESUME=1` means "an earlier
//! attempt of this step yielded, a checkpoint exists", so a restart after a yield resumes
//! from the checkpoint rather than starting the step over.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::jobs::*;
use common::{wait_until, TestHome};
use serde_json::{json, Value};
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
    let _: Value = done;
}
