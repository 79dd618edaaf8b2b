//! The run lifecycle as one pure function: [`next`] takes the phase of a run that holds a
//! lane and one thing observed about it, and answers the phase after it and what must be
//! done, kept apart: the [`Commit`]s the store writes in the observation's one transaction,
//! then the [`Effect`]s the core performs after that commit. Observe, launch, stop and
//! release in the core only load, decide with [`next`], commit and act.
//!
//! ```text
//! launching ──confirmed──▶ executing ──stop committed──▶ stopping
//!     │  (stop committed meanwhile: confirmed ──▶ stopping, enact it)   │
//!     │                        └────── ended / worker gone ─────────────┤
//!     └─ worker gone: abandoned (no worker.json), else lost like an executing run
//!                                                                       ▼
//!        lane freed ◀──clean── cleaning{attempt} ──failed──▶ attention ──released──▶ lane freed
//!
//! executing ──worker detached, its container left running──▶ executing (adopted by a new worker)
//! ```
//!
//! [`RunPhase`] is decoded once, in the store (`store::runs`); the scheduler's
//! [`SlotPhase`](crate::scheduler::SlotPhase) and the wire's `PhaseView` are projections of
//! it ([`RunPhase::slot`], [`RunPhase::view`]).

use crate::scheduler::SlotPhase;
use homebased_shared::ids::{AttentionId, JobId};
use homebased_shared::queue::{PhaseKind, StopCause};
use homebased_shared::rundir::{CleanupOutcome, CleanupRecord, ExitReason};
use homebased_shared::time::Millis;
use homebased_shared::wire::{AttentionFailure, CleanupResult, PhaseView};

pub use crate::core::classify::RunEnd;

/// A stop committed for a run: causes only upgrade, the first request time and the first
/// job it was made for are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommittedStop {
    pub cause: StopCause,
    pub requested_at: Millis,
    /// The waiting job this preemptive stop makes room for (`None` for a user cancel).
    pub for_job: Option<JobId>,
}

impl CommittedStop {
    /// This stop after another request for the same run.
    pub fn merge(self, later: CommittedStop) -> CommittedStop {
        CommittedStop {
            cause: self.cause.upgrade(later.cause),
            requested_at: self.requested_at,
            for_job: self.for_job.or(later.for_job),
        }
    }
}

/// The phase of a run while it holds its lane, with the data that belongs to each phase.
#[derive(Debug, Clone, PartialEq)]
pub enum RunPhase {
    /// Reserved; the worker has not confirmed yet. A stop committed meanwhile waits here
    /// and is enacted once the worker confirms.
    Launching {
        reserved_at: Millis,
        stop: Option<CommittedStop>,
    },
    Executing {
        started_at: Millis,
    },
    Stopping {
        started_at: Millis,
        stop: CommittedStop,
    },
    /// The run ended; the lane is held until cleanup attempt `attempt` (or a later one)
    /// reports.
    Cleaning {
        attempt: u32,
    },
    /// Cleanup failed: the lane stays held until a person releases exactly `id`.
    Attention {
        id: AttentionId,
        failure: CleanupResult,
    },
}

impl RunPhase {
    pub fn kind(&self) -> PhaseKind {
        match self {
            RunPhase::Launching { .. } => PhaseKind::Launching,
            RunPhase::Executing { .. } => PhaseKind::Executing,
            RunPhase::Stopping { .. } => PhaseKind::Stopping,
            RunPhase::Cleaning { .. } => PhaseKind::Cleaning,
            RunPhase::Attention { .. } => PhaseKind::Attention,
        }
    }

    /// The workload may still run: launching, executing or stopping.
    pub fn is_live(&self) -> bool {
        matches!(
            self,
            RunPhase::Launching { .. } | RunPhase::Executing { .. } | RunPhase::Stopping { .. }
        )
    }

    /// The stop committed for this run, while it may still run.
    pub fn stop(&self) -> Option<CommittedStop> {
        match self {
            RunPhase::Launching { stop, .. } => *stop,
            RunPhase::Stopping { stop, .. } => Some(*stop),
            _ => None,
        }
    }

