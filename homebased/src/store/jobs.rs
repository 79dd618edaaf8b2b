//! Jobs: canonical spec, level and place in it, state, step and counters.
//!
//! A slotted job's place within its level is a sparse ordering key (`slot_key`, see
//! `placement::keys`), unique per level; the dense 1-based position users see is computed
//! on read: a listing numbers rows as it reads them in order, one job counts the keys on
//! the nearer side of its own along the slot index, and the level's length is kept in
//! `queue_levels` by triggers (`schema_v9.sql`).

use super::bad_column;
use super::dependencies;
use super::{Db, DbResult};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::{JobId, MachineId, ResourceId, TaskId, ThreadId};
use homebased_shared::queue::{JobStatus, Priority, StopCause};
use homebased_shared::spec::JobSpec;
use homebased_shared::time::Millis;
use rusqlite::{OptionalExtension, Row};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::placement::keys;

/// A job as the queue listing and the scheduler see it: everything but its canonical spec
/// and the submitter's environment, which only a launch and `job show` need (parsing every
/// queued job's spec on each pass made a submit's cost grow with the queue).
#[derive(Debug, Clone, PartialEq)]
pub struct JobHead {
    pub id: JobId,
    pub thread: ThreadId,
    pub name: String,
    pub priority: Priority,
    /// Where the job is in its life, with what only that state has.
    pub state: JobState,
    pub target: Option<ResourceId>,
    pub step: u32,
    pub steps: u32,
    pub runs: u32,
    pub event_seq: u32,
    pub last_stop_cause: Option<StopCause>,
    /// How many lanes each of its runs holds (`gpus`).
    pub gpus: u32,
    /// The lanes a multi-lane job is pinned to (`resources`), in the order given; empty
    /// otherwise (a one-lane job is pinned by `target`).
    pub target_lanes: Vec<ResourceId>,
    /// The spec's `time_limit` of each run, if any.
    pub time_limit: Option<std::time::Duration>,
    /// The first job of its `after` (in the order given) that has not succeeded, with that
    /// job's state: while there is one, the job waits for it (SPEC section 4).
    pub dependency: Option<(JobId, JobStatus)>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// A job's state as the store decodes it, once, from its columns (SPEC section 9's `state`):
/// each variant carries what only that state has, so that no reader meets an active job
/// without lanes or a queued one without a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Waiting in its slot at the dense 1-based `position` of its level; `resume` after a
    /// yield (its next run resumes from its checkpoint).
    Queued {
        position: u32,
        resume: bool,
    },
    /// A run holds the job on `lanes` while the job keeps its slot at `position`.
    Active {
        position: u32,
        resume: bool,
        lanes: HeldLanes,
    },
    Succeeded,
    /// `run`: the run whose failure ended the job (none when it failed without one, e.g. a
    /// restored store's launch that never confirmed).
    Failed {
        run: Option<TaskId>,
    },
    Cancelled,
}

impl JobState {
    /// The state from its stored columns; `Err` names the broken invariant.
    fn decode(
        status: JobStatus,
        position: Option<u32>,
        resume: bool,
        lanes: Vec<ResourceId>,
        failed_run: Option<TaskId>,
    ) -> Result<JobState, String> {
        let place = || position.ok_or_else(|| format!("a {} job holds no slot", status.as_str()));
        Ok(match status {
            JobStatus::Queued => JobState::Queued {
                position: place()?,
                resume,
            },
            JobStatus::Active => JobState::Active {
                position: place()?,
                resume,
                lanes: HeldLanes::new(lanes).ok_or("an active job with no run holding a lane")?,
            },
            JobStatus::Succeeded => JobState::Succeeded,
            JobStatus::Failed => JobState::Failed { run: failed_run },
            JobStatus::Cancelled => JobState::Cancelled,
        })
    }

    pub fn status(&self) -> JobStatus {
        match self {
            JobState::Queued { .. } => JobStatus::Queued,
            JobState::Active { .. } => JobStatus::Active,
            JobState::Succeeded => JobStatus::Succeeded,
            JobState::Failed { .. } => JobStatus::Failed,
            JobState::Cancelled => JobStatus::Cancelled,
        }
    }

    /// The dense position of a queued or active job in its level.
    pub fn position(&self) -> Option<u32> {
        match self {
            JobState::Queued { position, .. } | JobState::Active { position, .. } => {
                Some(*position)
            }
            _ => None,
        }
    }

    /// Whether the job's next (or current) run resumes from its checkpoint.
    pub fn resume(&self) -> bool {
        match self {
            JobState::Queued { resume, .. } | JobState::Active { resume, .. } => *resume,
            _ => false,
        }
    }

