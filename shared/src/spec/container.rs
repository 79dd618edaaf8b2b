//! The `container` step: one pinned image run with the Docker CLI, with only the options the
//! queue can clean up after. Everything else Docker offers is refused.

use super::input::{argv, env_map, invalid, text, EnvRule, Fields, Ptr};
use super::{ContainerStep, Mount, Step, MIN_CONTAINER_MEMORY};
use crate::error::ApiError;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

pub(super) const CONTAINER_FIELDS: &[&str] = &[
    "type",
    "image",
    "memory",
    "entrypoint",
    "args",
    "user",
    "workdir",
    "mounts",
    "env",
];
pub(super) const MOUNT_FIELDS: &[&str] = &["source", "target", "read_only"];

/// Where the worker mounts the job and control directories; user mounts stay clear of it.
const RESERVED_TARGET: &str = "/homebased";

/// Directories that hold the Docker socket on common installs, refused even when the socket
/// is not there right now (it appears when the engine starts).
const SOCKET_DIRS: &[&str] = &["/", "/run", "/var", "/var/run"];

pub(super) fn container_step(v: &Value, at: &Ptr, elsewhere: bool) -> Result<Step, ApiError> {
    let f = Fields::open(v, at, "a container step", CONTAINER_FIELDS, container_hint)?;

    let (v, at) = f.required("image")?;
    let image = text(v, &at)?;
    pinned_image(image).map_err(|why| invalid(&at, v, why))?;

    let (v, at) = f.required("memory")?;
    let memory = memory(v, &at)?;

    let entrypoint = f
        .optional("entrypoint")
        .map(|(v, at)| argv(v, &at, true))
        .transpose()?;
    let args = f
        .optional("args")
        .map(|(v, at)| argv(v, &at, false))
        .transpose()?;
    let user = f.optional("user").map(|(v, at)| user(v, &at)).transpose()?;
    let workdir = f
        .optional("workdir")
        .map(|(v, at)| workdir(v, &at))
        .transpose()?;
    let mounts = match f.optional("mounts") {
        Some((v, at)) => mounts(v, &at, elsewhere)?,
        None => Vec::new(),
    };
    let env = match f.optional("env") {
        Some((v, at)) => env_map(v, &at, EnvRule::Container)?,
        None => BTreeMap::new(),
    };

    Ok(Step::Container(ContainerStep {
        image: image.to_string(),
        memory,
        entrypoint,
        args,
        user,
        workdir,
        mounts,
        env,
    }))
}

/// Explanations for the Docker options people reach for; they are refused like any unknown
/// field, because the queue could not clean up after them or they would fight its own.
fn container_hint(field: &str) -> Option<&'static str> {
    Some(match field {
        "gpus" | "gpu" | "runtime" => {
            "the queue owns GPU selection and passes the resource's device itself"
        }
        "privileged" | "cap_add" | "cap_drop" | "capabilities" | "security_opt" | "devices"
        | "device" | "device_cgroup_rule" => {
            "privileges, capabilities and devices are not offered: they reach past what \
             cleanup can confine"
        }
        "network" | "net" | "network_mode" | "pid" | "ipc" | "uts" | "userns" | "cgroupns"
        | "cgroup_parent" => "host namespaces and cgroups are not offered",
        "restart" | "restart_policy" | "detach" | "rm" | "name" | "pull" | "init" => {
            "the worker runs the container itself (never pulled, no restart policy) and \
             removes it after cleanup"
        }
        "volumes" | "volume" | "volumes_from" | "tmpfs" | "bind" => {
            "use \"mounts\": [{\"source\", \"target\", \"read_only\"}]"
        }
        "ports" | "publish" | "expose" => "published ports are not offered",
        "memory_swap" | "swap" => "\"memory\" is also the swap limit",
        "command" | "cmd" => "use \"args\" (and \"entrypoint\" to replace the image's entrypoint)",
        "working_dir" | "cwd" => {
            "use \"workdir\" for the directory inside the container; the job's cwd is set at \
             the top level"
        }
        "environment" | "env_file" => "use \"env\" with explicit values",
        _ => return None,
    })
}

