//! A job spec in Slurm's terms (docs/SLURM.md, "A spec run on Slurm"): which fields map to
//! `sbatch` options, which are refused because Slurm has no form for them, the lanes a run
//! gets from the `CUDA_VISIBLE_DEVICES` Slurm sets for the job, and what Slurm's TERM makes
//! of a run's end. Pure functions.

use crate::core::classify::RunEnd;
use homebased_shared::error::{ApiError, ErrorCode};
use homebased_shared::queue::StopCause;
use homebased_shared::rundir::{ExitReason, RunLane};
use homebased_shared::spec::{JobSpec, YieldCodes};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// The signal Slurm sends the batch shell before the end (`--signal=B:USR1@N`) and, with
/// `SchedulerParameters=preempt_send_user_signal`, at preemption: the runner asks the
/// running step to yield (or stops a restart-mode step) and requeues the job.
pub const NOTICE_SIGNAL: &str = "USR1";

/// What `homebased slurm submit` puts in the `sbatch` command line besides the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission<'a> {
    /// The batch script that runs `homebased slurm run` for this job.
    pub script: &'a Path,
    /// The batch step's own output (the runner's lines; each run's output is its
    /// `output.log`).
    pub output: &'a Path,
    /// The Slurm job ids of the spec's `after`, in its order.
    pub after: &'a [String],
    /// How long before the time limit Slurm sends [`NOTICE_SIGNAL`].
    pub notice: Duration,
    /// `--sbatch-arg` values, passed through after ours (a partition, an account, a QOS).
    pub extra: &'a [String],
}

/// Refuses the fields that have no Slurm form, naming each by its pointer: a Fleet machine
/// (Slurm places the job), pinned lanes (Slurm picks the devices within a node).
pub fn refuse_unmappable(spec: &JobSpec) -> Result<(), ApiError> {
    let refuse = |at: &str, value: serde_json::Value, why: &str| {
        Err(ApiError::new(
            ErrorCode::InvalidSpec,
            format!("{at}: {why} (docs/SLURM.md, what does not map)"),
        )
        .with_input(json!({ "pointer": at, "value": value })))
    };
    if let Some(machine) = &spec.machine {
        return refuse(
            "/machine",
            json!(machine),
            "a Slurm job runs where Slurm places it; leave `machine` out or use --sbatch-arg=--partition=...",
        );
    }
    if let Some(resource) = &spec.resource {
        return refuse(
            "/resource",
            json!(resource),
            "Slurm picks the GPUs within a node; a lane cannot be pinned",
        );
    }
    if !spec.resources.is_empty() {
        return refuse(
            "/resources",
            json!(spec.resources),
            "Slurm picks the GPUs within a node; lanes cannot be pinned",
        );
    }
    Ok(())
}

/// The `sbatch` arguments for `spec`, before the script: every mapped field, then the
/// options the runner's contract needs (requeue, the notice signal, appended output), then
/// `extra`.
pub fn sbatch_args(spec: &JobSpec, submission: &Submission<'_>) -> Vec<String> {
    let mut args = vec![
        "--parsable".to_string(),
        format!("--job-name={}", spec.name),
        format!("--chdir={}", spec.cwd.display()),
        format!("--gres=gpu:{}", spec.gpus),
        // A requeued job runs the script again; the runner resumes where the last one left.
        "--requeue".to_string(),
        format!(
            "--signal=B:{NOTICE_SIGNAL}@{}",
            submission.notice.as_secs().max(1)
        ),
        "--open-mode=append".to_string(),
        format!("--output={}", submission.output.display()),
    ];
    if let Some(limit) = spec.time_limit {
        let whole = allocation_time(limit, spec.steps.len(), submission.notice);
        args.push(format!("--time={}", slurm_time(whole)));
    }
    if !submission.after.is_empty() {
        args.push(format!(
            "--dependency=afterok:{}",
            submission.after.join(":")
        ));
        // As homebased does: a dependency that failed or was cancelled cancels its
        // dependent, instead of leaving it pending forever.
        args.push("--kill-on-invalid-dep=yes".to_string());
    }
    args.extend(submission.extra.iter().cloned());
    args.push(submission.script.display().to_string());
    args
}

/// Slurm's `--time` for a spec with a `time_limit`. The limit is each run's (SPEC 4; the
/// runner stops a run at it and fails the job), so the allocation holds every step's run at
/// its limit, then the notice and a minute for the last stop and cleanup: Slurm's own limit
/// and its notice never come before the spec's.
pub fn allocation_time(limit: Duration, steps: usize, notice: Duration) -> Duration {
    let steps = u32::try_from(steps.max(1)).unwrap_or(u32::MAX);
    limit.saturating_mul(steps) + notice + Duration::from_secs(60)
}

/// A duration as `sbatch --time` reads it, `days-hours:minutes:seconds`. Slurm keeps whole
/// minutes and rounds seconds up, so the limit is never shorter than the spec's.
pub fn slurm_time(limit: Duration) -> String {
    let secs = limit.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    format!(
        "{days}-{:02}:{:02}:{:02}",
        rest / 3600,
        (rest % 3600) / 60,
        rest % 60
    )
}

