//! Runs: the history of every attempt, the lanes each holds (`run_lanes`), the phase of the
//! one run that holds a lane, and each ended run's record (status, end time, process and
//! cleanup result), all decoded once from the row.

use super::jobs::{self, Job};
use super::resources::{self, Resource};
use super::{bad_column, Db, DbResult};
use crate::lifecycle::{CommittedStop, RunPhase};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::{AttentionId, JobId, ResourceId, TaskId};
use homebased_shared::queue::{PhaseKind, RunStatus, StopCause};
use homebased_shared::rundir::ExitReason;
use homebased_shared::time::Millis;
use homebased_shared::wire::{sorted_keys, CleanupResult};
use rusqlite::{OptionalExtension, Row};

/// One attempt of a job: its live phase while it holds lanes ([`Run::phase`]), and once it
/// ended, its ended record ([`Run::ended`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub task: TaskId,
    pub job: JobId,
    /// The lanes the run holds, or held, in resource order: one for a job with `gpus` 1.
    /// Never empty.
    pub lanes: Vec<ResourceId>,
    pub run_number: u32,
    pub step: u32,
    pub resume: bool,
    /// `None` once the run no longer holds its resource.
    pub phase: Option<RunPhase>,
    /// The stop committed for this run, kept after it ended (history, classification).
    pub stop: Option<CommittedStop>,
    pub reserved_at: Millis,
    pub started_at: Option<Millis>,
    pub workload_started_at: Option<Millis>,
    /// How it ended; `None` while it runs (status `running`).
    pub ended: Option<EndRecord>,
    /// The most GPU memory its own processes were seen using at one sample (MiB); `None`
    /// while no sample saw it.
    pub gpu_memory_peak_mib: Option<u64>,
}

/// A run's ended record: its status, time and process written together when it ended
/// ([`record_end`]), its cleanup result added when its cleaning phase ends
/// ([`record_cleanup`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EndRecord {
    /// How it ended: never `running`.
    pub status: RunStatus,
    pub at: Millis,
    /// How its process ended, as the worker recorded it; `None` for a lost run.
    pub process: Option<ExitReason>,
    /// `None` while it cleans, and for a launch given back (nothing of it ran).
    pub cleanup: Option<CleanupResult>,
}

/// Read `FROM runs` (not aliased): the lanes come from `run_lanes` in their order. The
/// columns are named in [`NAMES`] in the same order, and [`from_row`] reads them by the
/// index [`column`] finds there at compile time: a lookup by name on each read scanned the
/// row's names (a fifth of a scheduling pass at 56 lanes, which reads every held run).
pub(crate) const COLUMNS: &str = "task, job, \
    (SELECT group_concat(l.resource, ',' ORDER BY l.ord) FROM run_lanes l \
     WHERE l.task = runs.task) AS lanes, run_number, step, resume, status, phase, stop_cause, stop_requested_at, stop_for_job, reserved_at, started_at, workload_started_at, \
    ended_at, process, cleanup, cleanup_attempt, attention, gpu_memory_peak_mib";

/// The names of [`COLUMNS`], in its order (a test holds the two together).
const NAMES: [&str; 20] = [
    "task",
    "job",
    "lanes",
    "run_number",
    "step",
    "resume",
    "status",
    "phase",
    "stop_cause",
    "stop_requested_at",
    "stop_for_job",
    "reserved_at",
    "started_at",
    "workload_started_at",
    "ended_at",
    "process",
    "cleanup",
    "cleanup_attempt",
    "attention",
    "gpu_memory_peak_mib",
];

/// The index of `name` in [`NAMES`]; evaluated at compile time, where a name that is not
/// there stops the build.
const fn column(name: &str) -> usize {
    let mut i = 0;
    while i < NAMES.len() {
        if same(NAMES[i].as_bytes(), name.as_bytes()) {
            return i;
        }
        i += 1;
    }
    panic!("no such column of runs::COLUMNS")
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Column `$name` of a row of [`COLUMNS`], by its index.
macro_rules! col {
    ($name:literal) => {
        const { column($name) }
    };
}

fn parse<T: std::str::FromStr>(name: &str, text: Option<String>) -> rusqlite::Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    text.map(|t| t.parse().map_err(|e| bad_column(name, e)))
        .transpose()
}

