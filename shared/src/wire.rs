//! The JSON shapes of SPEC sections 9 and 11, shared by the daemon (which answers with them)
//! and every client of the API (the CLI now, Fleet forwarding next): one request type and
//! one answer type per verb, and the envelope that versions every answer.
//!
//! - [`envelope`]: [`Versioned`], which writes `api_version` once for every answer.
//! - [`resources`]: `resource list`, `register` and `release`.
//! - [`jobs`]: `resource jobs` and `job show`.
//! - [`job_writes`]: `job submit`, `move` and `cancel`.
//! - [`daemon`]: `daemon status`, the shutdown request and `task log`.

pub mod daemon;
pub mod envelope;
pub mod job_writes;
pub mod jobs;
pub mod resources;

pub use daemon::{DaemonStatus, Settled, ShutdownResult, TaskLog};
pub use envelope::Versioned;
pub use job_writes::{
    CancelRequest, CancelResult, MoveRequest, MoveResult, Placement, SubmitRequest, SubmitResult,
    Submitter,
};
pub use jobs::{JobDetail, JobList, JobStateView, JobSummary, RunView};
pub use resources::{
    ActiveRunView, PhaseView, RegisterRequest, ReleaseRequest, ReleaseResult, ResourceList,
    ResourceOrigin, ResourceView,
};
