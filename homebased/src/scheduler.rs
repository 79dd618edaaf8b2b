//! The queue's brain: a pure function from what the store holds now to what should happen
//! next (SPEC section 4, "Decide, then act" in DESIGN).
//!
//! [`decide`] never performs I/O. The core builds a [`Snapshot`] inside its transaction,
//! re-checks each decision before committing it, then acts. A pass is recomputed from
//! scratch every time, so a decision that was not committed simply reappears next pass,
//! and a committed stop shows up in the snapshot as [`SlotPhase::Stopping`]: `decide`
//! never withdraws one.
//!
//! # Layout
//! - [`order`]: serving order of jobs, resource order and natural name order.
//! - [`filling`]: free resources to waiting jobs, all of a job's lanes or none.
//! - [`reservation`]: the lanes held for the first multi-lane job that cannot start, their
//!   estimates, and which jobs behind it may backfill them.
//! - [`preemption`]: the victim-mode table and the choice of victims, enough for all of a
//!   job's lanes or none.
//! - [`waiting`]: why each job that did not start waits, from the same pass.
//! - [`reach`]: how far down the queue a pass must read.

mod filling;
mod order;
mod preemption;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod props;
mod reach;
mod reservation;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
mod waiting;

pub use order::{natural_cmp, resource_order};
pub use preemption::stop_cause_now;
pub use reach::Reach;

use homebased_shared::ids::{AttentionId, JobId, ResourceId, TaskId};
use homebased_shared::queue::{JobStatus, PhaseKind, PreemptMode, Priority, StopCause};
use homebased_shared::time::Millis;
use homebased_shared::wire::Waiting;
use std::time::Duration;

/// Everything `decide` looks at, read in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The clock used for run ages (`now - started_at`).
    pub now: Millis,
    /// Every registered resource, in any order.
    pub resources: Vec<ResourceSlot>,
    /// Every queued job, in any order; `decide` sorts them by serving order.
    pub jobs: Vec<WaitingJob>,
    /// Since when launches are held back because a run directory could not be made; `None`
    /// while storage works. Decisions are the same either way: it only names the reason.
    pub storage_unavailable_since: Option<Millis>,
    /// `[resource] reservations`: whether the first multi-lane job that cannot start holds
    /// lanes against the jobs behind it (SPEC section 4). Off, such a job is passed over
    /// like any other.
    pub reservations: bool,
    /// The cleanup bound added to a run's deadline for when its lanes are estimated free.
    pub cleanup_bound: Duration,
}

/// One exclusive lane and the run that holds it, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSlot {
    pub id: ResourceId,
    pub name: String,
    /// The CUDA device index; lanes with one are preferred for `any` jobs.
    pub device: Option<u32>,
    /// A MIG slice: a process sees one at most, so a job needing several lanes never gets
    /// one.
    pub mig: bool,
    /// `None` is the only free state: a run in any phase holds the lane.
    pub run: Option<RunSlot>,
}

impl ResourceSlot {
    pub fn is_free(&self) -> bool {
        self.run.is_none()
    }
}

/// The run holding a resource. A run on several lanes appears, the same, on each of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSlot {
    pub job: JobId,
    pub task: TaskId,
    /// The level of the owning job as it is now: a move can raise or lower it, and only
    /// the current level decides whether a waiting job is strictly higher.
    pub priority: Priority,
    pub mode: PreemptMode,
    /// The owning job's permission to restart young work, if it gave one.
    pub restart_within: Option<Duration>,
    pub phase: SlotPhase,
    /// `started_at + time_limit` of an executing or stopping run whose job has a limit,
    /// else `None`: the only source of estimates for when a lane frees.
    pub deadline: Option<Millis>,
}

/// The phase of a run, with only the data `decide` needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotPhase {
    /// Reserved, worker not yet confirmed: never a victim.
    Launching,
    /// The workload runs; its age comes from the stored start, so restarts keep it.
    Executing { started_at: Millis },
    /// A committed stop in flight. `for_job` is the waiting job it was decided for, when
    /// known; the stop stands even if that job has gone.
    Stopping {
        cause: StopCause,
        requested_at: Millis,
        for_job: Option<JobId>,
    },
    /// The workload ended and cleanup runs; the lane frees itself soon.
    Cleaning,
    /// Cleanup failed; only a person frees the lane, by releasing exactly `attention`.
    Attention { attention: AttentionId },
}

impl SlotPhase {
    pub fn kind(&self) -> PhaseKind {
        match self {
            SlotPhase::Launching => PhaseKind::Launching,
            SlotPhase::Executing { .. } => PhaseKind::Executing,
            SlotPhase::Stopping { .. } => PhaseKind::Stopping,
            SlotPhase::Cleaning => PhaseKind::Cleaning,
            SlotPhase::Attention { .. } => PhaseKind::Attention,
        }
    }

