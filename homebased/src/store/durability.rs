//! The durability barrier's counter (`schema_v10.sql`): one increment in a transaction makes
//! its commit change a page, so that a durable commit always fsyncs the WAL, and with it every
//! unsynced commit before it ([`super::Store::write_unsynced`]).

use super::{Db, DbResult};
use homebased_shared::error::ApiResult;

/// Counts one barrier. The row is the migration's, so it is always there.
pub fn barrier(db: Db) -> ApiResult<()> {
    db.conn
        .prepare_cached("UPDATE durability SET barriers = barriers + 1 WHERE singleton = 1")
        .db("durability barrier")?
        .execute([])
        .db("durability barrier")?;
    Ok(())
}

/// How many barriers were committed.
pub fn barriers(db: Db) -> ApiResult<i64> {
    db.conn
        .query_row(
            "SELECT barriers FROM durability WHERE singleton = 1",
            [],
            |r| r.get(0),
        )
        .db("read the durability barriers")
}
