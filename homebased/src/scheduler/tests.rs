//! Whole passes of `decide`: filling, victims and the blocked head together.

use super::*;
use homebased_shared::queue::PreemptMode::{Restart, Wait, Yield};
use homebased_shared::queue::Priority::{High, Low, Medium};

const MINUTE: i64 = 60_000;
const NOW: Millis = 100_000 * MINUTE;

fn lane(name: &str, device: Option<u32>) -> ResourceSlot {
    ResourceSlot {
        id: ResourceId::new(),
        name: name.to_string(),
        device,
        mig: false,
        run: None,
    }
}

fn busy(name: &str, device: Option<u32>, run: RunSlot) -> ResourceSlot {
    ResourceSlot {
        run: Some(run),
        ..lane(name, device)
    }
}

fn run(priority: Priority, mode: PreemptMode, phase: SlotPhase) -> RunSlot {
    RunSlot {
        job: JobId::new(),
        task: TaskId::new(),
        priority,
        mode,
        restart_within: None,
        phase,
        deadline: None,
    }
}

fn executing(priority: Priority, mode: PreemptMode, minutes_ago: i64) -> RunSlot {
    run(
        priority,
        mode,
        SlotPhase::Executing {
            started_at: NOW - minutes_ago * MINUTE,
        },
    )
}

fn held() -> SlotPhase {
    SlotPhase::Attention {
        attention: AttentionId::new(),
    }
}

fn within(mut run: RunSlot, minutes: u64) -> RunSlot {
    run.restart_within = Some(Duration::from_secs(minutes * 60));
    run
}

fn stopping(cause: StopCause, for_job: Option<JobId>) -> RunSlot {
    run(
        Low,
        Yield,
        SlotPhase::Stopping {
            cause,
            requested_at: NOW - MINUTE,
            for_job,
        },
    )
}

fn job(priority: Priority, position: u32) -> WaitingJob {
    WaitingJob {
        id: JobId::new(),
        priority,
        position,
        target: Target::Any,
        gpus: 1,
        time_limit: None,
        blocked_by_own_run: false,
        dependency: None,
    }
}

fn pinned(priority: Priority, position: u32, resource: &ResourceSlot) -> WaitingJob {
    WaitingJob {
        target: Target::Pinned(resource.id),
        ..job(priority, position)
    }
}

fn decide_on(resources: Vec<ResourceSlot>, jobs: Vec<WaitingJob>) -> Decisions {
    decide(&Snapshot {
        now: NOW,
        resources,
        jobs,
        storage_unavailable_since: None,
        reservations: true,
        cleanup_bound: Duration::from_secs(60),
    })
}

fn launch(job: &WaitingJob, resource: &ResourceSlot) -> Launch {
    Launch {
        job: job.id,
        resources: vec![resource.id],
    }
}

fn stop(resource: &ResourceSlot, cause: StopCause, for_job: &WaitingJob) -> Stop {
    let task = resource.run.as_ref().map(|r| r.task).unwrap_or_default();
    Stop {
        resource: resource.id,
        task,
        cause,
        for_job: for_job.id,
    }
}

fn run_blocker(resource: &ResourceSlot) -> Blocker {
    let run = resource.run.as_ref().unwrap();
    Blocker::Run {
        resource: resource.id,
        job: run.job,
        task: run.task,
    }
}

// ---- filling ----

#[test]
fn pinned_job_waiting_on_busy_lane_does_not_hold_up_any_jobs_behind_it() {
    let gpu0 = busy("gpu0", Some(0), executing(High, Wait, 60));
    let gpu1 = lane("gpu1", Some(1));
    let head = pinned(Medium, 1, &gpu0);
    let behind = job(Medium, 2);
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone()],
        vec![behind.clone(), head.clone()],
    );
    assert_eq!(d.launches, [launch(&behind, &gpu1)]);
    assert!(d.stops.is_empty());
    assert_eq!(d.first_blocked.map(|h| h.job), Some(head.id));
}

#[test]
fn several_jobs_start_in_one_pass_in_serving_order() {
    let gpu0 = lane("gpu0", Some(0));
    let gpu1 = lane("gpu1", Some(1));
    let gpu2 = lane("gpu2", Some(2));
    let low = job(Low, 1);
    let medium_second = job(Medium, 2);
    let medium_first = job(Medium, 1);
    let high = job(High, 3);
    let d = decide_on(
        vec![gpu2.clone(), gpu0.clone(), gpu1.clone()],
        vec![
            low.clone(),
            medium_second.clone(),
            high.clone(),
            medium_first.clone(),
        ],
    );
    assert_eq!(
        d.launches,
        [
            launch(&high, &gpu0),
            launch(&medium_first, &gpu1),
            launch(&medium_second, &gpu2),
        ]
    );
    assert!(d.stops.is_empty());
    assert_eq!(d.first_blocked.map(|h| h.job), Some(low.id));
}

#[test]
fn any_jobs_take_lowest_device_then_unindexed_lanes_by_natural_name() {
    let resources = [
        lane("gpu10", None),
        lane("gpu2", None),
        lane("gpu3", Some(3)),
        lane("gpu1", Some(1)),
    ];
    let jobs: Vec<WaitingJob> = (1..=4).map(|position| job(Low, position)).collect();
    let d = decide_on(resources.to_vec(), jobs.clone());
    let names: Vec<&str> = d
        .launches
        .iter()
        .map(|l| {
            let resource = resources.iter().find(|r| r.id == l.resources[0]).unwrap();
            resource.name.as_str()
        })
        .collect();
    assert_eq!(names, ["gpu1", "gpu3", "gpu2", "gpu10"]);
    let served: Vec<JobId> = d.launches.iter().map(|l| l.job).collect();
    assert_eq!(served, jobs.iter().map(|j| j.id).collect::<Vec<_>>());
    assert_eq!(d.first_blocked, None);
}

#[test]
fn no_phase_but_idle_is_free() {
    let phases = [
        SlotPhase::Launching,
        SlotPhase::Executing { started_at: NOW },
        SlotPhase::Stopping {
            cause: StopCause::UserCancel,
            requested_at: NOW,
            for_job: None,
        },
        SlotPhase::Cleaning,
        held(),
    ];
    for phase in phases {
        let gpu0 = busy("gpu0", Some(0), run(High, Wait, phase));
        let waiting = job(Low, 1);
        let d = decide_on(vec![gpu0], vec![waiting.clone()]);
        assert!(d.launches.is_empty(), "{phase:?}");
        assert_eq!(
            d.first_blocked.map(|h| h.job),
            Some(waiting.id),
            "{phase:?}"
        );
    }
}

#[test]
fn jobs_blocked_by_their_own_run_neither_start_nor_preempt_nor_head_the_queue() {
    let gpu0 = lane("gpu0", Some(0));
    let gpu1 = busy("gpu1", Some(1), executing(Low, Restart, 5));
    let gpu2 = busy("gpu2", Some(2), run(High, Wait, SlotPhase::Cleaning));
    let mut own_run_cleaning = job(High, 1);
    own_run_cleaning.blocked_by_own_run = true;
    let next = job(Medium, 1);
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone(), gpu2],
        vec![own_run_cleaning, next.clone()],
    );
    assert_eq!(d.launches, [launch(&next, &gpu0)]);
    assert!(d.stops.is_empty());
    assert_eq!(d.first_blocked, None);
}

