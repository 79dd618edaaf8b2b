//! Resources: `resource list`, `resource register` and `resource release`.

use crate::ids::{AttentionId, JobId, MachineId, OperationId, ResourceId, TaskId};
use crate::queue::{PhaseKind, StopCause};
use crate::time::{serde_rfc3339, Millis};
use serde::{Deserialize, Serialize};

/// How a resource came to exist.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum ResourceOrigin {
    Detected,
    Fallback,
    Manual,
}

impl ResourceOrigin {
    /// The name on the wire: serde's, derived by strum.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::str::FromStr for ResourceOrigin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        crate::queue::variant(s).ok_or_else(|| format!("unknown resource origin {s:?}"))
    }
}

/// A lane's CUDA device: a card's index, or a MIG instance's `MIG-<uuid>` (SPEC section 7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Device {
    Index(u32),
    Mig(String),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Index(index) => write!(f, "{index}"),
            Device::Mig(uuid) => f.write_str(uuid),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceView {
    pub id: ResourceId,
    pub name: String,
    pub device: Option<Device>,
    pub origin: ResourceOrigin,
    pub run: Option<ActiveRunView>,
    /// The card of an indexed detected lane; `null` for unindexed and manual lanes.
    #[serde(default)]
    pub gpu: Option<GpuView>,
}

/// Which card a lane is, and what runs on it (SPEC section 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuView {
    pub uuid: Option<String>,
    pub model: Option<String>,
    /// Its index reported another hardware UUID at a later start: not silently swapped.
    pub changed: bool,
    #[serde(with = "serde_rfc3339::option")]
    pub sampled_at: Option<Millis>,
    /// `null` when the last sample failed (or none was taken yet), with `sample_error`:
    /// never an empty list that would read as "free".
    pub processes: Option<Vec<GpuProcessView>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_error: Option<String>,
    /// The card's state from the last sample (`--query-gpu`); each `null` while unknown:
    /// not sampled yet, the query failed, the driver said `[N/A]` (a MIG slice's utilization)
    /// or the card was not in the answer.
    #[serde(default)]
    pub memory_used_mib: Option<u64>,
    #[serde(default)]
    pub memory_total_mib: Option<u64>,
    #[serde(default)]
    pub utilization_percent: Option<u32>,
    #[serde(default)]
    pub temperature_c: Option<i32>,
    #[serde(default)]
    pub power_w: Option<f64>,
}

/// One compute process on a card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcessView {
    pub pid: u32,
    pub user: Option<String>,
    pub command: Option<String>,
    pub used_memory_mib: Option<u64>,
    /// The queue's run it belongs to; `null` for a foreign process.
    pub queue: Option<QueueProcessOwner>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueProcessOwner {
    pub job: JobId,
    pub task: TaskId,
}

/// The run that currently holds a resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActiveRunView {
    pub job: JobId,
    pub task: TaskId,
    pub run_number: u32,
    pub step: u32,
    pub resume: bool,
    pub phase: PhaseView,
}

/// A run phase with the data that belongs to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "lowercase")]
pub enum PhaseView {
    Launching {
        #[serde(with = "serde_rfc3339")]
        reserved_at: Millis,
    },
    Executing {
        #[serde(with = "serde_rfc3339")]
        started_at: Millis,
    },
    Stopping {
        cause: StopCause,
        #[serde(with = "serde_rfc3339")]
        requested_at: Millis,
        #[serde(with = "serde_rfc3339")]
        started_at: Millis,
    },
    Cleaning {
        attempt: u32,
    },
    Attention {
        id: AttentionId,
        #[serde(serialize_with = "super::sorted_keys::serialize")]
        failure: super::AttentionFailure,
    },
}

impl PhaseView {
    pub fn kind(&self) -> PhaseKind {
        match self {
            PhaseView::Launching { .. } => PhaseKind::Launching,
            PhaseView::Executing { .. } => PhaseKind::Executing,
            PhaseView::Stopping { .. } => PhaseKind::Stopping,
            PhaseView::Cleaning { .. } => PhaseKind::Cleaning,
            PhaseView::Attention { .. } => PhaseKind::Attention,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceList {
    pub machine: MachineId,
    pub resources: Vec<ResourceView>,
    /// Where detection found this machine's GPUs at the daemon's start; absent from a peer
    /// of an older build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lanes_from: Option<LanesFrom>,
}

/// Where the daemon's detection found its GPUs (SPEC section 7): every card `nvidia-smi -L`
/// lists, or only those the daemon's own `CUDA_VISIBLE_DEVICES` selects (inside a Slurm
/// allocation, a container, another queue).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LanesFrom {
    pub source: LanesSource,
    /// The variable's value, when the daemon's environment set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_visible_devices: Option<String>,
    /// What detection warned about at start, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LanesSource {
    /// `nvidia-smi -L`, every card it lists.
    NvidiaSmi,
    /// The cards of `nvidia-smi -L` that `CUDA_VISIBLE_DEVICES` selects.
    CudaVisibleDevices,
}

/// The body of `POST /v1/resources`; the answer is the new lane's [`ResourceView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub name: String,
    #[serde(default)]
    pub device: Option<u32>,
}

/// `POST /v1/release`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    pub operation_id: OperationId,
    pub attention: AttentionId,
}

/// The answer to `resource release`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseResult {
    pub resource: ResourceId,
    pub attention: AttentionId,
}

#[cfg(test)]
mod origin_tests {
    use super::ResourceOrigin;

    #[test]
    fn origins_are_named_as_serde_names_them_and_parse_back() {
        for &origin in <ResourceOrigin as strum::VariantArray>::VARIANTS {
            assert_eq!(
                serde_json::to_value(origin).ok(),
                Some(serde_json::json!(origin.as_str()))
            );
            assert_eq!(origin.as_str().parse::<ResourceOrigin>(), Ok(origin));
        }
        assert_eq!(
            "found".parse::<ResourceOrigin>(),
            Err("unknown resource origin \"found\"".to_string())
        );
    }
}
