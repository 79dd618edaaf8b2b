//! `resource job submit`: validate the spec, then store the job at the back of its level.
//! Idempotent on the job UUID: the same id with the same canonical spec returns the job as it
//! is now; another spec is `job_conflict`.

use super::dependencies;
use super::Core;
use crate::store::dependencies as store_dependencies;
use crate::store::{jobs, resources, runs};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::ResourceId;
use homebased_shared::spec::{self, SubmitContext};
use homebased_shared::wire::{SubmitRequest, SubmitResult};

impl Core {
    pub(super) fn submit(&mut self, req: SubmitRequest) -> ApiResult<SubmitResult> {
        self.submit_from(req, None)
    }

    /// A submit, from this machine (`origin` `None`) or, through Fleet, from the machine
    /// `origin`, which the job is stored with: its events are then the origin's to deliver.
    pub(super) fn submit_from(
        &mut self,
        req: SubmitRequest,
        origin: Option<homebased_shared::ids::MachineId>,
    ) -> ApiResult<SubmitResult> {
        let raw = serde_json::to_vec(&req.spec).map_err(ApiError::internal)?;
        let request_digest = request_digest(&raw, &req.submitter.cwd);
        // A retry of the very request that created the job (a lost reply) gets the job as it
        // is now, even if the submitter's cwd or program has gone since.
        if let Some(job) = jobs::find_request(self.store.db(), req.job, &request_digest)? {
            return Ok(self.submitted(&job));
        }
        let ctx = SubmitContext {
            path: req.submitter.path.clone(),
            cwd: req.submitter.cwd.clone(),
            elsewhere: false,
        };
        let valid = spec::validate(&raw, &ctx)?;
        if let Some(machine) = &valid.spec.machine {
            self.check_local_machine(Some(machine))?;
        }
        if let Some(parent) = req.submitter.parent_task {
            if !req.allow_other_thread {
                self.check_parent_thread(parent, valid.spec.thread)?;
            }
        }
        let db = self.store.db();
        let target = match &valid.spec.resource {
            None => None,
            Some(name) => Some(
                resources::find(db, name)?
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::ResourceNotFound,
                            format!("no resource {name:?} on this machine to pin the job to"),
                        )
                        .with_input(serde_json::json!({ "pointer": "/resource", "value": name }))
                    })?
                    .id,
            ),
        };
        let lanes = resources::list(db)?;
        let target_lanes = lane_set(db, &valid.spec.resources)?;
        check_gpus(valid.spec.gpus, &lanes)?;
        // The queue owns the run variables: inherited copies are never stored.
        let captured = req.submitter.env.as_ref().map(|env| {
            env.iter()
                .filter(|(name, _)| !homebased_shared::rundir::is_run_variable(name))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<std::collections::BTreeMap<_, _>>()
        });
        let id = req.job;
        let machine = self.machine;
        let mut cancelled = false;
        // Not fsynced: its answer is held until the next durable commit, which is usually the
        // pass's launch of this very job right after (`Core::answer`), so that a start costs
        // one fsync of the WAL, not two.
        let job = self.store.write_unsynced(|tx| {
            if let Some(existing) = jobs::get(tx, id)? {
                if existing.digest != valid.digest {
                    return Err(ApiError::new(
                        ErrorCode::JobConflict,
                        format!("job {id} was already submitted with a different spec"),
                    )
                    .with_input(serde_json::json!({ "job": id })));
                }
                return Ok(existing);
            }
            // Only jobs that exist can be named, so no cycle can be built.
            let failed_dependency = dependencies::check_after(tx, &valid.spec.after)?;
            jobs::insert(
                tx,
                &jobs::NewJob {
                    id,
                    thread: valid.spec.thread,
                    name: &valid.spec.name,
                    priority: valid.spec.priority,
                    target,
                    gpus: valid.spec.gpus,
                    target_lanes: &target_lanes,
                    time_limit: valid.spec.time_limit,
                    spec: &valid.canonical,
                    digest: &valid.digest,
                    request_digest: &request_digest,
                    env_path: req.submitter.path.as_deref(),
                    env_home: req.submitter.home.as_deref(),
                    env: captured.as_ref(),
                    steps: valid.spec.steps.len() as u32,
                    origin,
                },
            )?;
            store_dependencies::insert(tx, id, &valid.spec.after)?;
            // A job named in `after` already failed or was cancelled: this one never can
            // start, and is cancelled as it would have been at that job's end.
            if let Some(cause) = failed_dependency {
                dependencies::cancel_for(tx, machine, id, cause)?;
                cancelled = true;
            }
            jobs::require(tx, id)
        })?;
        if cancelled {
            // Its `JOB_CANCELLED` is pending.
            self.wake_delivery();
        }
        // A finished job's spec may still be kept (`Specs::forget_finished` looks only now
        // and then), and retention may have pruned that job: an id submitted again is then a
        // new job, whose spec is not the kept one.
        self.specs.forget(job.id);
        self.mark_dirty();
        Ok(self.submitted(&job))
    }

    fn submitted(&self, job: &jobs::Job) -> SubmitResult {
        SubmitResult {
            job: job.id,
            machine: self.machine,
            state: job.status().as_str().into(),
            priority: job.priority,
            position: job.state.position(),
        }
    }

    /// A run submitting follow-up work keeps its events in the same thread.
    fn check_parent_thread(
        &self,
        parent: homebased_shared::ids::TaskId,
        thread: homebased_shared::ids::ThreadId,
    ) -> ApiResult<()> {
        let db = self.store.db();
        let Some(run) = runs::get(db, parent)? else {
            return Ok(());
        };
        let parent_job = jobs::require(db, run.job)?;
        if parent_job.thread != thread {
            return Err(ApiError::new(
                ErrorCode::ThreadMismatch,
                format!(
                    "this submission comes from run {parent} of a job in thread {}; use that \
                     thread or pass --allow-other-thread",
                    parent_job.thread
                ),
            )
            .with_input(serde_json::json!({
                "pointer": "/thread",
                "value": thread,
                "parent_thread": parent_job.thread,
            })));
        }
        Ok(())
    }

    /// `--machine` (or the spec's `machine`) names this machine, by UUID or name; any other
    /// machine is unknown until Fleet is enabled.
    pub(super) fn check_local_machine(&self, machine: Option<&str>) -> ApiResult<()> {
        match machine {
            None => Ok(()),
            Some(m) if m == self.machine.to_string() || m == self.machine_name => Ok(()),
            Some(m) => Err(ApiError::new(
                ErrorCode::MachineNotFound,
                format!("no machine {m:?} is known here (Fleet is not enabled)"),
            )
            .with_input(serde_json::json!({ "machine": m }))),
        }
    }
}

