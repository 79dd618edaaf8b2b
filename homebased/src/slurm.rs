//! A job spec run on Slurm (docs/SLURM.md, "A spec run on Slurm"): `homebased slurm submit`
//! turns a spec into an `sbatch` job whose batch step is `homebased slurm run` ([`runner`]),
//! and `homebased slurm show` reads its state back from Slurm and the runner's records in
//! the shape of `resource job show`. No daemon takes part: Slurm owns the GPUs and the
//! queue; homebased keeps the run directory contract, checkpoints and the yield.
//!
//! `plan` and `state` are pure; this file and `runner` are the edges (files, `sbatch`,
//! `squeue`, `sacct`, `scontrol`).

pub mod plan;
pub mod records;
pub mod runner;
pub mod state;

use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::home::Home;
use homebased_shared::ids::JobId;
use homebased_shared::rundir::{read_json, read_json_if_exists, write_json_atomic, RunDir};
use homebased_shared::spec::{validate, JobSpec, SubmitContext};
use homebased_shared::time::serde_rfc3339;
use records::{slurm_home, Dependency, JobFiles, Progress, SubmissionRecord};
use serde_json::{json, Value};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// What `slurm submit` was given besides the spec.
#[derive(Debug, Clone)]
pub struct SubmitOptions {
    pub job: JobId,
    /// `--sbatch-arg`s, passed through.
    pub sbatch_args: Vec<String>,
    /// How long before the time limit Slurm sends its notice.
    pub notice: Duration,
    /// The config file the runner loads on the node, as this command was given it.
    pub config: Option<std::path::PathBuf>,
}

/// Validates `raw` as `resource job submit` would, refuses what has no Slurm form, writes
/// the job's files and submits it with `sbatch`.
pub fn submit(home: &Home, raw: &[u8], options: &SubmitOptions) -> ApiResult<SubmissionRecord> {
    let cwd = std::env::current_dir()
        .map_err(|e| ApiError::usage(format!("cannot read the working directory: {e}")))?;
    let context = SubmitContext {
        path: std::env::var("PATH").ok(),
        cwd,
        elsewhere: false,
    };
    let valid = validate(raw, &context)?;
    plan::refuse_unmappable(&valid.spec)?;
    let slurm = slurm_home(home);
    let job = options.job;
    let after = valid
        .spec
        .after
        .iter()
        .map(|dependency| submitted(&slurm, *dependency))
        .collect::<ApiResult<Vec<Dependency>>>()?;

    let files = JobFiles::of(&slurm, job);
    // The job's directory is made exclusively: of two submits of one `--job-id`, even at
    // once, one makes it and the other is refused.
    if let Some(jobs) = files.dir().parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(jobs)
            .map_err(|e| storage(jobs, &e))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(files.dir()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(ApiError::new(
                ErrorCode::JobConflict,
                format!("job {job} was already submitted to Slurm"),
            )
            .with_input(json!({ "job": job })));
        }
        Err(e) => return Err(storage(files.dir(), &e)),
    }
    let written = write_job_files(
        &files,
        &valid.canonical,
        home,
        job,
        options.config.as_deref(),
    );
    let answered = written.and_then(|()| {
        let after_ids: Vec<String> = after.iter().map(|d| d.slurm_job_id.clone()).collect();
        let args = plan::sbatch_args(
            &valid.spec,
            &plan::Submission {
                script: &files.batch_script(),
                output: &files.slurm_out(),
                after: &after_ids,
                notice: options.notice,
                extra: &options.sbatch_args,
            },
        );
        sbatch(&args)
    });
    let slurm_job_id = match answered {
        Ok(id) => id,
        Err(e) => {
            // Nothing was queued: the same --job-id may be submitted again.
            let _ = std::fs::remove_dir_all(files.dir());
            return Err(e.with_input(json!({ "job": job })));
        }
    };
    let record = SubmissionRecord {
        job,
        slurm_job_id,
        submitted_at: homebased_shared::time::now_ms(),
        after,
    };
    write_json_atomic(&files.submission(), &record)
        .map_err(|e| storage(&files.submission(), &e))?;
    Ok(record)
}

