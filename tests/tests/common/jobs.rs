//! Helpers for tests that run jobs: specs of shell steps, reading `job show` and `resource
//! list`, waiting for a job's state or a run's phase, and gate files that hold a workload
//! until the test opens them.

use super::{wait_until, Probe, Spec, TestHome};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The states a job never leaves.
pub const TERMINAL: [&str; 3] = ["succeeded", "failed", "cancelled"];

/// A running background daemon on a home whose fake probe lists `gpus` GPUs.
pub fn home_with_gpus(gpus: u32) -> TestHome {
    let mut h = TestHome::new(Probe::Gpus(gpus));
    h.start_daemon();
    h
}

/// Shell that waits (at most 60 s) until the file named by positional argument `$<arg>`
/// exists.
pub fn wait_for_gate(arg: u32) -> String {
    format!("i=0; while [ ! -e \"${arg}\" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done")
}

/// A one-step spec whose step runs `script` with `/bin/sh -c`, the `args` as `$1`, `$2`, ...
pub fn sh_spec(h: &TestHome, name: &str, script: &str, args: &[&Path]) -> Spec {
    let args: Vec<String> = args.iter().map(|p| p.display().to_string()).collect();
    let mut argv = vec!["/bin/sh", "-c", script, "sh"];
    argv.extend(args.iter().map(String::as_str));
    h.spec(name).command(&argv)
}

/// A one-step spec whose step runs the shell `before`, waits (at most 60 s) until `gate`
/// (its `$1`) exists, then runs the shell `after`; an empty `before` or `after` is left out.
pub fn gated_spec(h: &TestHome, name: &str, before: &str, gate: &Path, after: &str) -> Spec {
    let wait = wait_for_gate(1);
    let parts: Vec<&str> = [before, &wait, after]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect();
    sh_spec(h, name, &parts.join("; "), &[gate])
}

/// Creates a gate (or any marker) file.
pub fn open_gate(gate: &Path) {
    std::fs::write(gate, "").unwrap();
}

/// The `resource jobs` entry of `job`.
pub fn listed(h: &TestHome, job: &str) -> Value {
    h.json(&["resource", "jobs"])["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == job)
        .cloned()
        .unwrap_or_else(|| panic!("job {job} is not listed"))
}

pub fn show(h: &TestHome, job: &str) -> Value {
    h.json(&["resource", "job", "show", job])
}

pub fn state_of(show: &Value) -> &str {
    show["state"]["state"].as_str().unwrap_or_default()
}

/// Polls `job show` until the job is in `state`; a different terminal state fails at once.
pub fn wait_job(h: &TestHome, job: &str, state: &str) -> Value {
    let mut last = Value::Null;
    wait_until(&format!("job {job} to become {state}"), || {
        last = show(h, job);
        let now = state_of(&last);
        assert!(
            now == state || !TERMINAL.contains(&now),
            "job {job} became {now} while the test waited for {state}: {last:#}"
        );
        now == state
    });
    last
}

/// Polls `resource list` until `job`'s run is in `phase`; returns that resource entry.
pub fn wait_phase(h: &TestHome, job: &str, phase: &str) -> Value {
    let mut found = Value::Null;
    wait_until(&format!("job {job}'s run to be {phase}"), || {
        found = h
            .resources()
            .into_iter()
            .find(|r| r["run"]["job"] == job && r["run"]["phase"]["phase"] == phase)
            .unwrap_or(Value::Null);
        !found.is_null()
    });
    found
}

/// The entry of `resource list` named `name`.
pub fn resource(h: &TestHome, name: &str) -> Value {
    h.resources()
        .into_iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no resource {name}"))
}

/// Polls `resource list` until `job`'s run on `resource` is in `phase`; returns that entry.
pub fn wait_phase_on(h: &TestHome, resource_name: &str, job: &str, phase: &str) -> Value {
    let mut found = Value::Null;
    wait_until(
        &format!("job {job}'s run on {resource_name} to be {phase}"),
        || {
            found = resource(h, resource_name);
            found["run"]["job"] == job && found["run"]["phase"]["phase"] == phase
        },
    );
    found
}

/// Polls until `resource` holds no run (cleanup included); returns its entry.
pub fn wait_idle(h: &TestHome, resource_name: &str) -> Value {
    let mut found = Value::Null;
    wait_until(&format!("{resource_name} to be idle"), || {
        found = resource(h, resource_name);
        found["run"].is_null()
    });
    found
}

/// Polls until no resource holds a run (cleanup included).
pub fn wait_all_idle(h: &TestHome) {
    wait_until("every resource to be idle", || {
        h.resources().iter().all(|r| r["run"].is_null())
    });
}

pub fn runs(show: &Value) -> Vec<Value> {
    show["runs"].as_array().expect("job show has runs").clone()
}

pub fn event_names(show: &Value) -> Vec<String> {
    show["events"]
        .as_array()
        .expect("job show has events")
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

pub fn task_log(h: &TestHome, task: &str) -> String {
    h.json(&["task", "log", task])["log"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `events --json --thread T --follow` (the daemon's store, in the order it recorded the
/// thread's events), and its lines as they come.
pub fn follow_events(
    h: &TestHome,
    thread: &str,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut cmd = h.command();
    cmd.arg("--home")
        .arg(h.home())
        .args(["--json", "events", "--thread", thread, "--follow"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// The repository's `examples/`.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// A yield-mode job named `name` running `examples/<script>` unbuffered with the plain-Python
/// stand-ins for torch and transformers (`examples/standin`), `steps` steps of `delay` s.
pub fn example_spec(h: &TestHome, name: &str, script: &str, steps: u32, delay: &str) -> Spec {
    let mut spec = h
        .spec(name)
        .set("preempt", serde_json::json!({"mode": "yield"}))
        .command(&["python3", "-u", examples().join(script).to_str().unwrap()]);
    spec.0["workload"]["env"] = serde_json::json!({
        "PYTHONPATH": examples().join("standin"),
        "EXAMPLE_STEPS": steps.to_string(),
        "EXAMPLE_STEP_DELAY": delay,
        "PYTHONDONTWRITEBYTECODE": "1",
    });
    spec
}

/// The `final weights ...` line an example's run logs at its end.
pub fn final_weights(log: &str) -> &str {
    log.lines()
        .find(|l| l.starts_with("final weights "))
        .unwrap_or_else(|| panic!("no final weights in {log:?}"))
}
