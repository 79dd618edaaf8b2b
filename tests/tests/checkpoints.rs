//! The checkpoint contract as a workload sees it: `HOMEBASED_RESUME=1` means "an earlier
//! attempt of this step yielded, a checkpoint exists", so a restart after a yield resumes
//! from the checkpoint rather than starting the step over.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::jobs::*;
use crate::common::{wait_until, TestHome};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

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

    // Two minutes pass for the daemon, which measures a run's age from its start (SPEC
    // section 4): past its window, the first attempt is asked to yield and checkpoints.
    h.advance_clock(Duration::from_secs(120));
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
/// A low-priority [`example_spec`] job: an urgent one preempts it.
fn example_job(h: &TestHome, script: &str, steps: u32, delay: &str) -> String {
    h.submit(&example_spec(h, script, script, steps, delay).priority("low"))
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

/// Stands in for `torchrun --nproc_per_node N PROGRAM ARGS...` where torch is not installed,
/// as far as the queue can tell them apart: it starts N workers (RANK, LOCAL_RANK and
/// WORLD_SIZE set), forwards SIGTERM to them, and exits 1 when any worker exited non-zero (a
/// worker's 75 included), as torchrun's elastic agent does.
const TORCHRUN_LIKE: &str = r#"
import os, signal, subprocess, sys
args = sys.argv[1:]
assert args[0] == "--nproc_per_node", args
n, program = int(args[1]), args[2:]
workers = [
    subprocess.Popen(program, env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n)))
    for r in range(n)
]
def forward(signum, frame):
    for w in workers:
        if w.poll() is None:
            w.send_signal(signum)
signal.signal(signal.SIGTERM, forward)
codes = [w.wait() for w in workers]
print(f"launcher: workers exited {codes}", flush=True)
sys.exit(1 if any(codes) else 0)
"#;

/// One rank of the launched job: counts units (rank 0 saves them), yields with exit 75 when
/// the yield file appears, finishes when `$1` exists.
const RANK_COUNTER: &str = r#"
state="$HOMEBASED_JOB_DIR/counter"
n=0
if [ "$HOMEBASED_RESUME" = 1 ] && [ -f "$state" ]; then n=$(cat "$state"); fi
echo "rank=$RANK run=$HOMEBASED_RUN_NUMBER resume=$HOMEBASED_RESUME from=$n"
i=0
while [ ! -e "$1" ] && [ $i -lt 600 ]; do
  i=$((i+1))
  n=$((n+1))
  sleep 0.1
  if [ "$RANK" = 0 ]; then echo "$n" > "$state.tmp" && mv "$state.tmp" "$state"; fi
  if [ -e "$HOMEBASED_YIELD_FILE" ]; then echo "rank=$RANK yield at $n"; exit 75; fi
done
echo "rank=$RANK done at $n"
"#;

/// A low-priority yield job whose step is the torchrun stand-in over two counting ranks;
/// `yield_codes` is set on the step when given.
fn launched_job(h: &TestHome, name: &str, finish: &Path, yield_codes: Option<Value>) -> String {
    let launcher = h.tmp().join("torchrun_like.py");
    std::fs::write(&launcher, TORCHRUN_LIKE).unwrap();
    let mut spec = h
        .spec(name)
        .priority("low")
        .set("preempt", json!({"mode": "yield"}))
        .command(&[
            "python3",
            "-u",
            launcher.to_str().unwrap(),
            "--nproc_per_node",
            "2",
            "/bin/sh",
            "-c",
            RANK_COUNTER,
            "sh",
            finish.to_str().unwrap(),
        ]);
    if let Some(codes) = yield_codes {
        spec.0["workload"]["yield_codes"] = codes;
    }
    h.submit(&spec)
}

/// Lets `job` save two units, then has an urgent job preempt it by yield; returns the first
/// attempt's task once the urgent job ran.
fn yield_to_an_urgent_job(h: &TestHome, job: &str) -> String {
    wait_phase(h, job, "executing");
    let first = active_task(h, job);
    wait_until("two units saved", || counter(h, job) >= 2);
    let urgent = h.submit(&h.spec("urgent").priority("high").command(&["true"]));
    wait_job(h, &urgent, "succeeded");
    first
}

