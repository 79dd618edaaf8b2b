//! Reading the queue: `resource jobs` and `resource job show`.

use super::{CleanupResult, Versioned};
use crate::event::Event;
use crate::ids::{AttentionId, JobId, MachineId, ResourceId, TaskId, ThreadId};
use crate::queue::{JobStatus, PhaseKind, Priority, RunStatus, StopCause};
use crate::rundir::ExitReason;
use crate::time::{serde_rfc3339, Millis};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The state of a job with the data that belongs to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum JobStateView {
    Queued {
        resume: bool,
    },
    /// `resource` is the first of `resources`, the run's lanes in resource order.
    Active {
        resource: ResourceId,
        resources: Vec<ResourceId>,
    },
    Succeeded,
    Failed {
        run: Option<TaskId>,
    },
    Cancelled,
}

impl JobStateView {
    pub fn name(&self) -> &'static str {
        match self {
            JobStateView::Queued { .. } => "queued",
            JobStateView::Active { .. } => "active",
            JobStateView::Succeeded => "succeeded",
            JobStateView::Failed { .. } => "failed",
            JobStateView::Cancelled => "cancelled",
        }
    }
}

/// Where a job may run: `"any"`, the UUID of the lane it is pinned to (`resource`), or the
/// lanes of its `resources`, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobTarget {
    Any,
    Lane(ResourceId),
    Lanes(Vec<ResourceId>),
}

impl JobTarget {
    /// The lanes it names, none for `any`.
    pub fn lanes(&self) -> &[ResourceId] {
        match self {
            JobTarget::Any => &[],
            JobTarget::Lane(lane) => std::slice::from_ref(lane),
            JobTarget::Lanes(lanes) => lanes,
        }
    }
}

/// The wire form: a string (`"any"` or a UUID) or an array of UUIDs.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum JobTargetWire {
    Text(String),
    Lanes(Vec<ResourceId>),
}

impl Serialize for JobTarget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            JobTarget::Any => s.serialize_str("any"),
            JobTarget::Lane(lane) => lane.serialize(s),
            JobTarget::Lanes(lanes) => lanes.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for JobTarget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match JobTargetWire::deserialize(d)? {
            JobTargetWire::Text(text) if text == "any" => Ok(JobTarget::Any),
            JobTargetWire::Text(text) => text
                .parse()
                .map(JobTarget::Lane)
                .map_err(serde::de::Error::custom),
            JobTargetWire::Lanes(lanes) => Ok(JobTarget::Lanes(lanes)),
        }
    }
}

/// One job as `resource jobs` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    pub id: JobId,
    pub name: String,
    pub priority: Priority,
    /// The 1-based slot within the level; `null` once the job is terminal.
    pub position: Option<u32>,
    pub state: JobStateView,
    pub target: JobTarget,
    /// How many lanes each run holds.
    pub gpus: u32,
    pub step: u32,
    pub steps: u32,
    pub runs: u32,
    #[serde(with = "serde_rfc3339")]
    pub created_at: Millis,
    #[serde(with = "serde_rfc3339")]
    pub updated_at: Millis,
    /// Why a queued job waits, as the last scheduling pass saw it; `null` otherwise.
    #[serde(default)]
    pub waiting: Option<Waiting>,
}

/// Why a queued job waits (SPEC section 9), computed by the scheduler from the snapshot it
/// decided on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Waiting {
    /// Every resource it may use has a run it may not stop.
    Resources { blockers: Vec<WaitingBlocker> },
    /// A stop was committed (or is being committed) so that this job can start.
    Stopping {
        resource: ResourceId,
        task: TaskId,
        cause: StopCause,
        #[serde(with = "serde_rfc3339")]
        requested_at: Millis,
    },
    /// The lane it will get is cleaning, or its own previous run still is.
    Cleaning { resource: ResourceId, task: TaskId },
    /// Its pinned resource (or its own previous run's) is held until a person releases it.
    Attention {
        resource: ResourceId,
        attention: AttentionId,
    },
    /// A lane it may use is free or becoming free, but `job`, earlier in serving order,
    /// takes it.
    Ahead { job: JobId },
    /// The machine has no resource it may use.
    NoResources,
    /// A lane is free for it, but launches are held back: the last one could not make its
    /// run directory (a full disk, a read-only or failing filesystem) `since` then. It
    /// starts once a launch can again (SPEC section 5).
    StorageUnavailable {
        #[serde(with = "serde_rfc3339")]
        since: Millis,
    },
    /// `job`, named in its `after`, has not succeeded yet (the first such, in the order
    /// given); `state` is that job's, queued or active.
    Dependency { job: JobId, state: JobStatus },
    /// A free lane it may use is reserved for `job`, a multi-lane job earlier in serving
    /// order, and this job cannot end before that job's estimated start (or has no
    /// `time_limit`). `estimated_start` is `null` when unknown.
    Reserved {
        job: JobId,
        resources: Vec<ResourceId>,
        #[serde(with = "serde_rfc3339::option")]
        estimated_start: Option<Millis>,
    },
    /// This multi-lane job holds the reservation (`resources`) and waits for the rest of
    /// its lanes: `free` are free now, `blockers` hold the others.
    Gathering {
        resources: Vec<ResourceId>,
        free: Vec<ResourceId>,
        #[serde(with = "serde_rfc3339::option")]
        estimated_start: Option<Millis>,
        blockers: Vec<WaitingBlocker>,
    },
}

