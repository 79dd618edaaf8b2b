//! Rearranging the queue: every `resource job move` form checked against the full serving
//! order, every refusal with its reason, and operation ids for move and cancel (stored
//! results, conflicts, refusals that store nothing). On a home without resources.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::new_uuid;
use crate::common::queue::{expected, jobs_json, move_job, move_refused, queue_home, submit_all};
use serde_json::json;

#[test]
fn move_front_and_back_reorder_within_the_level() {
    let h = queue_home();
    let ids = submit_all(
        &h,
        &[
            ("a", "medium"),
            ("b", "medium"),
            ("c", "medium"),
            ("hi", "high"),
        ],
    );
    let [a, b, c, hi] = &ids[..] else {
        unreachable!()
    };

    let moved = move_job(&h, c, &["--front"]);
    assert_eq!(moved["job"], c.as_str());
    assert_eq!(moved["priority"], "medium");
    assert_eq!(moved["position"], 1);
    assert_eq!(
        h.queue(),
        expected(&[(hi, "high"), (c, "medium"), (a, "medium"), (b, "medium")]),
        "--front stays within the level, behind higher levels"
    );

    let moved = move_job(&h, c, &["--back"]);
    assert_eq!(moved["position"], 3);
    assert_eq!(
        h.queue(),
        expected(&[(hi, "high"), (a, "medium"), (b, "medium"), (c, "medium")])
    );

    // Already at the front: a no-op that still answers the slot.
    let moved = move_job(&h, a, &["--front"]);
    assert_eq!(moved["position"], 1);
    assert_eq!(
        h.queue(),
        expected(&[(hi, "high"), (a, "medium"), (b, "medium"), (c, "medium")])
    );
}

#[test]
fn move_to_another_priority_alone_joins_the_back_of_that_level() {
    let h = queue_home();
    let ids = submit_all(
        &h,
        &[
            ("a", "medium"),
            ("b", "medium"),
            ("h1", "high"),
            ("h2", "high"),
        ],
    );
    let [a, b, h1, h2] = &ids[..] else {
        unreachable!()
    };
    let moved = move_job(&h, a, &["--priority", "high"]);
    assert_eq!(moved["priority"], "high");
    assert_eq!(moved["position"], 3);
    assert_eq!(
        h.queue(),
        expected(&[(h1, "high"), (h2, "high"), (a, "high"), (b, "medium")]),
        "the gap left in medium is closed"
    );
    let moved = move_job(&h, h1, &["--priority", "low"]);
    assert_eq!(moved["priority"], "low");
    assert_eq!(moved["position"], 1);
    assert_eq!(
        h.queue(),
        expected(&[(h2, "high"), (a, "high"), (b, "medium"), (h1, "low")])
    );
}

#[test]
fn move_with_priority_and_an_end_goes_to_that_end_of_the_level() {
    let h = queue_home();
    let ids = submit_all(
        &h,
        &[
            ("h1", "high"),
            ("h2", "high"),
            ("m", "medium"),
            ("l", "low"),
        ],
    );
    let [h1, h2, m, l] = &ids[..] else {
        unreachable!()
    };
    let moved = move_job(&h, m, &["--priority", "high", "--front"]);
    assert_eq!(
        (moved["priority"].clone(), moved["position"].clone()),
        (json!("high"), json!(1))
    );
    assert_eq!(
        h.queue(),
        expected(&[(m, "high"), (h1, "high"), (h2, "high"), (l, "low")])
    );
    let moved = move_job(&h, h1, &["--priority", "low", "--back"]);
    assert_eq!(
        (moved["priority"].clone(), moved["position"].clone()),
        (json!("low"), json!(2))
    );
    assert_eq!(
        h.queue(),
        expected(&[(m, "high"), (h2, "high"), (l, "low"), (h1, "low")])
    );
    // Priority of the current level with --front is an ordinary --front.
    let moved = move_job(&h, h1, &["--priority", "low", "--front"]);
    assert_eq!(moved["position"], 1);
    assert_eq!(
        h.queue(),
        expected(&[(m, "high"), (h2, "high"), (h1, "low"), (l, "low")])
    );
}

