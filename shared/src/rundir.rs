//! The run directory `<home>/tasks/<task>/` (SPEC section 5): the contract between the daemon
//! and `homebased-worker`. Every file name lives here, every record is typed, and every
//! record that another process reads is written atomically. Every file in it is opened
//! through [`untrusted`]: never followed, read only when regular.

mod untrusted;

pub use untrusted::{open_append, open_record, refused, Refused};

use crate::ids::{JobId, TaskId};
use crate::spec::Step;
use crate::time::Millis;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub const RUN_JSON: &str = "run.json";
pub const RUNNER_LOCK: &str = "runner.lock";
pub const WORKER_JSON: &str = "worker.json";
pub const OUTPUT_LOG: &str = "output.log";
pub const EXIT_JSON: &str = "exit.json";
pub const CLEANUP_JSON: &str = "cleanup.json";
pub const WORKER_LOG: &str = "worker.log";
pub const CONTROL_DIR: &str = "control";
pub const YIELD_FILE: &str = "yield";
pub const STOP_FILE: &str = "stop";
/// Written by the worker with `docker create --cidfile`.
pub const CONTAINER_ID: &str = "container.id";
/// Disk space the worker holds for its records while it lives (removed when it exits).
pub const RESERVE: &str = "worker.reserve";
/// Written by the daemon before it starts a worker that adopts the run's container.
pub const ADOPTION_JSON: &str = "adoption.json";

/// The most of a record that is read (`run.json` with a large environment stays far below).
pub const MAX_RECORD_BYTES: u64 = 16 * 1024 * 1024;

/// The exit code with which a workload says "checkpoint saved, resume me later".
pub const EXIT_YIELDED: i32 = 75;

/// Paths of one run directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    pub fn new(root: impl Into<PathBuf>) -> RunDir {
        RunDir { root: root.into() }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn run_json(&self) -> PathBuf {
        self.root.join(RUN_JSON)
    }
    pub fn runner_lock(&self) -> PathBuf {
        self.root.join(RUNNER_LOCK)
    }
    pub fn worker_json(&self) -> PathBuf {
        self.root.join(WORKER_JSON)
    }
    pub fn output_log(&self) -> PathBuf {
        self.root.join(OUTPUT_LOG)
    }
    pub fn exit_json(&self) -> PathBuf {
        self.root.join(EXIT_JSON)
    }
    pub fn cleanup_json(&self) -> PathBuf {
        self.root.join(CLEANUP_JSON)
    }
    pub fn worker_log(&self) -> PathBuf {
        self.root.join(WORKER_LOG)
    }
    pub fn control_dir(&self) -> PathBuf {
        self.root.join(CONTROL_DIR)
    }
    pub fn yield_file(&self) -> PathBuf {
        self.control_dir().join(YIELD_FILE)
    }
    pub fn stop_file(&self) -> PathBuf {
        self.control_dir().join(STOP_FILE)
    }
    pub fn container_id(&self) -> PathBuf {
        self.root.join(CONTAINER_ID)
    }
    pub fn reserve(&self) -> PathBuf {
        self.root.join(RESERVE)
    }
    pub fn adoption_json(&self) -> PathBuf {
        self.root.join(ADOPTION_JSON)
    }

    pub fn read_run(&self) -> io::Result<RunSpec> {
        read_json(&self.run_json())
    }
    pub fn read_worker(&self) -> io::Result<Option<WorkerRecord>> {
        read_json_if_exists(&self.worker_json())
    }
    pub fn read_exit(&self) -> io::Result<Option<ExitRecord>> {
        read_json_if_exists(&self.exit_json())
    }
    pub fn read_cleanup(&self) -> io::Result<Option<CleanupRecord>> {
        read_json_if_exists(&self.cleanup_json())
    }
    /// The last adoption the daemon asked for, if any.
    pub fn read_adoption(&self) -> io::Result<Option<AdoptionRequest>> {
        read_json_if_exists(&self.adoption_json())
    }
    /// The durable stop request, if the daemon wrote one.
    pub fn read_stop(&self) -> io::Result<Option<StopRequest>> {
        read_json_if_exists(&self.stop_file())
    }
}

