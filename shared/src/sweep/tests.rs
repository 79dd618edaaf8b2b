//! The sweep's rules against the fake table and clock: no real process, no real sleep.

use super::*;
use crate::rundir::RemainingProcess;
use fake::FakeTrigger;

const OWN_PID: u32 = 100;
const UID: u32 = 1000;
const OTHER_UID: u32 = 2000;
/// The workload's start ticks: the suspect window opens here.
const WORKLOAD_START: u64 = 5000;
const DURING: u64 = 6000;
const BEFORE: u64 = 4000;

fn config() -> CleanupConfig {
    CleanupConfig::default()
}

struct Case {
    task: TaskId,
    table: FakeTable,
    sweep: Sweep,
}

impl Case {
    fn new() -> Case {
        let task = TaskId::new();
        Case {
            task,
            table: FakeTable::new(OWN_PID, UID),
            sweep: Sweep {
                task,
                workload_start: Some(WORKLOAD_START),
                config: config(),
                protected: Vec::new(),
            },
        }
    }

    fn marked(&self, start_ticks: u64) -> FakeProcess {
        FakeProcess::marked(start_ticks, UID, self.task)
    }

    fn run(&self) -> (Swept, FakeClock) {
        let mut clock = FakeClock::new();
        let swept = self.sweep.run(&self.table, &mut clock);
        (swept, clock)
    }
}

fn term(pid: u32, start_ticks: u64) -> Signalled {
    signalled(pid, start_ticks, Signal::SIGTERM)
}

fn signalled(pid: u32, start_ticks: u64, signal: Signal) -> Signalled {
    Signalled {
        process: ProcessIdentity { pid, start_ticks },
        signal,
    }
}

fn remaining(pid: u32, start_ticks: u64, reason: RemainingReason) -> RemainingProcess {
    RemainingProcess {
        pid,
        start_ticks,
        reason,
    }
}

#[test]
fn an_empty_table_is_clean_after_two_settled_scans() {
    let case = Case::new();
    case.table.insert(OWN_PID, case.marked(DURING));
    let (swept, clock) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 2);
    assert_eq!(
        clock.elapsed(),
        Duration::ZERO,
        "an empty first scan is confirmed at once"
    );
    assert!(
        case.table.sent().is_empty(),
        "the sweeper never signals itself"
    );
}

#[test]
fn a_zero_bound_still_confirms_an_empty_table_with_a_second_scan() {
    let mut case = Case::new();
    case.sweep.config.bound = Duration::ZERO;
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 2);
}

#[test]
fn a_marked_target_is_terminated_and_unmarked_processes_are_untouched() {
    let case = Case::new();
    case.table.insert(200, case.marked(DURING));
    case.table.insert(201, FakeProcess::new(DURING, UID));
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.signalled, vec![term(200, DURING)]);
    assert_eq!(case.table.sent(), swept.signalled);
    assert!(!case.table.is_alive(200));
    assert!(case.table.is_alive(201));
}

#[test]
fn a_term_ignoring_target_is_killed_after_the_term_grace() {
    let case = Case::new();
    case.table.insert(200, case.marked(DURING).ignoring_term());
    let (swept, clock) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(
        swept.signalled,
        vec![term(200, DURING), signalled(200, DURING, Signal::SIGKILL)]
    );
    assert!(clock.elapsed() >= config().term_grace);
    assert!(clock.elapsed() < config().bound);
    assert!(!case.table.is_alive(200));
}

#[test]
fn a_marked_process_of_another_user_is_still_a_target() {
    let case = Case::new();
    case.table
        .insert(200, FakeProcess::marked(DURING, OTHER_UID, case.task));
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.signalled, vec![term(200, DURING)]);
}

#[test]
fn processes_older_than_the_workload_are_passed_over() {
    let case = Case::new();
    // It could only carry the marker by exec-ing with an environment handed over by the run.
    case.table
        .insert(200, FakeProcess::marked(BEFORE, UID, case.task));
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert!(case.table.sent().is_empty());
    assert!(case.table.is_alive(200));
}

#[test]
fn without_a_recorded_start_every_marked_process_is_a_target() {
    let mut case = Case::new();
    case.sweep.workload_start = None;
    case.table
        .insert(200, FakeProcess::marked(BEFORE, OTHER_UID, case.task));
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.signalled, vec![term(200, BEFORE)]);
}

