//! Every phase against every observation: what [`next`] answers.

use super::*;
use homebased_shared::rundir::CleanupOutcome;

const NOW: Millis = 50_000;

fn ctx() -> Context {
    Context {
        now: NOW,
        new_attention: attention_id(),
    }
}

fn attention_id() -> AttentionId {
    "6a1f7c53-0d5e-4d47-9c8b-2f1f3c1d9e01".parse().unwrap()
}

fn job() -> JobId {
    "0b3c1c4e-4f0e-4f43-9f55-0f6f3f8f1a11".parse().unwrap()
}

fn stop(cause: StopCause, requested_at: Millis, for_job: Option<JobId>) -> CommittedStop {
    CommittedStop {
        cause,
        requested_at,
        for_job,
    }
}

fn record(attempt: u32, outcome: CleanupOutcome) -> CleanupRecord {
    CleanupRecord {
        attempt,
        outcome,
        finished_at: NOW,
    }
}

fn failed() -> CleanupOutcome {
    CleanupOutcome::EnumerationFailed {
        message: "no /proc".into(),
    }
}

fn launching(stop: Option<CommittedStop>) -> RunPhase {
    RunPhase::Launching {
        reserved_at: 1_000,
        stop,
    }
}

fn executing() -> RunPhase {
    RunPhase::Executing { started_at: 2_000 }
}

fn stopping(cause: StopCause) -> RunPhase {
    RunPhase::Stopping {
        started_at: 2_000,
        stop: stop(cause, 3_000, Some(job())),
    }
}

fn cleaning(attempt: u32) -> RunPhase {
    RunPhase::Cleaning { attempt }
}

fn held() -> RunPhase {
    RunPhase::Attention {
        id: attention_id(),
        failure: CleanupResult::from(&record(1, failed())),
    }
}

fn every_observation() -> Vec<Observation> {
    vec![
        Observation::Confirmed {
            workload_started_at: Some(1_500),
        },
        Observation::Exited {
            reason: ExitReason::Exit { code: 0 },
            ended_at: 4_500,
        },
        Observation::WorkerGone {
            wrote_worker_json: true,
        },
        Observation::WorkerGone {
            wrote_worker_json: false,
        },
        Observation::WorkerDetached { adoptions: 0 },
        Observation::WorkerDetached {
            adoptions: MAX_ADOPTIONS,
        },
        Observation::CleanupRecorded(record(1, CleanupOutcome::Clean)),
        Observation::CleanupRecorded(record(1, failed())),
        Observation::StopCommitted(stop(StopCause::UserCancel, 4_000, None)),
        Observation::Released,
    ]
}

fn moved(
    phase: Option<RunPhase>,
    commits: Vec<Commit>,
    effects: Vec<Effect>,
) -> Option<Transition> {
    Some(Transition {
        phase,
        commits,
        effects,
    })
}