#[test]
fn move_before_and_after_place_next_to_the_target_within_a_level() {
    let h = queue_home();
    let ids = submit_all(
        &h,
        &[
            ("a", "medium"),
            ("b", "medium"),
            ("c", "medium"),
            ("d", "medium"),
        ],
    );
    let [a, b, c, d] = &ids[..] else {
        unreachable!()
    };

    // Downwards: the target's slot is taken after the mover leaves its own.
    let moved = move_job(&h, a, &["--before", d]);
    assert_eq!(moved["position"], 3);
    assert_eq!(
        h.queue(),
        expected(&[(b, "medium"), (c, "medium"), (a, "medium"), (d, "medium")])
    );

    // Upwards.
    let moved = move_job(&h, d, &["--after", b]);
    assert_eq!(moved["position"], 2);
    assert_eq!(
        h.queue(),
        expected(&[(b, "medium"), (d, "medium"), (c, "medium"), (a, "medium")])
    );

    let moved = move_job(&h, b, &["--after", a]);
    assert_eq!(moved["position"], 4);
    assert_eq!(
        h.queue(),
        expected(&[(d, "medium"), (c, "medium"), (a, "medium"), (b, "medium")])
    );

    let moved = move_job(&h, b, &["--before", d]);
    assert_eq!(moved["position"], 1);
    assert_eq!(
        h.queue(),
        expected(&[(b, "medium"), (d, "medium"), (c, "medium"), (a, "medium")])
    );
}

#[test]
fn move_before_and_after_take_the_target_level() {
    let h = queue_home();
    let ids = submit_all(
        &h,
        &[
            ("h1", "high"),
            ("h2", "high"),
            ("m", "medium"),
            ("l", "low"),
        ],
    );
    let [h1, h2, m, l] = &ids[..] else {
        unreachable!()
    };

    let moved = move_job(&h, l, &["--before", h2]);
    assert_eq!(
        (moved["priority"].clone(), moved["position"].clone()),
        (json!("high"), json!(2))
    );
    assert_eq!(
        h.queue(),
        expected(&[(h1, "high"), (l, "high"), (h2, "high"), (m, "medium")])
    );

    let moved = move_job(&h, h1, &["--after", m]);
    assert_eq!(
        (moved["priority"].clone(), moved["position"].clone()),
        (json!("medium"), json!(2))
    );
    assert_eq!(
        h.queue(),
        expected(&[(l, "high"), (h2, "high"), (m, "medium"), (h1, "medium")])
    );

    // An added priority equal to the target's level is allowed.
    let moved = move_job(&h, h2, &["--before", m, "--priority", "medium"]);
    assert_eq!(
        (moved["priority"].clone(), moved["position"].clone()),
        (json!("medium"), json!(1))
    );
    assert_eq!(
        h.queue(),
        expected(&[(l, "high"), (h2, "medium"), (m, "medium"), (h1, "medium")])
    );
}

#[test]
fn move_refusals_carry_their_reason_and_change_nothing() {
    let h = queue_home();
    let ids = submit_all(
        &h,
        &[
            ("a", "medium"),
            ("b", "medium"),
            ("h", "high"),
            ("gone", "low"),
        ],
    );
    let [a, b, hi, gone] = &ids[..] else {
        unreachable!()
    };
    h.json(&["resource", "job", "cancel", gone]);
    let before = jobs_json(&h);
    let unknown = new_uuid();

    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("no_placement", vec![]),
        ("conflicting_flags", vec!["--front", "--back"]),
        ("conflicting_flags", vec!["--front", "--before", b]),
        ("conflicting_flags", vec!["--back", "--after", b]),
        ("conflicting_flags", vec!["--before", b, "--after", hi]),
        ("self_target", vec!["--before", a]),
        ("self_target", vec!["--after", a]),
        ("target_not_found", vec!["--before", &unknown]),
        ("target_not_found", vec!["--after", &unknown]),
        ("target_terminal", vec!["--before", gone]),
        ("target_terminal", vec!["--after", gone]),
        (
            "level_mismatch",
            vec!["--before", hi, "--priority", "medium"],
        ),
        ("level_mismatch", vec!["--after", b, "--priority", "low"]),
    ];
    for (reason, placement) in cases {
        let err = move_refused(&h, a, &placement);
        assert_eq!(err["input"]["reason"], reason, "move {placement:?}: {err}");
        assert_eq!(err["retryable"], false);
    }
    assert_eq!(jobs_json(&h), before, "refused moves change nothing");
}

