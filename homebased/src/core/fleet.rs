//! Fleet's stored directory: the verbs the API edge calls to remember added peers and the
//! UUID each address first answered with. The network is never touched here.

use super::Core;
use crate::store::peers::{self, StoredPeer};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::MachineId;
use homebased_shared::time::Millis;

impl Core {
    pub fn fleet_stored_peers(&self) -> ApiResult<Vec<StoredPeer>> {
        peers::list(self.store.db())
    }

    /// Stores an added peer; answers its binding if the address had one (a config peer's).
    pub fn fleet_add(&mut self, address: &str, at: Millis) -> ApiResult<Option<MachineId>> {
        self.store.write(|db| {
            peers::add(db, address, at)?;
            Ok(peers::list(db)?
                .into_iter()
                .find(|p| p.address == address)
                .and_then(|p| p.machine))
        })
    }

    pub fn fleet_remove(&mut self, address: &str) -> ApiResult<bool> {
        self.store.write(|db| peers::remove(db, address))
    }

    /// Binds `address` to `machine` unless it is bound already; answers the binding.
    pub fn fleet_bind(
        &mut self,
        address: &str,
        machine: MachineId,
        at: Millis,
    ) -> ApiResult<MachineId> {
        self.store.write(|db| peers::bind(db, address, machine, at))
    }
}
