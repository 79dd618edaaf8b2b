//! `POST /v1/history/prune` and the benchmarks' `POST /v1/internal/seed` (socket only).
//! The prune's batches are the core's (`core/history.rs`).

use super::{body, json, ApiResponse, AppState};
use axum::body::Bytes;
use axum::extract::State;
use homebased_shared::wire::{PruneRequest, SeedRequest};

pub(super) async fn prune(State(s): State<AppState>, bytes: Bytes) -> ApiResponse {
    let req: PruneRequest = body(&bytes)?;
    json(s.core.prune(req).await?)
}

pub(super) async fn seed(State(s): State<AppState>, bytes: Bytes) -> ApiResponse {
    let req: SeedRequest = body(&bytes)?;
    json(s.core.seed(req).await?)
}
