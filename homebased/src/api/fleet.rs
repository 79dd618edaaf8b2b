//! The Fleet routes (SPEC section 13): a machine's identity and its peer directory. The
//! directory is changed on the socket only; the TCP listener answers the identity and the
//! listing, behind the token guard of `fleet::token`.

use super::routes::{body, json, ApiResponse, AppState};
use super::{ErrorResponse, Listener};
use crate::fleet::{Fleet, ORIGIN_HEADER};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use homebased_shared::wire::{AddPeerRequest, PeerRequest, RemovedPeer};

pub(super) fn routes(listener: Listener) -> Router<AppState> {
    let reads = Router::new().route("/v1/fleet/identity", get(identity));
    match listener {
        Listener::Socket => reads
            .route("/v1/fleet/machines", get(machines).post(add))
            .route("/v1/fleet/machines/remove", post(remove))
            .route("/v1/fleet/probe", post(probe)),
        Listener::Tcp => reads.route("/v1/fleet/machines", get(machines)),
    }
}

async fn identity(State(s): State<AppState>) -> ApiResponse {
    json(s.fleet.identity().clone())
}

async fn machines(State(s): State<AppState>) -> ApiResponse {
    json(s.fleet.machines())
}

async fn add(State(s): State<AppState>, bytes: Bytes) -> ApiResponse {
    let req: AddPeerRequest = body(&bytes)?;
    json(s.fleet.add(&req.address).await?)
}

async fn remove(State(s): State<AppState>, bytes: Bytes) -> ApiResponse {
    let req: PeerRequest = body(&bytes)?;
    json(RemovedPeer {
        removed: s.fleet.remove(&req.peer).await?,
    })
}

async fn probe(State(s): State<AppState>, bytes: Bytes) -> ApiResponse {
    let req: PeerRequest = body(&bytes)?;
    json(s.fleet.probe(&req.peer).await?)
}

/// A request a peer forwarded here (it carries the origin header) must name this machine by
/// UUID in `?machine=`: otherwise the peer's directory is stale, and nothing is done (in
/// particular nothing is forwarded on, so two directories can never bounce a request).
pub async fn forwarded(State(fleet): State<Fleet>, request: Request, next: Next) -> Response {
    if request.headers().contains_key(ORIGIN_HEADER)
        && !request.uri().path().starts_with("/v1/fleet/")
    {
        let machine = request.uri().query().and_then(|q| {
            q.split('&')
                .find_map(|pair| pair.strip_prefix("machine="))
                .map(str::to_string)
        });
        if let Err(e) = fleet.check_forwarded(machine.as_deref()) {
            return ErrorResponse(e).into_response();
        }
    }
    next.run(request).await
}
