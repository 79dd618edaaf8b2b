//! The daemon itself and a run's log: `daemon status`, `daemon stop` and `task log`.

use crate::ids::{MachineId, TaskId};
use serde::{Deserialize, Serialize};

/// `daemon status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// `"up"` when the socket answered, `"down"` otherwise.
    pub socket: String,
    pub pid: Option<u32>,
    pub home: String,
    pub web: Option<String>,
    pub in_flight: u64,
    pub version: String,
    pub machine: Option<MachineId>,
}

/// The answer to `POST /v1/shutdown` (socket only): the daemon exits; running work goes on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShutdownResult {
    pub stopping: bool,
}

/// The answer to `POST /v1/internal/settle` (socket only, for tests and tools): the core
/// ran its timers and a scheduling pass after every request that came before this one, so
/// whatever those requests could cause has been decided and committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settled {
    /// Scheduling passes run since the daemon started.
    pub passes: u64,
}

/// `GET /v1/tasks/{task}/log`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskLog {
    pub task: TaskId,
    pub log: String,
    pub truncated: bool,
}
