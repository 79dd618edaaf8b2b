//! Container steps with real Docker: an image imported from busybox-static (no registry), an
//! unindexed resource (no `--gpus`), the worker driving the docker CLI from create to a
//! removal it proves.
//!
//! Docker must be running; without it these tests fail with a message saying so, unless
//! `HOMEBASED_TEST_SKIP_DOCKER=1` is set, which skips them with a note.

use crate::support::{eventually, text, Run};
use homebased_e2e::{docker, image};
use homebased_shared::rundir::{is_run_variable, CleanupOutcome, ExitReason, GroupState};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs::{self, Permissions};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

/// A container run, with whatever the worker left removed by force when the test ends (the
/// test may force; the worker never does).
struct ContainerRun {
    run: Run,
}

impl ContainerRun {
    fn new(image: &str, step: Value) -> ContainerRun {
        let mut full = json!({
            "type": "container",
            "image": image,
            "memory": 64u64 << 20,
            "entrypoint": null,
            "args": null,
            "user": null,
            "workdir": null,
            "mounts": [],
            "env": {},
        });
        for (k, v) in step.as_object().unwrap() {
            full[k] = v.clone();
        }
        ContainerRun {
            run: Run::with_step(full),
        }
    }

    fn shell(image: &str, script: &str) -> ContainerRun {
        ContainerRun::new(image, json!({"args": ["sh", "-c", script]}))
    }

    fn containers(&self) -> Vec<String> {
        let label = format!("label=homebased.task={}", self.run.task);
        docker(&["ps", "--all", "--quiet", "--no-trunc", "--filter", &label])
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect()
    }

    fn saved_id(&self) -> String {
        fs::read_to_string(self.run.dir.container_id())
            .unwrap()
            .trim()
            .to_string()
    }

    /// Removed, by label and by the saved id, and `exit.json` names the container.
    fn assert_removed(&self) {
        assert_eq!(
            self.containers(),
            Vec::<String>::new(),
            "{}",
            self.run.diagnose()
        );
        let id = self.saved_id();
        let err = docker(&["inspect", "--format", "{{.Id}}", &id]).unwrap_err();
        assert!(err.contains("No such object"), "{err}");
    }

    fn container_record(&self) -> Value {
        let record = self
            .run
            .exit()
            .container
            .expect("exit.json names the container");
        assert_eq!(record["id"], json!(self.saved_id()));
        assert_eq!(
            record["name"],
            json!(format!("homebased-{}", self.run.task))
        );
        record
    }

    fn wait_for_output(&self, line: &str) {
        eventually(&format!("{line:?} in output.log"), || {
            self.run.output().lines().any(|l| l == line).then_some(())
        });
    }
}

impl Drop for ContainerRun {
    fn drop(&mut self) {
        let label = format!("label=homebased.task={}", self.run.task);
        if let Ok(ids) = docker(&["ps", "--all", "--quiet", "--filter", &label]) {
            for id in ids.split_whitespace() {
                let _ = docker(&["rm", "--force", id]);
            }
        }
    }
}

#[test]
fn container_exit_codes_and_output_are_recorded_and_the_container_removed() {
    let Some(image) = image() else { return };
    for code in [0, 3] {
        let c = ContainerRun::shell(&image, &format!("echo out; echo err >&2; exit {code}"));
        c.run.run_to_end();
        let exit = c.run.exit();
        assert_eq!(
            exit.reason,
            ExitReason::Exit { code },
            "{}",
            c.run.diagnose()
        );
        assert_eq!(exit.group, GroupState::ConfirmedExited);
        assert_eq!(c.run.cleanup().outcome, CleanupOutcome::Clean);
        let output = c.run.output();
        assert!(
            output.contains("out\n") && output.contains("err\n"),
            "{output:?}"
        );
        let record = c.container_record();
        assert_eq!(record["exit_code"], json!(code));
        assert_eq!(record["oom_killed"], json!(false));
        let child = c.run.child();
        assert_eq!(child.pgid, child.process.pid, "docker wait leads the group");
        c.assert_removed();
    }
}

