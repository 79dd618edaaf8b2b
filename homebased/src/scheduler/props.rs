//! Random snapshots: whatever the queue and the machine look like, a pass never starts a
//! job on the wrong number of lanes or on a busy one, never gives a lane twice, never lets
//! a job behind a reservation onto a held lane unless it ends before the estimated start,
//! and never stops a run for a job that still could not gather its lanes (counting the spare
//! lanes of runs stopped for other jobs), nor more runs than the jobs that stop them need;
//! and a preemptor stops the fewest runs that free its lanes (against a brute force).

use super::*;
use homebased_shared::queue::PreemptMode::{Restart, Wait, Yield};
use homebased_shared::queue::Priority::{High, Low, Medium};
use proptest::prelude::*;
use std::collections::HashSet;

const MINUTE: i64 = 60_000;
const NOW: Millis = 100_000 * MINUTE;
const BOUND: Duration = Duration::from_secs(60);

/// A lane: MIG or not, the phase of its run (or free), the run's level, mode, age, window
/// and deadline, and whether it carries the previous lane's run (a run on several lanes).
type LaneSpec = (bool, u8, u8, u8, i64, Option<u64>, Option<i64>, bool);
/// A job: level, position, gpus, target kind, lanes for a pinned target, time limit, and
/// whether its own previous run holds it back.
type JobSpec = (u8, u32, u32, u8, Vec<usize>, Option<u64>, bool);

fn level(n: u8) -> Priority {
    [Low, Medium, High][usize::from(n % 3)]
}

fn lanes_of(specs: &[LaneSpec]) -> Vec<ResourceSlot> {
    let mut lanes: Vec<ResourceSlot> = Vec::new();
    for (i, &(mig, phase, priority, mode, age, window, deadline, wide)) in specs.iter().enumerate()
    {
        let previous = lanes.last().and_then(|l| l.run.clone());
        let run = match (wide, previous) {
            (true, Some(run)) => Some(run),
            _ => {
                let phase = match phase % 8 {
                    0..=2 => None,
                    3 => Some(SlotPhase::Launching),
                    4 | 5 => Some(SlotPhase::Executing {
                        started_at: NOW - age * MINUTE,
                    }),
                    6 => Some(SlotPhase::Stopping {
                        cause: StopCause::Yield,
                        requested_at: NOW - MINUTE,
                        for_job: None,
                    }),
                    _ => Some(if age % 2 == 0 {
                        SlotPhase::Cleaning
                    } else {
                        SlotPhase::Attention {
                            attention: AttentionId::new(),
                        }
                    }),
                };
                phase.map(|phase| RunSlot {
                    job: JobId::new(),
                    task: TaskId::new(),
                    priority: level(priority),
                    mode: [Restart, Yield, Wait][usize::from(mode % 3)],
                    restart_within: window.map(|m| Duration::from_secs(m * 60)),
                    deadline: match phase {
                        SlotPhase::Executing { .. } | SlotPhase::Stopping { .. } => {
                            deadline.map(|m| NOW + m * MINUTE)
                        }
                        _ => None,
                    },
                    phase,
                })
            }
        };
        lanes.push(ResourceSlot {
            id: ResourceId::new(),
            name: format!("gpu{i}"),
            device: if mig { None } else { u32::try_from(i).ok() },
            mig,
            run,
        });
    }
    lanes
}

fn jobs_of(specs: &[JobSpec], lanes: &[ResourceSlot]) -> Vec<WaitingJob> {
    specs
        .iter()
        .map(|(priority, position, gpus, kind, picks, limit, blocked)| {
            let mut set: Vec<ResourceId> = Vec::new();
            for pick in picks {
                let id = lanes[pick % lanes.len()].id;
                if !set.contains(&id) {
                    set.push(id);
                }
            }
            let n = usize::try_from(*gpus).unwrap();
            let target = match kind % 3 {
                1 if n == 1 => Target::Pinned(set[0]),
                2 if set.len() >= n => Target::Lanes(set[..n].to_vec()),
                _ => Target::Any,
            };
            WaitingJob {
                id: JobId::new(),
                priority: level(*priority),
                position: *position,
                target,
                gpus: *gpus,
                time_limit: limit.map(|m| Duration::from_secs(m * 60)),
                blocked_by_own_run: *blocked,
                dependency: None,
            }
        })
        .collect()
}

