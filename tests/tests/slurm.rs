//! homebased inside a real Slurm allocation (issue 46): `slurmctld` and `slurmd` on this
//! machine (`common::slurm`), four fake GPUs that Slurm allocates by device file and the
//! home's fake `nvidia-smi` lists, and `homebased daemon serve` as the batch job.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::jobs::*;
use crate::common::slurm::Slurm;
use crate::common::{
    error_of, homebased_bin, is_uuid, new_uuid, parse_one, run_bounded, wait_until, Output, Probe,
    Spec, TestHome,
};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// `sbatch` of `script` for `h`'s home, with the home's fake `nvidia-smi` and `homebased` on
/// `PATH`; Slurm's output in `<tmp>/slurm-<id>.out`.
fn sbatch_for(slurm: &Slurm, h: &TestHome, args: &[&str], script: &Path) -> Command {
    let bin_dir = homebased_bin().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let mut cmd = slurm.command("sbatch");
    cmd.arg("--parsable")
        .arg(format!("--output={}/slurm-%j.out", h.tmp().display()))
        .args(args)
        .arg(script)
        .env("PATH", path)
        .env("HOMEBASED_HOME", h.home())
        .env("HOMEBASED_NVIDIA_SMI", h.probe_path())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .current_dir(h.tmp());
    cmd
}

fn slurm_output(h: &TestHome, job: &str) -> String {
    std::fs::read_to_string(h.tmp().join(format!("slurm-{job}.out"))).unwrap_or_default()
}

fn wait_daemon(h: &TestHome, slurm: &Slurm, job: &str) {
    wait_until("the daemon inside the allocation to answer", || {
        assert!(
            slurm.state(job).is_some(),
            "the allocation ended: {}\n{}",
            slurm_output(h, job),
            slurm.log()
        );
        h.socket_answers()
    });
}

