//! The scheduling simulator (issue 27): drives the real [`decide`] on a virtual clock, with
//! no processes and no store, to show what reservations and backfill do for jobs that hold
//! several lanes.
//!
//! Each pass applies the launches (their runs execute at once) and the stops (a stopped run
//! holds its lanes for a grace, then its cleanup, and its job is queued again with the work
//! it has left: runs yield, keeping their progress). A run ends at its duration, or at its
//! time limit if that comes first (the job fails), and its lanes free after the cleanup
//! bound. Three policies:
//! - `ours`: `decide` with reservations;
//! - `greedy`: `decide` with `reservations = false`, which is exactly gflow's and
//!   task-spooler's policy: a job that does not fit is skipped;
//! - `fifo`: strict serving order, the head blocks everyone (no preemption).
//!
//! Two traces, seeded and deterministic: a week on an 8-GPU machine kept busy by 1-GPU
//! jobs with one 8-GPU job an hour, and a week of mixed 1/2/4-GPU research jobs.
//!
//! `cargo run --release --example schedule_sim --locked [-- --json]`

use homebased::scheduler::{
    decide, ResourceSlot, RunSlot, SlotPhase, Snapshot, Target, WaitingJob,
};
use homebased_shared::ids::{JobId, ResourceId, TaskId};
use homebased_shared::queue::{PreemptMode, Priority, StopCause};
use homebased_shared::time::Millis;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

const SECOND: Millis = 1_000;
const MINUTE: Millis = 60 * SECOND;
const HOUR: Millis = 60 * MINUTE;
const WEEK: Millis = 7 * 24 * HOUR;
/// The cleanup bound, as in the default config: lanes free this long after a run ends.
const CLEANUP: Millis = 60 * SECOND;
/// How long a stopped run keeps its lanes before its cleanup (a checkpoint being saved).
const GRACE: Millis = 30 * SECOND;
const LANES: u32 = 8;

/// A small deterministic RNG (SplitMix64): the traces must be the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn between(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.unit()
    }

    /// Log-uniform in [low, high]: many short jobs, a few long ones.
    fn log_between(&mut self, low: f64, high: f64) -> f64 {
        (low.ln() + (high.ln() - low.ln()) * self.unit()).exp()
    }

    /// Exponential with the given mean: Poisson arrivals.
    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// One job of a trace.
#[derive(Debug, Clone)]
struct Arrival {
    at: Millis,
    gpus: u32,
    level: Priority,
    mode: PreemptMode,
    /// The work it does, in ms of run time.
    work: Millis,
    time_limit: Millis,
}

struct Trace {
    name: &'static str,
    what: &'static str,
    arrivals: Vec<Arrival>,
}

fn level_of(rng: &mut Rng) -> Priority {
    match rng.unit() {
        x if x < 0.5 => Priority::Low,
        x if x < 0.9 => Priority::Medium,
        _ => Priority::High,
    }
}

fn mode_of(rng: &mut Rng) -> PreemptMode {
    if rng.unit() < 0.7 {
        PreemptMode::Yield
    } else {
        PreemptMode::Wait
    }
}

/// A time limit a person would give: 1.2 to 2 times the run, rounded up to 10 minutes.
fn limit_for(rng: &mut Rng, work: Millis) -> Millis {
    let raw = (work as f64 * rng.between(1.2, 2.0)) as Millis;
    raw.div_euclid(10 * MINUTE) * 10 * MINUTE + 10 * MINUTE
}

