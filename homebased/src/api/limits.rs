//! Limits against hostile or broken clients, the same on the socket and on TCP: how long a
//! request's headers and body may take, how long an answer may stall unread, how many
//! connections each listener serves at once, how large a body may be (one limit shared with
//! the CLI, [`MAX_BODY_BYTES`]), and the JSON error envelope for every refusal, including
//! those axum and hyper would otherwise answer in plain text.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use homebased_shared::error::{ApiError, ErrorCode};
use homebased_shared::wire::{body_too_large, MAX_BODY_BYTES};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A client must send its request line and headers within this, or the connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A request body must arrive in full within this, or it is answered 408 and closed.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Request line plus headers; hyper's default buffer is far larger than any client needs.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// An answer the client does not read: once a write has made no progress for this long the
/// connection is closed (hyper has no write timeout of its own).
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections the TCP listener serves at once. More wait in the kernel's listen backlog
/// until one ends (an idle one within [`HEADER_READ_TIMEOUT`]); the socket has its own
/// slots, so a crowd on TCP never starves the CLI.
pub const MAX_TCP_CONNECTIONS: usize = 512;
/// Connections the Unix socket serves at once (same user only; a bound all the same, so
/// that a runaway script cannot take every descriptor of the daemon).
pub const MAX_SOCKET_CONNECTIONS: usize = 1024;
/// The descriptor limit the daemon asks for at start (bounded by the hard limit): both
/// listeners full, plus the store, the run watchers and the workers' pipes.
pub const WANTED_OPEN_FILES: u64 = 8192;

/// Connections the kernel keeps waiting for `accept` (capped by `net.core.somaxconn`). The
/// standard library's 128 is less than one burst of clients beyond a listener's slots: a
/// client past it has its SYN dropped and retries only after seconds.
pub const LISTEN_BACKLOG: i32 = 1024;

/// Gives a bound listener [`LISTEN_BACKLOG`] (Linux lets `listen` be called again on a
/// listening socket to change it).
pub fn widen_backlog(listener: &impl std::os::fd::AsFd) -> std::io::Result<()> {
    use nix::sys::socket::{listen, Backlog};
    let backlog = Backlog::new(LISTEN_BACKLOG).unwrap_or(Backlog::MAXCONN);
    listen(listener, backlog).map_err(std::io::Error::from)
}

/// How many connections one listener serves at once; a permit is held for the life of each.
#[derive(Clone)]
pub struct Slots(Arc<Semaphore>);

impl Slots {
    pub fn new(connections: usize) -> Slots {
        Slots(Arc::new(Semaphore::new(connections)))
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }

    /// Waits for a free slot. The semaphore is never closed, so a permit always comes.
    pub async fn take(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().acquire_owned().await.ok()
    }
}

/// Raises the soft limit on open files to [`WANTED_OPEN_FILES`] (or the hard limit, if
/// lower): the default 1024 of many systems is less than both listeners' slots together.
/// Answers the limit now in force.
pub fn raise_open_files() -> std::io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let wanted = WANTED_OPEN_FILES.min(hard);
    if soft >= wanted {
        return Ok(soft);
    }
    setrlimit(Resource::RLIMIT_NOFILE, wanted, hard)?;
    Ok(wanted)
}

/// The HTTP/1 settings every listener serves connections with.
pub fn http1_builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES.max(8192));
    builder
}

/// Serves `router` on one accepted connection (socket or TCP), on a task of its own, with
/// the settings of [`http1_builder`] and writes bounded by [`WRITE_STALL_TIMEOUT`]; the
/// connection holds its listener's `slot` until it ends; `listener` names it in the log.
pub fn spawn_connection<S>(
    stream: S,
    router: &axum::Router,
    listener: &'static str,
    slot: OwnedSemaphorePermit,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let service = hyper_util::service::TowerToHyperService::new(router.clone());
    tokio::spawn(async move {
        let _slot = slot;
        let io = StallBound::new(ParseErrorsAsEnvelope::new(stream), WRITE_STALL_TIMEOUT);
        let conn = http1_builder()
            .serve_connection(hyper_util::rt::TokioIo::new(io), service)
            .await;
        if let Err(e) = conn {
            tracing::debug!(error = %e, listener, "connection ended with an error");
        }
    });
}

