//! The HTTP/JSON API under `/v1`: one axum router for the Unix socket (every route) and the
//! optional TCP listener (reads plus move, cancel and release). Handlers only translate
//! between HTTP and the core.
//!
//! # Layout
//! - [`routes`]: the route table, which verbs exist on which listener.
//! - [`unix`] and [`tcp`]: serving the router on the socket and on the TCP listener.
//! - [`guard`]: the TCP listener's guards (the `Host` check, tokens).
//! - [`limits`]: the limits against hostile or broken clients on both.
//! - [`listing`]: `GET /v1/jobs`, written out as it is read.
//! - [`threads`]: a thread's events, with long polls.
//! - [`fleet`]: a machine's identity and its peer directory.
//! - [`history`]: history prune and the benchmarks' seeding.
//! - [`dashboard`]: the page of the TCP listener.
//! - `clock`: the end-to-end tests' move of the daemon's clock, in `failpoints` builds only.

#[cfg(feature = "failpoints")]
mod clock;
pub mod dashboard;
pub mod fleet;
pub mod guard;
mod history;
pub mod limits;
mod listing;
mod routes;
pub mod tcp;
pub mod threads;
pub mod unix;

pub use routes::{router, Listener};

use crate::core::CoreHandle;
use crate::fleet::Fleet;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use homebased_shared::error::ApiError;
use homebased_shared::wire::strict;
use homebased_shared::wire::Versioned;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// What every handler of either listener shares. It lives here, above the route table and
/// the route groups, so that the groups (`fleet`, `history`, `threads`) and the table that
/// mounts them import it from their parent, not from each other.
#[derive(Clone)]
struct AppState {
    core: CoreHandle,
    /// Asks the daemon to shut down (`daemon stop`), socket only.
    shutdown: tokio::sync::mpsc::UnboundedSender<()>,
    /// The peers a `?machine=` may name, and how to reach them.
    fleet: Fleet,
}

type ApiResponse = Result<Response, ErrorResponse>;

/// Serializes the answer in its versioned envelope straight into the body (no intermediate
/// `Value`: a long queue listing is built once).
fn json<T: serde::Serialize>(answer: T) -> ApiResponse {
    Ok(Json(Versioned::new(answer)).into_response())
}

/// Parses a body strictly: malformed JSON, duplicate keys or unknown fields are a usage
/// error (400).
fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ErrorResponse> {
    let value = strict::parse(bytes).map_err(|e| bad_body(&e))?;
    typed(value)
}

fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ErrorResponse> {
    serde_json::from_value(value).map_err(|e| bad_body(&e))
}

fn bad_body(e: &dyn std::fmt::Display) -> ErrorResponse {
    ErrorResponse(ApiError::usage(format!("bad request body: {e}")))
}

/// An `ApiError` as an HTTP response: the status from the code, the JSON envelope as body.
pub struct ErrorResponse(pub ApiError);

impl From<ApiError> for ErrorResponse {
    fn from(e: ApiError) -> Self {
        ErrorResponse(e)
    }
}

impl IntoResponse for ErrorResponse {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.0.envelope())).into_response()
    }
}
