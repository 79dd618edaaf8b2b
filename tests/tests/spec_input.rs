//! Submitting bad input: every refusal has the right code, exit status and pointer, and
//! changes nothing in the queue. Also the spec's JSON Schema, which needs no daemon.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::common::queue::{jobs_json, queue_home};
use crate::common::{new_uuid, Spec, TestHome};
use serde_json::{json, Value};

#[test]
fn spec_pinned_to_an_unknown_resource_is_resource_not_found() {
    let h = queue_home();
    for target in [json!("gpu7"), json!(new_uuid())] {
        let err = h.submit_err(&h.spec("pinned").set("resource", target.clone()), None, 3);
        assert_eq!(err["code"], "resource_not_found", "{target}: {err}");
    }
    assert!(h.queue().is_empty());
}

#[test]
fn bad_specs_are_refused_with_a_clear_error_and_change_nothing() {
    let h = queue_home();
    h.submit(&h.spec("already here"));
    let before = jobs_json(&h);
    let submit_text = |text: &str, extra: &[&str]| {
        let path = h.write_file(&format!("bad-{}.json", new_uuid()), text);
        let mut args = vec![
            "resource",
            "job",
            "submit",
            "--spec",
            path.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = h.cli(&[&["--json"][..], &args].concat());
        (out, args.join(" "))
    };

    // Malformed JSON.
    let (out, what) = submit_text("{\"api_version\": 1, \"name\": ", &[]);
    let err = common::error_of(&out, 2, &what);
    assert_eq!(err["code"], "invalid_spec", "{err}");

    // 10 MiB: a valid spec padded with whitespace is still refused by size.
    let mut huge = h.spec("huge").0.to_string();
    huge.push_str(&" ".repeat(10 * 1024 * 1024));
    let (out, what) = submit_text(&huge, &[]);
    let err = common::error_of(&out, 2, &what);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    // Just over 1 MiB, too.
    let mut over = h.spec("over").0.to_string();
    over.push_str(&" ".repeat(1024 * 1024));
    let (out, what) = submit_text(&over, &[]);
    assert_eq!(common::error_of(&out, 2, &what)["code"], "invalid_spec");

    // A NUL byte in argv.
    let nul = h.spec("nul").command(&["/bin/sh", "-c", "echo a\u{0}b"]);
    let err = h.submit_err(&nul, None, 2);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/workload/command/2", "{err}");

    // Unknown fields, at the top and nested.
    let top = h.spec("unknown").set("colour", json!("blue"));
    let err = h.submit_err(&top, None, 2);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/colour", "{err}");
    assert_eq!(err["input"]["value"], "blue", "{err}");
    let mut nested = h.spec("nested");
    nested.0["preempt"]["grace"] = json!("10s");
    let err = h.submit_err(&nested, None, 2);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/preempt/grace", "{err}");

    // A job id that is not a full UUID.
    let file = h.spec_file(&h.spec("bad id"));
    for id in ["not-a-uuid", "01a22781"] {
        let err = h.json_err(
            &[
                "resource",
                "job",
                "submit",
                "--job-id",
                id,
                "--spec",
                file.to_str().unwrap(),
            ],
            2,
        );
        assert_eq!(err["code"], "invalid_queue_input", "{id}: {err}");
    }

    // The same refusals through stdin.
    let out = h.cli_with_stdin(
        &["--json", "resource", "job", "submit", "--spec", "-"],
        Some(b"not json at all"),
    );
    assert_eq!(
        common::error_of(&out, 2, "submit --spec -")["code"],
        "invalid_spec"
    );

    assert_eq!(jobs_json(&h), before, "bad input changes nothing");
}

#[test]
fn spec_rules_are_refused_with_their_pointer() {
    let h = queue_home();
    let cases: Vec<(Spec, &str)> = vec![
        (h.spec("v").set("api_version", json!(2)), "/api_version"),
        (h.spec("t").set("thread", json!("not-a-uuid")), "/thread"),
        (h.spec("   "), "/name"),
        (h.spec(&"n".repeat(121)), "/name"),
        (h.spec("p").set("priority", json!("urgent")), "/priority"),
        (h.spec("to").set("timeout", json!("29m")), "/timeout"),
        (h.spec("e").command(&[]), "/workload/command"),
    ];
    let before = jobs_json(&h);
    for (spec, pointer) in cases {
        let err = h.submit_err(&spec, None, 2);
        assert_eq!(err["code"], "invalid_spec", "{}: {err}", spec.0);
        let got = err["input"]["pointer"].as_str().unwrap_or_default();
        assert!(
            got.starts_with(pointer),
            "expected pointer {pointer}, got {err}"
        );
    }
    let missing = h.spec("missing").set("priority", Value::Null);
    let err = h.submit_err(&missing, None, 2);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap_or_default()
            .contains("priority")
            || err["input"]["pointer"] == "/priority",
        "a missing field is named: {err}"
    );
    let mut restart_window = h.spec("w");
    restart_window.0["preempt"] = json!({"mode": "restart", "restart_within": "10m"});
    let err = h.submit_err(&restart_window, None, 2);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(jobs_json(&h), before);
}

