//! The JSON bytes of a run's process and cleanup, an Attention's failure and a job's events,
//! as the store keeps them and the wire shows them (`job show`, `resource list`, thread
//! events): literal strings, captured from the code that wrote them as `serde_json::Value`s
//! (keys sorted), so that a change of their Rust types that moved a byte fails here.

use super::run_view;
use crate::core::unknown_runs::{failure_record, LiveRun, RunRecord};
use crate::lifecycle::RunPhase;
use crate::store::runs::{json_text, EndRecord, Run};
use homebased_shared::event::{
    BlockedNotice, CheckDueNotice, Event, EventCause, EventDetail, EventKind,
};
use homebased_shared::queue::RunStatus;
use homebased_shared::rundir::{
    CleanupOutcome, CleanupRecord, ExitReason, RemainingProcess, RemainingReason,
};
use homebased_shared::wire::{
    AttentionFailure, CleanupResult, RunView, ThreadEvents, UnknownLiveRun, Versioned,
};
use serde::{de::DeserializeOwned, Serialize};

const TASK: &str = "01a23100-0000-7000-8000-0000000000b0";
const JOB: &str = "01a23100-0000-7000-8000-000000000001";
const LANE: &str = "01a23100-0000-7000-8000-0000000000a0";
const ATTENTION: &str = "01a23100-0000-7000-8000-0000000000d1";
const THREAD: &str = "01a23100-0000-7000-8000-0000000000c0";
const MACHINE: &str = "01a23100-0000-7000-8000-0000000000e0";

const CLEANUPS: [&str; 6] = [
    r#"{"attempt":2,"result":"clean"}"#,
    r#"{"attempt":2,"remaining":[{"pid":4242,"reason":"marked","start_ticks":99},{"pid":7,"reason":"suspect","start_ticks":1}],"result":"group_unconfirmed"}"#,
    r#"{"attempt":2,"remaining":[{"pid":4242,"reason":"marked","start_ticks":99},{"pid":7,"reason":"suspect","start_ticks":1}],"result":"targets_survived"}"#,
    r#"{"attempt":2,"remaining":[],"result":"unreadable_suspects"}"#,
    r#"{"attempt":2,"message":"no /proc","result":"enumeration_failed"}"#,
    r#"{"attempt":2,"message":"docker hung","result":"container_unconfirmed"}"#,
];

const PROCESSES: [&str; 4] = [
    r#"{"code":3,"kind":"exit"}"#,
    r#"{"kind":"signal","signal":9}"#,
    r#"{"kind":"cancelled"}"#,
    r#"{"kind":"spawn_failed","message":"no such file"}"#,
];

const UNKNOWN_LIVE_RUNS: [&str; 2] = [
    r#"{"job":"01a23100-0000-7000-8000-000000000001","message":"run 01a23100-0000-7000-8000-0000000000b0 of job 01a23100-0000-7000-8000-000000000001 is alive (its worker, pid 4242, holds runner.lock) but the store does not know it (restored from an older copy, or its last commits were lost): its lanes are held so that nothing starts beside it. Check the machine, stop the run if it must not go on, then release this Attention","pid":4242,"resources":["gpu0","gpu1"],"result":"unknown_live_run","resume":true,"run_number":2,"step":1,"task":"01a23100-0000-7000-8000-0000000000b0"}"#,
    r#"{"job":"01a23100-0000-7000-8000-000000000001","message":"run 01a23100-0000-7000-8000-0000000000b0 of job 01a23100-0000-7000-8000-000000000001 is alive (its worker, no recorded pid, holds runner.lock) but the store knows it as ended (restored from an older copy, or its last commits were lost): its lanes are held so that nothing starts beside it. Check the machine, stop the run if it must not go on, then release this Attention","pid":null,"resources":["gpu0","gpu1"],"result":"unknown_live_run","resume":true,"run_number":2,"step":1,"task":"01a23100-0000-7000-8000-0000000000b0"}"#,
];

