//! HTTP/1.1 with hyper over a Unix or TCP stream, one connection per request.
//!
//! A missing or refusing socket is `daemon_unavailable`, an unreachable TCP peer
//! `machine_unavailable`; both are retryable by the caller. A connection that breaks
//! mid-request is resent here only for requests that are safe to repeat.

use super::Client;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode, ErrorEnvelope};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

/// The port of a TCP address that names none (SPEC section 13).
const DEFAULT_PORT: u16 = homebased_shared::peer_address::DEFAULT_PORT;

/// A Fleet peer that has not answered within this is `machine_unavailable` (SPEC 13): a
/// slow or half-open peer never holds a request longer.
pub const PEER_DEADLINE: Duration = Duration::from_secs(5);

/// A daemon that has not answered on its socket within this is `daemon_unavailable` (SPEC 2):
/// a stopped (`SIGSTOP`) or hung daemon never hangs the CLI. Long polls and follows are not
/// socket requests with a body to wait for, so this bounds every request the CLI makes.
pub const SOCKET_DEADLINE: Duration = Duration::from_secs(30);

/// The largest answer read from a peer: a peer answering a huge body is cut off there.
pub const MAX_PEER_REPLY_BYTES: usize = 64 * 1024 * 1024;

#[derive(Clone)]
pub(super) enum Endpoint {
    Socket(PathBuf),
    /// `host:port`, also sent as the `Host` header.
    Tcp(String),
}

impl Endpoint {
    pub(super) fn tcp(address: &str) -> Endpoint {
        let authority = address.strip_prefix("http://").unwrap_or(address);
        let authority = authority.trim_end_matches('/');
        let has_port = match authority.rsplit_once(':') {
            // `[v6]` alone has colons but no port.
            Some((host, port)) => {
                !port.is_empty()
                    && port.bytes().all(|b| b.is_ascii_digit())
                    && (!host.contains(':') || host.ends_with(']'))
            }
            None => false,
        };
        if has_port {
            Endpoint::Tcp(authority.to_string())
        } else {
            Endpoint::Tcp(format!("{authority}:{DEFAULT_PORT}"))
        }
    }

    fn host(&self) -> &str {
        match self {
            Endpoint::Socket(_) => "localhost",
            Endpoint::Tcp(authority) => authority,
        }
    }

    /// Nothing answers there: the daemon for a socket, the peer machine for TCP. A socket
    /// this user may not open belongs to another user's daemon: `permission`.
    fn unavailable(&self, e: std::io::Error) -> ApiError {
        match self {
            Endpoint::Socket(path) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                ApiError::new(
                    ErrorCode::Permission,
                    format!(
                        "{} belongs to another user ({e}): only the daemon's owner may use it",
                        path.display()
                    ),
                )
                .with_input(serde_json::json!({ "socket": path }))
            }
            Endpoint::Socket(path) => ApiError::new(
                ErrorCode::DaemonUnavailable,
                format!(
                    "no daemon answers on {} ({e}); start one with `homebased daemon start`",
                    path.display()
                ),
            )
            .with_input(serde_json::json!({ "socket": path })),
            Endpoint::Tcp(authority) => ApiError::new(
                ErrorCode::MachineUnavailable,
                format!("no daemon answers at http://{authority} ({e})"),
            )
            .with_input(serde_json::json!({ "address": format!("http://{authority}") })),
        }
    }

    /// The connection broke mid-request: the request may or may not have been applied.
    fn lost(&self, e: impl std::fmt::Display) -> Transport {
        Transport::Lost(match self {
            Endpoint::Socket(path) => ApiError::new(
                ErrorCode::DaemonUnavailable,
                format!("the daemon connection broke: {e}"),
            )
            .with_input(serde_json::json!({ "socket": path })),
            // Named, since the peer's address is the one thing the person can act on: a
            // garbage answer means another program listens there.
            Endpoint::Tcp(authority) => ApiError::new(
                ErrorCode::MachineUnavailable,
                format!("the connection to http://{authority} broke: {e}"),
            )
            .with_input(serde_json::json!({ "address": format!("http://{authority}") })),
        })
    }
}

/// Whether a request may be sent again after a transport failure: reads, and writes that
/// carry their own operation or job id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    Safe,
    Once,
}

