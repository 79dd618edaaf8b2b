//! The daemon itself and a run's log: `daemon status`, `daemon stop` and `task log`.

use crate::ids::{JobId, MachineId, TaskId};
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
    /// This machine's name (`fleet.machine_name`, else from the host name): the dashboard
    /// names its machine from here, a read the Fleet token does not close, where
    /// `/v1/fleet/identity` is a machine-to-machine route behind it. Absent while the daemon
    /// is down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Disk used by run and job directories, as last measured off the core (`None`: not
    /// measured yet, or the daemon is down).
    #[serde(default)]
    pub run_dirs: Option<RunDirUsage>,
    /// Why no daemon answered, when none did (read from the home by the CLI); absent in a
    /// daemon's own answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonDown>,
    /// Whether launches can make their run directories (`None`: the daemon is down).
    #[serde(default)]
    pub storage: Option<StorageStatus>,
}

/// What the CLI finds when the socket does not answer (SPEC 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DaemonDown {
    /// No process holds `daemon.lock`.
    Stopped,
    /// The holder of `daemon.lock` does not answer on its socket in time (stopped, hung).
    Unresponsive,
    /// The holder of `daemon.lock` runs, but its socket is gone (deleted by hand).
    SocketMissing,
}

/// Storage as launches last found it (SPEC section 5): a launch that cannot make its run
/// directory holds every launch back, with its error, until one can.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageStatus {
    pub available: bool,
    /// Since when it is unavailable (ms since the epoch).
    #[serde(default)]
    pub since: Option<crate::time::Millis>,
    /// The failed launch's error, the path included.
    #[serde(default)]
    pub error: Option<String>,
}

impl Default for StorageStatus {
    fn default() -> Self {
        StorageStatus {
            available: true,
            since: None,
            error: None,
        }
    }
}

/// What `<home>/tasks` and `<home>/jobs` hold, measured by a walk at most every few minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunDirUsage {
    /// Bytes allocated on disk (blocks, not apparent sizes).
    pub bytes: u64,
    /// Run directories (`tasks/*`) and job directories (`jobs/*`).
    pub dirs: u64,
    /// When the walk ended (ms since the epoch): how fresh the figure is.
    pub measured_at: crate::time::Millis,
}

/// `POST /v1/history/prune` (socket only): remove, or with `dry_run` only list, finished
/// jobs that ended more than `older_than_ms` ago.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    pub older_than_ms: u64,
    #[serde(default)]
    pub dry_run: bool,
}

/// `POST /v1/internal/seed` (socket only, for benchmarks): `count` jobs like `submit` (each
/// under a new id), each submitted and cancelled through the core's own verbs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedRequest {
    pub count: u32,
    pub submit: super::SubmitRequest,
}

/// The answer to a seed request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seeded {
    pub jobs: u32,
}

/// What a prune removed (or, dry, would remove) and what it kept back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneResult {
    pub dry_run: bool,
    /// Jobs that ended before this instant (ms since the epoch) were considered.
    pub before: crate::time::Millis,
    pub jobs: u64,
    pub runs: u64,
    pub events: u64,
    pub run_dirs: u64,
    /// Stored results of old requests (cancel, move, release).
    pub operations: u64,
    /// Old enough, but an event of theirs is not delivered yet.
    pub kept_undelivered: u64,
    /// Old enough, but a run of theirs still holds a lane (Attention).
    pub kept_holding: u64,
    /// Old enough, but a run directory could not be removed (see the daemon log).
    pub kept_undeletable: u64,
    pub job_ids: Vec<JobId>,
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

/// `GET /v1/threads/{thread}/events?after=&wait=`: the thread's events recorded after the
/// cursor `after`, oldest first, from the daemon's store whatever the sink (the MCP tool
/// `events_wait`, `events --follow`); empty when none came within `wait`. `cursor` is opaque:
/// passed back as `after`, it answers what was recorded since.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadEvents {
    #[serde(serialize_with = "super::sorted_keys::serialize")]
    pub events: Vec<super::Versioned<crate::event::Event>>,
    pub cursor: String,
}

/// `GET /v1/tasks/{task}/log/chunk?offset=&shift=`: the bytes of a run's `output.log` after a
/// follower's place, at most one chunk (256 KiB), for following a log on another machine
/// (`resource job log --follow` of a remote job). `log` ends on a whole character; the next
/// request passes `end` and `shift` back. The bytes are as written (no carriage returns
/// applied): the follower renders them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskLogChunk {
    pub task: TaskId,
    pub log: String,
    /// The offset after `log`, to read from next.
    pub end: u64,
    /// What cuts of the log (SPEC section 5) the follower has seen, to pass back.
    pub shift: u64,
}