    /// The lanes of the run that holds an active job; empty otherwise.
    pub fn lanes(&self) -> &[ResourceId] {
        match self {
            JobState::Active { lanes, .. } => lanes.all(),
            _ => &[],
        }
    }
}

/// The lanes of an active job's run, in resource order: never empty (the store decodes an
/// active job without them as a broken row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLanes(Vec<ResourceId>);

impl HeldLanes {
    fn new(lanes: Vec<ResourceId>) -> Option<HeldLanes> {
        (!lanes.is_empty()).then_some(HeldLanes(lanes))
    }

    /// The first lane: the one a one-lane reader (`resource`, events) names.
    pub fn first(&self) -> ResourceId {
        self.0[0]
    }

    pub fn all(&self) -> &[ResourceId] {
        &self.0
    }
}

impl JobHead {
    /// The state's name alone, for the readers that only compare it.
    pub fn status(&self) -> JobStatus {
        self.state.status()
    }

    /// Its dense position in its level, while it holds a slot.
    pub fn position(&self) -> Option<u32> {
        self.state.position()
    }
}

/// A whole job: its head and what was stored with the submission.
#[derive(Debug, Clone, PartialEq)]
///
/// The spec is not here: it is decoded on its own ([`spec`]), by the readers that need it
/// (a launch, `job show`), and the core keeps it once decoded (`core::specs`).
pub struct Job {
    pub head: JobHead,
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
    /// `gpus` of the spec.
    pub gpus: u32,
    /// The lanes of `resources`, resolved, in the order given; empty when not pinned so.
    pub target_lanes: &'a [ResourceId],
    /// The spec's `time_limit`.
    pub time_limit: Option<std::time::Duration>,
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
            gpus: 1,
            target_lanes: &[],
            time_limit: None,
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

/// The columns of a [`JobHead`], read by position ([`head_from_row`]); the fifth is the
/// slot key, turned into the dense position by the reader.
const HEAD_COLUMNS: &str = concat!(
    "j.id, j.thread, j.name, j.priority, j.slot_key, j.state, j.resume, \
    j.target, j.step, j.steps, j.runs, j.event_seq, j.failed_run, j.last_stop_cause, \
    j.created_at, j.updated_at, \
    (SELECT group_concat(l.resource, ',' ORDER BY l.ord) FROM runs r \
       JOIN run_lanes l ON l.task = r.task WHERE r.job = j.id \
       AND r.phase IN ('launching', 'executing', 'stopping')) AS active_lanes, ",
    dependencies::first_unmet_sql!(),
    ", j.gpus, j.target_lanes, j.time_limit_ms"
);

/// A whole [`Job`]: its head's columns, then the stored submission.
const COLUMNS: &str = concat!(
    "j.id, j.thread, j.name, j.priority, j.slot_key, j.state, j.resume, \
    j.target, j.step, j.steps, j.runs, j.event_seq, j.failed_run, j.last_stop_cause, \
    j.created_at, j.updated_at, \
    (SELECT group_concat(l.resource, ',' ORDER BY l.ord) FROM runs r \
       JOIN run_lanes l ON l.task = r.task WHERE r.job = j.id \
       AND r.phase IN ('launching', 'executing', 'stopping')) AS active_lanes, ",
    dependencies::first_unmet_sql!(),
    ", j.gpus, j.target_lanes, j.time_limit_ms, j.digest, j.env_path, j.env_home, j.env, j.origin"
);

/// Column `index` of a row, parsed from its text in place (a long listing reads several
/// such columns a row; copying each into a `String` first was a third of its allocations).
fn parse<T: std::str::FromStr>(r: &Row, index: usize, name: &str) -> rusqlite::Result<T>
where
    T::Err: std::fmt::Display,
{
    r.get_ref(index)?
        .as_str()
        .map_err(|e| bad_column(name, e))?
        .parse()
        .map_err(|e| bad_column(name, e))
}

/// [`parse`] of a column that may be `NULL`.
fn opt<T: std::str::FromStr>(r: &Row, index: usize, name: &str) -> rusqlite::Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    r.get_ref(index)?
        .as_str_or_null()
        .map_err(|e| bad_column(name, e))?
        .map(|text| text.parse().map_err(|e| bad_column(name, e)))
        .transpose()
}

