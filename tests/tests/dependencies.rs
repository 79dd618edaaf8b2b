//! Dependencies between jobs (SPEC sections 3 and 4, `after`): a job waits, with the
//! `dependency` reason, until every job it names has succeeded, and is cancelled with
//! `JOB_CANCELLED` (`detail.cause` `dependency_failed`) when one fails or is cancelled,
//! through a chain; bad `after` is refused with pointers; retention keeps a job a live job
//! names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::jobs::{
    follow_events, gated_spec, home_with_gpus, open_gate, sh_spec, show, state_of, wait_job,
    wait_phase,
};
use crate::common::{new_uuid, wait_until, TestHome, PATIENCE};
use serde_json::{json, Value};

fn events_of(shown: &Value) -> Vec<Value> {
    shown["events"].as_array().unwrap().clone()
}

fn the_cancel_event(shown: &Value) -> Value {
    let events = events_of(shown);
    assert_eq!(events.len(), 1, "one event: {shown:#}");
    assert_eq!(events[0]["event"], "JOB_CANCELLED", "{shown:#}");
    events[0].clone()
}

fn submit_after(h: &TestHome, name: &str, after: &[&str]) -> String {
    h.submit(&sh_spec(h, name, "exit 0", &[]).set("after", json!(after)))
}

#[test]
fn a_dependent_job_waits_with_its_reason_then_starts_after_its_dependency_succeeds() {
    let h = home_with_gpus(2);
    let gate = h.tmp().join("gate");
    let train = h.submit(&gated_spec(&h, "train", "", &gate, ""));
    wait_phase(&h, &train, "executing");
    // Through the flag: the CLI puts it in the spec. It names the job at high priority, and
    // still neither starts on the free GPU nor preempts.
    let spec = h.spec_file(&sh_spec(&h, "eval", "exit 0", &[]).priority("high"));
    let submitted = h.json(&[
        "resource",
        "job",
        "submit",
        "--spec",
        spec.to_str().unwrap(),
        "--after",
        &train,
    ]);
    let eval = submitted["job"].as_str().unwrap().to_string();
    assert_eq!(submitted["state"], "queued", "{submitted}");
    // The free GPU serves the job behind it.
    let other = h.submit(&sh_spec(&h, "other", "exit 0", &[]));
    wait_job(&h, &other, "succeeded");
    h.settle();
    let waiting = show(&h, &eval);
    assert_eq!(state_of(&waiting), "queued", "{waiting:#}");
    assert_eq!(
        waiting["waiting"],
        json!({"reason": "dependency", "job": train, "state": "active"}),
        "{waiting:#}"
    );
    assert_eq!(waiting["position"], 1, "it keeps its slot: {waiting:#}");
    assert_eq!(
        waiting["dependencies"],
        json!([{"job": train, "name": "train", "state": "active"}]),
        "{waiting:#}"
    );
    assert_eq!(waiting["spec"]["after"], json!([train]), "{waiting:#}");
    let trainer = show(&h, &train);
    assert_eq!(
        trainer["dependents"],
        json!([{"job": eval, "name": "eval", "state": "queued"}]),
        "{trainer:#}"
    );
    assert_eq!(state_of(&trainer), "active", "nothing preempted it");
    // In words, as `resource jobs` and `job show` print it.
    let listed = h.cli(&["resource", "jobs"]).stdout;
    assert!(listed.contains("after train (active)"), "{listed}");
    let human = h.cli(&["resource", "job", "show", &eval]).stdout;
    assert!(
        human.contains(&format!("after: {train} train (active)")),
        "{human}"
    );

    open_gate(&gate);
    let done = wait_job(&h, &eval, "succeeded");
    assert_eq!(done["runs"].as_array().unwrap().len(), 1, "{done:#}");
    assert_eq!(
        done["dependencies"],
        json!([{"job": train, "name": "train", "state": "succeeded"}]),
        "{done:#}"
    );
}

#[test]
fn a_job_waits_for_every_job_it_names_and_names_the_first_not_yet_succeeded() {
    let h = home_with_gpus(3);
    let (g1, g2) = (h.tmp().join("g1"), h.tmp().join("g2"));
    let first = h.submit(&gated_spec(&h, "first", "", &g1, ""));
    let second = h.submit(&gated_spec(&h, "second", "", &g2, ""));
    wait_phase(&h, &first, "executing");
    wait_phase(&h, &second, "executing");
    let both = submit_after(&h, "both", &[&first, &second]);
    h.settle();
    assert_eq!(show(&h, &both)["waiting"]["job"], first.as_str());
    open_gate(&g1);
    wait_job(&h, &first, "succeeded");
    wait_until("the reason to name the second job", || {
        h.settle();
        show(&h, &both)["waiting"]["job"] == second.as_str()
    });
    assert_eq!(state_of(&show(&h, &both)), "queued");
    open_gate(&g2);
    wait_job(&h, &both, "succeeded");
}

