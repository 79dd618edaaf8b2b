//! Notices on a real core and store, with the clock passed in: episodes, their one notice,
//! suppression at delivery time, and check-due across a restart.

use super::*;
use homebased_shared::config::{Config, NotifyBlockedAfter};
use homebased_shared::ids::{JobId, ResourceId, TaskId, ThreadId};
use homebased_shared::queue::{PreemptMode, Priority};
use homebased_shared::spec::{JobSpec, Preempt, Step};
use std::collections::HashSet;
use std::time::Duration;

const MINUTE: Millis = 60_000;

struct Fixture {
    dir: tempfile::TempDir,
    core: Core,
}

fn config() -> Config {
    let mut config = Config::default();
    config.resource.notify_blocked_after = NotifyBlockedAfter {
        r#yield: Duration::from_secs(15 * 60),
        wait: Duration::from_secs(30 * 60),
    };
    config
}

fn open_core(dir: &tempfile::TempDir) -> Core {
    crate::core::testing::open_core(dir, config(), Default::default())
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let core = open_core(&dir);
        Fixture { dir, core }
    }

    /// The daemon restarts: a new core on the same database.
    fn restart(self) -> Fixture {
        let Fixture { dir, core } = self;
        drop(core);
        let core = open_core(&dir);
        Fixture { dir, core }
    }

    /// A queued job with a real canonical spec.
    fn job(&mut self, timeout: Duration) -> JobId {
        let id = JobId::new();
        let spec = serde_json::to_value(JobSpec {
            api_version: 1,
            thread: ThreadId::new(),
            name: "notice test".into(),
            cwd: "/".into(),
            priority: Priority::Medium,
            preempt: Preempt {
                mode: PreemptMode::Restart,
                restart_within: None,
            },
            timeout,
            time_limit: None,
            machine: None,
            resource: None,
            gpus: 1,
            resources: Vec::new(),
            after: Vec::new(),
            steps: vec![Step::Task {
                command: vec!["true".into()],
                env: Default::default(),
                yield_codes: Default::default(),
            }],
        })
        .unwrap();
        self.core
            .store
            .write(|tx| {
                jobs::insert(
                    tx,
                    &jobs::NewJob {
                        id,
                        name: "notice test",
                        ..jobs::NewJob::for_test(&spec, Priority::Medium)
                    },
                )
            })
            .unwrap();
        id
    }

    /// An executing run of `job` that started at `started_at`.
    fn run(&mut self, job: JobId, started_at: Millis) -> TaskId {
        let task = self
            .core
            .store
            .write(|db| {
                let lane = crate::store::resources::insert(
                    db,
                    &format!("lane-{}", &JobId::new().to_string()[..8]),
                    None,
                    homebased_shared::wire::ResourceOrigin::Manual,
                )?;
                let reserved =
                    runs::reserve(db, job, &[lane.id])?.expect("a free lane and a queued job");
                let executing = RunPhase::Executing { started_at };
                runs::set_phase(db, reserved.task, Some(&executing))?;
                Ok(reserved.task)
            })
            .unwrap();
        std::fs::create_dir_all(self.core.home.task_dir(task)).unwrap();
        task
    }

    /// The job's events as the objects their bodies are, to check their fields.
    fn events(&self, job: JobId) -> Vec<Value> {
        events::list_for_job(self.core.store.db(), job)
            .unwrap()
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect()
    }

    fn take(&mut self, now: Millis) -> Vec<(JobId, u32)> {
        self.core
            .outbox_take_at(&HashSet::new(), 100, now)
            .unwrap()
            .due
            .iter()
            .map(|e| (e.job, e.seq))
            .collect()
    }
}

fn head(job: JobId, yield_requested: bool) -> BlockedHead {
    BlockedHead {
        job,
        blockers: vec![
            Blocker::Run {
                resource: ResourceId::new(),
                job: JobId::new(),
                task: TaskId::new(),
            },
            Blocker::Attention {
                resource: ResourceId::new(),
            },
        ],
        yield_requested,
    }
}

fn blocked_notices(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["event"] == "JOB_BLOCKED")
        .collect()
}

