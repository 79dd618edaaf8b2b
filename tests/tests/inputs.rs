//! Hostile and broken input: private files whatever modes were there before, one body limit
//! shared by the CLI and the daemon, the JSON envelope for every HTTP error, bounded waits for
//! stalled requests, strict JSON and UUIDs, a locked database, another user on the socket and
//! a reader that closes the CLI's stdout.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::http;
use crate::common::queue::queue_home;
use crate::common::{new_uuid, run_bounded, TestHome};
use homebased_shared::spec::MAX_SPEC_BYTES;
use homebased_shared::wire::MAX_BODY_BYTES;
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a well-formed request may take to be answered in these tests.
const ANSWER: Duration = Duration::from_secs(15);

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn submit_file(h: &TestHome, path: &Path) -> common::Output {
    h.cli(&[
        "--json",
        "resource",
        "job",
        "submit",
        "--spec",
        path.to_str().unwrap(),
    ])
}

fn write_bytes(h: &TestHome, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = h.tmp().join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A request on the socket, answered within [`ANSWER`].
fn on_socket(h: &TestHome, request: &[u8]) -> http::Answer {
    http::exchange(&mut http::unix(&h.socket()), request, ANSWER)
}

fn cancel_path() -> String {
    format!("/v1/jobs/{}/cancel", new_uuid())
}

// ---- private files -------------------------------------------------------------------------

#[test]
fn a_loose_existing_home_is_made_private_with_its_database_and_log() {
    let mut h = TestHome::without_resources();
    std::fs::create_dir(h.home()).unwrap();
    std::fs::set_permissions(h.home(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(h.daemon_log(), b"from before\n").unwrap();
    std::fs::set_permissions(h.daemon_log(), std::fs::Permissions::from_mode(0o644)).unwrap();
    h.start_daemon();
    h.submit(&h.spec("private"));
    assert_eq!(mode(&h.home()), 0o700, "the home");
    for name in [
        "homebased.sqlite",
        "homebased.sqlite-wal",
        "homebased.sqlite-shm",
        "daemon.log",
    ] {
        assert_eq!(mode(&h.home().join(name)), 0o600, "{name}");
    }
}

// ---- one body limit ------------------------------------------------------------------------

#[test]
fn a_spec_just_under_its_limit_is_accepted_by_cli_and_daemon_alike() {
    let h = queue_home();
    let spec = h.spec("big").command(&["/bin/echo", "x"]);
    let base = spec.0.to_string().len();
    let arg = "a".repeat(MAX_SPEC_BYTES - base - 64);
    let spec = spec.command(&["/bin/echo", &arg]);
    let text = spec.0.to_string();
    assert!(text.len() < MAX_SPEC_BYTES && text.len() > MAX_SPEC_BYTES - 128);
    let out = submit_file(&h, &h.write_file("big.json", &text));
    assert_eq!(out.code(), 0, "stdout {} stderr {}", out.stdout, out.stderr);
    assert_eq!(h.queue().len(), 1);
}

#[test]
fn a_body_over_the_shared_limit_is_refused_by_the_cli_as_invalid_spec_naming_it() {
    let h = queue_home();
    // Under the spec limit as written, over the body limit once the numbers are re-encoded.
    let mut spec = h.spec("inflated").0;
    let count = (MAX_SPEC_BYTES - 4096) / 4;
    spec["pad"] = Value::Array(vec![]);
    let mut text = spec.to_string();
    let pad: Vec<&str> = std::iter::repeat_n("1e9", count).collect();
    text = text.replacen("\"pad\":[]", &format!("\"pad\":[{}]", pad.join(",")), 1);
    assert!(text.len() < MAX_SPEC_BYTES, "{}", text.len());
    let out = submit_file(&h, &h.write_file("inflated.json", &text));
    let err = common::error_of(&out, 2, "submit inflated");
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains(&MAX_BODY_BYTES.to_string()),
        "{err}"
    );
    assert_eq!(err["input"]["limit_bytes"], MAX_BODY_BYTES);
    assert!(h.queue().is_empty());
}

#[test]
fn a_declared_body_over_the_limit_is_refused_at_once_in_the_envelope() {
    let h = queue_home();
    for (path, code) in [
        ("/v1/jobs".to_string(), "invalid_spec"),
        (cancel_path(), "usage"),
    ] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Content-Length: 999999999999999\r\n\r\n{{"
        );
        let started = Instant::now();
        let answer = on_socket(&h, request.as_bytes());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "answered at once"
        );
        assert_eq!(answer.status, 413, "{answer:?}");
        let err = answer.error();
        assert_eq!(err["code"], code, "{path}: {err}");
        assert_eq!(err["input"]["limit_bytes"], MAX_BODY_BYTES, "{err}");
    }
    // A body that really is too long, without a declared length, is refused as it grows.
    let mut conn = http::unix(&h.socket());
    let head = "POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    conn.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b' '; 256 * 1024];
    for _ in 0..(MAX_BODY_BYTES / chunk.len() + 2) {
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(&chunk);
        framed.extend_from_slice(b"\r\n");
        if conn.write_all(&framed).is_err() {
            break;
        }
    }
    let answer = http::read_answer(&mut conn, ANSWER).expect("an answer");
    assert_eq!(answer.status, 413, "{answer:?}");
    assert_eq!(answer.error()["code"], "invalid_spec");
    assert!(h.queue().is_empty());
}

// ---- the envelope for every error ----------------------------------------------------------

#[test]
fn every_http_error_is_the_json_envelope_with_its_code_and_status() {
    let h = queue_home();
    let id = new_uuid();
    let op = new_uuid();
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "chunked garbage",
            format!(
                "POST {} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                 Transfer-Encoding: chunked\r\n\r\nzz-not-hex\r\n\r\n",
                cancel_path()
            )
            .into_bytes(),
            400,
            "usage",
        ),
        (
            "JSON syntax",
            http::post(
                &cancel_path(),
                "localhost",
                "application/json",
                b"{\"operation_id\":",
            ),
            400,
            "usage",
        ),
        (
            "no content type",
            format!(
                "POST {} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{{}}",
                cancel_path()
            )
            .into_bytes(),
            400,
            "usage",
        ),
        (
            "unknown route",
            b"GET /v2/nothing HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
            404,
            "usage",
        ),
        (
            "wrong method",
            b"DELETE /v1/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
            405,
            "usage",
        ),
        (
            "path not UTF-8",
            b"GET /v1/jobs/%FF%FE HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
            400,
            "usage",
        ),
        (
            "bad query",
            b"GET /v1/status?bogus=1 HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
            400,
            "usage",
        ),
        (
            "duplicate key in a body",
            http::post(
                &format!("/v1/jobs/{id}/cancel"),
                "localhost",
                "application/json",
                format!(r#"{{"operation_id":"{op}","operation_id":"{op}"}}"#).as_bytes(),
            ),
            400,
            "usage",
        ),
        (
            "32-hex operation id",
            http::post(
                &format!("/v1/jobs/{id}/cancel"),
                "localhost",
                "application/json",
                format!(r#"{{"operation_id":"{}"}}"#, op.replace('-', "")).as_bytes(),
            ),
            400,
            "usage",
        ),
        (
            "32-hex job id in the path",
            http::post(
                &format!("/v1/jobs/{}/cancel", id.replace('-', "")),
                "localhost",
                "application/json",
                format!(r#"{{"operation_id":"{op}"}}"#).as_bytes(),
            ),
            400,
            "invalid_queue_input",
        ),
    ];
    for (what, request, status, code) in cases {
        let answer = on_socket(&h, &request);
        assert_eq!(answer.status, status, "{what}: {answer:?}");
        assert_eq!(answer.error()["code"], code, "{what}: {answer:?}");
    }
}

#[test]
fn a_submit_body_with_a_bad_spec_encoding_is_invalid_spec_with_its_pointer() {
    let h = queue_home();
    let spec = h.spec("raw").0.to_string();
    let submitter = json!({"path": null, "home": null, "cwd": h.workdir(), "parent_task": null});
    let body = |spec: &str| {
        format!(
            r#"{{"job":"{}","spec":{spec},"submitter":{submitter},"allow_other_thread":false}}"#,
            new_uuid()
        )
        .into_bytes()
    };
    // Sanity: the body as built is accepted.
    let ok = on_socket(
        &h,
        &http::post("/v1/jobs", "localhost", "application/json", &body(&spec)),
    );
    assert_eq!(ok.status, 200, "{ok:?}");

    let duplicated = spec.replacen("{", r#"{"name":"first","#, 1);
    let answer = on_socket(
        &h,
        &http::post(
            "/v1/jobs",
            "localhost",
            "application/json",
            &body(&duplicated),
        ),
    );
    assert_eq!(answer.status, 400, "{answer:?}");
    let err = answer.error();
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/name", "{err}");

    let mut bad_utf8 = body(&spec.replacen("\"raw\"", "\"r\u{1}w\"", 1));
    let at = bad_utf8.iter().position(|b| *b == 1).unwrap();
    bad_utf8[at] = 0xff;
    let answer = on_socket(
        &h,
        &http::post("/v1/jobs", "localhost", "application/json", &bad_utf8),
    );
    assert_eq!(answer.status, 400, "{answer:?}");
    assert_eq!(answer.error()["code"], "invalid_spec", "{answer:?}");
    assert_eq!(h.queue().len(), 1, "only the sane submit was stored");
}

// ---- stalled requests ----------------------------------------------------------------------

#[test]
fn stalled_headers_and_bodies_are_cut_off_within_bounds() {
    let mut h = TestHome::without_resources();
    let port = http::free_port();
    h.set_env("HOMEBASED_WEB_LISTEN", format!("127.0.0.1:{port}"));
    h.start_daemon();
    let addr = format!("127.0.0.1:{port}");
    let socket = h.socket();
    let partial_body = format!(
        "POST {} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"operation",
        cancel_path()
    );
    let huge_chunk = format!(
        "POST {} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\nfffffff\r\nabc",
        cancel_path()
    );
    let tcp_body = partial_body.replace("Host: localhost", &format!("Host: {addr}"));
    let bound = Duration::from_secs(50);
    let mut checks = Vec::new();
    {
        let socket = socket.clone();
        checks.push(std::thread::spawn(move || {
            let mut conn = http::unix(&socket);
            conn.write_all(b"GET /v1/status HTTP/1.1\r\nHost: loc")
                .unwrap();
            let (closed, _) = http::wait_closed(&mut conn, bound);
            let took = closed.expect("partial headers are dropped");
            assert!(
                took < Duration::from_secs(25),
                "headers cut off after {took:?}"
            );
        }));
    }
    // Silent from the start, or idle after one complete request on a kept-alive connection.
    for first in [
        &b""[..],
        b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n\r\n",
    ] {
        let socket = socket.clone();
        checks.push(std::thread::spawn(move || {
            let mut conn = http::unix(&socket);
            if !first.is_empty() {
                let answer = http::exchange(&mut conn, first, ANSWER);
                assert_eq!(answer.status, 200, "{answer:?}");
            }
            let (closed, _) = http::wait_closed(&mut conn, bound);
            let took = closed.expect("an idle connection is dropped");
            assert!(
                took < Duration::from_secs(25),
                "idle cut off after {took:?}"
            );
        }));
    }
    for request in [partial_body, huge_chunk] {
        let socket = socket.clone();
        checks.push(std::thread::spawn(move || {
            let mut conn = http::unix(&socket);
            conn.write_all(request.as_bytes()).unwrap();
            let answer = http::read_answer(&mut conn, bound).expect("a stalled body is answered");
            assert_eq!(answer.status, 408, "{answer:?}");
            assert_eq!(answer.error()["code"], "usage");
            let (closed, _) = http::wait_closed(&mut conn, Duration::from_secs(10));
            assert!(closed.is_some(), "and the connection closed");
        }));
    }
    checks.push(std::thread::spawn(move || {
        let mut conn = http::tcp(&addr);
        conn.write_all(tcp_body.as_bytes()).unwrap();
        let answer = http::read_answer(&mut conn, bound).expect("a stalled TCP body is answered");
        assert_eq!(answer.status, 408, "{answer:?}");
        assert_eq!(answer.error()["code"], "usage");
    }));
    for check in checks {
        check.join().unwrap();
    }
    // The daemon still answers.
    assert!(h.socket_answers());
}

// ---- the web listener's guards ---------------------------------------------------------------

#[test]
fn web_guards_refuse_a_foreign_host_and_a_near_json_type_as_permission() {
    let mut h = TestHome::without_resources();
    let port = http::free_port();
    h.set_env("HOMEBASED_WEB_LISTEN", format!("127.0.0.1:{port}"));
    h.start_daemon();
    let addr = format!("127.0.0.1:{port}");
    let on_tcp = |request: &[u8]| http::exchange(&mut http::tcp(&addr), request, ANSWER);
    let answer = on_tcp(b"GET /v1/status HTTP/1.1\r\nHost: evil.com\r\n\r\n");
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.error()["code"], "permission");
    let body = format!(r#"{{"operation_id":"{}"}}"#, new_uuid());
    let answer = on_tcp(&http::post(
        &cancel_path(),
        &addr,
        "application/jsonx",
        body.as_bytes(),
    ));
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.error()["code"], "permission");
    // The real type, with a parameter, passes the guard (the job is unknown).
    let answer = on_tcp(&http::post(
        &cancel_path(),
        &addr,
        "application/json; charset=utf-8",
        body.as_bytes(),
    ));
    assert_eq!(answer.status, 404, "{answer:?}");
    assert_eq!(answer.error()["code"], "job_not_found");
    let answer = on_tcp(
        format!(
            "POST /v1/release HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: 999999999999999\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(answer.status, 413, "{answer:?}");
    assert_eq!(answer.error()["code"], "usage");
}

// ---- strict specs and ids from the CLI -----------------------------------------------------

#[test]
fn spec_files_that_are_not_utf8_or_repeat_a_key_are_invalid_spec() {
    let h = queue_home();
    let text = h.spec("bytes").0.to_string();
    let mut bytes = text.replacen("\"bytes\"", "\"b\u{1}tes\"", 1).into_bytes();
    let at = bytes.iter().position(|b| *b == 1).unwrap();
    bytes[at] = 0xc3;
    let out = submit_file(&h, &write_bytes(&h, "latin1.json", &bytes));
    let err = common::error_of(&out, 2, "submit non-UTF-8");
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert!(err["message"].as_str().unwrap().contains("UTF-8"), "{err}");

    let out = h.cli_with_stdin(
        &["--json", "resource", "job", "submit", "--spec", "-"],
        Some(&bytes),
    );
    assert_eq!(common::error_of(&out, 2, "stdin")["code"], "invalid_spec");

    let repeated = text.replacen("{", r#"{"priority":"high","#, 1);
    let out = submit_file(&h, &h.write_file("repeated.json", &repeated));
    let err = common::error_of(&out, 2, "submit a repeated key");
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/priority", "{err}");
    assert!(h.queue().is_empty());
}

#[test]
fn a_timeout_over_thirty_days_is_invalid_spec() {
    let h = queue_home();
    let err = h.submit_err(&h.spec("long").set("timeout", json!("31days")), None, 2);
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/timeout");
    assert!(
        err["message"].as_str().unwrap().contains("30 days"),
        "{err}"
    );
    h.submit(&h.spec("month").set("timeout", json!("30days")));
}

#[test]
fn uuids_without_dashes_are_refused_wherever_users_give_ids() {
    let h = queue_home();
    let simple = new_uuid().replace('-', "");
    let err = h.json_err(&["resource", "job", "show", &simple], 2);
    assert_eq!(err["code"], "invalid_queue_input", "{err}");
    let err = h.submit_err(&h.spec("simple id"), Some(&simple), 2);
    assert_eq!(err["code"], "invalid_queue_input", "{err}");
    let err = h.submit_err(
        &h.spec("simple thread").set("thread", json!(simple)),
        None,
        2,
    );
    assert_eq!(err["code"], "invalid_spec", "{err}");
    assert_eq!(err["input"]["pointer"], "/thread");
    assert!(h.queue().is_empty());
}

// ---- a locked database -----------------------------------------------------------------------

#[test]
fn a_database_locked_by_another_process_refuses_a_submit_retryably_and_changes_nothing() {
    let h = queue_home();
    h.submit(&h.spec("before"));
    let before = h.queue();
    let spec = h.spec_file(&h.spec("during"));
    let holder = rusqlite::Connection::open(h.database()).unwrap();
    holder.busy_timeout(Duration::from_secs(10)).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let started = Instant::now();
    let out = submit_file(&h, &spec);
    let took = started.elapsed();
    let err = common::error_of(&out, 1, "submit while locked");
    assert_eq!(err["code"], "storage_unavailable", "{err}");
    assert_eq!(err["retryable"], true);
    assert!(
        took < Duration::from_secs(20),
        "answered within a bound: {took:?}"
    );
    // Readers keep working meanwhile.
    assert_eq!(h.queue(), before);

    holder.execute_batch("ROLLBACK").unwrap();
    drop(holder);
    assert_eq!(h.queue(), before, "the refused submit changed nothing");
    let out = submit_file(&h, &spec);
    assert_eq!(
        out.code(),
        0,
        "the same submit goes through afterwards: {}",
        out.stderr
    );
    assert_eq!(h.queue().len(), 2);
}

// ---- another user on the socket ----------------------------------------------------------------

/// `homebased --json resource jobs` as `nobody`.
fn as_nobody(h: &TestHome) -> common::Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(common::homebased_bin());
    cmd.env_clear()
        .env("HOME", "/")
        .current_dir("/")
        .arg("--home")
        .arg(h.home())
        .args(["--json", "resource", "jobs"])
        .uid(65534)
        .gid(65534);
    run_bounded(cmd, None)
}

#[test]
fn another_user_is_told_permission_not_a_broken_connection() {
    if !nix::unistd::getuid().is_root() {
        eprintln!("skipped: switching to another user needs root");
        return;
    }
    let h = queue_home();
    // The home is private: the socket cannot even be reached.
    let err = common::error_of(&as_nobody(&h), 4, "as nobody, private home");
    assert_eq!(err["code"], "permission", "{err}");
    // Loosened by hand, the socket is reached, and the daemon answers 403 itself.
    for dir in [h.tmp(), &h.home()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    std::fs::set_permissions(h.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = common::error_of(&as_nobody(&h), 4, "as nobody, loosened socket");
    assert_eq!(err["code"], "permission", "{err}");
    assert!(!err["message"].as_str().unwrap().contains("broke"), "{err}");
}

// ---- a closed stdout -----------------------------------------------------------------------------

#[test]
fn a_reader_that_closes_stdout_ends_the_cli_quietly() {
    let h = TestHome::without_resources();
    for args in [
        &["resource", "schema"][..],
        &["--json", "resource", "schema"],
        &["version"],
    ] {
        let (read, write) = nix::unistd::pipe().unwrap();
        drop(read);
        let mut cmd = h.command();
        cmd.arg("--home")
            .arg(h.home())
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::from(write))
            .stderr(std::process::Stdio::piped());
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    }
}
