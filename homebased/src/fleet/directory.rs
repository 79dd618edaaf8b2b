//! The peer directory, pure: what each probe answer does to a peer (the address binding
//! rule, protocol range, identity mismatch), when a peer is due for a probe, and how a name,
//! UUID or URL resolves to this machine or one peer.

use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::MachineId;
use homebased_shared::time::Millis;
use homebased_shared::wire::{Identity, MachineView, PeerSource, PeerState, ProtocolRange};

/// How often every peer is probed.
pub const PROBE_EVERY_MS: Millis = 30_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// In normal form (`http://host:port`).
    pub address: String,
    pub source: PeerSource,
    /// The UUID this address first answered with; kept in the store.
    pub bound: Option<MachineId>,
    pub state: PeerState,
    /// The name and protocol of its last answer.
    pub name: Option<String>,
    pub protocol: Option<ProtocolRange>,
    pub last_seen: Option<Millis>,
    /// When it was last probed (answer or not): the timer's clock.
    pub probed_at: Option<Millis>,
}

impl Peer {
    pub fn new(address: String, source: PeerSource, bound: Option<MachineId>) -> Peer {
        Peer {
            address,
            source,
            bound,
            state: PeerState::Down,
            name: None,
            protocol: None,
            last_seen: None,
            probed_at: None,
        }
    }

    pub fn view(&self) -> MachineView {
        MachineView {
            machine: self.bound,
            name: self.name.clone(),
            address: Some(self.address.clone()),
            source: self.source,
            state: self.state,
            last_seen: self.last_seen,
            protocol: self.protocol,
        }
    }
}

/// What one probe of an address found.
#[derive(Debug, Clone)]
pub enum Probed {
    Answered(Identity),
    /// It answered `permission`: it holds another Fleet token than this machine (or none).
    Refused,
    /// It answered with this machine's own UUID: this machine's listener under another
    /// address, or an impostor. Never bound.
    Myself,
    Failed,
}

/// What the caller must do after [`apply`]: store a new binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    Nothing,
    Store(MachineId),
}

/// Applies a probe result. An address is bound to the UUID that first answered there; an
/// answer with another UUID makes the peer `identity_mismatch` for good (until it is removed
/// and added again), whatever it answers later. An answer in no common protocol version
/// is `incompatible`; no answer is `down`.
pub fn apply(peer: &mut Peer, probed: &Probed, now: Millis) -> Bind {
    peer.probed_at = Some(now);
    if peer.state == PeerState::IdentityMismatch {
        return Bind::Nothing;
    }
    match probed {
        Probed::Failed => {
            peer.state = PeerState::Down;
            Bind::Nothing
        }
        Probed::Refused => {
            peer.state = PeerState::Refused;
            Bind::Nothing
        }
        Probed::Myself => {
            peer.state = PeerState::IdentityMismatch;
            Bind::Nothing
        }
        Probed::Answered(id) => {
            if peer.bound.is_some_and(|b| b != id.machine) {
                peer.state = PeerState::IdentityMismatch;
                return Bind::Nothing;
            }
            let bind = match peer.bound {
                None => Bind::Store(id.machine),
                Some(_) => Bind::Nothing,
            };
            peer.bound = Some(id.machine);
            peer.name = Some(id.name.clone());
            peer.protocol = Some(id.protocol);
            peer.last_seen = Some(now);
            peer.state = if ProtocolRange::OURS.overlaps(id.protocol) {
                PeerState::Up
            } else {
                PeerState::Incompatible
            };
            bind
        }
    }
}

/// Whether the timer should probe `peer` now.
pub fn due(peer: &Peer, now: Millis) -> bool {
    peer.probed_at.is_none_or(|at| now - at >= PROBE_EVERY_MS)
}

/// Whether a request for `peer` must probe it first: its last probe failed (or none ran).
pub fn probe_before_use(peer: &Peer) -> bool {
    matches!(peer.state, PeerState::Down | PeerState::Refused)
}

/// What a `--machine` / `?machine=` value, or a `fleet probe|remove` argument, names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Local,
    /// The index of the peer in the directory's list.
    Peer(usize),
}

