//! `POST /v1/internal/clock {"advance_ms": N}` (socket only): moves the daemon's clock N ms
//! ahead (crate::clock) and answers how far ahead of the system clock it now is, once the
//! tick and a pass have seen the move. The end-to-end tests' way to let time pass without
//! sleeping or backdating rows. This file is compiled only with the `failpoints` feature: a
//! release build has no such route, and the path is an unknown route there.

use super::{body, json, ApiResponse, AppState};
use axum::body::Bytes;
use axum::extract::State;
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Advance {
    advance_ms: u64,
}

#[derive(Serialize)]
struct Moved {
    ahead_ms: i64,
}

pub(super) async fn advance(State(s): State<AppState>, bytes: Bytes) -> ApiResponse {
    let req: Advance = body(&bytes)?;
    let by = std::time::Duration::from_millis(req.advance_ms);
    let ahead_ms = s.core.advance_clock(by).await?;
    json(Moved { ahead_ms })
}
