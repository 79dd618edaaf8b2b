//! Helpers for tests of the queue: a daemon on a home without resources (so every job stays
//! queued), bulk submission, and the expected serving order.

use super::TestHome;
use serde_json::Value;

/// A running daemon on a home without resources.
pub fn queue_home() -> TestHome {
    let mut h = TestHome::without_resources();
    h.start_daemon();
    h
}

/// Submits one job per `(name, level)` in order and returns their ids.
pub fn submit_all(h: &TestHome, jobs: &[(&str, &str)]) -> Vec<String> {
    jobs.iter()
        .map(|(name, level)| h.submit(&h.spec(name).priority(level)))
        .collect()
}

/// The expected `resource jobs` order from `(id, level)` pairs in serving order: positions
/// are dense and 1-based within each level.
pub fn expected(order: &[(&String, &str)]) -> Vec<(String, String, u64)> {
    let mut out = Vec::new();
    let mut last_level = "";
    let mut position = 0;
    for (id, level) in order {
        if *level != last_level {
            last_level = level;
            position = 0;
        }
        position += 1;
        out.push(((*id).clone(), level.to_string(), position));
    }
    out
}

pub fn move_job(h: &TestHome, job: &str, placement: &[&str]) -> Value {
    let mut args = vec!["resource", "job", "move", job];
    args.extend_from_slice(placement);
    h.json(&args)
}

pub fn move_refused(h: &TestHome, job: &str, placement: &[&str]) -> Value {
    let mut args = vec!["resource", "job", "move", job];
    args.extend_from_slice(placement);
    let err = h.json_err(&args, 2);
    assert_eq!(err["code"], "move_refused", "move {placement:?}: {err}");
    err
}

pub fn jobs_json(h: &TestHome) -> Value {
    h.json(&["resource", "jobs"])["jobs"].clone()
}
