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

/// The card fields the state query asks for, by name. The output is read by the position
/// of each name in this list, never by a column order assumed elsewhere.
pub const GPU_FIELDS: [&str; 6] = [
    "uuid",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
];

/// The state query's arguments, built from [`GPU_FIELDS`].
pub fn gpu_query() -> [String; 2] {
    [
        format!("--query-gpu={}", GPU_FIELDS.join(",")),
        "--format=csv,noheader,nounits".to_string(),
    ]
}

/// One card's state as the driver reported it; each value `None` where it said `[N/A]`,
/// `[Not Supported]` or the like (MIG slices, some boards' power).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuState {
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
    pub utilization_percent: Option<u32>,
    pub temperature_c: Option<i32>,
    pub power_w: Option<f64>,
}

/// The state query read: each card's state by hardware UUID, and the lines refused.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuStates {
    pub cards: HashMap<String, GpuState>,
    /// Lines that were not one card's fields, with why: kept out, never guessed at. A
    /// refused line costs that card its state for this sample, no other card's.
    pub refused: Vec<String>,
}

/// One value: a number, or `None` for the driver's bracketed "no value" words. Anything else
/// is garbage and refuses the line.
fn value<T: std::str::FromStr>(text: &str) -> Result<Option<T>, ()> {
    if text.starts_with('[') && text.ends_with(']') {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| ())
}

/// Reads the state query's output, line by line: a line with more or fewer fields than asked,
/// without a UUID, or with a value that is neither a number nor a bracketed `[N/A]`-like word
/// is refused on its own (the other cards keep theirs). A UUID seen twice keeps its first line.
pub fn parse_gpu_states(stdout: &str) -> GpuStates {
    let at = |name: &str| GPU_FIELDS.iter().position(|f| *f == name).unwrap_or(0);
    let (uuid_at, used_at, total_at, util_at, temp_at, power_at) = (
        at("uuid"),
        at("memory.used"),
        at("memory.total"),
        at("utilization.gpu"),
        at("temperature.gpu"),
        at("power.draw"),
    );
    let mut states = GpuStates::default();
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let shown: String = line.chars().take(120).collect();
        if fields.len() != GPU_FIELDS.len() {
            states.refused.push(format!(
                "{} fields where {} were asked: {shown:?}",
                fields.len(),
                GPU_FIELDS.len()
            ));
            continue;
        }
        let uuid = fields[uuid_at];
        if uuid.is_empty() || uuid.starts_with('[') || uuid.contains(char::is_whitespace) {
            states.refused.push(format!("no card UUID: {shown:?}"));
            continue;
        }
        let parsed = (|| {
            let power: Option<f64> = value(fields[power_at])?;
            Ok::<_, ()>(GpuState {
                memory_used_mib: value(fields[used_at])?,
                memory_total_mib: value(fields[total_at])?,
                utilization_percent: value(fields[util_at])?,
                temperature_c: value(fields[temp_at])?,
                power_w: match power {
                    Some(w) if !w.is_finite() || w < 0.0 => return Err(()),
                    other => other,
                },
            })
        })();
        match parsed {
            Ok(state) => {
                states.cards.entry(uuid.to_string()).or_insert(state);
            }
            Err(()) => states
                .refused
                .push(format!("a value is not a number: {shown:?}")),
        }
    }
    states
}

/// A lane the sampler looks at: its card and the run holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub resource: ResourceId,
    pub gpu_uuid: String,
    /// For a MIG slice, the UUID of the card it is cut from: a driver that reports a
    /// process by its card's UUID rather than the slice's is attributed through it.
    pub card_uuid: Option<String>,
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
///
/// A process reported by the UUID of a split card (not of one of its MIG slices) is the
/// slice's whose run it belongs to; when it belongs to none, which slice it uses is not
/// known, so it is listed as foreign on every slice of that card: unknown is never shown
/// as free.
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
        let exact: Vec<&Lane> = lanes
            .iter()
            .filter(|l| l.gpu_uuid == app.gpu_uuid)
            .take(1)
            .collect();
        let candidates = if exact.is_empty() {
            lanes
                .iter()
                .filter(|l| l.card_uuid.as_deref() == Some(app.gpu_uuid.as_str()))
                .collect()
        } else {
            exact
        };
        if candidates.is_empty() {
            continue;
        }
        let facts = facts(app.pid);
        let owned = candidates.iter().find_map(|lane| {
            let run = lane
                .run
                .as_ref()
                .filter(|run| owner(run, app.pid, &facts))?;
            Some((lane.resource, run))
        });
        let view = |queue| GpuProcessView {
            pid: app.pid,
            user: facts.user.clone(),
            command: facts.command.clone(),
            used_memory_mib: app.used_memory_mib,
            queue,
        };
        match owned {
            Some((resource, run)) => {
                out.entry(resource)
                    .or_default()
                    .push(view(Some(QueueProcessOwner {
                        job: run.job,
                        task: run.task,
                    })))
            }
            None => {
                for lane in candidates {
                    out.entry(lane.resource).or_default().push(view(None));
                }
            }
        }
    }
    out
}