/// An 8-GPU machine kept busy by 1-GPU jobs (5 minutes to 2 hours, about 78 % of the
/// machine) and one 8-GPU job an hour (5 to 15 minutes, about 17 %): some 95 % offered, all
/// at level medium.
fn steady_week(seed: u64) -> Trace {
    let mut rng = Rng(seed);
    let mut arrivals = Vec::new();
    // Mean of log-uniform [5, 120] minutes: 115 / ln 24 = 36.2 minutes.
    let mean_work = 115.0 / 24f64.ln() * MINUTE as f64;
    let mean_gap = mean_work / (0.78 * f64::from(LANES));
    let mut at = 0.0;
    loop {
        at += rng.exponential(mean_gap);
        if at >= WEEK as f64 {
            break;
        }
        let work = (rng.log_between(5.0, 120.0) * MINUTE as f64) as Millis;
        arrivals.push(Arrival {
            at: at as Millis,
            gpus: 1,
            // One level: nobody preempts, so what the 8-GPU jobs wait is the reservation's
            // doing alone (the research trace mixes levels).
            level: Priority::Medium,
            mode: mode_of(&mut rng),
            work,
            time_limit: limit_for(&mut rng, work),
        });
    }
    for hour in 0..WEEK / HOUR {
        let work = (rng.between(5.0, 15.0) * MINUTE as f64) as Millis;
        arrivals.push(Arrival {
            at: hour * HOUR + (rng.between(0.0, 10.0) * MINUTE as f64) as Millis,
            gpus: 8,
            level: Priority::Medium,
            mode: PreemptMode::Wait,
            work,
            time_limit: limit_for(&mut rng, work),
        });
    }
    arrivals.sort_by_key(|a| a.at);
    Trace {
        name: "steady",
        what: "8 GPUs, 1-GPU stream + one 8-GPU job an hour, a week",
        arrivals,
    }
}

/// A research week on 8 GPUs: 60 % 1-GPU, 25 % 2-GPU, 15 % 4-GPU jobs of 15 minutes to 8
/// hours, about 90 % of the machine offered.
fn research_week(seed: u64) -> Trace {
    let mut rng = Rng(seed);
    let mut arrivals = Vec::new();
    let mean_work = 465.0 / 32f64.ln() * MINUTE as f64;
    let mean_gpus = 0.6 + 0.25 * 2.0 + 0.15 * 4.0;
    let mean_gap = mean_work * mean_gpus / (0.9 * f64::from(LANES));
    let mut at = 0.0;
    loop {
        at += rng.exponential(mean_gap);
        if at >= WEEK as f64 {
            break;
        }
        let gpus = match rng.unit() {
            x if x < 0.6 => 1,
            x if x < 0.85 => 2,
            _ => 4,
        };
        let work = (rng.log_between(15.0, 480.0) * MINUTE as f64) as Millis;
        arrivals.push(Arrival {
            at: at as Millis,
            gpus,
            level: level_of(&mut rng),
            mode: mode_of(&mut rng),
            work,
            time_limit: limit_for(&mut rng, work),
        });
    }
    Trace {
        name: "research",
        what: "8 GPUs, mixed 1/2/4-GPU jobs, a week",
        arrivals,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Ours,
    Greedy,
    Fifo,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::Ours => "ours",
            Policy::Greedy => "greedy",
            Policy::Fifo => "fifo",
        }
    }
}

/// The state of a lane in the simulation.
#[derive(Debug, Clone)]
enum Lane {
    Free,
    Executing {
        job: usize,
        task: TaskId,
    },
    Stopping {
        job: usize,
        task: TaskId,
        requested_at: Millis,
        for_job: JobId,
    },
    Cleaning {
        job: usize,
        task: TaskId,
    },
}

#[derive(Debug, Clone)]
struct Job {
    id: JobId,
    arrival: Arrival,
    /// Its slot in its level: a preempted job keeps it.
    position: u32,
    left: Millis,
    first_start: Option<Millis>,
    run: Option<Run>,
    queued: bool,
    /// Its run reached its time limit: the job failed.
    failed: bool,
    /// When it first held the reservation (`ours` only).
    reserved_since: Option<Millis>,
}

#[derive(Debug, Clone)]
struct Run {
    task: TaskId,
    started: Millis,
    lanes: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive(usize),
    /// The workload of this run ends (its work done, or its time limit).
    End(usize, u64),
    /// The grace of a stopped run is over: its cleanup starts.
    Stopped(usize, u64),
    /// The cleanup is over: the lanes are free.
    Clean(usize, u64),
}

