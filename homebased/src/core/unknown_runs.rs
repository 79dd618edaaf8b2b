//! Live runs the store does not know (SPEC section 1): at start, a live worker whose run the
//! store does not know, or knows as ended (a store restored from an older copy, a WAL whose
//! tail was lost), holds its lanes in Attention with failure `unknown_live_run` (one
//! Attention, every lane of the run that this machine has), so that no second run starts
//! beside it.
//!
//! - [`scan`] (I/O): the live workers of this home, found two ways: by their command lines
//!   in the process table (`homebased_shared::worker_cmdline`: `--job` and `--lanes`, which
//!   the workload cannot rewrite), and by a run directory whose `runner.lock` a live worker
//!   holds. It skips the runs the store holds lanes for (reconcile re-attaches those).
//!   `run.json` and `worker.json` are the workload's to write or delete: read without
//!   following symlinks, strictly, bounded, and never trusted to free a lane. The lanes held
//!   are those of the command line and those of `run.json`, together; a worker whose lanes
//!   nothing names holds every free lane.
//! - [`plan`] (pure): what one such run does given what the store knows.
//! - [`Core::hold_unknown_live_runs`]: one durable commit per hold.
//!
//! A hold is a [`LaneHold`]: an Attention that no run of the store is in. The scheduler
//! sees it as a run in Attention on each of its lanes (and its job, when it is queued again, as
//! blocked by its own run), `resource list` shows it, and `resource release --attention A`
//! closes it like any other, all of its lanes at once. Once a person released it, the task is never held again, even
//! after a restart that finds its worker still alive: the release was a decision about that
//! very run. No `JOB_ATTENTION` is written: the store has no run for the event, and a thread
//! named only by the workload's own files is not one to write to; the daemon logs the hold.

use super::Core;
use crate::store::attentions::{self, LaneHold};
use crate::store::{resources, runs, Db};
use crate::supervisor::launcher::{Launcher, LiveWorker};
use homebased_shared::error::ApiResult;
use homebased_shared::home::Home;
use homebased_shared::ids::{AttentionId, JobId, ResourceId, TaskId};
use homebased_shared::rundir::{read_json_untrusted, RunDir, RunSpec, WorkerRecord};
use homebased_shared::wire::{AttentionFailure, UnknownLiveRun};
use std::collections::{BTreeMap, HashSet};

/// A live worker's run, with what its command line and records say.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveRun {
    pub task: TaskId,
    /// The worker's `--job`, else `run.json`'s; `None` when neither names one (the store's
    /// row for the run is asked then).
    pub job: Option<JobId>,
    /// `run.json`'s, when it could be used.
    pub record: Option<RunRecord>,
    /// The lanes its command line names, then those only `run.json` adds, by name; empty
    /// when nothing names one.
    pub resource_names: Vec<String>,
    /// The worker's pid: from the process table, else `worker.json`.
    pub pid: Option<u32>,
    /// What fell short in the run's own files (an unusable `run.json`, a job or lanes that
    /// disagree with the command line), for the failure's message.
    pub doubts: Vec<String>,
}

/// What `run.json` says of the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRecord {
    pub run_number: u32,
    pub step: u32,
    pub resume: bool,
}

/// A lane the hold may take, with whether another hold (an open Attention) or a known run
/// holds it already.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownLane {
    pub id: ResourceId,
    pub name: String,
    pub taken: bool,
}

/// What the store knows that decides a [`LiveRun`]'s fate.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    /// An Attention (open or released) named the task before.
    pub named_before: bool,
    /// The store's row for the run (ended: a holding run is never scanned): its job and
    /// record, where the run's own files name none.
    pub stored: Option<(JobId, RunRecord)>,
    /// The lanes of [`LiveRun::resource_names`] that the store has, in that order; every
    /// lane of the machine when it names none.
    pub lanes: Vec<KnownLane>,
}

/// What to do with one live run.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Hold these lanes (first lane first) with this failure record.
    Hold {
        lanes: Vec<ResourceId>,
        failure: UnknownLiveRun,
    },
    /// Nothing to hold; the reason is logged.
    Leave { reason: &'static str },
}

