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
/// The sweeper's (the worker's) start ticks: it is the lineage root.
const WORKER_START: u64 = 4500;

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
                lineage: Some(ProcessIdentity {
                    pid: OWN_PID,
                    start_ticks: WORKER_START,
                }),
            },
        }
    }

    fn marked(&self, start_ticks: u64) -> FakeProcess {
        FakeProcess::marked(start_ticks, UID, self.task)
    }

    /// The worker itself, in the table as the lineage root.
    fn with_worker(self) -> Case {
        self.table
            .insert(OWN_PID, FakeProcess::new(WORKER_START, UID).child_of(50));
        self
    }

    /// The sweep, alone; and the same sweep on a copy of the table with every scan taken
    /// through an exchange (a snapshot, then judged), which must decide and do the same.
    fn run(&self) -> (Swept, FakeClock) {
        let copy = self.table.duplicate();
        let mut clock = FakeClock::new();
        let swept = self.sweep.run(&self.table, &mut clock);
        let dir = tempfile::tempdir().unwrap();
        let exchange = Exchange::at(dir.path().join("sweep"), test_key()).unwrap();
        let shared = self
            .sweep
            .run_sharing(&copy, &mut FakeClock::new(), &exchange);
        assert_eq!(
            (&shared.outcome, &shared.signalled, &shared.descendants),
            (&swept.outcome, &swept.signalled, &swept.descendants),
            "the sweep through snapshots decided otherwise"
        );
        assert_eq!(copy.sent(), self.table.sent());
        assert!(
            !shared.notes.iter().any(|n| n.contains("no longer shared")),
            "{:?}",
            shared.notes
        );
        (swept, clock)
    }
}