struct Sim {
    policy: Policy,
    now: Millis,
    ids: Vec<ResourceId>,
    lanes: Vec<Lane>,
    jobs: Vec<Job>,
    by_id: HashMap<JobId, usize>,
    tasks: HashMap<TaskId, u64>,
    next_task: u64,
    events: BinaryHeap<Reverse<(Millis, u64, Event)>>,
    seq: u64,
    busy_ms: i128,
    last: Millis,
    passes: u64,
    stops: u64,
}

impl Sim {
    fn new(policy: Policy, trace: &Trace) -> Self {
        let mut sim = Sim {
            policy,
            now: 0,
            ids: (0..LANES).map(|_| ResourceId::new()).collect(),
            lanes: vec![Lane::Free; LANES as usize],
            jobs: Vec::new(),
            by_id: HashMap::new(),
            tasks: HashMap::new(),
            next_task: 0,
            events: BinaryHeap::new(),
            seq: 0,
            busy_ms: 0,
            last: 0,
            passes: 0,
            stops: 0,
        };
        for (i, arrival) in trace.arrivals.iter().enumerate() {
            let id = JobId::new();
            sim.by_id.insert(id, i);
            sim.jobs.push(Job {
                id,
                arrival: arrival.clone(),
                position: u32::try_from(i + 1).unwrap_or(u32::MAX),
                left: arrival.work,
                first_start: None,
                run: None,
                queued: false,
                failed: false,
                reserved_since: None,
            });
            sim.at(arrival.at, Event::Arrive(i));
        }
        sim
    }

