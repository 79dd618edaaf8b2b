//! GPU detection at daemon start (SPEC section 7): parse `nvidia-smi -L`, then plan the
//! resource changes. Pure: the daemon runs the probe and applies the plan in one
//! transaction.
//!
//! Detection only ever adds lanes or hands a device to the fallback lane. It never removes
//! anything and never renames or re-indexes a manual registration.

use crate::scheduler::natural_cmp;
use homebased_shared::ids::ResourceId;
use homebased_shared::wire::ResourceOrigin;
use std::collections::BTreeSet;

/// The name of the unindexed lane given when no device can be detected.
pub const FALLBACK_NAME: &str = "gpu0";

/// One `GPU <n>: ...` line of `nvidia-smi -L`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectedGpu {
    pub index: u32,
    /// `GPU-...` when the line carries one: the card's hardware identity ([`identity`]).
    pub uuid: Option<String>,
    /// The text between `GPU <n>:` and `(UUID: ...)`, when not empty.
    pub model: Option<String>,
    /// Its MIG instances, by device number, when the card is split: each is a lane of its
    /// own and the card itself none.
    pub migs: Vec<DetectedMig>,
}

/// One `MIG <profile> Device <m>: (UUID: MIG-...)` line under a card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectedMig {
    pub instance: u32,
    /// `MIG-<uuid>`, or the old `MIG-GPU-<uuid>/<gi>/<ci>`: what `CUDA_VISIBLE_DEVICES` takes.
    pub uuid: String,
    /// `1g.10gb`, `3g.40gb`, ...: kept as written, an unknown name too.
    pub profile: Option<String>,
}

/// Where a detected lane's device is: a whole card, or one MIG instance of a card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MigPlace {
    pub gpu: u32,
    pub instance: u32,
}

/// What running the probe gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The binary does not exist: this machine has no NVIDIA tooling.
    NotInstalled,
    /// It exists but failed (spawn error, non-zero exit, ...), with the reason to log.
    Failed(String),
    /// It ran; an empty list means no usable device and is treated like a failure.
    Listed(Vec<DetectedGpu>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Linux,
    MacOs,
}

/// A registered resource as detection needs to see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingResource {
    pub id: ResourceId,
    pub name: String,
    pub device: Option<u32>,
    pub origin: ResourceOrigin,
    /// The MIG instance a detected slice lane is.
    pub mig: Option<MigPlace>,
    /// A run holds it, in any phase (cleaning and Attention included).
    pub busy: bool,
}

/// The changes to apply, in order, and what to log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DetectionPlan {
    pub changes: Vec<Change>,
    /// Logged as a warning when present; several notes are joined with `; `.
    pub warning: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Register a new lane.
    Add {
        name: String,
        device: Option<u32>,
        origin: ResourceOrigin,
    },
    /// Register a lane for one MIG instance of a split card.
    AddSlice { name: String, place: MigPlace },
    /// Give a device to the unindexed fallback lane. It keeps its id, so jobs pinned to it
    /// and its history stay attached; `new_name` is `gpu<device>` when that name was free.
    AdoptFallback {
        id: ResourceId,
        new_name: Option<String>,
        device: u32,
    },
}

/// Reads `nvidia-smi -L` output. Lines `GPU <n>: <model> (UUID: GPU-...)` give cards; the
/// indented `MIG <profile> Device <m>: (UUID: MIG-...)` lines after a card give its MIG
/// instances (spacing varies between driver versions). "No devices were found", blank lines
/// and anything else are ignored, one line at a time. The result is sorted by index, each
/// index once (the first line wins), and each card's instances by number, each once.
pub fn parse_nvidia_smi_list(stdout: &str) -> Vec<DetectedGpu> {
    let mut gpus: Vec<DetectedGpu> = Vec::new();
    // The card the MIG lines that follow belong to; `None` before any card, or after a
    // duplicate card line (whose instances are not the first card's).
    let mut current: Option<usize> = None;
    for line in stdout.lines() {
        if let Some(gpu) = parse_gpu_line(line) {
            current = if gpus.iter().any(|known| known.index == gpu.index) {
                None
            } else {
                gpus.push(gpu);
                Some(gpus.len() - 1)
            };
            continue;
        }
        let (Some(mig), Some(at)) = (parse_mig_line(line), current) else {
            continue;
        };
        let migs = &mut gpus[at].migs;
        if !migs
            .iter()
            .any(|m| m.instance == mig.instance || m.uuid == mig.uuid)
        {
            migs.push(mig);
        }
    }
    for gpu in &mut gpus {
        gpu.migs.sort_by_key(|m| m.instance);
    }
    gpus.sort_by_key(|gpu| gpu.index);
    gpus
}