#[test]
fn pid_reuse_between_scan_and_signal_is_never_hit() {
    let case = Case::new();
    case.table.insert(200, case.marked(DURING));
    // The target ends and an unrelated process takes its pid before the pin.
    case.table.on(
        FakeTrigger::BeforePin(200),
        vec![
            FakeEvent::Exit(200),
            FakeEvent::Spawn(200, FakeProcess::new(DURING + 1, UID)),
        ],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert!(case.table.sent().is_empty());
    assert!(case.table.is_alive(200), "the successor is untouched");
    assert!(
        swept.notes.iter().any(|n| n.contains("another process")),
        "{:?}",
        swept.notes
    );
}

#[test]
fn pid_reuse_after_the_pin_is_never_hit() {
    let case = Case::new();
    case.table.insert(200, case.marked(DURING));
    // Reused between the checks and the signal: the pin still names the old process.
    case.table.on(
        FakeTrigger::BeforeSend(200),
        vec![
            FakeEvent::Exit(200),
            FakeEvent::Spawn(200, FakeProcess::new(DURING + 1, UID)),
        ],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert!(case.table.sent().is_empty());
    assert!(case.table.is_alive(200));
}

#[test]
fn a_target_that_lost_its_marker_before_the_signal_is_not_signalled() {
    let case = Case::new();
    case.table.insert(200, case.marked(DURING));
    case.table.on(
        FakeTrigger::BeforePin(200),
        vec![FakeEvent::Spawn(200, FakeProcess::new(DURING, UID))],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert!(case.table.sent().is_empty());
    assert!(swept.notes.iter().any(|n| n.contains("marker")));
}

#[test]
fn suspects_started_before_the_run_or_under_another_uid_are_ignored() {
    let case = Case::new();
    case.table
        .insert(300, FakeProcess::new(BEFORE, UID).unreadable());
    case.table
        .insert(301, FakeProcess::new(DURING, OTHER_UID).unreadable());
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 2);
    assert!(case.table.sent().is_empty());
}

#[test]
fn no_recorded_start_ignores_unreadable_processes() {
    let mut case = Case::new();
    case.sweep.workload_start = None;
    case.table
        .insert(300, FakeProcess::new(DURING, UID).unreadable());
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 2);
}

#[test]
fn a_suspect_keeps_the_scan_from_being_empty_and_is_never_signalled() {
    let case = Case::new();
    // Started exactly at the workload's start: inside the window.
    case.table
        .insert(300, FakeProcess::new(WORKLOAD_START, UID).unreadable());
    let (swept, clock) = case.run();
    assert_eq!(
        swept.outcome,
        CleanupOutcome::UnreadableSuspects {
            remaining: vec![remaining(300, WORKLOAD_START, RemainingReason::Suspect)]
        }
    );
    assert!(case.table.sent().is_empty());
    assert!(case.table.is_alive(300));
    assert!(clock.elapsed() >= config().bound);
}

#[test]
fn an_exiting_process_whose_environment_is_refused_is_not_a_suspect() {
    let case = Case::new();
    // Refused only because it is being torn down: it unsettles the scans rather than
    // being reported as a suspect, and nothing is signalled.
    case.table
        .insert(300, FakeProcess::new(DURING, UID).unreadable().exiting());
    let (swept, _) = case.run();
    assert!(
        matches!(swept.outcome, CleanupOutcome::EnumerationFailed { .. }),
        "{swept:?}"
    );
    assert!(case.table.sent().is_empty());
}

#[test]
fn a_suspect_that_ends_lets_the_sweep_finish_clean() {
    let case = Case::new();
    case.table
        .insert(300, FakeProcess::new(DURING, UID).unreadable());
    case.table
        .on(FakeTrigger::Listing(5), vec![FakeEvent::Exit(300)]);
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 6);
    assert!(case.table.sent().is_empty());
}

#[test]
fn a_fork_during_a_scan_is_caught_by_the_two_settled_scans_rule() {
    let case = Case::new();
    // Each process forks a marked child under a lower pid (not in this listing) and exits
    // while its environment is read. Two scans see nothing marked; neither is settled.
    case.table.insert(200, case.marked(DURING));
    case.table.on(
        FakeTrigger::EnvironRead(200),
        vec![
            FakeEvent::Spawn(150, case.marked(DURING + 1)),
            FakeEvent::Exit(200),
        ],
    );
    case.table.on(
        FakeTrigger::EnvironRead(150),
        vec![
            FakeEvent::Spawn(120, case.marked(DURING + 2)),
            FakeEvent::Exit(150),
        ],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.signalled, vec![term(120, DURING + 2)]);
    assert!(!case.table.is_alive(120));
}

