//! Notice bookkeeping (SPEC section 8): the blocking episodes of `JOB_BLOCKED` and the one
//! `JOB_CHECK_DUE` of each run. Both are durable, so a daemon restart neither starts an
//! episode over nor fires a check twice.

use super::runs::{self, Run};
use super::{Db, DbResult};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::{JobId, TaskId};
use homebased_shared::time::Millis;
use rusqlite::{OptionalExtension, Row};
use serde_json::Value;
use uuid::Uuid;

/// One stretch during which the same job stayed the first blocked job.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub id: Uuid,
    pub job: JobId,
    pub started_at: Millis,
    pub ended_at: Option<Millis>,
    /// What the latest pass saw: a yield is requested on a lane the job may use.
    pub yield_requested: bool,
    /// The blockers the notice lists, as the latest pass saw them.
    pub blockers: Value,
    /// The seq of the episode's one `JOB_BLOCKED`, once produced.
    pub notified_seq: Option<u32>,
}

const COLUMNS: &str = "id, job, started_at, ended_at, yield_requested, blockers, notified_seq";

fn from_row(r: &Row) -> rusqlite::Result<Episode> {
    let id: String = r.get("id")?;
    let job: String = r.get("job")?;
    let blockers: String = r.get("blockers")?;
    Ok(Episode {
        id: id.parse().map_err(|e| super::bad_column("id", e))?,
        job: job.parse().map_err(|e| super::bad_column("job", e))?,
        started_at: r.get("started_at")?,
        ended_at: r.get("ended_at")?,
        yield_requested: r.get("yield_requested")?,
        blockers: serde_json::from_str(&blockers).map_err(|e| super::bad_column("blockers", e))?,
        notified_seq: r.get("notified_seq")?,
    })
}

/// The open episode, if a job is first blocked now.
pub fn open(db: Db) -> ApiResult<Option<Episode>> {
    match db.rows {
        Some(cache) => cache.open_episode(db, read_open),
        None => read_open(db),
    }
}

fn read_open(db: Db) -> ApiResult<Option<Episode>> {
    db.conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM notice_episodes WHERE ended_at IS NULL"
        ))
        .db("read open episode")?
        .query_row([], from_row)
        .optional()
        .db("read open episode")
}

pub fn get(db: Db, id: Uuid) -> ApiResult<Option<Episode>> {
    db.conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM notice_episodes WHERE id = ?1"
        ))
        .db("read episode")?
        .query_row([id.to_string()], from_row)
        .optional()
        .db("read episode")
}

/// Every episode of a job, oldest first.
pub fn list_for_job(db: Db, job: JobId) -> ApiResult<Vec<Episode>> {
    let mut stmt = db
        .conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM notice_episodes WHERE job = ?1 ORDER BY started_at, id"
        ))
        .db("list episodes")?;
    let rows = stmt
        .query_map([job.to_string()], from_row)
        .db("list episodes")?;
    rows.collect::<Result<_, _>>().db("list episodes")
}

/// Opens a new episode (the caller ended the previous one in the same transaction).
pub fn start(db: Db, episode: &Episode) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "INSERT INTO notice_episodes (id, job, started_at, yield_requested, blockers) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .db("start episode")?
        .execute((
            episode.id.to_string(),
            episode.job.to_string(),
            episode.started_at,
            episode.yield_requested,
            episode.blockers.to_string(),
        ))
        .db("start episode")?;
    Ok(())
}

pub fn end(db: Db, id: Uuid, at: Millis) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "UPDATE notice_episodes SET ended_at = MAX(?2, started_at) \
         WHERE id = ?1 AND ended_at IS NULL",
        )
        .db("end episode")?
        .execute((id.to_string(), at))
        .db("end episode")?;
    Ok(())
}

/// Records what the latest pass saw about the open episode's head.
pub fn refresh(db: Db, id: Uuid, yield_requested: bool, blockers: &Value) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "UPDATE notice_episodes SET yield_requested = ?2, blockers = ?3 WHERE id = ?1",
        )
        .db("refresh episode")?
        .execute((id.to_string(), yield_requested, blockers.to_string()))
        .db("refresh episode")?;
    Ok(())
}

