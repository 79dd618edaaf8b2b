//! Preemption: which runs may be stopped now, and which ones the waiting jobs stop.

use super::order::resource_order;
use super::reservation::Held;
use super::{Claim, ResourceSlot, RunSlot, SlotPhase, Stop, WaitingJob};
use homebased_shared::ids::{JobId, ResourceId};
use homebased_shared::queue::{PreemptMode, StopCause};
use homebased_shared::time::Millis;
use std::cmp::Ordering;
use std::time::Duration;

/// The victim-mode table of SPEC section 4: how an executing run started at `started_at`
/// may be stopped at `now` for strictly higher work, or `None` when it may not.
///
/// `restart_within` is a permission to restart young work (`age < window`, the edge
/// itself is outside), never a timer. A start in the future (the clock went back) counts
/// as age zero.
pub fn stop_cause_now(
    mode: PreemptMode,
    restart_within: Option<Duration>,
    started_at: Millis,
    now: Millis,
) -> Option<StopCause> {
    let age = u128::from(now.saturating_sub(started_at).max(0).unsigned_abs());
    let young = restart_within.is_some_and(|window| age < window.as_millis());
    match mode {
        PreemptMode::Restart => Some(StopCause::Restart),
        PreemptMode::Yield if young => Some(StopCause::Restart),
        PreemptMode::Yield => Some(StopCause::Yield),
        PreemptMode::Wait if young => Some(StopCause::Restart),
        PreemptMode::Wait => None,
    }
}

/// Walks the still-waiting jobs (serving order) twice. First each counts the free lanes it
/// may use and, for the rest of what it needs, lanes already becoming free for it, so it
/// needs no new stop for those. Then each job still short counts the spare lanes of runs
/// stopped earlier in this walk (a victim's lanes its preemptor does not take), and picks
/// executing victims of strictly lower level until their lanes make up what it still lacks,
/// or stops nothing at all: never a preemption that cannot give it its lanes. Hence N urgent
/// jobs at a full machine stop at most N runs at once, and never more runs than there are
/// jobs to use the lanes. Every lane is counted by one job at most, and a victim on several
/// lanes gets one stop.
/// Also returns the becoming-free lanes counted on, by whom.
pub(super) fn choose_victims(
    now: Millis,
    resources: &[&ResourceSlot],
    waiting: &[&WaitingJob],
    free: &[ResourceId],
    held: Option<Held<'_>>,
) -> (Vec<Stop>, Vec<Claim>) {
    let waiting_ids: Vec<JobId> = waiting.iter().map(|job| job.id).collect();
    // The lanes a job may count on: a held lane it is kept off would only free for the
    // holder, so stopping a run there, or waiting for one, gives it nothing.
    let lanes_for = |job: &WaitingJob| -> Vec<&ResourceSlot> {
        resources
            .iter()
            .copied()
            .filter(|r| job.may_use(r) && !held.is_some_and(|h| h.bars(job, r.id)))
            .collect()
    };
    let mut counted: Vec<ResourceId> = Vec::new();
    let mut claims = Vec::new();
    let mut short = Vec::new();
    for &job in waiting {
        let need = job.needs();
        let lanes = lanes_for(job);
        let usable_free: Vec<ResourceId> = lanes
            .iter()
            .filter(|r| free.contains(&r.id) && !counted.contains(&r.id))
            .map(|r| r.id)
            .take(need)
            .collect();
        let mut have = usable_free.len();
        counted.extend(usable_free);
        while have < need {
            let Some(lane) = becoming_free_lane(job, &lanes, &counted, &waiting_ids) else {
                break;
            };
            counted.push(lane);
            claims.push(Claim {
                job: job.id,
                resource: lane,
            });
            have += 1;
        }
        if have < need {
            short.push((job, need - have));
        }
    }

    // The lanes of a run stopped in this pass that its preemptor does not take: they free
    // with the rest of that run, so a later job counts on them rather than stopping a run of
    // its own (a victim on four lanes for a job of two leaves two for the next).
    let mut spare: Vec<ResourceId> = Vec::new();
    let mut stops: Vec<Stop> = Vec::new();
    for (job, missing) in short {
        let lanes = lanes_for(job);
        let from_spare: Vec<ResourceId> = lanes
            .iter()
            .map(|r| r.id)
            .filter(|id| spare.contains(id))
            .take(missing)
            .collect();
        let missing = missing - from_spare.len();
        let mut candidates: Vec<Candidate<'_>> = Vec::new();
        for &lane in lanes.iter().filter(|r| !counted.contains(&r.id)) {
            let Some(candidate) = Candidate::for_job(job, lane, now) else {
                continue;
            };
            // A run stopped already (its spare lanes are counted above) is not stopped twice.
            if stops.iter().any(|s| s.task == candidate.run.task) {
                continue;
            }
            // A run on several lanes is one candidate that frees each of them.
            match candidates
                .iter_mut()
                .find(|c| c.run.task == candidate.run.task)
            {
                Some(same) => same.lanes.push(lane.id),
                None => candidates.push(candidate),
            }
        }
        candidates.sort_by(victim_order);
        // Short even with every victim: it stops nothing and leaves the spare lanes to the
        // jobs after it.
        let Some(picked) = fewest_victims(
            &candidates.iter().map(|c| c.lanes.len()).collect::<Vec<_>>(),
            missing,
        ) else {
            continue;
        };
        let chosen: Vec<Candidate<'_>> = candidates
            .into_iter()
            .enumerate()
            .filter(|(i, _)| picked.contains(i))
            .map(|(_, c)| c)
            .collect();
        spare.retain(|id| !from_spare.contains(id));
        counted.extend(from_spare);
        // Every lane its victims hold frees; the job takes the first it may use in resource
        // order, and the rest are spare.
        let freed: Vec<ResourceId> = resources
            .iter()
            .filter(|r| {
                r.run
                    .as_ref()
                    .is_some_and(|run| chosen.iter().any(|v| v.run.task == run.task))
            })
            .map(|r| r.id)
            .collect();
        let taken: Vec<ResourceId> = freed
            .iter()
            .copied()
            .filter(|id| lanes.iter().any(|r| r.id == *id))
            .take(missing)
            .collect();
        spare.extend(freed.iter().filter(|id| !taken.contains(id)));
        counted.extend(taken);
        for victim in chosen {
            // The stop names the run's first lane of all it holds, the one the core checks.
            let first = resources
                .iter()
                .find(|r| {
                    r.run
                        .as_ref()
                        .is_some_and(|run| run.task == victim.run.task)
                })
                .map_or(victim.resource.id, |r| r.id);
            stops.push(Stop {
                resource: first,
                task: victim.run.task,
                cause: victim.cause,
                for_job: job.id,
            });
        }
    }
    (stops, claims)
}

