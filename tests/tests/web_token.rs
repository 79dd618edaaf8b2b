//! The web listener's token (SPEC sections 11 and 12): with `[web] token`, a TCP write
//! without `Authorization: Bearer <token>` is refused with 401 `permission` and changes
//! nothing; reads stay open unless `token_reads = true`; the dashboard page itself is always
//! served; the Unix socket never needs the token; a request a Fleet peer forwards may carry
//! the Fleet token instead; the token shows in no answer, log or `config validate`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::http;
use crate::common::{new_uuid, TestHome};
use http::Answer;
use std::time::Duration;

const WEB_TOKEN: &str = "web-token-0123456789-abcdefghij-KLMNOP";
const FLEET_TOKEN: &str = "fleet-token-0123456789-abcdefghij-qrst";
const ANSWER: Duration = Duration::from_secs(30);

/// A daemon with no resources (jobs stay queued) and a web listener, with `config`.
fn daemon(config: &str) -> (TestHome, String) {
    let mut h = TestHome::without_resources();
    let port = http::free_port();
    let addr = format!("127.0.0.1:{port}");
    h.use_config(&format!("[web]\nlisten = \"{addr}\"\n{config}"));
    h.start_daemon();
    (h, addr)
}

/// One request on the TCP listener, with `headers` (each `Name: value`) added.
fn send(addr: &str, method: &str, path: &str, headers: &[String], body: Option<&str>) -> Answer {
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or(""));
    http::exchange(&mut http::tcp(addr), request.as_bytes(), ANSWER)
}

fn bearer(token: &str) -> Vec<String> {
    vec![format!("Authorization: Bearer {token}")]
}

