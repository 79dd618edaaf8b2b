//! Enacting a committed stop (the lifecycle commits it: `Observation::StopCommitted`).
//! Enacting is idempotent and redone after a daemon restart.
//!
//! - yield: create the empty `control/yield` of that run. No signal, no deadline.
//! - restart, time limit, user cancel: write `control/stop` (the worker honours it even if a
//!   signal is lost), then SIGTERM the worker, which stops the workload's group. A time limit
//!   is stopped exactly as a restart is; only how its job moves afterwards differs
//!   (`core::classify`).

use super::Core;
use crate::store::runs;
use homebased_shared::ids::TaskId;
use homebased_shared::queue::StopCause;
use homebased_shared::rundir::{write_json_atomic, StopRequest};
use std::os::unix::fs::OpenOptionsExt;

impl Core {
    /// Performs the committed stop of `task`: files first, then the signal.
    pub(super) fn enact_stop(&mut self, task: TaskId) {
        fail::fail_point!("stop.committed", |_| std::process::abort());
        self.unenacted.remove(&task);
        let run = match runs::get(self.store.db(), task) {
            Ok(Some(run)) => run,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(%task, error = %e, "cannot read run to enact its stop");
                self.unenacted.insert(task);
                return;
            }
        };
        let Some(stop) = run.phase.as_ref().and_then(|p| p.stop()) else {
            return;
        };
        let dir = self.run_dir(task);
        let written = match stop.cause {
            // Not through a link or into a FIFO the workload put there.
            StopCause::Yield => std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(dir.yield_file())
                .map(drop),
            StopCause::Restart | StopCause::TimeLimit | StopCause::UserCancel => {
                write_json_atomic(&dir.stop_file(), &StopRequest { cause: stop.cause })
            }
        };
        if let Err(e) = written {
            tracing::warn!(%task, error = %e, "cannot write the stop request; the tick retries");
            self.unenacted.insert(task);
            return;
        }
        if stop.cause != StopCause::Yield {
            self.launcher.signal_stop(&dir);
        }
    }

    /// Enacts again every committed stop whose request could not be written.
    pub(super) fn retry_stops(&mut self) {
        let pending: Vec<TaskId> = self.unenacted.iter().copied().collect();
        for task in pending {
            self.enact_stop(task);
        }
    }
}
