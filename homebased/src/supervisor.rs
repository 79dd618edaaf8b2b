//! The supervisor: the daemon's side of the run directory. It creates a run directory,
//! starts `homebased-worker` with the locked `runner.lock` handed over as fd 3, watches each
//! live worker through that lock, and signals workers by verified identity. It never decides
//! anything: the core does, through the [`Launcher`](launcher::Launcher) seam, and is told
//! what happened through the [`Observer`] that `daemon::serve` hands it. It never imports
//! the core: the seam points one way.
//!
//! # Layout
//! - [`launcher`]: the seam the core holds (`Launcher`, the data it carries, the observer's
//!   events) and `Supervisor`, the real one over the functions here.
//! - `lost_cleanup`: the cleanup after a worker that vanished before it wrote `cleanup.json`.
//! - [`standby`]: the keeper of a standby worker per lane, handed a run's lock at start.
//! - [`staged`]: the run and job directories the keeper makes ahead of need.

pub mod launcher;
mod lost_cleanup;
mod spawn;
pub mod staged;
pub mod standby;

use crate::clock::Clock;
use homebased_shared::home::Home;
use homebased_shared::ids::TaskId;
use homebased_shared::process;
use homebased_shared::rundir::{
    write_json_atomic, write_json_replace, AdoptionRequest, RunDir, RunSpec,
};
use homebased_shared::sweep::SweepKey;
use homebased_shared::time::Millis;
use homebased_shared::worker_cmdline;
use launcher::{LostCleanup, Observer, RunNames, WorkerEvent};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

/// `flock(2)` on a raw descriptor. Not nix's `Flock` guard: dropping that unlocks the open
/// file description, which the worker shares; the daemon must only close its copy.
fn flock(file: &File, operation: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor this function borrows; no memory is involved.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The fd number on which the worker receives its locked `runner.lock`.
pub const LOCK_FD: i32 = 3;

/// The fd number on which a fresh worker receives the sweep key's pipe (a standby worker
/// receives it on this number too, beside its socket on standard input).
pub const SWEEP_KEY_FD: i32 = 4;

/// The worker binary: `HOMEBASED_WORKER`, else `homebased-worker` beside this executable.
pub fn worker_binary() -> PathBuf {
    if let Some(p) = overriding_worker() {
        return p;
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("homebased-worker")))
        .unwrap_or_else(|| PathBuf::from("homebased-worker"))
}

