//! The CLI's side of the API: HTTP/1.1 over the Unix socket with hyper, one connection per
//! request. A missing or refusing socket is `daemon_unavailable` (retryable).

use homebased_shared::error::{ApiError, ApiResult, ErrorCode, ErrorEnvelope};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::UnixStream;

pub struct Client {
    socket: PathBuf,
}

/// Whether a request may be sent again after a transport failure: reads, and writes that
/// carry their own operation or job id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    Safe,
    Once,
}

impl Client {
    pub fn new(socket: PathBuf) -> Client {
        Client { socket }
    }

    pub async fn get(&self, path: &str) -> ApiResult<Value> {
        parse(self.send(Method::GET, path, None, Retry::Safe).await?)
    }

    /// The answer's bytes as the daemon sent them (compact JSON), for printing as is.
    pub async fn get_raw(&self, path: &str) -> ApiResult<Bytes> {
        self.send(Method::GET, path, None, Retry::Safe).await
    }

    pub async fn post(&self, path: &str, body: &Value, retry: Retry) -> ApiResult<Value> {
        parse(self.send(Method::POST, path, Some(body), retry).await?)
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        retry: Retry,
    ) -> ApiResult<Bytes> {
        let attempts = if retry == Retry::Safe { 3 } else { 1 };
        let mut last = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
            match self.once(method.clone(), path, body).await {
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
        body: Option<&Value>,
    ) -> Result<ApiResult<Bytes>, Transport> {
        let stream = UnixStream::connect(&self.socket).await.map_err(|e| {
            Transport::Unavailable(
                ApiError::new(
                    ErrorCode::DaemonUnavailable,
                    format!(
                        "no daemon answers on {} ({e}); start one with `homebased daemon start`",
                        self.socket.display()
                    ),
                )
                .with_input(serde_json::json!({ "socket": self.socket })),
            )
        })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(lost)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let bytes = match body {
            Some(b) => Bytes::from(serde_json::to_vec(b).map_err(|e| lost(e.to_string()))?),
            None => Bytes::new(),
        };
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(bytes))
            .map_err(|e| lost(e.to_string()))?;
        let response = sender.send_request(request).await.map_err(lost)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(lost)?
            .to_bytes();
        if status.is_success() {
            return Ok(Ok(body));
        }
        Ok(Err(match serde_json::from_slice::<ErrorEnvelope>(&body) {
            Ok(envelope) => envelope.error,
            Err(_) => ApiError::internal(format!(
                "the daemon answered {status}: {}",
                String::from_utf8_lossy(&body)
            )),
        }))
    }
}

fn parse(body: Bytes) -> ApiResult<Value> {
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::internal(format!("the daemon answered with malformed JSON: {e}")))
}

enum Transport {
    /// Nothing listens: no point in retrying at once.
    Unavailable(ApiError),
    /// The connection broke mid-request: the request may or may not have been applied.
    Lost(ApiError),
}

fn lost(e: impl std::fmt::Display) -> Transport {
    Transport::Lost(ApiError::new(
        ErrorCode::DaemonUnavailable,
        format!("the daemon connection broke: {e}"),
    ))
}
