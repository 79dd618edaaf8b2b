//! How a workload's end is recorded in `exit.json`, and what cleanup leaves behind.

use crate::support::{in_group, Run};
use homebased_shared::process::is_same_process;
use homebased_shared::rundir::{CleanupOutcome, ExitReason, GroupState};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use std::time::Instant;

#[test]
fn exit_codes_are_recorded_exactly() {
    for code in [0, 3] {
        let run = Run::shell(&format!("echo hello; exit {code}"));
        run.run_to_end();
        let exit = run.exit();
        assert_eq!(exit.reason, ExitReason::Exit { code });
        assert_eq!(exit.group, GroupState::ConfirmedExited);
        assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
        assert_eq!(run.cleanup().attempt, 1);
        assert_eq!(run.output(), "hello\n");
        let worker = run.dir.read_worker().unwrap().unwrap();
        let child = worker.child.expect("the child was recorded");
        assert_eq!(
            child.pgid, child.process.pid,
            "the workload leads its own group"
        );
        assert!(child.started_at <= exit.ended_at);
    }
}

#[test]
fn a_signal_is_recorded_as_a_signal_not_a_code() {
    let run = Run::shell("kill -USR1 $$; sleep 5");
    run.run_to_end();
    assert_eq!(run.exit().reason, ExitReason::Signal { signal: 10 });
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
}

#[test]
fn the_stop_file_alone_cancels_the_run() {
    let run = Run::shell("sleep 30");
    let mut worker = run.start();
    let child = run.child();
    run.request_stop();
    assert!(worker.wait().success(), "{}", run.diagnose());
    let exit = run.exit();
    assert_eq!(exit.reason, ExitReason::Cancelled);
    assert_eq!(
        exit.group,
        GroupState::ConfirmedExited,
        "{}",
        run.diagnose()
    );
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    assert!(!is_same_process(child.process));
    assert_group_gone(child.pgid);
}

#[test]
fn sigterm_to_the_worker_cancels_the_run() {
    let run = Run::shell("sleep 30");
    let mut worker = run.start();
    let child = run.child();
    kill(Pid::from_raw(worker.pid()), Signal::SIGTERM).unwrap();
    assert!(worker.wait().success(), "{}", run.diagnose());
    assert_eq!(run.exit().reason, ExitReason::Cancelled);
    assert_eq!(run.exit().group, GroupState::ConfirmedExited);
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    assert!(!is_same_process(child.process));
    assert_group_gone(child.pgid);
}

#[test]
fn a_stop_gives_the_whole_group_the_grace() {
    // The leader dies on TERM at once; the subshell in its group takes a moment to tidy up.
    let mut run = Run::shell(
        "(trap 'sleep 0.2; echo tidied; exit 0' TERM; touch trapped; \
          while :; do sleep 0.05; done) & \
         while [ ! -e trapped ]; do sleep 0.05; done; exec sleep 30",
    );
    // Long enough that the tidying never races the SIGKILL; nothing waits for it to pass.
    run.set(
        "cleanup",
        json!({"term_grace": "15s", "kill_grace": "2s", "rescan": "20ms", "bound": "30s"}),
    );
    let mut worker = run.start();
    let child = run.child();
    crate::support::eventually("the trap to be set", || {
        run.home
            .parent()
            .unwrap()
            .join("trapped")
            .exists()
            .then_some(())
    });
    run.request_stop();
    assert!(worker.wait().success(), "{}", run.diagnose());
    let exit = run.exit();
    assert_eq!(exit.reason, ExitReason::Cancelled);
    assert_eq!(
        exit.group,
        GroupState::ConfirmedExited,
        "the stop waited for the group, not only the leader\n{}",
        run.diagnose()
    );
    assert!(run.output().contains("tidied"), "{}", run.diagnose());
    assert!(!run.worker_log().contains("SIGKILL"), "{}", run.diagnose());
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    assert_group_gone(child.pgid);
}

/// A workload that answers the stop signal by saving and exiting cleanly was stopped, not
/// finished: its exit 0 is recorded as `cancelled` (SPEC section 4), so that a cancel is never
/// reported as a success.
#[test]
fn a_workload_that_exits_zero_on_term_is_recorded_as_cancelled() {
    let run =
        Run::shell("trap 'echo saved; exit 0' TERM; echo ready; while :; do sleep 0.05; done");
    let mut worker = run.start();
    crate::support::eventually("the trap to be set", || {
        run.output().contains("ready").then_some(())
    });
    run.request_stop();
    assert!(worker.wait().success(), "{}", run.diagnose());
    assert_eq!(
        run.exit().reason,
        ExitReason::Cancelled,
        "{}",
        run.diagnose()
    );
    assert!(run.output().contains("saved"), "{}", run.diagnose());
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
}

