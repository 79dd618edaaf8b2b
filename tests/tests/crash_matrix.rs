//! The crash matrix: a crash at any instant loses no run, repeats no finished step, and never
//! hands a lane on while the last run's processes may live. One test per named crash point
//! (`fail_point!`, built in with the `failpoints` feature): the daemon or a worker is started
//! with `FAILPOINTS=<point>=return`, the test drives the scenario that reaches the point, the
//! process aborts there, the daemon starts again without it, and the invariants of
//! [`crash::Lab::check`] must hold. Each test writes its row of `docs/RELIABILITY.md`
//! (`scripts/reliability-table`).
//!
//! Every lane is the one fake GPU; every step leaves a marked escaped process behind that
//! only the cleanup sweep ends, and logs its start and its end.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::crash;
use crate::common::jobs::{open_gate, show, state_of, wait_job, wait_phase};
use crate::common::new_uuid;
use crate::common::queue::move_job;
use crash::{check_dense, row, Lab, Point};
use serde_json::json;

const LAUNCH_RESERVED: Point = Point {
    order: 1,
    name: "launch.reserved",
    place: "daemon, `core/launch.rs` `launch`",
    separates: "the committed reservation (job active, run launching) from `run.json`",
};
const LAUNCH_RUN_JSON: Point = Point {
    order: 2,
    name: "launch.run-json-written",
    place: "daemon, `core/launch.rs` `start`",
    separates: "`run.json` from spawning the worker",
};
const LAUNCH_SPAWNED: Point = Point {
    order: 3,
    name: "launch.worker-spawned",
    place: "daemon, `core/launch.rs` `start`",
    separates: "the spawned worker from its confirmation",
};
const STOP_COMMITTED: Point = Point {
    order: 4,
    name: "stop.committed",
    place: "daemon, `core/stop.rs` `enact_stop`",
    separates: "a committed stop from `control/yield` or `control/stop` and the signal",
};
const EXIT_READ: Point = Point {
    order: 5,
    name: "observe.exit-read",
    place: "daemon, `core/observe.rs` `read_observations`",
    separates: "`exit.json` read from its commit",
};
const OBSERVE_COMMITTED: Point = Point {
    order: 6,
    name: "observe.committed",
    place: "daemon, `core/observe.rs` `advance`",
    separates: "an observation's commit from its effects and the pass",
};
const WORKER_EXIT: Point = Point {
    order: 7,
    name: "worker.exit-written",
    place: "worker, `records.rs` `exit`",
    separates: "`exit.json` from the poke",
};
const WORKER_CLEANUP_STARTED: Point = Point {
    order: 8,
    name: "worker.cleanup-started",
    place: "worker, `cleanup.rs` `clean_up`",
    separates: "the poked exit from the group cleanup and the sweep",
};
const WORKER_CLEANUP_BEFORE: Point = Point {
    order: 9,
    name: "worker.cleanup-before-record",
    place: "worker, `records.rs` `cleanup`",
    separates: "the finished cleanup from `cleanup.json`",
};
const WORKER_CLEANUP_WRITTEN: Point = Point {
    order: 10,
    name: "worker.cleanup-written",
    place: "worker, `records.rs` `cleanup`",
    separates: "`cleanup.json` from the poke (and the worker's exit)",
};
const DELIVERY_BEFORE_SINK: Point = Point {
    order: 11,
    name: "delivery.before-sink",
    place: "daemon, `delivery.rs` `deliver_blocking`",
    separates: "an event taken for delivery from the sink",
};
const DELIVERY_BEFORE_MARK: Point = Point {
    order: 12,
    name: "delivery.before-mark",
    place: "daemon, `delivery.rs` `attempt`",
    separates: "the sink's confirmation from the delivered mark",
};
const RELEASE_COMMITTED: Point = Point {
    order: 13,
    name: "release.committed",
    place: "daemon, `core/release.rs` `release`",
    separates: "a committed release from its effects and the pass",
};
const MOVE_SHIFTED: Point = Point {
    order: 14,
    name: "move.shifted",
    place: "daemon, `store/jobs.rs` `place`",
    separates: "a move's new slot key (and any renumbering of its level) from its placement, inside the transaction",
};