#[test]
fn a_job_waiting_for_a_dependency_neither_starts_nor_preempts_nor_heads_the_queue() {
    let gpu0 = lane("gpu0", Some(0));
    let gpu1 = busy("gpu1", Some(1), executing(Low, Restart, 5));
    let trainer = JobId::new();
    let mut eval = job(High, 1);
    eval.dependency = Some((trainer, JobStatus::Active));
    let mut second = job(High, 2);
    second.dependency = Some((trainer, JobStatus::Queued));
    let next = job(Medium, 1);
    let d = decide_on(
        vec![gpu0.clone(), gpu1],
        vec![eval.clone(), second.clone(), next.clone()],
    );
    // The free lane goes to the job behind it; the busy low run is not preempted for it.
    assert_eq!(d.launches, [launch(&next, &gpu0)]);
    assert!(d.stops.is_empty(), "{:?}", d.stops);
    assert_eq!(d.first_blocked, None);
    assert_eq!(
        reason_of(&d, &eval),
        Waiting::Dependency {
            job: trainer,
            state: JobStatus::Active
        }
    );
    assert_eq!(
        reason_of(&d, &second),
        Waiting::Dependency {
            job: trainer,
            state: JobStatus::Queued
        }
    );
}

#[test]
fn a_job_whose_dependencies_succeeded_serves_in_its_slot() {
    let gpu0 = lane("gpu0", Some(0));
    let freed = job(Medium, 1);
    let later = job(Medium, 2);
    let d = decide_on(vec![gpu0.clone()], vec![later.clone(), freed.clone()]);
    assert_eq!(d.launches, [launch(&freed, &gpu0)]);
    assert_eq!(reason_of(&d, &later), Waiting::Ahead { job: freed.id });
}

#[test]
fn the_dependency_reason_comes_first_even_beyond_the_snapshot() {
    let gpu0 = busy("gpu0", Some(0), executing(High, Wait, 5));
    let head = job(Medium, 1);
    let d = decide_on(vec![gpu0.clone()], vec![head.clone()]);
    let trainer = JobId::new();
    let mut unread = job(Medium, 2);
    unread.dependency = Some((trainer, JobStatus::Queued));
    let snapshot = Snapshot {
        now: NOW,
        resources: vec![gpu0],
        jobs: vec![head],
        storage_unavailable_since: None,
        reservations: true,
        cleanup_bound: Duration::from_secs(60),
    };
    assert_eq!(
        crate::scheduler::waiting_beyond(&snapshot, &d, &unread),
        Some(Waiting::Dependency {
            job: trainer,
            state: JobStatus::Queued
        })
    );
}

// ---- the blocked head ----

#[test]
fn first_blocked_lists_every_busy_lane_it_may_use_in_resource_order() {
    let gpu0 = busy("gpu0", Some(0), executing(High, Yield, 60));
    let gpu1 = busy("gpu1", Some(1), run(High, Wait, held()));
    let gpu2 = busy("gpu2", Some(2), run(Low, Wait, SlotPhase::Cleaning));
    let aux = busy("aux", None, run(Low, Wait, SlotPhase::Launching));
    let head = job(High, 1);
    let d = decide_on(
        vec![aux.clone(), gpu2.clone(), gpu1.clone(), gpu0.clone()],
        vec![head.clone()],
    );
    let expected = BlockedHead {
        job: head.id,
        blockers: vec![
            run_blocker(&gpu0),
            Blocker::Attention { resource: gpu1.id },
            run_blocker(&gpu2),
            run_blocker(&aux),
        ],
        yield_requested: false,
    };
    assert_eq!(d.first_blocked, Some(expected));
    // The cleaning lane will free itself: no stop for the head.
    assert!(d.stops.is_empty());
}

#[test]
fn pinned_head_is_blocked_only_by_its_lane() {
    let gpu0 = busy("gpu0", Some(0), executing(Low, Wait, 60));
    let gpu1 = busy("gpu1", Some(1), executing(Low, Wait, 60));
    let head = pinned(Medium, 1, &gpu1);
    let d = decide_on(vec![gpu0, gpu1.clone()], vec![head]);
    let head_view = d.first_blocked.unwrap();
    assert_eq!(head_view.blockers, [run_blocker(&gpu1)]);
}

#[test]
fn yield_requested_for_the_head_selects_the_yield_notice_delay() {
    struct Case {
        name: &'static str,
        run: RunSlot,
        expected: bool,
    }
    let cases = [
        Case {
            name: "yield decided now",
            run: executing(Low, Yield, 60),
            expected: true,
        },
        Case {
            name: "restart decided now",
            run: executing(Low, Restart, 60),
            expected: false,
        },
        Case {
            name: "committed yield in flight",
            run: stopping(StopCause::Yield, None),
            expected: true,
        },
        Case {
            name: "committed restart in flight",
            run: stopping(StopCause::Restart, None),
            expected: false,
        },
        Case {
            name: "wait mode out of window",
            run: executing(Low, Wait, 60),
            expected: false,
        },
        Case {
            name: "attention",
            run: run(Low, Yield, held()),
            expected: false,
        },
    ];
    for case in cases {
        let gpu0 = busy("gpu0", Some(0), case.run);
        let head = job(High, 1);
        let d = decide_on(vec![gpu0], vec![head]);
        let flag = d.first_blocked.map(|h| h.yield_requested);
        assert_eq!(flag, Some(case.expected), "{}", case.name);
    }
}

// ---- preemption ----

#[test]
fn victim_modes_inside_and_outside_the_restart_window() {
    // (mode, restart_within minutes, age minutes, expected cause)
    let cases: [(PreemptMode, Option<u64>, i64, Option<StopCause>); 10] = [
        (Restart, None, 1, Some(StopCause::Restart)),
        (Restart, None, 600, Some(StopCause::Restart)),
        (Yield, Some(10), 9, Some(StopCause::Restart)),
        (Yield, Some(10), 11, Some(StopCause::Yield)),
        (Yield, None, 0, Some(StopCause::Yield)),
        (Wait, Some(10), 9, Some(StopCause::Restart)),
        (Wait, Some(10), 11, None),
        (Wait, None, 0, None),
        // The exact edge is outside: the window is `age < restart_within`.
        (Yield, Some(10), 10, Some(StopCause::Yield)),
        (Wait, Some(10), 10, None),
    ];
    for (mode, window, age, expected) in cases {
        let mut victim = executing(Low, mode, age);
        if let Some(minutes) = window {
            victim = within(victim, minutes);
        }
        let gpu0 = busy("gpu0", Some(0), victim);
        let urgent = job(High, 1);
        let d = decide_on(vec![gpu0.clone()], vec![urgent.clone()]);
        let expected: Vec<Stop> = expected
            .map(|cause| stop(&gpu0, cause, &urgent))
            .into_iter()
            .collect();
        assert_eq!(d.stops, expected, "{mode:?} within {window:?} age {age}m");
        assert!(d.launches.is_empty());
    }
}

#[test]
fn equal_levels_never_preempt() {
    for level in [Low, Medium, High] {
        for mode in [Restart, Yield, Wait] {
            let gpu0 = busy("gpu0", Some(0), within(executing(level, mode, 0), 60));
            let d = decide_on(vec![gpu0], vec![job(level, 1)]);
            assert!(d.stops.is_empty(), "{level:?} {mode:?}");
        }
    }
}