/// A run's lanes as `run_lanes` lists them; a run without any is a broken row.
fn lanes(text: Option<String>) -> rusqlite::Result<Vec<ResourceId>> {
    let text = text.ok_or_else(|| bad_column("lanes", "a run without lanes"))?;
    text.split(',')
        .map(|id| id.parse().map_err(|e| bad_column("lanes", e)))
        .collect()
}

impl Run {
    /// The first of its lanes in resource order: where its Attention is recorded.
    pub fn first_lane(&self) -> ResourceId {
        self.lanes[0]
    }

    pub fn holds(&self, lane: ResourceId) -> bool {
        self.lanes.contains(&lane)
    }

    /// `running` until it ended, then how it ended.
    pub fn status(&self) -> RunStatus {
        self.ended.as_ref().map_or(RunStatus::Running, |e| e.status)
    }

    /// When it ended, once it did.
    pub fn ended_at(&self) -> Option<Millis> {
        self.ended.as_ref().map(|e| e.at)
    }

    /// Its cleanup result, once its cleaning phase ended.
    pub fn cleanup(&self) -> Option<&CleanupResult> {
        self.ended.as_ref().and_then(|e| e.cleanup.as_ref())
    }
}

fn required<T>(name: &str, v: Option<T>) -> rusqlite::Result<T> {
    v.ok_or_else(|| bad_column(name, "missing"))
}

/// A JSON column decoded as its record: one that does not decode is the row's error, naming
/// the column.
pub(crate) fn json<T: serde::de::DeserializeOwned>(
    name: &str,
    text: Option<String>,
) -> rusqlite::Result<Option<T>> {
    text.map(|t| serde_json::from_str(&t).map_err(|e| bad_column(name, e)))
        .transpose()
}

/// A record as its JSON column keeps it: keys sorted, as every build so far wrote it.
pub(crate) fn json_text<T: serde::Serialize>(what: &str, value: &T) -> ApiResult<String> {
    sorted_keys::to_string(value).map_err(|e| {
        homebased_shared::error::ApiError::internal(format!("cannot encode {what}: {e}"))
    })
}

/// The columns the ended record is decoded from.
#[derive(Debug, Clone, Default)]
pub(crate) struct EndColumns {
    pub status: Option<RunStatus>,
    pub ended_at: Option<Millis>,
    pub process: Option<ExitReason>,
    pub cleanup: Option<CleanupResult>,
}

/// The one decoder of a run's end. A `running` run has none, so it has no end time, process
/// or cleanup; any other status comes with its end time (written in one statement). A row
/// that breaks this is reported, never guessed at.
pub(crate) fn decode_end(c: EndColumns) -> Result<Option<EndRecord>, (&'static str, String)> {
    let status = c.status.ok_or(("status", "missing".to_string()))?;
    if status == RunStatus::Running {
        let recorded = [
            ("ended_at", c.ended_at.is_some()),
            ("process", c.process.is_some()),
            ("cleanup", c.cleanup.is_some()),
        ];
        return match recorded.iter().find(|(_, set)| *set) {
            Some((column, _)) => Err((column, "recorded for a run that is still running".into())),
            None => Ok(None),
        };
    }
    let at = c.ended_at.ok_or((
        "ended_at",
        format!("missing for a run that ended {}", status.as_str()),
    ))?;
    Ok(Some(EndRecord {
        status,
        at,
        process: c.process,
        cleanup: c.cleanup,
    }))
}

/// The columns a phase is decoded from.
#[derive(Debug, Clone, Default)]
pub(crate) struct PhaseColumns {
    pub kind: Option<PhaseKind>,
    pub stop: Option<CommittedStop>,
    pub reserved_at: Millis,
    pub started_at: Option<Millis>,
    pub cleanup_attempt: u32,
    pub attention: Option<AttentionId>,
    pub cleanup: Option<CleanupResult>,
}