fn storage(path: &Path, e: &std::io::Error) -> ApiError {
    ApiError::new(
        ErrorCode::StorageUnavailable,
        format!("cannot write {}: {e}", path.display()),
    )
}

/// The Slurm job id a dependency was submitted as; it must be a `slurm submit` job of this
/// home, since Slurm's `afterok` names Slurm jobs.
fn submitted(slurm: &Home, job: JobId) -> ApiResult<Dependency> {
    let files = JobFiles::of(slurm, job);
    match read_json_if_exists::<SubmissionRecord>(&files.submission()) {
        Ok(Some(record)) => Ok(Dependency {
            job,
            slurm_job_id: record.slurm_job_id,
        }),
        _ => Err(ApiError::new(
            ErrorCode::JobNotFound,
            format!("after: job {job} was not submitted to Slurm from this home"),
        )
        .with_input(json!({ "after": job }))),
    }
}

/// `spec.json` and the batch script, which runs this same `homebased` on the node.
fn write_job_files(
    files: &JobFiles,
    canonical: &Value,
    home: &Home,
    job: JobId,
    config: Option<&Path>,
) -> ApiResult<()> {
    write_json_atomic(&files.spec(), canonical).map_err(|e| storage(&files.spec(), &e))?;
    let exe = std::env::current_exe()
        .map_err(|e| ApiError::internal(format!("cannot find this executable: {e}")))?;
    let mut command = format!(
        "exec {} --home {}",
        plan::sh_word(&exe.display().to_string()),
        plan::sh_word(&home.root().display().to_string())
    );
    if let Some(config) = config {
        command.push_str(&format!(
            " --config {}",
            plan::sh_word(&config.display().to_string())
        ));
    }
    command.push_str(&format!(" slurm run {job}"));
    let script = format!(
        "#!/bin/sh\n# Written by `homebased slurm submit` for job {job}: its steps run under\n\
         # homebased-worker on the GPUs Slurm selects (docs/SLURM.md).\n{command}\n"
    );
    let path = files.batch_script();
    std::fs::write(&path, script).map_err(|e| storage(&path, &e))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| storage(&path, &e))?;
    Ok(())
}

