//! One scheduling pass: build the snapshot, let the pure scheduler decide, then commit and
//! enact each decision after re-checking it inside its own transaction.

use super::specs::Specs;
use super::Core;
use crate::lifecycle::RunPhase;
use crate::scheduler::{
    self, Decisions, ResourceSlot, RunSlot, SlotPhase, Snapshot, Target, WaitingJob,
};
use crate::store::jobs;
use crate::store::{attentions, resources, runs, Db};
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::ids::JobId;
use homebased_shared::queue::PreemptMode;
use homebased_shared::wire::Waiting;
use std::collections::HashMap;

/// The last pass's snapshot and decisions, kept so that `resource jobs` and `job show`
/// answer why a job waits from exactly what the scheduler saw. Shared (an `Arc`) with a
/// listing that is written out off the core thread.
pub struct LastPass {
    snapshot: Snapshot,
    decisions: Decisions,
    waiting: HashMap<JobId, Waiting>,
}

impl LastPass {
    /// How many lanes the pass's reservation holds (`homebased_reserved_resources`).
    pub fn reserved_lanes(&self) -> u64 {
        self.decisions
            .reservation
            .as_ref()
            .map_or(0, |r| r.resources.len() as u64)
    }

    /// Why a queued job waits: its own reason when the snapshot read it, else the one the
    /// same pass implies for a job further down (read from its head only, never its spec).
    /// `None` for a job that is not queued or got a lane.
    pub fn waiting_of(&self, job: &jobs::JobHead) -> Option<Waiting> {
        let jobs::JobState::Queued { position, .. } = job.state else {
            return None;
        };
        if let Some(waiting) = self.waiting.get(&job.id) {
            return Some(waiting.clone());
        }
        let blocked_by_own_run = self
            .snapshot
            .resources
            .iter()
            .any(|r| r.run.as_ref().is_some_and(|run| run.job == job.id));
        let unread = WaitingJob {
            id: job.id,
            priority: job.priority,
            position,
            target: target_of(job.target, &job.target_lanes),
            gpus: job.gpus,
            time_limit: job.time_limit,
            blocked_by_own_run,
            dependency: job.dependency,
        };
        scheduler::waiting_beyond(&self.snapshot, &self.decisions, &unread)
    }
}

impl Core {
    pub(super) fn pass(&mut self) {
        self.passes += 1;
        // Draining for the end of an allocation: nothing starts, every run is stopped.
        if self.draining {
            self.drain_stops();
            return;
        }
        if let Err(e) = self.specs.forget_finished(self.store.db()) {
            tracing::warn!(error = %e, "cannot read which kept specs are still open");
        }
        let (snapshot, decisions) = match self.snapshot() {
            Ok(snapshot) => {
                let decisions = scheduler::decide(&snapshot);
                (snapshot, decisions)
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read the queue for a scheduling pass");
                return;
            }
        };
        self.last_pass = Some(std::sync::Arc::new(LastPass {
            waiting: decisions.waiting.iter().cloned().collect(),
            decisions: decisions.clone(),
            snapshot,
        }));
        if self.launch_backoff.holds(std::time::Instant::now()) {
            if !decisions.launches.is_empty() {
                tracing::debug!("launches wait after a worker failed to start");
            }
        } else {
            self.launch_all(decisions.launches);
        }
        for stop in decisions.stops {
            self.preempt(stop);
        }
        // Blocked notices: episode bookkeeping for the head (core/notices.rs).
        self.notice_blocked_head(decisions.first_blocked);
    }

    /// Runs the timers and a scheduling pass now, so that everything the requests served
    /// before this one can cause has been decided and committed: a test that something did
    /// not happen asks for this instead of sleeping.
    pub(super) fn settle(&mut self) -> ApiResult<homebased_shared::wire::Settled> {
        self.tick();
        // Retention's batch in flight lands, and one more runs to the end (core/history.rs).
        self.retention_tick(true);
        self.dirty = false;
        self.pass();
        Ok(homebased_shared::wire::Settled {
            passes: self.passes,
        })
    }

    /// Why a queued job waits, as the last pass saw it ([`LastPass::waiting_of`]).
    pub(super) fn waiting_of(&self, job: &jobs::JobHead) -> Option<Waiting> {
        self.last_pass.as_ref()?.waiting_of(job)
    }

