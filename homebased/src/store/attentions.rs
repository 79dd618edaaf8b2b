//! Attentions: holds on the lanes of a run whose cleanup failed, or that a live run the store
//! does not know occupies ([`LaneHold`], SPEC section 1). An Attention holds a set of lanes
//! (`attention_lanes`, schema v16; `attentions.resource` is the first): a unique index keeps
//! every lane to one open Attention, and releasing the Attention frees all of its lanes in
//! one statement (a trigger). Only `resource release` of that exact UUID closes it.

use super::runs::json_text;
use super::{bad_column, Db, DbResult};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::{AttentionId, JobId, ResourceId, TaskId};
use homebased_shared::time::Millis;
use homebased_shared::wire::{AttentionFailure, UnknownLiveRun};
use rusqlite::OptionalExtension;

/// Opens a hold on `lanes` (first lane first) for the run `task`, with the failure a person
/// checks. A lane another open Attention holds fails the whole commit (the unique index).
pub fn open(
    db: Db,
    id: AttentionId,
    lanes: &[ResourceId],
    task: TaskId,
    failure: &AttentionFailure,
    at: Millis,
) -> ApiResult<()> {
    let Some(first) = lanes.first() else {
        return Err(homebased_shared::error::ApiError::internal(
            "an Attention that holds no lane",
        ));
    };
    let failure = json_text("an Attention's failure", failure)?;
    db.conn
        .prepare_cached(
            "INSERT INTO attentions (id, resource, task, failure, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .db("create attention")?
        .execute((
            id.to_string(),
            first.to_string(),
            task.to_string(),
            failure,
            at,
        ))
        .db("create attention")?;
    for (ord, lane) in lanes.iter().enumerate() {
        db.conn
            .prepare_cached(
                "INSERT INTO attention_lanes (attention, ord, resource, open) \
                 VALUES (?1, ?2, ?3, 1)",
            )
            .db("hold a lane in attention")?
            .execute((id.to_string(), ord, lane.to_string()))
            .db("hold a lane in attention")?;
    }
    Ok(())
}

/// The run held by `id`, only while that hold is the run's current one: a released or
/// superseded UUID finds nothing.
pub fn find_current(db: Db, id: AttentionId) -> ApiResult<Option<TaskId>> {
    let task: Option<String> = db
        .conn
        .prepare_cached(
            "SELECT r.task FROM runs r JOIN attentions a ON a.id = r.attention \
             WHERE r.attention = ?1 AND r.phase = 'attention' AND a.released_at IS NULL",
        )
        .db("find attention")?
        .query_row([id.to_string()], |row| row.get(0))
        .optional()
        .db("find attention")?;
    task.map(|t| {
        t.parse()
            .map_err(homebased_shared::error::ApiError::internal)
    })
    .transpose()
}

/// Closes the hold; the trigger frees every lane of it in the same statement.
pub fn close(db: Db, id: AttentionId, at: Millis) -> ApiResult<()> {
    db.conn
        .prepare_cached("UPDATE attentions SET released_at = ?2 WHERE id = ?1")
        .db("release attention")?
        .execute((id.to_string(), at))
        .db("release attention")?;
    Ok(())
}

/// An open Attention that no run of the store holds: the lanes of a live run the store does
/// not know, or knows as ended (`unknown_live_run`). The job is the one its `run.json` named,
/// which the store may not know either.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneHold {
    pub id: AttentionId,
    /// Every lane the hold keeps, first lane first; never empty.
    pub resources: Vec<ResourceId>,
    pub task: TaskId,
    /// The job its `run.json` named (the failure's own `job`).
    pub job: JobId,
    pub failure: UnknownLiveRun,
}

/// Every open [`LaneHold`]. A run's own Attention is its row in phase `attention`; the
/// check goes by the task's key, so it costs one lookup per open hold however long the
/// history.
pub fn lane_holds(db: Db) -> ApiResult<Vec<LaneHold>> {
    let mut statement = db
        .conn
        .prepare_cached(
            "SELECT a.id, (SELECT group_concat(l.resource, ',' ORDER BY l.ord) \
             FROM attention_lanes l WHERE l.attention = a.id), a.task, a.failure \
             FROM attentions a WHERE a.released_at IS NULL AND NOT EXISTS (SELECT 1 FROM runs r \
             WHERE r.task = a.task AND r.attention = a.id AND r.phase = 'attention')",
        )
        .db("read lane holds")?;
    let rows = statement.query_map([], lane_hold).db("read lane holds")?;
    rows.collect::<Result<_, _>>().db("read lane holds")
}

/// One open hold no run is in: always a live run the store does not know, which is all
/// that opens such a hold; a row of any other failure is reported, naming its column.
fn lane_hold(r: &rusqlite::Row) -> rusqlite::Result<LaneHold> {
    let id: String = r.get(0)?;
    let lanes = r.get::<_, Option<String>>(1)?.unwrap_or_default();
    let task: String = r.get(2)?;
    let text: String = r.get(3)?;
    let failure = match serde_json::from_str(&text) {
        Ok(AttentionFailure::UnknownLiveRun(run)) => run,
        Ok(other) => {
            let why = format!("attention {id}: a hold no run is in, {}", other.result());
            return Err(bad_column("failure", why));
        }
        Err(e) => return Err(bad_column("failure", format!("attention {id}: {e}"))),
    };
    let resources = lanes
        .split(',')
        .filter(|lane| !lane.is_empty())
        .map(|lane| lane.parse().map_err(|e| bad_column("lanes", e)))
        .collect::<rusqlite::Result<Vec<ResourceId>>>()?;
    if resources.is_empty() {
        return Err(bad_column("lanes", "a hold without its lanes"));
    }
    Ok(LaneHold {
        id: id.parse().map_err(|e| bad_column("id", e))?,
        resources,
        task: task.parse().map_err(|e| bad_column("task", e))?,
        job: failure.job,
        failure,
    })
}

