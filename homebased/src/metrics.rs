//! `GET /metrics` (SPEC section 11): the Prometheus text exposition, version 0.0.4, written
//! by the `prometheus` crate's `TextEncoder` (default features off: no protobuf, no
//! process collector, no global registry).
//!
//! Two kinds of series:
//! - gauges, read at scrape time from what the core holds anyway: the lanes and the runs
//!   holding them, the open jobs counted by level and state, the pending events (both read
//!   through partial indexes, so a history of finished jobs costs nothing), the GPU
//!   sampler's last sample, and the Fleet directory;
//! - counters and the wait histogram, kept in this process since the daemon started
//!   ([`Counters`]) and counted at the commit points of the core. A restart starts them at
//!   zero again, which Prometheus reads as a counter reset (`rate()` and `increase()` handle
//!   it); seeding them from the store would mean counting over the whole run history.
//!
//! [`Snapshot`] is the plain data of one scrape, [`render`] the pure function that writes it.

use crate::lifecycle::Commit;
use homebased_shared::ids::ResourceId;
use homebased_shared::queue::{JobStatus, PhaseKind, Priority, RunStatus, StopCause};
use homebased_shared::time::Millis;
use homebased_shared::wire::GpuProcessView;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::collections::HashMap;

/// The answer's `Content-Type`: the text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// The bounds of the wait histogram, in seconds: a queue's waits run from a moment (a free
/// lane) to days (a low-priority job behind a long high one).
pub const WAIT_BUCKETS: [f64; 14] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
    259200.0,
];

/// The phases `homebased_resource_phase` names, every one written for every resource (1 for
/// the current one, 0 for the others), so that a query never meets a missing series: `idle`
/// and every [`PhaseKind`], so that a new phase is exported without a list to keep in step.
fn phases() -> impl Iterator<Item = &'static str> {
    std::iter::once("idle").chain(PhaseKind::ALL.iter().map(|p| p.as_str()))
}

/// The run statuses a run can end with (SPEC section 4).
const END_STATUSES: [RunStatus; 5] = [
    RunStatus::Succeeded,
    RunStatus::Failed,
    RunStatus::Cancelled,
    RunStatus::Preempted,
    RunStatus::Lost,
];

/// The counters and the histogram, shared by clones (the core counts, a scrape reads).
#[derive(Clone)]
pub struct Counters {
    runs_ended: IntCounterVec,
    preemptions: IntCounterVec,
    attentions_opened: IntCounter,
    launch_storage_failures: IntCounter,
    job_wait: HistogramVec,
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

impl Counters {
    pub fn new() -> Counters {
        let runs_ended = IntCounterVec::new(
            Opts::new("homebased_runs_ended_total", "Runs ended, by run status."),
            &["status"],
        );
        let preemptions = IntCounterVec::new(
            Opts::new(
                "homebased_preemptions_total",
                "Stops committed so that a higher-priority job can start, by cause.",
            ),
            &["cause"],
        );
        let attentions_opened = IntCounter::new(
            "homebased_attentions_opened_total",
            "Attentions opened (a cleanup that failed holds its resource).",
        );
        let launch_storage_failures = IntCounter::new(
            "homebased_launch_storage_failures_total",
            "Launches given back because their run directory could not be made.",
        );
        let job_wait = HistogramVec::new(
            HistogramOpts::new(
                "homebased_job_wait_seconds",
                "Time from queued (submit, preemption or previous step) to run start, by \
                 priority.",
            )
            .buckets(WAIT_BUCKETS.to_vec()),
            &["priority"],
        );
        // The names, labels and buckets above are constants: they are valid.
        #[allow(clippy::unwrap_used)]
        let counters = Counters {
            runs_ended: runs_ended.unwrap(),
            preemptions: preemptions.unwrap(),
            attentions_opened: attentions_opened.unwrap(),
            launch_storage_failures: launch_storage_failures.unwrap(),
            job_wait: job_wait.unwrap(),
        };
        // Every label value is written from the start, at 0: an absent series would read
        // as "unknown" rather than "none yet".
        for status in END_STATUSES {
            counters.runs_ended.with_label_values(&[status.as_str()]);
        }
        for cause in [StopCause::Yield, StopCause::Restart] {
            counters.preemptions.with_label_values(&[cause.as_str()]);
        }
        for priority in Priority::ALL {
            counters.job_wait.with_label_values(&[priority.as_str()]);
        }
        counters
    }

    pub fn run_ended(&self, status: RunStatus) {
        self.runs_ended.with_label_values(&[status.as_str()]).inc();
    }

    /// A committed preemptive stop; a user's cancel and a time limit are not preemptions.
    pub fn preempted(&self, cause: StopCause) {
        if matches!(cause, StopCause::Yield | StopCause::Restart) {
            self.preemptions.with_label_values(&[cause.as_str()]).inc();
        }
    }

