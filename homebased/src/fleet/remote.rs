//! Remote submit on the origin (SPEC section 13): a spec whose `machine` (or the submit's
//! `--machine`) names a peer is checked for shape here, stored as a route (`pending`), then
//! forwarded to the authority's `POST /v1/fleet/jobs`. A definite answer settles the route,
//! and a retry with the same job UUID and spec answers it again; a lost answer leaves the
//! route `pending` and the retry forwards again (submit is idempotent on the authority).
//!
//! Also the saved authority: `job show|move|cancel` of a job that is not local follow its
//! route.

use super::Fleet;
use crate::client::Client;
use crate::core::CoreHandle;
use crate::store::routes::Answer;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::{JobId, MachineId};
use homebased_shared::spec::{self, SubmitContext};
use homebased_shared::wire::{FleetSubmitRequest, SubmitRequest, SubmitResult};

/// Where a submit goes: this machine, or a peer (its client and UUID).
pub enum SubmitTarget {
    Local,
    Peer(Client, MachineId),
}

/// The machine a submit names: the spec's `machine` and `--machine`, which must agree when
/// both are given. A `machine` that is not a string is left to the spec's own check.
pub async fn target(fleet: &Fleet, req: &SubmitRequest) -> ApiResult<SubmitTarget> {
    let in_spec = req.spec.get("machine").and_then(|m| m.as_str());
    let asked = req.machine.as_deref();
    let resolve = |key: &str| {
        let key = key.to_string();
        async move { fleet.peer(&key).await }
    };
    let chosen = match (in_spec, asked) {
        (None, None) => return Ok(SubmitTarget::Local),
        (Some(m), None) | (None, Some(m)) => resolve(m).await?,
        (Some(s), Some(a)) => {
            let (from_spec, from_flag) = (resolve(s).await?, resolve(a).await?);
            let uuid = |t: &Option<(Client, MachineId)>| t.as_ref().map(|(_, m)| *m);
            if uuid(&from_spec) != uuid(&from_flag) {
                return Err(ApiError::new(
                    ErrorCode::Usage,
                    format!(
                        "--machine {a} and the spec's machine {s:?} name different machines: \
                         give one, or make them agree"
                    ),
                )
                .with_input(
                    serde_json::json!({ "machine": a, "pointer": "/machine", "value": s }),
                ));
            }
            from_flag
        }
    };
    Ok(match chosen {
        None => SubmitTarget::Local,
        Some((client, uuid)) => SubmitTarget::Peer(client, uuid),
    })
}

/// Whether an authority's refusal is about the job itself (its spec, its cwd, its id): a
/// definite answer, stored with the route. Anything else (the link: no token, another
/// machine, a fault, an answer that is no answer) leaves the route as it was.
pub fn definite(e: &ApiError) -> bool {
    use ErrorCode::*;
    matches!(
        e.code,
        InvalidSpec
            | InvalidCwd
            | ExecutableMissing
            | JobConflict
            | ResourceNotFound
            | ThreadMismatch
            | MachineNotFound
            | InvalidQueueInput
    )
}

/// Refusals that prove the authority stored nothing of this request: it refused the
/// request itself before reading the job.
fn refused_the_link(e: &ApiError) -> bool {
    matches!(
        e.code,
        ErrorCode::Permission | ErrorCode::MachineIdentityMismatch | ErrorCode::Usage
    )
}

/// The remote submit itself, on the origin.
pub async fn submit(
    fleet: &Fleet,
    core: &CoreHandle,
    req: SubmitRequest,
    client: Client,
    authority: MachineId,
) -> ApiResult<SubmitResult> {
    if fleet.token().is_none() {
        return Err(no_token());
    }
    // The shape only: the cwd, programs and mounts are the authority's to check.
    let raw = serde_json::to_vec(&req.spec).map_err(ApiError::internal)?;
    let ctx = SubmitContext {
        path: None,
        cwd: "/".into(),
        elsewhere: true,
    };
    let valid = spec::validate(&raw, &ctx)?;
    let job = req.job;
    let (thread, digest) = (valid.spec.thread, valid.digest.clone());
    let (route, created) = core.route_open(job, authority, thread, digest).await?;
    match route.answer {
        Answer::Accepted(v) => return serde_json::from_value(v).map_err(ApiError::internal),
        Answer::Rejected(v) => {
            return Err(serde_json::from_value(v).map_err(ApiError::internal)?);
        }
        Answer::Pending => {}
    }
    fail::fail_point!("fleet.submit-before-forward", |_| std::process::abort());
    let forward = FleetSubmitRequest {
        job,
        origin: fleet.identity().machine,
        authority,
        spec: req.spec,
    };
    let answer = client.fleet_submit(&forward).await;
    if let Err(e) = &answer {
        if e.code == ErrorCode::MachineUnavailable {
            fleet.unreachable(&authority.to_string());
        }
    }
    let settled = match &answer {
        Ok(result) => Some(Answer::Accepted(
            serde_json::to_value(result).map_err(ApiError::internal)?,
        )),
        Err(e) if definite(e) => Some(Answer::Rejected(
            serde_json::to_value(e).map_err(ApiError::internal)?,
        )),
        Err(e) if created && refused_the_link(e) => {
            core.route_forget(job).await?;
            None
        }
        Err(_) => None,
    };
    if let Some(settled) = settled {
        core.route_answered(job, settled).await?;
    }
    fleet.notify_routes();
    answer.map_err(|e| fleet.answered_by(&authority.to_string(), e))
}

fn no_token() -> ApiError {
    ApiError::new(
        ErrorCode::Permission,
        "a remote submit runs commands on another machine: set fleet.token on both machines",
    )
}

/// The authority's side of `POST /v1/fleet/jobs`: refused without a token (a remote
/// submit runs commands), or when it is meant for another machine.
pub async fn accept(
    fleet: &Fleet,
    core: &CoreHandle,
    req: FleetSubmitRequest,
) -> ApiResult<SubmitResult> {
    if !fleet.enabled() {
        return Err(fleet.disabled());
    }
    if fleet.token().is_none() {
        return Err(no_token());
    }
    let me = fleet.identity().machine;
    if req.authority != me {
        return Err(ApiError::new(
            ErrorCode::MachineIdentityMismatch,
            format!(
                "this is machine {me}, not {}: the origin's directory is stale",
                req.authority
            ),
        )
        .with_input(serde_json::json!({ "machine": req.authority, "receiver": me })));
    }
    core.submit_remote(req.job, req.origin, req.spec).await
}

/// The saved authority of a job that is not local: its route's machine, if it has one.
/// A route to a machine no longer in the directory is a clear `machine_not_found`.
pub async fn saved_authority(
    fleet: &Fleet,
    core: &CoreHandle,
    job: JobId,
) -> ApiResult<Option<(Client, MachineId)>> {
    let Some(route) = core.route(job).await? else {
        return Ok(None);
    };
    match fleet.peer(&route.authority.to_string()).await {
        Err(e) if e.code == ErrorCode::MachineNotFound => Err(ApiError::new(
            ErrorCode::MachineNotFound,
            format!(
                "job {job} was submitted to machine {}, which is no longer in the Fleet \
                 directory: add its address again with `homebased fleet add`",
                route.authority
            ),
        )
        .with_input(serde_json::json!({ "job": job, "machine": route.authority }))),
        other => other,
    }
}