/// Whether any Attention, open or released, ever named `task`: a person who released the
/// hold of a live unknown run decided about that run, and a restart does not undo it.
pub fn ever_named(db: Db, task: TaskId) -> ApiResult<bool> {
    db.any_row(
        "SELECT 1 FROM attentions WHERE task = ?1 LIMIT 1",
        task.to_string(),
        "read attentions of a run",
    )
}

/// Whether `resource` is one of the lanes an open Attention holds.
pub fn is_held(db: Db, resource: ResourceId) -> ApiResult<bool> {
    db.any_row(
        "SELECT 1 FROM attention_lanes WHERE resource = ?1 AND open = 1",
        resource.to_string(),
        "read the attention of a resource",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{jobs, resources, runs};
    use homebased_shared::queue::Priority;
    use homebased_shared::wire::ResourceOrigin;

    fn lanes(db: Db, names: &[&str]) -> Vec<ResourceId> {
        names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                resources::insert(db, name, Some(i as u32), ResourceOrigin::Detected)
                    .unwrap()
                    .id
            })
            .collect()
    }

    fn failure() -> AttentionFailure {
        AttentionFailure::UnknownLiveRun(UnknownLiveRun {
            task: TaskId::new(),
            job: JobId::new(),
            run_number: 1,
            step: 0,
            resume: false,
            pid: Some(4242),
            resources: vec!["gpu1".into(), "gpu2".into()],
            message: "alive, unknown to the store".into(),
        })
    }

    /// One Attention holds both lanes of an unknown run: no new run takes either, a second
    /// hold on one of them is refused whole, and one release frees both.
    #[test]
    fn a_hold_keeps_every_lane_until_one_release_frees_them_all() {
        let (_d, mut store) = crate::store::test_store();
        let gpu = lanes(store.db(), &["gpu0", "gpu1", "gpu2"]);
        let id = AttentionId::new();
        let failure = failure();
        store
            .write(|db| open(db, id, &gpu[1..], TaskId::new(), &failure, 10))
            .unwrap();
        let db = store.db();
        let held: Vec<bool> = gpu.iter().map(|l| is_held(db, *l).unwrap()).collect();
        assert_eq!(held, [false, true, true]);
        let holds = lane_holds(db).unwrap();
        assert_eq!(holds.len(), 1);
        assert_eq!((holds[0].id, &holds[0].resources), (id, &gpu[1..].to_vec()));

        let spec = serde_json::json!({});
        let job = jobs::NewJob::for_test(&spec, Priority::High);
        jobs::insert(db, &job).unwrap();
        assert!(runs::reserve(db, job.id, &[gpu[2]]).unwrap().is_none());
        assert!(runs::reserve(db, job.id, &[gpu[1]]).unwrap().is_none());

        let other = AttentionId::new();
        let refused =
            store.write(|db| open(db, other, &[gpu[0], gpu[2]], TaskId::new(), &failure, 11));
        assert!(refused.is_err(), "a lane is held by one open Attention");
        let db = store.db();
        assert!(
            !is_held(db, gpu[0]).unwrap(),
            "the refused hold changed nothing"
        );
        assert_eq!(lane_holds(db).unwrap().len(), 1);

        store.write(|db| close(db, id, 20)).unwrap();
        let db = store.db();
        assert!(gpu.iter().all(|l| !is_held(db, *l).unwrap()));
        assert!(lane_holds(db).unwrap().is_empty());
        let run = runs::reserve(db, job.id, &[gpu[2]]).unwrap();
        assert!(run.is_some(), "the released lane serves again");
        // The released hold's lanes are free for a new hold too.
        store
            .write(|db| open(db, other, &gpu[..2], TaskId::new(), &failure, 30))
            .unwrap();
        assert_eq!(lane_holds(store.db()).unwrap()[0].resources, gpu[..2]);
    }

    /// A hold whose stored failure is not an unknown live run's record is the read's error,
    /// naming the column and the Attention: never a panic, never a hold without its job.
    #[test]
    fn a_failure_that_does_not_decode_is_an_error_naming_its_column() {
        let (_d, mut store) = crate::store::test_store();
        let gpu = lanes(store.db(), &["gpu0"]);
        let id = AttentionId::new();
        let held = failure();
        store
            .write(|db| open(db, id, &gpu, TaskId::new(), &held, 10))
            .unwrap();
        let read = lane_holds(store.db()).unwrap().remove(0).failure;
        assert_eq!(AttentionFailure::UnknownLiveRun(read), held);
        for text in [
            r#"{"result":"unknown_live_run","job":"not a uuid"}"#,
            r#"{"attempt":1,"message":"no /proc","result":"enumeration_failed"}"#,
            "[]",
        ] {
            let db = store.db();
            db.conn
                .execute(
                    "UPDATE attentions SET failure = ?2 WHERE id = ?1",
                    (id.to_string(), text),
                )
                .unwrap();
            let err = lane_holds(db).unwrap_err();
            assert!(
                err.message.contains("column failure: attention"),
                "{text}: {}",
                err.message
            );
        }
    }

    #[test]
    fn a_hold_of_no_lane_is_refused() {
        let (_d, mut store) = crate::store::test_store();
        let refused =
            store.write(|db| open(db, AttentionId::new(), &[], TaskId::new(), &failure(), 1));
        assert!(refused.is_err());
    }
}
