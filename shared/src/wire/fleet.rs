//! The Fleet shapes of SPEC section 13: a machine's identity, the peer directory, and the
//! requests of `fleet add|remove|probe`.

use crate::ids::MachineId;
use serde::{Deserialize, Serialize};

/// The Fleet protocol versions a daemon speaks, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtocolRange {
    pub min: u32,
    pub max: u32,
}

impl ProtocolRange {
    /// What this build speaks.
    pub const OURS: ProtocolRange = ProtocolRange {
        min: crate::FLEET_PROTOCOL_VERSION,
        max: crate::FLEET_PROTOCOL_VERSION,
    };

    /// Whether two ranges share a version.
    pub fn overlaps(self, other: ProtocolRange) -> bool {
        self.min <= other.max && other.min <= self.max
    }
}

/// `GET /v1/fleet/identity`. `boot` is new at every daemon start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    pub machine: MachineId,
    pub name: String,
    pub boot: uuid::Uuid,
    pub version: String,
    pub protocol: ProtocolRange,
}

/// Where a directory entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerSource {
    #[serde(rename = "self")]
    Local,
    Config,
    Added,
}

/// What the last probe of a peer found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerState {
    Up,
    Down,
    /// It answered, but speaks no protocol version this build speaks.
    Incompatible,
    /// The address answered with another UUID than the one it is bound to (or with this
    /// machine's own: it is not a peer).
    IdentityMismatch,
    /// It answered, but refused this machine's Fleet token (another token, or none).
    Refused,
}

/// One machine of `fleet machines`. A peer that never answered has no UUID or name yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineView {
    pub machine: Option<MachineId>,
    pub name: Option<String>,
    pub address: Option<String>,
    pub source: PeerSource,
    pub state: PeerState,
    #[serde(with = "crate::time::serde_rfc3339::option")]
    pub last_seen: Option<crate::time::Millis>,
    pub protocol: Option<ProtocolRange>,
}

/// `fleet machines`: this machine first, then the peers in address order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineList {
    pub machines: Vec<MachineView>,
}

/// `fleet add URL`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddPeerRequest {
    pub address: String,
}

/// `fleet remove` and `fleet probe`: a URL, a name or a UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerRequest {
    pub peer: String,
}

/// `fleet remove`: the entry as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedPeer {
    pub removed: MachineView,
}

/// An answer that may name the machine that gave it. A forwarded reply of move, cancel,
/// release or `task log` carries `machine` (SPEC 13), added by the forwarding daemon; asked
/// locally the answer keeps its SPEC 9 shape, without it. The stored result of an operation
/// is the bare answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answered<T> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<MachineId>,
    #[serde(flatten)]
    pub answer: T,
}

/// `POST /v1/fleet/jobs`: a remote submit, from the origin to the authority. The authority
/// validates the spec itself (its `cwd`, its daemon's `PATH`) and stores no environment of
/// the origin's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSubmitRequest {
    pub job: crate::ids::JobId,
    /// The machine the job comes from: its events are delivered there.
    pub origin: MachineId,
    /// The machine the origin means to reach: a receiver that is another machine refuses
    /// (`machine_identity_mismatch`).
    pub authority: MachineId,
    pub spec: serde_json::Value,
}

/// One event of `GET /v1/fleet/events`: its place in the authority's order, and the event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetEvent {
    pub cursor: u64,
    pub event: serde_json::Value,
}

/// `GET /v1/fleet/events?origin=<uuid>&after=<cursor>&wait=<duration>`: the events of the
/// origin's remote jobs after `after`, oldest first; empty when none came within `wait`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetEvents {
    pub machine: MachineId,
    pub events: Vec<FleetEvent>,
}
