//! Retention's reads and removals (`schema_v8.sql`): finished jobs oldest first along
//! `jobs_ended`, and the removal of one job with its runs, events, notice episodes and
//! released Attentions. Which jobs go is decided by `crate::history::verdict`, read again
//! inside the removing transaction.

use super::{bad_column, Db, DbResult};
use crate::history::{self, Candidate, Cursor, Verdict};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::{JobId, TaskId};
use homebased_shared::time::Millis;
use rusqlite::{OptionalExtension, Row};

const CANDIDATE: &str = "SELECT j.id, j.updated_at, j.slot_key IS NULL, \
    (SELECT COUNT(*) FROM events e WHERE e.job = j.id AND e.delivered_at IS NULL \
       AND e.suppressed = 0), \
    EXISTS (SELECT 1 FROM runs r WHERE r.job = j.id AND r.phase IS NOT NULL), \
    EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs w ON w.id = d.job \
       WHERE d.after = j.id AND w.slot_key IS NOT NULL) \
    FROM jobs j";

fn candidate(r: &Row) -> rusqlite::Result<Candidate> {
    let id: String = r.get(0)?;
    Ok(Candidate {
        job: id.parse().map_err(|e| bad_column("id", e))?,
        ended_at: r.get(1)?,
        terminal: r.get(2)?,
        undelivered: r.get(3)?,
        holds_lane: r.get(4)?,
        named_by_live: r.get(5)?,
    })
}

/// Up to `limit` finished jobs that ended before `cutoff`, oldest first, after `after`.
pub fn candidates(
    db: Db,
    cutoff: Millis,
    after: Cursor,
    limit: usize,
) -> ApiResult<Vec<Candidate>> {
    let (at, id) = after.map_or((i64::MIN, String::new()), |(at, id)| (at, id.to_string()));
    let mut stmt = db
        .conn
        .prepare_cached(&format!(
            "{CANDIDATE} WHERE j.slot_key IS NULL AND j.updated_at < ?1 \
             AND (j.updated_at, j.id) > (?2, ?3) ORDER BY j.updated_at, j.id LIMIT ?4"
        ))
        .db("list finished jobs")?;
    let rows = stmt
        .query_map((cutoff, at, id, limit as i64), candidate)
        .db("list finished jobs")?;
    rows.collect::<Result<_, _>>().db("list finished jobs")
}

/// The run directories (tasks) of a job, oldest first.
pub fn tasks_of(db: Db, job: JobId) -> ApiResult<Vec<TaskId>> {
    let mut stmt = db
        .conn
        .prepare_cached("SELECT task FROM runs WHERE job = ?1 ORDER BY run_number")
        .db("list runs of job")?;
    let rows = stmt
        .query_map([job.to_string()], |r| {
            let t: String = r.get(0)?;
            t.parse().map_err(|e| bad_column("task", e))
        })
        .db("list runs of job")?;
    rows.collect::<Result<_, _>>().db("list runs of job")
}

/// How many events a job has (delivered, suppressed or not).
pub fn event_count(db: Db, job: JobId) -> ApiResult<u64> {
    db.conn
        .prepare_cached("SELECT COUNT(*) FROM events WHERE job = ?1")
        .db("count events")?
        .query_row([job.to_string()], |r| r.get(0))
        .db("count events")
}

/// What removing one job took away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Removed {
    pub runs: u64,
    pub events: u64,
}

/// Removes the job and everything stored about it if, read now, it may go (`None`
/// otherwise: it changed since it was listed). Call inside `Store::write`.
pub fn remove(db: Db, job: JobId, cutoff: Millis) -> ApiResult<Option<Removed>> {
    let id = job.to_string();
    let now: Option<Candidate> = db
        .conn
        .prepare_cached(&format!("{CANDIDATE} WHERE j.id = ?1"))
        .db("read finished job")?
        .query_row([&id], candidate)
        .optional()
        .db("read finished job")?;
    match now {
        Some(c) if history::verdict(&c, cutoff) == Verdict::Remove => {}
        _ => return Ok(None),
    }
    let exec = |sql: &str| -> ApiResult<u64> {
        db.conn
            .prepare_cached(sql)
            .db("remove job")?
            .execute([&id])
            .map(|n| n as u64)
            .db("remove job")
    };
    // Children first: the foreign keys are checked row by row.
    exec("DELETE FROM attentions WHERE task IN (SELECT task FROM runs WHERE job = ?1)")?;
    exec("DELETE FROM notice_episodes WHERE job = ?1")?;
    // Its own `after`, and its place in finished jobs' (no live job names it: the verdict);
    // those keep the id in their spec, shown without a state once it is gone.
    exec("DELETE FROM job_dependencies WHERE job = ?1 OR after = ?1")?;
    let events = exec("DELETE FROM events WHERE job = ?1")?;
    let runs = exec("DELETE FROM runs WHERE job = ?1")?;
    exec("DELETE FROM jobs WHERE id = ?1")?;
    Ok(Some(Removed { runs, events }))
}

