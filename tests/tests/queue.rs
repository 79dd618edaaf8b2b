//! The queue as a user sees it, on a home without resources so every job stays queued:
//! submission and its idempotency, serving order and positions, cancel, `job show`, and
//! lookups by id and machine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::common::new_uuid;
use crate::common::queue::{expected, jobs_json, move_job, queue_home, submit_all};
use serde_json::{json, Value};

#[test]
fn submit_answers_the_new_job_at_the_back_of_its_level() {
    let h = queue_home();
    let machine = h.json(&["daemon", "status"])["machine"].clone();
    let first = h.submit_json(&h.spec("first"), None);
    assert!(
        uuid::Uuid::parse_str(first["job"].as_str().unwrap()).is_ok(),
        "{first}"
    );
    assert_eq!(first["machine"], machine, "{first}");
    assert_eq!(first["state"], "queued", "{first}");
    assert_eq!(first["priority"], "medium", "{first}");
    assert_eq!(first["position"], 1, "{first}");
    let second = h.submit_json(&h.spec("second"), None);
    assert_eq!(second["position"], 2, "new jobs join the back: {second}");
    assert_ne!(second["job"], first["job"]);
}

#[test]
fn submit_replay_with_the_same_job_id_returns_the_same_job() {
    let h = queue_home();
    let id = new_uuid();
    let spec = h.spec("replayed");
    let first = h.submit_json(&spec, Some(&id));
    assert_eq!(
        first["job"],
        id.as_str(),
        "the given job id is used: {first}"
    );
    let again = h.submit_json(&spec, Some(&id));
    assert_eq!(again, first, "an identical retry answers the same job");
    let jobs = jobs_json(&h);
    assert_eq!(jobs.as_array().unwrap().len(), 1, "still one job: {jobs}");
    assert_eq!(jobs[0]["id"], id.as_str());

    // The replay answers the job as it is now, not as it was.
    let other = h.submit(&h.spec("other"));
    move_job(&h, &id, &["--back"]);
    let now = h.submit_json(&spec, Some(&id));
    assert_eq!(now["position"], 2, "{now}");
    assert_eq!(h.queue()[0].0, other);
}

#[test]
fn a_retried_submit_returns_its_job_even_after_its_cwd_is_gone() {
    let h = queue_home();
    let id = new_uuid();
    let cwd = h.tmp().join("vanishing");
    std::fs::create_dir(&cwd).unwrap();
    let spec = h.spec("cwd goes away").set("cwd", serde_json::json!(cwd));
    let first = h.submit_json(&spec, Some(&id));
    std::fs::remove_dir(&cwd).unwrap();
    // The reply was lost; the same request again must not fail on the submitter's files.
    let again = h.submit_json(&spec, Some(&id));
    assert_eq!(again, first);
    assert_eq!(jobs_json(&h).as_array().unwrap().len(), 1);
}

#[test]
fn submit_replay_with_an_equivalent_spec_is_the_same_job() {
    let h = queue_home();
    let id = new_uuid();
    let spec = h.spec("canonical");
    let first = h.submit_json(&spec, Some(&id));
    // `workload: X` is `steps: [X]` with the default timeout written out.
    let step = spec.0["workload"].clone();
    let equivalent = spec
        .clone()
        .set("workload", Value::Null)
        .set("steps", json!([step]))
        .set("timeout", json!("1h"));
    let again = h.submit_json(&equivalent, Some(&id));
    assert_eq!(again["job"], first["job"]);
    assert_eq!(h.queue().len(), 1);
}

#[test]
fn same_job_id_with_a_different_spec_is_job_conflict() {
    let h = queue_home();
    let id = new_uuid();
    let spec = h.spec("original");
    h.submit_json(&spec, Some(&id));
    let before = jobs_json(&h);
    for changed in [
        spec.clone().set("name", json!("renamed")),
        spec.clone().priority("high"),
        spec.clone().command(&["/bin/sh", "-c", "sleep 601"]),
    ] {
        let err = h.submit_err(&changed, Some(&id), 5);
        assert_eq!(err["code"], "job_conflict", "{err}");
    }
    assert_eq!(
        jobs_json(&h),
        before,
        "a conflicting submit changes nothing"
    );
    let show = h.json(&["resource", "job", "show", &id]);
    assert_eq!(show["name"], "original");
}

