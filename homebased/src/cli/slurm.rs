//! `homebased slurm ...`: a job spec run on Slurm (`crate::slurm`). Needs no daemon.

use super::{load_config, parse_job, Printed};
use clap::Subcommand;
use homebased_shared::config::ConfigSource;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::home::Home;
use homebased_shared::ids::JobId;

#[derive(Subcommand, Debug)]
pub enum SlurmCommand {
    /// Submit a job spec to Slurm with sbatch: gpus -> --gres=gpu:N, time_limit -> --time,
    /// after -> --dependency=afterok. Its runs keep the run directory contract (HOMEBASED_*,
    /// the yield file, exit 75, output.log); Slurm's USR1 before the end or at preemption
    /// yields and requeues. Its files are under <home>/slurm, which the nodes must see.
    Submit {
        /// The spec file, or `-` for standard input.
        #[arg(long, value_name = "FILE|-")]
        spec: String,
        /// Your own job UUID.
        #[arg(long, value_name = "J")]
        job_id: Option<String>,
        /// Passed to sbatch after homebased's own options (repeatable), e.g.
        /// --sbatch-arg=--partition=gpu.
        #[arg(long = "sbatch-arg", value_name = "ARG", allow_hyphen_values = true)]
        sbatch_arg: Vec<String>,
        /// How long before the time limit Slurm sends USR1 (--signal=B:USR1@N), so that a
        /// yield-mode run checkpoints in time.
        #[arg(long, value_name = "DURATION", default_value = "2m")]
        notice: String,
    },
    /// A job submitted with `slurm submit`, in the shape of `resource job show`.
    Show { job: String },
    /// The batch step of a `slurm submit` job (its batch script runs this on the node).
    #[command(hide = true)]
    Run { job: String },
}

pub fn run(
    cmd: SlurmCommand,
    home: &Home,
    config: Option<&ConfigSource>,
) -> ApiResult<Option<Printed>> {
    match cmd {
        SlurmCommand::Submit {
            spec,
            job_id,
            sbatch_arg,
            notice,
        } => {
            let job = match job_id {
                None => JobId::new(),
                Some(t) => parse_job(&t)?,
            };
            let notice = humantime::parse_duration(&notice).map_err(|e| {
                ApiError::usage(format!("--notice {notice}: {e}"))
                    .with_input(serde_json::json!({ "notice": notice }))
            })?;
            let raw = super::read_spec_arg(&spec)?;
            let options = crate::slurm::SubmitOptions {
                job,
                sbatch_args: sbatch_arg,
                notice,
                config: config.filter(|c| c.explicit).map(|c| c.path.clone()),
            };
            let record = crate::slurm::submit(home, &raw, &options)?;
            let human = format!("submitted {job} to Slurm as job {}", record.slurm_job_id);
            Printed::answer(&record, vec![job.to_string()], human).map(Some)
        }
        SlurmCommand::Show { job } => {
            let job = parse_job(&job)?;
            let detail = crate::slurm::show(home, job)?;
            let human = crate::slurm::render(&detail);
            let ids = std::iter::once(job.to_string())
                .chain(
                    detail["runs"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| r["task"].as_str().map(str::to_owned)),
                )
                .collect();
            Printed::answer(&detail, ids, human).map(Some)
        }
        SlurmCommand::Run { job } => {
            let job = parse_job(&job)?;
            let config = load_config(config)?;
            std::process::exit(crate::slurm::runner::run(home, job, &config));
        }
    }
}
