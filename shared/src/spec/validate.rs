//! Strict parsing of a raw spec and the job-level rules of SPEC section 3.
//!
//! The spec is walked by hand as a `serde_json::Value` rather than deserialized with
//! `deny_unknown_fields`, so that every refusal names the exact RFC 6901 pointer and value the
//! user wrote (see `input.rs`). Step rules live beside this file: `task.rs`, `container.rs`.

use super::input::{invalid, parse, refuse, text, Fields, Ptr};
use super::{
    container, task, JobSpec, Preempt, Step, ValidSpec, DEFAULT_TIMEOUT, MAX_AFTER, MAX_GPUS,
    MAX_NAME_CHARS, MAX_RESTART_WITHIN, MAX_STEPS, MAX_TIMEOUT, MAX_TIME_LIMIT, MIN_RESTART_WITHIN,
    MIN_TIMEOUT, MIN_TIME_LIMIT,
};
use crate::error::{ApiError, ErrorCode};
use crate::ids::ThreadId;
use crate::queue::{PreemptMode, Priority};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// What the submitter's side contributes to validation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitContext {
    /// The submitter's `PATH`, against which a step's program is resolved. `None` searches
    /// nothing: only programs written with a `/` resolve.
    pub path: Option<String>,
    /// The submitter's working directory: a relative `cwd` in the spec is taken from here.
    pub cwd: PathBuf,
    /// The spec runs on another machine (a Fleet remote submit checked on its origin): only
    /// its shape is checked here. Its `cwd`, programs and mount sources are that machine's
    /// files, which its daemon checks when the spec arrives.
    pub elsewhere: bool,
}

/// The fields of the top-level object, in the order they are checked.
pub(super) const JOB_FIELDS: &[&str] = &[
    "api_version",
    "thread",
    "name",
    "cwd",
    "priority",
    "preempt",
    "timeout",
    "time_limit",
    "machine",
    "resource",
    "gpus",
    "resources",
    "after",
    "workload",
    "steps",
];
pub(super) const PREEMPT_FIELDS: &[&str] = &["mode", "restart_within"];

/// Checks `raw` against every rule and returns the typed spec, its canonical JSON and digest.
pub fn validate(raw: &[u8], ctx: &SubmitContext) -> Result<ValidSpec, ApiError> {
    let doc = parse(raw)?;
    let spec = job_spec(&doc, ctx)?;
    let canonical = canonical(&spec)?;
    let bytes = serde_json::to_vec(&canonical)
        .map_err(|e| ApiError::internal(format!("cannot write the canonical spec: {e}")))?;
    let digest = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(ValidSpec {
        spec,
        canonical,
        digest,
    })
}

/// The canonical JSON of a spec: what the store keeps, the digest covers and `job show`
/// prints (the same text however often a stored spec is decoded and written again).
pub fn canonical(spec: &JobSpec) -> Result<Value, ApiError> {
    serde_json::to_value(spec)
        .map(sorted_keys)
        .map_err(|e| ApiError::internal(format!("cannot write the canonical spec: {e}")))
}

/// Object keys in sorted order, written explicitly: with serde_json's `preserve_order` feature
/// (which any crate in the build may turn on) maps keep insertion order, and the stored JSON
/// and its digest must not depend on the feature set.
fn sorted_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted_keys(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted_keys).collect()),
        other => other,
    }
}