/// `sha256:<64 hex>` or `name@sha256:<64 hex>`: an image is never pulled, so it must be named
/// by content, and the name must not read as a Docker CLI option.
fn pinned_image(image: &str) -> Result<(), String> {
    let (name, digest) = match image.rsplit_once('@') {
        Some((name, digest)) => (Some(name), digest),
        None => (None, image),
    };
    let hex = digest.strip_prefix("sha256:").unwrap_or("");
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err("must be pinned by digest: sha256:<64 lowercase hex> or \
                    name@sha256:<64 lowercase hex>; images are never pulled"
            .into());
    }
    match name {
        Some(name) if !image_name_ok(name) => Err(format!(
            "{name:?} is not an image reference (like registry.example:5000/team/model:tag)"
        )),
        _ => Ok(()),
    }
}

/// A Docker reference: `[domain[:port]/]path[/path...][:tag]`, path components lower-case.
fn image_name_ok(name: &str) -> bool {
    let (rest, tag) = match name.rsplit_once(':') {
        Some((rest, tag)) if !tag.contains('/') => (rest, Some(tag)),
        _ => (name, None),
    };
    if let Some(tag) = tag {
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        if tag.len() > 128
            || !tag.starts_with(word)
            || !tag.chars().all(|c| word(c) || c == '.' || c == '-')
        {
            return false;
        }
    }
    let parts: Vec<&str> = rest.split('/').collect();
    let has_domain = parts.len() > 1
        && (parts[0].contains(['.', ':'])
            || parts[0] == "localhost"
            || parts[0] != parts[0].to_lowercase());
    let alnum_ends = |p: &str| {
        p.starts_with(|c: char| c.is_ascii_alphanumeric())
            && p.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    parts.iter().enumerate().all(|(i, p)| {
        if i == 0 && has_domain {
            let (host, port) = p.split_once(':').unwrap_or((p, "1"));
            alnum_ends(host)
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
                && !port.is_empty()
                && port.chars().all(|c| c.is_ascii_digit())
        } else {
            alnum_ends(p)
                && p.chars()
                    .all(|c| matches!(c, 'a'..='z' | '0'..='9' | '.' | '_' | '-'))
        }
    }) && name.len() <= 255
}

fn memory(v: &Value, at: &Ptr) -> Result<u64, ApiError> {
    let bytes = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => parse_size(s),
        _ => None,
    }
    .ok_or_else(|| {
        invalid(
            at,
            v,
            "must be a whole number of bytes or a size like 512m, 24g or 100MiB \
             (units b, k, m, g, t; binary multiples)",
        )
    })?;
    if bytes < MIN_CONTAINER_MEMORY {
        return Err(invalid(at, v, "must be at least 6 MiB"));
    }
    // Docker and SQLite both hold it as a signed 64-bit integer.
    if bytes > i64::MAX as u64 {
        return Err(invalid(at, v, "is larger than any machine"));
    }
    Ok(bytes)
}

/// `<digits>[ ][unit]` with unit one of b, k, m, g, t, each optionally followed by `b` or
/// `ib`, case-insensitive. Every multiple is binary, as Docker's own parser does for `24g`.
pub(super) fn parse_size(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits.parse().ok()?;
    let unit = unit.strip_prefix(' ').unwrap_or(unit).to_ascii_lowercase();
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

/// Numeric `uid:gid`, stored without leading zeros so equal users hash equally.
fn user(v: &Value, at: &Ptr) -> Result<String, ApiError> {
    let numeric = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    match text(v, at)?.split_once(':') {
        Some((uid, gid)) => match (numeric(uid), numeric(gid)) {
            (Some(uid), Some(gid)) => Ok(format!("{uid}:{gid}")),
            _ => Err(invalid(at, v, "must be numeric uid:gid, like 1000:1000")),
        },
        None => Err(invalid(at, v, "must be numeric uid:gid, like 1000:1000")),
    }
}

fn workdir(v: &Value, at: &Ptr) -> Result<String, ApiError> {
    let s = text(v, at)?;
    if !s.starts_with('/') || s.contains('\0') {
        return Err(invalid(
            at,
            v,
            "must be an absolute path inside the container",
        ));
    }
    Ok(s.to_string())
}

fn mounts(v: &Value, at: &Ptr, elsewhere: bool) -> Result<Vec<Mount>, ApiError> {
    let list = v
        .as_array()
        .ok_or_else(|| invalid(at, v, "must be an array of mounts"))?;
    let mut targets = BTreeSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let at = at.index(i);
        let mount = mount(item, &at, elsewhere)?;
        if !targets.insert(mount.target.clone()) {
            let (v, at) = (&item["target"], at.key("target"));
            return Err(invalid(&at, v, "is the target of an earlier mount too"));
        }
        out.push(mount);
    }
    Ok(out)
}