    /// What the scheduler sees: a launch with a committed stop is already stopping.
    pub fn slot(&self) -> SlotPhase {
        match self {
            RunPhase::Launching { stop: None, .. } => SlotPhase::Launching,
            RunPhase::Launching {
                stop: Some(stop), ..
            }
            | RunPhase::Stopping { stop, .. } => SlotPhase::Stopping {
                cause: stop.cause,
                requested_at: stop.requested_at,
                for_job: stop.for_job,
            },
            RunPhase::Executing { started_at } => SlotPhase::Executing {
                started_at: *started_at,
            },
            RunPhase::Cleaning { .. } => SlotPhase::Cleaning,
            RunPhase::Attention { id, .. } => SlotPhase::Attention { attention: *id },
        }
    }

    /// What `resource list` shows (SPEC section 9).
    pub fn view(&self) -> PhaseView {
        match self {
            RunPhase::Launching { reserved_at, .. } => PhaseView::Launching {
                reserved_at: *reserved_at,
            },
            RunPhase::Executing { started_at } => PhaseView::Executing {
                started_at: *started_at,
            },
            RunPhase::Stopping { started_at, stop } => PhaseView::Stopping {
                cause: stop.cause,
                requested_at: stop.requested_at,
                started_at: *started_at,
            },
            RunPhase::Cleaning { attempt } => PhaseView::Cleaning { attempt: *attempt },
            RunPhase::Attention { id, failure } => PhaseView::Attention {
                id: *id,
                failure: AttentionFailure::Cleanup(failure.clone()),
            },
        }
    }
}

/// One thing observed about a run that holds a lane.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// `worker.json` names the started workload (at this time, when recorded), or an exit
    /// record proves the worker came up.
    Confirmed { workload_started_at: Option<Millis> },
    /// `exit.json`: the workload ended so, at `ended_at` by the worker's clock.
    Exited {
        reason: ExitReason,
        ended_at: Millis,
    },
    /// The worker's lock is free: nothing of the worker runs any more. `wrote_worker_json`
    /// tells whether it got far enough to perhaps start the workload.
    WorkerGone { wrote_worker_json: bool },
    /// The worker's lock is free, but it left a container step's container behind as DESIGN
    /// says a worker stopped without a stop request does: no `exit.json`, no stop request, a
    /// saved container id. `adoptions` adopting workers were started for the run before.
    WorkerDetached { adoptions: u32 },
    /// `cleanup.json` of some attempt.
    CleanupRecorded(CleanupRecord),
    /// A stop request was accepted for this run.
    StopCommitted(CommittedStop),
    /// A person released the run's Attention (the caller checked the exact UUID).
    Released,
}

/// What the store commits for a transition, in the observation's one transaction, with the
/// new phase.
#[derive(Debug, Clone, PartialEq)]
pub enum Commit {
    /// The worker confirmed.
    RecordStart { workload_started_at: Option<Millis> },
    /// The run's stop columns and the job's last stop cause.
    RecordStop(CommittedStop),
    /// How the run ended and when; its job moves on and gets its event (`core::classify`).
    RecordEnd { end: RunEnd, ended_at: Millis },
    /// A launch that never confirmed: the run is lost, its job returns to its slot (or is
    /// cancelled, with its event, when a cancel came in meanwhile).
    Abandon,
    /// The cleanup record that ended the cleaning phase.
    RecordCleanup(CleanupRecord),
    /// A new Attention for the run's lane, with `JOB_ATTENTION`.
    OpenAttention,
    /// The Attention is released.
    CloseAttention,
}

/// What the core does outside the store once the transition's transaction committed. The
/// commit comes first so that a crash between the two loses no record of what was started:
/// the daemon that comes next finds the phase and observes the run again.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Write the stop request into the run directory and signal the worker.
    EnactStop,
    /// The worker is gone without cleaning up: the daemon cleans as attempt `attempt`.
    CleanUpLost { attempt: u32 },
    /// Start adopting worker number `adoption` on the run directory: it finds the container
    /// the vanished worker left, follows it to its end and records its real exit.
    Adopt { adoption: u32 },
}