    pub fn attention_opened(&self) {
        self.attentions_opened.inc();
    }

    /// A launch whose run directory could not be made (a full disk, a read-only home).
    pub fn launch_storage_failed(&self) {
        self.launch_storage_failures.inc();
    }

    /// A run started (its lane reserved) for a job of `priority` that was queued since
    /// `queued_since`.
    pub fn run_started(&self, priority: Priority, queued_since: Millis, started: Millis) {
        self.job_wait
            .with_label_values(&[priority.as_str()])
            .observe(wait_seconds(queued_since, started));
    }

    /// Counts what a committed run move did: its end, its preemptive stop, its Attention.
    pub fn moved(&self, commits: &[Commit], ended: Option<RunStatus>) {
        if let Some(status) = ended {
            self.run_ended(status);
        }
        for commit in commits {
            match commit {
                Commit::RecordStop(stop) => self.preempted(stop.cause),
                Commit::OpenAttention => self.attention_opened(),
                Commit::RecordStart { .. }
                | Commit::RecordEnd { .. }
                | Commit::Abandon
                | Commit::RecordCleanup(_)
                | Commit::CloseAttention => {}
            }
        }
    }
}

/// Seconds between two store times; a clock that stepped back counts as no wait.
pub fn wait_seconds(queued_since: Millis, started: Millis) -> f64 {
    (started.saturating_sub(queued_since)).max(0) as f64 / 1000.0
}

/// The gauges of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Each resource by name, with the phase of the run holding it (`None`: idle).
    pub resources: Vec<(String, Option<PhaseKind>)>,
    /// Open jobs by level and state; a pair not listed is 0.
    pub jobs: Vec<(Priority, JobStatus, u64)>,
    pub events_pending: u64,
    /// Launches are held back because the last one could not make its run directory.
    pub storage_unavailable: bool,
    /// Lanes held by the current reservation of a multi-lane job (SPEC section 4).
    pub reserved_resources: u64,
    /// Foreign processes on each sampled GPU lane.
    pub gpu: Vec<GpuForeign>,
    /// Each sampled lane's card state; a value not known is no series at all.
    pub gpu_state: Vec<GpuStateSeries>,
    pub peers: Vec<PeerUp>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuForeign {
    pub resource: String,
    pub processes: u64,
    pub memory_bytes: u64,
}

/// One lane's card state as the metrics write it (SPEC section 11): bytes, a 0 to 1 ratio,
/// degrees and watts. `None` is written as no series, never as 0.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuStateSeries {
    pub resource: String,
    pub uuid: String,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub utilization_ratio: Option<f64>,
    pub temperature_celsius: Option<f64>,
    pub power_watts: Option<f64>,
}

