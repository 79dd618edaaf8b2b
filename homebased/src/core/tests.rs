//! The core against a fake launcher: submit, launch, observe, cancel, move and release on a
//! real store in a temporary home. The test plays the worker's part by writing the run
//! directory's records, exactly the files a real worker writes; no process is started, so
//! nothing here waits or sleeps.

use super::testing::{open_core, plain_submitter, Asked, FakeLauncher};
use super::Core;
use crate::lifecycle::{RunPhase, MAX_ADOPTIONS, MAX_CLEANUP_ATTEMPTS};
use crate::store::{jobs, runs};
use homebased_shared::error::ErrorCode;
use homebased_shared::event::EventCause;
use homebased_shared::ids::{AttentionId, JobId, OperationId, TaskId, ThreadId};
use homebased_shared::queue::{JobStatus, Priority, RunStatus, StopCause};
use homebased_shared::rundir::{
    write_json_atomic, ChildRecord, CleanupOutcome, CleanupRecord, ExitReason, ExitRecord,
    GroupState, ProcessIdentity, RemainingProcess, RemainingReason, RunDir, WorkerRecord,
    EXIT_YIELDED,
};
use homebased_shared::wire::{
    CancelRequest, CancelResult, MoveRequest, Placement, RegisterRequest, ReleaseRequest,
    SubmitRequest, Submitter,
};
use serde_json::{json, Value};
use std::time::Duration;

struct Fixture {
    _dir: tempfile::TempDir,
    core: Core,
    workers: FakeLauncher,
}

impl Fixture {
    /// A core with one manual lane, `gpu0`.
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let workers = FakeLauncher::default();
        let mut core = open_core(&dir, Default::default(), workers.clone());
        core.register(RegisterRequest {
            name: "gpu0".into(),
            device: None,
        })
        .unwrap();
        Fixture {
            _dir: dir,
            core,
            workers,
        }
    }

    /// Submits a job of `steps` shell steps at `priority`, then lets a pass run.
    fn submit(&mut self, priority: Priority, preempt: Value, steps: usize) -> JobId {
        let step = json!({"type": "task", "command": ["/bin/sh", "-c", "true"]});
        self.submit_steps(priority, preempt, vec![step; steps])
    }

    /// Submits a job of one container step, then lets a pass run.
    fn submit_container(&mut self) -> JobId {
        let image = format!("sha256:{}", "0".repeat(64));
        let step = json!({"type": "container", "image": image, "memory": "64m"});
        self.submit_steps(Priority::Medium, restart(), vec![step])
    }

    fn submit_steps(&mut self, priority: Priority, preempt: Value, steps: Vec<Value>) -> JobId {
        let id = self.submit_only(priority, preempt, steps);
        self.pass();
        id
    }

    /// Submits without a pass, as the core serves a submit before its turn's pass.
    fn submit_only(&mut self, priority: Priority, preempt: Value, steps: Vec<Value>) -> JobId {
        let id = JobId::new();
        let spec = json!({
            "api_version": 1,
            "thread": ThreadId::new(),
            "name": "core test",
            "cwd": "/",
            "priority": priority,
            "preempt": preempt,
            "steps": steps,
        });
        self.core
            .submit(SubmitRequest {
                job: id,
                spec,
                submitter: plain_submitter(),
                allow_other_thread: false,
                machine: None,
            })
            .unwrap();
        id
    }

    fn pass(&mut self) {
        self.core.pass();
    }

    fn cancel(&mut self, job: JobId) -> CancelResult {
        self.core
            .cancel(
                job,
                CancelRequest {
                    operation_id: OperationId::new(),
                },
            )
            .unwrap()
    }

    /// The phase of `job`'s run that holds a lane.
    fn phase(&self, job: JobId) -> RunPhase {
        self.active(job).phase.expect("an active run has a phase")
    }

    fn job(&self, id: JobId) -> jobs::Job {
        jobs::require(self.core.store.db(), id).unwrap()
    }

    fn runs(&self, id: JobId) -> Vec<runs::Run> {
        runs::list_for_job(self.core.store.db(), id).unwrap()
    }

    /// The one run of `job` that holds a lane.
    fn active(&self, job: JobId) -> runs::Run {
        self.runs(job)
            .into_iter()
            .find(|r| r.phase.is_some())
            .unwrap_or_else(|| panic!("job {job} holds no lane"))
    }

    fn dir(&self, task: TaskId) -> RunDir {
        RunDir::new(self.core.home.task_dir(task))
    }

    fn events(&self, job: JobId) -> Vec<String> {
        crate::store::events::list_for_job(self.core.store.db(), job)
            .unwrap()
            .iter()
            .map(|e| e.answer.event.as_str().to_string())
            .collect()
    }

    // --- the worker's part ---

    fn worker_json(&self, task: TaskId, child: bool) {
        let me = ProcessIdentity {
            pid: 4242,
            start_ticks: 7,
        };
        let child = child.then(|| ChildRecord {
            process: ProcessIdentity {
                pid: 4243,
                start_ticks: 8,
            },
            pgid: 4243,
            started_at: self.core.clock.now_ms(),
        });
        let record = WorkerRecord {
            worker: me,
            child,
            stamps: None,
        };
        write_json_atomic(&self.dir(task).worker_json(), &record).unwrap();
    }

    /// The worker confirms: it started the workload and pokes the daemon.
    fn confirm(&mut self, task: TaskId) {
        self.worker_json(task, true);
        self.core.observe(task, false);
    }

    fn exit(&mut self, task: TaskId, reason: ExitReason) {
        let record = ExitRecord {
            reason,
            group: GroupState::ConfirmedExited,
            container: None,
            ended_at: self.core.clock.now_ms(),
        };
        write_json_atomic(&self.dir(task).exit_json(), &record).unwrap();
        self.core.observe(task, false);
    }

    fn cleanup(&mut self, task: TaskId, attempt: u32, outcome: CleanupOutcome) {
        let record = CleanupRecord {
            attempt,
            outcome,
            finished_at: self.core.clock.now_ms(),
        };
        write_json_atomic(&self.dir(task).cleanup_json(), &record).unwrap();
    }

    /// The worker exits (its lock is free) and its watcher tells the core.
    fn worker_gone(&mut self, task: TaskId) {
        self.workers.end(task);
        self.core.observe(task, true);
    }

    /// A whole, successful attempt: confirm, exit 0, clean, gone.
    fn run_to_success(&mut self, task: TaskId) {
        self.confirm(task);
        self.exit(task, ExitReason::Exit { code: 0 });
        self.cleanup(task, 1, CleanupOutcome::Clean);
        self.worker_gone(task);
        self.pass();
    }
}