const RESERVE_FIRST_LANE: Point = Point {
    order: 15,
    name: "reserve.first-lane",
    place: "daemon, `store/runs.rs` `reserve`",
    separates: "a run's first reserved lane from its other lanes, inside the transaction",
};

/// The daemon dies at `point` launching the first of two jobs (two steps, then one), with
/// no gate: the launch is abandoned or re-attached after the restart, and both jobs run
/// every step once.
fn crash_while_launching(point: Point) {
    let mut lab = Lab::new();
    lab.serve_with(&format!("{}=return", point.name));
    let first = lab.spec("two steps", 2, None);
    let second = lab.spec("one step", 1, None);
    let (t1, t2) = (first.thread(), second.thread());
    let a = lab.submit_racing(&first);
    lab.crashed_then_restart(point.name);
    lab.resubmit(&first, &a);
    let b = lab.h.submit(&second);
    lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
}

#[test]
fn a_crash_after_a_launch_is_reserved_returns_the_job_to_its_slot() {
    row(LAUNCH_RESERVED, "submit a two-step job", "", || {
        crash_while_launching(LAUNCH_RESERVED)
    });
}

#[test]
fn a_crash_after_run_json_and_before_the_worker_starts_runs_the_step_once() {
    row(LAUNCH_RUN_JSON, "submit a two-step job", "", || {
        crash_while_launching(LAUNCH_RUN_JSON)
    });
}

#[test]
fn a_crash_after_the_worker_is_spawned_re_attaches_to_it() {
    row(LAUNCH_SPAWNED, "submit a two-step job", "", || {
        crash_while_launching(LAUNCH_SPAWNED)
    });
}

#[test]
fn a_crash_after_a_cancel_is_committed_still_cancels_and_cleans_before_the_next_job() {
    row(
        STOP_COMMITTED,
        "cancel a running job, another queued behind it",
        "the cancelled job's stop is enacted after the restart",
        || {
            let mut lab = Lab::new();
            lab.serve_with(&format!("{}=return", STOP_COMMITTED.name));
            let gate = lab.h.tmp().join("never");
            let first = lab.spec("cancelled", 1, Some(&gate));
            let second = lab.spec("next", 1, None);
            let (t1, t2) = (first.thread(), second.thread());
            let a = lab.h.submit(&first);
            wait_phase(&lab.h, &a, "executing");
            let b = lab.h.submit(&second);
            // The daemon dies before it answers.
            let _ = lab.h.cli(&["--json", "resource", "job", "cancel", &a]);
            lab.crashed_then_restart(STOP_COMMITTED.name);
            lab.check(&[(&a, &t1, "cancelled"), (&b, &t2, "succeeded")]);
        },
    );
}

#[test]
fn a_crash_after_a_preemption_is_committed_still_yields_and_resumes() {
    row(
        STOP_COMMITTED,
        "a high-priority submit preempts a yield job",
        "the yield is enacted after the restart, the urgent job runs, the yielded step resumes",
        || {
            let mut lab = Lab::new();
            lab.serve_with(&format!("{}=return", STOP_COMMITTED.name));
            let gate = lab.h.tmp().join("gate");
            let low = lab
                .spec("yields", 1, Some(&gate))
                .set("preempt", json!({"mode": "yield"}));
            let urgent = lab.spec("urgent", 1, None).priority("high");
            let (t1, t2) = (low.thread(), urgent.thread());
            let a = lab.h.submit(&low);
            wait_phase(&lab.h, &a, "executing");
            // The urgent job's pass commits the yield, and the daemon dies enacting it,
            // perhaps before the submit is answered.
            let b = lab.submit_racing(&urgent);
            lab.crashed_then_restart(STOP_COMMITTED.name);
            lab.resubmit(&urgent, &b);
            wait_job(&lab.h, &b, "succeeded");
            open_gate(&gate);
            lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
            let shown = show(&lab.h, &a);
            assert_eq!(shown["runs"][0]["stop_cause"], "yield", "{shown:#}");
        },
    );
}

#[test]
fn a_crash_after_exit_json_is_read_applies_it_after_the_restart() {
    row(EXIT_READ, "a two-step job ends its first step", "", || {
        crash_while_launching(EXIT_READ)
    });
}