enum Transport {
    /// Nothing listens: no point in retrying at once.
    Unavailable(ApiError),
    /// The connection broke mid-request.
    Lost(ApiError),
}

impl Transport {
    fn into_error(self) -> ApiError {
        match self {
            Transport::Unavailable(e) | Transport::Lost(e) => e,
        }
    }
}

/// How many times a request safe to repeat is sent, and the pause before attempt `n`.
const SAFE_ATTEMPTS: u64 = 3;

async fn pause_before(attempt: u64) {
    if attempt > 0 {
        tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
    }
}

impl Client {
    /// Sends the request and answers the body of a success, or the daemon's error.
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        retry: Retry,
    ) -> ApiResult<Bytes> {
        let attempts = if retry == Retry::Safe {
            SAFE_ATTEMPTS
        } else {
            1
        };
        let mut last = None;
        for attempt in 0..attempts {
            pause_before(attempt).await;
            match self.once(method.clone(), path, body.clone()).await {
                Err(Transport::Unavailable(e)) => return Err(e),
                Err(Transport::Lost(e)) => last = Some(e),
                Ok(reply) => return reply,
            }
        }
        Err(last.unwrap_or_else(|| ApiError::internal("request was never sent")))
    }

    async fn once(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<ApiResult<Bytes>, Transport> {
        let unavailable = |e| Transport::Unavailable(self.endpoint.unavailable(e));
        match &self.endpoint {
            Endpoint::Socket(socket) => {
                let attempt = async {
                    let stream = UnixStream::connect(socket).await.map_err(unavailable)?;
                    self.exchange(stream, method, path, body).await
                };
                match tokio::time::timeout(self.deadline, attempt).await {
                    Ok(result) => result,
                    Err(_) => Err(Transport::Unavailable(silent_daemon(socket, self.deadline))),
                }
            }
            Endpoint::Tcp(authority) => {
                let attempt = async {
                    let stream = TcpStream::connect(authority.as_str())
                        .await
                        .map_err(unavailable)?;
                    // One small request per connection: sent at once, not held for Nagle.
                    let _ = stream.set_nodelay(true);
                    self.exchange(stream, method, path, body).await
                };
                match tokio::time::timeout(self.deadline, attempt).await {
                    Ok(result) => result,
                    Err(_) => Err(Transport::Unavailable(
                        ApiError::new(
                            ErrorCode::MachineUnavailable,
                            format!(
                                "http://{authority} did not answer within {}s",
                                self.deadline.as_secs()
                            ),
                        )
                        .with_input(
                            serde_json::json!({ "address": format!("http://{authority}") }),
                        ),
                    )),
                }
            }
        }
    }

    /// A `GET` whose successful body is handed to `sink` as it arrives, rather than held
    /// whole: the CLI prints a 50 MB listing this way. Resent, like [`Retry::Safe`], only while
    /// nothing has reached `sink`; a connection that breaks after that is an error, with what
    /// was handed over already out. An error answer is read whole and returned as the error.
    /// Over TCP the answer is read whole first (a peer's answer is bounded there).
    pub(super) async fn get_streamed(
        &self,
        path: &str,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> ApiResult<()> {
        let Endpoint::Socket(socket) = &self.endpoint else {
            let bytes = self.send(Method::GET, path, None, Retry::Safe).await?;
            return sink(&bytes).map_err(ApiError::internal);
        };
        let mut last = None;
        for attempt in 0..SAFE_ATTEMPTS {
            pause_before(attempt).await;
            // The bound covers the answer's head: once the listing streams in, it takes as
            // long as it is.
            let head = async {
                let stream = UnixStream::connect(socket)
                    .await
                    .map_err(|e| Transport::Unavailable(self.endpoint.unavailable(e)))?;
                self.request(stream, Method::GET, path, None).await
            };
            let head = tokio::time::timeout(self.deadline, head)
                .await
                .unwrap_or_else(|_| {
                    Err(Transport::Unavailable(silent_daemon(socket, self.deadline)))
                });
            let response = match head {
                Ok(response) => response,
                Err(Transport::Unavailable(e)) => return Err(e),
                Err(Transport::Lost(e)) => {
                    last = Some(e);
                    continue;
                }
            };
            if !response.status().is_success() {
                let status = response.status();
                let body = self
                    .read_whole(response)
                    .await
                    .map_err(Transport::into_error)?;
                return Err(self.endpoint.error_of(status, &body));
            }
            let mut body = response.into_body();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| self.endpoint.lost(e).into_error())?;
                if let Ok(data) = frame.into_data() {
                    sink(&data).map_err(ApiError::internal)?;
                }
            }
            return Ok(());
        }
        Err(last.unwrap_or_else(|| ApiError::internal("request was never sent")))
    }

    async fn exchange(
        &self,
        stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<ApiResult<Bytes>, Transport> {
        let response = self.request(stream, method, path, body).await?;
        let status = response.status();
        let body = self.read_whole(response).await?;
        if status.is_success() {
            return Ok(Ok(body));
        }
        Ok(Err(self.endpoint.error_of(status, &body)))
    }

    /// The whole body of `response`; a peer's is bounded by [`MAX_PEER_REPLY_BYTES`].
    async fn read_whole(
        &self,
        response: hyper::Response<hyper::body::Incoming>,
    ) -> Result<Bytes, Transport> {
        let lost = |e: &dyn std::fmt::Display| self.endpoint.lost(e);
        Ok(match self.endpoint {
            Endpoint::Socket(_) => response
                .into_body()
                .collect()
                .await
                .map_err(|e| lost(&e))?
                .to_bytes(),
            Endpoint::Tcp(_) => {
                http_body_util::Limited::new(response.into_body(), MAX_PEER_REPLY_BYTES)
                    .collect()
                    .await
                    .map_err(|e| lost(&e))?
                    .to_bytes()
            }
        })
    }

    /// Sends the request on `stream` and answers the response, its body still to be read.
    async fn request(
        &self,
        stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Transport> {
        let lost = |e: &dyn std::fmt::Display| self.endpoint.lost(e);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| lost(&e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.endpoint.host())
            .header("content-type", "application/json");
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(origin) = self.origin {
            request = request.header(homebased_shared::wire::ORIGIN_HEADER, origin.to_string());
        }
        let request = request
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| lost(&e))?;
        sender.send_request(request).await.map_err(|e| lost(&e))
    }
}

