//! Why a job that did not start waits, read off the very pass that decided: the same
//! resources, the same launches, stops and counted-on lanes, so the reason never disagrees
//! with what the scheduler did.

use super::reservation::Held;
use super::{Claim, Decisions, ResourceSlot, SlotPhase, WaitingJob};
use homebased_shared::time::Millis;
use homebased_shared::wire::{Waiting, WaitingBlocker};

/// One pass's outcome, as the reasons need it.
pub(super) struct Pass<'a> {
    pub now: Millis,
    /// In resource order, so blockers are listed in it.
    pub resources: &'a [&'a ResourceSlot],
    pub decisions: &'a Decisions,
    /// Launches are held back for storage since then (the snapshot's).
    pub storage_unavailable_since: Option<Millis>,
    /// The pass's reservation, with its holder.
    pub held: Option<Held<'a>>,
}

/// The reason `job` waits after `pass`, or `None` when the pass gave it a lane (a launch
/// that was decided but not committed yet: it is about to start, not waiting), unless
/// launches are held back for storage: then that lane waits for a run directory.
pub(super) fn reason(job: &WaitingJob, pass: &Pass<'_>) -> Option<Waiting> {
    let decisions = pass.decisions;
    if let Some((dependency, state)) = job.dependency {
        return Some(Waiting::Dependency {
            job: dependency,
            state,
        });
    }
    if decisions.launches.iter().any(|l| l.job == job.id) {
        return pass
            .storage_unavailable_since
            .map(|since| Waiting::StorageUnavailable { since });
    }
    if job.blocked_by_own_run {
        let own = pass.resources.iter().find_map(|r| {
            let run = r.run.as_ref().filter(|run| run.job == job.id)?;
            Some((r, run))
        });
        if let Some((resource, run)) = own {
            return Some(match run.phase {
                SlotPhase::Attention { attention } => Waiting::Attention {
                    resource: resource.id,
                    attention,
                },
                _ => Waiting::Cleaning {
                    resource: resource.id,
                    task: run.task,
                },
            });
        }
    }
    let allowed: Vec<&ResourceSlot> = pass
        .resources
        .iter()
        .copied()
        .filter(|r| job.may_use(r))
        .collect();
    if allowed.len() < job.needs() {
        return Some(Waiting::NoResources);
    }
    if let Some(stop) = decisions.stops.iter().find(|s| s.for_job == job.id) {
        return Some(Waiting::Stopping {
            resource: stop.resource,
            task: stop.task,
            cause: stop.cause,
            requested_at: pass.now,
        });
    }
    if let Some(held) = pass.held.filter(|h| h.holder.id == job.id) {
        return Some(gathering(held, pass));
    }
    // A lane counted on says why a job of one lane waits; a job of several waits for more
    // than that one lane, and its reason comes from all of them below.
    let counted_on = |claim: &Claim| claim.job == job.id && job.needs() == 1;
    if let Some(claim) = decisions.claims.iter().find(|c| counted_on(c)) {
        if let Some(lane) = allowed.iter().find(|r| r.id == claim.resource) {
            if let Some(waiting) = becoming_free(lane) {
                return Some(waiting);
            }
        }
    }
    // The reservation first: it is what keeps this job off a free lane, whoever took the
    // other free lanes in this pass (a backfill by a job behind it may have).
    let barred =
        |lane: &&&ResourceSlot| lane.is_free() && pass.held.is_some_and(|h| h.bars(job, lane.id));
    if let (Some(held), Some(_)) = (pass.held, allowed.iter().find(barred)) {
        return Some(Waiting::Reserved {
            job: held.reservation.job,
            resources: held.reservation.resources.clone(),
            estimated_start: held.reservation.estimated_start,
        });
    }
    for lane in &allowed {
        let taken_by = match &lane.run {
            None => match decisions
                .launches
                .iter()
                .find(|l| l.resources.contains(&lane.id))
            {
                Some(launch) => Some(launch.job),
                // Free, but too few for a job of several lanes.
                None => continue,
            },
            Some(run) if run.phase.is_becoming_free() => decisions
                .claims
                .iter()
                .find(|c| c.resource == lane.id)
                .map(|c| c.job),
            Some(_) => continue,
        };
        match taken_by {
            Some(other) => return Some(Waiting::Ahead { job: other }),
            // Nobody counts on it: only a job the snapshot did not read gets here, and
            // that lane is the one it waits for.
            None => {
                if let Some(waiting) = becoming_free(lane) {
                    return Some(waiting);
                }
            }
        }
    }
    if let (super::Target::Pinned(_), [lane]) = (&job.target, allowed.as_slice()) {
        if let Some(SlotPhase::Attention { attention }) = lane.run.as_ref().map(|r| r.phase) {
            return Some(Waiting::Attention {
                resource: lane.id,
                attention,
            });
        }
    }
    Some(Waiting::Resources {
        blockers: blockers(&allowed),
    })
}

/// Every busy lane of `lanes`, as a blocker.
fn blockers(lanes: &[&ResourceSlot]) -> Vec<WaitingBlocker> {
    lanes
        .iter()
        .filter_map(|r| {
            let run = r.run.as_ref()?;
            Some(WaitingBlocker {
                resource: r.id,
                job: run.job,
                task: run.task,
                phase: run.phase.kind(),
                priority: run.priority,
            })
        })
        .collect()
}

/// The holder's reason: its held lanes, those still free (a backfill launched in this pass
/// is not), and the runs on the others.
fn gathering(held: Held<'_>, pass: &Pass<'_>) -> Waiting {
    let lanes: Vec<&ResourceSlot> = pass
        .resources
        .iter()
        .copied()
        .filter(|r| held.reservation.resources.contains(&r.id))
        .collect();
    let backfilled = |lane: &ResourceSlot| {
        pass.decisions
            .launches
            .iter()
            .any(|l| l.resources.contains(&lane.id))
    };
    Waiting::Gathering {
        resources: held.reservation.resources.clone(),
        free: lanes
            .iter()
            .filter(|lane| lane.is_free() && !backfilled(lane))
            .map(|lane| lane.id)
            .collect(),
        estimated_start: held.reservation.estimated_start,
        blockers: blockers(&lanes),
    }
}

/// What waiting for a lane that frees itself looks like.
fn becoming_free(lane: &ResourceSlot) -> Option<Waiting> {
    let run = lane.run.as_ref()?;
    match run.phase {
        SlotPhase::Stopping {
            cause,
            requested_at,
            ..
        } => Some(Waiting::Stopping {
            resource: lane.id,
            task: run.task,
            cause,
            requested_at,
        }),
        SlotPhase::Cleaning => Some(Waiting::Cleaning {
            resource: lane.id,
            task: run.task,
        }),
        _ => None,
    }
}