fn overriding_worker() -> Option<PathBuf> {
    std::env::var_os("HOMEBASED_WORKER")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// Whether `HOMEBASED_WORKER` names the worker (so it is started per run, never in standby).
pub fn worker_overridden() -> bool {
    overriding_worker().is_some()
}

fn private_dir(path: &std::path::Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Creates the run directory, `control/`, the job's checkpoint directory and `run.json`.
/// `run.json` is written whole but not fsynced: it is the daemon's message to the worker, on
/// the start path of every run; the facts it holds are durable in the store already (the
/// `launching` commit, the job's spec), and the daemon reads them from there when it deals
/// with a run after a crash (ARCHITECTURE "The run directory is the contract").
/// The directories are the staged ones when the keeper has them ready (`staged`), else
/// made here.
fn create_run_dir(home: &Home, spec: &RunSpec) -> io::Result<RunDir> {
    let dir = RunDir::new(home.task_dir(spec.task));
    if !staged::claim_run(home, dir.root()) {
        private_dir(&dir.control_dir())?;
    }
    if let Some(job) = spec.job_dir.parent() {
        staged::claim_job(home, job);
    }
    private_dir(&spec.job_dir)?;
    write_json_replace(&dir.run_json(), spec)?;
    Ok(dir)
}

/// Locks `runner.lock`, starts the worker in a new session holding it, and releases the
/// daemon's copy so that only the worker's life holds the lock. The worker is `standby` when
/// one is given and takes the hand-over, else a fresh process.
fn start_worker(
    dir: &RunDir,
    names: &RunNames,
    standby: Option<standby::Standby>,
    clock: &Clock,
    sweep_key: Option<&SweepKey>,
) -> io::Result<spawn::Detached> {
    spawn_worker(dir, names, &[], standby, clock, sweep_key)
}

/// Records that adopting worker number `adoption` is about to start (`adoption.json`).
fn request_adoption(dir: &RunDir, adoption: u32, now: Millis) -> io::Result<()> {
    let request = AdoptionRequest {
        adoption,
        requested_at: now,
    };
    write_json_atomic(&dir.adoption_json(), &request)
}

/// Starts a worker that adopts the container of the run's vanished worker
/// (`homebased-worker <run-dir> --adopt`), holding a newly taken `runner.lock` exactly like
/// [`start_worker`].
fn start_adopting_worker(
    dir: &RunDir,
    names: &RunNames,
    adoption: u32,
    clock: &Clock,
    sweep_key: Option<&SweepKey>,
) -> io::Result<spawn::Detached> {
    tracing::debug!(run = %dir.root().display(), adoption, "starting an adopting worker");
    spawn_worker(dir, names, &["--adopt"], None, clock, sweep_key)
}

fn spawn_worker(
    dir: &RunDir,
    names: &RunNames,
    extra: &[&str],
    standby: Option<standby::Standby>,
    clock: &Clock,
    sweep_key: Option<&SweepKey>,
) -> io::Result<spawn::Detached> {
    let lock = homebased_shared::rundir::open_lock_file(&dir.runner_lock())?;
    flock(&lock, libc::LOCK_EX | libc::LOCK_NB)?;
    let log = homebased_shared::rundir::open_append(&dir.worker_log(), 0o666)?;
    // Both ways of starting the worker get these, then the last stamp of the daemon's side of
    // a start (`rundir::StartStamps::spawned`); a fresh worker is also told where its lock is
    // (`--lock-fd`), a standby worker names the descriptor it received itself.
    // The run's job and lanes, which a daemon that lost the run reads back from the
    // process table (`homebased_shared::worker_cmdline`).
    let lanes = worker_cmdline::join_lanes(&names.lanes);
    let mut args: Vec<std::ffi::OsString> = vec![
        dir.root().into(),
        worker_cmdline::JOB_FLAG.into(),
        names.job.to_string().into(),
        worker_cmdline::LANES_FLAG.into(),
        (&lanes).into(),
    ];
    args.extend(extra.iter().map(Into::into));
    args.extend(clock_ahead(clock).into_iter().flatten());
    let spawned_at = || {
        [
            "--spawned-at".into(),
            homebased_shared::time::now_us().to_string().into(),
        ]
    };
    if let Some(standby) = standby {
        let handed: Vec<std::ffi::OsString> = args.iter().cloned().chain(spawned_at()).collect();
        match standby.hand_over(&handed, &lock, &log) {
            // The daemon's copies close here; the worker's keep the lock.
            Ok(child) => return Ok(child),
            Err(e) => {
                tracing::warn!(run = %dir.root().display(), error = %e, "the standby worker did not take the run; starting a fresh one");
            }
        }
    }
    args.extend(["--lock-fd".into(), LOCK_FD.to_string().into()]);
    args.extend(spawned_at());
    let null = File::open("/dev/null")?;
    // The key travels in a pipe the worker empties at start, never in its arguments or
    // environment (the workload inherits and can read both).
    let key_pipe = sweep_key.map(SweepKey::to_pipe).transpose()?;
    let mut fds = vec![
        (null.as_fd(), 0),
        (log.as_fd(), 1),
        (log.as_fd(), 2),
        (lock.as_fd(), LOCK_FD),
    ];
    if let Some(pipe) = &key_pipe {
        args.extend(["--sweep-key-fd".into(), SWEEP_KEY_FD.to_string().into()]);
        fds.push((pipe.as_fd(), SWEEP_KEY_FD));
    }
    // Its own session: the worker outlives the daemon and its terminal. The lock goes to
    // LOCK_FD and the sweep key to SWEEP_KEY_FD, the only descriptors it inherits besides
    // its standard ones.
    let child = spawn::in_new_session(worker_binary().as_os_str(), &args, &fds);
    drop(lock);
    child
}

/// The worker's `--clock-ahead-ms` once a test moved the daemon's clock (crate::clock), so
/// that the times the worker records read as the daemon's do. Never in a build without the
/// `failpoints` feature: its clock cannot move, and its worker has no such argument.
fn clock_ahead(clock: &Clock) -> Option<[std::ffi::OsString; 2]> {
    let ahead = clock.ahead_ms();
    (cfg!(feature = "failpoints") && ahead != 0)
        .then(|| ["--clock-ahead-ms".into(), ahead.to_string().into()])
}

/// The live workers of `home` by their command lines: every process whose `argv[0]` is
/// `homebased-worker` and whose run directory is under this home's `tasks/` (by name, or by
/// the canonical path of its parent where the home was named another way).
fn live_workers(home: &Home) -> Vec<launcher::LiveWorker> {
    live_workers_in(&home.tasks_dir())
}

/// [`live_workers`] of the home whose run directories are in `tasks`.
fn live_workers_in(tasks: &std::path::Path) -> Vec<launcher::LiveWorker> {
    let canonical = std::fs::canonicalize(tasks).ok();
    let of_this_home = |run_dir: &std::path::Path| {
        let Some(parent) = run_dir.parent() else {
            return false;
        };
        parent == tasks || (canonical.is_some() && std::fs::canonicalize(parent).ok() == canonical)
    };
    let entries = match std::fs::read_dir("/proc") {
        Ok(entries) => entries,
        Err(e) => {
            tracing::error!(error = %e, "cannot list /proc to find live workers");
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = read_cmdline(pid) else {
            continue;
        };
        if let Some(cmdline) = worker_cmdline::parse(&cmdline) {
            if of_this_home(&cmdline.run_dir) {
                found.push(launcher::LiveWorker { pid, cmdline });
            }
        }
    }
    found
}

/// A process's command line, at most 64 KiB of it: a worker's is far shorter.
fn read_cmdline(pid: u32) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    File::open(format!("/proc/{pid}/cmdline"))?
        .take(64 << 10)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Whether a live worker holds the run's lock (without waiting). A lock the workload deleted
/// or replaced (a link, a FIFO) proves nothing either way: the worker's own process is asked
/// instead ([`worker_lives`]).
fn worker_alive(dir: &RunDir) -> bool {
    match open_lock(dir) {
        Ok(file) => flock(&file, libc::LOCK_SH | libc::LOCK_NB).is_err(),
        Err(e) if lock_gone_or_replaced(&e) => worker_lives(dir),
        Err(_) => false,
    }
}

/// Whether `runner.lock` is missing, or something else stands in its place.
fn lock_gone_or_replaced(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || lock_replaced(e)
}

/// Whether a worker of the run in `dir` still runs, asked of the process table: a process
/// whose command line is this run's worker (`homebased_shared::worker_cmdline`, which the
/// workload cannot rewrite), or the process `worker.json` names. Only where the lock cannot
/// tell (the workload deleted or replaced it): `worker.json` is the workload's to rewrite,
/// so it can add a live worker, never take one away.
fn worker_lives(dir: &RunDir) -> bool {
    let root = dir.root();
    let named = root.parent().is_some_and(|tasks| {
        live_workers_in(tasks)
            .iter()
            .any(|worker| worker.cmdline.run_dir.file_name() == root.file_name())
    });
    named || worker_process_lives(dir)
}

/// Whether `runner.lock` was refused because something else stands in its place.
fn lock_replaced(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP) || e.kind() == io::ErrorKind::InvalidData
}

/// Whether the worker named in `worker.json` still runs, by `(pid, start time)`: a reused
/// pid is not it.
fn worker_process_lives(dir: &RunDir) -> bool {
    matches!(dir.read_worker(), Ok(Some(record)) if process::is_same_process(record.worker))
}

/// `runner.lock` for a look at its lock: not through a link, and without waiting on a FIFO
/// the workload put there (the core thread asks [`worker_alive`]).
/// Only a regular file: a FIFO or a device put there would take any lock at once, and pass
/// a live worker for gone.
fn open_lock(dir: &RunDir) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.runner_lock())?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "runner.lock is not a regular file",
        ));
    }
    Ok(file)
}