/// `run.json`: everything the worker needs, written by the daemon before the worker starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    pub task: TaskId,
    pub job: JobId,
    pub run_number: u32,
    pub step_index: u32,
    pub resume: bool,
    pub step: Step,
    pub cwd: PathBuf,
    /// The submitter's captured `PATH` and `HOME`.
    pub path: Option<String>,
    pub user_home: Option<String>,
    /// The submitting CLI's whole environment, as captured at submit (run variables already
    /// scrubbed). `None` (a job submitted through Fleet, or stored before environments were
    /// captured): the worker's own environment, which is the daemon's, with `path` and
    /// `user_home` over it.
    #[serde(default)]
    pub environment: Option<BTreeMap<String, String>>,
    /// The lanes the run holds, in resource order (one for a job with `gpus` 1); never
    /// empty.
    pub lanes: Vec<RunLane>,
    /// The state home (`HOMEBASED_HOME`).
    pub home: PathBuf,
    /// `<home>/jobs/<job>/state` (`HOMEBASED_JOB_DIR` for host steps).
    pub job_dir: PathBuf,
    /// Where the worker pokes the daemon after it writes a record (a datagram socket).
    pub poke_socket: PathBuf,
    /// Processes the sweep must never signal (the daemon), by identity. A `run.json` written
    /// before identities were recorded names bare pids; those still parse.
    pub protected_pids: Vec<ProtectedProcess>,
    pub cleanup: crate::config::CleanupConfig,
    /// `[resource] output_limit`: the worker keeps `output.log` within it (SPEC section 5).
    /// A `run.json` written before the limit existed gets the default.
    #[serde(default = "default_output_limit")]
    pub output_limit: u64,
    /// The job's `time_limit` as this run gets it (SPEC section 3): the daemon stops the run
    /// at the workload's recorded start plus this, and the worker tells the workload that
    /// instant in `HOMEBASED_DEADLINE` ([`RunSpec::deadline`]). Absent: no limit (and in a
    /// `run.json` written before limits existed).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::spec::duration_text::option"
    )]
    pub time_limit: Option<std::time::Duration>,
    /// When the daemon's steps of this launch happened, for `scripts/bench`'s start path
    /// breakdown; absent in a `run.json` written before they were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamps: Option<LaunchStamps>,
    /// Whether SIGTERM to the worker is a stop request, as the daemon's restart and cancel
    /// paths send it beside `control/stop`. `false` in the batch step of a Slurm job
    /// (`homebased slurm run`), where Slurm's TERM at a requeue or a preemption reaches every
    /// process of the job: there only `control/stop` stops the run, and the workload answers
    /// Slurm's TERM itself (a `yield` one by saving and exiting 75).
    #[serde(default = "term_is_a_stop", skip_serializing_if = "is_true")]
    pub stop_on_term: bool,
}

fn term_is_a_stop() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

/// One lane of a run as its workload is given it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunLane {
    pub name: String,
    pub device: Option<u32>,
    /// The MIG instance the lane is, instead of a device index (SPEC section 7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigDevice>,
}

impl RunLane {
    /// The lane's CUDA device on the host: its index, or a slice's MIG UUID.
    pub fn cuda_device(&self) -> Option<String> {
        match (&self.mig, self.device) {
            (Some(mig), _) => Some(mig.uuid.clone()),
            (None, Some(index)) => Some(index.to_string()),
            (None, None) => None,
        }
    }
}

/// One MIG instance: `CUDA_VISIBLE_DEVICES` is its UUID on the host; a container is given
/// it as `--gpus device=<gpu>:<instance>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigDevice {
    pub uuid: String,
    pub gpu: u32,
    pub instance: u32,
}

fn default_output_limit() -> u64 {
    crate::output_cap::DEFAULT_LIMIT
}

/// The daemon's side of a launch in wall-clock microseconds since the epoch
/// ([`crate::time::now_us`]): one clock read each, read by nobody but the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchStamps {
    /// The scheduling pass decided this launch (before the `launching` commit).
    pub decided: i64,
    /// The `launching` commit landed (before the run directory is made).
    pub reserved: i64,
}

/// The worker's side of the start in wall-clock microseconds since the epoch, recorded in the
/// `worker.json` that names the child; read by nobody but `scripts/bench`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartStamps {
    /// The daemon, just before it handed the run to the standby worker or forked a fresh
    /// one (`--spawned-at`), once `run.json` was written.
    pub spawned: Option<i64>,
    /// The worker's `main` began, or for the standby worker the hand-over arrived.
    pub main: i64,
    /// `run.json` was read.
    pub run_read: i64,
    /// The disk reserve was set aside.
    pub reserve: i64,
    /// The first `worker.json` (no child yet) landed.
    pub recorded: i64,
    /// Just before the workload's fork.
    pub workload: i64,
}

