//! The machine row: this installation's UUID, created once.

use super::{Db, DbResult};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::MachineId;
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
            (id.to_string(), db.now()),
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