/// Runs `sbatch`; answers the job id it printed (`--parsable`: `id` or `id;cluster`).
fn sbatch(args: &[String]) -> ApiResult<String> {
    let out = Command::new("sbatch").args(args).output().map_err(|e| {
        ApiError::new(
            ErrorCode::ExecutableMissing,
            format!("cannot run sbatch (is Slurm's client installed?): {e}"),
        )
    })?;
    if !out.status.success() {
        return Err(ApiError::internal(format!(
            "sbatch refused the job ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text
        .trim()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return Err(ApiError::internal(format!(
            "sbatch answered no job id: {text:?}"
        )));
    }
    Ok(id)
}

/// What Slurm says about its job now: `squeue` while it lists the job (finished jobs for
/// `MinJobAge`), else `sacct` where accounting is kept.
pub fn query(slurm_job_id: &str) -> Option<state::SlurmView> {
    let listed = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| state::parse_view(&String::from_utf8_lossy(&out.stdout)))
    };
    listed(
        "squeue",
        &[
            "--noheader",
            "--states=all",
            "-j",
            slurm_job_id,
            "-o",
            "%T|%r",
        ],
    )
    .or_else(|| {
        listed(
            "sacct",
            &[
                "--noheader",
                "--parsable2",
                "-X",
                "-j",
                slurm_job_id,
                "-o",
                "State,Reason",
            ],
        )
    })
}

/// `slurm show`: the job in the shape of `resource job show` (its `id`, `name`, `state`,
/// `step`, `runs`, `dependencies`, `spec`), with `slurm` for Slurm's own view.
pub fn show(home: &Home, job: JobId) -> ApiResult<Value> {
    let slurm = slurm_home(home);
    let files = JobFiles::of(&slurm, job);
    let not_found = || {
        ApiError::new(
            ErrorCode::JobNotFound,
            format!("job {job} was not submitted to Slurm from this home"),
        )
        .with_input(json!({ "job": job }))
    };
    let submission: SubmissionRecord = match read_json_if_exists(&files.submission()) {
        Ok(Some(record)) => record,
        Ok(None) => return Err(not_found()),
        Err(e) => return Err(ApiError::internal(e)),
    };
    let spec_json: Value = read_json(&files.spec()).map_err(ApiError::internal)?;
    let spec: JobSpec = serde_json::from_value(spec_json.clone()).map_err(ApiError::internal)?;
    let progress = progress_of(&files);
    let view = query(&submission.slurm_job_id);
    let shown = state::shown(&progress, view.as_ref());
    let mut detail = json!({
        "id": job,
        "name": spec.name,
        "priority": spec.priority,
        "gpus": spec.gpus,
        "step": progress.step,
        "steps": spec.steps.len(),
        "created_at": rfc3339(submission.submitted_at),
        "spec": spec_json,
        "runs": progress.runs.iter().map(|entry| run_view(&slurm, entry)).collect::<Vec<_>>(),
        "dependencies": submission.after.iter().map(|d| {
            let view = query(&d.slurm_job_id);
            let progress = progress_of(&JobFiles::of(&slurm, d.job));
            let mut link = json!({"job": d.job, "slurm_job_id": d.slurm_job_id});
            merge(&mut link, serde_json::to_value(state::shown(&progress, view.as_ref())).unwrap_or_default());
            link
        }).collect::<Vec<_>>(),
        "slurm": {
            "job_id": submission.slurm_job_id,
            "state": view.as_ref().map(|v| v.state.clone()),
            "reason": view.as_ref().and_then(|v| v.reason.clone()),
        },
        "files": files.dir(),
    });
    merge(
        &mut detail,
        serde_json::to_value(shown).map_err(ApiError::internal)?,
    );
    Ok(detail)
}

fn progress_of(files: &JobFiles) -> Progress {
    read_json_if_exists(&files.progress())
        .ok()
        .flatten()
        .unwrap_or_default()
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

fn rfc3339(at: homebased_shared::time::Millis) -> Value {
    serde_json::to_value(Stamp(at)).unwrap_or(Value::Null)
}

#[derive(serde::Serialize)]
struct Stamp(#[serde(with = "serde_rfc3339")] homebased_shared::time::Millis);

/// One run as `job show` lists it, from the runner's entry and the run directory's records
/// (read as untrusted: a workload may have rewritten them; what is unreadable is `null`).
fn run_view(slurm: &Home, entry: &records::RunEntry) -> Value {
    let dir = RunDir::new(slurm.task_dir(entry.task));
    let worker = dir.read_worker().ok().flatten();
    let exit = dir.read_exit().ok().flatten();
    json!({
        "task": entry.task,
        "run_number": entry.run_number,
        "step": entry.step,
        "resume": entry.resume,
        "status": entry.status,
        "stop_cause": entry.stop_cause,
        "slurm_restart": entry.slurm_restart,
        "started_at": worker.and_then(|w| w.child).map(|c| rfc3339(c.started_at)),
        "ended_at": exit.as_ref().map(|e| rfc3339(e.ended_at)),
        "process": exit.map(|e| e.reason),
        "output": dir.output_log(),
    })
}

/// `slurm show` in words.
pub fn render(detail: &Value) -> String {
    let text = |v: &Value| {
        v.as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string())
    };
    let mut lines = vec![format!(
        "job {} {}: {} (Slurm job {} {}{})",
        text(&detail["id"]),
        text(&detail["name"]),
        text(&detail["state"]),
        text(&detail["slurm"]["job_id"]),
        detail["slurm"]["state"].as_str().unwrap_or("not listed"),
        detail["slurm"]["reason"]
            .as_str()
            .map(|r| format!(", {r}"))
            .unwrap_or_default()
    )];
    for run in detail["runs"].as_array().into_iter().flatten() {
        lines.push(format!(
            "  run {} step {}: {}{} {}",
            run["run_number"],
            run["step"],
            text(&run["status"]),
            if run["resume"] == json!(true) {
                " (resumed)"
            } else {
                ""
            },
            text(&run["output"])
        ));
    }
    lines.join("\n")
}