/// The whole table, one row per (phase, observation) pair.
#[test]
fn every_phase_against_every_observation() {
    use Commit::*;
    use Effect::*;
    let cancel = stop(StopCause::UserCancel, 4_000, None);
    let ended = |reason| RecordEnd {
        end: RunEnd::Recorded(reason),
        ended_at: 4_500,
    };
    let lost = || RecordEnd {
        end: RunEnd::Lost,
        ended_at: NOW,
    };
    let exit0 = ExitReason::Exit { code: 0 };
    let attention = |r: CleanupRecord| RunPhase::Attention {
        id: attention_id(),
        failure: CleanupResult::from(&r),
    };
    let phases = [
        launching(None),
        executing(),
        stopping(StopCause::Yield),
        cleaning(1),
        held(),
    ];
    // Rows in the order of `every_observation`.
    let expected: Vec<Vec<Option<Transition>>> = vec![
        // launching
        vec![
            moved(
                Some(RunPhase::Executing { started_at: 1_500 }),
                vec![RecordStart {
                    workload_started_at: Some(1_500),
                }],
                vec![],
            ),
            moved(
                Some(cleaning(1)),
                vec![
                    RecordStart {
                        workload_started_at: None,
                    },
                    ended(exit0.clone()),
                ],
                vec![],
            ),
            moved(
                Some(cleaning(2)),
                vec![lost()],
                vec![CleanUpLost { attempt: 2 }],
            ),
            moved(None, vec![Abandon], vec![]),
            // A launch that left a container: adopted, still to be confirmed.
            moved(Some(launching(None)), vec![], vec![Adopt { adoption: 1 }]),
            // Adoptions ran out: lost like a launch that wrote worker.json.
            moved(
                Some(cleaning(2)),
                vec![lost()],
                vec![CleanUpLost { attempt: 2 }],
            ),
            None,
            None,
            moved(
                Some(launching(Some(cancel))),
                vec![RecordStop(cancel)],
                vec![],
            ),
            None,
        ],
        // executing
        vec![
            None,
            moved(Some(cleaning(1)), vec![ended(exit0.clone())], vec![]),
            moved(
                Some(cleaning(2)),
                vec![lost()],
                vec![CleanUpLost { attempt: 2 }],
            ),
            moved(
                Some(cleaning(2)),
                vec![lost()],
                vec![CleanUpLost { attempt: 2 }],
            ),
            // The container runs on: a new worker adopts it, the run keeps executing.
            moved(Some(executing()), vec![], vec![Adopt { adoption: 1 }]),
            // Adoptions ran out: lost, as without adoption.
            moved(
                Some(cleaning(2)),
                vec![lost()],
                vec![CleanUpLost { attempt: 2 }],
            ),
            None,
            None,
            moved(
                Some(RunPhase::Stopping {
                    started_at: 2_000,
                    stop: cancel,
                }),
                vec![RecordStop(cancel)],
                vec![EnactStop],
            ),
            None,
        ],
        // stopping (yield requested at 3 000 for `job`)
        vec![
            None,
            moved(Some(cleaning(1)), vec![ended(exit0.clone())], vec![]),
            moved(
                Some(cleaning(2)),
                vec![lost()],
                vec![CleanUpLost { attempt: 2 }],
            ),
            moved(
                Some(cleaning(2)),
                vec![lost()],
                vec![CleanUpLost { attempt: 2 }],
            ),
            // A stop was requested: never adopted, the daemon removes the container.
            moved(
                Some(cleaning(2)),
                vec![lost()],
                vec![CleanUpLost { attempt: 2 }],
            ),
            moved(
                Some(cleaning(2)),
                vec![lost()],
                vec![CleanUpLost { attempt: 2 }],
            ),
            None,
            None,
            // Upgraded to a cancel; the first request time and job are kept.
            {
                let merged = stop(StopCause::UserCancel, 3_000, Some(job()));
                moved(
                    Some(RunPhase::Stopping {
                        started_at: 2_000,
                        stop: merged,
                    }),
                    vec![RecordStop(merged)],
                    vec![EnactStop],
                )
            },
            None,
        ],
        // cleaning, attempt 1
        vec![
            None,
            None,
            moved(Some(cleaning(2)), vec![], vec![CleanUpLost { attempt: 2 }]),
            moved(Some(cleaning(2)), vec![], vec![CleanUpLost { attempt: 2 }]),
            moved(Some(cleaning(2)), vec![], vec![CleanUpLost { attempt: 2 }]),
            moved(Some(cleaning(2)), vec![], vec![CleanUpLost { attempt: 2 }]),
            moved(
                None,
                vec![RecordCleanup(record(1, CleanupOutcome::Clean))],
                vec![],
            ),
            moved(
                Some(attention(record(1, failed()))),
                vec![RecordCleanup(record(1, failed())), OpenAttention],
                vec![],
            ),
            None,
            None,
        ],
        // attention
        vec![
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            moved(None, vec![CloseAttention], vec![]),
        ],
    ];
    assert_eq!(expected.len(), phases.len());
    for (phase, row) in phases.iter().zip(expected) {
        assert_eq!(
            row.len(),
            every_observation().len(),
            "{phase:?}: a row per observation"
        );
        for (observation, want) in every_observation().into_iter().zip(row) {
            let got = next(phase, observation.clone(), ctx());
            assert_eq!(got, want, "{phase:?} + {observation:?}");
        }
    }
}