/// Removes up to `limit` stored operation results older than `cutoff` (they only answer a
/// retried request); returns how many.
pub fn prune_operations(db: Db, cutoff: Millis, limit: usize) -> ApiResult<u64> {
    db.conn
        .prepare_cached(
            "DELETE FROM operations WHERE rowid IN (SELECT rowid FROM operations \
             WHERE created_at < ?1 ORDER BY created_at LIMIT ?2)",
        )
        .db("prune operations")?
        .execute((cutoff, limit as i64))
        .map(|n| n as u64)
        .db("prune operations")
}

/// How many stored operation results are older than `cutoff` (a dry run).
pub fn count_operations(db: Db, cutoff: Millis) -> ApiResult<u64> {
    db.conn
        .prepare_cached("SELECT COUNT(*) FROM operations WHERE created_at < ?1")
        .db("count operations")?
        .query_row([cutoff], |r| r.get(0))
        .db("count operations")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::events::test_job;
    use crate::store::{jobs, test_store};
    use homebased_shared::event::EventKind;
    use homebased_shared::ids::MachineId;
    use homebased_shared::queue::JobStatus;

    #[test]
    fn a_finished_job_goes_with_its_delivered_events_and_a_pending_event_keeps_it() {
        let (_dir, mut store) = test_store();
        let (done, owed) = store
            .write(|tx| {
                let done = test_job(tx);
                let owed = test_job(tx);
                for job in [&done, &owed] {
                    jobs::finish(tx, job, JobStatus::Cancelled, None)?;
                    let job = jobs::require(tx, job.id)?;
                    crate::store::events::append(
                        tx,
                        MachineId::new(),
                        &job,
                        EventKind::JobCancelled,
                        None,
                        Default::default(),
                    )?;
                }
                crate::store::events::mark_delivered(tx, done.id, 1, 1)?;
                Ok((done.id, owed.id))
            })
            .unwrap();
        let future = homebased_shared::time::now_ms() + 60_000;
        let listed = candidates(store.db(), future, None, 10).unwrap();
        assert_eq!(listed.len(), 2);
        let after_first = candidates(
            store.db(),
            future,
            Some((listed[0].ended_at, listed[0].job)),
            10,
        )
        .unwrap();
        assert_eq!(after_first, listed[1..].to_vec(), "the cursor walks on");
        assert_eq!(candidates(store.db(), 0, None, 10).unwrap(), vec![]);
        let removed = store.write(|tx| remove(tx, done, future)).unwrap();
        assert_eq!(removed, Some(Removed { runs: 0, events: 1 }));
        assert!(jobs::get(store.db(), done).unwrap().is_none());
        assert_eq!(store.write(|tx| remove(tx, owed, future)).unwrap(), None);
        assert!(jobs::get(store.db(), owed).unwrap().is_some());
        assert_eq!(event_count(store.db(), owed).unwrap(), 1);
    }

    /// A finished job whose run still holds its lane (Attention, cleaning) stays with its run
    /// until the lane is free.
    #[test]
    fn a_run_holding_a_lane_keeps_its_finished_job() {
        let (_dir, mut store) = test_store();
        let (job, task) = store
            .write(|tx| {
                let lane = crate::store::resources::insert(
                    tx,
                    "gpu0",
                    None,
                    homebased_shared::wire::ResourceOrigin::Manual,
                )?;
                let job = test_job(tx);
                let reserved = crate::store::runs::reserve(tx, job.id, &[lane.id])?.unwrap();
                let job = jobs::require(tx, job.id)?;
                jobs::finish(tx, &job, JobStatus::Failed, Some(reserved.task))?;
                Ok((job.id, reserved.task))
            })
            .unwrap();
        let future = homebased_shared::time::now_ms() + 60_000;
        let listed = candidates(store.db(), future, None, 10).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].holds_lane, "{listed:?}");
        assert_eq!(store.write(|tx| remove(tx, job, future)).unwrap(), None);
        assert_eq!(tasks_of(store.db(), job).unwrap(), vec![task]);
        store
            .write(|tx| crate::store::runs::set_phase(tx, task, None))
            .unwrap();
        let removed = store.write(|tx| remove(tx, job, future)).unwrap();
        assert_eq!(removed, Some(Removed { runs: 1, events: 0 }));
        assert!(tasks_of(store.db(), job).unwrap().is_empty());
    }

    #[test]
    fn a_queued_job_is_never_a_candidate_nor_removed() {
        let (_dir, mut store) = test_store();
        let job = store.write(|tx| Ok(test_job(tx))).unwrap();
        let future = homebased_shared::time::now_ms() + 60_000;
        assert!(candidates(store.db(), future, None, 10).unwrap().is_empty());
        assert_eq!(store.write(|tx| remove(tx, job.id, future)).unwrap(), None);
        assert!(jobs::get(store.db(), job.id).unwrap().is_some());
    }
}
