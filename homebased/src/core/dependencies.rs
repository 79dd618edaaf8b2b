//! Dependencies between jobs (SPEC section 4): what `after` names is checked at submit, and
//! a job that failed or was cancelled takes the jobs waiting on it with it, in the same
//! transaction as its own end. Waiting itself is the scheduler's (`WaitingJob::dependency`,
//! the `dependency` reason): a job with an unmet dependency simply takes no part in a pass.
//!
//! The rules are pure functions ([`at_submit`], [`cascade`]); [`check_after`] and
//! [`cancel_dependents`] read and write the store around them.

use crate::store::events;
use crate::store::{dependencies, jobs, routes, Db};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::event::{EventCause, EventDetail, EventKind};
use homebased_shared::ids::{JobId, MachineId};
use homebased_shared::queue::JobStatus;
use std::collections::{HashSet, VecDeque};

/// What this machine knows of one job named in `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// A job of this machine's queue, in this state.
    Local(JobStatus),
    /// A job this machine submitted to another one through Fleet.
    Remote(MachineId),
    /// No job with this UUID.
    Unknown,
}

/// Why a submit's `after` is refused, with the index of the offending entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Unknown(usize),
    Remote(usize, MachineId),
}

/// The outcome of a submit's `after`, checked in order: the first job that is not this
/// machine's refuses the submit; otherwise the first that already failed or was cancelled
/// is the cause the new job is cancelled with at once (`Ok(Some(job))`).
pub fn at_submit(named: &[(JobId, Named)]) -> Result<Option<JobId>, Refusal> {
    for (index, (_, found)) in named.iter().enumerate() {
        match found {
            Named::Unknown => return Err(Refusal::Unknown(index)),
            Named::Remote(machine) => return Err(Refusal::Remote(index, *machine)),
            Named::Local(_) => {}
        }
    }
    Ok(named.iter().find_map(|(job, found)| {
        matches!(
            found,
            Named::Local(JobStatus::Failed | JobStatus::Cancelled)
        )
        .then_some(*job)
    }))
}

/// The jobs to cancel because `ended` failed or was cancelled, in order, each with the job
/// of its `after` that ended (its cause): first the queued jobs naming `ended`, oldest
/// first, then the queued jobs naming those, and so on. `dependents` answers the jobs naming
/// a job, with their states. A job already finished is left as it is, and so are the jobs
/// waiting on it (they went with it); a job named through several paths is cancelled once.
pub fn cascade<E>(
    ended: JobId,
    mut dependents: impl FnMut(JobId) -> Result<Vec<(JobId, JobStatus)>, E>,
) -> Result<Vec<(JobId, JobId)>, E> {
    let mut order = Vec::new();
    let mut seen = HashSet::from([ended]);
    let mut next = VecDeque::from([ended]);
    while let Some(cause) = next.pop_front() {
        for (job, state) in dependents(cause)? {
            // Only a queued job can wait on a dependency: one that started had every
            // dependency succeeded, and a success is final.
            if state != JobStatus::Queued || !seen.insert(job) {
                continue;
            }
            order.push((job, cause));
            next.push_back(job);
        }
    }
    Ok(order)
}

/// Reads what each job of `after` is and applies [`at_submit`]: a refusal is
/// `job_not_found` or, for a job of another machine, `invalid_spec`, each with the pointer.
pub fn check_after(db: Db, after: &[JobId]) -> ApiResult<Option<JobId>> {
    let mut named = Vec::with_capacity(after.len());
    for &job in after {
        let found = match dependencies::link(db, job)? {
            Some((_, state)) => Named::Local(state),
            None => match routes::get(db, job)? {
                Some(route) => Named::Remote(route.authority),
                None => Named::Unknown,
            },
        };
        named.push((job, found));
    }
    at_submit(&named).map_err(|refusal| match refusal {
        Refusal::Unknown(i) => ApiError::new(
            ErrorCode::JobNotFound,
            format!("/after/{i}: no job {} on this machine", after[i]),
        )
        .with_input(serde_json::json!({
            "pointer": format!("/after/{i}"),
            "value": after[i],
            "job": after[i],
        })),
        Refusal::Remote(i, machine) => ApiError::new(
            ErrorCode::InvalidSpec,
            format!(
                "/after/{i}: job {} runs on machine {machine} (Fleet); after names only jobs \
                 of the machine the job runs on",
                after[i]
            ),
        )
        .with_input(serde_json::json!({
            "pointer": format!("/after/{i}"),
            "value": after[i],
        })),
    })
}

