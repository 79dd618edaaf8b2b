//! Operation ids: the first request with an id stores its result; an identical retry gets
//! that stored result back unchanged, even if the queue changed since; the same id with other
//! content is `operation_conflict`. A refused request stores nothing (its transaction rolls
//! back).

use super::{Db, DbResult};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::{MachineId, OperationId};
use rusqlite::OptionalExtension;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The digest of what an operation asks for: its kind, machine and content.
pub fn digest(kind: &str, machine: &str, content: &Value) -> String {
    let mut h = Sha256::new();
    h.update(kind.as_bytes());
    h.update([0]);
    h.update(machine.as_bytes());
    h.update([0]);
    h.update(content.to_string().as_bytes());
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One request that carries an operation id: its kind and the digest of what it asks for.
pub struct Operation<'a> {
    pub id: OperationId,
    pub kind: &'a str,
    digest: String,
}

impl<'a> Operation<'a> {
    pub fn new(id: OperationId, kind: &'a str, machine: MachineId, content: &Value) -> Self {
        Operation {
            id,
            kind,
            digest: digest(kind, &machine.to_string(), content),
        }
    }
}

/// Applies `apply` once per operation, inside the caller's transaction: an identical retry
/// answers the stored result (even if the queue changed since), the same id with other
/// content is `operation_conflict`, and a refusal stores nothing (the transaction rolls
/// back).
pub fn once<T: Serialize + DeserializeOwned>(
    db: Db,
    op: &Operation,
    apply: impl FnOnce() -> ApiResult<T>,
) -> ApiResult<T> {
    if let Some(stored) = replay(db, op.id, op.kind, &op.digest)? {
        return serde_json::from_value(stored).map_err(ApiError::internal);
    }
    let result = apply()?;
    let stored = serde_json::to_value(&result).map_err(ApiError::internal)?;
    record(db, op.id, op.kind, &op.digest, &stored)?;
    Ok(result)
}

/// The stored result of an earlier identical request, or `None` if the id is new.
fn replay(db: Db, id: OperationId, kind: &str, digest: &str) -> ApiResult<Option<Value>> {
    let row: Option<(String, String, String)> = db
        .conn
        .query_row(
            "SELECT kind, digest, result FROM operations WHERE id = ?1",
            [id.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .db("read operation")?;
    match row {
        None => Ok(None),
        Some((k, d, result)) if k == kind && d == digest => serde_json::from_str(&result)
            .map(Some)
            .map_err(ApiError::internal),
        Some(_) => Err(ApiError::new(
            ErrorCode::OperationConflict,
            format!(
                "operation {id} was already used for a different request; a new action needs a \
                 new operation UUID"
            ),
        )
        .with_input(serde_json::json!({ "operation_id": id }))),
    }
}

fn record(db: Db, id: OperationId, kind: &str, digest: &str, result: &Value) -> ApiResult<()> {
    db.conn.execute(
        "INSERT INTO operations (id, kind, digest, result, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        (id.to_string(), kind, digest, result.to_string(), db.now()),
    )
    .db("record operation")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    #[test]
    fn identical_retry_replays_and_other_content_conflicts() {
        let (_dir, store) = test_store();
        let db = store.db();
        let id = OperationId::new();
        let d1 = digest("move", "m", &serde_json::json!({"front": true}));
        assert_eq!(replay(db, id, "move", &d1).unwrap(), None);
        record(db, id, "move", &d1, &serde_json::json!({"position": 1})).unwrap();
        assert_eq!(
            replay(db, id, "move", &d1).unwrap(),
            Some(serde_json::json!({"position": 1}))
        );
        let d2 = digest("move", "m", &serde_json::json!({"back": true}));
        assert_eq!(
            replay(db, id, "move", &d2).unwrap_err().code,
            ErrorCode::OperationConflict
        );
        assert_eq!(
            replay(db, id, "cancel", &d1).unwrap_err().code,
            ErrorCode::OperationConflict
        );
    }
}
