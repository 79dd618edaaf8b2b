//! Observing runs: the worker's files are the truth, its poke and the lock watcher are only
//! hints. Each observation re-reads the run directory, turns what it finds into
//! [`Observation`]s, folds them through the [`lifecycle`](crate::lifecycle) and commits the
//! result in one transaction; side effects follow the commit, and so does the wake of event
//! delivery when the commit appended an event.
//!
//! A commit that fails (a locked database, a full disk) loses nothing: the files are still
//! there, so the run is simply observed again later ([`Core::retry_observations`]).

use super::classify::{classify, JobNext};
use super::launch::step_of;
use super::specs::Specs;
use super::Core;
use crate::lifecycle::{self, Commit, Context, Effect, Observation, RunEnd, RunPhase};
use crate::store::events::{self, EventRun};
use crate::store::runs::{self, Run};
use crate::store::{attentions, jobs, resources, Db};
use crate::supervisor::launcher::{LostCleanup, RunNames};
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::event::{EventDetail, EventKind};
use homebased_shared::ids::{AttentionId, MachineId, TaskId};
use homebased_shared::queue::{JobStatus, RunStatus, StopCause};
use homebased_shared::rundir::RunDir;
use homebased_shared::time::Millis;
use homebased_shared::wire::{AttentionFailure, CleanupResult};

impl Core {
    /// Re-reads the run directory of `task` and applies what changed. `worker_gone` is true
    /// when the worker's lock was found free.
    pub(super) fn observe(&mut self, task: TaskId, worker_gone: bool) {
        match self.observe_run(task, worker_gone) {
            Ok(()) => {
                self.unobserved.remove(&task);
            }
            Err(e) => {
                tracing::error!(%task, error = %e, "cannot apply a run observation; retrying");
                // The worker's hint will not come again: remember to look once more.
                let gone = self.unobserved.get(&task).copied().unwrap_or(false) || worker_gone;
                self.unobserved.insert(task, gone);
            }
        }
    }

    /// Observes again every run whose last observation failed to commit.
    pub(super) fn retry_observations(&mut self) {
        let pending: Vec<(TaskId, bool)> = self.unobserved.iter().map(|(t, g)| (*t, *g)).collect();
        for (task, worker_gone) in pending {
            self.observe(task, worker_gone);
        }
    }

    fn observe_run(&mut self, task: TaskId, worker_gone: bool) -> ApiResult<()> {
        let Some(run) = runs::get(self.store.db(), task)? else {
            return Ok(());
        };
        let Some(phase) = &run.phase else {
            return Ok(());
        };
        if matches!(phase, RunPhase::Attention { .. }) {
            return Ok(());
        }
        let dir = self.run_dir(task);
        let observations = read_observations(&dir, worker_gone, || self.runs_a_container(&run))?;
        self.advance(&run, observations)
    }

    /// Whether the run's step runs a container, as the store keeps the job's spec: what a
    /// vanished worker leaves behind depends on it. Never read from `run.json`, whose content
    /// is not fsynced and may be empty after a machine crash.
    fn runs_a_container(&self, run: &Run) -> ApiResult<bool> {
        let spec = self.specs.get(self.store.db(), run.job)?;
        Ok(matches!(
            step_of(&spec, run.step)?,
            homebased_shared::spec::Step::Container(_)
        ))
    }

    /// Folds `observations` through the lifecycle from the run's stored phase, commits the
    /// outcome as one transaction, then performs its side effects.
    ///
    /// A move with an [`Effect`] (a stop to enact, a cleanup or an adoption to start) commits
    /// durably, since the effect follows its commit. One without (a start seen, an end
    /// recorded, the lane given back) commits unsynced (ARCHITECTURE "Group commit"): every
    /// effect it can lead to comes later and behind a durable commit of its own (the next
    /// launch's reservation, a stop), and every answer that reports it is held until the
    /// turn's barrier. So lanes that end together share the flush of their next launches
    /// instead of paying one each.
    pub(super) fn advance(
        &mut self,
        run: &Run,
        observations: impl IntoIterator<Item = Observation>,
    ) -> ApiResult<()> {
        let Some(mut moved) = Moved::plan(run, observations, self.clock.now_ms()) else {
            return Ok(());
        };
        let machine = self.machine;
        if moved.has_effects() {
            self.store
                .write(|db| moved.commit(db, &self.specs, machine))?;
        } else {
            self.store
                .write_unsynced(|db| moved.commit(db, &self.specs, machine))?;
        }
        fail::fail_point!("observe.committed", |_| std::process::abort());
        self.act(&moved);
        Ok(())
    }

