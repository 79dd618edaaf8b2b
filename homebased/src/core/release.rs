//! `resource release`: a person checked the machine and clears that exact Attention. Any
//! other UUID, an older one included, is `attention_not_found`. Nothing else ever leaves
//! Attention. The hold of a live run the store does not know (`unknown_runs`) is released
//! the same way; the lane serves again, whether or not that run still lives.

use super::observe::Moved;
use super::Core;
use crate::lifecycle::Observation;
use crate::store::operations::{self, Operation};
use crate::store::{attentions, runs};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::wire::{ReleaseRequest, ReleaseResult};

impl Core {
    pub(super) fn release(&mut self, req: ReleaseRequest) -> ApiResult<ReleaseResult> {
        let content = serde_json::json!({ "attention": req.attention });
        let op = Operation::new(req.operation_id, "release", self.machine, &content);
        let machine = self.machine;
        let specs = &self.specs;
        let mut released = None;
        let result = self.store.write(|db| {
            operations::once(db, &op, || {
                // Only the hold a run is in now: a released or superseded UUID is not found.
                let run = match attentions::find_current(db, req.attention)? {
                    Some(task) => runs::get(db, task)?,
                    None => None,
                };
                let moved = run
                    .as_ref()
                    .and_then(|r| Moved::plan(r, [Observation::Released], db.now()));
                let (Some(run), Some(mut moved)) = (run, moved) else {
                    // The hold of a live run the store does not know: closing it frees all
                    // of its lanes at once; the run itself is the person's to deal with. The
                    // answer names the first lane, as for a run's own Attention.
                    let hold = attentions::lane_holds(db)?
                        .into_iter()
                        .find(|hold| hold.id == req.attention);
                    if let Some(hold) = hold {
                        attentions::close(db, hold.id, db.now())?;
                        return Ok(ReleaseResult {
                            resource: hold.resources[0],
                            attention: req.attention,
                        });
                    }
                    return Err(ApiError::new(
                        ErrorCode::AttentionNotFound,
                        format!(
                            "no current Attention {}: refresh resource list and check the machine \
                         again before releasing a different hold",
                            req.attention
                        ),
                    )
                    .with_input(serde_json::json!({ "attention": req.attention })));
                };
                moved.commit(db, specs, machine)?;
                released = Some(moved);
                Ok(ReleaseResult {
                    resource: run.first_lane(),
                    attention: req.attention,
                })
            })
        })?;
        tracing::info!(attention = %req.attention, resource = %result.resource, "attention released");
        fail::fail_point!("release.committed", |_| std::process::abort());
        if let Some(moved) = released {
            self.act(&moved);
        }
        self.mark_dirty();
        Ok(result)
    }
}