fn job_spec(doc: &Value, ctx: &SubmitContext) -> Result<JobSpec, ApiError> {
    let job = Fields::open(doc, &Ptr::root(), "a job spec", JOB_FIELDS, job_hint)?;

    let (v, at) = job.required("api_version")?;
    let api_version = match v.as_u64() {
        Some(1) => 1,
        _ => return Err(invalid(&at, v, "must be the integer 1")),
    };

    let (v, at) = job.required("thread")?;
    let thread = text(v, &at)?.parse::<ThreadId>().map_err(|_| {
        invalid(
            &at,
            v,
            "must be a full hyphenated UUID (36 characters; no prefixes, no braces)",
        )
    })?;

    let (v, at) = job.required("name")?;
    let name = label_name(v, &at)?;

    let (v, at) = job.required("cwd")?;
    let cwd = resolve_cwd(v, &at, &ctx.cwd, ctx.elsewhere)?;

    let (v, at) = job.required("priority")?;
    let priority = match text(v, &at)? {
        "low" => Priority::Low,
        "medium" => Priority::Medium,
        "high" => Priority::High,
        _ => return Err(invalid(&at, v, "must be low, medium or high")),
    };

    let (v, at) = job.required("preempt")?;
    let preempt = preempt(v, &at)?;

    let timeout = match job.optional("timeout") {
        None => DEFAULT_TIMEOUT,
        Some((v, at)) => {
            let d = duration(v, &at)?;
            if d < MIN_TIMEOUT {
                return Err(invalid(&at, v, "must be at least 30m"));
            }
            if d > MAX_TIMEOUT {
                return Err(invalid(&at, v, "must be at most 30 days (720h)"));
            }
            d
        }
    };

    let time_limit = match job.optional("time_limit") {
        None => None,
        Some((v, at)) => {
            let d = duration(v, &at)?;
            if !(MIN_TIME_LIMIT..=MAX_TIME_LIMIT).contains(&d) {
                return Err(invalid(&at, v, "must be from 1m to 30 days (720h)"));
            }
            Some(d)
        }
    };

    let machine = job
        .optional("machine")
        .map(|(v, at)| reference(v, &at))
        .transpose()?;
    let resource = job
        .optional("resource")
        .map(|(v, at)| reference(v, &at))
        .transpose()?;
    let gpus = match job.optional("gpus") {
        None => 1,
        Some((v, at)) => gpus(v, &at)?,
    };
    let resources = match job.optional("resources") {
        None => Vec::new(),
        Some((v, at)) => {
            if resource.is_some() {
                return Err(invalid(
                    &at,
                    v,
                    "give resource (one lane) or resources (a set of gpus lanes), not both",
                ));
            }
            resource_set(v, &at, gpus)?
        }
    };
    if gpus > 1 && resource.is_some() {
        let (v, at) = job.required("resource")?;
        return Err(invalid(
            &at,
            v,
            "pins one lane; a job with gpus above 1 is pinned with resources (a list of gpus lanes)",
        ));
    }

    let after = match job.optional("after") {
        None => Vec::new(),
        Some((v, at)) => after(v, &at)?,
    };

    let steps = match (job.get("workload"), job.get("steps")) {
        (Some((v, at)), None) => vec![step(v, &at, &cwd, ctx)?],
        (None, Some((v, at))) => {
            let list = v
                .as_array()
                .filter(|l| (1..=MAX_STEPS).contains(&l.len()))
                .ok_or_else(|| invalid(&at, v, "must be an array of 1 to 32 steps"))?;
            list.iter()
                .enumerate()
                .map(|(i, s)| step(s, &at.index(i), &cwd, ctx))
                .collect::<Result<_, _>>()?
        }
        (Some((v, at)), Some(_)) => {
            return Err(invalid(
                &at,
                v,
                "give either workload (one step) or steps, not both",
            ))
        }
        (None, None) => {
            return Err(invalid(
                &Ptr::root().key("steps"),
                &Value::Null,
                "is required: give workload (one step) or steps (1 to 32 steps)",
            ))
        }
    };

    Ok(JobSpec {
        api_version,
        thread,
        name,
        cwd,
        priority,
        preempt,
        timeout,
        time_limit,
        machine,
        resource,
        gpus,
        resources,
        after,
        steps,
    })
}

/// `gpus`: a whole number from 1; the daemon checks it against its lanes.
fn gpus(v: &Value, at: &Ptr) -> Result<u32, ApiError> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| (1..=MAX_GPUS).contains(n))
        .ok_or_else(|| {
            invalid(
                at,
                v,
                "must be a whole number of GPUs from 1 to the number of lanes the machine has",
            )
        })
}

/// `resources`: exactly `gpus` distinct names or UUIDs. Whether they exist, and are distinct
/// lanes once resolved, is the daemon's to check.
fn resource_set(v: &Value, at: &Ptr, gpus: u32) -> Result<Vec<String>, ApiError> {
    let list = v
        .as_array()
        .ok_or_else(|| invalid(at, v, "must be an array of resource names or UUIDs"))?;
    if list.len() != gpus as usize {
        return Err(invalid(
            at,
            v,
            format!(
                "names {} lanes but gpus is {gpus}: give exactly gpus lanes",
                list.len()
            ),
        ));
    }
    let mut names: Vec<String> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let item_at = at.index(i);
        let name = reference(item, &item_at)?;
        if let Some(first) = names.iter().position(|n| *n == name) {
            return Err(invalid(
                &item_at,
                item,
                format!("names the same lane as {at}/{first}: each lane once"),
            ));
        }
        names.push(name);
    }
    Ok(names)
}