#[test]
fn spec_limits_are_inclusive_and_names_are_trimmed() {
    let h = queue_home();
    let trimmed = h.submit(&h.spec("  padded name  "));
    let show = h.json(&["resource", "job", "show", &trimmed]);
    assert_eq!(show["name"], "padded name", "{show}");

    h.submit(&h.spec("min timeout").set("timeout", json!("30m")));
    h.submit(&h.spec(&"n".repeat(120)));
    for window in ["1m", "24h"] {
        let mut spec = h.spec("window");
        spec.0["preempt"] = json!({"mode": "yield", "restart_within": window});
        h.submit(&spec);
    }
    assert_eq!(h.queue().len(), 5);
    for window in ["59s", "25h"] {
        let mut spec = h.spec("window");
        spec.0["preempt"] = json!({"mode": "wait", "restart_within": window});
        let err = h.submit_err(&spec, None, 2);
        assert_eq!(err["code"], "invalid_spec", "{window}: {err}");
        assert_eq!(err["input"]["pointer"], "/preempt/restart_within", "{err}");
    }
    let err = h.submit_err(&h.spec("tab\there"), None, 2);
    assert_eq!(err["input"]["pointer"], "/name", "{err}");
    let err = h.submit_err(
        &h.spec("elsewhere").set("machine", json!("elsewhere")),
        None,
        3,
    );
    assert_eq!(err["code"], "machine_not_found", "{err}");
    assert_eq!(h.queue().len(), 5);
}

#[test]
fn a_program_not_on_path_is_executable_missing() {
    let h = queue_home();
    for argv in [
        vec!["homebased-e2e-no-such-program"],
        vec!["/nonexistent/bin/prog", "--flag"],
    ] {
        let err = h.submit_err(&h.spec("missing").command(&argv), None, 3);
        assert_eq!(err["code"], "executable_missing", "{argv:?}: {err}");
    }
    assert!(h.queue().is_empty());
}

#[test]
fn entry_points_that_escape_cleanup_are_refused() {
    let mut h = queue_home();
    let bin = h.tmp().join("escape-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tmux = bin.join("tmux");
    std::fs::write(&tmux, "#!/bin/sh\nexit 0\n").unwrap();
    let exec = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755);
    std::fs::set_permissions(&tmux, exec).unwrap();
    std::os::unix::fs::symlink(&tmux, bin.join("innocent")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    h.set_env("PATH", path);
    for argv in [["tmux"], ["innocent"]] {
        let err = h.submit_err(&h.spec("escape").command(&argv), None, 2);
        assert_eq!(err["code"], "invalid_spec", "{argv:?}: {err}");
    }
    assert!(h.queue().is_empty());
}

#[test]
fn a_cwd_that_is_not_an_existing_directory_is_invalid_cwd() {
    let h = queue_home();
    let file = h.write_file("plain-file", "not a directory");
    for cwd in [h.tmp().join("no-such-dir"), file] {
        let err = h.submit_err(&h.spec("cwd").set("cwd", json!(cwd)), None, 2);
        assert_eq!(err["code"], "invalid_cwd", "{}: {err}", cwd.display());
    }
    assert!(h.queue().is_empty());
}

#[test]
fn resource_schema_prints_a_json_schema_without_a_daemon() {
    let h = TestHome::without_resources();
    let out = h.cli(&["resource", "schema"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let schema = common::parse_one(&out.stdout);
    assert!(
        schema["$schema"]
            .as_str()
            .is_some_and(|s| s.contains("json-schema.org")),
        "{schema}"
    );
    assert_eq!(schema["type"], "object");
    assert_eq!(
        schema["additionalProperties"], false,
        "unknown fields are refused"
    );
    for field in [
        "api_version",
        "thread",
        "name",
        "cwd",
        "priority",
        "preempt",
        "timeout",
        "machine",
        "resource",
        "workload",
        "steps",
    ] {
        assert!(
            schema["properties"].get(field).is_some(),
            "schema lacks {field}: {schema}"
        );
    }
    let json_out = h.cli(&["--json", "resource", "schema"]);
    assert_eq!(json_out.code(), 0, "{json_out:?}");
    let json_schema = common::parse_one(&json_out.stdout);
    assert_eq!(json_schema["properties"], schema["properties"]);
    assert_eq!(
        h.json(&["daemon", "status"])["socket"],
        "down",
        "no daemon was needed"
    );
}
