//! The per-job event log: `seq` from 1 without gaps, appended in the same transaction as the
//! change that caused it. The body is the full event object of SPEC section 8.
//!
//! Delivery state lives on the same rows: an event is pending until `delivered_at` is set
//! (only after the sink confirmed) or it is `suppressed` (a notice no longer true; its seq
//! stays taken). Only the oldest pending event of each job is ever offered for delivery, so
//! a pending event holds back its own job's later events and no one else's.

#[cfg(test)]
use super::jobs::Job;
use super::jobs::{self, JobHead};
use super::{Db, DbResult};
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::event::{Event, EventDetail, EventKind};
use homebased_shared::ids::{JobId, MachineId, ResourceId, TaskId, ThreadId};
use homebased_shared::time::Millis;
use homebased_shared::wire::{RelayedEvent, Versioned};
use rusqlite::{OptionalExtension, Row};
use serde_json::Value;

/// The run an event is about; every field is `null` in the event when there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRun {
    pub resource: ResourceId,
    pub task: TaskId,
    pub run_number: u32,
    pub step: u32,
}

impl EventRun {
    /// The run fields of an event about `run`.
    pub fn of(run: &super::runs::Run) -> EventRun {
        EventRun {
            resource: run.first_lane(),
            task: run.task,
            run_number: run.run_number,
            step: run.step,
        }
    }
}

/// Appends one event and returns its seq. `detail` holds the fields that belong to this
/// kind only (`process`, `attention`, `blocked`, ...).
pub fn append(
    db: Db,
    machine: MachineId,
    job: &JobHead,
    kind: EventKind,
    run: Option<EventRun>,
    detail: EventDetail,
) -> ApiResult<u32> {
    let seq = jobs::next_event_seq(db, job.id)?;
    let now = db.now();
    let event = Event {
        event: kind,
        job: job.id,
        seq,
        at: now,
        thread: job.thread,
        name: job.name.clone(),
        machine,
        resource: run.map(|r| r.resource),
        task: run.map(|r| r.task),
        run_number: run.map(|r| r.run_number),
        step: run.map(|r| r.step),
        detail,
    };
    let body = serde_json::to_string(&Versioned::new(&event)).map_err(ApiError::internal)?;
    // A remote job's event (its job has an origin) is the origin's to deliver: it is marked
    // with the origin and numbered in `fleet_seq`, the order the origin pulls in.
    let inserted = db
        .conn
        .prepare_cached(
            "INSERT INTO events (job, seq, kind, body, created_at, origin, fleet_seq) \
             SELECT ?1, ?2, ?3, ?4, ?5, j.origin, CASE WHEN j.origin IS NULL THEN NULL \
               ELSE (SELECT COALESCE(MAX(fleet_seq), 0) + 1 FROM events \
               WHERE fleet_seq IS NOT NULL) END \
             FROM jobs j WHERE j.id = ?1",
        )
        .db("append event")?
        .execute((job.id.to_string(), seq, kind.as_str(), body, now))
        .db("append event")?;
    if inserted != 1 {
        return Err(ApiError::internal(format!(
            "cannot append an event of job {}: no such job",
            job.id
        )));
    }
    Ok(seq)
}

/// The events of `origin`'s remote jobs after `after` in `fleet_seq` order, at most `limit`:
/// what `GET /v1/fleet/events` serves. Each comes with its `fleet_seq` (the cursor).
pub fn for_origin(
    db: Db,
    origin: MachineId,
    after: u64,
    limit: u32,
) -> ApiResult<Vec<(u64, RelayedEvent)>> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let mut stmt = db
        .conn
        .prepare_cached(
            "SELECT fleet_seq, body FROM events WHERE origin = ?1 AND fleet_seq > ?2 \
             ORDER BY fleet_seq LIMIT ?3",
        )
        .db("read remote events")?;
    let rows = stmt
        .query_map((origin.to_string(), after, limit), |r| {
            let n: i64 = r.get(0)?;
            let body: String = r.get(1)?;
            Ok((n, body))
        })
        .db("read remote events")?
        .collect::<Result<Vec<_>, _>>()
        .db("read remote events")?;
    rows.into_iter()
        .map(|(n, body)| {
            let body = serde_json::from_str(&body).map_err(|e| {
                ApiError::internal(format!("a stored event to relay cannot be read: {e}"))
            })?;
            Ok((u64::try_from(n).unwrap_or(0), body))
        })
        .collect()
}

