//! Property tests of every parser that reads untrusted input: the job spec and its canonical
//! form, request bodies, the config file, `/proc/<pid>/stat` lines and the log tail. Each
//! runs many generated cases (the count is in its `ProptestConfig`; `PROPTEST_CASES`
//! overrides it); a failure prints the smallest input that breaks the property.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use homebased_shared::config::Config;
use homebased_shared::process::parse_stat;
use homebased_shared::spec::{validate, SubmitContext};
use homebased_shared::tail::read_tail;
use homebased_shared::wire::strict;
use proptest::prelude::*;
use serde_json::{json, Value};

fn ctx() -> SubmitContext {
    SubmitContext {
        path: Some("/usr/bin:/bin".into()),
        cwd: "/".into(),
        elsewhere: false,
    }
}

/// Any JSON value, nested a few levels, with keys from a small alphabet so that objects
/// often carry the spec's own field names.
fn any_json() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("api_version".to_string()),
        Just("thread".to_string()),
        Just("name".to_string()),
        Just("steps".to_string()),
        Just("preempt".to_string()),
        Just("type".to_string()),
        Just("command".to_string()),
        "[a-z_]{0,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

/// A valid spec: the fields a user sets, with values drawn from what the schema allows.
fn valid_spec() -> impl Strategy<Value = Value> {
    let priority = prop_oneof![Just("high"), Just("medium"), Just("low")];
    let preempt = prop_oneof![
        Just(json!({"mode": "wait"})),
        Just(json!({"mode": "yield"})),
        Just(json!({"mode": "restart"})),
        (1u32..600).prop_map(|m| json!({"mode": "yield", "restart_within": format!("{m}m")})),
    ];
    let step = prop::collection::vec("[a-zA-Z0-9 ._=-]{0,16}", 0..4).prop_map(|args| {
        let mut command = vec![json!("/bin/sh"), json!("-c"), json!("true")];
        command.extend(args.into_iter().map(Value::String));
        json!({"type": "task", "command": command})
    });
    (
        "[a-zA-Z0-9_.-][a-zA-Z0-9 _.-]{0,38}[a-zA-Z0-9_.-]",
        priority,
        preempt,
        prop::collection::vec(step, 1..5),
        prop::option::of(30u32..600),
    )
        .prop_map(|(name, priority, preempt, steps, timeout)| {
            let mut spec = json!({
                "api_version": 1,
                "thread": uuid::Uuid::new_v4(),
                "name": name,
                "cwd": "/",
                "priority": priority,
                "preempt": preempt,
                "steps": steps,
            });
            if let Some(minutes) = timeout {
                spec["timeout"] = json!(format!("{minutes}m"));
            }
            spec
        })
}

