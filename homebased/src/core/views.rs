//! The read shapes of SPEC section 9, built from the store. `wire_bytes` (tests) holds the
//! bytes of a run's process and cleanup, an Attention's failure and a job's events as
//! literals.

use super::Core;
use crate::lifecycle::RunPhase;
use crate::store::events;
use crate::store::jobs::{self, JobHead};
use crate::store::resources::{self, Resource};
use crate::store::runs::{self, Run};
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::ids::JobId;
use homebased_shared::wire::{
    ActiveRunView, DaemonStatus, GpuView, JobDetail, JobLink, JobStateView, JobSummary, JobTarget,
    ResourceList, ResourceView, RunView, StorageStatus,
};

/// See [`Core::job_listing`].
pub struct JobListing {
    pub machine: homebased_shared::ids::MachineId,
    pub resource_names: std::collections::BTreeMap<homebased_shared::ids::ResourceId, String>,
    pub heads: ListedHeads,
    pub reasons: Reasons,
}

/// The open jobs' heads, read from the listing's snapshot.
pub struct ListedHeads {
    snapshot: crate::store::ReadSnapshot,
}

/// Why each listed job waits: the last pass, shared.
#[derive(Clone)]
pub struct Reasons {
    last_pass: Option<std::sync::Arc<super::pass::LastPass>>,
}

impl ListedHeads {
    /// Each open job's head in serving order, until `visit` answers `false`.
    pub fn visit(&self, visit: impl FnMut(JobHead) -> bool) -> ApiResult<()> {
        jobs::visit_open(self.snapshot.db(), visit)
    }
}

impl Reasons {
    /// A listed job as `resource jobs` shows it, with why it waits.
    pub fn summary(&self, head: &JobHead) -> JobSummary {
        JobSummary {
            waiting: self
                .last_pass
                .as_ref()
                .and_then(|last| last.waiting_of(head)),
            ..job_summary(head)
        }
    }
}

impl Core {
    pub(super) fn resource_list(&self) -> ApiResult<ResourceList> {
        self.readings.resources_read_at.mark(self.clock.now_ms());
        let db = self.store.db();
        let holding = runs::list_holding(db)?;
        let holds = crate::store::attentions::lane_holds(db)?;
        let resources = resources::list(db)?
            .into_iter()
            .map(|r| {
                let run = holding.iter().find(|run| run.holds(r.id));
                let hold = holds.iter().find(|hold| hold.resources.contains(&r.id));
                let mut view = resource_view(r, run);
                if let (None, Some(hold)) = (&view.run, hold) {
                    view.run = Some(super::unknown_runs::hold_view(hold));
                }
                if let (Some(gpu), Some(sample)) = (view.gpu.as_mut(), &self.readings.gpu_sample) {
                    gpu.sampled_at = Some(sample.at);
                    let mut errors = Vec::new();
                    match &sample.processes {
                        Ok(by_lane) => {
                            gpu.processes =
                                Some(by_lane.get(&view.id).cloned().unwrap_or_default());
                        }
                        Err(e) => errors.push(e.clone()),
                    }
                    if let Err(e) = &sample.states {
                        errors.push(format!("card state: {e}"));
                    }
                    let slice = matches!(view.device, Some(homebased_shared::wire::Device::Mig(_)));
                    if let Some(state) = gpu
                        .uuid
                        .as_deref()
                        .and_then(|uuid| sample.lane_state(view.id, uuid, slice))
                    {
                        gpu_state(gpu, &state);
                    }
                    gpu.sample_error = (!errors.is_empty()).then(|| errors.join("; "));
                }
                view
            })
            .collect();
        Ok(ResourceList {
            machine: self.machine,
            resources,
            lanes_from: self.facts.lanes_from.clone(),
        })
    }

    /// The lanes the GPU sampler attributes to: indexed detected lanes with a known card,
    /// and the run holding each.
    pub(super) fn gpu_lanes(&self) -> Vec<crate::sampler::Lane> {
        let db = self.store.db();
        let (Ok(holding), Ok(all)) = (runs::list_holding(db), resources::list(db)) else {
            return Vec::new();
        };
        all.into_iter()
            .filter(|r| r.device.is_some() || r.mig.is_some())
            .filter_map(|r| {
                let gpu_uuid = r.gpu.as_ref()?.uuid.clone()?;
                let run = holding.iter().find(|run| run.holds(r.id));
                Some(crate::sampler::Lane {
                    resource: r.id,
                    gpu_uuid,
                    card_uuid: r.mig_card.clone(),
                    run: run.map(|run| crate::sampler::LaneRun {
                        job: run.job,
                        task: run.task,
                        worker_pid: None,
                        pgid: None,
                    }),
                })
            })
            .collect()
    }

