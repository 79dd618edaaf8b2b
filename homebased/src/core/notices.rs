//! Notices (SPEC section 8): `JOB_BLOCKED` once per blocking episode of the first blocked
//! job, and `JOB_CHECK_DUE` once per run whose output has been silent for the job's
//! `timeout`. Notices never stop a run.
//!
//! The core calls [`Core::notice_blocked_head`] after every scheduling pass and
//! [`Core::notices_tick`] on its safety tick. The timing rules are pure functions in
//! [`episode`] and [`check_due`]; the durable bookkeeping is in `store::notices`. Whether a
//! notice is still true when its turn to be delivered comes is [`Core::notice_still_true`].

pub mod check_due;
pub mod episode;
#[cfg(test)]
mod tests;

use super::timers::NextDue;
use super::Core;
use crate::lifecycle::RunPhase;
use crate::scheduler::{BlockedHead, Blocker};
use crate::store::events::{self, EventRun, Pending};
use crate::store::jobs;
use crate::store::notices::{self as stored, Episode};
use crate::store::runs;
use homebased_shared::error::ApiResult;
use homebased_shared::event::{BlockedNotice, CheckDueNotice, EventDetail, EventKind};
use homebased_shared::queue::{JobStatus, RunStatus};
use homebased_shared::time::{to_ms, Millis};
use serde_json::{json, Value};
use std::path::Path;

impl Core {
    /// The pass hook: keeps the episode bookkeeping for the head the scheduler found, and
    /// fires its notice when due, waking delivery for it. Every other event wakes delivery
    /// where it is committed (`Core::act` for a run's move, cancel, submit), not here.
    pub(super) fn notice_blocked_head(&mut self, head: Option<BlockedHead>) {
        let now = self.clock.now_ms();
        if let Err(e) = self.track_episode(head.as_ref(), now) {
            tracing::error!(error = %e, "cannot keep the blocked-notice episode");
        }
        match self.fire_due_blocked(now) {
            Ok(true) => self.wake_delivery(),
            Ok(false) => {}
            Err(e) => tracing::error!(error = %e, "cannot produce a blocked notice"),
        }
    }