#[test]
fn a_failure_cancels_a_chain_of_three_with_the_events_in_order() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("gate");
    let thread = new_uuid();
    let a = h.submit(&gated_spec(&h, "a", "", &gate, "exit 3").set("thread", json!(thread)));
    let b = h.submit(
        &sh_spec(&h, "b", "exit 0", &[])
            .set("thread", json!(thread))
            .set("after", json!([a])),
    );
    let c = h.submit(
        &sh_spec(&h, "c", "exit 0", &[])
            .set("thread", json!(thread))
            .set("after", json!([b])),
    );
    h.settle();
    assert_eq!(show(&h, &c)["waiting"]["job"], b.as_str());
    assert_eq!(show(&h, &c)["waiting"]["state"], "queued");
    open_gate(&gate);
    wait_job(&h, &a, "failed");
    // Committed with the failure: no wait for a pass.
    let (shown_b, shown_c) = (show(&h, &b), show(&h, &c));
    assert_eq!(state_of(&shown_b), "cancelled", "{shown_b:#}");
    assert_eq!(state_of(&shown_c), "cancelled", "{shown_c:#}");
    assert!(shown_b["runs"].as_array().unwrap().is_empty());
    assert!(shown_c["runs"].as_array().unwrap().is_empty());
    let eb = the_cancel_event(&shown_b);
    let ec = the_cancel_event(&shown_c);
    assert_eq!(
        eb["detail"],
        json!({"cause": "dependency_failed", "job": a}),
        "{eb}"
    );
    assert_eq!(
        ec["detail"],
        json!({"cause": "dependency_failed", "job": b}),
        "{ec}"
    );
    assert_eq!(eb["task"], Value::Null, "no run: {eb}");
    // The thread's events in the order the daemon recorded them (its store, read by
    // cursor): the failure, then b, then c. Timestamps of one commit can be equal, and the
    // inbox is written per job (SPEC 8), so neither shows the order.
    let (mut follower, lines) = follow_events(&h, &thread);
    let recorded: Vec<Value> = (0..3)
        .map(|_| {
            let line = lines.recv_timeout(PATIENCE).expect("three events followed");
            serde_json::from_str(&line).unwrap()
        })
        .collect();
    let _ = follower.kill();
    let _ = follower.wait();
    let kinds: Vec<(&str, &str)> = recorded
        .iter()
        .map(|e| (e["job"].as_str().unwrap(), e["event"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            (a.as_str(), "JOB_FAILED"),
            (b.as_str(), "JOB_CANCELLED"),
            (c.as_str(), "JOB_CANCELLED"),
        ],
        "{recorded:#?}"
    );
}

#[test]
fn a_dependency_that_already_succeeded_lets_the_job_start_at_once() {
    let h = home_with_gpus(1);
    let done = h.submit(&sh_spec(&h, "done", "exit 0", &[]));
    wait_job(&h, &done, "succeeded");
    let next = submit_after(&h, "next", &[&done]);
    wait_job(&h, &next, "succeeded");
    let trainer = show(&h, &done);
    assert_eq!(
        trainer["dependents"][0]["state"], "succeeded",
        "{trainer:#}"
    );
}

#[test]
fn naming_a_cancelled_or_failed_job_cancels_the_job_at_submit_with_the_same_event() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("gate");
    let holder = h.submit(&gated_spec(&h, "holder", "", &gate, ""));
    wait_phase(&h, &holder, "executing");
    let queued = h.submit(&sh_spec(&h, "queued", "exit 0", &[]));
    h.json(&["resource", "job", "cancel", &queued]);
    let spec = sh_spec(&h, "late", "exit 0", &[]).set("after", json!([holder, queued]));
    let answer = h.submit_json(&spec, None);
    assert_eq!(answer["state"], "cancelled", "{answer}");
    assert_eq!(answer["position"], Value::Null, "{answer}");
    let late = answer["job"].as_str().unwrap();
    let shown = show(&h, late);
    let event = the_cancel_event(&shown);
    assert_eq!(
        event["detail"],
        json!({"cause": "dependency_failed", "job": queued}),
        "{event}"
    );
    // The same submit again answers the same job, cancelled once.
    let again = h.submit_json(&spec, Some(late));
    assert_eq!(again["state"], "cancelled", "{again}");
    assert_eq!(events_of(&show(&h, late)).len(), 1);
    open_gate(&gate);
    wait_job(&h, &holder, "succeeded");
}