fn restart() -> Value {
    json!({"mode": "restart"})
}

#[test]
fn a_submitted_job_launches_runs_succeeds_and_frees_its_lane() {
    let mut f = Fixture::new();
    let job = f.submit(Priority::Medium, restart(), 1);
    let run = f.active(job);
    assert!(matches!(run.phase, Some(RunPhase::Launching { .. })));
    assert_eq!(f.workers.asked(), vec![Asked::Start(run.task)]);
    assert_eq!(f.job(job).status(), JobStatus::Active);
    assert!(
        f.dir(run.task).run_json().exists(),
        "run.json is written before the start"
    );

    f.confirm(run.task);
    assert!(matches!(f.phase(job), RunPhase::Executing { .. }));

    f.exit(run.task, ExitReason::Exit { code: 0 });
    let run = f.active(job);
    assert_eq!(run.phase, Some(RunPhase::Cleaning { attempt: 1 }));
    assert_eq!(run.status(), RunStatus::Succeeded);
    assert_eq!(f.job(job).status(), JobStatus::Succeeded);
    assert_eq!(f.events(job), ["JOB_SUCCEEDED"]);

    f.cleanup(run.task, 1, CleanupOutcome::Clean);
    f.worker_gone(run.task);
    assert!(f.runs(job).iter().all(|r| r.phase.is_none()), "lane freed");
    let cleanup = f.runs(job)[0].cleanup().cloned().unwrap();
    assert_eq!(
        (cleanup.attempt, cleanup.outcome),
        (1, CleanupOutcome::Clean)
    );
}

#[test]
fn each_step_gets_its_own_attempt_and_the_lane_serves_the_next_job_after_cleanup() {
    let mut f = Fixture::new();
    let first = f.submit(Priority::Medium, restart(), 2);
    let second = f.submit(Priority::Medium, restart(), 1);
    assert_eq!(
        f.job(second).status(),
        JobStatus::Queued,
        "one lane, one run"
    );
    let step0 = f.active(first).task;
    f.run_to_success(step0);
    // The second step of the same job keeps its slot ahead of the other job.
    let step1 = f.active(first);
    assert_eq!((step1.step, step1.run_number), (1, 2));
    assert_eq!(f.job(second).status(), JobStatus::Queued);
    f.run_to_success(step1.task);
    assert_eq!(f.job(first).status(), JobStatus::Succeeded);
    let next = f.active(second);
    assert_eq!(
        f.workers.asked(),
        vec![
            Asked::Start(step0),
            Asked::Start(step1.task),
            Asked::Start(next.task)
        ]
    );
}

#[test]
fn the_lane_stays_held_while_cleaning_even_after_the_job_ended() {
    let mut f = Fixture::new();
    let first = f.submit(Priority::Medium, restart(), 1);
    let second = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(first).task;
    f.confirm(task);
    f.exit(task, ExitReason::Exit { code: 0 });
    f.pass();
    assert_eq!(f.job(first).status(), JobStatus::Succeeded);
    assert_eq!(
        f.job(second).status(),
        JobStatus::Queued,
        "cleaning is not free"
    );
    assert_eq!(f.workers.asked(), vec![Asked::Start(task)]);
}

#[test]
fn cancelling_a_queued_job_ends_it_at_once_and_an_active_one_through_its_stop() {
    let mut f = Fixture::new();
    let active = f.submit(Priority::Medium, restart(), 1);
    let queued = f.submit(Priority::Medium, restart(), 1);
    assert_eq!(f.cancel(queued), CancelResult::Cancelled);
    assert_eq!(f.job(queued).status(), JobStatus::Cancelled);
    assert_eq!(f.events(queued), ["JOB_CANCELLED"]);

    let task = f.active(active).task;
    f.confirm(task);
    let answer = f.cancel(active);
    assert!(matches!(answer, CancelResult::Stopping { task: t, .. } if t == task));
    let run = f.active(active);
    assert!(
        matches!(run.phase, Some(RunPhase::Stopping { stop, .. }) if stop.cause == StopCause::UserCancel)
    );
    assert!(
        f.dir(task).stop_file().exists(),
        "control/stop written first"
    );
    assert_eq!(f.workers.asked().last(), Some(&Asked::SignalStop(task)));
    assert_eq!(
        f.job(active).status(),
        JobStatus::Active,
        "not cancelled until it ends"
    );

    f.exit(task, ExitReason::Cancelled);
    assert_eq!(f.job(active).status(), JobStatus::Cancelled);
    assert_eq!(f.events(active), ["JOB_CANCELLED"]);
    let again = f.cancel(active);
    assert!(matches!(again, CancelResult::AlreadyTerminal { .. }));
}

#[test]
fn a_cancel_during_launch_waits_for_the_confirmation_then_stops_the_run() {
    let mut f = Fixture::new();
    let job = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(job).task;
    f.cancel(job);
    assert!(
        matches!(
            f.active(job).phase,
            Some(RunPhase::Launching { stop: Some(_), .. })
        ),
        "a launch keeps its phase"
    );
    assert!(!f.dir(task).stop_file().exists(), "nothing to stop yet");
    f.confirm(task);
    assert!(matches!(f.phase(job), RunPhase::Stopping { .. }));
    assert!(f.dir(task).stop_file().exists());
    assert_eq!(f.workers.asked().last(), Some(&Asked::SignalStop(task)));
}

#[test]
fn a_higher_level_job_yields_the_lane_and_the_victim_resumes_in_its_slot() {
    let mut f = Fixture::new();
    let victim = f.submit(Priority::Low, json!({"mode": "yield"}), 1);
    let task = f.active(victim).task;
    f.confirm(task);
    let urgent = f.submit(Priority::High, restart(), 1);
    let run = f.active(victim);
    assert!(
        matches!(run.phase, Some(RunPhase::Stopping { stop, .. }) if stop.cause == StopCause::Yield && stop.for_job == Some(urgent))
    );
    assert!(
        f.dir(task).yield_file().exists(),
        "yield is a file, no signal"
    );
    assert!(!f.workers.asked().contains(&Asked::SignalStop(task)));

    f.exit(task, ExitReason::Exit { code: EXIT_YIELDED });
    let job = f.job(victim);
    assert_eq!(
        (job.status(), job.state.resume()),
        (JobStatus::Queued, true)
    );
    assert_eq!(f.events(victim), ["JOB_PREEMPTED"]);
    f.cleanup(task, 1, CleanupOutcome::Clean);
    f.worker_gone(task);
    f.pass();
    assert!(matches!(f.phase(urgent), RunPhase::Launching { .. }));
}