#[test]
fn lower_waiting_jobs_never_preempt_higher_runs() {
    let gpu0 = busy("gpu0", Some(0), executing(Medium, Restart, 1));
    let d = decide_on(vec![gpu0], vec![job(Low, 1)]);
    assert!(d.stops.is_empty());
}

#[test]
fn move_that_raises_the_victim_to_the_waiting_level_prevents_preemption() {
    // The run's job was moved from low to high while a high job waits.
    let gpu0 = busy("gpu0", Some(0), executing(High, Restart, 1));
    let d = decide_on(vec![gpu0], vec![job(High, 1)]);
    assert!(d.stops.is_empty());
}

#[test]
fn launching_runs_are_not_victims() {
    let gpu0 = busy("gpu0", Some(0), run(Low, Restart, SlotPhase::Launching));
    let d = decide_on(vec![gpu0], vec![job(High, 1)]);
    assert!(d.stops.is_empty());
    assert!(d.launches.is_empty());
}

#[test]
fn pinned_waiting_jobs_only_preempt_their_lane() {
    let gpu0 = busy("gpu0", Some(0), executing(Low, Restart, 1));
    let gpu1 = busy("gpu1", Some(1), executing(Medium, Wait, 60));
    let urgent = pinned(High, 1, &gpu1);
    let d = decide_on(vec![gpu0.clone(), gpu1.clone()], vec![urgent.clone()]);
    assert!(d.stops.is_empty());

    let gpu1 = busy("gpu1", Some(1), executing(Medium, Yield, 60));
    let urgent = pinned(High, 1, &gpu1);
    let d = decide_on(vec![gpu0, gpu1.clone()], vec![urgent.clone()]);
    assert_eq!(d.stops, [stop(&gpu1, StopCause::Yield, &urgent)]);
}

#[test]
fn wait_mode_head_does_not_keep_a_later_job_from_preempting() {
    let lane_a = busy("gpu0", Some(0), executing(Low, Wait, 60));
    let lane_b = busy("gpu1", Some(1), executing(Low, Restart, 60));
    let head = pinned(High, 1, &lane_a);
    let later = job(High, 2);
    let d = decide_on(
        vec![lane_a, lane_b.clone()],
        vec![head.clone(), later.clone()],
    );
    assert_eq!(d.stops, [stop(&lane_b, StopCause::Restart, &later)]);
    assert_eq!(d.first_blocked.map(|h| h.job), Some(head.id));
}

#[test]
fn two_urgent_jobs_stop_two_victims_at_once_and_no_more() {
    let gpu0 = busy("gpu0", Some(0), executing(Low, Restart, 30));
    let gpu1 = busy("gpu1", Some(1), executing(Low, Restart, 20));
    let gpu2 = busy("gpu2", Some(2), executing(Low, Restart, 10));
    let first = job(High, 1);
    let second = job(High, 2);
    let d = decide_on(
        vec![gpu0, gpu1.clone(), gpu2.clone()],
        vec![second.clone(), first.clone()],
    );
    // The youngest runs lose the least work.
    assert_eq!(
        d.stops,
        [
            stop(&gpu2, StopCause::Restart, &first),
            stop(&gpu1, StopCause::Restart, &second),
        ]
    );
}

#[test]
fn victims_are_chosen_lowest_level_then_restart_then_youngest_then_resource_order() {
    struct Case {
        name: &'static str,
        runs: [RunSlot; 2],
        expected_lane: usize,
        expected_cause: StopCause,
    }
    let cases = [
        Case {
            name: "lowest level first",
            runs: [executing(Medium, Restart, 1), executing(Low, Yield, 60)],
            expected_lane: 1,
            expected_cause: StopCause::Yield,
        },
        Case {
            name: "restart before yield",
            runs: [executing(Low, Yield, 1), executing(Low, Restart, 60)],
            expected_lane: 1,
            expected_cause: StopCause::Restart,
        },
        Case {
            name: "young yield-mode run restarts, so it counts as restart",
            runs: [
                executing(Low, Yield, 1),
                within(executing(Low, Yield, 5), 10),
            ],
            expected_lane: 1,
            expected_cause: StopCause::Restart,
        },
        Case {
            name: "youngest run",
            runs: [executing(Low, Yield, 60), executing(Low, Yield, 30)],
            expected_lane: 1,
            expected_cause: StopCause::Yield,
        },
        Case {
            name: "resource order on a full tie",
            runs: [executing(Low, Yield, 30), executing(Low, Yield, 30)],
            expected_lane: 0,
            expected_cause: StopCause::Yield,
        },
        Case {
            name: "a stoppable run over a wait-mode one",
            runs: [executing(Low, Wait, 1), executing(Medium, Yield, 60)],
            expected_lane: 1,
            expected_cause: StopCause::Yield,
        },
    ];
    for case in cases {
        let [first, second] = case.runs;
        let lanes = [busy("gpu0", Some(0), first), busy("gpu1", Some(1), second)];
        let urgent = job(High, 1);
        let d = decide_on(
            vec![lanes[1].clone(), lanes[0].clone()],
            vec![urgent.clone()],
        );
        let expected = stop(&lanes[case.expected_lane], case.expected_cause, &urgent);
        assert_eq!(d.stops, [expected], "{}", case.name);
    }
}

#[test]
fn medium_waiting_job_preempts_low_runs_only() {
    let gpu0 = busy("gpu0", Some(0), executing(Low, Restart, 1));
    let gpu1 = busy("gpu1", Some(1), executing(Medium, Restart, 1));
    let high = job(High, 1);
    let medium = job(Medium, 1);
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone()],
        vec![medium.clone(), high.clone()],
    );
    // The high job takes the only low victim first; the medium one finds nothing it
    // may stop.
    assert_eq!(d.stops, [stop(&gpu0, StopCause::Restart, &high)]);
}

// ---- lanes already becoming free ----

#[test]
fn lanes_already_becoming_free_need_no_new_stop() {
    let becoming_free = [
        ("cleaning", run(Low, Wait, SlotPhase::Cleaning)),
        ("yield in flight", stopping(StopCause::Yield, None)),
        ("restart in flight", stopping(StopCause::Restart, None)),
        ("user cancel", stopping(StopCause::UserCancel, None)),
    ];
    for (name, phase_run) in becoming_free {
        let gpu0 = busy("gpu0", Some(0), phase_run);
        let gpu1 = busy("gpu1", Some(1), executing(Low, Restart, 1));
        let d = decide_on(vec![gpu0, gpu1], vec![job(High, 1)]);
        assert!(d.stops.is_empty(), "{name}");
        assert!(d.launches.is_empty(), "{name}");
    }
}

#[test]
fn attention_is_not_becoming_free() {
    let gpu0 = busy("gpu0", Some(0), run(Low, Wait, held()));
    let gpu1 = busy("gpu1", Some(1), executing(Low, Restart, 1));
    let urgent = job(High, 1);
    let d = decide_on(vec![gpu0, gpu1.clone()], vec![urgent.clone()]);
    assert_eq!(d.stops, [stop(&gpu1, StopCause::Restart, &urgent)]);
}

#[test]
fn stop_in_flight_for_the_same_job_gets_no_second_stop() {
    let urgent = job(High, 1);
    let gpu0 = busy("gpu0", Some(0), stopping(StopCause::Yield, Some(urgent.id)));
    let gpu1 = busy("gpu1", Some(1), executing(Low, Restart, 1));
    let d = decide_on(vec![gpu0, gpu1], vec![urgent.clone()]);
    assert!(d.stops.is_empty());
    assert_eq!(
        d.first_blocked.map(|h| (h.job, h.yield_requested)),
        Some((urgent.id, true))
    );
}

