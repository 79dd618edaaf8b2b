//! One attempt from start to end (DESIGN "The worker"): take the lock, read `run.json`,
//! write `worker.json`, spawn, follow the workload (stopping it on a request), write
//! `exit.json`, clean up, write `cleanup.json`, exit. Exiting releases `runner.lock`.
//!
//! An adopting worker (`--adopt`) takes the place of one that vanished while its container
//! ran: instead of spawning, it finds that container and follows it from where the vanished
//! worker was; the rest is the same. If there is no container left to follow it writes no
//! record and the daemon takes the run for lost.

use crate::cleanup;
use crate::cli::Args;
use crate::clock::now_ms;
use crate::lock;
use crate::log::WorkerLog;
use crate::output_cap::OutputCap;
use crate::reap::Reaper;
use crate::records::Records;
use crate::signals::Signals;
use crate::stop;
use crate::workload::container::AdoptError;
use crate::workload::{self, StartError};
use homebased_shared::ids::JobId;
use homebased_shared::process;
use homebased_shared::rundir::{
    CleanupOutcome, CleanupRecord, ExitReason, ExitRecord, GroupState, ProcessIdentity, RunDir,
    RunSpec, StartStamps, WorkerRecord,
};
use homebased_shared::sweep::SweepKey;
use homebased_shared::time::now_us;
use homebased_shared::worker_cmdline;
use nix::errno::Errno;
use nix::sys::prctl;
use nix::unistd::{getsid, setsid, Pid};
use std::io;

/// The attempt ran to its end and every record was written, whatever the workload did.
pub const EXIT_OK: u8 = 0;
/// The worker itself failed: no lock, no `run.json`, no identity of its own. (A record it
/// cannot write is not a failure: it is retried until it lands, see [`crate::records`].)
pub const EXIT_FAILED: u8 = 1;

/// Runs the attempt described by `args`; returns the worker's exit status. `signals` is
/// installed by the caller before anything else, so a stop that arrives during start-up is
/// kept, not fatal. `began` is when `main` began (microseconds, the first start stamp).
pub fn run(args: Args, signals: io::Result<Signals>, began: i64) -> u8 {
    // Before any reading of it: the log's first note is stamped by it.
    crate::clock::start(args.clock);
    let mut stamps = StartStamps {
        spawned: args.spawned_at,
        main: began,
        ..StartStamps::default()
    };
    let title = args.retitle.then(|| args.argv());
    let named = (args.job, args.lanes.clone());
    let dir = RunDir::new(args.run_dir);
    let log = WorkerLog::new(dir.worker_log());
    // Until the lock is ours nothing in the run directory is ours to write: another worker
    // may own it.
    let held = match args.lock_fd {
        Some(fd) => lock::adopt(fd, &dir.runner_lock()),
        None => lock::take(&dir.runner_lock()),
    };
    let _lock = match held {
        Ok(lock) => lock,
        Err(message) => {
            log.note(message);
            return EXIT_FAILED;
        }
    };
    become_session_leader(&log);
    // Before the workload exists: afterwards nothing of the key is left in a descriptor.
    let sweep_key = args.sweep_key_fd.and_then(|fd| take_sweep_key(fd, &log));
    let signals = match signals {
        Ok(signals) => signals,
        Err(e) => {
            let mut records = Records::new(dir, None, log.clone());
            return fail(
                &mut records,
                &log,
                format!("cannot install signal handling: {e}"),
            );
        }
    };
    let run = match dir.read_run() {
        Ok(run) => run,
        Err(e) => {
            let message = format!("cannot read {}: {e}", dir.run_json().display());
            return fail(&mut Records::new(dir, None, log.clone()), &log, message);
        }
    };
    stamps.run_read = now_us();
    signals.set_term_stops(run.stop_on_term);
    if let Err(message) = check_names(&run, named.0, named.1.as_deref()) {
        return fail(&mut Records::new(dir, None, log.clone()), &log, message);
    }
    let records = Records::new(dir.clone(), Some(&run), log.clone());
    // Only a reserve left by an earlier worker of the run is taken over here; a new one is
    // set aside once the workload runs (`Records::set_aside`).
    stamps.reserve = now_us();
    let attempt = Attempt {
        dir,
        run,
        records,
        signals,
        log,
        reaper: Reaper::new(),
        stamps,
        title,
        sweep_key,
    };
    if args.adopt {
        attempt.adopt()
    } else {
        attempt.run()
    }
}

/// Whether `run.json` names the job and lanes the daemon put in this worker's command line
/// (`--job`, `--lanes`): the command line is what a daemon that lost the run trusts about it
/// (`homebased_shared::worker_cmdline`), so a worker never runs a run it misnames.
fn check_names(run: &RunSpec, job: Option<JobId>, lanes: Option<&str>) -> Result<(), String> {
    if let Some(job) = job.filter(|job| *job != run.job) {
        return Err(format!(
            "run.json names job {}, the command line job {job}",
            run.job
        ));
    }
    let names: Vec<&str> = run.lanes.iter().map(|lane| lane.name.as_str()).collect();
    match lanes.map(worker_cmdline::split_lanes) {
        Some(given) if given != names => Err(format!(
            "run.json names lanes {}, the command line {}",
            names.join(","),
            given.join(",")
        )),
        _ => Ok(()),
    }
}

