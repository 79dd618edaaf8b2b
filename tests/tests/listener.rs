//! The listeners under load and abuse (SPEC section 11: "a slow or half-open client never
//! stops the daemon serving others"): hundreds of idle connections, more idle TCP clients
//! than the listener serves at once, clients that trickle their headers or body and never
//! finish, and a thousand readers at once on each listener; through all of it the socket and
//! the TCP listener keep answering.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::http;
use crate::common::TestHome;
use http::Conn;
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// How long a request may take to be answered here: generous, the machine is shared.
const ANSWER: Duration = Duration::from_secs(30);
/// `homebased::api::limits::MAX_TCP_CONNECTIONS`.
const TCP_SLOTS: usize = 512;

/// A daemon with two lanes and its web listener; answers the listener's address.
fn daemon() -> (TestHome, String) {
    let mut h = TestHome::new(common::Probe::Gpus(2));
    let port = http::free_port();
    let addr = format!("127.0.0.1:{port}");
    h.set_env("HOMEBASED_WEB_LISTEN", &addr);
    h.start_daemon();
    (h, addr)
}

/// This test process opens thousands of connections: its own descriptor limit goes up too.
fn raise_open_files(wanted: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let wanted = wanted.min(hard);
    if soft < wanted {
        setrlimit(Resource::RLIMIT_NOFILE, wanted, hard).unwrap();
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert!(soft >= wanted, "cannot open enough files: limit {soft}");
}

fn get(path: &str, host: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}

fn status_on_socket(h: &TestHome) -> u16 {
    http::exchange(
        &mut http::unix(&h.socket()),
        &get("/v1/status", "localhost"),
        ANSWER,
    )
    .status
}

fn status_on_tcp(addr: &str) -> u16 {
    http::exchange(&mut http::tcp(addr), &get("/v1/status", addr), ANSWER).status
}

/// A connection that sent nothing is still open (not yet dropped by the daemon).
fn still_open(conn: &mut impl Conn) -> bool {
    let (closed, _) = http::wait_closed(conn, Duration::from_millis(1));
    closed.is_none()
}

#[test]
fn hundreds_of_idle_connections_leave_both_listeners_serving() {
    raise_open_files(4096);
    let (h, addr) = daemon();
    let mut idle_tcp: Vec<TcpStream> = (0..300).map(|_| http::tcp(&addr)).collect();
    let mut idle_socket: Vec<UnixStream> = (0..300).map(|_| http::unix(&h.socket())).collect();
    // Idle after a first request, kept alive: the idle limit that drops them is the header
    // bound of the next request.
    let mut kept = http::tcp(&addr);
    assert_eq!(
        http::exchange(&mut kept, &get("/v1/status", &addr), ANSWER).status,
        200
    );
    assert_eq!(status_on_socket(&h), 200);
    assert_eq!(status_on_tcp(&addr), 200);
    let metrics = http::exchange(&mut http::tcp(&addr), &get("/metrics", &addr), ANSWER);
    assert_eq!(metrics.status, 200, "{metrics:?}");
    assert!(still_open(&mut idle_tcp[0]) && still_open(&mut idle_socket[0]));

    // The daemon drops them all within its header bound (10 s), kept-alive one included.
    let bound = Duration::from_secs(40);
    for conn in idle_tcp.iter_mut().take(20) {
        assert!(
            http::wait_closed(conn, bound).0.is_some(),
            "an idle TCP client stays"
        );
    }
    for conn in idle_socket.iter_mut().take(20) {
        assert!(
            http::wait_closed(conn, bound).0.is_some(),
            "an idle socket client stays"
        );
    }
    assert!(
        http::wait_closed(&mut kept, bound).0.is_some(),
        "a kept-alive idle client stays"
    );
    assert_eq!(status_on_socket(&h), 200);
}

#[test]
fn more_idle_tcp_clients_than_slots_never_starve_the_socket_and_tcp_recovers() {
    raise_open_files(4096);
    let (h, addr) = daemon();
    let crowd: Vec<TcpStream> = (0..TCP_SLOTS + 100).map(|_| http::tcp(&addr)).collect();
    // Every TCP slot is taken by a silent client: the socket answers at once all the same.
    let started = Instant::now();
    assert_eq!(status_on_socket(&h), 200);
    let socket_took = started.elapsed();
    // A TCP client beyond the slots waits in the backlog and is served once the silent ones
    // are dropped after the header bound.
    assert_eq!(status_on_tcp(&addr), 200);
    assert!(
        socket_took < Duration::from_secs(5),
        "the socket waited {socket_took:?} behind the TCP crowd"
    );
    drop(crowd);
}

/// Writes `bytes` one at a time, `every` apart, until the daemon closes the connection;
/// answers how long it stayed open and everything it answered.
fn trickle(
    conn: &mut impl Conn,
    bytes: &[u8],
    every: Duration,
    bound: Duration,
) -> (Duration, Vec<u8>) {
    let started = Instant::now();
    let mut answered = Vec::new();
    for b in bytes.iter().cycle() {
        assert!(started.elapsed() < bound, "still open after {bound:?}");
        if conn.write_all(&[*b]).is_err() {
            break;
        }
        let (closed, got) = http::wait_closed(conn, every);
        answered.extend(got);
        if closed.is_some() {
            return (started.elapsed(), answered);
        }
    }
    let (_, got) = http::wait_closed(conn, Duration::from_secs(1));
    answered.extend(got);
    (started.elapsed(), answered)
}

#[test]
fn slowloris_headers_and_bodies_are_closed_after_their_bounds_while_others_are_served() {
    let (h, addr) = daemon();
    let every = Duration::from_millis(500);
    let bound = Duration::from_secs(60);
    // The header bound (10 s) is a deadline for the whole head, not per byte.
    let endless_head = format!("GET /v1/status HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ");
    let head = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut conn = http::tcp(&addr);
            let mut bytes = endless_head.into_bytes();
            bytes.extend(std::iter::repeat_n(b'a', 10_000));
            trickle(&mut conn, &bytes, every, bound)
        })
    };
    let socket = h.socket();
    let socket_head = std::thread::spawn(move || {
        let mut conn = http::unix(&socket);
        let mut bytes = b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nX-Slow: ".to_vec();
        bytes.extend(std::iter::repeat_n(b'a', 10_000));
        trickle(&mut conn, &bytes, every, bound)
    });
    // The body bound (30 s) too: a body of 100 bytes sent one every half second would take
    // 50 s.
    let body = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut conn = http::tcp(&addr);
            let head = format!(
                "POST /v1/release HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
                 Content-Length: 100\r\n\r\n"
            );
            conn.write_all(head.as_bytes()).unwrap();
            trickle(&mut conn, &[b' '; 100], every, bound)
        })
    };
    // Meanwhile both listeners serve everyone else.
    for _ in 0..5 {
        assert_eq!(status_on_socket(&h), 200);
        assert_eq!(status_on_tcp(&addr), 200);
        std::thread::sleep(Duration::from_secs(1));
    }
    let (took, _) = head.join().unwrap();
    assert!(
        took < Duration::from_secs(25),
        "a trickled TCP head stayed {took:?}"
    );
    let (took, _) = socket_head.join().unwrap();
    assert!(
        took < Duration::from_secs(25),
        "a trickled socket head stayed {took:?}"
    );
    let (took, answer) = body.join().unwrap();
    assert!(
        took < Duration::from_secs(45),
        "a trickled body stayed {took:?}"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "a trickled body is answered 408: {answer}"
    );
    assert!(answer.contains("\"code\":\"usage\""), "{answer}");
    assert_eq!(status_on_socket(&h), 200);
    assert_eq!(status_on_tcp(&addr), 200);
}