#[test]
fn one_becoming_free_lane_serves_one_job_and_the_next_preempts() {
    let gpu0 = busy("gpu0", Some(0), run(Low, Wait, SlotPhase::Cleaning));
    let gpu1 = busy("gpu1", Some(1), executing(Low, Restart, 1));
    let first = job(High, 1);
    let second = job(High, 2);
    let d = decide_on(vec![gpu0, gpu1.clone()], vec![first, second.clone()]);
    assert_eq!(d.stops, [stop(&gpu1, StopCause::Restart, &second)]);
}

#[test]
fn each_job_keeps_the_stop_decided_for_it() {
    // Both stops were committed in an earlier pass, in the opposite lane order: the next
    // pass must see both jobs served and stop nothing more.
    let first = job(High, 1);
    let second = job(High, 2);
    let gpu0 = busy("gpu0", Some(0), stopping(StopCause::Yield, Some(second.id)));
    let gpu1 = busy("gpu1", Some(1), stopping(StopCause::Yield, Some(first.id)));
    let gpu2 = busy("gpu2", Some(2), executing(Low, Restart, 1));
    let d = decide_on(vec![gpu0, gpu1, gpu2], vec![first, second]);
    assert!(d.stops.is_empty());
}

#[test]
fn cancelled_preemptor_leaves_its_committed_stop_and_nothing_new() {
    let cancelled = JobId::new();
    let gpu0 = busy("gpu0", Some(0), stopping(StopCause::Yield, Some(cancelled)));
    let gpu1 = busy("gpu1", Some(1), executing(Low, Restart, 1));
    let d = decide_on(vec![gpu0.clone(), gpu1.clone()], vec![]);
    assert_eq!(d, Decisions::default());

    // A low job that arrives meanwhile waits for the still-busy lane and stops nothing.
    let low = job(Low, 1);
    let d = decide_on(vec![gpu0, gpu1], vec![low.clone()]);
    assert!(d.launches.is_empty());
    assert!(d.stops.is_empty());
    assert_eq!(d.first_blocked.map(|h| h.job), Some(low.id));
}

#[test]
fn orphaned_stop_serves_another_urgent_job() {
    // The job the stop was for moved down or left; another high job takes over the lane
    // instead of stopping a second run.
    let gpu0 = busy(
        "gpu0",
        Some(0),
        stopping(StopCause::Restart, Some(JobId::new())),
    );
    let gpu1 = busy("gpu1", Some(1), executing(Low, Restart, 1));
    let d = decide_on(vec![gpu0, gpu1], vec![job(High, 1)]);
    assert!(d.stops.is_empty());
}

#[test]
fn decisions_are_deterministic_whatever_the_input_order() {
    let resources = vec![
        busy("gpu0", Some(0), executing(Low, Yield, 30)),
        busy("gpu1", Some(1), executing(Low, Yield, 30)),
        lane("aux", None),
        busy("gpu2", Some(2), run(Low, Wait, SlotPhase::Cleaning)),
    ];
    let jobs = vec![job(High, 1), job(High, 2), job(Medium, 1), job(High, 3)];
    let expected = decide_on(resources.clone(), jobs.clone());
    let mut reversed_resources = resources.clone();
    reversed_resources.reverse();
    let mut reversed_jobs = jobs.clone();
    reversed_jobs.reverse();
    assert_eq!(decide_on(reversed_resources, reversed_jobs), expected);
    assert_eq!(expected.launches.len(), 1);
    assert_eq!(expected.stops.len(), 2);
}

// ---- waiting reasons ----

fn reason_of(d: &Decisions, job: &WaitingJob) -> Waiting {
    d.waiting
        .iter()
        .find(|(id, _)| *id == job.id)
        .map(|(_, w)| w.clone())
        .unwrap()
}

fn blocker_of(resource: &ResourceSlot) -> homebased_shared::wire::WaitingBlocker {
    let run = resource.run.as_ref().unwrap();
    homebased_shared::wire::WaitingBlocker {
        resource: resource.id,
        job: run.job,
        task: run.task,
        phase: run.phase.kind(),
        priority: run.priority,
    }
}

#[test]
fn a_job_behind_runs_it_may_not_stop_names_every_one_of_them() {
    // Equal level (never preempts), a wait-mode run past its window, a launching run.
    let equal = busy("gpu0", Some(0), executing(Medium, Restart, 5));
    let wait_mode = busy("gpu1", Some(1), within(executing(Low, Wait, 60), 10));
    let launching = busy("gpu2", Some(2), run(Low, Restart, SlotPhase::Launching));
    let waiting = job(Medium, 1);
    let d = decide_on(
        vec![launching.clone(), equal.clone(), wait_mode.clone()],
        vec![waiting.clone()],
    );
    assert!(d.stops.is_empty());
    assert_eq!(
        reason_of(&d, &waiting),
        Waiting::Resources {
            blockers: vec![
                blocker_of(&equal),
                blocker_of(&wait_mode),
                blocker_of(&launching)
            ]
        }
    );
}

#[test]
fn a_job_for_which_a_yield_is_decided_names_the_victim_and_the_cause() {
    let gpu0 = busy("gpu0", Some(0), executing(Low, Yield, 60));
    let high = job(High, 1);
    let d = decide_on(vec![gpu0.clone()], vec![high.clone()]);
    assert_eq!(d.stops, [stop(&gpu0, StopCause::Yield, &high)]);
    assert_eq!(
        reason_of(&d, &high),
        Waiting::Stopping {
            resource: gpu0.id,
            task: gpu0.run.as_ref().unwrap().task,
            cause: StopCause::Yield,
            requested_at: NOW,
        }
    );
}

#[test]
fn a_job_counting_on_a_committed_yield_names_it_with_its_request_time() {
    let high = job(High, 1);
    let gpu0 = busy("gpu0", Some(0), stopping(StopCause::Yield, Some(high.id)));
    let d = decide_on(vec![gpu0.clone()], vec![high.clone()]);
    assert!(d.stops.is_empty());
    assert_eq!(
        reason_of(&d, &high),
        Waiting::Stopping {
            resource: gpu0.id,
            task: gpu0.run.as_ref().unwrap().task,
            cause: StopCause::Yield,
            requested_at: NOW - MINUTE,
        }
    );
}

#[test]
fn a_job_waiting_for_a_cleaning_lane_names_it() {
    let gpu0 = busy("gpu0", Some(0), run(High, Wait, SlotPhase::Cleaning));
    let waiting = job(Low, 1);
    let d = decide_on(vec![gpu0.clone()], vec![waiting.clone()]);
    assert_eq!(
        reason_of(&d, &waiting),
        Waiting::Cleaning {
            resource: gpu0.id,
            task: gpu0.run.as_ref().unwrap().task,
        }
    );
}

