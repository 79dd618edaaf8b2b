//! The `task` step: one host command, its program resolved at submit, escape entry points
//! refused.

use super::input::{argv, env_map, invalid, refuse, EnvRule, Fields, Ptr};
use super::validate::SubmitContext;
use super::{Step, YieldCodes, MAX_YIELD_CODES};
use crate::error::{ApiError, ErrorCode};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub(super) const TASK_FIELDS: &[&str] = &["type", "command", "env", "yield_codes"];

/// Programs that hand work to a server outside the run (a terminal multiplexer, a service
/// manager, a container engine, a remote shell). Cleanup finds work by the run's marker in
/// its environment, which such work never carries.
const ESCAPES: &[&str] = &[
    "tmux",
    "screen",
    "launchctl",
    "systemd-run",
    "docker",
    "podman",
    "nerdctl",
    "ssh",
    "mosh",
];

/// Symlink hops followed before giving up, as the kernel's own limit (`ELOOP`).
const MAX_LINK_HOPS: usize = 40;

pub(super) fn task_step(
    v: &Value,
    at: &Ptr,
    cwd: &Path,
    ctx: &SubmitContext,
) -> Result<Step, ApiError> {
    let f = Fields::open(v, at, "a task step", TASK_FIELDS, task_hint)?;
    let (cmd, cmd_at) = f.required("command")?;
    let command = argv(cmd, &cmd_at, true)?;
    let program_at = cmd_at.index(0);
    let written = &cmd[0];
    let yield_codes = match f.optional("yield_codes") {
        Some((v, at)) => yield_codes(v, &at)?,
        None => YieldCodes::default(),
    };
    if ctx.elsewhere {
        // The program is resolved by the machine that runs it, against its own PATH.
        let env = match f.optional("env") {
            Some((v, at)) => env_map(v, &at, EnvRule::Host)?,
            None => Default::default(),
        };
        return Ok(Step::Task {
            command,
            env,
            yield_codes,
        });
    }

    let program = resolve_program(&command[0], cwd, ctx.path.as_deref()).ok_or_else(|| {
        let searched = if command[0].contains('/') {
            format!("relative to {}", cwd.display())
        } else if ctx.path.is_some() {
            "on the submitter's PATH".to_string()
        } else {
            "(no PATH was given, so only a path containing '/' resolves)".to_string()
        };
        refuse(
            ErrorCode::ExecutableMissing,
            &program_at,
            written,
            format!("no executable file {:?} {searched}", command[0]),
        )
    })?;

    if let Some(name) = escape_name(&program) {
        return Err(invalid(
            &program_at,
            written,
            format!(
                "{} resolves to {name}: work handed to {name} runs outside the run and \
                 escapes cleanup; run the work directly (or use a container step)",
                program.display()
            ),
        ));
    }
    let env = match f.optional("env") {
        Some((v, at)) => env_map(v, &at, EnvRule::Host)?,
        None => Default::default(),
    };
    Ok(Step::Task {
        command,
        env,
        yield_codes,
    })
}

/// `yield_codes`: 1 to 8 distinct exit codes from 1 to 255, kept in the order written. 0 is
/// never one: a genuine exit 0 is finished work, never a preemption.
fn yield_codes(v: &Value, at: &Ptr) -> Result<YieldCodes, ApiError> {
    let list = v
        .as_array()
        .filter(|l| (1..=MAX_YIELD_CODES).contains(&l.len()))
        .ok_or_else(|| {
            invalid(
                at,
                v,
                format!("must be a list of 1 to {MAX_YIELD_CODES} exit codes, such as [75, 1]"),
            )
        })?;
    let mut codes: Vec<u8> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let code = item
            .as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .filter(|&n| n != 0)
            .ok_or_else(|| invalid(&at.index(i), item, "must be an exit code from 1 to 255"))?;
        if codes.contains(&code) {
            return Err(invalid(&at.index(i), item, "is listed twice"));
        }
        codes.push(code);
    }
    Ok(YieldCodes::new(codes))
}

fn task_hint(field: &str) -> Option<&'static str> {
    Some(match field {
        "args" | "argv" => "put the arguments in \"command\" after the program",
        "cwd" => "cwd is set once for the whole job, at the top level",
        "environment" | "env_file" => "use \"env\" with explicit values",
        "shell" | "script" => "no shell is added; write [\"sh\", \"-c\", \"...\"] explicitly",
        "image" | "memory" | "mounts" => "that belongs to a step of \"type\": \"container\"",
        _ => return None,
    })
}

