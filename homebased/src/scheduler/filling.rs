//! Filling: free resources go to waiting jobs in serving order, all of a job's lanes at
//! once or none, around the reservation of the first multi-lane job that cannot start.

use super::reservation::{self, Clock, Held};
use super::{resource_order, Launch, Reservation, ResourceSlot, WaitingJob};
use homebased_shared::ids::ResourceId;
use homebased_shared::time::Millis;

/// The outcome of filling.
pub(super) struct Filled<'a> {
    pub launches: Vec<Launch>,
    /// Jobs that found too few free resources they may use, still in serving order.
    pub waiting: Vec<&'a WaitingJob>,
    /// Lanes still free after the launches, in resource order.
    pub free: Vec<ResourceId>,
    /// The reservation made in this pass, with the job holding it.
    pub reservation: Option<(Reservation, &'a WaitingJob)>,
}

/// Walks `jobs` (already in serving order, none blocked by its own run) and gives each the
/// free resources it may use in `resources` (already in resource order), as many as it
/// needs or none. A job that finds too few is passed over, so a pinned job waiting for its
/// busy lane never holds up the jobs behind it; except that with `reservations` the first
/// multi-lane job passed over holds lanes, and the jobs behind it get a held free lane only
/// when they end before the holder can start.
pub(super) fn fill<'a>(
    clock: Clock,
    reservations: bool,
    resources: &[&ResourceSlot],
    jobs: &[&'a WaitingJob],
) -> Filled<'a> {
    let mut free: Vec<&ResourceSlot> = resources.iter().copied().filter(|r| r.is_free()).collect();
    let mut launches = Vec::new();
    let mut waiting = Vec::new();
    // Lanes given in this pass, with the estimate of the run about to start on each: a
    // reservation made later in the walk counts on them.
    let mut given: Vec<(ResourceId, Option<Millis>)> = Vec::new();
    let mut reservation: Option<(Reservation, &'a WaitingJob)> = None;
    for &job in jobs {
        let held = reservation.as_ref().map(|(reservation, holder)| Held {
            reservation,
            holder,
            clock,
        });
        let is_held =
            |lane: &ResourceSlot| held.is_some_and(|h| h.reservation.resources.contains(&lane.id));
        let usable =
            |lane: &&ResourceSlot| job.may_use(lane) && !held.is_some_and(|h| h.bars(job, lane.id));
        // A job that may backfill takes lanes outside the reservation first: a held lane is
        // used only when nothing else will do.
        let mut picked: Vec<&ResourceSlot> = free
            .iter()
            .copied()
            .filter(|lane| usable(lane) && !is_held(lane))
            .chain(
                free.iter()
                    .copied()
                    .filter(|lane| usable(lane) && is_held(lane)),
            )
            .take(job.needs())
            .collect();
        if picked.len() == job.needs() {
            picked.sort_by(|a, b| resource_order(a, b));
            free.retain(|lane| !picked.iter().any(|p| p.id == lane.id));
            let estimate = reservation::estimate_of_launch(job, clock);
            given.extend(picked.iter().map(|lane| (lane.id, estimate)));
            launches.push(Launch {
                job: job.id,
                resources: picked.iter().map(|lane| lane.id).collect(),
            });
            continue;
        }
        waiting.push(job);
        if reservations && reservation.is_none() && job.needs() > 1 {
            reservation = reservation::reserve(job, resources, &given, clock).map(|r| (r, job));
        }
    }
    Filled {
        launches,
        waiting,
        free: free.iter().map(|lane| lane.id).collect(),
        reservation,
    }
}