/// The one decoder of a run's phase. A row that breaks the lifecycle's rules (a stopping
/// run without its stop, an executing run with one, Attention without its UUID) is
/// reported, never guessed at: the schema's CHECK constraints keep such rows out.
pub(crate) fn decode_phase(c: PhaseColumns) -> Result<Option<RunPhase>, String> {
    let Some(kind) = c.kind else { return Ok(None) };
    let started = |what: &str| c.started_at.ok_or(format!("{what} run without started_at"));
    Ok(Some(match kind {
        PhaseKind::Launching => RunPhase::Launching {
            reserved_at: c.reserved_at,
            stop: c.stop,
        },
        PhaseKind::Executing if c.stop.is_some() => {
            return Err("executing run with a committed stop (it would be stopping)".into())
        }
        PhaseKind::Executing => RunPhase::Executing {
            started_at: started("executing")?,
        },
        PhaseKind::Stopping => RunPhase::Stopping {
            // A stop committed while launching and confirmed without a start record keeps
            // the reservation as its start, as `resource list` has always shown it.
            started_at: c.started_at.unwrap_or(c.reserved_at),
            stop: c.stop.ok_or("stopping run without a stop cause")?,
        },
        PhaseKind::Cleaning => RunPhase::Cleaning {
            attempt: c.cleanup_attempt.max(1),
        },
        // Its failure is its cleanup result, written in the commit that opened it.
        PhaseKind::Attention => RunPhase::Attention {
            id: c.attention.ok_or("attention without its UUID")?,
            failure: c.cleanup.ok_or("attention without its failed cleanup")?,
        },
    }))
}

pub(crate) fn from_row(r: &Row) -> rusqlite::Result<Run> {
    let cause: Option<StopCause> = parse("stop_cause", r.get(col!("stop_cause"))?)?;
    let stop = match cause {
        None => None,
        Some(cause) => Some(CommittedStop {
            cause,
            requested_at: required("stop_requested_at", r.get(col!("stop_requested_at"))?)?,
            for_job: parse("stop_for_job", r.get(col!("stop_for_job"))?)?,
        }),
    };
    let reserved_at = r.get(col!("reserved_at"))?;
    let started_at = r.get(col!("started_at"))?;
    let cleanup: Option<CleanupResult> = json("cleanup", r.get(col!("cleanup"))?)?;
    let phase = decode_phase(PhaseColumns {
        kind: parse("phase", r.get(col!("phase"))?)?,
        stop,
        reserved_at,
        started_at,
        cleanup_attempt: r.get(col!("cleanup_attempt"))?,
        attention: parse("attention", r.get(col!("attention"))?)?,
        cleanup: cleanup.clone(),
    })
    .map_err(|e| bad_column("phase", e))?;
    let ended = decode_end(EndColumns {
        status: parse("status", r.get(col!("status"))?)?,
        ended_at: r.get(col!("ended_at"))?,
        process: json("process", r.get(col!("process"))?)?,
        cleanup,
    })
    .map_err(|(column, e)| bad_column(column, e))?;
    Ok(Run {
        task: required("task", parse("task", r.get(col!("task"))?)?)?,
        job: required("job", parse("job", r.get(col!("job"))?)?)?,
        lanes: lanes(r.get(col!("lanes"))?)?,
        run_number: r.get(col!("run_number"))?,
        step: r.get(col!("step"))?,
        resume: r.get(col!("resume"))?,
        phase,
        stop,
        reserved_at,
        started_at,
        workload_started_at: r.get(col!("workload_started_at"))?,
        ended,
        gpu_memory_peak_mib: r.get(col!("gpu_memory_peak_mib"))?,
    })
}

pub fn get(db: Db, task: TaskId) -> ApiResult<Option<Run>> {
    db.conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM runs WHERE task = ?1"))
        .db("read run")?
        .query_row([task.to_string()], from_row)
        .optional()
        .db("read run")
}

/// Every attempt of a job, oldest first.
pub fn list_for_job(db: Db, job: JobId) -> ApiResult<Vec<Run>> {
    let mut stmt = db
        .conn
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
pub fn list_holding(db: Db) -> ApiResult<Vec<Run>> {
    match db.rows {
        Some(cache) => cache.held_runs(db, read_holding, read_holding_row),
        None => Ok(read_holding(db)?.into_iter().map(|(_, run)| run).collect()),
    }
}

/// Every run that holds lanes, with its rowid, in rowid order.
fn read_holding(db: Db) -> ApiResult<Vec<(i64, Run)>> {
    let mut stmt = db
        .conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS}, runs.rowid FROM runs WHERE phase IS NOT NULL ORDER BY runs.rowid"
        ))
        .db("list active runs")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(NAMES.len())?, from_row(r)?)))
        .db("list active runs")?;
    rows.collect::<Result<_, _>>().db("list active runs")
}

