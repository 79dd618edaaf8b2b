//! The end-to-end suite: one test binary (`homebased-e2e::e2e`) with one module per area, so
//! that a build links one executable rather than one per file. Every module drives the real
//! `homebased` and `homebased-worker` binaries through [`common`]; nextest runs each test in
//! a process of its own, so what a test sets for its process (an rlimit, `FAILPOINTS` for
//! its children) stays its own. A test's full name is `<module>::<test>` (for example
//! `crash_matrix::` selects the crash matrix: `-E 'test(/^crash_matrix::/)'`).
//!
//! `tests/Cargo.toml` turns off Cargo's discovery of test targets (each file of `tests/tests`
//! would be a binary of its own): a new file here is a module, declared below, which
//! [`every_file_is_a_module`] checks.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod allocation;
mod checkpoints;
mod cleanup;
mod containers;
mod crash_matrix;
mod dashboard;
mod dependencies;
mod environment;
mod events;
mod fleet;
mod fleet_remote;
mod foundation;
mod gpus;
mod history;
mod human;
mod hung_daemon;
mod inputs;
mod launch;
mod lineage;
mod listener;
mod log_reading;
mod logs;
mod mcp;
mod metrics;
mod moves;
mod multi_gpu;
mod preemption;
mod queue;
mod resources;
mod runs;
mod service;
mod slurm;
mod spec_input;
mod standby;
mod storage;
mod time_limits;
mod waiting;
mod web_token;

/// A file of `tests/tests` that no `mod` names would compile into nothing and run no test,
/// silently: every one must be declared above.
#[test]
fn every_file_is_a_module() {
    let main = include_str!("main.rs");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(module) = name.strip_suffix(".rs") else {
            continue;
        };
        if module != "main" && !main.lines().any(|l| l == format!("mod {module};")) {
            missing.push(name.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "no `mod` in tests/tests/main.rs names {}: add `mod <name>;` there, or its tests never run",
        missing.join(", ")
    );
}