/// The victims to stop, as indices into `lanes` (each candidate's lane count, in victim
/// order): the fewest runs whose lanes add up to `missing`, and among sets of that size the
/// one first in victim order (compared member by member), so a larger run that alone frees
/// enough is stopped rather than a small one and then the larger one too. `None` when all of
/// them together are not enough; no victims when nothing is missing.
fn fewest_victims(lanes: &[usize], missing: usize) -> Option<Vec<usize>> {
    // The most lanes `count` victims from `from` on can free: the largest of them.
    let best_of = |from: usize, count: usize| -> usize {
        let mut rest: Vec<usize> = lanes[from..].to_vec();
        rest.sort_unstable_by(|a, b| b.cmp(a));
        rest.iter().take(count).sum()
    };
    let size = (0..=lanes.len()).find(|&count| best_of(0, count) >= missing)?;
    // Greedy in victim order: take a candidate whenever the set can still be completed
    // to `size` victims from those after it.
    let mut picked = Vec::with_capacity(size);
    let mut gained = 0;
    for (i, &n) in lanes.iter().enumerate() {
        if gained >= missing || picked.len() == size {
            break;
        }
        let left = size - picked.len() - 1;
        if gained + n + best_of(i + 1, left) >= missing {
            picked.push(i);
            gained += n;
        }
    }
    Some(picked)
}

/// The becoming-free lane `job` should count on: a stop decided for it first, then one
/// nobody waiting is counting on (a cleanup, a stop whose job is gone or unknown), and
/// only then a stop meant for a later job, which that job then replaces with a stop of
/// its own. Ties go by resource order.
fn becoming_free_lane(
    job: &WaitingJob,
    resources: &[&ResourceSlot],
    claimed: &[ResourceId],
    waiting_ids: &[JobId],
) -> Option<ResourceId> {
    resources
        .iter()
        .filter(|r| job.may_use(r) && !claimed.contains(&r.id))
        .filter_map(|r| {
            let run = r.run.as_ref()?;
            let preference = match run.phase {
                SlotPhase::Stopping {
                    for_job: Some(for_job),
                    ..
                } if for_job == job.id => 0,
                SlotPhase::Stopping {
                    for_job: Some(for_job),
                    ..
                } if waiting_ids.contains(&for_job) => 2,
                phase if phase.is_becoming_free() => 1,
                _ => return None,
            };
            Some((preference, r.id))
        })
        // `min_by_key` keeps the first of equal keys, so resource order breaks ties.
        .min_by_key(|(preference, _)| *preference)
        .map(|(_, id)| id)
}