/// `after`: 1 to [`MAX_AFTER`] distinct job UUIDs. Whether they exist, and on this machine,
/// is the daemon's to check at submit.
fn after(v: &Value, at: &Ptr) -> Result<Vec<crate::ids::JobId>, ApiError> {
    let list = v
        .as_array()
        .filter(|l| (1..=MAX_AFTER).contains(&l.len()))
        .ok_or_else(|| invalid(at, v, "must be an array of 1 to 32 job UUIDs"))?;
    let mut jobs: Vec<crate::ids::JobId> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let item_at = at.index(i);
        let job = text(item, &item_at)?
            .parse::<crate::ids::JobId>()
            .map_err(|_| {
                invalid(
                    &item_at,
                    item,
                    "must be a full hyphenated job UUID (36 characters; no prefixes, no braces)",
                )
            })?;
        if let Some(first) = jobs.iter().position(|j| *j == job) {
            return Err(invalid(
                &item_at,
                item,
                format!("names the same job as {at}/{first}: each job once"),
            ));
        }
        jobs.push(job);
    }
    Ok(jobs)
}

fn job_hint(field: &str) -> Option<&'static str> {
    Some(match field {
        "command" | "image" | "type" => {
            "put the work in a step: \"workload\": {\"type\":\"task\",\"command\":[...]}"
        }
        "gpu" | "gpu_count" | "device" | "devices" => {
            "the queue owns GPU selection: ask for a count with \"gpus\", pin with \"resource\" \
             (one lane) or \"resources\" (a set)"
        }
        "id" | "job" | "job_id" => "the job id is given at submit (--job-id), not in the spec",
        "env" | "environment" => {
            "\"env\" belongs to a step: host steps run with the submitter's environment, then \
             the step's \"env\""
        }
        _ => return None,
    })
}

fn label_name(v: &Value, at: &Ptr) -> Result<String, ApiError> {
    let name = text(v, at)?.trim();
    let chars = name.chars().count();
    if !(1..=MAX_NAME_CHARS).contains(&chars) {
        return Err(invalid(at, v, "must be 1 to 120 characters once trimmed"));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid(at, v, "must not contain control characters"));
    }
    Ok(name.to_string())
}

/// A machine or resource name or UUID; the daemon resolves it, so only its shape is checked.
fn reference(v: &Value, at: &Ptr) -> Result<String, ApiError> {
    let s = text(v, at)?;
    if s.is_empty() || s.trim() != s || s.chars().any(char::is_control) {
        return Err(invalid(
            at,
            v,
            "must be a non-empty name or UUID without surrounding spaces or control characters",
        ));
    }
    Ok(s.to_string())
}

fn preempt(v: &Value, at: &Ptr) -> Result<Preempt, ApiError> {
    let f = Fields::open(v, at, "a preempt object", PREEMPT_FIELDS, |_| None)?;
    let (v, mode_at) = f.required("mode")?;
    let mode = match text(v, &mode_at)? {
        "yield" => PreemptMode::Yield,
        "restart" => PreemptMode::Restart,
        "wait" => PreemptMode::Wait,
        _ => return Err(invalid(&mode_at, v, "must be yield, restart or wait")),
    };
    let restart_within = match f.optional("restart_within") {
        None => None,
        Some((v, at)) if mode == PreemptMode::Restart => {
            return Err(invalid(
                &at,
                v,
                "does not apply to mode restart, which restarts at any age",
            ))
        }
        Some((v, at)) => {
            let d = duration(v, &at)?;
            if !(MIN_RESTART_WITHIN..=MAX_RESTART_WITHIN).contains(&d) {
                return Err(invalid(&at, v, "must be from 1m to 24h"));
            }
            Some(d)
        }
    };
    Ok(Preempt {
        mode,
        restart_within,
    })
}

/// The job's one working directory. A relative `cwd` is taken from the submitter's, and the
/// result is normalised lexically (`.` dropped, `..` removes the previous component) without
/// resolving symlinks: the job runs in the directory the user named, even through a link.
fn resolve_cwd(v: &Value, at: &Ptr, base: &Path, elsewhere: bool) -> Result<PathBuf, ApiError> {
    let s = text(v, at)?;
    if s.is_empty() || s.contains('\0') {
        return Err(invalid(at, v, "must be a non-empty path without NUL bytes"));
    }
    if elsewhere {
        // Another machine's directory: taken from its daemon's working directory there.
        return Ok(normalise(Path::new(s)));
    }
    let path = normalise(&base.join(s));
    let refuse_cwd = |why: String| refuse(ErrorCode::InvalidCwd, at, v, why);
    if !path.is_absolute() {
        return Err(refuse_cwd(
            "is relative and the submitter's working directory is unknown".into(),
        ));
    }
    // The canonical spec is JSON: a path it cannot hold could not be stored or run.
    if path.to_str().is_none() {
        return Err(refuse_cwd(format!("{} is not valid UTF-8", path.display())));
    }
    if !path.is_dir() {
        return Err(refuse_cwd(format!(
            "{} is not an existing directory",
            path.display()
        )));
    }
    Ok(path)
}