/// Marks `origin`'s remote events up to `upto` (its cursor) handed over: the origin asks
/// `after=<cursor>` only once it stored every event up to the cursor, in the transaction that
/// moved the cursor, so those are its to deliver now. Recorded as `delivered_at`, which lets
/// a finished remote job leave the authority's history (retention keeps a job with an
/// undelivered event). Answers how many were marked.
pub fn hand_over(db: Db, origin: MachineId, upto: u64, at: Millis) -> ApiResult<usize> {
    let upto = i64::try_from(upto).unwrap_or(i64::MAX);
    db.conn
        .prepare_cached(
            "UPDATE events SET delivered_at = ?3 \
             WHERE origin = ?1 AND fleet_seq <= ?2 AND delivered_at IS NULL",
        )
        .db("hand remote events over")?
        .execute((origin.to_string(), upto, at))
        .db("hand remote events over")
}

/// Stores an event pulled from `authority` for delivery here, as it came. Answers false
/// when it was stored already (a pull answered twice, a replay after a crash).
pub fn insert_pulled(
    db: Db,
    authority: MachineId,
    event: &RelayedEvent,
    at: Millis,
) -> ApiResult<bool> {
    let seq = event.seq();
    if seq == 0 {
        return Err(ApiError::internal(format!(
            "a pulled event of job {} has seq 0",
            event.job()
        )));
    }
    let body = serde_json::to_string(event).map_err(ApiError::internal)?;
    let n = db
        .conn
        .prepare_cached(
            "INSERT OR IGNORE INTO events (job, seq, kind, body, created_at, authority) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .db("store pulled event")?
        .execute((
            event.job().to_string(),
            seq,
            event.kind_name(),
            body,
            at,
            authority.to_string(),
        ))
        .db("store pulled event")?;
    Ok(n == 1)
}

/// The events of `thread` recorded after `after`, oldest first, at most `limit`, each with
/// its id: the cursor of `GET /v1/threads/{thread}/events`. The id is the table's
/// `AUTOINCREMENT` key (`schema_v17.sql`): never given twice, even once retention deleted the
/// newest events, so a cursor never comes to mean another event. One writer (the core)
/// commits rows in id order, so a reader that saw an id has seen every smaller one. The
/// thread's events are those of its local jobs and those pulled here for its remote jobs
/// (routes); a remote job's events kept on its authority are its origin's (they are read
/// there), and a suppressed notice was never true when its turn came. An event of a kind this
/// build does not know (pulled from a newer authority) is left out, in the query, so that the
/// limit counts only events this build can answer and the cursor always moves past what it
/// read. The jobs are found along `jobs_thread` and `fleet_routes_thread`, their events after
/// the cursor along `events_job_id`: a read costs the thread, not the store.
pub fn for_thread(
    db: Db,
    thread: ThreadId,
    after: u64,
    limit: u32,
) -> ApiResult<Vec<(u64, Versioned<Event>)>> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let mut stmt = db
        .conn
        .prepare_cached(FOR_THREAD)
        .db("read thread events")?;
    let rows = stmt
        .query_map((thread.to_string(), after, limit, known_kinds()?), |r| {
            let n = r.get::<_, i64>(0)?;
            Ok((u64::try_from(n).unwrap_or(0), body(r.get(1)?)?))
        })
        .db("read thread events")?;
    rows.collect::<Result<_, _>>().db("read thread events")
}

const FOR_THREAD: &str = "SELECT e.id, e.body FROM events e \
     WHERE e.id > ?2 AND e.suppressed = 0 AND e.origin IS NULL \
       AND e.kind IN (SELECT value FROM json_each(?4)) \
       AND e.job IN (SELECT id FROM jobs WHERE thread = ?1 \
                     UNION SELECT job FROM fleet_routes WHERE thread = ?1) \
     ORDER BY e.id LIMIT ?3";

/// The names of the kinds this build knows, as a JSON array for `json_each`.
fn known_kinds() -> ApiResult<String> {
    serde_json::to_string(
        &EventKind::ALL
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>(),
    )
    .map_err(ApiError::internal)
}

/// A stored body as its event, in its envelope: one this build cannot read (another API
/// version, a body that is not the event its row names) is the row's error, naming the column.
fn body(text: String) -> rusqlite::Result<Versioned<Event>> {
    serde_json::from_str(&text).map_err(|e| super::bad_column("body", e))
}