    /// The tick hook: a blocked notice or a check-due whose time has come. Returns when the
    /// next one falls due (core/timers.rs).
    pub(super) fn notices_tick(&mut self) -> NextDue {
        let now = self.clock.now_ms();
        let blocked = self.fire_due_blocked(now).unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot produce a blocked notice");
            false
        });
        let checks = self.fire_check_due(now).unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot produce a check-due notice");
            false
        });
        if blocked || checks {
            self.wake_delivery();
        }
        self.notices_due(now).unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot tell when the next notice is due");
            let mut soon = NextDue::default();
            soon.after(now, super::timers::AFTER_CHANGE);
            soon
        })
    }

    /// When the open episode's notice and each run's check-due fall due, as things stand.
    /// A run that writes output moves its check later; the tick then finds it not due and
    /// asks again. A change (a new episode, a new run) brings a tick that asks again too.
    fn notices_due(&self, now: Millis) -> ApiResult<NextDue> {
        let db = self.store.db();
        let mut next = NextDue::default();
        if let Some(open) = stored::open(db)? {
            if open.notified_seq.is_none() {
                next.at(episode::due_at(
                    open.started_at,
                    open.yield_requested,
                    &self.config.resource.notify_blocked_after,
                ));
            }
        }
        for run in stored::runs_without_check(db)? {
            let since = check_due::silent_since(
                modified_ms(&self.run_dir(run.task).output_log()),
                run.workload_started_at
                    .or(run.started_at)
                    .unwrap_or(run.reserved_at),
            );
            // Nothing is due before the minimum: the job's own timeout is read only past it.
            let earliest = check_due::due_at(since, check_due::MIN_TIMEOUT);
            if earliest > now {
                next.at(earliest);
                continue;
            }
            // An unreadable spec is never due (fire_check_due says why once it is).
            if let Ok(spec) = self.specs.get(db, run.job) {
                next.at(check_due::due_at(since, spec.timeout));
            }
        }
        Ok(next)
    }

    /// Tells the delivery loop that events may be pending. A wake with nothing to deliver
    /// costs one query.
    pub(super) fn wake_delivery(&self) {
        self.delivery_wake.notify_one();
        // A remote job's events are its origin's: its long poll, if any, answers now.
        self.fleet_wake.notify_waiters();
    }

    fn track_episode(&mut self, head: Option<&BlockedHead>, now: Millis) -> ApiResult<()> {
        let open = stored::open(self.store.db())?;
        let view = open.as_ref().map(|e| episode::Open {
            job: e.job,
            started_at: e.started_at,
        });
        let change = episode::next(view.as_ref(), head.map(|h| h.job), now);
        let seen = match head {
            Some(head) => Some((head.yield_requested, self.blockers_json(head)?)),
            None => None,
        };
        match (change, seen) {
            (episode::Change::Idle, _) => Ok(()),
            (episode::Change::End, _) => {
                let Some(open) = open else { return Ok(()) };
                self.store.write(|tx| stored::end(tx, open.id, now))
            }
            (episode::Change::Continue, Some((yield_requested, blockers))) => {
                let Some(open) = open else { return Ok(()) };
                if open.yield_requested == yield_requested && open.blockers == blockers {
                    return Ok(());
                }
                self.store
                    .write(|tx| stored::refresh(tx, open.id, yield_requested, &blockers))
            }
            (episode::Change::Start { episode, .. }, Some((yield_requested, blockers))) => {
                let new = Episode {
                    id: uuid::Uuid::now_v7(),
                    job: episode.job,
                    started_at: episode.started_at,
                    ended_at: None,
                    yield_requested,
                    blockers,
                    notified_seq: None,
                };
                tracing::info!(job = %new.job, episode = %new.id, "a blocking episode starts");
                self.store.write(|tx| {
                    if let Some(open) = &open {
                        stored::end(tx, open.id, now)?;
                    }
                    stored::start(tx, &new)
                })
            }
            (episode::Change::Continue | episode::Change::Start { .. }, None) => Ok(()),
        }
    }

    /// The blockers of SPEC section 8: every busy lane the head may use.
    fn blockers_json(&self, head: &BlockedHead) -> ApiResult<Value> {
        let holding = runs::list_holding(self.store.db())?;
        let list =
            head.blockers
                .iter()
                .map(|b| match *b {
                    Blocker::Run {
                        resource,
                        job,
                        task,
                    } => json!({ "kind": "run", "resource": resource, "job": job, "task": task }),
                    Blocker::Attention { resource } => {
                        let attention = holding.iter().find(|r| r.holds(resource)).and_then(|r| {
                            match &r.phase {
                                Some(RunPhase::Attention { id, .. }) => Some(*id),
                                _ => None,
                            }
                        });
                        json!({ "kind": "attention", "resource": resource, "attention": attention })
                    }
                })
                .collect();
        Ok(Value::Array(list))
    }

    /// Produces the open episode's notice if it is due. Returns whether it did.
    fn fire_due_blocked(&mut self, now: Millis) -> ApiResult<bool> {
        let Some(open) = stored::open(self.store.db())? else {
            return Ok(false);
        };
        let after = self.config.resource.notify_blocked_after;
        if !episode::notice_due(
            open.started_at,
            open.yield_requested,
            open.notified_seq.is_some(),
            now,
            &after,
        ) {
            return Ok(false);
        }
        let machine = self.machine;
        let fired = self.store.write(|tx| {
            let job = jobs::require(tx, open.job)?;
            if job.status() != JobStatus::Queued {
                return Ok(None);
            }
            let detail = EventDetail {
                blocked: Some(BlockedNotice {
                    episode: open.id,
                    blocked_since: open.started_at,
                    blockers: open.blockers.clone(),
                }),
                ..EventDetail::default()
            };
            let seq = events::append(tx, machine, &job, EventKind::JobBlocked, None, detail)?;
            stored::mark_notified(tx, open.id, seq)?;
            Ok(Some(seq))
        })?;
        if let Some(seq) = fired {
            tracing::info!(job = %open.job, episode = %open.id, seq, "blocked notice");
        }
        Ok(fired.is_some())
    }

    /// Produces `JOB_CHECK_DUE` for every run silent for its timeout. Returns whether any.
    fn fire_check_due(&mut self, now: Millis) -> ApiResult<bool> {
        let mut fired = false;
        for run in stored::runs_without_check(self.store.db())? {
            let since = check_due::silent_since(
                modified_ms(&self.run_dir(run.task).output_log()),
                run.workload_started_at
                    .or(run.started_at)
                    .unwrap_or(run.reserved_at),
            );
            // Cheap first: nothing is due before the minimum, whatever the job says.
            if !check_due::is_due(now, since, check_due::MIN_TIMEOUT) {
                continue;
            }
            let timeout = match self.specs.get(self.store.db(), run.job) {
                Ok(spec) => spec.timeout,
                Err(e) => {
                    tracing::warn!(task = %run.task, error = %e, "no check-due for this run");
                    continue;
                }
            };
            if !check_due::is_due(now, since, timeout) {
                continue;
            }
            let machine = self.machine;
            self.store.write(|tx| {
                if stored::check_due_seq(tx, run.task)?.is_some() {
                    return Ok(());
                }
                let job = jobs::require(tx, run.job)?;
                let detail = EventDetail {
                    check_due: Some(CheckDueNotice {
                        silent_since: since,
                        timeout: humantime::format_duration(check_due::effective_timeout(timeout))
                            .to_string(),
                    }),
                    ..EventDetail::default()
                };
                let seq = events::append(
                    tx,
                    machine,
                    &job,
                    EventKind::JobCheckDue,
                    Some(EventRun::of(&run)),
                    detail,
                )?;
                stored::mark_check_due(tx, run.task, seq)?;
                tracing::info!(task = %run.task, job = %run.job, seq, "check-due notice");
                Ok(())
            })?;
            fired = true;
        }
        Ok(fired)
    }

    /// Whether a pending notice still tells the truth; every other event always does. A
    /// `JOB_BLOCKED` is true while its episode is open and its job queued; a
    /// `JOB_CHECK_DUE` while its run still runs and has written nothing since the notice.
    pub(super) fn notice_still_true(&self, event: &Pending) -> ApiResult<bool> {
        let db = self.store.db();
        // A notice this build cannot read is no longer provably true.
        let Some(body) = event.typed() else {
            return Ok(!event.kind.is_some_and(EventKind::is_notice));
        };
        match event.kind {
            Some(EventKind::JobBlocked) => {
                let episode = body.detail.blocked.as_ref().map(|b| b.episode);
                let open = stored::open(db)?;
                let job = jobs::get(db, event.job)?;
                Ok(matches!(
                    (episode, open, job),
                    (Some(id), Some(open), Some(job))
                        if open.id == id && open.job == event.job
                            && job.status() == JobStatus::Queued
                ))
            }
            Some(EventKind::JobCheckDue) => {
                let Some(task) = body.task else {
                    return Ok(false);
                };
                let Some(run) = runs::get(db, task)? else {
                    return Ok(false);
                };
                if run.status() != RunStatus::Running || run.phase.is_none() {
                    return Ok(false);
                }
                let written = modified_ms(&self.run_dir(run.task).output_log());
                Ok(written.is_none_or(|w| w <= event.created_at))
            }
            _ => Ok(true),
        }
    }
}

/// The modification time of a file, `None` when it does not exist (yet).
fn modified_ms(path: &Path) -> Option<Millis> {
    // The log itself, never what a link in its place names.
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .map(to_ms)
}
