//! The queue's vocabulary: levels, preemption modes, stop causes, job states, run statuses
//! and run phases, exactly as SPEC section 4 names them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use strum::{IntoStaticStr, VariantArray};

/// The variant whose wire name is `s`: the one parse of the enums below, so that a name is
/// written once (by the derive, checked against serde's by the tests).
pub fn variant<T>(s: &str) -> Option<T>
where
    T: VariantArray + Copy + Into<&'static str>,
{
    T::VARIANTS.iter().copied().find(|v| (*v).into() == s)
}

/// A level of the queue. `High` serves before `Medium`, then `Low`; the derived order is
/// the serving order's opposite, so `High > Medium > Low`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
    IntoStaticStr,
    VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Priority {
    Low,
    Medium,
    High,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Medium, Priority::Low];

    /// The name on the wire, the store and the CLI: serde's, derived by strum.
    pub fn as_str(self) -> &'static str {
        self.into()
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
        variant(s).ok_or_else(|| format!("priority must be low, medium or high, not {s:?}"))
    }
}

/// What a run allows when strictly higher work wants its resource.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    IntoStaticStr,
    VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum PreemptMode {
    /// Ask for a checkpoint (`control/yield`) and let the workload exit 75.
    Yield,
    /// Stop it (TERM, grace, KILL) and run the step again from the start later.
    Restart,
    /// Not preemptable once past `restart_within`: the urgent job waits for the step to end.
    Wait,
}

impl PreemptMode {
    /// The name on the wire, the store and the CLI: serde's, derived by strum.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Why a run is being stopped. Causes only upgrade: `Yield < Restart < TimeLimit <
/// UserCancel` (the declaration order, derived): a run past its `time_limit` fails whatever
/// preemption asked of it, and a user's cancel wins over everything.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
    IntoStaticStr,
    VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum StopCause {
    Yield,
    Restart,
    /// The run reached its job's `time_limit`: stopped as a restart is, and its job fails.
    TimeLimit,
    UserCancel,
}

impl StopCause {
    /// The name on the wire, the store and the CLI: serde's, derived by strum.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The stronger of two causes: a stop request never weakens.
    pub fn upgrade(self, other: StopCause) -> StopCause {
        self.max(other)
    }
}

impl FromStr for StopCause {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        variant(s).ok_or_else(|| format!("unknown stop cause {s:?}"))
    }
}

/// The coarse state of a job as stored.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, IntoStaticStr, VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum JobStatus {
    Queued,
    Active,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobStatus {
    /// The name on the wire, the store and the CLI: serde's, derived by strum.
    pub fn as_str(self) -> &'static str {
        self.into()
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
        variant(s).ok_or_else(|| format!("unknown job state {s:?}"))
    }
}

/// The status of one run attempt in the job's history.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, IntoStaticStr, VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
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
    /// The name on the wire, the store and the CLI: serde's, derived by strum.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        variant(s).ok_or_else(|| format!("unknown run status {s:?}"))
    }
}

/// The phase of the run that holds a resource. A resource with no phase is idle; only an
/// idle resource is free (cleaning and Attention are not).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, IntoStaticStr, VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum PhaseKind {
    Launching,
    Executing,
    Stopping,
    Cleaning,
    Attention,
}

impl PhaseKind {
    /// Every phase, in the order of a run's life (the derived list: a new phase is in it).
    pub const ALL: &'static [PhaseKind] = <PhaseKind as VariantArray>::VARIANTS;

    /// The name on the wire, the store and the CLI: serde's, derived by strum.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl FromStr for PhaseKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        variant(s).ok_or_else(|| format!("unknown run phase {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_only_upgrade() {
        use StopCause::*;
        // SPEC section 4: yield < restart < time_limit < user_cancel, whichever came first.
        let order = [Yield, Restart, TimeLimit, UserCancel];
        for (i, earlier) in order.iter().enumerate() {
            for (j, later) in order.iter().enumerate() {
                let stronger = order[i.max(j)];
                assert_eq!(
                    earlier.upgrade(*later),
                    stronger,
                    "{earlier:?} then {later:?}"
                );
            }
        }
        assert_eq!(TimeLimit.as_str(), "time_limit");
        assert_eq!("time_limit".parse::<StopCause>(), Ok(TimeLimit));
    }

    /// The derived names are serde's, exactly: the wire, the store and the CLI say one thing.
    fn names_are_serdes<T>()
    where
        T: VariantArray + Copy + Into<&'static str> + Serialize + FromStr + PartialEq + fmt::Debug,
        <T as FromStr>::Err: fmt::Debug,
    {
        for v in T::VARIANTS {
            let name: &'static str = (*v).into();
            assert_eq!(serde_json::to_value(v).ok(), Some(serde_json::json!(name)));
            assert_eq!(name.parse::<T>().ok(), Some(*v));
        }
    }

    #[test]
    fn queue_names_are_the_serde_names() {
        names_are_serdes::<Priority>();
        names_are_serdes::<StopCause>();
        names_are_serdes::<JobStatus>();
        names_are_serdes::<RunStatus>();
        names_are_serdes::<PhaseKind>();
        for v in PreemptMode::VARIANTS {
            assert_eq!(
                serde_json::to_value(v).ok(),
                Some(serde_json::json!(v.as_str()))
            );
        }
        assert_eq!(
            "nope".parse::<JobStatus>(),
            Err("unknown job state \"nope\"".to_string())
        );
        assert_eq!(
            "top".parse::<Priority>(),
            Err("priority must be low, medium or high, not \"top\"".to_string())
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