fn lane_spec() -> impl Strategy<Value = LaneSpec> {
    (
        prop::bool::weighted(0.15),
        0u8..8,
        0u8..3,
        0u8..3,
        0i64..120,
        prop::option::of(1u64..30),
        prop::option::of(-10i64..120),
        prop::bool::weighted(0.3),
    )
}

/// A lane of a busy machine: mostly executing runs below the top level, often on several
/// lanes, so that a preemptor has victims of different sizes to choose from.
fn busy_lane_spec() -> impl Strategy<Value = LaneSpec> {
    (
        prop::bool::weighted(0.1),
        prop_oneof![4 => 4u8..6, 1 => 0u8..8],
        0u8..2,
        0u8..3,
        0i64..120,
        prop::option::of(1u64..30),
        prop::option::of(-10i64..120),
        prop::bool::weighted(0.5),
    )
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        0u8..3,
        1u32..20,
        prop_oneof![3 => Just(1u32), 1 => 2u32..=4],
        0u8..3,
        prop::collection::vec(0usize..16, 4),
        prop::option::of(1u64..120),
        prop::bool::weighted(0.1),
    )
}

/// A pass's snapshot of `resources` and `jobs`, now, with the cleanup bound.
fn snapshot_of(resources: &[ResourceSlot], jobs: &[WaitingJob], reservations: bool) -> Snapshot {
    Snapshot {
        now: NOW,
        resources: resources.to_vec(),
        jobs: jobs.to_vec(),
        storage_unavailable_since: None,
        reservations,
        cleanup_bound: BOUND,
    }
}