#[test]
fn moving_a_queued_job_to_the_front_changes_the_serving_order() {
    let mut f = Fixture::new();
    let running = f.submit(Priority::Medium, restart(), 1);
    let a = f.submit(Priority::Medium, restart(), 1);
    let b = f.submit(Priority::Medium, restart(), 1);
    assert_eq!(
        (f.job(a).state.position(), f.job(b).state.position()),
        (Some(2), Some(3))
    );
    let op = OperationId::new();
    let request = MoveRequest {
        operation_id: op,
        placement: Placement {
            front: true,
            ..Default::default()
        },
    };
    f.core.move_job(b, request.clone()).unwrap();
    assert_eq!(f.job(b).state.position(), Some(1));
    assert_eq!(
        (f.job(running).state.position(), f.job(a).state.position()),
        (Some(2), Some(3))
    );
    // A retry with the same operation id replays; the same id for other content conflicts.
    f.core.move_job(b, request).unwrap();
    assert_eq!(f.job(b).state.position(), Some(1));
    let other = f.core.move_job(
        a,
        MoveRequest {
            operation_id: op,
            placement: Placement {
                front: true,
                ..Default::default()
            },
        },
    );
    assert_eq!(other.unwrap_err().code, ErrorCode::OperationConflict);

    let task = f.active(running).task;
    f.run_to_success(task);
    assert!(f.active(b).phase.is_some(), "the moved job is served first");
}

#[test]
fn a_lost_worker_is_cleaned_by_the_daemon_and_a_failed_cleanup_holds_the_lane_until_released() {
    let mut f = Fixture::new();
    let job = f.submit(Priority::Medium, restart(), 1);
    let waiting = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(job).task;
    f.confirm(task);
    // The worker vanishes without exit.json.
    f.worker_gone(task);
    let run = f.active(job);
    assert_eq!(run.status(), RunStatus::Lost);
    assert_eq!(run.phase, Some(RunPhase::Cleaning { attempt: 2 }));
    assert_eq!(f.job(job).status(), JobStatus::Failed);
    assert_eq!(
        f.workers.asked().last(),
        Some(&Asked::CleanUpLost {
            task,
            attempt: 2,
            container_step: false,
        })
    );

    // The daemon's cleanup finds a marked survivor.
    let survivor = RemainingProcess {
        pid: 777,
        start_ticks: 9,
        reason: RemainingReason::Marked,
    };
    f.cleanup(
        task,
        2,
        CleanupOutcome::TargetsSurvived {
            remaining: vec![survivor],
        },
    );
    f.core.observe(task, true);
    let Some(RunPhase::Attention { id, failure }) = f.active(job).phase else {
        panic!("expected Attention");
    };
    assert_eq!(failure.outcome.name(), "targets_survived");
    assert_eq!(failure.outcome.remaining()[0].pid, 777);
    assert_eq!(f.events(job), ["JOB_FAILED", "JOB_ATTENTION"]);
    f.pass();
    assert_eq!(
        f.job(waiting).status(),
        JobStatus::Queued,
        "Attention is not free"
    );

    // Only that exact UUID releases it.
    let wrong = f.core.release(ReleaseRequest {
        operation_id: OperationId::new(),
        attention: AttentionId::new(),
    });
    assert_eq!(wrong.unwrap_err().code, ErrorCode::AttentionNotFound);
    let release = ReleaseRequest {
        operation_id: OperationId::new(),
        attention: id,
    };
    let released = f.core.release(release.clone()).unwrap();
    assert_eq!(released.attention, id);
    // A retry of the same operation replays the answer; a new one no longer finds the hold.
    assert_eq!(f.core.release(release).unwrap(), released);
    let again = f.core.release(ReleaseRequest {
        operation_id: OperationId::new(),
        attention: id,
    });
    assert_eq!(again.unwrap_err().code, ErrorCode::AttentionNotFound);
    f.pass();
    assert!(f.active(waiting).phase.is_some(), "the lane serves again");
}

/// A confirmed container run whose worker then vanishes without a stop request, leaving its
/// container (the worker saved its id).
fn detach(f: &mut Fixture, task: TaskId) {
    std::fs::write(f.dir(task).container_id(), "0123abcd\n").unwrap();
    f.worker_gone(task);
}

#[test]
fn a_worker_that_detaches_from_its_container_is_replaced_by_an_adopting_worker() {
    let mut f = Fixture::new();
    let job = f.submit_container();
    let task = f.active(job).task;
    f.confirm(task);
    detach(&mut f, task);

    assert_eq!(
        f.workers.asked().last(),
        Some(&Asked::Adopt { task, adoption: 1 })
    );
    let run = f.active(job);
    assert!(
        matches!(run.phase, Some(RunPhase::Executing { .. })),
        "{run:?}"
    );
    assert_eq!(run.status(), RunStatus::Running);
    assert_eq!(f.job(job).status(), JobStatus::Active);
    assert!(f.events(job).is_empty(), "an adoption is no event");
    let request = f.dir(task).read_adoption().unwrap().unwrap();
    assert_eq!(
        request.adoption, 1,
        "the count is written before the worker starts"
    );

    // The adopting worker follows the container to its real end.
    f.exit(task, ExitReason::Exit { code: 3 });
    let run = f.active(job);
    assert_eq!(run.status(), RunStatus::Failed);
    let process = run.ended.as_ref().and_then(|e| e.process.clone());
    assert_eq!(process, Some(ExitReason::Exit { code: 3 }));
    assert_eq!(f.job(job).status(), JobStatus::Failed);
    assert_eq!(f.events(job), ["JOB_FAILED"]);
    f.cleanup(task, 1, CleanupOutcome::Clean);
    f.worker_gone(task);
    assert!(
        f.runs(job).iter().all(|r| r.phase.is_none()),
        "the lane is free"
    );
}

#[test]
fn a_launch_whose_worker_vanished_after_starting_its_container_is_adopted_then_confirmed() {
    let mut f = Fixture::new();
    let job = f.submit_container();
    let task = f.active(job).task;
    // worker.json without the child: the worker died between docker start and its record.
    f.worker_json(task, false);
    detach(&mut f, task);
    assert_eq!(
        f.workers.asked().last(),
        Some(&Asked::Adopt { task, adoption: 1 })
    );
    assert!(matches!(
        f.active(job).phase,
        Some(RunPhase::Launching { .. })
    ));
    f.confirm(task);
    assert!(matches!(
        f.active(job).phase,
        Some(RunPhase::Executing { .. })
    ));
    f.exit(task, ExitReason::Exit { code: 0 });
    assert_eq!(f.job(job).status(), JobStatus::Succeeded);
    assert_eq!(f.runs(job).len(), 1, "the step ran once");
}