/// The digest of a submission as sent: the spec's JSON (keys sorted by `serde_json`) and the
/// working directory a relative `cwd` is taken from.
fn request_digest(spec: &[u8], cwd: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(spec);
    h.update([0]);
    h.update(cwd.as_os_str().as_encoded_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The lanes of a spec's `resources`, resolved on this machine in the order given: each must
/// exist, be a distinct lane once names and UUIDs are resolved, and be a whole card (a
/// process sees one MIG slice at most).
fn lane_set(db: crate::store::Db, names: &[String]) -> ApiResult<Vec<ResourceId>> {
    let mut set: Vec<ResourceId> = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let pointer = format!("/resources/{i}");
        let input = serde_json::json!({ "pointer": pointer, "value": name });
        // Resolved as `resource` is: a name, or a UUID in any case.
        let lane = resources::find(db, name)?.ok_or_else(|| {
            ApiError::new(
                ErrorCode::ResourceNotFound,
                format!("{pointer}: no resource {name:?} on this machine to pin the job to"),
            )
            .with_input(input.clone())
        })?;
        if set.contains(&lane.id) {
            return Err(ApiError::new(
                ErrorCode::InvalidSpec,
                format!("{pointer}: names {} again: each lane once", lane.name),
            )
            .with_input(input));
        }
        if names.len() > 1 && lane.mig.is_some() {
            return Err(ApiError::new(
                ErrorCode::InvalidSpec,
                format!(
                    "{pointer}: {} is a MIG slice, and a process sees one slice at most: a job \
                     with gpus above 1 runs on whole GPUs",
                    lane.name
                ),
            )
            .with_input(input));
        }
        set.push(lane.id);
    }
    Ok(set)
}

/// `gpus` against this machine's lanes (SPEC section 3): a job asking for more than it has
/// could never start. A job with gpus above 1 counts whole cards only.
fn check_gpus(gpus: u32, lanes: &[resources::Resource]) -> ApiResult<()> {
    if gpus <= 1 {
        return Ok(());
    }
    let whole: Vec<&str> = lanes
        .iter()
        .filter(|r| r.mig.is_none())
        .map(|r| r.name.as_str())
        .collect();
    if gpus as usize <= whole.len() {
        return Ok(());
    }
    let has = match whole.len() {
        0 => "no lane of a whole GPU".to_string(),
        1 => format!("1 lane of a whole GPU ({})", whole[0]),
        n => format!("{n} lanes of whole GPUs ({})", whole.join(", ")),
    };
    Err(ApiError::new(
        ErrorCode::InvalidSpec,
        format!("/gpus: asks for {gpus} GPUs at once, but this machine has {has}"),
    )
    .with_input(serde_json::json!({ "pointer": "/gpus", "value": gpus })))
}
