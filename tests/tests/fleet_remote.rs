//! Fleet's remote jobs (SPEC section 13): a spec submitted on one machine (the origin) that
//! runs on another (the authority). Real daemons, each with its own home and a TCP listener
//! on its own loopback port: the route stored before the spec is forwarded, the authority's
//! own validation and its `origin`, the saved authority of show, move and cancel, and the
//! events pulled back to the origin's sink through crashes and outages.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::fleet;
use crate::common::http;
use crate::common::jobs::{gated_spec, open_gate, sh_spec, wait_job};
use crate::common::{new_uuid, wait_until, Spec};
use fleet::{Machine, TOKEN};
use serde_json::{json, Value};

/// An origin `alpha` (no resources) and an authority `beta` (one GPU) with the token.
fn pair() -> (Machine, String, Machine, String) {
    let mut b = Machine::with_gpu("beta");
    let b_id = b.start(Some(TOKEN), &[]);
    let mut a = Machine::new("alpha");
    let a_id = a.start(Some(TOKEN), &[b.address()]);
    a.wait_up(&b.address());
    (a, a_id, b, b_id)
}

fn for_beta(spec: Spec) -> Spec {
    spec.set("machine", json!("beta"))
}

fn submit_args(file: &str) -> Vec<&str> {
    vec!["resource", "job", "submit", "--spec", file]
}

#[test]
fn a_remote_submit_runs_on_the_authority_and_its_event_comes_back_to_the_origin() {
    let (mut a, a_id, b, b_id) = pair();
    // The origin CLI's environment must not travel to the authority.
    a.h.set_env("ORIGIN_ONLY_SECRET", "from-alpha");
    let spec = for_beta(sh_spec(
        &a.h,
        "remote",
        "echo secret=${ORIGIN_ONLY_SECRET:-none}",
        &[],
    ));
    let thread = spec.thread();
    let job = new_uuid();
    let submitted = a.h.submit_json(&spec, Some(&job));
    assert_eq!(submitted["machine"], b_id.as_str(), "{submitted}");
    assert_eq!(submitted["job"], job.as_str());

    // The authority stored it with its origin and no environment of the origin's.
    let on_b = b.h.json(&["resource", "job", "show", &job]);
    assert_eq!(on_b["origin"], a_id.as_str(), "{on_b}");
    let human = b.h.cli(&["resource", "job", "show", &job]);
    assert!(
        human.stdout.contains(&format!("from machine {a_id}")),
        "{}",
        human.stdout
    );
    let env = b.h.json(&["resource", "job", "show", &job, "--env"]);
    assert_eq!(env["environment"], Value::Null, "{env}");
    assert!(
        a.h.json(&["resource", "jobs"])["jobs"]
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing queued on the origin"
    );

    // Show without --machine follows the route; the run's log is the authority's.
    let shown = wait_job(&a.h, &job, "succeeded");
    assert_eq!(shown["machine"], b_id.as_str(), "{shown}");
    let task = shown["runs"][0]["task"].as_str().unwrap().to_string();
    let log = a.h.json(&["task", "log", &task, "--machine", "beta"]);
    assert!(
        log["log"].as_str().unwrap().contains("secret=none"),
        "{log}"
    );
    assert_eq!(
        log["machine"],
        b_id.as_str(),
        "the machine that answered: {log}"
    );

    // The event reaches the origin's sink, with its evidence there, and no sink of beta's.
    a.wait_inbox(&thread, &job, &[(1, "JOB_SUCCEEDED")]);
    let evidence = a.h.home().join("jobs").join(&job).join("delivery");
    assert!(
        evidence.join("callback.log").exists(),
        "{}",
        evidence.display()
    );
    b.h.settle();
    assert!(b.inbox(&thread, &job).is_empty(), "beta delivers nothing");
    assert!(!b.h.home().join("jobs").join(&job).join("delivery").exists());

    // A retry with the same job UUID and spec answers the stored result; another spec under
    // that UUID is a conflict, and changes nothing on either machine.
    assert_eq!(a.h.submit_json(&spec, Some(&job)), submitted);
    let other = for_beta(sh_spec(&a.h, "other", "true", &[]));
    let err = a.h.submit_err(&other, Some(&job), 5);
    assert_eq!(err["code"], "job_conflict", "{err}");
    assert_eq!(
        b.h.json(&["resource", "job", "show", &job])["name"],
        "remote"
    );
}