/// The key the daemon handed on descriptor `fd` (`--sweep-key-fd`); without it the sweep
/// reads the table alone, and the log says why.
fn take_sweep_key(fd: std::os::fd::RawFd, log: &WorkerLog) -> Option<SweepKey> {
    // SAFETY: the daemon placed this descriptor for this process alone (`--sweep-key-fd`),
    // and nothing else in it opens or closes that number.
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    match SweepKey::take_from(owned) {
        Ok(key) => Some(key),
        Err(e) => {
            log.note(format!(
                "sweep: no key on descriptor {fd} ({e}); scans will not be shared"
            ));
            None
        }
    }
}

/// The daemon already starts the worker in a new session; this covers a worker started any
/// other way, so that no terminal or caller's group signal reaches it or the workload.
fn become_session_leader(log: &WorkerLog) {
    if getsid(None) == Ok(Pid::this()) {
        return;
    }
    // EPERM: already a group leader, so a new session cannot be made; nothing to fix here.
    if let Err(e) = setsid() {
        if e != Errno::EPERM {
            log.note(format!("cannot start a new session: {e}"));
        }
    }
}

struct Attempt {
    dir: RunDir,
    run: RunSpec,
    records: Records,
    signals: Signals,
    log: WorkerLog,
    reaper: Reaper,
    stamps: StartStamps,
    /// The arguments to show in place of `--standby` before the workload starts (`crate::title`).
    title: Option<Vec<std::ffi::OsString>>,
    /// The daemon's key for the sweep's shared readings (`--sweep-key-fd`).
    sweep_key: Option<SweepKey>,
}

impl Attempt {
    fn run(mut self) -> u8 {
        let worker = match process::identity(std::process::id()) {
            Ok(identity) => identity,
            Err(e) => return self.fail(format!("cannot read the worker's own identity: {e}")),
        };
        // Before the spawn: to the daemon, "worker.json exists" means "the workload may have
        // started", so such a run is never taken for one that never ran.
        self.records.worker(&WorkerRecord {
            worker,
            child: None,
            stamps: None,
        });
        self.stamps.recorded = now_us();
        // Orphaned descendants of the workload come back to this process, so that they can
        // be reaped and never escape to init with their zombie counted in the group.
        if let Err(e) = prctl::set_child_subreaper(true) {
            return self.fail(format!("cannot become a child subreaper: {e}"));
        }
        if let Some(source) = stop::pending(&self.signals, &self.dir) {
            self.log.note(format!(
                "stop requested by {source} before the workload started; not starting it"
            ));
            return finish_without_child(
                &mut self.records,
                &self.log,
                ExitReason::Cancelled,
                EXIT_OK,
            );
        }
        // Before the workload exists: from then on the run directory is the workload's to
        // rewrite, and this command line is what names the run's job and lanes.
        if let Some(title) = self.title.take() {
            if let Err(e) = crate::title::show(&title) {
                self.log.note(format!(
                    "cannot show the run in this worker's command line: {e}"
                ));
            }
        }
        self.stamps.workload = now_us();
        let running = match workload::start(&self.run, &self.dir) {
            Ok(running) => running,
            Err(StartError::Workload(message)) => {
                self.log
                    .note(format!("the workload did not start: {message}"));
                let reason = ExitReason::SpawnFailed { message };
                return finish_without_child(&mut self.records, &self.log, reason, EXIT_OK);
            }
            Err(StartError::Worker(message)) => return self.fail(message),
            Err(StartError::Container { message, removal }) => {
                self.log
                    .note(format!("the container did not start: {message}"));
                let reason = ExitReason::SpawnFailed { message };
                let group = GroupState::NoChildSpawned;
                write_exit(&mut self.records, reason, group, None);
                write_cleanup(&mut self.records, &self.log, removal);
                return EXIT_OK;
            }
        };
        // Off the start path: the workload is on its way, and the records its end needs
        // are still to come.
        self.records.set_aside();
        self.log.note(format!(
            "workload started as pid {}",
            running.child.process.pid
        ));
        let stamps = self.stamps;
        let cap = OutputCap::start(&self.dir, self.run.output_limit, &self.log);
        self.follow_to_the_end(worker, running, Some(stamps), cap)
    }

