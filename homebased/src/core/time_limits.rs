//! Time limits (SPEC sections 3 and 4): a run still executing at its start plus its job's
//! `time_limit` is stopped exactly as a restart is (`control/stop`, TERM, grace, KILL,
//! cleanup), and its job then fails with `JOB_FAILED`, `detail.cause` `time_limit`
//! (`core::classify`). Each run counts from its own start, so a preempted job that runs again
//! gets its whole limit again.
//!
//! The start is the workload's, as the worker records it in `worker.json` and the store keeps
//! as the run's `started_at`: the worker reads the same limit from `run.json` and tells the
//! workload the same instant in `HOMEBASED_DEADLINE` (`RunSpec::deadline`). The limit is one
//! more timer of the core's tick (`core/timers.rs`): the tick commits the stops that are due
//! and answers when the next limit falls due, so an idle daemon sleeps until then. At start,
//! reconciling commits the stop of a run whose limit passed while the daemon was down.

use super::timers::{self, NextDue};
use super::Core;
use crate::lifecycle::{CommittedStop, Observation, RunPhase};
use crate::store::{jobs, runs};
use homebased_shared::queue::StopCause;
use homebased_shared::time::Millis;
use std::time::Duration;

/// The limit each run of a job gets, from its spec's `time_limit` (`JobHead::time_limit`
/// keeps it beside the spec, so that no caller decodes a spec for it).
pub fn limit_of(time_limit: Option<Duration>) -> Option<Duration> {
    let limit = time_limit?;
    // A test cannot wait the shortest limit out (a minute): in builds with the `failpoints`
    // feature, `FAILPOINTS=time_limit.as=return(3s)` gives every limited run that limit
    // instead, in the daemon's timer and in the `run.json` the worker reads alike. Inert
    // without FAILPOINTS; absent from release builds.
    fail::fail_point!("time_limit.as", |given: Option<String>| {
        given
            .as_deref()
            .and_then(|text| humantime::parse_duration(text).ok())
            .or(Some(limit))
    });
    Some(limit)
}

/// What a run's limit asks of it at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Nothing, ever: no limit, not started yet, or already stopping for a stronger cause
    /// (the limit itself, a user's cancel) or ended.
    Never,
    /// The stop is due then.
    At(Millis),
    /// The limit has passed: stop it now.
    Now,
}

/// The one rule: a run that executes, or that is stopping only for a preemption (yield,
/// restart: weaker causes, SPEC section 4), is due at its start plus `limit`.
pub fn due(phase: &RunPhase, limit: Option<Duration>, now: Millis) -> Due {
    let Some(limit) = limit else {
        return Due::Never;
    };
    let started_at = match phase {
        RunPhase::Executing { started_at } => *started_at,
        RunPhase::Stopping { started_at, stop } if stop.cause < StopCause::TimeLimit => *started_at,
        RunPhase::Launching { .. }
        | RunPhase::Stopping { .. }
        | RunPhase::Cleaning { .. }
        | RunPhase::Attention { .. } => return Due::Never,
    };
    let deadline = started_at.saturating_add(i64::try_from(limit.as_millis()).unwrap_or(i64::MAX));
    if deadline <= now {
        Due::Now
    } else {
        Due::At(deadline)
    }
}

impl Core {
    /// Commits the stop of every run whose limit has passed; answers when the next one falls
    /// due. A stop that does not commit (a store that refused it) is tried again soon.
    pub(super) fn time_limits_tick(&mut self) -> NextDue {
        let now = self.clock.now_ms();
        let mut next = NextDue::default();
        // The held runs, and every held run's limit in one read (not its whole job, queue
        // position counted).
        let db = self.store.db();
        let (holding, terms) = match runs::list_holding(db)
            .and_then(|holding| Ok((holding, jobs::holding_terms(db)?)))
        {
            Ok(read) => read,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the runs to check their time limits");
                next.after(now, timers::AFTER_CHANGE);
                return next;
            }
        };
        for run in holding {
            let Some(phase) = &run.phase else { continue };
            if !matches!(
                phase,
                RunPhase::Executing { .. } | RunPhase::Stopping { .. }
            ) {
                continue;
            }
            let limit = match terms.get(&run.job) {
                Some(terms) => limit_of(terms.time_limit),
                None => {
                    tracing::error!(task = %run.task, job = %run.job, "the job of a held run is not in the store");
                    continue;
                }
            };
            match due(phase, limit, now) {
                Due::Never => {}
                Due::At(at) => next.at(at),
                Due::Now => {
                    tracing::info!(task = %run.task, job = %run.job, "time limit reached: stopping the run");
                    let request = CommittedStop {
                        cause: StopCause::TimeLimit,
                        requested_at: now,
                        for_job: None,
                    };
                    if let Err(e) = self.advance(&run, [Observation::StopCommitted(request)]) {
                        tracing::error!(task = %run.task, error = %e, "cannot commit a time-limit stop; retrying");
                        next.after(now, timers::AFTER_CHANGE);
                    }
                }
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::CommittedStop;
    use homebased_shared::ids::AttentionId;

    const MINUTE: Duration = Duration::from_secs(60);

    fn stopping(cause: StopCause) -> RunPhase {
        RunPhase::Stopping {
            started_at: 10_000,
            stop: CommittedStop {
                cause,
                requested_at: 20_000,
                for_job: None,
            },
        }
    }

    #[test]
    fn a_run_is_due_at_its_start_plus_its_limit() {
        let executing = RunPhase::Executing { started_at: 10_000 };
        assert_eq!(due(&executing, Some(MINUTE), 10_000), Due::At(70_000));
        assert_eq!(due(&executing, Some(MINUTE), 69_999), Due::At(70_000));
        assert_eq!(due(&executing, Some(MINUTE), 70_000), Due::Now);
        // A daemon that was down at that instant stops it at its next look.
        assert_eq!(due(&executing, Some(MINUTE), 9_000_000), Due::Now);
        assert_eq!(due(&executing, None, 9_000_000), Due::Never);
    }

    #[test]
    fn only_a_weaker_stop_in_flight_gives_way_to_the_limit() {
        for cause in [StopCause::Yield, StopCause::Restart] {
            assert_eq!(due(&stopping(cause), Some(MINUTE), 70_000), Due::Now);
            assert_eq!(due(&stopping(cause), Some(MINUTE), 0), Due::At(70_000));
        }
        for cause in [StopCause::TimeLimit, StopCause::UserCancel] {
            assert_eq!(due(&stopping(cause), Some(MINUTE), 70_000), Due::Never);
        }
    }

    #[test]
    fn a_run_not_started_or_already_ended_is_never_due() {
        let phases = [
            RunPhase::Launching {
                reserved_at: 0,
                stop: None,
            },
            RunPhase::Cleaning { attempt: 1 },
            RunPhase::Attention {
                id: AttentionId::new(),
                failure: homebased_shared::wire::CleanupResult {
                    attempt: 1,
                    outcome: homebased_shared::rundir::CleanupOutcome::EnumerationFailed {
                        message: "no /proc".into(),
                    },
                },
            },
        ];
        for phase in phases {
            assert_eq!(due(&phase, Some(MINUTE), i64::MAX), Due::Never, "{phase:?}");
        }
    }
}
