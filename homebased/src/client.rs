//! The one client of the `/v1` API, over the Unix socket (the CLI) or TCP (Fleet forwarding,
//! with the peer's bearer token). One typed method per route: it sends the route's request
//! type and reads the answer through [`Versioned`], so a caller never builds a body or reads
//! a key by hand.
//!
//! - [`transport`]: HTTP/1.1 over either stream, the retry rule and the error mapping.

mod transport;

pub use transport::Retry;

use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::ids::{JobId, MachineId, TaskId, ThreadId};
use homebased_shared::wire::{
    body_too_large, AddPeerRequest, Answered, CancelRequest, CancelResult, DaemonStatus,
    FleetEvents, FleetSubmitRequest, Identity, JobDetail, JobEnvironment, JobList, MachineList,
    MachineView, MoveRequest, MoveResult, PeerRequest, RegisterRequest, ReleaseRequest,
    ReleaseResult, RemovedPeer, ResourceList, ResourceView, Settled, ShutdownResult, SubmitRequest,
    SubmitResult, TaskLog, TaskLogChunk, ThreadEvents, Versioned, MAX_BODY_BYTES,
};
use hyper::body::Bytes;
use hyper::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::marker::PhantomData;
use std::path::PathBuf;
use transport::Endpoint;

#[derive(Clone)]
pub struct Client {
    endpoint: Endpoint,
    /// Sent as `Authorization: Bearer <token>` on every request (a Fleet peer's token).
    token: Option<String>,
    /// Sent as `X-Homebased-Origin` when this daemon forwards a request to a peer.
    origin: Option<MachineId>,
    /// How long the daemon has to answer: [`transport::SOCKET_DEADLINE`] on the socket, a
    /// TCP peer [`transport::PEER_DEADLINE`] unless a long poll asks for more.
    deadline: std::time::Duration,
}

/// An answer still in the bytes it came in, for callers that may not need it decoded: the
/// CLI prints a long listing under `--json` as is, and a forwarding daemon passes it on.
pub struct Reply<T> {
    bytes: Bytes,
    answer: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Reply<T> {
    /// The answer exactly as the daemon sent it (compact JSON, `api_version` included).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn decode(&self) -> ApiResult<T> {
        decode(&self.bytes)
    }

    /// [`Reply::bytes`], kept.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }
}

impl Client {
    /// The daemon of a state home, on its socket.
    pub fn socket(path: PathBuf) -> Client {
        Client {
            endpoint: Endpoint::Socket(path),
            token: None,
            origin: None,
            deadline: transport::SOCKET_DEADLINE,
        }
    }

    /// The same daemon with another bound on each answer (`daemon status` asks for a short one).
    pub fn with_deadline(mut self, deadline: std::time::Duration) -> Client {
        self.deadline = deadline;
        self
    }