/// Sends one request on each of `conns` before reading any answer, then reads every answer
/// (closing each connection once answered, as a scraper that is done would).
fn all_at_once<C: Conn>(mut conns: Vec<C>, requests: &[Vec<u8>]) -> Vec<u16> {
    for (i, conn) in conns.iter_mut().enumerate() {
        conn.write_all(&requests[i % requests.len()]).unwrap();
    }
    conns
        .into_iter()
        .map(|mut conn| http::read_answer(&mut conn, ANSWER).map_or(0, |a| a.status))
        .collect()
}

#[test]
fn a_thousand_concurrent_readers_of_the_api_and_the_page_on_each_listener_are_all_answered() {
    raise_open_files(4096);
    let (h, addr) = daemon();
    for i in 0..50 {
        h.submit(&h.spec(&format!("queued {i}")).command(&["sleep", "600"]));
    }
    let routes = ["/v1/resources", "/metrics", "/v1/status", "/v1/jobs"];
    // On TCP the page's readers too: the page and its script, as a browser asks for them.
    let page = ["/", "/dashboard/app.js"];
    let tcp_requests: Vec<Vec<u8>> = routes.iter().chain(&page).map(|r| get(r, &addr)).collect();
    let socket_requests: Vec<Vec<u8>> = routes.iter().map(|r| get(r, "localhost")).collect();
    // Connecting does not wait for the daemon: the kernel's backlog (1024) takes them.
    let tcp: Vec<TcpStream> = (0..1000).map(|_| http::tcp(&addr)).collect();
    let socket: Vec<UnixStream> = (0..1000).map(|_| http::unix(&h.socket())).collect();
    let on_tcp = std::thread::spawn(move || all_at_once(tcp, &tcp_requests));
    let on_socket = all_at_once(socket, &socket_requests);
    let on_tcp = on_tcp.join().unwrap();
    for (via, statuses) in [("tcp", on_tcp), ("socket", on_socket)] {
        let failed: Vec<(usize, u16)> = statuses
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, s)| *s != 200)
            .collect();
        assert!(failed.is_empty(), "{via}: not answered 200: {failed:?}");
        assert_eq!(statuses.len(), 1000);
    }
    assert_eq!(status_on_socket(&h), 200);
    assert_eq!(status_on_tcp(&addr), 200);
}

#[test]
fn a_malformed_request_line_or_header_is_answered_with_the_json_envelope() {
    let (h, addr) = daemon();
    let host = format!("Host: {addr}");
    let cases: [(&str, u16); 3] = [
        ("GET /v1/status HTTP/9.9\r\nHOST\r\n\r\n", 400),
        ("G\u{1}T /v1/status HTTP/1.1\r\nHOST\r\n\r\n", 400),
        ("GET /v1/status HTTP/1.1\r\nHOST\r\nBad Header\r\n\r\n", 400),
    ];
    for (request, status) in cases {
        for via in ["tcp", "socket"] {
            let request = request.replace(
                "HOST",
                if via == "tcp" {
                    &host
                } else {
                    "Host: localhost"
                },
            );
            let answer = if via == "tcp" {
                http::exchange(&mut http::tcp(&addr), request.as_bytes(), ANSWER)
            } else {
                http::exchange(&mut http::unix(&h.socket()), request.as_bytes(), ANSWER)
            };
            assert_eq!(answer.status, status, "{via} {request:?}: {answer:?}");
            assert_eq!(answer.error()["code"], "usage", "{via} {request:?}");
        }
    }
    assert_eq!(status_on_socket(&h), 200);
}
