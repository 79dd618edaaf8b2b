//! The worker binary with real processes: a temporary run directory, a hand-written
//! `run.json`, `/bin/sh` workloads, real signals and real `/proc`.
// Helpers outside `#[test]` functions panic on purpose: a broken fixture fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod container;
mod ends;
mod environment;
mod lock;
mod storage;
mod support;
mod sweep;
