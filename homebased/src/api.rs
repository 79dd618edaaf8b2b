//! The HTTP/JSON API under `/v1`: one axum router for the Unix socket (every route) and the
//! optional TCP listener (reads plus move, cancel and release). Handlers only translate
//! between HTTP and the core.

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

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use homebased_shared::error::ApiError;

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