/// The run of row `rowid`, if it holds lanes now.
fn read_holding_row(db: Db, rowid: i64) -> ApiResult<Option<Run>> {
    db.conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM runs WHERE runs.rowid = ?1 AND phase IS NOT NULL"
        ))
        .db("read an active run")?
        .query_row([rowid], from_row)
        .optional()
        .db("read an active run")
}

/// Whether a run of `job` holds its lanes now.
fn job_holds_a_run(db: Db, job: JobId) -> ApiResult<bool> {
    db.any_row(
        "SELECT 1 FROM runs WHERE job = ?1 AND phase IS NOT NULL",
        job.to_string(),
        "read the run a job holds",
    )
}

/// Whether some run holds `lane` now (`run_lanes.held`, cleared with the run's phase).
fn lane_is_held_by_a_run(db: Db, lane: ResourceId) -> ApiResult<bool> {
    db.any_row(
        "SELECT 1 FROM run_lanes WHERE resource = ?1 AND held = 1",
        lane.to_string(),
        "read the run a lane holds",
    )
}

/// Lanes reserved for a queued job: the new run, launching.
#[derive(Debug, Clone)]
pub struct Reservation {
    pub job: Job,
    /// In resource order, as the scheduler gave them.
    pub lanes: Vec<Resource>,
    pub task: TaskId,
    pub run_number: u32,
    /// Since when the job waited in its slot: its submission, or the end of its previous
    /// run (a preemption, the previous step, a launch given back). Read by one indexed
    /// lookup (`runs_job`), for the wait histogram of `/metrics`.
    pub queued_since: Millis,
    /// The reservation's own time: when the run started, for the same histogram.
    pub reserved_at: Millis,
}

/// Reserves `lanes` for `job` if all are still as the scheduler saw them (the job queued,
/// holding no run, as many lanes as it asks for, none of them held by any run or hold): a
/// new run, launching, with all its lanes, and the job active. All or nothing: `None`
/// changes nothing.
pub fn reserve(db: Db, job: JobId, lanes: &[ResourceId]) -> ApiResult<Option<Reservation>> {
    let Some(job) = jobs::get(db, job)? else {
        return Ok(None);
    };
    let jobs::JobState::Queued { resume, .. } = job.state else {
        return Ok(None);
    };
    if lanes.is_empty() || lanes.len() != job.gpus as usize {
        return Ok(None);
    }
    // Two indexed lookups (`runs_one_per_job`, `run_lanes_one_run_per_lane`), not every held
    // run decoded: a pass that launches a burst reserves once per run it starts.
    if job_holds_a_run(db, job.id)? {
        return Ok(None);
    }
    for lane in lanes {
        if lane_is_held_by_a_run(db, *lane)? {
            return Ok(None);
        }
    }
    let mut resources = Vec::with_capacity(lanes.len());
    for (i, lane) in lanes.iter().enumerate() {
        // A lane held for a live run the store does not know has no holding run.
        if lanes[..i].contains(lane) || super::attentions::is_held(db, *lane)? {
            return Ok(None);
        }
        let Some(resource) = resources::get(db, *lane)? else {
            return Ok(None);
        };
        resources.push(resource);
    }
    let task = TaskId::new();
    let run_number = job.runs + 1;
    let now = db.now();
    let queued_since = previous_end(db, job.id, job.runs)?.unwrap_or(job.created_at);
    db.conn
        .prepare_cached(
            "INSERT INTO runs (task, job, resource, run_number, step, resume, status, phase, \
             reserved_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', 'launching', ?7)",
        )
        .db("reserve run")?
        .execute((
            task.to_string(),
            job.id.to_string(),
            lanes[0].to_string(),
            run_number,
            job.step,
            resume,
            now,
        ))
        .db("reserve run")?;
    for (ord, lane) in lanes.iter().enumerate() {
        db.conn
            .prepare_cached(
                "INSERT INTO run_lanes (task, ord, resource, held) VALUES (?1, ?2, ?3, 1)",
            )
            .db("reserve a run's lane")?
            .execute((task.to_string(), ord, lane.to_string()))
            .db("reserve a run's lane")?;
        if ord == 0 {
            fail::fail_point!("reserve.first-lane", |_| std::process::abort());
        }
    }
    jobs::activate(db, job.id, run_number, now)?;
    Ok(Some(Reservation {
        job,
        lanes: resources,
        task,
        run_number,
        queued_since,
        reserved_at: now,
    }))
}

