//! How a run's end moves its job (SPEC section 4, "How a run's end moves its job"): a pure
//! function of what the worker recorded, the committed stop cause, whether the step was the
//! last, whether the run itself resumed from a checkpoint, and the step's `yield_codes`.
//!
//! The worker already recorded a workload that its stop signal reached as `cancelled`,
//! whatever it exited with (`homebased-worker`'s `stop::stopped`): an exit 0 seen here is one
//! no stop signal caused, so it is finished work. A yield sends no signal, which is why an
//! exit 0 after a yield request still completes the step.
//!
//! `resume` (SPEC section 5, `HOMEBASED_RESUME`) means "an earlier attempt of this step
//! yielded, so a checkpoint exists". It is set by a yield and kept by a restart of the same
//! step: a restart throws away the attempt's progress since its checkpoint, never the
//! checkpoint itself.
//!
//! A time limit is stopped as a restart is, but the job does not come back: a run that was
//! stopped for it, or that ended any other way than a genuine exit 0 once it was committed,
//! fails its job, and the event says why (`detail.cause` `time_limit`). An exit 0 that no stop
//! signal caused is finished work, limit or not: the last step succeeds, an earlier one hands
//! on to the next step, which gets a limit of its own.

use homebased_shared::event::{EventCause, EventKind};
use homebased_shared::queue::{RunStatus, StopCause};
use homebased_shared::rundir::ExitReason;
use homebased_shared::spec::YieldCodes;

/// What ended the run, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// The worker recorded it in `exit.json`.
    Recorded(ExitReason),
    /// The worker vanished without `exit.json`.
    Lost,
}

/// Where the job goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobNext {
    Succeeded,
    /// Queued again at the next step, keeping its slot.
    NextStep,
    /// Queued again at the same step, keeping its slot; `resume` after a yield, and after a
    /// restart of an attempt that itself resumed.
    Requeue {
        resume: bool,
    },
    Cancelled,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub run: RunStatus,
    pub job: JobNext,
    pub event: Option<EventKind>,
    /// The event's `detail`, when its kind alone does not say why.
    pub detail: Option<EventCause>,
}