/// Every event of a job that this build can show, oldest first (`job show`).
///
/// An event of a kind this build does not know is left out, as a thread's read leaves it
/// out: a newer build wrote it (a pulled event of a newer authority, a newer daemon on this
/// store), it is well formed for that build, and this one has nothing to show of it but can
/// show the rest of the job; delivery still passes it on as it is (`Pending::typed`). The
/// kind is the row's `kind` column, written from the body by every insert. A row of a kind
/// this build knows whose body does not decode (cut, another API version, not the event its
/// row names) stays the read's error: that is not a newer build's event but a store that is
/// not what this build wrote, and leaving it out would hide it (the store's contract: a
/// stored value that does not read back is reported, never guessed at).
pub fn list_for_job(db: Db, job: JobId) -> ApiResult<Vec<Versioned<Event>>> {
    let mut stmt = db
        .conn
        .prepare_cached(
            "SELECT body FROM events WHERE job = ?1 \
             AND kind IN (SELECT value FROM json_each(?2)) ORDER BY seq",
        )
        .db("list events")?;
    let rows = stmt
        .query_map((job.to_string(), known_kinds()?), |r| body(r.get(0)?))
        .db("list events")?;
    rows.collect::<Result<_, _>>().db("list events")
}

/// An event not yet delivered, as the delivery loop needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub job: JobId,
    pub seq: u32,
    /// `None` for a kind this build does not know (written by a newer one): delivered as is.
    pub kind: Option<EventKind>,
    pub body: Value,
    pub created_at: Millis,
    /// Failed attempts so far.
    pub attempts: u32,
    /// Not before this time (backoff after a failure); `None` means now.
    pub next_attempt_at: Option<Millis>,
    /// Pulled from this authority: the event of a remote job, delivered here as it came.
    pub pulled_from: Option<MachineId>,
}

impl Pending {
    /// The event as this build reads it; `None` for one it cannot (another version, a kind
    /// written by a newer build), which delivery still passes on as it is.
    pub fn typed(&self) -> Option<Event> {
        serde_json::from_value::<Versioned<Event>>(self.body.clone())
            .ok()
            .map(Versioned::into_answer)
    }
}

fn pending_from_row(r: &Row) -> rusqlite::Result<Pending> {
    let job: String = r.get("job")?;
    let kind: String = r.get("kind")?;
    let body: String = r.get("body")?;
    Ok(Pending {
        job: job.parse().map_err(|e| super::bad_column("job", e))?,
        seq: r.get("seq")?,
        kind: EventKind::from_name(&kind),
        body: serde_json::from_str(&body).map_err(|e| super::bad_column("body", e))?,
        created_at: r.get("created_at")?,
        attempts: r.get("attempts")?,
        next_attempt_at: r.get("next_attempt_at")?,
        pulled_from: r
            .get::<_, Option<String>>("authority")?
            .map(|a| a.parse().map_err(|e| super::bad_column("authority", e)))
            .transpose()?,
    })
}

const PENDING_COLUMNS: &str =
    "e.job, e.seq, e.kind, e.body, e.created_at, e.attempts, e.next_attempt_at, e.authority";

/// The oldest pending (neither delivered nor suppressed) event of every job, oldest first,
/// due or backing off: what the tests check delivery's rounds (`due_heads`) against.
/// A remote job's events on its authority are never pending there: its origin delivers them.
#[cfg(test)]
pub fn pending_heads(db: Db) -> ApiResult<Vec<Pending>> {
    let mut stmt = db
        .conn
        .prepare_cached(&format!(
            "SELECT {PENDING_COLUMNS} FROM events e \
             WHERE e.delivered_at IS NULL AND e.suppressed = 0 AND e.origin IS NULL \
               AND NOT EXISTS ( \
               SELECT 1 FROM events p WHERE p.job = e.job AND p.seq < e.seq \
               AND p.delivered_at IS NULL AND p.suppressed = 0) \
             ORDER BY e.created_at, e.job"
        ))
        .db("list pending events")?;
    let rows = stmt
        .query_map([], pending_from_row)
        .db("list pending events")?;
    rows.collect::<Result<_, _>>().db("list pending events")
}

/// Up to `limit` pending heads that are due at `now` (never tried, or their backoff is
/// over), oldest first. Read along `events_pending_order` and stopped at `limit`: a round
/// costs the events it returns (and the later events of jobs whose head waits), not every
/// pending event (schema_v8.sql). A remote job's events on its authority are never due there
/// (its origin pulls and delivers them), and the index leaves them out, so they cost nothing.
pub fn due_heads(db: Db, now: Millis, limit: usize) -> ApiResult<Vec<Pending>> {
    let mut stmt = db
        .conn
        .prepare_cached(&format!(
            "SELECT {PENDING_COLUMNS} FROM events e \
             WHERE e.delivered_at IS NULL AND e.suppressed = 0 AND e.origin IS NULL \
             AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= ?1) AND NOT EXISTS ( \
               SELECT 1 FROM events p WHERE p.job = e.job AND p.seq < e.seq \
               AND p.delivered_at IS NULL AND p.suppressed = 0) \
             ORDER BY e.created_at, e.job, e.seq LIMIT ?2"
        ))
        .db("list due events")?;
    let rows = stmt
        .query_map((now, limit as i64), pending_from_row)
        .db("list due events")?;
    rows.collect::<Result<_, _>>().db("list due events")
}

