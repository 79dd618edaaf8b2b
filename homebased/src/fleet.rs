//! Fleet (SPEC section 13): addressing a few other machines' queues from this one. Each
//! machine keeps its own queue; this module only knows who the peers are and how to reach
//! them. It lives at the API edge: the core never waits on the network.
//!
//! - [`directory`]: the pure rules: the address binding, probe timing, name resolution.
//! - [`token`]: the shared bearer token, compared in constant time, and the TCP guard of
//!   machine-to-machine requests.
//! - [`remote`]: remote submit on the origin (routes) and on the authority, and the saved
//!   authority of `job show|move|cancel`.
//! - [`pull`]: events back to the origin: one long-polling pull task per authority.
//!
//! [`Fleet`] is the directory as the API reads it, with its probe task: every peer is
//! probed at start, every 30 s, and before use after a failed probe, each probe bounded by
//! the client's 5 s deadline.

pub mod directory;
pub mod pull;
pub mod remote;
pub mod token;

use crate::client::Client;
use crate::core::CoreHandle;
use directory::{Bind, Peer, Probed, Target};
use homebased_shared::config::FleetToken;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::MachineId;
use homebased_shared::wire::{
    Identity, MachineList, MachineView, PeerSource, PeerState, ProtocolRange,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// This machine's directory, cheap to clone into every request.
#[derive(Clone)]
pub struct Fleet {
    inner: Arc<Inner>,
}

struct Inner {
    enabled: bool,
    identity: Identity,
    /// The TCP listener, as peers reach it (`http://addr`), for `fleet machines`.
    address: Option<String>,
    token: Option<FleetToken>,
    /// The peers in address order. Held only for reads and `directory::apply`, never across
    /// an await.
    peers: Mutex<Vec<Peer>>,
    /// Stores additions, removals and bindings (the store is the core's).
    core: CoreHandle,
    /// The daemon's clock (crate::clock), for the directory's stamps and probe times.
    clock: crate::clock::Clock,
    /// Raised when a remote submit stored a route: the pull task looks at once.
    routes_changed: tokio::sync::Notify,
}

/// What `fleet remove` may not remove.
fn config_peer(address: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Usage,
        format!("{address} comes from [[fleet.machines]] in the config: remove it there"),
    )
    .with_input(serde_json::json!({ "address": address }))
}