#[test]
fn a_crash_after_an_exit_is_committed_and_before_its_effects_loses_nothing() {
    row(
        OBSERVE_COMMITTED,
        "a running job's step ends (the point is armed for the second commit: the first is its confirmation)",
        "",
        || {
            let mut lab = Lab::new();
            // The first commit is the launch's confirmation; the second is the exit.
            lab.serve_with(&format!("{}=1*off->return", OBSERVE_COMMITTED.name));
            let gate = lab.h.tmp().join("gate");
            let first = lab.spec("two steps", 2, Some(&gate));
            let second = lab.spec("one step", 1, None);
            let (t1, t2) = (first.thread(), second.thread());
            let a = lab.h.submit(&first);
            wait_phase(&lab.h, &a, "executing");
            let b = lab.h.submit(&second);
            open_gate(&gate);
            lab.crashed(OBSERVE_COMMITTED.name);
            let log = std::fs::read_to_string(lab.h.serve_log()).unwrap();
            assert!(log.contains("run ended"), "the crash came after the exit's commit: {log}");
            lab.serve();
            lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
        },
    );
}

#[test]
fn a_crash_after_a_lost_worker_is_committed_and_before_the_daemon_cleans_up_still_cleans() {
    row(
        OBSERVE_COMMITTED,
        "a worker dies after exit.json, leaving a marked process: the commit that hands its cleanup to the daemon",
        "the daemon's own cleanup runs after the restart",
        || {
            let mut lab = Lab::new();
            // The stand-in never pokes: its lock's release is the run's only observation, so
            // the first commit is the one whose effect is the daemon's cleanup.
            lab.first_worker_is_a_stand_in(None);
            lab.serve_with(&format!("{}=return", OBSERVE_COMMITTED.name));
            let first = lab.spec("lost", 1, None);
            let second = lab.spec("next", 1, None);
            let (t1, t2) = (first.thread(), second.thread());
            let a = lab.h.submit(&first);
            // The stand-in ends at once: the daemon may reach the point before this answers.
            let b = lab.submit_racing(&second);
            lab.crashed_then_restart(OBSERVE_COMMITTED.name);
            lab.resubmit(&second, &b);
            lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
            let shown = show(&lab.h, &a);
            let attempt = shown["runs"][0]["cleanup"]["attempt"].as_u64().unwrap_or(0);
            assert!(attempt >= 2, "the daemon cleaned up: {shown:#}");
        },
    );
}

#[test]
fn a_crash_right_after_a_dependency_succeeded_starts_the_waiting_job_once_after_the_restart() {
    row(
        OBSERVE_COMMITTED,
        "the step of a job another job names in its after ends (the point is armed for the second commit: the first is its confirmation)",
        "the waiting job starts once, after the restart",
        || {
            let mut lab = Lab::new();
            lab.serve_with(&format!("{}=1*off->return", OBSERVE_COMMITTED.name));
            let gate = lab.h.tmp().join("gate");
            let first = lab.spec("dependency", 1, Some(&gate));
            let (t1, a) = (first.thread(), lab.h.submit(&first));
            wait_phase(&lab.h, &a, "executing");
            let second = lab.spec("after it", 1, None).set("after", json!([a]));
            let (t2, b) = (second.thread(), lab.h.submit(&second));
            open_gate(&gate);
            lab.crashed(OBSERVE_COMMITTED.name);
            let log = std::fs::read_to_string(lab.h.serve_log()).unwrap();
            assert!(log.contains("run ended"), "the crash came after the end's commit: {log}");
            lab.serve();
            lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
            assert_eq!(show(&lab.h, &b)["runs"].as_array().unwrap().len(), 1);
        },
    );
}

