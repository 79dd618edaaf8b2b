//! What the core accepts: one typed method per verb, each naming its answer. The API, the
//! delivery loop, Fleet's tasks, the sampler and the supervisor's observer reach the core
//! only through these; the closures they send and the verb bodies stay private to the core.
//!
//! Methods that answer are `async` and wait for the core's turn (and for the commit to be
//! durable, `Core::answer`); methods that only tell the core something (`observe`,
//! `record_gpu_sample`, `nudge`) are posted and return at once. The groups follow
//! `client.rs`, whose routes most of them serve.

use super::fleet::Pulled;
use super::outbox::{Outcome, Round};
use super::{CoreHandle, JobListing};
use crate::clock::Clock;
use crate::store::peers::StoredPeer;
use crate::store::routes::{Answer, Route};
use homebased_shared::error::ApiResult;
use homebased_shared::event::Event;
use homebased_shared::ids::{JobId, MachineId, TaskId, ThreadId};
use homebased_shared::time::Millis;
use homebased_shared::wire::{
    CancelRequest, CancelResult, DaemonStatus, JobDetail, JobEnvironment, MoveRequest, MoveResult,
    PruneRequest, PruneResult, RegisterRequest, ReleaseRequest, ReleaseResult, ResourceList,
    ResourceView, SeedRequest, Seeded, Settled, SubmitRequest, SubmitResult, TaskLog, TaskLogChunk,
    Versioned,
};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Who this daemon is, as Fleet's directory needs it when it loads.
pub struct ThisMachine {
    pub machine: MachineId,
    /// `fleet.machine_name`, else from the host name.
    pub name: String,
    pub clock: Clock,
}

/// The daemon (`GET /v1/status`, `POST /v1/internal/settle`, `GET /metrics`).
impl CoreHandle {
    /// `daemon status`; `machine` is the `?machine=` asked, which must name this machine.
    pub async fn status(&self, machine: Option<String>) -> ApiResult<DaemonStatus> {
        self.call(move |core| {
            core.check_local_machine(machine.as_deref())?;
            core.status()
        })
        .await
    }

    /// Answers once the timers and a scheduling pass have run after every call before it.
    pub async fn settle(&self) -> ApiResult<Settled> {
        self.call(|core| core.settle()).await
    }

    /// Starts draining for the end of an allocation (`core::drain`); answers the runs left.
    pub async fn drain(&self) -> ApiResult<usize> {
        self.call(|core| core.drain()).await
    }

    /// The runs a drain still waits for.
    pub async fn runs_left(&self) -> ApiResult<usize> {
        self.call(|core| core.runs_left()).await
    }

    /// The counters since start and a snapshot of the gauges, rendered off the core.
    pub async fn metrics(&self) -> ApiResult<(crate::metrics::Counters, crate::metrics::Snapshot)> {
        self.call(|core| core.metrics()).await
    }

    /// This machine's UUID.
    pub async fn machine(&self) -> ApiResult<MachineId> {
        self.call(|core| Ok(core.machine())).await
    }

    pub async fn identity(&self) -> ApiResult<ThisMachine> {
        self.call(|core| {
            Ok(ThisMachine {
                machine: core.machine(),
                name: core.machine_name().to_string(),
                clock: core.clock().clone(),
            })
        })
        .await
    }

    /// Moves the clock ahead (test builds, `POST /v1/internal/clock`); answers how far ahead
    /// of the system clock it now is.
    #[cfg(feature = "failpoints")]
    pub async fn advance_clock(&self, by: Duration) -> ApiResult<Millis> {
        self.call(move |core| Ok(core.advance_clock(by))).await
    }

    /// Wakes the core thread for nothing, so that it sees its stop flag now.
    pub fn nudge(&self) {
        self.post(|_| {});
    }

    /// A call that panics on the core thread, as a bug would (the daemon's tests).
    #[cfg(test)]
    pub(crate) fn crash(&self) {
        self.post(|_| panic!("a bug in the core"));
    }
}

