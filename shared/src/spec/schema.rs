//! The JSON Schema (draft 2020-12) of the job spec as users write it, printed by
//! `resource schema`.
//!
//! Written by hand, because the input is looser than the canonical types (`workload` or
//! `steps`, `memory` as text, optional fields). The tests below hold it to the validator: every
//! object lists exactly the fields the validator reads, with the same required ones, and
//! example specs the validator accepts use only properties the schema declares. Rules that
//! need the machine (existing directories, `PATH`, the Docker socket) or trimming are only
//! described.

use serde_json::{json, Value};

pub fn json_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "homebased job spec",
        "description": "A job for the per-machine GPU queue: 1 to 32 ordered steps, a priority \
                        and a preemption mode. Unknown fields are refused everywhere. Optional \
                        fields may be null, meaning absent.",
        "type": "object",
        "additionalProperties": false,
        "required": ["api_version", "thread", "name", "cwd", "priority", "preempt"],
        "oneOf": [{ "required": ["workload"] }, { "required": ["steps"] }],
        "properties": {
            "api_version": { "const": 1 },
            "thread": {
                "description": "Full UUID of the receiver of the job's events.",
                "type": "string",
                "pattern": "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
            },
            "name": {
                "description": "Label, trimmed, then 1 to 120 characters without control \
                                characters. Not unique.",
                "type": "string",
                "minLength": 1,
                "maxLength": 120
            },
            "cwd": {
                "description": "Existing directory on the authority, the same for every step; \
                                a relative path is taken from the submitter's working directory.",
                "type": "string",
                "minLength": 1
            },
            "priority": { "enum": ["low", "medium", "high"] },
            "preempt": { "$ref": "#/$defs/preempt" },
            "timeout": {
                "description": "Output-inactivity notice per run; default 1h, minimum 30m, \
                                maximum 30 days. It never stops work.",
                "$ref": "#/$defs/duration"
            },
            "time_limit": {
                "description": "Wall-clock limit of each run, 1m to 30 days: a run still \
                                executing at its start plus this is stopped (TERM, grace, KILL) \
                                and its job fails with JOB_FAILED, detail.cause time_limit. The \
                                run is told the instant in HOMEBASED_DEADLINE. Absent: no limit.",
                "$ref": "#/$defs/duration"
            },
            "machine": {
                "description": "Fleet machine name or UUID; absent means local.",
                "$ref": "#/$defs/reference"
            },
            "resource": {
                "description": "Resource name or UUID to pin the job to (only with gpus 1).",
                "$ref": "#/$defs/reference"
            },
            "gpus": {
                "description": "How many lanes each run holds at once, from 1 (the default) to the number of whole GPUs of the machine that runs it.",
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": 1024
            },
            "resources": {
                "description": "Exactly gpus distinct resource names or UUIDs to pin a multi-GPU job to; not with resource.",
                "type": ["array", "null"],
                "minItems": 1,
                "uniqueItems": true,
                "items": { "$ref": "#/$defs/reference" }
            },
            "after": {
                "description": "Jobs of this machine that must succeed before this job may start; if one fails or is cancelled, this job is cancelled.",
                "type": ["array", "null"],
                "minItems": 1,
                "maxItems": 32,
                "uniqueItems": true,
                "items": {
                    "type": "string",
                    "pattern": "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
                }
            },
            "workload": { "$ref": "#/$defs/step" },
            "steps": {
                "type": "array",
                "minItems": 1,
                "maxItems": 32,
                "items": { "$ref": "#/$defs/step" }
            }
        },
        "$defs": {
            "duration": {
                "description": "A humantime duration such as 90s, 15m or 1h.",
                "type": ["string", "null"],
                "minLength": 1
            },
            "reference": {
                "type": ["string", "null"],
                "minLength": 1,
                "pattern": "^\\S(.*\\S)?$"
            },
            "preempt": {
                "type": "object",
                "additionalProperties": false,
                "required": ["mode"],
                "properties": {
                    "mode": { "enum": ["yield", "restart", "wait"] },
                    "restart_within": {
                        "description": "From 1m to 24h; not with mode restart.",
                        "$ref": "#/$defs/duration"
                    }
                },
                "if": { "properties": { "mode": { "const": "restart" } } },
                "then": { "properties": { "restart_within": { "type": "null" } } }
            },
            "argv": {
                "description": "Strings without NUL bytes.",
                "type": "array",
                "minItems": 1,
                "items": { "type": "string", "pattern": "^[^\\u0000]*$" }
            },
            "command": {
                "description": "A program and its arguments; no shell is added.",
                "$ref": "#/$defs/argv",
                "prefixItems": [{ "minLength": 1 }]
            },
            "step": {
                "oneOf": [{ "$ref": "#/$defs/task" }, { "$ref": "#/$defs/container" }]
            },
            "task": {
                "description": "One host command. The program is resolved against the \
                                submitter's PATH and the job's cwd at submit; tmux, screen, \
                                launchctl, systemd-run, docker, podman, nerdctl, ssh and mosh \
                                are refused.",
                "type": "object",
                "additionalProperties": false,
                "required": ["type", "command"],
                "properties": {
                    "type": { "const": "task" },
                    "command": { "$ref": "#/$defs/command" },
                    "env": {
                        "description": "Set over the submitter's environment; HOMEBASED_*, \
                                        CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER are set by \
                                        the queue.",
                        "type": ["object", "null"],
                        "propertyNames": {
                            "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                            "not": { "pattern": "^(HOMEBASED_|CUDA_VISIBLE_DEVICES$|CUDA_DEVICE_ORDER$)" }
                        },
                        "additionalProperties": { "type": "string", "pattern": "^[^\\u0000]*$" }
                    },
                    "yield_codes": {
                        "description": "Exit codes that mean \"checkpoint saved after a yield \
                                        request\"; default [75]. They count as a yield only when \
                                        a yield was committed for the run, otherwise as a failure. \
                                        A launcher that rewrites its workers' exit codes needs \
                                        more: torchrun reports a worker's 75 as 1, so a torchrun \
                                        step sets [75, 1].",
                        "type": ["array", "null"],
                        "minItems": 1,
                        "maxItems": 8,
                        "uniqueItems": true,
                        "items": { "type": "integer", "minimum": 1, "maximum": 255 }
                    }
                }
            },
            "container": {
                "description": "One container run with the Docker CLI. Docker options not \
                                listed here (gpus, privileged, network, ...) are refused.",
                "type": "object",
                "additionalProperties": false,
                "required": ["type", "image", "memory"],
                "properties": {
                    "type": { "const": "container" },
                    "image": {
                        "description": "Pinned by digest; never pulled.",
                        "type": "string",
                        "pattern": "^([a-zA-Z0-9][a-zA-Z0-9._/:-]*@)?sha256:[0-9a-f]{64}$"
                    },
                    "memory": {
                        "description": "Memory and swap limit: bytes, or a size such as 512m \
                                        or 24g (binary multiples); at least 6 MiB.",
                        "oneOf": [
                            { "type": "integer", "minimum": 6_291_456, "maximum": i64::MAX },
                            { "type": "string", "pattern": "^[0-9]+ ?([bB]|[kKmMgGtT]([iI]?[bB])?)?$" }
                        ]
                    },
                    "entrypoint": { "oneOf": [{ "$ref": "#/$defs/command" }, { "type": "null" }] },
                    "args": { "oneOf": [{ "$ref": "#/$defs/argv" }, { "type": "null" }] },
                    "user": {
                        "description": "Numeric uid:gid.",
                        "type": ["string", "null"],
                        "pattern": "^[0-9]+:[0-9]+$"
                    },
                    "workdir": { "type": ["string", "null"], "pattern": "^/" },
                    "mounts": {
                        "type": ["array", "null"],
                        "items": { "$ref": "#/$defs/mount" }
                    },
                    "env": {
                        "description": "Explicit values; HOMEBASED_* names are set by the queue, \
                                        which also owns GPU selection (NVIDIA_VISIBLE_DEVICES, \
                                        NVIDIA_MIG_CONFIG_DEVICES, CUDA_VISIBLE_DEVICES, \
                                        CUDA_DEVICE_ORDER).",
                        "type": ["object", "null"],
                        "propertyNames": {
                            "minLength": 1,
                            "pattern": "^[^=\\u0000]+$",
                            "not": { "pattern": "^(HOMEBASED_|NVIDIA_VISIBLE_DEVICES$|NVIDIA_MIG_CONFIG_DEVICES$|CUDA_VISIBLE_DEVICES$|CUDA_DEVICE_ORDER$)" }
                        },
                        "additionalProperties": { "type": "string", "pattern": "^[^\\u0000]*$" }
                    }
                }
            },
            "mount": {
                "description": "A bind mount. Sources must exist and be absolute paths in \
                                normal form; Docker sockets and folders holding them are \
                                refused.",
                "type": "object",
                "additionalProperties": false,
                "required": ["source", "target"],
                "properties": {
                    "source": { "type": "string", "pattern": "^/[^,:\"]*$" },
                    "target": {
                        "type": "string",
                        "pattern": "^/[^,:\"]+$",
                        "not": { "pattern": "^/homebased(/|$)" }
                    },
                    "read_only": { "type": ["boolean", "null"] }
                }
            }
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::container::{CONTAINER_FIELDS, MOUNT_FIELDS};
    use super::super::task::TASK_FIELDS;
    use super::super::testkit::{Edit, Fixture};
    use super::super::validate::{JOB_FIELDS, PREEMPT_FIELDS};
    use super::*;
    use crate::error::ErrorCode;
    use std::collections::BTreeSet;

    /// Each object of the spec: its schema node, the fields the validator reads, the ones it
    /// requires, and where `full_example` holds one.
    const OBJECTS: &[(&str, &[&str], &[&str], &str)] = &[
        (
            "",
            JOB_FIELDS,
            &[
                "api_version",
                "thread",
                "name",
                "cwd",
                "priority",
                "preempt",
            ],
            "",
        ),
        ("/$defs/preempt", PREEMPT_FIELDS, &["mode"], "/preempt"),
        ("/$defs/task", TASK_FIELDS, &["type", "command"], "/steps/0"),
        (
            "/$defs/container",
            CONTAINER_FIELDS,
            &["type", "image", "memory"],
            "/steps/1",
        ),
        (
            "/$defs/mount",
            MOUNT_FIELDS,
            &["source", "target"],
            "/steps/1/mounts/0",
        ),
    ];

    /// A spec with every field of every object written.
    fn full_example(fx: &Fixture) -> Value {
        let container = json!({
            "type": "container", "image": format!("team/model:v1@sha256:{}", "e".repeat(64)),
            "memory": "24g", "entrypoint": ["python"], "args": ["-m", "train"],
            "user": "1000:1000", "workdir": "/work", "env": {"SEED": "1"},
            "mounts": [{"source": fx.abs("bin"), "target": "/data", "read_only": true}],
        });
        let mut full = fx.spec();
        for edit in [
            Edit::set("/preempt/restart_within", json!("10m")),
            Edit::set("/timeout", json!("2h")),
            Edit::set("/time_limit", json!("12h")),
            Edit::set("/machine", json!("trainer")),
            Edit::set("/resource", json!("gpu0")),
            Edit::set("/after", json!([crate::ids::JobId::new().to_string()])),
            Edit::remove("/workload"),
            Edit::set(
                "/steps",
                json!([{"type": "task", "command": ["tool"], "env": {"SEED": "2"}, "yield_codes": [75, 1]}, container]),
            ),
        ] {
            edit.apply(&mut full);
        }
        full
    }

    fn names(list: &Value) -> BTreeSet<String> {
        match list {
            Value::Object(map) => map.keys().cloned().collect(),
            Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect(),
            other => panic!("not a list of names: {other}"),
        }
    }

    fn set(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn schema_objects_list_exactly_the_fields_the_validator_reads() {
        let schema = json_schema();
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        for &(node, fields, required, _) in OBJECTS {
            let node_at = node;
            let node = schema.pointer(node).unwrap();
            assert_eq!(node["additionalProperties"], json!(false), "{node_at}");
            assert_eq!(
                names(&node["properties"]),
                set(fields),
                "{node_at} properties"
            );
            assert_eq!(
                names(&node["required"]),
                set(required),
                "{node_at} required"
            );
        }
    }

    #[test]
    fn required_fields_are_exactly_those_the_validator_cannot_do_without() {
        let fx = Fixture::new();
        let full = full_example(&fx);
        fx.validate(&full).unwrap();
        for &(_, fields, required, at) in OBJECTS {
            // Workload and steps are the one-of pair, covered by the job rules' tests.
            for &field in fields
                .iter()
                .filter(|f| !matches!(**f, "workload" | "steps"))
            {
                let pointer = format!("{at}/{field}");
                let mut spec = full.clone();
                Edit::remove(&pointer).apply(&mut spec);
                if required.contains(&field) {
                    fx.assert_refused(&pointer, &spec, ErrorCode::InvalidSpec, &pointer);
                } else {
                    fx.validate(&spec).unwrap();
                }
            }
            // And anything else is refused, at its own pointer.
            let pointer = format!("{at}/extra");
            let mut spec = full.clone();
            Edit::set(&pointer, json!(1)).apply(&mut spec);
            fx.assert_refused(&pointer, &spec, ErrorCode::InvalidSpec, &pointer);
        }
    }

    #[test]
    fn schema_enums_are_accepted_by_the_validator() {
        let fx = Fixture::new();
        let schema = json_schema();
        let enums = [
            ("/priority", "/properties/priority/enum"),
            ("/preempt/mode", "/$defs/preempt/properties/mode/enum"),
        ];
        for (field, pointer) in enums {
            for value in schema.pointer(pointer).unwrap().as_array().unwrap() {
                let mut spec = fx.spec();
                Edit::set(field, value.clone()).apply(&mut spec);
                fx.validate(&spec).unwrap();
            }
        }
    }

    /// Whether every object key in `value` is declared by `node` (following `$ref`, and
    /// trying each `oneOf` branch), and every `const` matches.
    fn declared(schema: &Value, node: &Value, value: &Value, at: &str) -> Result<(), String> {
        let node = match node.get("$ref").and_then(Value::as_str) {
            Some(r) => schema.pointer(&r[1..]).unwrap(),
            None => node,
        };
        if let Some(branches) = node.get("oneOf").and_then(Value::as_array) {
            let errors: Vec<String> = branches
                .iter()
                .filter_map(|b| declared(schema, b, value, at).err())
                .collect();
            if errors.len() == branches.len() {
                return Err(errors.join("; "));
            }
        }
        if let Some(c) = node.get("const") {
            if c != value {
                return Err(format!("{at}: {value} is not {c}"));
            }
        }
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    let at = format!("{at}/{k}");
                    match (
                        node.get("properties").and_then(|p| p.get(k)),
                        &node["additionalProperties"],
                    ) {
                        (Some(child), _) => declared(schema, child, v, &at)?,
                        (None, extra @ Value::Object(_)) => declared(schema, extra, v, &at)?,
                        (None, _) if node.get("properties").is_some() => {
                            return Err(format!("{at} is not in the schema"))
                        }
                        (None, _) => {}
                    }
                }
            }
            Value::Array(items) => {
                if let Some(child) = node.get("items") {
                    for (i, v) in items.iter().enumerate() {
                        declared(schema, child, v, &format!("{at}/{i}"))?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    #[test]
    fn accepted_examples_use_only_schema_properties() {
        let fx = Fixture::new();
        let schema = json_schema();
        let full = full_example(&fx);
        let mut container_workload = fx.spec();
        Edit::set("/workload", full["steps"][1].clone()).apply(&mut container_workload);

        for example in [fx.spec(), full, container_workload] {
            let valid = fx.validate(&example).unwrap();
            declared(&schema, &schema, &example, "").unwrap();
            // The schema also describes what the validator writes back, so a stored spec
            // (with `steps`) is still a spec users could submit.
            declared(&schema, &schema, &valid.canonical, "").unwrap();
        }
    }

    #[test]
    fn the_checker_notices_an_undeclared_field() {
        let fx = Fixture::new();
        let schema = json_schema();
        let mut spec = fx.spec();
        Edit::set("/workload/environment", json!({})).apply(&mut spec);
        assert!(declared(&schema, &schema, &spec, "").is_err());
    }
}
