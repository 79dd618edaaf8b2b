//! The `docker create` command line of a container step (SPEC sections 3 and 5), built as a
//! pure function of the run so that every rule about it is a unit test.
//!
//! Every option is written `--option=value`: a value taken from the spec (an entrypoint, an
//! env value) can then never be read as another option, whatever it starts with. Nothing the
//! spec does not model is added: no `--network` (Docker's default applies), no `--rm` (the
//! worker removes the container itself, after reading its end).

use super::{container_name, task_label, CONTROL_TARGET, JOB_DIR_TARGET};
use homebased_shared::rundir::{RunDir, RunSpec, YIELD_FILE};
use homebased_shared::spec::ContainerStep;
use homebased_shared::time::Millis;
use std::collections::BTreeMap;
use std::path::Path;

/// Arguments after `docker`: `create`, the options, the image, then the command, for a
/// container started at `started_at`.
pub fn docker_create_args(
    run: &RunSpec,
    step: &ContainerStep,
    dir: &RunDir,
    started_at: Millis,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "create".into(),
        // A real PID 1 inside: signals from `docker stop` reach the workload, zombies are reaped.
        "--init".into(),
        format!("--name={}", container_name(run.task)),
        format!("--label={}", task_label(run.task)),
        "--pull=never".into(),
        "--restart=no".into(),
        format!("--memory={}", step.memory),
        // Equal to the memory limit: no swap on top of it.
        format!("--memory-swap={}", step.memory),
        format!("--cidfile={}", dir.container_id().display()),
    ];
    if let Some(gpus) = gpus_argument(run) {
        args.push(gpus);
    }
    args.push(bind_mount(&run.job_dir, JOB_DIR_TARGET, false));
    args.push(bind_mount(&dir.control_dir(), CONTROL_TARGET, true));
    for mount in &step.mounts {
        let target = mount.target.display().to_string();
        args.push(bind_mount(&mount.source, &target, mount.read_only));
    }
    if let Some(user) = &step.user {
        args.push(format!("--user={user}"));
    }
    if let Some(workdir) = &step.workdir {
        args.push(format!("--workdir={workdir}"));
    }
    // Docker takes one program as the entrypoint; the rest of the spec's entrypoint argv comes
    // first in the command, before the step's args.
    let (program, entry_args) = match step.entrypoint.as_deref() {
        Some([program, rest @ ..]) => (Some(program), rest),
        _ => (None, &[][..]),
    };
    if let Some(program) = program {
        args.push(format!("--entrypoint={program}"));
    }
    // The step's own variables first, the run variables last: a run variable always wins
    // (the spec already refuses `HOMEBASED_*` keys).
    for (name, value) in step
        .env
        .iter()
        .chain(&container_variables(run, dir, started_at))
    {
        args.push(format!("--env={name}={value}"));
    }
    args.push(step.image.clone());
    args.extend(entry_args.iter().cloned());
    args.extend(step.args.iter().flatten().cloned());
    args
}

/// The run variables of SPEC section 5 as a container sees them: the job and control
/// directories at their mount points, and the one exposed GPU as device 0 (in PCI bus order,
/// as on the host).
pub fn container_variables(
    run: &RunSpec,
    dir: &RunDir,
    started_at: Millis,
) -> BTreeMap<String, String> {
    let mut vars = run.host_variables(dir, started_at);
    vars.insert("HOMEBASED_JOB_DIR".into(), JOB_DIR_TARGET.into());
    vars.insert(
        "HOMEBASED_YIELD_FILE".into(),
        format!("{CONTROL_TARGET}/{YIELD_FILE}"),
    );
    match container_devices(run) {
        // `--gpus` exposes exactly the run's devices, numbered from 0 inside in the order
        // given.
        Some(devices) => {
            let inside: Vec<String> = (0..devices.len()).map(|i| i.to_string()).collect();
            vars.insert("CUDA_VISIBLE_DEVICES".into(), inside.join(","));
            vars.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
        }
        None => {
            vars.remove("CUDA_VISIBLE_DEVICES");
            vars.remove("CUDA_DEVICE_ORDER");
        }
    }
    vars
}