#[test]
fn adoptions_are_bounded_and_an_adopting_worker_that_cannot_start_makes_the_run_lost() {
    let mut f = Fixture::new();
    let job = f.submit_container();
    let task = f.active(job).task;
    f.confirm(task);
    for adoption in 1..=MAX_ADOPTIONS {
        detach(&mut f, task);
        assert_eq!(
            f.workers.asked().last(),
            Some(&Asked::Adopt { task, adoption })
        );
    }
    f.worker_gone(task);
    assert_eq!(
        f.workers.asked().last(),
        Some(&Asked::CleanUpLost {
            task,
            attempt: 2,
            container_step: true,
        })
    );
    assert_eq!(f.active(job).status(), RunStatus::Lost);
    assert_eq!(f.job(job).status(), JobStatus::Failed);

    let mut f = Fixture::new();
    let job = f.submit_container();
    let task = f.active(job).task;
    f.confirm(task);
    f.workers.0.lock().unwrap().fail_adopt = true;
    detach(&mut f, task);
    assert_eq!(
        f.workers.asked().last(),
        Some(&Asked::CleanUpLost {
            task,
            attempt: 2,
            container_step: true,
        })
    );
    assert_eq!(f.active(job).status(), RunStatus::Lost);
}

#[test]
fn a_container_whose_run_was_asked_to_stop_or_a_host_step_is_never_adopted() {
    let mut f = Fixture::new();
    let job = f.submit_container();
    let task = f.active(job).task;
    f.confirm(task);
    f.core
        .cancel(
            job,
            CancelRequest {
                operation_id: OperationId::new(),
            },
        )
        .unwrap();
    detach(&mut f, task);
    assert_eq!(
        f.workers.asked().last(),
        Some(&Asked::CleanUpLost {
            task,
            attempt: 2,
            container_step: true,
        })
    );

    let mut f = Fixture::new();
    let job = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(job).task;
    f.confirm(task);
    detach(&mut f, task);
    assert_eq!(
        f.workers.asked().last(),
        Some(&Asked::CleanUpLost {
            task,
            attempt: 2,
            container_step: false,
        })
    );
}

#[test]
fn a_launch_whose_worker_never_confirmed_returns_the_job_to_its_slot_without_an_event() {
    let mut f = Fixture::new();
    let job = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(job).task;
    f.worker_gone(task);
    let job_now = f.job(job);
    assert_eq!(
        (job_now.status(), job_now.state.position()),
        (JobStatus::Queued, Some(1))
    );
    assert!(f.events(job).is_empty());
    assert_eq!(f.runs(job)[0].status(), RunStatus::Lost);
    f.pass();
    let retry = f.active(job);
    assert_eq!(retry.run_number, 2, "the next pass launches it again");
}

#[test]
fn a_launch_whose_worker_may_have_started_the_workload_is_lost_not_run_again() {
    let mut f = Fixture::new();
    let job = f.submit(Priority::Medium, restart(), 1);
    let next = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(job).task;
    // worker.json without the child: the workload may have started (a full disk kept the
    // worker from recording it) and even finished.
    f.worker_json(task, false);
    f.worker_gone(task);
    assert_eq!(
        f.job(job).status(),
        JobStatus::Failed,
        "never returned to its slot"
    );
    assert_eq!(f.events(job), ["JOB_FAILED"]);
    let run = runs::get(f.core.store.db(), task).unwrap().unwrap();
    assert_eq!(run.status(), RunStatus::Lost);
    assert_eq!(run.phase, Some(RunPhase::Cleaning { attempt: 2 }));
    assert_eq!(
        f.workers.asked().last(),
        Some(&Asked::CleanUpLost {
            task,
            attempt: 2,
            container_step: false,
        })
    );
    f.pass();
    assert_eq!(
        f.job(next).status(),
        JobStatus::Queued,
        "not while cleaning"
    );
    assert_eq!(f.runs(job).len(), 1, "the step never ran a second time");
}

#[test]
fn a_worker_that_cannot_start_gives_the_lane_back_and_launches_wait_a_moment() {
    let mut f = Fixture::new();
    f.workers.0.lock().unwrap().fail_start = true;
    let job = f.submit(Priority::Medium, restart(), 1);
    // The failed launch was abandoned: the lane is free, the job back in its slot.
    let runs = f.runs(job);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status(), RunStatus::Lost);
    assert!(runs[0].phase.is_none());
    assert_eq!(f.job(job).status(), JobStatus::Queued);
    // Not again at once: a failing start would otherwise spin for as long as it fails.
    f.pass();
    assert_eq!(f.runs(job).len(), 1, "held back right after a failed start");
    // Once the moment has passed, the tick asks for a pass and the job launches.
    f.core.launch_backoff = Default::default();
    f.pass();
    assert!(f.active(job).phase.is_some());
}

#[test]
fn a_cleanup_that_never_reports_ends_in_attention_instead_of_spinning() {
    let mut f = Fixture::new();
    let job = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(job).task;
    f.confirm(task);
    f.exit(task, ExitReason::Exit { code: 0 });
    // The run directory is gone: no cleanup record can ever appear.
    std::fs::remove_dir_all(f.dir(task).root()).unwrap();
    for _ in 0..MAX_CLEANUP_ATTEMPTS + 3 {
        f.worker_gone(task);
    }
    let cleanups = f
        .workers
        .asked()
        .iter()
        .filter(|a| matches!(a, Asked::CleanUpLost { .. }))
        .count() as u32;
    assert_eq!(cleanups, MAX_CLEANUP_ATTEMPTS - 1);
    assert!(matches!(f.phase(job), RunPhase::Attention { .. }));
}

#[test]
fn a_stop_that_cannot_be_written_is_enacted_again_by_the_tick() {
    let mut f = Fixture::new();
    let job = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(job).task;
    f.confirm(task);
    // control/ cannot take the request (as on a full disk).
    let control = f.dir(task).control_dir();
    std::fs::remove_dir_all(&control).unwrap();
    std::fs::write(&control, "not a directory").unwrap();
    f.cancel(job);
    assert!(matches!(f.phase(job), RunPhase::Stopping { .. }));
    assert!(!f.workers.asked().contains(&Asked::SignalStop(task)));
    std::fs::remove_file(&control).unwrap();
    std::fs::create_dir(&control).unwrap();
    f.core.tick();
    assert!(f.dir(task).stop_file().exists(), "written once it could be");
    assert_eq!(f.workers.asked().last(), Some(&Asked::SignalStop(task)));
}

#[test]
fn reconciling_reattaches_live_workers_and_re_enacts_their_stop() {
    let mut f = Fixture::new();
    let job = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(job).task;
    f.confirm(task);
    f.cancel(job);
    std::fs::remove_file(f.dir(task).stop_file()).unwrap();
    f.core.reconcile();
    assert!(f.workers.asked().contains(&Asked::Reattach(task)));
    assert!(
        f.dir(task).stop_file().exists(),
        "the stop is enacted again"
    );
}