/// Resolves `key`: a UUID (this machine's, or a peer's bound one), a URL (a peer's address),
/// or a name (this machine's or a peer's; shared by two peers it is
/// `duplicate_machine_name`, by UUID they stay reachable).
pub fn resolve(local: (MachineId, &str), peers: &[Peer], key: &str) -> ApiResult<Target> {
    let key = key.trim();
    if let Ok(id) = key.parse::<MachineId>() {
        if id == local.0 {
            return Ok(Target::Local);
        }
        return peers
            .iter()
            .position(|p| p.bound == Some(id))
            .map(Target::Peer)
            .ok_or_else(|| not_found(key));
    }
    if key.contains("://") {
        let address = homebased_shared::peer_address::normalize(key).map_err(|why| {
            ApiError::new(ErrorCode::Usage, why).with_input(serde_json::json!({ "address": key }))
        })?;
        return peers
            .iter()
            .position(|p| p.address == address)
            .map(Target::Peer)
            .ok_or_else(|| not_found(key));
    }
    let named: Vec<usize> = peers
        .iter()
        .enumerate()
        .filter(|(_, p)| p.name.as_deref() == Some(key))
        .map(|(i, _)| i)
        .collect();
    let local_match = key == local.1;
    match (local_match, named.as_slice()) {
        (true, []) => Ok(Target::Local),
        (false, [one]) => Ok(Target::Peer(*one)),
        (false, []) => Err(unnamed_refusal(peers, key).unwrap_or_else(|| not_found(key))),
        _ => Err(ApiError::new(
            ErrorCode::DuplicateMachineName,
            format!("more than one machine is named {key:?}: address it by UUID"),
        )
        .with_input(serde_json::json!({ "machine": key }))),
    }
}

/// A name no peer answered to, where a peer that might be it refused this machine's token
/// before it could say its name: that refusal is the answer, not "no such machine".
fn unnamed_refusal(peers: &[Peer], key: &str) -> Option<ApiError> {
    let refused: Vec<&str> = peers
        .iter()
        .filter(|p| p.state == PeerState::Refused && p.name.is_none())
        .map(|p| p.address.as_str())
        .collect();
    if refused.is_empty() {
        return None;
    }
    Some(
        ApiError::new(
            ErrorCode::Permission,
            format!(
                "no machine named {key:?} answered here, and {} refused this machine's Fleet \
                 token: set the same fleet.token on both machines",
                refused.join(", ")
            ),
        )
        .with_input(serde_json::json!({ "machine": key, "refused": refused })),
    )
}

/// A peer that refused this machine's token: nothing is forwarded there.
pub fn refused(peer: &Peer) -> ApiError {
    ApiError::new(
        ErrorCode::Permission,
        format!(
            "{} refused this machine's Fleet token: set the same fleet.token on both machines",
            peer.address
        ),
    )
    .with_input(serde_json::json!({ "address": peer.address, "machine": peer.bound }))
}