#[test]
fn the_container_gets_the_run_variables_with_container_paths() {
    let Some(image) = image() else { return };
    let mut c = ContainerRun::new(&image, json!({"args": ["env"], "env": {"SEED": "1"}}));
    c.run.set("run_number", json!(3));
    c.run.set("step_index", json!(1));
    c.run.set("resume", json!(true));
    let mut worker = c.run.command();
    worker.envs([
        ("HOMEBASED_TASK_ID", "someone-else"),
        ("CUDA_VISIBLE_DEVICES", "7"),
    ]);
    assert!(worker.status().unwrap().success(), "{}", c.run.diagnose());
    assert_eq!(c.run.exit().reason, ExitReason::Exit { code: 0 });

    let env: BTreeMap<String, String> = c
        .run
        .output()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let run_variables: BTreeMap<_, _> = env
        .iter()
        .filter(|(k, _)| is_run_variable(k))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let task = c.run.task.to_string();
    let job = c.run.spec["job"].as_str().unwrap().to_string();
    let home = text(&c.run.home);
    let expected = BTreeMap::from([
        ("HOMEBASED_TASK_ID", task.as_str()),
        ("HOMEBASED_JOB_ID", job.as_str()),
        ("HOMEBASED_JOB_DIR", "/homebased/job"),
        ("HOMEBASED_RUN_NUMBER", "3"),
        ("HOMEBASED_STEP_INDEX", "1"),
        ("HOMEBASED_RESUME", "1"),
        ("HOMEBASED_YIELD_FILE", "/homebased/run/yield"),
        ("HOMEBASED_RESOURCE", "gpu0"),
        ("HOMEBASED_HOME", home.as_str()),
    ]);
    assert_eq!(
        run_variables, expected,
        "no CUDA_VISIBLE_DEVICES without a device"
    );
    assert_eq!(env.get("SEED").map(String::as_str), Some("1"));
    c.assert_removed();
}

#[test]
fn the_job_dir_is_writable_the_control_dir_read_only_and_yield_is_seen_inside() {
    let Some(image) = image() else { return };
    let c = ContainerRun::shell(
        &image,
        "echo saved > \"$HOMEBASED_JOB_DIR/checkpoint\"; \
         if echo x > /homebased/run/probe; then echo control-writable; \
         else echo control-read-only; fi; \
         echo ready; \
         while [ ! -e \"$HOMEBASED_YIELD_FILE\" ]; do sleep 0.05; done; \
         echo saw-yield; exit 75",
    );
    let mut worker = c.run.start();
    c.wait_for_output("ready");
    fs::write(c.run.dir.yield_file(), b"").unwrap();
    assert!(worker.wait().success(), "{}", c.run.diagnose());

    assert_eq!(c.run.exit().reason, ExitReason::Exit { code: 75 });
    let output = c.run.output();
    assert!(output.contains("control-read-only\n"), "{output}");
    assert!(output.contains("saw-yield\n"), "{output}");
    let job_dir = PathBuf::from(c.run.spec["job_dir"].as_str().unwrap());
    assert_eq!(
        fs::read_to_string(job_dir.join("checkpoint")).unwrap(),
        "saved\n"
    );
    assert!(!c.run.dir.control_dir().join("probe").exists());
    assert_eq!(c.run.cleanup().outcome, CleanupOutcome::Clean);
    c.assert_removed();
}