    /// A lane that will free itself without anyone deciding anything more: a stop in
    /// flight (any cause, a user cancel included) or a cleanup. Attention is not: it
    /// waits for a person.
    pub fn is_becoming_free(&self) -> bool {
        matches!(self, SlotPhase::Stopping { .. } | SlotPhase::Cleaning)
    }
}

/// Where a job may run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// Any resource; free ones are taken in [`resource_order`].
    Any,
    /// Only this resource.
    Pinned(ResourceId),
    /// Exactly these lanes, all of them (`resources`, as many as `gpus`).
    Lanes(Vec<ResourceId>),
}

impl Target {
    pub fn allows(&self, resource: ResourceId) -> bool {
        match self {
            Target::Any => true,
            Target::Pinned(pinned) => *pinned == resource,
            Target::Lanes(lanes) => lanes.contains(&resource),
        }
    }
}

/// A queued job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingJob {
    pub id: JobId,
    pub priority: Priority,
    /// The 1-based slot within its level.
    pub position: u32,
    pub target: Target,
    /// How many lanes it takes at once, at least 1.
    pub gpus: u32,
    /// Its `time_limit`, if it has one: the only way a job behind a reservation may use a
    /// reserved lane is to end, by this, before the reservation's estimated start.
    pub time_limit: Option<Duration>,
    /// Its previous run is still cleaning or in Attention somewhere: leftovers could still
    /// write to its checkpoint directory, so it neither starts nor preempts.
    pub blocked_by_own_run: bool,
    /// The first job of its `after` that has not succeeded, with that job's state: until
    /// there is none it neither starts, nor preempts, nor reserves, nor heads the queue,
    /// but it keeps its slot (SPEC section 4, dependencies).
    pub dependency: Option<(JobId, JobStatus)>,
}

impl WaitingJob {
    /// How many lanes it takes at once: its `gpus` (at least 1), or every lane of a pinned
    /// set, should the set be larger.
    pub fn needs(&self) -> usize {
        let gpus = usize::try_from(self.gpus.max(1)).unwrap_or(usize::MAX);
        match &self.target {
            Target::Lanes(lanes) => gpus.max(lanes.len()),
            Target::Any | Target::Pinned(_) => gpus,
        }
    }

    /// Whether it may run on `lane`: its target allows it, and a MIG slice only for a job of
    /// one lane (a process sees one slice at most).
    pub fn may_use(&self, lane: &ResourceSlot) -> bool {
        self.target.allows(lane.id) && (self.needs() == 1 || !lane.mig)
    }

    /// Whether the job takes part in the pass: only a job free to start now does.
    fn takes_part(&self) -> bool {
        !self.blocked_by_own_run && self.dependency.is_none()
    }
}

/// What the core should commit and then enact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions {
    /// Free resources to reserve, in serving order of their jobs.
    pub launches: Vec<Launch>,
    /// New preemptive stops, at most one per waiting job.
    pub stops: Vec<Stop>,
    /// The first job in serving order that found no free resource (blocked notices).
    pub first_blocked: Option<BlockedHead>,
    /// Becoming-free lanes that waiting jobs count on instead of a new stop.
    pub claims: Vec<Claim>,
    /// Why each job of the snapshot that did not get a lane waits, in serving order.
    pub waiting: Vec<(JobId, Waiting)>,
    /// The lanes held for the first multi-lane job that cannot start, if any.
    pub reservation: Option<Reservation>,
}

/// Lanes held for one multi-lane job (SPEC section 4, reservations): recomputed every pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub job: JobId,
    /// In resource order, as many as the job needs.
    pub resources: Vec<ResourceId>,
    /// The latest estimate of its lanes; `None` when any is unknown.
    pub estimated_start: Option<Millis>,
}

/// A lane that is stopping or cleaning, counted on by a waiting job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub job: JobId,
    pub resource: ResourceId,
}

/// Free lanes to reserve for one job, all of them in one go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub job: JobId,
    /// In resource order, as many as the job's `gpus`.
    pub resources: Vec<ResourceId>,
}

/// A preemptive stop of an executing run, decided for one waiting job. At most one per run,
/// however many lanes it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    /// The victim's first lane in resource order; the core stops the run by `task`.
    pub resource: ResourceId,
    /// The exact run to stop: the core re-checks that it still holds the lane.
    pub task: TaskId,
    /// [`StopCause::Yield`] or [`StopCause::Restart`], never a user cancel.
    pub cause: StopCause,
    pub for_job: JobId,
}

/// The first blocked job and what holds it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedHead {
    pub job: JobId,
    /// Every busy lane the job may use, in resource order.
    pub blockers: Vec<Blocker>,
    /// A yield is in flight or decided on a lane the job may use: the notice uses the
    /// shorter `yield` delay, since a checkpoint is expected.
    pub yield_requested: bool,
}