    fn at(&mut self, when: Millis, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((when, self.seq, event)));
    }

    /// Lane time spent executing work, up to `to`.
    fn account(&mut self, to: Millis) {
        let executing = self
            .lanes
            .iter()
            .filter(|l| matches!(l, Lane::Executing { .. }))
            .count();
        self.busy_ms += i128::from(to - self.last) * executing as i128;
        self.last = to;
    }

    fn run(mut self) -> Outcome {
        while let Some(Reverse((when, _, _))) = self.events.peek().copied() {
            if when > WEEK {
                break;
            }
            self.account(when);
            self.now = when;
            while let Some(Reverse((t, _, event))) = self.events.peek().copied() {
                if t != when {
                    break;
                }
                self.events.pop();
                self.apply(event);
            }
            self.pass();
        }
        self.account(WEEK);
        self.outcome()
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Arrive(job) => self.jobs[job].queued = true,
            Event::End(job, task) => {
                let Some(run) = self.current(job, task) else {
                    return;
                };
                let ran = self.now - run.started;
                let j = &mut self.jobs[job];
                j.failed = ran < j.left;
                j.left -= ran;
                for &lane in &run.lanes {
                    self.lanes[lane] = Lane::Cleaning {
                        job,
                        task: run.task,
                    };
                }
                self.at(self.now + CLEANUP, Event::Clean(job, task));
            }
            Event::Stopped(job, task) => {
                let Some(run) = self.current(job, task) else {
                    return;
                };
                for &lane in &run.lanes {
                    self.lanes[lane] = Lane::Cleaning {
                        job,
                        task: run.task,
                    };
                }
                self.at(self.now + CLEANUP, Event::Clean(job, task));
            }
            Event::Clean(job, task) => {
                let Some(run) = self.current(job, task) else {
                    return;
                };
                for &lane in &run.lanes {
                    self.lanes[lane] = Lane::Free;
                }
                // Work left after a yield (progress kept) is queued again in its slot; a
                // run cut by its time limit failed the job.
                let j = &mut self.jobs[job];
                j.run = None;
                j.queued = j.left > 0 && !j.failed;
            }
        }
    }

    fn current(&self, job: usize, task: u64) -> Option<Run> {
        let run = self.jobs[job].run.clone()?;
        (self.tasks.get(&run.task) == Some(&task)).then_some(run)
    }

    fn snapshot(&self) -> Snapshot {
        let resources = self
            .lanes
            .iter()
            .enumerate()
            .map(|(i, lane)| {
                let slot = |job: usize, task: TaskId, phase: SlotPhase| {
                    let j = &self.jobs[job];
                    let started = j.run.as_ref().map_or(self.now, |r| r.started);
                    RunSlot {
                        job: j.id,
                        task,
                        priority: j.arrival.level,
                        mode: j.arrival.mode,
                        restart_within: None,
                        deadline: match phase {
                            SlotPhase::Executing { .. } | SlotPhase::Stopping { .. } => {
                                Some(started + j.arrival.time_limit)
                            }
                            _ => None,
                        },
                        phase,
                    }
                };
                let run = match *lane {
                    Lane::Free => None,
                    Lane::Executing { job, task } => {
                        let started = self.jobs[job].run.as_ref().map_or(self.now, |r| r.started);
                        Some(slot(
                            job,
                            task,
                            SlotPhase::Executing {
                                started_at: started,
                            },
                        ))
                    }
                    Lane::Stopping {
                        job,
                        task,
                        requested_at,
                        for_job,
                    } => Some(slot(
                        job,
                        task,
                        SlotPhase::Stopping {
                            cause: StopCause::Yield,
                            requested_at,
                            for_job: Some(for_job),
                        },
                    )),
                    Lane::Cleaning { job, task } => Some(slot(job, task, SlotPhase::Cleaning)),
                };
                ResourceSlot {
                    id: self.ids[i],
                    name: format!("gpu{i}"),
                    device: u32::try_from(i).ok(),
                    mig: false,
                    run,
                }
            })
            .collect();
        let jobs = self
            .jobs
            .iter()
            .filter(|j| j.queued)
            .map(|j| WaitingJob {
                id: j.id,
                priority: j.arrival.level,
                position: j.position,
                target: Target::Any,
                gpus: j.arrival.gpus,
                time_limit: Some(Duration::from_millis(
                    u64::try_from(j.arrival.time_limit).unwrap_or(0),
                )),
                blocked_by_own_run: false,
                dependency: None,
            })
            .collect();
        Snapshot {
            now: self.now,
            resources,
            jobs,
            storage_unavailable_since: None,
            reservations: self.policy == Policy::Ours,
            cleanup_bound: Duration::from_millis(CLEANUP as u64),
        }
    }

    fn pass(&mut self) {
        self.passes += 1;
        match self.policy {
            Policy::Ours | Policy::Greedy => {
                let decisions = decide(&self.snapshot());
                if let Some(reservation) = &decisions.reservation {
                    let holder = self.by_id[&reservation.job];
                    self.jobs[holder].reserved_since.get_or_insert(self.now);
                }
                for launch in decisions.launches {
                    let lanes = launch
                        .resources
                        .iter()
                        .map(|id| self.ids.iter().position(|x| x == id).unwrap_or(0))
                        .collect();
                    self.start(self.by_id[&launch.job], lanes);
                }
                for stop in decisions.stops {
                    self.stop(stop.task, stop.for_job);
                }
            }
            Policy::Fifo => self.fifo(),
        }
    }

    /// Strict serving order: the first job that does not fit stops the walk.
    fn fifo(&mut self) {
        let mut queued: Vec<usize> = (0..self.jobs.len())
            .filter(|&j| self.jobs[j].queued)
            .collect();
        queued.sort_by_key(|&j| (Reverse(self.jobs[j].arrival.level), self.jobs[j].position));
        for job in queued {
            let free: Vec<usize> = (0..self.lanes.len())
                .filter(|&l| matches!(self.lanes[l], Lane::Free))
                .collect();
            let need = self.jobs[job].arrival.gpus as usize;
            if free.len() < need {
                return;
            }
            self.start(job, free[..need].to_vec());
        }
    }

    fn start(&mut self, job: usize, lanes: Vec<usize>) {
        let task = TaskId::new();
        self.next_task += 1;
        self.tasks.insert(task, self.next_task);
        for &lane in &lanes {
            self.lanes[lane] = Lane::Executing { job, task };
        }
        let j = &mut self.jobs[job];
        j.queued = false;
        j.first_start.get_or_insert(self.now);
        j.run = Some(Run {
            task,
            started: self.now,
            lanes,
        });
        let ends = self.now + j.left.min(j.arrival.time_limit);
        self.at(ends, Event::End(job, self.next_task));
    }

    fn stop(&mut self, task: TaskId, for_job: JobId) {
        let Some(job) = self
            .jobs
            .iter()
            .position(|j| j.run.as_ref().is_some_and(|r| r.task == task))
        else {
            return;
        };
        let Some(run) = self.jobs[job].run.clone() else {
            return;
        };
        // The work done so far is kept (a checkpoint); the rest runs when it is queued again.
        self.jobs[job].left -= self.now - run.started;
        for &lane in &run.lanes {
            self.lanes[lane] = Lane::Stopping {
                job,
                task,
                requested_at: self.now,
                for_job,
            };
        }
        self.stops += 1;
        // A new sequence number: the run's pending `End` no longer applies.
        self.next_task += 1;
        self.tasks.insert(task, self.next_task);
        self.at(self.now + GRACE, Event::Stopped(job, self.next_task));
    }

    fn outcome(&self) -> Outcome {
        let mut outcome = Outcome {
            utilization: self.busy_ms as f64 / (f64::from(LANES) * WEEK as f64),
            passes: self.passes,
            stops: self.stops,
            jobs: self.jobs.len(),
            ..Outcome::default()
        };
        let mut multi = Vec::new();
        let mut widest = Vec::new();
        let mut by_level: [Vec<f64>; 3] = Default::default();
        for job in &self.jobs {
            let level = match job.arrival.level {
                Priority::Low => 0,
                Priority::Medium => 1,
                Priority::High => 2,
            };
            let wait = job
                .first_start
                .map(|s| (s - job.arrival.at) as f64 / 1000.0);
            outcome.limit_max_s = outcome
                .limit_max_s
                .max(job.arrival.time_limit as f64 / 1000.0);
            match wait {
                Some(w) => by_level[level].push(w),
                None => outcome.never_by_level[level] += 1,
            }
            if job.arrival.gpus > 1 {
                outcome.multi_jobs += 1;
                match wait {
                    Some(w) => multi.push(w),
                    None => outcome.multi_never += 1,
                }
            }
            if let (Some(since), Some(start)) = (job.reserved_since, job.first_start) {
                let held = (start - since) as f64 / 1000.0;
                outcome.held_max_s = Some(outcome.held_max_s.map_or(held, |m: f64| m.max(held)));
            }
            if job.arrival.gpus == LANES {
                outcome.full_jobs += 1;
                match wait {
                    Some(w) => widest.push(w),
                    None => outcome.full_never += 1,
                }
            }
        }
        outcome.multi_wait_max_s = max(&multi);
        outcome.multi_wait_p95_s = p95(&mut multi);
        outcome.full_wait_max_s = max(&widest);
        for (i, waits) in by_level.iter().enumerate() {
            outcome.wait_mean_s[i] = if waits.is_empty() {
                None
            } else {
                Some(waits.iter().sum::<f64>() / waits.len() as f64)
            };
        }
        outcome
    }
}