#[test]
fn a_job_whose_own_run_still_cleans_or_is_held_names_that_run() {
    let mut own = job(High, 1);
    own.blocked_by_own_run = true;
    let mut cleaning = run(High, Wait, SlotPhase::Cleaning);
    cleaning.job = own.id;
    let gpu0 = busy("gpu0", Some(0), cleaning);
    let gpu1 = lane("gpu1", Some(1));
    let d = decide_on(vec![gpu0.clone(), gpu1.clone()], vec![own.clone()]);
    assert!(d.launches.is_empty());
    assert_eq!(
        reason_of(&d, &own),
        Waiting::Cleaning {
            resource: gpu0.id,
            task: gpu0.run.as_ref().unwrap().task,
        }
    );

    let attention = AttentionId::new();
    let mut held_run = run(High, Wait, SlotPhase::Attention { attention });
    held_run.job = own.id;
    let gpu0 = busy("gpu0", Some(0), held_run);
    let d = decide_on(vec![gpu0.clone(), gpu1], vec![own.clone()]);
    assert_eq!(
        reason_of(&d, &own),
        Waiting::Attention {
            resource: gpu0.id,
            attention
        }
    );
}

#[test]
fn a_job_pinned_to_a_held_lane_names_the_attention_while_others_start() {
    let attention = AttentionId::new();
    let gpu0 = busy(
        "gpu0",
        Some(0),
        run(Low, Wait, SlotPhase::Attention { attention }),
    );
    let gpu1 = lane("gpu1", Some(1));
    let pinned_job = pinned(High, 1, &gpu0);
    let other = job(Low, 1);
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone()],
        vec![pinned_job.clone(), other.clone()],
    );
    assert_eq!(d.launches, [launch(&other, &gpu1)]);
    assert_eq!(
        reason_of(&d, &pinned_job),
        Waiting::Attention {
            resource: gpu0.id,
            attention
        }
    );
    assert!(d.waiting.iter().all(|(id, _)| *id != other.id));
}

#[test]
fn a_pinned_job_behind_a_busy_lane_names_its_run() {
    let gpu0 = busy("gpu0", Some(0), executing(High, Wait, 60));
    let gpu1 = lane("gpu1", Some(1));
    let head = pinned(Medium, 1, &gpu0);
    let d = decide_on(vec![gpu0.clone(), gpu1], vec![head.clone()]);
    assert_eq!(
        reason_of(&d, &head),
        Waiting::Resources {
            blockers: vec![blocker_of(&gpu0)]
        }
    );
}

#[test]
fn a_job_behind_one_that_takes_the_free_or_freeing_lane_names_that_job() {
    let gpu0 = lane("gpu0", Some(0));
    let first = job(Medium, 1);
    let second = job(Medium, 2);
    let d = decide_on(vec![gpu0], vec![second.clone(), first.clone()]);
    assert_eq!(reason_of(&d, &second), Waiting::Ahead { job: first.id });

    let gpu0 = busy("gpu0", Some(0), run(Low, Wait, SlotPhase::Cleaning));
    let d = decide_on(vec![gpu0], vec![second.clone(), first.clone()]);
    assert_eq!(d.claims.len(), 1);
    assert_eq!(reason_of(&d, &second), Waiting::Ahead { job: first.id });
}

#[test]
fn a_job_with_no_resource_it_may_use_says_so() {
    let any = job(Low, 1);
    let d = decide_on(vec![], vec![any.clone()]);
    assert_eq!(reason_of(&d, &any), Waiting::NoResources);
    let gone = lane("gone", None);
    let pinned_job = pinned(Low, 2, &gone);
    let d = decide_on(vec![lane("gpu0", Some(0))], vec![pinned_job.clone()]);
    assert_eq!(reason_of(&d, &pinned_job), Waiting::NoResources);
}

#[test]
fn a_job_given_a_lane_while_storage_is_unavailable_waits_for_storage() {
    let gpu0 = lane("gpu0", Some(0));
    let first = job(Medium, 1);
    let second = job(Medium, 2);
    let jobs = vec![first.clone(), second.clone()];
    let held = decide(&Snapshot {
        now: NOW,
        resources: vec![gpu0.clone()],
        jobs: jobs.clone(),
        storage_unavailable_since: Some(NOW - 5_000),
        reservations: true,
        cleanup_bound: Duration::from_secs(60),
    });
    // The same decisions: only the launched job's reason differs.
    let free = decide_on(vec![gpu0.clone()], jobs);
    assert_eq!(held.launches, free.launches);
    assert_eq!(held.launches, vec![launch(&first, &gpu0)]);
    assert_eq!(
        reason_of(&held, &first),
        Waiting::StorageUnavailable { since: NOW - 5_000 }
    );
    assert!(free.waiting.iter().all(|(id, _)| *id != first.id));
    assert_eq!(reason_of(&held, &second), reason_of(&free, &second));
    assert_eq!(reason_of(&held, &second), Waiting::Ahead { job: first.id });
}

#[test]
fn a_job_the_snapshot_did_not_read_gets_the_reason_the_same_pass_implies() {
    let gpu0 = busy("gpu0", Some(0), executing(Medium, Yield, 60));
    let head = job(Medium, 1);
    let snapshot = Snapshot {
        now: NOW,
        resources: vec![gpu0.clone()],
        jobs: vec![head.clone()],
        storage_unavailable_since: None,
        reservations: true,
        cleanup_bound: Duration::from_secs(60),
    };
    let d = decide(&snapshot);
    let unread = job(Low, 7);
    assert_eq!(
        waiting_beyond(&snapshot, &d, &unread),
        Some(Waiting::Resources {
            blockers: vec![blocker_of(&gpu0)]
        })
    );
    assert_eq!(
        waiting_beyond(&snapshot, &d, &head),
        Some(reason_of(&d, &head))
    );
}

#[test]
fn every_job_that_did_not_start_has_exactly_one_reason_and_the_head_agrees_with_its_notice() {
    let gpu0 = busy("gpu0", Some(0), executing(High, Wait, 60));
    let gpu1 = busy("gpu1", Some(1), executing(Low, Yield, 60));
    let gpu2 = lane("gpu2", Some(2));
    let jobs: Vec<WaitingJob> = (1..=4).map(|p| job(Medium, p)).collect();
    let d = decide_on(vec![gpu0.clone(), gpu1.clone(), gpu2], jobs.clone());
    assert_eq!(d.launches.len(), 1);
    assert_eq!(d.waiting.len(), 3);
    let head = d.first_blocked.as_ref().unwrap();
    assert_eq!(d.waiting[0].0, head.job);
    // The head's stop is the yield its notice counts.
    assert!(head.yield_requested);
    assert!(matches!(
        d.waiting[0].1,
        Waiting::Stopping {
            cause: StopCause::Yield,
            ..
        }
    ));
}

// ---- several lanes: filling, reservations, preemption for N ----

const BOUND: Duration = Duration::from_secs(60);

fn gpus(priority: Priority, position: u32, n: u32) -> WaitingJob {
    WaitingJob {
        gpus: n,
        ..job(priority, position)
    }
}

fn limited(mut job: WaitingJob, minutes: u64) -> WaitingJob {
    job.time_limit = Some(Duration::from_secs(minutes * 60));
    job
}

/// A run that ends by its time limit `minutes` from now.
fn ending_in(mut run: RunSlot, minutes: i64) -> RunSlot {
    run.deadline = Some(NOW + minutes * MINUTE);
    run
}

fn gpu(n: u32) -> ResourceSlot {
    lane(&format!("gpu{n}"), Some(n))
}

fn gpu_busy(n: u32, run: RunSlot) -> ResourceSlot {
    busy(&format!("gpu{n}"), Some(n), run)
}

fn mig_slice(name: &str) -> ResourceSlot {
    ResourceSlot {
        mig: true,
        ..lane(name, None)
    }
}

