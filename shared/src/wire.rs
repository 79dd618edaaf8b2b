//! The JSON shapes of SPEC sections 9 and 11, shared by the daemon (which answers with them)
//! and every client of the API (the CLI now, Fleet forwarding next): one request type and
//! one answer type per verb, and the envelope that versions every answer.
//!
//! - [`envelope`]: [`Versioned`], which writes `api_version` once for every answer.
//! - [`resources`]: `resource list`, `register` and `release`.
//! - [`jobs`]: `resource jobs` and `job show`.
//! - [`runs`]: a run's records as stored and shown: its cleanup result and an Attention's
//!   failure (its process's end is the worker's own [`crate::rundir::ExitReason`]).
//! - [`job_writes`]: `job submit`, `move` and `cancel`.
//! - [`fleet`]: a machine's identity and the Fleet peer directory.
//! - [`daemon`]: `daemon status`, the shutdown request and `task log`.
//! - [`strict`]: reading untrusted JSON (UTF-8 first, duplicate keys refused with a pointer).
//! - [`sorted_keys`]: writing a typed record with its keys sorted, as the `Value` it was
//!   written as before it was typed.
//!
//! [`MAX_BODY_BYTES`] is the one request-body limit: the daemon refuses larger bodies and the
//! CLI refuses to send them.

pub mod daemon;
pub mod envelope;
pub mod fleet;
pub mod job_writes;
pub mod jobs;
pub mod resources;
pub mod runs;
pub mod sorted_keys;
pub mod strict;

/// The header a forwarding daemon adds: the machine the request comes from. Here, with the
/// other shapes both ends share, so that the client that sends it and the daemon's Fleet that
/// checks it each import it from below rather than from each other.
pub const ORIGIN_HEADER: &str = "x-homebased-origin";

/// The largest request body the daemon reads, and the CLI sends: a spec at its own limit
/// ([`crate::spec::MAX_SPEC_BYTES`]) plus room for what the submitter's side adds (`PATH`,
/// `HOME`, the working directory), which the kernel bounds far below this.
pub const MAX_BODY_BYTES: usize = crate::spec::MAX_SPEC_BYTES + 256 * 1024;

/// The refusal of a body over [`MAX_BODY_BYTES`] (`size`, when known), the same from the CLI
/// and the daemon: `invalid_spec` for a submit, whose body is mostly the spec, else `usage`.
pub fn body_too_large(submit: bool, size: Option<usize>) -> crate::error::ApiError {
    use crate::error::{ApiError, ErrorCode};
    let what = match size {
        Some(n) => format!("the request body is {n} bytes"),
        None => "the request body is larger".to_string(),
    };
    let message = format!("{what}, over the limit of {MAX_BODY_BYTES} bytes");
    if submit {
        ApiError::new(ErrorCode::InvalidSpec, message).with_input(
            serde_json::json!({ "pointer": "", "value": null, "limit_bytes": MAX_BODY_BYTES }),
        )
    } else {
        ApiError::new(ErrorCode::Usage, message)
            .with_input(serde_json::json!({ "limit_bytes": MAX_BODY_BYTES }))
    }
}

pub use daemon::{
    DaemonDown, DaemonStatus, PruneRequest, PruneResult, RunDirUsage, SeedRequest, Seeded, Settled,
    ShutdownResult, StorageStatus, TaskLog, TaskLogChunk, ThreadEvents,
};
pub use envelope::Versioned;
pub use fleet::{
    AddPeerRequest, Answered, FleetEvent, FleetEvents, FleetSubmitRequest, Identity, MachineList,
    MachineView, NewerEvent, PeerRequest, PeerSource, PeerState, ProtocolRange, RelayedEvent,
    RemovedPeer,
};
pub use job_writes::{
    CancelRequest, CancelResult, MoveRequest, MoveResult, Placement, SubmitRequest, SubmitResult,
    Submitter,
};
pub use jobs::{
    JobDetail, JobEnvironment, JobLink, JobList, JobStateView, JobSummary, JobTarget, RunView,
    Waiting, WaitingBlocker,
};
pub use resources::{
    ActiveRunView, Device, GpuProcessView, GpuView, LanesFrom, LanesSource, PhaseView,
    QueueProcessOwner, RegisterRequest, ReleaseRequest, ReleaseResult, ResourceList,
    ResourceOrigin, ResourceView,
};
pub use runs::{AttentionFailure, CleanupResult, UnknownLiveRun};