#[test]
fn a_stop_committed_while_launching_is_enacted_on_confirmation() {
    let yield_for_job = stop(StopCause::Yield, 1_200, Some(job()));
    let got = next(
        &launching(Some(yield_for_job)),
        Observation::Confirmed {
            workload_started_at: None,
        },
        ctx(),
    )
    .unwrap();
    assert_eq!(
        got.phase,
        Some(RunPhase::Stopping {
            started_at: NOW,
            stop: yield_for_job
        })
    );
    assert_eq!(
        got.commits,
        vec![Commit::RecordStart {
            workload_started_at: None
        }]
    );
    assert_eq!(got.effects, vec![Effect::EnactStop]);
}

#[test]
fn stops_only_upgrade_and_keep_the_first_request() {
    let first = stop(StopCause::Restart, 100, Some(job()));
    let later = stop(StopCause::Yield, 900, None);
    assert_eq!(first.merge(later), first);
    let cancel = stop(StopCause::UserCancel, 900, None);
    assert_eq!(
        first.merge(cancel),
        stop(StopCause::UserCancel, 100, Some(job()))
    );
}

#[test]
fn a_time_limit_upgrades_a_preemptive_stop_and_a_cancel_upgrades_a_time_limit() {
    use Commit::*;
    use Effect::*;
    let limit = stop(StopCause::TimeLimit, 5_000, None);
    // Executing: the limit is committed and enacted as any stop.
    assert_eq!(
        next(&executing(), Observation::StopCommitted(limit), ctx()),
        moved(
            Some(RunPhase::Stopping {
                started_at: 2_000,
                stop: limit
            }),
            vec![RecordStop(limit)],
            vec![EnactStop]
        )
    );
    // A yield or a restart in flight becomes a time limit: the job fails instead of coming
    // back, and a yield, which sent no signal, is now stopped with one.
    for cause in [StopCause::Yield, StopCause::Restart] {
        let upgraded = stop(StopCause::TimeLimit, 3_000, Some(job()));
        assert_eq!(
            next(&stopping(cause), Observation::StopCommitted(limit), ctx()),
            moved(
                Some(RunPhase::Stopping {
                    started_at: 2_000,
                    stop: upgraded
                }),
                vec![RecordStop(upgraded)],
                vec![EnactStop]
            ),
            "{cause:?}"
        );
    }
    // A user's cancel during a time-limit stop wins; a late preemption changes nothing of it.
    let cancel = stop(StopCause::UserCancel, 6_000, None);
    let mut limited = stopping(StopCause::TimeLimit);
    let t = next(&limited, Observation::StopCommitted(cancel), ctx()).unwrap();
    assert_eq!(
        t.phase.as_ref().and_then(RunPhase::stop).map(|s| s.cause),
        Some(StopCause::UserCancel)
    );
    limited = stopping(StopCause::TimeLimit);
    let restart = stop(StopCause::Restart, 6_000, Some(job()));
    let t = next(&limited, Observation::StopCommitted(restart), ctx()).unwrap();
    assert_eq!(
        t.phase.as_ref().and_then(RunPhase::stop).map(|s| s.cause),
        Some(StopCause::TimeLimit)
    );
}

#[test]
fn a_stale_cleanup_record_changes_nothing() {
    let got = next(
        &cleaning(3),
        Observation::CleanupRecorded(record(2, CleanupOutcome::Clean)),
        ctx(),
    );
    assert_eq!(got, None);
    // A later attempt than expected still counts: it is newer evidence.
    let got = next(
        &cleaning(2),
        Observation::CleanupRecorded(record(3, CleanupOutcome::Clean)),
        ctx(),
    );
    assert!(matches!(got, Some(Transition { phase: None, .. })));
}