/// An executing run that `job` may stop now.
struct Candidate<'a> {
    /// The first of its lanes `job` may use, in resource order.
    resource: &'a ResourceSlot,
    run: &'a RunSlot,
    cause: StopCause,
    started_at: Millis,
    /// Every lane of the run that `job` may use and nobody counts on yet.
    lanes: Vec<ResourceId>,
}

impl<'a> Candidate<'a> {
    fn for_job(job: &WaitingJob, resource: &'a ResourceSlot, now: Millis) -> Option<Self> {
        let run = resource.run.as_ref()?;
        // Launching runs have no confirmed workload yet; every other phase is already
        // stopping, cleaning or held.
        let SlotPhase::Executing { started_at } = run.phase else {
            return None;
        };
        // Equal levels never preempt, whatever moves happened.
        if run.priority >= job.priority {
            return None;
        }
        let cause = stop_cause_now(run.mode, run.restart_within, started_at, now)?;
        Some(Candidate {
            resource,
            run,
            cause,
            started_at,
            lanes: vec![resource.id],
        })
    }
}

/// Lowest level first, then restart before yield (a restart frees the lane within the
/// grace period), then the youngest run (least work lost), then resource order.
fn victim_order(a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    a.run
        .priority
        .cmp(&b.run.priority)
        .then(cause_rank(a.cause).cmp(&cause_rank(b.cause)))
        .then(b.started_at.cmp(&a.started_at))
        .then_with(|| resource_order(a.resource, b.resource))
}