/// Records the episode's one notice. Returns false if it already had one.
pub fn mark_notified(db: Db, id: Uuid, seq: u32) -> ApiResult<bool> {
    let changed = db
        .conn
        .prepare_cached(
            "UPDATE notice_episodes SET notified_seq = ?2 WHERE id = ?1 AND notified_seq IS NULL",
        )
        .db("mark episode notified")?
        .execute((id.to_string(), seq))
        .db("mark episode notified")?;
    Ok(changed == 1)
}

/// Runs whose workload is running (executing or being stopped) and that have had no
/// `JOB_CHECK_DUE` yet.
pub fn runs_without_check(db: Db) -> ApiResult<Vec<Run>> {
    let mut stmt = db
        .conn
        .prepare_cached(&format!(
            "SELECT {} FROM runs WHERE status = 'running' \
             AND phase IN ('executing', 'stopping') AND check_due_seq IS NULL",
            runs::COLUMNS
        ))
        .db("list runs to check")?;
    let rows = stmt
        .query_map([], runs::from_row)
        .db("list runs to check")?;
    rows.collect::<Result<_, _>>().db("list runs to check")
}

/// The seq of the run's `JOB_CHECK_DUE`, if it fired.
pub fn check_due_seq(db: Db, task: TaskId) -> ApiResult<Option<u32>> {
    db.conn
        .prepare_cached("SELECT check_due_seq FROM runs WHERE task = ?1")
        .db("read check due")?
        .query_row([task.to_string()], |r| r.get(0))
        .optional()
        .db("read check due")
        .map(Option::flatten)
}

/// Records the run's one `JOB_CHECK_DUE`. Returns false if it already fired.
pub fn mark_check_due(db: Db, task: TaskId, seq: u32) -> ApiResult<bool> {
    let changed = db
        .conn
        .prepare_cached(
            "UPDATE runs SET check_due_seq = ?2 WHERE task = ?1 AND check_due_seq IS NULL",
        )
        .db("mark check due")?
        .execute((task.to_string(), seq))
        .db("mark check due")?;
    Ok(changed == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;
    use serde_json::json;

    fn job(db: Db) -> JobId {
        crate::store::events::test_job(db).id
    }

    fn episode(job: JobId, started_at: Millis) -> Episode {
        Episode {
            id: Uuid::now_v7(),
            job,
            started_at,
            ended_at: None,
            yield_requested: false,
            blockers: json!([]),
            notified_seq: None,
        }
    }

    #[test]
    fn one_episode_is_open_at_a_time_and_keeps_what_was_recorded() {
        let (_dir, mut store) = test_store();
        store
            .write(|tx| {
                let a = job(tx);
                let b = job(tx);
                let first = episode(a, 1_000);
                start(tx, &first)?;
                assert!(start(tx, &episode(b, 2_000)).is_err(), "two open episodes");
                refresh(tx, first.id, true, &json!([{"kind": "run"}]))?;
                assert!(mark_notified(tx, first.id, 3)?);
                assert!(!mark_notified(tx, first.id, 4)?, "one notice per episode");
                let open_now = open(tx)?.unwrap();
                assert_eq!(open_now.started_at, 1_000);
                assert!(open_now.yield_requested);
                assert_eq!(open_now.notified_seq, Some(3));
                assert_eq!(open_now.blockers, json!([{"kind": "run"}]));
                end(tx, first.id, 5_000)?;
                assert_eq!(open(tx)?, None);
                start(tx, &episode(b, 5_000))?;
                assert_eq!(open(tx)?.unwrap().job, b);
                assert_eq!(get(tx, first.id)?.unwrap().ended_at, Some(5_000));
                assert_eq!(list_for_job(tx, a)?.len(), 1);
                Ok(())
            })
            .unwrap();
    }
}