/// What each lane's run used at this sample: the memory of its own processes, summed over
/// its lanes (a process whose driver gave no number adds nothing). A run on a sampled lane
/// with no process is there with 0: it was seen using none, which is not "never sampled".
pub fn run_memory(
    lanes: &[Lane],
    by_lane: &HashMap<ResourceId, Vec<GpuProcessView>>,
) -> HashMap<TaskId, u64> {
    let mut used: HashMap<TaskId, u64> = HashMap::new();
    for lane in lanes {
        let Some(run) = &lane.run else { continue };
        let mine: u64 = by_lane
            .get(&lane.resource)
            .into_iter()
            .flatten()
            .filter(|p| p.queue.is_some_and(|q| q.task == run.task))
            .filter_map(|p| p.used_memory_mib)
            .fold(0, u64::saturating_add);
        let total = used.entry(run.task).or_default();
        *total = total.saturating_add(mine);
    }
    used
}

/// The last sample, as the core keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at: Millis,
    pub processes: Result<HashMap<ResourceId, Vec<GpuProcessView>>, String>,
    /// Each card's state by hardware UUID; an error when the state query failed (it is
    /// run beside the process query, with the same bound, and fails on its own).
    pub states: Result<HashMap<String, GpuState>, String>,
    /// Each lane's run and the memory its processes used ([`run_memory`]); empty when the
    /// process query failed (nothing is known then, which is not 0).
    pub run_memory: HashMap<TaskId, u64>,
}