    /// The side effects of a committed move, then a pass. Its counters of `/metrics` are
    /// counted here, once the move is committed, never for a transaction rolled back.
    ///
    /// A commit that appended an event (a job's end, a cancel, an Attention, the dependents
    /// cancelled with them) wakes delivery here, not through the pass: the event is pending
    /// from this commit on. The wake is no [`Effect`]: delivery reads the event through the
    /// core, whose answers wait for the turn's barrier, so it needs no durable commit.
    pub(super) fn act(&mut self, moved: &Moved) {
        self.readings.metrics.moved(&moved.commits, moved.ended);
        if moved.appended {
            self.wake_delivery();
        }
        if moved.ended.is_some() {
            // Its output is final: `daemon status` counts it now, not at the next walk.
            self.readings
                .run_dir_usage
                .changed(super::run_dir_usage::Changed::Dir(
                    self.home.task_dir(moved.run.task),
                ));
        }
        for effect in &moved.effects {
            match effect {
                Effect::EnactStop => self.enact_stop(moved.run.task),
                Effect::CleanUpLost { attempt } => self.clean_up_lost(&moved.run, *attempt),
                Effect::Adopt { adoption } => self.adopt(&moved.run, *adoption),
            }
        }
        self.mark_dirty();
    }

    /// The worker is gone before it wrote `cleanup.json`: the daemon cleans up itself, as
    /// attempt `attempt`, off the core thread.
    fn clean_up_lost(&mut self, run: &Run, attempt: u32) {
        let task = run.task;
        let container_step = match self.runs_a_container(run) {
            Ok(container) => container,
            Err(e) => {
                // Looked for as if it were one: a host step has no container to find.
                tracing::warn!(%task, error = %e, "cannot read the run's step; cleaning up as for a container step");
                true
            }
        };
        let lost = LostCleanup {
            attempt,
            config: self.config.resource.cleanup,
            protected: vec![self.facts.pid],
            container_step,
        };
        let dir = self.run_dir(task);
        self.launcher.clean_up_lost(&dir, task, lost);
    }

    /// The worker detached from the run's container: start adopting worker `adoption` on the
    /// run directory. Its count is written first (`adoption.json`), so that adoptions stay
    /// bounded across workers that vanish at once and across a daemon restart. A worker that
    /// cannot be started makes the run lost, as it would have been without adoption.
    fn adopt(&mut self, run: &Run, adoption: u32) {
        let task = run.task;
        let dir = self.run_dir(task);
        if let Err(e) = self.launcher.request_adoption(&dir, adoption) {
            // The adopting worker is started all the same: its records wait for space.
            tracing::warn!(%task, adoption, error = %e, "cannot write adoption.json");
        }
        let names = self.run_names(run);
        match names.and_then(|names| {
            self.launcher
                .adopt(&dir, task, adoption, &names)
                .map_err(|e| ApiError::internal(e.to_string()))
        }) {
            Ok(()) => {
                tracing::info!(%task, adoption, "adopting the container of a vanished worker")
            }
            Err(e) => {
                tracing::error!(%task, error = %e, "cannot start an adopting worker; the run is lost");
                let lost = runs::get(self.store.db(), task).and_then(|run| match run {
                    Some(run) => self.advance(
                        &run,
                        [Observation::WorkerGone {
                            wrote_worker_json: true,
                        }],
                    ),
                    None => Ok(()),
                });
                if let Err(e) = lost {
                    tracing::error!(%task, error = %e, "cannot record a lost run; retrying");
                    self.unobserved.insert(task, true);
                }
            }
        }
    }

    /// The job and lane names of a stored run, for its worker's command line.
    fn run_names(&self, run: &Run) -> ApiResult<RunNames> {
        let mut lanes = Vec::with_capacity(run.lanes.len());
        for lane in &run.lanes {
            let resource = resources::get(self.store.db(), *lane)?
                .ok_or_else(|| ApiError::internal(format!("the run's lane {lane} is gone")))?;
            lanes.push(resource.name);
        }
        Ok(RunNames {
            job: run.job,
            lanes,
        })
    }
}

/// Whether a vanished worker left a container that may still run, to be adopted: a container
/// step with a saved container id, no `exit.json` and no stop request. `Some(n)`: `n`
/// adopting workers were started before. `container_step` reads the store, so it is asked
/// last: a run that ended normally (its `exit.json` there) never pays for it.
fn detached(
    dir: &RunDir,
    exited: bool,
    container_step: impl FnOnce() -> ApiResult<bool>,
) -> ApiResult<Option<u32>> {
    if exited || !dir.container_id().exists() || dir.stop_file().exists() || !container_step()? {
        return Ok(None);
    }
    let adoptions = dir.read_adoption().unwrap_or_else(|e| {
        tracing::warn!(task = %dir.root().display(), error = %e, "unreadable adoption.json");
        None
    });
    Ok(Some(adoptions.map_or(0, |a| a.adoption)))
}