fn not_found(key: &str) -> ApiError {
    ApiError::new(
        ErrorCode::MachineNotFound,
        format!("no machine {key:?} in the Fleet directory (see `homebased fleet machines`)"),
    )
    .with_input(serde_json::json!({ "machine": key }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(machine: MachineId, name: &str, protocol: (u32, u32)) -> Identity {
        Identity {
            machine,
            name: name.into(),
            boot: uuid::Uuid::now_v7(),
            version: "0".into(),
            protocol: ProtocolRange {
                min: protocol.0,
                max: protocol.1,
            },
        }
    }

    fn peer(address: &str) -> Peer {
        Peer::new(address.into(), PeerSource::Added, None)
    }

    #[test]
    fn an_address_is_bound_to_the_uuid_that_first_answered() {
        let (a, b) = (MachineId::new(), MachineId::new());
        let mut p = peer("http://x:1");
        assert_eq!(apply(&mut p, &Probed::Failed, 1), Bind::Nothing);
        assert_eq!(p.state, PeerState::Down);
        let first = Probed::Answered(identity(a, "one", (1, 1)));
        assert_eq!(apply(&mut p, &first, 2), Bind::Store(a));
        assert_eq!(
            (p.state, p.last_seen, p.name.as_deref()),
            (PeerState::Up, Some(2), Some("one"))
        );
        assert_eq!(apply(&mut p, &first, 3), Bind::Nothing, "already bound");
        assert_eq!(apply(&mut p, &Probed::Failed, 4), Bind::Nothing);
        assert_eq!((p.state, p.last_seen), (PeerState::Down, Some(3)));
        let other = Probed::Answered(identity(b, "two", (1, 1)));
        assert_eq!(apply(&mut p, &other, 5), Bind::Nothing);
        assert_eq!(p.state, PeerState::IdentityMismatch);
        assert_eq!(p.bound, Some(a));
        apply(&mut p, &first, 6);
        assert_eq!(
            p.state,
            PeerState::IdentityMismatch,
            "sticky until removed and added"
        );
    }

    #[test]
    fn a_peer_that_refuses_the_token_or_answers_as_this_machine_is_never_up() {
        let mut p = peer("http://x:1");
        apply(&mut p, &Probed::Refused, 1);
        assert_eq!((p.state, p.bound), (PeerState::Refused, None));
        assert!(probe_before_use(&p), "a refusal is probed again before use");
        let me = MachineId::new();
        let e = resolve((me, "alpha"), std::slice::from_ref(&p), "beta").unwrap_err();
        assert_eq!(e.code, ErrorCode::Permission, "{e:?}");
        assert!(e.message.contains("http://x:1"), "{e:?}");
        let mut q = peer("http://y:1");
        apply(&mut q, &Probed::Myself, 1);
        assert_eq!((q.state, q.bound), (PeerState::IdentityMismatch, None));
        let e = resolve((me, "alpha"), std::slice::from_ref(&q), "beta").unwrap_err();
        assert_eq!(e.code, ErrorCode::MachineNotFound, "{e:?}");
    }

    #[test]
    fn a_peer_in_no_common_protocol_is_incompatible() {
        let mut p = peer("http://x:1");
        apply(
            &mut p,
            &Probed::Answered(identity(MachineId::new(), "n", (2, 3))),
            1,
        );
        assert_eq!(p.state, PeerState::Incompatible);
        let bound = p.bound.unwrap();
        apply(&mut p, &Probed::Answered(identity(bound, "n", (0, 4))), 2);
        assert_eq!(p.state, PeerState::Up);
    }

    #[test]
    fn peers_are_probed_every_30_s_and_before_use_after_a_failure() {
        let mut p = peer("http://x:1");
        assert!(due(&p, 0) && probe_before_use(&p));
        apply(
            &mut p,
            &Probed::Answered(identity(MachineId::new(), "n", (1, 1))),
            1_000,
        );
        assert!(!due(&p, 30_999) && due(&p, 31_000));
        assert!(!probe_before_use(&p));
        apply(&mut p, &Probed::Failed, 31_000);
        assert!(probe_before_use(&p));
    }

    #[test]
    fn names_uuids_and_urls_resolve_and_shared_names_are_refused() {
        let me = MachineId::new();
        let (a, b, c) = (MachineId::new(), MachineId::new(), MachineId::new());
        let mut peers = vec![peer("http://a:1"), peer("http://b:1"), peer("http://c:1")];
        apply(
            &mut peers[0],
            &Probed::Answered(identity(a, "gpu-box", (1, 1))),
            1,
        );
        apply(
            &mut peers[1],
            &Probed::Answered(identity(b, "twin", (1, 1))),
            1,
        );
        apply(
            &mut peers[2],
            &Probed::Answered(identity(c, "twin", (1, 1))),
            1,
        );
        let local = (me, "here");
        assert_eq!(resolve(local, &peers, "here").unwrap(), Target::Local);
        assert_eq!(
            resolve(local, &peers, &me.to_string()).unwrap(),
            Target::Local
        );
        assert_eq!(resolve(local, &peers, "gpu-box").unwrap(), Target::Peer(0));
        assert_eq!(
            resolve(local, &peers, &a.to_string()).unwrap(),
            Target::Peer(0)
        );
        assert_eq!(
            resolve(local, &peers, "http://A:1/").unwrap(),
            Target::Peer(0)
        );
        assert_eq!(
            resolve(local, &peers, "twin").unwrap_err().code,
            ErrorCode::DuplicateMachineName
        );
        assert_eq!(
            resolve(local, &peers, &c.to_string()).unwrap(),
            Target::Peer(2)
        );
        for unknown in ["nobody", "http://z:1"] {
            assert_eq!(
                resolve(local, &peers, unknown).unwrap_err().code,
                ErrorCode::MachineNotFound
            );
        }
        assert_eq!(
            resolve(local, &peers, &MachineId::new().to_string())
                .unwrap_err()
                .code,
            ErrorCode::MachineNotFound
        );
    }
}
