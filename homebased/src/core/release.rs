//! `resource release`: a person checked the machine and clears that exact Attention. Any
//! other UUID, an older one included, is `attention_not_found`. Nothing else ever leaves
//! Attention.

use super::Core;
use crate::store::{operations, DbResult};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::{ResourceId, TaskId};
use homebased_shared::time::now_ms;
use homebased_shared::wire::{ReleaseRequest, ReleaseResult};
use rusqlite::OptionalExtension;

impl Core {
    pub fn release(&mut self, req: ReleaseRequest) -> ApiResult<ReleaseResult> {
        let content = serde_json::json!({ "attention": req.attention });
        let digest = operations::digest("release", &self.machine.to_string(), &content);
        let result = self.store.write(|tx| {
            if let Some(stored) = operations::replay(tx, req.operation_id, "release", &digest)? {
                return serde_json::from_value(stored).map_err(ApiError::internal);
            }
            // Only the hold a run is in now: a released or superseded UUID is not found.
            let held: Option<(String, String)> = tx
                .query_row(
                    "SELECT r.resource, r.task FROM runs r JOIN attentions a ON a.id = r.attention \
                     WHERE r.attention = ?1 AND r.phase = 'attention' AND a.released_at IS NULL",
                    [req.attention.to_string()],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .db("find attention")?;
            let Some((resource, task)) = held else {
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
            let resource: ResourceId = resource.parse().map_err(ApiError::internal)?;
            let task: TaskId = task.parse().map_err(ApiError::internal)?;
            tx.execute(
                "UPDATE attentions SET released_at = ?2 WHERE id = ?1",
                (req.attention.to_string(), now_ms()),
            )
            .db("release attention")?;
            tx.execute(
                "UPDATE runs SET phase = NULL WHERE task = ?1",
                [task.to_string()],
            )
            .db("release attention")?;
            let result = ReleaseResult {
                resource,
                attention: req.attention,
            };
            let stored = serde_json::to_value(&result).map_err(ApiError::internal)?;
            operations::record(tx, req.operation_id, "release", &digest, &stored)?;
            Ok(result)
        })?;
        tracing::info!(attention = %req.attention, resource = %result.resource, "attention released");
        self.mark_dirty();
        Ok(result)
    }
}