const SHOWN_EVENTS: [&str; 6] = [
    r#"{"api_version":1,"at":"2023-11-14T22:13:20.123Z","event":"JOB_FAILED","job":"01a23100-0000-7000-8000-000000000001","machine":"01a23100-0000-7000-8000-0000000000e0","name":"train","process":{"code":3,"kind":"exit"},"resource":"01a23100-0000-7000-8000-0000000000a0","run_number":2,"seq":3,"step":1,"task":"01a23100-0000-7000-8000-0000000000b0","thread":"01a23100-0000-7000-8000-0000000000c0"}"#,
    r#"{"api_version":1,"at":"2023-11-14T22:13:20.123Z","detail":{"cause":"time_limit"},"event":"JOB_FAILED","job":"01a23100-0000-7000-8000-000000000001","machine":"01a23100-0000-7000-8000-0000000000e0","name":"train","process":{"kind":"signal","signal":9},"resource":"01a23100-0000-7000-8000-0000000000a0","run_number":2,"seq":3,"step":1,"task":"01a23100-0000-7000-8000-0000000000b0","thread":"01a23100-0000-7000-8000-0000000000c0"}"#,
    r#"{"api_version":1,"at":"2023-11-14T22:13:20.123Z","attention":"01a23100-0000-7000-8000-0000000000d1","cleanup":{"attempt":2,"remaining":[{"pid":4242,"reason":"marked","start_ticks":99},{"pid":7,"reason":"suspect","start_ticks":1}],"result":"targets_survived"},"event":"JOB_ATTENTION","job":"01a23100-0000-7000-8000-000000000001","machine":"01a23100-0000-7000-8000-0000000000e0","name":"train","resource":"01a23100-0000-7000-8000-0000000000a0","run_number":2,"seq":3,"step":1,"task":"01a23100-0000-7000-8000-0000000000b0","thread":"01a23100-0000-7000-8000-0000000000c0"}"#,
    r#"{"api_version":1,"at":"2023-11-14T22:13:20.123Z","blocked":{"blocked_since":"2020-09-13T12:26:40.000Z","blockers":[{"kind":"run","task":"01a23100-0000-7000-8000-0000000000b0"}],"episode":"01a23100-0000-7000-8000-0000000000d1"},"event":"JOB_BLOCKED","job":"01a23100-0000-7000-8000-000000000001","machine":"01a23100-0000-7000-8000-0000000000e0","name":"train","resource":null,"run_number":null,"seq":3,"step":null,"task":null,"thread":"01a23100-0000-7000-8000-0000000000c0"}"#,
    r#"{"api_version":1,"at":"2023-11-14T22:13:20.123Z","check_due":{"silent_since":"2020-09-13T12:26:40.000Z","timeout":"2h 30m"},"event":"JOB_CHECK_DUE","job":"01a23100-0000-7000-8000-000000000001","machine":"01a23100-0000-7000-8000-0000000000e0","name":"train","resource":"01a23100-0000-7000-8000-0000000000a0","run_number":2,"seq":3,"step":1,"task":"01a23100-0000-7000-8000-0000000000b0","thread":"01a23100-0000-7000-8000-0000000000c0"}"#,
    r#"{"api_version":1,"at":"2023-11-14T22:13:20.123Z","detail":{"cause":"dependency_failed","job":"01a23100-0000-7000-8000-000000000001"},"event":"JOB_CANCELLED","job":"01a23100-0000-7000-8000-000000000001","machine":"01a23100-0000-7000-8000-0000000000e0","name":"train","resource":"01a23100-0000-7000-8000-0000000000a0","run_number":2,"seq":3,"step":1,"task":"01a23100-0000-7000-8000-0000000000b0","thread":"01a23100-0000-7000-8000-0000000000c0"}"#,
];

