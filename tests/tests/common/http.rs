//! Raw HTTP/1.1 over the daemon's socket or TCP listener, for requests the typed client would
//! never send (malformed, oversized, stalled). Every read is bounded by a timeout.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// One stream to the daemon, either kind.
pub trait Conn: Read + Write {
    fn set_read_bound(&self, bound: Duration);
}

impl Conn for UnixStream {
    fn set_read_bound(&self, bound: Duration) {
        self.set_read_timeout(Some(bound)).unwrap();
    }
}

impl Conn for TcpStream {
    fn set_read_bound(&self, bound: Duration) {
        self.set_read_timeout(Some(bound)).unwrap();
    }
}

pub fn unix(path: &Path) -> UnixStream {
    UnixStream::connect(path).expect("the daemon's socket accepts a connection")
}

pub fn tcp(addr: &str) -> TcpStream {
    TcpStream::connect(addr).expect("the web listener accepts a connection")
}

/// An answer: its status, raw head and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Answer {
    /// The header's value, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }

    /// The `error` object of the JSON envelope, asserting the body is one.
    pub fn error(&self) -> Value {
        let ct = self.header("content-type").unwrap_or_default();
        assert!(
            ct.starts_with("application/json"),
            "an error answer is JSON, got {ct:?}: {self:?}"
        );
        let v: Value = serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"));
        let error = v["error"].clone();
        for field in ["code", "message", "retryable", "input"] {
            assert!(error.get(field).is_some(), "error lacks {field}: {v}");
        }
        error
    }
}

/// Sends `request` and reads one answer (head, then `Content-Length` bytes), within `bound`.
pub fn exchange(conn: &mut impl Conn, request: &[u8], bound: Duration) -> Answer {
    conn.write_all(request).unwrap();
    read_answer(conn, bound).expect("the daemon answered")
}

/// Reads one answer within `bound`; `None` when the connection closed or stalled first.
pub fn read_answer(conn: &mut impl Conn, bound: Duration) -> Option<Answer> {
    let deadline = Instant::now() + bound;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let status = head.split_whitespace().nth(1)?.parse().ok()?;
            let mut answer = Answer {
                status,
                head,
                body: buf[end + 4..].to_vec(),
            };
            let length: usize = answer
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while answer.body.len() < length {
                let n = read_some(conn, &mut chunk, deadline)?;
                answer.body.extend_from_slice(&chunk[..n]);
            }
            answer.body.truncate(length);
            return Some(answer);
        }
        let n = read_some(conn, &mut chunk, deadline)?;
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn read_some(conn: &mut impl Conn, chunk: &mut [u8], deadline: Instant) -> Option<usize> {
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        conn.set_read_bound(left.max(Duration::from_millis(1)));
        match conn.read(chunk) {
            Ok(0) => return None,
            Ok(n) => return Some(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
}

/// Reads until the daemon closes the connection, at most `bound`; answers how long it took
/// (`None`: still open at the bound) and whatever arrived.
pub fn wait_closed(conn: &mut impl Conn, bound: Duration) -> (Option<Duration>, Vec<u8>) {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut chunk = [0u8; 8192];
    while let Some(left) = bound.checked_sub(started.elapsed()) {
        conn.set_read_bound(left.max(Duration::from_millis(1)));
        match conn.read(&mut chunk) {
            Ok(0) => return (Some(started.elapsed()), got),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // A reset is a close too.
            Err(_) => return (Some(started.elapsed()), got),
        }
    }
    (None, got)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A request with a body and its `Content-Length`.
pub fn post(path: &str, host: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A free loopback port for a web listener (bound, then released for the daemon).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