fn cancel(addr: &str, job: &str, headers: &[String]) -> Answer {
    let body = format!(r#"{{"operation_id":"{}"}}"#, new_uuid());
    send(
        addr,
        "POST",
        &format!("/v1/jobs/{job}/cancel"),
        headers,
        Some(&body),
    )
}

fn state_of(h: &TestHome, job: &str) -> String {
    h.json(&["resource", "job", "show", job])["state"]["state"]
        .as_str()
        .unwrap()
        .to_string()
}

fn refused_for_the_token(answer: &Answer) {
    assert_eq!(answer.status, 401, "{answer:?}");
    let error = answer.error();
    assert_eq!(error["code"], "permission", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("web token"),
        "{error}"
    );
    let text = String::from_utf8_lossy(&answer.body);
    assert!(
        !text.contains(WEB_TOKEN),
        "a refusal never shows the token: {text}"
    );
}

#[test]
fn writes_need_the_web_token_reads_stay_open_and_the_socket_never_needs_it() {
    let (h, addr) = daemon(&format!("token = \"{WEB_TOKEN}\"\n"));
    let job = h.submit(&h.spec("guarded"));

    // A write without the token, or with another one, is refused and changes nothing.
    refused_for_the_token(&cancel(&addr, &job, &[]));
    refused_for_the_token(&cancel(
        &addr,
        &job,
        &bearer("not-the-token-not-the-token-xx"),
    ));
    refused_for_the_token(&cancel(
        &addr,
        &job,
        &[format!("Authorization: {WEB_TOKEN}")],
    ));
    h.settle();
    assert_eq!(state_of(&h, &job), "queued");

    // Reads need nothing; the page says that writes need the token, so it asks for it.
    let jobs = send(&addr, "GET", "/v1/jobs", &[], None);
    assert_eq!(jobs.status, 200, "{jobs:?}");
    let page = send(&addr, "GET", "/", &[], None);
    assert_eq!(page.status, 200, "{page:?}");
    let html = String::from_utf8_lossy(&page.body);
    assert!(
        html.contains(r#"<meta name="homebased-token" content="writes">"#),
        "{html}"
    );
    assert!(
        !html.contains(WEB_TOKEN),
        "the page never carries the token"
    );

    // With the token the write is done.
    let done = cancel(&addr, &job, &bearer(WEB_TOKEN));
    assert_eq!(done.status, 200, "{done:?}");
    assert_eq!(state_of(&h, &job), "cancelled");

    // The socket is its owner's: no token there.
    let other = h.submit(&h.spec("on-the-socket"));
    let out = h.json(&["resource", "job", "cancel", &other]);
    assert_eq!(out["result"], "cancelled", "{out}");

    // The token is in no log line and not in `config validate`.
    let log = std::fs::read_to_string(h.daemon_log()).unwrap_or_default();
    assert!(!log.contains(WEB_TOKEN), "daemon.log shows the token");
    let validated = h.cli(&["config", "validate", "--json"]);
    assert_eq!(validated.code(), 0, "{validated:?}");
    assert!(
        !validated.stdout.contains(WEB_TOKEN) && !validated.stderr.contains(WEB_TOKEN),
        "{validated:?}"
    );
}

#[test]
fn with_token_reads_every_tcp_read_needs_it_but_the_page_loads_to_ask_for_it() {
    let (h, addr) = daemon(&format!("token = \"{WEB_TOKEN}\"\ntoken_reads = true\n"));
    for path in [
        "/v1/jobs",
        "/v1/resources",
        "/v1/status",
        "/v1/fleet/identity",
    ] {
        refused_for_the_token(&send(&addr, "GET", path, &[], None));
        let ok = send(&addr, "GET", path, &bearer(WEB_TOKEN), None);
        assert_eq!(ok.status, 200, "{path}: {ok:?}");
    }
    for path in ["/", "/dashboard/app.js", "/dashboard/style.css"] {
        let page = send(&addr, "GET", path, &[], None);
        assert_eq!(page.status, 200, "{path}: {page:?}");
    }
    let html = send(&addr, "GET", "/", &[], None);
    assert!(String::from_utf8_lossy(&html.body).contains(r#"content="reads""#));
    // The socket still reads without it.
    assert!(h.json(&["resource", "jobs"])["jobs"].is_array());
}

#[test]
fn a_request_a_fleet_peer_forwards_may_bring_the_fleet_token_instead() {
    let (h, addr) = daemon(&format!(
        "token = \"{WEB_TOKEN}\"\n[fleet]\nenabled = true\ntoken = \"{FLEET_TOKEN}\"\n"
    ));
    let me = h.json(&["fleet", "machines"])["machines"][0]["machine"]
        .as_str()
        .unwrap()
        .to_string();
    let job = h.submit(&h.spec("forwarded"));
    let path = format!("/v1/jobs/{job}/cancel?machine={me}");
    let body = format!(r#"{{"operation_id":"{}"}}"#, new_uuid());
    let origin = format!("X-Homebased-Origin: {}", new_uuid());

    // The Fleet token opens only what a peer sends: not a plain write from a browser.
    refused_for_the_token(&send(
        &addr,
        "POST",
        &path,
        &bearer(FLEET_TOKEN),
        Some(&body),
    ));
    // A forwarded request without any token is refused.
    let bare = send(
        &addr,
        "POST",
        &path,
        std::slice::from_ref(&origin),
        Some(&body),
    );
    assert_eq!(bare.status, 401, "{bare:?}");
    h.settle();
    assert_eq!(state_of(&h, &job), "queued");

    // Forwarded, with the Fleet token: the peer's request is done as if asked here.
    let mut headers = bearer(FLEET_TOKEN);
    headers.push(origin);
    let done = send(&addr, "POST", &path, &headers, Some(&body));
    assert_eq!(done.status, 200, "{done:?}");
    assert_eq!(state_of(&h, &job), "cancelled");
}

/// A Fleet machine listens beyond loopback; with a Fleet token and no web token, the Fleet
/// token guards every TCP write (SPEC 11): a plain cancel without it changes nothing.
#[test]
fn on_a_fleet_machine_without_a_web_token_the_fleet_token_guards_tcp_writes() {
    let (h, addr) = daemon(&format!(
        "[fleet]\nenabled = true\ntoken = \"{FLEET_TOKEN}\"\n"
    ));
    let job = h.submit(&h.spec("fleet-guarded"));
    for headers in [
        vec![],
        bearer("not-the-token-not-the-token-xx"),
        vec![format!("Authorization: {FLEET_TOKEN}")],
    ] {
        let refused = cancel(&addr, &job, &headers);
        assert_eq!(refused.status, 401, "{refused:?}");
        let error = refused.error();
        assert_eq!(error["code"], "permission", "{error}");
        assert!(
            error["message"].as_str().unwrap().contains("[fleet] token"),
            "the refusal names the token it needs: {error}"
        );
        assert!(!String::from_utf8_lossy(&refused.body).contains(FLEET_TOKEN));
    }
    h.settle();
    assert_eq!(state_of(&h, &job), "queued");
    // Reads stay open, and the page asks for the Fleet token by its name.
    assert_eq!(send(&addr, "GET", "/v1/jobs", &[], None).status, 200);
    let page = send(&addr, "GET", "/", &[], None);
    let html = String::from_utf8_lossy(&page.body);
    assert!(html.contains(r#"content="writes""#), "{html}");
    assert!(html.contains("<code>[fleet] token</code>"), "{html}");
    // The scheme is case-insensitive.
    let done = cancel(
        &addr,
        &job,
        &[format!("Authorization: bearer {FLEET_TOKEN}")],
    );
    assert_eq!(done.status, 200, "{done:?}");
    assert_eq!(state_of(&h, &job), "cancelled");
}

/// A listener that other machines can reach needs a token: without one the daemon does not
/// start, and says which key to set.
#[test]
fn a_listener_beyond_loopback_without_any_token_refuses_to_start() {
    let h = TestHome::without_resources();
    let port = http::free_port();
    let out = h.cli(&[
        "--json",
        "daemon",
        "serve",
        "--web-listen",
        &format!("0.0.0.0:{port}"),
    ]);
    let error = common::error_of(&out, 2, "serve on 0.0.0.0 without a token");
    assert_eq!(error["code"], "config_invalid", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("[web] token"),
        "{error}"
    );
    assert!(!h.socket().exists(), "nothing serves");
}

/// DNS rebinding: a page on a name the attacker controls, pointed at 127.0.0.1, sends that
/// name as `Host`. A loopback listener takes only `localhost` and loopback literals.
#[test]
fn a_loopback_listener_refuses_every_name_but_localhost() {
    let (h, addr) = daemon("");
    let job = h.submit(&h.spec("rebound"));
    let port = addr.rsplit_once(':').unwrap().1;
    for name in [
        "attacker.local",
        "foo.ts.net",
        "intranet",
        "sub.localhost",
        "localhost.",
    ] {
        for host in [name.to_string(), format!("{name}:{port}")] {
            let request = format!("GET /v1/jobs HTTP/1.1\r\nHost: {host}\r\n\r\n");
            let read = http::exchange(&mut http::tcp(&addr), request.as_bytes(), ANSWER);
            assert_eq!(read.status, 403, "{host}: {read:?}");
            let body = format!(r#"{{"operation_id":"{}"}}"#, new_uuid());
            let request = format!(
                "POST /v1/jobs/{job}/cancel HTTP/1.1\r\nHost: {host}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let write = http::exchange(&mut http::tcp(&addr), request.as_bytes(), ANSWER);
            assert_eq!(write.status, 403, "{host}: {write:?}");
            assert_eq!(write.error()["code"], "permission");
        }
    }
    h.settle();
    assert_eq!(state_of(&h, &job), "queued");
    for host in ["localhost", &format!("localhost:{port}"), &addr, "[::1]"] {
        let request = format!("GET /v1/jobs HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let read = http::exchange(&mut http::tcp(&addr), request.as_bytes(), ANSWER);
        assert_eq!(read.status, 200, "{host}: {read:?}");
    }
}

/// The page polls every second; an unchanged answer is not sent again (SPEC section 11's
/// dashboard, docs/ARCHITECTURE.md): `ETag` on every TCP read, `304` to a matching
/// `If-None-Match`, a new tag once the queue changed.
#[test]
fn an_unchanged_read_is_answered_304_to_its_etag_and_a_change_gets_a_new_one() {
    let (h, addr) = daemon("");
    h.submit(&h.spec("listed"));
    let first = send(&addr, "GET", "/v1/jobs", &[], None);
    assert_eq!(first.status, 200, "{first:?}");
    let tag = first.header("etag").expect("a read carries an ETag");
    let again = send(
        &addr,
        "GET",
        "/v1/jobs",
        &[format!("If-None-Match: {tag}")],
        None,
    );
    assert_eq!(again.status, 304, "{again:?}");
    assert!(again.body.is_empty());
    h.submit(&h.spec("another"));
    let changed = send(
        &addr,
        "GET",
        "/v1/jobs",
        &[format!("If-None-Match: {tag}")],
        None,
    );
    assert_eq!(changed.status, 200, "{changed:?}");
    assert_ne!(changed.header("etag").unwrap(), tag);
    let jobs: serde_json::Value = serde_json::from_slice(&changed.body).unwrap();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 2);
}