fn mount(v: &Value, at: &Ptr, elsewhere: bool) -> Result<Mount, ApiError> {
    let f = Fields::open(v, at, "a mount", MOUNT_FIELDS, |_| None)?;

    let (v, source_at) = f.required("source")?;
    let source = normal_path(v, &source_at)?;
    // Another machine's source is checked (it exists, where its links lead) by its daemon.
    let resolved = if elsewhere {
        source.clone()
    } else {
        fs::canonicalize(&source)
            .map_err(|e| invalid(&source_at, v, format!("must exist on this machine ({e})")))?
    };
    if let Some(why) = docker_socket(&source).or_else(|| docker_socket(&resolved)) {
        return Err(invalid(
            &source_at,
            v,
            format!("{why}: with it the container could start work outside the run"),
        ));
    }

    let (v, target_at) = f.required("target")?;
    let target = normal_path(v, &target_at)?;
    if target == Path::new("/") || target.starts_with(RESERVED_TARGET) {
        return Err(invalid(
            &target_at,
            v,
            "must not be / or at or under /homebased, where the job and control directories go",
        ));
    }

    let read_only = match f.optional("read_only") {
        None => false,
        Some((v, at)) => v
            .as_bool()
            .ok_or_else(|| invalid(&at, v, "must be true or false"))?,
    };
    Ok(Mount {
        source,
        target,
        read_only,
    })
}

/// An absolute path written in normal form: no `.` or `..`, no empty component, no trailing
/// `/`. Characters that Docker's `--mount` and `-v` syntaxes split on are refused too, so the
/// worker can pass the path without quoting.
fn normal_path(v: &Value, at: &Ptr) -> Result<PathBuf, ApiError> {
    let s = text(v, at)?;
    let normal = s == "/"
        || (s.starts_with('/') && s[1..].split('/').all(|c| !matches!(c, "" | "." | "..")));
    if !normal {
        return Err(invalid(
            at,
            v,
            "must be an absolute path in normal form (no ., .., // or trailing /)",
        ));
    }
    if s.contains([',', ':', '"']) || s.chars().any(char::is_control) {
        return Err(invalid(
            at,
            v,
            "must not contain , : \" or control characters (Docker's mount syntax splits on them)",
        ));
    }
    Ok(PathBuf::from(s))
}