/// Reads the head of a row of [`HEAD_COLUMNS`] or [`COLUMNS`] (the same order), by
/// position: a long listing would otherwise spend its time matching column names. The
/// caller numbers the job: `position` is its dense place in its level when it holds a slot.
fn head_from_row(r: &Row, position: Option<u32>) -> rusqlite::Result<JobHead> {
    let priority: i64 = r.get(3)?;
    let status = parse(r, 5, "state")?;
    let state = JobState::decode(
        status,
        position,
        r.get(6)?,
        lane_list(r, 16, "active_lanes")?,
        opt(r, 12, "failed_run")?,
    )
    .map_err(|e| bad_column("state", e))?;
    Ok(JobHead {
        id: parse(r, 0, "id")?,
        thread: parse(r, 1, "thread")?,
        name: r.get(2)?,
        priority: Priority::from_rank(priority).ok_or_else(|| bad_column("priority", priority))?,
        state,
        target: opt(r, 7, "target")?,
        step: r.get(8)?,
        steps: r.get(9)?,
        runs: r.get(10)?,
        event_seq: r.get(11)?,
        last_stop_cause: opt(r, 13, "last_stop_cause")?,
        created_at: r.get(14)?,
        updated_at: r.get(15)?,
        dependency: dependencies::first_unmet(r, 17)?,
        gpus: r.get(18)?,
        target_lanes: lane_list(r, 19, "target_lanes")?,
        time_limit: r
            .get::<_, Option<u64>>(20)?
            .map(std::time::Duration::from_millis),
    })
}

/// A comma-separated list of lane UUIDs; `NULL` is none.
fn lane_list(r: &Row, index: usize, name: &str) -> rusqlite::Result<Vec<ResourceId>> {
    match r
        .get_ref(index)?
        .as_str_or_null()
        .map_err(|e| bad_column(name, e))?
    {
        None => Ok(Vec::new()),
        Some(text) => text
            .split(',')
            .map(|id| id.parse().map_err(|e| bad_column(name, e)))
            .collect(),
    }
}

fn from_row(r: &Row, position: Option<u32>) -> rusqlite::Result<Job> {
    Ok(Job {
        head: head_from_row(r, position)?,
        digest: r.get(21)?,
        env_path: r.get(22)?,
        env_home: r.get(23)?,
        env: r
            .get::<_, Option<String>>(24)?
            .map(|text| serde_json::from_str(&text).map_err(|e| bad_column("env", e)))
            .transpose()?,
        origin: opt(r, 25, "origin")?,
    })
}

pub fn get(db: Db, id: JobId) -> ApiResult<Option<Job>> {
    // The dense position is counted before the row is decoded, so that the job's state
    // arrives whole: one short read of the slot key first.
    let key = db
        .conn
        .prepare_cached("SELECT j.priority, j.slot_key FROM jobs j WHERE j.id = ?1")
        .db("read job")?
        .query_row([id.to_string()], |r| {
            let priority: i64 = r.get(0)?;
            let priority =
                Priority::from_rank(priority).ok_or_else(|| bad_column("priority", priority))?;
            Ok(r.get::<_, Option<i64>>(1)?.map(|key| (priority, key)))
        })
        .optional()
        .db("read job")?;
    let Some(key) = key else {
        return Ok(None);
    };
    let position = match key {
        Some((level, key)) => Some(position_of(db, level, key)?),
        None => None,
    };
    db.conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM jobs j WHERE j.id = ?1"))
        .db("read job")?
        .query_row([id.to_string()], |r| from_row(r, position))
        .optional()
        .db("read job")
}

/// What the scheduler needs of a job whose run holds lanes: its level (a higher one may
/// preempt it) and its runs' time limit (when its lanes are estimated free).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTerms {
    pub priority: Priority,
    pub time_limit: Option<std::time::Duration>,
}

/// The [`RunTerms`] of every job with a run that holds lanes (any phase), in one read: a
/// scheduling pass needs them for each held lane, and a whole job's read per lane (its queue
/// position counted each time) was half of a pass at 56 lanes with 560 queued.
pub fn holding_terms(db: Db) -> ApiResult<std::collections::HashMap<JobId, RunTerms>> {
    let mut stmt = db
        .conn
        .prepare_cached(
            "SELECT j.id, j.priority, j.time_limit_ms FROM jobs j \
             WHERE j.id IN (SELECT job FROM runs WHERE phase IS NOT NULL)",
        )
        .db("read the jobs of held lanes")?;
    let rows = stmt
        .query_map([], |r| {
            let priority: i64 = r.get(1)?;
            let terms = RunTerms {
                priority: Priority::from_rank(priority)
                    .ok_or_else(|| bad_column("priority", priority))?,
                time_limit: r
                    .get::<_, Option<u64>>(2)?
                    .map(std::time::Duration::from_millis),
            };
            Ok((parse(r, 0, "id")?, terms))
        })
        .db("read the jobs of held lanes")?;
    rows.collect::<rusqlite::Result<_>>()
        .db("read the jobs of held lanes")
}