    /// The queue as the scheduler sees it. Queued jobs are read in serving order only as far
    /// as a decision can reach ([`scheduler::Reach`]): once every free lane is taken by a job
    /// read before, the first blocked job is known, and the jobs left are no higher than
    /// every executing run, nothing further down can start, preempt or head the queue.
    pub(super) fn snapshot(&self) -> ApiResult<Snapshot> {
        let db = self.store.db();
        let holding = runs::list_holding(db)?;
        let terms = jobs::holding_terms(db)?;
        let mut slots = Vec::new();
        // MIG slices the last detection no longer found as recorded (the layout changed):
        // listed and flagged, but no new work is run on a slice that may not exist. Nor on a
        // slice without its MIG UUID: a run there would get no CUDA device and see every card.
        let mut retired = Vec::new();
        for r in resources::list(db)? {
            let changed = r.gpu.as_ref().is_some_and(|g| g.changed);
            if r.mig.is_some() && (changed || r.cuda_device().is_none()) {
                retired.push(r.id);
            }
            let run = match holding.iter().find(|run| run.holds(r.id)) {
                None => None,
                Some(run) => Some(run_slot(db, &self.specs, &terms, run)?),
            };
            slots.push(ResourceSlot {
                id: r.id,
                name: r.name,
                device: r.device,
                mig: r.mig.is_some(),
                run,
            });
        }
        // The lanes held for a live run the store does not know are a run in Attention to
        // the scheduler, the same on each of them (as any run on several lanes), and its job
        // (queued again by the store) is blocked by its own run.
        let holds = attentions::lane_holds(db)?;
        for hold in &holds {
            for slot in slots
                .iter_mut()
                .filter(|s| hold.resources.contains(&s.id) && s.run.is_none())
            {
                slot.run = Some(RunSlot {
                    job: hold.job,
                    task: hold.task,
                    priority: homebased_shared::queue::Priority::Low,
                    mode: PreemptMode::Wait,
                    restart_within: None,
                    phase: SlotPhase::Attention { attention: hold.id },
                    deadline: None,
                });
            }
        }
        slots.retain(|s| s.run.is_some() || !retired.contains(&s.id));
        let mut reach = scheduler::Reach::over(&slots);
        let mut waiting = Vec::new();
        jobs::visit_waiting(db, |job| {
            let blocked_by_own_run = holding.iter().any(|run| run.job == job.id)
                || holds.iter().any(|hold| hold.job == job.id);
            let job = WaitingJob {
                id: job.id,
                priority: job.priority,
                position: job.position,
                target: target_of(job.target, &job.target_lanes),
                gpus: job.gpus,
                time_limit: job.time_limit,
                blocked_by_own_run,
                dependency: job.dependency,
            };
            if !reach.reads(&job) {
                return false;
            }
            waiting.push(job);
            true
        })?;
        Ok(Snapshot {
            now: self.clock.now_ms(),
            resources: slots,
            jobs: waiting,
            storage_unavailable_since: self.storage.as_ref().map(|fault| fault.since),
            reservations: self.config.resource.reservations,
            cleanup_bound: self.config.resource.cleanup.bound,
        })
    }
}

/// Where a job may run, from its stored target: a pinned set, one pinned lane, or any.
fn target_of(
    lane: Option<homebased_shared::ids::ResourceId>,
    lanes: &[homebased_shared::ids::ResourceId],
) -> Target {
    match (lane, lanes) {
        (_, [_, ..]) => Target::Lanes(lanes.to_vec()),
        (Some(lane), []) => Target::Pinned(lane),
        (None, []) => Target::Any,
    }
}

/// A run as the scheduler sees it. Its job's `preempt` comes from the spec the core keeps
/// (`core::specs`): decoded once per job, and a spec that does not decode fails the pass
/// loudly instead of passing for `wait`. A run that already ended (cleaning, Attention) may
/// belong to a terminal job: only its lane matters then, but its job's terms are still read
/// (`terms`: [`jobs::holding_terms`], one read for every held lane).
fn run_slot(
    db: Db,
    specs: &Specs,
    terms: &HashMap<JobId, jobs::RunTerms>,
    run: &runs::Run,
) -> ApiResult<RunSlot> {
    let job = terms
        .get(&run.job)
        .ok_or_else(|| jobs::not_found(run.job))?;
    let preempt = specs.get(db, run.job)?.preempt;
    let phase = run
        .phase
        .as_ref()
        .map(RunPhase::slot)
        .ok_or_else(|| ApiError::internal(format!("run {} holds no lane", run.task)))?;
    Ok(RunSlot {
        job: run.job,
        task: run.task,
        priority: job.priority,
        mode: preempt.mode,
        restart_within: preempt.restart_within,
        deadline: deadline(
            run.phase.as_ref(),
            super::time_limits::limit_of(job.time_limit),
        ),
        phase,
    })
}

/// When a run's time limit stops it, for the reservation's estimates: its start plus the
/// limit, once it has started; `None` without a limit or before the start.
fn deadline(
    phase: Option<&RunPhase>,
    limit: Option<std::time::Duration>,
) -> Option<homebased_shared::time::Millis> {
    let started_at = match phase? {
        RunPhase::Executing { started_at } | RunPhase::Stopping { started_at, .. } => *started_at,
        _ => return None,
    };
    let limit = i64::try_from(limit?.as_millis()).unwrap_or(i64::MAX);
    Some(started_at.saturating_add(limit))
}