impl Sample {
    /// A lane's card state in this sample: the state query's line for its UUID, and for a MIG
    /// slice (which the state query does not report) the memory its processes use. `None`
    /// when nothing is known.
    pub fn lane_state(&self, resource: ResourceId, uuid: &str, slice: bool) -> Option<GpuState> {
        let listed = self.states.as_ref().ok().and_then(|cards| cards.get(uuid));
        let mut state = listed.cloned().unwrap_or_default();
        if slice && state.memory_used_mib.is_none() {
            if let Ok(by_lane) = &self.processes {
                let processes = by_lane.get(&resource).map(Vec::as_slice).unwrap_or(&[]);
                state.memory_used_mib = Some(
                    processes
                        .iter()
                        .filter_map(|p| p.used_memory_mib)
                        .fold(0, u64::saturating_add),
                );
            }
        }
        (listed.is_some() || state != GpuState::default()).then_some(state)
    }
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
            card_uuid: None,
            run: Some(run),
        };
        let idle = Lane {
            resource: ResourceId::new(),
            gpu_uuid: "GPU-b".into(),
            card_uuid: None,
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

    #[test]
    fn the_state_query_asks_for_its_fields_by_name() {
        assert_eq!(
            gpu_query(),
            [
                "--query-gpu=uuid,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw",
                "--format=csv,noheader,nounits"
            ]
        );
    }

    #[test]
    fn card_states_parse_with_unavailable_fields_as_none() {
        let got = parse_gpu_states(
            "GPU-a, 1024, 81559, 37, 45, 118.52\n\
             GPU-b, [N/A], [N/A], [Not Supported], 30, [N/A]\n\n",
        );
        assert!(got.refused.is_empty(), "{:?}", got.refused);
        assert_eq!(
            got.cards["GPU-a"],
            GpuState {
                memory_used_mib: Some(1024),
                memory_total_mib: Some(81559),
                utilization_percent: Some(37),
                temperature_c: Some(45),
                power_w: Some(118.52),
            }
        );
        assert_eq!(
            got.cards["GPU-b"],
            GpuState {
                temperature_c: Some(30),
                ..GpuState::default()
            }
        );
    }

    #[test]
    fn a_bad_state_line_is_refused_alone() {
        let got = parse_gpu_states(
            "GPU-a, 1, 2, 3, 4, 5\n\
             GPU-b, 1, 2, 3, 4\n\
             GPU-c, 1, 2, 3, 4, 5, 6\n\
             GPU-d, lots, 2, 3, 4, 5\n\
             , 1, 2, 3, 4, 5\n\
             GPU-e, 1, 2, 3, 4, -5\n\
             GPU-f, 1, 2, 3, 4, NaN\n\
             garbage\n\
             GPU-a, 9, 9, 9, 9, 9\n",
        );
        assert_eq!(got.cards.len(), 1, "{:?}", got.cards);
        assert_eq!(
            got.cards["GPU-a"].memory_used_mib,
            Some(1),
            "the first line wins"
        );
        assert_eq!(got.refused.len(), 7, "{:?}", got.refused);
        assert!(got.refused[0].contains("5 fields where 6 were asked"));
    }

    #[test]
    fn a_runs_memory_is_the_sum_of_its_own_processes_and_zero_when_none() {
        let (busy, idle) = two_lanes();
        let run = busy.run.clone().unwrap();
        let mut other = idle.clone();
        other.run = Some(LaneRun {
            task: TaskId::new(),
            ..run.clone()
        });
        let mine = |mib| GpuProcessView {
            pid: 1,
            user: None,
            command: None,
            used_memory_mib: mib,
            queue: Some(QueueProcessOwner {
                job: run.job,
                task: run.task,
            }),
        };
        let foreign = GpuProcessView {
            queue: None,
            used_memory_mib: Some(5000),
            ..mine(None)
        };
        let by_lane = HashMap::from([
            (
                busy.resource,
                vec![mine(Some(100)), mine(None), mine(Some(23)), foreign],
            ),
            (other.resource, Vec::new()),
        ]);
        let got = run_memory(&[busy, other.clone(), idle], &by_lane);
        assert_eq!(got.len(), 2);
        assert_eq!(got[&run.task], 123);
        assert_eq!(got[&other.run.unwrap().task], 0);
    }

    #[test]
    fn a_process_reported_by_a_split_cards_uuid_goes_to_its_runs_slice_or_to_every_slice() {
        let (mut busy, mut idle) = two_lanes();
        busy.gpu_uuid = "MIG-1".into();
        busy.card_uuid = Some("GPU-card".into());
        idle.gpu_uuid = "MIG-2".into();
        idle.card_uuid = Some("GPU-card".into());
        let task = busy.run.as_ref().unwrap().task;
        let app = |gpu: &str, pid| ComputeApp {
            gpu_uuid: gpu.into(),
            pid,
            used_memory_mib: Some(1),
        };
        let apps = [app("GPU-card", 1), app("GPU-card", 2), app("MIG-2", 3)];
        let got = attribute(&apps, &[busy.clone(), idle.clone()], |pid| ProcessFacts {
            marker: (pid == 1).then_some(task),
            ..Default::default()
        });
        let pids = |lane: &Lane| -> Vec<(u32, bool)> {
            got[&lane.resource]
                .iter()
                .map(|p| (p.pid, p.queue.is_some()))
                .collect()
        };
        assert_eq!(pids(&busy), [(1, true), (2, false)]);
        assert_eq!(pids(&idle), [(2, false), (3, false)]);
    }

    #[test]
    fn a_slices_memory_is_its_processes_and_a_cards_is_the_state_querys() {
        let (busy, idle) = two_lanes();
        let process = |mib| GpuProcessView {
            pid: 1,
            user: None,
            command: None,
            used_memory_mib: mib,
            queue: None,
        };
        let sample = Sample {
            at: 0,
            processes: Ok(HashMap::from([(
                busy.resource,
                vec![process(Some(100)), process(None), process(Some(28))],
            )])),
            states: Ok(HashMap::from([(
                "GPU-b".to_string(),
                GpuState {
                    temperature_c: Some(40),
                    ..GpuState::default()
                },
            )])),
            run_memory: HashMap::new(),
        };
        let slice = sample.lane_state(busy.resource, "MIG-a", true).unwrap();
        assert_eq!(slice.memory_used_mib, Some(128));
        assert_eq!(slice.utilization_percent, None);
        assert_eq!(sample.lane_state(busy.resource, "GPU-a", false), None);
        let card = sample.lane_state(idle.resource, "GPU-b", false).unwrap();
        assert_eq!(card.temperature_c, Some(40));
        assert_eq!(card.memory_used_mib, None);
        let failed = Sample {
            processes: Err("x".into()),
            ..sample
        };
        assert_eq!(failed.lane_state(busy.resource, "MIG-a", true), None);
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

        /// Whatever the state query printed, parsing never panics, and every non-blank line
        /// is either one card's state or one refusal.
        #[test]
        fn every_state_line_is_parsed_or_refused(text in "[ -~\n]{0,300}") {
            let got = parse_gpu_states(&text);
            let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
            prop_assert!(got.cards.len() + got.refused.len() <= lines);
            prop_assert!(got.refused.len() <= lines);
        }

        /// A well-formed line reads back its values, each `[N/A]` as `None`, wherever the
        /// unavailable fields fall.
        #[test]
        fn well_formed_state_lines_read_back(
            used in proptest::option::of(0u64..1 << 40),
            total in proptest::option::of(0u64..1 << 40),
            util in proptest::option::of(0u32..=100),
            temp in proptest::option::of(-40i32..120),
            power in proptest::option::of(0u32..100_000),
            spaces in "[ ]{0,3}",
        ) {
            let show = |v: Option<String>| v.unwrap_or_else(|| "[N/A]".into());
            let power_w = power.map(|p| f64::from(p) / 100.0);
            let line = [
                "GPU-x".to_string(),
                show(used.map(|v| v.to_string())),
                show(total.map(|v| v.to_string())),
                show(util.map(|v| v.to_string())),
                show(temp.map(|v| v.to_string())),
                show(power_w.map(|v| v.to_string())),
            ]
            .join(&format!(",{spaces}"));
            let got = parse_gpu_states(&line);
            prop_assert!(got.refused.is_empty(), "{:?}", got.refused);
            prop_assert_eq!(
                &got.cards["GPU-x"],
                &GpuState {
                    memory_used_mib: used,
                    memory_total_mib: total,
                    utilization_percent: util,
                    temperature_c: temp,
                    power_w,
                }
            );
        }
    }
}