/// `value` as JSON text with every object's keys in the order `shuffle` gives them.
fn reordered(value: &Value, shuffle: &mut impl FnMut(usize) -> usize) -> String {
    match value {
        Value::Object(map) => {
            let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
            let n = pairs.len();
            for i in (1..n).rev() {
                pairs.swap(i, shuffle(i + 1));
            }
            let fields: Vec<String> = pairs
                .into_iter()
                .map(|(k, v)| format!("{}:{}", json!(k), reordered(v, shuffle)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|v| reordered(v, shuffle)).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_spec_parser_never_panics_on_bytes(raw in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = validate(&raw, &ctx());
    }

    #[test]
    fn the_spec_parser_answers_any_json_with_a_spec_or_an_invalid_spec(doc in any_json()) {
        let raw = serde_json::to_vec(&doc).unwrap();
        if let Err(e) = validate(&raw, &ctx()) {
            prop_assert_eq!(e.code.as_str(), "invalid_spec", "{}", e.message);
        }
    }

    #[test]
    fn strict_json_never_panics_and_agrees_with_serde_on_what_parses(
        raw in prop::collection::vec(any::<u8>(), 0..256)
    ) {
        if let Ok(value) = strict::parse(&raw) {
            let loose: Value = serde_json::from_slice(&raw).unwrap();
            prop_assert_eq!(value, loose);
        }
    }

    #[test]
    fn the_config_parser_never_panics(text in "(\\[[a-z]{1,8}\\]\n|[a-z_]{1,12} = (\"[^\"\n]{0,12}\"|[0-9]{1,4}|true)\n|.{0,20}\n){0,8}") {
        let _ = Config::parse(&text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// A valid spec with one field replaced by anything: valid, or refused as
    /// `invalid_spec` (or `invalid_cwd`) with a JSON pointer into the spec, never anything
    /// else.
    #[test]
    fn a_spec_with_one_field_replaced_is_refused_with_its_pointer(
        spec in valid_spec(),
        field in prop::sample::select(vec![
            "api_version", "thread", "name", "cwd", "priority", "preempt", "timeout",
            "machine", "resource", "workload", "steps", "extra",
        ]),
        value in any_json(),
    ) {
        let mut spec = spec;
        spec[field] = value;
        let raw = serde_json::to_vec(&spec).unwrap();
        if let Err(e) = validate(&raw, &ctx()) {
            // A cwd that is not a directory here has its own code; everything else is the
            // spec's fault.
            let code = e.code.as_str();
            prop_assert!(code == "invalid_spec" || code == "invalid_cwd", "{}: {}", code, e.message);
            let pointer = e.input["pointer"].as_str().unwrap_or("");
            prop_assert!(pointer.is_empty() || pointer.starts_with('/'), "{}", pointer);
        }
    }

    /// Every request body the API reads: a strict parse, then the typed request, never a
    /// panic, whatever was sent.
    #[test]
    fn every_api_body_reads_or_refuses_without_a_panic(doc in any_json()) {
        use homebased_shared::wire::{
            CancelRequest, MoveRequest, RegisterRequest, ReleaseRequest, SubmitRequest,
        };
        let raw = serde_json::to_vec(&doc).unwrap();
        let value = strict::parse(&raw).unwrap();
        let _ = serde_json::from_value::<MoveRequest>(value.clone());
        let _ = serde_json::from_value::<CancelRequest>(value.clone());
        let _ = serde_json::from_value::<ReleaseRequest>(value.clone());
        let _ = serde_json::from_value::<RegisterRequest>(value.clone());
        let _ = serde_json::from_value::<SubmitRequest>(value);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn the_canonical_form_is_idempotent_and_its_digest_ignores_key_order(
        spec in valid_spec(),
        seed in any::<u64>(),
    ) {
        let raw = serde_json::to_vec(&spec).unwrap();
        let first = validate(&raw, &ctx()).expect("a generated spec is valid");
        // The canonical form validates to itself.
        let again = validate(&serde_json::to_vec(&first.canonical).unwrap(), &ctx()).unwrap();
        prop_assert_eq!(&again.canonical, &first.canonical);
        prop_assert_eq!(&again.digest, &first.digest);
        // The same spec written with its keys in another order has the same digest.
        let mut state = seed | 1;
        let mut shuffle = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        let text = reordered(&spec, &mut shuffle);
        let shuffled = validate(text.as_bytes(), &ctx()).unwrap();
        prop_assert_eq!(&shuffled.digest, &first.digest);
    }

    #[test]
    fn a_stat_line_parses_whatever_the_command_name(
        pid in 1u32..4_000_000,
        comm in "[ -~]{0,15}",
        state in prop::sample::select(vec!['R', 'S', 'D', 'Z', 'T', 't', 'I', 'X']),
        ppid in 0u32..4_000_000,
        pgrp in 0u32..4_000_000,
        session in 0u32..4_000_000,
        flags in any::<u32>(),
        start in any::<u64>(),
    ) {
        // Fields 3..=22 of /proc/<pid>/stat, the name in parentheses as the kernel writes it
        // (it may hold spaces and parentheses of its own).
        let mut fields = vec![state.to_string(), ppid.to_string(), pgrp.to_string(), session.to_string()];
        fields.extend(["34816", "-1"].map(String::from));
        fields.push(flags.to_string());
        fields.extend(std::iter::repeat_n("0".to_string(), 12));
        fields.push(start.to_string());
        fields.extend(["123456", "789"].map(String::from));
        let line = format!("{pid} ({comm}) {}\n", fields.join(" "));
        let parsed = parse_stat(&line).expect("a well-formed stat line parses");
        prop_assert_eq!(parsed.pid, pid);
        prop_assert_eq!(parsed.state, state);
        prop_assert_eq!((parsed.ppid, parsed.pgrp, parsed.session), (ppid, pgrp, session));
        prop_assert_eq!(parsed.flags, flags);
        prop_assert_eq!(parsed.start_ticks, start);
    }

    #[test]
    fn a_stat_parser_never_panics_on_garbage(line in ".{0,200}") {
        let _ = parse_stat(&line);
    }

    #[test]
    fn the_tail_is_the_last_lines_of_the_log(
        lines in prop::collection::vec("[^\n]{1,20}", 0..60),
        ends_with_newline in any::<bool>(),
        want in 0usize..80,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("output.log");
        let mut text = lines.join("\n");
        if ends_with_newline && !text.is_empty() {
            text.push('\n');
        }
        std::fs::write(&path, &text).unwrap();
        let (tail, truncated) = read_tail(&path, Some(want)).unwrap();
        // The end of the log, starting at a line boundary, holding the last `want` lines.
        prop_assert!(text.ends_with(&tail), "{:?} is not the end of {:?}", tail, text);
        let before = &text[..text.len() - tail.len()];
        prop_assert!(
            tail.is_empty() || before.is_empty() || before.ends_with('\n'),
            "cut mid-line: {:?}",
            tail
        );
        let shown = tail.strip_suffix('\n').unwrap_or(&tail);
        let count = if shown.is_empty() { 0 } else { shown.split('\n').count() };
        prop_assert_eq!(count, want.min(lines.len()));
        prop_assert_eq!(truncated, lines.len() > want);
        // Without a line count the whole (small) log comes back untouched.
        let (whole, cut) = read_tail(&path, None).unwrap();
        prop_assert_eq!(whole, text);
        prop_assert!(!cut);
    }
}
