//! The route table: which verbs exist, on which listener.

use super::{bad_body, body, json, limits, typed, ApiResponse, AppState, ErrorResponse};
use crate::client::Client;
use crate::core::CoreHandle;
use crate::fleet::Fleet;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use homebased_shared::error::{ApiError, ErrorCode};
use homebased_shared::ids::JobId;
use homebased_shared::ids::TaskId;
use homebased_shared::wire::strict::{self, StrictError};
use homebased_shared::wire::{
    CancelRequest, MoveRequest, RegisterRequest, ReleaseRequest, ShutdownResult, SubmitRequest,
    MAX_BODY_BYTES,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

/// Which listener a router serves: the socket serves everything; TCP serves reads and the
/// three guarded writes, since submit and register run arbitrary commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Socket,
    Tcp,
}

type MachineParam = Result<Query<MachineQuery>, axum::extract::rejection::QueryRejection>;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct MachineQuery {
    machine: Option<String>,
}

pub fn router(
    listener: Listener,
    core: CoreHandle,
    shutdown: tokio::sync::mpsc::UnboundedSender<()>,
    fleet: Fleet,
) -> Router {
    let common = Router::new()
        .route("/v1/status", get(status))
        .route("/v1/jobs/{job}", get(job_show))
        .route("/v1/jobs/{job}/move", post(job_move))
        .route("/v1/jobs/{job}/cancel", post(job_cancel))
        .route("/v1/release", post(release))
        .route("/v1/tasks/{task}/log", get(task_log))
        .route("/v1/tasks/{task}/log/chunk", get(task_log_chunk))
        .route("/metrics", get(metrics))
        .merge(super::fleet::routes(listener));
    let all = match listener {
        Listener::Socket => common
            .route("/v1/resources", get(resource_list).post(register))
            .route("/v1/jobs", get(job_list).post(submit))
            .route("/v1/jobs/{job}/environment", get(job_environment))
            .route("/v1/threads/{thread}/events", get(super::threads::events))
            .route("/v1/shutdown", post(shutdown_daemon))
            .route("/v1/internal/settle", post(settle))
            .route("/v1/history/prune", post(super::history::prune))
            .route("/v1/internal/seed", post(super::history::seed)),
        Listener::Tcp => common
            .route("/v1/resources", get(resource_list).post(socket_only))
            .route("/v1/jobs", get(job_list).post(socket_only))
            // The dashboard: `GET /` and its files, on TCP only.
            .merge(super::dashboard::routes()),
    };
    // Test builds only (api/clock.rs): without the feature the path is an unknown route.
    #[cfg(feature = "failpoints")]
    let all = match listener {
        Listener::Socket => all.route("/v1/internal/clock", post(super::clock::advance)),
        Listener::Tcp => all,
    };
    all.fallback(limits::no_such_route)
        .method_not_allowed_fallback(limits::wrong_method)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(limits::bounded_body))
        .layer(axum::middleware::map_response(limits::envelope_errors))
        .with_state(AppState {
            core,
            shutdown,
            fleet,
        })
}

/// A submit body is mostly its spec: a duplicate key inside the spec, or bytes that are not
/// UTF-8, are `invalid_spec` (with the pointer into the spec), as the CLI says them.
fn submit_body(bytes: &Bytes) -> Result<SubmitRequest, ErrorResponse> {
    let spec_error = |pointer: &str, why: String| {
        ErrorResponse(
            ApiError::new(ErrorCode::InvalidSpec, why)
                .with_input(serde_json::json!({ "pointer": pointer, "value": null })),
        )
    };
    match strict::parse(bytes) {
        Ok(value) => typed(value),
        Err(StrictError::Duplicate { pointer }) if pointer.starts_with("/spec/") => {
            let inner = &pointer["/spec".len()..];
            let why = format!("{inner}: duplicate key: the spec names {inner} twice");
            Err(spec_error(inner, why))
        }
        Err(e @ StrictError::NotUtf8 { .. }) => Err(spec_error("", format!("the spec is {e}"))),
        Err(e) => Err(bad_body(&e)),
    }
}

fn job_id(text: &str) -> Result<JobId, ErrorResponse> {
    text.parse().map_err(|_| {
        ErrorResponse(
            ApiError::new(
                ErrorCode::InvalidQueueInput,
                format!("{text:?} is not a full job UUID"),
            )
            .with_input(serde_json::json!({ "job": text })),
        )
    })
}

/// Register and cancel have always answered with their keys in sorted order (they used to be
/// patched as a `Value`); going through a `Value` keeps their bytes what clients have seen.
fn sorted_keys<T: serde::Serialize>(answer: T) -> homebased_shared::error::ApiResult<Value> {
    serde_json::to_value(answer).map_err(ApiError::internal)
}

fn machine(q: MachineParam) -> Result<Option<String>, ErrorResponse> {
    q.map(|Query(q)| q.machine)
        .map_err(|e| ErrorResponse(ApiError::new(ErrorCode::Usage, e.body_text())))
}

/// Where a request goes: this machine's core, or a peer through the one typed client.
enum Route {
    Local,
    Peer(Client, String),
}

