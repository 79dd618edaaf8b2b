//! GPU detection at daemon start: run the probe (the I/O), let [`crate::detection::plan`]
//! decide (pure), apply the plan in one transaction.

use crate::detection::{self, allocation, Change, ExistingResource, Platform, ProbeOutcome};
use crate::store::{resources, runs, Store};
use homebased_shared::error::ApiResult;
use homebased_shared::wire::{LanesFrom, LanesSource};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long `nvidia-smi -L` may take before it counts as failed.
const PROBE_BOUND: Duration = Duration::from_secs(30);

/// The probe binary: `HOMEBASED_NVIDIA_SMI` (tests use a fake), else `nvidia-smi` on `PATH`.
pub fn probe_program() -> String {
    std::env::var("HOMEBASED_NVIDIA_SMI")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "nvidia-smi".into())
}

pub fn probe() -> ProbeOutcome {
    let program = probe_program();
    let child = Command::new(&program)
        .arg("-L")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ProbeOutcome::NotInstalled,
        Err(e) => return ProbeOutcome::Failed(format!("cannot run {program}: {e}")),
    };
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() > PROBE_BOUND => {
                let _ = child.kill();
                let _ = child.wait();
                return ProbeOutcome::Failed(format!(
                    "{program} -L did not finish within {PROBE_BOUND:?}"
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return ProbeOutcome::Failed(format!("waiting for {program}: {e}")),
        }
    }
    match child.wait_with_output() {
        Ok(out) if out.status.success() => ProbeOutcome::Listed(detection::parse_nvidia_smi_list(
            &String::from_utf8_lossy(&out.stdout),
        )),
        Ok(out) => ProbeOutcome::Failed(format!(
            "{program} -L exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => ProbeOutcome::Failed(format!("reading {program} output: {e}")),
    }
}

fn platform() -> Platform {
    if cfg!(target_os = "macos") {
        Platform::MacOs
    } else {
        Platform::Linux
    }
}

/// Detects resources and applies the plan; answers where the lanes came from. Manual
/// registrations are never changed. Where the daemon's environment sets
/// `CUDA_VISIBLE_DEVICES`, only the GPUs it selects are given lanes
/// ([`detection::allocation`]).
pub fn detect(store: &mut Store) -> ApiResult<LanesFrom> {
    let visible = std::env::var(allocation::VARIABLE).ok();
    let mut outcome = match platform() {
        Platform::MacOs => ProbeOutcome::NotInstalled,
        Platform::Linux => probe(),
    };
    let mut warnings = Vec::new();
    // An allocation that selects no GPU makes no lane for one (a run could otherwise be
    // handed a GPU outside it); its warning says why, in place of "listed no device".
    let mut selected_nothing = false;
    if let (Some(visible), ProbeOutcome::Listed(listed)) = (&visible, &outcome) {
        let allocated = allocation::select(visible, listed);
        warnings.extend(allocated.warning);
        selected_nothing = allocated.gpus.is_empty() && !listed.is_empty();
        outcome = ProbeOutcome::Listed(allocated.gpus);
    }
    store.write(|tx| {
        let holding = runs::list_holding(tx)?;
        let existing: Vec<ExistingResource> = resources::list(tx)?
            .into_iter()
            .map(|r| ExistingResource {
                busy: holding.iter().any(|run| run.holds(r.id)),
                id: r.id,
                name: r.name,
                device: r.device,
                origin: r.origin,
                mig: r.mig,
            })
            .collect();
        let plan = detection::plan(platform(), &existing, &outcome);
        if let (Some(visible), ProbeOutcome::Listed(allocated)) = (&visible, &outcome) {
            warnings.extend(outside_the_allocation(visible, &existing, allocated));
        }
        if !selected_nothing {
            warnings.extend(plan.warning.clone());
        }
        for warning in &warnings {
            tracing::warn!("GPU detection: {warning}");
        }
        for change in plan.changes {
            match change {
                Change::Add {
                    name,
                    device,
                    origin,
                } => {
                    resources::insert(tx, &name, device, origin)?;
                    tracing::info!(%name, ?device, origin = origin.as_str(), "resource detected");
                }
                Change::AddSlice { name, place } => {
                    resources::insert_slice(tx, &name, place)?;
                    tracing::info!(%name, gpu = place.gpu, instance = place.instance, "MIG resource detected");
                }
                Change::AdoptFallback {
                    id,
                    new_name,
                    device,
                } => {
                    resources::adopt(tx, id, new_name.as_deref(), device)?;
                    tracing::info!(%id, device, "fallback resource adopted the first detected GPU");
                }
            }
        }
        if let ProbeOutcome::Listed(gpus) = &outcome {
            identify(tx, gpus)?;
        }
        Ok(())
    })?;
    Ok(LanesFrom {
        source: if visible.is_some() {
            LanesSource::CudaVisibleDevices
        } else {
            LanesSource::NvidiaSmi
        },
        cuda_visible_devices: visible,
        warning: (!warnings.is_empty()).then(|| warnings.join("; ")),
    })
}

/// A warning naming the detected lanes an earlier start registered whose GPU this
/// allocation does not select: detection never removes a lane, so they stay, and a home
/// shared between allocations would still hand them out. A home of its own per allocation
/// (docs/ARCHITECTURE.md, "Inside an allocation") has none.
fn outside_the_allocation(
    visible: &str,
    existing: &[ExistingResource],
    allocated: &[detection::DetectedGpu],
) -> Option<String> {
    let outside: Vec<&str> = existing
        .iter()
        .filter(|r| r.origin == homebased_shared::wire::ResourceOrigin::Detected)
        .filter(|r| match (r.device, r.mig) {
            (Some(index), _) => !allocated.iter().any(|gpu| gpu.index == index),
            (None, Some(place)) => !allocated.iter().any(|gpu| {
                gpu.index == place.gpu && gpu.migs.iter().any(|m| m.instance == place.instance)
            }),
            (None, None) => false,
        })
        .map(|r| r.name.as_str())
        .collect();
    (!outside.is_empty()).then(|| {
        format!(
            "lanes {} were detected at an earlier start but their GPUs are outside {}={visible:?}; \
             they stay registered: remove them, or give this allocation a home of its own",
            outside.join(", "),
            allocation::VARIABLE
        )
    })
}

/// Records or checks which card each detected lane's index is; a changed card is flagged
/// and logged, never taken as the lane's card.
fn identify(tx: crate::store::Db, gpus: &[detection::DetectedGpu]) -> ApiResult<()> {
    use detection::identity::{self, Identity, KnownLane, Place};
    let lanes: Vec<KnownLane> = resources::list(tx)?
        .into_iter()
        .filter(|r| r.origin == homebased_shared::wire::ResourceOrigin::Detected)
        .filter_map(|r| {
            let place = match (r.device, r.mig) {
                (Some(index), _) => Place::Card(index),
                (None, Some(slice)) => Place::Slice(slice),
                (None, None) => return None,
            };
            Some(KnownLane {
                id: r.id,
                place,
                recorded: r.gpu.map(|g| Identity {
                    uuid: g.uuid,
                    model: g.model,
                    changed: g.changed,
                }),
                name: r.name,
            })
        })
        .collect();
    for lane in &lanes {
        if let Place::Slice(place) = lane.place {
            let card = gpus
                .iter()
                .find(|g| {
                    g.index == place.gpu && g.migs.iter().any(|m| m.instance == place.instance)
                })
                .and_then(|g| g.uuid.as_deref());
            resources::set_mig_card(tx, lane.id, card)?;
        }
    }
    for change in identity::check(&lanes, gpus) {
        if let Some(warning) = &change.warning {
            tracing::warn!("GPU identity: {warning}");
        }
        let identity = change.identity;
        resources::set_gpu(
            tx,
            change.id,
            &resources::GpuIdentity {
                uuid: identity.uuid,
                model: identity.model,
                changed: identity.changed,
            },
        )?;
    }
    Ok(())
}