#[test]
fn the_first_blocked_job_gets_one_notice_per_episode_after_the_wait_delay() {
    let mut f = Fixture::new();
    let a = f.job(Duration::from_secs(3600));
    let t0 = 1_000 * MINUTE;
    f.core.track_episode(Some(&head(a, false)), t0).unwrap();
    f.core
        .track_episode(Some(&head(a, false)), t0 + 10 * MINUTE)
        .unwrap();
    assert!(!f.core.fire_due_blocked(t0 + 30 * MINUTE - 1).unwrap());
    assert!(f.core.fire_due_blocked(t0 + 30 * MINUTE).unwrap());
    assert!(!f.core.fire_due_blocked(t0 + 90 * MINUTE).unwrap(), "once");

    let events = f.events(a);
    let notices = blocked_notices(&events);
    assert_eq!(notices.len(), 1);
    let notice = notices[0];
    assert_eq!(
        notice["blocked"]["blocked_since"],
        homebased_shared::time::rfc3339(t0),
        "the first start"
    );
    for field in ["resource", "task", "run_number", "step"] {
        assert_eq!(notice[field], Value::Null, "{field}: {notice}");
    }
    let blockers = notice["blocked"]["blockers"].as_array().unwrap();
    assert_eq!(blockers.len(), 2, "{notice}");
    assert_eq!(blockers[0]["kind"], "run");
    for field in ["resource", "job", "task"] {
        assert!(blockers[0][field].is_string(), "{notice}");
    }
    assert_eq!(blockers[1]["kind"], "attention");
    assert!(blockers[1].get("attention").is_some(), "{notice}");
    let episode = notice["blocked"]["episode"].as_str().unwrap();
    let stored = stored::open(f.core.store.db()).unwrap().unwrap();
    assert_eq!(stored.id.to_string(), episode);
    assert_eq!(stored.notified_seq, Some(1));
}

#[test]
fn a_new_head_starts_a_new_episode_and_no_head_ends_it() {
    let mut f = Fixture::new();
    let (a, b) = (
        f.job(Duration::from_secs(3600)),
        f.job(Duration::from_secs(3600)),
    );
    f.core.track_episode(Some(&head(a, false)), 0).unwrap();
    assert!(f.core.fire_due_blocked(30 * MINUTE).unwrap());
    f.core
        .track_episode(Some(&head(b, false)), 40 * MINUTE)
        .unwrap();
    assert!(!f.core.fire_due_blocked(69 * MINUTE).unwrap());
    assert!(f.core.fire_due_blocked(70 * MINUTE).unwrap());
    f.core.track_episode(None, 80 * MINUTE).unwrap();
    assert_eq!(stored::open(f.core.store.db()).unwrap(), None);
    assert!(!f.core.fire_due_blocked(500 * MINUTE).unwrap());
    // A comes back: a third episode, with its own notice.
    f.core
        .track_episode(Some(&head(a, false)), 90 * MINUTE)
        .unwrap();
    assert!(f.core.fire_due_blocked(120 * MINUTE).unwrap());
    let episodes: Vec<_> = blocked_notices(&f.events(a))
        .iter()
        .map(|n| n["blocked"]["episode"].clone())
        .collect();
    assert_eq!(episodes.len(), 2);
    assert_ne!(episodes[0], episodes[1]);
    assert_eq!(blocked_notices(&f.events(b)).len(), 1);
}

#[test]
fn a_yield_requested_for_the_head_shortens_the_delay() {
    let mut f = Fixture::new();
    let a = f.job(Duration::from_secs(3600));
    f.core.track_episode(Some(&head(a, false)), 0).unwrap();
    assert!(!f.core.fire_due_blocked(15 * MINUTE).unwrap());
    f.core
        .track_episode(Some(&head(a, true)), 16 * MINUTE)
        .unwrap();
    assert!(f.core.fire_due_blocked(16 * MINUTE).unwrap());
}

#[test]
fn an_episode_survives_a_restart_with_its_start() {
    let mut f = Fixture::new();
    let a = f.job(Duration::from_secs(3600));
    f.core.track_episode(Some(&head(a, false)), 0).unwrap();
    let before = stored::open(f.core.store.db()).unwrap().unwrap();
    let mut f = f.restart();
    f.core
        .track_episode(Some(&head(a, false)), 25 * MINUTE)
        .unwrap();
    let after = stored::open(f.core.store.db()).unwrap().unwrap();
    assert_eq!((after.id, after.started_at), (before.id, 0));
    assert!(f.core.fire_due_blocked(30 * MINUTE).unwrap());
}