    /// A daemon's TCP listener at `http://host[:port]` or `host[:port]` (default port 7677).
    pub fn tcp(address: &str) -> Client {
        Client {
            endpoint: Endpoint::tcp(address),
            token: None,
            origin: None,
            deadline: transport::PEER_DEADLINE,
        }
    }

    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        self.token = Some(token.into());
        self
    }

    /// Marks every request as forwarded by the machine `origin`.
    pub fn with_origin(mut self, origin: MachineId) -> Client {
        self.origin = Some(origin);
        self
    }

    /// A remote submit to the authority (SPEC 13). Resent after a lost connection: submit is
    /// idempotent on the job UUID there.
    pub async fn fleet_submit(&self, req: &FleetSubmitRequest) -> ApiResult<SubmitResult> {
        let body = encode_body(req, true)?;
        decode(
            &self
                .send(Method::POST, "/v1/fleet/jobs", Some(body), Retry::Safe)
                .await?,
        )
    }

    /// The origin's pull: the events of its remote jobs after `after`, waiting up to `wait`
    /// for one to exist. The peer gets `wait` plus the usual bound to answer.
    pub async fn fleet_events(
        &self,
        origin: MachineId,
        after: u64,
        wait: std::time::Duration,
    ) -> ApiResult<FleetEvents> {
        let (origin, after) = (origin.to_string(), after.to_string());
        let wait_text = humantime::format_duration(wait).to_string();
        let query = [
            ("origin", Some(origin.as_str())),
            ("after", Some(after.as_str())),
            ("wait", Some(wait_text.as_str())),
        ];
        let path = path("/v1/fleet/events", &query);
        let bytes = Client {
            endpoint: self.endpoint.clone(),
            token: self.token.clone(),
            origin: self.origin,
            deadline: wait + transport::PEER_DEADLINE,
        }
        .send(Method::GET, &path, None, Retry::Safe)
        .await?;
        decode(&bytes)
    }

    /// A thread's events after the cursor `after` (absent: from its first), waiting up to
    /// `wait` for one to be recorded (socket only). The daemon gets `wait` plus the usual
    /// bound to answer. Resent after a lost connection: a read changes nothing.
    pub async fn thread_events(
        &self,
        thread: ThreadId,
        after: Option<&str>,
        wait: std::time::Duration,
    ) -> ApiResult<ThreadEvents> {
        let wait_text = humantime::format_duration(wait).to_string();
        let query = [("after", after), ("wait", Some(wait_text.as_str()))];
        let path = path(&format!("/v1/threads/{thread}/events"), &query);
        let bytes = Client {
            deadline: wait + self.deadline,
            ..self.clone()
        }
        .send(Method::GET, &path, None, Retry::Safe)
        .await?;
        decode(&bytes)
    }

    pub async fn identity(&self) -> ApiResult<Identity> {
        self.get("/v1/fleet/identity").await
    }

    pub async fn fleet_machines(&self) -> ApiResult<MachineList> {
        self.get("/v1/fleet/machines").await
    }

    /// Resent after a lost connection: adding a known address changes nothing.
    pub async fn fleet_add(&self, req: &AddPeerRequest) -> ApiResult<MachineView> {
        self.post("/v1/fleet/machines", req, Retry::Safe).await
    }

    /// Resent after a lost connection; a second removal answers `machine_not_found`.
    pub async fn fleet_remove(&self, req: &PeerRequest) -> ApiResult<RemovedPeer> {
        self.post("/v1/fleet/machines/remove", req, Retry::Once)
            .await
    }

    pub async fn fleet_probe(&self, req: &PeerRequest) -> ApiResult<Identity> {
        self.post("/v1/fleet/probe", req, Retry::Safe).await
    }

    pub async fn status(&self) -> ApiResult<DaemonStatus> {
        self.get("/v1/status").await
    }

    pub async fn resource_list(&self, machine: Option<&str>) -> ApiResult<Reply<ResourceList>> {
        self.get_reply(&path("/v1/resources", &[("machine", machine)]))
            .await
    }

    pub async fn job_list(&self, machine: Option<&str>) -> ApiResult<Reply<JobList>> {
        self.get_reply(&path("/v1/jobs", &[("machine", machine)]))
            .await
    }

    /// The listing with only the fields of the human table (`view=table`), whole: what a
    /// daemon passes on from a peer; a script's `--json` gets every field.
    pub async fn job_table(
        &self,
        machine: Option<&str>,
    ) -> ApiResult<Reply<serde::de::IgnoredAny>> {
        let query = [("machine", machine), ("view", Some("table"))];
        self.get_reply(&path("/v1/jobs", &query)).await
    }

    /// [`Client::job_table`]'s answer handed to `sink` as it arrives: a person's
    /// `resource jobs` reads each record while the daemon writes the rest
    /// (`cli::render::JobsTable`).
    pub async fn job_table_streamed(
        &self,
        machine: Option<&str>,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> ApiResult<()> {
        let query = [("machine", machine), ("view", Some("table"))];
        self.get_streamed(&path("/v1/jobs", &query), sink).await
    }

    /// [`Client::job_list`]'s answer, exactly as the daemon sends it, handed to `sink` as it
    /// arrives (`resource jobs --json`: 50 MB at 100,000 queued need not be held).
    pub async fn job_list_streamed(
        &self,
        machine: Option<&str>,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> ApiResult<()> {
        self.get_streamed(&path("/v1/jobs", &[("machine", machine)]), sink)
            .await
    }

    pub async fn job_show(&self, job: JobId, machine: Option<&str>) -> ApiResult<JobDetail> {
        self.get(&path(&format!("/v1/jobs/{job}"), &[("machine", machine)]))
            .await
    }

    /// The job's stored environment; socket only.
    pub async fn job_environment(&self, job: JobId) -> ApiResult<JobEnvironment> {
        self.get(&format!("/v1/jobs/{job}/environment")).await
    }

    pub async fn task_log(
        &self,
        task: TaskId,
        tail: Option<usize>,
        raw: bool,
        machine: Option<&str>,
    ) -> ApiResult<Answered<TaskLog>> {
        let tail = tail.map(|n| n.to_string());
        let query = [
            ("tail", tail.as_deref()),
            ("raw", raw.then_some("true")),
            ("machine", machine),
        ];
        self.get(&path(&format!("/v1/tasks/{task}/log"), &query))
            .await
    }

    /// One chunk of a run's log after a follower's place (`resource job log --follow` of a
    /// job on another machine).
    pub async fn task_log_chunk(
        &self,
        task: TaskId,
        offset: u64,
        shift: u64,
        machine: Option<&str>,
    ) -> ApiResult<Answered<TaskLogChunk>> {
        let (offset, shift) = (offset.to_string(), shift.to_string());
        let query = [
            ("offset", Some(offset.as_str())),
            ("shift", Some(shift.as_str())),
            ("machine", machine),
        ];
        self.get(&path(&format!("/v1/tasks/{task}/log/chunk"), &query))
            .await
    }

    /// Not resent after a lost connection: a second lane of the same name would be refused,
    /// hiding whether the first request made it.
    pub async fn register(&self, req: &RegisterRequest) -> ApiResult<ResourceView> {
        self.post("/v1/resources", req, Retry::Once).await
    }

    /// Resent after a lost connection: submit is idempotent on the job UUID.
    /// A body over [`MAX_BODY_BYTES`] is `invalid_spec` here, as the daemon would answer it.
    pub async fn submit(&self, req: &SubmitRequest) -> ApiResult<SubmitResult> {
        let body = encode_body(req, true)?;
        decode(
            &self
                .send(Method::POST, "/v1/jobs", Some(body), Retry::Safe)
                .await?,
        )
    }

    /// Resent after a lost connection, with the same operation id.
    pub async fn job_move(
        &self,
        job: JobId,
        machine: Option<&str>,
        req: &MoveRequest,
    ) -> ApiResult<Answered<MoveResult>> {
        let path = path(&format!("/v1/jobs/{job}/move"), &[("machine", machine)]);
        self.post(&path, req, Retry::Safe).await
    }

    /// Resent after a lost connection, with the same operation id.
    pub async fn job_cancel(
        &self,
        job: JobId,
        machine: Option<&str>,
        req: &CancelRequest,
    ) -> ApiResult<Answered<CancelResult>> {
        let path = path(&format!("/v1/jobs/{job}/cancel"), &[("machine", machine)]);
        self.post(&path, req, Retry::Safe).await
    }

    /// Resent after a lost connection, with the same operation id.
    pub async fn release(
        &self,
        machine: Option<&str>,
        req: &ReleaseRequest,
    ) -> ApiResult<Answered<ReleaseResult>> {
        let path = path("/v1/release", &[("machine", machine)]);
        self.post(&path, req, Retry::Safe).await
    }

    /// Waits until the daemon has run its timers and a scheduling pass after every request
    /// sent before (socket only). Safe to resend: settling twice changes nothing more.
    pub async fn settle(&self) -> ApiResult<Settled> {
        self.post("/v1/internal/settle", &serde_json::json!({}), Retry::Safe)
            .await
    }

    /// `history prune` (socket only). Sent once: a second send would answer only what was
    /// left after the first.
    pub async fn prune(
        &self,
        req: &homebased_shared::wire::PruneRequest,
    ) -> ApiResult<homebased_shared::wire::PruneResult> {
        self.post("/v1/history/prune", req, Retry::Once).await
    }

    /// Asks the daemon to exit (socket only). Sent once: the daemon may be gone before it
    /// answers, and the caller waits for its lock instead.
    pub async fn shutdown(&self) -> ApiResult<ShutdownResult> {
        self.post("/v1/shutdown", &serde_json::json!({}), Retry::Once)
            .await
    }

    /// `GET /metrics`: the Prometheus text exposition, as the daemon wrote it.
    pub async fn metrics(&self) -> ApiResult<String> {
        let bytes = self
            .send(Method::GET, "/metrics", None, Retry::Safe)
            .await?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| ApiError::internal(format!("the metrics are not UTF-8: {e}")))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> ApiResult<T> {
        decode(&self.get_reply::<T>(path).await?.bytes)
    }

    async fn get_reply<T>(&self, path: &str) -> ApiResult<Reply<T>> {
        let bytes = self.send(Method::GET, path, None, Retry::Safe).await?;
        Ok(Reply {
            bytes,
            answer: PhantomData,
        })
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        retry: Retry,
    ) -> ApiResult<T> {
        let body = encode_body(body, false)?;
        decode(&self.send(Method::POST, path, Some(body), retry).await?)
    }
}

/// The request body, refused here as the daemon would refuse its size: the CLI and the
/// daemon share one limit. `submit`: the body carries a spec (`invalid_spec`, else `usage`).
fn encode_body<B: Serialize>(body: &B, submit: bool) -> ApiResult<Bytes> {
    let bytes = serde_json::to_vec(body).map_err(ApiError::internal)?;
    if bytes.len() > MAX_BODY_BYTES {
        return Err(body_too_large(submit, Some(bytes.len())));
    }
    Ok(Bytes::from(bytes))
}

/// Reads an answer through its envelope: a malformed one, or one in another API version, is
/// `internal` (nothing the caller could fix by retrying).
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    serde_json::from_slice::<Versioned<T>>(bytes)
        .map(Versioned::into_answer)
        .map_err(|e| ApiError::internal(format!("unexpected answer from the daemon: {e}")))
}

/// A route with its query: the parameters that are set, percent-encoded.
fn path(route: &str, query: &[(&str, Option<&str>)]) -> String {
    let mut out = route.to_string();
    let mut sep = '?';
    for (key, value) in query {
        if let Some(value) = value {
            out.push(sep);
            out.push_str(key);
            out.push('=');
            out.push_str(&encode(value));
            sep = '&';
        }
    }
    out
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests;