/// Watches a worker: a thread blocks on `runner.lock` and, once granted (the worker is gone),
/// reaps it if it is our child and tells the observer.
fn watch(observer: Observer, dir: RunDir, task: TaskId, child: Option<spawn::Detached>) {
    let spawned = std::thread::Builder::new()
        .name(format!("watch-{task}"))
        .spawn(move || {
            // Blocks until every holder (the worker) has exited. Only a granted lock proves
            // the worker gone: an error (no descriptor left, say) is retried, never taken for
            // a lost worker, since that would clean up after a live run.
            loop {
                let waited = open_lock(&dir).and_then(|file| flock(&file, libc::LOCK_SH));
                match waited {
                    Ok(()) => break,
                    // The workload deleted or replaced the lock: wait on the worker's process
                    // instead, found by its command line (a missing lock is no proof that
                    // the worker is gone: the worker holds the deleted file's lock).
                    Err(e) if lock_gone_or_replaced(&e) => {
                        tracing::warn!(%task, error = %e, "runner.lock is gone or replaced; watching the worker's process");
                        while worker_lives(&dir) {
                            std::thread::sleep(std::time::Duration::from_secs(1));
                        }
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(%task, error = %e, "cannot wait on runner.lock; retrying");
                        std::thread::sleep(std::time::Duration::from_secs(1));
                    }
                }
            }
            if let Some(mut child) = child {
                let _ = child.wait();
            }
            observer(WorkerEvent::WorkerGone { task });
        });
    if let Err(e) = spawned {
        tracing::error!(%task, error = %e, "cannot start a run watcher; the safety tick will notice");
    }
}

