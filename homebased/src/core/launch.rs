//! Launching: reserve a free lane for a queued job in one transaction (job active, run
//! `launching`, a new task UUID), then prepare the run directory and start the worker. A
//! launch whose worker never confirms is abandoned: the job returns to its slot, no event.

use super::Core;
use crate::scheduler::{self, Launch, Stop};
use crate::store::jobs::{self, Job};
use crate::store::resources::{self, Resource};
use crate::store::{runs, DbResult};
use crate::supervisor;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::event::EventKind;
use homebased_shared::ids::TaskId;
use homebased_shared::queue::{JobStatus, PhaseKind, StopCause};
use homebased_shared::rundir::RunSpec;
use homebased_shared::spec::JobSpec;
use homebased_shared::time::now_ms;

/// How long a reserved launch may wait for its worker to confirm.
pub const LAUNCH_CONFIRM_BOUND_MS: i64 = 10_000;

struct Reserved {
    job: Job,
    resource: Resource,
    task: TaskId,
    run_number: u32,
}

impl Core {
    pub(super) fn launch(&mut self, launch: Launch) {
        let reserved = match self.store.write(|tx| reserve(tx, launch)) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(job = %launch.job, error = %e, "cannot reserve a launch");
                return;
            }
        };
        let task = reserved.task;
        if let Err(e) = self.start(&reserved) {
            tracing::error!(%task, job = %reserved.job.id, error = %e, "cannot start the worker");
            self.abandon_launch(task);
        }
    }

    fn start(&mut self, r: &Reserved) -> ApiResult<()> {
        let spec: JobSpec =
            serde_json::from_value(r.job.spec.clone()).map_err(ApiError::internal)?;
        let step = spec
            .steps
            .get(r.job.step as usize)
            .cloned()
            .ok_or_else(|| {
                ApiError::internal(format!("job {} has no step {}", r.job.id, r.job.step))
            })?;
        let run = RunSpec {
            task: r.task,
            job: r.job.id,
            run_number: r.run_number,
            step_index: r.job.step,
            resume: r.job.resume,
            step,
            cwd: spec.cwd,
            path: r.job.env_path.clone(),
            user_home: r.job.env_home.clone(),
            resource_name: r.resource.name.clone(),
            device: r.resource.device,
            home: self.home.root().to_path_buf(),
            job_dir: self.home.job_state_dir(r.job.id),
            poke_socket: self.home.poke_socket(),
            protected_pids: vec![self.facts.pid],
            cleanup: self.config.resource.cleanup,
        };
        let dir = supervisor::prepare(&self.home, &run).map_err(|e| {
            ApiError::internal(format!(
                "cannot prepare the run directory of {}: {e}",
                r.task
            ))
        })?;
        let child = supervisor::start_worker(&dir)
            .map_err(|e| ApiError::internal(format!("cannot start homebased-worker: {e}")))?;
        tracing::info!(
            task = %r.task, job = %r.job.id, resource = %r.resource.name,
            run_number = r.run_number, step = r.job.step, resume = r.job.resume,
            "launched"
        );
        supervisor::watch(self.handle(), dir, r.task, Some(child));
        Ok(())
    }

    /// Ends a launch whose worker never confirmed and holds no lock: the job returns to its
    /// slot, same step, no event (or is cancelled, with its event, if a cancel came in
    /// meanwhile). If the worker got as far as `worker.json`, it may have started the
    /// workload before it died: the lane is then cleaned like a lost worker's before it
    /// serves again, rather than freed at once.
    pub(super) fn abandon_launch(&mut self, task: TaskId) {
        let dir = homebased_shared::rundir::RunDir::new(self.home.task_dir(task));
        let worker_started = dir.worker_json().exists();
        let machine = self.machine;
        let result = self.store.write(|tx| {
            let Some(run) = runs::get(tx, task)? else { return Ok(None) };
            if run.phase != Some(PhaseKind::Launching) {
                return Ok(None);
            }
            let now = now_ms();
            let phase = if worker_started { Some("cleaning") } else { None };
            tx.execute(
                "UPDATE runs SET phase = ?2, status = 'lost', ended_at = ?3, \
                 cleanup_attempt = 1 WHERE task = ?1",
                (task.to_string(), phase, now),
            )
            .db("abandon launch")?;
            let job = jobs::require(tx, run.job)?;
            if run.stop_cause == Some(StopCause::UserCancel) {
                jobs::finish(tx, &job, JobStatus::Cancelled, None)?;
                let at = crate::store::events::EventRun {
                    resource: run.resource,
                    task,
                    run_number: run.run_number,
                    step: run.step,
                };
                crate::store::events::append(
                    tx,
                    machine,
                    &job,
                    EventKind::JobCancelled,
                    Some(at),
                    Default::default(),
                )?;
            } else {
                tx.execute(
                    "UPDATE jobs SET state = 'queued', updated_at = ?2 WHERE id = ?1 AND state = 'active'",
                    (run.job.to_string(), now),
                )
                .db("abandon launch")?;
            }
            Ok(Some(run))
        });
        match result {
            Ok(Some(run)) => {
                tracing::warn!(%task, worker_started, "launch abandoned: the job returns to its slot");
                if worker_started {
                    if let Ok(Some(run)) = runs::get(self.store.conn(), run.task) {
                        self.clean_up_for_lost_worker(&run, &dir);
                    }
                }
                self.mark_dirty();
            }
            Ok(None) => {}
            Err(e) => tracing::error!(%task, error = %e, "cannot abandon a launch"),
        }
    }

    /// Commits a preemptive stop decided by the scheduler, re-checked against the run as
    /// stored now, then enacts it.
    pub(super) fn preempt(&mut self, stop: Stop) {
        let committed = self.store.write(|tx| {
            let Some(run) = runs::get(tx, stop.task)? else {
                return Ok(false);
            };
            if run.phase != Some(PhaseKind::Executing) || run.resource != stop.resource {
                return Ok(false);
            }
            let job = jobs::require(tx, run.job)?;
            let preempt = super::pass::preempt_of(&job)?;
            let started_at = run.started_at.unwrap_or(run.reserved_at);
            let now_cause = scheduler::stop_cause_now(
                preempt.mode,
                preempt.restart_within,
                started_at,
                now_ms(),
            );
            if now_cause != Some(stop.cause) {
                return Ok(false);
            }
            super::stop::commit(tx, &run, stop.cause, Some(stop.for_job))?;
            Ok(true)
        });
        match committed {
            Ok(true) => {
                tracing::info!(task = %stop.task, cause = stop.cause.as_str(), for_job = %stop.for_job, "preempting");
                self.enact_stop(stop.task);
            }
            Ok(false) => {}
            Err(e) => tracing::error!(task = %stop.task, error = %e, "cannot commit a stop"),
        }
    }
}