#[test]
fn a_launcher_that_reports_a_yield_as_1_yields_only_with_yield_codes() {
    let h = home_with_gpus(1);

    // Without yield_codes, the launcher's 1 is a failure, even right after a yield request.
    let finish = h.tmp().join("finish-plain");
    let plain = launched_job(&h, "torchrun without yield_codes", &finish, None);
    let first = yield_to_an_urgent_job(&h, &plain);
    let failed = wait_job(&h, &plain, "failed");
    let history = runs(&failed);
    assert_eq!(history.len(), 1, "{failed:#}");
    assert_eq!(history[0]["stop_cause"], "yield", "{failed:#}");
    assert_eq!(history[0]["status"], "failed", "{failed:#}");
    assert_eq!(history[0]["process"], json!({"kind": "exit", "code": 1}));
    assert_eq!(event_names(&failed), ["JOB_FAILED"], "{failed:#}");
    let log = task_log(&h, &first);
    assert!(
        log.contains("rank=0 yield at "),
        "the ranks did yield: {log}"
    );
    assert!(log.contains("launcher: workers exited [75, 75]"), "{log}");

    // With [75, 1], the same exit after the committed yield is the yield: requeued, resumed.
    let finish = h.tmp().join("finish-codes");
    let job = launched_job(&h, "torchrun", &finish, Some(json!([75, 1])));
    let first = yield_to_an_urgent_job(&h, &job);
    let second = wait_attempt(&h, &job, 2);
    let during = show(&h, &job);
    let yielded = &runs(&during)[0];
    assert_eq!(yielded["task"], first.as_str());
    assert_eq!(yielded["stop_cause"], "yield", "{during:#}");
    assert_eq!(yielded["status"], "preempted", "{during:#}");
    assert_eq!(yielded["process"], json!({"kind": "exit", "code": 1}));
    assert_eq!(runs(&during)[1]["resume"], true, "{during:#}");
    let saved = counter(&h, &job);
    assert!(saved >= 2, "the checkpoint of the first attempt: {saved}");
    wait_until("both ranks to log their start", || {
        task_log(&h, &second).matches(" resume=1 from=").count() == 2
    });
    let log = task_log(&h, &second);
    assert!(log.contains("rank=0 run=2 resume=1 from="), "{log}");
    assert!(log.contains("rank=1 run=2 resume=1 from="), "{log}");
    open_gate(&finish);
    let done = wait_job(&h, &job, "succeeded");
    assert_eq!(runs(&done).len(), 2, "{done:#}");
    assert_eq!(event_names(&done), ["JOB_PREEMPTED", "JOB_SUCCEEDED"]);
    let log = task_log(&h, &second);
    assert!(log.contains("launcher: workers exited [0, 0]"), "{log}");
}

/// Whether `python3` can import torch; the real-torchrun test needs it and says so when not.
fn torch_importable() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import torch, torch.distributed"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `examples/torchrun_ddp.py` under real torchrun (`python3 -m torch.distributed.run`), two
/// CPU ranks on the gloo backend, `yield_codes` [75, 1]; `delay` s per step.
fn torchrun_job(h: &TestHome, steps: u32, delay: &str) -> String {
    let mut spec = h
        .spec("torchrun ddp")
        .priority("low")
        .set("preempt", json!({"mode": "yield"}))
        .command(&[
            "python3",
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            examples().join("torchrun_ddp.py").to_str().unwrap(),
        ]);
    spec.0["workload"]["env"] = json!({
        "EXAMPLE_STEPS": steps.to_string(),
        "EXAMPLE_STEP_DELAY": delay,
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
    });
    spec.0["workload"]["yield_codes"] = json!([75, 1]);
    h.submit(&spec)
}

#[test]
fn the_torchrun_ddp_example_yields_resumes_and_ends_with_the_weights_of_an_uninterrupted_run() {
    if !torch_importable() {
        eprintln!(
            "skipped: python3 cannot import torch, so real torchrun cannot run here \
             (a_launcher_that_reports_a_yield_as_1_yields_only_with_yield_codes covers the \
             queue's side with a stand-in; install torch to run this one)"
        );
        return;
    }
    let h = home_with_gpus(1);
    let whole = torchrun_job(&h, 400, "0");
    let done = wait_job(&h, &whole, "succeeded");
    let whole_log = task_log(&h, runs(&done)[0]["task"].as_str().unwrap());

    let job = torchrun_job(&h, 400, "0.02");
    wait_phase(&h, &job, "executing");
    let first = active_task(&h, &job);
    wait_until("the first attempt to train", || {
        task_log(&h, &first).contains("\nstep 50 loss ")
    });
    let urgent = h.submit(&h.spec("urgent").priority("high").command(&["true"]));
    wait_job(&h, &urgent, "succeeded");
    let done = wait_job(&h, &job, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 2, "{done:#}");
    assert_eq!(history[0]["stop_cause"], "yield", "{done:#}");
    assert_eq!(history[0]["status"], "preempted", "{done:#}");
    assert_eq!(
        history[0]["process"],
        json!({"kind": "exit", "code": 1}),
        "torchrun's own exit for a worker's 75: {done:#}"
    );
    assert_eq!(history[1]["resume"], true, "{done:#}");
    let first_log = task_log(&h, &first);
    assert!(first_log.contains("\nyielding at step "), "{first_log}");
    let second_log = task_log(&h, history[1]["task"].as_str().unwrap());
    let resumed = second_log
        .lines()
        .find(|l| l.starts_with("start at step "))
        .unwrap_or_else(|| panic!("{second_log}"));
    assert!(
        resumed.ends_with("with 2 ranks (HOMEBASED_RESUME=1)"),
        "{second_log}"
    );
    assert!(!resumed.starts_with("start at step 0 "), "{second_log}");
    assert_eq!(final_weights(&second_log), final_weights(&whole_log));
}
