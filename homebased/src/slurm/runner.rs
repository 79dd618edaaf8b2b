//! `homebased slurm run <job>`: the batch step of a spec run on Slurm. It runs the job's steps
//! in turn, each attempt under `homebased-worker` in a run directory of `<home>/slurm`, so the
//! workload sees what it sees on a homebased machine (`HOMEBASED_*`, the yield file, exit 75,
//! `output.log`, exit and cleanup records), on the GPUs Slurm selected for the job.
//!
//! Signals are Slurm's:
//! - `USR1` (`--signal=B:USR1@N` before the time limit, and at preemption where the cluster
//!   sets `SchedulerParameters=preempt_send_user_signal`) asks the running step to yield (a
//!   `yield`-mode job) or stops it to restart (a `restart`-mode job). When the run has ended,
//!   the runner requeues the Slurm job (`scontrol requeue`) and the next start resumes it.
//! - `TERM` (`scontrol requeue`, a preemption that requeues, `scancel`) reaches every process
//!   of the job. The runner asks a `yield` run to yield as on `USR1` (the workload, which got
//!   the TERM too, saves and exits 75 within Slurm's `KillWait`) and stops any other; the
//!   worker, told `stop_on_term: false`, leaves the workload to answer. Slurm has already
//!   decided whether the job comes back, so the runner only records where it was
//!   (`plan::after_slurm_term`).
//!
//! How a run's end moves the job is the daemon's own rule, `core::classify`.

use super::records::{slurm_home, Ended, JobFiles, Progress, RunEntry};
use crate::core::classify::{classify, JobNext, RunEnd};
use homebased_shared::config::Config;
use homebased_shared::home::Home;
use homebased_shared::ids::{JobId, TaskId};
use homebased_shared::queue::{PreemptMode, RunStatus, StopCause};
use homebased_shared::rundir::{
    read_json, read_json_if_exists, write_json_atomic, write_json_replace, ProtectedProcess,
    RunDir, RunLane, RunSpec, StopRequest,
};
use homebased_shared::spec::JobSpec;
use homebased_shared::worker_cmdline;
use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

/// The exit status when Slurm's `TERM` ended the run (as a shell reports a TERM).
const EXIT_TERMINATED: i32 = 128 + 15;

/// A run without a `time_limit` is never stopped by the runner's clock (a year, as tokio
/// counts far enough).
const FOREVER: u64 = 365 * 86_400;

/// Runs the job to its end, or to the point where it waits for its next allocation; answers
/// the batch step's exit status. Every line goes to the batch step's output (`slurm.out`).
pub fn run(home: &Home, job: JobId, config: &Config) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            say(&format!("cannot start: {e}"));
            return 1;
        }
    };
    match Runner::open(home, job, config) {
        Ok(mut runner) => runtime.block_on(runner.run()),
        Err(e) => {
            say(&e);
            1
        }
    }
}

fn say(line: &str) {
    eprintln!("homebased slurm: {line}");
}

struct Runner {
    slurm: Home,
    job: JobId,
    files: JobFiles,
    spec: JobSpec,
    progress: Progress,
    lanes: Vec<RunLane>,
    config: Config,
    restart: u32,
}

impl Runner {
    fn open(home: &Home, job: JobId, config: &Config) -> Result<Runner, String> {
        let slurm = slurm_home(home);
        let files = JobFiles::of(&slurm, job);
        let spec: JobSpec = read_json(&files.spec())
            .map_err(|e| format!("cannot read {}: {e}", files.spec().display()))?;
        let progress: Progress = read_json_if_exists(&files.progress())
            .map_err(|e| format!("cannot read {}: {e}", files.progress().display()))?
            .unwrap_or_default();
        let cvd = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let lanes = super::plan::lanes_from(cvd.as_deref(), spec.gpus);
        let restart = std::env::var("SLURM_RESTART_COUNT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut runner = Runner {
            slurm,
            job,
            files,
            spec,
            progress,
            lanes: Vec::new(),
            config: config.clone(),
            restart,
        };
        match lanes {
            Ok(lanes) => runner.lanes = lanes,
            Err(e) => {
                runner.progress.ended = Some(Ended::Failed);
                runner.save()?;
                return Err(e);
            }
        }
        Ok(runner)
    }

    fn save(&self) -> Result<(), String> {
        write_json_atomic(&self.files.progress(), &self.progress)
            .map_err(|e| format!("cannot write {}: {e}", self.files.progress().display()))
    }

    async fn run(&mut self) -> i32 {
        match self.steps().await {
            Ok(code) => code,
            Err(e) => {
                say(&e);
                1
            }
        }
    }