/// A daemon that accepted the connection (or whose socket exists) but did not answer in
/// time: `daemon_unavailable`, retryable, naming the pid that holds `daemon.lock` beside the
/// socket, so that the person can look at that process.
fn silent_daemon(socket: &std::path::Path, deadline: Duration) -> ApiError {
    let home = homebased_shared::home::Home::at(socket.parent().unwrap_or(socket));
    let pid =
        crate::daemon::lock::recorded_pid(&home).filter(|_| crate::daemon::lock::is_held(&home));
    let holder = pid.map_or_else(
        || "the daemon".to_string(),
        |pid| {
            format!(
                "the daemon (pid {pid}, holding {})",
                home.daemon_lock().display()
            )
        },
    );
    ApiError::new(
        ErrorCode::DaemonUnavailable,
        format!(
            "{holder} did not answer on {} within {}s: it may be stopped (SIGSTOP) or hung; \
             `homebased daemon status` reads the home without it",
            socket.display(),
            deadline.as_secs()
        ),
    )
    .with_input(serde_json::json!({ "socket": socket, "pid": pid }))
}

impl Endpoint {
    /// The daemon's error envelope of a failed answer; anything else there is `internal`
    /// from this daemon's socket, and from a peer's address `machine_unavailable` naming it
    /// (another program answers there).
    fn error_of(&self, status: hyper::StatusCode, body: &[u8]) -> ApiError {
        if let Ok(envelope) = serde_json::from_slice::<ErrorEnvelope>(body) {
            return envelope.error;
        }
        let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
        match self {
            Endpoint::Socket(_) => {
                ApiError::internal(format!("the daemon answered {status}: {text}"))
            }
            Endpoint::Tcp(authority) => ApiError::new(
                ErrorCode::MachineUnavailable,
                format!("http://{authority} answered {status}, not as a homebased daemon: {text}"),
            )
            .with_input(serde_json::json!({ "address": format!("http://{authority}") })),
        }
    }
}
