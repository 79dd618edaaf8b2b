//! Fleet's stored directory: the verbs the API edge calls to remember added peers and the
//! UUID each address first answered with. The network is never touched here.

use super::Core;
use crate::store::peers::{self, StoredPeer};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::MachineId;
use homebased_shared::time::Millis;

impl Core {
    pub(super) fn fleet_stored_peers(&self) -> ApiResult<Vec<StoredPeer>> {
        peers::list(self.store.db())
    }

    /// Stores an added peer; answers its binding if the address had one (a config peer's).
    pub(super) fn fleet_add(&mut self, address: &str, at: Millis) -> ApiResult<Option<MachineId>> {
        self.store.write(|db| {
            peers::add(db, address, at)?;
            Ok(peers::list(db)?
                .into_iter()
                .find(|p| p.address == address)
                .and_then(|p| p.machine))
        })
    }

    pub(super) fn fleet_remove(&mut self, address: &str) -> ApiResult<bool> {
        self.store.write(|db| peers::remove(db, address))
    }

    /// Binds `address` to `machine` unless it is bound already; answers the binding.
    pub(super) fn fleet_bind(
        &mut self,
        address: &str,
        machine: MachineId,
        at: Millis,
    ) -> ApiResult<MachineId> {
        self.store.write(|db| peers::bind(db, address, machine, at))
    }
}

/// The most events one pull answers.
pub const PULL_BATCH: u32 = 256;

/// What the origin stores of one pull: the events as the authority answered them, each
/// with its cursor.
pub type Pulled = Vec<(u64, homebased_shared::wire::RelayedEvent)>;

impl Core {
    /// Raised with every delivery wake (wherever events are appended): the long polls of
    /// `GET /v1/fleet/events` and of `GET /v1/threads/{thread}/events` wait on it.
    pub(super) fn fleet_wake(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.fleet_wake.clone()
    }

    /// A submit through Fleet from `origin`: the spec is validated here, against this
    /// daemon's own `PATH` and working directory, and nothing of the origin's environment is
    /// stored (it would leak one machine's variables onto another).
    pub(super) fn submit_remote(
        &mut self,
        job: homebased_shared::ids::JobId,
        origin: MachineId,
        spec: serde_json::Value,
    ) -> ApiResult<homebased_shared::wire::SubmitResult> {
        use homebased_shared::wire::{SubmitRequest, Submitter};
        let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
        let req = SubmitRequest {
            job,
            spec,
            submitter: Submitter {
                path: std::env::var("PATH").ok(),
                home: std::env::var("HOME").ok(),
                cwd,
                parent_task: None,
                env: None,
            },
            allow_other_thread: false,
            machine: None,
        };
        self.submit_from(req, Some(origin))
    }

    /// A pull from `origin` with cursor `after`: everything up to it is stored on the origin
    /// (`events::hand_over`). Once per pull request, not per wake of its long poll.
    pub(super) fn fleet_acknowledge(&mut self, origin: MachineId, after: u64) -> ApiResult<()> {
        if after == 0 {
            return Ok(());
        }
        let now = self.clock.now_ms();
        self.store
            .write(|db| crate::store::events::hand_over(db, origin, after, now))?;
        Ok(())
    }

    /// The events of `origin`'s remote jobs after its cursor `after`.
    pub(super) fn fleet_events(&self, origin: MachineId, after: u64) -> ApiResult<Pulled> {
        crate::store::events::for_origin(self.store.db(), origin, after, PULL_BATCH)
    }

    pub(super) fn route(
        &self,
        job: homebased_shared::ids::JobId,
    ) -> ApiResult<Option<crate::store::routes::Route>> {
        crate::store::routes::get(self.store.db(), job)
    }

    /// Stores the route of a remote submit before it is forwarded; answers the route as it
    /// is now (an existing one for a retry). Another spec under the same job UUID, or the
    /// UUID of a job of this machine, is `job_conflict`.
    pub(super) fn route_open(
        &mut self,
        job: homebased_shared::ids::JobId,
        authority: MachineId,
        thread: homebased_shared::ids::ThreadId,
        digest: &str,
    ) -> ApiResult<(crate::store::routes::Route, bool)> {
        use crate::store::{jobs, routes};
        use homebased_shared::error::{ApiError, ErrorCode};
        let conflict = |why: String| {
            ApiError::new(ErrorCode::JobConflict, why).with_input(serde_json::json!({ "job": job }))
        };
        let now = self.clock.now_ms();
        self.store.write(|db| {
            if jobs::get(db, job)?.is_some() {
                return Err(conflict(format!("job {job} is a job of this machine")));
            }
            if let Some(route) = routes::get(db, job)? {
                if route.digest != digest || route.authority != authority {
                    return Err(conflict(format!(
                        "job {job} was already submitted to {} with a different spec",
                        route.authority
                    )));
                }
                return Ok((route, false));
            }
            routes::insert(db, job, authority, thread, digest, now)?;
            let route = routes::get(db, job)?
                .ok_or_else(|| ApiError::internal("the route just stored is gone"))?;
            Ok((route, true))
        })
    }

    pub(super) fn route_answered(
        &mut self,
        job: homebased_shared::ids::JobId,
        answer: crate::store::routes::Answer,
    ) -> ApiResult<()> {
        let now = self.clock.now_ms();
        self.store
            .write(|db| crate::store::routes::record_answer(db, job, &answer, now))
    }

    pub(super) fn route_forget(&mut self, job: homebased_shared::ids::JobId) -> ApiResult<()> {
        self.store
            .write(|db| crate::store::routes::forget_pending(db, job))
    }

    /// The authorities the origin pulls events from.
    pub(super) fn fleet_live_authorities(&self) -> ApiResult<Vec<MachineId>> {
        crate::store::routes::live_authorities(self.store.db())
    }

    pub(super) fn fleet_cursor(&self, authority: MachineId) -> ApiResult<u64> {
        crate::store::routes::cursor(self.store.db(), authority)
    }

    /// Stores one pull from `authority` in one transaction: the events (each once), the
    /// routes whose job ended, and the cursor. Then the delivery loop takes them like local
    /// events. Answers how many were new.
    pub(super) fn fleet_store_pulled(
        &mut self,
        authority: MachineId,
        pulled: Pulled,
    ) -> ApiResult<usize> {
        use crate::store::{events, routes};
        let now = self.clock.now_ms();
        let new = self.store.write(|db| {
            let mut new = 0;
            let mut last = None;
            for (cursor, event) in &pulled {
                if events::insert_pulled(db, authority, event, now)? {
                    new += 1;
                }
                if event.ends_job() {
                    routes::mark_ended(db, event.job(), now)?;
                }
                last = Some(*cursor);
            }
            if let Some(after) = last {
                routes::advance_cursor(db, authority, after)?;
            }
            Ok(new)
        })?;
        if new > 0 {
            self.wake_delivery();
        }
        Ok(new)
    }
}
