//! Fleet peers: the addresses added with `fleet add`, and the UUID each address (added or
//! from the config) is bound to since it first answered.

use super::{bad_column, Db, DbResult};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::MachineId;
use homebased_shared::time::Millis;

/// One stored address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPeer {
    pub address: String,
    /// Added with `fleet add` (else only its binding is kept, for a config peer).
    pub added: bool,
    pub machine: Option<MachineId>,
}

pub fn list(db: Db) -> ApiResult<Vec<StoredPeer>> {
    let mut stmt = db
        .conn
        .prepare_cached("SELECT address, added, machine FROM fleet_peers ORDER BY address")
        .db("read peers")?;
    let rows = stmt
        .query_map([], |r| {
            let machine: Option<String> = r.get(2)?;
            let machine = machine
                .map(|m| m.parse::<MachineId>().map_err(|e| bad_column("machine", e)))
                .transpose()?;
            Ok(StoredPeer {
                address: r.get(0)?,
                added: r.get::<_, i64>(1)? == 1,
                machine,
            })
        })
        .db("read peers")?;
    rows.collect::<Result<_, _>>().db("read peers")
}

/// Marks `address` as added (idempotent). A config peer's binding row becomes added too.
pub fn add(db: Db, address: &str, at: Millis) -> ApiResult<()> {
    db.conn
        .prepare_cached(
            "INSERT INTO fleet_peers (address, added, added_at) VALUES (?1, 1, ?2) \
             ON CONFLICT (address) DO UPDATE SET added = 1",
        )
        .db("add peer")?
        .execute((address, at))
        .db("add peer")?;
    Ok(())
}

/// Forgets `address` and its binding. Answers whether a row was there.
pub fn remove(db: Db, address: &str) -> ApiResult<bool> {
    let n = db
        .conn
        .prepare_cached("DELETE FROM fleet_peers WHERE address = ?1")
        .db("remove peer")?
        .execute([address])
        .db("remove peer")?;
    Ok(n > 0)
}

/// Binds `address` to `machine` unless it is already bound: the first answer wins. Answers
/// the UUID the address is bound to afterwards.
pub fn bind(db: Db, address: &str, machine: MachineId, at: Millis) -> ApiResult<MachineId> {
    db.conn
        .prepare_cached(
            "INSERT INTO fleet_peers (address, added, machine, added_at, bound_at) \
             VALUES (?1, 0, ?2, ?3, ?3) \
             ON CONFLICT (address) DO UPDATE SET machine = excluded.machine, \
             bound_at = excluded.bound_at WHERE machine IS NULL",
        )
        .db("bind peer")?
        .execute((address, machine.to_string(), at))
        .db("bind peer")?;
    let bound: String = db
        .conn
        .prepare_cached("SELECT machine FROM fleet_peers WHERE address = ?1")
        .db("bind peer")?
        .query_row([address], |r| r.get(0))
        .db("bind peer")?;
    bound
        .parse()
        .map_err(|e| super::db_error("bind peer", bad_column("machine", e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_answer_binds_an_address_and_remove_forgets_it() {
        let (_dir, mut store) = crate::store::test_store();
        let (a, b) = (MachineId::new(), MachineId::new());
        store
            .write(|db| {
                add(db, "http://x:1", 1)?;
                add(db, "http://x:1", 2)?;
                assert_eq!(bind(db, "http://x:1", a, 3)?, a);
                assert_eq!(bind(db, "http://x:1", b, 4)?, a, "the first answer wins");
                assert_eq!(bind(db, "http://config:1", b, 5)?, b);
                Ok(())
            })
            .unwrap();
        let peers = list(store.db()).unwrap();
        assert_eq!(
            peers,
            vec![
                StoredPeer {
                    address: "http://config:1".into(),
                    added: false,
                    machine: Some(b)
                },
                StoredPeer {
                    address: "http://x:1".into(),
                    added: true,
                    machine: Some(a)
                },
            ]
        );
        store
            .write(|db| {
                assert!(remove(db, "http://x:1")?);
                assert!(!remove(db, "http://x:1")?);
                add(db, "http://x:1", 6)?;
                assert_eq!(bind(db, "http://x:1", b, 7)?, b, "re-added: bound afresh");
                Ok(())
            })
            .unwrap();
    }
}