impl AppState {
    /// Resolves `?machine=` through the Fleet directory (name, UUID; absent: this machine).
    async fn route(&self, machine: Option<String>) -> Result<Route, ErrorResponse> {
        match machine {
            None => Ok(Route::Local),
            Some(m) => Ok(match self.fleet.peer(&m).await? {
                None => Route::Local,
                Some((client, uuid)) => Route::Peer(client, uuid.to_string()),
            }),
        }
    }

    /// Like [`AppState::route`], but a job that is not local and has no `?machine=` goes to
    /// its saved authority (the route of its remote submit), as SPEC 13 says for show, move
    /// and cancel. Routes exist only where Fleet is on: without it a show, move or cancel
    /// costs no route lookup.
    async fn route_job(&self, machine: Option<String>, job: JobId) -> Result<Route, ErrorResponse> {
        if machine.is_none() && self.fleet.enabled() {
            let saved = crate::fleet::remote::saved_authority(&self.fleet, &self.core, job).await?;
            if let Some((client, uuid)) = saved {
                return Ok(Route::Peer(client, uuid.to_string()));
            }
        }
        self.route(machine).await
    }

    /// A peer's answer; a peer that could not be reached is probed again before its next use.
    async fn via<T>(
        &self,
        machine: &str,
        answer: impl std::future::Future<Output = homebased_shared::error::ApiResult<T>>,
    ) -> homebased_shared::error::ApiResult<T> {
        let answer = answer.await;
        if let Err(e) = &answer {
            if e.code == ErrorCode::MachineUnavailable {
                self.fleet.unreachable(machine);
            }
        }
        answer.map_err(|e| self.fleet.answered_by(machine, e))
    }
}

/// A peer's answer naming the peer (SPEC 13: a forwarded reply carries the machine that
/// answered).
fn from_peer<T>(
    machine: &str,
    answered: homebased_shared::wire::Answered<T>,
) -> homebased_shared::error::ApiResult<homebased_shared::wire::Answered<T>> {
    let machine = machine.parse().map_err(ApiError::internal)?;
    Ok(homebased_shared::wire::Answered {
        machine: Some(machine),
        answer: answered.answer,
    })
}

/// A peer's answer passed on as it came (it names the machine that answered).
fn passed_on<T>(reply: crate::client::Reply<T>) -> ApiResponse
where
    T: DeserializeOwned,
{
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        reply.into_bytes(),
    )
        .into_response())
}

async fn status(State(s): State<AppState>, q: MachineParam) -> ApiResponse {
    let m = machine(q)?;
    json(s.core.status(m).await?)
}