pub fn plan(run: &LiveRun, known: &Known) -> Plan {
    if known.named_before {
        return Plan::Leave {
            reason: "an Attention named this run before (a person released it, or it is held)",
        };
    }
    let Some(job) = run.job.or(known.stored.map(|(job, _)| job)) else {
        return Plan::Leave {
            reason: "neither its worker's command line, its run.json nor the store names its job",
        };
    };
    if known.lanes.is_empty() {
        return Plan::Leave {
            reason: "it names no lane this machine has",
        };
    }
    // A lane held already keeps its holder (the store allows one hold per lane); the run's
    // other lanes are still held, so that nothing new starts beside it there.
    let free: Vec<&KnownLane> = known.lanes.iter().filter(|lane| !lane.taken).collect();
    if free.is_empty() {
        return Plan::Leave {
            reason: "its lanes are held already (an Attention, or a run the store knows)",
        };
    }
    let record = run
        .record
        .or(known.stored.map(|(_, record)| record))
        .unwrap_or(RunRecord {
            run_number: 0,
            step: 0,
            resume: false,
        });
    let names = if run.resource_names.is_empty() {
        free.iter().map(|lane| lane.name.clone()).collect()
    } else {
        run.resource_names.clone()
    };
    Plan::Hold {
        lanes: free.iter().map(|lane| lane.id).collect(),
        failure: failure_record(run, job, record, names, known.stored.is_some()),
    }
}

/// The Attention's failure record (SPEC section 6's record, result `unknown_live_run`).
pub fn failure_record(
    run: &LiveRun,
    job: JobId,
    record: RunRecord,
    resources: Vec<String>,
    run_known: bool,
) -> UnknownLiveRun {
    let pid = run
        .pid
        .map_or_else(|| "no recorded pid".to_string(), |p| format!("pid {p}"));
    let store = if run_known {
        "knows it as ended"
    } else {
        "does not know it"
    };
    let mut message = format!(
        "run {} of job {job} is alive (its worker, {pid}, holds runner.lock) but the store {store} \
         (restored from an older copy, or its last commits were lost): its lanes are held so that \
         nothing starts beside it. Check the machine, stop the run if it must not go on, then \
         release this Attention",
        run.task
    );
    if run.resource_names.is_empty() {
        message.push_str(". Nothing names its lanes, so every free lane is held");
    }
    for doubt in &run.doubts {
        message.push_str(". ");
        message.push_str(doubt);
    }
    UnknownLiveRun {
        task: run.task,
        job,
        run_number: record.run_number,
        step: record.step,
        resume: record.resume,
        pid: run.pid,
        resources,
        message,
    }
}

/// The live runs of this home's workers, except `skip` (the runs the store holds lanes for):
/// each worker found by its command line (`launcher.live_workers`) or by the lock it holds
/// on a run directory under `<home>/tasks/`.
pub fn scan(home: &Home, skip: &HashSet<TaskId>, launcher: &dyn Launcher) -> Vec<LiveRun> {
    // By task, so that a worker found both ways is one run (and the order is the tasks').
    let mut live: BTreeMap<TaskId, Option<LiveWorker>> = BTreeMap::new();
    for worker in launcher.live_workers() {
        live.insert(worker.cmdline.task, Some(worker));
    }
    for task in locked_run_dirs(home, launcher) {
        live.entry(task).or_insert(None);
    }
    live.into_iter()
        .filter(|(task, _)| !skip.contains(task))
        .map(|(task, worker)| live_run(&RunDir::new(home.task_dir(task)), task, worker))
        .collect()
}

/// The run directories under `<home>/tasks/` whose lock a live worker holds (as `launcher`
/// tells).
fn locked_run_dirs(home: &Home, launcher: &dyn Launcher) -> Vec<TaskId> {
    let tasks = home.root().join("tasks");
    let entries = match std::fs::read_dir(&tasks) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::error!(dir = %tasks.display(), error = %e, "cannot list run directories to find live runs the store does not know");
            return Vec::new();
        }
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<TaskId>().ok())
        // The same check as for a known run: the lock, or the worker's own process where
        // the workload replaced the lock.
        .filter(|task| launcher.worker_alive(&RunDir::new(home.task_dir(*task))))
        .collect()
}