/// The lanes of a run in the job's allocation: one per device that Slurm's
/// `CUDA_VISIBLE_DEVICES` names, `gpu<index>` by the index Slurm gave, so that the worker
/// hands the workload exactly Slurm's selection. Slurm names GPUs by index; anything else,
/// an unset or empty value, or fewer devices than the spec's `gpus` is refused, never
/// "every GPU of the node".
pub fn lanes_from(cuda_visible_devices: Option<&str>, gpus: u32) -> Result<Vec<RunLane>, String> {
    let Some(value) = cuda_visible_devices
        .map(str::trim)
        .filter(|v| !v.is_empty())
    else {
        return Err(format!(
            "Slurm set no CUDA_VISIBLE_DEVICES for a job of gpus {gpus} (is gres/gpu configured on this node?)"
        ));
    };
    let mut lanes = Vec::new();
    for entry in value.split(',').map(str::trim) {
        let index: u32 = entry.parse().map_err(|_| {
            format!("CUDA_VISIBLE_DEVICES={value}: {entry:?} is not a device index as Slurm sets")
        })?;
        if lanes.iter().any(|l: &RunLane| l.device == Some(index)) {
            return Err(format!(
                "CUDA_VISIBLE_DEVICES={value}: device {index} is named twice"
            ));
        }
        lanes.push(RunLane {
            name: format!("gpu{index}"),
            device: Some(index),
            mig: None,
        });
    }
    if lanes.len() < gpus as usize {
        return Err(format!(
            "CUDA_VISIBLE_DEVICES={value} names {} devices; the job asks for {gpus}",
            lanes.len()
        ));
    }
    Ok(lanes)
}

