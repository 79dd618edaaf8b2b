//! Start-up reconciliation and the safety tick. At start the daemon finds every run again:
//! a held `runner.lock` means re-attach a watcher (and re-enact a committed stop); a free
//! lock means apply what the worker left (`exit.json`, `cleanup.json`) or, without it, treat
//! the worker as lost. Attention is untouched. Then every other run directory whose lock a
//! live worker holds is a run the store does not know: its lane is held (`unknown_runs`).

use super::launch::LAUNCH_CONFIRM_BOUND_MS;
use super::timers::{self, NextDue};
use super::Core;
use crate::lifecycle::RunPhase;
use crate::store::runs;

impl Core {
    pub(super) fn reconcile(&mut self) {
        let holding = match runs::list_holding(self.store.db()) {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, "cannot list runs to reconcile");
                return;
            }
        };
        let known: std::collections::HashSet<_> = holding.iter().map(|r| r.task).collect();
        for run in holding {
            let Some(phase) = &run.phase else { continue };
            if matches!(phase, RunPhase::Attention { .. }) {
                continue;
            }
            let dir = self.run_dir(run.task);
            if self.launcher.worker_alive(&dir) {
                tracing::info!(task = %run.task, phase = ?phase.kind(), "re-attached to a live worker");
                self.launcher.reattach(&dir, run.task);
                if matches!(phase, RunPhase::Stopping { .. }) {
                    self.enact_stop(run.task);
                }
                self.observe(run.task, false);
            } else {
                self.observe(run.task, true);
            }
        }
        // Before the first pass: a lane a live unknown run occupies is never handed on.
        self.hold_unknown_live_runs(&known);
        // A run whose time limit passed while the daemon was down is stopped now; the first
        // tick tells when the others fall due.
        self.time_limits_tick();
        self.mark_dirty();
    }

    /// The tick (core/timers.rs): observes again what failed to commit, enacts stops not yet
    /// written, ends a launch backoff, abandons launches whose worker never came up, fires
    /// notices, stops runs past their time limit and runs retention. Returns when it is next
    /// due; nothing due is `None`, and then only a change brings it back.
    pub(super) fn tick(&mut self) -> NextDue {
        let mut next = NextDue::default();
        self.retry_observations();
        self.retry_stops();
        let now = self.clock.now_ms();
        if self.has_retries() {
            next.after(now, timers::AFTER_CHANGE);
        }
        let instant = std::time::Instant::now();
        if self.launch_backoff.is_over(instant) {
            self.mark_dirty();
        } else if let Some(left) = self.launch_backoff.left(instant) {
            next.after(now, left);
        }
        // Blocked and check-due notices whose time has come (core/notices.rs).
        next.merge(self.notices_tick());
        // Runs past their time limit are stopped; the next limit is due (core/time_limits.rs).
        next.merge(self.time_limits_tick());
        // Finished jobs past `[history] keep`: one bounded batch (core/history.rs).
        self.retention_tick(false);
        if self.config.history.keep.is_some() {
            // A batch in flight or a walk not yet over goes on soon; a finished walk rests.
            let busy = self.retention_busy();
            next.after(
                now,
                if busy {
                    timers::AFTER_CHANGE
                } else {
                    timers::RETENTION_REST
                },
            );
        }
        let Ok(holding) = runs::list_holding(self.store.db()) else {
            // The store answers again later; so does this tick.
            next.after(now, timers::AFTER_CHANGE);
            return next;
        };
        for run in holding {
            let Some(RunPhase::Launching { reserved_at, .. }) = run.phase else {
                continue;
            };
            if now - reserved_at > LAUNCH_CONFIRM_BOUND_MS {
                let alive = self.launcher.worker_alive(&self.run_dir(run.task));
                self.observe(run.task, !alive);
                // Still launching after that: its abandonment did not land; soon again.
                next.after(now, timers::AFTER_CHANGE);
            } else {
                next.at(reserved_at + LAUNCH_CONFIRM_BOUND_MS + 1);
            }
        }
        next.retried_if_past(self.clock.now_ms())
    }

    /// Observations or stops that did not land and are retried by the tick.
    pub(super) fn has_retries(&self) -> bool {
        !self.unobserved.is_empty() || !self.unenacted.is_empty()
    }
}