/// Cancels, inside the caller's transaction, every queued job that waits on `ended` (which
/// just failed or was cancelled), through the chain ([`cascade`]), each with its
/// `JOB_CANCELLED` event (`detail.cause` `dependency_failed`, the job of its `after` that
/// ended). Answers how many were cancelled.
pub fn cancel_dependents(db: Db, machine: MachineId, ended: JobId) -> ApiResult<usize> {
    let order = cascade(ended, |job| dependencies::dependents(db, job))?;
    for &(job, cause) in &order {
        cancel_for(db, machine, job, cause)?;
    }
    if !order.is_empty() {
        tracing::info!(job = %ended, cancelled = order.len(), "jobs waiting on it cancelled");
    }
    Ok(order.len())
}

/// Cancels one queued job because `cause`, named in its `after`, failed or was cancelled.
pub fn cancel_for(db: Db, machine: MachineId, job: JobId, cause: JobId) -> ApiResult<()> {
    let queued = jobs::require(db, job)?;
    jobs::finish(db, &queued, JobStatus::Cancelled, None)?;
    let detail = EventDetail {
        detail: Some(EventCause::DependencyFailed { job: cause }),
        ..EventDetail::default()
    };
    // The event reads the job's id, thread and name, which finishing does not change.
    events::append(db, machine, &queued, EventKind::JobCancelled, None, detail)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn after_refuses_the_first_job_not_of_this_machine_and_names_the_first_that_ended_badly() {
        let (a, b, c) = (JobId::new(), JobId::new(), JobId::new());
        let m = MachineId::new();
        use JobStatus::*;
        let cases = [
            (vec![(a, Named::Local(Queued))], Ok(None)),
            (
                vec![(a, Named::Local(Succeeded)), (b, Named::Local(Active))],
                Ok(None),
            ),
            (
                vec![
                    (a, Named::Local(Succeeded)),
                    (b, Named::Local(Cancelled)),
                    (c, Named::Local(Failed)),
                ],
                Ok(Some(b)),
            ),
            (
                vec![(a, Named::Local(Failed)), (b, Named::Unknown)],
                Err(Refusal::Unknown(1)),
            ),
            (
                vec![(a, Named::Remote(m)), (b, Named::Unknown)],
                Err(Refusal::Remote(0, m)),
            ),
        ];
        for (named, expected) in cases {
            assert_eq!(at_submit(&named), expected, "{named:?}");
        }
    }

    fn graph(edges: &[(JobId, JobId, JobStatus)]) -> HashMap<JobId, Vec<(JobId, JobStatus)>> {
        let mut g: HashMap<JobId, Vec<(JobId, JobStatus)>> = HashMap::new();
        for &(after, job, state) in edges {
            g.entry(after).or_default().push((job, state));
        }
        g
    }

    fn run(g: &HashMap<JobId, Vec<(JobId, JobStatus)>>, ended: JobId) -> Vec<(JobId, JobId)> {
        cascade::<()>(ended, |j| Ok(g.get(&j).cloned().unwrap_or_default())).unwrap()
    }

    #[test]
    fn a_failure_cancels_a_chain_in_order() {
        let (a, b, c) = (JobId::new(), JobId::new(), JobId::new());
        let g = graph(&[(a, b, JobStatus::Queued), (b, c, JobStatus::Queued)]);
        assert_eq!(run(&g, a), vec![(b, a), (c, b)]);
        assert_eq!(run(&g, c), vec![], "nothing waits on the last one");
    }

    #[test]
    fn a_job_reached_twice_is_cancelled_once_and_finished_jobs_stay() {
        let (a, b, c, d, e) = (
            JobId::new(),
            JobId::new(),
            JobId::new(),
            JobId::new(),
            JobId::new(),
        );
        // d names both a and b; b names a; c was cancelled by hand, e still waits on c: the
        // walk does not pass through a job that had already ended.
        let g = graph(&[
            (a, b, JobStatus::Queued),
            (a, d, JobStatus::Queued),
            (a, c, JobStatus::Cancelled),
            (b, d, JobStatus::Queued),
            (c, e, JobStatus::Queued),
        ]);
        assert_eq!(run(&g, a), vec![(b, a), (d, a)]);
    }
}
