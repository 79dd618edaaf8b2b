//! The machine row: this installation's UUID, created once.

use super::{Db, DbResult};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::MachineId;
use homebased_shared::time::now_ms;
use rusqlite::OptionalExtension;

/// Returns the machine UUID, creating it on first start.
pub fn ensure(db: Db) -> ApiResult<MachineId> {
    if let Some(id) = get(db)? {
        return Ok(id);
    }
    let id = MachineId::new();
    db.conn
        .execute(
            "INSERT INTO machine (singleton, id, created_at) VALUES (1, ?1, ?2)",
            (id.to_string(), now_ms()),
        )
        .db("create machine")?;
    Ok(id)
}

pub fn get(db: Db) -> ApiResult<Option<MachineId>> {
    let text: Option<String> = db
        .conn
        .query_row("SELECT id FROM machine WHERE singleton = 1", [], |r| {
            r.get(0)
        })
        .optional()
        .db("read machine")?;
    Ok(text.and_then(|t| t.parse().ok()))
}

/// Counts one durability barrier on the machine row: the smallest write that is certain to
/// change a page, so that its durable commit fsyncs the WAL ([`super::Store::sync`]).
pub fn touch(db: Db) -> ApiResult<()> {
    let changed = db
        .conn
        .execute(
            "UPDATE machine SET syncs = syncs + 1 WHERE singleton = 1",
            [],
        )
        .db("sync")?;
    if changed != 1 {
        // Without the row the commit would write nothing and sync nothing.
        return Err(homebased_shared::error::ApiError::internal(
            "cannot make the store durable: the machine row is missing",
        ));
    }
    Ok(())
}

/// How many barriers [`touch`] committed.
pub fn syncs(db: Db) -> ApiResult<i64> {
    db.conn
        .query_row("SELECT syncs FROM machine WHERE singleton = 1", [], |r| {
            r.get(0)
        })
        .db("read machine")
}
