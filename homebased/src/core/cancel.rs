//! `resource job cancel`: a queued job is cancelled at once; for an active job a stop and
//! cleanup are requested (the answer does not prove cleanup finished); a finished job answers
//! `already_terminal`.

use super::observe::Moved;
use super::Core;
use crate::lifecycle::{CommittedStop, Observation, RunPhase};
use crate::store::events;
use crate::store::operations::{self, Operation};
use crate::store::{jobs, runs};
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::event::EventKind;
use homebased_shared::ids::JobId;
use homebased_shared::queue::{JobStatus, StopCause};
use homebased_shared::wire::{CancelRequest, CancelResult};

impl Core {
    pub(super) fn cancel(&mut self, id: JobId, req: CancelRequest) -> ApiResult<CancelResult> {
        let content = serde_json::json!({ "job": id });
        let op = Operation::new(req.operation_id, "cancel", self.machine, &content);
        let machine = self.machine;
        let specs = &self.specs;
        let mut stopped = None;
        let mut appended = false;
        let result = self.store.write(|tx| {
            operations::once(tx, &op, || {
                let job = jobs::require(tx, id)?;
                let result = match job.status() {
                    JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled => {
                        CancelResult::AlreadyTerminal {
                            state: job.status().as_str().into(),
                        }
                    }
                    JobStatus::Queued => {
                        jobs::finish(tx, &job, JobStatus::Cancelled, None)?;
                        events::append(
                            tx,
                            machine,
                            &job,
                            EventKind::JobCancelled,
                            None,
                            Default::default(),
                        )?;
                        super::dependencies::cancel_dependents(tx, machine, id)?;
                        appended = true;
                        CancelResult::Cancelled
                    }
                    JobStatus::Active => {
                        let run = runs::list_for_job(tx, id)?
                            .into_iter()
                            .find(|r| r.phase.as_ref().is_some_and(RunPhase::is_live))
                            .ok_or_else(|| {
                                ApiError::internal(format!("active job {id} has no live run"))
                            })?;
                        let request = CommittedStop {
                            cause: StopCause::UserCancel,
                            requested_at: tx.now(),
                            for_job: None,
                        };
                        if let Some(mut moved) =
                            Moved::plan(&run, [Observation::StopCommitted(request)], tx.now())
                        {
                            moved.commit(tx, specs, machine)?;
                            stopped = Some(moved);
                        }
                        CancelResult::Stopping {
                            resource: run.first_lane(),
                            task: run.task,
                        }
                    }
                };
                Ok(result)
            })
        })?;
        if appended {
            self.wake_delivery();
        }
        if let Some(moved) = stopped {
            self.act(&moved);
        }
        self.mark_dirty();
        Ok(result)
    }
}
