//! Live runs the store does not know (SPEC section 1): at start, a run directory whose
//! `runner.lock` a live worker holds, but whose run the store does not know, or knows as
//! ended (a store restored from an older copy, a WAL whose tail was lost), holds its lanes in
//! Attention with failure `unknown_live_run` (one Attention, every lane its `run.json` names
//! that this machine has), so that no second run starts beside it.
//!
//! - [`scan`] (I/O): the run directories with a held lock, skipping the runs the store holds
//!   lanes for (reconcile re-attaches those). `run.json` and `worker.json` are the
//!   workload's to write: read without following symlinks, strictly, bounded.
//! - [`plan`] (pure): what one such directory does given what the store knows.
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
use crate::supervisor::launcher::Launcher;
use homebased_shared::error::ApiResult;
use homebased_shared::home::Home;
use homebased_shared::ids::{AttentionId, JobId, ResourceId, TaskId};
use homebased_shared::rundir::{read_json_untrusted, RunDir, RunSpec, WorkerRecord};
use homebased_shared::wire::{AttentionFailure, UnknownLiveRun};
use std::collections::HashSet;

/// A run directory whose lock a live worker holds, with what its records say.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveRun {
    pub task: TaskId,
    pub job: JobId,
    pub run_number: u32,
    pub step: u32,
    pub resume: bool,
    /// The lanes `run.json` names, in its order (never empty).
    pub resource_names: Vec<String>,
    /// The worker's pid from `worker.json`, when it wrote one.
    pub pid: Option<u32>,
}

/// What the store knows that decides a [`LiveRun`]'s fate.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    /// An Attention (open or released) named the task before.
    pub named_before: bool,
    /// The store has a row for the run (ended: a holding run is never scanned).
    pub run_known: bool,
    /// The lanes `run.json` names that the store has, in its order, each with whether another
    /// hold (an open Attention) or a known run holds it already.
    pub lanes: Vec<(ResourceId, bool)>,
}

/// What to do with one live run directory.
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
    if known.lanes.is_empty() {
        return Plan::Leave {
            reason: "its run.json names no lane this machine has",
        };
    }
    // A lane held already keeps its holder (the store allows one hold per lane); the run's
    // other lanes are still held, so that nothing new starts beside it there.
    let lanes: Vec<ResourceId> = known
        .lanes
        .iter()
        .filter(|(_, taken)| !taken)
        .map(|(lane, _)| *lane)
        .collect();
    if lanes.is_empty() {
        return Plan::Leave {
            reason: "its lanes are held already (an Attention, or a run the store knows)",
        };
    }
    Plan::Hold {
        lanes,
        failure: failure_record(run, known.run_known),
    }
}

/// The Attention's failure record (SPEC section 6's record, result `unknown_live_run`).
pub fn failure_record(run: &LiveRun, run_known: bool) -> UnknownLiveRun {
    let pid = run
        .pid
        .map_or_else(|| "no recorded pid".to_string(), |p| format!("pid {p}"));
    let store = if run_known {
        "knows it as ended"
    } else {
        "does not know it"
    };
    UnknownLiveRun {
        task: run.task,
        job: run.job,
        run_number: run.run_number,
        step: run.step,
        resume: run.resume,
        pid: run.pid,
        resources: run.resource_names.clone(),
        message: format!(
            "run {} of job {} is alive (its worker, {pid}, holds runner.lock) but the store {store} \
             (restored from an older copy, or its last commits were lost): its lanes are held so that \
             nothing starts beside it. Check the machine, stop the run if it must not go on, then \
             release this Attention",
            run.task, run.job
        ),
    }
}

/// The run directories under `<home>/tasks/` whose lock a live worker holds (as `launcher`
/// tells), except `skip` (the runs the store holds lanes for). A directory whose records cannot be read is
/// logged and left: without its `run.json` there is no lane to hold.
pub fn scan(home: &Home, skip: &HashSet<TaskId>, launcher: &dyn Launcher) -> Vec<LiveRun> {
    let tasks = home.root().join("tasks");
    let entries = match std::fs::read_dir(&tasks) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::error!(dir = %tasks.display(), error = %e, "cannot list run directories to find live runs the store does not know");
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(task) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<TaskId>().ok())
        else {
            continue;
        };
        if skip.contains(&task) {
            continue;
        }
        let dir = RunDir::new(entry.path());
        // The same check as for a known run: the lock, or the worker's own process where
        // the workload replaced the lock.
        if !launcher.worker_alive(&dir) {
            continue;
        }
        match read_live_run(&dir, task) {
            Ok(run) => found.push(run),
            Err(e) => {
                tracing::error!(%task, error = %e, "a live worker holds this run directory's lock but its run.json cannot be used: no lane can be held for it")
            }
        }
    }
    found
}