/// Lexical normalisation of an absolute path; `..` at the root stays at the root, as the
/// kernel does. (A relative input is refused by the caller whatever this returns.)
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn step(v: &Value, at: &Ptr, cwd: &Path, ctx: &SubmitContext) -> Result<Step, ApiError> {
    let kind = v
        .as_object()
        .ok_or_else(|| invalid(at, v, "must be a step object with a \"type\""))?
        .get("type");
    let type_at = at.key("type");
    match kind.map(|k| (k, k.as_str())) {
        None => Err(invalid(
            &type_at,
            &Value::Null,
            "is required: task or container",
        )),
        Some((_, Some("task"))) => task::task_step(v, at, cwd, ctx),
        Some((_, Some("container"))) => container::container_step(v, at, ctx.elsewhere),
        Some((k, _)) => Err(invalid(&type_at, k, "must be task or container")),
    }
}

fn duration(v: &Value, at: &Ptr) -> Result<Duration, ApiError> {
    humantime::parse_duration(text(v, at)?).map_err(|e| {
        invalid(
            at,
            v,
            format!("must be a duration such as 90s, 15m or 1h ({e})"),
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testkit::{Edit, Fixture, THREAD};
    use super::super::MAX_SPEC_BYTES;
    use super::*;
    use serde_json::json;
    use std::collections::BTreeSet;

    const JOB_A: &str = "0190a0c4-8d2e-7c3b-9f7e-2b4c6d8e0fa1";
    const JOB_B: &str = "0190a0c4-8d2e-7c3b-9f7e-2b4c6d8e0fb2";

    #[test]
    fn job_rules_refuse_with_pointer_and_code() {
        let fx = Fixture::new();
        use ErrorCode::{InvalidCwd as Cwd, InvalidSpec as Invalid};
        let many_steps: Vec<Value> = (0..33)
            .map(|_| json!({"type": "task", "command": ["tool"]}))
            .collect();
        let many_jobs: Vec<String> = (0..33)
            .map(|_| crate::ids::JobId::new().to_string())
            .collect();
        #[rustfmt::skip]
        let cases = [
            ("api_version missing", Edit::remove("/api_version"), Invalid, "/api_version"),
            ("api_version 2", Edit::set("/api_version", json!(2)), Invalid, "/api_version"),
            ("api_version as text", Edit::set("/api_version", json!("1")), Invalid, "/api_version"),
            ("api_version null", Edit::set("/api_version", Value::Null), Invalid, "/api_version"),
            ("thread missing", Edit::remove("/thread"), Invalid, "/thread"),
            ("thread prefix", Edit::set("/thread", json!("0190a0c4")), Invalid, "/thread"),
            ("thread braced", Edit::set("/thread", json!(format!("{{{THREAD}}}"))), Invalid, "/thread"),
            ("thread without dashes", Edit::set("/thread", json!(THREAD.replace('-', ""))), Invalid, "/thread"),
            ("name missing", Edit::remove("/name"), Invalid, "/name"),
            ("name blank", Edit::set("/name", json!("   ")), Invalid, "/name"),
            ("name too long", Edit::set("/name", json!("é".repeat(121))), Invalid, "/name"),
            ("name control char", Edit::set("/name", json!("a\u{7}b")), Invalid, "/name"),
            ("name not text", Edit::set("/name", json!(42)), Invalid, "/name"),
            ("cwd missing", Edit::remove("/cwd"), Invalid, "/cwd"),
            ("cwd empty", Edit::set("/cwd", json!("")), Invalid, "/cwd"),
            ("cwd absent dir", Edit::set("/cwd", json!("nope")), Cwd, "/cwd"),
            ("cwd a file", Edit::set("/cwd", json!("bin/tool")), Cwd, "/cwd"),
            ("priority missing", Edit::remove("/priority"), Invalid, "/priority"),
            ("priority unknown", Edit::set("/priority", json!("urgent")), Invalid, "/priority"),
            ("priority case", Edit::set("/priority", json!("High")), Invalid, "/priority"),
            ("preempt missing", Edit::remove("/preempt"), Invalid, "/preempt"),
            ("preempt as text", Edit::set("/preempt", json!("yield")), Invalid, "/preempt"),
            ("mode missing", Edit::set("/preempt", json!({})), Invalid, "/preempt/mode"),
            ("mode unknown", Edit::set("/preempt/mode", json!("never")), Invalid, "/preempt/mode"),
            ("preempt unknown field", Edit::set("/preempt/window", json!("1m")), Invalid, "/preempt/window"),
            (
                "restart_within with restart",
                Edit::set("/preempt", json!({"mode": "restart", "restart_within": "5m"})),
                Invalid,
                "/preempt/restart_within",
            ),
            ("restart_within short", Edit::set("/preempt/restart_within", json!("59s")), Invalid, "/preempt/restart_within"),
            ("restart_within long", Edit::set("/preempt/restart_within", json!("24h 1s")), Invalid, "/preempt/restart_within"),
            ("restart_within text", Edit::set("/preempt/restart_within", json!("soon")), Invalid, "/preempt/restart_within"),
            ("timeout short", Edit::set("/timeout", json!("29m 59s")), Invalid, "/timeout"),
            ("timeout number", Edit::set("/timeout", json!(3600)), Invalid, "/timeout"),
            ("time_limit short", Edit::set("/time_limit", json!("59s")), Invalid, "/time_limit"),
            ("time_limit long", Edit::set("/time_limit", json!("30days 1s")), Invalid, "/time_limit"),
            ("time_limit text", Edit::set("/time_limit", json!("abc")), Invalid, "/time_limit"),
            ("time_limit number", Edit::set("/time_limit", json!(3600)), Invalid, "/time_limit"),
            ("machine empty", Edit::set("/machine", json!("")), Invalid, "/machine"),
            ("resource padded", Edit::set("/resource", json!(" gpu0")), Invalid, "/resource"),
            ("after not a list", Edit::set("/after", json!(JOB_A)), Invalid, "/after"),
            ("after empty", Edit::set("/after", json!([])), Invalid, "/after"),
            ("after too long", Edit::set("/after", json!(many_jobs)), Invalid, "/after"),
            ("after malformed", Edit::set("/after", json!([JOB_A, "0190a0c4"])), Invalid, "/after/1"),
            ("after not text", Edit::set("/after", json!([7])), Invalid, "/after/0"),
            ("after duplicate", Edit::set("/after", json!([JOB_A, JOB_B, JOB_A.to_uppercase()])), Invalid, "/after/2"),
            ("unknown field", Edit::set("/gpu", json!(1)), Invalid, "/gpu"),
            ("gpus zero", Edit::set("/gpus", json!(0)), Invalid, "/gpus"),
            ("gpus negative", Edit::set("/gpus", json!(-2)), Invalid, "/gpus"),
            ("gpus fraction", Edit::set("/gpus", json!(1.5)), Invalid, "/gpus"),
            ("gpus text", Edit::set("/gpus", json!("2")), Invalid, "/gpus"),
            ("gpus huge", Edit::set("/gpus", json!(1u64 << 40)), Invalid, "/gpus"),
            ("resource with gpus 2", Edit::set("/gpus", json!(2)).and_set("/resource", json!("gpu0")), Invalid, "/resource"),
            ("resources with resource", Edit::set("/resources", json!(["gpu0"])).and_set("/resource", json!("gpu0")), Invalid, "/resources"),
            ("resources too few", Edit::set("/gpus", json!(2)).and_set("/resources", json!(["gpu0"])), Invalid, "/resources"),
            ("resources without gpus", Edit::set("/resources", json!(["gpu0", "gpu1"])), Invalid, "/resources"),
            ("resources duplicate", Edit::set("/gpus", json!(2)).and_set("/resources", json!(["gpu1", "gpu1"])), Invalid, "/resources/1"),
            ("resources not a list", Edit::set("/resources", json!("gpu0")), Invalid, "/resources"),
            ("resources entry padded", Edit::set("/gpus", json!(2)).and_set("/resources", json!(["gpu0", "gpu1 "])), Invalid, "/resources/1"),
            ("field name case", Edit::set("/Name", json!("x")), Invalid, "/Name"),
            ("field with slash", Edit::set("/a~1b~0c", json!(true)), Invalid, "/a~1b~0c"),
            ("both workload and steps", Edit::set("/steps", json!([])), Invalid, "/workload"),
            ("no work", Edit::remove("/workload"), Invalid, "/steps"),
            ("workload not a step", Edit::set("/workload", json!(["tool"])), Invalid, "/workload"),
            ("step without type", Edit::set("/workload", json!({"command": ["tool"]})), Invalid, "/workload/type"),
            ("step type unknown", Edit::set("/workload/type", json!("shell")), Invalid, "/workload/type"),
        ];
        for (behaviour, edit, code, pointer) in cases {
            let mut spec = fx.spec();
            edit.apply(&mut spec);
            fx.assert_refused(behaviour, &spec, code, pointer);
        }

        #[rustfmt::skip]
        let step_lists = [
            ("no steps", json!([]), "/steps"),
            ("too many steps", json!(many_steps), "/steps"),
            ("steps not a list", json!({"type": "task"}), "/steps"),
            ("step not an object", json!([{"type": "task", "command": ["tool"]}, "tool"]), "/steps/1"),
        ];
        for (behaviour, steps, pointer) in step_lists {
            let mut spec = fx.spec();
            Edit::remove("/workload").apply(&mut spec);
            Edit::set("/steps", steps).apply(&mut spec);
            fx.assert_refused(behaviour, &spec, Invalid, pointer);
        }
        fx.assert_refused("spec not an object", &json!([1]), Invalid, "");
    }

    #[test]
    fn unknown_fields_name_the_common_mistake() {
        let fx = Fixture::new();
        let mut spec = fx.spec();
        Edit::set("/gpu", json!("all")).apply(&mut spec);
        let err = fx.assert_refused("gpu", &spec, ErrorCode::InvalidSpec, "/gpu");
        assert!(
            err.message.contains("owns GPU selection"),
            "{}",
            err.message
        );
    }

    #[test]
    fn every_field_is_read_into_the_spec() {
        let fx = Fixture::new();
        let mut spec = fx.spec();
        for edit in [
            Edit::set("/name", json!("  nightly eval  ")),
            Edit::set("/thread", json!(THREAD.to_uppercase())),
            Edit::set("/priority", json!("high")),
            Edit::set("/preempt", json!({"mode": "wait", "restart_within": "90s"})),
            Edit::set("/timeout", json!("2h 30m")),
            Edit::set("/time_limit", json!("90m")),
            Edit::set("/machine", json!("trainer")),
            Edit::set("/resource", json!("gpu1")),
            Edit::set("/after", json!([JOB_B, JOB_A.to_uppercase()])),
        ] {
            edit.apply(&mut spec);
        }
        let s = fx.validate(&spec).unwrap().spec;
        assert_eq!(
            s.after,
            vec![JOB_B.parse().unwrap(), JOB_A.parse().unwrap()],
            "in the order given"
        );
        assert_eq!(s.name, "nightly eval");
        assert_eq!(s.thread.to_string(), THREAD);
        assert_eq!(s.priority, Priority::High);
        assert_eq!(
            s.preempt,
            Preempt {
                mode: PreemptMode::Wait,
                restart_within: Some(Duration::from_secs(90))
            }
        );
        assert_eq!(s.timeout, Duration::from_secs(9000));
        assert_eq!(s.time_limit, Some(Duration::from_secs(5400)));
        assert_eq!(s.machine.as_deref(), Some("trainer"));
        assert_eq!(s.resource.as_deref(), Some("gpu1"));
        assert_eq!(s.cwd, fx.dir.path());
    }

    #[test]
    fn limits_are_inclusive() {
        let fx = Fixture::new();
        let step = json!({"type": "task", "command": ["tool"]});
        let cases = [
            Edit::set("/name", json!("é".repeat(120))),
            Edit::set("/timeout", json!("30m")),
            Edit::set("/time_limit", json!("1m")),
            Edit::set("/time_limit", json!("30days")),
            Edit::set("/preempt/restart_within", json!("1m")),
            Edit::set("/preempt/restart_within", json!("24h")),
            Edit::set("/steps", json!(vec![step; MAX_STEPS])),
            Edit::set(
                "/after",
                json!((0..MAX_AFTER)
                    .map(|_| crate::ids::JobId::new().to_string())
                    .collect::<Vec<_>>()),
            ),
        ];
        for edit in cases {
            let mut spec = fx.spec();
            if matches!(&edit, Edit::Set(p, _) if p == "/steps") {
                Edit::remove("/workload").apply(&mut spec);
            }
            edit.apply(&mut spec);
            fx.validate(&spec).unwrap();
        }
    }

    #[test]
    fn defaults_are_written_out_in_the_canonical_spec() {
        let fx = Fixture::new();
        let valid = fx.validate(&fx.spec()).unwrap();
        let expected = json!({
            "api_version": 1,
            "thread": THREAD,
            "name": "train",
            "cwd": fx.dir.path().to_str().unwrap(),
            "priority": "medium",
            "preempt": {"mode": "yield", "restart_within": null},
            "timeout": "1h",
            "machine": null,
            "resource": null,
            "steps": [{"type": "task", "command": ["tool", "--flag"]}],
        });
        assert_eq!(valid.canonical, expected);
        assert_eq!(valid.digest.len(), 64);
        assert!(valid
            .digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    }

    #[test]
    fn workload_and_one_element_steps_share_a_digest() {
        let fx = Fixture::new();
        let workload = fx.spec();
        let mut steps = fx.spec();
        Edit::remove("/workload").apply(&mut steps);
        Edit::set("/steps", json!([workload["workload"].clone()])).apply(&mut steps);
        let (a, b) = (
            fx.validate(&workload).unwrap(),
            fx.validate(&steps).unwrap(),
        );
        assert_eq!(a.digest, b.digest);
        assert_eq!(a.canonical, b.canonical);
    }

    #[test]
    fn equivalent_spellings_share_a_digest() {
        let fx = Fixture::new();
        let base = fx.validate(&fx.spec()).unwrap().digest;
        let spellings = [
            Edit::set("/timeout", json!("60m")),
            Edit::set("/timeout", Value::Null),
            Edit::set("/name", json!("\ttrain ")),
            Edit::set("/thread", json!(THREAD.to_uppercase())),
            Edit::set("/cwd", json!("./bin/..")),
            Edit::set("/cwd", json!(fx.abs("bin/../"))),
            Edit::set("/preempt/restart_within", Value::Null),
            Edit::set("/machine", Value::Null),
            Edit::set("/time_limit", Value::Null),
        ];
        for edit in spellings {
            let mut spec = fx.spec();
            edit.apply(&mut spec);
            assert_eq!(fx.validate(&spec).unwrap().digest, base, "{spec}");
        }
    }

    #[test]
    fn digest_changes_with_any_meaningful_field() {
        let fx = Fixture::new();
        std::fs::create_dir(fx.dir.path().join("other")).unwrap();
        let changes = [
            Edit::set("/thread", json!("0190a0c4-8d2e-7c3b-9f7e-2b4c6d8e0f13")),
            Edit::set("/name", json!("train2")),
            Edit::set("/cwd", json!("other")),
            Edit::set("/priority", json!("low")),
            Edit::set("/preempt/mode", json!("wait")),
            Edit::set("/preempt/restart_within", json!("5m")),
            Edit::set("/timeout", json!("2h")),
            Edit::set("/time_limit", json!("2h")),
            Edit::set("/time_limit", json!("3h")),
            Edit::set("/machine", json!("trainer")),
            Edit::set("/resource", json!("gpu0")),
            Edit::set("/after", json!([JOB_A])),
            Edit::set("/after", json!([JOB_A, JOB_B])),
            Edit::set("/after", json!([JOB_B, JOB_A])),
            Edit::set("/workload/command/1", json!("--other")),
            Edit::set("/workload/command", json!(["tool"])),
        ];
        let mut digests = BTreeSet::from([fx.validate(&fx.spec()).unwrap().digest]);
        for edit in &changes {
            let mut spec = fx.spec();
            edit.apply(&mut spec);
            assert!(digests.insert(fx.validate(&spec).unwrap().digest), "{spec}");
        }
    }

    #[test]
    fn canonical_spec_reads_back_and_revalidates_unchanged() {
        let fx = Fixture::new();
        let mut spec = fx.spec();
        Edit::remove("/workload").apply(&mut spec);
        Edit::set("/preempt/restart_within", json!("10m")).apply(&mut spec);
        Edit::set(
            "/steps",
            json!([
                {"type": "task", "command": ["tool"]},
                {"type": "container", "image": format!("repo/model:v1@sha256:{}", "a".repeat(64)),
                 "memory": "24g", "entrypoint": ["python"], "args": ["-m", "train"],
                 "user": "1000:1000", "workdir": "/work",
                 "mounts": [{"source": fx.abs("bin"), "target": "/data", "read_only": true}],
                 "env": {"SEED": "1"}},
                {"type": "container", "image": format!("sha256:{}", "b".repeat(64)), "memory": 6291456},
            ]),
        )
        .apply(&mut spec);
        let valid = fx.validate(&spec).unwrap();
        let back: JobSpec = serde_json::from_value(valid.canonical.clone()).unwrap();
        assert_eq!(back, valid.spec);
        let again = fx.validate(&valid.canonical).unwrap();
        assert_eq!((again.digest, again.spec), (valid.digest, valid.spec));
    }

    #[test]
    fn relative_cwd_is_resolved_against_the_submitter_and_normalised() {
        let fx = Fixture::new();
        std::fs::create_dir_all(fx.dir.path().join("work/sub")).unwrap();
        let mut spec = fx.spec();
        Edit::set("/cwd", json!("work/../work/./sub/")).apply(&mut spec);
        Edit::set("/workload/command", json!(["../../bin/tool"])).apply(&mut spec);
        let valid = fx.validate(&spec).unwrap();
        assert_eq!(valid.spec.cwd, fx.dir.path().join("work/sub"));
        assert_eq!(valid.canonical["cwd"], json!(fx.abs("work/sub")));
    }

    #[test]
    fn body_over_the_limit_is_refused_before_parsing() {
        let fx = Fixture::new();
        let mut body = serde_json::to_vec(&fx.spec()).unwrap();
        body.resize(MAX_SPEC_BYTES, b' ');
        validate(&body, &fx.ctx).unwrap();

        for size in [MAX_SPEC_BYTES + 1, 10 * 1024 * 1024] {
            body.resize(size, b' ');
            let err = validate(&body, &fx.ctx).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidSpec);
            assert_eq!(err.input, json!({"pointer": "", "value": null}));
            assert!(err.message.contains("over the limit"), "{}", err.message);
        }
    }

    #[test]
    fn malformed_json_is_refused_saying_where() {
        let fx = Fixture::new();
        #[rustfmt::skip]
        let cases = [
            ("trailing comma", "{\"api_version\": 1,\n}", "line 2 column 1"),
            ("truncated", "{\"api_version\": ", "line 1 column 16"),
            ("empty body", "", "line 1 column 0"),
            ("trailing text", "{} x", "line 1 column 4"),
        ];
        for (behaviour, body, place) in cases {
            let err = validate(body.as_bytes(), &fx.ctx).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidSpec, "{behaviour}");
            assert_eq!(
                err.input,
                json!({"pointer": "", "value": null}),
                "{behaviour}"
            );
            assert!(
                err.message.contains("not valid JSON"),
                "{behaviour}: {}",
                err.message
            );
            assert!(err.message.contains(place), "{behaviour}: {}", err.message);
        }
    }

    #[test]
    fn duplicate_keys_and_bad_utf8_are_invalid_spec_saying_where() {
        let fx = Fixture::new();
        let err = validate(
            br#"{"name": "a", "steps": [{"type": "task", "type": "x"}]}"#,
            &fx.ctx,
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidSpec);
        assert_eq!(
            err.input,
            json!({"pointer": "/steps/0/type", "value": null})
        );
        assert!(err.message.contains("duplicate key"), "{}", err.message);
        let err = validate(b"{\"name\": \"\xc3\x28\"}", &fx.ctx).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidSpec);
        assert!(err.message.contains("UTF-8"), "{}", err.message);
    }

    #[test]
    fn timeout_has_a_documented_maximum() {
        let fx = Fixture::new();
        let mut spec = fx.spec();
        spec["timeout"] = json!("30days");
        validate(&serde_json::to_vec(&spec).unwrap(), &fx.ctx).unwrap();
        spec["timeout"] = json!("30days 1s");
        let err = validate(&serde_json::to_vec(&spec).unwrap(), &fx.ctx).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidSpec);
        assert_eq!(err.input["pointer"], "/timeout");
        assert!(err.message.contains("at most 30 days"), "{}", err.message);
    }

    #[test]
    fn time_limit_is_one_minute_to_thirty_days_and_written_out_canonically() {
        let fx = Fixture::new();
        let limit = |text: Value| {
            let mut spec = fx.spec();
            spec["time_limit"] = text;
            validate(&serde_json::to_vec(&spec).unwrap(), &fx.ctx)
        };
        for (text, secs) in [("1m", 60), ("60s", 60), ("2h", 7200), ("30days", 2_592_000)] {
            let valid = limit(json!(text)).unwrap();
            assert_eq!(
                valid.spec.time_limit,
                Some(Duration::from_secs(secs)),
                "{text}"
            );
            let written = valid.canonical["time_limit"].as_str().unwrap().to_string();
            assert_eq!(
                humantime::parse_duration(&written).ok(),
                Some(Duration::from_secs(secs)),
                "{text} is stored as {written}"
            );
        }
        for text in ["59s", "30days 1s", "abc", ""] {
            let err = limit(json!(text)).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidSpec, "{text}");
            assert_eq!(
                err.input,
                json!({"pointer": "/time_limit", "value": text}),
                "{text}"
            );
        }
        let err = limit(json!("59s")).unwrap_err();
        assert!(
            err.message.contains("from 1m to 30 days"),
            "{}",
            err.message
        );
        let err = limit(json!("abc")).unwrap_err();
        assert!(
            err.message.contains("must be a duration"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_spec_for_another_machine_is_checked_for_shape_only() {
        let fx = Fixture::new();
        let elsewhere = SubmitContext {
            path: None,
            cwd: "/".into(),
            elsewhere: true,
        };
        let mut spec = fx.spec();
        spec["cwd"] = json!("/only/on/the/authority");
        spec["workload"] = json!({"type": "task", "command": ["train.sh", "--fast"]});
        let valid = validate(spec.to_string().as_bytes(), &elsewhere).unwrap();
        assert_eq!(
            valid.spec.cwd,
            std::path::Path::new("/only/on/the/authority")
        );
        // Here, the same spec is refused: its files are not on this machine.
        let err = validate(spec.to_string().as_bytes(), &fx.ctx).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidCwd, "{err:?}");
        // Its shape is checked all the same.
        spec["priority"] = json!("urgent");
        let err = validate(spec.to_string().as_bytes(), &elsewhere).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidSpec);
        assert_eq!(err.input["pointer"], "/priority");
    }
}