/// The stored bodies of [`events`], as `events.body` keeps them (the envelope first, then
/// the event's fields in their order).
const STORED_EVENTS: [&str; 6] = [
    r#"{"api_version":1,"event":"JOB_FAILED","job":"01a23100-0000-7000-8000-000000000001","seq":3,"at":"2023-11-14T22:13:20.123Z","thread":"01a23100-0000-7000-8000-0000000000c0","name":"train","machine":"01a23100-0000-7000-8000-0000000000e0","resource":"01a23100-0000-7000-8000-0000000000a0","task":"01a23100-0000-7000-8000-0000000000b0","run_number":2,"step":1,"process":{"kind":"exit","code":3}}"#,
    r#"{"api_version":1,"event":"JOB_FAILED","job":"01a23100-0000-7000-8000-000000000001","seq":3,"at":"2023-11-14T22:13:20.123Z","thread":"01a23100-0000-7000-8000-0000000000c0","name":"train","machine":"01a23100-0000-7000-8000-0000000000e0","resource":"01a23100-0000-7000-8000-0000000000a0","task":"01a23100-0000-7000-8000-0000000000b0","run_number":2,"step":1,"process":{"kind":"signal","signal":9},"detail":{"cause":"time_limit"}}"#,
    r#"{"api_version":1,"event":"JOB_ATTENTION","job":"01a23100-0000-7000-8000-000000000001","seq":3,"at":"2023-11-14T22:13:20.123Z","thread":"01a23100-0000-7000-8000-0000000000c0","name":"train","machine":"01a23100-0000-7000-8000-0000000000e0","resource":"01a23100-0000-7000-8000-0000000000a0","task":"01a23100-0000-7000-8000-0000000000b0","run_number":2,"step":1,"attention":"01a23100-0000-7000-8000-0000000000d1","cleanup":{"attempt":2,"remaining":[{"pid":4242,"reason":"marked","start_ticks":99},{"pid":7,"reason":"suspect","start_ticks":1}],"result":"targets_survived"}}"#,
    r#"{"api_version":1,"event":"JOB_BLOCKED","job":"01a23100-0000-7000-8000-000000000001","seq":3,"at":"2023-11-14T22:13:20.123Z","thread":"01a23100-0000-7000-8000-0000000000c0","name":"train","machine":"01a23100-0000-7000-8000-0000000000e0","resource":null,"task":null,"run_number":null,"step":null,"blocked":{"episode":"01a23100-0000-7000-8000-0000000000d1","blocked_since":"2020-09-13T12:26:40.000Z","blockers":[{"kind":"run","task":"01a23100-0000-7000-8000-0000000000b0"}]}}"#,
    r#"{"api_version":1,"event":"JOB_CHECK_DUE","job":"01a23100-0000-7000-8000-000000000001","seq":3,"at":"2023-11-14T22:13:20.123Z","thread":"01a23100-0000-7000-8000-0000000000c0","name":"train","machine":"01a23100-0000-7000-8000-0000000000e0","resource":"01a23100-0000-7000-8000-0000000000a0","task":"01a23100-0000-7000-8000-0000000000b0","run_number":2,"step":1,"check_due":{"silent_since":"2020-09-13T12:26:40.000Z","timeout":"2h 30m"}}"#,
    r#"{"api_version":1,"event":"JOB_CANCELLED","job":"01a23100-0000-7000-8000-000000000001","seq":3,"at":"2023-11-14T22:13:20.123Z","thread":"01a23100-0000-7000-8000-0000000000c0","name":"train","machine":"01a23100-0000-7000-8000-0000000000e0","resource":"01a23100-0000-7000-8000-0000000000a0","task":"01a23100-0000-7000-8000-0000000000b0","run_number":2,"step":1,"detail":{"cause":"dependency_failed","job":"01a23100-0000-7000-8000-000000000001"}}"#,
];

const RUN_VIEW: &str = r#"{"task":"01a23100-0000-7000-8000-0000000000b0","run_number":2,"step":1,"resource":"01a23100-0000-7000-8000-0000000000a0","resources":["01a23100-0000-7000-8000-0000000000a0"],"status":"failed","resume":false,"stop_cause":null,"started_at":"2020-09-13T12:26:40.000Z","ended_at":"2023-11-14T22:13:20.123Z","process":{"code":3,"kind":"exit"},"cleanup":{"attempt":2,"remaining":[{"pid":4242,"reason":"marked","start_ticks":99},{"pid":7,"reason":"suspect","start_ticks":1}],"result":"targets_survived"},"gpu_memory_peak_mib":512}"#;

const ATTENTION_PHASE: &str = r#"{"phase":"attention","id":"01a23100-0000-7000-8000-0000000000d1","failure":{"attempt":2,"message":"no /proc","result":"enumeration_failed"}}"#;

fn remaining() -> Vec<RemainingProcess> {
    vec![
        RemainingProcess {
            pid: 4242,
            start_ticks: 99,
            reason: RemainingReason::Marked,
        },
        RemainingProcess {
            pid: 7,
            start_ticks: 1,
            reason: RemainingReason::Suspect,
        },
    ]
}

/// Every outcome, in the order of [`CLEANUPS`].
fn outcomes() -> Vec<CleanupOutcome> {
    vec![
        CleanupOutcome::Clean,
        CleanupOutcome::GroupUnconfirmed {
            remaining: remaining(),
        },
        CleanupOutcome::TargetsSurvived {
            remaining: remaining(),
        },
        CleanupOutcome::UnreadableSuspects { remaining: vec![] },
        CleanupOutcome::EnumerationFailed {
            message: "no /proc".into(),
        },
        CleanupOutcome::ContainerUnconfirmed {
            message: "docker hung".into(),
        },
    ]
}

fn record(outcome: CleanupOutcome) -> CleanupRecord {
    CleanupRecord {
        attempt: 2,
        outcome,
        finished_at: 9_000,
    }
}

