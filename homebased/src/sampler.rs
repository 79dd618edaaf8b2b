//! What is on each GPU (SPEC section 7): parse `nvidia-smi --query-compute-apps`, then
//! attribute each process to a lane by hardware UUID, and to that lane's current run (its
//! marker, lineage or process group) or to nobody (foreign). Pure: the sampling thread
//! (`daemon/sampling.rs`) runs the query and reads `/proc`; the core only keeps the result.
//! Foreign processes are shown, never scheduled on.

use homebased_shared::ids::{JobId, ResourceId, TaskId};
use homebased_shared::time::Millis;
use homebased_shared::wire::{GpuProcessView, QueueProcessOwner};
use std::collections::HashMap;

/// When resources or metrics were last read: the core marks it on each read, and the
/// sampling thread, idle a minute after the last one, sleeps on it until the next (no
/// polling: an idle daemon has nothing to wake for).
#[derive(Debug)]
pub struct Demand {
    read_at: std::sync::Mutex<Millis>,
    changed: std::sync::Condvar,
}

impl Demand {
    pub fn new(read_at: Millis) -> Demand {
        Demand {
            read_at: std::sync::Mutex::new(read_at),
            changed: std::sync::Condvar::new(),
        }
    }

    /// A read at `at`.
    pub fn mark(&self, at: Millis) {
        *self.lock() = at;
        self.changed.notify_all();
    }

    /// The last read.
    pub fn last(&self) -> Millis {
        *self.lock()
    }