fn parse_mig_line(line: &str) -> Option<DetectedMig> {
    let rest = line.trim_start().strip_prefix("MIG")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let (profile, rest) = rest.split_once("Device")?;
    let (instance, rest) = rest.split_once(':')?;
    let instance = instance.trim();
    if instance.is_empty() || !instance.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let instance = instance.parse().ok()?;
    let (_, tail) = rest.split_once("(UUID:")?;
    let (uuid, _) = tail.split_once(')')?;
    let uuid = uuid.trim();
    let valid = uuid.len() > "MIG-".len()
        && uuid.starts_with("MIG-")
        && uuid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'/');
    if !valid {
        return None;
    }
    let profile = profile.trim();
    Some(DetectedMig {
        instance,
        uuid: uuid.to_string(),
        profile: (!profile.is_empty()).then(|| profile.to_string()),
    })
}

fn parse_gpu_line(line: &str) -> Option<DetectedGpu> {
    let rest = line.trim_start().strip_prefix("GPU ")?;
    let (index, described) = rest.split_once(':')?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let index = index.parse().ok()?;
    let uuid = rest
        .split_once("(UUID: ")
        .and_then(|(_, tail)| tail.split_once(')'))
        .map(|(uuid, _)| uuid.trim().to_string())
        .filter(|uuid| !uuid.is_empty());
    let model = described
        .split_once("(UUID:")
        .map_or(described, |(model, _)| model)
        .trim();
    let model = (!model.is_empty()).then(|| model.to_string());
    Some(DetectedGpu {
        index,
        uuid,
        model,
        migs: Vec::new(),
    })
}

/// Plans the resource changes for this start.
///
/// On macOS the probe is not consulted: the machine gets an unindexed `gpu0`.
pub fn plan(
    platform: Platform,
    existing: &[ExistingResource],
    probe: &ProbeOutcome,
) -> DetectionPlan {
    match (platform, probe) {
        (Platform::MacOs, _) | (Platform::Linux, ProbeOutcome::NotInstalled) => {
            ensure_fallback(existing)
        }
        (Platform::Linux, ProbeOutcome::Failed(reason)) => warn(format!(
            "GPU detection failed ({reason}); resources unchanged until a later start"
        )),
        (Platform::Linux, ProbeOutcome::Listed(gpus)) if gpus.is_empty() => warn(
            "nvidia-smi listed no usable device; resources unchanged until a later start"
                .to_string(),
        ),
        (Platform::Linux, ProbeOutcome::Listed(gpus)) => plan_detected(existing, gpus),
    }
}

fn warn(message: String) -> DetectionPlan {
    DetectionPlan {
        changes: Vec::new(),
        warning: Some(message),
    }
}

/// Adds the unindexed fallback unless one exists, or an indexed lane exists (the fallback
/// would be a second lane for a GPU that already has one).
fn ensure_fallback(existing: &[ExistingResource]) -> DetectionPlan {
    let has_fallback = existing
        .iter()
        .any(|r| r.origin == ResourceOrigin::Fallback);
    let has_indexed = existing
        .iter()
        .any(|r| r.device.is_some() || r.origin == ResourceOrigin::Detected);
    if has_fallback || has_indexed {
        return DetectionPlan::default();
    }
    if existing.iter().any(|r| r.name == FALLBACK_NAME) {
        return warn(format!(
            "no fallback {FALLBACK_NAME} added: a manual resource already has that name"
        ));
    }
    DetectionPlan {
        changes: vec![Change::Add {
            name: FALLBACK_NAME.to_string(),
            device: None,
            origin: ResourceOrigin::Fallback,
        }],
        warning: None,
    }
}

