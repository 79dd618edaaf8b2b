//! Reservations and backfill (SPEC section 4): the first multi-lane job in serving order
//! that cannot start holds the lanes estimated to free soonest, so that a stream of small
//! jobs cannot starve it; a job behind it may use a held free lane only when its
//! `time_limit` ends before the held lanes are all estimated free.
//!
//! Estimates come only from time limits, never from guesses about how long work runs: a
//! lane under a run without a limit has no estimate, and then nothing is placed on the
//! held lanes at all.

use super::order::serving_order;
use super::{Reservation, ResourceSlot, SlotPhase, WaitingJob};
use homebased_shared::ids::ResourceId;
use homebased_shared::time::Millis;
use std::cmp::Ordering;
use std::time::Duration;

/// The clock and bound every estimate uses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    pub now: Millis,
    pub cleanup_bound: Duration,
}

impl Clock {
    /// When a run that starts now with `limit` is over and its lanes are clean.
    fn end_of(&self, limit: Duration) -> Millis {
        self.now
            .saturating_add(millis(limit))
            .saturating_add(millis(self.cleanup_bound))
    }
}

fn millis(duration: Duration) -> Millis {
    Millis::try_from(duration.as_millis()).unwrap_or(Millis::MAX)
}

/// When `lane` is estimated free: now when free; for a run with a deadline, that deadline
/// plus the cleanup bound (never before now: a run past its limit is being stopped); a
/// cleanup within the bound; `None` (unknown) for a run without a limit, one not yet
/// started, or one held in Attention. `given` are the lanes this pass already gave to
/// earlier jobs, with the estimate of the run about to start there.
pub(super) fn estimate(
    lane: &ResourceSlot,
    given: &[(ResourceId, Option<Millis>)],
    clock: Clock,
) -> Option<Millis> {
    if let Some((_, estimate)) = given.iter().find(|(id, _)| *id == lane.id) {
        return *estimate;
    }
    let Some(run) = &lane.run else {
        return Some(clock.now);
    };
    match run.phase {
        SlotPhase::Executing { .. } | SlotPhase::Stopping { .. } => run.deadline.map(|deadline| {
            deadline
                .saturating_add(millis(clock.cleanup_bound))
                .max(clock.now)
        }),
        SlotPhase::Cleaning => Some(clock.now.saturating_add(millis(clock.cleanup_bound))),
        SlotPhase::Launching | SlotPhase::Attention { .. } => None,
    }
}

/// The estimate a launch of `job` now gives its lanes.
pub(super) fn estimate_of_launch(job: &WaitingJob, clock: Clock) -> Option<Millis> {
    job.time_limit.map(|limit| clock.end_of(limit))
}

/// The reservation for `job`, which cannot start: the lanes it may use that are estimated
/// free soonest (unknown estimates last, resource order between equals), or `None` when the
/// machine has fewer lanes it may use than it needs (it can never start; holding lanes for
/// it would only starve the others).
pub(super) fn reserve(
    job: &WaitingJob,
    resources: &[&ResourceSlot],
    given: &[(ResourceId, Option<Millis>)],
    clock: Clock,
) -> Option<Reservation> {
    let need = job.needs();
    let mut lanes: Vec<(Option<Millis>, &ResourceSlot)> = resources
        .iter()
        .filter(|lane| job.may_use(lane))
        .map(|lane| (estimate(lane, given, clock), *lane))
        .collect();
    if lanes.len() < need {
        return None;
    }
    // A stable sort: `resources` is in resource order, which breaks ties.
    lanes.sort_by(|(a, _), (b, _)| soonest_first(*a, *b));
    lanes.truncate(need);
    let estimated_start = lanes
        .iter()
        .map(|(estimate, _)| *estimate)
        .collect::<Option<Vec<Millis>>>()
        .and_then(|estimates| estimates.into_iter().max());
    let mut chosen: Vec<&ResourceSlot> = lanes.into_iter().map(|(_, lane)| lane).collect();
    chosen.sort_by(|a, b| super::resource_order(a, b));
    Some(Reservation {
        job: job.id,
        resources: chosen.iter().map(|lane| lane.id).collect(),
        estimated_start,
    })
}

