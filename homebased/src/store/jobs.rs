//! Jobs: canonical spec, level and dense 1-based position, state, step and counters.
//!
//! Positions are dense per level and enforced by a unique index. SQLite checks unique
//! indexes row by row, so shifting a range of slots moves it through a disjoint range
//! (`+ SHIFT_OFFSET`) first.

use super::bad_column;
use super::{Db, DbResult};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::{JobId, MachineId, ResourceId, TaskId, ThreadId};
use homebased_shared::queue::{JobStatus, Priority, StopCause};
use homebased_shared::time::{now_ms, Millis};
use rusqlite::{OptionalExtension, Row};
use serde_json::Value;
use std::collections::BTreeMap;

const SHIFT_OFFSET: i64 = 1_000_000_000;
/// A slot no real job can hold, used while a job is between levels.
const PARKED: i64 = 2 * SHIFT_OFFSET + 1;

/// A job as the queue listing and the scheduler see it: everything but its canonical spec
/// and the submitter's environment, which only a launch and `job show` need (parsing every
/// queued job's spec on each pass made a submit's cost grow with the queue).
#[derive(Debug, Clone, PartialEq)]
pub struct JobHead {
    pub id: JobId,
    pub thread: ThreadId,
    pub name: String,
    pub priority: Priority,
    pub position: Option<u32>,
    pub status: JobStatus,
    pub resume: bool,
    pub target: Option<ResourceId>,
    pub step: u32,
    pub steps: u32,
    pub runs: u32,
    pub event_seq: u32,
    pub failed_run: Option<TaskId>,
    pub last_stop_cause: Option<StopCause>,
    /// The lane of the run that holds the job while it is active.
    pub active_resource: Option<ResourceId>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// A whole job: its head and what was stored with the submission.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub head: JobHead,
    pub spec: Value,
    pub digest: String,
    pub env_path: Option<String>,
    pub env_home: Option<String>,
    /// The submitter's whole environment; `None` when none was captured.
    pub env: Option<BTreeMap<String, String>>,
    /// The machine a remote job was submitted from (Fleet); `None` for a local job.
    pub origin: Option<MachineId>,
}

/// A job is read like its head (`job.status`, `job.id`): the head is most of what callers
/// use, and a listing hands out heads alone.
impl std::ops::Deref for Job {
    type Target = JobHead;
    fn deref(&self) -> &JobHead {
        &self.head
    }
}

/// What a submission stores.
pub struct NewJob<'a> {
    pub id: JobId,
    pub thread: ThreadId,
    pub name: &'a str,
    pub priority: Priority,
    pub target: Option<ResourceId>,
    pub spec: &'a Value,
    pub digest: &'a str,
    pub request_digest: &'a str,
    pub env_path: Option<&'a str>,
    pub env_home: Option<&'a str>,
    pub env: Option<&'a BTreeMap<String, String>>,
    pub steps: u32,
    /// The origin of a remote job (Fleet).
    pub origin: Option<MachineId>,
}

#[cfg(test)]
impl<'a> NewJob<'a> {
    /// A one-step job with a fresh id and thread, for tests of the store and the core.
    pub fn for_test(spec: &'a Value, priority: Priority) -> NewJob<'a> {
        NewJob {
            id: JobId::new(),
            thread: ThreadId::new(),
            name: "test job",
            priority,
            target: None,
            spec,
            digest: "d",
            request_digest: "r",
            env_path: None,
            env_home: None,
            env: None,
            steps: 1,
            origin: None,
        }
    }
}

/// The columns of a [`JobHead`], read by position ([`head_from_row`]).
const HEAD_COLUMNS: &str = "j.id, j.thread, j.name, j.priority, j.position, j.state, j.resume, \
    j.target, j.step, j.steps, j.runs, j.event_seq, j.failed_run, j.last_stop_cause, \
    j.created_at, j.updated_at, \
    (SELECT r.resource FROM runs r WHERE r.job = j.id \
       AND r.phase IN ('launching', 'executing', 'stopping')) AS active_resource";

/// A whole [`Job`]: its head's columns, then the stored submission.
const COLUMNS: &str = "j.id, j.thread, j.name, j.priority, j.position, j.state, j.resume, \
    j.target, j.step, j.steps, j.runs, j.event_seq, j.failed_run, j.last_stop_cause, \
    j.created_at, j.updated_at, \
    (SELECT r.resource FROM runs r WHERE r.job = j.id \
       AND r.phase IN ('launching', 'executing', 'stopping')) AS active_resource, \
    j.spec, j.digest, j.env_path, j.env_home, j.env, j.origin";

fn parse<T: std::str::FromStr>(name: &str, text: String) -> rusqlite::Result<T>
where
    T::Err: std::fmt::Display,
{
    text.parse().map_err(|e| bad_column(name, e))
}

fn opt<T: std::str::FromStr>(name: &str, text: Option<String>) -> rusqlite::Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    text.map(|t| parse(name, t)).transpose()
}