/// The earliest time after `now` at which a pending event backing off becomes due. Only a
/// job's head is ever tried, so only heads carry a retry time.
pub fn next_retry_at(db: Db, now: Millis) -> ApiResult<Option<Millis>> {
    db.conn
        .prepare_cached(
            "SELECT MIN(next_attempt_at) FROM events WHERE delivered_at IS NULL \
             AND suppressed = 0 AND origin IS NULL AND next_attempt_at > ?1",
        )
        .db("read next retry")?
        .query_row([now], |r| r.get(0))
        .db("read next retry")
}

/// How many events this machine has yet to deliver (`/metrics`): neither delivered nor
/// suppressed, and not a remote job's (its origin delivers those). Counted along the
/// `events_pending_order` partial index, so delivered history costs nothing.
pub fn count_pending(db: Db) -> ApiResult<u64> {
    db.conn
        .prepare_cached(
            "SELECT COUNT(*) FROM events \
             WHERE delivered_at IS NULL AND suppressed = 0 AND origin IS NULL",
        )
        .db("count pending events")?
        .query_row([], |r| r.get::<_, i64>(0))
        .map(|n| n.max(0) as u64)
        .db("count pending events")
}

/// One event with its delivery state.
pub fn get(db: Db, job: JobId, seq: u32) -> ApiResult<Option<Pending>> {
    db.conn
        .prepare_cached(&format!(
            "SELECT {PENDING_COLUMNS} FROM events e WHERE e.job = ?1 AND e.seq = ?2"
        ))
        .db("read event")?
        .query_row((job.to_string(), seq), pending_from_row)
        .optional()
        .db("read event")
}

/// The sink confirmed the event. Returns false if it was no longer pending.
pub fn mark_delivered(db: Db, job: JobId, seq: u32, at: Millis) -> ApiResult<bool> {
    let changed = db
        .conn
        .prepare_cached(
            "UPDATE events SET delivered_at = ?3, next_attempt_at = NULL \
             WHERE job = ?1 AND seq = ?2 AND delivered_at IS NULL AND suppressed = 0",
        )
        .db("mark event delivered")?
        .execute((job.to_string(), seq, at))
        .db("mark event delivered")?;
    Ok(changed == 1)
}

/// A failed attempt: counted, with the time before which it is not tried again. Returns the
/// number of failed attempts so far.
pub fn record_failure(
    db: Db,
    job: JobId,
    seq: u32,
    next_attempt_at: Millis,
    error: &str,
) -> ApiResult<u32> {
    db.conn
        .prepare_cached(
            "UPDATE events SET attempts = attempts + 1, next_attempt_at = ?3, last_error = ?4 \
         WHERE job = ?1 AND seq = ?2 AND delivered_at IS NULL RETURNING attempts",
        )
        .db("record delivery failure")?
        .query_row((job.to_string(), seq, next_attempt_at, error), |r| r.get(0))
        .optional()
        .db("record delivery failure")
        .map(Option::unwrap_or_default)
}

/// A notice that is no longer true: never delivered, its seq stays taken. Returns false if
/// it was no longer pending.
pub fn suppress(db: Db, job: JobId, seq: u32) -> ApiResult<bool> {
    let changed = db
        .conn
        .prepare_cached(
            "UPDATE events SET suppressed = 1, next_attempt_at = NULL \
             WHERE job = ?1 AND seq = ?2 AND delivered_at IS NULL AND suppressed = 0",
        )
        .db("suppress notice")?
        .execute((job.to_string(), seq))
        .db("suppress notice")?;
    Ok(changed == 1)
}