#[test]
fn moving_a_cancelled_job_is_job_terminal() {
    let h = queue_home();
    let ids = submit_all(&h, &[("a", "medium"), ("b", "medium")]);
    h.json(&["resource", "job", "cancel", &ids[0]]);
    let before = jobs_json(&h);
    for placement in [
        vec!["--front"],
        vec!["--priority", "high"],
        vec!["--before", &ids[1]],
    ] {
        let mut args = vec!["resource", "job", "move", &ids[0]];
        args.extend(placement.iter());
        let err = h.json_err(&args, 5);
        assert_eq!(err["code"], "job_terminal", "{placement:?}: {err}");
    }
    assert_eq!(jobs_json(&h), before);
}

#[test]
fn operation_id_retry_returns_the_stored_result_after_the_queue_changed() {
    let h = queue_home();
    let ids = submit_all(&h, &[("a", "medium"), ("b", "medium"), ("c", "medium")]);
    let [a, b, c] = &ids[..] else { unreachable!() };
    let op = new_uuid();

    let first = move_job(&h, c, &["--front", "--operation-id", &op]);
    assert_eq!(first["position"], 1);
    move_job(&h, b, &["--front"]);
    let after_other_move = h.queue();
    assert_eq!(
        after_other_move,
        expected(&[(b, "medium"), (c, "medium"), (a, "medium")])
    );

    let retry = move_job(&h, c, &["--front", "--operation-id", &op]);
    assert_eq!(retry, first, "the stored result, unchanged");
    assert_eq!(h.queue(), after_other_move, "the retry does not move again");

    let cancel_op = new_uuid();
    let cancelled = h.json(&["resource", "job", "cancel", a, "--operation-id", &cancel_op]);
    assert_eq!(cancelled["result"], "cancelled");
    let again = h.json(&["resource", "job", "cancel", a, "--operation-id", &cancel_op]);
    assert_eq!(again, cancelled, "a cancel retry answers the stored result");

    // Even once the moved job is terminal, the retry answers what the move did.
    h.json(&["resource", "job", "cancel", c]);
    let late = move_job(&h, c, &["--front", "--operation-id", &op]);
    assert_eq!(late, first, "a late retry still answers the stored result");
}

#[test]
fn operation_id_reused_with_other_arguments_is_operation_conflict() {
    let h = queue_home();
    let ids = submit_all(&h, &[("a", "medium"), ("b", "medium"), ("c", "medium")]);
    let [a, b, c] = &ids[..] else { unreachable!() };
    let op = new_uuid();
    move_job(&h, c, &["--front", "--operation-id", &op]);
    let before = jobs_json(&h);

    for args in [
        vec![
            "resource",
            "job",
            "move",
            c,
            "--back",
            "--operation-id",
            &op,
        ],
        vec![
            "resource",
            "job",
            "move",
            b,
            "--front",
            "--operation-id",
            &op,
        ],
        vec![
            "resource",
            "job",
            "move",
            c,
            "--priority",
            "high",
            "--front",
            "--operation-id",
            &op,
        ],
        vec!["resource", "job", "cancel", c, "--operation-id", &op],
    ] {
        let err = h.json_err(&args, 5);
        assert_eq!(err["code"], "operation_conflict", "{args:?}: {err}");
    }
    assert_eq!(
        jobs_json(&h),
        before,
        "conflicting operations change nothing"
    );

    let cancel_op = new_uuid();
    h.json(&["resource", "job", "cancel", a, "--operation-id", &cancel_op]);
    let err = h.json_err(
        &["resource", "job", "cancel", b, "--operation-id", &cancel_op],
        5,
    );
    assert_eq!(err["code"], "operation_conflict", "{err}");
    assert_eq!(
        h.json(&["resource", "job", "show", b])["state"]["state"],
        "queued"
    );
}

#[test]
fn refused_move_stores_nothing_under_its_operation_id() {
    let h = queue_home();
    let ids = submit_all(&h, &[("a", "medium"), ("b", "medium")]);
    let [a, b] = &ids[..] else { unreachable!() };
    let op = new_uuid();
    let err = move_refused(&h, b, &["--before", b, "--operation-id", &op]);
    assert_eq!(err["input"]["reason"], "self_target");
    // The same id now carries a valid request: nothing was stored by the refusal.
    let moved = move_job(&h, b, &["--before", a, "--operation-id", &op]);
    assert_eq!(moved["position"], 1);
    assert_eq!(h.queue(), expected(&[(b, "medium"), (a, "medium")]));
}