/// A successful listing: hand the first device to a waiting fallback, then add every
/// device that has no lane yet.
fn plan_detected(existing: &[ExistingResource], gpus: &[DetectedGpu]) -> DetectionPlan {
    let mut names: BTreeSet<String> = existing.iter().map(|r| r.name.clone()).collect();
    let mut used_devices: BTreeSet<u32> = existing.iter().filter_map(|r| r.device).collect();
    let mut changes = Vec::new();
    let mut notes = Vec::new();

    // A fallback that already carries a device was adopted by an earlier start.
    let fallback = existing
        .iter()
        .filter(|r| r.origin == ResourceOrigin::Fallback && r.device.is_none())
        .min_by(|a, b| natural_cmp(&a.name, &b.name));
    if let Some(fallback) = fallback {
        // Its run (in any phase, cleanup and Attention included) was started with no
        // device: handing it one now would misdescribe that run, so wait for a later start.
        if fallback.busy {
            return warn(format!(
                "GPU detection waits: fallback {} has a run; resources unchanged until a later start",
                fallback.name
            ));
        }
        // A split card is its slices' lanes: the unindexed fallback cannot stand for one.
        let whole = |gpu: &&DetectedGpu| gpu.migs.is_empty() && !used_devices.contains(&gpu.index);
        match gpus.iter().find(whole) {
            Some(first) => {
                let wanted = gpu_name(first.index);
                let new_name =
                    (wanted != fallback.name && !names.contains(&wanted)).then_some(wanted);
                if let Some(new_name) = &new_name {
                    names.remove(&fallback.name);
                    names.insert(new_name.clone());
                }
                used_devices.insert(first.index);
                changes.push(Change::AdoptFallback {
                    id: fallback.id,
                    new_name,
                    device: first.index,
                });
            }
            None => notes.push(format!(
                "fallback {} kept without a device: every detected device already has a resource",
                fallback.name
            )),
        }
    }

    let used_slices: BTreeSet<MigPlace> = existing.iter().filter_map(|r| r.mig).collect();
    for gpu in gpus {
        // A split card gets one lane per MIG instance and none of its own.
        for mig in &gpu.migs {
            let place = MigPlace {
                gpu: gpu.index,
                instance: mig.instance,
            };
            if used_slices.contains(&place) {
                continue;
            }
            let name = slice_name(place);
            if names.contains(&name) {
                notes.push(format!(
                    "MIG instance {}:{} not added: the name {name} is already taken",
                    place.gpu, place.instance
                ));
                continue;
            }
            names.insert(name.clone());
            changes.push(Change::AddSlice { name, place });
        }
        if !gpu.migs.is_empty() || used_devices.contains(&gpu.index) {
            continue;
        }
        let name = gpu_name(gpu.index);
        // Manual registrations are never renamed, so a clash leaves this device unlisted.
        if names.contains(&name) {
            notes.push(format!(
                "device {} not added: the name {name} is already taken",
                gpu.index
            ));
            continue;
        }
        names.insert(name.clone());
        used_devices.insert(gpu.index);
        changes.push(Change::Add {
            name,
            device: Some(gpu.index),
            origin: ResourceOrigin::Detected,
        });
    }

    DetectionPlan {
        changes,
        warning: (!notes.is_empty()).then(|| notes.join("; ")),
    }
}

fn gpu_name(index: u32) -> String {
    format!("gpu{index}")
}

/// `gpu<n>-mig<m>`: a name of its own per slice, never renamed (a lane with a run in any
/// phase keeps its name whatever the layout becomes).
pub fn slice_name(place: MigPlace) -> String {
    format!("gpu{}-mig{}", place.gpu, place.instance)
}

pub mod allocation;
pub mod identity;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