impl GpuStateSeries {
    /// The series of lane `resource` on card `uuid` from the sampled state.
    pub fn of(resource: &str, uuid: &str, state: &crate::sampler::GpuState) -> GpuStateSeries {
        let bytes = |mib: u64| mib.saturating_mul(1024 * 1024);
        GpuStateSeries {
            resource: resource.to_string(),
            uuid: uuid.to_string(),
            memory_used_bytes: state.memory_used_mib.map(bytes),
            memory_total_bytes: state.memory_total_mib.map(bytes),
            utilization_ratio: state.utilization_percent.map(|p| f64::from(p) / 100.0),
            temperature_celsius: state.temperature_c.map(f64::from),
            power_watts: state.power_w,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerUp {
    /// The UUID it is bound to, empty while it never answered.
    pub machine: String,
    /// Its last answered name, else its address.
    pub name: String,
    pub up: bool,
}

/// The foreign processes (no queue owner) of each sampled lane: `lanes` are the lanes with a
/// known card (id, name), `by_lane` the sampler's attribution. A lane the sample has no
/// process on has none.
pub fn foreign(
    lanes: &[(ResourceId, String)],
    by_lane: &HashMap<ResourceId, Vec<GpuProcessView>>,
) -> Vec<GpuForeign> {
    lanes
        .iter()
        .map(|(id, name)| {
            let outside: Vec<&GpuProcessView> = by_lane
                .get(id)
                .map(|ps| ps.iter().filter(|p| p.queue.is_none()).collect())
                .unwrap_or_default();
            GpuForeign {
                resource: name.clone(),
                processes: outside.len() as u64,
                memory_bytes: outside
                    .iter()
                    .filter_map(|p| p.used_memory_mib)
                    .map(|mib| mib.saturating_mul(1024 * 1024))
                    .sum(),
            }
        })
        .collect()
}

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Writes the exposition: the gauges of `snapshot` and the counters as they stand.
pub fn render(counters: &Counters, snapshot: &Snapshot) -> Result<String, prometheus::Error> {
    let registry = Registry::new();
    let gauge = |name: &str, help: &str, labels: &[&str]| -> Result<IntGaugeVec, _> {
        let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
        registry.register(Box::new(g.clone()))?;
        Ok::<_, prometheus::Error>(g)
    };

    let phase = gauge(
        "homebased_resource_phase",
        "1 for the phase the resource is in, 0 for the others.",
        &["resource", "phase"],
    )?;
    for (name, current) in &snapshot.resources {
        let current = current.map_or("idle", PhaseKind::as_str);
        for p in phases() {
            phase
                .with_label_values(&[name.as_str(), p])
                .set(i64::from(p == current));
        }
    }

    let jobs = gauge(
        "homebased_jobs",
        "Queued and active jobs, by priority and state.",
        &["priority", "state"],
    )?;
    for priority in Priority::ALL {
        for state in [JobStatus::Queued, JobStatus::Active] {
            let n = snapshot
                .jobs
                .iter()
                .filter(|(p, s, _)| *p == priority && *s == state)
                .map(|(_, _, n)| *n)
                .sum();
            jobs.with_label_values(&[priority.as_str(), state.as_str()])
                .set(int(n));
        }
    }

    let pending = IntGauge::new(
        "homebased_events_pending",
        "Events not yet delivered on this origin.",
    )?;
    pending.set(int(snapshot.events_pending));
    registry.register(Box::new(pending))?;

    let storage = IntGauge::new(
        "homebased_storage_unavailable",
        "1 while launches are held back because a run directory could not be made.",
    )?;
    storage.set(i64::from(snapshot.storage_unavailable));
    registry.register(Box::new(storage))?;

    let reserved = IntGauge::new(
        "homebased_reserved_resources",
        "Resources held by the current reservation of a multi-resource job.",
    )?;
    reserved.set(int(snapshot.reserved_resources));
    registry.register(Box::new(reserved))?;

    let processes = gauge(
        "homebased_gpu_foreign_processes",
        "Processes outside the queue on the resource's GPU, as last sampled.",
        &["resource"],
    )?;
    let memory = gauge(
        "homebased_gpu_foreign_memory_bytes",
        "GPU memory used by processes outside the queue, as last sampled.",
        &["resource"],
    )?;
    for g in &snapshot.gpu {
        processes
            .with_label_values(&[g.resource.as_str()])
            .set(int(g.processes));
        memory
            .with_label_values(&[g.resource.as_str()])
            .set(int(g.memory_bytes));
    }

    let float_gauge = |name: &str, help: &str| -> Result<GaugeVec, prometheus::Error> {
        let g = GaugeVec::new(Opts::new(name, help), &["resource", "uuid"])?;
        registry.register(Box::new(g.clone()))?;
        Ok(g)
    };
    let used = float_gauge(
        "homebased_gpu_memory_used_bytes",
        "GPU memory in use on the resource's card, as last sampled.",
    )?;
    let total = float_gauge(
        "homebased_gpu_memory_total_bytes",
        "GPU memory of the resource's card.",
    )?;
    let utilization = float_gauge(
        "homebased_gpu_utilization_ratio",
        "GPU utilization of the resource's card, 0 to 1, as last sampled.",
    )?;
    let temperature = float_gauge(
        "homebased_gpu_temperature_celsius",
        "Temperature of the resource's card, as last sampled.",
    )?;
    let power = float_gauge(
        "homebased_gpu_power_watts",
        "Power draw of the resource's card, as last sampled.",
    )?;
    for g in &snapshot.gpu_state {
        let labels = [g.resource.as_str(), g.uuid.as_str()];
        let series = [
            (&used, g.memory_used_bytes.map(|b| b as f64)),
            (&total, g.memory_total_bytes.map(|b| b as f64)),
            (&utilization, g.utilization_ratio),
            (&temperature, g.temperature_celsius),
            (&power, g.power_watts),
        ];
        for (gauge, value) in series {
            if let Some(value) = value {
                gauge.with_label_values(&labels).set(value);
            }
        }
    }

    let peers = gauge(
        "homebased_fleet_peer_up",
        "1 when the Fleet peer answered its last probe as the machine it is bound to.",
        &["machine", "name"],
    )?;
    for p in &snapshot.peers {
        peers
            .with_label_values(&[p.machine.as_str(), p.name.as_str()])
            .set(i64::from(p.up));
    }

    registry.register(Box::new(counters.runs_ended.clone()))?;
    registry.register(Box::new(counters.preemptions.clone()))?;
    registry.register(Box::new(counters.attentions_opened.clone()))?;
    registry.register(Box::new(counters.launch_storage_failures.clone()))?;
    registry.register(Box::new(counters.job_wait.clone()))?;

    let mut out = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut out)?;
    String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