/// Why `source` would hand the container the Docker socket, if it would.
fn docker_socket(source: &Path) -> Option<String> {
    if source.file_name().is_some_and(|n| n == "docker.sock") {
        return Some(format!("{} is a Docker socket", source.display()));
    }
    if SOCKET_DIRS.iter().any(|d| source == Path::new(d)) {
        return Some(format!("{} holds the Docker socket", source.display()));
    }
    // symlink_metadata: a dangling `docker.sock` link still names the socket-to-be.
    if fs::symlink_metadata(source.join("docker.sock")).is_ok() {
        return Some(format!(
            "{} holds a Docker socket (docker.sock)",
            source.display()
        ));
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testkit::{Edit, Fixture};
    use super::*;
    use crate::error::ErrorCode;
    use serde_json::json;
    use std::os::unix::fs::symlink;

    fn digest(c: char) -> String {
        c.to_string().repeat(64)
    }

    /// The fixture's spec with a minimal container workload.
    fn container_spec(fx: &Fixture) -> Value {
        let mut spec = fx.spec();
        let image = format!("sha256:{}", digest('a'));
        Edit::set(
            "/workload",
            json!({"type": "container", "image": image, "memory": "1g"}),
        )
        .apply(&mut spec);
        spec
    }

    #[test]
    fn container_defaults_are_written_out() {
        let fx = Fixture::new();
        let valid = fx.validate(&container_spec(&fx)).unwrap();
        assert_eq!(
            valid.canonical["steps"],
            json!([{
                "type": "container",
                "image": format!("sha256:{}", digest('a')),
                "memory": 1u64 << 30,
                "entrypoint": null,
                "args": null,
                "user": null,
                "workdir": null,
                "mounts": [],
                "env": {},
            }])
        );
    }

    #[test]
    fn every_container_field_is_read() {
        let fx = Fixture::new();
        let mut spec = container_spec(&fx);
        let image = format!(
            "registry.example:5000/team/model:v1.2@sha256:{}",
            digest('0')
        );
        let step = json!({
            "type": "container", "image": image, "memory": 6 * 1024 * 1024,
            "entrypoint": ["python", ""], "args": [""], "user": "0100:007", "workdir": "/work",
            "mounts": [
                {"source": fx.abs("bin"), "target": "/data", "read_only": true},
                {"source": fx.abs("bin/tool"), "target": "/tool"},
            ],
            "env": {"SEED": "1", "EMPTY": ""},
        });
        Edit::set("/workload", step).apply(&mut spec);
        let valid = fx.validate(&spec).unwrap();
        let Step::Container(c) = &valid.spec.steps[0] else {
            panic!("not a container step: {:?}", valid.spec.steps)
        };
        assert_eq!(c.image, image);
        assert_eq!(c.memory, MIN_CONTAINER_MEMORY);
        assert_eq!(c.entrypoint, Some(vec!["python".into(), String::new()]));
        assert_eq!(c.args, Some(vec![String::new()]));
        assert_eq!(c.user.as_deref(), Some("100:7"));
        assert_eq!(c.workdir.as_deref(), Some("/work"));
        assert_eq!(
            c.mounts,
            vec![
                Mount {
                    source: fx.abs("bin").into(),
                    target: "/data".into(),
                    read_only: true
                },
                Mount {
                    source: fx.abs("bin/tool").into(),
                    target: "/tool".into(),
                    read_only: false
                },
            ]
        );
        assert_eq!(c.env.len(), 2);
    }

    #[test]
    fn memory_sizes_are_binary_multiples() {
        #[rustfmt::skip]
        let cases = [
            ("0", Some(0)),
            ("6291456", Some(6 << 20)),
            ("1024k", Some(1 << 20)),
            ("512m", Some(512 << 20)),
            ("512 MB", Some(512 << 20)),
            ("100MiB", Some(100 << 20)),
            ("24g", Some(24 << 30)),
            ("2G", Some(2 << 30)),
            ("2gib", Some(2 << 30)),
            ("1t", Some(1 << 40)),
            ("7b", Some(7)),
            ("", None),
            ("g", None),
            ("1.5g", None),
            ("-1g", None),
            (" 1g", None),
            ("1g ", None),
            ("1  g", None),
            ("1p", None),
            ("1gibb", None),
            ("99999999999t", None),
        ];
        for (text, bytes) in cases {
            assert_eq!(parse_size(text), bytes, "{text:?}");
        }
    }

    #[test]
    fn container_rules_refuse_with_pointer_and_code() {
        let fx = Fixture::new();
        fx.file("socks/docker.sock", 0o600);
        fx.file("engine/docker.sock", 0o600);
        symlink(fx.dir.path().join("engine"), fx.dir.path().join("linked")).unwrap();
        symlink(
            fx.dir.path().join("socks/docker.sock"),
            fx.dir.path().join("sock-link"),
        )
        .unwrap();
        let mount = |source: Value, target: &str| json!([{"source": source, "target": target}]);
        let ok_source = json!(fx.abs("bin"));
        let pinned = |name: &str| json!(format!("{name}@sha256:{}", digest('c')));

        #[rustfmt::skip]
        let cases = [
            ("image missing", Edit::remove("/workload/image"), "/workload/image"),
            ("image by tag", Edit::set("/workload/image", json!("ubuntu:22.04")), "/workload/image"),
            ("digest short", Edit::set("/workload/image", json!(format!("sha256:{}", &digest('a')[1..]))), "/workload/image"),
            ("digest upper", Edit::set("/workload/image", json!(format!("sha256:{}", digest('A')))), "/workload/image"),
            ("other algorithm", Edit::set("/workload/image", json!(format!("sha512:{}", digest('a')))), "/workload/image"),
            ("name empty", Edit::set("/workload/image", pinned("")), "/workload/image"),
            ("name as option", Edit::set("/workload/image", pinned("-v")), "/workload/image"),
            ("name upper", Edit::set("/workload/image", pinned("Ubuntu")), "/workload/image"),
            ("name space", Edit::set("/workload/image", pinned("my image")), "/workload/image"),
            ("name empty part", Edit::set("/workload/image", pinned("team//model")), "/workload/image"),
            ("memory missing", Edit::remove("/workload/memory"), "/workload/memory"),
            ("memory small", Edit::set("/workload/memory", json!(MIN_CONTAINER_MEMORY - 1)), "/workload/memory"),
            ("memory small text", Edit::set("/workload/memory", json!("5m")), "/workload/memory"),
            ("memory negative", Edit::set("/workload/memory", json!(-1)), "/workload/memory"),
            ("memory fraction", Edit::set("/workload/memory", json!(1.5e9)), "/workload/memory"),
            ("memory word", Edit::set("/workload/memory", json!("lots")), "/workload/memory"),
            ("memory huge", Edit::set("/workload/memory", json!(u64::MAX)), "/workload/memory"),
            ("entrypoint empty", Edit::set("/workload/entrypoint", json!([])), "/workload/entrypoint"),
            ("entrypoint no program", Edit::set("/workload/entrypoint", json!([""])), "/workload/entrypoint/0"),
            ("args empty", Edit::set("/workload/args", json!([])), "/workload/args"),
            ("args NUL", Edit::set("/workload/args", json!(["a\u{0}"])), "/workload/args/0"),
            ("user name", Edit::set("/workload/user", json!("root")), "/workload/user"),
            ("user no gid", Edit::set("/workload/user", json!("1000")), "/workload/user"),
            ("user empty gid", Edit::set("/workload/user", json!("1000:")), "/workload/user"),
            ("user signed", Edit::set("/workload/user", json!("+1:0")), "/workload/user"),
            ("user number", Edit::set("/workload/user", json!(1000)), "/workload/user"),
            ("workdir relative", Edit::set("/workload/workdir", json!("work")), "/workload/workdir"),
            ("mounts object", Edit::set("/workload/mounts", json!({})), "/workload/mounts"),
            ("mount text", Edit::set("/workload/mounts", json!(["/a:/b"])), "/workload/mounts/0"),
            ("mount no source", Edit::set("/workload/mounts", json!([{"target": "/x"}])), "/workload/mounts/0/source"),
            ("mount no target", Edit::set("/workload/mounts", json!([{"source": ok_source}])), "/workload/mounts/0/target"),
            ("mount unknown", Edit::set("/workload/mounts", json!([{"source": ok_source, "target": "/x", "mode": "ro"}])), "/workload/mounts/0/mode"),
            ("source relative", Edit::set("/workload/mounts", mount(json!("bin"), "/x")), "/workload/mounts/0/source"),
            ("source dotdot", Edit::set("/workload/mounts", mount(json!(fx.abs("bin/..")), "/x")), "/workload/mounts/0/source"),
            ("source dot", Edit::set("/workload/mounts", mount(json!(fx.abs("./bin")), "/x")), "/workload/mounts/0/source"),
            ("source slashes", Edit::set("/workload/mounts", mount(json!(format!("{}//bin", fx.dir.path().display())), "/x")), "/workload/mounts/0/source"),
            ("source trailing", Edit::set("/workload/mounts", mount(json!(fx.abs("bin/")), "/x")), "/workload/mounts/0/source"),
            ("source colon", Edit::set("/workload/mounts", mount(json!(fx.abs("a:b")), "/x")), "/workload/mounts/0/source"),
            ("source absent", Edit::set("/workload/mounts", mount(json!(fx.abs("nope")), "/x")), "/workload/mounts/0/source"),
            ("docker socket", Edit::set("/workload/mounts", mount(json!(fx.abs("socks/docker.sock")), "/x")), "/workload/mounts/0/source"),
            ("socket folder", Edit::set("/workload/mounts", mount(json!(fx.abs("engine")), "/x")), "/workload/mounts/0/source"),
            ("link to socket folder", Edit::set("/workload/mounts", mount(json!(fx.abs("linked")), "/x")), "/workload/mounts/0/source"),
            ("link to socket", Edit::set("/workload/mounts", mount(json!(fx.abs("sock-link")), "/x")), "/workload/mounts/0/source"),
            ("source /run", Edit::set("/workload/mounts", mount(json!("/run"), "/x")), "/workload/mounts/0/source"),
            ("source /var/run", Edit::set("/workload/mounts", mount(json!("/var/run"), "/x")), "/workload/mounts/0/source"),
            ("source root", Edit::set("/workload/mounts", mount(json!("/"), "/x")), "/workload/mounts/0/source"),
            ("target relative", Edit::set("/workload/mounts", mount(ok_source.clone(), "x")), "/workload/mounts/0/target"),
            ("target root", Edit::set("/workload/mounts", mount(ok_source.clone(), "/")), "/workload/mounts/0/target"),
            ("target reserved", Edit::set("/workload/mounts", mount(ok_source.clone(), "/homebased")), "/workload/mounts/0/target"),
            ("target under reserved", Edit::set("/workload/mounts", mount(ok_source.clone(), "/homebased/job")), "/workload/mounts/0/target"),
            ("target dotdot", Edit::set("/workload/mounts", mount(ok_source.clone(), "/x/../homebased")), "/workload/mounts/0/target"),
            ("target twice", Edit::set("/workload/mounts", json!([{"source": ok_source, "target": "/x"}, {"source": ok_source, "target": "/x"}])), "/workload/mounts/1/target"),
            ("read_only text", Edit::set("/workload/mounts", json!([{"source": ok_source, "target": "/x", "read_only": "yes"}])), "/workload/mounts/0/read_only"),
            ("env list", Edit::set("/workload/env", json!(["A=1"])), "/workload/env"),
            ("env key with =", Edit::set("/workload/env", json!({"A=B": "1"})), "/workload/env/A=B"),
            ("env key empty", Edit::set("/workload/env", json!({"": "1"})), "/workload/env/"),
            ("env marker", Edit::set("/workload/env", json!({"HOMEBASED_TASK_ID": "x"})), "/workload/env/HOMEBASED_TASK_ID"),
            ("env marker escaped", Edit::set("/workload/env", json!({"HOMEBASED_A/B": "x"})), "/workload/env/HOMEBASED_A~1B"),
            ("env number", Edit::set("/workload/env", json!({"SEED": 1})), "/workload/env/SEED"),
            ("env null", Edit::set("/workload/env", json!({"SEED": null})), "/workload/env/SEED"),
            ("gpus", Edit::set("/workload/gpus", json!("all")), "/workload/gpus"),
            ("privileged", Edit::set("/workload/privileged", json!(true)), "/workload/privileged"),
            ("network", Edit::set("/workload/network", json!("host")), "/workload/network"),
            ("cap_add", Edit::set("/workload/cap_add", json!(["SYS_ADMIN"])), "/workload/cap_add"),
            ("devices", Edit::set("/workload/devices", json!(["/dev/fuse"])), "/workload/devices"),
            ("restart", Edit::set("/workload/restart", json!("always")), "/workload/restart"),
            ("unmodelled option", Edit::set("/workload/stop_signal", json!("INT")), "/workload/stop_signal"),
        ];
        for (behaviour, edit, pointer) in cases {
            let mut spec = container_spec(&fx);
            edit.apply(&mut spec);
            fx.assert_refused(behaviour, &spec, ErrorCode::InvalidSpec, pointer);
        }
    }

    #[test]
    fn refusals_explain_gpus_and_sockets() {
        let fx = Fixture::new();
        fx.file("engine/docker.sock", 0o600);
        #[rustfmt::skip]
        let cases = [
            (Edit::set("/workload/gpus", json!("all")), "/workload/gpus", "owns GPU selection"),
            (
                Edit::set("/workload/mounts", json!([{"source": fx.abs("engine"), "target": "/e"}])),
                "/workload/mounts/0/source",
                "Docker socket",
            ),
        ];
        for (edit, pointer, words) in cases {
            let mut spec = container_spec(&fx);
            edit.apply(&mut spec);
            let err = fx.assert_refused(words, &spec, ErrorCode::InvalidSpec, pointer);
            assert!(err.message.contains(words), "{}", err.message);
        }
    }

    #[test]
    fn pointers_follow_where_the_step_was_written() {
        let fx = Fixture::new();
        let mut spec = container_spec(&fx);
        let step = spec["workload"].clone();
        Edit::remove("/workload").apply(&mut spec);
        Edit::set(
            "/steps",
            json!([{"type": "task", "command": ["tool"]}, step]),
        )
        .apply(&mut spec);
        Edit::set("/steps/1/memory", json!("1k")).apply(&mut spec);
        fx.assert_refused("steps", &spec, ErrorCode::InvalidSpec, "/steps/1/memory");
    }
}