impl RunSpec {
    /// When the daemon stops this run for its `time_limit`, if it has one: the workload's
    /// start as the worker records it (`worker.json`'s `child.started_at`, which becomes the
    /// run's `started_at` in the store) plus the limit. The worker knows that start before it
    /// spawns the workload, so the instant it announces is the one the daemon acts on.
    pub fn deadline(&self, workload_started_at: Millis) -> Option<Millis> {
        let limit = i64::try_from(self.time_limit?.as_millis()).unwrap_or(i64::MAX);
        Some(workload_started_at.saturating_add(limit))
    }

    /// The run variables of SPEC section 5 for a host step, for a workload started at
    /// `workload_started_at`. Inherited copies of these names are scrubbed by the worker
    /// before these are set.
    pub fn host_variables(
        &self,
        run_dir: &RunDir,
        workload_started_at: Millis,
    ) -> BTreeMap<String, String> {
        let mut v = BTreeMap::new();
        v.insert("HOMEBASED_TASK_ID".into(), self.task.to_string());
        v.insert("HOMEBASED_JOB_ID".into(), self.job.to_string());
        v.insert(
            "HOMEBASED_JOB_DIR".into(),
            self.job_dir.display().to_string(),
        );
        v.insert("HOMEBASED_RUN_NUMBER".into(), self.run_number.to_string());
        v.insert("HOMEBASED_STEP_INDEX".into(), self.step_index.to_string());
        v.insert(
            "HOMEBASED_RESUME".into(),
            if self.resume { "1" } else { "0" }.into(),
        );
        v.insert(
            "HOMEBASED_YIELD_FILE".into(),
            run_dir.yield_file().display().to_string(),
        );
        v.insert("HOMEBASED_RESOURCE".into(), self.lane_names());
        v.insert("HOMEBASED_HOME".into(), self.home.display().to_string());
        if let Some(devices) = self.cuda_visible_devices() {
            v.insert("CUDA_VISIBLE_DEVICES".into(), devices);
            // `nvidia-smi` numbers cards in PCI bus order, CUDA by default fastest first: on a
            // machine with mixed cards an index would name another card than the lane's.
            v.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
        }
        if let Some(deadline) = self.deadline(workload_started_at) {
            // Whole seconds, rounded down: never later than the stop it announces.
            v.insert(
                "HOMEBASED_DEADLINE".into(),
                humantime::format_rfc3339_seconds(crate::time::from_ms(deadline)).to_string(),
            );
        }
        v
    }

    /// The lanes' names, comma-separated in resource order (`HOMEBASED_RESOURCE`).
    pub fn lane_names(&self) -> String {
        self.lanes
            .iter()
            .map(|lane| lane.name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `CUDA_VISIBLE_DEVICES` on the host: every lane's device in ascending order, or `None`
    /// when a lane has none (the fallback `gpu0`, a manual lane: the queue selects nothing).
    pub fn cuda_visible_devices(&self) -> Option<String> {
        let mut indexed: Vec<(Option<u32>, String)> = Vec::with_capacity(self.lanes.len());
        for lane in &self.lanes {
            indexed.push((lane.device, lane.cuda_device()?));
        }
        indexed.sort();
        Some(
            indexed
                .into_iter()
                .map(|(_, device)| device)
                .collect::<Vec<_>>()
                .join(","),
        )
    }
}

/// The variables that describe one run (`HOMEBASED_HOME` is configuration, not one of them).
/// A daemon started from inside a run must not carry them: the run's sweep would take the
/// daemon, and every worker it starts, for the run's own processes.
pub const PER_RUN_VARIABLES: [&str; 8] = [
    "HOMEBASED_TASK_ID",
    "HOMEBASED_JOB_ID",
    "HOMEBASED_JOB_DIR",
    "HOMEBASED_RUN_NUMBER",
    "HOMEBASED_STEP_INDEX",
    "HOMEBASED_RESUME",
    "HOMEBASED_YIELD_FILE",
    "HOMEBASED_RESOURCE",
];

/// True for an inherited variable that must never reach a workload unscrubbed: the run
/// variables of SPEC section 5 (`HOMEBASED_DEADLINE` among them), and the GPU selection the
/// queue owns. A submitter's `CUDA_DEVICE_ORDER` goes with its `CUDA_VISIBLE_DEVICES`: the
/// order renumbers the index the queue hands out.
pub fn is_run_variable(name: &str) -> bool {
    name.starts_with("HOMEBASED_") || name == "CUDA_VISIBLE_DEVICES" || name == "CUDA_DEVICE_ORDER"
}

/// A process identity: a pid alone can be reused, the pair cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// Kernel start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
}

/// A process the sweep must never signal, as `run.json` names it: by identity
/// (`{"pid":N,"start_ticks":T}`), or, in a `run.json` of an older daemon or where the start
/// could not be read, by a bare pid, which the reader resolves to the identity of whatever
/// holds that pid when it looks (the old behaviour, matching by number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ProtectedProcess {
    Identity(ProcessIdentity),
    Pid(u32),
}

