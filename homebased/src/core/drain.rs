//! The drain before an allocation ends (issue 46): Slurm signals the batch job some time
//! before its end (`sbatch --signal=B:USR1@N`), and the daemon inside it (`daemon::run`,
//! [`Ending::Drain`](crate::daemon::Ending)) asks the core to drain. From then on no run
//! starts, and every run is stopped so that its job is queued again, durable in the store, for
//! the allocation that follows (a requeue, a new `sbatch` on the same home): a run whose job
//! yields (`preempt.mode = yield`) is asked to yield, and resumes from its checkpoint; any
//! other run is stopped to restart its step from the start, as a preemption would. A run
//! already stopping keeps its stop. The daemon waits for the runs to end within the time it
//! was given, then exits.
//!
//! - [`drain_cause`] (pure): the stop a running job is given.
//! - [`Core::drain`]: start draining; [`Core::drain_stops`]: what each pass does instead of
//!   scheduling while draining; [`Core::runs_left`]: what the daemon waits on.

use super::Core;
use crate::lifecycle::{CommittedStop, Observation, RunPhase};
use crate::store::runs;
use homebased_shared::error::ApiResult;
use homebased_shared::queue::{PreemptMode, StopCause};

/// The stop that a drain gives a run of a job preempted in `mode`.
pub fn drain_cause(mode: PreemptMode) -> StopCause {
    match mode {
        PreemptMode::Yield => StopCause::Yield,
        // A step that may not be preempted still ends with the allocation: restarted later
        // rather than killed mid-write and left for cleanup as a lost run.
        PreemptMode::Restart | PreemptMode::Wait => StopCause::Restart,
    }
}

impl Core {
    /// Starts draining (idempotent): no run starts from now on, and every executing run is
    /// stopped. Answers the runs left.
    pub(super) fn drain(&mut self) -> ApiResult<usize> {
        if !self.draining {
            tracing::warn!(
                "draining: no run starts from now on; every run is asked to yield or stop"
            );
        }
        self.draining = true;
        self.drain_stops();
        self.runs_left()
    }

    /// Commits the drain's stop for every executing run that has none: a run that was still
    /// launching is stopped by the pass after it starts executing.
    pub(super) fn drain_stops(&mut self) {
        let holding = match runs::list_holding(self.store.db()) {
            Ok(holding) => holding,
            Err(e) => {
                tracing::error!(error = %e, "cannot list the runs to drain; the next pass retries");
                return;
            }
        };
        for run in holding {
            if !matches!(run.phase, Some(RunPhase::Executing { .. })) {
                continue;
            }
            let stopped = self.specs.get(self.store.db(), run.job).and_then(|spec| {
                let cause = drain_cause(spec.preempt.mode);
                tracing::info!(task = %run.task, cause = cause.as_str(), "draining: stopping the run");
                let request = CommittedStop {
                    cause,
                    requested_at: self.clock.now_ms(),
                    for_job: None,
                };
                self.advance(&run, [Observation::StopCommitted(request)])
            });
            if let Err(e) = stopped {
                tracing::error!(task = %run.task, error = %e, "cannot stop a run to drain; the next pass retries");
            }
        }
    }

    /// The runs that still hold lanes and have a worker to wait for (every phase but
    /// Attention, which waits for a person, not for the allocation).
    pub(super) fn runs_left(&self) -> ApiResult<usize> {
        Ok(runs::list_holding(self.store.db())?
            .iter()
            .filter(|run| {
                run.phase
                    .as_ref()
                    .is_some_and(|phase| !matches!(phase, RunPhase::Attention { .. }))
            })
            .count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yielding_job_yields_and_every_other_restarts() {
        assert_eq!(drain_cause(PreemptMode::Yield), StopCause::Yield);
        assert_eq!(drain_cause(PreemptMode::Restart), StopCause::Restart);
        assert_eq!(drain_cause(PreemptMode::Wait), StopCause::Restart);
    }
}