#[test]
fn a_blocked_notice_no_longer_true_at_its_turn_is_suppressed_and_keeps_its_seq() {
    let mut f = Fixture::new();
    let (a, b) = (
        f.job(Duration::from_secs(3600)),
        f.job(Duration::from_secs(3600)),
    );
    f.core.track_episode(Some(&head(a, false)), 0).unwrap();
    assert!(f.core.fire_due_blocked(30 * MINUTE).unwrap());
    // Still true: offered for delivery.
    assert_eq!(f.take(31 * MINUTE), vec![(a, 1)]);
    // B becomes the first blocked before A's notice got delivered.
    f.core
        .track_episode(Some(&head(b, false)), 32 * MINUTE)
        .unwrap();
    assert_eq!(f.take(33 * MINUTE), vec![]);
    let state = events::delivery_state(f.core.store.db(), a, 1).unwrap();
    assert_eq!(state, Some((false, true)), "suppressed, never delivered");
    let job = jobs::require(f.core.store.db(), a).unwrap();
    let seq = f
        .core
        .store
        .write(|tx| {
            events::append(
                tx,
                f.core.machine,
                &job,
                EventKind::JobCancelled,
                None,
                Default::default(),
            )
        })
        .unwrap();
    assert_eq!(seq, 2, "the suppressed notice keeps seq 1");
    assert_eq!(f.take(34 * MINUTE), vec![(a, 2)]);
}

#[test]
fn check_due_fires_once_per_silent_run_and_never_again_after_a_restart() {
    let mut f = Fixture::new();
    let job = f.job(Duration::from_secs(45 * 60));
    let start = 1_000 * MINUTE;
    let task = f.run(job, start);
    assert!(!f.core.fire_check_due(start + 45 * MINUTE - 1).unwrap());
    assert!(f.core.fire_check_due(start + 45 * MINUTE).unwrap());
    assert!(
        !f.core.fire_check_due(start + 500 * MINUTE).unwrap(),
        "once per run"
    );
    let notices: Vec<_> = f
        .events(job)
        .into_iter()
        .filter(|e| e["event"] == "JOB_CHECK_DUE")
        .collect();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0]["task"], json!(task));
    assert_eq!(notices[0]["run_number"], 1);
    assert_eq!(
        stored::check_due_seq(f.core.store.db(), task).unwrap(),
        Some(1)
    );

    let mut f = f.restart();
    assert!(
        !f.core.fire_check_due(start + 900 * MINUTE).unwrap(),
        "not twice"
    );
}

#[test]
fn check_due_counts_silence_from_the_last_output_with_a_thirty_minute_floor() {
    let mut f = Fixture::new();
    // Stored below the minimum (the spec refuses it; an old row could hold it).
    let job = f.job(Duration::from_secs(60));
    let now = f.core.clock.now_ms();
    let task = f.run(job, now - 600 * MINUTE);
    let log = homebased_shared::rundir::RunDir::new(f.core.home.task_dir(task)).output_log();
    std::fs::write(&log, "progress\n").unwrap();
    let written = modified_ms(&log).unwrap();
    assert!(!f.core.fire_check_due(written + 29 * MINUTE).unwrap());
    assert!(!f.core.fire_check_due(written + 30 * MINUTE - 1).unwrap());
    assert!(f.core.fire_check_due(written + 30 * MINUTE).unwrap());
}

#[test]
fn a_check_due_notice_is_suppressed_once_the_run_writes_again() {
    let mut f = Fixture::new();
    let job = f.job(Duration::from_secs(30 * 60));
    let now = f.core.clock.now_ms();
    let task = f.run(job, now - 120 * MINUTE);
    assert!(f.core.fire_check_due(now).unwrap());
    let log = homebased_shared::rundir::RunDir::new(f.core.home.task_dir(task)).output_log();
    let file = std::fs::File::create(&log).unwrap();
    // It writes five seconds after the notice's time.
    file.set_modified(homebased_shared::time::from_ms(now + 5_000))
        .unwrap();
    assert_eq!(f.take(now + 10_000), vec![]);
    let state = events::delivery_state(f.core.store.db(), job, 1).unwrap();
    assert_eq!(state, Some((false, true)));
}