/// What one live worker's command line and run directory say of its run. The command line
/// wins where they disagree: the run directory is the workload's to rewrite.
fn live_run(dir: &RunDir, task: TaskId, worker: Option<LiveWorker>) -> LiveRun {
    let (mut job, mut resource_names, mut pid) = (None, Vec::new(), None);
    if let Some(worker) = &worker {
        job = worker.cmdline.job;
        resource_names.clone_from(&worker.cmdline.lanes);
        pid = Some(worker.pid);
    }
    let mut doubts = Vec::new();
    let record = match read_run_json(dir, task) {
        Ok(spec) => {
            if job.is_some_and(|job| job != spec.job) {
                doubts.push(format!(
                    "Its run.json names another job ({}): the worker's command line is believed",
                    spec.job
                ));
            }
            job = job.or(Some(spec.job));
            for lane in spec.lanes {
                if !resource_names.contains(&lane.name) {
                    resource_names.push(lane.name);
                }
            }
            Some(RunRecord {
                run_number: spec.run_number,
                step: spec.step_index,
                resume: spec.resume,
            })
        }
        Err(e) => {
            tracing::error!(%task, error = %e, "a live worker's run.json cannot be used: its lanes are held by what else names them");
            doubts.push(format!("Its run.json cannot be used ({e})"));
            None
        }
    };
    // The pid is what the failure names; an unreadable worker.json leaves it out.
    let pid = pid.or_else(|| {
        read_json_untrusted::<WorkerRecord>(&dir.worker_json())
            .ok()
            .flatten()
            .map(|w| w.worker.pid)
    });
    LiveRun {
        task,
        job,
        record,
        resource_names,
        pid,
        doubts,
    }
}

fn read_run_json(dir: &RunDir, task: TaskId) -> Result<RunSpec, String> {
    let spec: RunSpec = read_json_untrusted(&dir.run_json())
        .map_err(|e| e.to_string())?
        .ok_or("no run.json")?;
    if spec.task != task {
        return Err(format!(
            "run.json names task {}, not its directory's",
            spec.task
        ));
    }
    Ok(spec)
}

/// What the store knows about `run`, read inside the commit that may hold its lane.
fn known(db: Db, run: &LiveRun) -> ApiResult<Known> {
    let holding = runs::list_holding(db)?;
    let candidates = if run.resource_names.is_empty() {
        resources::list(db)?
    } else {
        let mut named = Vec::new();
        for name in &run.resource_names {
            if resources::check_name(name).is_ok() {
                named.extend(resources::find(db, name)?);
            }
        }
        named
    };
    let mut lanes: Vec<KnownLane> = Vec::new();
    for lane in candidates {
        // A lane named twice is held once.
        if lanes.iter().any(|known| known.id == lane.id) {
            continue;
        }
        let taken = attentions::is_held(db, lane.id)? || holding.iter().any(|r| r.holds(lane.id));
        lanes.push(KnownLane {
            id: lane.id,
            name: lane.name,
            taken,
        });
    }
    let stored = runs::get(db, run.task)?.map(|stored| {
        let record = RunRecord {
            run_number: stored.run_number,
            step: stored.step,
            resume: stored.resume,
        };
        (stored.job, record)
    });
    Ok(Known {
        named_before: attentions::ever_named(db, run.task)?,
        stored,
        lanes,
    })
}

impl Core {
    /// Holds the lanes of every live run the store does not know, or knows as ended; called
    /// at start, before the first scheduling pass, with the tasks the store holds lanes for.
    pub(super) fn hold_unknown_live_runs(&mut self, holding: &HashSet<TaskId>) {
        for run in scan(&self.home, holding, self.launcher.as_ref()) {
            let held = self.store.write(|db| {
                let plan = plan(&run, &known(db, &run)?);
                if let Plan::Hold { lanes, failure } = &plan {
                    let id = AttentionId::new();
                    attentions::open(
                        db,
                        id,
                        lanes,
                        run.task,
                        &AttentionFailure::UnknownLiveRun(failure.clone()),
                        db.now(),
                    )?;
                    return Ok(Ok(id));
                }
                Ok(Err(plan))
            });
            match held {
                Ok(Ok(attention)) => tracing::error!(
                    task = %run.task, job = ?run.job, pid = ?run.pid, resources = ?run.resource_names,
                    %attention, "a live run the store does not know holds its lanes in Attention (unknown_live_run)"
                ),
                Ok(Err(Plan::Leave { reason })) => tracing::warn!(
                    task = %run.task, pid = ?run.pid, resources = ?run.resource_names, reason,
                    "a live run the store does not know: no hold"
                ),
                Ok(Err(Plan::Hold { .. })) => {}
                Err(e) => tracing::error!(
                    task = %run.task, error = %e,
                    "cannot hold the lanes of a live run the store does not know"
                ),
            }
        }
    }
}

