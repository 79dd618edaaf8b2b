//! Launching: reserve a free lane for a queued job in one transaction (job active, run
//! `launching`, a new task UUID), then create the run directory and start the worker. A
//! launch whose worker never confirms is abandoned by the lifecycle: the job returns to its
//! slot, no event.

use super::Core;
use crate::lifecycle::{CommittedStop, Observation};
use crate::scheduler::{self, Launch, Stop};
use crate::store::runs::{self, Reservation};
use crate::supervisor::launcher::RunNames;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::rundir::{LaunchStamps, RunSpec};
use homebased_shared::spec::{JobSpec, Step};
use homebased_shared::time::now_us;
use std::time::{Duration, Instant};

/// How long a reserved launch may wait for its worker to confirm.
pub const LAUNCH_CONFIRM_BOUND_MS: i64 = 10_000;

/// Holds launches back after a worker could not be started (a full disk, a missing worker
/// binary): the lane is given back at once, and without this the pass that follows would
/// try again at once, in a tight loop, for as long as the fault lasts.
#[derive(Debug, Default)]
pub(super) struct LaunchBackoff {
    failures: u32,
    until: Option<Instant>,
}

impl LaunchBackoff {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(30);

    fn failed(&mut self, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        let doubled = Self::FIRST.saturating_mul(1 << self.failures.min(6).saturating_sub(1));
        self.until = Some(now + doubled.min(Self::MAX));
    }

    fn succeeded(&mut self) {
        *self = LaunchBackoff::default();
    }

    /// Launches wait.
    pub(super) fn holds(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// How long launches are still held back, if they are.
    pub(super) fn left(&self, now: Instant) -> Option<Duration> {
        self.until
            .filter(|until| now < *until)
            .map(|until| until - now)
    }

    /// Launches were held back and may go now: a pass is due.
    pub(super) fn is_over(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now >= until)
    }
}

/// A launch could not make its run directory: storage is unavailable from `since` until a
/// launch can again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StorageFault {
    pub since: homebased_shared::time::Millis,
    /// The last failure's error, the path included.
    pub error: String,
}

/// Why a reserved launch did not start.
enum StartFailure {
    /// Its run directory (or `run.json`) could not be made: storage, whatever the errno
    /// (`ENOSPC`, `EDQUOT`, `EROFS`, `EIO`, ...).
    RunDir(String),
    /// Anything else: an unreadable stored spec, a worker that could not be started.
    Other(ApiError),
}