/// A job named in another's `after`, or one that names it (`job show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLink {
    pub job: JobId,
    /// `null` once retention removed the job (only a finished job's can have gone).
    pub name: Option<String>,
    pub state: Option<JobStatus>,
}

/// A run in front of a job waiting for `resources`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingBlocker {
    pub resource: ResourceId,
    pub job: JobId,
    pub task: TaskId,
    pub phase: PhaseKind,
    pub priority: Priority,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobList {
    pub machine: MachineId,
    /// Each lane's name by UUID, so that a reader names the lanes a pinned target or a
    /// waiting reason carries without a second request (`resource list`). Before `jobs`: the
    /// listing is streamed, and `jobs` must be its last field.
    #[serde(default)]
    pub resource_names: std::collections::BTreeMap<crate::ids::ResourceId, String>,
    pub jobs: Vec<JobSummary>,
}

/// One attempt in a job's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub task: TaskId,
    pub run_number: u32,
    pub step: u32,
    /// The first of `resources`.
    pub resource: ResourceId,
    /// Every lane the run held, in resource order.
    #[serde(default)]
    pub resources: Vec<ResourceId>,
    pub status: RunStatus,
    pub resume: bool,
    pub stop_cause: Option<StopCause>,
    #[serde(with = "serde_rfc3339::option")]
    pub started_at: Option<Millis>,
    #[serde(with = "serde_rfc3339::option")]
    pub ended_at: Option<Millis>,
    /// The exit as the worker recorded it (`{"code":0,"kind":"exit"}`, ...); `null` while the
    /// run goes on, and for a lost run.
    #[serde(serialize_with = "super::sorted_keys::serialize")]
    pub process: Option<ExitReason>,
    /// The result of the cleanup that ended its cleaning phase (`{"attempt":1,"result":"clean"}`
    /// or a failure); `null` until then.
    #[serde(serialize_with = "super::sorted_keys::serialize")]
    pub cleanup: Option<CleanupResult>,
    /// The most GPU memory the run's own processes were seen using at one sample, summed over
    /// its lanes; `null` when no sample saw it (sampling off or failing for its whole life).
    #[serde(default)]
    pub gpu_memory_peak_mib: Option<u64>,
}

/// `GET /v1/jobs/{job}/environment` (socket only): what `resource job show --env` adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEnvironment {
    pub job: JobId,
    /// The submitter's environment as captured at submit; `None` when none was (a job
    /// submitted through Fleet runs with the authority daemon's environment).
    pub environment: Option<std::collections::BTreeMap<String, String>>,
}

/// `resource job show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDetail {
    pub machine: MachineId,
    pub id: JobId,
    pub name: String,
    pub priority: Priority,
    pub position: Option<u32>,
    pub state: JobStateView,
    pub target: JobTarget,
    pub gpus: u32,
    pub step: u32,
    pub steps: u32,
    #[serde(with = "serde_rfc3339")]
    pub created_at: Millis,
    #[serde(with = "serde_rfc3339")]
    pub updated_at: Millis,
    #[serde(default)]
    pub waiting: Option<Waiting>,
    pub thread: ThreadId,
    pub spec: Value,
    pub active_run: Option<TaskId>,
    pub runs: Vec<RunView>,
    pub last_stop_cause: Option<StopCause>,
    /// The jobs of its `after`, in the order given, each with its state now.
    #[serde(default)]
    pub dependencies: Vec<JobLink>,
    /// The jobs whose `after` names this one, oldest first.
    #[serde(default)]
    pub dependents: Vec<JobLink>,
    /// Its events, oldest first, each in its envelope as the store keeps it.
    #[serde(serialize_with = "super::sorted_keys::serialize")]
    pub events: Vec<Versioned<Event>>,
    /// The machine a remote job was submitted from (Fleet); absent for a local job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<crate::ids::MachineId>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// SPEC section 9: the reservation reasons are tagged like the others, with
    /// `estimated_start` an RFC 3339 time or `null` when unknown.
    #[test]
    fn reservation_reasons_serialize_as_spec_9_says() {
        let (job, lane) = (JobId::new(), ResourceId::new());
        let reserved = Waiting::Reserved {
            job,
            resources: vec![lane],
            estimated_start: None,
        };
        let value = serde_json::to_value(&reserved).unwrap();
        assert_eq!(
            value,
            json!({"reason": "reserved", "job": job, "resources": [lane], "estimated_start": null})
        );
        assert_eq!(serde_json::from_value::<Waiting>(value).unwrap(), reserved);

        let gathering = Waiting::Gathering {
            resources: vec![lane],
            free: vec![lane],
            estimated_start: Some(1_700_000_000_000),
            blockers: Vec::new(),
        };
        let value = serde_json::to_value(&gathering).unwrap();
        assert_eq!(value["reason"], "gathering");
        assert_eq!(value["estimated_start"], "2023-11-14T22:13:20.000Z");
        assert_eq!(value["free"], json!([lane]));
        assert_eq!(serde_json::from_value::<Waiting>(value).unwrap(), gathering);
    }
}