/// `resumed`: the run was started with `HOMEBASED_RESUME=1` (an earlier attempt of its step
/// yielded). `yield_codes`: the step's exit codes that mean "checkpoint saved after a yield
/// request", a yield only when one was committed for this run.
pub fn classify(
    end: &RunEnd,
    cause: Option<StopCause>,
    last_step: bool,
    resumed: bool,
    yield_codes: &YieldCodes,
) -> Outcome {
    use JobNext::*;
    let outcome = |run, job, event| Outcome {
        run,
        job,
        event,
        detail: None,
    };
    let exited_zero = matches!(end, RunEnd::Recorded(ExitReason::Exit { code: 0 }));
    // A genuine exit 0 is never turned into a failure or a preemption.
    if exited_zero {
        return match (last_step, cause) {
            (true, _) => outcome(
                RunStatus::Succeeded,
                Succeeded,
                Some(EventKind::JobSucceeded),
            ),
            (false, Some(StopCause::UserCancel)) => outcome(
                RunStatus::Succeeded,
                Cancelled,
                Some(EventKind::JobCancelled),
            ),
            (false, _) => outcome(RunStatus::Succeeded, NextStep, None),
        };
    }
    if cause == Some(StopCause::UserCancel) {
        return outcome(
            RunStatus::Cancelled,
            Cancelled,
            Some(EventKind::JobCancelled),
        );
    }
    if cause == Some(StopCause::TimeLimit) {
        // Whatever ended it once its limit was committed: a yield code is no checkpoint to
        // resume from here, since the job does not run again.
        let run = match end {
            RunEnd::Lost => RunStatus::Lost,
            RunEnd::Recorded(_) => RunStatus::Failed,
        };
        return Outcome {
            detail: Some(EventCause::TimeLimit),
            ..outcome(run, Failed, Some(EventKind::JobFailed))
        };
    }
    match (end, cause) {
        (RunEnd::Recorded(ExitReason::Exit { code }), Some(StopCause::Yield))
            if yield_codes.contains(*code) =>
        {
            outcome(
                RunStatus::Preempted,
                Requeue { resume: true },
                Some(EventKind::JobPreempted),
            )
        }
        (RunEnd::Recorded(ExitReason::Cancelled), Some(StopCause::Restart)) => outcome(
            RunStatus::Preempted,
            Requeue { resume: resumed },
            Some(EventKind::JobPreempted),
        ),
        (RunEnd::Recorded(ExitReason::Cancelled), _) => outcome(
            RunStatus::Cancelled,
            Cancelled,
            Some(EventKind::JobCancelled),
        ),
        (RunEnd::Lost, _) => outcome(RunStatus::Lost, Failed, Some(EventKind::JobFailed)),
        (RunEnd::Recorded(_), _) => outcome(RunStatus::Failed, Failed, Some(EventKind::JobFailed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ExitReason::*;
    use JobNext::*;
    use StopCause::*;

    fn exit(code: i32) -> RunEnd {
        RunEnd::Recorded(Exit { code })
    }

    /// A step's `yield_codes` as validated from JSON.
    fn codes(list: serde_json::Value) -> YieldCodes {
        serde_json::from_value(list).unwrap()
    }

    #[test]
    fn a_yield_code_is_a_yield_only_after_a_committed_yield() {
        let torchrun = codes(serde_json::json!([75, 1]));
        let plain = YieldCodes::default();
        let preempted = (RunStatus::Preempted, Requeue { resume: true });
        let failed = (RunStatus::Failed, Failed);
        #[rustfmt::skip]
        type Expected = (RunStatus, JobNext);
        let cases: Vec<(&YieldCodes, RunEnd, Option<StopCause>, Expected)> = vec![
            // torchrun reports the worker's 75 as 1: with [75, 1] both are the yield.
            (&torchrun, exit(1), Some(Yield), preempted),
            (&torchrun, exit(75), Some(Yield), preempted),
            // Without the code listed, the launcher's 1 is a failure and its checkpoint unused.
            (&plain, exit(1), Some(Yield), failed),
            (&plain, exit(75), Some(Yield), preempted),
            // Unasked, a yield code is a failure like any other exit.
            (&torchrun, exit(1), None, failed),
            (&torchrun, exit(75), None, failed),
            (&torchrun, exit(1), Some(Restart), failed),
            (&torchrun, exit(2), Some(Yield), failed),
            // A cancel still wins over a yield code, an exit 0 still finishes the step.
            (
                &torchrun,
                exit(1),
                Some(UserCancel),
                (RunStatus::Cancelled, JobNext::Cancelled),
            ),
            (
                &torchrun,
                exit(0),
                Some(Yield),
                (RunStatus::Succeeded, NextStep),
            ),
            // The worker's stop signal reached it: what it exited with no longer matters.
            (
                &torchrun,
                RunEnd::Recorded(ExitReason::Cancelled),
                Some(Restart),
                (RunStatus::Preempted, Requeue { resume: false }),
            ),
        ];
        for (yield_codes, end, cause, expected) in cases {
            let o = classify(&end, cause, false, false, yield_codes);
            assert_eq!(
                (o.run, o.job),
                expected,
                "{yield_codes:?} {end:?} {cause:?}"
            );
        }
    }

    #[test]
    fn the_spec_table() {
        let cancelled = RunEnd::Recorded(ExitReason::Cancelled);
        let signal = RunEnd::Recorded(Signal { signal: 9 });
        let spawn = RunEnd::Recorded(SpawnFailed {
            message: "x".into(),
        });
        let cases: Vec<(RunEnd, Option<StopCause>, bool, RunStatus, JobNext)> = vec![
            (exit(0), None, true, RunStatus::Succeeded, Succeeded),
            (
                exit(0),
                Some(UserCancel),
                true,
                RunStatus::Succeeded,
                Succeeded,
            ),
            (exit(0), Some(Yield), true, RunStatus::Succeeded, Succeeded),
            (exit(0), None, false, RunStatus::Succeeded, NextStep),
            (exit(0), Some(Yield), false, RunStatus::Succeeded, NextStep),
            (
                exit(0),
                Some(Restart),
                false,
                RunStatus::Succeeded,
                NextStep,
            ),
            (
                exit(0),
                Some(UserCancel),
                false,
                RunStatus::Succeeded,
                JobNext::Cancelled,
            ),
            (
                exit(75),
                Some(Yield),
                false,
                RunStatus::Preempted,
                Requeue { resume: true },
            ),
            (
                exit(75),
                Some(Yield),
                true,
                RunStatus::Preempted,
                Requeue { resume: true },
            ),
            (
                cancelled.clone(),
                Some(Restart),
                true,
                RunStatus::Preempted,
                Requeue { resume: false },
            ),
            (
                exit(75),
                Some(UserCancel),
                true,
                RunStatus::Cancelled,
                JobNext::Cancelled,
            ),
            (
                exit(3),
                Some(UserCancel),
                true,
                RunStatus::Cancelled,
                JobNext::Cancelled,
            ),
            (
                RunEnd::Lost,
                Some(UserCancel),
                true,
                RunStatus::Cancelled,
                JobNext::Cancelled,
            ),
            (
                cancelled.clone(),
                None,
                true,
                RunStatus::Cancelled,
                JobNext::Cancelled,
            ),
            (
                cancelled,
                Some(Yield),
                true,
                RunStatus::Cancelled,
                JobNext::Cancelled,
            ),
            (exit(75), None, true, RunStatus::Failed, Failed),
            (exit(75), Some(Restart), true, RunStatus::Failed, Failed),
            (exit(1), None, false, RunStatus::Failed, Failed),
            (exit(1), Some(Yield), false, RunStatus::Failed, Failed),
            (signal, Some(Restart), true, RunStatus::Failed, Failed),
            (spawn, None, true, RunStatus::Failed, Failed),
            (RunEnd::Lost, None, true, RunStatus::Lost, Failed),
            (RunEnd::Lost, Some(Restart), false, RunStatus::Lost, Failed),
        ];
        for (end, cause, last, run, job) in cases {
            let o = classify(&end, cause, last, false, &YieldCodes::default());
            assert_eq!((o.run, o.job), (run, job), "{end:?} {cause:?} last={last}");
        }
    }

    #[test]
    fn a_checkpoint_from_an_earlier_yield_survives_a_restart_and_nothing_else_makes_one() {
        let cancelled = RunEnd::Recorded(ExitReason::Cancelled);
        #[rustfmt::skip]
        let cases: Vec<(RunEnd, Option<StopCause>, bool, JobNext)> = vec![
            // A yield always leaves a checkpoint, whatever the attempt started from.
            (exit(75), Some(Yield), false, Requeue { resume: true }),
            (exit(75), Some(Yield), true, Requeue { resume: true }),
            // A restart keeps what the attempt started from.
            (cancelled.clone(), Some(Restart), true, Requeue { resume: true }),
            (cancelled.clone(), Some(Restart), false, Requeue { resume: false }),
            // The next step starts afresh; ends that move no job keep nothing.
            (exit(0), None, true, NextStep),
            (exit(0), Some(Restart), true, NextStep),
            (exit(1), None, true, Failed),
            (cancelled, Some(UserCancel), true, JobNext::Cancelled),
        ];
        for (end, cause, resumed, job) in cases {
            let o = classify(&end, cause, false, resumed, &YieldCodes::default());
            assert_eq!(o.job, job, "{end:?} {cause:?} resumed={resumed}");
        }
    }

    #[test]
    fn a_run_past_its_time_limit_fails_its_job_unless_it_finished_on_its_own() {
        let cancelled = RunEnd::Recorded(ExitReason::Cancelled);
        let time_limit = Some(EventCause::TimeLimit);
        #[rustfmt::skip]
        type Expected = (RunStatus, JobNext, Option<EventKind>, Option<EventCause>);
        let cases: Vec<(RunEnd, bool, Expected)> = vec![
            // Stopped by the worker (TERM, grace, KILL; a workload that exits 0 after the TERM
            // included): failed, not requeued like a restart.
            (
                cancelled.clone(),
                true,
                (
                    RunStatus::Failed,
                    Failed,
                    Some(EventKind::JobFailed),
                    time_limit,
                ),
            ),
            (
                cancelled,
                false,
                (
                    RunStatus::Failed,
                    Failed,
                    Some(EventKind::JobFailed),
                    time_limit,
                ),
            ),
            // Ended on its own after the limit was committed, before the signal reached it.
            (
                exit(1),
                false,
                (
                    RunStatus::Failed,
                    Failed,
                    Some(EventKind::JobFailed),
                    time_limit,
                ),
            ),
            (
                exit(75),
                false,
                (
                    RunStatus::Failed,
                    Failed,
                    Some(EventKind::JobFailed),
                    time_limit,
                ),
            ),
            (
                RunEnd::Recorded(Signal { signal: 9 }),
                true,
                (
                    RunStatus::Failed,
                    Failed,
                    Some(EventKind::JobFailed),
                    time_limit,
                ),
            ),
            (
                RunEnd::Lost,
                true,
                (
                    RunStatus::Lost,
                    Failed,
                    Some(EventKind::JobFailed),
                    time_limit,
                ),
            ),
            // A genuine exit 0 is finished work: never turned into a failure.
            (
                exit(0),
                true,
                (
                    RunStatus::Succeeded,
                    Succeeded,
                    Some(EventKind::JobSucceeded),
                    None,
                ),
            ),
            (exit(0), false, (RunStatus::Succeeded, NextStep, None, None)),
        ];
        for (end, last, expected) in cases {
            let o = classify(&end, Some(TimeLimit), last, true, &YieldCodes::default());
            assert_eq!(
                (o.run, o.job, o.event, o.detail),
                expected,
                "{end:?} last={last}"
            );
        }
        // Other causes say nothing more than their kind.
        for cause in [None, Some(Yield), Some(Restart), Some(UserCancel)] {
            let o = classify(&exit(1), cause, true, false, &YieldCodes::default());
            assert_eq!(o.detail, None, "{cause:?}");
        }
    }

    #[test]
    fn events_follow_the_job() {
        let plain = YieldCodes::default();
        assert_eq!(
            classify(&exit(0), None, true, false, &plain).event,
            Some(EventKind::JobSucceeded)
        );
        assert_eq!(classify(&exit(0), None, false, false, &plain).event, None);
        assert_eq!(
            classify(&exit(75), Some(Yield), false, false, &plain).event,
            Some(EventKind::JobPreempted)
        );
        assert_eq!(
            classify(&RunEnd::Lost, None, false, false, &plain).event,
            Some(EventKind::JobFailed)
        );
        assert_eq!(
            classify(&exit(2), Some(UserCancel), false, false, &plain).event,
            Some(EventKind::JobCancelled)
        );
    }
}
