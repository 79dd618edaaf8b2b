//! Observing runs: the worker's files are the truth, its poke and the lock watcher are only
//! hints. Each observation re-reads the run directory and moves the run forward: launching
//! to executing, the recorded end (with its job transition and event, in one transaction),
//! then cleaning to idle or Attention.

use super::classify::{classify, JobNext, RunEnd};
use super::Core;
use crate::store::events::{self, EventRun};
use crate::store::jobs;
use crate::store::runs::{self, Run};
use crate::store::DbResult;
use crate::supervisor;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::event::EventKind;
use homebased_shared::ids::{AttentionId, TaskId};
use homebased_shared::queue::{JobStatus, PhaseKind, RunStatus};
use homebased_shared::rundir::{CleanupRecord, ExitRecord, RunDir};
use homebased_shared::time::now_ms;
use serde_json::{json, Map, Value};

impl Core {
    /// Re-reads the run directory of `task` and applies what changed. `worker_gone` is true
    /// when the worker's lock was found free.
    pub fn observe(&mut self, task: TaskId, worker_gone: bool) {
        if let Err(e) = self.observe_run(task, worker_gone) {
            tracing::error!(%task, error = %e, "cannot apply a run observation");
        }
    }

    fn observe_run(&mut self, task: TaskId, worker_gone: bool) -> ApiResult<()> {
        let Some(run) = runs::get(self.store.conn(), task)? else {
            return Ok(());
        };
        if run.phase.is_none() || run.phase == Some(PhaseKind::Attention) {
            return Ok(());
        }
        let dir = RunDir::new(self.home.task_dir(task));
        let worker = dir.read_worker().unwrap_or_else(|e| {
            tracing::warn!(%task, error = %e, "unreadable worker.json");
            None
        });
        let exit = dir.read_exit().unwrap_or_else(|e| {
            tracing::warn!(%task, error = %e, "unreadable exit.json");
            None
        });
        let child_started = worker
            .as_ref()
            .and_then(|w| w.child.as_ref())
            .map(|c| c.started_at);

        if run.phase == Some(PhaseKind::Launching) {
            if child_started.is_some() || exit.is_some() {
                self.confirm(&run, child_started)?;
            } else if worker_gone {
                // The worker never confirmed and holds no lock: nothing of it can run.
                self.abandon_launch(task);
                return Ok(());
            } else {
                return Ok(());
            }
        }
        let Some(run) = runs::get(self.store.conn(), task)? else {
            return Ok(());
        };
        if run.status == RunStatus::Running {
            if let Some(exit) = &exit {
                self.apply_end(&run, RunEnd::Recorded(exit.reason.clone()), Some(exit))?;
            } else if worker_gone {
                self.apply_end(&run, RunEnd::Lost, None)?;
            } else {
                return Ok(());
            }
        }
        let Some(run) = runs::get(self.store.conn(), task)? else {
            return Ok(());
        };
        if run.phase != Some(PhaseKind::Cleaning) {
            return Ok(());
        }
        let cleanup = dir.read_cleanup().unwrap_or_else(|e| {
            tracing::warn!(%task, error = %e, "unreadable cleanup.json");
            None
        });
        match cleanup {
            Some(record) if record.attempt >= run.cleanup_attempt => {
                self.finish_cleanup(&run, &record)
            }
            Some(record) => Err(ApiError::new(
                homebased_shared::error::ErrorCode::StaleRun,
                format!(
                    "cleanup attempt {} of {task} is older than attempt {}",
                    record.attempt, run.cleanup_attempt
                ),
            )),
            None if worker_gone => {
                self.clean_up_for_lost_worker(&run, &dir);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// The worker confirmed: launching becomes executing (or stopping, if a stop was
    /// committed while it launched; that stop is enacted now).
    fn confirm(&mut self, run: &Run, child_started: Option<i64>) -> ApiResult<()> {
        let started = child_started.unwrap_or_else(now_ms);
        let phase = if run.stop_cause.is_some() {
            PhaseKind::Stopping
        } else {
            PhaseKind::Executing
        };
        self.store.write(|tx| {
            tx.execute(
                "UPDATE runs SET phase = ?2, started_at = ?3, workload_started_at = ?4 \
                 WHERE task = ?1 AND phase = 'launching'",
                (run.task.to_string(), phase.as_str(), started, child_started),
            )
            .db("confirm run")?;
            Ok(())
        })?;
        if run.stop_cause.is_some() {
            self.enact_stop(run.task);
        }
        self.mark_dirty();
        Ok(())
    }

    /// Records how the run ended and moves its job, with the job's event, in one
    /// transaction. The lane stays held: the run is now cleaning.
    fn apply_end(&mut self, run: &Run, end: RunEnd, exit: Option<&ExitRecord>) -> ApiResult<()> {
        let machine = self.machine;
        let process = exit
            .map(|e| serde_json::to_value(&e.reason))
            .transpose()
            .map_err(ApiError::internal)?;
        let ended_at = exit.map_or_else(now_ms, |e| e.ended_at);
        let outcome = self.store.write(|tx| {
            let job = jobs::require(tx, run.job)?;
            let last_step = job.step + 1 >= job.steps;
            let outcome = classify(&end, run.stop_cause, last_step);
            tx.execute(
                "UPDATE runs SET status = ?2, process = ?3, ended_at = ?4, phase = 'cleaning', \
                 cleanup_attempt = 1, started_at = COALESCE(started_at, ?4) WHERE task = ?1",
                (
                    run.task.to_string(),
                    outcome.run.as_str(),
                    process.as_ref().map(|p| p.to_string()),
                    ended_at,
                ),
            )
            .db("record run end")?;
            let now = now_ms();
            match outcome.job {
                JobNext::Succeeded => jobs::finish(tx, &job, JobStatus::Succeeded, None)?,
                JobNext::Cancelled => jobs::finish(tx, &job, JobStatus::Cancelled, None)?,
                JobNext::Failed => jobs::finish(tx, &job, JobStatus::Failed, Some(run.task))?,
                JobNext::NextStep => {
                    tx.execute(
                        "UPDATE jobs SET state = 'queued', step = step + 1, resume = 0, \
                         updated_at = ?2 WHERE id = ?1",
                        (job.id.to_string(), now),
                    )
                    .db("advance job")?;
                }
                JobNext::Requeue { resume } => {
                    tx.execute(
                        "UPDATE jobs SET state = 'queued', resume = ?2, updated_at = ?3 WHERE id = ?1",
                        (job.id.to_string(), resume, now),
                    )
                    .db("requeue job")?;
                }
            }
            if let Some(kind) = outcome.event {
                let mut extra = Map::new();
                if let Some(p) = &process {
                    extra.insert("process".into(), p.clone());
                }
                let job = jobs::require(tx, run.job)?;
                events::append(tx, machine, &job, kind, Some(event_run(run)), extra)?;
            }
            Ok(outcome)
        })?;
        tracing::info!(
            task = %run.task, job = %run.job, status = outcome.run.as_str(), next = ?outcome.job,
            "run ended"
        );
        self.mark_dirty();
        Ok(())
    }

    /// A clean cleanup frees the lane; anything else holds it in Attention until a person
    /// releases that exact hold.
    fn finish_cleanup(&mut self, run: &Run, record: &CleanupRecord) -> ApiResult<()> {
        let machine = self.machine;
        let outcome = cleanup_value(record)?;
        let clean = record.outcome.is_clean();
        self.store.write(|tx| {
            if clean {
                tx.execute(
                    "UPDATE runs SET phase = NULL, cleanup = ?2 WHERE task = ?1",
                    (run.task.to_string(), outcome.to_string()),
                )
                .db("finish cleanup")?;
                return Ok(());
            }
            let attention = AttentionId::new();
            let failure = outcome.clone();
            tx.execute(
                "INSERT INTO attentions (id, resource, task, failure, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                (
                    attention.to_string(),
                    run.resource.to_string(),
                    run.task.to_string(),
                    failure.to_string(),
                    now_ms(),
                ),
            )
            .db("create attention")?;
            tx.execute(
                "UPDATE runs SET phase = 'attention', attention = ?2, cleanup = ?3 WHERE task = ?1",
                (run.task.to_string(), attention.to_string(), failure.to_string()),
            )
            .db("hold resource")?;
            let job = jobs::require(tx, run.job)?;
            let mut extra = Map::new();
            extra.insert("attention".into(), json!(attention));
            extra.insert("cleanup".into(), failure.clone());
            events::append(tx, machine, &job, EventKind::JobAttention, Some(event_run(run)), extra)?;
            tracing::warn!(task = %run.task, %attention, "cleanup failed: resource held in Attention");
            Ok(())
        })?;
        self.mark_dirty();
        Ok(())
    }

    /// The worker is gone before it wrote `cleanup.json`: the daemon cleans up itself, as a
    /// new, numbered attempt, off the core thread.
    pub(super) fn clean_up_for_lost_worker(&mut self, run: &Run, dir: &RunDir) {
        let attempt = run.cleanup_attempt.max(1) + 1;
        let recorded = self.store.write(|tx| {
            tx.execute(
                "UPDATE runs SET cleanup_attempt = ?2 WHERE task = ?1 AND phase = 'cleaning'",
                (run.task.to_string(), attempt),
            )
            .db("number cleanup attempt")
        });
        if let Err(e) = recorded {
            tracing::error!(task = %run.task, error = %e, "cannot number a cleanup attempt");
            return;
        }
        supervisor::clean_up_lost(
            self.handle(),
            dir.clone(),
            run.task,
            attempt,
            self.config.resource.cleanup,
            vec![self.facts.pid],
        );
    }
}

fn event_run(run: &Run) -> EventRun {
    EventRun {
        resource: run.resource,
        task: run.task,
        run_number: run.run_number,
        step: run.step,
    }
}

/// The stored cleanup result: the outcome (`{"result": ...}` with its remaining pids) and
/// the attempt that produced it. An Attention's failure is the same record.
fn cleanup_value(record: &CleanupRecord) -> ApiResult<Value> {
    let mut value = serde_json::to_value(&record.outcome).map_err(ApiError::internal)?;
    if let Value::Object(fields) = &mut value {
        fields.insert("attempt".into(), json!(record.attempt));
    }
    Ok(value)
}