/// Resources (`/v1/resources`) and what the GPU sampler reads and posts.
impl CoreHandle {
    pub async fn resource_list(&self) -> ApiResult<ResourceList> {
        self.call(|core| core.resource_list()).await
    }

    /// `resource register` on this machine; `machine` is the `?machine=` asked.
    pub async fn register(
        &self,
        machine: Option<String>,
        req: RegisterRequest,
    ) -> ApiResult<ResourceView> {
        self.call(move |core| {
            core.check_local_machine(machine.as_deref())?;
            core.register(req)
        })
        .await
    }

    /// The lanes the sampler attributes processes to, for a thread outside the runtime: waits
    /// at most `within`, and answers `None` when the core did not answer (it is stopping).
    pub fn gpu_lanes_blocking(&self, within: Duration) -> Option<Vec<crate::sampler::Lane>> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.post(move |core| {
            let _ = tx.send(core.gpu_lanes());
        });
        rx.recv_timeout(within).ok()
    }

    pub fn record_gpu_sample(&self, sample: crate::sampler::Sample) {
        self.post(move |core| core.record_gpu_sample(sample));
    }
}

/// Jobs and their runs' logs (`/v1/jobs`, `/v1/tasks`, `/v1/release`).
impl CoreHandle {
    pub async fn submit(&self, req: SubmitRequest) -> ApiResult<SubmitResult> {
        self.call(move |core| core.submit(req)).await
    }

    /// A job another machine forwarded here, this machine its authority (SPEC 13).
    pub async fn submit_remote(
        &self,
        job: JobId,
        origin: MachineId,
        spec: serde_json::Value,
    ) -> ApiResult<SubmitResult> {
        self.call(move |core| core.submit_remote(job, origin, spec))
            .await
    }

    /// The rows of `job list` and `resource jobs`, read off the core (`api/listing.rs`).
    pub async fn job_listing(&self) -> ApiResult<JobListing> {
        self.call(|core| core.job_listing()).await
    }

    pub async fn job_detail(&self, job: JobId) -> ApiResult<JobDetail> {
        self.call(move |core| core.job_detail(job)).await
    }

    pub async fn job_environment(&self, job: JobId) -> ApiResult<JobEnvironment> {
        self.call(move |core| core.job_environment(job)).await
    }

    pub async fn move_job(&self, job: JobId, req: MoveRequest) -> ApiResult<MoveResult> {
        self.call(move |core| core.move_job(job, req)).await
    }

    pub async fn cancel(&self, job: JobId, req: CancelRequest) -> ApiResult<CancelResult> {
        self.call(move |core| core.cancel(job, req)).await
    }

    pub async fn release(&self, req: ReleaseRequest) -> ApiResult<ReleaseResult> {
        self.call(move |core| core.release(req)).await
    }

    pub async fn task_log(
        &self,
        task: TaskId,
        tail: Option<usize>,
        raw: bool,
    ) -> ApiResult<TaskLog> {
        self.call(move |core| core.task_log(task, tail, raw)).await
    }

    pub async fn task_log_chunk(
        &self,
        task: TaskId,
        offset: u64,
        shift: u64,
    ) -> ApiResult<TaskLogChunk> {
        self.call(move |core| core.task_log_chunk(task, offset, shift))
            .await
    }

    /// The thread's events after the cursor `after`, each with its own cursor.
    pub async fn thread_events(
        &self,
        thread: ThreadId,
        after: u64,
    ) -> ApiResult<Vec<(u64, Versioned<Event>)>> {
        self.call(move |core| core.thread_events(thread, after))
            .await
    }
}

/// History (`/v1/history/prune`, the benchmarks' `/v1/internal/seed`).
impl CoreHandle {
    /// `history prune`: many short calls, one batch each (`core/history.rs`).
    pub async fn prune(&self, req: PruneRequest) -> ApiResult<PruneResult> {
        super::history::prune(self, req).await
    }

    pub async fn seed(&self, req: SeedRequest) -> ApiResult<Seeded> {
        self.call(move |core| core.seed(req)).await
    }
}

