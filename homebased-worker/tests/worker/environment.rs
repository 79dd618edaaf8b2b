//! What the workload is given: exactly the run variables, the captured `PATH` and `HOME`,
//! stdin from `/dev/null`, output on `output.log`.

use crate::support::{text, Run};
use homebased_shared::rundir::{is_run_variable, ExitReason};
use serde_json::json;
use std::collections::BTreeMap;

/// Runs `env -0` as the workload with extra variables in the worker's own environment, and
/// returns what the workload saw.
fn workload_env(run: &Run, worker_env: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut cmd = run.command();
    cmd.envs(worker_env.iter().copied());
    let status = cmd.status().unwrap();
    assert!(status.success(), "{}", run.diagnose());
    assert_eq!(run.exit().reason, ExitReason::Exit { code: 0 });
    run.output()
        .split('\0')
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (k, v) = entry.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn run_variables(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .filter(|(k, _)| is_run_variable(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn expected(run: &Run, resume: &str, device: Option<&str>) -> BTreeMap<String, String> {
    let s = |v: &serde_json::Value| v.as_str().unwrap().to_string();
    let mut want = BTreeMap::from([
        ("HOMEBASED_TASK_ID".to_string(), run.task.to_string()),
        ("HOMEBASED_JOB_ID".to_string(), s(&run.spec["job"])),
        ("HOMEBASED_JOB_DIR".to_string(), s(&run.spec["job_dir"])),
        ("HOMEBASED_RUN_NUMBER".to_string(), "3".to_string()),
        ("HOMEBASED_STEP_INDEX".to_string(), "1".to_string()),
        ("HOMEBASED_RESUME".to_string(), resume.to_string()),
        (
            "HOMEBASED_YIELD_FILE".to_string(),
            text(&run.dir.yield_file()),
        ),
        ("HOMEBASED_RESOURCE".to_string(), "gpu0".to_string()),
        ("HOMEBASED_HOME".to_string(), text(&run.home)),
    ]);
    if let Some(device) = device {
        want.insert("CUDA_VISIBLE_DEVICES".into(), device.into());
        want.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
    }
    want
}

fn env_run() -> Run {
    let mut run = Run::with_step(json!({"type": "task", "command": ["env", "-0"]}));
    run.set("run_number", json!(3));
    run.set("step_index", json!(1));
    run
}

/// Inherited copies the worker must scrub before setting its own.
const STALE: &[(&str, &str)] = &[
    ("HOMEBASED_TASK_ID", "00000000-0000-0000-0000-000000000000"),
    ("HOMEBASED_RESUME", "1"),
    ("HOMEBASED_LEFTOVER", "x"),
    ("CUDA_VISIBLE_DEVICES", "7"),
    ("CUDA_DEVICE_ORDER", "FASTEST_FIRST"),
    ("HOMEBASED_DEADLINE", "2000-01-01T00:00:00Z"),
    ("HOME", "/worker-home"),
    ("PATH", "/worker-bin:/usr/bin:/bin"),
];

#[test]
fn the_workload_gets_exactly_the_run_variables_for_a_device() {
    let mut run = env_run();
    run.set("lanes", json!([{"name": "gpu0", "device": 2}]));
    run.set("resume", json!(true));
    let env = workload_env(&run, STALE);
    assert_eq!(run_variables(&env), expected(&run, "1", Some("2")));
    assert_eq!(env["PATH"], "/usr/local/bin:/usr/bin:/bin");
    assert_eq!(env["HOME"], run.spec["user_home"].as_str().unwrap());
    let job_dir = std::path::Path::new(run.spec["job_dir"].as_str().unwrap());
    let mode = std::os::unix::fs::PermissionsExt::mode(&job_dir.metadata().unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700, "the job directory is private");
    assert!(run.dir.control_dir().is_dir());
}

/// Without a device of its own, a run sees what the worker was given (the daemon's
/// `CUDA_VISIBLE_DEVICES`, its allocation), and without that none; never the stale run
/// variables beside it.
#[test]
fn cuda_visible_devices_is_the_workers_own_or_absent_without_a_device() {
    let run = env_run();
    let env = workload_env(&run, STALE);
    let mut variables = run_variables(&env);
    assert_eq!(
        variables.remove("CUDA_VISIBLE_DEVICES").as_deref(),
        Some("7")
    );
    assert_eq!(variables, expected(&run, "0", None));
    assert!(!env.contains_key("CUDA_DEVICE_ORDER"));
    assert!(!env.contains_key("HOMEBASED_LEFTOVER"));
    let bare: Vec<(&str, &str)> = STALE
        .iter()
        .copied()
        .filter(|(k, _)| *k != "CUDA_VISIBLE_DEVICES")
        .collect();
    let env = workload_env(&env_run(), &bare);
    assert!(!env.contains_key("CUDA_VISIBLE_DEVICES"));
}

#[test]
fn stdin_is_dev_null_and_both_streams_share_output_log() {
    let run =
        Run::shell("echo out; echo err >&2; echo out2; readlink /proc/$$/fd/0; cat; echo end");
    run.run_to_end();
    assert_eq!(
        run.output(),
        "out\nerr\nout2\n/dev/null\nend\n",
        "in order, nothing read from stdin"
    );
}

#[test]
fn the_deadline_is_the_recorded_workload_start_plus_the_time_limit() {
    let mut run = env_run();
    run.set("time_limit", json!("1h 30m"));
    let env = workload_env(&run, STALE);
    // What the daemon counts the limit from: the start the worker records in worker.json.
    let started_at = run.child().started_at;
    let deadline = started_at + 90 * 60 * 1000;
    let told = homebased_shared::time::serde_rfc3339::deserialize(json!(env["HOMEBASED_DEADLINE"]))
        .unwrap();
    assert!(
        told <= deadline && deadline - told < 1000,
        "told {} for a deadline at {deadline}",
        env["HOMEBASED_DEADLINE"]
    );
    assert!(env["HOMEBASED_DEADLINE"].ends_with('Z'), "UTC");
}