    /// Blocks until a read later than `seen` is marked; returns its time.
    pub fn wait_after(&self, seen: Millis) -> Millis {
        let guard = self.lock();
        let guard = self
            .changed
            .wait_while(guard, |at| *at <= seen)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Millis> {
        // A Millis cannot be left half-written: a poisoned lock's value is still good.
        self.read_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The query the sampler runs.
pub const QUERY: [&str; 2] = [
    "--query-compute-apps=gpu_uuid,pid,used_memory",
    "--format=csv,noheader,nounits",
];

/// One line of the query: a compute process on a card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeApp {
    pub gpu_uuid: String,
    pub pid: u32,
    /// `None` where the driver says `[N/A]` (or anything not a number).
    pub used_memory_mib: Option<u64>,
}

/// Reads the query's output. A line that is not `uuid, pid, memory` fails the whole sample:
/// a partial list would read as "free" where it is not.
pub fn parse_compute_apps(stdout: &str) -> Result<Vec<ComputeApp>, String> {
    let mut apps = Vec::new();
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with("No running") {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [uuid, pid, memory] = fields.as_slice() else {
            return Err(format!("unexpected line {line:?}"));
        };
        let pid = pid
            .parse()
            .map_err(|_| format!("unexpected pid in line {line:?}"))?;
        if uuid.is_empty() {
            return Err(format!("no GPU UUID in line {line:?}"));
        }
        apps.push(ComputeApp {
            gpu_uuid: uuid.to_string(),
            pid,
            used_memory_mib: memory.parse().ok(),
        });
    }
    Ok(apps)
}

/// A lane the sampler looks at: its card and the run holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub resource: ResourceId,
    pub gpu_uuid: String,
    pub run: Option<LaneRun>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneRun {
    pub job: JobId,
    pub task: TaskId,
    /// The worker's pid (`worker.json`): the root of the run's lineage.
    pub worker_pid: Option<u32>,
    /// The workload's process group.
    pub pgid: Option<u32>,
}

/// What `/proc` says about one process (everything optional: it may be gone or unreadable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessFacts {
    pub user: Option<String>,
    pub command: Option<String>,
    /// The task of its `HOMEBASED_TASK_ID` marker, when its environment is readable.
    pub marker: Option<TaskId>,
    /// Its parent, grandparent, ... as far as readable.
    pub ancestors: Vec<u32>,
    pub pgrp: Option<u32>,
}

/// The run `facts` belong to, if it is the lane's current run.
fn owner(run: &LaneRun, pid: u32, facts: &ProcessFacts) -> bool {
    facts.marker == Some(run.task)
        || run
            .worker_pid
            .is_some_and(|w| w == pid || facts.ancestors.contains(&w))
        || run.pgid.is_some_and(|g| facts.pgrp == Some(g))
}

/// Each lane's processes, queue or foreign. Processes on cards without a lane are left out.
pub fn attribute(
    apps: &[ComputeApp],
    lanes: &[Lane],
    facts: impl Fn(u32) -> ProcessFacts,
) -> HashMap<ResourceId, Vec<GpuProcessView>> {
    let mut out: HashMap<ResourceId, Vec<GpuProcessView>> = lanes
        .iter()
        .map(|lane| (lane.resource, Vec::new()))
        .collect();
    for app in apps {
        let Some(lane) = lanes.iter().find(|l| l.gpu_uuid == app.gpu_uuid) else {
            continue;
        };
        let facts = facts(app.pid);
        let queue = lane
            .run
            .as_ref()
            .filter(|run| owner(run, app.pid, &facts))
            .map(|run| QueueProcessOwner {
                job: run.job,
                task: run.task,
            });
        out.entry(lane.resource).or_default().push(GpuProcessView {
            pid: app.pid,
            user: facts.user,
            command: facts.command,
            used_memory_mib: app.used_memory_mib,
            queue,
        });
    }
    out
}

/// The last sample, as the core keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at: Millis,
    pub processes: Result<HashMap<ResourceId, Vec<GpuProcessView>>, String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_sleeps_until_a_read_after_the_one_it_saw() {
        let demand = std::sync::Arc::new(Demand::new(1_000));
        assert_eq!(demand.last(), 1_000);
        let waiter = {
            let demand = demand.clone();
            std::thread::spawn(move || demand.wait_after(1_000))
        };
        // An equal read does not wake it for good; a later one does.
        demand.mark(1_000);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiter.is_finished());
        demand.mark(2_000);
        assert_eq!(waiter.join().unwrap(), 2_000);
        // A read already later than the one seen returns at once.
        assert_eq!(demand.wait_after(1_500), 2_000);
    }
    use proptest::prelude::*;

    #[test]
    fn parses_lines_and_unavailable_memory() {
        let apps = parse_compute_apps("GPU-a, 123, 4096\nGPU-b, 7, [N/A]\n\n").unwrap();
        assert_eq!(
            apps,
            [
                ComputeApp {
                    gpu_uuid: "GPU-a".into(),
                    pid: 123,
                    used_memory_mib: Some(4096)
                },
                ComputeApp {
                    gpu_uuid: "GPU-b".into(),
                    pid: 7,
                    used_memory_mib: None
                },
            ]
        );
        assert_eq!(parse_compute_apps("").unwrap(), []);
    }

    #[test]
    fn a_malformed_line_fails_the_sample() {
        for bad in ["GPU-a, x, 1", "GPU-a, 1", ", 1, 2", "garbage"] {
            assert!(parse_compute_apps(bad).is_err(), "{bad}");
        }
    }

    fn two_lanes() -> (Lane, Lane) {
        let run = LaneRun {
            job: JobId::new(),
            task: TaskId::new(),
            worker_pid: Some(100),
            pgid: Some(101),
        };
        let busy = Lane {
            resource: ResourceId::new(),
            gpu_uuid: "GPU-a".into(),
            run: Some(run),
        };
        let idle = Lane {
            resource: ResourceId::new(),
            gpu_uuid: "GPU-b".into(),
            run: None,
        };
        (busy, idle)
    }

    #[test]
    fn marker_lineage_or_group_make_a_process_the_runs_anything_else_is_foreign() {
        let (busy, idle) = two_lanes();
        let task = busy.run.as_ref().unwrap().task;
        let app = |gpu: &str, pid| ComputeApp {
            gpu_uuid: gpu.into(),
            pid,
            used_memory_mib: Some(1),
        };
        let apps = [
            app("GPU-a", 1),
            app("GPU-a", 2),
            app("GPU-a", 3),
            app("GPU-a", 4),
            app("GPU-b", 5),
            app("GPU-z", 6),
        ];
        let got = attribute(&apps, &[busy.clone(), idle.clone()], |pid| match pid {
            1 => ProcessFacts {
                marker: Some(task),
                ..Default::default()
            },
            2 => ProcessFacts {
                ancestors: vec![50, 100, 1],
                ..Default::default()
            },
            3 => ProcessFacts {
                pgrp: Some(101),
                ..Default::default()
            },
            _ => ProcessFacts {
                user: Some("someone".into()),
                marker: Some(TaskId::new()),
                ..Default::default()
            },
        });
        let owned: Vec<bool> = got[&busy.resource]
            .iter()
            .map(|p| p.queue.is_some())
            .collect();
        assert_eq!(owned, [true, true, true, false]);
        let on_idle = &got[&idle.resource];
        assert_eq!(on_idle.len(), 1);
        assert_eq!(on_idle[0].queue, None);
        assert_eq!(on_idle[0].user.as_deref(), Some("someone"));
        assert_eq!(got.len(), 2, "a card without a lane is left out");
    }

    proptest! {
        /// Every process on a card with a lane is listed exactly once, on that lane, and a
        /// lane without a run has only foreign processes.
        #[test]
        fn every_process_is_listed_once_on_its_card(
            cards in proptest::collection::vec(0u8..3, 0..12),
        ) {
            let (busy, idle) = two_lanes();
            let apps: Vec<ComputeApp> = cards
                .iter()
                .enumerate()
                .map(|(i, c)| ComputeApp {
                    gpu_uuid: ["GPU-a", "GPU-b", "GPU-c"][usize::from(*c)].into(),
                    pid: i as u32 + 1000,
                    used_memory_mib: None,
                })
                .collect();
            let got = attribute(&apps, &[busy.clone(), idle.clone()], |_| ProcessFacts::default());
            let count = |c: u8| cards.iter().filter(|x| **x == c).count();
            prop_assert_eq!(got[&busy.resource].len(), count(0));
            prop_assert_eq!(got[&idle.resource].len(), count(1));
            prop_assert!(got[&idle.resource].iter().all(|p| p.queue.is_none()));
        }
    }
}