/// Where `program` resolves, as `execvp` would: with a `/` relative to the job's cwd,
/// otherwise the first executable regular file on `PATH` (an empty or relative entry is
/// taken from the job's cwd, where the step will run).
fn resolve_program(program: &str, cwd: &Path, path: Option<&str>) -> Option<PathBuf> {
    if program.contains('/') {
        let candidate = cwd.join(program);
        return is_executable_file(&candidate).then_some(candidate);
    }
    path?
        .split(':')
        .map(|dir| cwd.join(dir).join(program))
        .find(|candidate| is_executable_file(candidate))
}

/// A regular file (after symlinks) with an execute bit for someone.
fn is_executable_file(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The escape entry point `program` leads to, if any: its own name, every symlink hop on the
/// way, and the fully resolved file are all checked, so neither a link named otherwise nor a
/// chain through a `docker` link hides one.
fn escape_name(program: &Path) -> Option<&'static str> {
    let mut current = program.to_path_buf();
    for _ in 0..MAX_LINK_HOPS {
        if let Some(name) = escape_file_name(&current) {
            return Some(name);
        }
        let Ok(target) = fs::read_link(&current) else {
            break;
        };
        current = match current.parent() {
            Some(dir) => dir.join(target),
            None => target,
        };
    }
    fs::canonicalize(program)
        .ok()
        .and_then(|resolved| escape_file_name(&resolved))
}

