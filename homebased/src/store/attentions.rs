//! Attentions: holds on a lane whose cleanup failed. At most one is open per resource (a
//! unique index); only `resource release` of that exact UUID closes it.

use super::{Db, DbResult};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::{AttentionId, ResourceId, TaskId};
use homebased_shared::time::Millis;
use rusqlite::OptionalExtension;
use serde_json::Value;

/// Opens a hold on `resource` for the run `task`, with the cleanup failure a person checks.
pub fn open(
    db: Db,
    id: AttentionId,
    resource: ResourceId,
    task: TaskId,
    failure: &Value,
    at: Millis,
) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "INSERT INTO attentions (id, resource, task, failure, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .db("create attention")?
        .execute((
            id.to_string(),
            resource.to_string(),
            task.to_string(),
            failure.to_string(),
            at,
        ))
        .db("create attention")?;
    Ok(())
}

/// The run held by `id`, only while that hold is the run's current one: a released or
/// superseded UUID finds nothing.
pub fn find_current(db: Db, id: AttentionId) -> ApiResult<Option<TaskId>> {
    let task: Option<String> = db
        .conn
        .prepare_cached(
            "SELECT r.task FROM runs r JOIN attentions a ON a.id = r.attention \
             WHERE r.attention = ?1 AND r.phase = 'attention' AND a.released_at IS NULL",
        )
        .db("find attention")?
        .query_row([id.to_string()], |row| row.get(0))
        .optional()
        .db("find attention")?;
    task.map(|t| {
        t.parse()
            .map_err(homebased_shared::error::ApiError::internal)
    })
    .transpose()
}

/// Closes the hold.
pub fn close(db: Db, id: AttentionId, at: Millis) -> ApiResult<()> {
    db.conn
        .prepare_cached("UPDATE attentions SET released_at = ?2 WHERE id = ?1")
        .db("release attention")?
        .execute((id.to_string(), at))
        .db("release attention")?;
    Ok(())
}
