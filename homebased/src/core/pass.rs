//! One scheduling pass: build the snapshot, let the pure scheduler decide, then commit and
//! enact each decision after re-checking it inside its own transaction.

use super::Core;
use crate::scheduler::{self, ResourceSlot, RunSlot, SlotPhase, Snapshot, Target, WaitingJob};
use crate::store::jobs::{self, Job};
use crate::store::{resources, runs};
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::queue::{JobStatus, PhaseKind, PreemptMode};
use homebased_shared::spec::JobSpec;
use homebased_shared::time::now_ms;
use std::collections::HashMap;

impl Core {
    pub(super) fn pass(&mut self) {
        let decisions = match self.snapshot() {
            Ok(snapshot) => scheduler::decide(&snapshot),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the queue for a scheduling pass");
                return;
            }
        };
        for launch in decisions.launches {
            self.launch(launch);
        }
        for stop in decisions.stops {
            self.preempt(stop);
        }
        // Blocked notices: episode bookkeeping for the head (core/notices.rs).
        self.notice_blocked_head(decisions.first_blocked);
    }

    /// The queue as the scheduler sees it.
    pub fn snapshot(&self) -> ApiResult<Snapshot> {
        let conn = self.store.conn();
        let open = jobs::list_open(conn)?;
        let holding = runs::list_holding(conn)?;
        let by_id: HashMap<_, &Job> = open.iter().map(|j| (j.id, j)).collect();
        let mut slots = Vec::new();
        for r in resources::list(conn)? {
            let run = match holding.iter().find(|run| run.resource == r.id) {
                None => None,
                Some(run) => Some(run_slot(conn, run, by_id.get(&run.job).copied())?),
            };
            slots.push(ResourceSlot {
                id: r.id,
                name: r.name,
                device: r.device,
                run,
            });
        }
        let waiting = open
            .iter()
            .filter(|j| j.status == JobStatus::Queued)
            .filter_map(|j| {
                Some(WaitingJob {
                    id: j.id,
                    priority: j.priority,
                    position: j.position?,
                    target: j.target.map_or(Target::Any, Target::Pinned),
                    blocked_by_own_run: holding.iter().any(|run| run.job == j.id),
                })
            })
            .collect();
        Ok(Snapshot {
            now: now_ms(),
            resources: slots,
            jobs: waiting,
        })
    }
}

/// The preemption mode and window of a job, from its canonical spec.
pub fn preempt_of(job: &Job) -> ApiResult<homebased_shared::spec::Preempt> {
    let spec: JobSpec = serde_json::from_value(job.spec.clone()).map_err(|e| {
        ApiError::internal(format!("stored spec of job {} is unreadable: {e}", job.id))
    })?;
    Ok(spec.preempt)
}

fn run_slot(conn: &rusqlite::Connection, run: &runs::Run, job: Option<&Job>) -> ApiResult<RunSlot> {
    // A run's job is open while the run executes; once it ended (cleaning, Attention) the
    // job may be terminal, and only the lane matters.
    let owned;
    let job = match job {
        Some(j) => j,
        None => {
            owned = jobs::require(conn, run.job)?;
            &owned
        }
    };
    let preempt = preempt_of(job).unwrap_or(homebased_shared::spec::Preempt {
        mode: PreemptMode::Wait,
        restart_within: None,
    });
    let phase = match (run.phase, run.stop_cause) {
        (Some(PhaseKind::Launching), None) => SlotPhase::Launching,
        (Some(PhaseKind::Launching | PhaseKind::Stopping), Some(cause)) => SlotPhase::Stopping {
            cause,
            for_job: run.stop_for_job,
        },
        (Some(PhaseKind::Executing), _) => SlotPhase::Executing {
            started_at: run.started_at.unwrap_or(run.reserved_at),
        },
        (Some(PhaseKind::Cleaning), _) => SlotPhase::Cleaning,
        (Some(PhaseKind::Attention), _) | (None, _) => SlotPhase::Attention,
        (Some(PhaseKind::Stopping), None) => SlotPhase::Cleaning,
    };
    Ok(RunSlot {
        job: run.job,
        task: run.task,
        priority: job.priority,
        mode: preempt.mode,
        restart_within: preempt.restart_within,
        phase,
    })
}