/// When run `run_number` of `job` ended (`None`: no such run, or it has not ended).
fn previous_end(db: Db, job: JobId, run_number: u32) -> ApiResult<Option<Millis>> {
    if run_number == 0 {
        return Ok(None);
    }
    db.conn
        .prepare_cached("SELECT ended_at FROM runs WHERE job = ?1 AND run_number = ?2")
        .db("read the previous run's end")?
        .query_row((job.to_string(), run_number), |r| {
            r.get::<_, Option<Millis>>(0)
        })
        .optional()
        .map(Option::flatten)
        .db("read the previous run's end")
}

/// Writes a run's phase with the columns that belong to it (`None`: the lane is free).
/// Columns of other phases are left as they are: they are the run's history.
pub fn set_phase(db: Db, task: TaskId, phase: Option<&RunPhase>) -> ApiResult<()> {
    let kind = phase.map(|p| p.kind().as_str());
    let stop = phase.and_then(RunPhase::stop);
    let started_at = match phase {
        Some(RunPhase::Executing { started_at } | RunPhase::Stopping { started_at, .. }) => {
            Some(*started_at)
        }
        _ => None,
    };
    let attempt = match phase {
        Some(RunPhase::Cleaning { attempt }) => Some(*attempt),
        _ => None,
    };
    let attention = match phase {
        Some(RunPhase::Attention { id, .. }) => Some(id.to_string()),
        _ => None,
    };
    db.conn
        .prepare_cached(
            "UPDATE runs SET phase = ?2, \
             stop_cause = COALESCE(?3, stop_cause), \
             stop_requested_at = COALESCE(?4, stop_requested_at), \
             stop_for_job = COALESCE(?5, stop_for_job), \
             started_at = COALESCE(?6, started_at), \
             cleanup_attempt = COALESCE(?7, cleanup_attempt), \
             attention = COALESCE(?8, attention) WHERE task = ?1",
        )
        .db("set run phase")?
        .execute(rusqlite::params![
            task.to_string(),
            kind,
            stop.map(|s| s.cause.as_str()),
            stop.map(|s| s.requested_at),
            stop.and_then(|s| s.for_job).map(|j| j.to_string()),
            started_at,
            attempt,
            attention,
        ])
        .db("set run phase")?;
    Ok(())
}

/// The worker confirmed; the workload started at `workload_started_at` when it said so.
pub fn record_start(db: Db, task: TaskId, workload_started_at: Option<Millis>) -> ApiResult<()> {
    db.conn
        .prepare_cached("UPDATE runs SET workload_started_at = ?2 WHERE task = ?1")
        .db("record run start")?
        .execute((task.to_string(), workload_started_at))
        .db("record run start")?;
    Ok(())
}

/// How the run ended: its status, the process result the worker recorded and when.
pub fn record_end(
    db: Db,
    task: TaskId,
    status: RunStatus,
    process: Option<&ExitReason>,
    ended_at: Millis,
) -> ApiResult<()> {
    let process = process
        .map(|p| json_text("a run's process", p))
        .transpose()?;
    db.conn
        .prepare_cached(
            "UPDATE runs SET status = ?2, process = ?3, ended_at = ?4, \
             started_at = COALESCE(started_at, ?4) WHERE task = ?1",
        )
        .db("record run end")?
        .execute((task.to_string(), status.as_str(), process, ended_at))
        .db("record run end")?;
    Ok(())
}

/// A sample saw the run's own processes using `mib` of GPU memory: its peak becomes that
/// when it was lower or unknown. Only a run that still holds its lanes is raised (a sample
/// taken before the run ended may be posted after). Answers whether anything changed.
pub fn raise_gpu_peak(db: Db, task: TaskId, mib: u64) -> ApiResult<bool> {
    let mib = i64::try_from(mib).unwrap_or(i64::MAX);
    let changed = db
        .conn
        .prepare_cached(
            "UPDATE runs SET gpu_memory_peak_mib = ?2 WHERE task = ?1 AND phase IS NOT NULL \
             AND (gpu_memory_peak_mib IS NULL OR gpu_memory_peak_mib < ?2)",
        )
        .db("record GPU memory peak")?
        .execute((task.to_string(), mib))
        .db("record GPU memory peak")?;
    Ok(changed > 0)
}