#[test]
fn the_stop_file_stops_the_container_and_records_cancelled() {
    let Some(image) = image() else { return };
    let c = ContainerRun::shell(&image, "echo started; sleep 30");
    let mut worker = c.run.start();
    c.wait_for_output("started");
    c.run.request_stop();
    assert!(worker.wait().success(), "{}", c.run.diagnose());
    let exit = c.run.exit();
    assert_eq!(exit.reason, ExitReason::Cancelled, "{}", c.run.diagnose());
    assert_eq!(exit.group, GroupState::ConfirmedExited);
    assert_eq!(
        c.container_record()["exit_code"],
        json!(128 + 15),
        "TERM reached the workload"
    );
    assert_eq!(c.run.cleanup().outcome, CleanupOutcome::Clean);
    c.assert_removed();
}

#[test]
fn a_container_that_exits_zero_on_the_stop_signal_is_recorded_as_cancelled() {
    let Some(image) = image() else { return };
    let c = ContainerRun::shell(
        &image,
        "trap 'echo saved; exit 0' TERM; echo started; while :; do sleep 0.1; done",
    );
    let mut worker = c.run.start();
    c.wait_for_output("started");
    c.run.request_stop();
    assert!(worker.wait().success(), "{}", c.run.diagnose());
    assert_eq!(
        c.run.exit().reason,
        ExitReason::Cancelled,
        "stopped, not finished: {}",
        c.run.diagnose()
    );
    // What the container's process did is kept as Docker saw it.
    assert_eq!(c.container_record()["exit_code"], json!(0));
    assert_eq!(c.run.cleanup().outcome, CleanupOutcome::Clean);
    c.assert_removed();
}

#[test]
fn sigterm_to_the_worker_stops_a_container_that_ignores_term_with_kill() {
    let Some(image) = image() else { return };
    let c = ContainerRun::shell(
        &image,
        "trap '' TERM; echo started; while :; do sleep 0.1; done",
    );
    let mut worker = c.run.start();
    c.wait_for_output("started");
    kill(Pid::from_raw(worker.pid()), Signal::SIGTERM).unwrap();
    assert!(worker.wait().success(), "{}", c.run.diagnose());
    assert_eq!(c.run.exit().reason, ExitReason::Cancelled);
    assert_eq!(
        c.container_record()["exit_code"],
        json!(128 + 9),
        "KILL after the grace"
    );
    assert_eq!(c.run.cleanup().outcome, CleanupOutcome::Clean);
    c.assert_removed();
}

#[test]
fn an_image_that_is_not_there_is_a_spawn_failure_that_leaves_nothing() {
    let Some(_) = image() else { return };
    let c = ContainerRun::new(
        "sha256:0000000000000000000000000000000000000000000000000000000000000000",
        json!({"args": ["true"]}),
    );
    c.run.run_to_end();
    let exit = c.run.exit();
    match &exit.reason {
        ExitReason::SpawnFailed { message } => {
            assert!(message.contains("docker create failed"), "{message}")
        }
        other => panic!("expected spawn_failed, got {other:?}"),
    }
    assert_eq!(exit.group, GroupState::NoChildSpawned);
    assert_eq!(c.run.cleanup().outcome, CleanupOutcome::Clean);
    assert!(c.run.dir.read_worker().unwrap().unwrap().child.is_none());
    assert_eq!(c.containers(), Vec::<String>::new());
}