/// Every exit, in the order of [`PROCESSES`].
fn reasons() -> Vec<ExitReason> {
    vec![
        ExitReason::Exit { code: 3 },
        ExitReason::Signal { signal: 9 },
        ExitReason::Cancelled,
        ExitReason::SpawnFailed {
            message: "no such file".into(),
        },
    ]
}

/// With and without its worker's pid, in the order of [`UNKNOWN_LIVE_RUNS`].
fn live_runs() -> Vec<(LiveRun, bool)> {
    let live = |pid| LiveRun {
        task: TASK.parse().unwrap(),
        job: Some(JOB.parse().unwrap()),
        record: Some(RunRecord {
            run_number: 2,
            step: 1,
            resume: true,
        }),
        resource_names: vec!["gpu0".into(), "gpu1".into()],
        pid,
        doubts: Vec::new(),
    };
    vec![(live(Some(4242)), false), (live(None), true)]
}

fn event(kind: EventKind, detail: EventDetail) -> Event {
    Event {
        event: kind,
        job: JOB.parse().unwrap(),
        seq: 3,
        at: 1_700_000_000_123,
        thread: THREAD.parse().unwrap(),
        name: "train".into(),
        machine: MACHINE.parse().unwrap(),
        resource: Some(LANE.parse().unwrap()),
        task: Some(TASK.parse().unwrap()),
        run_number: Some(2),
        step: Some(1),
        detail,
    }
}

/// One event of each shape, in the order of [`SHOWN_EVENTS`].
fn events() -> Vec<Event> {
    let survived = record(CleanupOutcome::TargetsSurvived {
        remaining: remaining(),
    });
    let blocked = EventDetail {
        blocked: Some(BlockedNotice {
            episode: ATTENTION.parse().unwrap(),
            blocked_since: 1_600_000_000_000,
            blockers: serde_json::json!([{"task": TASK, "kind": "run"}]),
        }),
        ..EventDetail::default()
    };
    vec![
        event(
            EventKind::JobFailed,
            EventDetail {
                process: Some(ExitReason::Exit { code: 3 }),
                ..EventDetail::default()
            },
        ),
        event(
            EventKind::JobFailed,
            EventDetail {
                process: Some(ExitReason::Signal { signal: 9 }),
                detail: Some(EventCause::TimeLimit),
                ..EventDetail::default()
            },
        ),
        event(
            EventKind::JobAttention,
            EventDetail {
                attention: Some(ATTENTION.parse().unwrap()),
                cleanup: Some(event_cleanup(&survived)),
                ..EventDetail::default()
            },
        ),
        Event {
            resource: None,
            task: None,
            run_number: None,
            step: None,
            ..event(EventKind::JobBlocked, blocked)
        },
        event(
            EventKind::JobCheckDue,
            EventDetail {
                check_due: Some(CheckDueNotice {
                    silent_since: 1_600_000_000_000,
                    timeout: "2h 30m".into(),
                }),
                ..EventDetail::default()
            },
        ),
        event(
            EventKind::JobCancelled,
            EventDetail {
                detail: Some(EventCause::DependencyFailed {
                    job: JOB.parse().unwrap(),
                }),
                ..EventDetail::default()
            },
        ),
    ]
}

fn ended_run() -> Run {
    let survived = record(CleanupOutcome::TargetsSurvived {
        remaining: remaining(),
    });
    Run {
        task: TASK.parse().unwrap(),
        job: JOB.parse().unwrap(),
        lanes: vec![LANE.parse().unwrap()],
        run_number: 2,
        step: 1,
        resume: false,
        phase: None,
        stop: None,
        reserved_at: 1_000,
        started_at: Some(1_600_000_000_000),
        workload_started_at: Some(1_600_000_000_000),
        ended: Some(EndRecord {
            status: RunStatus::Failed,
            at: 1_700_000_000_123,
            process: Some(ExitReason::Exit { code: 3 }),
            cleanup: Some(CleanupResult::from(&survived)),
        }),
        gpu_memory_peak_mib: Some(512),
    }
}

fn held() -> RunPhase {
    let failed = record(CleanupOutcome::EnumerationFailed {
        message: "no /proc".into(),
    });
    RunPhase::Attention {
        id: ATTENTION.parse().unwrap(),
        failure: CleanupResult::from(&failed),
    }
}

/// What the store writes in `runs.cleanup` (and `attentions.failure` for a failed one).
fn stored_cleanup(record: &CleanupRecord) -> String {
    json_text("cleanup", &CleanupResult::from(record)).unwrap()
}

