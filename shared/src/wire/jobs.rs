//! Reading the queue: `resource jobs` and `resource job show`.

use crate::ids::{JobId, MachineId, ResourceId, TaskId, ThreadId};
use crate::queue::{Priority, RunStatus, StopCause};
use crate::time::{serde_rfc3339, Millis};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