/// The outcome of an observation that changes something: the phase after it (`None`: the
/// lane is free), what the store commits with it and what the core does after, each in
/// order.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub phase: Option<RunPhase>,
    pub commits: Vec<Commit>,
    pub effects: Vec<Effect>,
}

/// Inputs a transition may need besides the phase and the observation, fixed by the caller
/// so that [`next`] stays a pure function.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    pub now: Millis,
    /// The UUID a new Attention gets.
    pub new_attention: AttentionId,
}

/// How many cleanup attempts a lane gets before it is held in Attention: a run directory
/// that cannot be cleaned (deleted, unwritable) must not be retried forever.
pub const MAX_CLEANUP_ATTEMPTS: u32 = 5;

/// How many adopting workers a run's container gets: each one that vanishes too (or finds
/// nothing to follow) is followed by another, until this many were started; then the run is
/// lost and the daemon removes its container.
pub const MAX_ADOPTIONS: u32 = 3;

/// The one lifecycle rule. `None`: the observation changes nothing in this phase (a late or
/// duplicate hint, a stale cleanup record, a release of a run not in Attention).
pub fn next(phase: &RunPhase, observation: Observation, ctx: Context) -> Option<Transition> {
    use Commit::*;
    use Effect::*;
    use Observation::*;
    let to = |phase: Option<RunPhase>, commits: Vec<Commit>, effects: Vec<Effect>| {
        Some(Transition {
            phase,
            commits,
            effects,
        })
    };
    // The worker is gone without a cleanup record: the daemon cleans as the next attempt,
    // until attempts run out.
    let clean_lost = |done: u32, before: Vec<Commit>| {
        let attempt = done + 1;
        if attempt > MAX_CLEANUP_ATTEMPTS {
            let failure = cleanup_exhausted(done, ctx.now);
            let mut commits = before;
            commits.extend([RecordCleanup(failure.clone()), OpenAttention]);
            return to(Some(attention(ctx, &failure)), commits, vec![]);
        }
        to(
            Some(RunPhase::Cleaning { attempt }),
            before,
            vec![CleanUpLost { attempt }],
        )
    };
    match (phase, observation) {
        (
            RunPhase::Launching { stop, .. },
            Confirmed {
                workload_started_at,
            },
        ) => {
            let started_at = workload_started_at.unwrap_or(ctx.now);
            let record = RecordStart {
                workload_started_at,
            };
            match stop {
                None => to(
                    Some(RunPhase::Executing { started_at }),
                    vec![record],
                    vec![],
                ),
                Some(stop) => to(
                    Some(RunPhase::Stopping {
                        started_at,
                        stop: *stop,
                    }),
                    vec![record],
                    vec![EnactStop],
                ),
            }
        }
        (RunPhase::Launching { .. }, Exited { reason, ended_at }) => to(
            Some(RunPhase::Cleaning { attempt: 1 }),
            vec![
                RecordStart {
                    workload_started_at: None,
                },
                RecordEnd {
                    end: RunEnd::Recorded(reason),
                    ended_at,
                },
            ],
            vec![],
        ),
        (RunPhase::Launching { .. }, WorkerGone { wrote_worker_json }) => {
            if wrote_worker_json {
                // It may have started the workload (and even finished it) before it died:
                // the run is lost like any other, never run again as if it never began,
                // and the lane is cleaned before it serves.
                clean_lost(
                    1,
                    vec![RecordEnd {
                        end: RunEnd::Lost,
                        ended_at: ctx.now,
                    }],
                )
            } else {
                // Nothing proves less than a missing worker.json: nothing of it ran.
                to(None, vec![Abandon], vec![])
            }
        }
        (RunPhase::Launching { reserved_at, stop }, StopCommitted(request)) => {
            let stop = stop.map_or(request, |s| s.merge(request));
            to(
                Some(RunPhase::Launching {
                    reserved_at: *reserved_at,
                    stop: Some(stop),
                }),
                vec![RecordStop(stop)],
                vec![],
            )
        }
        (RunPhase::Executing { .. } | RunPhase::Stopping { .. }, Exited { reason, ended_at }) => {
            to(
                Some(RunPhase::Cleaning { attempt: 1 }),
                vec![RecordEnd {
                    end: RunEnd::Recorded(reason),
                    ended_at,
                }],
                vec![],
            )
        }
        // No stop was requested and the container may run: a new worker adopts it and the
        // run keeps its phase (a launch is confirmed once the adopting worker records its
        // followers, or ends with the container's exit).
        (
            RunPhase::Executing { .. } | RunPhase::Launching { stop: None, .. },
            WorkerDetached { adoptions },
        ) if adoptions < MAX_ADOPTIONS => to(
            Some(phase.clone()),
            vec![],
            vec![Adopt {
                adoption: adoptions + 1,
            }],
        ),
        // Anywhere else (a stop requested, adoptions run out, the run already ended) a
        // detached worker is a gone one that got far enough to start its workload: the daemon
        // cleans up and removes the container.
        (_, WorkerDetached { .. }) => next(
            phase,
            WorkerGone {
                wrote_worker_json: true,
            },
            ctx,
        ),
        (RunPhase::Executing { .. } | RunPhase::Stopping { .. }, WorkerGone { .. }) => clean_lost(
            1,
            vec![RecordEnd {
                end: RunEnd::Lost,
                ended_at: ctx.now,
            }],
        ),
        (RunPhase::Executing { started_at }, StopCommitted(stop)) => to(
            Some(RunPhase::Stopping {
                started_at: *started_at,
                stop,
            }),
            vec![RecordStop(stop)],
            vec![EnactStop],
        ),
        (RunPhase::Stopping { started_at, stop }, StopCommitted(request)) => {
            let stop = stop.merge(request);
            to(
                Some(RunPhase::Stopping {
                    started_at: *started_at,
                    stop,
                }),
                vec![RecordStop(stop)],
                vec![EnactStop],
            )
        }
        (RunPhase::Cleaning { attempt }, CleanupRecorded(record)) => {
            if record.attempt < *attempt {
                return None;
            }
            if record.outcome.is_clean() {
                to(None, vec![RecordCleanup(record)], vec![])
            } else {
                let phase = attention(ctx, &record);
                to(
                    Some(phase),
                    vec![RecordCleanup(record), OpenAttention],
                    vec![],
                )
            }
        }
        (RunPhase::Cleaning { attempt }, WorkerGone { .. }) => clean_lost(*attempt, vec![]),
        (RunPhase::Attention { .. }, Released) => to(None, vec![CloseAttention], vec![]),
        // Everything else is a late or repeated hint, or a request the phase refuses.
        (RunPhase::Launching { .. }, CleanupRecorded(_) | Released)
        | (RunPhase::Executing { .. } | RunPhase::Stopping { .. }, Confirmed { .. })
        | (RunPhase::Executing { .. } | RunPhase::Stopping { .. }, CleanupRecorded(_) | Released)
        | (
            RunPhase::Cleaning { .. },
            Confirmed { .. } | Exited { .. } | StopCommitted(_) | Released,
        )
        | (RunPhase::Attention { .. }, _) => None,
    }
}

fn attention(ctx: Context, record: &CleanupRecord) -> RunPhase {
    RunPhase::Attention {
        id: ctx.new_attention,
        failure: CleanupResult::from(record),
    }
}

/// The record of a lane whose cleanup could not be made to run `done` times.
fn cleanup_exhausted(done: u32, now: Millis) -> CleanupRecord {
    CleanupRecord {
        attempt: done,
        outcome: CleanupOutcome::EnumerationFailed {
            message: format!(
                "cleanup did not complete after {done} attempts (is the run directory gone \
                 or unwritable?): check the machine for the run's processes before releasing"
            ),
        },
        finished_at: now,
    }
}

#[cfg(test)]
mod tests;