/// Any other answer to the stop signal is the stop it was.
#[test]
fn a_workload_that_exits_nonzero_on_term_is_recorded_as_cancelled() {
    let run = Run::shell("trap 'exit 3' TERM; echo ready; while :; do sleep 0.05; done");
    let mut worker = run.start();
    crate::support::eventually("the trap to be set", || {
        run.output().contains("ready").then_some(())
    });
    run.request_stop();
    assert!(worker.wait().success(), "{}", run.diagnose());
    assert_eq!(
        run.exit().reason,
        ExitReason::Cancelled,
        "{}",
        run.diagnose()
    );
}

/// Nothing of the workload's group is left once the worker exited: neither a live member nor
/// an unreaped zombie (one handed to init may never be reaped).
fn assert_group_gone(pgid: u32) {
    let members = homebased_shared::process::group_members(pgid).unwrap();
    assert!(members.is_empty(), "left in the group: {members:?}");
}

#[test]
fn a_workload_ignoring_term_is_killed_after_the_grace() {
    // TERM ignored by the shell and, inherited, by the sleep it starts.
    let run = Run::shell("trap '' TERM; echo ready; sleep 30; echo survived");
    let mut worker = run.start();
    let child = run.child();
    crate::support::eventually("the trap to be set", || {
        run.output().contains("ready").then_some(())
    });
    let asked = Instant::now();
    run.request_stop();
    assert!(worker.wait().success(), "{}", run.diagnose());
    assert!(
        asked.elapsed() >= std::time::Duration::from_secs(1),
        "the grace was given"
    );
    assert_eq!(run.exit().reason, ExitReason::Cancelled);
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    assert!(run.worker_log().contains("SIGKILL"), "{}", run.diagnose());
    assert!(!run.output().contains("survived"));
    assert!(!is_same_process(child.process));
}

#[test]
fn a_background_grandchild_in_the_group_is_killed_by_cleanup() {
    let run = Run::shell("sleep 1000 & echo $!; exit 0");
    run.run_to_end();
    let exit = run.exit();
    assert_eq!(exit.reason, ExitReason::Exit { code: 0 });
    assert_eq!(
        exit.group,
        GroupState::Unconfirmed,
        "the sleep was still there"
    );
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    let grandchild: u32 = run.output().trim().parse().unwrap();
    let pgid = run.child().pgid;
    assert!(!in_group(grandchild, pgid), "the grandchild is gone");
}

#[test]
fn a_grandchild_ignoring_term_is_killed_after_the_grace() {
    // The shell exits only once the subshell ignores TERM, so the grace is really needed.
    let run = Run::shell(
        "(trap '' TERM; touch trapped; exec sleep 1000) & \
         while [ ! -e trapped ]; do sleep 0.05; done; exit 0",
    );
    run.run_to_end();
    assert_eq!(run.exit().reason, ExitReason::Exit { code: 0 });
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    assert!(run.worker_log().contains("SIGKILL"), "{}", run.diagnose());
    let pgid = run.child().pgid;
    let members = homebased_shared::process::group_members(pgid).unwrap();
    assert!(members.is_empty(), "left in the group: {members:?}");
}

#[test]
fn a_missing_program_is_a_spawn_failure() {
    let run = Run::with_step(json!({"type": "task", "command": ["/nonexistent/homebased-probe"]}));
    run.run_to_end();
    let exit = run.exit();
    match &exit.reason {
        ExitReason::SpawnFailed { message } => {
            assert!(
                message.contains("/nonexistent/homebased-probe"),
                "{message}"
            )
        }
        other => panic!("expected spawn_failed, got {other:?}"),
    }
    assert_eq!(exit.group, GroupState::NoChildSpawned);
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    assert!(run.dir.read_worker().unwrap().unwrap().child.is_none());
}

#[test]
fn a_stop_requested_before_the_start_never_spawns() {
    let run = Run::shell("echo started");
    run.request_stop();
    run.run_to_end();
    assert_eq!(run.exit().reason, ExitReason::Cancelled);
    assert_eq!(run.exit().group, GroupState::NoChildSpawned);
    assert_eq!(run.output(), "");
    assert!(run.dir.read_worker().unwrap().unwrap().child.is_none());
}