    /// `resource jobs` as the core stands now, to be read on another thread: a read snapshot
    /// of the store and the last pass's reasons, taken together so that no change falls
    /// between them. A listing of 100,000 jobs then holds up no submit or pass.
    pub(super) fn job_listing(&self) -> ApiResult<JobListing> {
        let resource_names = resources::list(self.store.db())?
            .into_iter()
            .map(|r| (r.id, r.name))
            .collect();
        Ok(JobListing {
            machine: self.machine,
            resource_names,
            heads: ListedHeads {
                snapshot: self.store.snapshot()?,
            },
            reasons: Reasons {
                last_pass: self.last_pass.clone(),
            },
        })
    }

    pub(super) fn job_detail(&self, id: JobId) -> ApiResult<JobDetail> {
        let db = self.store.db();
        let job = jobs::require(db, id)?;
        let spec = self.specs.get(db, id)?;
        let history = runs::list_for_job(db, id)?;
        let active_run = history
            .iter()
            .find(|r| r.phase.as_ref().is_some_and(RunPhase::is_live))
            .map(|r| r.task);
        let summary = job_summary(&job);
        Ok(JobDetail {
            machine: self.machine,
            id: summary.id,
            name: summary.name,
            priority: summary.priority,
            position: summary.position,
            state: summary.state,
            target: summary.target,
            gpus: summary.gpus,
            step: summary.step,
            steps: summary.steps,
            created_at: summary.created_at,
            updated_at: summary.updated_at,
            waiting: self.waiting_of(&job),
            thread: job.thread,
            spec: homebased_shared::spec::canonical(&spec)?,
            active_run,
            runs: history.iter().map(run_view).collect(),
            last_stop_cause: job.last_stop_cause,
            dependencies: spec
                .after
                .iter()
                .map(|named| link(db, *named))
                .collect::<ApiResult<_>>()?,
            dependents: crate::store::dependencies::dependents(db, id)?
                .into_iter()
                .map(|(job, _)| link(db, job))
                .collect::<ApiResult<_>>()?,
            events: events::list_for_job(db, id)?,
            origin: job.origin,
        })
    }

    /// The environment stored with the job (`job show --env`).
    pub(super) fn job_environment(
        &self,
        id: JobId,
    ) -> ApiResult<homebased_shared::wire::JobEnvironment> {
        let job = jobs::require(self.store.db(), id)?;
        Ok(homebased_shared::wire::JobEnvironment {
            job: id,
            environment: job.env.clone(),
        })
    }

    /// A run's `output.log`, bounded like `task log --tail`.
    pub(super) fn task_log(
        &self,
        task: homebased_shared::ids::TaskId,
        tail: Option<usize>,
        raw: bool,
    ) -> ApiResult<homebased_shared::wire::TaskLog> {
        if runs::get(self.store.db(), task)?.is_none() {
            return Err(ApiError::new(
                homebased_shared::error::ErrorCode::TaskNotFound,
                format!("no run {task} on this machine"),
            )
            .with_input(serde_json::json!({ "task": task })));
        }
        let path = homebased_shared::rundir::RunDir::new(self.home.task_dir(task)).output_log();
        let read = if raw {
            homebased_shared::tail::read_tail
        } else {
            homebased_shared::tail::read_tail_rendered
        };
        // A refused log (a link or a FIFO the workload put there) is this request's error
        // only: nothing is followed, and the daemon and its other runs go on.
        let (log, truncated) =
            read(&path, tail).map_err(|e| homebased_shared::tail::unreadable(&path, &e))?;
        Ok(homebased_shared::wire::TaskLog {
            task,
            log,
            truncated,
        })
    }

    /// One chunk of a run's `output.log` after a follower's place (`TaskLogChunk`).
    pub(super) fn task_log_chunk(
        &self,
        task: homebased_shared::ids::TaskId,
        offset: u64,
        shift: u64,
    ) -> ApiResult<homebased_shared::wire::TaskLogChunk> {
        use homebased_shared::{output_cap, tail};
        if runs::get(self.store.db(), task)?.is_none() {
            return Err(ApiError::new(
                homebased_shared::error::ErrorCode::TaskNotFound,
                format!("no run {task} on this machine"),
            )
            .with_input(serde_json::json!({ "task": task })));
        }
        let dir = homebased_shared::rundir::RunDir::new(self.home.task_dir(task));
        let path = dir.output_log();
        let unreadable = |e: std::io::Error| tail::unreadable(&path, &e);
        let Some(file) = tail::open_if_written(&path).map_err(unreadable)? else {
            return Ok(homebased_shared::wire::TaskLogChunk {
                task,
                log: String::new(),
                end: offset,
                shift,
            });
        };
        let limit = dir.read_run().ok().map(|run| run.output_limit);
        let mut buf = vec![0; tail::FOLLOW_CHUNK];
        let (n, place) =
            output_cap::read_after(&file, limit, output_cap::Place { offset, shift }, &mut buf)
                .map_err(unreadable)?;
        // A whole character at the end: one cut by the chunk is read again next time.
        let whole = match std::str::from_utf8(&buf[..n]) {
            Ok(_) => n,
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => n,
        };
        Ok(homebased_shared::wire::TaskLogChunk {
            task,
            log: String::from_utf8_lossy(&buf[..whole]).into_owned(),
            end: place.offset + whole as u64,
            shift: place.shift,
        })
    }