/// What the run directory shows, in the order the lifecycle needs it: the confirmation, the
/// exit, the cleanup, then whether the worker is gone.
fn read_observations(
    dir: &RunDir,
    worker_gone: bool,
    container_step: impl FnOnce() -> ApiResult<bool>,
) -> ApiResult<Vec<Observation>> {
    let task = dir.root().display();
    let worker = dir.read_worker().unwrap_or_else(|e| {
        tracing::warn!(%task, error = %e, "unreadable worker.json");
        None
    });
    let exit = dir.read_exit().unwrap_or_else(|e| {
        tracing::warn!(%task, error = %e, "unreadable exit.json");
        None
    });
    let cleanup = dir.read_cleanup().unwrap_or_else(|e| {
        tracing::warn!(%task, error = %e, "unreadable cleanup.json");
        None
    });
    let exited = exit.is_some();
    let mut observations = Vec::new();
    if let Some(child) = worker.as_ref().and_then(|w| w.child.as_ref()) {
        observations.push(Observation::Confirmed {
            workload_started_at: Some(child.started_at),
        });
    }
    if let Some(exit) = exit {
        fail::fail_point!("observe.exit-read", |_| std::process::abort());
        observations.push(Observation::Exited {
            reason: exit.reason,
            ended_at: exit.ended_at,
        });
    }
    if let Some(record) = cleanup {
        observations.push(Observation::CleanupRecorded(record));
    }
    if worker_gone {
        if let Some(adoptions) = detached(dir, exited, container_step)? {
            observations.push(Observation::WorkerDetached { adoptions });
            return Ok(observations);
        }
        observations.push(Observation::WorkerGone {
            wrote_worker_json: worker.is_some() || dir.worker_json().exists(),
        });
    }
    Ok(observations)
}

/// Where a run goes after some observations: decided by the lifecycle, then committed
/// (inside whatever transaction the caller has open), then acted on.
#[derive(Debug)]
pub(super) struct Moved {
    run: Run,
    phase: Option<RunPhase>,
    commits: Vec<Commit>,
    effects: Vec<Effect>,
    ctx: Context,
    /// How the run ended, once committed (`RecordEnd`, `Abandon`), for `/metrics`.
    ended: Option<RunStatus>,
    /// Whether the commit appended an event, for the wake of delivery.
    appended: bool,
}

impl Moved {
    /// `None` when nothing changes; `now` is the lifecycle's, from the core's clock.
    pub(super) fn plan(
        run: &Run,
        observations: impl IntoIterator<Item = Observation>,
        now: Millis,
    ) -> Option<Moved> {
        let ctx = Context {
            now,
            new_attention: AttentionId::new(),
        };
        let mut phase = run.phase.clone();
        let mut commits = Vec::new();
        let mut effects = Vec::new();
        for observation in observations {
            let Some(current) = &phase else { break };
            if let Some(t) = lifecycle::next(current, observation, ctx) {
                phase = t.phase;
                commits.extend(t.commits);
                effects.extend(t.effects);
            }
        }
        if commits.is_empty() && effects.is_empty() {
            return None;
        }
        Some(Moved {
            run: run.clone(),
            phase,
            commits,
            effects,
            ctx,
            ended: None,
            appended: false,
        })
    }

    /// Whether the core acts outside the store after the commit: such a move commits
    /// durably ([`Core::advance`]).
    pub(super) fn has_effects(&self) -> bool {
        !self.effects.is_empty()
    }

    /// The store's side: each commit, then the new phase.
    pub(super) fn commit(&mut self, db: Db, specs: &Specs, machine: MachineId) -> ApiResult<()> {
        let committed = commit(
            db,
            specs,
            machine,
            &self.run,
            self.phase.as_ref(),
            &self.commits,
            self.ctx,
        )?;
        self.ended = committed.ended;
        self.appended = committed.appended;
        tracing::debug!(
            task = %self.run.task, phase = ?self.phase.as_ref().map(RunPhase::kind),
            commits = ?self.commits, effects = ?self.effects, "run moved"
        );
        Ok(())
    }
}

/// What a move's commit did besides its phase.
struct Committed {
    /// How the run ended (`RecordEnd`, `Abandon`).
    ended: Option<RunStatus>,
    /// An event was appended: the job's own or its dependents' cancels.
    appended: bool,
}