/// The devices Docker exposes, as `--gpus device=` names them (`<index>`, or a MIG slice's
/// `<index>:<instance>`), ascending; `None` when a lane has no device (nothing is exposed).
fn container_devices(run: &RunSpec) -> Option<Vec<String>> {
    let mut devices: Vec<(u32, u32, String)> = Vec::with_capacity(run.lanes.len());
    for lane in &run.lanes {
        devices.push(match (&lane.mig, lane.device) {
            (Some(mig), _) => (
                mig.gpu,
                mig.instance,
                format!("{}:{}", mig.gpu, mig.instance),
            ),
            (None, Some(index)) => (index, 0, index.to_string()),
            (None, None) => return None,
        });
    }
    devices.sort();
    Some(devices.into_iter().map(|(_, _, name)| name).collect())
}

/// `--gpus` for the run's devices: `device=0` for one, and for several the value in literal
/// double quotes (`"device=0,1"`): Docker reads the value as CSV, where an unquoted comma
/// starts a second option.
fn gpus_argument(run: &RunSpec) -> Option<String> {
    let devices = container_devices(run)?;
    Some(match devices.as_slice() {
        [one] => format!("--gpus=device={one}"),
        many => format!("--gpus=\"device={}\"", many.join(",")),
    })
}

/// `--mount=type=bind,source=..,target=..[,readonly]`. Docker reads the value as one CSV
/// record, so a field holding a comma or a quote is quoted (the spec refuses such user paths,
/// but the state home is the machine's choice).
fn bind_mount(source: &Path, target: &str, read_only: bool) -> String {
    let mut fields = vec![
        "type=bind".to_string(),
        csv_field(format!("source={}", source.display())),
        csv_field(format!("target={target}")),
    ];
    if read_only {
        fields.push("readonly".into());
    }
    format!("--mount={}", fields.join(","))
}