/// Reads the head of a row of [`HEAD_COLUMNS`] or [`COLUMNS`] (the same order), by
/// position: a long listing would otherwise spend its time matching column names.
fn head_from_row(r: &Row) -> rusqlite::Result<JobHead> {
    let priority: i64 = r.get(3)?;
    Ok(JobHead {
        id: parse("id", r.get(0)?)?,
        thread: parse("thread", r.get(1)?)?,
        name: r.get(2)?,
        priority: Priority::from_rank(priority).ok_or_else(|| bad_column("priority", priority))?,
        position: r.get::<_, Option<i64>>(4)?.map(|p| p as u32),
        status: parse("state", r.get(5)?)?,
        resume: r.get(6)?,
        target: opt("target", r.get(7)?)?,
        step: r.get(8)?,
        steps: r.get(9)?,
        runs: r.get(10)?,
        event_seq: r.get(11)?,
        failed_run: opt("failed_run", r.get(12)?)?,
        last_stop_cause: opt("last_stop_cause", r.get(13)?)?,
        created_at: r.get(14)?,
        updated_at: r.get(15)?,
        active_resource: opt("active_resource", r.get(16)?)?,
    })
}

fn from_row(r: &Row) -> rusqlite::Result<Job> {
    let spec: String = r.get(17)?;
    Ok(Job {
        head: head_from_row(r)?,
        spec: serde_json::from_str(&spec).map_err(|e| bad_column("spec", e))?,
        digest: r.get(18)?,
        env_path: r.get(19)?,
        env_home: r.get(20)?,
        env: r
            .get::<_, Option<String>>(21)?
            .map(|text| serde_json::from_str(&text).map_err(|e| bad_column("env", e)))
            .transpose()?,
        origin: opt("origin", r.get(22)?)?,
    })
}

pub fn get(db: Db, id: JobId) -> ApiResult<Option<Job>> {
    db.conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM jobs j WHERE j.id = ?1"))
        .db("read job")?
        .query_row([id.to_string()], from_row)
        .optional()
        .db("read job")
}

/// The job, or `job_not_found`.
pub fn require(db: Db, id: JobId) -> ApiResult<Job> {
    get(db, id)?.ok_or_else(|| not_found(id))
}

pub fn not_found(id: JobId) -> ApiError {
    ApiError::new(
        ErrorCode::JobNotFound,
        format!("no job {id} on this machine"),
    )
    .with_input(serde_json::json!({ "job": id }))
}

/// Queued and active jobs in serving order: high, medium, low; then position. Heads only:
/// read one job with [`get`] for its spec.
pub fn list_open(db: Db) -> ApiResult<Vec<JobHead>> {
    let mut stmt = db
        .conn
        .prepare_cached(&format!(
            "SELECT {HEAD_COLUMNS} FROM jobs j WHERE j.priority = ?1 AND j.position IS NOT NULL \
             ORDER BY j.position ASC"
        ))
        .db("list jobs")?;
    let mut jobs = Vec::new();
    // Level by level along the slot index, rather than sorting the whole queue.
    for level in Priority::ALL {
        let rows = stmt
            .query_map([level.rank()], head_from_row)
            .db("list jobs")?;
        for row in rows {
            jobs.push(row.db("list jobs")?);
        }
    }
    Ok(jobs)
}

/// A queued job as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub id: JobId,
    pub priority: Priority,
    pub position: u32,
    pub target: Option<ResourceId>,
}

