//! Changing the queue: `resource job submit`, `move` and `cancel`, one request and one answer
//! type per verb.

use crate::ids::{JobId, MachineId, OperationId, ResourceId, TaskId};
use crate::queue::Priority;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// The submitting CLI's whole environment, which host steps run with (SPEC section 5).
    /// Absent when the submission comes through Fleet: the authority's daemon environment is
    /// used. Never part of the canonical spec or its digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
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
    /// `resource job submit --machine M`: the machine to submit to (it must agree with the
    /// spec's `machine` if both are given). A peer makes it a remote submit (SPEC 13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

/// The answer to `resource job submit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitResult {
    pub job: JobId,
    pub machine: MachineId,
    pub state: String,
    pub priority: Priority,
    pub position: Option<u32>,
}

/// `POST /v1/jobs/{job}/move`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    pub operation_id: OperationId,
    pub placement: Placement,
}

/// Where a move puts a job. Every field is optional on the wire so that contradictions can be
/// refused with a reason rather than a parse error. Its schema is the MCP tool `job_move`'s.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
#[schemars(
    description = "Where the job goes: `front` or `back` of its level, another \
    `priority`, or `before` / `after` another job. Contradictions are refused with \
    `move_refused` and a reason."
)]
pub struct Placement {
    /// To the front of its level (of the `priority` given, else its own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub front: bool,
    /// To the back of its level (of the `priority` given, else its own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub back: bool,
    /// Another level: alone, the back of it; with `front` or `back`, that end of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// Just before this job, taking its level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<JobId>,
    /// Just after this job, taking its level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<JobId>,
}

/// The answer to `resource job move`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoveResult {
    pub job: JobId,
    pub priority: Priority,
    pub position: u32,
}

/// `POST /v1/jobs/{job}/cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    pub operation_id: OperationId,
}

/// The answer to `resource job cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum CancelResult {
    Cancelled,
    Stopping { resource: ResourceId, task: TaskId },
    AlreadyTerminal { state: String },
}