#[test]
fn a_crash_right_after_a_dependency_was_cancelled_leaves_the_waiting_job_cancelled_once() {
    row(
        OBSERVE_COMMITTED,
        "cancel a running job another job names in its after: its end is committed (the point is armed for the second commit)",
        "the waiting job was cancelled in the same transaction: once, with one event, after the restart",
        || {
            let mut lab = Lab::new();
            lab.serve_with(&format!("{}=1*off->return", OBSERVE_COMMITTED.name));
            let gate = lab.h.tmp().join("never");
            let first = lab.spec("cancelled", 1, Some(&gate));
            let (t1, a) = (first.thread(), lab.h.submit(&first));
            wait_phase(&lab.h, &a, "executing");
            let second = lab.spec("after it", 1, None).set("after", json!([a]));
            let (t2, b) = (second.thread(), lab.h.submit(&second));
            let _ = lab.h.cli(&["--json", "resource", "job", "cancel", &a]);
            lab.crashed(OBSERVE_COMMITTED.name);
            lab.serve();
            lab.check(&[(&a, &t1, "cancelled"), (&b, &t2, "cancelled")]);
            let shown = show(&lab.h, &b);
            let events = shown["events"].as_array().unwrap();
            assert_eq!(events.len(), 1, "{shown:#}");
            assert_eq!(
                events[0]["detail"],
                json!({"cause": "dependency_failed", "job": a}),
                "{shown:#}"
            );
            assert!(shown["runs"].as_array().unwrap().is_empty(), "{shown:#}");
        },
    );
}

/// The first worker dies at `point`; the daemon, which never crashed, finishes the run (its
/// own cleanup when `cleanup.json` is missing) and serves the next job.
fn crash_of_the_first_worker(point: Point) {
    let mut lab = Lab::new();
    lab.first_worker_crashes_at(point.name);
    lab.serve();
    let first = lab.spec("first", 1, None);
    let second = lab.spec("second", 1, None);
    let (t1, t2) = (first.thread(), second.thread());
    let a = lab.h.submit(&first);
    let b = lab.h.submit(&second);
    lab.wait_worker_crash(point.name);
    lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
}

#[test]
fn a_worker_crash_after_exit_json_keeps_the_outcome_and_the_daemon_cleans_up() {
    row(WORKER_EXIT, "a step ends, another job queued", "", || {
        crash_of_the_first_worker(WORKER_EXIT)
    });
}

#[test]
fn a_worker_crash_before_its_cleanup_leaves_the_cleanup_to_the_daemon() {
    row(
        WORKER_CLEANUP_STARTED,
        "a step ends, another job queued",
        "",
        || crash_of_the_first_worker(WORKER_CLEANUP_STARTED),
    );
}

#[test]
fn a_worker_crash_before_cleanup_json_is_cleaned_again_by_the_daemon() {
    row(
        WORKER_CLEANUP_BEFORE,
        "a step ends, another job queued",
        "",
        || crash_of_the_first_worker(WORKER_CLEANUP_BEFORE),
    );
}

#[test]
fn a_worker_crash_after_cleanup_json_frees_the_lane() {
    row(
        WORKER_CLEANUP_WRITTEN,
        "a step ends, another job queued",
        "",
        || crash_of_the_first_worker(WORKER_CLEANUP_WRITTEN),
    );
}

/// The daemon dies delivering the first event (two one-step jobs): every event still
/// reaches its inbox, in order.
fn crash_while_delivering(point: Point, first_arrivals: &[u64]) {
    let mut lab = Lab::new();
    lab.serve_with(&format!("{}=return", point.name));
    // Both are submitted before the first event can exist: the daemon dies delivering it.
    let gate = lab.h.tmp().join("gate");
    let first = lab.spec("first", 1, Some(&gate));
    let second = lab.spec("second", 1, None);
    let (t1, t2) = (first.thread(), second.thread());
    let a = lab.h.submit(&first);
    let b = lab.h.submit(&second);
    open_gate(&gate);
    lab.crashed_then_restart(point.name);
    lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
    assert_eq!(crash::inbox(&lab.h, &t1, &a), first_arrivals);
}

#[test]
fn a_crash_before_the_sink_delivers_the_event_after_the_restart() {
    row(
        DELIVERY_BEFORE_SINK,
        "the first event of two jobs",
        "the event that never reached the sink arrives exactly once",
        || crash_while_delivering(DELIVERY_BEFORE_SINK, &[1]),
    );
}

#[test]
fn a_crash_after_the_sink_and_before_the_mark_delivers_again_in_order() {
    row(
        DELIVERY_BEFORE_MARK,
        "the first event of two jobs",
        "the delivered but unmarked event arrives again (twice in all), never out of order",
        || crash_while_delivering(DELIVERY_BEFORE_MARK, &[1, 1]),
    );
}