fn cause_rank(cause: StopCause) -> u8 {
    match cause {
        StopCause::Restart => 0,
        StopCause::Yield => 1,
        // Never a preemption's choice: a victim is only ever asked to restart or yield.
        StopCause::TimeLimit | StopCause::UserCancel => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::Target;
    use homebased_shared::ids::TaskId;
    use homebased_shared::queue::Priority;

    const MINUTE: i64 = 60_000;
    const NOW: Millis = 1_000 * MINUTE;

    fn window(minutes: u64) -> Option<Duration> {
        Some(Duration::from_secs(minutes * 60))
    }

    #[test]
    fn victim_mode_table() {
        use PreemptMode::{Restart, Wait, Yield};
        let restart = Some(StopCause::Restart);
        let yield_ = Some(StopCause::Yield);
        // (mode, restart_within, age in ms, expected)
        let cases: [(PreemptMode, Option<Duration>, i64, Option<StopCause>); 16] = [
            (Restart, None, 0, restart),
            (Restart, None, 600 * MINUTE, restart),
            (Yield, window(10), 9 * MINUTE, restart),
            (Yield, window(10), 11 * MINUTE, yield_),
            (Yield, None, 0, yield_),
            (Wait, window(10), 9 * MINUTE, restart),
            (Wait, window(10), 11 * MINUTE, None),
            (Wait, None, 0, None),
            // The exact edge is outside the window.
            (Yield, window(10), 10 * MINUTE, yield_),
            (Wait, window(10), 10 * MINUTE, None),
            (Yield, window(10), 10 * MINUTE - 1, restart),
            (Wait, window(10), 10 * MINUTE - 1, restart),
            // A start in the future (clock went back) is age zero: inside any window.
            (Wait, window(1), -5 * MINUTE, restart),
            (Yield, window(1), -5 * MINUTE, restart),
            (Wait, None, -5 * MINUTE, None),
            (Restart, None, -5 * MINUTE, restart),
        ];
        for (mode, within, age, expected) in cases {
            assert_eq!(
                stop_cause_now(mode, within, NOW - age, NOW),
                expected,
                "{mode:?} within {within:?} age {age}"
            );
        }
    }

    #[test]
    fn extreme_times_do_not_overflow() {
        assert_eq!(
            stop_cause_now(PreemptMode::Wait, window(1), Millis::MIN, Millis::MAX),
            None
        );
        assert_eq!(
            stop_cause_now(PreemptMode::Wait, window(1), Millis::MAX, Millis::MIN),
            Some(StopCause::Restart)
        );
    }

    fn becoming_free(name: &str, phase: SlotPhase) -> ResourceSlot {
        ResourceSlot {
            id: ResourceId::new(),
            name: name.to_string(),
            device: None,
            mig: false,
            run: Some(RunSlot {
                job: JobId::new(),
                task: TaskId::new(),
                priority: Priority::Low,
                mode: PreemptMode::Yield,
                restart_within: None,
                phase,
                deadline: None,
            }),
        }
    }

    #[test]
    fn becoming_free_lane_prefers_its_own_stop_then_unclaimed_ones() {
        let me = WaitingJob {
            id: JobId::new(),
            priority: Priority::High,
            position: 1,
            target: Target::Any,
            gpus: 1,
            time_limit: None,
            blocked_by_own_run: false,
            dependency: None,
        };
        let later = JobId::new();
        let stop_for = |job| SlotPhase::Stopping {
            cause: StopCause::Yield,
            requested_at: NOW,
            for_job: Some(job),
        };
        let for_later = becoming_free("a", stop_for(later));
        let cleaning = becoming_free("b", SlotPhase::Cleaning);
        let mine = becoming_free("c", stop_for(me.id));
        let attention = becoming_free(
            "d",
            SlotPhase::Attention {
                attention: homebased_shared::ids::AttentionId::new(),
            },
        );
        let waiting = [me.id, later];
        let all = [&for_later, &cleaning, &mine, &attention];

        let pick = |lanes: &[&ResourceSlot], claimed: &[ResourceId]| {
            becoming_free_lane(&me, lanes, claimed, &waiting)
        };
        assert_eq!(pick(&all, &[]), Some(mine.id));
        assert_eq!(pick(&all, &[mine.id]), Some(cleaning.id));
        assert_eq!(pick(&all, &[mine.id, cleaning.id]), Some(for_later.id));
        assert_eq!(pick(&[&attention], &[]), None);
    }

    #[test]
    fn the_fewest_victims_that_free_enough_first_in_victim_order() {
        // A one-lane run first in victim order, then a two-lane one: the two-lane one alone.
        assert_eq!(fewest_victims(&[1, 2], 2), Some(vec![1]));
        // Among sets of one, the first in victim order.
        assert_eq!(fewest_victims(&[1, 2, 2], 2), Some(vec![1]));
        assert_eq!(fewest_victims(&[2, 1, 2], 2), Some(vec![0]));
        // Two needed: the earliest pair that makes it up.
        assert_eq!(fewest_victims(&[1, 1, 3, 1], 4), Some(vec![0, 2]));
        assert_eq!(fewest_victims(&[1, 1, 1], 2), Some(vec![0, 1]));
        // Nothing missing: nobody stops. Not enough in all: nothing at all.
        assert_eq!(fewest_victims(&[1, 2], 0), Some(vec![]));
        assert_eq!(fewest_victims(&[1, 1], 3), None);
        assert_eq!(fewest_victims(&[], 1), None);
    }

    #[test]
    fn a_job_of_two_lanes_stops_the_two_lane_run_rather_than_a_small_one_and_then_it() {
        let executing = |started_at| SlotPhase::Executing { started_at };
        // gpu0: a low run started last (first in victim order: the youngest); gpu1 and gpu2:
        // one older low run on both.
        let small = becoming_free("gpu0", executing(NOW - MINUTE));
        let mut wide_a = becoming_free("gpu1", executing(NOW - 60 * MINUTE));
        let wide_b = ResourceSlot {
            id: ResourceId::new(),
            name: "gpu2".into(),
            ..wide_a.clone()
        };
        wide_a.device = Some(1);
        let job = WaitingJob {
            id: JobId::new(),
            priority: Priority::High,
            position: 1,
            target: Target::Any,
            gpus: 2,
            time_limit: None,
            blocked_by_own_run: false,
            dependency: None,
        };
        let (stops, claims) = choose_victims(NOW, &[&small, &wide_a, &wide_b], &[&job], &[], None);
        assert!(claims.is_empty());
        let wide = wide_a.run.as_ref().unwrap().task;
        assert_eq!(
            stops.iter().map(|s| s.task).collect::<Vec<_>>(),
            vec![wide],
            "one stop, of the run on two lanes"
        );
    }
}