/// A stream on which hyper's own answer to a request it could not parse (a malformed request
/// line or header, a head too large, a URI too long: a bare status with `content-length: 0`,
/// written before any request exists, so no middleware sees it) goes out as the JSON envelope
/// instead, with the same status. Every answer of the router to a 4xx has a body (the
/// envelope), so an empty 4xx head is hyper's and nothing else.
pub struct ParseErrorsAsEnvelope<S> {
    inner: S,
    /// The envelope answer being written in place of hyper's head, how much of it is out, and
    /// the length of hyper's head (what hyper is told was written once it is all out).
    replacing: Option<(Vec<u8>, usize, usize)>,
}

impl<S> ParseErrorsAsEnvelope<S> {
    pub fn new(inner: S) -> ParseErrorsAsEnvelope<S> {
        ParseErrorsAsEnvelope {
            inner,
            replacing: None,
        }
    }
}

/// The envelope answer for one of hyper's bare parse-error heads; `None` for anything else.
pub fn envelope_for_bare_error(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let end = text.find("\r\n\r\n")?;
    let (head, rest) = text.split_at(end);
    if rest.len() != 4 {
        return None;
    }
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()?
        .strip_prefix("HTTP/1.1 ")?
        .split(' ')
        .next()?
        .parse()
        .ok()?;
    let empty = lines.any(|l| l.eq_ignore_ascii_case("content-length: 0"));
    let message = match status {
        400 => "malformed request: the request line or a header could not be parsed",
        414 => "the request URI is too long",
        431 => "the request headers are too large",
        _ => return None,
    };
    if !empty {
        return None;
    }
    let body = ApiError::usage(message).envelope().to_string();
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Bad Request");
    Some(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<S: AsyncWrite + Unpin> ParseErrorsAsEnvelope<S> {
    /// Writes the replacement on; `Ready(Ok(n))` with hyper's head length once it is all out.
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        while let Some((bytes, written, owed)) = self.replacing.as_mut() {
            if *written == bytes.len() {
                let owed = *owed;
                self.replacing = None;
                return Poll::Ready(Ok(owed));
            }
            match Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => *written += n,
                other => return other,
            }
        }
        Poll::Ready(Ok(0))
    }

    fn start(&mut self, buf: &[u8]) -> bool {
        match envelope_for_bare_error(buf) {
            Some(bytes) => {
                self.replacing = Some((bytes, 0, buf.len()));
                true
            }
            None => false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ParseErrorsAsEnvelope<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ParseErrorsAsEnvelope<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.replacing.is_some() || self.start(buf) {
            return self.drive(cx);
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let first = bufs.iter().find(|b| !b.is_empty()).map(|b| &b[..]);
        if self.replacing.is_some() || first.is_some_and(|b| self.start(b)) {
            return self.drive(cx);
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A stream whose writes fail once they have been blocked, without progress, for `bound`:
/// a client that sends a request and never reads the answer cannot hold its connection
/// (and its slot) forever. Reads pass through; the header and body timeouts bound them.
pub struct StallBound<S> {
    inner: S,
    bound: Duration,
    /// Armed when a write first returns `Pending`, dropped on any progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> StallBound<S> {
    pub fn new(inner: S, bound: Duration) -> StallBound<S> {
        StallBound {
            inner,
            bound,
            stalled: None,
        }
    }

    /// What a write's poll means once its stall is accounted for.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let bound = self.bound;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(bound)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the client read nothing for {}s", bound.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallBound<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallBound<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// An error answer with its own status (413, 408, 404, 405) and the code's envelope.
pub fn refusal(status: StatusCode, error: ApiError) -> Response {
    (status, Json(error.envelope())).into_response()
}

/// Reads the whole body before any handler runs: a declared length over the limit is
/// refused at once, a body that grows past it as soon as it does, one that stalls after
/// [`BODY_READ_TIMEOUT`], and a broken one (bad chunking) as `usage`.
pub async fn bounded_body(request: Request, next: Next) -> Response {
    let submit = request.method() == Method::POST && request.uri().path() == "/v1/jobs";
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > MAX_BODY_BYTES as u64) {
        let size = usize::try_from(n).ok();
        return refusal(StatusCode::PAYLOAD_TOO_LARGE, body_too_large(submit, size));
    }
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(
        BODY_READ_TIMEOUT,
        Limited::new(body, MAX_BODY_BYTES).collect(),
    );
    let bytes = match read.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return refusal(StatusCode::PAYLOAD_TOO_LARGE, body_too_large(submit, None));
        }
        Ok(Err(e)) => {
            let error = ApiError::usage(format!("the request body could not be read: {e}"));
            return refusal(StatusCode::BAD_REQUEST, error);
        }
        Err(_) => {
            let error = ApiError::usage(format!(
                "the request body did not arrive within {}s",
                BODY_READ_TIMEOUT.as_secs()
            ));
            let mut response = refusal(StatusCode::REQUEST_TIMEOUT, error);
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Any error answer that is not already the JSON envelope (axum's plain-text rejections, an
/// empty 405) becomes one, its text kept as the message and its status kept.
pub async fn envelope_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let code = match status {
        StatusCode::FORBIDDEN => ErrorCode::Permission,
        s if s.is_server_error() => ErrorCode::Internal,
        _ => ErrorCode::Usage,
    };
    let text = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("refused")
            .to_ascii_lowercase()
    } else {
        text
    };
    refusal(status, ApiError::new(code, message))
}

/// Unknown routes: 404, code `usage`.
pub async fn no_such_route(request: Request) -> Response {
    let error = ApiError::usage(format!("no such route: {}", request.uri().path()))
        .with_input(serde_json::json!({ "path": request.uri().path() }));
    refusal(StatusCode::NOT_FOUND, error)
}

/// A known route with a method it does not serve: 405, code `usage`.
pub async fn wrong_method(request: Request) -> Response {
    let error = ApiError::usage(format!(
        "{} does not serve {}",
        request.uri().path(),
        request.method()
    ))
    .with_input(serde_json::json!({ "method": request.method().as_str() }));
    refusal(StatusCode::METHOD_NOT_ALLOWED, error)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn only_hypers_bare_parse_error_heads_are_replaced() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 11:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(envelope_for_bare_error(bare).unwrap()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "usage", "{v}");
        let large = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert!(String::from_utf8(envelope_for_bare_error(large).unwrap())
            .unwrap()
            .starts_with("HTTP/1.1 431 "));
        // The router's own answers carry their envelope, and successes are never touched.
        for other in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 80\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}",
        ] {
            assert_eq!(envelope_for_bare_error(other), None);
        }
    }

    #[tokio::test]
    async fn a_bare_parse_error_goes_out_as_the_envelope_and_hyper_is_told_it_was_written() {
        let (near, mut far) = tokio::io::duplex(16);
        let mut io = ParseErrorsAsEnvelope::new(near);
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            far.read_to_end(&mut got).await.unwrap();
            got
        });
        let n = io.write(bare).await.unwrap();
        assert_eq!(n, bare.len());
        io.shutdown().await.unwrap();
        drop(io);
        let got = String::from_utf8(reader.await.unwrap()).unwrap();
        assert!(got.contains("\"code\":\"usage\""), "{got}");
    }

    #[tokio::test]
    async fn a_write_nobody_reads_fails_after_the_stall_bound() {
        let (near, _far) = tokio::io::duplex(64);
        let mut bounded = StallBound::new(near, Duration::from_millis(100));
        let e = bounded.write_all(&[b'x'; 4096]).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn a_slow_reader_that_keeps_reading_is_never_cut_off() {
        let (near, mut far) = tokio::io::duplex(64);
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0u8; 64];
            while got < 4096 {
                // Slower than the buffer fills, faster than the bound.
                tokio::time::sleep(Duration::from_millis(5)).await;
                got += far.read(&mut buf).await.unwrap();
            }
            got
        });
        let mut bounded = StallBound::new(near, Duration::from_secs(5));
        bounded.write_all(&[b'x'; 4096]).await.unwrap();
        assert_eq!(reader.await.unwrap(), 4096);
    }
}