#[test]
fn an_observation_that_cannot_commit_is_retried_until_it_lands() {
    let mut f = Fixture::new();
    let job = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(job).task;
    f.confirm(task);
    f.exit(task, ExitReason::Exit { code: 0 });
    f.cleanup(task, 1, CleanupOutcome::Clean);
    f.workers.end(task);
    {
        // Another process holds the database (a backup tool, `sqlite3`).
        let _lock = crate::store::testing::hold_exclusive(&f.core.home.database());
        f.core.observe(task, true);
        assert!(f.active(job).phase.is_some(), "nothing could be written");
        assert!(f.core.unobserved.contains_key(&task));
    }
    // The hint will not come again; the tick's retry lands it.
    f.core.retry_observations();
    assert!(f.runs(job).iter().all(|r| r.phase.is_none()), "lane freed");
    assert!(f.core.unobserved.is_empty());
}

/// Lets `age` pass on the core's clock: an executing run is that much older by the stored
/// start time the scheduler measures its age from (`restart_within`).
fn let_time_pass(f: &mut Fixture, age: Duration) {
    f.core.clock.advance(age);
}

/// The `HOMEBASED_RESUME` that `task`'s run was started with, from its `run.json`.
fn resume_of(f: &Fixture, task: TaskId) -> bool {
    f.dir(task).read_run().unwrap().resume
}

/// Lets `victim`'s current attempt be preempted by a new high job for `cause`, played to its
/// end (exit 75 for a yield, the worker's stop for a restart), then lets the high job
/// succeed so that the victim launches again; returns the victim's next task.
fn preempt_and_relaunch(f: &mut Fixture, victim: JobId, cause: StopCause) -> TaskId {
    let task = f.active(victim).task;
    let urgent = f.submit(Priority::High, restart(), 1);
    assert!(
        matches!(f.phase(victim), RunPhase::Stopping { stop, .. } if stop.cause == cause),
        "{:?}",
        f.phase(victim)
    );
    let end = match cause {
        StopCause::Yield => ExitReason::Exit { code: EXIT_YIELDED },
        _ => ExitReason::Cancelled,
    };
    f.exit(task, end);
    f.cleanup(task, 1, CleanupOutcome::Clean);
    f.worker_gone(task);
    f.pass();
    let urgent_task = f.active(urgent).task;
    f.run_to_success(urgent_task);
    let next = f.active(victim).task;
    assert_ne!(next, task);
    next
}

#[test]
fn a_restart_after_a_yield_keeps_resume_and_a_yield_again_keeps_it_too() {
    let mut f = Fixture::new();
    let victim = f.submit(
        Priority::Low,
        json!({"mode": "yield", "restart_within": "1m"}),
        1,
    );
    let first = f.active(victim).task;
    assert!(!resume_of(&f, first), "the first attempt starts afresh");
    f.confirm(first);
    // Past its window: asked to yield.
    let_time_pass(&mut f, Duration::from_secs(120));
    let second = preempt_and_relaunch(&mut f, victim, StopCause::Yield);
    assert!(resume_of(&f, second), "a yield leaves a checkpoint");

    // Young again: restarted inside its window, its checkpoint still there.
    f.confirm(second);
    let third = preempt_and_relaunch(&mut f, victim, StopCause::Restart);
    assert!(
        resume_of(&f, third),
        "a restart after a yield still resumes from the yield's checkpoint"
    );
    assert!(f.runs(victim)[2].resume);

    // And yields once more.
    f.confirm(third);
    let_time_pass(&mut f, Duration::from_secs(120));
    let fourth = preempt_and_relaunch(&mut f, victim, StopCause::Yield);
    assert!(resume_of(&f, fourth));
    assert_eq!(
        f.events(victim),
        ["JOB_PREEMPTED", "JOB_PREEMPTED", "JOB_PREEMPTED"]
    );
    f.run_to_success(fourth);
    assert_eq!(f.job(victim).status(), JobStatus::Succeeded);
}

#[test]
fn a_restart_without_an_earlier_yield_starts_the_step_afresh() {
    let mut f = Fixture::new();
    let victim = f.submit(
        Priority::Low,
        json!({"mode": "yield", "restart_within": "1m"}),
        1,
    );
    let first = f.active(victim).task;
    f.confirm(first);
    let second = preempt_and_relaunch(&mut f, victim, StopCause::Restart);
    assert!(!resume_of(&f, second), "no attempt of the step yielded");
}

#[test]
fn the_next_step_after_a_resumed_one_starts_afresh() {
    let mut f = Fixture::new();
    let victim = f.submit(Priority::Low, json!({"mode": "yield"}), 2);
    let first = f.active(victim).task;
    f.confirm(first);
    let second = preempt_and_relaunch(&mut f, victim, StopCause::Yield);
    assert!(resume_of(&f, second));
    f.run_to_success(second);
    let next_step = f.active(victim).task;
    let run = f.dir(next_step).read_run().unwrap();
    assert_eq!((run.step_index, run.resume), (1, false));
}

#[test]
fn the_submitters_environment_reaches_run_json_without_run_variables_or_the_digest() {
    let mut f = Fixture::new();
    let spec = json!({
        "api_version": 1, "thread": ThreadId::new(), "name": "env", "cwd": "/",
        "priority": "medium", "preempt": {"mode": "restart"},
        "workload": {"type": "task", "command": ["/bin/sh", "-c", "true"]},
    });
    let env = [
        ("HF_HOME", "/sub/hf"),
        ("HOMEBASED_TASK_ID", "stale"),
        ("CUDA_VISIBLE_DEVICES", "3"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    let submit =
        |env: Option<std::collections::BTreeMap<String, String>>, id: JobId| SubmitRequest {
            job: id,
            spec: spec.clone(),
            submitter: Submitter {
                env,
                ..plain_submitter()
            },
            allow_other_thread: false,
            machine: None,
        };
    let id = JobId::new();
    f.core.submit(submit(Some(env.into()), id)).unwrap();
    f.pass();
    let task = f.active(id).task;
    let run = f.dir(task).read_run().unwrap();
    let captured = run.environment.expect("captured at submit");
    assert_eq!(captured.get("HF_HOME").map(String::as_str), Some("/sub/hf"));
    assert!(!captured.contains_key("HOMEBASED_TASK_ID"));
    assert!(!captured.contains_key("CUDA_VISIBLE_DEVICES"));
    // The same job resubmitted from another environment is the same job, not a conflict.
    f.core.submit(submit(None, id)).unwrap();
    let spec = crate::store::jobs::spec(f.core.store.db(), id)
        .unwrap()
        .unwrap();
    assert!(!serde_json::to_string(&spec).unwrap().contains("HF_HOME"));
}

/// The value of one series in the core's `/metrics` text.
fn metric(f: &Fixture, series: &str) -> Option<String> {
    let (counters, snapshot) = f.core.metrics().unwrap();
    let text = crate::metrics::render(&counters, &snapshot).unwrap();
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')
            .map(str::to_string)
    })
}