#[test]
fn cleanup_that_cannot_run_ends_in_attention_after_a_bounded_number_of_tries() {
    let gone = Observation::WorkerGone {
        wrote_worker_json: true,
    };
    let mut phase = cleaning(1);
    let mut attempts = 0;
    loop {
        let t = next(&phase, gone.clone(), ctx()).expect("a gone worker always moves cleaning");
        match t.phase {
            Some(RunPhase::Cleaning { attempt }) => {
                attempts += 1;
                assert_eq!(t.commits, vec![]);
                assert_eq!(t.effects, vec![Effect::CleanUpLost { attempt }]);
                phase = RunPhase::Cleaning { attempt };
            }
            Some(RunPhase::Attention { id, failure }) => {
                assert_eq!(id, attention_id());
                assert_eq!(failure.outcome.name(), "enumeration_failed");
                assert_eq!(failure.attempt, MAX_CLEANUP_ATTEMPTS);
                assert!(matches!(
                    t.commits[..],
                    [Commit::RecordCleanup(_), Commit::OpenAttention]
                ));
                assert_eq!(t.effects, vec![], "nothing left to clean up with");
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(attempts < 100, "cleanup retried without bound");
    }
    assert_eq!(attempts, MAX_CLEANUP_ATTEMPTS - 1);
}

/// The case the two old decoders disagreed on: a stopping run always carries its stop, so
/// the scheduler and the views both see a stop (the store refuses a row without one:
/// `store::runs` tests).
#[test]
fn stopping_projects_to_stopping_for_the_scheduler_and_the_views() {
    let phase = stopping(StopCause::Restart);
    assert_eq!(
        phase.slot(),
        SlotPhase::Stopping {
            cause: StopCause::Restart,
            requested_at: 3_000,
            for_job: Some(job())
        }
    );
    assert_eq!(
        phase.view(),
        PhaseView::Stopping {
            cause: StopCause::Restart,
            requested_at: 3_000,
            started_at: 2_000
        }
    );
    // A launch with a committed stop: the scheduler counts the stop, the view the launch.
    let phase = launching(Some(stop(StopCause::Yield, 1_200, Some(job()))));
    assert!(matches!(phase.slot(), SlotPhase::Stopping { .. }));
    assert!(matches!(phase.view(), PhaseView::Launching { .. }));
}

#[test]
fn a_detached_container_is_adopted_a_bounded_number_of_times_then_the_run_is_lost() {
    let mut adoptions = 0;
    loop {
        let t = next(
            &executing(),
            Observation::WorkerDetached { adoptions },
            ctx(),
        )
        .unwrap();
        match (&t.commits[..], &t.effects[..]) {
            ([], [Effect::Adopt { adoption }]) => {
                let adoption = *adoption;
                assert_eq!(adoption, adoptions + 1);
                assert_eq!(t.phase, Some(executing()), "the run keeps executing");
                adoptions = adoption;
            }
            (
                [Commit::RecordEnd {
                    end: RunEnd::Lost, ..
                }],
                [Effect::CleanUpLost { attempt: 2 }],
            ) => break,
            other => panic!("unexpected {other:?}"),
        }
        assert!(adoptions <= MAX_ADOPTIONS, "adopted without bound");
    }
    assert_eq!(adoptions, MAX_ADOPTIONS);
}

#[test]
fn a_launch_with_a_committed_stop_is_never_adopted() {
    let cancel = stop(StopCause::UserCancel, 1_200, None);
    let gone = next(
        &launching(Some(cancel)),
        Observation::WorkerGone {
            wrote_worker_json: true,
        },
        ctx(),
    );
    let detached = next(
        &launching(Some(cancel)),
        Observation::WorkerDetached { adoptions: 0 },
        ctx(),
    );
    assert_eq!(detached, gone);
    assert!(!detached
        .unwrap()
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Adopt { .. })));
}
