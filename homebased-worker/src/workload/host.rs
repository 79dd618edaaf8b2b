//! A host step: the argv run directly (no shell), in its own process group, with output on
//! `output.log`, stdin from `/dev/null`, and exactly the run variables of SPEC section 5.

use super::{Running, StartError};
use crate::clock::now_ms;
use crate::process_group::ProcessGroup;
use homebased_shared::process;
use homebased_shared::rundir::{is_run_variable, ChildRecord, RunDir, RunSpec};
use homebased_shared::spec::Step;
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::unistd::{getppid, Pid};
use std::ffi::OsString;
use std::fs::{DirBuilder, Permissions};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

pub fn start(run: &RunSpec, dir: &RunDir, argv: &[String]) -> Result<Running, StartError> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| StartError::Workload("the step's command is empty".into()))?;
    prepare_folders(run, dir).map_err(StartError::Worker)?;
    let output_path = dir.output_log();
    // Never through a link planted where the log should be (SPEC section 5).
    let output = homebased_shared::rundir::open_append(&output_path, 0o666)
        .map_err(|e| StartError::Worker(format!("cannot open {}: {e}", output_path.display())))?;
    // One open file description for both streams, so their writes interleave in order.
    let errors = output
        .try_clone()
        .map_err(|e| StartError::Worker(format!("cannot share {}: {e}", output_path.display())))?;

    // Taken before the spawn: the suspect window (SPEC section 6) must cover anything the
    // workload starts, even in its first millisecond. It is also the start the daemon counts
    // the run's `time_limit` from, so the workload's `HOMEBASED_DEADLINE` is built on it.
    let started_at = now_ms();
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(&run.cwd)
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(errors)
        .env_clear()
        .envs(environment(run, dir, started_at, std::env::vars_os()))
        .process_group(0);
    let worker = Pid::this();
    // SAFETY: the closure runs between fork and exec and only makes two system calls through
    // nix (prctl, getppid); it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The worker may have died before the line above; then nobody would kill this.
            if getppid() != worker {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }

    let child = command.spawn().map_err(|e| {
        StartError::Workload(format!(
            "cannot start {program:?} in {}: {e}",
            run.cwd.display()
        ))
    })?;
    let pid = child.id();
    // `Child` is dropped without waiting: the reaper collects the status with waitpid(-1).
    drop(child);
    let Some(group) = ProcessGroup::led_by(pid) else {
        return Err(StartError::Worker(format!(
            "workload pid {pid} cannot lead a process group"
        )));
    };
    // Nothing reaps before the reaper runs, so the pid is still this child's (a zombie at
    // worst) and its start time is readable.
    let identity = match process::identity(pid) {
        Ok(identity) => identity,
        Err(e) => {
            // Untracked work must not run: kill it and collect it before reporting.
            let _ = group.signal(Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(group.leader(), None);
            return Err(StartError::Worker(format!(
                "cannot read the identity of workload pid {pid} ({e}); killed it"
            )));
        }
    };
    Ok(Running {
        child: ChildRecord {
            process: identity,
            pgid: group.id(),
            started_at,
        },
        group,
        container: None,
    })
}

/// The workload's environment (SPEC section 5): the submitter's as captured at submit, or
/// when none was (Fleet, an older job) the worker's own with the submitter's `PATH` and
/// `HOME`; minus every run variable (an inherited `HOMEBASED_TASK_ID` would mark the workload
/// as another run's); then the step's `env`; then this run's variables, for a workload
/// started at `started_at`. `inherited` is the worker's own environment, which is the
/// daemon's: a run given no device of its own (an unindexed lane) gets the daemon's
/// `CUDA_VISIBLE_DEVICES` where it has one, so inside an allocation (Slurm, a container) it
/// sees the allocation's GPUs, never every GPU of the node.
pub fn environment(
    run: &RunSpec,
    dir: &RunDir,
    started_at: homebased_shared::time::Millis,
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let inherited: Vec<(OsString, OsString)> = inherited.into_iter().collect();
    let allocation = inherited
        .iter()
        .find(|(name, _)| name == VISIBLE_DEVICES)
        .map(|(_, value)| value.clone());
    let base: Vec<(OsString, OsString)> = match &run.environment {
        Some(captured) => captured.iter().map(|(k, v)| (k.into(), v.into())).collect(),
        None => {
            let mut env: Vec<(OsString, OsString)> = inherited
                .into_iter()
                .filter(|(name, _)| {
                    !(run.path.is_some() && name == "PATH"
                        || run.user_home.is_some() && name == "HOME")
                })
                .collect();
            if let Some(path) = &run.path {
                env.push(("PATH".into(), path.into()));
            }
            if let Some(home) = &run.user_home {
                env.push(("HOME".into(), home.into()));
            }
            env
        }
    };
    let step_env = match &run.step {
        Step::Task { env, .. } => env.clone(),
        Step::Container(_) => Default::default(),
    };
    let mut env: Vec<(OsString, OsString)> = base
        .into_iter()
        .filter(|(name, _)| !is_run_variable(&name.to_string_lossy()))
        .filter(|(name, _)| !step_env.contains_key(&*name.to_string_lossy()))
        .collect();
    // A step's `env` never names a run variable (refused at submit); filtered again so that
    // a hand-edited `run.json` cannot set a marker either.
    env.extend(
        step_env
            .into_iter()
            .filter(|(name, _)| !is_run_variable(name))
            .map(|(k, v)| (k.into(), v.into())),
    );
    env.extend(
        run.host_variables(dir, started_at)
            .into_iter()
            .map(|(k, v)| (k.into(), v.into())),
    );
    if let Some(allocation) = allocation {
        if !env.iter().any(|(name, _)| name == VISIBLE_DEVICES) {
            env.push((VISIBLE_DEVICES.into(), allocation));
        }
    }
    env
}