#[test]
fn entrypoint_args_user_workdir_and_mounts_reach_the_container() {
    let Some(image) = image() else { return };
    let data = tempfile::tempdir().unwrap();
    let input = data.path().join("in");
    let output = data.path().join("out");
    fs::create_dir(&input).unwrap();
    fs::create_dir(&output).unwrap();
    fs::write(input.join("data"), "hello\n").unwrap();
    fs::set_permissions(&input, Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&output, Permissions::from_mode(0o777)).unwrap();
    let script = "pwd; cat /proc/self/status; cat /in/data; echo written > /out/result; \
                  if echo x > /in/x; then echo in-writable; fi; echo \"args: $0 $*\"";
    let c = ContainerRun::new(
        &image,
        json!({
            "entrypoint": ["sh", "-c", script],
            "args": ["first", "second", "third"],
            "user": "1234:1234",
            "workdir": "/tmp/w",
            "mounts": [
                {"source": input, "target": "/in", "read_only": true},
                {"source": output, "target": "/out", "read_only": false},
            ],
        }),
    );
    c.run.run_to_end();
    assert_eq!(
        c.run.exit().reason,
        ExitReason::Exit { code: 0 },
        "{}",
        c.run.diagnose()
    );
    let log = c.run.output();
    // Docker copies stdout and stderr separately: their lines keep no order between them.
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.contains(&"/tmp/w"), "{log}");
    let uid = lines.iter().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(uid.split_whitespace().nth(1), Some("1234"), "{log}");
    assert!(lines.contains(&"hello"), "{log}");
    assert!(!lines.contains(&"in-writable"), "{log}");
    assert!(lines.contains(&"args: first second third"), "{log}");
    assert_eq!(
        fs::read_to_string(output.join("result")).unwrap(),
        "written\n"
    );
    assert!(!input.join("x").exists());
    c.assert_removed();
}