/// The cleanup result that ended the cleaning phase (a failure is also the Attention's).
pub fn record_cleanup(db: Db, task: TaskId, cleanup: &CleanupResult) -> ApiResult<()> {
    let cleanup = json_text("a run's cleanup", cleanup)?;
    db.conn
        .prepare_cached("UPDATE runs SET cleanup = ?2 WHERE task = ?1")
        .db("record cleanup")?
        .execute((task.to_string(), cleanup))
        .db("record cleanup")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_column_names_are_those_the_query_selects_in_its_order() {
        let (_dir, store) = crate::store::test_store();
        let stmt = store
            .db()
            .conn
            .prepare(&format!("SELECT {COLUMNS} FROM runs"))
            .unwrap();
        assert_eq!(stmt.column_names(), NAMES);
    }

    fn columns(kind: Option<PhaseKind>) -> PhaseColumns {
        PhaseColumns {
            kind,
            reserved_at: 1_000,
            ..PhaseColumns::default()
        }
    }

    fn stop() -> CommittedStop {
        CommittedStop {
            cause: StopCause::Restart,
            requested_at: 3_000,
            for_job: None,
        }
    }

    /// A low job reserved on a new manual lane `gpu0`: its id and its run.
    fn reserved_on_a_manual_lane(db: Db) -> (JobId, Reservation) {
        let lane = resources::insert(
            db,
            "gpu0",
            None,
            homebased_shared::wire::ResourceOrigin::Manual,
        )
        .unwrap();
        let spec = serde_json::json!({});
        let new = jobs::NewJob::for_test(&spec, homebased_shared::queue::Priority::Low);
        jobs::insert(db, &new).unwrap();
        (new.id, reserve(db, new.id, &[lane.id]).unwrap().unwrap())
    }

    /// A job waits from its submission the first time, then from the end of its last run.
    #[test]
    fn a_reservation_knows_since_when_its_job_was_queued() {
        let (_d, store) = crate::store::test_store();
        let db = store.db();
        let (job, first) = reserved_on_a_manual_lane(db);
        assert_eq!(
            first.queued_since,
            jobs::require(db, job).unwrap().created_at
        );
        assert!(first.reserved_at >= first.queued_since);
        record_end(db, first.task, RunStatus::Preempted, None, 123_456).unwrap();
        set_phase(db, first.task, None).unwrap();
        jobs::requeue(db, job, true, 123_456).unwrap();
        let second = reserve(db, job, &[first.lanes[0].id]).unwrap().unwrap();
        assert_eq!(second.queued_since, 123_456);
    }

    /// A peak is unknown until a sample saw the run, only ever rises, and stops at the end.
    #[test]
    fn a_gpu_peak_starts_unknown_only_rises_and_stays_after_the_end() {
        let (_d, store) = crate::store::test_store();
        let db = store.db();
        let lane = resources::insert(
            db,
            "gpu0",
            Some(0),
            homebased_shared::wire::ResourceOrigin::Detected,
        )
        .unwrap();
        let spec = serde_json::json!({});
        let new = jobs::NewJob::for_test(&spec, homebased_shared::queue::Priority::Low);
        jobs::insert(db, &new).unwrap();
        let run = reserve(db, new.id, &[lane.id]).unwrap().unwrap();
        let peak = || get(db, run.task).unwrap().unwrap().gpu_memory_peak_mib;
        assert_eq!(peak(), None);
        assert!(raise_gpu_peak(db, run.task, 0).unwrap());
        assert_eq!(peak(), Some(0), "seen using nothing is 0, not unknown");
        assert!(raise_gpu_peak(db, run.task, 2048).unwrap());
        assert!(!raise_gpu_peak(db, run.task, 1024).unwrap());
        assert_eq!(peak(), Some(2048));
        record_end(db, run.task, RunStatus::Succeeded, None, 5_000).unwrap();
        set_phase(db, run.task, None).unwrap();
        assert!(
            !raise_gpu_peak(db, run.task, 9_999).unwrap(),
            "a late sample"
        );
        assert_eq!(peak(), Some(2048));
    }

    /// A run that still runs has no end; one that ended has its time; nothing else is read.
    #[test]
    fn an_end_is_decoded_once_and_an_impossible_row_is_refused() {
        let running = EndColumns {
            status: Some(RunStatus::Running),
            ..EndColumns::default()
        };
        assert_eq!(decode_end(running.clone()), Ok(None));
        let exit = ExitReason::Exit { code: 1 };
        let ended = EndColumns {
            status: Some(RunStatus::Failed),
            ended_at: Some(5_000),
            process: Some(exit.clone()),
            ..EndColumns::default()
        };
        assert_eq!(
            decode_end(ended.clone()),
            Ok(Some(EndRecord {
                status: RunStatus::Failed,
                at: 5_000,
                process: Some(exit.clone()),
                cleanup: None,
            }))
        );
        let refused = [
            (EndColumns::default(), "status"),
            (
                EndColumns {
                    ended_at: None,
                    ..ended
                },
                "ended_at",
            ),
            (
                EndColumns {
                    ended_at: Some(5_000),
                    ..running.clone()
                },
                "ended_at",
            ),
            (
                EndColumns {
                    process: Some(exit),
                    ..running
                },
                "process",
            ),
        ];
        for (row, column) in refused {
            assert_eq!(
                decode_end(row.clone()).map_err(|e| e.0),
                Err(column),
                "{row:?}"
            );
        }
    }

    /// A stored record that is not its type (hand-edited, written by a newer build) is the
    /// read's error naming its column: never a panic, never read as nothing.
    #[test]
    fn a_record_that_does_not_decode_is_an_error_naming_its_column() {
        let (_d, store) = crate::store::test_store();
        let db = store.db();
        let (job, run) = reserved_on_a_manual_lane(db);
        let exit = ExitReason::Exit { code: 0 };
        record_end(db, run.task, RunStatus::Succeeded, Some(&exit), 5_000).unwrap();
        set_phase(db, run.task, Some(&RunPhase::Cleaning { attempt: 1 })).unwrap();
        let ended = get(db, run.task).unwrap().unwrap().ended.unwrap();
        assert_eq!(ended.process, Some(exit));
        let set = |column: &str, text: &str| {
            db.conn
                .execute(
                    &format!("UPDATE runs SET {column} = ?2 WHERE task = ?1"),
                    (run.task.to_string(), text),
                )
                .unwrap();
        };
        for (column, text) in [
            ("process", r#"{"kind":"exploded"}"#),
            ("process", "not json"),
            ("cleanup", r#"{"result":"clean"}"#),
            ("cleanup", r#"{"attempt":1,"result":"melted"}"#),
        ] {
            set(column, text);
            let err = get(db, run.task).unwrap_err();
            assert!(
                err.message.contains(&format!("column {column}:")),
                "{column} {text}: {}",
                err.message
            );
            assert!(list_for_job(db, job).is_err());
            let valid = match column {
                "process" => r#"{"code":0,"kind":"exit"}"#,
                _ => r#"{"attempt":1,"result":"clean"}"#,
            };
            set(column, valid);
            assert!(get(db, run.task).is_ok(), "{column} reads again");
        }
    }

    /// The one decoder refuses what the two old ones disagreed on (a stopping run without
    /// its stop: one called it cleaning, the other an error), and every other row that
    /// breaks the lifecycle's rules.
    #[test]
    fn a_phase_is_decoded_once_and_an_impossible_row_is_refused() {
        assert_eq!(decode_phase(columns(None)), Ok(None));
        let refused = [
            columns(Some(PhaseKind::Stopping)),
            PhaseColumns {
                stop: Some(stop()),
                started_at: Some(2_000),
                ..columns(Some(PhaseKind::Executing))
            },
            columns(Some(PhaseKind::Executing)),
            columns(Some(PhaseKind::Attention)),
        ];
        for row in refused {
            assert!(decode_phase(row.clone()).is_err(), "{row:?}");
        }
        let launching_with_a_stop = PhaseColumns {
            stop: Some(stop()),
            ..columns(Some(PhaseKind::Launching))
        };
        assert_eq!(
            decode_phase(launching_with_a_stop),
            Ok(Some(RunPhase::Launching {
                reserved_at: 1_000,
                stop: Some(stop())
            }))
        );
        let stopping = PhaseColumns {
            stop: Some(stop()),
            started_at: Some(2_000),
            ..columns(Some(PhaseKind::Stopping))
        };
        assert_eq!(
            decode_phase(stopping),
            Ok(Some(RunPhase::Stopping {
                started_at: 2_000,
                stop: stop()
            }))
        );
        // A cleaning row written before attempts were numbered is attempt 1.
        assert_eq!(
            decode_phase(columns(Some(PhaseKind::Cleaning))),
            Ok(Some(RunPhase::Cleaning { attempt: 1 }))
        );
    }
}