#[test]
fn a_remote_jobs_checkpoints_live_on_the_authority_and_its_callback_evidence_on_the_origin() {
    let (a, _a_id, b, _b_id) = pair();
    let steps = json!([
        {"type": "task", "command": ["/bin/sh", "-c",
            "echo weights-of-$HOMEBASED_TASK_ID > \"$HOMEBASED_JOB_DIR/checkpoint\""]},
        {"type": "task", "command": ["/bin/sh", "-c",
            "echo \"resumed from $(cat \"$HOMEBASED_JOB_DIR/checkpoint\")\""]},
    ]);
    let spec = for_beta(
        a.h.spec("two steps")
            .set("workload", Value::Null)
            .set("steps", steps),
    );
    let thread = spec.thread();
    let job = a.h.submit(&spec);
    let done = wait_job(&a.h, &job, "succeeded");
    let runs = done["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "one run per step on the authority: {done}");
    let first = runs[0]["task"].as_str().unwrap();
    let second = runs[1]["task"].as_str().unwrap();

    // The checkpoint is in the authority's job directory, and the second step read it there.
    let checkpoint = b.h.home().join("jobs").join(&job).join("state/checkpoint");
    assert_eq!(
        std::fs::read_to_string(&checkpoint).unwrap().trim(),
        format!("weights-of-{first}"),
        "{}",
        checkpoint.display()
    );
    let log = a.h.json(&["task", "log", second, "--machine", "beta"]);
    assert!(
        log["log"]
            .as_str()
            .unwrap()
            .contains(&format!("resumed from weights-of-{first}")),
        "{log}"
    );
    // The origin has no run or job state of its own for it, only the callback evidence.
    a.wait_inbox(&thread, &job, &[(1, "JOB_SUCCEEDED")]);
    let origin_job = a.h.home().join("jobs").join(&job);
    assert!(
        !origin_job.join("state").exists(),
        "{}",
        origin_job.display()
    );
    assert!(origin_job.join("delivery/callback.log").exists());
    assert!(!a.h.home().join("tasks").join(first).exists());
    assert!(b.h.home().join("tasks").join(first).is_dir());
}

#[test]
fn the_authority_validates_the_rest_and_its_refusal_is_stored_with_the_route() {
    let (a, _a_id, b, _b_id) = pair();
    // The shape is checked on the origin: nothing is stored or forwarded.
    let bad = for_beta(a.h.spec("bad").priority("urgent"));
    let job = new_uuid();
    let err = a.h.submit_err(&bad, Some(&job), 2);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/priority");
    let err = a.h.json_err(&["resource", "job", "show", &job], 3);
    assert_eq!(err["code"], "job_not_found", "no route: {err}");

    // A cwd the authority does not have is the authority's refusal, stored on the route: the
    // retry answers it again.
    let missing = a.h.tmp().join("only-on-paper");
    let spec = for_beta(a.h.spec("elsewhere").set("cwd", json!(missing)));
    let job = new_uuid();
    let err = a.h.submit_err(&spec, Some(&job), 2);
    assert_eq!(err["code"], "invalid_cwd", "{err}");
    std::fs::create_dir(&missing).unwrap();
    let again = a.h.submit_err(&spec, Some(&job), 2);
    assert_eq!(again, err, "the stored answer");
    assert!(
        b.h.json(&["resource", "jobs"])["jobs"]
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing stored on beta"
    );

    // --machine must agree with the spec's machine; alone it makes the submit remote.
    let spec = for_beta(a.h.spec("flagged"));
    let file = a.h.spec_file(&spec);
    let mut args = submit_args(file.to_str().unwrap());
    args.extend(["--machine", "alpha"]);
    let err = a.h.json_err(&args, 2);
    assert_eq!(err["code"], "usage", "{err}");
    let plain = a.h.spec_file(&a.h.spec("flagged"));
    let mut args = submit_args(plain.to_str().unwrap());
    args.extend(["--machine", "beta"]);
    let answer = a.h.json(&args);
    assert_eq!(
        answer["machine"],
        b.h.json(&["daemon", "status"])["machine"]
    );
}

#[test]
fn a_remote_submit_needs_the_token_on_both_machines() {
    let mut b = Machine::with_gpu("beta");
    b.start(None, &[]);
    let mut a = Machine::new("alpha");
    a.start(None, &[b.address()]);
    a.wait_up(&b.address());
    let spec = for_beta(a.h.spec("untrusted"));
    let job = new_uuid();
    let err = a.h.submit_err(&spec, Some(&job), 4);
    assert_eq!(err["code"], "permission", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("fleet.token"),
        "{err}"
    );
    // The authority refuses it itself too, when asked directly without a token.
    let body = json!({
        "job": job, "origin": new_uuid(), "authority": new_uuid(), "spec": spec.0,
    })
    .to_string();
    let addr = format!("127.0.0.1:{}", b.port);
    let request = format!(
        "POST /v1/fleet/jobs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = http::exchange(
        &mut http::tcp(&addr),
        request.as_bytes(),
        std::time::Duration::from_secs(30),
    );
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.error()["code"], "permission");
    // Nothing changed on either machine.
    assert!(b.h.json(&["resource", "jobs"])["jobs"]
        .as_array()
        .unwrap()
        .is_empty());
    let err = a.h.json_err(&["resource", "job", "show", &job], 3);
    assert_eq!(err["code"], "job_not_found", "{err}");
}