#[test]
fn submit_without_a_job_id_makes_one_and_quiet_prints_only_it() {
    let h = queue_home();
    let file = h.spec_file(&h.spec("quiet"));
    let out = h.cli(&[
        "--quiet",
        "resource",
        "job",
        "submit",
        "--spec",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.code(), 0, "{out:?}");
    let id = out.stdout.trim();
    assert_eq!(out.stdout.lines().count(), 1, "{out:?}");
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{out:?}");
    assert_eq!(h.queue()[0].0, id);
}

#[test]
fn submit_reads_the_spec_from_stdin() {
    let h = queue_home();
    let spec = h.spec("from stdin");
    let out = h.cli_with_stdin(
        &["--json", "resource", "job", "submit", "--spec", "-"],
        Some(spec.0.to_string().as_bytes()),
    );
    assert_eq!(out.code(), 0, "{out:?}");
    let v = common::parse_one(&out.stdout);
    assert_eq!(h.queue()[0].0, v["job"].as_str().unwrap());
}

#[test]
fn jobs_are_served_high_then_medium_then_low_with_dense_positions() {
    let h = queue_home();
    let ids = submit_all(
        &h,
        &[
            ("l1", "low"),
            ("h1", "high"),
            ("m1", "medium"),
            ("h2", "high"),
            ("l2", "low"),
            ("m2", "medium"),
        ],
    );
    let [l1, h1, m1, h2, l2, m2] = &ids[..] else {
        unreachable!()
    };
    assert_eq!(
        h.queue(),
        expected(&[
            (h1, "high"),
            (h2, "high"),
            (m1, "medium"),
            (m2, "medium"),
            (l1, "low"),
            (l2, "low"),
        ])
    );
    let jobs = jobs_json(&h);
    let names: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["h1", "h2", "m1", "m2", "l1", "l2"]);
    for j in jobs.as_array().unwrap() {
        assert_eq!(
            j["state"],
            json!({"state": "queued", "resume": false}),
            "{j}"
        );
        assert_eq!(j["target"], "any", "{j}");
        assert_eq!(j["step"], 0, "{j}");
        assert_eq!(j["steps"], 1, "{j}");
        assert_eq!(j["runs"], 0, "{j}");
        assert!(
            j["created_at"].is_string() && j["updated_at"].is_string(),
            "{j}"
        );
    }
}

#[test]
fn cancel_of_a_queued_job_records_job_cancelled_with_null_run_fields() {
    let h = queue_home();
    let spec = h.spec("to cancel");
    let job = h.submit(&spec);
    let status = h.json(&["daemon", "status"]);
    let answer = h.json(&["resource", "job", "cancel", &job]);
    assert_eq!(answer, json!({"api_version": 1, "result": "cancelled"}));

    let show = h.json(&["resource", "job", "show", &job]);
    assert_eq!(show["id"], job.as_str());
    assert_eq!(show["state"]["state"], "cancelled", "{show}");
    assert_eq!(
        show["position"],
        Value::Null,
        "a terminal job holds no slot: {show}"
    );
    assert_eq!(show["thread"], spec.thread().as_str());
    let events = show["events"].as_array().expect("job show lists events");
    assert_eq!(events.len(), 1, "{show}");
    let e = &events[0];
    assert_eq!(e["event"], "JOB_CANCELLED", "{e}");
    assert_eq!(e["seq"], 1, "{e}");
    assert_eq!(e["job"], job.as_str(), "{e}");
    assert_eq!(e["thread"], spec.thread().as_str(), "{e}");
    assert_eq!(e["name"], "to cancel", "{e}");
    assert_eq!(e["machine"], status["machine"], "{e}");
    assert_eq!(e["api_version"], 1, "{e}");
    assert!(e["at"].is_string(), "{e}");
    for field in ["resource", "task", "run_number", "step"] {
        assert!(
            e.get(field).is_some_and(Value::is_null),
            "{field} is explicitly null without a run: {e}"
        );
    }
    assert!(h.queue().is_empty(), "cancelled jobs leave resource jobs");
}

#[test]
fn second_cancel_answers_already_terminal_with_the_state() {
    let h = queue_home();
    let job = h.submit(&h.spec("twice"));
    h.json(&["resource", "job", "cancel", &job]);
    let again = h.json(&["resource", "job", "cancel", &job]);
    assert_eq!(again["result"], "already_terminal", "{again}");
    assert_eq!(again["state"], "cancelled", "{again}");
    let show = h.json(&["resource", "job", "show", &job]);
    assert_eq!(
        show["events"].as_array().unwrap().len(),
        1,
        "no second event: {show}"
    );
}

#[test]
fn cancel_closes_the_gap_in_the_level() {
    let h = queue_home();
    let ids = submit_all(
        &h,
        &[
            ("a", "medium"),
            ("b", "medium"),
            ("c", "medium"),
            ("h1", "high"),
            ("h2", "high"),
        ],
    );
    let [a, b, c, h1, h2] = &ids[..] else {
        unreachable!()
    };
    h.json(&["resource", "job", "cancel", b]);
    h.json(&["resource", "job", "cancel", h1]);
    assert_eq!(
        h.queue(),
        expected(&[(h2, "high"), (a, "medium"), (c, "medium")])
    );
    let next = h.submit_json(&h.spec("d"), None);
    assert_eq!(
        next["position"], 3,
        "the back is right after the last one: {next}"
    );
}

