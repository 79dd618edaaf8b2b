//! `homebased history prune`: removes finished jobs that ended more than `--before` ago,
//! with their runs, run directories and delivered events (the rule of `crate::history`), or
//! with `--dry-run` lists what it would remove and changes nothing.

use super::Printed;
use crate::client::Client;
use clap::Subcommand;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::wire::{PruneRequest, PruneResult};

#[derive(Subcommand, Debug)]
pub enum HistoryCommand {
    /// Remove finished jobs that ended more than DURATION ago, with their runs, run
    /// directories and delivered events. A job with an event not yet delivered, or whose run
    /// still holds a lane (Attention), is kept; queued and active jobs are never touched.
    /// Prints what it removed; `[history] keep` in the config does the same by itself.
    Prune {
        /// How long ago a job must have ended: `90d`, `12h`, `30m`; `0s` is every finished job.
        #[arg(long, value_name = "DURATION")]
        before: String,
        /// Print what would be removed; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

const PRUNE_BOUND: std::time::Duration = std::time::Duration::from_secs(600);

pub async fn run(cmd: HistoryCommand, client: &Client) -> ApiResult<Printed> {
    match cmd {
        HistoryCommand::Prune { before, dry_run } => {
            let age = parse_age(&before)?;
            // A prune of a long history removes many directories: it may take longer than a
            // request's usual bound, but not for ever.
            let result = client
                .clone()
                .with_deadline(PRUNE_BOUND)
                .prune(&PruneRequest {
                    older_than_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
                    dry_run,
                })
                .await?;
            let ids = result.job_ids.iter().map(|j| j.to_string()).collect();
            let human = human(&result, &before);
            Printed::answer(&result, ids, human)
        }
    }
}

/// `--before`: a humantime duration, zero allowed (every finished job).
fn parse_age(text: &str) -> ApiResult<std::time::Duration> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        ApiError::usage(format!(
            "--before {text:?} is not a duration like 90d, 12h or 30m ({e})"
        ))
        .with_input(serde_json::json!({ "before": text }))
    })
}

fn human(r: &PruneResult, before: &str) -> String {
    let verb = if r.dry_run { "would remove" } else { "removed" };
    let mut text = format!(
        "{verb} {} finished jobs (ended more than {before} ago), {} runs, {} run directories, \
         {} events, {} stored request results",
        r.jobs, r.runs, r.run_dirs, r.events, r.operations
    );
    let kept = [
        (r.kept_undelivered, "with events not yet delivered"),
        (r.kept_holding, "whose run still holds a lane"),
        (
            r.kept_undeletable,
            "whose run directory cannot be removed (see daemon.log)",
        ),
    ];
    for (n, why) in kept {
        if n > 0 {
            text.push_str(&format!("\nkept {n} {why}"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_takes_durations_and_zero_and_refuses_the_rest() {
        assert_eq!(parse_age("90d").unwrap().as_secs(), 90 * 86_400);
        assert!(parse_age("0s").unwrap().is_zero());
        let err = parse_age("last week").unwrap_err();
        assert_eq!(err.code, homebased_shared::error::ErrorCode::Usage);
    }
}
