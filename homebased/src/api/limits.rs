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
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

mod streams;
pub use streams::{envelope_for_bare_error, ParseErrorsAsEnvelope, StallBound};

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

/// The one accept loop of the socket and TCP: a slot first (while all are taken, new clients
/// wait in the listen backlog), then a connection, each raced against `shutdown`; a failed
/// accept is logged and tried again after a pause. `serve` gets each connection with its
/// slot, which the connection holds until it ends.
pub async fn accept_loop<S, A>(
    listener: &'static str,
    slots: &Slots,
    accept: impl Fn() -> A,
    mut serve: impl FnMut(S, OwnedSemaphorePermit),
    shutdown: impl std::future::Future<Output = ()>,
) where
    A: std::future::Future<Output = std::io::Result<S>>,
{
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            _ = &mut shutdown => break,
            slot = slots.take() => match slot {
                Some(slot) => slot,
                None => break,
            },
        };
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            accepted = accept() => match accepted {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "{listener} accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        serve(stream, slot);
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