/// Which of `ids` are open (queued or active), in one read.
pub fn open_among(db: Db, ids: &[JobId]) -> ApiResult<std::collections::HashSet<JobId>> {
    let list = serde_json::to_string(&ids.iter().map(JobId::to_string).collect::<Vec<_>>())
        .map_err(ApiError::internal)?;
    let mut stmt = db
        .conn
        .prepare_cached(
            "SELECT j.id FROM json_each(?1) e JOIN jobs j ON j.id = e.value \
             WHERE j.slot_key IS NOT NULL",
        )
        .db("read open jobs")?;
    let rows = stmt
        .query_map([list], |r| parse(r, 0, "id"))
        .db("read open jobs")?;
    rows.collect::<rusqlite::Result<_>>().db("read open jobs")
}

/// The job's canonical spec, decoded: `None` for no such job, an error naming the column
/// when the stored text is not a spec this build reads.
pub fn spec(db: Db, id: JobId) -> ApiResult<Option<JobSpec>> {
    let text: Option<String> = db
        .conn
        .prepare_cached("SELECT spec FROM jobs WHERE id = ?1")
        .db("read job spec")?
        .query_row([id.to_string()], |r| r.get(0))
        .optional()
        .db("read job spec")?;
    text.map(|text| {
        serde_json::from_str(&text)
            .map_err(|e| ApiError::internal(format!("column spec of job {id}: {e}")))
    })
    .transpose()
}

/// The dense 1-based position of the job holding `key` in `level`: the keys before it
/// counted along the slot index, or the level's length less the keys after it, whichever
/// side the key's place between the level's ends suggests is shorter (keys are spread
/// about evenly), so that both ends of a long queue are cheap.
fn position_of(db: Db, level: Priority, key: i64) -> ApiResult<u32> {
    let (Some(first), Some(last)) = (
        end_key(db, level, End::Front)?,
        end_key(db, level, End::Back)?,
    ) else {
        return Err(ApiError::internal("a slotted job in an empty level"));
    };
    let nearer_front = i128::from(key) - i128::from(first) <= i128::from(last) - i128::from(key);
    let sql = if nearer_front {
        "SELECT COUNT(*) FROM jobs WHERE priority = ?1 AND slot_key IS NOT NULL AND slot_key < ?2"
    } else {
        "SELECT COUNT(*) FROM jobs WHERE priority = ?1 AND slot_key IS NOT NULL AND slot_key > ?2"
    };
    let counted: u32 = db
        .conn
        .prepare_cached(sql)
        .db("number job")?
        .query_row((level.rank(), key), |r| r.get(0))
        .db("number job")?;
    if nearer_front {
        return Ok(counted + 1);
    }
    level_len(db, level)?
        .checked_sub(counted)
        .ok_or_else(|| ApiError::internal("queue_levels counts fewer jobs than the level holds"))
}

#[derive(Clone, Copy)]
enum End {
    Front,
    Back,
}

/// The first or last resting key of `level` (parked keys above `keys::MAX` left out).
fn end_key(db: Db, level: Priority, end: End) -> ApiResult<Option<i64>> {
    let sql = match end {
        End::Front => {
            "SELECT slot_key FROM jobs WHERE priority = ?1 AND slot_key BETWEEN 1 AND ?2 \
             ORDER BY slot_key ASC LIMIT 1"
        }
        End::Back => {
            "SELECT slot_key FROM jobs WHERE priority = ?1 AND slot_key BETWEEN 1 AND ?2 \
             ORDER BY slot_key DESC LIMIT 1"
        }
    };
    db.conn
        .prepare_cached(sql)
        .db("read slot")?
        .query_row((level.rank(), keys::MAX), |r| r.get(0))
        .optional()
        .db("read slot")
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
    let mut jobs = Vec::new();
    visit_open(db, |head| {
        jobs.push(head);
        true
    })?;
    Ok(jobs)
}