impl Fleet {
    /// Loads the directory: the config's peers, then the added ones, each with its stored
    /// binding. A disabled Fleet still answers its identity and lists only this machine.
    pub async fn load(
        core: CoreHandle,
        config: &homebased_shared::config::FleetConfig,
        address: Option<String>,
    ) -> ApiResult<Fleet> {
        let crate::core::handle::ThisMachine {
            machine,
            name,
            clock,
        } = core.identity().await?;
        let stored = core.fleet_stored_peers().await?;
        let mut peers: Vec<Peer> = Vec::new();
        if config.enabled {
            for a in &config.machines {
                let bound = stored
                    .iter()
                    .find(|s| &s.address == a)
                    .and_then(|s| s.machine);
                peers.push(Peer::new(a.clone(), PeerSource::Config, bound));
            }
            for s in stored.iter().filter(|s| s.added) {
                if !peers.iter().any(|p| p.address == s.address) {
                    peers.push(Peer::new(s.address.clone(), PeerSource::Added, s.machine));
                }
            }
            peers.sort_by(|a, b| a.address.cmp(&b.address));
        }
        Ok(Fleet {
            inner: Arc::new(Inner {
                enabled: config.enabled,
                identity: Identity {
                    machine,
                    name,
                    boot: uuid::Uuid::now_v7(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    protocol: ProtocolRange::OURS,
                },
                address,
                token: config.token.clone(),
                peers: Mutex::new(peers),
                core,
                clock,
                routes_changed: tokio::sync::Notify::new(),
            }),
        })
    }

    pub fn enabled(&self) -> bool {
        self.inner.enabled
    }

    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    pub fn token(&self) -> Option<&FleetToken> {
        self.inner.token.as_ref()
    }

    fn peers(&self) -> std::sync::MutexGuard<'_, Vec<Peer>> {
        // A panic while holding it left a plain Vec behind: still consistent.
        self.inner.peers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves when a remote submit stored or settled a route.
    pub async fn routes_changed(&self) {
        self.inner.routes_changed.notified().await
    }

    /// Wakes the pull task (a route was stored or settled).
    pub fn notify_routes(&self) {
        self.inner.routes_changed.notify_waiters();
    }

    /// `fleet machines`: this machine first.
    pub fn machines(&self) -> MachineList {
        let me = &self.inner.identity;
        let mut machines = vec![MachineView {
            machine: Some(me.machine),
            name: Some(me.name.clone()),
            address: self.inner.address.clone(),
            source: PeerSource::Local,
            state: PeerState::Up,
            last_seen: Some(self.inner.clock.now_ms()),
            protocol: Some(me.protocol),
        }];
        machines.extend(self.peers().iter().map(Peer::view));
        MachineList { machines }
    }

    /// The client for a peer's address, with the token and this machine as origin.
    fn client(&self, address: &str) -> Client {
        let client = Client::tcp(address).with_origin(self.inner.identity.machine);
        match &self.inner.token {
            Some(t) => client.with_token(t.expose()),
            None => client,
        }
    }

    pub(crate) fn disabled(&self) -> ApiError {
        ApiError::new(
            ErrorCode::Usage,
            "Fleet is not enabled here: set [fleet] enabled = true and [web] listen",
        )
    }

    /// Resolves a `--machine` value: `None` for this machine, else the peer's client and
    /// UUID, after a probe if its last one failed. A peer that is down, bound to another
    /// UUID or in no common protocol gets nothing forwarded.
    pub async fn peer(&self, key: &str) -> ApiResult<Option<(Client, MachineId)>> {
        let me = &self.inner.identity;
        let found = directory::resolve((me.machine, &me.name), &self.peers(), key);
        let address = match found {
            Ok(Target::Local) => return Ok(None),
            Err(e) if !self.enabled() && e.code == ErrorCode::MachineNotFound => {
                return Err(ApiError::new(
                    ErrorCode::MachineNotFound,
                    format!("no machine {key:?} is known here (Fleet is not enabled)"),
                )
                .with_input(serde_json::json!({ "machine": key })))
            }
            Err(e) => return Err(e),
            Ok(Target::Peer(i)) => self.peers()[i].clone(),
        };
        let peer = if directory::probe_before_use(&address) {
            self.refresh(&address.address).await?
        } else {
            address
        };
        match (peer.state, peer.bound) {
            (PeerState::Up, Some(uuid)) => Ok(Some((self.client(&peer.address), uuid))),
            (PeerState::IdentityMismatch, _) => Err(mismatch(&peer)),
            (PeerState::Refused, _) => Err(directory::refused(&peer)),
            (PeerState::Incompatible, _) => Err(ApiError::new(
                ErrorCode::MachineUnavailable,
                format!(
                    "{} speaks Fleet protocol {:?}, this machine {:?}",
                    peer.address,
                    peer.protocol,
                    ProtocolRange::OURS
                ),
            )
            .with_input(serde_json::json!({ "address": peer.address }))),
            _ => Err(ApiError::new(
                ErrorCode::MachineUnavailable,
                format!("{} ({key}) does not answer", peer.address),
            )
            .with_input(serde_json::json!({ "address": peer.address, "machine": key }))),
        }
    }

    /// An error a peer answered, said as that machine's: a full disk, a damaged store or a
    /// fault there must not read like one here. Other refusals name what they refuse.
    pub fn answered_by(&self, machine: &str, mut e: ApiError) -> ApiError {
        if !matches!(e.code, ErrorCode::StorageUnavailable | ErrorCode::Internal) {
            return e;
        }
        let name = machine
            .parse::<MachineId>()
            .ok()
            .and_then(|id| self.peers().iter().find(|p| p.bound == Some(id)).cloned())
            .and_then(|p| p.name);
        let who = match name {
            Some(name) => format!("machine {name} ({machine})"),
            None => format!("machine {machine}"),
        };
        e.message = format!("on {who}: {}", e.message);
        match &mut e.input {
            serde_json::Value::Object(input) => {
                input.insert("machine".into(), serde_json::json!(machine));
            }
            other => *other = serde_json::json!({ "machine": machine }),
        }
        e
    }

    /// A request to the peer bound to `machine` found nothing answering: it is `down`, and
    /// probed before its next use.
    pub fn unreachable(&self, machine: &str) {
        let Ok(id) = machine.parse::<MachineId>() else {
            return;
        };
        for peer in self.peers().iter_mut() {
            if peer.bound == Some(id) && peer.state == PeerState::Up {
                peer.state = PeerState::Down;
            }
        }
    }

    /// Probes one address and folds the answer into its directory entry (binding it in the
    /// store on its first answer). Answers the entry afterwards.
    async fn refresh(&self, address: &str) -> ApiResult<Peer> {
        let probed = match self.ask_identity(address).await {
            Ok(identity) if identity.machine == self.inner.identity.machine => {
                tracing::warn!(%address, "a Fleet peer answers as this machine: not a peer");
                Probed::Myself
            }
            Ok(identity) => Probed::Answered(identity),
            Err(e) if e.code == ErrorCode::Permission => Probed::Refused,
            Err(e) => {
                tracing::debug!(%address, error = %e.message, "Fleet probe failed");
                Probed::Failed
            }
        };
        let now = self.inner.clock.now_ms();
        let (bind, mut peer) = {
            let mut peers = self.peers();
            let Some(peer) = peers.iter_mut().find(|p| p.address == address) else {
                return Err(ApiError::new(
                    ErrorCode::MachineNotFound,
                    format!("{address} was removed from the Fleet directory"),
                ));
            };
            (directory::apply(peer, &probed, now), peer.clone())
        };
        if let Bind::Store(machine) = bind {
            let bound = self
                .inner
                .core
                .fleet_bind(address.to_string(), machine, now)
                .await?;
            if bound != machine {
                // Another probe bound it first, to another UUID: the store's binding wins.
                let mut peers = self.peers();
                if let Some(p) = peers.iter_mut().find(|p| p.address == address) {
                    p.bound = Some(bound);
                    p.state = PeerState::IdentityMismatch;
                    peer = p.clone();
                }
            }
        }
        Ok(peer)
    }

    /// The identity an address answers. An answer that is not one (garbage, another
    /// program on that port, a body cut off at the limit) is that machine being unavailable
    /// as a Fleet peer, not a fault of this daemon.
    async fn ask_identity(&self, address: &str) -> ApiResult<Identity> {
        self.client(address).identity().await.map_err(|e| {
            if e.code == ErrorCode::Internal {
                ApiError::new(
                    ErrorCode::MachineUnavailable,
                    format!(
                        "{address} answered, but not as a homebased daemon: {}",
                        e.message
                    ),
                )
                .with_input(serde_json::json!({ "address": address }))
            } else {
                e
            }
        })
    }

    /// `fleet probe URL|NAME|UUID`: the identity, or why there is none.
    pub async fn probe(&self, key: &str) -> ApiResult<Identity> {
        if !self.enabled() {
            return Err(self.disabled());
        }
        let me = &self.inner.identity;
        let target = directory::resolve((me.machine, &me.name), &self.peers(), key)?;
        let address = match target {
            Target::Local => return Ok(me.clone()),
            Target::Peer(i) => self.peers()[i].address.clone(),
        };
        // Probe once for the answer itself, then fold the same answer into the directory.
        let answer = self.ask_identity(&address).await;
        let peer = self.refresh(&address).await?;
        match (peer.state, answer) {
            (PeerState::IdentityMismatch, _) => Err(mismatch(&peer)),
            (_, Ok(identity)) => Ok(identity),
            (_, Err(e)) => Err(e),
        }
    }

    /// `fleet add URL`: stored, then probed (an unreachable URL is added as `down`).
    pub async fn add(&self, address: &str) -> ApiResult<MachineView> {
        if !self.enabled() {
            return Err(self.disabled());
        }
        let address = homebased_shared::peer_address::normalize(address).map_err(|why| {
            ApiError::new(ErrorCode::Usage, why)
                .with_input(serde_json::json!({ "address": address }))
        })?;
        if Some(&address) == self.inner.address.as_ref() {
            return Err(ApiError::new(
                ErrorCode::Usage,
                format!("{address} is this machine's own listener"),
            )
            .with_input(serde_json::json!({ "address": address })));
        }
        // This machine under another address (`localhost`, another interface), or an
        // impostor with its UUID: a peer by that UUID would shadow this machine.
        if let Ok(identity) = self.ask_identity(&address).await {
            if identity.machine == self.inner.identity.machine {
                return Err(ApiError::new(
                    ErrorCode::Usage,
                    format!(
                        "{address} answers as this machine ({}): a machine is not its own peer",
                        identity.machine
                    ),
                )
                .with_input(
                    serde_json::json!({ "address": address, "machine": identity.machine }),
                ));
            }
        }
        let known = self.peers().iter().any(|p| p.address == address);
        if !known {
            let now = self.inner.clock.now_ms();
            let stored = self.inner.core.fleet_add(address.clone(), now).await?;
            let mut peers = self.peers();
            if !peers.iter().any(|p| p.address == address) {
                peers.push(Peer::new(address.clone(), PeerSource::Added, stored));
                peers.sort_by(|a, b| a.address.cmp(&b.address));
            }
        }
        Ok(self.refresh(&address).await?.view())
    }

    /// `fleet remove URL|NAME|UUID`: an added peer only, with its binding.
    pub async fn remove(&self, key: &str) -> ApiResult<MachineView> {
        if !self.enabled() {
            return Err(self.disabled());
        }
        let me = &self.inner.identity;
        let target = directory::resolve((me.machine, &me.name), &self.peers(), key)?;
        let peer = match target {
            Target::Local => {
                return Err(
                    ApiError::new(ErrorCode::Usage, "this machine cannot be removed")
                        .with_input(serde_json::json!({ "machine": key })),
                )
            }
            Target::Peer(i) => self.peers()[i].clone(),
        };
        if peer.source == PeerSource::Config {
            return Err(config_peer(&peer.address));
        }
        self.inner.core.fleet_remove(peer.address.clone()).await?;
        self.peers().retain(|p| p.address != peer.address);
        Ok(peer.view())
    }

    /// Probes every peer that is due, each on a task of its own, once a second: at start,
    /// then every 30 s per peer. Runs until aborted.
    pub async fn probe_forever(self) {
        if !self.enabled() {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = self.inner.clock.now_ms();
            let due: Vec<String> = {
                let mut peers = self.peers();
                peers
                    .iter_mut()
                    .filter(|p| directory::due(p, now))
                    .map(|p| {
                        // Not due again while this probe is under way.
                        p.probed_at = Some(now);
                        p.address.clone()
                    })
                    .collect()
            };
            for address in due {
                let fleet = self.clone();
                tokio::spawn(async move {
                    let _ = fleet.refresh(&address).await;
                });
            }
        }
    }

    /// The check of a forwarded request (it carries [`homebased_shared::wire::ORIGIN_HEADER`]): it must name this
    /// machine by UUID, or it is answered `machine_identity_mismatch` and nothing is done.
    pub fn check_forwarded(&self, machine: Option<&str>) -> ApiResult<()> {
        let me = self.inner.identity.machine;
        match machine.map(str::parse::<MachineId>) {
            Some(Ok(m)) if m == me => Ok(()),
            _ => Err(ApiError::new(
                ErrorCode::MachineIdentityMismatch,
                format!(
                    "this is machine {me}, not {:?}: the forwarding daemon's directory is stale",
                    machine.unwrap_or("")
                ),
            )
            .with_input(serde_json::json!({ "machine": machine, "receiver": me }))),
        }
    }
}

fn mismatch(peer: &Peer) -> ApiError {
    ApiError::new(
        ErrorCode::MachineIdentityMismatch,
        format!(
            "{} now answers as another machine than {}: nothing is forwarded there until \
             `homebased fleet remove` and `fleet add`",
            peer.address,
            peer.bound.map_or_else(|| "-".into(), |m| m.to_string())
        ),
    )
    .with_input(serde_json::json!({ "address": peer.address, "machine": peer.bound }))
}