fn identity(pid: u32, start_ticks: u64) -> ProcessIdentity {
    ProcessIdentity { pid, start_ticks }
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

/// A case where process 300 ends while its environment is read: `ends` is what it leaves
/// under its pid (a zombie of it, or nothing once reaped). 60 is another lane's worker.
fn ending_while_read(process: FakeProcess, ends: Option<FakeProcess>) -> (Swept, Case) {
    ending_while_read_by(process, ends, false)
}

/// [`ending_while_read`], each process read through one handle on it when `pinned` (as the
/// real table reads).
fn ending_while_read_by(
    process: FakeProcess,
    ends: Option<FakeProcess>,
    pinned: bool,
) -> (Swept, Case) {
    let case = Case::new().with_worker();
    if pinned {
        case.table.pin_reads();
    }
    case.table.insert(50, FakeProcess::new(1000, UID));
    case.table
        .insert(60, FakeProcess::new(WORKER_START, UID).child_of(50));
    case.table.insert(300, process);
    let event = match ends {
        Some(zombie) => FakeEvent::Spawn(300, zombie),
        None => FakeEvent::Exit(300),
    };
    case.table.on(FakeTrigger::EnvironRead(300), vec![event]);
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert!(case.table.sent().is_empty(), "{:?}", case.table.sent());
    (swept, case)
}

#[test]
fn another_runs_process_that_ends_while_it_is_read_leaves_the_scan_settled() {
    // Another lane's workload, unmarked and under its own worker: lanes that end together.
    let anothers = FakeProcess::new(DURING, UID).child_of(60);
    let (swept, _) = ending_while_read(anothers.clone(), Some(anothers.zombie()));
    assert_eq!(swept.scans, 2, "read whole before it ended: not the run's");
}

/// Unmarked processes that a scan cannot call another run's: one under the worker, and one
/// whose parent link is gone (it is being re-parented).
fn may_be_the_runs() -> [(&'static str, FakeProcess); 2] {
    [
        (
            "the run's by its ancestry",
            FakeProcess::new(DURING, UID).child_of(OWN_PID),
        ),
        ("moving", FakeProcess::new(DURING, UID).child_of(70)),
    ]
}

#[test]
fn a_process_that_may_be_the_runs_and_ends_while_it_is_read_unsettles_the_scan() {
    for (what, process) in may_be_the_runs() {
        let (swept, _) = ending_while_read(process.clone(), Some(process.zombie()));
        assert_eq!(
            swept.scans, 3,
            "{what}: one unsettled scan, then two settled"
        );
    }
    // Reaped as soon as it ended: the pid may have named another process by the read.
    let anothers = FakeProcess::new(DURING, UID).child_of(60);
    let (swept, _) = ending_while_read(anothers, None);
    assert_eq!(swept.scans, 3, "gone, not a zombie of itself");
}

#[test]
fn another_runs_process_reaped_while_it_is_read_through_a_pinned_handle_leaves_the_scan_settled() {
    // What was read through the handle was its own: reaped at once is as good as a zombie.
    let anothers = FakeProcess::new(DURING, UID).child_of(60);
    let (swept, _) = ending_while_read_by(anothers, None, true);
    assert_eq!(swept.scans, 2, "read whole before it ended: not the run's");
}

#[test]
fn through_a_pinned_handle_a_process_that_may_be_the_runs_and_is_reaped_while_read_unsettles() {
    for (what, process) in may_be_the_runs() {
        let (swept, _) = ending_while_read_by(process, None, true);
        assert_eq!(
            swept.scans, 3,
            "{what}: one unsettled scan, then two settled"
        );
    }
    // Marked with this run's marker, and reaped as it was read.
    let case = Case::new().with_worker();
    case.table.pin_reads();
    case.table.insert(300, case.marked(DURING).child_of(1));
    case.table
        .on(FakeTrigger::EnvironRead(300), vec![FakeEvent::Exit(300)]);
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(
        swept.scans, 3,
        "marked: one unsettled scan, then two settled"
    );
    assert!(case.table.sent().is_empty());
}

#[test]
fn a_process_reaped_before_its_environment_was_read_unsettles_only_without_a_pinned_handle() {
    for (pinned, scans) in [(false, 3), (true, 2)] {
        let case = Case::new().with_worker();
        if pinned {
            case.table.pin_reads();
        }
        // Marked, even: reaped between its first identity and its environment, it was never
        // misread, as one reaped before its first read. Unpinned, the pid may name another.
        case.table.insert(300, case.marked(DURING).child_of(1));
        case.table
            .on(FakeTrigger::FirstRead(300), vec![FakeEvent::Exit(300)]);
        let (swept, _) = case.run();
        assert_eq!(swept.outcome, CleanupOutcome::Clean);
        assert_eq!(swept.scans, scans, "pinned: {pinned}");
        assert!(case.table.sent().is_empty());
    }
}

#[test]
fn a_pinned_handle_never_answers_for_the_process_that_took_the_pid_over() {
    // Reaped after its first read (or after its environment was read, unmarked), its pid at
    // once a marked process's: the handle answers `Gone`, never the successor's reads; the
    // successor is read (and signalled) as itself by the next scan.
    for trigger in [FakeTrigger::FirstRead(200), FakeTrigger::EnvironRead(200)] {
        let case = Case::new().with_worker();
        case.table.pin_reads();
        case.table
            .insert(60, FakeProcess::new(WORKER_START, UID).child_of(1));
        case.table
            .insert(200, FakeProcess::new(DURING, UID).child_of(60));
        case.table.on(
            trigger,
            vec![FakeEvent::Spawn(200, case.marked(DURING + 1).child_of(1))],
        );
        let (swept, _) = case.run();
        assert_eq!(swept.outcome, CleanupOutcome::Clean, "{trigger:?}");
        assert_eq!(swept.signalled, vec![term(200, DURING + 1)], "{trigger:?}");
    }
}

#[test]
fn a_marked_process_that_ends_while_it_is_read_unsettles_the_scan() {
    let case = Case::new().with_worker();
    let marked = case.marked(DURING).child_of(1);
    case.table.insert(300, marked.clone());
    case.table.on(
        FakeTrigger::EnvironRead(300),
        vec![FakeEvent::Spawn(300, marked.zombie())],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 3);
    assert!(case.table.sent().is_empty());
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

/// For 100 scans, just before each listing an unmarked process 600 appears (started during
/// the run), and it exits (is reaped) at `exits`.
fn each_scan_lists_a_process_that_exits_at(case: &Case, exits: FakeTrigger) {
    for n in 1..=100 {
        case.table.on(
            FakeTrigger::Listing(n),
            vec![FakeEvent::Spawn(
                600,
                FakeProcess::new(DURING + u64::from(n), UID),
            )],
        );
        case.table.on(exits, vec![FakeEvent::Exit(600)]);
    }
}

#[test]
fn a_table_that_never_settles_is_not_clean() {
    let mut case = Case::new();
    case.sweep.config.bound = Duration::from_secs(1);
    // Every scan, an unmarked process appears and exits while it is read.
    each_scan_lists_a_process_that_exits_at(&case, FakeTrigger::EnvironRead(600));
    let (swept, _) = case.run();
    assert!(
        matches!(&swept.outcome, CleanupOutcome::EnumerationFailed { message } if message.contains("settle")),
        "{:?}",
        swept.outcome
    );
}

#[test]
fn through_pinned_handles_a_table_of_unmarked_processes_ending_as_they_are_read_settles() {
    let case = Case::new();
    case.table.pin_reads();
    // Every scan, an unmarked process appears and is reaped while it is read: each was read
    // whole through its handle, so none of them unsettles a scan.
    each_scan_lists_a_process_that_exits_at(&case, FakeTrigger::EnvironRead(600));
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 2);
}

#[test]
fn processes_gone_before_they_are_read_do_not_unsettle_the_scan() {
    let case = Case::new();
    // Every scan lists a short-lived process that has exited by the time its turn comes.
    case.table.insert(200, FakeProcess::new(BEFORE, UID));
    each_scan_lists_a_process_that_exits_at(&case, FakeTrigger::EnvironRead(200));
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
    case.sweep.protected = vec![identity(400, DURING)];
    for pid in [1, OWN_PID, 400] {
        case.table.insert(pid, case.marked(DURING));
    }
    case.table
        .insert(401, FakeProcess::new(DURING, UID).unreadable());
    case.sweep.protected.push(identity(401, DURING));
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

#[test]
fn a_protected_pid_now_held_by_another_process_is_not_protected() {
    let mut case = Case::new();
    // The daemon (400, BEFORE) ended and a marked process of the run took its pid.
    case.sweep.protected = vec![identity(400, BEFORE)];
    case.table.insert(400, case.marked(DURING));
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.signalled, vec![term(400, DURING)]);
}

// ------------------------------------------------------------------------------------------
// The lineage net: the run's by ancestry
// ------------------------------------------------------------------------------------------

/// What `env -i` leaves: a readable environment without the marker.
const CLEARED: &[u8] = b"";
/// What a `setproctitle`-style rewrite leaves where the environment was.
const REWRITTEN: &[u8] = b"python3 worker.py --title\0\0\0\0";

#[test]
fn a_descendant_that_cleared_its_environment_is_stopped() {
    let case = Case::new().with_worker();
    case.table.insert(
        200,
        FakeProcess::new(DURING, UID)
            .with_environ(CLEARED)
            .child_of(OWN_PID)
            .ignoring_term(),
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(
        swept.signalled,
        vec![term(200, DURING), signalled(200, DURING, Signal::SIGKILL)]
    );
    assert_eq!(swept.descendants, vec![identity(200, DURING)]);
    assert!(!case.table.is_alive(200));
}

#[test]
fn descendants_at_any_depth_are_stopped_whatever_their_environment_says() {
    let case = Case::new().with_worker();
    // worker <- 200 (rewritten) <- 300 (cleared) <- 400 (another run's marker: not ours by
    // marker, ours by ancestry)
    let other_run = FakeProcess::marked(DURING + 3, UID, TaskId::new());
    case.table.insert(
        200,
        FakeProcess::new(DURING, UID)
            .with_environ(REWRITTEN)
            .child_of(OWN_PID),
    );
    case.table.insert(
        300,
        FakeProcess::new(DURING + 1, UID)
            .with_environ(CLEARED)
            .child_of(200),
    );
    case.table.insert(400, other_run.child_of(300));
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(
        swept.signalled,
        vec![
            term(200, DURING),
            term(300, DURING + 1),
            term(400, DURING + 3)
        ]
    );
    assert_eq!(swept.descendants.len(), 3);
}

#[test]
fn an_unrelated_same_user_process_started_during_the_run_is_never_touched() {
    let case = Case::new().with_worker();
    // A login shell of the same user and what it started during the run: readable, no
    // marker, not under the worker.
    case.table
        .insert(500, FakeProcess::new(DURING, UID).child_of(1));
    case.table.insert(
        501,
        FakeProcess::new(DURING + 1, UID)
            .with_environ(CLEARED)
            .child_of(500),
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.scans, 2);
    assert!(case.table.sent().is_empty());
    assert!(case.table.is_alive(500) && case.table.is_alive(501));
}

#[test]
fn a_descendant_whose_environment_is_unreadable_is_a_suspect_never_signalled() {
    let case = Case::new().with_worker();
    case.table.insert(
        200,
        FakeProcess::new(DURING, UID).unreadable().child_of(OWN_PID),
    );
    let (swept, _) = case.run();
    assert_eq!(
        swept.outcome,
        CleanupOutcome::UnreadableSuspects {
            remaining: vec![remaining(200, DURING, RemainingReason::Suspect)]
        }
    );
    assert!(case.table.sent().is_empty());
    assert!(case.table.is_alive(200));
}

#[test]
fn an_unreadable_descendant_of_another_user_is_ignored() {
    // The runbook: unreadable processes under another user are ignored, descendants too.
    let case = Case::new().with_worker();
    case.table.insert(
        200,
        FakeProcess::new(DURING, OTHER_UID)
            .unreadable()
            .child_of(OWN_PID),
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert!(case.table.sent().is_empty());
}

#[test]
fn a_readable_descendant_of_another_user_is_stopped() {
    let case = Case::new().with_worker();
    case.table
        .insert(200, FakeProcess::new(DURING, OTHER_UID).child_of(OWN_PID));
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.signalled, vec![term(200, DURING)]);
}

#[test]
fn a_parent_pid_reused_by_a_younger_process_is_not_followed() {
    let case = Case::new().with_worker();
    // 300's parent (pid 200) ended; a younger descendant of the worker took pid 200 before
    // 300 was seen re-parented to init. The link is stale: 300 is not the run's.
    case.table.insert(
        200,
        FakeProcess::new(DURING + 5, UID)
            .with_environ(CLEARED)
            .child_of(OWN_PID),
    );
    case.table.insert(
        300,
        FakeProcess::new(DURING, UID)
            .with_environ(CLEARED)
            .child_of(200),
    );
    case.table.on(
        FakeTrigger::Listing(2),
        vec![FakeEvent::Reparent { pid: 300, ppid: 1 }],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.signalled, vec![term(200, DURING + 5)]);
    assert!(case.table.is_alive(300), "the stale link named no ancestor");
}

#[test]
fn an_orphan_re_parented_while_its_ancestry_is_read_is_caught_by_a_later_scan() {
    let case = Case::new().with_worker();
    // worker <- 200 <- 300; 200 exits while 300's environment is read, and 300 comes back to
    // the worker (its subreaper).
    case.table.insert(
        200,
        FakeProcess::new(DURING, UID)
            .with_environ(CLEARED)
            .child_of(OWN_PID),
    );
    case.table.insert(
        300,
        FakeProcess::new(DURING + 1, UID)
            .with_environ(CLEARED)
            .child_of(200),
    );
    // Pid 200 is listed first and is signalled only after the scan; make it vanish in the
    // middle of 300's read instead.
    case.table.on(
        FakeTrigger::EnvironRead(300),
        vec![
            FakeEvent::Exit(200),
            FakeEvent::Reparent {
                pid: 300,
                ppid: OWN_PID,
            },
        ],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert!(swept.signalled.contains(&term(300, DURING + 1)));
    assert!(!case.table.is_alive(300));
}

#[test]
fn a_descendants_pid_reused_before_the_signal_is_never_hit() {
    let case = Case::new().with_worker();
    case.table.insert(
        200,
        FakeProcess::new(DURING, UID)
            .with_environ(CLEARED)
            .child_of(OWN_PID),
    );
    // Reused by an unrelated process between the scan and the pin.
    case.table.on(
        FakeTrigger::BeforePin(200),
        vec![
            FakeEvent::Exit(200),
            FakeEvent::Spawn(200, FakeProcess::new(DURING + 1, UID).with_environ(CLEARED)),
        ],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert!(case.table.sent().is_empty());
    assert!(case.table.is_alive(200), "the successor is untouched");
}

#[test]
fn a_descendant_re_parented_out_of_the_lineage_is_still_the_runs_by_identity() {
    let case = Case::new().with_worker();
    case.table.insert(
        200,
        FakeProcess::new(DURING, UID)
            .with_environ(CLEARED)
            .child_of(OWN_PID)
            .ignoring_term(),
    );
    // Once found, it was forked inside the lineage: its parent links no longer matter.
    case.table.on(
        FakeTrigger::BeforePin(200),
        vec![FakeEvent::Reparent { pid: 200, ppid: 1 }],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(
        swept.signalled,
        vec![term(200, DURING), signalled(200, DURING, Signal::SIGKILL)]
    );
}

#[test]
fn a_descendant_that_became_unreadable_before_the_signal_is_not_signalled() {
    let case = Case::new().with_worker();
    case.table.insert(
        200,
        FakeProcess::new(DURING, UID)
            .with_environ(CLEARED)
            .child_of(OWN_PID),
    );
    case.table.on(
        FakeTrigger::BeforePin(200),
        vec![FakeEvent::Spawn(
            200,
            FakeProcess::new(DURING, UID).unreadable().child_of(OWN_PID),
        )],
    );
    let (swept, _) = case.run();
    assert!(case.table.sent().is_empty());
    assert!(swept.notes.iter().any(|n| n.contains("no longer readable")));
    assert_eq!(
        swept.outcome,
        CleanupOutcome::UnreadableSuspects {
            remaining: vec![remaining(200, DURING, RemainingReason::Suspect)]
        }
    );
}

#[test]
fn without_a_lineage_root_an_unmarked_descendant_is_not_touched() {
    let mut case = Case::new().with_worker();
    case.sweep.lineage = None;
    case.table.insert(
        200,
        FakeProcess::new(DURING, UID)
            .with_environ(CLEARED)
            .child_of(OWN_PID),
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert!(case.table.sent().is_empty());
}

#[test]
fn once_the_lineage_root_has_ended_only_the_marker_counts() {
    // The daemon's sweep for a lost worker: its root is the recorded workload, gone now
    // (pid 250 is held by a younger process); what it left is found by the marker alone.
    let mut case = Case::new();
    case.sweep.lineage = Some(identity(250, WORKLOAD_START));
    case.table
        .insert(250, FakeProcess::new(DURING, UID).with_environ(CLEARED));
    case.table.insert(
        300,
        FakeProcess::new(DURING + 1, UID)
            .with_environ(CLEARED)
            .child_of(250),
    );
    case.table.insert(301, case.marked(DURING + 2));
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.signalled, vec![term(301, DURING + 2)]);
}

#[test]
fn a_live_lineage_root_that_rewrote_its_environment_is_itself_the_runs() {
    // The daemon's root is the workload; alive after its worker was lost, it is the run's.
    let mut case = Case::new();
    case.sweep.lineage = Some(identity(250, WORKLOAD_START));
    case.table.insert(
        250,
        FakeProcess::new(WORKLOAD_START, UID).with_environ(REWRITTEN),
    );
    case.table.insert(
        300,
        FakeProcess::new(DURING, UID)
            .with_environ(CLEARED)
            .child_of(250)
            .ignoring_term(),
    );
    // The root dies of its TERM; its child goes to init, out of the lineage, and is still
    // killed after the grace: it was found as the run's.
    case.table.on(
        FakeTrigger::BeforePin(300),
        vec![FakeEvent::Reparent { pid: 300, ppid: 1 }],
    );
    let (swept, _) = case.run();
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(
        swept.signalled,
        vec![
            term(250, WORKLOAD_START),
            term(300, DURING),
            signalled(300, DURING, Signal::SIGKILL)
        ]
    );
}
