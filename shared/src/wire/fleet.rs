//! The Fleet shapes of SPEC section 13: a machine's identity, the peer directory, and the
//! requests of `fleet add|remove|probe`.

use crate::event::{Event, EventKind};
use crate::ids::{JobId, MachineId};
use crate::wire::Versioned;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

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
    pub job: JobId,
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
    pub event: RelayedEvent,
}

/// A remote job's event as its authority relays it to the origin, which stores and delivers
/// it like a local one (SPEC 13).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RelayedEvent {
    /// A kind this build reads: decoded whole, so a malformed one fails the pull (the cursor
    /// does not move) instead of being delivered half-read.
    Known(Box<Versioned<Event>>),
    /// A kind a newer authority wrote that this build does not know.
    Newer(NewerEvent),
}

/// An event of a kind this build does not know. Its envelope is read, so the origin stores
/// it once (`job`, `seq`) and knows it does not end the job; the other fields pass through
/// unread, exactly as they came, to delivery, as a local event of an unknown kind does
/// (written by a newer build before a downgrade). They cannot be typed: this build does not
/// know them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewerEvent {
    pub event: String,
    pub job: JobId,
    pub seq: u32,
    #[serde(flatten)]
    pub unread: serde_json::Map<String, serde_json::Value>,
}

impl RelayedEvent {
    pub fn job(&self) -> JobId {
        match self {
            RelayedEvent::Known(e) => e.answer.job,
            RelayedEvent::Newer(e) => e.job,
        }
    }

    pub fn seq(&self) -> u32 {
        match self {
            RelayedEvent::Known(e) => e.answer.seq,
            RelayedEvent::Newer(e) => e.seq,
        }
    }

    /// The kind as written (`JOB_SUCCEEDED`, or a newer build's name).
    pub fn kind_name(&self) -> &str {
        match self {
            RelayedEvent::Known(e) => e.answer.event.as_str(),
            RelayedEvent::Newer(e) => &e.event,
        }
    }

    /// Whether the job ended with this event (its route can go once delivered). An event of
    /// a kind this build does not know never ends a job here: the job's own end follows.
    pub fn ends_job(&self) -> bool {
        matches!(
            self,
            RelayedEvent::Known(e) if matches!(
                e.answer.event,
                EventKind::JobSucceeded | EventKind::JobFailed | EventKind::JobCancelled
            )
        )
    }
}

impl<'de> Deserialize<'de> for RelayedEvent {
    /// By its `event` name: a known kind must decode as one, an unknown kind keeps its fields.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RelayedEvent, D::Error> {
        let body = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let known = match body.get("event").and_then(serde_json::Value::as_str) {
            Some(kind) => EventKind::from_name(kind).is_some(),
            None => return Err(D::Error::custom("a relayed event names no `event` kind")),
        };
        let body = serde_json::Value::Object(body);
        if known {
            serde_json::from_value(body).map(RelayedEvent::Known)
        } else {
            serde_json::from_value(body).map(RelayedEvent::Newer)
        }
        .map_err(D::Error::custom)
    }
}

/// `GET /v1/fleet/events?origin=<uuid>&after=<cursor>&wait=<duration>`: the events of the
/// origin's remote jobs after `after`, oldest first; empty when none came within `wait`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetEvents {
    pub machine: MachineId,
    pub events: Vec<FleetEvent>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn succeeded() -> serde_json::Value {
        json!({"api_version": crate::API_VERSION, "event": "JOB_SUCCEEDED",
            "job": JobId::new(), "seq": 3, "at": "2026-12-01T10:00:00.000Z",
            "thread": crate::ids::ThreadId::new(), "name": "far", "machine": MachineId::new(),
            "resource": null, "task": null, "run_number": null, "step": null})
    }

    #[test]
    fn a_known_kind_is_decoded_whole_and_written_back_as_it_came() {
        let body = succeeded();
        let event: RelayedEvent = serde_json::from_value(body.clone()).unwrap();
        assert!(matches!(event, RelayedEvent::Known(_)), "{event:?}");
        assert_eq!(event.kind_name(), "JOB_SUCCEEDED");
        assert_eq!(event.seq(), 3);
        assert_eq!(json!(event.job()), body["job"]);
        assert!(event.ends_job());
        assert_eq!(serde_json::to_value(&event).unwrap(), body);
    }

    #[test]
    fn a_kind_from_a_newer_build_keeps_every_field_and_never_ends_the_job() {
        let mut body = succeeded();
        body["event"] = json!("JOB_TELEPORTED");
        body["destination"] = json!({"planet": "mars"});
        let event: RelayedEvent = serde_json::from_value(body.clone()).unwrap();
        let RelayedEvent::Newer(newer) = &event else {
            panic!("{event:?}")
        };
        assert_eq!(newer.event, "JOB_TELEPORTED");
        assert_eq!(event.kind_name(), "JOB_TELEPORTED");
        assert!(!event.ends_job());
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            body,
            "passed on whole"
        );
    }

    #[test]
    fn a_malformed_known_kind_and_an_event_without_a_kind_are_refused() {
        let mut body = succeeded();
        body.as_object_mut().unwrap().remove("thread");
        let err = serde_json::from_value::<RelayedEvent>(body).unwrap_err();
        assert!(err.to_string().contains("thread"), "{err}");

        let mut body = succeeded();
        body.as_object_mut().unwrap().remove("event");
        let err = serde_json::from_value::<RelayedEvent>(body).unwrap_err();
        assert!(err.to_string().contains("names no `event`"), "{err}");

        let mut body = succeeded();
        body["event"] = json!("JOB_TELEPORTED");
        body["seq"] = json!("three");
        assert!(serde_json::from_value::<RelayedEvent>(body).is_err());
    }

    #[test]
    fn a_fleet_events_answer_reads_known_and_newer_events_side_by_side() {
        let mut newer = succeeded();
        newer["event"] = json!("JOB_TELEPORTED");
        let answer = json!({"machine": MachineId::new(), "events": [
            {"cursor": 1, "event": succeeded()}, {"cursor": 2, "event": newer}]});
        let read: FleetEvents = serde_json::from_value(answer.clone()).unwrap();
        let kinds: Vec<_> = read.events.iter().map(|e| e.event.kind_name()).collect();
        assert_eq!(kinds, ["JOB_SUCCEEDED", "JOB_TELEPORTED"]);
        assert_eq!(serde_json::to_value(&read).unwrap(), answer);
    }
}