fn max(values: &[f64]) -> Option<f64> {
    values.iter().copied().reduce(f64::max)
}

fn p95(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64) * 0.95).ceil() as usize;
    Some(values[rank.clamp(1, values.len()) - 1])
}

#[derive(Debug, Default)]
struct Outcome {
    utilization: f64,
    jobs: usize,
    passes: u64,
    stops: u64,
    multi_jobs: usize,
    multi_never: usize,
    multi_wait_max_s: Option<f64>,
    multi_wait_p95_s: Option<f64>,
    /// Jobs taking the whole machine (the 8-GPU jobs of the steady trace).
    full_jobs: usize,
    full_never: usize,
    full_wait_max_s: Option<f64>,
    /// The longest time limit in the trace: what bounds a reservation's wait.
    limit_max_s: f64,
    /// The longest time from first holding the reservation to starting.
    held_max_s: Option<f64>,
    wait_mean_s: [Option<f64>; 3],
    never_by_level: [usize; 3],
}

fn hours(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "-".into(), |s| format!("{:.1} h", s / 3600.0))
}

fn json_number(value: Option<f64>) -> String {
    value.map_or_else(|| "null".into(), |v| format!("{v:.1}"))
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let began = Instant::now();
    let traces = [steady_week(27), research_week(2027)];
    let policies = [Policy::Ours, Policy::Greedy, Policy::Fifo];
    let mut results = Vec::new();
    for trace in &traces {
        for policy in policies {
            let t0 = Instant::now();
            let outcome = Sim::new(policy, trace).run();
            results.push((trace, policy, outcome, t0.elapsed().as_secs_f64()));
        }
    }
    let elapsed = began.elapsed().as_secs_f64();
    if json {
        let rows: Vec<String> = results
            .iter()
            .map(|(trace, policy, o, took)| {
                format!(
                    concat!(
                        "{{\"trace\":\"{}\",\"policy\":\"{}\",\"jobs\":{},\"passes\":{},",
                        "\"stops\":{},\"utilization\":{:.4},\"multi_jobs\":{},",
                        "\"multi_never\":{},\"multi_wait_max_s\":{},\"multi_wait_p95_s\":{},",
                        "\"full_jobs\":{},\"full_never\":{},\"full_wait_max_s\":{},",
                        "\"held_max_s\":{},",
                        "\"limit_max_s\":{:.1},\"cleanup_bound_s\":{},",
                        "\"wait_mean_s\":{{\"low\":{},\"medium\":{},\"high\":{}}},",
                        "\"never\":{{\"low\":{},\"medium\":{},\"high\":{}}},\"took_s\":{:.3}}}"
                    ),
                    trace.name,
                    policy.name(),
                    o.jobs,
                    o.passes,
                    o.stops,
                    o.utilization,
                    o.multi_jobs,
                    o.multi_never,
                    json_number(o.multi_wait_max_s),
                    json_number(o.multi_wait_p95_s),
                    o.full_jobs,
                    o.full_never,
                    json_number(o.full_wait_max_s),
                    json_number(o.held_max_s),
                    o.limit_max_s,
                    CLEANUP / SECOND,
                    json_number(o.wait_mean_s[0]),
                    json_number(o.wait_mean_s[1]),
                    json_number(o.wait_mean_s[2]),
                    o.never_by_level[0],
                    o.never_by_level[1],
                    o.never_by_level[2],
                    took
                )
            })
            .collect();
        println!(
            "{{\"elapsed_s\":{elapsed:.3},\"results\":[{}]}}",
            rows.join(",")
        );
        return;
    }
    for trace in &traces {
        println!(
            "{}: {} ({} jobs)",
            trace.name,
            trace.what,
            trace.arrivals.len()
        );
    }
    println!();
    println!(
        "{:<9} {:<7} {:>6} {:>11} {:>11} {:>11} {:>11} {:>9} {:>9} {:>9} {:>6}",
        "trace",
        "policy",
        "util",
        "multi max",
        "multi p95",
        "multi never",
        "8-GPU max",
        "low",
        "medium",
        "high",
        "stops"
    );
    for (trace, policy, o, _) in &results {
        println!(
            "{:<9} {:<7} {:>5.1}% {:>11} {:>11} {:>11} {:>11} {:>9} {:>9} {:>9} {:>6}",
            trace.name,
            policy.name(),
            o.utilization * 100.0,
            hours(o.multi_wait_max_s),
            hours(o.multi_wait_p95_s),
            format!("{} of {}", o.multi_never, o.multi_jobs),
            if o.full_jobs == 0 {
                "-".into()
            } else {
                format!("{} ({} never)", hours(o.full_wait_max_s), o.full_never)
            },
            hours(o.wait_mean_s[0]),
            hours(o.wait_mean_s[1]),
            hours(o.wait_mean_s[2]),
            o.stops
        );
    }
    println!();
    for (trace, policy, o, _) in &results {
        if *policy == Policy::Ours {
            println!(
                "{} (ours): holding the reservation to starting took at most {}; the longest time limit is {} (+ the {} s cleanup bound)",
                trace.name,
                hours(o.held_max_s),
                hours(Some(o.limit_max_s)),
                CLEANUP / SECOND
            );
        }
    }
    println!("simulated in {elapsed:.2} s");
}