/// `worker.json`: the worker's own identity, then its child's once spawned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerRecord {
    pub worker: ProcessIdentity,
    pub child: Option<ChildRecord>,
    /// How the worker's start went, once the child is named; see [`StartStamps`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamps: Option<StartStamps>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildRecord {
    pub process: ProcessIdentity,
    pub pgid: u32,
    /// Wall-clock time the workload was spawned: the start of the suspect window.
    pub started_at: Millis,
}

/// How the workload ended, exactly as observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExitReason {
    Exit {
        code: i32,
    },
    Signal {
        signal: i32,
    },
    /// The worker stopped the workload on a stop request.
    Cancelled,
    SpawnFailed {
        message: String,
    },
}

/// In words, for logs: `exit 3`, `killed by SIGTERM (signal 15)`.
impl std::fmt::Display for ExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitReason::Exit { code } => write!(f, "exit {code}"),
            ExitReason::Signal { signal } => match nix::sys::signal::Signal::try_from(*signal) {
                Ok(name) => write!(f, "killed by {} (signal {signal})", name.as_str()),
                Err(_) => write!(f, "killed by signal {signal}"),
            },
            ExitReason::Cancelled => f.write_str("stopped on a stop request"),
            ExitReason::SpawnFailed { message } => write!(f, "could not start: {message}"),
        }
    }
}

/// Whether the workload's process group was seen empty when the exit was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupState {
    ConfirmedExited,
    Unconfirmed,
    NoChildSpawned,
}

/// `exit.json`: written atomically as soon as the workload ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub reason: ExitReason,
    pub group: GroupState,
    #[serde(default)]
    pub container: Option<serde_json::Value>,
    pub ended_at: Millis,
}

/// Why a process was still there when cleanup gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RemainingReason {
    /// Carries this run's marker and survived the signals.
    Marked,
    /// Same user, started during the run, environment unreadable.
    Suspect,
    /// Still in the workload's process group.
    Group,
}

impl RemainingReason {
    /// The name on the wire: serde's, derived by strum.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemainingProcess {
    pub pid: u32,
    pub start_ticks: u64,
    pub reason: RemainingReason,
}

/// The result of one cleanup attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(tag = "result", rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum CleanupOutcome {
    Clean,
    GroupUnconfirmed { remaining: Vec<RemainingProcess> },
    TargetsSurvived { remaining: Vec<RemainingProcess> },
    UnreadableSuspects { remaining: Vec<RemainingProcess> },
    EnumerationFailed { message: String },
    ContainerUnconfirmed { message: String },
}

impl CleanupOutcome {
    pub fn is_clean(&self) -> bool {
        matches!(self, CleanupOutcome::Clean)
    }