#[test]
fn job_show_has_the_canonical_spec_and_no_runs_yet() {
    let h = queue_home();
    let spec = h.spec("shown").priority("low");
    let job = h.submit(&spec);
    let show = h.json(&["resource", "job", "show", &job]);
    assert_eq!(show["name"], "shown");
    assert_eq!(show["priority"], "low");
    assert_eq!(show["position"], 1);
    assert_eq!(show["state"], json!({"state": "queued", "resume": false}));
    assert_eq!(show["target"], "any");
    assert_eq!(show["runs"], json!([]), "{show}");
    assert_eq!(show["active_run"], Value::Null, "{show}");
    assert_eq!(show["last_stop_cause"], Value::Null, "{show}");
    assert_eq!(show["events"], json!([]), "{show}");
    let canonical = &show["spec"];
    assert!(
        canonical.get("workload").is_none(),
        "stored as steps: {canonical}"
    );
    assert_eq!(
        canonical["steps"],
        json!([spec.0["workload"]]),
        "{canonical}"
    );
    assert_eq!(
        canonical["timeout"], "1h",
        "defaults written out: {canonical}"
    );
    assert_eq!(canonical["thread"], spec.0["thread"]);
    assert_eq!(canonical["cwd"], spec.0["cwd"]);
}

#[test]
fn job_commands_accept_the_local_machine_and_refuse_others() {
    let h = queue_home();
    let machine = h.json(&["daemon", "status"])["machine"]
        .as_str()
        .unwrap()
        .to_string();
    let ids = submit_all(&h, &[("a", "medium"), ("b", "medium")]);
    let [a, b] = &ids[..] else { unreachable!() };
    let show = h.json(&["resource", "job", "show", a, "--machine", &machine]);
    assert_eq!(show["id"], a.as_str());
    let moved = move_job(&h, b, &["--front", "--machine", &machine]);
    assert_eq!(moved["position"], 1);
    let before = jobs_json(&h);
    let other = new_uuid();
    for m in ["elsewhere", other.as_str()] {
        for args in [
            vec!["resource", "job", "show", a, "--machine", m],
            vec!["resource", "job", "move", a, "--front", "--machine", m],
            vec!["resource", "job", "cancel", a, "--machine", m],
        ] {
            let err = h.json_err(&args, 3);
            assert_eq!(err["code"], "machine_not_found", "{args:?}: {err}");
        }
    }
    assert_eq!(
        jobs_json(&h),
        before,
        "nothing changed on the local machine"
    );
    let cancelled = h.json(&["resource", "job", "cancel", a, "--machine", &machine]);
    assert_eq!(cancelled["result"], "cancelled");
}

#[test]
fn unknown_job_is_job_not_found() {
    let h = queue_home();
    h.submit(&h.spec("exists"));
    let unknown = new_uuid();
    for args in [
        vec!["resource", "job", "show", &unknown],
        vec!["resource", "job", "cancel", &unknown],
        vec!["resource", "job", "move", &unknown, "--front"],
    ] {
        let err = h.json_err(&args, 3);
        assert_eq!(err["code"], "job_not_found", "{args:?}: {err}");
    }
}

#[test]
fn job_ids_that_are_not_full_uuids_are_invalid_queue_input() {
    let h = queue_home();
    let job = h.submit(&h.spec("real"));
    let prefix = &job[..8];
    let before = jobs_json(&h);
    for bad in ["abc", prefix, "gpu0"] {
        for args in [
            vec!["resource", "job", "show", bad],
            vec!["resource", "job", "cancel", bad],
            vec!["resource", "job", "move", bad, "--front"],
            vec!["resource", "job", "move", &job, "--before", bad],
            vec!["resource", "job", "cancel", &job, "--operation-id", bad],
        ] {
            let err = h.json_err(&args, 2);
            assert_eq!(err["code"], "invalid_queue_input", "{args:?}: {err}");
        }
    }
    let err = h.json_err(
        &["resource", "job", "move", &job, "--priority", "urgent"],
        2,
    );
    assert_eq!(err["code"], "invalid_queue_input", "{err}");
    assert_eq!(jobs_json(&h), before, "nothing changed");
}

#[test]
fn human_jobs_table_has_the_documented_columns() {
    let h = queue_home();
    let job = h.submit(&h.spec("train resnet").priority("high"));
    h.settle();
    let out = h.cli(&["resource", "jobs"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let mut lines = out.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["JOB", "PRIORITY", "POSITION", "STATE", "TARGET", "/", "NAME", "REASON"],
        "{}",
        out.stdout
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        row,
        [
            job.as_str(),
            "high",
            "1",
            "queued",
            "any",
            "/",
            "train",
            "resnet",
            "no",
            "resource",
            "it",
            "may",
            "use"
        ],
        "{}",
        out.stdout
    );
    assert!(lines.next().is_none(), "{}", out.stdout);
}
