//! The job specs the core has decoded, kept while their jobs are open.
//!
//! A spec never changes after its submit, but the pass needs a running victim's `preempt`,
//! the check-due notice a run's `timeout`, and every launch its steps. Decoding the stored
//! text each time made every pass parse one spec per running run; here each job's spec is
//! decoded once (`decoded` counts them, for the test that proves it) and dropped when its
//! job is no longer open.

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
}

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

    /// Drops the specs of jobs that are no longer open (queued or active), in one read: a
    /// finished job's spec is needed again only by a `job show`, which keeps it until then.
    pub fn forget_finished(&self, db: Db) -> ApiResult<()> {
        if self.kept.borrow().is_empty() {
            return Ok(());
        }
        let kept: Vec<JobId> = self.kept.borrow().keys().copied().collect();
        let open = jobs::open_among(db, &kept)?;
        self.kept.borrow_mut().retain(|job, _| open.contains(job));
        Ok(())
    }

    pub fn decoded(&self) -> u64 {
        self.decoded.get()
    }

    /// How many specs are kept now.
    pub fn kept(&self) -> usize {
        self.kept.borrow().len()
    }
}