    /// Its `result` on the wire (`clean`, `targets_survived`, ...): serde's tag, derived by
    /// strum.
    pub fn name(&self) -> &'static str {
        self.into()
    }

    /// The processes a person must check, each by pid and kernel start time; none for an
    /// outcome that names none.
    pub fn remaining(&self) -> &[RemainingProcess] {
        match self {
            CleanupOutcome::GroupUnconfirmed { remaining }
            | CleanupOutcome::TargetsSurvived { remaining }
            | CleanupOutcome::UnreadableSuspects { remaining } => remaining,
            CleanupOutcome::Clean
            | CleanupOutcome::EnumerationFailed { .. }
            | CleanupOutcome::ContainerUnconfirmed { .. } => &[],
        }
    }

    /// What went wrong, in words, for an outcome that says.
    pub fn message(&self) -> Option<&str> {
        match self {
            CleanupOutcome::EnumerationFailed { message }
            | CleanupOutcome::ContainerUnconfirmed { message } => Some(message),
            CleanupOutcome::Clean
            | CleanupOutcome::GroupUnconfirmed { .. }
            | CleanupOutcome::TargetsSurvived { .. }
            | CleanupOutcome::UnreadableSuspects { .. } => None,
        }
    }
}

/// `cleanup.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CleanupRecord {
    /// 1 for the worker's own cleanup; the daemon numbers its later attempts.
    pub attempt: u32,
    pub outcome: CleanupOutcome,
    pub finished_at: Millis,
}

/// `control/stop`: a durable stop request the worker honours even if a signal was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopRequest {
    pub cause: crate::queue::StopCause,
}

/// `adoption.json`: the daemon started adopting worker number `adoption` (from 1) for a run
/// whose worker vanished while its container may still run. Written before that worker
/// starts, so the count survives a worker that dies at once and a daemon restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdoptionRequest {
    pub adoption: u32,
    pub requested_at: Millis,
}

/// Opens (creating it, 0600) a file that is only ever locked (`flock`), never written: a
/// worker's `runner.lock`, the sweep exchange's `lock`. Never through a link.
pub fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
}

/// Write, fsync, rename over the target, fsync the folder: a reader sees the old file or the
/// whole new one, and the new one survives a crash once this returns.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(path, bytes, Synced::Everything)
}

/// Write, rename over the target, without an fsync: a reader sees the old file or the whole
/// new one, but nothing is durable yet. For `cleanup.json`, whose durability is the
/// daemon's commit of its outcome, and `run.json`, whose facts the store keeps (the
/// `launching` commit and the job's spec) and which nothing reads after a machine crash.
pub fn write_json_replace<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    replace(path, &bytes, Synced::Nothing)
}

/// What [`replace`] makes durable before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Synced {
    Nothing,
    Everything,
}

fn replace(path: &Path, bytes: &[u8], synced: Synced) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    {
        // The temporary name is predictable: a link planted there is refused, not written
        // through. The rename then replaces whatever is at `path` itself, a link included.
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if synced == Synced::Everything {
            f.sync_all()?;
        }
    }
    std::fs::rename(&tmp, path)?;
    if synced == Synced::Everything {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// A record of a run directory, parsed. Never followed ([`open_record`]) and never larger
/// than [`MAX_RECORD_BYTES`]: a record is a few hundred bytes, and a workload that grows one
/// must not make its reader hold all of it.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> io::Result<T> {
    let mut bytes = Vec::new();
    open_record(path)?
        .take(MAX_RECORD_BYTES)
        .read_to_end(&mut bytes)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// The most a record of the run directory may hold when read as hostile input: `run.json`
/// carries the job's environment, well under this.
pub const RECORD_LIMIT: u64 = 16 << 20;

/// Reads a record the workload may have replaced (it can write its run directory): opened
/// without following a symlink, read only when it is a regular file of at most
/// [`RECORD_LIMIT`] bytes, parsed strictly. `Ok(None)` when there is no such file.
pub fn read_json_untrusted<T: for<'de> Deserialize<'de>>(path: &Path) -> io::Result<Option<T>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        // O_NONBLOCK: a FIFO put where the record should be does not hang the open.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is a symlink, not a record", path.display()),
            ))
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > RECORD_LIMIT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not a regular file of at most {RECORD_LIMIT} bytes",
                path.display()
            ),
        ));
    }
    let mut bytes = Vec::new();
    file.take(RECORD_LIMIT + 1).read_to_end(&mut bytes)?;
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

