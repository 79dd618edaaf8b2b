//! Dependencies between jobs (`schema_v12.sql`): the jobs each job's `after` names, in the
//! order given. Written once, with the job, and removed only with a job by retention.

use super::{bad_column, Db, DbResult};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::JobId;
use homebased_shared::queue::JobStatus;

/// The SQL of a column answering the first job of `j`'s `after` (in the order given) that
/// has not succeeded, with its state, as `"<uuid> <state>"`; `NULL` when every one has
/// succeeded, the job names none, or `j` is not queued: only a queued job waits on its
/// dependencies (SPEC section 9), so a listing of ended or running jobs probes nothing for
/// them. One probe of the primary key for a queued job without any. A macro, so that the
/// job columns can `concat!` it.
macro_rules! first_unmet_sql {
    () => {
        "(CASE WHEN j.state = 'queued' THEN (SELECT d.after || ' ' || a.state \
         FROM job_dependencies d JOIN jobs a ON a.id = d.after \
         WHERE d.job = j.id AND a.state <> 'succeeded' ORDER BY d.ord LIMIT 1) END)"
    };
}
pub(super) use first_unmet_sql;
pub(super) const FIRST_UNMET: &str = first_unmet_sql!();

/// Reads a [`FIRST_UNMET`] column.
pub(super) fn first_unmet(
    row: &rusqlite::Row,
    index: usize,
) -> rusqlite::Result<Option<(JobId, JobStatus)>> {
    let Some(text) = row
        .get_ref(index)?
        .as_str_or_null()
        .map_err(|e| bad_column("first_unmet", e))?
    else {
        return Ok(None);
    };
    let (job, state) = text
        .split_once(' ')
        .ok_or_else(|| bad_column("first_unmet", text))?;
    Ok(Some((
        job.parse().map_err(|e| bad_column("first_unmet", e))?,
        state.parse().map_err(|e| bad_column("first_unmet", e))?,
    )))
}

/// Stores `job`'s `after`; every job named must exist (the foreign key), so no cycle can be
/// built.
pub fn insert(db: Db, job: JobId, after: &[JobId]) -> ApiResult<()> {
    let mut stmt = db
        .conn
        .prepare_cached("INSERT INTO job_dependencies (job, ord, after) VALUES (?1, ?2, ?3)")
        .db("store dependencies")?;
    for (ord, named) in after.iter().enumerate() {
        stmt.execute((job.to_string(), ord as i64, named.to_string()))
            .db("store dependencies")?;
    }
    Ok(())
}

/// The jobs whose `after` names `job`, with their state, oldest first (then by id, so the
/// order is total).
pub fn dependents(db: Db, job: JobId) -> ApiResult<Vec<(JobId, JobStatus)>> {
    let mut stmt = db
        .conn
        .prepare_cached(
            "SELECT j.id, j.state FROM job_dependencies d JOIN jobs j ON j.id = d.job \
             WHERE d.after = ?1 ORDER BY j.created_at, j.id",
        )
        .db("list dependents")?;
    let rows = stmt
        .query_map([job.to_string()], |r| {
            let id: String = r.get(0)?;
            let state: String = r.get(1)?;
            Ok((
                id.parse().map_err(|e| bad_column("job", e))?,
                state.parse().map_err(|e| bad_column("state", e))?,
            ))
        })
        .db("list dependents")?;
    rows.collect::<Result<_, _>>().db("list dependents")
}

/// The name and state of a job named in an `after`, `None` once retention removed it.
pub fn link(db: Db, job: JobId) -> ApiResult<Option<(String, JobStatus)>> {
    use rusqlite::OptionalExtension;
    db.conn
        .prepare_cached("SELECT name, state FROM jobs WHERE id = ?1")
        .db("read dependency")?
        .query_row([job.to_string()], |r| {
            let state: String = r.get(1)?;
            Ok((
                r.get(0)?,
                state.parse().map_err(|e| bad_column("state", e))?,
            ))
        })
        .optional()
        .db("read dependency")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::events::test_job;
    use crate::store::{jobs, test_store};

    #[test]
    fn dependencies_are_kept_in_order_and_read_both_ways() {
        let (_dir, mut store) = test_store();
        let (a, b, c) = store
            .write(|tx| {
                let (a, b, c) = (test_job(tx), test_job(tx), test_job(tx));
                insert(tx, c.id, &[b.id, a.id])?;
                Ok((a, b, c))
            })
            .unwrap();
        let first = |store: &crate::store::Store, id: JobId| {
            store
                .db()
                .conn
                .query_row(
                    &format!("SELECT {FIRST_UNMET} FROM jobs j WHERE j.id = ?1"),
                    [id.to_string()],
                    |r| first_unmet(r, 0),
                )
                .unwrap()
        };
        assert_eq!(first(&store, c.id), Some((b.id, JobStatus::Queued)));
        assert_eq!(first(&store, a.id), None, "a job naming none");
        assert_eq!(
            dependents(store.db(), a.id).unwrap(),
            vec![(c.id, JobStatus::Queued)]
        );
        store
            .write(|tx| jobs::finish(tx, &jobs::require(tx, b.id)?, JobStatus::Succeeded, None))
            .unwrap();
        assert_eq!(
            first(&store, c.id),
            Some((a.id, JobStatus::Queued)),
            "the next one"
        );
        store
            .write(|tx| jobs::finish(tx, &jobs::require(tx, a.id)?, JobStatus::Succeeded, None))
            .unwrap();
        assert_eq!(first(&store, c.id), None, "all succeeded");
    }

    /// Only a queued job waits on its dependencies: a job that ended (or runs) while one it
    /// names has not succeeded reads as waiting on none, in its head as in the column.
    #[test]
    fn only_a_queued_job_has_a_first_unmet_dependency() {
        let (_dir, mut store) = test_store();
        let (a, b) = store
            .write(|tx| {
                let (a, b) = (test_job(tx), test_job(tx));
                insert(tx, b.id, &[a.id])?;
                Ok((a, b))
            })
            .unwrap();
        let head = |store: &crate::store::Store| jobs::require(store.db(), b.id).unwrap().head;
        assert_eq!(head(&store).dependency, Some((a.id, JobStatus::Queued)));
        store
            .write(|tx| jobs::finish(tx, &jobs::require(tx, b.id)?, JobStatus::Cancelled, None))
            .unwrap();
        assert_eq!(
            head(&store).dependency,
            None,
            "a cancelled job waits on nothing"
        );
        let column: Option<String> = store
            .db()
            .conn
            .query_row(
                &format!("SELECT {FIRST_UNMET} FROM jobs j WHERE j.id = ?1"),
                [b.id.to_string()],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(column, None);
    }

    #[test]
    fn a_job_that_does_not_exist_cannot_be_named() {
        let (_dir, mut store) = test_store();
        let err = store
            .write(|tx| {
                let a = test_job(tx);
                insert(tx, a.id, &[JobId::new()])
            })
            .unwrap_err();
        assert!(err.message.contains("dependencies"), "{err:?}");
    }
}
