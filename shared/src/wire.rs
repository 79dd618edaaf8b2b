//! The JSON shapes of SPEC section 9, shared by the daemon (which builds them) and the CLI
//! (which prints them as JSON or as human tables).

use crate::ids::{AttentionId, JobId, MachineId, ResourceId, TaskId, ThreadId};
use crate::queue::{PhaseKind, Priority, RunStatus, StopCause};
use crate::time::{serde_rfc3339, Millis};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a resource came to exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceOrigin {
    Detected,
    Fallback,
    Manual,
}

impl ResourceOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceOrigin::Detected => "detected",
            ResourceOrigin::Fallback => "fallback",
            ResourceOrigin::Manual => "manual",
        }
    }
}

impl std::str::FromStr for ResourceOrigin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "detected" => Ok(ResourceOrigin::Detected),
            "fallback" => Ok(ResourceOrigin::Fallback),
            "manual" => Ok(ResourceOrigin::Manual),
            other => Err(format!("unknown resource origin {other:?}")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceView {
    pub id: ResourceId,
    pub name: String,
    pub device: Option<u32>,
    pub origin: ResourceOrigin,
    pub run: Option<ActiveRunView>,
}

/// The run that currently holds a resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActiveRunView {
    pub job: JobId,
    pub task: TaskId,
    pub run_number: u32,
    pub step: u32,
    pub resume: bool,
    pub phase: PhaseView,
}

/// A run phase with the data that belongs to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "lowercase")]
pub enum PhaseView {
    Launching {
        #[serde(with = "serde_rfc3339")]
        reserved_at: Millis,
    },
    Executing {
        #[serde(with = "serde_rfc3339")]
        started_at: Millis,
    },
    Stopping {
        cause: StopCause,
        #[serde(with = "serde_rfc3339")]
        requested_at: Millis,
        #[serde(with = "serde_rfc3339")]
        started_at: Millis,
    },
    Cleaning {
        attempt: u32,
    },
    Attention {
        id: AttentionId,
        failure: Value,
    },
}

impl PhaseView {
    pub fn kind(&self) -> PhaseKind {
        match self {
            PhaseView::Launching { .. } => PhaseKind::Launching,
            PhaseView::Executing { .. } => PhaseKind::Executing,
            PhaseView::Stopping { .. } => PhaseKind::Stopping,
            PhaseView::Cleaning { .. } => PhaseKind::Cleaning,
            PhaseView::Attention { .. } => PhaseKind::Attention,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceList {
    pub api_version: u32,
    pub machine: MachineId,
    pub resources: Vec<ResourceView>,
}

/// The state of a job with the data that belongs to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum JobStateView {
    Queued { resume: bool },
    Active { resource: ResourceId },
    Succeeded,
    Failed { run: Option<TaskId> },
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

/// One job as `resource jobs` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    pub id: JobId,
    pub name: String,
    pub priority: Priority,
    /// The 1-based slot within the level; `null` once the job is terminal.
    pub position: Option<u32>,
    pub state: JobStateView,
    /// `"any"` or the pinned resource UUID.
    pub target: String,
    pub step: u32,
    pub steps: u32,
    pub runs: u32,
    #[serde(with = "serde_rfc3339")]
    pub created_at: Millis,
    #[serde(with = "serde_rfc3339")]
    pub updated_at: Millis,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobList {
    pub api_version: u32,
    pub machine: MachineId,
    pub jobs: Vec<JobSummary>,
}

/// One attempt in a job's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub task: TaskId,
    pub run_number: u32,
    pub step: u32,
    pub resource: ResourceId,
    pub status: RunStatus,
    pub resume: bool,
    pub stop_cause: Option<StopCause>,
    #[serde(with = "serde_rfc3339::option")]
    pub started_at: Option<Millis>,
    #[serde(with = "serde_rfc3339::option")]
    pub ended_at: Option<Millis>,
    /// The raw exit as the worker recorded it (`{"kind":"exit","code":0}`, ...).
    pub process: Option<Value>,
    /// The cleanup result (`{"result":"clean"}` or a failure record).
    pub cleanup: Option<Value>,
}

/// `resource job show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDetail {
    pub api_version: u32,
    pub machine: MachineId,
    pub id: JobId,
    pub name: String,
    pub priority: Priority,
    pub position: Option<u32>,
    pub state: JobStateView,
    pub target: String,
    pub step: u32,
    pub steps: u32,
    #[serde(with = "serde_rfc3339")]
    pub created_at: Millis,
    #[serde(with = "serde_rfc3339")]
    pub updated_at: Millis,
    pub thread: ThreadId,
    pub spec: Value,
    pub active_run: Option<TaskId>,
    pub runs: Vec<RunView>,
    pub last_stop_cause: Option<StopCause>,
    pub events: Vec<Value>,
}

/// The answer to `resource job submit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitResult {
    pub api_version: u32,
    pub job: JobId,
    pub machine: MachineId,
    pub state: String,
    pub priority: Priority,
    pub position: Option<u32>,
}

/// The answer to `resource job move`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoveResult {
    pub api_version: u32,
    pub job: JobId,
    pub priority: Priority,
    pub position: u32,
}

/// The answer to `resource job cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum CancelResult {
    Cancelled,
    Stopping { resource: ResourceId, task: TaskId },
    AlreadyTerminal { state: String },
}

/// `daemon status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    pub api_version: u32,
    /// `"up"` when the socket answered, `"down"` otherwise.
    pub socket: String,
    pub pid: Option<u32>,
    pub home: String,
    pub web: Option<String>,
    pub in_flight: u64,
    pub version: String,
    pub machine: Option<MachineId>,
}

/// The body of `POST /v1/resources`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub name: String,
    #[serde(default)]
    pub device: Option<u32>,
}

/// `POST /v1/jobs/{job}/move`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    pub operation_id: crate::ids::OperationId,
    pub placement: Placement,
}

/// Where a move puts a job. Every field is optional on the wire so that contradictions can be
/// refused with a reason rather than a parse error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub front: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub back: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<JobId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<JobId>,
}

/// `POST /v1/jobs/{job}/cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    pub operation_id: crate::ids::OperationId,
}

/// `POST /v1/release`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    pub operation_id: crate::ids::OperationId,
    pub attention: AttentionId,
}

/// The answer to `resource release`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseResult {
    pub api_version: u32,
    pub resource: ResourceId,
    pub attention: AttentionId,
}

/// `GET /v1/tasks/{task}/log`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskLog {
    pub api_version: u32,
    pub task: TaskId,
    pub log: String,
    pub truncated: bool,
}

/// What the submitting CLI captured about its side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submitter {
    /// `PATH`, used to resolve step programs now and as the run's `PATH` later.
    pub path: Option<String>,
    /// `HOME`, the run's `HOME`.
    pub home: Option<String>,
    /// The working directory a relative `cwd` is taken from.
    pub cwd: std::path::PathBuf,
    /// `HOMEBASED_TASK_ID` when a run submits follow-up work.
    #[serde(default)]
    pub parent_task: Option<TaskId>,
}

/// `POST /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub job: JobId,
    pub spec: Value,
    pub submitter: Submitter,
    #[serde(default)]
    pub allow_other_thread: bool,
}