/// One busy lane in front of the blocked head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocker {
    /// A run in any phase but Attention.
    Run {
        resource: ResourceId,
        job: JobId,
        task: TaskId,
    },
    /// A lane held until a person releases its Attention.
    Attention { resource: ResourceId },
}

/// One pass of the queue: filling first, then victims for the jobs still waiting, then the
/// blocked head.
pub fn decide(snapshot: &Snapshot) -> Decisions {
    let resources = order::sorted_resources(&snapshot.resources);
    // Jobs whose own previous run is not done, or that wait for a dependency, take no part
    // at all: they neither start, nor preempt, nor count as the blocked head.
    let mut jobs: Vec<&WaitingJob> = snapshot
        .jobs
        .iter()
        .filter(|job| job.takes_part())
        .collect();
    jobs.sort_by(|a, b| order::serving_order(a, b));

    let clock = reservation::Clock {
        now: snapshot.now,
        cleanup_bound: snapshot.cleanup_bound,
    };
    let filled = filling::fill(clock, snapshot.reservations, &resources, &jobs);
    let held = filled
        .reservation
        .as_ref()
        .map(|(reservation, holder)| reservation::Held {
            reservation,
            holder,
            clock,
        });
    let (stops, claims) = preemption::choose_victims(
        snapshot.now,
        &resources,
        &filled.waiting,
        &filled.free,
        held,
    );
    let first_blocked = filled
        .waiting
        .first()
        .map(|head| blocked_head(head, &resources, &stops));

    let mut decisions = Decisions {
        launches: filled.launches,
        stops,
        first_blocked,
        claims,
        waiting: Vec::new(),
        reservation: held.map(|h| h.reservation.clone()),
    };
    // Jobs held by their own previous run or a dependency come last: they took no part in
    // the pass.
    let held_back = snapshot.jobs.iter().filter(|job| !job.takes_part());
    // While storage is unavailable the launches are held back by the core: their jobs wait
    // too, for storage.
    let launched: Vec<&WaitingJob> = match snapshot.storage_unavailable_since {
        None => Vec::new(),
        Some(_) => jobs
            .iter()
            .copied()
            .filter(|job| decisions.launches.iter().any(|l| l.job == job.id))
            .collect(),
    };
    let waiting = {
        let pass = waiting::Pass {
            now: snapshot.now,
            resources: &resources,
            decisions: &decisions,
            storage_unavailable_since: snapshot.storage_unavailable_since,
            held,
        };
        filled
            .waiting
            .iter()
            .copied()
            .chain(launched)
            .chain(held_back)
            .filter_map(|job| Some((job.id, waiting::reason(job, &pass)?)))
            .collect()
    };
    decisions.waiting = waiting;
    decisions
}

/// The reason for a queued job the snapshot did not read (the queue is read only as far as
/// a decision can reach), from the same pass: `None` when the pass gave it a lane.
pub fn waiting_beyond(
    snapshot: &Snapshot,
    decisions: &Decisions,
    job: &WaitingJob,
) -> Option<Waiting> {
    let resources = order::sorted_resources(&snapshot.resources);
    let held = decisions.reservation.as_ref().and_then(|reservation| {
        let holder = snapshot.jobs.iter().find(|j| j.id == reservation.job)?;
        Some(reservation::Held {
            reservation,
            holder,
            clock: reservation::Clock {
                now: snapshot.now,
                cleanup_bound: snapshot.cleanup_bound,
            },
        })
    });
    waiting::reason(
        job,
        &waiting::Pass {
            now: snapshot.now,
            resources: &resources,
            decisions,
            storage_unavailable_since: snapshot.storage_unavailable_since,
            held,
        },
    )
}

fn blocked_head(job: &WaitingJob, resources: &[&ResourceSlot], stops: &[Stop]) -> BlockedHead {
    let mut blockers = Vec::new();
    let mut yield_requested = stops
        .iter()
        .any(|stop| stop.for_job == job.id && stop.cause == StopCause::Yield);
    for resource in resources.iter().filter(|r| job.may_use(r)) {
        let Some(run) = &resource.run else { continue };
        if matches!(
            run.phase,
            SlotPhase::Stopping {
                cause: StopCause::Yield,
                ..
            }
        ) {
            yield_requested = true;
        }
        blockers.push(match run.phase {
            SlotPhase::Attention { .. } => Blocker::Attention {
                resource: resource.id,
            },
            _ => Blocker::Run {
                resource: resource.id,
                job: run.job,
                task: run.task,
            },
        });
    }
    BlockedHead {
        job: job.id,
        blockers,
        yield_requested,
    }
}
