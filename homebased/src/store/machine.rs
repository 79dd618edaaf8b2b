//! The machine row: this installation's UUID, created once.

use super::DbResult;
use homebased_shared::error::ApiResult;
use homebased_shared::ids::MachineId;
use homebased_shared::time::now_ms;
use rusqlite::{Connection, OptionalExtension};

/// Returns the machine UUID, creating it on first start.
pub fn ensure(conn: &Connection) -> ApiResult<MachineId> {
    if let Some(id) = get(conn)? {
        return Ok(id);
    }
    let id = MachineId::new();
    conn.execute(
        "INSERT INTO machine (singleton, id, created_at) VALUES (1, ?1, ?2)",
        (id.to_string(), now_ms()),
    )
    .db("create machine")?;
    Ok(id)
}

pub fn get(conn: &Connection) -> ApiResult<Option<MachineId>> {
    let text: Option<String> = conn
        .query_row("SELECT id FROM machine WHERE singleton = 1", [], |r| {
            r.get(0)
        })
        .optional()
        .db("read machine")?;
    Ok(text.and_then(|t| t.parse().ok()))
}