#[test]
fn metrics_count_each_committed_end_preemption_and_wait_once_and_a_cancel_is_no_preemption() {
    let mut f = Fixture::new();
    let victim = f.submit(Priority::Low, json!({"mode": "yield"}), 1);
    let task = f.active(victim).task;
    f.confirm(task);
    assert_eq!(
        metric(&f, r#"homebased_jobs{priority="low",state="active"}"#).as_deref(),
        Some("1")
    );
    assert_eq!(
        metric(
            &f,
            r#"homebased_resource_phase{phase="executing",resource="gpu0"}"#
        )
        .as_deref(),
        Some("1")
    );
    let next = preempt_and_relaunch(&mut f, victim, StopCause::Yield);
    f.confirm(next);
    assert!(matches!(f.cancel(victim), CancelResult::Stopping { .. }));
    f.exit(next, ExitReason::Cancelled);
    f.cleanup(next, 1, CleanupOutcome::Clean);
    f.worker_gone(next);
    f.pass();

    let value = |series: &str| metric(&f, series).unwrap_or_else(|| panic!("no {series}"));
    assert_eq!(value(r#"homebased_preemptions_total{cause="yield"}"#), "1");
    assert_eq!(
        value(r#"homebased_preemptions_total{cause="restart"}"#),
        "0"
    );
    assert_eq!(
        value(r#"homebased_runs_ended_total{status="preempted"}"#),
        "1"
    );
    assert_eq!(
        value(r#"homebased_runs_ended_total{status="succeeded"}"#),
        "1"
    );
    assert_eq!(
        value(r#"homebased_runs_ended_total{status="cancelled"}"#),
        "1"
    );
    assert_eq!(value("homebased_attentions_opened_total"), "0");
    // The victim started twice (submitted, then after its yield), the urgent job once.
    assert_eq!(
        value(r#"homebased_job_wait_seconds_count{priority="low"}"#),
        "2"
    );
    assert_eq!(
        value(r#"homebased_job_wait_seconds_count{priority="high"}"#),
        "1"
    );
    assert_eq!(
        value(r#"homebased_jobs{priority="low",state="active"}"#),
        "0"
    );
    assert_eq!(
        value(r#"homebased_resource_phase{phase="idle",resource="gpu0"}"#),
        "1"
    );
}

/// What answers the core sent, in order: `None` for a plain answer, else the error it became.
type Sent = std::sync::Arc<std::sync::Mutex<Vec<Option<(ErrorCode, String)>>>>;

fn hold_an_answer(f: &mut Fixture) -> Sent {
    let sent = Sent::default();
    let record = sent.clone();
    f.core.answer(move |unsynced| {
        record
            .lock()
            .unwrap()
            .push(unsynced.map(|e| (e.code, e.message.clone())));
    });
    sent
}

fn barriers(f: &Fixture) -> i64 {
    crate::store::durability::barriers(f.core.store.db()).unwrap()
}

/// A one-step job submitted without a pass (its commit not yet on disk), and an answer the
/// core holds meanwhile.
fn held_submit(f: &mut Fixture) -> (JobId, Sent) {
    let step = json!({"type": "task", "command": ["/bin/sh", "-c", "true"]});
    let job = f.submit_only(Priority::Medium, restart(), vec![step]);
    (job, hold_an_answer(f))
}

#[test]
fn a_submits_answer_waits_for_the_launch_whose_commit_makes_it_durable() {
    let mut f = Fixture::new();
    let (job, sent) = held_submit(&mut f);
    assert!(
        !f.core.store.is_synced(),
        "the submit commits without an fsync"
    );

    assert!(
        sent.lock().unwrap().is_empty(),
        "held while the submit is not on disk"
    );

    let before = barriers(&f);
    f.pass();
    assert_eq!(
        f.phase(job).kind(),
        homebased_shared::queue::PhaseKind::Launching
    );
    assert_eq!(
        *sent.lock().unwrap(),
        vec![None],
        "sent once the launch committed"
    );
    assert!(f.core.store.is_synced());
    assert_eq!(
        barriers(&f),
        before + 1,
        "carried by the launch's own commit"
    );
    f.core.sync_and_answer();
    assert_eq!(barriers(&f), before + 1, "no barrier commit of its own");
}

/// Lanes `gpu1` and `gpu2` beside the fixture's `gpu0`, and three one-step jobs queued for
/// them without a pass.
fn three_lanes_three_queued(f: &mut Fixture) -> Vec<JobId> {
    for name in ["gpu1", "gpu2"] {
        f.core
            .register(RegisterRequest {
                name: name.into(),
                device: None,
            })
            .unwrap();
    }
    let step = json!({"type": "task", "command": ["/bin/sh", "-c", "true"]});
    let jobs: Vec<JobId> = (0..3)
        .map(|_| f.submit_only(Priority::Medium, restart(), vec![step.clone()]))
        .collect();
    jobs
}

/// [`three_lanes_three_queued`], each job running (started and confirmed), every commit
/// durable.
fn three_lanes_running(f: &mut Fixture) -> Vec<JobId> {
    let jobs = three_lanes_three_queued(f);
    f.pass();
    for job in &jobs {
        let task = f.active(*job).task;
        f.confirm(task);
    }
    f.core.store.sync().unwrap();
    jobs
}

#[test]
fn the_launches_of_one_pass_are_made_durable_by_one_flush_then_started() {
    let mut f = Fixture::new();
    let jobs = three_lanes_three_queued(&mut f);
    f.core.store.sync().unwrap();
    let before = barriers(&f);
    f.pass();
    for job in &jobs {
        assert_eq!(
            f.phase(*job).kind(),
            homebased_shared::queue::PhaseKind::Launching
        );
    }
    let started = f
        .workers
        .asked()
        .iter()
        .filter(|a| matches!(a, Asked::Start(_)))
        .count();
    assert_eq!(started, 3, "a worker for each reservation");
    assert!(f.core.store.is_synced(), "every reservation is on disk");
    // Each reservation alone would be a flush of its own; together they are one barrier's.
    assert_eq!(barriers(&f), before + 1, "one flush for the three launches");
}

#[test]
fn runs_that_end_in_one_turn_share_the_flush_of_the_launch_after_them() {
    let mut f = Fixture::new();
    let jobs = three_lanes_running(&mut f);
    let next = f.submit_only(
        Priority::Medium,
        restart(),
        vec![json!({"type": "task", "command": ["/bin/sh", "-c", "true"]})],
    );
    f.core.store.sync().unwrap();
    let before = barriers(&f);
    for job in &jobs {
        let task = f.active(*job).task;
        f.exit(task, ExitReason::Exit { code: 0 });
        f.cleanup(task, 1, CleanupOutcome::Clean);
        f.worker_gone(task);
    }
    for job in &jobs {
        assert_eq!(f.job(*job).status(), JobStatus::Succeeded);
    }
    assert!(
        !f.core.store.is_synced(),
        "ends with no side effect of their own wait for the next flush"
    );
    f.pass();
    assert_eq!(
        f.phase(next).kind(),
        homebased_shared::queue::PhaseKind::Launching
    );
    assert!(f.core.store.is_synced(), "the launch made them durable");
    assert_eq!(
        barriers(&f),
        before + 1,
        "one flush for the ends and the launch"
    );
}

#[test]
fn a_durable_write_that_changes_nothing_still_makes_a_held_submit_durable() {
    let mut f = Fixture::new();
    let (_, sent) = held_submit(&mut f);
    let before = barriers(&f);
    // A write that commits no change of its own (a launch that finds nothing to reserve, an
    // empty Fleet pull) would commit without an fsync.
    f.core.store.write(|_| Ok(())).unwrap();
    assert!(f.core.store.is_synced());
    assert_eq!(
        barriers(&f),
        before + 1,
        "the empty commit carried a barrier"
    );
    f.core.release_answers();
    assert_eq!(*sent.lock().unwrap(), vec![None]);
}

#[test]
fn a_submit_nothing_else_makes_durable_is_answered_after_the_turns_barrier() {
    let mut f = Fixture::new();
    let (_, sent) = held_submit(&mut f);
    let before = barriers(&f);
    // The turn ends without a pass's commit (none was due, or it committed nothing).
    f.core.sync_and_answer();
    assert_eq!(*sent.lock().unwrap(), vec![None]);
    assert!(f.core.store.is_synced());
    assert_eq!(barriers(&f), before + 1, "one barrier commit");
    f.core.sync_and_answer();
    assert_eq!(barriers(&f), before + 1, "none when everything is on disk");
    // An answer while everything is on disk is not held.
    let direct = hold_an_answer(&mut f);
    assert_eq!(*direct.lock().unwrap(), vec![None]);
}

#[test]
fn held_answers_become_retryable_errors_when_the_barrier_cannot_commit_and_the_next_turn_retries() {
    let mut f = Fixture::new();
    let (job, sent) = held_submit(&mut f);
    // Another process holds the database, as a backup tool would.
    let database = homebased_shared::home::Home::at(f._dir.path()).database();
    let other = rusqlite::Connection::open(database).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    f.core.sync_and_answer();
    let (code, message) = sent.lock().unwrap()[0]
        .clone()
        .expect("an error, not the answer");
    assert_eq!(code, ErrorCode::StorageUnavailable, "retryable: {message}");
    assert!(message.contains("carried out"), "{message}");
    assert!(message.contains("could still undo it"), "{message}");
    assert!(!f.core.store.is_synced());

    other.execute_batch("ROLLBACK").unwrap();
    f.core.sync_and_answer();
    assert!(f.core.store.is_synced(), "the next turn made it durable");
    assert_eq!(f.job(job).status(), JobStatus::Queued, "the job was kept");
}

#[test]
fn an_answer_that_could_not_be_made_durable_says_so_unless_it_was_a_refusal() {
    use homebased_shared::error::{ApiError, ApiResult};
    let unsynced = ApiError::new(ErrorCode::StorageUnavailable, "not durable");
    let done: ApiResult<u32> = Ok(7);
    assert_eq!(
        super::as_synced(Some(&unsynced), done.clone()),
        Err(unsynced.clone())
    );
    assert_eq!(super::as_synced(None, done), Ok(7));
    let refused: ApiResult<u32> = Err(ApiError::usage("no"));
    assert_eq!(super::as_synced(Some(&unsynced), refused.clone()), refused);
}

/// Submits a one-step job limited to `time_limit`, then lets a pass run.
fn submit_limited(f: &mut Fixture, time_limit: &str) -> JobId {
    let id = JobId::new();
    let spec = json!({
        "api_version": 1,
        "thread": ThreadId::new(),
        "name": "limited",
        "cwd": "/",
        "priority": "medium",
        "preempt": restart(),
        "time_limit": time_limit,
        "workload": {"type": "task", "command": ["/bin/sh", "-c", "true"]},
    });
    f.core
        .submit(SubmitRequest {
            job: id,
            spec,
            submitter: plain_submitter(),
            allow_other_thread: false,
            machine: None,
        })
        .unwrap();
    f.pass();
    id
}

#[test]
fn a_limited_run_tells_the_worker_its_limit_and_the_tick_sleeps_until_it() {
    let mut f = Fixture::new();
    let job = submit_limited(&mut f, "1m");
    let task = f.active(job).task;
    let run = f.dir(task).read_run().unwrap();
    assert_eq!(run.time_limit, Some(std::time::Duration::from_secs(60)));
    f.confirm(task);
    let RunPhase::Executing { started_at } = f.phase(job) else {
        panic!("not executing: {:?}", f.phase(job));
    };
    let_time_pass(&mut f, Duration::from_secs(30));
    let next = f.core.tick();
    assert!(matches!(f.phase(job), RunPhase::Executing { .. }));
    assert_eq!(next.millis(), Some(started_at + 60_000), "due at its limit");
    assert!(!f.dir(task).stop_file().exists());
}

#[test]
fn a_run_past_its_time_limit_is_stopped_as_a_restart_and_its_job_fails_with_the_cause() {
    let mut f = Fixture::new();
    let job = submit_limited(&mut f, "1m");
    let task = f.active(job).task;
    f.confirm(task);
    let_time_pass(&mut f, Duration::from_secs(61));
    f.core.tick();
    let RunPhase::Stopping { stop, .. } = f.phase(job) else {
        panic!("not stopping: {:?}", f.phase(job));
    };
    assert_eq!(stop.cause, StopCause::TimeLimit);
    // Enacted as a restart's: the durable request, then the signal.
    assert_eq!(
        f.dir(task).read_stop().unwrap().map(|s| s.cause),
        Some(StopCause::TimeLimit)
    );
    assert_eq!(f.workers.asked().last(), Some(&Asked::SignalStop(task)));
    assert_eq!(f.job(job).last_stop_cause, Some(StopCause::TimeLimit));

    // The worker stopped it: the job fails, not queued again, with the cause in its event.
    f.exit(task, ExitReason::Cancelled);
    assert_eq!(f.job(job).status(), JobStatus::Failed);
    assert_eq!(f.runs(job)[0].status(), RunStatus::Failed);
    let events = crate::store::events::list_for_job(f.core.store.db(), job).unwrap();
    assert_eq!(f.events(job), ["JOB_FAILED"]);
    assert_eq!(events[0].answer.detail.detail, Some(EventCause::TimeLimit));
    assert_eq!(events[0].answer.detail.process, Some(ExitReason::Cancelled));
    f.cleanup(task, 1, CleanupOutcome::Clean);
    f.worker_gone(task);
    assert!(f.runs(job).iter().all(|r| r.phase.is_none()), "lane free");
}

#[test]
fn a_limit_that_passed_while_the_daemon_was_down_is_stopped_when_it_reconciles() {
    let mut f = Fixture::new();
    let job = submit_limited(&mut f, "1m");
    let task = f.active(job).task;
    // Its limit passes, and an hour more, while no tick runs; its worker still lives.
    f.confirm(task);
    let_time_pass(&mut f, Duration::from_secs(3_600));
    f.core.reconcile();
    assert!(matches!(
        f.phase(job),
        RunPhase::Stopping { stop, .. } if stop.cause == StopCause::TimeLimit
    ));
    assert!(f.dir(task).stop_file().exists());
}

/// Whether delivery was woken since the last look: takes the permit `notify_one` stores for
/// a loop that is not waiting yet, as the delivery loop finds it at its next wait.
fn delivery_woken(wake: &tokio::sync::Notify) -> bool {
    use std::future::Future;
    let mut notified = std::pin::pin!(wake.notified());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    notified.as_mut().poll(&mut cx).is_ready()
}

#[test]
fn the_commit_that_appends_an_event_wakes_delivery_and_a_pass_alone_does_not() {
    let mut f = Fixture::new();
    let wake = f.core.delivery_wake();
    let job = f.submit(Priority::Medium, restart(), 1);
    let task = f.active(job).task;
    f.confirm(task);
    assert!(
        !delivery_woken(&wake),
        "a submit, its launch, a pass and a confirmation append no event"
    );

    // The end is observed and nothing else runs: no pass, no tick.
    f.exit(task, ExitReason::Exit { code: 0 });
    assert_eq!(f.events(job), ["JOB_SUCCEEDED"]);
    assert!(delivery_woken(&wake), "the end's commit woke delivery");

    f.cleanup(task, 1, CleanupOutcome::Clean);
    f.worker_gone(task);
    f.pass();
    assert!(
        !delivery_woken(&wake),
        "the lane given back and the pass after it append nothing"
    );

    // A queued job's cancel appends its event without a run's move.
    let running = f.submit(Priority::Medium, restart(), 1);
    let queued = f.submit(Priority::Medium, restart(), 1);
    assert_eq!(f.job(running).status(), JobStatus::Active);
    assert!(!delivery_woken(&wake));
    assert_eq!(f.cancel(queued), CancelResult::Cancelled);
    assert_eq!(f.events(queued), ["JOB_CANCELLED"]);
    assert!(delivery_woken(&wake), "the cancel's commit woke delivery");

    // A job submitted after a cancelled one is cancelled by its submit, with its event.
    let after = JobId::new();
    let spec = json!({
        "api_version": 1,
        "thread": ThreadId::new(),
        "name": "after a cancelled job",
        "cwd": "/",
        "priority": Priority::Medium,
        "preempt": restart(),
        "after": [queued],
        "steps": [{"type": "task", "command": ["/bin/sh", "-c", "true"]}],
    });
    f.core
        .submit(SubmitRequest {
            job: after,
            spec,
            submitter: plain_submitter(),
            allow_other_thread: false,
            machine: None,
        })
        .unwrap();
    assert_eq!(f.events(after), ["JOB_CANCELLED"]);
    assert!(delivery_woken(&wake), "the submit's commit woke delivery");
}

#[test]
fn each_jobs_spec_is_decoded_once_however_many_passes_steps_and_stops_read_it() {
    let mut f = Fixture::new();
    // A low two-step job that yields to an urgent one, and a job queued behind both: the
    // pass reads the running job's `preempt`, each launch its steps, each end its
    // `yield_codes`, over many passes.
    let victim = f.submit(Priority::Low, json!({"mode": "yield"}), 2);
    let behind = f.submit(Priority::Low, restart(), 1);
    let task = f.active(victim).task;
    f.confirm(task);
    for _ in 0..20 {
        f.pass();
    }
    let urgent = f.submit(Priority::High, restart(), 1);
    f.exit(task, ExitReason::Exit { code: EXIT_YIELDED });
    f.cleanup(task, 1, CleanupOutcome::Clean);
    f.worker_gone(task);
    f.pass();
    f.run_to_success(f.active(urgent).task);
    f.run_to_success(f.active(victim).task);
    f.run_to_success(f.active(victim).task);
    f.run_to_success(f.active(behind).task);
    for _ in 0..20 {
        f.pass();
    }
    for job in [victim, behind, urgent] {
        assert_eq!(f.job(job).status(), JobStatus::Succeeded);
    }
    assert_eq!(f.core.specs.decoded(), 3, "one decode per job");
}

/// A finished job's spec stays kept only until enough others are: then every finished one
/// is dropped, and an open job's is kept.
#[test]
fn finished_jobs_specs_are_dropped_once_forget_after_more_are_kept() {
    use crate::core::specs::FORGET_AFTER;
    let mut f = Fixture::new();
    f.core
        .register(RegisterRequest {
            name: "gpu1".into(),
            device: None,
        })
        .unwrap();
    let open = f.submit(Priority::Low, json!({"mode": "wait"}), 1);
    f.confirm(f.active(open).task);
    f.pass();
    let mut finished = 0;
    loop {
        let job = f.submit(Priority::High, restart(), 1);
        f.run_to_success(f.active(job).task);
        f.pass();
        finished += 1;
        if f.core.specs.kept() == 1 {
            break;
        }
        assert_eq!(f.core.specs.kept(), 1 + finished, "kept until the look");
        assert!(finished <= FORGET_AFTER, "still kept after {finished} ends");
    }
    assert!(
        finished >= FORGET_AFTER - 1,
        "dropped after {finished} ends, not once FORGET_AFTER more were kept"
    );
    assert_eq!(
        f.job(open).status(),
        JobStatus::Active,
        "the open job runs on"
    );
}
