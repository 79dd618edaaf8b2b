//! Start-up reconciliation and the safety tick. At start the daemon finds every run again:
//! a held `runner.lock` means re-attach a watcher (and re-enact a committed stop); a free
//! lock means apply what the worker left (`exit.json`, `cleanup.json`) or, without it, treat
//! the worker as lost. Attention is untouched.

use super::launch::LAUNCH_CONFIRM_BOUND_MS;
use super::Core;
use crate::store::runs;
use crate::supervisor;
use homebased_shared::queue::PhaseKind;
use homebased_shared::rundir::RunDir;
use homebased_shared::time::now_ms;

impl Core {
    pub(super) fn reconcile(&mut self) {
        let holding = match runs::list_holding(self.store.conn()) {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, "cannot list runs to reconcile");
                return;
            }
        };
        for run in holding {
            if run.phase == Some(PhaseKind::Attention) {
                continue;
            }
            let dir = RunDir::new(self.home.task_dir(run.task));
            if supervisor::worker_alive(&dir) {
                tracing::info!(task = %run.task, phase = ?run.phase, "re-attached to a live worker");
                supervisor::watch(self.handle(), dir, run.task, None);
                if run.stop_cause.is_some() && run.phase == Some(PhaseKind::Stopping) {
                    self.enact_stop(run.task);
                }
                self.observe(run.task, false);
            } else {
                self.observe(run.task, true);
            }
        }
        self.mark_dirty();
    }

    /// The safety tick: abandons launches whose worker never came up.
    pub(super) fn tick(&mut self) {
        // Blocked and check-due notices whose time has come (core/notices.rs).
        self.notices_tick();
        let Ok(holding) = runs::list_holding(self.store.conn()) else {
            return;
        };
        let now = now_ms();
        for run in holding {
            if run.phase == Some(PhaseKind::Launching)
                && now - run.reserved_at > LAUNCH_CONFIRM_BOUND_MS
            {
                let dir = RunDir::new(self.home.task_dir(run.task));
                let alive = supervisor::worker_alive(&dir);
                self.observe(run.task, !alive);
            }
        }
    }
}