fn commit(
    db: Db,
    specs: &Specs,
    machine: MachineId,
    run: &Run,
    phase: Option<&RunPhase>,
    commits: &[Commit],
    ctx: Context,
) -> ApiResult<Committed> {
    let at = EventRun::of(run);
    let mut ended = None;
    let mut appended = false;
    for commit in commits {
        match commit {
            Commit::RecordStart {
                workload_started_at,
            } => runs::record_start(db, run.task, *workload_started_at)?,
            Commit::RecordStop(stop) => jobs::record_stop_cause(db, run.job, stop.cause)?,
            Commit::RecordEnd { end, ended_at } => {
                let end = record_end(db, specs, machine, run, end, *ended_at, ctx.now)?;
                ended = Some(end.status);
                appended |= end.appended;
            }
            Commit::Abandon => {
                runs::record_end(db, run.task, RunStatus::Lost, None, ctx.now)?;
                ended = Some(RunStatus::Lost);
                let job = jobs::require(db, run.job)?;
                if run.stop.map(|s| s.cause) == Some(StopCause::UserCancel) {
                    jobs::finish(db, &job, JobStatus::Cancelled, None)?;
                    events::append(
                        db,
                        machine,
                        &job,
                        EventKind::JobCancelled,
                        Some(at),
                        EventDetail::default(),
                    )?;
                    super::dependencies::cancel_dependents(db, machine, job.id)?;
                    appended = true;
                } else {
                    jobs::return_to_slot(db, run.job, ctx.now)?;
                }
            }
            Commit::RecordCleanup(record) => {
                runs::record_cleanup(db, run.task, &CleanupResult::from(record))?
            }
            Commit::OpenAttention => {
                let Some(RunPhase::Attention { id, failure }) = phase else {
                    return Err(ApiError::internal("an Attention opened without its phase"));
                };
                let held = AttentionFailure::Cleanup(failure.clone());
                attentions::open(db, *id, &run.lanes, run.task, &held, ctx.now)?;
                let job = jobs::require(db, run.job)?;
                let detail = EventDetail {
                    attention: Some(*id),
                    cleanup: Some(failure.clone()),
                    ..EventDetail::default()
                };
                events::append(db, machine, &job, EventKind::JobAttention, Some(at), detail)?;
                appended = true;
                tracing::warn!(task = %run.task, attention = %id, "cleanup failed: resource held in Attention");
            }
            Commit::CloseAttention => {
                if let Some(RunPhase::Attention { id, .. }) = &run.phase {
                    attentions::close(db, *id, ctx.now)?;
                }
            }
        }
    }
    runs::set_phase(db, run.task, phase)?;
    Ok(Committed { ended, appended })
}

/// A run's end as recorded.
struct Ended {
    status: RunStatus,
    /// The job's event, or its dependents' cancels, were appended.
    appended: bool,
}

/// Records how the run ended and moves its job, with the job's event; answers the run's
/// status and whether an event was appended.
fn record_end(
    db: Db,
    specs: &Specs,
    machine: MachineId,
    run: &Run,
    end: &RunEnd,
    ended_at: Millis,
    now: Millis,
) -> ApiResult<Ended> {
    let job = jobs::require(db, run.job)?;
    let last_step = job.step + 1 >= job.steps;
    // The run's own step: its `yield_codes` say which exits answer a yield.
    let yield_codes = step_of(&*specs.get(db, job.id)?, run.step)?.yield_codes();
    // The run's own `resume` is what it was started with: an earlier attempt of its step
    // yielded (SPEC section 5), which a restart of this one does not undo.
    let outcome = classify(
        end,
        run.stop.map(|s| s.cause),
        last_step,
        run.resume,
        &yield_codes,
    );
    let process = match end {
        RunEnd::Recorded(reason) => Some(reason.clone()),
        RunEnd::Lost => None,
    };
    runs::record_end(db, run.task, outcome.run, process.as_ref(), ended_at)?;
    match outcome.job {
        JobNext::Succeeded => jobs::finish(db, &job, JobStatus::Succeeded, None)?,
        JobNext::Cancelled => jobs::finish(db, &job, JobStatus::Cancelled, None)?,
        JobNext::Failed => jobs::finish(db, &job, JobStatus::Failed, Some(run.task))?,
        JobNext::NextStep => jobs::advance_step(db, job.id, now)?,
        JobNext::Requeue { resume } => jobs::requeue(db, job.id, resume, now)?,
    }
    let mut appended = false;
    if let Some(kind) = outcome.event {
        let detail = EventDetail {
            process,
            detail: outcome.detail,
            ..EventDetail::default()
        };
        let job = jobs::require(db, run.job)?;
        events::append(db, machine, &job, kind, Some(EventRun::of(run)), detail)?;
        appended = true;
    }
    // The jobs waiting on it go in the same transaction as its end, after its own event.
    if matches!(outcome.job, JobNext::Cancelled | JobNext::Failed) {
        appended |= super::dependencies::cancel_dependents(db, machine, run.job)? > 0;
    }
    tracing::info!(
        task = %run.task, job = %run.job, status = outcome.run.as_str(), next = ?outcome.job,
        "run ended"
    );
    Ok(Ended {
        status: outcome.run,
        appended,
    })
}