/// Visits queued jobs in serving order until `visit` answers `false`, so that a pass over a
/// long queue reads only as far as a decision can reach. One walk of the slot index per
/// level: a single `ORDER BY priority DESC, position ASC` would sort the whole queue first.
pub fn visit_waiting(db: Db, mut visit: impl FnMut(Waiting) -> bool) -> ApiResult<()> {
    let mut stmt = db
        .conn
        .prepare_cached(
            "SELECT id, position, target FROM jobs \
             WHERE priority = ?1 AND position IS NOT NULL AND state = 'queued' \
             ORDER BY position ASC",
        )
        .db("list waiting jobs")?;
    for priority in Priority::ALL {
        let mut rows = stmt.query([priority.rank()]).db("list waiting jobs")?;
        while let Some(row) = rows.next().db("list waiting jobs")? {
            let waiting = Waiting {
                id: parse("id", row.get(0).db("list waiting jobs")?).db("list waiting jobs")?,
                priority,
                position: row.get(1).db("list waiting jobs")?,
                target: opt("target", row.get(2).db("list waiting jobs")?)
                    .db("list waiting jobs")?,
            };
            if !visit(waiting) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// How many jobs hold a slot in `level`. Positions are dense, so this is the highest one,
/// read from the end of the slot index without counting.
pub fn level_len(db: Db, level: Priority) -> ApiResult<u32> {
    db.conn.prepare_cached(
        "SELECT COALESCE((SELECT position FROM jobs WHERE priority = ?1 AND position IS NOT NULL \
         ORDER BY position DESC LIMIT 1), 0)",
    )
    .db("count level")?
    .query_row([level.rank()], |r| r.get(0))
    .db("count level")
}

/// Stores a new job at the back of its level.
pub fn insert(db: Db, job: &NewJob) -> ApiResult<()> {
    let position = i64::from(level_len(db, job.priority)?) + 1;
    let now = now_ms();
    db.conn
        .prepare_cached(
            "INSERT INTO jobs (id, thread, name, priority, position, state, resume, target, spec, \
         digest, env_path, env_home, step, steps, created_at, updated_at, request_digest, env, \
         origin) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'queued', 0, ?6, ?7, ?8, ?9, ?10, 0, ?11, ?12, ?12, ?13, ?14, \
         ?15)",
        )
        .db("insert job")?
        .execute(rusqlite::params![
            job.id.to_string(),
            job.thread.to_string(),
            job.name,
            job.priority.rank(),
            position,
            job.target.map(|t| t.to_string()),
            job.spec.to_string(),
            job.digest,
            job.env_path,
            job.env_home,
            job.steps,
            now,
            job.request_digest,
            job.env
                .map(serde_json::to_string)
                .transpose()
                .map_err(ApiError::internal)?,
            job.origin.map(|o| o.to_string()),
        ])
        .db("insert job")?;
    Ok(())
}

/// Shifts the slots `>= from` of `level` by `delta`, through a disjoint range.
fn shift(db: Db, level: Priority, from: i64, delta: i64) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "UPDATE jobs SET position = position + ?3 \
         WHERE priority = ?1 AND position >= ?2 AND position < ?3",
        )
        .db("shift slots")?
        .execute((level.rank(), from, SHIFT_OFFSET))
        .db("shift slots")?;
    db.conn
        .prepare_cached(
            "UPDATE jobs SET position = position - ?2 + ?3 \
         WHERE priority = ?1 AND position >= ?2 AND position < ?4",
        )
        .db("shift slots")?
        .execute((level.rank(), SHIFT_OFFSET, delta, PARKED))
        .db("shift slots")?;
    Ok(())
}

/// Puts `job` at `position` (1-based, at most the level's length + 1) of `level`, closing
/// the gap it leaves and opening the one it needs.
pub fn place(db: Db, job: &Job, level: Priority, position: u32) -> ApiResult<()> {
    let old = job
        .position
        .ok_or_else(|| ApiError::internal(format!("job {} has no slot to move", job.id)))?;
    let id = job.id.to_string();
    db.conn
        .execute("UPDATE jobs SET position = ?2 WHERE id = ?1", (&id, PARKED))
        .db("park job")?;
    shift(db, job.priority, i64::from(old) + 1, -1)?;
    shift(db, level, i64::from(position), 1)?;
    fail::fail_point!("move.shifted", |_| std::process::abort());
    db.conn
        .execute(
            "UPDATE jobs SET priority = ?2, position = ?3, updated_at = ?4 WHERE id = ?1",
            (&id, level.rank(), i64::from(position), now_ms()),
        )
        .db("place job")?;
    Ok(())
}

/// Ends a job: it leaves its slot (the gap closes) and takes its terminal state.
pub fn finish(db: Db, job: &Job, status: JobStatus, failed_run: Option<TaskId>) -> ApiResult<()> {
    debug_assert!(status.is_terminal());
    db.conn.execute(
        "UPDATE jobs SET state = ?2, position = NULL, resume = 0, failed_run = ?3, updated_at = ?4 \
         WHERE id = ?1",
        (job.id.to_string(), status.as_str(), failed_run.map(|t| t.to_string()), now_ms()),
    )
    .db("finish job")?;
    if let Some(old) = job.position {
        shift(db, job.priority, i64::from(old) + 1, -1)?;
    }
    Ok(())
}

/// A lane was reserved for the job: it is active, on its `runs`-th attempt.
pub fn activate(db: Db, id: JobId, runs: u32, now: Millis) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "UPDATE jobs SET state = 'active', runs = ?2, updated_at = ?3 WHERE id = ?1",
        )
        .db("activate job")?
        .execute((id.to_string(), runs, now))
        .db("activate job")?;
    Ok(())
}

