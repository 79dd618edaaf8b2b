//! The per-job event log: `seq` from 1 without gaps, appended in the same transaction as the
//! change that caused it. The body is the full event object of SPEC section 8.

use super::jobs::{self, Job};
use super::DbResult;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::event::EventKind;
use homebased_shared::ids::{JobId, MachineId, ResourceId, TaskId};
use homebased_shared::time::{now_ms, rfc3339};
use rusqlite::Connection;
use serde_json::{json, Map, Value};

/// The run an event is about; every field is `null` in the event when there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRun {
    pub resource: ResourceId,
    pub task: TaskId,
    pub run_number: u32,
    pub step: u32,
}

/// Appends one event and returns its seq.
pub fn append(
    conn: &Connection,
    machine: MachineId,
    job: &Job,
    kind: EventKind,
    run: Option<EventRun>,
    extra: Map<String, Value>,
) -> ApiResult<u32> {
    let seq = jobs::next_event_seq(conn, job.id)?;
    let now = now_ms();
    let mut body = json!({
        "api_version": homebased_shared::API_VERSION,
        "event": kind.as_str(),
        "job": job.id,
        "seq": seq,
        "at": rfc3339(now),
        "thread": job.thread,
        "name": job.name,
        "machine": machine,
        "resource": run.map(|r| r.resource),
        "task": run.map(|r| r.task),
        "run_number": run.map(|r| r.run_number),
        "step": run.map(|r| r.step),
    });
    if let Value::Object(fields) = &mut body {
        fields.extend(extra);
    }
    conn.prepare_cached(
        "INSERT INTO events (job, seq, kind, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .db("append event")?
    .execute((
        job.id.to_string(),
        seq,
        kind.as_str(),
        body.to_string(),
        now,
    ))
    .db("append event")?;
    Ok(seq)
}

/// Every event of a job, oldest first.
pub fn list_for_job(conn: &Connection, job: JobId) -> ApiResult<Vec<Value>> {
    let mut stmt = conn
        .prepare_cached("SELECT body FROM events WHERE job = ?1 ORDER BY seq")
        .db("list events")?;
    let bodies = stmt
        .query_map([job.to_string()], |r| r.get::<_, String>(0))
        .db("list events")?
        .collect::<Result<Vec<_>, _>>()
        .db("list events")?;
    bodies
        .iter()
        .map(|b| serde_json::from_str(b).map_err(ApiError::internal))
        .collect()
}