    pub(super) fn status(&self) -> ApiResult<DaemonStatus> {
        Ok(DaemonStatus {
            socket: "up".into(),
            pid: Some(self.facts.pid),
            home: self.home.root().display().to_string(),
            web: self.facts.web.clone(),
            in_flight: jobs::count_in_flight(self.store.db())?,
            version: env!("CARGO_PKG_VERSION").into(),
            machine: Some(self.machine),
            name: Some(self.machine_name().to_string()),
            run_dirs: self.readings.run_dir_usage.last(),
            daemon: None,
            storage: Some(match &self.storage {
                None => StorageStatus::default(),
                Some(fault) => StorageStatus {
                    available: false,
                    since: Some(fault.since),
                    error: Some(fault.error.clone()),
                },
            }),
        })
    }
}

pub fn resource_view(r: Resource, run: Option<&Run>) -> ResourceView {
    let run = run.and_then(|run| {
        run.phase.as_ref().map(|phase| ActiveRunView {
            job: run.job,
            task: run.task,
            run_number: run.run_number,
            step: run.step,
            resume: run.resume,
            phase: phase.view(),
        })
    });
    // Only an indexed detected lane, or a MIG slice, is a known card.
    let device = r.cuda_device();
    let gpu = match (r.origin, r.device.is_some() || r.mig.is_some()) {
        (homebased_shared::wire::ResourceOrigin::Detected, true) => {
            let identity = r.gpu.as_ref();
            Some(GpuView {
                uuid: identity.and_then(|g| g.uuid.clone()),
                model: identity.and_then(|g| g.model.clone()),
                changed: identity.is_some_and(|g| g.changed),
                sampled_at: None,
                processes: None,
                sample_error: Some("not sampled yet".into()),
                memory_used_mib: None,
                memory_total_mib: None,
                utilization_percent: None,
                temperature_c: None,
                power_w: None,
            })
        }
        _ => None,
    };
    ResourceView {
        id: r.id,
        name: r.name,
        device,
        origin: r.origin,
        run,
        gpu,
    }
}

pub fn job_state_view(job: &JobHead) -> JobStateView {
    match &job.state {
        jobs::JobState::Queued { resume, .. } => JobStateView::Queued { resume: *resume },
        jobs::JobState::Active { lanes, .. } => JobStateView::Active {
            resource: lanes.first(),
            resources: lanes.all().to_vec(),
        },
        jobs::JobState::Succeeded => JobStateView::Succeeded,
        jobs::JobState::Failed { run } => JobStateView::Failed { run: *run },
        jobs::JobState::Cancelled => JobStateView::Cancelled,
    }
}

pub fn job_summary(job: &JobHead) -> JobSummary {
    JobSummary {
        id: job.id,
        name: job.name.clone(),
        priority: job.priority,
        position: job.state.position(),
        state: job_state_view(job),
        target: job_target(job),
        gpus: job.gpus,
        step: job.step,
        steps: job.steps,
        runs: job.runs,
        created_at: job.created_at,
        updated_at: job.updated_at,
        waiting: None,
    }
}

/// Where a job may run, as the wire says it.
pub fn job_target(job: &JobHead) -> JobTarget {
    match (job.target, job.target_lanes.is_empty()) {
        (_, false) => JobTarget::Lanes(job.target_lanes.clone()),
        (Some(lane), true) => JobTarget::Lane(lane),
        (None, true) => JobTarget::Any,
    }
}

pub fn run_view(run: &Run) -> RunView {
    RunView {
        task: run.task,
        run_number: run.run_number,
        step: run.step,
        resource: run.first_lane(),
        resources: run.lanes.clone(),
        status: run.status(),
        resume: run.resume,
        stop_cause: run.stop.map(|s| s.cause),
        started_at: run.started_at,
        ended_at: run.ended_at(),
        process: run.ended.as_ref().and_then(|e| e.process.clone()),
        cleanup: run.cleanup().cloned(),
        gpu_memory_peak_mib: run.gpu_memory_peak_mib,
    }
}