fn end_of(limit: Duration) -> Millis {
    NOW + i64::try_from(limit.as_millis() + BOUND.as_millis()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn a_pass_keeps_every_lane_rule(
        lane_specs in prop::collection::vec(lane_spec(), 1..9),
        job_specs in prop::collection::vec(job_spec(), 0..9),
        reservations in any::<bool>(),
    ) {
        let resources = lanes_of(&lane_specs);
        let jobs = jobs_of(&job_specs, &resources);
        let d = decide(&snapshot_of(&resources, &jobs, reservations));
        let lane = |id: ResourceId| resources.iter().find(|r| r.id == id).unwrap();
        let job = |id: JobId| jobs.iter().find(|j| j.id == id).unwrap();
        prop_assert!(reservations || d.reservation.is_none());
        let holder = d.reservation.as_ref().map(|r| job(r.job));

        let mut given: HashSet<ResourceId> = HashSet::new();
        let mut started: HashSet<JobId> = HashSet::new();
        for launch in &d.launches {
            let j = job(launch.job);
            prop_assert!(started.insert(j.id), "two launches of one job");
            prop_assert_eq!(launch.resources.len(), usize::try_from(j.gpus).unwrap());
            for &id in &launch.resources {
                prop_assert!(given.insert(id), "a lane given twice");
                prop_assert!(lane(id).is_free(), "a launch on a busy lane");
                prop_assert!(j.target.allows(id));
                prop_assert!(j.gpus == 1 || !lane(id).mig, "a MIG slice for several lanes");
                if let Some(reservation) = &d.reservation {
                    if reservation.resources.contains(&id) {
                        let ends_before = match (j.time_limit, reservation.estimated_start) {
                            (Some(limit), Some(start)) => end_of(limit) < start,
                            _ => false,
                        };
                        let ahead = holder.is_some_and(|h| {
                            order::serving_order(j, h) == std::cmp::Ordering::Less
                        });
                        prop_assert!(ahead || ends_before, "a held lane to a job that runs past the start");
                    }
                }
            }
        }
        if let Some(reservation) = &d.reservation {
            let h = holder.unwrap();
            prop_assert!(!started.contains(&h.id));
            prop_assert_eq!(reservation.resources.len(), h.needs());
            prop_assert!(reservation.resources.iter().all(|&id| h.may_use(lane(id))));
        }

        // Stops: one per run, of an executing run of strictly lower level on a lane the
        // job may use, and only when its lanes then add up.
        let mut stopped: HashSet<TaskId> = HashSet::new();
        let mut claimed: HashSet<ResourceId> = HashSet::new();
        for claim in &d.claims {
            prop_assert!(claimed.insert(claim.resource), "a lane claimed twice");
            prop_assert!(lane(claim.resource).run.as_ref().is_some_and(|r| r.phase.is_becoming_free()));
        }
        for stop in &d.stops {
            prop_assert!(stopped.insert(stop.task), "two stops of one run");
            let victim = lane(stop.resource).run.as_ref().unwrap();
            prop_assert_eq!(victim.task, stop.task);
            let executing = matches!(victim.phase, SlotPhase::Executing { .. });
            prop_assert!(executing, "a stop of a run that is not executing");
            prop_assert!(victim.priority < job(stop.for_job).priority);
        }
        for j in &jobs {
            let mine: Vec<&Stop> = d.stops.iter().filter(|s| s.for_job == j.id).collect();
            if mine.is_empty() {
                continue;
            }
            prop_assert!(!started.contains(&j.id));
            let bars = |id: ResourceId| {
                d.reservation.as_ref().is_some_and(|r| {
                    r.resources.contains(&id)
                        && r.job != j.id
                        && holder.is_some_and(|h| order::serving_order(j, h) == std::cmp::Ordering::Greater)
                        && !matches!((j.time_limit, r.estimated_start), (Some(l), Some(s)) if end_of(l) < s)
                })
            };
            let reachable = resources
                .iter()
                .filter(|r| j.may_use(r))
                .filter(|r| {
                    // A held lane it is kept off frees for the holder, not for it.
                    let free = r.is_free() && !given.contains(&r.id);
                    let counted = d.claims.iter().any(|c| c.job == j.id && c.resource == r.id);
                    // Its own victims' lanes, and the spare lanes of a run stopped for a job
                    // before it in this pass.
                    let freed = r.run.as_ref().is_some_and(|run| d.stops.iter().any(|s| s.task == run.task));
                    !bars(r.id) && (free || counted || freed)
                })
                .count();
            prop_assert!(reachable >= j.needs(), "a stop for a job that still cannot gather its lanes");
        }
        // Together, the jobs that stop runs need no more lanes than the stops free, the free
        // lanes nobody was given and the lanes they count on.
        let preemptors: Vec<&WaitingJob> = jobs
            .iter()
            .filter(|j| d.stops.iter().any(|s| s.for_job == j.id))
            .collect();
        let needed: usize = preemptors.iter().map(|j| j.needs()).sum();
        let supplied = resources
            .iter()
            .filter(|r| {
                let free = r.is_free() && !given.contains(&r.id);
                let counted = d.claims.iter().any(|c| c.resource == r.id && preemptors.iter().any(|j| j.id == c.job));
                let freed = r.run.as_ref().is_some_and(|run| d.stops.iter().any(|s| s.task == run.task));
                free || counted || freed
            })
            .count();
        prop_assert!(needed <= supplied, "stops that cannot serve every job they are for");
    }

    /// The queue read only as far as [`Reach`] lets it gives the same pass as the whole
    /// queue: the same launches, stops and blocked head, and every lane it counts on is one
    /// the whole queue's pass counts on for the same job. So is the reservation, unless its
    /// holder is past the reach: then every free lane went to a job before the holder, and
    /// no job behind the holder could start anyway, so the reservation holds nothing back
    /// in this pass (it is made again by the first pass that has a lane left for it).
    #[test]
    fn a_pass_over_the_queue_as_far_as_its_reach_decides_as_over_the_whole_queue(
        lane_specs in prop::collection::vec(lane_spec(), 1..9),
        job_specs in prop::collection::vec(job_spec(), 0..12),
        reservations in any::<bool>(),
    ) {
        let resources = lanes_of(&lane_specs);
        let mut jobs = jobs_of(&job_specs, &resources);
        jobs.sort_by(order::serving_order);
        let mut reach = Reach::over(&resources);
        let read: Vec<WaitingJob> = jobs.iter().take_while(|j| reach.reads(j)).cloned().collect();
        let all = decide(&snapshot_of(&resources, &jobs, reservations));
        let some = decide(&snapshot_of(&resources, &read, reservations));
        prop_assert_eq!(&some.launches, &all.launches);
        prop_assert_eq!(&some.stops, &all.stops);
        match &all.reservation {
            Some(r) if !read.iter().any(|j| j.id == r.job) => {
                prop_assert_eq!(&some.reservation, &None);
                let held_free = resources.iter().any(|lane| {
                    lane.is_free()
                        && r.resources.contains(&lane.id)
                        && !all.launches.iter().any(|l| l.resources.contains(&lane.id))
                });
                prop_assert!(!held_free, "a reservation past the reach held a free lane back");
            }
            _ => prop_assert_eq!(&some.reservation, &all.reservation),
        }
        prop_assert_eq!(&some.first_blocked, &all.first_blocked);
        for claim in &some.claims {
            prop_assert!(all.claims.contains(claim), "a lane counted on only when read in part");
        }
    }

    /// One urgent job at a machine of random runs stops the fewest runs that free what it
    /// lacks: no set of fewer of the runs it may stop (executing, of a lower level, a mode
    /// that lets them go now) frees enough, tried by brute force over every subset.
    #[test]
    fn a_preemptor_stops_the_fewest_runs_that_free_its_lanes(
        lane_specs in prop::collection::vec(busy_lane_spec(), 1..9),
        job_spec in job_spec(),
        gpus in 1u32..=5,
    ) {
        let resources = lanes_of(&lane_specs);
        let mut job = jobs_of(&[job_spec], &resources).remove(0);
        job.priority = High;
        if job.target == Target::Any {
            job.gpus = gpus;
        }
        job.blocked_by_own_run = false;
        let d = decide(&snapshot_of(&resources, std::slice::from_ref(&job), false));
        prop_assert!(d.stops.iter().all(|s| s.for_job == job.id));

        let usable: Vec<&ResourceSlot> = resources.iter().filter(|r| job.may_use(r)).collect();
        let ready = usable
            .iter()
            .filter(|r| r.run.as_ref().is_none_or(|run| run.phase.is_becoming_free()))
            .count();
        // Each run it may stop, with how many of its lanes the job may use.
        let mut victims: Vec<(TaskId, usize)> = Vec::new();
        for lane in &usable {
            let Some(run) = &lane.run else { continue };
            let SlotPhase::Executing { started_at } = run.phase else { continue };
            if run.priority >= job.priority
                || preemption::stop_cause_now(run.mode, run.restart_within, started_at, NOW).is_none()
            {
                continue;
            }
            match victims.iter_mut().find(|(task, _)| *task == run.task) {
                Some((_, n)) => *n += 1,
                None => victims.push((run.task, 1)),
            }
        }
        let missing = job.needs().saturating_sub(ready);
        let fewest = (0u32..1 << victims.len())
            .filter(|set| {
                let freed: usize = victims
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| set & (1 << i) != 0)
                    .map(|(_, (_, n))| n)
                    .sum();
                freed >= missing
            })
            .map(u32::count_ones)
            .min();
        let launched = !d.launches.is_empty();
        match fewest {
            _ if launched || missing == 0 => prop_assert!(d.stops.is_empty()),
            None => prop_assert!(d.stops.is_empty(), "stops that cannot free its lanes"),
            Some(n) => prop_assert_eq!(d.stops.len(), usize::try_from(n).unwrap()),
        }
    }
}