/// Event delivery's outbox (`delivery.rs`, `core/outbox.rs`).
impl CoreHandle {
    /// The events to deliver now, skipping the jobs in `busy`, at most `room`.
    pub async fn outbox_take(&self, busy: HashSet<JobId>, room: usize) -> ApiResult<Round> {
        self.call(move |core| core.outbox_take(&busy, room)).await
    }

    /// Records an attempt's outcome; answers the time of the next attempt after a failure.
    pub async fn outbox_record(
        &self,
        job: JobId,
        seq: u32,
        outcome: Outcome,
    ) -> ApiResult<Option<Millis>> {
        self.call(move |core| core.outbox_record(job, seq, &outcome))
            .await
    }
}

/// Runs: what the supervisor's observer and the poke socket tell (`daemon.rs`).
impl CoreHandle {
    /// Reads the run directory of `task` again; `worker_gone` when its worker has exited.
    pub fn observe(&self, task: TaskId, worker_gone: bool) {
        self.post(move |core| core.observe(task, worker_gone));
    }
}

/// Fleet: the stored directory, remote jobs' routes, the events long poll and the pull.
impl CoreHandle {
    pub async fn fleet_stored_peers(&self) -> ApiResult<Vec<StoredPeer>> {
        self.call(|core| core.fleet_stored_peers()).await
    }

    /// Remembers an added peer; answers the UUID it is bound to, if any.
    pub async fn fleet_add(&self, address: String, at: Millis) -> ApiResult<Option<MachineId>> {
        self.call(move |core| core.fleet_add(&address, at)).await
    }

    /// Forgets an added peer; answers whether it was stored.
    pub async fn fleet_remove(&self, address: String) -> ApiResult<bool> {
        self.call(move |core| core.fleet_remove(&address)).await
    }

    /// Binds an address to the UUID it first answered with; answers the bound UUID.
    pub async fn fleet_bind(
        &self,
        address: String,
        machine: MachineId,
        at: Millis,
    ) -> ApiResult<MachineId> {
        self.call(move |core| core.fleet_bind(&address, machine, at))
            .await
    }

    /// Notified whenever events may have been appended (the long polls wait on it).
    pub async fn fleet_wake(&self) -> ApiResult<Arc<tokio::sync::Notify>> {
        self.call(|core| Ok(core.fleet_wake())).await
    }

    pub async fn fleet_acknowledge(&self, origin: MachineId, after: u64) -> ApiResult<()> {
        self.call(move |core| core.fleet_acknowledge(origin, after))
            .await
    }

    pub async fn fleet_events(&self, origin: MachineId, after: u64) -> ApiResult<Pulled> {
        self.call(move |core| core.fleet_events(origin, after))
            .await
    }

    pub async fn fleet_live_authorities(&self) -> ApiResult<Vec<MachineId>> {
        self.call(|core| core.fleet_live_authorities()).await
    }

    pub async fn fleet_cursor(&self, authority: MachineId) -> ApiResult<u64> {
        self.call(move |core| core.fleet_cursor(authority)).await
    }

    /// Stores events pulled from `authority`; answers how many were new.
    pub async fn fleet_store_pulled(
        &self,
        authority: MachineId,
        pulled: Pulled,
    ) -> ApiResult<usize> {
        self.call(move |core| core.fleet_store_pulled(authority, pulled))
            .await
    }

    /// The saved route of a remote job, if it has one.
    pub async fn route(&self, job: JobId) -> ApiResult<Option<Route>> {
        self.call(move |core| core.route(job)).await
    }

    /// Stores a remote submit's route before it is forwarded; answers it and whether this
    /// call created it.
    pub async fn route_open(
        &self,
        job: JobId,
        authority: MachineId,
        thread: ThreadId,
        digest: String,
    ) -> ApiResult<(Route, bool)> {
        self.call(move |core| core.route_open(job, authority, thread, &digest))
            .await
    }

    pub async fn route_answered(&self, job: JobId, answer: Answer) -> ApiResult<()> {
        self.call(move |core| core.route_answered(job, answer))
            .await
    }

    pub async fn route_forget(&self, job: JobId) -> ApiResult<()> {
        self.call(move |core| core.route_forget(job)).await
    }
}
