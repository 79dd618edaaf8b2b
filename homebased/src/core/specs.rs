//! The job specs the core has decoded, kept while their jobs are open.
//!
//! A spec never changes after its submit, but the pass needs a running victim's `preempt`,
//! the check-due notice a run's `timeout`, and every launch its steps. Decoding the stored
//! text each time made every pass parse one spec per running run; here each job's spec is
//! decoded once (`decoded` counts them, for the test that proves it) and dropped once its
//! job is no longer open: looked for when [`FORGET_AFTER`] more specs are kept than after
//! the last look, not on every pass (one read of every kept job's state, about a twentieth
//! of a pass at 56 lanes), so at most that many finished jobs' specs stay in memory.

use crate::store::{jobs, Db};
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::ids::JobId;
use homebased_shared::spec::JobSpec;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

/// Read from `&self` paths (the snapshot, views): the core is one thread, so the cache
/// keeps its cells to itself.
#[derive(Default)]
pub struct Specs {
    kept: RefCell<HashMap<JobId, Arc<JobSpec>>>,
    /// How many specs were decoded from the store since the core started.
    decoded: Cell<u64>,
    /// How many were kept after the last look for finished jobs.
    kept_after_forgetting: Cell<usize>,
}

/// How many more specs are kept before finished jobs' specs are looked for again.
pub const FORGET_AFTER: usize = 32;

impl Specs {
    /// The spec of `job`, decoded from the store on first use.
    pub fn get(&self, db: Db, job: JobId) -> ApiResult<Arc<JobSpec>> {
        if let Some(spec) = self.kept.borrow().get(&job) {
            return Ok(spec.clone());
        }
        let spec = jobs::spec(db, job)?
            .map(Arc::new)
            .ok_or_else(|| ApiError::internal(format!("no spec stored for job {job}")))?;
        self.decoded.set(self.decoded.get() + 1);
        self.kept.borrow_mut().insert(job, spec.clone());
        Ok(spec)
    }

    /// Drops the specs of jobs that are no longer open (queued or active), in one read, once
    /// [`FORGET_AFTER`] more are kept than after the last time: a
    /// finished job's spec is needed again only by a `job show`, which keeps it until then.
    pub fn forget_finished(&self, db: Db) -> ApiResult<()> {
        let count = self.kept.borrow().len();
        if count < self.kept_after_forgetting.get() + FORGET_AFTER {
            return Ok(());
        }
        let kept: Vec<JobId> = self.kept.borrow().keys().copied().collect();
        let open = jobs::open_among(db, &kept)?;
        self.kept.borrow_mut().retain(|job, _| open.contains(job));
        self.kept_after_forgetting.set(self.kept.borrow().len());
        Ok(())
    }

    /// Drops the spec kept for `job`, if any: its id now names a job stored anew.
    pub fn forget(&self, job: JobId) {
        self.kept.borrow_mut().remove(&job);
    }

    pub fn decoded(&self) -> u64 {
        self.decoded.get()
    }

    /// How many specs are kept now.
    pub fn kept(&self) -> usize {
        self.kept.borrow().len()
    }
}
