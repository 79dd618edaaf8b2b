//! Fleet on the origin: the route of every remote submit (which machine is the job's
//! authority, and what it answered), and per authority the cursor of the events pulled from
//! it. A route is stored before its spec is forwarded, so a lost answer leaves it `pending`
//! and a retry with the same job UUID is recognised.

use super::{bad_column, Db, DbResult};
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::ids::{JobId, MachineId, ThreadId};
use homebased_shared::time::Millis;
use rusqlite::OptionalExtension;
use serde_json::Value;

/// What the authority answered a remote submit.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Stored, not yet answered (or the answer was lost).
    Pending,
    /// The authority stored the job; its submit result.
    Accepted(Value),
    /// The authority refused it; the error as it answered it.
    Rejected(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub job: JobId,
    pub authority: MachineId,
    pub thread: ThreadId,
    /// The digest of the spec as the origin sent it.
    pub digest: String,
    pub answer: Answer,
    /// The job's terminal event was pulled: nothing more to pull for it.
    pub ended: bool,
}

fn parse<T: std::str::FromStr>(name: &str, text: String) -> rusqlite::Result<T>
where
    T::Err: std::fmt::Display,
{
    text.parse().map_err(|e| bad_column(name, e))
}

fn from_row(r: &rusqlite::Row) -> rusqlite::Result<Route> {
    let state: String = r.get(4)?;
    let answer: Option<String> = r.get(5)?;
    let answer = match (state.as_str(), answer) {
        ("pending", None) => Answer::Pending,
        (s @ ("accepted" | "rejected"), Some(text)) => {
            let value: Value = serde_json::from_str(&text).map_err(|e| bad_column("answer", e))?;
            if s == "accepted" {
                Answer::Accepted(value)
            } else {
                Answer::Rejected(value)
            }
        }
        (other, _) => return Err(bad_column("state", format!("{other:?} with its answer"))),
    };
    Ok(Route {
        job: parse("job", r.get(0)?)?,
        authority: parse("authority", r.get(1)?)?,
        thread: parse("thread", r.get(2)?)?,
        digest: r.get(3)?,
        answer,
        ended: r.get::<_, i64>(6)? == 1,
    })
}

pub fn get(db: Db, job: JobId) -> ApiResult<Option<Route>> {
    db.conn
        .prepare_cached(
            "SELECT job, authority, thread, digest, state, answer, ended FROM fleet_routes \
             WHERE job = ?1",
        )
        .db("read route")?
        .query_row([job.to_string()], from_row)
        .optional()
        .db("read route")
}

/// A new route, `pending`, before the spec is forwarded.
pub fn insert(
    db: Db,
    job: JobId,
    authority: MachineId,
    thread: ThreadId,
    digest: &str,
    at: Millis,
) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "INSERT INTO fleet_routes (job, authority, thread, digest, state, created_at, \
             updated_at) VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?5)",
        )
        .db("store route")?
        .execute((
            job.to_string(),
            authority.to_string(),
            thread.to_string(),
            digest,
            at,
        ))
        .db("store route")?;
    Ok(())
}

/// The authority's definite answer. A route already settled keeps its first answer.
pub fn record_answer(db: Db, job: JobId, answer: &Answer, at: Millis) -> ApiResult<()> {
    let (state, value) = match answer {
        Answer::Pending => return Ok(()),
        Answer::Accepted(v) => ("accepted", v),
        Answer::Rejected(v) => ("rejected", v),
    };
    db.conn
        .prepare_cached(
            "UPDATE fleet_routes SET state = ?2, answer = ?3, updated_at = ?4 \
             WHERE job = ?1 AND state = 'pending'",
        )
        .db("settle route")?
        .execute((job.to_string(), state, value.to_string(), at))
        .db("settle route")?;
    Ok(())
}