impl Core {
    /// Starts the launches of one pass: every one is reserved first, the reservations are
    /// made durable together by one flush (ARCHITECTURE "Group commit"), and only then are
    /// their workers started, since a worker must never run for a reservation a machine
    /// crash could still undo. Lanes that freed together cost one flush, not one per run.
    pub(super) fn launch_all(&mut self, launches: Vec<Launch>) {
        let decided = now_us();
        let mut reserved = Vec::new();
        for launch in launches {
            match self
                .store
                .write_unsynced(|db| runs::reserve(db, launch.job, &launch.resources))
            {
                Ok(Some(r)) => reserved.push(r),
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(job = %launch.job, error = %e, "cannot reserve a launch");
                }
            }
        }
        if reserved.is_empty() {
            return;
        }
        if let Err(e) = self.store.sync() {
            tracing::error!(error = %e, "cannot make the launches' reservations durable; their lanes are given back");
            for r in &reserved {
                // As a worker that never started: nothing ran, the lane serves again.
                self.observe(r.task, true);
            }
            return;
        }
        // Durable now, and with them every commit before (the submit of this job, often):
        // their answers need not wait for the run directories and the workers.
        self.release_answers();
        let at = now_us();
        for r in reserved {
            self.start_reserved(
                &r,
                LaunchStamps {
                    decided,
                    reserved: at,
                },
            );
        }
    }

    fn start_reserved(&mut self, reserved: &Reservation, stamps: LaunchStamps) {
        let task = reserved.task;
        self.readings.metrics.run_started(
            reserved.job.priority,
            reserved.queued_since,
            reserved.reserved_at,
        );
        fail::fail_point!("launch.reserved", |_| std::process::abort());
        match self.start(reserved, stamps) {
            Ok(()) => self.launch_backoff.succeeded(),
            Err(StartFailure::RunDir(error)) => {
                tracing::error!(%task, job = %reserved.job.id, %error, "storage unavailable: cannot make the run directory; launches wait");
                self.readings.metrics.launch_storage_failed();
                let since = self
                    .storage
                    .as_ref()
                    .map_or_else(|| self.clock.now_ms(), |fault| fault.since);
                self.storage = Some(StorageFault { since, error });
                self.launch_backoff.failed(Instant::now());
                // Given back as a worker that never started; the pass that follows names
                // the reason the job waits.
                self.observe(task, true);
            }
            Err(StartFailure::Other(e)) => {
                tracing::error!(%task, job = %reserved.job.id, error = %e, "cannot start the worker; launches wait a moment");
                self.launch_backoff.failed(Instant::now());
                // Nothing of a worker that never started can run: the lane is given back.
                self.observe(task, true);
            }
        }
    }

    fn start(&mut self, r: &Reservation, stamps: LaunchStamps) -> Result<(), StartFailure> {
        let spec = self
            .specs
            .get(self.store.db(), r.job.id)
            .map_err(StartFailure::Other)?;
        let step = step_of(&spec, r.job.step).map_err(StartFailure::Other)?;
        let time_limit = super::time_limits::limit_of(r.job.time_limit);
        let run = RunSpec {
            task: r.task,
            job: r.job.id,
            run_number: r.run_number,
            step_index: r.job.step,
            resume: r.job.state.resume(),
            step,
            cwd: spec.cwd.clone(),
            path: r.job.env_path.clone(),
            user_home: r.job.env_home.clone(),
            environment: r.job.env.clone(),
            lanes: r.lanes.iter().map(run_lane).collect(),
            home: self.home.root().to_path_buf(),
            job_dir: self.home.job_state_dir(r.job.id),
            poke_socket: self.home.poke_socket(),
            protected_pids: vec![self.facts.protected()],
            cleanup: self.config.resource.cleanup,
            output_limit: self.config.resource.output_limit,
            time_limit,
            stamps: Some(stamps),
            stop_on_term: true,
        };
        let dir = self.launcher.create_run_dir(&run).map_err(|e| {
            StartFailure::RunDir(format!(
                "cannot create the run directory {}: {e}",
                self.home.task_dir(r.task).display()
            ))
        })?;
        if self.storage.take().is_some() {
            tracing::info!("storage available again: a run directory was made");
        }
        fail::fail_point!("launch.run-json-written", |_| std::process::abort());
        let names = RunNames {
            job: r.job.id,
            lanes: r.lanes.iter().map(|lane| lane.name.clone()).collect(),
        };
        self.launcher.start(&dir, r.task, &names).map_err(|e| {
            StartFailure::Other(ApiError::internal(format!(
                "cannot start homebased-worker: {e}"
            )))
        })?;
        fail::fail_point!("launch.worker-spawned", |_| std::process::abort());
        tracing::info!(
            task = %r.task, job = %r.job.id, resources = %run_lanes_text(r),
            run_number = r.run_number, step = r.job.step, resume = r.job.state.resume(),
            "launched"
        );
        Ok(())
    }

    /// Commits a preemptive stop decided by the scheduler, re-checked against the run as
    /// stored now, then enacts it.
    pub(super) fn preempt(&mut self, stop: Stop) {
        if let Err(e) = self.try_preempt(stop) {
            tracing::error!(task = %stop.task, error = %e, "cannot commit a stop");
        }
    }

    fn try_preempt(&mut self, stop: Stop) -> ApiResult<()> {
        let Some(run) = runs::get(self.store.db(), stop.task)? else {
            return Ok(());
        };
        let Some(crate::lifecycle::RunPhase::Executing { started_at }) = run.phase else {
            return Ok(());
        };
        if !run.holds(stop.resource) {
            return Ok(());
        }
        let preempt = self.specs.get(self.store.db(), run.job)?.preempt;
        let now = self.clock.now_ms();
        let cause_now =
            scheduler::stop_cause_now(preempt.mode, preempt.restart_within, started_at, now);
        if cause_now != Some(stop.cause) {
            return Ok(());
        }
        tracing::info!(task = %stop.task, cause = stop.cause.as_str(), for_job = %stop.for_job, "preempting");
        let request = CommittedStop {
            cause: stop.cause,
            requested_at: now,
            for_job: Some(stop.for_job),
        };
        self.advance(&run, [Observation::StopCommitted(request)])
    }
}

/// Step `index` of a job's spec.
pub(super) fn step_of(spec: &JobSpec, index: u32) -> ApiResult<Step> {
    spec.steps
        .get(index as usize)
        .cloned()
        .ok_or_else(|| ApiError::internal(format!("the job's spec has no step {index}")))
}

/// A lane as the worker hands it to the workload.
fn run_lane(lane: &crate::store::resources::Resource) -> homebased_shared::rundir::RunLane {
    homebased_shared::rundir::RunLane {
        name: lane.name.clone(),
        device: lane.device,
        mig: lane.mig.and_then(|place| {
            Some(homebased_shared::rundir::MigDevice {
                uuid: lane.gpu.as_ref()?.uuid.clone()?,
                gpu: place.gpu,
                instance: place.instance,
            })
        }),
    }
}

fn run_lanes_text(r: &Reservation) -> String {
    r.lanes
        .iter()
        .map(|lane| lane.name.as_str())
        .collect::<Vec<_>>()
        .join(",")
}