#[test]
fn show_move_and_cancel_follow_the_saved_authority_and_replay_their_operations() {
    let mut b = Machine::new("beta");
    let b_id = b.start(Some(TOKEN), &[]);
    let mut a = Machine::new("alpha");
    a.start(Some(TOKEN), &[]);
    a.h.json(&["fleet", "add", &b.address()]);
    let first = a.h.submit(&for_beta(a.h.spec("first")));
    let spec = for_beta(a.h.spec("second"));
    let thread = spec.thread();
    let second = a.h.submit(&spec);

    let shown = a.h.json(&["resource", "job", "show", &second]);
    assert_eq!(shown["machine"], b_id.as_str(), "{shown}");
    let op = new_uuid();
    let args = [
        "resource",
        "job",
        "move",
        &second,
        "--front",
        "--operation-id",
        &op,
    ];
    let moved = a.h.json(&args);
    assert_eq!(moved["position"], 1, "{moved}");
    assert_eq!(
        moved["machine"],
        b_id.as_str(),
        "the machine that answered: {moved}"
    );
    // Meanwhile the queue changes on beta (asked there, the answer keeps its local shape):
    // the replay still answers the stored result.
    let local = b.h.json(&["resource", "job", "move", &first, "--front"]);
    assert!(local.get("machine").is_none(), "{local}");
    assert_eq!(a.h.json(&args), moved, "the replay across machines");
    let cancel_op = new_uuid();
    let cancel = [
        "resource",
        "job",
        "cancel",
        &second,
        "--operation-id",
        &cancel_op,
    ];
    let cancelled = a.h.json(&cancel);
    assert_eq!(cancelled["result"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["machine"], b_id.as_str(), "{cancelled}");
    assert_eq!(a.h.json(&cancel), cancelled);
    assert_eq!(
        b.h.json(&["resource", "job", "show", &second])["state"]["state"],
        "cancelled"
    );
    a.wait_inbox(&thread, &second, &[(1, "JOB_CANCELLED")]);

    // A route to a machine that was removed: a clear error, nothing changed anywhere.
    a.h.json(&["fleet", "remove", "beta"]);
    for args in [
        vec!["resource", "job", "show", &first],
        vec!["resource", "job", "cancel", &first],
    ] {
        let err = a.h.json_err(&args, 3);
        assert_eq!(err["code"], "machine_not_found", "{err}");
        assert!(
            err["message"].as_str().unwrap().contains("fleet add"),
            "{err}"
        );
    }
    assert_eq!(
        b.h.json(&["resource", "job", "show", &first])["state"]["state"],
        "queued"
    );
}

/// A remote job that ends on the authority `beta` while its origin `alpha` is killed -9
/// (alpha's daemon runs under the test, so it can be killed and started again). Answers the
/// machines, the job's thread and the job, which has succeeded on beta.
fn ended_while_the_origin_was_down(name: &str) -> (Machine, Machine, String, String) {
    let mut b = Machine::with_gpu("beta");
    b.start(Some(TOKEN), &[]);
    let mut a = Machine::new("alpha");
    a.configure(Some(TOKEN), &[b.address()]);
    a.h.spawn_serve();
    a.wait_up(&b.address());
    let gate = a.h.tmp().join("gate");
    let spec = for_beta(gated_spec(&a.h, name, "", &gate, "echo done"));
    let thread = spec.thread();
    let job = a.h.submit(&spec);
    wait_job(&b.h, &job, "active");
    a.h.kill_serve(nix::sys::signal::Signal::SIGKILL);
    open_gate(&gate);
    wait_job(&b.h, &job, "succeeded");
    (a, b, thread, job)
}

#[test]
fn the_origin_killed_while_its_remote_job_runs_gets_the_event_after_its_restart() {
    let (mut a, _b, thread, job) = ended_while_the_origin_was_down("long");
    a.h.spawn_serve();
    a.wait_inbox(&thread, &job, &[(1, "JOB_SUCCEEDED")]);
    a.h.settle();
    assert_eq!(a.inbox(&thread, &job).len(), 1, "delivered once");
}

/// The ids `history prune --dry-run --json` would remove on `m`, and how many it keeps back
/// for undelivered events.
fn prunable(m: &Machine) -> (Vec<String>, u64) {
    let dry =
        m.h.json(&["history", "prune", "--before", "0s", "--dry-run"]);
    let ids = dry["job_ids"]
        .as_array()
        .unwrap_or_else(|| panic!("{dry}"))
        .iter()
        .map(|j| j.as_str().unwrap().to_string())
        .collect();
    (ids, dry["kept_undelivered"].as_u64().unwrap())
}

#[test]
fn a_finished_remote_job_leaves_the_authoritys_history_only_once_its_origin_has_its_events() {
    // The origin is down when the job ends: its event is only on the authority, which must
    // keep the job however old.
    let (mut a, b, thread, job) = ended_while_the_origin_was_down("swept");
    b.h.settle();
    assert_eq!(prunable(&b), (vec![], 1), "kept for its origin");

    // Once the origin has stored the event (its next pull says so), the job may go.
    a.h.spawn_serve();
    a.wait_inbox(&thread, &job, &[(1, "JOB_SUCCEEDED")]);
    wait_until(
        "the authority to learn that its origin has the event",
        || prunable(&b) == (vec![job.clone()], 0),
    );
    let pruned = b.h.json(&["history", "prune", "--before", "0s"]);
    assert_eq!(pruned["jobs"], 1, "{pruned}");
    let gone = b.h.json_err(&["resource", "job", "show", &job], 3);
    assert_eq!(gone["code"], "job_not_found", "{gone}");
    a.h.settle();
    assert_eq!(
        a.inbox(&thread, &job).len(),
        1,
        "the origin keeps its evidence"
    );
}

#[test]
fn an_authority_killed_and_restarted_delivers_its_events_in_order_once_back() {
    let mut b = Machine::with_gpu("beta");
    b.configure(Some(TOKEN), &[]);
    b.h.spawn_serve();
    let mut a = Machine::new("alpha");
    a.start(Some(TOKEN), &[b.address()]);
    a.wait_up(&b.address());
    let gate = a.h.tmp().join("gate");
    let low = for_beta(gated_spec(&a.h, "low", "", &gate, "echo low-done").priority("low"));
    let thread = low.thread();
    let low_job = a.h.submit(&low);
    wait_job(&b.h, &low_job, "active");

    // The authority is killed while the job runs: the origin's requests are
    // machine_unavailable (retryable), its pull waits, nothing is lost.
    b.h.kill_serve(nix::sys::signal::Signal::SIGKILL);
    let err = a.h.json_err(&["resource", "job", "show", &low_job], 1);
    assert_eq!(err["code"], "machine_unavailable", "{err}");
    assert_eq!(err["retryable"], true);
    b.h.spawn_serve();

    // A high job preempts the low one (JOB_PREEMPTED), then the low one restarts and ends.
    let high = for_beta(
        sh_spec(&a.h, "high", "echo high-done", &[])
            .priority("high")
            .set("thread", json!(thread)),
    );
    let high_job = a.h.submit(&high);
    wait_job(&a.h, &high_job, "succeeded");
    open_gate(&gate);
    wait_job(&a.h, &low_job, "succeeded");
    a.wait_inbox(&thread, &high_job, &[(1, "JOB_SUCCEEDED")]);
    a.wait_inbox(
        &thread,
        &low_job,
        &[(1, "JOB_PREEMPTED"), (2, "JOB_SUCCEEDED")],
    );
}

#[test]
fn an_origin_that_crashed_after_storing_the_route_submits_once_on_retry() {
    let mut b = Machine::with_gpu("beta");
    b.start(Some(TOKEN), &[]);
    let mut a = Machine::new("alpha");
    a.configure(Some(TOKEN), &[b.address()]);
    a.h.set_env("FAILPOINTS", "fleet.submit-before-forward=return");
    a.h.spawn_serve();
    a.wait_up(&b.address());
    let spec = for_beta(sh_spec(&a.h, "once", "echo once", &[]));
    let job = new_uuid();
    let err = a.h.submit_err(&spec, Some(&job), 1);
    assert_eq!(
        err["code"], "daemon_unavailable",
        "the origin crashed: {err}"
    );
    let _ = a.h.kill_serve(nix::sys::signal::Signal::SIGKILL);
    b.h.settle();
    assert!(
        b.h.json(&["resource", "jobs"])["jobs"]
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing reached beta"
    );
    a.h.unset_env("FAILPOINTS");
    a.h.spawn_serve();
    let answer = a.h.submit_json(&spec, Some(&job));
    assert_eq!(answer["job"], job.as_str(), "{answer}");
    let done = wait_job(&a.h, &job, "succeeded");
    assert_eq!(
        done["runs"].as_array().unwrap().len(),
        1,
        "ran once: {done}"
    );
    assert_eq!(a.h.submit_json(&spec, Some(&job))["job"], job.as_str());
}

/// A remote job's log lives on its authority; on its origin `resource job log` reads it from
/// there through the saved route (as `job show` does), or through `--machine`, and
/// `--follow` follows it there until the job ends.
#[test]
fn a_remote_jobs_log_is_read_and_followed_from_its_origin() {
    let (a, _a_id, b, _b_id) = pair();
    let gate = a.h.tmp().join("remote-log-gate");
    let spec = for_beta(gated_spec(
        &a.h,
        "remote log",
        "echo 'remote line 1'; echo 'remote line 2'",
        &gate,
        "echo 'after the gate'",
    ));
    let job = a.h.submit(&spec);
    wait_until("the first lines on beta", || {
        let out = b.h.cli(&["resource", "job", "log", &job]);
        out.stdout.contains("remote line 2")
    });
    let mut follower =
        a.h.homebased()
            .args(["resource", "job", "log", &job, "--follow"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    let now = a.h.cli(&["resource", "job", "log", &job]);
    assert_eq!(now.code(), 0, "{now:?}");
    assert!(now.stdout.starts_with("==> task "), "{}", now.stdout);
    assert!(
        now.stdout.contains("remote line 1\nremote line 2"),
        "the run's lines, not only its header: {}",
        now.stdout
    );
    let named =
        a.h.cli(&["resource", "job", "log", &job, "--machine", "beta"]);
    assert_eq!(named.stdout, now.stdout, "{named:?}");
    open_gate(&gate);
    wait_job(&a.h, &job, "succeeded");
    let mut exited = None;
    wait_until("job log --follow to end with the job", || {
        exited = follower.try_wait().unwrap();
        exited.is_some()
    });
    let mut out = String::new();
    std::io::Read::read_to_string(&mut follower.stdout.take().unwrap(), &mut out).unwrap();
    assert!(exited.unwrap().success(), "{out}");
    assert!(
        out.starts_with("==> task ")
            && out.ends_with("remote line 1\nremote line 2\nafter the gate\n"),
        "{out}"
    );
    let done = a.h.json(&["resource", "job", "log", &job, "--tail", "1"]);
    assert_eq!(done["runs"][0]["log"], "after the gate\n", "{done}");
}

/// A person reading the confirmation of a remote submit learns where the job went, named as
/// `fleet machines` names it.
#[test]
fn a_remote_submit_says_in_words_on_which_machine_the_job_went() {
    let (a, _a_id, b, b_id) = pair();
    let spec = for_beta(sh_spec(&a.h, "named", "true", &[]));
    let file = a.h.spec_file(&spec);
    let out = a.h.cli(&submit_args(file.to_str().unwrap()));
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        out.stdout.starts_with("submitted ")
            && out.stdout.contains(&format!(" on beta ({b_id}): ")),
        "{}",
        out.stdout
    );
    let job = out.stdout.split_whitespace().nth(1).unwrap().to_string();
    wait_job(&b.h, &job, "succeeded");
}

/// A peer that is only slow (here stopped with SIGSTOP) takes a forwarded submit after the
/// origin gave up on it. The CLI names the job id it made before the first attempt, so that
/// the user's retry is that same job: it runs once, not twice.
#[test]
fn a_submit_to_a_stalled_peer_names_its_job_id_and_the_retry_runs_it_once() {
    let (a, _a_id, b, b_id) = pair();
    let pid = b.h.json(&["daemon", "status"])["pid"].as_u64().unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    let spec = for_beta(sh_spec(&a.h, "stalled", "echo ran", &[]));
    let file = a.h.spec_file(&spec);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let out = a.h.cli(&[
        "--json",
        "resource",
        "job",
        "submit",
        "--spec",
        file.to_str().unwrap(),
    ]);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let err = common::error_of(&out, 1, "submit to a stopped peer");
    assert_eq!(err["code"], "machine_unavailable", "{err}");
    assert_eq!(err["retryable"], true, "{err}");
    let job = err["input"]["job"]
        .as_str()
        .unwrap_or_else(|| panic!("the refusal names the job id: {err}"))
        .to_string();
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains(&format!("retry with --job-id {job}")),
        "{err}"
    );
    // The woken peer may take the stalled request; the retry is the same job either way.
    let answer = a.h.submit_json(&spec, Some(&job));
    assert_eq!(answer["job"], job.as_str(), "{answer}");
    assert_eq!(answer["machine"], b_id.as_str(), "{answer}");
    let done = wait_job(&b.h, &job, "succeeded");
    assert_eq!(
        done["runs"].as_array().unwrap().len(),
        1,
        "ran once: {done}"
    );
    b.h.settle();
    let runs = std::fs::read_dir(b.h.home().join("tasks")).unwrap().count();
    assert_eq!(runs, 1, "one run on beta, not two");
    assert!(b.h.queue().is_empty(), "nothing else waits on beta");
}

/// A TCP server on a loopback port that answers every request with a body of `size` bytes
/// that are not JSON, until the test ends.
fn huge_peer(size: usize) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(1)));
                let _ = conn.read(&mut buf);
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n");
                let _ = conn.write_all(head.as_bytes());
                let chunk = vec![b'x'; 1 << 20];
                let mut left = size;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if conn.write_all(&chunk[..n]).is_err() {
                        break;
                    }
                    left -= n;
                }
            });
        }
    });
    address
}