fn lane_names(h: &TestHome) -> Vec<String> {
    h.resources()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

const PRINT_VISIBLE: &str = r#"echo "${CUDA_VISIBLE_DEVICES-unset}"; sleep 0.3"#;

/// Another job holds GPUs 0 and 1; the daemon's allocation gets 2 and 3. Its lanes are those
/// two, and every run sees one of them, never 0 or 1. Slurm's USR1 to the batch job ends the
/// daemon by a drain.
#[test]
fn a_daemon_in_an_allocation_of_two_of_four_gpus_only_ever_hands_out_those_two() {
    let slurm = Slurm::start();
    let holder = {
        let mut cmd = slurm.command("sbatch");
        cmd.args([
            "--parsable",
            "--gres=gpu:2",
            "--output=/dev/null",
            "--wrap",
            "sleep 600",
        ]);
        slurm.sbatch(cmd)
    };
    slurm.wait_state(&holder, Some("RUNNING"));

    let h = TestHome::new(Probe::Gpus(4));
    let script = h.write_file(
        "serve.sbatch",
        "#!/bin/sh\nexec homebased daemon serve --web-listen off --drain-within 30s\n",
    );
    let allocation = slurm.sbatch(sbatch_for(&slurm, &h, &["--gres=gpu:2"], &script));
    wait_daemon(&h, &slurm, &allocation);

    assert_eq!(lane_names(&h), ["gpu2", "gpu3"]);
    let listed = h.json(&["resource", "list"]);
    assert_eq!(
        listed["lanes_from"],
        json!({"source": "cuda_visible_devices", "cuda_visible_devices": "2,3"}),
        "{listed:#}"
    );
    let jobs: Vec<String> = (0..4)
        .map(|i| h.submit(&sh_spec(&h, &format!("sees {i}"), PRINT_VISIBLE, &[])))
        .collect();
    let mut seen = Vec::new();
    for job in &jobs {
        let done = wait_job(&h, job, "succeeded");
        let task = runs(&done)[0]["task"].as_str().unwrap().to_string();
        seen.push(task_log(&h, &task).trim().to_string());
    }
    assert!(seen.iter().all(|v| v == "2" || v == "3"), "{seen:?}");

    let out = slurm.run(&["scancel", "--batch", "--signal=USR1", &allocation]);
    assert!(out.status.success(), "{out:?}");
    slurm.wait_state(&allocation, None);
    assert!(!h.socket_answers(), "the daemon ended with its allocation");
}

/// The final weights logged by a run of an example.
fn weights_of(h: &TestHome, run: &Value) -> String {
    final_weights(&task_log(h, run["task"].as_str().unwrap())).to_string()
}

/// The drill of `examples/slurm/allocation.sbatch`: Slurm's USR1 before the end (sent here
/// at once with `scancel --batch --signal=USR1`, as `--signal=B:USR1@N` sends it N seconds
/// before the limit) drains the daemon; the checkpointing loop yields, the script requeues
/// the allocation since work is left, and the requeued allocation's daemon resumes the loop
/// from its checkpoint to the weights of an uninterrupted run.
#[test]
fn the_usr1_drill_yields_requeues_and_resumes_a_checkpoint_loop_to_the_same_result() {
    let slurm = Slurm::start();
    let h = TestHome::new(Probe::Gpus(4));
    let recipe = examples().join("slurm/allocation.sbatch");
    let allocation = slurm.sbatch(sbatch_for(&slurm, &h, &[], &recipe));
    wait_daemon(&h, &slurm, &allocation);
    assert_eq!(
        lane_names(&h),
        ["gpu0", "gpu1"],
        "the recipe's --gres=gpu:2"
    );

    let whole = h.submit(&example_spec(
        &h,
        "uninterrupted",
        "pytorch_loop.py",
        100,
        "0",
    ));
    let whole = wait_job(&h, &whole, "succeeded");
    let expected = weights_of(&h, &runs(&whole)[0]);

    let looped = h.submit(&example_spec(&h, "drilled", "pytorch_loop.py", 100, "0.05"));
    wait_phase(&h, &looped, "executing");
    let first = show(&h, &looped)["active_run"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until("the loop to start", || {
        task_log(&h, &first).contains("start at step")
    });
    let out = slurm.run(&["scancel", "--batch", "--signal=USR1", &allocation]);
    assert!(out.status.success(), "{out:?}");
    // Drained, then requeued by the script: Slurm holds a requeued job back for about two
    // minutes (its begin time), which the test shortens.
    wait_until("the allocation to be requeued", || {
        slurm.state(&allocation).as_deref() == Some("PENDING")
    });
    let out = slurm.run(&[
        "scontrol",
        "update",
        &format!("jobid={allocation}"),
        "StartTime=now",
    ]);
    assert!(out.status.success(), "{out:?}");
    wait_daemon(&h, &slurm, &allocation);

    let done = wait_job(&h, &looped, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 2, "{done:#}");
    assert_eq!(history[0]["stop_cause"], "yield", "{done:#}");
    assert_eq!(history[0]["process"], json!({"kind": "exit", "code": 75}));
    assert_eq!(weights_of(&h, &history[1]), expected);
    let output = slurm_output(&h, &allocation);
    assert!(output.contains("drained"), "{output}");
}

// A spec run on Slurm: `homebased slurm submit` / `slurm show`, no daemon.

/// `homebased --home <home> --json <args>` with this cluster's `SLURM_CONF` and
/// `homebased`'s directory on `PATH` (which `sbatch` exports to the batch step).
fn slurm_cli(h: &TestHome, slurm: &Slurm, args: &[&str]) -> Output {
    let bin_dir = homebased_bin().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let mut cmd = h.homebased();
    cmd.arg("--json")
        .args(args)
        .env("SLURM_CONF", slurm.conf())
        .env("PATH", path)
        .env_remove("CUDA_VISIBLE_DEVICES");
    run_bounded(cmd, None)
}

fn slurm_submit(h: &TestHome, slurm: &Slurm, spec: &Spec) -> Value {
    let file = h.spec_file(spec);
    let out = slurm_cli(
        h,
        slurm,
        &["slurm", "submit", "--spec", file.to_str().unwrap()],
    );
    assert_eq!(
        out.code(),
        0,
        "slurm submit: {}\n{}",
        out.stdout,
        out.stderr
    );
    parse_one(&out.stdout)
}

fn slurm_show(h: &TestHome, slurm: &Slurm, job: &Value) -> Value {
    let out = slurm_cli(h, slurm, &["slurm", "show", job.as_str().unwrap()]);
    assert_eq!(out.code(), 0, "slurm show: {}\n{}", out.stdout, out.stderr);
    parse_one(&out.stdout)
}

/// Polls `slurm show` until the job's state is `want`; panics early on another end.
fn wait_shown(h: &TestHome, slurm: &Slurm, job: &Value, want: &str) -> Value {
    let mut last = Value::Null;
    wait_until(&format!("Slurm-run job {job} to be {want}"), || {
        last = slurm_show(h, slurm, job);
        let state = last["state"].as_str().unwrap_or_default().to_string();
        if state != want && ["succeeded", "failed", "cancelled"].contains(&state.as_str()) {
            panic!(
                "the job ended {state}, not {want}: {last:#}\n{}\n{}",
                slurm_job_output(&last),
                slurm.log()
            );
        }
        state == want
    });
    last
}

/// The batch step's output (the runner's lines), from the job's files.
fn slurm_job_output(shown: &Value) -> String {
    let files = Path::new(shown["files"].as_str().unwrap_or("/nonexistent"));
    std::fs::read_to_string(files.join("slurm.out")).unwrap_or_default()
}

fn run_output(run: &Value) -> String {
    std::fs::read_to_string(run["output"].as_str().unwrap()).unwrap_or_default()
}

/// A checkpointing loop submitted with `slurm submit` runs under `homebased-worker` on the
/// GPU Slurm gave it; Slurm's notice (USR1 to the batch step, which `--signal=B:USR1@N`
/// sends before the time limit and `scancel --batch --signal=USR1` sends here at once) makes
/// it checkpoint and exit 75; the runner requeues the Slurm job, and its next start resumes
/// the loop to the weights of an uninterrupted run.
#[test]
fn a_spec_submitted_to_slurm_yields_at_slurms_notice_requeues_and_resumes_to_the_same_result() {
    let slurm = Slurm::start();
    let h = TestHome::new(Probe::Gpus(4));
    let whole = slurm_submit(
        &h,
        &slurm,
        &example_spec(&h, "uninterrupted", "pytorch_loop.py", 100, "0"),
    );
    let looped =
        example_spec(&h, "noticed", "pytorch_loop.py", 100, "0.05").set("time_limit", json!("10m"));
    let looped = slurm_submit(&h, &slurm, &looped);
    let (job, slurm_id) = (&looped["job"], looped["slurm_job_id"].as_str().unwrap());
    assert!(is_uuid(job), "{looped:#}");
    let limit = slurm.run(&["squeue", "--noheader", "-j", slurm_id, "-o", "%l|%b"]);
    assert_eq!(
        String::from_utf8_lossy(&limit.stdout).trim(),
        "13:00|gres:gpu:1",
        "gpus is --gres, and --time is time_limit, the 2 min notice and a minute"
    );

    let active = wait_shown(&h, &slurm, job, "active");
    assert_eq!(active["slurm"]["state"], "RUNNING", "{active:#}");
    let first = wait_until_run(&h, &slurm, job);
    wait_until("the loop to start", || {
        run_output(&first).contains("start at step 0")
    });
    let visible = std::fs::read_to_string(
        Path::new(first["output"].as_str().unwrap())
            .parent()
            .unwrap()
            .join("run.json"),
    )
    .unwrap();
    assert!(
        visible.contains("\"gpu"),
        "its lane is Slurm's GPU: {visible}"
    );

    let out = slurm.run(&["scancel", "--batch", "--signal=USR1", slurm_id]);
    assert!(out.status.success(), "{out:?}");
    let resumed = yields_then_resumes(&h, &slurm, &looped, Requeuer::Runner, || {});
    assert_same_weights(&h, &slurm, &whole, &resumed);
}

/// Slurm's requeue: `scontrol requeue` sends TERM to every process of the job. The runner
/// asks the `yield` loop to yield, the worker leaves Slurm's TERM to the workload, the loop
/// saves and exits 75 within Slurm's KillWait, and the requeued job resumes from the
/// checkpoint to the weights of an uninterrupted run.
#[test]
fn a_spec_submitted_to_slurm_yields_when_slurm_requeues_it_and_resumes_to_the_same_result() {
    let slurm = Slurm::start();
    let h = TestHome::new(Probe::Gpus(4));
    let whole = slurm_submit(
        &h,
        &slurm,
        &example_spec(&h, "uninterrupted", "pytorch_loop.py", 100, "0"),
    );
    let looped = start_loop(&h, &slurm, "requeued");
    let out = slurm.run(&["scontrol", "requeue", slurm_id(&looped)]);
    assert!(out.status.success(), "{out:?}");
    let resumed = yields_then_resumes(&h, &slurm, &looped, Requeuer::Slurm, || {});
    assert_same_weights(&h, &slurm, &whole, &resumed);
}

/// A preempting partition (`PreemptType=preempt/partition_prio`, `PreemptMode=REQUEUE`): a
/// job of the higher tier `urgent` that needs all four GPUs preempts the loop, whose TERM
/// makes it yield; the loop resumes once the urgent job is done.
#[test]
fn a_spec_submitted_to_slurm_yields_when_a_higher_partition_preempts_it_and_resumes() {
    let slurm = Slurm::start();
    let h = TestHome::new(Probe::Gpus(4));
    let whole = slurm_submit(
        &h,
        &slurm,
        &example_spec(&h, "uninterrupted", "pytorch_loop.py", 100, "0"),
    );
    let looped = start_loop(&h, &slurm, "preempted");
    let urgent = {
        let mut cmd = slurm.command("sbatch");
        cmd.args([
            "--parsable",
            "--partition=urgent",
            "--gres=gpu:4",
            "--output=/dev/null",
            "--wrap",
            "sleep 1",
        ]);
        slurm.sbatch(cmd)
    };
    let resumed = yields_then_resumes(&h, &slurm, &looped, Requeuer::Slurm, || {
        slurm.wait_state(&urgent, None);
    });
    assert_same_weights(&h, &slurm, &whole, &resumed);
}

fn slurm_id(submitted: &Value) -> &str {
    submitted["slurm_job_id"].as_str().unwrap()
}

/// `slurm submit` of the checkpointing loop, once its first run has started.
fn start_loop(h: &TestHome, slurm: &Slurm, name: &str) -> Value {
    let looped = slurm_submit(
        h,
        slurm,
        &example_spec(h, name, "pytorch_loop.py", 100, "0.05"),
    );
    let first = wait_until_run(h, slurm, &looped["job"]);
    wait_until("the loop to start", || {
        run_output(&first).contains("start at step 0")
    });
    looped
}

/// Who requeued a job whose run yielded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Requeuer {
    /// The runner, after Slurm's notice (USR1).
    Runner,
    /// Slurm itself, whose TERM (a requeue, a preemption) reached the loop.
    Slurm,
}

/// After Slurm's notice or TERM reached the loop: its run yielded (exit 75) and `by`
/// requeued the job. Once `before_restart` returns, the job is let start at once (Slurm holds
/// a requeued job back for about two minutes) and its second run resumes from the checkpoint
/// to the end; answers that run's output.
fn yields_then_resumes(
    h: &TestHome,
    slurm: &Slurm,
    submitted: &Value,
    by: Requeuer,
    before_restart: impl FnOnce(),
) -> String {
    let (job, id) = (&submitted["job"], slurm_id(submitted));
    let queued = wait_shown(h, slurm, job, "queued");
    assert_eq!(queued["resume"], true, "{queued:#}");
    let yielded = &runs(&queued)[0];
    assert_eq!(yielded["status"], "preempted", "{queued:#}");
    assert_eq!(yielded["stop_cause"], "yield", "{queued:#}");
    assert_eq!(yielded["process"], json!({"kind": "exit", "code": 75}));
    assert!(run_output(yielded).contains("yielding at step"));
    let asked = match by {
        Requeuer::Runner => {
            // The runner recorded the yield, then requeued the job before it exited.
            assert_eq!(queued["slurm"]["state"], "PENDING", "{queued:#}");
            "Slurm's notice: asked the run to yield"
        }
        Requeuer::Slurm => "Slurm's TERM: asked the run to yield",
    };
    let output = slurm_job_output(&queued);
    assert!(output.contains(asked), "{output}");

    before_restart();
    wait_until("Slurm to hold the requeued job", || {
        slurm.state(id).as_deref() == Some("PENDING")
    });
    let out = slurm.run(&[
        "scontrol",
        "update",
        &format!("jobid={id}"),
        "StartTime=now",
    ]);
    assert!(out.status.success(), "{out:?}");
    let done = wait_shown(h, slurm, job, "succeeded");
    let history = runs(&done);
    assert_eq!(history.len(), 2, "{done:#}");
    assert_eq!(history[1]["resume"], true, "{done:#}");
    assert_eq!(history[1]["slurm_restart"], 1, "{done:#}");
    assert_eq!(history[1]["status"], "succeeded", "{done:#}");
    let resumed = run_output(&history[1]);
    assert!(
        resumed.contains("HOMEBASED_RESUME=1") && !resumed.contains("start at step 0 "),
        "the second run resumed from the checkpoint: {resumed}"
    );
    let output = slurm_job_output(&done);
    assert_eq!(
        output.contains("requeued Slurm job"),
        by == Requeuer::Runner,
        "who requeued the job: {output}"
    );
    resumed
}

/// The resumed loop ended with the weights of the uninterrupted one, `whole`.
fn assert_same_weights(h: &TestHome, slurm: &Slurm, whole: &Value, resumed: &str) {
    let whole = wait_shown(h, slurm, &whole["job"], "succeeded");
    assert_eq!(
        final_weights(resumed),
        final_weights(&run_output(&runs(&whole)[0]))
    );
}

/// The job's first run, once `slurm show` lists one.
fn wait_until_run(h: &TestHome, slurm: &Slurm, job: &Value) -> Value {
    let mut first = Value::Null;
    wait_until("the job's first run", || {
        first = runs(&slurm_show(h, slurm, job))
            .first()
            .cloned()
            .unwrap_or(Value::Null);
        !first.is_null()
    });
    first
}

/// `after` is Slurm's `afterok` with `--kill-on-invalid-dep=yes`: a dependency that fails
/// cancels its dependent, which never runs.
#[test]
fn a_failing_dependency_on_slurm_cancels_its_dependent() {
    let slurm = Slurm::start();
    let h = TestHome::new(Probe::Gpus(4));
    let failing = slurm_submit(
        &h,
        &slurm,
        &h.spec("fails")
            .command(&["/bin/sh", "-c", "sleep 0.5; exit 3"]),
    );
    let dependent = h
        .spec("after it")
        .command(&["/bin/true"])
        .set("after", json!([failing["job"]]));
    let dependent = slurm_submit(&h, &slurm, &dependent);
    assert_eq!(
        dependent["after"],
        json!([{"job": failing["job"], "slurm_job_id": failing["slurm_job_id"]}]),
        "{dependent:#}"
    );

    let failed = wait_shown(&h, &slurm, &failing["job"], "failed");
    assert_eq!(
        runs(&failed)[0]["process"],
        json!({"kind": "exit", "code": 3})
    );
    let cancelled = wait_shown(&h, &slurm, &dependent["job"], "cancelled");
    assert!(runs(&cancelled).is_empty(), "{cancelled:#}");
    assert_eq!(cancelled["slurm"]["state"], "CANCELLED", "{cancelled:#}");
    assert_eq!(
        cancelled["dependencies"][0]["state"], "failed",
        "{cancelled:#}"
    );
}

/// What has no Slurm form is refused before anything is written or queued, with the usual
/// error envelope; a missing `sbatch` leaves nothing behind either.
#[test]
fn slurm_submit_refuses_what_does_not_map_and_leaves_the_home_as_it_was() {
    let h = TestHome::new(Probe::Gpus(1));
    let submit_err = |spec: &Spec, path: Option<&str>, exit: i32| {
        let file = h.spec_file(spec);
        let mut cmd = h.homebased();
        cmd.args([
            "--json",
            "slurm",
            "submit",
            "--spec",
            file.to_str().unwrap(),
        ]);
        if let Some(path) = path {
            cmd.env("PATH", path);
        }
        error_of(&run_bounded(cmd, None), exit, "slurm submit")
    };
    let e = submit_err(&h.spec("pinned").set("machine", json!("box")), None, 2);
    assert_eq!(e["code"], "invalid_spec", "{e:#}");
    assert!(
        e["message"].as_str().unwrap().starts_with("/machine:"),
        "{e:#}"
    );
    let e = submit_err(&h.spec("lane").set("resource", json!("gpu0")), None, 2);
    assert!(
        e["message"].as_str().unwrap().starts_with("/resource:"),
        "{e:#}"
    );
    let unknown = new_uuid();
    let e = submit_err(&h.spec("orphan").set("after", json!([unknown])), None, 3);
    assert_eq!(e["code"], "job_not_found", "{e:#}");
    assert_eq!(e["input"]["after"], unknown, "{e:#}");
    let e = submit_err(&h.spec("no slurm"), Some("/nonexistent"), 3);
    assert_eq!(e["code"], "executable_missing", "{e:#}");
    assert!(e["message"].as_str().unwrap().contains("sbatch"), "{e:#}");

    let jobs = h.home().join("slurm/jobs");
    let left: Vec<_> = std::fs::read_dir(&jobs)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "nothing stays in {}: {left:?}",
        jobs.display()
    );
    let e = h.json_err(&["slurm", "show", &unknown], 3);
    assert_eq!(e["code"], "job_not_found", "{e:#}");

    // A second submit of one --job-id is a conflict, and the first one's files stay. (An
    // `sbatch` that only answers a job id stands in for Slurm here.)
    let bin = h.tmp().join("fake-slurm");
    std::fs::create_dir_all(&bin).unwrap();
    let sbatch = bin.join("sbatch");
    std::fs::write(
        &sbatch,
        "#!/bin/sh
echo 4242
",
    )
    .unwrap();
    std::fs::set_permissions(&sbatch, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let job = new_uuid();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let file = h.spec_file(&h.spec("once"));
    let submit = || {
        let mut cmd = h.homebased();
        cmd.args(["--json", "slurm", "submit", "--job-id", &job, "--spec"])
            .arg(&file)
            .env("PATH", &path);
        run_bounded(cmd, None)
    };
    let out = submit();
    assert_eq!(out.code(), 0, "{}\n{}", out.stdout, out.stderr);
    let first = parse_one(&out.stdout);
    assert_eq!(first["slurm_job_id"], "4242", "{first:#}");
    let e = error_of(&submit(), 5, "slurm submit again");
    assert_eq!(e["code"], "job_conflict", "{e:#}");
    assert!(jobs.join(&job).join("submission.json").is_file());
}

/// `time_limit` is each run's limit, as on a homebased machine: the runner stops the run at
/// it and the job fails, before Slurm's own `--time` (which leaves room for every step, the
/// notice and a minute) ends the allocation. The workload saw its `HOMEBASED_DEADLINE`.
#[test]
fn a_run_on_slurm_that_reaches_its_time_limit_is_stopped_and_its_job_fails() {
    let slurm = Slurm::start();
    let h = TestHome::new(Probe::Gpus(4));
    let spec = h.spec("too long").set("time_limit", json!("1m")).command(&[
        "/bin/sh",
        "-c",
        "echo \"deadline $HOMEBASED_DEADLINE\"; sleep 600",
    ]);
    let submitted = slurm_submit(&h, &slurm, &spec);
    let job = &submitted["job"];
    let first = wait_until_run(&h, &slurm, job);
    wait_until("the workload to start", || {
        run_output(&first).starts_with("deadline 20")
    });
    // The limit is a minute; wait_shown's patience counts from here.
    std::thread::sleep(std::time::Duration::from_secs(45));
    let failed = wait_shown(&h, &slurm, job, "failed");
    let run = &runs(&failed)[0];
    assert_eq!(run["stop_cause"], "time_limit", "{failed:#}");
    assert_eq!(runs(&failed).len(), 1, "{failed:#}");
    let output = slurm_job_output(&failed);
    assert!(output.contains("reached its time_limit"), "{output}");
    wait_until("Slurm to record the batch step's failure", || {
        slurm_show(&h, &slurm, job)["slurm"]["state"] == "FAILED"
    });
}