fn reserve(tx: &rusqlite::Transaction, launch: Launch) -> ApiResult<Option<Reserved>> {
    let Some(job) = jobs::get(tx, launch.job)? else {
        return Ok(None);
    };
    if job.status != JobStatus::Queued {
        return Ok(None);
    }
    let holding = runs::list_holding(tx)?;
    if holding
        .iter()
        .any(|r| r.resource == launch.resource || r.job == job.id)
    {
        return Ok(None);
    }
    let Some(resource) = resources::get(tx, launch.resource)? else {
        return Ok(None);
    };
    let task = TaskId::new();
    let run_number = job.runs + 1;
    let now = now_ms();
    tx.execute(
        "INSERT INTO runs (task, job, resource, run_number, step, resume, status, phase, reserved_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', 'launching', ?7)",
        (
            task.to_string(),
            job.id.to_string(),
            resource.id.to_string(),
            run_number,
            job.step,
            job.resume,
            now,
        ),
    )
    .db("reserve run")?;
    tx.execute(
        "UPDATE jobs SET state = 'active', runs = ?2, updated_at = ?3 WHERE id = ?1",
        (job.id.to_string(), run_number, now),
    )
    .db("reserve run")?;
    Ok(Some(Reserved {
        job,
        resource,
        task,
        run_number,
    }))
}