/// The step succeeded and another follows: queued again in its slot, at the next step.
pub fn advance_step(db: Db, id: JobId, now: Millis) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "UPDATE jobs SET state = 'queued', step = step + 1, resume = 0, updated_at = ?2 \
             WHERE id = ?1",
        )
        .db("advance job")?
        .execute((id.to_string(), now))
        .db("advance job")?;
    Ok(())
}

/// Queued again in its slot at the same step; `resume` after a yield.
pub fn requeue(db: Db, id: JobId, resume: bool, now: Millis) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "UPDATE jobs SET state = 'queued', resume = ?2, updated_at = ?3 WHERE id = ?1",
        )
        .db("requeue job")?
        .execute((id.to_string(), resume, now))
        .db("requeue job")?;
    Ok(())
}

/// A launch that never confirmed gives the job back its slot, unchanged otherwise.
pub fn return_to_slot(db: Db, id: JobId, now: Millis) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "UPDATE jobs SET state = 'queued', updated_at = ?2 WHERE id = ?1 AND state = 'active'",
        )
        .db("return job to its slot")?
        .execute((id.to_string(), now))
        .db("return job to its slot")?;
    Ok(())
}

/// The cause of the latest stop committed for one of the job's runs (`job show`).
pub fn record_stop_cause(db: Db, id: JobId, cause: StopCause) -> ApiResult<()> {
    db.conn
        .prepare_cached("UPDATE jobs SET last_stop_cause = ?2 WHERE id = ?1")
        .db("commit stop")?
        .execute((id.to_string(), cause.as_str()))
        .db("commit stop")?;
    Ok(())
}

/// Takes the next event number of a job (gapless, from 1).
pub fn next_event_seq(db: Db, id: JobId) -> ApiResult<u32> {
    db.conn
        .prepare_cached(
            "UPDATE jobs SET event_seq = event_seq + 1 WHERE id = ?1 RETURNING event_seq",
        )
        .db("number event")?
        .query_row([id.to_string()], |r| r.get(0))
        .db("number event")
}

/// The job submitted under `id` by exactly this request (see `schema_v3.sql`), if any.
pub fn find_request(db: Db, id: JobId, request_digest: &str) -> ApiResult<Option<Job>> {
    let same: bool = db
        .conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?1 AND request_digest = ?2)")
        .db("find submission")?
        .query_row((id.to_string(), request_digest), |r| r.get(0))
        .db("find submission")?;
    if same {
        get(db, id)
    } else {
        Ok(None)
    }
}