fn event_cleanup(record: &CleanupRecord) -> CleanupResult {
    CleanupResult::from(record)
}

/// What the store writes in `runs.process`.
fn stored_process(reason: &ExitReason) -> String {
    json_text("process", reason).unwrap()
}

/// What the store writes in `attentions.failure` for a live run it does not know.
fn stored_failure(run: &LiveRun, run_known: bool) -> String {
    let failure = AttentionFailure::UnknownLiveRun(failure_record(
        run,
        run.job.unwrap(),
        run.record.unwrap(),
        run.resource_names.clone(),
        run_known,
    ));
    json_text("failure", &failure).unwrap()
}

/// A stored event as `job show` and the thread's events answer it.
fn shown_event(event: &Event) -> Versioned<Event> {
    Versioned::new(event.clone())
}

/// `text` read as `T` and written again as the store writes it: the same bytes.
fn reencoded<T: DeserializeOwned + Serialize>(text: &str) -> String {
    let value: T = serde_json::from_str(text).unwrap();
    json_text("a record", &value).unwrap()
}

#[test]
fn a_runs_cleanup_is_stored_and_shown_with_its_keys_in_order() {
    let stored: Vec<String> = outcomes()
        .into_iter()
        .map(|o| stored_cleanup(&record(o)))
        .collect();
    assert_eq!(stored, CLEANUPS);
}

#[test]
fn a_runs_process_is_stored_and_shown_with_its_keys_in_order() {
    let stored: Vec<String> = reasons().iter().map(stored_process).collect();
    assert_eq!(stored, PROCESSES);
}

#[test]
fn an_unknown_live_runs_failure_is_stored_with_its_keys_in_order() {
    let stored: Vec<String> = live_runs()
        .iter()
        .map(|(run, known)| stored_failure(run, *known))
        .collect();
    assert_eq!(stored, UNKNOWN_LIVE_RUNS);
}

#[test]
fn a_jobs_events_are_shown_with_their_keys_in_order() {
    let answer = ThreadEvents {
        events: events().iter().map(shown_event).collect(),
        cursor: "42".into(),
    };
    let expected = format!(r#"{{"events":[{}],"cursor":"42"}}"#, SHOWN_EVENTS.join(","));
    assert_eq!(serde_json::to_string(&answer).unwrap(), expected);
}

#[test]
fn a_run_and_an_attention_are_shown_as_before() {
    assert_eq!(
        serde_json::to_string(&run_view(&ended_run())).unwrap(),
        RUN_VIEW
    );
    assert_eq!(
        serde_json::to_string(&held().view()).unwrap(),
        ATTENTION_PHASE
    );
}

/// What earlier builds stored reads back as its type and is written again byte for byte.
#[test]
fn every_stored_record_reads_back_as_its_type_and_is_written_again_unchanged() {
    for text in CLEANUPS {
        assert_eq!(reencoded::<CleanupResult>(text), text);
        if !text.contains(r#""result":"clean""#) {
            assert_eq!(reencoded::<AttentionFailure>(text), text);
        }
    }
    for text in PROCESSES {
        assert_eq!(reencoded::<ExitReason>(text), text);
    }
    for text in UNKNOWN_LIVE_RUNS {
        assert_eq!(reencoded::<AttentionFailure>(text), text);
        let run: UnknownLiveRun = serde_json::from_str(text).unwrap();
        assert_eq!(run.job.to_string(), JOB);
    }
    let run: RunView = serde_json::from_str(RUN_VIEW).unwrap();
    assert_eq!(serde_json::to_string(&run).unwrap(), RUN_VIEW);
}

/// An event body the store keeps is written as before, and reads back as the event shown.
#[test]
fn an_event_is_stored_as_before_and_shown_from_what_is_stored() {
    let stored: Vec<String> = events()
        .iter()
        .map(|e| serde_json::to_string(&Versioned::new(e)).unwrap())
        .collect();
    assert_eq!(stored, STORED_EVENTS);
    let read: Vec<Versioned<Event>> = STORED_EVENTS
        .iter()
        .map(|text| serde_json::from_str(text).unwrap())
        .collect();
    let answer = ThreadEvents {
        events: read,
        cursor: "42".into(),
    };
    let expected = format!(r#"{{"events":[{}],"cursor":"42"}}"#, SHOWN_EVENTS.join(","));
    assert_eq!(serde_json::to_string(&answer).unwrap(), expected);
}