fn soonest_first(a: Option<Millis>, b: Option<Millis>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// The pass's reservation with the job holding it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held<'a> {
    pub reservation: &'a Reservation,
    pub holder: &'a WaitingJob,
    pub clock: Clock,
}

impl Held<'_> {
    /// Whether `job` is kept off the held lane `lane`: it is behind the holder in serving
    /// order and cannot end before the estimated start (no `time_limit`, an unknown
    /// estimate, or a limit that runs past it). Lanes outside the reservation bar no one.
    pub fn bars(&self, job: &WaitingJob, lane: ResourceId) -> bool {
        self.reservation.resources.contains(&lane)
            && job.id != self.holder.id
            && serving_order(job, self.holder) == Ordering::Greater
            && !self.ends_before_start(job)
    }

    /// Backfill: `job`, started now, ends (limit plus cleanup bound) before the held lanes
    /// are all estimated free.
    pub fn ends_before_start(&self, job: &WaitingJob) -> bool {
        match (job.time_limit, self.reservation.estimated_start) {
            (Some(limit), Some(start)) => self.clock.end_of(limit) < start,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::{RunSlot, Target};
    use homebased_shared::ids::{AttentionId, JobId, TaskId};
    use homebased_shared::queue::{PreemptMode, Priority, StopCause};

    const MINUTE: i64 = 60_000;
    const NOW: Millis = 1_000 * MINUTE;
    const CLOCK: Clock = Clock {
        now: NOW,
        cleanup_bound: Duration::from_secs(60),
    };

    fn lane(name: &str, phase: Option<(SlotPhase, Option<Millis>)>) -> ResourceSlot {
        ResourceSlot {
            id: ResourceId::new(),
            name: name.to_string(),
            device: None,
            mig: false,
            run: phase.map(|(phase, deadline)| RunSlot {
                job: JobId::new(),
                task: TaskId::new(),
                priority: Priority::Low,
                mode: PreemptMode::Wait,
                restart_within: None,
                phase,
                deadline,
            }),
        }
    }

    fn executing(deadline: Option<Millis>) -> Option<(SlotPhase, Option<Millis>)> {
        Some((
            SlotPhase::Executing {
                started_at: NOW - 10 * MINUTE,
            },
            deadline,
        ))
    }

    fn job(gpus: u32) -> WaitingJob {
        WaitingJob {
            id: JobId::new(),
            priority: Priority::Medium,
            position: 1,
            target: Target::Any,
            gpus,
            time_limit: None,
            blocked_by_own_run: false,
            dependency: None,
        }
    }

    #[test]
    fn estimates_come_only_from_time_limits() {
        let bound = MINUTE;
        assert_eq!(estimate(&lane("free", None), &[], CLOCK), Some(NOW));
        let limited = lane("a", executing(Some(NOW + 30 * MINUTE)));
        assert_eq!(
            estimate(&limited, &[], CLOCK),
            Some(NOW + 30 * MINUTE + bound)
        );
        assert_eq!(estimate(&lane("b", executing(None)), &[], CLOCK), None);
        // Past its limit (the stop is about to be committed): free about now, not earlier.
        let overdue = lane("c", executing(Some(NOW - 30 * MINUTE)));
        assert_eq!(estimate(&overdue, &[], CLOCK), Some(NOW));
        let stopping = lane(
            "d",
            Some((
                SlotPhase::Stopping {
                    cause: StopCause::Yield,
                    requested_at: NOW,
                    for_job: None,
                },
                Some(NOW + 5 * MINUTE),
            )),
        );
        assert_eq!(
            estimate(&stopping, &[], CLOCK),
            Some(NOW + 5 * MINUTE + bound)
        );
        let cleaning = lane("e", Some((SlotPhase::Cleaning, None)));
        assert_eq!(estimate(&cleaning, &[], CLOCK), Some(NOW + bound));
        let launching = lane("f", Some((SlotPhase::Launching, None)));
        assert_eq!(estimate(&launching, &[], CLOCK), None);
        let held = lane(
            "g",
            Some((
                SlotPhase::Attention {
                    attention: AttentionId::new(),
                },
                None,
            )),
        );
        assert_eq!(estimate(&held, &[], CLOCK), None);
        // A lane this pass gave away carries the estimate of the run about to start on it.
        let free = lane("h", None);
        assert_eq!(
            estimate(&free, &[(free.id, Some(NOW + 7 * MINUTE))], CLOCK),
            Some(NOW + 7 * MINUTE)
        );
        assert_eq!(estimate(&free, &[(free.id, None)], CLOCK), None);
    }

    #[test]
    fn the_reservation_takes_the_soonest_lanes_and_the_latest_of_them_is_its_start() {
        let late = lane("gpu0", executing(Some(NOW + 50 * MINUTE)));
        let unknown = lane("gpu1", executing(None));
        let soon = lane("gpu2", executing(Some(NOW + 10 * MINUTE)));
        let free = lane("gpu3", None);
        let lanes = [&late, &unknown, &soon, &free];
        let two = reserve(&job(2), &lanes, &[], CLOCK).unwrap();
        // In resource order, whatever the order of estimates.
        assert_eq!(two.resources, [soon.id, free.id]);
        assert_eq!(two.estimated_start, Some(NOW + 11 * MINUTE));
        let three = reserve(&job(3), &lanes, &[], CLOCK).unwrap();
        assert_eq!(three.resources, [late.id, soon.id, free.id]);
        assert_eq!(three.estimated_start, Some(NOW + 51 * MINUTE));
        // A lane without an estimate makes the start unknown.
        let four = reserve(&job(4), &lanes, &[], CLOCK).unwrap();
        assert_eq!(four.estimated_start, None);
        assert_eq!(reserve(&job(5), &lanes, &[], CLOCK), None);
    }

    #[test]
    fn a_reservation_holds_only_lanes_the_job_may_use() {
        let mut slice = lane("gpu0-mig0", None);
        slice.mig = true;
        let other = lane("gpu1", executing(Some(NOW + 10 * MINUTE)));
        let third = lane("gpu2", executing(Some(NOW + 20 * MINUTE)));
        let pinned = WaitingJob {
            target: Target::Lanes(vec![other.id, third.id]),
            ..job(2)
        };
        let all = [&slice, &other, &third];
        assert_eq!(
            reserve(&job(2), &all, &[], CLOCK).unwrap().resources,
            [other.id, third.id]
        );
        assert_eq!(
            reserve(&pinned, &all, &[], CLOCK).unwrap().resources,
            [other.id, third.id]
        );
        assert_eq!(reserve(&job(3), &all, &[], CLOCK), None);
    }

    #[test]
    fn only_a_job_behind_that_ends_before_the_start_may_use_a_held_lane() {
        let holder = job(2);
        let lanes = [ResourceId::new(), ResourceId::new()];
        let outside = ResourceId::new();
        let reservation = Reservation {
            job: holder.id,
            resources: lanes.to_vec(),
            estimated_start: Some(NOW + 30 * MINUTE),
        };
        let held = Held {
            reservation: &reservation,
            holder: &holder,
            clock: CLOCK,
        };
        let behind = |limit: Option<i64>| WaitingJob {
            position: 2,
            time_limit: limit.map(|m| Duration::from_secs(u64::try_from(m * 60).unwrap())),
            ..job(1)
        };
        assert!(held.bars(&behind(None), lanes[0]));
        // 28 minutes plus the 1 minute bound end before 30: allowed; 29 plus 1 does not.
        assert!(!held.bars(&behind(Some(28)), lanes[0]));
        assert!(held.bars(&behind(Some(29)), lanes[1]));
        assert!(!held.bars(&behind(None), outside));
        assert!(!held.bars(&holder, lanes[0]));
        let ahead = WaitingJob {
            priority: Priority::High,
            ..behind(None)
        };
        assert!(!held.bars(&ahead, lanes[0]));

        let unknown = Reservation {
            estimated_start: None,
            ..reservation.clone()
        };
        let held = Held {
            reservation: &unknown,
            ..held
        };
        assert!(held.bars(&behind(Some(1)), lanes[0]));
    }
}
