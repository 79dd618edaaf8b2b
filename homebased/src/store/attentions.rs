//! Attentions: holds on a lane whose cleanup failed, or that a live run the store does not
//! know occupies ([`LaneHold`], SPEC section 1). At most one is open per resource (a unique
//! index); only `resource release` of that exact UUID closes it.

use super::{Db, DbResult};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::{AttentionId, JobId, ResourceId, TaskId};
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

/// An open Attention that no run of the store holds: the lane of a live run the store does
/// not know, or knows as ended (`unknown_live_run`). The job is the one its `run.json` named,
/// which the store may not know either.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneHold {
    pub id: AttentionId,
    pub resource: ResourceId,
    pub task: TaskId,
    pub job: JobId,
    pub failure: Value,
}

/// Every open [`LaneHold`]. A run's own Attention is its row in phase `attention`; the
/// check goes by the task's key, so it costs one lookup per open hold however long the
/// history.
pub fn lane_holds(db: Db) -> ApiResult<Vec<LaneHold>> {
    let mut statement = db
        .conn
        .prepare_cached(
            "SELECT a.id, a.resource, a.task, a.failure FROM attentions a \
             WHERE a.released_at IS NULL AND NOT EXISTS (SELECT 1 FROM runs r \
             WHERE r.task = a.task AND r.attention = a.id AND r.phase = 'attention')",
        )
        .db("read lane holds")?;
    let rows = statement
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })
        .db("read lane holds")?;
    let mut holds = Vec::new();
    for row in rows {
        let (id, resource, task, failure) = row.db("read lane holds")?;
        holds.push(lane_hold(&id, &resource, &task, &failure).map_err(|e| {
            homebased_shared::error::ApiError::internal(format!("attention {id}: {e}"))
        })?);
    }
    Ok(holds)
}

fn lane_hold(id: &str, resource: &str, task: &str, failure: &str) -> Result<LaneHold, String> {
    let failure: Value = serde_json::from_str(failure).map_err(|e| e.to_string())?;
    let job = failure["job"]
        .as_str()
        .ok_or("failure without its job")?
        .parse()
        .map_err(|e| format!("job: {e}"))?;
    Ok(LaneHold {
        id: id.parse().map_err(|e| format!("id: {e}"))?,
        resource: resource.parse().map_err(|e| format!("resource: {e}"))?,
        task: task.parse().map_err(|e| format!("task: {e}"))?,
        job,
        failure,
    })
}

/// Whether any Attention, open or released, ever named `task`: a person who released the
/// hold of a live unknown run decided about that run, and a restart does not undo it.
pub fn ever_named(db: Db, task: TaskId) -> ApiResult<bool> {
    db.conn
        .prepare_cached("SELECT 1 FROM attentions WHERE task = ?1 LIMIT 1")
        .db("read attentions of a run")?
        .query_row([task.to_string()], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
        .db("read attentions of a run")
}

/// Whether `resource` is held by an open Attention.
pub fn is_held(db: Db, resource: ResourceId) -> ApiResult<bool> {
    db.conn
        .prepare_cached("SELECT 1 FROM attentions WHERE resource = ?1 AND released_at IS NULL")
        .db("read the attention of a resource")?
        .query_row([resource.to_string()], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
        .db("read the attention of a resource")
}
