//! Filling: free resources go to waiting jobs in serving order.

use super::{Launch, ResourceSlot, WaitingJob};

/// The outcome of filling.
pub(super) struct Filled<'a> {
    pub launches: Vec<Launch>,
    /// Jobs that found no free resource they may use, still in serving order.
    pub waiting: Vec<&'a WaitingJob>,
}

/// Walks `jobs` (already in serving order, none blocked by its own run) and gives each the
/// first free resource it may use in `resources` (already in resource order). A job that
/// finds none is passed over: a pinned job waiting for its busy lane never holds up the
/// jobs behind it.
pub(super) fn fill<'a>(resources: &[&ResourceSlot], jobs: &[&'a WaitingJob]) -> Filled<'a> {
    let mut free: Vec<&ResourceSlot> = resources.iter().copied().filter(|r| r.is_free()).collect();
    let mut launches = Vec::new();
    let mut waiting = Vec::new();
    for &job in jobs {
        match free.iter().position(|r| job.target.allows(r.id)) {
            Some(index) => {
                let resource = free.remove(index);
                launches.push(Launch {
                    job: job.id,
                    resources: vec![resource.id],
                });
            }
            None => waiting.push(job),
        }
    }
    Filled { launches, waiting }
}