/// Whether an event was delivered, suppressed, or is still pending.
pub fn delivery_state(db: Db, job: JobId, seq: u32) -> ApiResult<Option<(bool, bool)>> {
    db.conn
        .prepare_cached(
            "SELECT delivered_at IS NOT NULL, suppressed FROM events WHERE job = ?1 AND seq = ?2",
        )
        .db("read delivery state")?
        .query_row((job.to_string(), seq), |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .db("read delivery state")
}

/// A queued job with a fresh thread, for tests of the event and notice tables.
#[cfg(test)]
pub(crate) fn test_job(db: Db) -> Job {
    let spec = serde_json::json!({});
    let job = jobs::NewJob::for_test(&spec, homebased_shared::queue::Priority::Medium);
    jobs::insert(db, &job).unwrap();
    jobs::require(db, job.id).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{test_store, Store};
    use serde_json::json;

    fn add(db: Db, job: &Job, kind: EventKind) -> u32 {
        append(db, MachineId::new(), job, kind, None, Default::default()).unwrap()
    }

    #[test]
    fn a_job_without_a_run_has_every_run_field_null() {
        let (_d, store) = test_store();
        let c = store.db();
        let job = test_job(c);
        let machine = MachineId::new();
        append(
            c,
            machine,
            &job,
            EventKind::JobCancelled,
            None,
            Default::default(),
        )
        .unwrap();
        let body = &serde_json::to_value(&list_for_job(c, job.id).unwrap()[0]).unwrap();
        for field in ["resource", "task", "run_number", "step"] {
            assert_eq!(body.get(field), Some(&Value::Null), "{field}: {body}");
        }
        assert_eq!(body["api_version"], 1);
        assert_eq!(body["event"], "JOB_CANCELLED");
        assert_eq!(body["job"], json!(job.id));
        assert_eq!(body["seq"], 1);
        assert_eq!(body["thread"], json!(job.thread));
        assert_eq!(body["name"], "test job");
        assert_eq!(body["machine"], json!(machine));
        assert!(body["at"].as_str().unwrap().ends_with('Z'));
    }

    /// A body this build cannot read, on a row of a kind it knows, is the read's error naming
    /// the column, for `job show` and a thread's events alike: never a panic, never left out
    /// (a kind it does not know is left out: `job_show_leaves_out_a_kind_of_a_newer_build`).
    #[test]
    fn a_body_that_does_not_decode_is_an_error_naming_its_column() {
        let (_d, store) = test_store();
        let c = store.db();
        let job = test_job(c);
        add(c, &job, EventKind::JobCancelled);
        assert_eq!(list_for_job(c, job.id).unwrap().len(), 1);
        for body in [
            r#"{"api_version":1,"event":"JOB_EXPLODED"}"#,
            r#"{"api_version":2}"#,
            "not json",
        ] {
            c.conn
                .execute(
                    "UPDATE events SET body = ?2 WHERE job = ?1",
                    (job.id.to_string(), body),
                )
                .unwrap();
            let err = list_for_job(c, job.id).unwrap_err();
            assert!(
                err.message.contains("column body:"),
                "{body}: {}",
                err.message
            );
            let err = for_thread(c, job.thread, 0, 10).unwrap_err();
            assert!(
                err.message.contains("column body:"),
                "{body}: {}",
                err.message
            );
        }
    }

    /// `job show` of a job with an event of a kind a newer build wrote: the events this build
    /// knows, in seq order, the newer one left out (whatever its body: the row's kind decides),
    /// and a thread's read alike; delivery still has it, as it is.
    #[test]
    fn job_show_leaves_out_a_kind_of_a_newer_build() {
        let (_d, store) = test_store();
        let c = store.db();
        let job = test_job(c);
        add(c, &job, EventKind::JobPreempted);
        let newer = json!({"api_version": 1, "event": "JOB_TELEPORTED", "job": job.id,
            "seq": 2, "at": "2026-12-01T10:00:00.000Z", "thread": job.thread, "name": "test job",
            "machine": MachineId::new(), "resource": null, "task": null, "run_number": null,
            "step": null, "destination": "mars"});
        let insert = |seq: u32, kind: &str, body: &str| {
            c.conn
                .execute(
                    "INSERT INTO events (job, seq, kind, body, created_at) VALUES (?1, ?2, ?3, ?4, 1)",
                    (job.id.to_string(), seq, kind, body),
                )
                .unwrap();
            c.conn
                .execute(
                    "UPDATE jobs SET event_seq = ?2 WHERE id = ?1",
                    (job.id.to_string(), seq),
                )
                .unwrap();
        };
        insert(2, "JOB_TELEPORTED", &newer.to_string());
        // Not even JSON: of a kind this build does not know, it is never decoded.
        insert(3, "JOB_EXPLODED", "{\"api_version\":3,");
        add(c, &job, EventKind::JobSucceeded);
        let shown: Vec<(u32, EventKind)> = list_for_job(c, job.id)
            .unwrap()
            .into_iter()
            .map(|e| (e.answer.seq, e.answer.event))
            .collect();
        assert_eq!(
            shown,
            vec![(1, EventKind::JobPreempted), (4, EventKind::JobSucceeded)]
        );
        let read: Vec<u32> = for_thread(c, job.thread, 0, 10)
            .unwrap()
            .into_iter()
            .map(|(_, e)| e.answer.seq)
            .collect();
        assert_eq!(read, vec![1, 4]);
        let kept = get(c, job.id, 2).unwrap().unwrap();
        assert_eq!((kept.kind, kept.typed()), (None, None));
        assert_eq!(kept.body, newer, "delivery passes it on as it came");
    }

    /// The thread's read finds its jobs and their events by index: no table is scanned
    /// (only the list of known kinds, which is not a table), whatever the store holds.
    #[test]
    fn a_threads_read_searches_indexes_and_scans_no_table() {
        let (_d, store) = test_store();
        let c = store.db();
        let mut stmt = c
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {FOR_THREAD}"))
            .unwrap();
        let plan: Vec<String> = stmt
            .query_map(
                (ThreadId::new().to_string(), 0, 10, known_kinds().unwrap()),
                |r| r.get::<_, String>(3),
            )
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let text = plan.join("\n");
        for line in &plan {
            assert!(
                !line.starts_with("SCAN") || line.starts_with("SCAN json_each"),
                "a scan: {line}\n{text}"
            );
        }
        for index in [
            "SEARCH e USING INDEX events_job_id (job=? AND id>?)",
            "SEARCH jobs USING INDEX jobs_thread (thread=?)",
            "SEARCH fleet_routes USING INDEX fleet_routes_thread (thread=?)",
        ] {
            assert!(plan.iter().any(|l| l.contains(index)), "{index}:\n{text}");
        }
    }

    /// Retention deletes the newest events of the store (the thread's finished jobs), and the
    /// thread goes on: the next event's id is larger than any answered before, so a reader at
    /// its cursor reads it, once, and a reader with an older cursor never reads another event
    /// under an id it saw. With the implicit rowid (before `schema_v17.sql`) the next event
    /// took the pruned ids again and the reader at its cursor never saw it.
    #[test]
    fn a_cursor_neither_skips_nor_repeats_after_the_newest_events_are_pruned() {
        use homebased_shared::queue::JobStatus;
        let (_d, mut store) = test_store();
        let spec = json!({});
        let thread = ThreadId::new();
        let on_thread = |tx: Db| {
            let new = jobs::NewJob {
                thread,
                ..jobs::NewJob::for_test(&spec, homebased_shared::queue::Priority::Medium)
            };
            jobs::insert(tx, &new)?;
            jobs::require(tx, new.id)
        };
        // An older event of another job stays (its job is live); the thread's jobs end.
        let (kept, a, b) = store
            .write(|tx| {
                let kept = test_job(tx);
                add(tx, &kept, EventKind::JobPreempted);
                let (a, b) = (on_thread(tx)?, on_thread(tx)?);
                for job in [&a, &b] {
                    jobs::finish(tx, job, JobStatus::Cancelled, None)?;
                    add(tx, &jobs::require(tx, job.id)?, EventKind::JobCancelled);
                    assert!(mark_delivered(tx, job.id, 1, 1)?);
                }
                Ok((kept, a, b))
            })
            .unwrap();
        let read = |store: &Store, after| {
            for_thread(store.db(), thread, after, 10)
                .unwrap()
                .into_iter()
                .map(|(n, e)| (n, e.answer.job))
                .collect::<Vec<_>>()
        };
        let before = read(&store, 0);
        assert_eq!(
            before.iter().map(|(_, j)| *j).collect::<Vec<_>>(),
            vec![a.id, b.id]
        );
        let (older, cursor) = (before[0].0, before[1].0);

        let future = homebased_shared::time::now_ms() + 60_000;
        for job in [a.id, b.id] {
            let removed = store
                .write(|tx| crate::store::history::remove(tx, job, future))
                .unwrap();
            assert_eq!(removed.map(|r| r.events), Some(1));
        }
        assert!(read(&store, 0).is_empty(), "the thread's events are gone");
        assert!(get(store.db(), kept.id, 1).unwrap().is_some());

        let c_job = store
            .write(|tx| {
                let c_job = on_thread(tx)?;
                add(tx, &c_job, EventKind::JobCancelled);
                Ok(c_job)
            })
            .unwrap();
        let next = read(&store, cursor);
        assert_eq!(
            next.iter().map(|(_, j)| *j).collect::<Vec<_>>(),
            vec![c_job.id],
            "the reader at its cursor reads the new event"
        );
        assert!(next[0].0 > cursor, "a new id: {next:?} after {cursor}");
        assert!(read(&store, next[0].0).is_empty(), "read once");
        assert_eq!(read(&store, older), next, "no id answered before means it");
    }

    #[test]
    fn only_the_oldest_pending_event_of_each_job_is_offered() {
        let (_d, store) = test_store();
        let c = store.db();
        let a = test_job(c);
        let b = test_job(c);
        assert_eq!(add(c, &a, EventKind::JobPreempted), 1);
        assert_eq!(add(c, &a, EventKind::JobSucceeded), 2);
        assert_eq!(add(c, &b, EventKind::JobCancelled), 1);
        let heads = |c| {
            pending_heads(c)
                .unwrap()
                .iter()
                .map(|p| (p.job, p.seq))
                .collect::<Vec<_>>()
        };
        let mut now = heads(c);
        now.sort();
        let mut due: Vec<_> = due_heads(c, 0, 10)
            .unwrap()
            .iter()
            .map(|p| (p.job, p.seq))
            .collect();
        due.sort();
        assert_eq!(due, now, "the due heads are the heads while none backs off");
        assert_eq!(due_heads(c, 0, 1).unwrap().len(), 1, "at most the limit");
        let mut expected = vec![(a.id, 1), (b.id, 1)];
        expected.sort();
        assert_eq!(now, expected);

        // A failure keeps the event pending and holds back only its own job.
        assert_eq!(record_failure(c, a.id, 1, 5_000, "exit 1").unwrap(), 1);
        assert_eq!(record_failure(c, a.id, 1, 7_000, "exit 1").unwrap(), 2);
        assert!(mark_delivered(c, b.id, 1, 10).unwrap());
        assert!(
            !mark_delivered(c, b.id, 1, 11).unwrap(),
            "already delivered"
        );
        let head = &pending_heads(c).unwrap()[0];
        assert_eq!((head.job, head.seq), (a.id, 1));
        assert_eq!((head.attempts, head.next_attempt_at), (2, Some(7_000)));
        // Backing off until 7,000: not due before, due from then on.
        assert!(due_heads(c, 6_999, 10).unwrap().is_empty());
        assert_eq!(next_retry_at(c, 6_999).unwrap(), Some(7_000));
        assert_eq!(due_heads(c, 7_000, 10).unwrap()[0].seq, 1);
        assert_eq!(next_retry_at(c, 7_000).unwrap(), None);

        assert!(mark_delivered(c, a.id, 1, 20).unwrap());
        assert_eq!(heads(c), vec![(a.id, 2)]);
        assert!(suppress(c, a.id, 2).unwrap());
        assert!(
            !mark_delivered(c, a.id, 2, 30).unwrap(),
            "suppressed is never delivered"
        );
        assert_eq!(heads(c), vec![]);
        assert_eq!(delivery_state(c, a.id, 2).unwrap(), Some((false, true)));
        assert_eq!(delivery_state(c, a.id, 1).unwrap(), Some((true, false)));
        // A suppressed notice keeps its seq.
        assert_eq!(add(c, &a, EventKind::JobCheckDue), 3);
    }

    #[test]
    fn a_threads_events_are_read_after_a_cursor_across_its_jobs_and_pulled_ones() {
        let (_d, store) = test_store();
        let c = store.db();
        let spec = json!({});
        let thread = ThreadId::new();
        let on_thread = |c| {
            let new = jobs::NewJob {
                thread,
                ..jobs::NewJob::for_test(&spec, homebased_shared::queue::Priority::Medium)
            };
            jobs::insert(c, &new).unwrap();
            jobs::require(c, new.id).unwrap()
        };
        let (a, b, other) = (on_thread(c), on_thread(c), test_job(c));
        add(c, &a, EventKind::JobPreempted);
        add(c, &other, EventKind::JobCancelled);
        add(c, &b, EventKind::JobBlocked);
        add(c, &a, EventKind::JobSucceeded);
        assert!(suppress(c, b.id, 1).unwrap());
        // A remote job submitted here on the same thread: its events arrive by pull.
        let remote = JobId::new();
        let authority = MachineId::new();
        crate::store::routes::insert(c, remote, authority, thread, "d", 1).unwrap();
        let pulled = json!({"api_version": 1, "event": "JOB_SUCCEEDED", "job": remote,
            "seq": 1, "at": "2026-12-01T10:00:00.000Z", "thread": thread, "name": "far",
            "machine": authority, "resource": null, "task": null, "run_number": null,
            "step": null});
        let pulled: RelayedEvent = serde_json::from_value(pulled).unwrap();
        assert!(matches!(pulled, RelayedEvent::Known(_)));
        assert!(insert_pulled(c, authority, &pulled, 2).unwrap());
        // A kind from a newer authority on the same remote job: left out, not an error.
        let mut newer = serde_json::to_value(&pulled).unwrap();
        newer["event"] = json!("JOB_TELEPORTED");
        newer["seq"] = json!(2);
        let newer: RelayedEvent = serde_json::from_value(newer).unwrap();
        assert!(matches!(newer, RelayedEvent::Newer(_)));
        assert!(insert_pulled(c, authority, &newer, 3).unwrap());

        let read = |after, limit| {
            for_thread(c, thread, after, limit)
                .unwrap()
                .into_iter()
                .map(|(n, e)| (n, json!(e.answer.job), json!(e.answer.event.as_str())))
                .collect::<Vec<_>>()
        };
        let all = read(0, 10);
        let seen: Vec<_> = all.iter().map(|(_, j, e)| (j.clone(), e.clone())).collect();
        assert_eq!(
            seen,
            vec![
                (json!(a.id), json!("JOB_PREEMPTED")),
                (json!(a.id), json!("JOB_SUCCEEDED")),
                (json!(remote), json!("JOB_SUCCEEDED")),
            ],
            "oldest first, the other thread and the suppressed notice left out"
        );
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "{all:?}");
        assert_eq!(read(0, 1), all[..1], "at most the limit");
        assert_eq!(read(all[0].0, 10), all[1..], "after the cursor");
        assert!(read(all[2].0, 10).is_empty());
        add(c, &b, EventKind::JobCancelled);
        let next = read(all[2].0, 10);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].2, json!("JOB_CANCELLED"));
    }

    #[test]
    fn a_remote_jobs_events_are_its_origins_in_fleet_order_and_pulled_ones_are_stored_once() {
        let (_d, store) = test_store();
        let c = store.db();
        let origin = MachineId::new();
        let spec = json!({});
        let remote = |c| {
            let new = jobs::NewJob {
                origin: Some(origin),
                ..jobs::NewJob::for_test(&spec, homebased_shared::queue::Priority::Medium)
            };
            jobs::insert(c, &new).unwrap();
            jobs::require(c, new.id).unwrap()
        };
        let (a, b, local) = (remote(c), remote(c), test_job(c));
        add(c, &a, EventKind::JobPreempted);
        add(c, &local, EventKind::JobCancelled);
        add(c, &b, EventKind::JobSucceeded);
        add(c, &a, EventKind::JobSucceeded);
        let heads: Vec<JobId> = pending_heads(c).unwrap().iter().map(|p| p.job).collect();
        assert_eq!(
            heads,
            vec![local.id],
            "the authority delivers only its own jobs' events"
        );
        let served = for_origin(c, origin, 0, 10).unwrap();
        let order: Vec<(u64, JobId, u32)> =
            served.iter().map(|(n, e)| (*n, e.job(), e.seq())).collect();
        assert_eq!(order, vec![(1, a.id, 1), (2, b.id, 1), (3, a.id, 2)]);
        assert!(served
            .iter()
            .all(|(_, e)| matches!(e, RelayedEvent::Known(_))));
        assert_eq!(
            for_origin(c, origin, 2, 10).unwrap().len(),
            1,
            "after the cursor"
        );
        assert!(for_origin(c, MachineId::new(), 0, 10).unwrap().is_empty());

        // On the origin (another store), the pulled events are pending like local ones.
        let (_d2, origin_store) = test_store();
        let o = origin_store.db();
        let authority = MachineId::new();
        for (_, event) in &served {
            assert!(insert_pulled(o, authority, event, 100).unwrap());
            assert!(
                !insert_pulled(o, authority, event, 101).unwrap(),
                "stored once"
            );
        }
        let heads = pending_heads(o).unwrap();
        assert_eq!(heads.len(), 2, "one head per job");
        assert!(heads
            .iter()
            .all(|p| p.pulled_from == Some(authority) && p.seq == 1));

        // A kind from a newer authority is stored once and delivered as it came.
        let mut newer = serde_json::to_value(&served[0].1).unwrap();
        newer["job"] = json!(JobId::new());
        newer["event"] = json!("JOB_TELEPORTED");
        newer["destination"] = json!("mars");
        let relayed: RelayedEvent = serde_json::from_value(newer.clone()).unwrap();
        assert!(insert_pulled(o, authority, &relayed, 102).unwrap());
        assert!(!insert_pulled(o, authority, &relayed, 103).unwrap());
        let head = pending_heads(o)
            .unwrap()
            .into_iter()
            .find(|p| json!(p.job) == newer["job"])
            .unwrap();
        assert_eq!(head.kind, None, "a kind this build does not know");
        assert_eq!(head.body, newer, "every field kept");
    }
}
