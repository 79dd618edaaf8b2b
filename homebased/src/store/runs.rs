//! Runs: the history of every attempt, and the phase of the one run that holds a lane.

use super::bad_column;
use super::DbResult;
use homebased_shared::error::ApiResult;
use homebased_shared::ids::{AttentionId, JobId, ResourceId, TaskId};
use homebased_shared::queue::{PhaseKind, RunStatus, StopCause};
use homebased_shared::time::Millis;
use rusqlite::{Connection, OptionalExtension, Row};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub task: TaskId,
    pub job: JobId,
    pub resource: ResourceId,
    pub run_number: u32,
    pub step: u32,
    pub resume: bool,
    pub status: RunStatus,
    /// `None` once the run no longer holds its resource.
    pub phase: Option<PhaseKind>,
    pub stop_cause: Option<StopCause>,
    pub stop_requested_at: Option<Millis>,
    pub stop_for_job: Option<JobId>,
    pub reserved_at: Millis,
    pub started_at: Option<Millis>,
    pub workload_started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub process: Option<Value>,
    pub cleanup: Option<Value>,
    pub cleanup_attempt: u32,
    pub attention: Option<AttentionId>,
}

pub(crate) const COLUMNS: &str = "task, job, resource, run_number, step, resume, status, phase, \
    stop_cause, stop_requested_at, stop_for_job, reserved_at, started_at, workload_started_at, \
    ended_at, process, cleanup, cleanup_attempt, attention";

fn parse<T: std::str::FromStr>(name: &str, text: Option<String>) -> rusqlite::Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    text.map(|t| t.parse().map_err(|e| bad_column(name, e)))
        .transpose()
}

fn required<T>(name: &str, v: Option<T>) -> rusqlite::Result<T> {
    v.ok_or_else(|| bad_column(name, "missing"))
}

fn json(name: &str, text: Option<String>) -> rusqlite::Result<Option<Value>> {
    text.map(|t| serde_json::from_str(&t).map_err(|e| bad_column(name, e)))
        .transpose()
}

pub(crate) fn from_row(r: &Row) -> rusqlite::Result<Run> {
    Ok(Run {
        task: required("task", parse("task", r.get("task")?)?)?,
        job: required("job", parse("job", r.get("job")?)?)?,
        resource: required("resource", parse("resource", r.get("resource")?)?)?,
        run_number: r.get("run_number")?,
        step: r.get("step")?,
        resume: r.get("resume")?,
        status: required("status", parse("status", r.get("status")?)?)?,
        phase: parse("phase", r.get("phase")?)?,
        stop_cause: parse("stop_cause", r.get("stop_cause")?)?,
        stop_requested_at: r.get("stop_requested_at")?,
        stop_for_job: parse("stop_for_job", r.get("stop_for_job")?)?,
        reserved_at: r.get("reserved_at")?,
        started_at: r.get("started_at")?,
        workload_started_at: r.get("workload_started_at")?,
        ended_at: r.get("ended_at")?,
        process: json("process", r.get("process")?)?,
        cleanup: json("cleanup", r.get("cleanup")?)?,
        cleanup_attempt: r.get("cleanup_attempt")?,
        attention: parse("attention", r.get("attention")?)?,
    })
}

pub fn get(conn: &Connection, task: TaskId) -> ApiResult<Option<Run>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM runs WHERE task = ?1"))
        .db("read run")?
        .query_row([task.to_string()], from_row)
        .optional()
        .db("read run")
}

/// Every attempt of a job, oldest first.
pub fn list_for_job(conn: &Connection, job: JobId) -> ApiResult<Vec<Run>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM runs WHERE job = ?1 ORDER BY run_number"
        ))
        .db("list runs")?;
    let rows = stmt
        .query_map([job.to_string()], from_row)
        .db("list runs")?;
    rows.collect::<Result<_, _>>().db("list runs")
}

/// Every run that holds a lane (any phase).
pub fn list_holding(conn: &Connection) -> ApiResult<Vec<Run>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM runs WHERE phase IS NOT NULL"
        ))
        .db("list active runs")?;
    let rows = stmt.query_map([], from_row).db("list active runs")?;
    rows.collect::<Result<_, _>>().db("list active runs")
}