fn csv_field(field: String) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homebased_shared::config::CleanupConfig;
    use homebased_shared::ids::{JobId, TaskId};
    use homebased_shared::spec::{Mount, Step};

    const IMAGE: &str = "sha256:1fb4832128034c68b4ea904d8c9b5487c96bfa9e20d41ea5e49f159d9e1e21e3";

    fn step() -> ContainerStep {
        ContainerStep {
            image: IMAGE.into(),
            memory: 64 << 20,
            entrypoint: None,
            args: None,
            user: None,
            workdir: None,
            mounts: vec![],
            env: BTreeMap::new(),
        }
    }

    fn run(step: &ContainerStep, device: Option<u32>) -> RunSpec {
        RunSpec {
            task: TaskId::new(),
            job: JobId::new(),
            run_number: 2,
            step_index: 1,
            resume: true,
            step: Step::Container(step.clone()),
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

    /// When the containers of these tests start.
    const STARTED_AT: Millis = 1_764_669_600_000;

    fn args_of(step: &ContainerStep, device: Option<u32>) -> (RunSpec, Vec<String>) {
        let run = run(step, device);
        let dir = RunDir::new(format!("/h/tasks/{}", run.task));
        let args = docker_create_args(&run, step, &dir, STARTED_AT);
        (run, args)
    }

    /// The arguments that follow the image: the container's command.
    fn command(args: &[String]) -> &[String] {
        let at = args.iter().position(|a| a == IMAGE).unwrap();
        &args[at + 1..]
    }

    fn envs(args: &[String]) -> BTreeMap<String, String> {
        args.iter()
            .filter_map(|a| a.strip_prefix("--env="))
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    #[test]
    fn the_fixed_options_name_label_and_pin_the_container() {
        let (run, args) = args_of(&step(), None);
        let task = run.task;
        let expected_head: Vec<String> = vec![
            "create".into(),
            "--init".into(),
            format!("--name=homebased-{task}"),
            format!("--label=homebased.task={task}"),
            "--pull=never".into(),
            "--restart=no".into(),
            "--memory=67108864".into(),
            "--memory-swap=67108864".into(),
            format!("--cidfile=/h/tasks/{task}/container.id"),
        ];
        assert_eq!(args[..expected_head.len()], expected_head[..]);
        assert_eq!(args.last().unwrap(), IMAGE, "no command: the image's own");
    }

    #[test]
    fn gpus_and_cuda_visible_devices_only_for_an_indexed_resource() {
        let (_, unindexed) = args_of(&step(), None);
        assert!(!unindexed.iter().any(|a| a.starts_with("--gpus")));
        assert!(!envs(&unindexed).contains_key("CUDA_VISIBLE_DEVICES"));
        assert!(!envs(&unindexed).contains_key("CUDA_DEVICE_ORDER"));

        let (_, indexed) = args_of(&step(), Some(3));
        let gpus: Vec<_> = indexed.iter().filter(|a| a.starts_with("--gpus")).collect();
        assert_eq!(gpus, ["--gpus=device=3"]);
        assert_eq!(envs(&indexed)["CUDA_VISIBLE_DEVICES"], "0");
        assert_eq!(envs(&indexed)["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    }

    #[test]
    fn a_container_is_told_its_deadline_as_a_host_step_is() {
        let mut run = run(&step(), Some(1));
        let dir = RunDir::new(format!("/h/tasks/{}", run.task));
        assert!(!envs(&docker_create_args(&run, &step(), &dir, STARTED_AT))
            .contains_key("HOMEBASED_DEADLINE"));
        run.time_limit = Some(std::time::Duration::from_secs(60));
        let env = envs(&docker_create_args(&run, &step(), &dir, STARTED_AT));
        assert_eq!(env["HOMEBASED_DEADLINE"], "2025-12-02T10:01:00Z");
    }

    /// Several lanes: one `--gpus` whose value carries its double quotes (an unquoted comma
    /// would be a second option to Docker), the devices ascending; inside they are 0..n.
    #[test]
    fn several_lanes_are_one_quoted_gpus_argument() {
        let step = step();
        let mut run = run(&step, Some(3));
        run.lanes.insert(
            0,
            homebased_shared::rundir::RunLane {
                name: "gpu5".into(),
                device: Some(5),
                mig: None,
            },
        );
        let dir = RunDir::new(format!("/h/tasks/{}", run.task));
        let args = docker_create_args(&run, &step, &dir, STARTED_AT);
        let gpus: Vec<_> = args.iter().filter(|a| a.starts_with("--gpus")).collect();
        assert_eq!(gpus, ["--gpus=\"device=3,5\""]);
        let env = envs(&args);
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0,1");
        assert_eq!(env["HOMEBASED_RESOURCE"], "gpu5,gpu0");
        // A lane without a device: nothing is exposed, as for one such lane.
        run.lanes[1].device = None;
        let args = docker_create_args(&run, &step, &dir, STARTED_AT);
        assert!(!args.iter().any(|a| a.starts_with("--gpus")));
        assert!(!envs(&args).contains_key("CUDA_VISIBLE_DEVICES"));
    }

    #[test]
    fn the_job_dir_is_mounted_writable_and_the_control_dir_read_only() {
        let (run, args) = args_of(&step(), None);
        let mounts: Vec<&String> = args.iter().filter(|a| a.starts_with("--mount=")).collect();
        assert_eq!(
            mounts,
            [
                &"--mount=type=bind,source=/h/jobs/j/state,target=/homebased/job".to_string(),
                &format!(
                    "--mount=type=bind,source=/h/tasks/{}/control,target=/homebased/run,readonly",
                    run.task
                ),
            ]
        );
    }

    #[test]
    fn step_mounts_keep_their_read_only_flag_and_odd_paths_are_quoted() {
        let mut s = step();
        s.mounts = vec![
            Mount {
                source: "/data/in".into(),
                target: "/in".into(),
                read_only: true,
            },
            Mount {
                source: "/data/out".into(),
                target: "/out".into(),
                read_only: false,
            },
        ];
        let (_, args) = args_of(&s, None);
        assert!(args.contains(&"--mount=type=bind,source=/data/in,target=/in,readonly".into()));
        assert!(args.contains(&"--mount=type=bind,source=/data/out,target=/out".into()));

        assert_eq!(
            bind_mount(Path::new("/a,b\"c"), "/t", true),
            r#"--mount=type=bind,"source=/a,b""c",target=/t,readonly"#
        );
    }

    #[test]
    fn run_variables_use_container_paths_and_step_env_is_explicit() {
        let mut s = step();
        s.env = BTreeMap::from([
            ("SEED".to_string(), "1".to_string()),
            ("EMPTY".to_string(), String::new()),
        ]);
        let (run, args) = args_of(&s, None);
        let env = envs(&args);
        let dir = RunDir::new(format!("/h/tasks/{}", run.task));
        let mut expected = run.host_variables(&dir, STARTED_AT);
        expected.insert("HOMEBASED_JOB_DIR".into(), "/homebased/job".into());
        expected.insert("HOMEBASED_YIELD_FILE".into(), "/homebased/run/yield".into());
        expected.insert("SEED".into(), "1".into());
        expected.insert("EMPTY".into(), String::new());
        assert_eq!(env, expected);
        assert_eq!(env["HOMEBASED_HOME"], "/h");
        assert_eq!(env["HOMEBASED_RESUME"], "1");
        assert!(
            !env.contains_key("PATH") && !env.contains_key("HOME"),
            "the image keeps its own PATH and HOME"
        );
        assert!(
            args.iter()
                .filter(|a| a.starts_with("--env"))
                .all(|a| a.starts_with("--env=") && a[6..].contains('=')),
            "every variable carries an explicit value"
        );
    }

    #[test]
    fn the_entrypoint_is_split_program_first_then_its_args_before_the_step_args() {
        let mut s = step();
        s.entrypoint = Some(vec!["python".into(), "-u".into(), "train.py".into()]);
        s.args = Some(vec!["--epochs".into(), "3".into()]);
        s.user = Some("1000:1000".into());
        s.workdir = Some("/work".into());
        let (_, args) = args_of(&s, None);
        assert!(args.contains(&"--entrypoint=python".into()));
        assert!(args.contains(&"--user=1000:1000".into()));
        assert!(args.contains(&"--workdir=/work".into()));
        assert_eq!(command(&args), ["-u", "train.py", "--epochs", "3"]);

        let mut only_args = step();
        only_args.args = Some(vec!["sh".into(), "-c".into(), "exit 3".into()]);
        let (_, args) = args_of(&only_args, None);
        assert!(!args.iter().any(|a| a.starts_with("--entrypoint")));
        assert_eq!(command(&args), ["sh", "-c", "exit 3"]);

        let mut only_entrypoint = step();
        only_entrypoint.entrypoint = Some(vec!["/bin/true".into()]);
        let (_, args) = args_of(&only_entrypoint, None);
        assert!(args.contains(&"--entrypoint=/bin/true".into()));
        assert!(command(&args).is_empty());
    }

    #[test]
    fn spec_values_cannot_become_options() {
        let mut s = step();
        s.entrypoint = Some(vec!["--privileged".into()]);
        s.env = BTreeMap::from([("-v".to_string(), "/:/host".to_string())]);
        let (_, args) = args_of(&s, None);
        assert!(args.contains(&"--entrypoint=--privileged".into()));
        assert!(args.contains(&"--env=-v=/:/host".into()));
        assert!(!args.contains(&"--privileged".into()));
    }

    #[test]
    fn nothing_is_forced_and_nothing_unmodelled_is_added() {
        let mut s = step();
        s.entrypoint = Some(vec!["sh".into(), "-c".into()]);
        s.args = Some(vec!["true".into()]);
        let (_, args) = args_of(&s, Some(0));
        let options: Vec<&str> = args[..args.iter().position(|a| a == IMAGE).unwrap()]
            .iter()
            .map(|a| a.split('=').next().unwrap())
            .collect();
        let allowed = [
            "create",
            "--init",
            "--name",
            "--label",
            "--pull",
            "--restart",
            "--memory",
            "--memory-swap",
            "--cidfile",
            "--gpus",
            "--mount",
            "--entrypoint",
            "--env",
        ];
        for option in options {
            assert!(allowed.contains(&option), "unexpected option {option}");
        }
        assert!(!args.iter().any(|a| a == "--force" || a == "-f"));
    }
}