/// Forgets a route still `pending`: the authority refused the request before reading it
/// (no token, another machine), so it holds nothing of the job.
pub fn forget_pending(db: Db, job: JobId) -> ApiResult<()> {
    db.conn
        .prepare_cached("DELETE FROM fleet_routes WHERE job = ?1 AND state = 'pending'")
        .db("forget route")?
        .execute([job.to_string()])
        .db("forget route")?;
    Ok(())
}

/// The authorities with a job that was not refused and has not ended: the origin pulls their
/// events (a `pending` route too: its answer may have been lost after the job was stored).
pub fn live_authorities(db: Db) -> ApiResult<Vec<MachineId>> {
    let mut stmt = db
        .conn
        .prepare_cached(
            "SELECT DISTINCT authority FROM fleet_routes WHERE ended = 0 AND state != 'rejected' \
             ORDER BY authority",
        )
        .db("read routes")?;
    let rows = stmt
        .query_map([], |r| parse("authority", r.get(0)?))
        .db("read routes")?;
    rows.collect::<Result<_, _>>().db("read routes")
}

/// The job's terminal event was pulled.
pub fn mark_ended(db: Db, job: JobId, at: Millis) -> ApiResult<()> {
    db.conn
        .prepare_cached("UPDATE fleet_routes SET ended = 1, updated_at = ?2 WHERE job = ?1")
        .db("end route")?
        .execute((job.to_string(), at))
        .db("end route")?;
    Ok(())
}

/// The fleet_seq of the last event pulled from `authority` (0: none yet).
pub fn cursor(db: Db, authority: MachineId) -> ApiResult<u64> {
    let after: Option<i64> = db
        .conn
        .prepare_cached("SELECT after FROM fleet_cursors WHERE authority = ?1")
        .db("read cursor")?
        .query_row([authority.to_string()], |r| r.get(0))
        .optional()
        .db("read cursor")?;
    Ok(after.map_or(0, |a| u64::try_from(a).unwrap_or(0)))
}

/// Moves the cursor forward (never back: an older answer arriving late changes nothing).
pub fn advance_cursor(db: Db, authority: MachineId, after: u64) -> ApiResult<()> {
    let after = i64::try_from(after).map_err(ApiError::internal)?;
    db.conn
        .prepare_cached(
            "INSERT INTO fleet_cursors (authority, after) VALUES (?1, ?2) \
             ON CONFLICT (authority) DO UPDATE SET after = max(after, excluded.after)",
        )
        .db("store cursor")?
        .execute((authority.to_string(), after))
        .db("store cursor")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    #[test]
    fn a_route_is_settled_once_and_the_cursor_only_moves_forward() {
        let (_d, store) = test_store();
        let db = store.db();
        let (job, authority, thread) = (JobId::new(), MachineId::new(), ThreadId::new());
        insert(db, job, authority, thread, "d1", 10).unwrap();
        assert_eq!(get(db, job).unwrap().unwrap().answer, Answer::Pending);
        assert_eq!(
            live_authorities(db).unwrap(),
            vec![authority],
            "pending: pulled"
        );
        let ok = Answer::Accepted(serde_json::json!({"job": job}));
        record_answer(db, job, &ok, 11).unwrap();
        record_answer(db, job, &Answer::Rejected(serde_json::json!({})), 12).unwrap();
        assert_eq!(
            get(db, job).unwrap().unwrap().answer,
            ok,
            "the first answer stays"
        );
        forget_pending(db, job).unwrap();
        assert!(get(db, job).unwrap().is_some(), "a settled route is kept");
        assert_eq!(live_authorities(db).unwrap(), vec![authority]);
        mark_ended(db, job, 13).unwrap();
        assert!(live_authorities(db).unwrap().is_empty());

        assert_eq!(cursor(db, authority).unwrap(), 0);
        advance_cursor(db, authority, 7).unwrap();
        advance_cursor(db, authority, 3).unwrap();
        assert_eq!(cursor(db, authority).unwrap(), 7);
    }
}