/// Signals the worker of a run, only if the pid in `worker.json` still names the same
/// process (a reused pid is never hit).
fn signal_worker(dir: &RunDir, signal: Signal) {
    let Ok(Some(record)) = dir.read_worker() else {
        return;
    };
    let id = record.worker;
    if process::is_same_process(id) {
        if let Err(e) = kill(Pid::from_raw(id.pid as i32), signal) {
            tracing::debug!(pid = id.pid, error = %e, "worker signal not delivered");
        }
    }
}

/// Cleans up after a lost worker on a thread of its own, writes `cleanup.json` as attempt
/// `lost.attempt`, and tells the observer.
fn clean_up_lost(observer: Observer, dir: RunDir, task: TaskId, lost: LostCleanup, clock: Clock) {
    let spawned = std::thread::Builder::new()
        .name(format!("cleanup-{task}"))
        .spawn(move || {
            let outcome = lost_cleanup::clean(&dir, task, &lost);
            // The space a killed worker held for its records is no use to anyone now.
            let _ = std::fs::remove_file(dir.reserve());
            let record = homebased_shared::rundir::CleanupRecord {
                attempt: lost.attempt,
                outcome,
                finished_at: clock.now_ms(),
            };
            if let Err(e) = write_json_atomic(&dir.cleanup_json(), &record) {
                tracing::error!(%task, error = %e, "cannot write cleanup.json");
            }
            observer(WorkerEvent::LostCleanupDone { task });
        });
    if let Err(e) = spawned {
        tracing::error!(%task, error = %e, "cannot start the cleanup of a lost worker");
    }
}
