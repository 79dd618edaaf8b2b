//! The Fleet routes (SPEC section 13): a machine's identity and its peer directory. The
//! directory is changed on the socket only; the TCP listener answers the identity and the
//! listing, behind the token guard of `fleet::token`.

use super::{body, json, ApiResponse, AppState};
use super::{ErrorResponse, Listener};
use crate::fleet::Fleet;
use axum::body::Bytes;
use axum::extract::Query;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use homebased_shared::error::{ApiError, ErrorCode};
use homebased_shared::ids::MachineId;
use homebased_shared::wire::{
    AddPeerRequest, FleetEvent, FleetEvents, FleetSubmitRequest, PeerRequest, RemovedPeer,
    ORIGIN_HEADER,
};
use serde::Deserialize;
use std::time::Duration;

pub(super) fn routes(listener: Listener) -> Router<AppState> {
    let reads = Router::new()
        .route("/v1/fleet/identity", get(identity))
        .route("/v1/fleet/events", get(events));
    match listener {
        Listener::Socket => reads
            .route("/v1/fleet/machines", get(machines).post(add))
            .route("/v1/fleet/machines/remove", post(remove))
            .route("/v1/fleet/probe", post(probe)),
        // Machine to machine, behind the token guard; a remote submit is refused by a
        // daemon without a token.
        Listener::Tcp => reads
            .route("/v1/fleet/machines", get(machines))
            .route("/v1/fleet/jobs", post(remote_submit)),
    }
}

/// `POST /v1/fleet/jobs` on the authority.
async fn remote_submit(State(s): State<AppState>, bytes: Bytes) -> ApiResponse {
    let req: FleetSubmitRequest = body(&bytes)?;
    json(crate::fleet::remote::accept(&s.fleet, &s.core, req).await?)
}

/// The longest a pull may ask to be held (SPEC 13: `wait=25s`).
const MAX_WAIT: Duration = crate::fleet::pull::WAIT;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    origin: String,
    #[serde(default)]
    after: u64,
    wait: Option<String>,
}

/// `GET /v1/fleet/events?origin=<uuid>&after=<cursor>&wait=<duration>` on the authority: the
/// events of the origin's remote jobs after its cursor, answered as soon as one exists, or
/// empty once `wait` (at most 25 s) has passed.
async fn events(
    State(s): State<AppState>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResponse {
    let Query(q) = q.map_err(|e| ErrorResponse(ApiError::new(ErrorCode::Usage, e.body_text())))?;
    let origin: MachineId = q.origin.parse().map_err(|_| {
        ErrorResponse(
            ApiError::new(
                ErrorCode::Usage,
                format!("{:?} is not a machine UUID", q.origin),
            )
            .with_input(serde_json::json!({ "origin": q.origin })),
        )
    })?;
    let wait = match &q.wait {
        None => Duration::ZERO,
        Some(text) => humantime::parse_duration(text).map_err(|e| {
            ErrorResponse(
                ApiError::new(ErrorCode::Usage, format!("wait={text:?}: {e}"))
                    .with_input(serde_json::json!({ "wait": text })),
            )
        })?,
    }
    .min(MAX_WAIT);
    let after = q.after;
    s.core.fleet_acknowledge(origin, after).await?;
    let wake = s.core.fleet_wake().await?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Armed before the read, so an event appended between the two still wakes it.
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let found = s.core.fleet_events(origin, after).await?;
        if !found.is_empty() || tokio::time::Instant::now() >= deadline {
            return json(FleetEvents {
                machine: s.fleet.identity().machine,
                events: found
                    .into_iter()
                    .map(|(cursor, event)| FleetEvent { cursor, event })
                    .collect(),
            });
        }
        tokio::select! {
            _ = &mut woken => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
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