#[test]
fn a_peer_answering_a_huge_body_is_cut_off_and_nothing_is_stored() {
    let mut a = Machine::new("alpha");
    a.start(Some(TOKEN), &[]);
    let huge = huge_peer(80 << 20);
    let added = a.h.json(&["fleet", "add", &huge]);
    assert_eq!(added["state"], "down", "{added}");
    assert!(added["machine"].is_null(), "nothing bound: {added}");
    let err = a.h.json_err(&["fleet", "probe", &huge], 1);
    assert_eq!(err["code"], "machine_unavailable", "{err}");
    let err = a.h.json_err(&["resource", "list", "--machine", &huge], 1);
    assert_eq!(err["code"], "machine_unavailable", "{err}");
}

/// A raw request on `m`'s TCP listener with the token.
fn raw(m: &Machine, method: &str, path: &str, body: &str) -> http::Answer {
    let addr = format!("127.0.0.1:{}", m.port);
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    http::exchange(
        &mut http::tcp(&addr),
        request.as_bytes(),
        std::time::Duration::from_secs(30),
    )
}

#[test]
fn the_authority_refuses_a_remote_submit_meant_for_another_machine_and_bad_pulls() {
    let mut b = Machine::with_gpu("beta");
    b.start(Some(TOKEN), &[]);
    let spec = b.h.spec("misrouted");
    let job = new_uuid();
    let body = json!({
        "job": job, "origin": new_uuid(), "authority": new_uuid(), "spec": spec.0,
    })
    .to_string();
    let answer = raw(&b, "POST", "/v1/fleet/jobs", &body);
    assert_eq!(answer.status, 409, "{answer:?}");
    assert_eq!(answer.error()["code"], "machine_identity_mismatch");
    let err = b.h.json_err(&["resource", "job", "show", &job], 3);
    assert_eq!(err["code"], "job_not_found", "nothing stored: {err}");

    for path in [
        "/v1/fleet/events?origin=nobody&after=0".to_string(),
        format!("/v1/fleet/events?origin={}&after=-1", new_uuid()),
        format!("/v1/fleet/events?origin={}&wait=soon", new_uuid()),
    ] {
        let answer = raw(&b, "GET", &path, "");
        assert_eq!(answer.status, 400, "{path}: {answer:?}");
        assert_eq!(answer.error()["code"], "usage", "{path}");
    }
    // An origin with nothing there gets an empty answer once its wait is over.
    let answer = raw(
        &b,
        "GET",
        &format!("/v1/fleet/events?origin={}&after=0&wait=50ms", new_uuid()),
        "",
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    let listed: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(listed["events"], json!([]), "{listed}");
}

#[test]
fn after_names_only_jobs_of_this_machine_and_a_remote_job_is_named_on_its_authority() {
    let (a, _a_id, b, _b_id) = pair();
    let gate = a.h.tmp().join("first-gate");
    let first = for_beta(gated_spec(&a.h, "first", "", &gate, ""));
    let remote = new_uuid();
    a.h.submit_json(&first, Some(&remote));

    // On the origin, the job it sent to beta is not one of its own: refused, nothing stored.
    let here = a.h.spec("after-remote").set("after", json!([remote]));
    let job = new_uuid();
    let err = a.h.submit_err(&here, Some(&job), 2);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/after/0", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("Fleet"),
        "says why: {err}"
    );
    let err = a.h.json_err(&["resource", "job", "show", &job], 3);
    assert_eq!(err["code"], "job_not_found", "nothing stored: {err}");

    // Sent to beta with it, the dependent job waits there for it, then runs after it.
    let there = for_beta(
        a.h.spec("after-on-beta")
            .command(&["/bin/sh", "-c", "true"])
            .set("after", json!([remote])),
    );
    let second = new_uuid();
    a.h.submit_json(&there, Some(&second));
    wait_until(
        "the dependent job to wait for its dependency on beta",
        || b.h.json(&["resource", "job", "show", &second])["waiting"]["reason"] == "dependency",
    );
    open_gate(&gate);
    wait_job(&b.h, &remote, "succeeded");
    wait_job(&b.h, &second, "succeeded");
}