#[test]
fn a_crash_after_a_release_is_committed_frees_the_lane_once() {
    row(
        RELEASE_COMMITTED,
        "release the Attention of a run whose cleanup failed, a job queued behind it",
        "the lane serves the queued job after the restart; the same release retried answers the same",
        || {
            let mut lab = Lab::new();
            // The first worker is a stand-in: it records a successful exit and a failed
            // cleanup (so the lane goes to Attention), then exits; later ones are real.
            lab.first_worker_is_a_stand_in(Some(
                r#"{"result":"enumeration_failed","message":"stand-in"}"#,
            ));
            lab.serve_with(&format!("{}=return", RELEASE_COMMITTED.name));
            let first = lab.h.spec("held").command(&["/bin/true"]);
            let second = lab.spec("after the release", 1, None);
            let (t1, t2) = (first.thread(), second.thread());
            let a = lab.h.submit(&first);
            let held = wait_phase(&lab.h, &a, "attention");
            let attention = held["run"]["phase"]["id"].as_str().unwrap().to_string();
            let b = lab.h.submit(&second);
            lab.h.settle();
            assert_eq!(state_of(&show(&lab.h, &b)), "queued");
            let op = new_uuid();
            let release = ["--json", "resource", "release", "--attention", &attention,
                "--operation-id", &op];
            let _ = lab.h.cli(&release);
            lab.crashed_then_restart(RELEASE_COMMITTED.name);
            let again = lab.h.json(&release[1..]);
            assert_eq!(again["attention"], attention.as_str(), "{again}");
            lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
        },
    );
}

#[test]
fn a_crash_inside_a_move_leaves_positions_dense_and_the_retry_moves_once() {
    row(
        MOVE_SHIFTED,
        "move the last of three queued jobs to the front while another job runs",
        "the queue is unchanged after the restart; the move retried with its operation id lands once",
        || {
            let mut lab = Lab::new();
            lab.serve_with(&format!("{}=return", MOVE_SHIFTED.name));
            let gate = lab.h.tmp().join("gate");
            let holder = lab.spec("holds the lane", 1, Some(&gate));
            let mut jobs = vec![(lab.h.submit(&holder), holder.thread())];
            wait_phase(&lab.h, &jobs[0].0, "executing");
            for name in ["q1", "q2", "q3"] {
                let spec = lab.spec(name, 1, None);
                jobs.push((lab.h.submit(&spec), spec.thread()));
            }
            let before = lab.h.queue();
            let op = new_uuid();
            let moved = ["resource", "job", "move", &jobs[3].0, "--front", "--operation-id", &op];
            let mut with_json = vec!["--json"];
            with_json.extend_from_slice(&moved);
            let _ = lab.h.cli(&with_json);
            lab.crashed_then_restart(MOVE_SHIFTED.name);
            lab.h.settle();
            assert_eq!(lab.h.queue(), before, "the move's transaction did not commit");
            check_dense(&lab.h);
            let answer = move_job(&lab.h, &jobs[3].0, &["--front", "--operation-id", &op]);
            assert_eq!(answer["position"], 1, "{answer}");
            let retried = move_job(&lab.h, &jobs[3].0, &["--front", "--operation-id", &op]);
            assert_eq!(retried, answer, "the retry answers the same");
            let order: Vec<String> = lab.h.queue().into_iter().map(|(id, _, _)| id).collect();
            let expected = [&jobs[3].0, &jobs[0].0, &jobs[1].0, &jobs[2].0];
            let listed: Vec<&String> = order.iter().collect();
            assert_eq!(listed, expected, "moved once, in front of the queued jobs");
            check_dense(&lab.h);
            open_gate(&gate);
            let all: Vec<(&str, &str, &str)> = jobs
                .iter()
                .map(|(id, thread)| (id.as_str(), thread.as_str(), "succeeded"))
                .collect();
            lab.check(&all);
        },
    );
}

/// Both lanes of a two-lane run and the jobs around it, on two fake GPUs.
fn pair(
    lab: &Lab,
    name: &str,
    steps: usize,
    gate: Option<&std::path::Path>,
) -> crate::common::Spec {
    lab.spec(name, steps, gate).set("gpus", json!(2))
}