/// The run view of a hold, for `resource list`.
pub fn hold_view(hold: &LaneHold) -> homebased_shared::wire::ActiveRunView {
    homebased_shared::wire::ActiveRunView {
        job: hold.job,
        task: hold.task,
        run_number: hold.failure.run_number,
        step: hold.failure.step,
        resume: hold.failure.resume,
        phase: homebased_shared::wire::PhaseView::Attention {
            id: hold.id,
            failure: AttentionFailure::UnknownLiveRun(hold.failure.clone()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> LiveRun {
        LiveRun {
            task: TaskId::new(),
            job: Some(JobId::new()),
            record: Some(RunRecord {
                run_number: 2,
                step: 1,
                resume: false,
            }),
            resource_names: vec!["gpu0".into()],
            pid: Some(4242),
            doubts: Vec::new(),
        }
    }

    fn lane(name: &str, taken: bool) -> KnownLane {
        KnownLane {
            id: ResourceId::new(),
            name: name.into(),
            taken,
        }
    }

    fn known(lanes: &[KnownLane]) -> Known {
        Known {
            named_before: false,
            stored: None,
            lanes: lanes.to_vec(),
        }
    }

    fn ids(lanes: &[KnownLane]) -> Vec<ResourceId> {
        lanes.iter().map(|lane| lane.id).collect()
    }

    #[test]
    fn an_unknown_live_run_holds_its_lane_with_a_record_naming_task_and_pid() {
        let run = live();
        let gpu0 = [lane("gpu0", false)];
        let Plan::Hold { lanes, failure } = plan(&run, &known(&gpu0)) else {
            panic!("held");
        };
        assert_eq!(lanes, ids(&gpu0));
        assert_eq!(failure.task, run.task);
        assert_eq!(Some(failure.job), run.job);
        assert_eq!((failure.run_number, failure.step), (2, 1));
        assert_eq!(failure.pid, Some(4242));
        assert_eq!(failure.resources, ["gpu0"]);
        let message = &failure.message;
        assert!(message.contains("pid 4242") && message.contains("does not know"));
    }

    #[test]
    fn an_unknown_run_on_two_lanes_holds_both_in_one_plan_and_its_record_names_both() {
        let run = LiveRun {
            resource_names: vec!["gpu1".into(), "gpu2".into()],
            ..live()
        };
        let both = [lane("gpu1", false), lane("gpu2", false)];
        let Plan::Hold { lanes, failure } = plan(&run, &known(&both)) else {
            panic!("held");
        };
        assert_eq!(lanes, ids(&both));
        assert_eq!(failure.resources, ["gpu1", "gpu2"]);
    }

    #[test]
    fn a_lane_held_already_stays_its_holders_and_the_others_are_still_held() {
        let run = live();
        let (taken, free) = (lane("gpu0", true), lane("gpu1", false));
        let Plan::Hold { lanes, .. } = plan(&run, &known(&[taken, free.clone()])) else {
            panic!("held");
        };
        assert_eq!(lanes, [free.id]);
    }

    #[test]
    fn a_run_known_as_ended_says_so_and_fills_in_what_its_files_lost_from_the_store() {
        let job = JobId::new();
        let stored = RunRecord {
            run_number: 5,
            step: 3,
            resume: true,
        };
        let run = LiveRun {
            job: None,
            record: None,
            doubts: vec!["Its run.json cannot be used (no run.json)".into()],
            ..live()
        };
        let Known { lanes, .. } = known(&[lane("gpu0", false)]);
        let ended = Known {
            stored: Some((job, stored)),
            lanes,
            named_before: false,
        };
        let Plan::Hold { failure, .. } = plan(&run, &ended) else {
            panic!("held");
        };
        assert_eq!(failure.job, job);
        assert_eq!(
            (failure.run_number, failure.step, failure.resume),
            (5, 3, true)
        );
        assert!(failure.message.contains("knows it as ended"));
        assert!(failure.message.contains("run.json cannot be used"));
    }

    #[test]
    fn a_run_whose_lanes_nothing_names_holds_every_free_lane_and_says_so() {
        let run = LiveRun {
            resource_names: Vec::new(),
            ..live()
        };
        let (busy, first, second) = (lane("gpu0", true), lane("gpu1", false), lane("gpu2", false));
        let Plan::Hold { lanes, failure } =
            plan(&run, &known(&[busy, first.clone(), second.clone()]))
        else {
            panic!("held");
        };
        assert_eq!(lanes, [first.id, second.id]);
        assert_eq!(failure.resources, ["gpu1", "gpu2"]);
        assert!(failure.message.contains("every free lane is held"));
    }

    #[test]
    fn nothing_is_held_for_missing_lanes_taken_lanes_no_job_or_a_run_named_before() {
        let run = live();
        assert!(matches!(plan(&run, &known(&[])), Plan::Leave { .. }));
        let taken = known(&[lane("gpu0", true), lane("gpu1", true)]);
        assert!(matches!(plan(&run, &taken), Plan::Leave { .. }));
        let released = Known {
            named_before: true,
            ..known(&[lane("gpu0", false)])
        };
        assert!(matches!(plan(&run, &released), Plan::Leave { .. }));
        let nameless = LiveRun {
            job: None,
            ..live()
        };
        assert!(matches!(
            plan(&nameless, &known(&[lane("gpu0", false)])),
            Plan::Leave { .. }
        ));
    }

    fn run_spec(task: TaskId, job: JobId, lanes: &[&str]) -> String {
        let spec = RunSpec {
            task,
            job,
            run_number: 1,
            step_index: 0,
            resume: false,
            step: homebased_shared::spec::Step::Task {
                command: vec!["true".into()],
                env: Default::default(),
                yield_codes: Default::default(),
            },
            cwd: "/".into(),
            path: None,
            user_home: None,
            environment: None,
            lanes: lanes
                .iter()
                .map(|name| homebased_shared::rundir::RunLane {
                    name: (*name).into(),
                    device: None,
                    mig: None,
                })
                .collect(),
            home: "/h".into(),
            job_dir: "/h/jobs/j/state".into(),
            poke_socket: "/h/poke.sock".into(),
            protected_pids: vec![],
            cleanup: Default::default(),
            output_limit: homebased_shared::output_cap::DEFAULT_LIMIT,
            time_limit: None,
            stamps: None,
            stop_on_term: true,
        };
        serde_json::to_string(&spec).unwrap()
    }

    fn worker(task: TaskId, job: Option<JobId>, lanes: &[&str]) -> LiveWorker {
        LiveWorker {
            pid: 777,
            cmdline: homebased_shared::worker_cmdline::WorkerCmdline {
                run_dir: format!("/h/tasks/{task}").into(),
                task,
                job,
                lanes: lanes.iter().map(|l| l.to_string()).collect(),
            },
        }
    }

    #[test]
    fn the_command_line_is_believed_over_a_rewritten_run_json_and_both_lanes_are_held() {
        let home = tempfile::tempdir().unwrap();
        let (task, job) = (TaskId::new(), JobId::new());
        let dir = RunDir::new(home.path().join(task.to_string()));
        std::fs::create_dir_all(dir.root()).unwrap();
        std::fs::write(dir.run_json(), run_spec(task, JobId::new(), &["gpu5"])).unwrap();
        let run = live_run(&dir, task, Some(worker(task, Some(job), &["gpu1"])));
        assert_eq!(run.job, Some(job));
        assert_eq!(run.resource_names, ["gpu1", "gpu5"]);
        assert_eq!(run.pid, Some(777));
        assert!(run.doubts[0].contains("another job"), "{:?}", run.doubts);
    }

    #[test]
    fn a_worker_whose_run_json_is_gone_is_still_a_live_run_with_its_command_lines_lanes() {
        let home = tempfile::tempdir().unwrap();
        let (task, job) = (TaskId::new(), JobId::new());
        let dir = RunDir::new(home.path().join(task.to_string()));
        let run = live_run(&dir, task, Some(worker(task, Some(job), &["gpu2", "gpu3"])));
        assert_eq!(run.job, Some(job));
        assert_eq!(run.record, None);
        assert_eq!(run.resource_names, ["gpu2", "gpu3"]);
        assert!(
            run.doubts[0].contains("run.json cannot be used"),
            "{:?}",
            run.doubts
        );
    }

    #[test]
    fn the_view_of_a_hold_is_a_run_in_attention() {
        let run = live();
        let record = run.record.unwrap();
        let hold = LaneHold {
            id: AttentionId::new(),
            resources: vec![ResourceId::new()],
            task: run.task,
            job: run.job.unwrap(),
            failure: failure_record(&run, run.job.unwrap(), record, vec!["gpu0".into()], false),
        };
        let view = hold_view(&hold);
        assert_eq!(
            (view.task, Some(view.job), view.run_number, view.step),
            (run.task, run.job, 2, 1)
        );
        assert!(
            matches!(view.phase, homebased_shared::wire::PhaseView::Attention { id, .. } if id == hold.id)
        );
    }
}