/// The variable that says which GPUs a CUDA process sees.
const VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// The job directory (it holds checkpoints) and the control folder the daemon writes `yield`
/// and `stop` into.
///
/// For a host step the job directory is private to the user (0700). A container step may run
/// as any user (its numeric `user`, or the image's own, which only the image knows), so its
/// job directory is open to every user (0777) inside a parent kept private (0700,
/// `<home>/jobs/<job>`): no other user of the host can reach it through that parent, while the
/// container reaches it through its bind mount at `/homebased/job`, where the parents do not
/// count. Files the container makes there belong to the container's user.
pub(super) fn prepare_folders(run: &RunSpec, dir: &RunDir) -> Result<(), String> {
    let mode = match run.step {
        Step::Container(_) => 0o777,
        Step::Task { .. } => 0o700,
    };
    let private_parent = || match run.job_dir.parent() {
        Some(parent) if mode != 0o700 => {
            std::fs::set_permissions(parent, Permissions::from_mode(0o700))
        }
        _ => Ok(()),
    };
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&run.job_dir)
        .and_then(|()| private_parent())
        .and_then(|()| std::fs::set_permissions(&run.job_dir, Permissions::from_mode(mode)))
        .map_err(|e| format!("cannot prepare {}: {e}", run.job_dir.display()))?;
    let control = dir.control_dir();
    std::fs::create_dir_all(&control)
        .map_err(|e| format!("cannot create {}: {e}", control.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use homebased_shared::config::CleanupConfig;
    use homebased_shared::ids::{JobId, TaskId};
    use std::collections::BTreeMap;

    fn run(device: Option<u32>) -> RunSpec {
        RunSpec {
            task: TaskId::new(),
            job: JobId::new(),
            run_number: 2,
            step_index: 1,
            resume: true,
            step: Step::Task {
                command: vec!["true".into()],
                env: BTreeMap::new(),
                yield_codes: Default::default(),
            },
            cwd: "/".into(),
            path: Some("/usr/bin:/bin".into()),
            user_home: Some("/home/sub".into()),
            environment: None,
            lanes: vec![homebased_shared::rundir::RunLane {
                name: "gpu0".into(),
                device,
                mig: None,
            }],
            home: "/h".into(),
            job_dir: "/h/jobs/j/state".into(),
            poke_socket: "/h/poke.sock".into(),
            protected_pids: vec![],
            cleanup: CleanupConfig::default(),
            output_limit: homebased_shared::output_cap::DEFAULT_LIMIT,
            time_limit: None,
            stamps: None,
            stop_on_term: true,
        }
    }

    /// When the workloads of these tests start.
    const STARTED_AT: homebased_shared::time::Millis = 1_764_669_600_250;

    fn as_map(env: Vec<(OsString, OsString)>) -> BTreeMap<String, String> {
        let mut map = BTreeMap::new();
        for (k, v) in env {
            let old = map.insert(
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            );
            assert!(old.is_none(), "{k:?} is set once");
        }
        map
    }

    #[test]
    fn inherited_run_variables_are_scrubbed_then_set() {
        let r = run(None);
        let dir = RunDir::new("/h/tasks/t");
        let inherited = [
            ("HOMEBASED_TASK_ID", "someone-else"),
            ("HOMEBASED_SURPRISE", "x"),
            ("CUDA_VISIBLE_DEVICES", "7"),
            ("CUDA_DEVICE_ORDER", "FASTEST_FIRST"),
            ("HOMEBASED_DEADLINE", "2000-01-01T00:00:00Z"),
            ("PATH", "/worker/bin"),
            ("HOME", "/worker"),
            ("LANG", "C.UTF-8"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = as_map(environment(&r, &dir, STARTED_AT, inherited));
        let mut expected = r.host_variables(&dir, STARTED_AT);
        expected.insert("PATH".into(), "/usr/bin:/bin".into());
        expected.insert("HOME".into(), "/home/sub".into());
        expected.insert("LANG".into(), "C.UTF-8".into());
        // No device of its own: the worker's (the daemon's) allocation, never every GPU.
        expected.insert("CUDA_VISIBLE_DEVICES".into(), "7".into());
        assert_eq!(env, expected);
        assert!(
            !env.contains_key("CUDA_DEVICE_ORDER"),
            "no device, no order"
        );
        assert!(
            !env.contains_key("HOMEBASED_DEADLINE"),
            "no limit, no deadline"
        );
    }

    #[test]
    fn a_lanes_device_wins_over_the_daemons_allocation_and_without_either_there_is_none() {
        let dir = RunDir::new("/h/tasks/t");
        let allocation =
            [("CUDA_VISIBLE_DEVICES", "2,3")].map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = as_map(environment(&run(Some(3)), &dir, STARTED_AT, allocation));
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "3");
        let env = as_map(environment(&run(None), &dir, STARTED_AT, []));
        assert!(!env.contains_key("CUDA_VISIBLE_DEVICES"));
        // A captured submitter's value is the submitter's, never the run's.
        let mut captured = run(None);
        captured.environment = Some([("CUDA_VISIBLE_DEVICES".into(), "0".into())].into());
        let env = as_map(environment(&captured, &dir, STARTED_AT, []));
        assert!(!env.contains_key("CUDA_VISIBLE_DEVICES"));
    }

    #[test]
    fn a_device_comes_with_the_pci_bus_order_and_a_limit_with_its_deadline() {
        let mut r = run(Some(2));
        r.time_limit = Some(std::time::Duration::from_secs(90 * 60));
        let dir = RunDir::new("/h/tasks/t");
        let inherited = [("CUDA_DEVICE_ORDER", "FASTEST_FIRST")]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = as_map(environment(&r, &dir, STARTED_AT, inherited));
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "2");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        // 2025-12-02T10:00:00.250Z plus 90 minutes, in whole seconds rounded down.
        assert_eq!(env["HOMEBASED_DEADLINE"], "2025-12-02T11:30:00Z");
        assert_eq!(r.deadline(STARTED_AT), Some(STARTED_AT + 90 * 60_000));
    }

    #[test]
    fn the_workers_path_stays_when_none_was_captured() {
        let mut r = run(Some(3));
        r.path = None;
        r.user_home = None;
        let dir = RunDir::new("/h/tasks/t");
        let inherited = [("PATH", "/worker/bin"), ("HOME", "/worker")]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = as_map(environment(&r, &dir, STARTED_AT, inherited));
        assert_eq!(env["PATH"], "/worker/bin");
        assert_eq!(env["HOME"], "/worker");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "3");
    }

    /// A run on several lanes sees all their devices, ascending, numbered as `nvidia-smi`
    /// numbers them (PCI bus order), and every lane's name.
    #[test]
    fn several_lanes_are_one_device_list_in_pci_bus_order() {
        let mut r = run(Some(3));
        r.lanes.insert(
            0,
            homebased_shared::rundir::RunLane {
                name: "gpu1".into(),
                device: Some(1),
                mig: None,
            },
        );
        r.environment = Some(BTreeMap::from([(
            "CUDA_DEVICE_ORDER".to_string(),
            "FASTEST_FIRST".to_string(),
        )]));
        let dir = RunDir::new("/h/tasks/t");
        let env = as_map(environment(&r, &dir, STARTED_AT, []));
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "1,3");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        assert_eq!(env["HOMEBASED_RESOURCE"], "gpu1,gpu0");
    }

    #[test]
    fn the_captured_environment_replaces_the_workers_then_the_step_env_then_run_variables() {
        let mut r = run(Some(1));
        r.environment = Some(BTreeMap::from(
            [
                ("PATH", "/sub/bin"),
                ("HF_HOME", "/sub/hf"),
                ("SEED", "1"),
                ("HOMEBASED_TASK_ID", "stale"),
                ("CUDA_VISIBLE_DEVICES", "5"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        ));
        r.step = Step::Task {
            command: vec!["true".into()],
            env: BTreeMap::from([("SEED".to_string(), "2".to_string())]),
            yield_codes: Default::default(),
        };
        let dir = RunDir::new("/h/tasks/t");
        let inherited = [("DAEMON_ONLY", "x"), ("PATH", "/worker/bin")]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = as_map(environment(&r, &dir, STARTED_AT, inherited));
        assert_eq!(env["PATH"], "/sub/bin");
        assert_eq!(env["HF_HOME"], "/sub/hf");
        assert_eq!(env["SEED"], "2");
        assert_eq!(env["HOMEBASED_TASK_ID"], r.task.to_string());
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "1");
        assert!(!env.contains_key("DAEMON_ONLY"));
        assert!(
            !env.contains_key("HOME"),
            "HOME comes from the capture only"
        );
    }
}