#[test]
fn bad_after_is_refused_with_pointers() {
    let h = home_with_gpus(1);
    let known = h.submit(&sh_spec(&h, "known", "exit 0", &[]));
    let unknown = new_uuid();
    let refused = |after: Value, exit: i32| {
        let spec = sh_spec(&h, "refused", "exit 0", &[]).set("after", after);
        h.submit_err(&spec, None, exit)
    };
    let err = refused(json!([known, unknown]), 3);
    assert_eq!(err["code"], "job_not_found", "{err}");
    assert_eq!(err["input"]["pointer"], "/after/1", "{err}");
    assert!(err["message"].as_str().unwrap().contains(&unknown), "{err}");
    let many: Vec<String> = (0..33).map(|_| new_uuid()).collect();
    #[rustfmt::skip]
    let cases = [
        (json!([known, "0190a0c4"]), "/after/1"),
        (json!(many), "/after"),
        (json!([]), "/after"),
        (json!(known), "/after"),
        (json!([known, known.to_uppercase()]), "/after/1"),
    ];
    for (after, pointer) in cases {
        let err = refused(after.clone(), 2);
        assert_eq!(err["code"], "invalid_spec", "{after}: {err}");
        assert_eq!(err["input"]["pointer"], pointer, "{after}: {err}");
    }
    // On the command line: a malformed id, and a flag that disagrees with the spec.
    let file = h.spec_file(&sh_spec(&h, "flagged", "exit 0", &[]).set("after", json!([known])));
    let file = file.to_str().unwrap();
    let submit = |flag: &str| {
        h.json_err(
            &["resource", "job", "submit", "--spec", file, "--after", flag],
            2,
        )
    };
    let err = submit("not-a-uuid");
    assert_eq!(err["code"], "invalid_queue_input", "{err}");
    let err = submit(&new_uuid());
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/after", "{err}");
    // Agreeing is fine.
    let agreed = h.json(&[
        "resource", "job", "submit", "--spec", file, "--after", &known,
    ]);
    assert!(agreed["job"].is_string(), "{agreed}");
}

#[test]
fn retention_keeps_a_finished_job_that_a_live_job_still_names() {
    let h = home_with_gpus(1);
    let done = h.submit(&sh_spec(&h, "done", "exit 0", &[]));
    wait_job(&h, &done, "succeeded");
    let gate = h.tmp().join("gate");
    let holder = h.submit(&gated_spec(&h, "holder", "", &gate, ""));
    wait_phase(&h, &holder, "executing");
    // It names a finished job and waits for the lane.
    let waiting = submit_after(&h, "waiting", &[&done]);
    let mut pruned = Value::Null;
    wait_until("retention to have nothing left to deliver", || {
        pruned = h.json(&["history", "prune", "--before", "0s", "--dry-run"]);
        pruned["kept_undelivered"] == 0
    });
    let pruned = h.json(&["history", "prune", "--before", "0s"]);
    assert_eq!(pruned["jobs"], 0, "{pruned}");
    assert_eq!(state_of(&show(&h, &done)), "succeeded");
    open_gate(&gate);
    wait_job(&h, &waiting, "succeeded");
    // Once no live job names it, it may go.
    wait_until("the finished jobs to be removed", || {
        h.json(&["history", "prune", "--before", "0s"]);
        h.cli(&["--json", "resource", "job", "show", &done]).code() == 3
    });
}

#[test]
fn cancelling_the_job_a_chain_waits_on_cancels_the_chain_whether_it_was_queued_or_running() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("gate");
    let running = h.submit(&gated_spec(&h, "running", "", &gate, ""));
    wait_phase(&h, &running, "executing");
    // Queued behind it on the one GPU, and a job after that one.
    let queued = h.submit(&sh_spec(&h, "queued", "exit 0", &[]));
    let after_queued = submit_after(&h, "after-queued", &[&queued]);
    let after_running = submit_after(&h, "after-running", &[&running]);
    for (cancelled, dependent) in [(&queued, &after_queued), (&running, &after_running)] {
        h.json(&["resource", "job", "cancel", cancelled]);
        wait_job(&h, cancelled, "cancelled");
        let shown = show(&h, dependent);
        assert_eq!(state_of(&shown), "cancelled", "{shown:#}");
        let event = the_cancel_event(&shown);
        assert_eq!(event["detail"]["cause"], "dependency_failed", "{event}");
        assert_eq!(event["detail"]["job"], cancelled.as_str(), "{event}");
    }
}