pub fn read_json_if_exists<T: for<'de> Deserialize<'de>>(path: &Path) -> io::Result<Option<T>> {
    match read_json(path) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_reason_reads_in_words_with_the_signal_named() {
        assert_eq!(ExitReason::Exit { code: 3 }.to_string(), "exit 3");
        assert_eq!(
            ExitReason::Signal { signal: 15 }.to_string(),
            "killed by SIGTERM (signal 15)"
        );
        assert_eq!(
            ExitReason::Signal { signal: 200 }.to_string(),
            "killed by signal 200"
        );
        assert_eq!(
            ExitReason::Cancelled.to_string(),
            "stopped on a stop request"
        );
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("exit.json");
        let rec = ExitRecord {
            reason: ExitReason::Exit { code: 75 },
            group: GroupState::ConfirmedExited,
            container: None,
            ended_at: 5,
        };
        write_json_atomic(&p, &rec).unwrap();
        write_json_atomic(&p, &rec).unwrap();
        let back: ExitRecord = read_json(&p).unwrap();
        assert_eq!(back, rec);
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_replaced_file_is_whole_for_readers_and_leaves_no_temporary_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("run.json");
        write_json_replace(&p, &serde_json::json!({"step": 1})).unwrap();
        write_json_replace(&p, &serde_json::json!({"step": 2})).unwrap();
        let back: serde_json::Value = read_json(&p).unwrap();
        assert_eq!(back, serde_json::json!({"step": 2}));
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_worker_record_without_start_stamps_still_parses_and_writes_none() {
        let old = r#"{"worker":{"pid":7,"start_ticks":9},"child":null}"#;
        let record: WorkerRecord = serde_json::from_str(old).unwrap();
        assert_eq!(record.stamps, None);
        let v = serde_json::to_value(&record).unwrap();
        assert!(v.get("stamps").is_none(), "{v}");
        let stamped = WorkerRecord {
            stamps: Some(StartStamps {
                spawned: Some(1),
                main: 2,
                run_read: 3,
                reserve: 4,
                recorded: 5,
                workload: 6,
            }),
            ..record
        };
        let v = serde_json::to_value(&stamped).unwrap();
        assert_eq!(v["stamps"]["spawned"], 1);
        assert_eq!(v["stamps"]["workload"], 6);
        let back: WorkerRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, stamped);
    }

    #[test]
    fn exit_reasons_have_the_spec_shape() {
        let v = serde_json::to_value(ExitReason::Signal { signal: 9 }).unwrap();
        assert_eq!(v, serde_json::json!({"kind":"signal","signal":9}));
        let v = serde_json::to_value(ExitReason::Cancelled).unwrap();
        assert_eq!(v, serde_json::json!({"kind":"cancelled"}));
        let v = serde_json::to_value(CleanupOutcome::Clean).unwrap();
        assert_eq!(v, serde_json::json!({"result":"clean"}));
    }

    #[test]
    fn outcome_and_reason_names_are_serdes() {
        let outcomes = [
            CleanupOutcome::Clean,
            CleanupOutcome::GroupUnconfirmed { remaining: vec![] },
            CleanupOutcome::TargetsSurvived { remaining: vec![] },
            CleanupOutcome::UnreadableSuspects { remaining: vec![] },
            CleanupOutcome::EnumerationFailed {
                message: "m".into(),
            },
            CleanupOutcome::ContainerUnconfirmed {
                message: "m".into(),
            },
        ];
        for outcome in outcomes {
            let v = serde_json::to_value(&outcome).unwrap();
            assert_eq!(v["result"], outcome.name(), "{v}");
        }
        for reason in [
            RemainingReason::Marked,
            RemainingReason::Suspect,
            RemainingReason::Group,
        ] {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
    }

    #[test]
    fn protected_processes_are_identities_and_old_bare_pids_still_parse() {
        let identity = ProtectedProcess::Identity(ProcessIdentity {
            pid: 42,
            start_ticks: 777,
        });
        let v = serde_json::to_value([identity]).unwrap();
        assert_eq!(v, serde_json::json!([{"pid": 42, "start_ticks": 777}]));
        let old: Vec<ProtectedProcess> = serde_json::from_str("[42]").unwrap();
        assert_eq!(old, vec![ProtectedProcess::Pid(42)]);
        let mixed: Vec<ProtectedProcess> =
            serde_json::from_str(r#"[7, {"pid": 42, "start_ticks": 777}]"#).unwrap();
        assert_eq!(mixed, vec![ProtectedProcess::Pid(7), identity]);
    }

    #[test]
    fn missing_records_read_as_none() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::new(tmp.path());
        assert!(dir.read_exit().unwrap().is_none());
        assert!(dir.read_cleanup().unwrap().is_none());
    }
}
