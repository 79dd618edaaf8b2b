//! A Slurm job's state in the words of `job show` (SPEC section 4): what Slurm says
//! (`squeue`, then `sacct` where accounting is kept) combined with the runner's
//! `progress.json`. Pure functions.
//!
//! The runner's record of an end wins: it knows a yield from a failure, which Slurm's exit
//! code does not. While it has none, Slurm's state decides: pending or requeued is `queued`
//! (with the runner's `resume`), running is `active`, and Slurm's ends map to `succeeded`,
//! `failed` (a time limit, a node failure, a kill) or `cancelled` (`scancel`, and a
//! dependency that can never be met). A job that Slurm no longer lists and the runner never
//! ended is `unknown`: Slurm forgets finished jobs after `MinJobAge` without accounting.

use super::records::{Ended, Progress};
use serde::Serialize;

/// One line of `squeue --noheader --states=all -o '%T|%r'` or of
/// `sacct --noheader --parsable2 -X -o State,Reason`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlurmView {
    /// `PENDING`, `RUNNING`, `COMPLETED`, `CANCELLED`, ... (`sacct`'s `CANCELLED by 0` is
    /// cut to its first word).
    pub state: String,
    /// Why it pends (`Dependency`, `BeginTime`, `Resources`, `DependencyNeverSatisfied`,
    /// ...); `None` for Slurm's `None`.
    pub reason: Option<String>,
}

/// The first line of a listing as [`SlurmView`], or `None` when there is none.
pub fn parse_view(listing: &str) -> Option<SlurmView> {
    let line = listing.lines().map(str::trim).find(|l| !l.is_empty())?;
    let (state, reason) = line.split_once('|').unwrap_or((line, ""));
    let state = state.split_whitespace().next()?.to_string();
    let reason = Some(reason.trim())
        .filter(|r| !r.is_empty() && *r != "None" && *r != "(null)")
        .map(str::to_owned);
    Some(SlurmView { state, reason })
}

/// The job's state as `job show` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Shown {
    Queued { resume: bool },
    Active,
    Succeeded,
    Failed,
    Cancelled,
    Unknown,
}

pub fn shown(progress: &Progress, slurm: Option<&SlurmView>) -> Shown {
    match progress.ended {
        Some(Ended::Succeeded) => return Shown::Succeeded,
        Some(Ended::Failed) => return Shown::Failed,
        Some(Ended::Cancelled) => return Shown::Cancelled,
        None => {}
    }
    let Some(view) = slurm else {
        return Shown::Unknown;
    };
    let queued = Shown::Queued {
        resume: progress.resume,
    };
    match view.state.as_str() {
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" | "SUSPENDED"
        | "STOPPED" => queued,
        "RUNNING" | "CONFIGURING" | "COMPLETING" | "RESIZING" | "SIGNALING" | "STAGE_OUT" => {
            Shown::Active
        }
        "COMPLETED" => Shown::Succeeded,
        "CANCELLED" | "REVOKED" => Shown::Cancelled,
        // FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, PREEMPTED (not
        // requeued), and any state a later Slurm adds: the job did not finish its work.
        _ => Shown::Failed,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn view(state: &str) -> SlurmView {
        SlurmView {
            state: state.into(),
            reason: None,
        }
    }

    #[test]
    fn listings_parse_with_and_without_a_reason() {
        assert_eq!(
            parse_view("PENDING|Dependency\n"),
            Some(SlurmView {
                state: "PENDING".into(),
                reason: Some("Dependency".into())
            })
        );
        assert_eq!(parse_view("RUNNING|None"), Some(view("RUNNING")));
        assert_eq!(parse_view("CANCELLED by 0|"), Some(view("CANCELLED")));
        assert_eq!(parse_view("\n  \n"), None);
    }

    #[test]
    fn the_runners_end_wins_over_slurms_exit() {
        // A job whose last run yielded and was requeued by the runner reads as queued with
        // resume, though the batch script exited 0.
        let mut progress = Progress {
            resume: true,
            ..Progress::default()
        };
        assert_eq!(
            shown(&progress, Some(&view("PENDING"))),
            Shown::Queued { resume: true }
        );
        progress.ended = Some(Ended::Failed);
        assert_eq!(shown(&progress, Some(&view("COMPLETED"))), Shown::Failed);
        assert_eq!(shown(&progress, None), Shown::Failed);
    }

    #[test]
    fn slurms_states_map_to_job_show_states() {
        let p = Progress::default();
        for (state, want) in [
            ("PENDING", Shown::Queued { resume: false }),
            ("REQUEUED", Shown::Queued { resume: false }),
            ("RUNNING", Shown::Active),
            ("COMPLETING", Shown::Active),
            ("COMPLETED", Shown::Succeeded),
            ("CANCELLED", Shown::Cancelled),
            ("TIMEOUT", Shown::Failed),
            ("NODE_FAIL", Shown::Failed),
            ("OUT_OF_MEMORY", Shown::Failed),
            ("FAILED", Shown::Failed),
        ] {
            assert_eq!(shown(&p, Some(&view(state))), want, "{state}");
        }
        assert_eq!(shown(&p, None), Shown::Unknown);
    }
}