    async fn steps(&mut self) -> Result<i32, String> {
        if let Some(ended) = self.progress.ended {
            say(&format!(
                "job {} has ended ({ended:?}); nothing to run",
                self.job
            ));
            return Ok(0);
        }
        // A run that an earlier start of this Slurm job left running was ended under it
        // (the node failed, a KILL): nothing recorded how. Slurm started the job again, so
        // its step runs again, resuming if a checkpoint was known to exist.
        for entry in &mut self.progress.runs {
            if entry.status == RunStatus::Running {
                entry.status = RunStatus::Lost;
            }
        }
        let mut usr1 = signal(SignalKind::user_defined1()).map_err(|e| e.to_string())?;
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        loop {
            let step_index = self.progress.step;
            let Some(step) = self.spec.steps.get(step_index as usize).cloned() else {
                return Err(format!("the spec has no step {step_index}"));
            };
            let last = step_index as usize + 1 == self.spec.steps.len();
            let resumed = self.progress.resume;
            let (dir, task) = self.start_run(step_index, &step)?;
            let names: Vec<&str> = self.lanes.iter().map(|l| l.name.as_str()).collect();
            let mut worker = tokio::process::Command::new(crate::supervisor::worker_binary())
                .arg(dir.root())
                .arg(worker_cmdline::JOB_FLAG)
                .arg(self.job.to_string())
                .arg(worker_cmdline::LANES_FLAG)
                .arg(worker_cmdline::join_lanes(&names))
                .stdin(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start homebased-worker: {e}"))?;
            say(&format!(
                "run {} (task {task}) of step {step_index} on {}{}",
                self.progress.runs.len(),
                names.join(","),
                if resumed { ", resuming" } else { "" }
            ));
            let mut cause: Option<StopCause> = None;
            let mut terminated = false;
            // Each run has its own limit (SPEC 4), kept here rather than by Slurm, whose
            // `--time` covers the whole allocation (`plan::allocation_time`).
            let limit = self.spec.time_limit;
            let deadline = tokio::time::sleep(limit.unwrap_or(Duration::from_secs(FOREVER)));
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    _ = worker.wait() => break,
                    _ = usr1.recv() => {
                        if cause.is_none() {
                            let asked = self.ask_to_end(&dir, worker.id());
                            say(&format!("Slurm's notice: asked the run to {}", asked.as_str()));
                            cause = Some(asked);
                        }
                    }
                    // Slurm is ending the job (a requeue, a preemption, scancel) and has sent
                    // TERM to the workload too: a `yield` run gets the yield file (a workload
                    // that watches only the file sees it there) and the rest of KillWait to
                    // save; any other run is stopped. A run the notice already asked is left
                    // to answer that; only the time limit upgrades a stop, as in the core.
                    _ = term.recv() => {
                        terminated = true;
                        if cause.is_none() {
                            let asked = self.ask_to_end(&dir, worker.id());
                            say(&format!("Slurm's TERM: asked the run to {}", asked.as_str()));
                            cause = Some(asked);
                        }
                    }
                    _ = &mut deadline, if limit.is_some() && cause < Some(StopCause::TimeLimit) => {
                        stop(&dir, worker.id(), StopCause::TimeLimit);
                        say("the run reached its time_limit: stopping it; the job fails");
                        cause = Some(StopCause::TimeLimit);
                    }
                }
            }
            let end = match dir.read_exit() {
                Ok(Some(exit)) => RunEnd::Recorded(exit.reason),
                _ => RunEnd::Lost,
            };
            let (end, cause) = if terminated {
                super::plan::after_slurm_term(end, cause, &step.yield_codes())
            } else {
                (end, cause)
            };
            let outcome = classify(&end, cause, last, resumed, &step.yield_codes());
            if let Some(entry) = self.progress.runs.last_mut() {
                entry.status = outcome.run;
                entry.stop_cause = cause;
            }
            say(&format!("run ended: {}", outcome.run.as_str()));
            match outcome.job {
                JobNext::Succeeded => {
                    self.progress.ended = Some(Ended::Succeeded);
                    self.save()?;
                    return Ok(0);
                }
                JobNext::NextStep => {
                    self.progress.step += 1;
                    self.progress.resume = false;
                    self.save()?;
                    // The allocation is ending: the next step waits for the next one.
                    if cause.is_some() {
                        return Ok(self.requeue(terminated));
                    }
                }
                JobNext::Requeue { resume } => {
                    self.progress.resume = resume;
                    self.save()?;
                    return Ok(self.requeue(terminated));
                }
                JobNext::Failed => {
                    self.progress.ended = Some(Ended::Failed);
                    self.save()?;
                    return Ok(1);
                }
                JobNext::Cancelled => {
                    self.progress.ended = Some(Ended::Cancelled);
                    self.save()?;
                    return Ok(1);
                }
            }
        }
    }

    /// Makes the run directory of the next attempt and records the run as started.
    fn start_run(
        &mut self,
        step_index: u32,
        step: &homebased_shared::spec::Step,
    ) -> Result<(RunDir, TaskId), String> {
        let task = TaskId::new();
        let run_number = u32::try_from(self.progress.runs.len() + 1).unwrap_or(u32::MAX);
        let run = RunSpec {
            task,
            job: self.job,
            run_number,
            step_index,
            resume: self.progress.resume,
            step: step.clone(),
            cwd: self.spec.cwd.clone(),
            // The batch step's environment, which Slurm exported from the submitter's
            // (`--export=ALL`) with its own SLURM_* and CUDA_VISIBLE_DEVICES.
            path: None,
            user_home: None,
            environment: None,
            lanes: self.lanes.clone(),
            home: self.slurm.root().to_path_buf(),
            job_dir: self.slurm.job_state_dir(self.job),
            // No daemon listens there; the worker's pokes go nowhere.
            poke_socket: self.slurm.poke_socket(),
            protected_pids: vec![protected_self()],
            cleanup: self.config.resource.cleanup,
            output_limit: self.config.resource.output_limit,
            time_limit: self.spec.time_limit,
            stamps: None,
            // Slurm TERMs every process of the job at a requeue or a preemption: the
            // worker must not take that for this runner's stop, which `control/stop` is.
            stop_on_term: false,
        };
        let dir = RunDir::new(self.slurm.task_dir(task));
        let private = |path: &std::path::Path| {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))
        };
        private(&dir.control_dir())?;
        private(&run.job_dir)?;
        write_json_replace(&dir.run_json(), &run)
            .map_err(|e| format!("cannot write {}: {e}", dir.run_json().display()))?;
        self.progress.runs.push(RunEntry {
            task,
            run_number,
            step: step_index,
            resume: run.resume,
            slurm_restart: self.restart,
            status: RunStatus::Running,
            stop_cause: None,
        });
        self.save()?;
        Ok((dir, task))
    }

    /// Slurm's notice: a `yield` job's run is asked to checkpoint and exit 75; any other is
    /// stopped to restart, as the daemon's drain does.
    fn ask_to_end(&self, dir: &RunDir, worker: Option<u32>) -> StopCause {
        if self.spec.preempt.mode == PreemptMode::Yield {
            let made = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(dir.yield_file());
            match made {
                Ok(_) => return StopCause::Yield,
                Err(e) => say(&format!(
                    "cannot write the yield file ({e}); stopping instead"
                )),
            }
        }
        stop(dir, worker, StopCause::Restart);
        StopCause::Restart
    }

    /// After a yield or a stop: the job comes back in its next allocation. Under Slurm's
    /// TERM, Slurm is already ending (and perhaps requeueing) the job itself.
    fn requeue(&self, terminated: bool) -> i32 {
        if terminated {
            return EXIT_TERMINATED;
        }
        let Ok(id) = std::env::var("SLURM_JOB_ID") else {
            say("not in a Slurm job (no SLURM_JOB_ID): nothing to requeue");
            return 1;
        };
        match std::process::Command::new("scontrol")
            .args(["requeue", &id])
            .status()
        {
            Ok(status) if status.success() => {
                say(&format!("requeued Slurm job {id}: the next start resumes"));
                0
            }
            Ok(status) => {
                say(&format!("scontrol requeue {id} failed ({status})"));
                1
            }
            Err(e) => {
                say(&format!("cannot run scontrol: {e}"));
                1
            }
        }
    }
}

/// The durable stop request, then `TERM` to the worker, which stops the workload's group
/// (`core::stop` does the same for the daemon).
fn stop(dir: &RunDir, worker: Option<u32>, cause: StopCause) {
    let request = StopRequest { cause };
    if let Err(e) = write_json_atomic(&dir.stop_file(), &request) {
        say(&format!("cannot write the stop request: {e}"));
    }
    if let Some(pid) = worker.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// This process, which the run's cleanup must never signal.
fn protected_self() -> ProtectedProcess {
    let pid = std::process::id();
    match homebased_shared::process::identity(pid) {
        Ok(identity) => ProtectedProcess::Identity(identity),
        Err(_) => ProtectedProcess::Pid(pid),
    }
}