#[test]
fn a_removal_docker_refuses_is_container_unconfirmed() {
    let Some(image) = image() else { return };
    // A `docker` ahead of the real one on the worker's PATH that refuses every `rm`.
    let real = Command::new("sh")
        .args(["-c", "command -v docker"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    let fake = tempfile::tempdir().unwrap();
    let script = format!(
        "#!/bin/sh\n\
         if [ \"$1\" = rm ]; then echo 'Error response from daemon: refused by the test' >&2; \
         exit 1; fi\n\
         exec '{real}' \"$@\"\n"
    );
    let program = fake.path().join("docker");
    fs::write(&program, script).unwrap();
    fs::set_permissions(&program, Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        fake.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut c = ContainerRun::shell(&image, "echo done");
    c.run.set(
        "cleanup",
        json!({"term_grace": "1s", "kill_grace": "2s", "rescan": "20ms", "bound": "1s"}),
    );
    let mut worker = c.run.command();
    worker.env("PATH", path);
    assert!(worker.status().unwrap().success(), "{}", c.run.diagnose());
    assert_eq!(c.run.exit().reason, ExitReason::Exit { code: 0 });
    match c.run.cleanup().outcome {
        CleanupOutcome::ContainerUnconfirmed { message } => {
            assert!(message.contains("refused by the test"), "{message}");
            assert!(message.contains(&c.saved_id()), "{message}");
        }
        other => panic!("expected container_unconfirmed, got {other:?}"),
    }
    assert_eq!(
        c.containers(),
        vec![c.saved_id()],
        "the container is still there"
    );
}

#[test]
fn a_hung_removal_is_bounded_as_a_whole_not_per_command() {
    let Some(image) = image() else { return };
    // A `docker` ahead of the real one whose `rm` hangs far beyond the cleanup bound (and
    // below the 60 s bound of one command).
    let real = Command::new("sh")
        .args(["-c", "command -v docker"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    let fake = tempfile::tempdir().unwrap();
    let script = format!(
        "#!/bin/sh\n\
         if [ \"$1\" = rm ]; then exec sleep 45; fi\n\
         exec '{real}' \"$@\"\n"
    );
    let program = fake.path().join("docker");
    fs::write(&program, script).unwrap();
    fs::set_permissions(&program, Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        fake.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut c = ContainerRun::shell(&image, "echo done");
    c.run.set(
        "cleanup",
        json!({"term_grace": "1s", "kill_grace": "2s", "rescan": "20ms", "bound": "3s"}),
    );
    let mut worker = c.run.command();
    worker.env("PATH", path);
    let started = std::time::Instant::now();
    assert!(worker.status().unwrap().success(), "{}", c.run.diagnose());
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(30),
        "the removal took {took:?}, past its 3 s bound\n{}",
        c.run.diagnose()
    );
    assert!(
        matches!(
            c.run.cleanup().outcome,
            CleanupOutcome::ContainerUnconfirmed { .. }
        ),
        "{}",
        c.run.diagnose()
    );
}

#[test]
fn an_oom_kill_is_recorded_as_dockers_exit_code_with_the_oom_flag() {
    let Some(image) = image() else { return };
    let c = ContainerRun::new(
        &image,
        json!({
            "memory": 16u64 << 20,
            // A second before it grows: Docker learns of an OOM kill through a watch that
            // containerd sets on the container's memory cgroup once the container runs, and
            // on a loaded machine a kill within milliseconds of the start may come before it
            // and never be marked (the likely cause of two clean-clone CI failures, where the
            // mark did not come within 3 s of the exit). Real workloads start up first.
            "args": ["sh", "-c", "sleep 1; a=x; while :; do a=\"$a$a\"; done"],
        }),
    );
    c.run.run_to_end();
    assert_eq!(
        c.run.exit().reason,
        ExitReason::Exit { code: 128 + 9 },
        "{}",
        c.run.diagnose()
    );
    assert_eq!(c.container_record()["oom_killed"], json!(true));
    assert_eq!(c.run.cleanup().outcome, CleanupOutcome::Clean);
    c.assert_removed();
}

#[test]
fn a_killed_worker_leaves_no_docker_process_behind() {
    let Some(image) = image() else { return };
    let c = ContainerRun::shell(&image, "echo started; sleep 30");
    let mut worker = c.run.start();
    let child = c.run.child();
    c.wait_for_output("started");
    kill(Pid::from_raw(worker.pid()), Signal::SIGKILL).unwrap();
    worker.wait();
    eventually("the docker followers to die with the worker", || {
        let members = homebased_shared::process::group_members(child.pgid).unwrap();
        members.iter().all(|m| m.is_zombie()).then_some(())
    });
    // Without a stop request the container is left running for a later worker to adopt.
    assert_eq!(c.containers().len(), 1);
}

/// Starts `c`'s worker, waits for `started` in the output, kills the worker with SIGKILL and
/// checks that its container runs on.
fn detach(c: &ContainerRun) {
    let mut worker = c.run.start();
    c.run.child();
    c.wait_for_output("started");
    kill(Pid::from_raw(worker.pid()), Signal::SIGKILL).unwrap();
    worker.wait();
    let state = docker(&["inspect", "--format", "{{.State.Status}}", &c.saved_id()]).unwrap();
    assert_eq!(
        state.trim(),
        "running",
        "the container runs on without its worker"
    );
}

fn adopting_worker(c: &ContainerRun) -> crate::support::Worker {
    let mut cmd = c.run.command();
    cmd.arg("--adopt");
    crate::support::Worker(cmd.spawn().unwrap())
}

fn job_dir(c: &ContainerRun) -> PathBuf {
    PathBuf::from(c.run.spec["job_dir"].as_str().unwrap())
}

#[test]
fn an_adopting_worker_follows_a_left_container_to_its_real_exit_and_removes_it() {
    let Some(image) = image() else { return };
    let c = ContainerRun::shell(
        &image,
        "echo started; while [ ! -e /homebased/job/go ]; do sleep 0.05; done; \
         echo finishing; exit 3",
    );
    detach(&c);
    let first = c.run.child();

    let mut adopter = adopting_worker(&c);
    let child = eventually("the adopting worker's own followers", || {
        let record = c.run.dir.read_worker().ok().flatten()?;
        let child = record.child?;
        (record.worker.pid == adopter.pid() as u32 && child.process != first.process)
            .then_some(child)
    });
    assert_eq!(
        child.started_at, first.started_at,
        "the workload's start is kept"
    );
    fs::write(job_dir(&c).join("go"), b"").unwrap();
    assert!(adopter.wait().success(), "{}", c.run.diagnose());

    assert_eq!(
        c.run.exit().reason,
        ExitReason::Exit { code: 3 },
        "{}",
        c.run.diagnose()
    );
    assert_eq!(
        c.run.output(),
        "started\nfinishing\n",
        "the replayed logs continue output.log where it was"
    );
    assert_eq!(c.container_record()["exit_code"], json!(3));
    assert_eq!(c.run.cleanup().outcome, CleanupOutcome::Clean);
    c.assert_removed();
}

#[test]
fn a_container_that_ended_unfollowed_is_found_by_name_and_label_and_its_exit_recorded() {
    let Some(image) = image() else { return };
    let c = ContainerRun::shell(
        &image,
        "echo started; while [ ! -e /homebased/job/go ]; do sleep 0.05; done; exit 0",
    );
    detach(&c);
    let id = c.saved_id();
    fs::write(job_dir(&c).join("go"), b"").unwrap();
    eventually("the container to end with nobody following", || {
        let state = docker(&["inspect", "--format", "{{.State.Status}}", &id]).unwrap();
        (state.trim() == "exited").then_some(())
    });
    // No saved id: the name and the label find it.
    fs::remove_file(c.run.dir.container_id()).unwrap();

    assert!(adopting_worker(&c).wait().success(), "{}", c.run.diagnose());
    assert_eq!(c.run.exit().reason, ExitReason::Exit { code: 0 });
    assert!(c.run.worker_log().contains("found by name and label"));
    assert_eq!(c.saved_id(), id, "the id is saved again");
    assert_eq!(c.run.output(), "started\n");
    assert_eq!(c.run.cleanup().outcome, CleanupOutcome::Clean);
    c.assert_removed();
}

#[test]
fn an_adopting_worker_honours_a_stop_request_and_records_cancelled() {
    let Some(image) = image() else { return };
    let c = ContainerRun::shell(&image, "echo started; sleep 30");
    detach(&c);
    let mut adopter = adopting_worker(&c);
    eventually("the adopting worker's followers", || {
        let record = c.run.dir.read_worker().ok().flatten()?;
        (record.worker.pid == adopter.pid() as u32).then_some(())
    });
    c.run.request_stop();
    assert!(adopter.wait().success(), "{}", c.run.diagnose());
    assert_eq!(c.run.exit().reason, ExitReason::Cancelled);
    assert_eq!(c.container_record()["exit_code"], json!(128 + 15));
    assert_eq!(c.run.cleanup().outcome, CleanupOutcome::Clean);
    c.assert_removed();
}

#[test]
fn an_adopting_worker_that_finds_no_container_writes_no_record() {
    let Some(image) = image() else { return };
    let c = ContainerRun::shell(&image, "echo started; sleep 30");
    detach(&c);
    docker(&["rm", "--force", &c.saved_id()]).unwrap();

    let status = adopting_worker(&c).wait();
    assert!(!status.success(), "{status}");
    assert!(!c.run.dir.exit_json().exists(), "{}", c.run.diagnose());
    assert!(!c.run.dir.cleanup_json().exists());
    assert!(
        c.run.worker_log().contains("nothing to adopt"),
        "{}",
        c.run.diagnose()
    );
}

#[test]
fn a_container_running_as_another_user_writes_its_checkpoint_into_the_job_dir() {
    let Some(image) = image() else { return };
    let c = ContainerRun::new(
        &image,
        json!({
            "user": "4321:4321",
            "args": ["sh", "-c", "echo saved > /homebased/job/checkpoint"],
        }),
    );
    c.run.run_to_end();
    assert_eq!(
        c.run.exit().reason,
        ExitReason::Exit { code: 0 },
        "{}",
        c.run.diagnose()
    );
    let dir = job_dir(&c);
    assert_eq!(
        fs::read_to_string(dir.join("checkpoint")).unwrap(),
        "saved\n"
    );
    let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o777);
    assert_eq!(
        mode(dir.parent().unwrap()),
        0o700,
        "its parent stays private"
    );
    c.assert_removed();
}
