//! The two wrappers around every connection's stream: [`StallBound`] bounds a write that
//! makes no progress (hyper has no write timeout), [`ParseErrorsAsEnvelope`] turns hyper's
//! bare answer to a request it could not parse into the JSON envelope.

use axum::http::StatusCode;
use homebased_shared::error::ApiError;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

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

/// The longest head hyper writes for a parse error (status line, `content-length: 0`, `date`),
/// with room to spare.
const BARE_HEAD_MAX: usize = 512;

/// The envelope answer for one of hyper's bare parse-error heads; `None` for anything else.
/// Every write of every answer comes through here, so anything that is not a short 4xx head is
/// refused on its first bytes: scanning a long answer's remaining bytes on each partial write
/// cost quadratic time (a 48 MB queue listing took seconds).
pub fn envelope_for_bare_error(head: &[u8]) -> Option<Vec<u8>> {
    if head.len() > BARE_HEAD_MAX || !head.starts_with(b"HTTP/1.1 4") {
        return None;
    }
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
    async fn a_long_answer_written_in_many_partial_writes_arrives_unchanged() {
        // A narrow pipe: every write is partial, and each retry hands the rest of the answer
        // back to the check.
        let (near, mut far) = tokio::io::duplex(4096);
        let mut io = ParseErrorsAsEnvelope::new(near);
        let mut answer = b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n".to_vec();
        answer.extend((0..1_000_000u32).map(|i| b"{}[],\"a\r\n"[i as usize % 9]));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            far.read_to_end(&mut got).await.unwrap();
            got
        });
        io.write_all(&answer).await.unwrap();
        io.shutdown().await.unwrap();
        drop(io);
        assert!(reader.await.unwrap() == answer);
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