fn decide_with(
    reservations: bool,
    resources: Vec<ResourceSlot>,
    jobs: Vec<WaitingJob>,
) -> Decisions {
    decide(&Snapshot {
        now: NOW,
        resources,
        jobs,
        storage_unavailable_since: None,
        reservations,
        cleanup_bound: BOUND,
    })
}

fn launch_on(job: &WaitingJob, lanes: &[&ResourceSlot]) -> Launch {
    Launch {
        job: job.id,
        resources: lanes.iter().map(|l| l.id).collect(),
    }
}

fn ids(lanes: &[&ResourceSlot]) -> Vec<ResourceId> {
    lanes.iter().map(|l| l.id).collect()
}

#[test]
fn a_job_of_several_lanes_takes_the_lowest_free_ones_at_once() {
    let lanes = [gpu(3), gpu(1), gpu(0), gpu(2)];
    let first = gpus(Medium, 1, 2);
    let second = gpus(Medium, 2, 2);
    let d = decide_on(lanes.to_vec(), vec![second.clone(), first.clone()]);
    assert_eq!(
        d.launches,
        [
            launch_on(&first, &[&lanes[2], &lanes[1]]),
            launch_on(&second, &[&lanes[3], &lanes[0]])
        ]
    );
    assert_eq!(d.reservation, None);
}

#[test]
fn a_job_short_of_lanes_starts_on_none_of_them() {
    // One free lane of the two it needs; without reservations the one behind takes it.
    let gpu0 = gpu_busy(0, executing(Medium, Wait, 5));
    let gpu1 = gpu(1);
    let pair = gpus(Medium, 1, 2);
    let single = job(Medium, 2);
    let d = decide_with(
        false,
        vec![gpu0.clone(), gpu1.clone()],
        vec![pair.clone(), single.clone()],
    );
    assert_eq!(d.launches, [launch(&single, &gpu1)]);
    assert_eq!(d.reservation, None);
    assert_eq!(d.first_blocked.as_ref().map(|h| h.job), Some(pair.id));
    assert!(matches!(reason_of(&d, &pair), Waiting::Ahead { job } if job == single.id));
}

#[test]
fn a_pinned_set_takes_exactly_its_lanes_or_waits_for_all_of_them() {
    let lanes = [gpu(0), gpu(1), gpu(2), gpu(3)];
    let set = WaitingJob {
        target: Target::Lanes(vec![lanes[3].id, lanes[1].id]),
        ..gpus(Medium, 1, 2)
    };
    let d = decide_on(lanes.to_vec(), vec![set.clone()]);
    assert_eq!(d.launches, [launch_on(&set, &[&lanes[1], &lanes[3]])]);

    // One of the set is busy: it takes neither, and holds both.
    let busy3 = ResourceSlot {
        run: Some(executing(Medium, Wait, 5)),
        ..lanes[3].clone()
    };
    let behind = job(Medium, 2);
    let d = decide_on(
        vec![
            lanes[0].clone(),
            lanes[1].clone(),
            lanes[2].clone(),
            busy3.clone(),
        ],
        vec![set.clone(), behind.clone()],
    );
    assert_eq!(d.launches, [launch(&behind, &lanes[0])]);
    assert_eq!(
        d.reservation,
        Some(Reservation {
            job: set.id,
            resources: ids(&[&lanes[1], &busy3]),
            estimated_start: None,
        })
    );
}

#[test]
fn a_job_of_several_lanes_never_takes_a_mig_slice() {
    let slices = [mig_slice("gpu0-mig0"), mig_slice("gpu0-mig1")];
    let gpu1 = gpu(1);
    let pair = gpus(Medium, 1, 2);
    let single = job(Medium, 2);
    let d = decide_with(
        false,
        vec![slices[0].clone(), slices[1].clone(), gpu1.clone()],
        vec![pair.clone(), single.clone()],
    );
    // The single job may use a slice, but takes the indexed lane first (resource order).
    assert_eq!(d.launches, [launch(&single, &gpu1)]);
    // Only one lane it may use: it can never start.
    assert_eq!(reason_of(&d, &pair), Waiting::NoResources);

    let gpu2 = gpu(2);
    let d = decide_on(
        vec![
            slices[0].clone(),
            gpu1.clone(),
            slices[1].clone(),
            gpu2.clone(),
        ],
        vec![pair.clone(), single.clone()],
    );
    assert_eq!(
        d.launches,
        [
            launch_on(&pair, &[&gpu1, &gpu2]),
            launch(&single, &slices[0])
        ]
    );
}

#[test]
fn the_reservation_holds_the_lanes_free_soonest_and_says_when() {
    let late = gpu_busy(0, ending_in(executing(Medium, Wait, 5), 60));
    let soon = gpu_busy(1, ending_in(executing(Medium, Wait, 5), 20));
    let free = gpu(2);
    let unlimited = gpu_busy(3, executing(Medium, Wait, 5));
    let pair = gpus(Medium, 1, 2);
    let d = decide_on(
        vec![late.clone(), soon.clone(), free.clone(), unlimited.clone()],
        vec![pair.clone()],
    );
    let estimated_start = Some(NOW + 21 * MINUTE);
    assert_eq!(
        d.reservation,
        Some(Reservation {
            job: pair.id,
            resources: ids(&[&soon, &free]),
            estimated_start,
        })
    );
    assert_eq!(
        reason_of(&d, &pair),
        Waiting::Gathering {
            resources: ids(&[&soon, &free]),
            free: vec![free.id],
            estimated_start,
            blockers: vec![blocker_of(&soon)],
        }
    );
    // The first blocked job is still the first that could not start.
    assert_eq!(d.first_blocked.map(|h| h.job), Some(pair.id));
}

#[test]
fn a_held_lane_goes_only_to_a_job_that_ends_before_the_estimated_start() {
    let soon = gpu_busy(0, ending_in(executing(Medium, Wait, 5), 20));
    let free = gpu(1);
    let pair = gpus(Medium, 1, 2);
    let unlimited = job(Medium, 2);
    let too_long = limited(job(Medium, 3), 20);
    let short = limited(job(Medium, 4), 19);
    let d = decide_on(
        vec![soon.clone(), free.clone()],
        vec![
            pair.clone(),
            unlimited.clone(),
            too_long.clone(),
            short.clone(),
        ],
    );
    // 19 minutes plus the 1 minute bound end before 21: the short job backfills.
    assert_eq!(d.launches, [launch(&short, &free)]);
    let reserved = Waiting::Reserved {
        job: pair.id,
        resources: ids(&[&soon, &free]),
        estimated_start: Some(NOW + 21 * MINUTE),
    };
    assert_eq!(reason_of(&d, &unlimited), reserved);
    assert_eq!(reason_of(&d, &too_long), reserved);
    // The holder counts the backfilled lane as not free.
    assert!(matches!(
        reason_of(&d, &pair),
        Waiting::Gathering { free, .. } if free.is_empty()
    ));
}

#[test]
fn an_unknown_estimate_allows_no_backfill() {
    let unlimited_run = gpu_busy(0, executing(Medium, Wait, 5));
    let free = gpu(1);
    let pair = gpus(Medium, 1, 2);
    let short = limited(job(Medium, 2), 1);
    let d = decide_on(
        vec![unlimited_run.clone(), free.clone()],
        vec![pair.clone(), short.clone()],
    );
    assert!(d.launches.is_empty());
    assert_eq!(
        reason_of(&d, &short),
        Waiting::Reserved {
            job: pair.id,
            resources: ids(&[&unlimited_run, &free]),
            estimated_start: None,
        }
    );
}