/// Compared without case: on case-insensitive file systems `Docker` is `docker`.
fn escape_file_name(path: &Path) -> Option<&'static str> {
    let name = path.file_name()?.to_str()?;
    ESCAPES
        .iter()
        .copied()
        .find(|e| e.eq_ignore_ascii_case(name))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testkit::{Edit, Fixture};
    use crate::error::ErrorCode;
    use crate::spec::Step;
    use serde_json::json;
    use std::os::unix::fs::symlink;

    #[test]
    fn program_on_path_resolves_and_argv_is_kept_as_written() {
        let fx = Fixture::new();
        let valid = fx.validate(&fx.spec()).unwrap();
        assert_eq!(
            valid.spec.steps,
            vec![Step::Task {
                command: vec!["tool".into(), "--flag".into()],
                env: Default::default(),
                yield_codes: Default::default(),
            }]
        );
    }

    #[test]
    fn task_env_is_kept_and_an_empty_one_leaves_the_digest_alone() {
        let fx = Fixture::new();
        let plain = fx.validate(&fx.spec()).unwrap();
        let mut spec = fx.spec();
        Edit::set("/workload/env", json!({})).apply(&mut spec);
        let empty = fx.validate(&spec).unwrap();
        assert_eq!(empty.digest, plain.digest);
        Edit::set("/workload/env", json!({"PYTHONUNBUFFERED": "1", "_X9": ""})).apply(&mut spec);
        let valid = fx.validate(&spec).unwrap();
        assert_ne!(valid.digest, plain.digest);
        let Step::Task { env, .. } = &valid.spec.steps[0] else {
            panic!("a task step");
        };
        assert_eq!(env["PYTHONUNBUFFERED"], "1");
        assert_eq!(env["_X9"], "");
        assert_eq!(valid.canonical["steps"][0]["env"]["PYTHONUNBUFFERED"], "1");
    }

    #[test]
    fn yield_codes_default_to_75_and_the_default_leaves_the_digest_alone() {
        let fx = Fixture::new();
        let plain = fx.validate(&fx.spec()).unwrap();
        assert_eq!(plain.spec.steps[0].yield_codes().codes(), [75]);
        assert!(plain.canonical["steps"][0].get("yield_codes").is_none());
        let mut spec = fx.spec();
        Edit::set("/workload/yield_codes", json!([75])).apply(&mut spec);
        assert_eq!(fx.validate(&spec).unwrap().digest, plain.digest);

        Edit::set("/workload/yield_codes", json!([75, 1])).apply(&mut spec);
        let torchrun = fx.validate(&spec).unwrap();
        assert_ne!(torchrun.digest, plain.digest);
        let codes = torchrun.spec.steps[0].yield_codes();
        assert_eq!(codes.codes(), [75, 1]);
        assert!(codes.contains(1) && codes.contains(75) && !codes.contains(0));
        assert_eq!(
            torchrun.canonical["steps"][0]["yield_codes"],
            json!([75, 1])
        );
        // The canonical spec reads back as the same step.
        let again: crate::spec::JobSpec =
            serde_json::from_value(torchrun.canonical.clone()).unwrap();
        assert_eq!(again.steps, torchrun.spec.steps);
    }

    #[test]
    fn yield_codes_refusals_name_the_offending_code() {
        let fx = Fixture::new();
        #[rustfmt::skip]
        let cases = [
            ("not a list", json!(75), "/workload/yield_codes"),
            ("empty", json!([]), "/workload/yield_codes"),
            ("more than 8", json!([1, 2, 3, 4, 5, 6, 7, 8, 9]), "/workload/yield_codes"),
            ("zero", json!([75, 0]), "/workload/yield_codes/1"),
            ("over 255", json!([256]), "/workload/yield_codes/0"),
            ("negative", json!([-1]), "/workload/yield_codes/0"),
            ("not an integer", json!([7.5]), "/workload/yield_codes/0"),
            ("text", json!(["75"]), "/workload/yield_codes/0"),
            ("twice", json!([75, 1, 75]), "/workload/yield_codes/2"),
        ];
        for (behaviour, codes, pointer) in cases {
            let mut spec = fx.spec();
            Edit::set("/workload/yield_codes", codes).apply(&mut spec);
            fx.assert_refused(behaviour, &spec, ErrorCode::InvalidSpec, pointer);
        }
        // Eight is allowed.
        let mut spec = fx.spec();
        Edit::set("/workload/yield_codes", json!([1, 2, 3, 4, 5, 6, 7, 8])).apply(&mut spec);
        fx.validate(&spec).unwrap();
    }

    #[test]
    fn command_with_slash_resolves_against_the_spec_cwd() {
        let fx = Fixture::new();
        fx.executable("work/run.sh");
        let mut spec = fx.spec();
        Edit::set("/cwd", json!("work")).apply(&mut spec);
        Edit::set("/workload/command", json!(["./run.sh"])).apply(&mut spec);
        fx.validate(&spec).unwrap();

        // The same name is not looked up relative to the submitter's own cwd.
        Edit::set("/cwd", json!(".")).apply(&mut spec);
        fx.assert_refused(
            "missing",
            &spec,
            ErrorCode::ExecutableMissing,
            "/workload/command/0",
        );
    }

    #[test]
    fn relative_path_entries_are_taken_from_the_spec_cwd() {
        let mut fx = Fixture::new();
        fx.executable("work/tools/mine");
        fx.ctx.path = Some("/nonexistent:tools".into());
        let mut spec = fx.spec();
        Edit::set("/cwd", json!("work")).apply(&mut spec);
        Edit::set("/workload/command", json!(["mine"])).apply(&mut spec);
        fx.validate(&spec).unwrap();
    }

    #[test]
    fn task_rules_refuse_with_pointer_and_code() {
        let fx = Fixture::new();
        fx.file("bin/plain", 0o644);
        std::fs::create_dir_all(fx.dir.path().join("bin/folder")).unwrap();
        fx.executable("bin/docker");
        fx.executable("bin/SSH");
        symlink(
            fx.dir.path().join("bin/docker"),
            fx.dir.path().join("bin/mytool"),
        )
        .unwrap();
        // hop2 -> hop -> alt/docker -> ../engine: only a link in the middle is named docker.
        fx.executable("bin/engine");
        std::fs::create_dir_all(fx.dir.path().join("bin/alt")).unwrap();
        symlink("../engine", fx.dir.path().join("bin/alt/docker")).unwrap();
        symlink("alt/docker", fx.dir.path().join("bin/hop")).unwrap();
        symlink("hop", fx.dir.path().join("bin/hop2")).unwrap();
        symlink("gone", fx.dir.path().join("bin/dangling")).unwrap();
        let step = |command: serde_json::Value| json!({ "type": "task", "command": command });

        use ErrorCode::{ExecutableMissing as Missing, InvalidSpec as Invalid};
        #[rustfmt::skip]
        let cases = [
            ("missing command", json!({"type": "task"}), Invalid, "/steps/1/command"),
            ("empty argv", step(json!([])), Invalid, "/steps/1/command"),
            ("argv not a list", step(json!("tool")), Invalid, "/steps/1/command"),
            ("non-string arg", step(json!(["tool", 3])), Invalid, "/steps/1/command/1"),
            ("NUL in an arg", step(json!(["tool", "a\u{0}b"])), Invalid, "/steps/1/command/1"),
            ("NUL in argv0", step(json!(["to\u{0}ol"])), Invalid, "/steps/1/command/0"),
            ("empty program", step(json!([""])), Invalid, "/steps/1/command/0"),
            ("unknown field", json!({"type": "task", "command": ["tool"], "environment": {}}), Invalid, "/steps/1/environment"),
            ("env list", json!({"type": "task", "command": ["tool"], "env": ["A=1"]}), Invalid, "/steps/1/env"),
            ("env key with =", json!({"type": "task", "command": ["tool"], "env": {"A=B": "1"}}), Invalid, "/steps/1/env/A=B"),
            ("env key with a dot", json!({"type": "task", "command": ["tool"], "env": {"A.B": "1"}}), Invalid, "/steps/1/env/A.B"),
            ("env key starting with a digit", json!({"type": "task", "command": ["tool"], "env": {"1A": "1"}}), Invalid, "/steps/1/env/1A"),
            ("env marker", json!({"type": "task", "command": ["tool"], "env": {"HOMEBASED_TASK_ID": "x"}}), Invalid, "/steps/1/env/HOMEBASED_TASK_ID"),
            ("env resume", json!({"type": "task", "command": ["tool"], "env": {"HOMEBASED_RESUME": "1"}}), Invalid, "/steps/1/env/HOMEBASED_RESUME"),
            ("env device", json!({"type": "task", "command": ["tool"], "env": {"CUDA_VISIBLE_DEVICES": "1"}}), Invalid, "/steps/1/env/CUDA_VISIBLE_DEVICES"),
            ("env number", json!({"type": "task", "command": ["tool"], "env": {"SEED": 1}}), Invalid, "/steps/1/env/SEED"),
            ("env NUL value", json!({"type": "task", "command": ["tool"], "env": {"SEED": "a\u{0}"}}), Invalid, "/steps/1/env/SEED"),
            ("not on PATH", step(json!(["no-such-tool"])), Missing, "/steps/1/command/0"),
            ("not executable", step(json!(["plain"])), Missing, "/steps/1/command/0"),
            ("a directory", step(json!(["folder"])), Missing, "/steps/1/command/0"),
            ("dangling link", step(json!(["dangling"])), Missing, "/steps/1/command/0"),
            ("missing path", step(json!(["./bin/nope"])), Missing, "/steps/1/command/0"),
        ];
        let refuse_in_steps = |behaviour: &str, bad_step: &serde_json::Value, code, pointer| {
            let mut spec = fx.spec();
            Edit::remove("/workload").apply(&mut spec);
            Edit::set(
                "/steps",
                json!([{"type": "task", "command": ["tool"]}, bad_step]),
            )
            .apply(&mut spec);
            fx.assert_refused(behaviour, &spec, code, pointer)
        };
        for (behaviour, bad_step, code, pointer) in cases {
            refuse_in_steps(behaviour, &bad_step, code, pointer);
        }

        #[rustfmt::skip]
        let escapes = [
            ("named docker", json!(["docker", "run"])),
            ("named by path", json!(["bin/docker"])),
            ("other case", json!(["SSH"])),
            ("link to docker", json!(["mytool"])),
            ("chain via docker", json!(["hop2"])),
        ];
        for (behaviour, command) in escapes {
            let err = refuse_in_steps(behaviour, &step(command), Invalid, "/steps/1/command/0");
            assert!(
                err.message.contains("escapes cleanup"),
                "{behaviour}: {}",
                err.message
            );
        }

        // The file a docker-named link points at is fine when reached under its own name.
        let mut spec = fx.spec();
        Edit::set("/workload/command", json!(["engine"])).apply(&mut spec);
        fx.validate(&spec).unwrap();
    }

    #[test]
    fn no_path_resolves_only_slash_programs() {
        let mut fx = Fixture::new();
        fx.ctx.path = None;
        let mut spec = fx.spec();
        let err = fx.assert_refused(
            "missing",
            &spec,
            ErrorCode::ExecutableMissing,
            "/workload/command/0",
        );
        assert!(err.message.contains("no PATH"), "{}", err.message);
        Edit::set("/workload/command", json!(["bin/tool"])).apply(&mut spec);
        fx.validate(&spec).unwrap();
    }
}