    /// Adopts the container a vanished worker of this run left, and follows it to its end.
    fn adopt(mut self) -> u8 {
        let worker = match process::identity(std::process::id()) {
            Ok(identity) => identity,
            Err(e) => {
                self.log
                    .note(format!("cannot read the worker's own identity: {e}"));
                return EXIT_FAILED;
            }
        };
        let previous = match self.dir.read_worker() {
            Ok(record) => record.and_then(|r| r.child),
            Err(e) => {
                self.log.note(format!("unreadable worker.json: {e}"));
                None
            }
        };
        self.records.set_aside();
        // Its own identity (so that the daemon signals this worker), the vanished worker's
        // child until this one has followers of its own.
        self.records.worker(&WorkerRecord {
            worker,
            child: previous.clone(),
            stamps: None,
        });
        if let Err(e) = prctl::set_child_subreaper(true) {
            self.log
                .note(format!("cannot become a child subreaper: {e}"));
            return EXIT_FAILED;
        }
        if !matches!(self.run.step, homebased_shared::spec::Step::Container(_)) {
            self.log
                .note("only a container step can be adopted; leaving the run to the daemon");
            return EXIT_FAILED;
        }
        match workload::container::adopt(&self.run, &self.dir, previous.as_ref()) {
            Ok(running) => {
                self.log.note(format!(
                    "following the adopted container with docker wait pid {}",
                    running.child.process.pid
                ));
                let cap = OutputCap::start(&self.dir, self.run.output_limit, &self.log);
                self.follow_to_the_end(worker, running, None, cap)
            }
            Err(AdoptError::Gone(message)) => {
                self.log.note(format!(
                    "nothing to adopt: {message}; the run is lost, the daemon cleans up"
                ));
                EXIT_FAILED
            }
            Err(AdoptError::Worker(message)) => {
                self.log.note(format!(
                    "cannot follow the adopted container: {message}; the daemon cleans up"
                ));
                EXIT_FAILED
            }
        }
    }

    /// From a started (or adopted) workload to `cleanup.json`: record the child, follow the
    /// workload (its output kept within its limit by `cap`), write `exit.json`, remove the container, clean up, write `cleanup.json`.
    fn follow_to_the_end(
        &mut self,
        worker: ProcessIdentity,
        mut running: workload::Running,
        stamps: Option<StartStamps>,
        cap: Option<OutputCap>,
    ) -> u8 {
        self.reaper.watch(running.child.process.pid);
        // Retried until it lands (the workload runs on meanwhile and is followed once it
        // has): the daemon holds any stop for a run it has not seen start, so nothing waits
        // on the worker here but the record itself.
        self.records.worker(&WorkerRecord {
            worker,
            child: Some(running.child.clone()),
            stamps,
        });

        let ended = workload::follow(
            &mut running,
            &mut self.reaper,
            &self.signals,
            &self.dir,
            &self.run.cleanup,
            &self.log,
        );
        self.log.note(format!("workload ended: {:?}", ended.reason));
        // The followers have copied the last of the output: the log is within its limit when
        // `exit.json` says the run ended.
        if let Some(cap) = cap {
            cap.finish();
        }
        // Orphans that already died must not keep the group looking inhabited.
        self.reaper.reap();
        let group = if running.group.is_empty() {
            GroupState::ConfirmedExited
        } else {
            GroupState::Unconfirmed
        };
        write_exit(&mut self.records, ended.reason, group, ended.container);

        // Before the sweep: the container's processes carry the run's marker.
        let removal = workload::remove_container(&running, &self.run.cleanup, &self.log);

        let outcome = cleanup::clean_up(
            Some(&running),
            &self.run,
            &mut self.reaper,
            &self.signals,
            &self.log,
            self.sweep_key.as_ref(),
        );
        // Both ran; an unconfirmed container is reported, anything else goes to worker.log.
        let outcome = if removal.is_clean() {
            outcome
        } else {
            if !outcome.is_clean() {
                self.log
                    .note(format!("cleanup did not finish clean: {outcome:?}"));
            }
            removal
        };
        write_cleanup(&mut self.records, &self.log, outcome);
        EXIT_OK
    }

    fn fail(&mut self, message: String) -> u8 {
        fail(&mut self.records, &self.log, message)
    }
}

/// The worker failed before any workload ran: say so in every record.
fn fail(records: &mut Records, log: &WorkerLog, message: String) -> u8 {
    log.note(&message);
    let reason = ExitReason::SpawnFailed { message };
    finish_without_child(records, log, reason, EXIT_FAILED)
}

fn finish_without_child(
    records: &mut Records,
    log: &WorkerLog,
    reason: ExitReason,
    status: u8,
) -> u8 {
    write_exit(records, reason, GroupState::NoChildSpawned, None);
    write_cleanup(records, log, CleanupOutcome::Clean);
    status
}

fn write_exit(
    records: &mut Records,
    reason: ExitReason,
    group: GroupState,
    container: Option<serde_json::Value>,
) {
    records.exit(&ExitRecord {
        reason,
        group,
        container,
        ended_at: now_ms(),
    });
}

fn write_cleanup(records: &mut Records, log: &WorkerLog, outcome: CleanupOutcome) {
    if !outcome.is_clean() {
        log.note(format!("cleanup did not finish clean: {outcome:?}"));
    }
    records.cleanup(&CleanupRecord {
        attempt: 1,
        outcome,
        finished_at: now_ms(),
    });
}
