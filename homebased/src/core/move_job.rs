//! `resource job move`: change a job's level or position. Moving never lets equal priority
//! preempt; it only changes the order in which waiting work is served.

use super::Core;
use crate::placement::{self, Anchor, Slot};
use crate::store::jobs;
use crate::store::operations::{self, Operation};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::JobId;
use homebased_shared::wire::{MoveRequest, MoveResult};

impl Core {
    pub(super) fn move_job(&mut self, id: JobId, req: MoveRequest) -> ApiResult<MoveResult> {
        let content = serde_json::json!({ "job": id, "placement": req.placement });
        let op = Operation::new(req.operation_id, "move", self.machine, &content);
        let result = self.store.write(|tx| {
            operations::once(tx, &op, || {
                placement::check_flags(&req.placement, id).map_err(refused)?;
                let job = jobs::require(tx, id)?;
                let Some(position) = job.state.position() else {
                    return Err(ApiError::new(
                        ErrorCode::JobTerminal,
                        format!(
                            "job {id} is {} and no longer holds a slot",
                            job.status().as_str()
                        ),
                    )
                    .with_input(serde_json::json!({ "job": id, "state": job.status().as_str() })));
                };
                let anchor = match placement::anchor_job(&req.placement) {
                    None => None,
                    Some(target) => Some(match jobs::get(tx, target)? {
                        None => Anchor::Missing,
                        Some(t) => match t.state.position() {
                            None => Anchor::Terminal,
                            Some(p) => Anchor::At(Slot {
                                priority: t.priority,
                                position: p,
                            }),
                        },
                    }),
                };
                let mut lens = [0u32; 3];
                for level in homebased_shared::queue::Priority::ALL {
                    lens[level.rank() as usize] = jobs::level_len(tx, level)?;
                }
                let current = Slot {
                    priority: job.priority,
                    position,
                };
                let slot = placement::resolve(&req.placement, id, current, anchor, |l| {
                    lens[l.rank() as usize]
                })
                .map_err(refused)?;
                if slot != current {
                    jobs::place(tx, &job, slot.priority, slot.position)?;
                }
                Ok(MoveResult {
                    job: id,
                    priority: slot.priority,
                    position: slot.position,
                })
            })
        })?;
        self.mark_dirty();
        Ok(result)
    }
}

fn refused(r: placement::MoveRefusal) -> ApiError {
    ApiError::new(ErrorCode::MoveRefused, r.message())
        .with_input(serde_json::json!({ "reason": r.reason() }))
}