/// Counts queued and active jobs (`daemon status`, `daemon stop`).
pub fn count_in_flight(db: Db) -> ApiResult<u64> {
    db.conn
        .query_row(
            "SELECT COUNT(*) FROM jobs WHERE position IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .db("count jobs")
}

/// Queued and active jobs counted by level and state (`/metrics`). Only rows with a slot are
/// read, through the `jobs_slot` index: finished jobs, however many, cost nothing.
pub fn count_open(db: Db) -> ApiResult<Vec<(Priority, JobStatus, u64)>> {
    let mut stmt = db
        .conn
        .prepare_cached(
            "SELECT priority, state, COUNT(*) FROM jobs WHERE position IS NOT NULL \
             GROUP BY priority, state",
        )
        .db("count open jobs")?;
    let rows = stmt
        .query_map([], |r| {
            let priority: i64 = r.get(0)?;
            Ok((
                Priority::from_rank(priority).ok_or_else(|| bad_column("priority", priority))?,
                parse("state", r.get(1)?)?,
                r.get::<_, i64>(2)?.max(0) as u64,
            ))
        })
        .db("count open jobs")?;
    rows.collect::<Result<_, _>>().db("count open jobs")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    fn add(db: Db, priority: Priority) -> JobId {
        let spec = serde_json::json!({});
        let job = NewJob::for_test(&spec, priority);
        insert(db, &job).unwrap();
        job.id
    }

    fn slots(db: Db) -> Vec<(JobId, Priority, u32)> {
        list_open(db)
            .unwrap()
            .into_iter()
            .map(|j| (j.id, j.priority, j.position.unwrap()))
            .collect()
    }

    #[test]
    fn open_jobs_are_counted_by_level_and_state_and_finished_ones_not_at_all() {
        let (_d, store) = test_store();
        let c = store.db();
        let first = add(c, Priority::High);
        add(c, Priority::High);
        add(c, Priority::Low);
        let done = add(c, Priority::Low);
        activate(c, first, 1, 0).unwrap();
        finish(c, &require(c, done).unwrap(), JobStatus::Succeeded, None).unwrap();
        let mut counts = count_open(c).unwrap();
        counts.sort_by_key(|(p, s, _)| (p.as_str(), s.as_str()));
        assert_eq!(
            counts,
            [
                (Priority::High, JobStatus::Active, 1),
                (Priority::High, JobStatus::Queued, 1),
                (Priority::Low, JobStatus::Queued, 1),
            ]
        );
    }

    #[test]
    fn new_jobs_join_the_back_of_their_level() {
        let (_d, store) = test_store();
        let c = store.db();
        let a = add(c, Priority::Low);
        let b = add(c, Priority::High);
        let d = add(c, Priority::Low);
        assert_eq!(
            slots(c),
            vec![
                (b, Priority::High, 1),
                (a, Priority::Low, 1),
                (d, Priority::Low, 2)
            ]
        );
    }

    #[test]
    fn placing_and_finishing_keep_positions_dense() {
        let (_d, store) = test_store();
        let c = store.db();
        let ids: Vec<_> = (0..4).map(|_| add(c, Priority::Medium)).collect();
        let last = get(c, ids[3]).unwrap().unwrap();
        place(c, &last, Priority::Medium, 1).unwrap();
        let order: Vec<_> = slots(c).into_iter().map(|s| s.0).collect();
        assert_eq!(order, vec![ids[3], ids[0], ids[1], ids[2]]);
        let first = get(c, ids[0]).unwrap().unwrap();
        place(c, &first, Priority::High, 1).unwrap();
        let second = get(c, ids[1]).unwrap().unwrap();
        finish(c, &second, JobStatus::Cancelled, None).unwrap();
        assert_eq!(
            slots(c),
            vec![
                (ids[0], Priority::High, 1),
                (ids[3], Priority::Medium, 1),
                (ids[2], Priority::Medium, 2)
            ]
        );
        assert_eq!(get(c, ids[1]).unwrap().unwrap().position, None);
    }

    #[test]
    fn event_numbers_are_gapless() {
        let (_d, store) = test_store();
        let c = store.db();
        let a = add(c, Priority::Low);
        assert_eq!(next_event_seq(c, a).unwrap(), 1);
        assert_eq!(next_event_seq(c, a).unwrap(), 2);
    }
}