#[test]
fn a_crash_between_the_lanes_of_a_launch_reserves_none_and_the_pair_runs_once() {
    row(
        RESERVE_FIRST_LANE,
        "submit a two-step job on two lanes, a one-lane job behind it",
        "no lane is held by a run the store does not have",
        || {
            let mut lab = Lab::with_gpus(2);
            lab.serve_with(&format!("{}=return", RESERVE_FIRST_LANE.name));
            let first = pair(&lab, "pair", 2, None);
            let second = lab.spec("one lane", 1, None);
            let (t1, t2) = (first.thread(), second.thread());
            let a = lab.submit_racing(&first);
            lab.crashed_then_restart(RESERVE_FIRST_LANE.name);
            lab.resubmit(&first, &a);
            let b = lab.h.submit(&second);
            lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
            let shown = show(&lab.h, &a);
            for run in shown["runs"].as_array().unwrap() {
                assert_eq!(run["resources"].as_array().unwrap().len(), 2, "{run}");
            }
        },
    );
}

#[test]
fn a_crash_after_the_cancel_of_a_two_lane_run_still_stops_and_frees_both_lanes() {
    row(
        STOP_COMMITTED,
        "cancel a running job on two lanes, another two-lane job queued behind it",
        "both lanes are freed together, once",
        || {
            let mut lab = Lab::with_gpus(2);
            lab.serve_with(&format!("{}=return", STOP_COMMITTED.name));
            let gate = lab.h.tmp().join("never");
            let first = pair(&lab, "cancelled pair", 1, Some(&gate));
            let second = pair(&lab, "next pair", 1, None);
            let (t1, t2) = (first.thread(), second.thread());
            let a = lab.h.submit(&first);
            wait_phase(&lab.h, &a, "executing");
            let b = lab.h.submit(&second);
            let _ = lab.h.cli(&["--json", "resource", "job", "cancel", &a]);
            lab.crashed_then_restart(STOP_COMMITTED.name);
            lab.check(&[(&a, &t1, "cancelled"), (&b, &t2, "succeeded")]);
        },
    );
}

#[test]
fn a_worker_crash_before_the_cleanup_of_a_two_lane_run_leaves_it_to_the_daemon() {
    row(
        WORKER_CLEANUP_STARTED,
        "a step on two lanes ends, another two-lane job queued",
        "",
        || {
            let mut lab = Lab::with_gpus(2);
            lab.first_worker_crashes_at(WORKER_CLEANUP_STARTED.name);
            lab.serve();
            let first = pair(&lab, "first pair", 1, None);
            let second = pair(&lab, "second pair", 1, None);
            let (t1, t2) = (first.thread(), second.thread());
            let a = lab.h.submit(&first);
            let b = lab.h.submit(&second);
            lab.wait_worker_crash(WORKER_CLEANUP_STARTED.name);
            lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
        },
    );
}

#[test]
fn a_crash_after_a_two_lane_launch_is_reserved_gives_both_lanes_back_and_the_pair_runs_once() {
    row(
        LAUNCH_RESERVED,
        "submit a two-step job on two lanes, a one-lane job behind it",
        "the abandoned launch gives both of its lanes back together; every run of the pair held both",
        || {
            let mut lab = Lab::with_gpus(2);
            lab.serve_with(&format!("{}=return", LAUNCH_RESERVED.name));
            let first = pair(&lab, "pair", 2, None);
            let second = lab.spec("one lane", 1, None);
            let (t1, t2) = (first.thread(), second.thread());
            let a = lab.submit_racing(&first);
            lab.crashed_then_restart(LAUNCH_RESERVED.name);
            lab.resubmit(&first, &a);
            let b = lab.h.submit(&second);
            lab.check(&[(&a, &t1, "succeeded"), (&b, &t2, "succeeded")]);
            let shown = show(&lab.h, &a);
            let runs = shown["runs"].as_array().unwrap();
            // The launch the crash abandoned is a run of its own, ended, on both lanes.
            assert!(runs.len() >= 3, "the abandoned launch and two steps: {shown:#}");
            assert_ne!(runs[0]["status"], "succeeded", "{shown:#}");
            for run in runs {
                assert_eq!(run["resources"].as_array().unwrap().len(), 2, "{run}");
            }
            for lane in lab.h.resources() {
                assert!(lane["run"].is_null(), "a lane still held: {lane:#}");
            }
        },
    );
}
