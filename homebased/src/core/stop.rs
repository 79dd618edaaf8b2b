//! Stopping a run: commit the request (causes only upgrade, the first `requested_at` is kept),
//! then enact it. Enacting is idempotent and redone after a daemon restart.
//!
//! - yield: create the empty `control/yield` of that run. No signal, no deadline.
//! - restart, user cancel: write `control/stop` (the worker honours it even if a signal is
//!   lost), then SIGTERM the worker, which stops the workload's group.

use super::Core;
use crate::store::{runs, DbResult};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::{JobId, TaskId};
use homebased_shared::queue::{PhaseKind, StopCause};
use homebased_shared::rundir::{write_json_atomic, RunDir, StopRequest};
use homebased_shared::time::now_ms;
use rusqlite::Connection;

/// Records a stop request for a run that is launching, executing or already stopping.
pub fn commit(
    conn: &Connection,
    run: &runs::Run,
    cause: StopCause,
    for_job: Option<JobId>,
) -> ApiResult<()> {
    let cause = run.stop_cause.map_or(cause, |c| c.upgrade(cause));
    let phase = match run.phase {
        // A launch not yet confirmed keeps its phase; the stop is enacted once it is.
        Some(PhaseKind::Launching) => PhaseKind::Launching,
        _ => PhaseKind::Stopping,
    };
    conn.execute(
        "UPDATE runs SET phase = ?2, stop_cause = ?3, \
         stop_requested_at = COALESCE(stop_requested_at, ?4), \
         stop_for_job = COALESCE(stop_for_job, ?5) WHERE task = ?1",
        (
            run.task.to_string(),
            phase.as_str(),
            cause.as_str(),
            now_ms(),
            for_job.map(|j| j.to_string()),
        ),
    )
    .db("commit stop")?;
    conn.execute(
        "UPDATE jobs SET last_stop_cause = ?2 WHERE id = ?1",
        (run.job.to_string(), cause.as_str()),
    )
    .db("commit stop")?;
    Ok(())
}

impl Core {
    /// Performs the committed stop of `task`: files first, then the signal.
    pub fn enact_stop(&mut self, task: TaskId) {
        let run = match runs::get(self.store.conn(), task) {
            Ok(Some(run)) => run,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(%task, error = %e, "cannot read run to enact its stop");
                return;
            }
        };
        let Some(cause) = run.stop_cause else { return };
        let dir = RunDir::new(self.home.task_dir(task));
        let written = match cause {
            StopCause::Yield => std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.yield_file())
                .map(drop),
            StopCause::Restart | StopCause::UserCancel => {
                write_json_atomic(&dir.stop_file(), &StopRequest { cause })
            }
        };
        if let Err(e) = written {
            tracing::warn!(%task, error = %e, "cannot write the stop request; the next pass retries");
            return;
        }
        if cause != StopCause::Yield {
            crate::supervisor::signal_worker(&dir, nix::sys::signal::Signal::SIGTERM);
        }
    }
}