/// A card's sampled state on its lane's view.
fn gpu_state(gpu: &mut GpuView, state: &crate::sampler::GpuState) {
    gpu.memory_used_mib = state.memory_used_mib;
    gpu.memory_total_mib = state.memory_total_mib;
    gpu.utilization_percent = state.utilization_percent;
    gpu.temperature_c = state.temperature_c;
    gpu.power_w = state.power_w;
}

impl Core {
    /// What `/metrics` reads from the core: the counters (shared, rendered off the core) and
    /// the gauges' data. As cheap as `resource list`: the lanes with the runs and holds on them,
    /// two counts through partial indexes, and the sampler's last sample. Like `resource
    /// list`, it keeps the GPU sampler awake.
    pub(super) fn metrics(
        &self,
    ) -> ApiResult<(crate::metrics::Counters, crate::metrics::Snapshot)> {
        self.readings.resources_read_at.mark(self.clock.now_ms());
        let db = self.store.db();
        let holding = runs::list_holding(db)?;
        let all = resources::list(db)?;
        let lanes: Vec<_> = all
            .iter()
            .filter(|r| {
                (r.device.is_some() || r.mig.is_some())
                    && r.origin == homebased_shared::wire::ResourceOrigin::Detected
            })
            .map(|r| (r.id, r.name.clone()))
            .collect();
        let gpu = match self.readings.gpu_sample.as_ref().map(|s| &s.processes) {
            Some(Ok(by_lane)) => crate::metrics::foreign(&lanes, by_lane),
            // Not sampled yet, or the sample failed: no number rather than a wrong 0.
            _ => Vec::new(),
        };
        let gpu_state = match self.readings.gpu_sample.as_ref() {
            Some(sample) => all
                .iter()
                .filter(|r| {
                    (r.device.is_some() || r.mig.is_some())
                        && r.origin == homebased_shared::wire::ResourceOrigin::Detected
                })
                .filter_map(|r| {
                    let uuid = r.gpu.as_ref()?.uuid.as_deref()?;
                    let state = sample.lane_state(r.id, uuid, r.mig.is_some())?;
                    Some(crate::metrics::GpuStateSeries::of(&r.name, uuid, &state))
                })
                .collect(),
            None => Vec::new(),
        };
        // A lane held for a live run the store does not know is in Attention too, every lane
        // of that hold (`resource list` shows the same).
        let holds = crate::store::attentions::lane_holds(db)?;
        let resources = all
            .into_iter()
            .map(|r| {
                let phase = holding
                    .iter()
                    .find(|run| run.holds(r.id))
                    .and_then(|run| run.phase.as_ref())
                    .map(RunPhase::kind)
                    .or_else(|| {
                        holds
                            .iter()
                            .any(|hold| hold.resources.contains(&r.id))
                            .then_some(homebased_shared::queue::PhaseKind::Attention)
                    });
                (r.name, phase)
            })
            .collect();
        let snapshot = crate::metrics::Snapshot {
            resources,
            jobs: jobs::count_open(db)?,
            events_pending: events::count_pending(db)?,
            storage_unavailable: self.storage.is_some(),
            reserved_resources: self
                .last_pass
                .as_ref()
                .map_or(0, |pass| pass.reserved_lanes()),
            gpu,
            gpu_state,
            peers: Vec::new(),
        };
        Ok((self.readings.metrics.clone(), snapshot))
    }
}

fn link(db: crate::store::Db, job: JobId) -> ApiResult<JobLink> {
    let found = crate::store::dependencies::link(db, job)?;
    Ok(JobLink {
        job,
        name: found.as_ref().map(|(name, _)| name.clone()),
        state: found.map(|(_, state)| state),
    })
}

/// The most events one read of a thread answers (`GET /v1/threads/{thread}/events`); the
/// cursor carries the reader on to the rest.
pub const THREAD_BATCH: u32 = 256;

impl Core {
    /// The events of `thread` recorded after the cursor `after`, each with its own cursor.
    pub(super) fn thread_events(
        &self,
        thread: homebased_shared::ids::ThreadId,
        after: u64,
    ) -> ApiResult<
        Vec<(
            u64,
            homebased_shared::wire::Versioned<homebased_shared::event::Event>,
        )>,
    > {
        events::for_thread(self.store.db(), thread, after, THREAD_BATCH)
    }
}

#[cfg(test)]
mod wire_bytes;