#[test]
fn a_pid_that_changes_identity_while_read_unsettles_the_scan() {
    let case = Case::new();
    case.table.insert(200, FakeProcess::new(DURING, UID));
    case.table.on(
        FakeTrigger::EnvironRead(200),
        vec![FakeEvent::Spawn(200, case.marked(DURING + 1))],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.signalled, vec![term(200, DURING + 1)]);
}

#[test]
fn a_table_that_never_settles_is_not_clean() {
    let mut case = Case::new();
    case.sweep.config.bound = Duration::from_secs(1);
    // Every scan, an unmarked process appears and exits while it is read.
    for n in 1..=100 {
        case.table.on(
            FakeTrigger::Listing(n),
            vec![FakeEvent::Spawn(
                600,
                FakeProcess::new(DURING + u64::from(n), UID),
            )],
        );
        case.table
            .on(FakeTrigger::EnvironRead(600), vec![FakeEvent::Exit(600)]);
    }
    let (swept, _) = case.run();
    assert!(
        matches!(&swept.outcome, CleanupOutcome::EnumerationFailed { message } if message.contains("settle")),
        "{:?}",
        swept.outcome
    );
}

#[test]
fn processes_gone_before_they_are_read_do_not_unsettle_the_scan() {
    let case = Case::new();
    // Every scan lists a short-lived process that has exited by the time its turn comes.
    case.table.insert(200, FakeProcess::new(BEFORE, UID));
    for n in 1..=100 {
        case.table.on(
            FakeTrigger::Listing(n),
            vec![FakeEvent::Spawn(
                600,
                FakeProcess::new(DURING + u64::from(n), UID),
            )],
        );
        case.table
            .on(FakeTrigger::EnvironRead(200), vec![FakeEvent::Exit(600)]);
    }
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 2);
}

#[test]
fn bound_reached_gives_targets_survived_naming_targets_and_suspects() {
    let mut case = Case::new();
    // The bound comes before the KILL: the target survives its TERM.
    case.sweep.config.bound = Duration::from_secs(5);
    case.table.insert(200, case.marked(DURING).ignoring_term());
    case.table
        .insert(300, FakeProcess::new(DURING, UID).unreadable());
    let (swept, clock) = case.run();
    assert_eq!(
        swept.outcome,
        CleanupOutcome::TargetsSurvived {
            remaining: vec![
                remaining(200, DURING, RemainingReason::Marked),
                remaining(300, DURING, RemainingReason::Suspect),
            ]
        }
    );
    assert_eq!(swept.signalled, vec![term(200, DURING)]);
    assert_eq!(clock.elapsed(), Duration::from_secs(5));
}

#[test]
fn listing_error_gives_enumeration_failed() {
    let case = Case::new();
    case.table.insert(200, case.marked(DURING));
    case.table.fail_listing("no /proc");
    let (swept, _) = case.run();
    assert!(
        matches!(&swept.outcome, CleanupOutcome::EnumerationFailed { message } if message.contains("no /proc")),
        "{:?}",
        swept.outcome
    );
    assert!(case.table.sent().is_empty());
}

#[test]
fn a_listing_error_mid_sweep_is_a_failure_not_an_empty_table() {
    let case = Case::new();
    case.table.insert(200, case.marked(DURING).ignoring_term());
    case.table.on(
        FakeTrigger::Listing(3),
        vec![FakeEvent::FailListing("EMFILE".into())],
    );
    let (swept, _) = case.run();
    assert!(matches!(
        swept.outcome,
        CleanupOutcome::EnumerationFailed { .. }
    ));
    assert_eq!(swept.scans, 2);
}

#[test]
fn protected_pids_are_never_signalled_or_counted() {
    let mut case = Case::new();
    case.sweep.protected = vec![400];
    for pid in [1, OWN_PID, 400] {
        case.table.insert(pid, case.marked(DURING));
    }
    case.table
        .insert(401, FakeProcess::new(DURING, UID).unreadable());
    case.sweep.protected.push(401);
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 2);
    assert!(case.table.sent().is_empty());
}

#[test]
fn zombies_and_kernel_threads_are_neither_targets_nor_suspects() {
    let case = Case::new();
    case.table.insert(200, case.marked(DURING).zombie());
    case.table
        .insert(201, FakeProcess::new(DURING, UID).unreadable().zombie());
    case.table
        .insert(202, FakeProcess::new(DURING, UID).kernel_thread());
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 2);
    assert!(case.table.sent().is_empty());
}