fn read_live_run(dir: &RunDir, task: TaskId) -> Result<LiveRun, String> {
    let spec: RunSpec = read_json_untrusted(&dir.run_json())
        .map_err(|e| e.to_string())?
        .ok_or("no run.json")?;
    if spec.task != task {
        return Err(format!(
            "run.json names task {}, not its directory's",
            spec.task
        ));
    }
    // The pid is what the failure names; an unreadable worker.json leaves it out.
    let pid = read_json_untrusted::<WorkerRecord>(&dir.worker_json())
        .ok()
        .flatten()
        .map(|w| w.worker.pid);
    Ok(LiveRun {
        task,
        job: spec.job,
        run_number: spec.run_number,
        step: spec.step_index,
        resume: spec.resume,
        resource_names: match spec.lanes.as_slice() {
            [] => return Err("run.json names no lane".into()),
            lanes => lanes.iter().map(|lane| lane.name.clone()).collect(),
        },
        pid,
    })
}

/// What the store knows about `run`, read inside the commit that may hold its lane.
fn known(db: Db, run: &LiveRun) -> ApiResult<Known> {
    let holding = runs::list_holding(db)?;
    let mut lanes: Vec<(ResourceId, bool)> = Vec::new();
    for name in &run.resource_names {
        let lane = match resources::check_name(name) {
            Ok(()) => resources::find(db, name)?.map(|r| r.id),
            Err(_) => None,
        };
        // A lane it does not have is left out; one named twice is held once.
        let Some(lane) = lane.filter(|lane| lanes.iter().all(|(l, _)| l != lane)) else {
            continue;
        };
        let taken = attentions::is_held(db, lane)? || holding.iter().any(|r| r.holds(lane));
        lanes.push((lane, taken));
    }
    Ok(Known {
        named_before: attentions::ever_named(db, run.task)?,
        run_known: runs::get(db, run.task)?.is_some(),
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
                    task = %run.task, job = %run.job, pid = ?run.pid, resources = ?run.resource_names,
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
            job: JobId::new(),
            run_number: 2,
            step: 1,
            resume: false,
            resource_names: vec!["gpu0".into()],
            pid: Some(4242),
        }
    }

    fn known(lanes: &[(ResourceId, bool)]) -> Known {
        Known {
            named_before: false,
            run_known: false,
            lanes: lanes.to_vec(),
        }
    }

    #[test]
    fn an_unknown_live_run_holds_its_lane_with_a_record_naming_task_and_pid() {
        let run = live();
        let lane = ResourceId::new();
        let Plan::Hold { lanes, failure } = plan(&run, &known(&[(lane, false)])) else {
            panic!("held");
        };
        assert_eq!(lanes, [lane]);
        assert_eq!(failure.task, run.task);
        assert_eq!(failure.job, run.job);
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
        let (first, second) = (ResourceId::new(), ResourceId::new());
        let Plan::Hold { lanes, failure } = plan(&run, &known(&[(first, false), (second, false)]))
        else {
            panic!("held");
        };
        assert_eq!(lanes, [first, second]);
        assert_eq!(failure.resources, ["gpu1", "gpu2"]);
    }

    #[test]
    fn a_lane_held_already_stays_its_holders_and_the_others_are_still_held() {
        let run = live();
        let (taken, free) = (ResourceId::new(), ResourceId::new());
        let Plan::Hold { lanes, .. } = plan(&run, &known(&[(taken, true), (free, false)])) else {
            panic!("held");
        };
        assert_eq!(lanes, [free]);
    }

    #[test]
    fn a_run_known_as_ended_says_so() {
        let run = live();
        let failure = failure_record(&run, true);
        assert!(failure.message.contains("knows it as ended"));
    }

    #[test]
    fn nothing_is_held_for_missing_lanes_taken_lanes_or_a_run_named_before() {
        let run = live();
        assert!(matches!(plan(&run, &known(&[])), Plan::Leave { .. }));
        let lane = ResourceId::new();
        let taken = known(&[(lane, true), (ResourceId::new(), true)]);
        assert!(matches!(plan(&run, &taken), Plan::Leave { .. }));
        let released = Known {
            named_before: true,
            ..known(&[(lane, false)])
        };
        assert!(matches!(plan(&run, &released), Plan::Leave { .. }));
    }

    #[test]
    fn the_view_of_a_hold_is_a_run_in_attention() {
        let run = live();
        let hold = LaneHold {
            id: AttentionId::new(),
            resources: vec![ResourceId::new()],
            task: run.task,
            job: run.job,
            failure: failure_record(&run, false),
        };
        let view = hold_view(&hold);
        assert_eq!(
            (view.task, view.job, view.run_number, view.step),
            (run.task, run.job, 2, 1)
        );
        assert!(
            matches!(view.phase, homebased_shared::wire::PhaseView::Attention { id, .. } if id == hold.id)
        );
    }
}