/// [`list_open`] one head at a time, until `visit` answers `false`: a long listing is written
/// out as it is read instead of being held whole.
pub fn visit_open(db: Db, mut visit: impl FnMut(JobHead) -> bool) -> ApiResult<()> {
    let mut stmt = db
        .conn
        .prepare_cached(&format!(
            "SELECT {HEAD_COLUMNS} FROM jobs j WHERE j.priority = ?1 AND j.slot_key IS NOT NULL \
             ORDER BY j.slot_key ASC"
        ))
        .db("list jobs")?;
    // Level by level along the slot index, rather than sorting the whole queue; each level
    // numbered as it is read.
    for level in Priority::ALL {
        let mut rows = stmt.query([level.rank()]).db("list jobs")?;
        let mut position = 0;
        while let Some(row) = rows.next().db("list jobs")? {
            position += 1;
            let head = head_from_row(row, Some(position)).db("list jobs")?;
            if !visit(head) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// A queued job as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub id: JobId,
    pub priority: Priority,
    pub position: u32,
    pub target: Option<ResourceId>,
    /// As [`JobHead::gpus`] and [`JobHead::target_lanes`].
    pub gpus: u32,
    pub target_lanes: Vec<ResourceId>,
    /// The spec's `time_limit`, if any.
    pub time_limit: Option<std::time::Duration>,
    /// As [`JobHead::dependency`].
    pub dependency: Option<(JobId, JobStatus)>,
}

/// Visits queued jobs in serving order until `visit` answers `false`, so that a pass over a
/// long queue reads only as far as a decision can reach. One walk of the slot index per
/// level: a single `ORDER BY priority DESC, slot_key ASC` would sort the whole queue first.
/// Active jobs are read too (at most one per lane), only to number the queued ones.
pub fn visit_waiting(db: Db, mut visit: impl FnMut(Waiting) -> bool) -> ApiResult<()> {
    let mut stmt = db
        .conn
        .prepare_cached(&format!(
            "SELECT j.id, j.state = 'queued', j.target, \
             {}, j.gpus, j.target_lanes, j.time_limit_ms \
             FROM jobs j \
             WHERE j.priority = ?1 AND j.slot_key IS NOT NULL \
             ORDER BY j.slot_key ASC",
            dependencies::FIRST_UNMET
        ))
        .db("list waiting jobs")?;
    for priority in Priority::ALL {
        let mut rows = stmt.query([priority.rank()]).db("list waiting jobs")?;
        let mut position = 0;
        while let Some(row) = rows.next().db("list waiting jobs")? {
            position += 1;
            let queued: bool = row.get(1).db("list waiting jobs")?;
            if !queued {
                continue;
            }
            let waiting = Waiting {
                id: parse(row, 0, "id").db("list waiting jobs")?,
                priority,
                position,
                target: opt(row, 2, "target").db("list waiting jobs")?,
                dependency: dependencies::first_unmet(row, 3).db("list waiting jobs")?,
                gpus: row.get(4).db("list waiting jobs")?,
                target_lanes: lane_list(row, 5, "target_lanes").db("list waiting jobs")?,
                time_limit: row
                    .get::<_, Option<u64>>(6)
                    .db("list waiting jobs")?
                    .map(std::time::Duration::from_millis),
            };
            if !visit(waiting) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// How many jobs hold a slot in `level`, as `queue_levels` keeps it.
pub fn level_len(db: Db, level: Priority) -> ApiResult<u32> {
    db.conn
        .prepare_cached("SELECT live FROM queue_levels WHERE priority = ?1")
        .db("count level")?
        .query_row([level.rank()], |r| r.get(0))
        .db("count level")
}

/// Stores a new job at the back of its level.
pub fn insert(db: Db, job: &NewJob) -> ApiResult<()> {
    let key = match keys::between(end_key(db, job.priority, End::Back)?, None) {
        Some(key) => key,
        None => {
            renumber(db, job.priority)?;
            keys::between(end_key(db, job.priority, End::Back)?, None)
                .ok_or_else(|| ApiError::internal("no slot key after renumbering"))?
        }
    };
    let now = db.now();
    db.conn
        .prepare_cached(
            "INSERT INTO jobs (id, thread, name, priority, slot_key, state, resume, target, spec, \
         digest, env_path, env_home, step, steps, created_at, updated_at, request_digest, env, \
         origin, gpus, target_lanes, time_limit_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'queued', 0, ?6, ?7, ?8, ?9, ?10, 0, ?11, ?12, ?12, ?13, ?14, \
         ?15, ?16, ?17, ?18)",
        )
        .db("insert job")?
        .execute(rusqlite::params![
            job.id.to_string(),
            job.thread.to_string(),
            job.name,
            job.priority.rank(),
            key,
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
            job.gpus,
            (!job.target_lanes.is_empty()).then(|| {
                job.target_lanes
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            }),
            job.time_limit
                .map(|limit| i64::try_from(limit.as_millis()).unwrap_or(i64::MAX)),
        ])
        .db("insert job")?;
    Ok(())
}

/// Spreads the keys of `level` evenly again (`keys::spacing`), in their order, when a gap
/// is used up: rare, and one write per job of the level (twice: through the parked range
/// above `keys::MAX`, since SQLite checks the unique slot index row by row). A job parked at
/// `keys::PARKED` is left where it is.
fn renumber(db: Db, level: Priority) -> ApiResult<()> {
    let n = db
        .conn
        .prepare_cached(
            "UPDATE jobs SET slot_key = ?2 + r.rank \
             FROM (SELECT id AS rid, ROW_NUMBER() OVER (ORDER BY slot_key) AS rank FROM jobs \
                   WHERE priority = ?1 AND slot_key BETWEEN 1 AND ?2) r \
             WHERE jobs.id = r.rid",
        )
        .db("renumber slots")?
        .execute((level.rank(), keys::MAX))
        .db("renumber slots")?;
    let (start, step) = keys::spacing(n as u64);
    db.conn
        .prepare_cached(
            "UPDATE jobs SET slot_key = ?3 + (slot_key - ?2 - 1) * ?4 \
             WHERE priority = ?1 AND slot_key > ?2 AND slot_key < ?5",
        )
        .db("renumber slots")?
        .execute((level.rank(), keys::MAX, start, step, keys::PARKED))
        .db("renumber slots")?;
    Ok(())
}

/// The keys on either side of dense `position` in `level` once the job holding `skip`
/// (the moving job's key, or 0 for none) has left it; `None` at an end. The ends are read
/// from the slot index directly, a place inside from whichever end is nearer.
fn neighbours(
    db: Db,
    level: Priority,
    position: u32,
    skip: i64,
) -> ApiResult<(Option<i64>, Option<i64>)> {
    let len = i64::from(level_len(db, level)?) - i64::from(skip != 0);
    let position = i64::from(position);
    let read = |descending: bool, limit: i64, offset: i64| -> ApiResult<Vec<i64>> {
        let sql = if descending {
            "SELECT slot_key FROM jobs WHERE priority = ?1 AND slot_key BETWEEN 1 AND ?2 \
             AND slot_key <> ?3 ORDER BY slot_key DESC LIMIT ?4 OFFSET ?5"
        } else {
            "SELECT slot_key FROM jobs WHERE priority = ?1 AND slot_key BETWEEN 1 AND ?2 \
             AND slot_key <> ?3 ORDER BY slot_key ASC LIMIT ?4 OFFSET ?5"
        };
        let mut stmt = db.conn.prepare_cached(sql).db("read slots")?;
        let rows = stmt
            .query_map((level.rank(), keys::MAX, skip, limit, offset), |r| r.get(0))
            .db("read slots")?;
        rows.collect::<Result<Vec<i64>, _>>().db("read slots")
    };
    if position <= 1 {
        return Ok((None, read(false, 1, 0)?.first().copied()));
    }
    if position > len {
        return Ok((read(true, 1, 0)?.first().copied(), None));
    }
    // Both neighbours exist: the jobs now at (0-based) `position - 2` and `position - 1`.
    if position - 1 <= len - position {
        match read(false, 2, position - 2)?[..] {
            [before, after] => Ok((Some(before), Some(after))),
            _ => Err(ApiError::internal("the level is shorter than its count")),
        }
    } else {
        match read(true, 2, len - position)?[..] {
            [after, before] => Ok((Some(before), Some(after))),
            _ => Err(ApiError::internal("the level is shorter than its count")),
        }
    }
}

/// The slot key of a job, `None` when it holds no slot.
fn key_of(db: Db, id: JobId) -> ApiResult<Option<i64>> {
    db.conn
        .prepare_cached("SELECT slot_key FROM jobs WHERE id = ?1")
        .db("read slot")?
        .query_row([id.to_string()], |r| r.get(0))
        .db("read slot")
}

/// Puts `job` at dense `position` (1-based, at most the level's length + 1 once the job has
/// left its slot) of `level`. Only its own row is written: its new key lies between its new
/// neighbours' (unless that gap is used up, when the level is renumbered first).
pub fn place(db: Db, job: &Job, level: Priority, position: u32) -> ApiResult<()> {
    let old = key_of(db, job.id)?
        .ok_or_else(|| ApiError::internal(format!("job {} has no slot to move", job.id)))?;
    let id = job.id.to_string();
    let skip = if level == job.priority { old } else { 0 };
    let (before, after) = neighbours(db, level, position, skip)?;
    let key = match keys::between(before, after) {
        Some(key) => key,
        None => {
            db.conn
                .execute(
                    "UPDATE jobs SET slot_key = ?2 WHERE id = ?1",
                    (&id, keys::PARKED),
                )
                .db("park job")?;
            renumber(db, level)?;
            // The parked job still counts in its own level's length.
            let skip = if level == job.priority {
                keys::PARKED
            } else {
                0
            };
            let (before, after) = neighbours(db, level, position, skip)?;
            keys::between(before, after)
                .ok_or_else(|| ApiError::internal("no slot key after renumbering"))?
        }
    };
    fail::fail_point!("move.shifted", |_| std::process::abort());
    db.conn
        .execute(
            "UPDATE jobs SET priority = ?2, slot_key = ?3, updated_at = ?4 WHERE id = ?1",
            (&id, level.rank(), key, db.now()),
        )
        .db("place job")?;
    Ok(())
}

/// Ends a job: it leaves its slot and takes its terminal state. Nothing else moves: the
/// jobs after it are one position nearer the front by being counted so.
pub fn finish(db: Db, job: &Job, status: JobStatus, failed_run: Option<TaskId>) -> ApiResult<()> {
    debug_assert!(status.is_terminal());
    db.conn.execute(
        "UPDATE jobs SET state = ?2, slot_key = NULL, resume = 0, failed_run = ?3, updated_at = ?4 \
         WHERE id = ?1",
        (job.id.to_string(), status.as_str(), failed_run.map(|t| t.to_string()), db.now()),
    )
    .db("finish job")?;
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
        .query_row("SELECT SUM(live) FROM queue_levels", [], |r| r.get(0))
        .db("count jobs")
}

/// Queued and active jobs counted by level and state (`/metrics`). Only rows with a slot are
/// read, through the `jobs_slot` index: finished jobs, however many, cost nothing.
pub fn count_open(db: Db) -> ApiResult<Vec<(Priority, JobStatus, u64)>> {
    let mut stmt = db
        .conn
        .prepare_cached(
            "SELECT priority, state, COUNT(*) FROM jobs WHERE slot_key IS NOT NULL \
             GROUP BY priority, state",
        )
        .db("count open jobs")?;
    let rows = stmt
        .query_map([], |r| {
            let priority: i64 = r.get(0)?;
            Ok((
                Priority::from_rank(priority).ok_or_else(|| bad_column("priority", priority))?,
                parse(r, 1, "state")?,
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
            .map(|j| (j.id, j.priority, j.position().unwrap()))
            .collect()
    }

    #[test]
    fn an_active_job_that_no_run_holds_a_lane_for_is_a_broken_row_not_a_queued_one() {
        let (_d, store) = test_store();
        let c = store.db();
        let job = add(c, Priority::Medium);
        assert!(matches!(
            require(c, job).unwrap().state,
            JobState::Queued {
                position: 1,
                resume: false
            }
        ));
        // Active in its row, but no run reserved a lane: the store keeps these together
        // (`runs::reserve`), so apart they are a corrupt row, named as such.
        activate(c, job, 1, 0).unwrap();
        let e = require(c, job).unwrap_err();
        assert!(e.message.contains("column state"), "{}", e.message);
        assert!(e.message.contains("no run holding a lane"), "{}", e.message);
    }

    #[test]
    fn a_spec_is_decoded_on_its_own_and_one_that_does_not_decode_names_its_column() {
        let (_d, store) = test_store();
        let c = store.db();
        // `for_test` stores `{}`, which no spec decodes from.
        let job = add(c, Priority::Medium);
        let e = spec(c, job).unwrap_err();
        assert!(
            e.message.contains(&format!("column spec of job {job}")),
            "{}",
            e.message
        );
        assert!(spec(c, JobId::new()).unwrap().is_none());
    }

    #[test]
    fn open_among_answers_the_queued_and_active_jobs_of_a_list_in_one_read() {
        let (_d, store) = test_store();
        let c = store.db();
        let queued = add(c, Priority::Medium);
        let done = add(c, Priority::Medium);
        finish(c, &require(c, done).unwrap(), JobStatus::Cancelled, None).unwrap();
        let open = open_among(c, &[queued, done, JobId::new()]).unwrap();
        assert_eq!(open, [queued].into_iter().collect());
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
        assert_eq!(get(c, ids[1]).unwrap().unwrap().position(), None);
    }

    /// Rows written by `f`, triggers' included.
    fn writes(db: Db, f: impl FnOnce()) -> u64 {
        let before = db.conn.total_changes();
        f();
        db.conn.total_changes() - before
    }

    #[test]
    fn leaving_joining_and_moving_to_an_end_write_one_row_whatever_the_queue() {
        let (_d, mut store) = test_store();
        store
            .write(|c| {
                let ids: Vec<_> = (0..2_000).map(|_| add(c, Priority::Medium)).collect();
                let head = get(c, ids[0])?.unwrap();
                // The job's row and its level's count: nothing behind it moves.
                assert_eq!(
                    writes(c, || finish(c, &head, JobStatus::Cancelled, None).unwrap()),
                    2
                );
                assert_eq!(
                    writes(c, || {
                        add(c, Priority::Medium);
                    }),
                    2
                );
                let last = get(c, ids[1_999])?.unwrap();
                assert_eq!(
                    writes(c, || place(c, &last, Priority::Medium, 1).unwrap()),
                    1
                );
                let second = get(c, ids[2])?.unwrap();
                assert_eq!(second.position(), Some(3));
                assert_eq!(
                    writes(c, || place(c, &second, Priority::High, 1).unwrap()),
                    3,
                    "the row, and the counts of the levels it left and joined"
                );
                assert_eq!(get(c, ids[1_999])?.unwrap().position(), Some(1));
                assert_eq!(get(c, ids[1])?.unwrap().position(), Some(2));
                assert_eq!(get(c, ids[3])?.unwrap().position(), Some(3));
                assert_eq!(get(c, ids[1_998])?.unwrap().position(), Some(1_998));
                assert_eq!(level_len(c, Priority::Medium)?, 1_999);
                assert_eq!(count_in_flight(c)?, 2_000);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_used_up_gap_renumbers_the_level_and_keeps_its_order() {
        let (_d, mut store) = test_store();
        store
            .write(|c| {
                let ids: Vec<_> = (0..40).map(|_| add(c, Priority::Low)).collect();
                // Each move lands right after the first job, halving the same gap: the 33rd
                // finds it used up.
                let mut order = ids.clone();
                for &id in ids[1..].iter().rev() {
                    let job = get(c, id)?.unwrap();
                    place(c, &job, Priority::Low, 2)?;
                    order.retain(|j| *j != id);
                    order.insert(1, id);
                }
                let listed: Vec<_> = slots(c).into_iter().map(|s| (s.0, s.2)).collect();
                let expected: Vec<_> = order.iter().copied().zip(1..).collect();
                assert_eq!(listed, expected);
                for (id, position) in expected {
                    assert_eq!(get(c, id)?.unwrap().position(), Some(position));
                }
                Ok(())
            })
            .unwrap();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Submit(u8),
        Finish(usize),
        Move(usize, u8, usize),
    }

    fn level(n: u8) -> Priority {
        Priority::ALL[usize::from(n) % 3]
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0u8..3).prop_map(Op::Submit),
            any::<usize>().prop_map(Op::Finish),
            (any::<usize>(), 0u8..3, any::<usize>()).prop_map(|(j, l, p)| Op::Move(j, l, p)),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// Any sequence of submits, ends and moves: the listing, every job's own position and
        /// the level lengths are exactly those of a dense model of the queue.
        #[test]
        fn positions_read_back_dense_as_in_a_model(ops in proptest::collection::vec(op(), 1..80)) {
            let (_d, mut store) = test_store();
            store.write(|c| {
                let mut model: [Vec<JobId>; 3] = Default::default();
                for op in ops {
                    let live: Vec<(usize, usize)> = (0..3)
                        .flat_map(|l| (0..model[l].len()).map(move |i| (l, i)))
                        .collect();
                    match op {
                        Op::Submit(l) => {
                            let l = level(l);
                            model[l.rank() as usize].push(add(c, l));
                        }
                        Op::Finish(pick) if !live.is_empty() => {
                            let (l, i) = live[pick % live.len()];
                            let id = model[l].remove(i);
                            finish(c, &get(c, id)?.unwrap(), JobStatus::Failed, None)?;
                        }
                        Op::Move(pick, to, at) if !live.is_empty() => {
                            let (l, i) = live[pick % live.len()];
                            let id = model[l].remove(i);
                            let to = level(to);
                            let target = &mut model[to.rank() as usize];
                            let at = at % (target.len() + 1);
                            target.insert(at, id);
                            place(c, &get(c, id)?.unwrap(), to, at as u32 + 1)?;
                        }
                        _ => {}
                    }
                }
                let expected: Vec<(JobId, Priority, u32)> = Priority::ALL
                    .iter()
                    .flat_map(|l| {
                        model[l.rank() as usize].iter().zip(1..).map(|(id, p)| (*id, *l, p))
                    })
                    .collect();
                assert_eq!(slots(c), expected);
                for (id, l, p) in &expected {
                    let job = get(c, *id)?.unwrap();
                    assert_eq!((job.priority, job.position()), (*l, Some(*p)));
                }
                for l in Priority::ALL {
                    assert_eq!(level_len(c, l)? as usize, model[l.rank() as usize].len());
                }
                Ok(())
            }).unwrap();
        }
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