#[test]
fn lanes_outside_the_reservation_serve_everyone() {
    let lanes = [gpu(0), gpu(1), gpu_busy(2, executing(Medium, Wait, 5))];
    let set = WaitingJob {
        target: Target::Lanes(vec![lanes[1].id, lanes[2].id]),
        ..gpus(Medium, 1, 2)
    };
    let first = job(Medium, 2);
    let second = job(Medium, 3);
    let d = decide_on(
        lanes.to_vec(),
        vec![set.clone(), first.clone(), second.clone()],
    );
    assert_eq!(d.launches, [launch(&first, &lanes[0])]);
    assert!(matches!(reason_of(&d, &second), Waiting::Reserved { job, .. } if job == set.id));
}

#[test]
fn a_backfilling_job_takes_lanes_outside_the_reservation_first() {
    let lanes = [
        gpu(0),
        gpu(1),
        gpu_busy(2, ending_in(executing(Medium, Wait, 5), 30)),
    ];
    let set = WaitingJob {
        target: Target::Lanes(vec![lanes[0].id, lanes[2].id]),
        ..gpus(Medium, 1, 2)
    };
    let short = limited(job(Medium, 2), 5);
    let d = decide_on(lanes.to_vec(), vec![set.clone(), short.clone()]);
    assert_eq!(d.launches, [launch(&short, &lanes[1])]);
}

#[test]
fn only_the_first_job_of_several_lanes_that_cannot_start_holds_lanes() {
    let gpu0 = gpu_busy(0, executing(Medium, Wait, 5));
    let gpu1 = gpu(1);
    let first = gpus(Medium, 1, 2);
    let second = gpus(Medium, 2, 2);
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone()],
        vec![second.clone(), first.clone()],
    );
    assert_eq!(d.reservation.as_ref().map(|r| r.job), Some(first.id));
    assert!(matches!(reason_of(&d, &second), Waiting::Reserved { job, .. } if job == first.id));
}

#[test]
fn a_job_ahead_of_the_holder_is_not_kept_off_its_lanes() {
    // The holder is computed in the same pass: a higher job is served before it.
    let gpu0 = gpu_busy(0, executing(High, Wait, 5));
    let gpu1 = gpu(1);
    let pair = gpus(Medium, 1, 2);
    let high = job(High, 1);
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone()],
        vec![pair.clone(), high.clone()],
    );
    assert_eq!(d.launches, [launch(&high, &gpu1)]);
    // The lane it took holds a run without a limit now: the start is unknown.
    assert_eq!(
        d.reservation,
        Some(Reservation {
            job: pair.id,
            resources: ids(&[&gpu0, &gpu1]),
            estimated_start: None,
        })
    );
}

#[test]
fn without_reservations_a_job_of_several_lanes_is_passed_over() {
    let gpu0 = gpu_busy(0, ending_in(executing(Medium, Wait, 5), 20));
    let gpu1 = gpu(1);
    let pair = gpus(Medium, 1, 2);
    let single = job(Medium, 2);
    let on = decide_on(
        vec![gpu0.clone(), gpu1.clone()],
        vec![pair.clone(), single.clone()],
    );
    assert!(on.launches.is_empty());
    let off = decide_with(
        false,
        vec![gpu0.clone(), gpu1.clone()],
        vec![pair.clone(), single.clone()],
    );
    assert_eq!(off.launches, [launch(&single, &gpu1)]);
    assert_eq!(off.reservation, None);
}

#[test]
fn a_job_of_several_lanes_stops_enough_victims_for_all_of_them() {
    let gpu0 = gpu_busy(0, executing(Low, Yield, 50));
    let gpu1 = gpu_busy(1, executing(Low, Restart, 60));
    let gpu2 = gpu_busy(2, executing(Low, Yield, 10));
    let gpu3 = gpu_busy(3, executing(High, Yield, 10));
    let pair = gpus(High, 1, 2);
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone(), gpu2.clone(), gpu3.clone()],
        vec![pair.clone()],
    );
    // Restart before yield, then the youngest.
    assert_eq!(
        d.stops,
        [
            stop(&gpu1, StopCause::Restart, &pair),
            stop(&gpu2, StopCause::Yield, &pair)
        ]
    );
}

#[test]
fn a_job_that_cannot_reach_its_lanes_stops_nothing() {
    let gpu0 = gpu_busy(0, executing(Low, Yield, 50));
    let gpu1 = gpu_busy(1, executing(Low, Restart, 60));
    let gpu2 = gpu_busy(2, executing(Medium, Wait, 60));
    let three = gpus(Medium, 1, 3);
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone(), gpu2.clone()],
        vec![three.clone()],
    );
    assert!(d.stops.is_empty());
    assert!(matches!(reason_of(&d, &three), Waiting::Gathering { .. }));
}

#[test]
fn free_and_becoming_free_lanes_count_toward_the_lanes_needed() {
    let free = gpu(0);
    let cleaning = gpu_busy(1, run(Low, Wait, SlotPhase::Cleaning));
    let victim = gpu_busy(2, executing(Low, Yield, 5));
    let other = gpu_busy(3, executing(Low, Yield, 1));
    let three = gpus(High, 1, 3);
    let d = decide_on(
        vec![
            free.clone(),
            cleaning.clone(),
            victim.clone(),
            other.clone(),
        ],
        vec![three.clone()],
    );
    // One victim, the youngest, makes up the third lane.
    assert_eq!(d.stops, [stop(&other, StopCause::Yield, &three)]);
    assert_eq!(
        d.claims,
        [Claim {
            job: three.id,
            resource: cleaning.id
        }]
    );
}

#[test]
fn a_victim_on_two_lanes_counts_for_both_and_gets_one_stop() {
    let wide = executing(Low, Yield, 5);
    let gpu0 = gpu_busy(0, wide.clone());
    let gpu1 = gpu_busy(1, wide);
    let gpu2 = gpu_busy(2, executing(Low, Yield, 60));
    let pair = gpus(High, 1, 2);
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone(), gpu2.clone()],
        vec![pair.clone()],
    );
    assert_eq!(d.stops, [stop(&gpu0, StopCause::Yield, &pair)]);
}

#[test]
fn a_victims_spare_lane_serves_the_next_job_without_a_stop_of_its_own() {
    // Two urgent jobs of one lane; the youngest victim holds two lanes. The first job takes
    // one of them; the second counts on the other instead of stopping the older run.
    let wide = executing(Low, Yield, 5);
    let gpu0 = gpu_busy(0, wide.clone());
    let gpu1 = gpu_busy(1, wide);
    let gpu2 = gpu_busy(2, executing(Low, Yield, 60));
    let first = job(High, 1);
    let second = job(High, 2);
    let third = job(High, 3);
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone(), gpu2.clone()],
        vec![first.clone(), second.clone()],
    );
    assert_eq!(d.stops, [stop(&gpu0, StopCause::Yield, &first)]);
    // A third job finds both spare lanes counted and stops the next run.
    let d = decide_on(
        vec![gpu0.clone(), gpu1.clone(), gpu2.clone()],
        vec![first.clone(), second.clone(), third.clone()],
    );
    assert_eq!(
        d.stops,
        [
            stop(&gpu0, StopCause::Yield, &first),
            stop(&gpu2, StopCause::Yield, &third)
        ]
    );
}