/// `value` as one word for `sh`: single-quoted, each `'` written as `'\''`.
pub fn sh_word(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// How a run that Slurm's TERM reached ended, for `core::classify`. Slurm's TERM (at
/// `scontrol requeue`, a preemption that requeues, `scancel`) reaches every process of the
/// job, the workload's included, and Slurm ends the job after its `KillWait` whatever the
/// runner does; the runner asked a `yield` run to yield and stopped any other. So the end is
/// as recorded when the workload finished its step (exit 0) or, asked to yield, saved its
/// checkpoint (one of its `yield_codes`); any other end, a death by that TERM included, is
/// Slurm's stop of the run, which runs the step again as a stop to restart does (resuming
/// from a checkpoint that an earlier yield left). A `time_limit` stop the runner made first
/// keeps its cause: the job fails.
pub fn after_slurm_term(
    end: RunEnd,
    cause: Option<StopCause>,
    yield_codes: &YieldCodes,
) -> (RunEnd, Option<StopCause>) {
    let kept = match (&end, cause) {
        (_, Some(StopCause::TimeLimit | StopCause::UserCancel)) | (RunEnd::Lost, _) => true,
        // Finished work, or a workload that never started: not Slurm's doing.
        (RunEnd::Recorded(ExitReason::Exit { code: 0 } | ExitReason::SpawnFailed { .. }), _) => {
            true
        }
        (RunEnd::Recorded(ExitReason::Exit { code }), Some(StopCause::Yield)) => {
            yield_codes.contains(*code)
        }
        (RunEnd::Recorded(_), _) => false,
    };
    if kept {
        (end, cause)
    } else {
        (
            RunEnd::Recorded(ExitReason::Cancelled),
            Some(StopCause::Restart),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use homebased_shared::spec::{validate, SubmitContext};

    fn spec(extra: serde_json::Value) -> JobSpec {
        let mut doc = json!({
            "api_version": 1,
            "thread": "6f1c2b7e-3d4a-4c5b-9e8f-0a1b2c3d4e5f",
            "name": "train",
            "cwd": "/",
            "priority": "medium",
            "preempt": {"mode": "yield"},
            "steps": [{"type": "task", "command": ["/bin/true"]}],
        });
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        let raw = serde_json::to_vec(&doc).unwrap();
        validate(&raw, &SubmitContext::default()).unwrap().spec
    }

    fn submission<'a>(after: &'a [String], extra: &'a [String]) -> Submission<'a> {
        Submission {
            script: Path::new("/h/slurm/jobs/j/batch.sh"),
            output: Path::new("/h/slurm/jobs/j/slurm.out"),
            after,
            notice: Duration::from_secs(120),
            extra,
        }
    }

    #[test]
    fn gpus_time_limit_and_after_become_gres_time_and_an_afterok_that_cancels() {
        let s = spec(json!({"gpus": 2, "time_limit": "90m"}));
        let after = ["41".to_string(), "42".to_string()];
        let extra = ["--partition=short".to_string()];
        let args = sbatch_args(&s, &submission(&after, &extra));
        assert_eq!(
            args,
            [
                "--parsable",
                "--job-name=train",
                "--chdir=/",
                "--gres=gpu:2",
                "--requeue",
                "--signal=B:USR1@120",
                "--open-mode=append",
                "--output=/h/slurm/jobs/j/slurm.out",
                "--time=0-01:33:00",
                "--dependency=afterok:41:42",
                "--kill-on-invalid-dep=yes",
                "--partition=short",
                "/h/slurm/jobs/j/batch.sh",
            ]
        );
    }

    #[test]
    fn a_spec_without_limit_or_dependencies_gets_neither_option() {
        let args = sbatch_args(&spec(json!({})), &submission(&[], &[]));
        assert!(args.contains(&"--gres=gpu:1".to_string()), "{args:?}");
        assert!(!args.iter().any(|a| a.starts_with("--time")), "{args:?}");
        assert!(
            !args.iter().any(|a| a.starts_with("--dependency")),
            "{args:?}"
        );
    }

    #[test]
    fn the_allocation_holds_every_steps_limit_then_the_notice_and_a_minute() {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(allocation_time(minutes(90), 1, minutes(2)), minutes(93));
        assert_eq!(allocation_time(minutes(10), 3, minutes(2)), minutes(33));
        assert_eq!(allocation_time(minutes(10), 0, Duration::ZERO), minutes(11));
    }

    #[test]
    fn slurm_time_counts_days_and_keeps_seconds() {
        assert_eq!(slurm_time(Duration::from_secs(60)), "0-00:01:00");
        assert_eq!(slurm_time(Duration::from_secs(30 * 86_400)), "30-00:00:00");
        assert_eq!(slurm_time(Duration::from_secs(90_061)), "1-01:01:01");
    }

    #[test]
    fn a_machine_or_pinned_lanes_are_refused_by_pointer() {
        let e = refuse_unmappable(&spec(json!({"machine": "box"}))).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidSpec);
        assert!(e.message.starts_with("/machine:"), "{}", e.message);
        let e = refuse_unmappable(&spec(json!({"resource": "gpu0"}))).unwrap_err();
        assert!(e.message.starts_with("/resource:"), "{}", e.message);
        let e = refuse_unmappable(&spec(json!({"gpus": 2, "resources": ["gpu0", "gpu1"]})))
            .unwrap_err();
        assert!(e.message.starts_with("/resources:"), "{}", e.message);
        refuse_unmappable(&spec(json!({"gpus": 2, "time_limit": "1h"}))).unwrap();
    }

    #[test]
    fn lanes_are_slurms_indices_and_nothing_else() {
        let lanes = lanes_from(Some("2,3"), 2).unwrap();
        let named: Vec<_> = lanes.iter().map(|l| (l.name.as_str(), l.device)).collect();
        assert_eq!(named, [("gpu2", Some(2)), ("gpu3", Some(3))]);
        for (value, gpus) in [
            (None, 1),
            (Some(""), 1),
            (Some(" "), 1),
            (Some("GPU-8f3a"), 1),
            (Some("0,0"), 2),
            (Some("1"), 2),
            (Some("0,x"), 2),
        ] {
            assert!(lanes_from(value, gpus).is_err(), "{value:?} for {gpus}");
        }
    }

    #[test]
    fn after_slurms_term_only_finished_work_and_a_checkpoint_keep_their_end() {
        let codes = YieldCodes::default();
        let exit = |code| RunEnd::Recorded(ExitReason::Exit { code });
        let slurms_stop = (
            RunEnd::Recorded(ExitReason::Cancelled),
            Some(StopCause::Restart),
        );
        let kept = [
            (exit(75), Some(StopCause::Yield)),
            (exit(0), Some(StopCause::Yield)),
            (exit(0), Some(StopCause::Restart)),
            (exit(1), Some(StopCause::TimeLimit)),
            (RunEnd::Lost, Some(StopCause::Yield)),
            (
                RunEnd::Recorded(ExitReason::SpawnFailed {
                    message: "no such file".into(),
                }),
                Some(StopCause::Yield),
            ),
            (
                RunEnd::Recorded(ExitReason::Cancelled),
                Some(StopCause::Restart),
            ),
        ];
        for (end, cause) in kept {
            assert_eq!(
                after_slurm_term(end.clone(), cause, &codes),
                (end.clone(), cause),
                "{end:?} {cause:?}"
            );
        }
        let stopped = [
            // The workload died of Slurm's TERM before it could save.
            (
                RunEnd::Recorded(ExitReason::Signal { signal: 15 }),
                Some(StopCause::Yield),
            ),
            (exit(143), Some(StopCause::Yield)),
            // 75 is a yield code only when a yield was asked for.
            (exit(75), Some(StopCause::Restart)),
            (
                RunEnd::Recorded(ExitReason::Signal { signal: 15 }),
                Some(StopCause::Restart),
            ),
            (
                RunEnd::Recorded(ExitReason::Cancelled),
                Some(StopCause::Yield),
            ),
        ];
        for (end, cause) in stopped {
            assert_eq!(
                after_slurm_term(end.clone(), cause, &codes),
                slurms_stop.clone(),
                "{end:?} {cause:?}"
            );
        }
    }

    #[test]
    fn sh_words_survive_quotes_and_spaces() {
        assert_eq!(sh_word("/a b/it's"), r"'/a b/it'\''s'");
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("printf %s {}", sh_word("/a b/it's $HOME"))])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "/a b/it's $HOME");
    }
}
