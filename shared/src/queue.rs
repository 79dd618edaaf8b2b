//! The queue's vocabulary: levels, preemption modes, stop causes, job states, run statuses
//! and run phases, exactly as SPEC section 4 names them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A level of the queue. `High` serves before `Medium`, then `Low`; the derived order is
/// the serving order's opposite, so `High > Medium > Low`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Low,
    Medium,
    High,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Medium, Priority::Low];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Medium => "medium",
            Priority::High => "high",
        }
    }

    /// The integer stored in SQLite (higher serves first).
    pub fn rank(self) -> i64 {
        match self {
            Priority::Low => 0,
            Priority::Medium => 1,
            Priority::High => 2,
        }
    }

    pub fn from_rank(rank: i64) -> Option<Priority> {
        match rank {
            0 => Some(Priority::Low),
            1 => Some(Priority::Medium),
            2 => Some(Priority::High),
            _ => None,
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "low" => Ok(Priority::Low),
            "medium" => Ok(Priority::Medium),
            "high" => Ok(Priority::High),
            other => Err(format!(
                "priority must be low, medium or high, not {other:?}"
            )),
        }
    }
}

/// What a run allows when strictly higher work wants its resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PreemptMode {
    /// Ask for a checkpoint (`control/yield`) and let the workload exit 75.
    Yield,
    /// Stop it (TERM, grace, KILL) and run the step again from the start later.
    Restart,
    /// Not preemptable once past `restart_within`: the urgent job waits for the step to end.
    Wait,
}

impl PreemptMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptMode::Yield => "yield",
            PreemptMode::Restart => "restart",
            PreemptMode::Wait => "wait",
        }
    }
}

/// Why a run is being stopped. Causes only upgrade: `Yield < Restart < UserCancel`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    Yield,
    Restart,
    UserCancel,
}

impl StopCause {
    pub fn as_str(self) -> &'static str {
        match self {
            StopCause::Yield => "yield",
            StopCause::Restart => "restart",
            StopCause::UserCancel => "user_cancel",
        }
    }

    /// The stronger of two causes: a stop request never weakens.
    pub fn upgrade(self, other: StopCause) -> StopCause {
        self.max(other)
    }
}

impl FromStr for StopCause {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "yield" => Ok(StopCause::Yield),
            "restart" => Ok(StopCause::Restart),
            "user_cancel" => Ok(StopCause::UserCancel),
            other => Err(format!("unknown stop cause {other:?}")),
        }
    }
}

/// The coarse state of a job as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Queued,
    Active,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Active => "active",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled
        )
    }
}

impl FromStr for JobStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "queued" => Ok(JobStatus::Queued),
            "active" => Ok(JobStatus::Active),
            "succeeded" => Ok(JobStatus::Succeeded),
            "failed" => Ok(JobStatus::Failed),
            "cancelled" => Ok(JobStatus::Cancelled),
            other => Err(format!("unknown job state {other:?}")),
        }
    }
}

/// The status of one run attempt in the job's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Preempted,
    Lost,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Preempted => "preempted",
            RunStatus::Lost => "lost",
        }
    }
}

impl FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "queued" => Ok(RunStatus::Queued),
            "running" => Ok(RunStatus::Running),
            "succeeded" => Ok(RunStatus::Succeeded),
            "failed" => Ok(RunStatus::Failed),
            "cancelled" => Ok(RunStatus::Cancelled),
            "preempted" => Ok(RunStatus::Preempted),
            "lost" => Ok(RunStatus::Lost),
            other => Err(format!("unknown run status {other:?}")),
        }
    }
}

/// The phase of the run that holds a resource. A resource with no phase is idle; only an
/// idle resource is free (cleaning and Attention are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseKind {
    Launching,
    Executing,
    Stopping,
    Cleaning,
    Attention,
}

impl PhaseKind {
    /// Every phase, in the order of a run's life.
    pub const ALL: [PhaseKind; 5] = [
        PhaseKind::Launching,
        PhaseKind::Executing,
        PhaseKind::Stopping,
        PhaseKind::Cleaning,
        PhaseKind::Attention,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PhaseKind::Launching => "launching",
            PhaseKind::Executing => "executing",
            PhaseKind::Stopping => "stopping",
            PhaseKind::Cleaning => "cleaning",
            PhaseKind::Attention => "attention",
        }
    }
}

impl FromStr for PhaseKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "launching" => Ok(PhaseKind::Launching),
            "executing" => Ok(PhaseKind::Executing),
            "stopping" => Ok(PhaseKind::Stopping),
            "cleaning" => Ok(PhaseKind::Cleaning),
            "attention" => Ok(PhaseKind::Attention),
            other => Err(format!("unknown run phase {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_only_upgrade() {
        assert_eq!(
            StopCause::Yield.upgrade(StopCause::Restart),
            StopCause::Restart
        );
        assert_eq!(
            StopCause::UserCancel.upgrade(StopCause::Yield),
            StopCause::UserCancel
        );
    }

    #[test]
    fn priorities_round_trip_through_rank() {
        for p in Priority::ALL {
            assert_eq!(Priority::from_rank(p.rank()), Some(p));
            assert_eq!(p.as_str().parse::<Priority>(), Ok(p));
        }
        assert!(Priority::High > Priority::Low);
    }
}
