//! homebased inside a real Slurm allocation (issue 46): `slurmctld` and `slurmd` on this
//! machine (`common::slurm`), four fake GPUs that Slurm allocates by device file and the
//! home's fake `nvidia-smi` lists, and `homebased daemon serve` as the batch job.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::jobs::*;
use crate::common::slurm::Slurm;
use crate::common::{homebased_bin, wait_until, Probe, TestHome};
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