async fn resource_list(State(s): State<AppState>, q: MachineParam) -> ApiResponse {
    match s.route(machine(q)?).await? {
        Route::Local => json(s.core.resource_list().await?),
        Route::Peer(c, m) => passed_on(s.via(&m, c.resource_list(Some(&m))).await?),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ListingQuery {
    machine: Option<String>,
    #[serde(default)]
    view: super::listing::ListingView,
}

async fn job_list(
    State(s): State<AppState>,
    q: Result<Query<ListingQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResponse {
    let Query(q) = q.map_err(|e| ErrorResponse(ApiError::new(ErrorCode::Usage, e.body_text())))?;
    let view = q.view;
    match s.route(q.machine).await? {
        Route::Local => super::listing::local_job_list(&s.core, view).await,
        Route::Peer(c, m) => match view {
            super::listing::ListingView::Full => passed_on(s.via(&m, c.job_list(Some(&m))).await?),
            super::listing::ListingView::Table => {
                passed_on(s.via(&m, c.job_table(Some(&m))).await?)
            }
        },
    }
}

async fn job_show(
    State(s): State<AppState>,
    Path(job): Path<String>,
    q: MachineParam,
) -> ApiResponse {
    let m = machine(q)?;
    let id = job_id(&job)?;
    match s.route_job(m, id).await? {
        Route::Local => json(s.core.job_detail(id).await?),
        Route::Peer(c, m) => json(s.via(&m, c.job_show(id, Some(&m))).await?),
    }
}

/// Socket only: the environment may hold secrets (tokens, keys), which the web listener
/// never serves.
async fn job_environment(State(s): State<AppState>, Path(job): Path<String>) -> ApiResponse {
    let id = job_id(&job)?;
    json(s.core.job_environment(id).await?)
}

/// Local only: a lane is registered on the machine whose daemon runs its commands.
async fn register(State(s): State<AppState>, q: MachineParam, bytes: Bytes) -> ApiResponse {
    let m = machine(q)?;
    let req: RegisterRequest = body(&bytes)?;
    json(sorted_keys(s.core.register(m, req).await?)?)
}

async fn submit(State(s): State<AppState>, bytes: Bytes) -> ApiResponse {
    use crate::fleet::remote::{self, SubmitTarget};
    let req = submit_body(&bytes)?;
    // A spec (or --machine) naming a peer is a remote submit (SPEC 13).
    match remote::target(&s.fleet, &req).await? {
        SubmitTarget::Local => json(s.core.submit(req).await?),
        SubmitTarget::Peer(client, authority) => {
            json(remote::submit(&s.fleet, &s.core, req, client, authority).await?)
        }
    }
}

async fn job_move(
    State(s): State<AppState>,
    Path(job): Path<String>,
    q: MachineParam,
    bytes: Bytes,
) -> ApiResponse {
    let m = machine(q)?;
    let id = job_id(&job)?;
    let req: MoveRequest = body(&bytes)?;
    match s.route_job(m, id).await? {
        Route::Local => json(s.core.move_job(id, req).await?),
        Route::Peer(c, m) => json(from_peer(
            &m,
            s.via(&m, c.job_move(id, Some(&m), &req)).await?,
        )?),
    }
}

async fn job_cancel(
    State(s): State<AppState>,
    Path(job): Path<String>,
    q: MachineParam,
    bytes: Bytes,
) -> ApiResponse {
    let m = machine(q)?;
    let id = job_id(&job)?;
    let req: CancelRequest = body(&bytes)?;
    match s.route_job(m, id).await? {
        Route::Local => json(sorted_keys(s.core.cancel(id, req).await?)?),
        Route::Peer(c, m) => json(sorted_keys(from_peer(
            &m,
            s.via(&m, c.job_cancel(id, Some(&m), &req)).await?,
        )?)?),
    }
}

async fn release(State(s): State<AppState>, q: MachineParam, bytes: Bytes) -> ApiResponse {
    let m = machine(q)?;
    let req: ReleaseRequest = body(&bytes)?;
    match s.route(m).await? {
        Route::Local => json(s.core.release(req).await?),
        Route::Peer(c, m) => json(from_peer(&m, s.via(&m, c.release(Some(&m), &req)).await?)?),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    machine: Option<String>,
    tail: Option<usize>,
    /// The bytes as written, carriage returns not applied.
    #[serde(default)]
    raw: bool,
}

/// A task UUID from the path: full form only.
fn parse_task(task: &str) -> Result<TaskId, ErrorResponse> {
    task.parse().map_err(|_| {
        ErrorResponse(
            ApiError::new(
                ErrorCode::InvalidQueueInput,
                format!("{task:?} is not a full task UUID"),
            )
            .with_input(serde_json::json!({ "task": task })),
        )
    })
}

async fn task_log(
    State(s): State<AppState>,
    Path(task): Path<String>,
    q: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResponse {
    let Query(q) = q.map_err(|e| ErrorResponse(ApiError::new(ErrorCode::Usage, e.body_text())))?;
    let task = parse_task(&task)?;
    match s.route(q.machine).await? {
        Route::Local => json(s.core.task_log(task, q.tail, q.raw).await?),
        Route::Peer(c, m) => json(from_peer(
            &m,
            s.via(&m, c.task_log(task, q.tail, q.raw, Some(&m))).await?,
        )?),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ChunkQuery {
    machine: Option<String>,
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    shift: u64,
}

async fn task_log_chunk(
    State(s): State<AppState>,
    Path(task): Path<String>,
    q: Result<Query<ChunkQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResponse {
    let Query(q) = q.map_err(|e| ErrorResponse(ApiError::new(ErrorCode::Usage, e.body_text())))?;
    let task = parse_task(&task)?;
    let (offset, shift) = (q.offset, q.shift);
    match s.route(q.machine).await? {
        Route::Local => json(s.core.task_log_chunk(task, offset, shift).await?),
        Route::Peer(c, m) => json(from_peer(
            &m,
            s.via(&m, c.task_log_chunk(task, offset, shift, Some(&m)))
                .await?,
        )?),
    }
}

async fn settle(State(s): State<AppState>) -> ApiResponse {
    json(s.core.settle().await?)
}

async fn shutdown_daemon(State(s): State<AppState>) -> ApiResponse {
    let _ = s.shutdown.send(());
    json(ShutdownResult { stopping: true })
}

async fn socket_only() -> (StatusCode, Json<Value>) {
    let e = ApiError::new(
        ErrorCode::Permission,
        "job submit and resource registration run arbitrary commands: use the Unix socket",
    );
    (StatusCode::METHOD_NOT_ALLOWED, Json(e.envelope()))
}

/// `GET /metrics` (both listeners): the core hands over its counters and the gauges' data,
/// the Fleet directory adds its peers, and the text is written here, off the core.
async fn metrics(State(s): State<AppState>) -> ApiResponse {
    let (counters, mut snapshot) = s.core.metrics().await?;
    snapshot.peers = s
        .fleet
        .machines()
        .machines
        .into_iter()
        .filter(|m| m.source != homebased_shared::wire::PeerSource::Local)
        .map(|m| crate::metrics::PeerUp {
            machine: m.machine.map(|id| id.to_string()).unwrap_or_default(),
            name: m.name.or(m.address).unwrap_or_default(),
            up: m.state == homebased_shared::wire::PeerState::Up,
        })
        .collect();
    let text = crate::metrics::render(&counters, &snapshot)
        .map_err(|e| ApiError::internal(format!("cannot write the metrics: {e}")))?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        text,
    )
        .into_response())
}
