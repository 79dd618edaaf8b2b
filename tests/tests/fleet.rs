//! Fleet (SPEC section 13): several real daemons on this machine, each with its own home and
//! a TCP listener on its own loopback port, addressing each other: the directory and its
//! probes, the address binding, the token, and reads and writes forwarded by name and UUID.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::fleet;
use crate::common::http;
use crate::common::jobs::{sh_spec, wait_job};
use crate::common::{new_uuid, TestHome};
use fleet::{Machine, TOKEN};
use std::time::Duration;

#[test]
fn the_directory_lists_self_first_probes_peers_and_binds_their_uuid() {
    let mut b = Machine::new("beta");
    let b_id = b.start(None, &[]);
    let mut a = Machine::new("alpha");
    let a_id = a.start(None, &[b.address()]);

    let beta = a.wait_peer(&b.address(), "up");
    assert_eq!(beta["machine"], b_id.as_str(), "{beta}");
    assert_eq!(beta["name"], "beta");
    assert_eq!(beta["source"], "config");
    assert_eq!(beta["protocol"]["min"], 1);
    assert!(beta["last_seen"].is_string(), "{beta}");
    let first = &a.machines()[0];
    assert_eq!(first["machine"], a_id.as_str());
    assert_eq!(first["source"], "self");
    assert_eq!(first["name"], "alpha");

    // The identity, by name and by UUID, and over the peer's own listener.
    for key in ["beta", b_id.as_str(), &b.address()] {
        let identity = a.h.json(&["fleet", "probe", key]);
        assert_eq!(identity["machine"], b_id.as_str(), "{key}: {identity}");
        assert_eq!(identity["name"], "beta");
        assert!(identity["boot"].is_string() && identity["version"].is_string());
    }
    let raw = b.tcp_get("/v1/fleet/identity", &[]);
    assert_eq!(raw.status, 200, "{raw:?}");

    // An added peer: stored, probed at once; added while unreachable it is `down`.
    let added = b.h.json(&["fleet", "add", &a.address()]);
    assert_eq!(added["state"], "up", "{added}");
    assert_eq!(added["machine"], a_id.as_str());
    assert_eq!(added["source"], "added");
    let nowhere = format!("http://127.0.0.1:{}", http::free_port());
    let down = b.h.json(&["fleet", "add", &nowhere]);
    assert_eq!(down["state"], "down", "{down}");
    assert!(down["machine"].is_null());
    let err = b.h.json_err(&["fleet", "probe", &nowhere], 1);
    assert_eq!(err["code"], "machine_unavailable", "{err}");
    assert_eq!(err["retryable"], true);

    // Added peers survive a restart; config peers cannot be removed from the CLI.
    b.h.stop_daemon();
    b.h.start_daemon();
    let listed: Vec<String> = b
        .machines()
        .iter()
        .map(|m| m["address"].as_str().unwrap_or("-").to_string())
        .collect();
    assert!(
        listed.contains(&a.address()) && listed.contains(&nowhere),
        "{listed:?}"
    );
    let removed = b.h.json(&["fleet", "remove", &nowhere]);
    assert_eq!(removed["removed"]["address"], nowhere.as_str());
    let err = b.h.json_err(&["fleet", "remove", &nowhere], 3);
    assert_eq!(err["code"], "machine_not_found", "{err}");
    let err = a.h.json_err(&["fleet", "remove", "beta"], 2);
    assert_eq!(err["code"], "usage", "{err}");

    // Human tables.
    let out = a.h.cli(&["fleet", "machines"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let mut lines = out.stdout.lines();
    assert!(
        lines.next().unwrap().starts_with("MACHINE"),
        "{}",
        out.stdout
    );
    assert!(lines.next().unwrap().contains("alpha"), "{}", out.stdout);
    assert!(out.stdout.contains("beta"), "{}", out.stdout);
}

#[test]
fn bad_peer_addresses_are_refused_and_nothing_is_stored() {
    let mut a = Machine::new("alpha");
    a.start(None, &[]);
    for bad in [
        "http://127.0.0.1:9/v1",
        "http://127.0.0.1:9/?q=1",
        "http://user:pw@127.0.0.1:9",
        "https://127.0.0.1:9",
        "127.0.0.1:9",
    ] {
        let err = a.h.json_err(&["fleet", "add", bad], 2);
        assert_eq!(err["code"], "usage", "{bad}: {err}");
    }
    assert_eq!(a.machines().len(), 1, "only this machine");
    let err =
        a.h.json_err(&["resource", "list", "--machine", "nobody"], 3);
    assert_eq!(err["code"], "machine_not_found", "{err}");
}

#[test]
fn reads_and_writes_are_forwarded_by_name_and_uuid_with_operation_ids() {
    let mut b = Machine::new("beta");
    let b_id = b.start(None, &[]);
    let mut a = Machine::new("alpha");
    let a_id = a.start(None, &[b.address()]);
    a.wait_peer(&b.address(), "up");
    let job = b.h.submit(&b.h.spec("remote"));

    for key in ["beta", b_id.as_str()] {
        let list = a.h.json(&["resource", "list", "--machine", key]);
        assert_eq!(list["machine"], b_id.as_str(), "{key}: {list}");
        let jobs = a.h.json(&["resource", "jobs", "--machine", key]);
        assert_eq!(jobs["machine"], b_id.as_str());
        assert_eq!(jobs["jobs"][0]["id"], job.as_str(), "{jobs}");
        let shown =
            a.h.json(&["resource", "job", "show", &job, "--machine", key]);
        assert_eq!(shown["machine"], b_id.as_str(), "{shown}");
        assert_eq!(shown["id"], job.as_str());
    }
    let local = a.h.json(&["resource", "jobs"]);
    assert_eq!(local["machine"], a_id.as_str());
    assert!(
        local["jobs"].as_array().unwrap().is_empty(),
        "nothing moved here"
    );
    let err = a.h.json_err(&["resource", "job", "show", &job], 3);
    assert_eq!(err["code"], "job_not_found", "without --machine: local");

    // A move and a cancel through alpha, each replayed with its operation id.
    let op = new_uuid();
    let args = [
        "resource",
        "job",
        "move",
        &job,
        "--priority",
        "high",
        "--operation-id",
        &op,
        "--machine",
        "beta",
    ];
    let moved = a.h.json(&args);
    assert_eq!(moved["priority"], "high", "{moved}");
    assert_eq!(
        a.h.json(&args),
        moved,
        "the replay answers the stored result"
    );
    let other = [
        "resource",
        "job",
        "move",
        &job,
        "--priority",
        "low",
        "--operation-id",
        &op,
        "--machine",
        "beta",
    ];
    let err = a.h.json_err(&other, 5);
    assert_eq!(err["code"], "operation_conflict", "{err}");
    let cancel_op = new_uuid();
    let cancel = [
        "resource",
        "job",
        "cancel",
        &job,
        "--operation-id",
        &cancel_op,
        "--machine",
        &b_id,
    ];
    let cancelled = a.h.json(&cancel);
    assert_eq!(cancelled["result"], "cancelled", "{cancelled}");
    assert_eq!(a.h.json(&cancel), cancelled);
    let on_b = b.h.json(&["resource", "job", "show", &job]);
    assert_eq!(on_b["state"]["state"], "cancelled", "{on_b}");

    // Release goes to the peer too (an unknown Attention is the peer's answer).
    let err = a.h.json_err(
        &[
            "resource",
            "release",
            "--attention",
            &new_uuid(),
            "--machine",
            "beta",
        ],
        3,
    );
    assert_eq!(err["code"], "attention_not_found", "{err}");
}

#[test]
fn a_peer_that_is_down_is_machine_unavailable_and_retryable() {
    let mut b = Machine::new("beta");
    let b_id = b.start(None, &[]);
    let mut a = Machine::new("alpha");
    a.start(None, &[b.address()]);
    a.wait_peer(&b.address(), "up");
    b.h.stop_daemon();
    for key in ["beta", b_id.as_str()] {
        let err = a.h.json_err(&["resource", "list", "--machine", key], 1);
        assert_eq!(err["code"], "machine_unavailable", "{key}: {err}");
        assert_eq!(err["retryable"], true);
    }
    let op = new_uuid();
    let err = a.h.json_err(
        &[
            "resource",
            "job",
            "cancel",
            &new_uuid(),
            "--operation-id",
            &op,
            "--machine",
            "beta",
        ],
        1,
    );
    assert_eq!(err["code"], "machine_unavailable", "{err}");
    a.wait_peer(&b.address(), "down");
    // Back up: the probe before use finds it again.
    b.h.start_daemon();
    let list = a.h.json(&["resource", "list", "--machine", "beta"]);
    assert_eq!(list["machine"], b_id.as_str());
}

#[test]
fn an_address_that_starts_answering_as_another_machine_is_refused() {
    let mut b = Machine::new("beta");
    let b_id = b.start(None, &[]);
    let mut a = Machine::new("alpha");
    a.start(None, &[]);
    let added = a.h.json(&["fleet", "add", &b.address()]);
    assert_eq!(added["machine"], b_id.as_str(), "{added}");
    b.h.stop_daemon();

    // Another machine takes over the same address.
    let mut c = Machine::new("gamma");
    c.port = b.port;
    let c_id = c.start(None, &[]);
    let err = a.h.json_err(&["fleet", "probe", &b.address()], 5);
    assert_eq!(err["code"], "machine_identity_mismatch", "{err}");
    let peer = a.wait_peer(&b.address(), "identity_mismatch");
    assert_eq!(
        peer["machine"],
        b_id.as_str(),
        "still bound to the first: {peer}"
    );
    let err = a.h.json_err(&["resource", "list", "--machine", "beta"], 5);
    assert_eq!(
        err["code"], "machine_identity_mismatch",
        "nothing forwarded: {err}"
    );
    let err = a.h.json_err(&["resource", "list", "--machine", &c_id], 3);
    assert_eq!(err["code"], "machine_not_found", "{err}");

    // Remove and add binds the address afresh.
    a.h.json(&["fleet", "remove", &b.address()]);
    let again = a.h.json(&["fleet", "add", &b.address()]);
    assert_eq!(again["machine"], c_id.as_str(), "{again}");
    let list = a.h.json(&["resource", "list", "--machine", "gamma"]);
    assert_eq!(list["machine"], c_id.as_str());
}

#[test]
fn two_peers_with_one_name_are_addressed_by_uuid() {
    let mut b = Machine::new("twin");
    let b_id = b.start(None, &[]);
    let mut c = Machine::new("twin");
    let c_id = c.start(None, &[]);
    let mut a = Machine::new("alpha");
    a.start(None, &[b.address(), c.address()]);
    a.wait_peer(&b.address(), "up");
    a.wait_peer(&c.address(), "up");
    let err = a.h.json_err(&["resource", "list", "--machine", "twin"], 5);
    assert_eq!(err["code"], "duplicate_machine_name", "{err}");
    for id in [&b_id, &c_id] {
        let list = a.h.json(&["resource", "list", "--machine", id]);
        assert_eq!(list["machine"], id.as_str());
    }
}

#[test]
fn the_token_is_required_compared_and_never_shown() {
    let mut b = Machine::new("beta");
    let b_id = b.start(Some(TOKEN), &[]);
    // Without the token, and with a wrong one: 401 permission.
    let bearer_wrong = format!("Bearer {}x", &TOKEN[..TOKEN.len() - 1]);
    for headers in [vec![], vec![("Authorization", bearer_wrong.as_str())]] {
        let answer = b.tcp_get("/v1/fleet/identity", &headers);
        assert_eq!(answer.status, 401, "{answer:?}");
        assert_eq!(answer.error()["code"], "permission");
        assert!(!String::from_utf8_lossy(&answer.body).contains(TOKEN));
    }
    let forwarded = format!("/v1/resources?machine={b_id}");
    let answer = b.tcp_get(&forwarded, &[("X-Homebased-Origin", &new_uuid())]);
    assert_eq!(
        answer.status, 401,
        "a forwarded request needs it too: {answer:?}"
    );
    let bearer = format!("Bearer {TOKEN}");
    let answer = b.tcp_get("/v1/fleet/identity", &[("Authorization", &bearer)]);
    assert_eq!(answer.status, 200, "{answer:?}");

    // A machine without the token is refused; one with it is served.
    let mut a = Machine::new("alpha");
    a.start(None, &[b.address()]);
    let err = a.h.json_err(&["fleet", "probe", &b.address()], 4);
    assert_eq!(err["code"], "permission", "{err}");
    let mut c = Machine::new("gamma");
    c.start(Some(TOKEN), &[b.address()]);
    c.wait_peer(&b.address(), "up");
    let list = c.h.json(&["resource", "list", "--machine", "beta"]);
    assert_eq!(list["machine"], b_id.as_str());

    // Never in config validate, nor in the daemons' logs.
    let validate = c.h.cli(&["--json", "config", "validate"]);
    assert_eq!(validate.code(), 0, "{}", validate.stderr);
    assert!(!validate.stdout.contains(TOKEN), "{}", validate.stdout);
    for m in [&a, &b, &c] {
        let log = std::fs::read_to_string(m.h.daemon_log()).unwrap_or_default();
        assert!(!log.contains(TOKEN), "{} logged the token", m.name);
    }
}

#[test]
fn a_forwarded_request_for_another_machine_is_refused() {
    let mut b = Machine::new("beta");
    b.start(None, &[]);
    let path = format!("/v1/resources?machine={}", new_uuid());
    let answer = b.tcp_get(&path, &[("X-Homebased-Origin", &new_uuid())]);
    assert_eq!(answer.status, 409, "{answer:?}");
    assert_eq!(answer.error()["code"], "machine_identity_mismatch");
}

#[test]
fn fleet_needs_a_tcp_listener_and_a_long_private_token() {
    let mut h = TestHome::without_resources();
    h.use_config("[fleet]\nenabled = true\n");
    let err = h.json_err(&["daemon", "serve"], 2);
    assert_eq!(err["code"], "config_invalid", "{err}");
    h.use_config("[fleet]\ntoken = \"short-and-secret\"\n");
    let out = h.cli(&["--json", "config", "validate"]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(!out.stderr.contains("short-and-secret"), "{}", out.stderr);
    let file = h.write_file("token", &format!("{TOKEN}\n"));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    h.use_config(&format!("[fleet]\ntoken_file = \"{}\"\n", file.display()));
    let out = h.cli(&["--json", "config", "validate"]);
    assert_eq!(out.code(), 2, "loose permissions: {}", out.stderr);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = h.cli(&["--json", "config", "validate"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(!out.stdout.contains(TOKEN), "{}", out.stdout);
}

#[test]
fn a_run_log_is_read_from_the_machine_that_ran_it() {
    let mut b = Machine::with_gpu("beta");
    b.start(None, &[]);
    let mut a = Machine::new("alpha");
    a.start(None, &[b.address()]);
    a.wait_peer(&b.address(), "up");
    let job =
        b.h.submit(&sh_spec(&b.h, "talk", "echo hello-from-beta", &[]));
    let shown = wait_job(&b.h, &job, "succeeded");
    let task = shown["runs"][0]["task"].as_str().unwrap().to_string();
    let log = a.h.json(&["task", "log", &task, "--machine", "beta"]);
    assert_eq!(log["task"], task.as_str(), "{log}");
    assert!(
        log["log"].as_str().unwrap().contains("hello-from-beta"),
        "{log}"
    );
    let err = a.h.json_err(&["task", "log", &task], 3);
    assert_eq!(
        err["code"], "task_not_found",
        "the run directory is beta's: {err}"
    );
}

/// A TCP server on a loopback port that answers every connection with `reply` (or, when
/// `None`, reads and never answers), until the test ends.
fn fake_peer(reply: Option<&'static [u8]>) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
            let _ = conn.read(&mut buf);
            match reply {
                Some(bytes) => {
                    let _ = conn.write_all(bytes);
                }
                None => held.push(conn),
            }
        }
    });
    address
}

#[test]
fn a_peer_answering_garbage_or_nothing_is_unavailable_within_the_bound() {
    let mut a = Machine::new("alpha");
    a.start(None, &[]);
    let garbage = fake_peer(Some(
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot json!",
    ));
    let silent = fake_peer(None);
    let broken = fake_peer(Some(b"SSH-2.0-OpenSSH_9.2\r\n"));
    for address in [&garbage, &silent, &broken] {
        let added = a.h.json(&["fleet", "add", address]);
        assert_eq!(added["state"], "down", "{address}: {added}");
        assert!(added["machine"].is_null(), "nothing bound: {added}");
        let err = a.h.json_err(&["fleet", "probe", address], 1);
        assert_eq!(err["code"], "machine_unavailable", "{address}: {err}");
        assert_eq!(err["retryable"], true);
        // The one thing the person can act on: which address answered that.
        assert!(
            err["message"].as_str().unwrap().contains(address.as_str()),
            "{address}: {err}"
        );
    }
}

/// A peer that holds another token answers, but refuses: `refused`, not `down`, and a
/// request for it is `permission` (set the same token), by name or address alike.
#[test]
fn a_peer_with_another_token_is_refused_and_says_permission() {
    let mut b = Machine::with_gpu("beta");
    b.start(Some(TOKEN), &[]);
    let other = format!("{}-other", &TOKEN[..TOKEN.len() - 6]);
    let mut a = Machine::new("alpha");
    a.start(Some(&other), &[b.address()]);
    let seen = a.wait_peer(&b.address(), "refused");
    assert!(seen["machine"].is_null(), "nothing bound: {seen}");
    let spec = sh_spec(&a.h, "refused", "true", &[]).set("machine", serde_json::json!("beta"));
    let err = a.h.submit_err(&spec, None, 4);
    assert_eq!(err["code"], "permission", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("fleet.token"),
        "{err}"
    );
    let err =
        a.h.json_err(&["resource", "list", "--machine", &b.address()], 4);
    assert_eq!(err["code"], "permission", "{err}");
    assert!(b.h.queue().is_empty(), "nothing reached beta");
}

/// This machine under another of its addresses is not a peer: adding it would shadow this
/// machine's own name and UUID.
#[test]
fn this_machine_under_another_address_cannot_be_added_as_a_peer() {
    let mut a = Machine::new("alpha");
    a.start(Some(TOKEN), &[]);
    let alias = format!("http://localhost:{}", a.port);
    let err = a.h.json_err(&["fleet", "add", &alias], 2);
    assert_eq!(err["code"], "usage", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("this machine"),
        "{err}"
    );
    let machines = a.machines();
    assert_eq!(machines.len(), 1, "only this machine: {machines:?}");
    let list = a.h.json(&["resource", "list", "--machine", "alpha"]);
    assert!(list["resources"].is_array(), "{list}");
}
