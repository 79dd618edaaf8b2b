//! The files of a spec run on Slurm, under `<home>/slurm/`, which is laid out as a home of
//! its own so that runs keep the run directory contract: `tasks/<task>/` are run
//! directories, `jobs/<job>/state/` is `HOMEBASED_JOB_DIR`. Beside the state, each job has
//! `spec.json` (the canonical spec), `submission.json` (its Slurm job id), `progress.json`
//! (the runner's bookkeeping: step, resume, runs, end), `batch.sh` and `slurm.out`.
//!
//! A home of its own, not the daemon's: a daemon on the same home would meet these run
//! directories with no run in its store. `<home>` must be on storage the nodes see.
//!
//! `progress.json` is in the workload's reach (its `HOMEBASED_HOME`), like everything of the
//! job's own: a workload that rewrites it changes only how its own job is reported and
//! resumed, never another job or a lane, which Slurm owns here.

use homebased_shared::home::Home;
use homebased_shared::ids::{JobId, TaskId};
use homebased_shared::queue::{RunStatus, StopCause};
use homebased_shared::time::Millis;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `<home>/slurm`, as a home.
pub fn slurm_home(home: &Home) -> Home {
    Home::at(home.root().join("slurm"))
}

/// The files of one job.
#[derive(Debug, Clone)]
pub struct JobFiles {
    dir: PathBuf,
}

impl JobFiles {
    pub fn of(slurm: &Home, job: JobId) -> JobFiles {
        JobFiles {
            dir: slurm.job_dir(job),
        }
    }
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
    pub fn spec(&self) -> PathBuf {
        self.dir.join("spec.json")
    }
    pub fn submission(&self) -> PathBuf {
        self.dir.join("submission.json")
    }
    pub fn progress(&self) -> PathBuf {
        self.dir.join("progress.json")
    }
    pub fn batch_script(&self) -> PathBuf {
        self.dir.join("batch.sh")
    }
    pub fn slurm_out(&self) -> PathBuf {
        self.dir.join("slurm.out")
    }
}

/// `submission.json`: written once `sbatch` answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmissionRecord {
    pub job: JobId,
    pub slurm_job_id: String,
    #[serde(with = "homebased_shared::time::serde_rfc3339")]
    pub submitted_at: Millis,
    /// The spec's `after`, each with the Slurm job id it was submitted as.
    pub after: Vec<Dependency>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    pub job: JobId,
    pub slurm_job_id: String,
}

/// `progress.json`: where the job is, kept by the runner across requeues.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    /// The step the next run starts (or the running one runs).
    pub step: u32,
    /// The next run resumes from a checkpoint (`HOMEBASED_RESUME`).
    pub resume: bool,
    pub runs: Vec<RunEntry>,
    /// How the job ended, once it did.
    pub ended: Option<Ended>,
}

/// One run, as the runner started it and, once it ended, classified it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunEntry {
    pub task: TaskId,
    pub run_number: u32,
    pub step: u32,
    pub resume: bool,
    /// Slurm's `SLURM_RESTART_COUNT` when it started: which start of the Slurm job ran it.
    pub slurm_restart: u32,
    /// `running` until it ended.
    pub status: RunStatus,
    pub stop_cause: Option<StopCause>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    Succeeded,
    Failed,
    Cancelled,
}