/// The lanes of `slot`'s run once a stop for `for_job` is committed: stopping, the same run.
fn stopped_for(slot: &ResourceSlot, for_job: &WaitingJob) -> ResourceSlot {
    let mut slot = slot.clone();
    if let Some(run) = slot.run.as_mut() {
        run.phase = SlotPhase::Stopping {
            cause: StopCause::Yield,
            requested_at: NOW - MINUTE,
            for_job: Some(for_job.id),
        };
    }
    slot
}

#[test]
fn a_victim_on_four_lanes_for_a_pair_leaves_two_for_the_next_urgent_job() {
    // One low run on four lanes, an older low run on a fifth (a victim too, but not needed).
    let wide = executing(Low, Yield, 5);
    let four: Vec<ResourceSlot> = (0..4).map(|n| gpu_busy(n, wide.clone())).collect();
    let older = gpu_busy(4, executing(Low, Yield, 60));
    let pair = gpus(High, 1, 2);
    let single = job(High, 2);
    let jobs = vec![pair.clone(), single.clone()];
    let mut lanes = four.clone();
    lanes.push(older.clone());
    let d = decide_on(lanes.clone(), jobs.clone());
    assert_eq!(
        d.stops,
        [stop(&four[0], StopCause::Yield, &pair)],
        "one stop"
    );

    // Next pass, the stop committed: both jobs count on the stopping run's lanes, and
    // nothing else is stopped.
    let stopping: Vec<ResourceSlot> = four.iter().map(|l| stopped_for(l, &pair)).collect();
    let mut lanes = stopping.clone();
    lanes.push(older.clone());
    let d = decide_on(lanes, jobs.clone());
    assert!(d.stops.is_empty(), "{:?}", d.stops);
    let claim = |job: &WaitingJob, lane: &ResourceSlot| Claim {
        job: job.id,
        resource: lane.id,
    };
    assert_eq!(
        d.claims,
        [
            claim(&pair, &stopping[0]),
            claim(&pair, &stopping[1]),
            claim(&single, &stopping[2])
        ]
    );

    // The lanes free: both start, on the lanes they counted on.
    let freed: Vec<ResourceSlot> = (0..4).map(gpu).collect();
    let mut lanes = freed.clone();
    lanes.push(older);
    let d = decide_on(lanes, jobs);
    assert!(d.stops.is_empty());
    assert_eq!(
        d.launches,
        [
            launch_on(&pair, &[&freed[0], &freed[1]]),
            launch_on(&single, &[&freed[2]])
        ]
    );
}

#[test]
fn on_four_lanes_one_four_lane_run_gives_an_urgent_pair_and_single_one_stop() {
    let wide = executing(Low, Yield, 5);
    let four: Vec<ResourceSlot> = (0..4).map(|n| gpu_busy(n, wide.clone())).collect();
    let pair = gpus(High, 1, 2);
    let single = job(High, 2);
    let d = decide_on(four.clone(), vec![pair.clone(), single.clone()]);
    assert_eq!(d.stops, [stop(&four[0], StopCause::Yield, &pair)]);
    let freed: Vec<ResourceSlot> = (0..4).map(gpu).collect();
    let d = decide_on(freed.clone(), vec![pair.clone(), single.clone()]);
    assert_eq!(
        d.launches,
        [
            launch_on(&pair, &[&freed[0], &freed[1]]),
            launch_on(&single, &[&freed[2]])
        ]
    );
}

#[test]
fn a_job_that_stays_short_leaves_the_spare_lanes_to_the_next() {
    // The wide run's spare lane is not enough for the pair pinned beside it, which stops
    // nothing; the single after the pair counts on that lane rather than stopping gpu3.
    let wide = executing(Low, Yield, 5);
    let gpu0 = gpu_busy(0, wide.clone());
    let gpu1 = gpu_busy(1, wide);
    let gpu2 = gpu_busy(2, executing(Medium, Wait, 60));
    let gpu3 = gpu_busy(3, executing(Low, Yield, 60));
    let first = job(High, 1);
    let pair = WaitingJob {
        target: Target::Lanes(vec![gpu1.id, gpu2.id]),
        ..gpus(High, 2, 2)
    };
    let single = job(High, 3);
    let d = decide_with(
        false,
        vec![gpu0.clone(), gpu1.clone(), gpu2.clone(), gpu3.clone()],
        vec![first.clone(), pair.clone(), single.clone()],
    );
    assert_eq!(d.stops, [stop(&gpu0, StopCause::Yield, &first)]);
}

/// How many of `jobs` (in serving order) a pass over `resources` reads.
fn read_by_reach(resources: &[ResourceSlot], jobs: &[WaitingJob]) -> usize {
    let mut reach = Reach::over(resources);
    jobs.iter().take_while(|job| reach.reads(job)).count()
}

#[test]
fn the_queue_is_read_until_the_free_lanes_are_taken_and_the_head_is_found() {
    let resources = [
        lane("gpu0", Some(0)),
        lane("gpu1", Some(1)),
        busy("gpu2", Some(2), executing(Medium, Wait, 5)),
    ];
    let jobs: Vec<WaitingJob> = (1..=6).map(|p| job(Medium, p)).collect();
    // Two take the free lanes, the third is the blocked head; the rest can only wait.
    assert_eq!(read_by_reach(&resources, &jobs), 3);
    // With nothing free, the head alone.
    let full = [busy("gpu0", Some(0), executing(Medium, Wait, 5))];
    assert_eq!(read_by_reach(&full, &jobs), 1);
    // A job held back by its own run or a dependency takes no lane and is not the head.
    let mut held_back = jobs.clone();
    held_back[0].blocked_by_own_run = true;
    assert_eq!(read_by_reach(&resources, &held_back), 4);
}

#[test]
fn a_job_that_may_not_take_any_free_lane_has_the_whole_queue_read() {
    let resources = [lane("gpu0", Some(0)), lane("gpu1", Some(1))];
    let mut jobs: Vec<WaitingJob> = (1..=6).map(|p| job(Medium, p)).collect();
    // Pinned: which free lane the others get depends on it.
    jobs[0].target = Target::Pinned(resources[1].id);
    assert_eq!(read_by_reach(&resources, &jobs), 6);
    // Several lanes: with a reservation, the jobs behind it may backfill by time limit.
    let mut wide: Vec<WaitingJob> = (1..=6).map(|p| job(Medium, p)).collect();
    wide[1].gpus = 2;
    assert_eq!(read_by_reach(&resources, &wide), 6);
    // Once the free lanes are taken, such a job is only the head.
    let mut late: Vec<WaitingJob> = (1..=6).map(|p| job(Medium, p)).collect();
    late[2].gpus = 2;
    assert_eq!(read_by_reach(&resources, &late), 3);
}

#[test]
fn jobs_above_an_executing_run_are_read_past_the_head_since_they_may_stop_it() {
    let resources = [
        busy("gpu0", Some(0), executing(Low, Restart, 5)),
        busy("gpu1", Some(1), executing(Medium, Restart, 5)),
    ];
    let jobs = [job(High, 1), job(Medium, 1), job(Medium, 2), job(Low, 1)];
    // Every job above the lowest executing level (low) is read, the first low one is not.
    assert_eq!(read_by_reach(&resources, &jobs), 3);
}
