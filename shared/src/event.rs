//! Job events (SPEC section 8): what happened to a job, numbered per job from 1 without gaps.

use serde::{Deserialize, Serialize};

/// The prefix of one event line in a thread inbox or on a callback's stdin.
pub const EVENT_LINE_PREFIX: &str = "HOMEBASED_EVENT ";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventKind {
    JobSucceeded,
    JobFailed,
    JobCancelled,
    JobPreempted,
    JobAttention,
    /// Notice: the first blocked job has waited longer than the configured delay.
    JobBlocked,
    /// Notice: the running step wrote no output for the job's `timeout`.
    JobCheckDue,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::JobSucceeded => "JOB_SUCCEEDED",
            EventKind::JobFailed => "JOB_FAILED",
            EventKind::JobCancelled => "JOB_CANCELLED",
            EventKind::JobPreempted => "JOB_PREEMPTED",
            EventKind::JobAttention => "JOB_ATTENTION",
            EventKind::JobBlocked => "JOB_BLOCKED",
            EventKind::JobCheckDue => "JOB_CHECK_DUE",
        }
    }

    /// Notices tell about a situation that may end; they are suppressed when no longer true.
    pub fn is_notice(self) -> bool {
        matches!(self, EventKind::JobBlocked | EventKind::JobCheckDue)
    }
}

/// Formats one event object as its line (without the newline).
pub fn event_line(event: &serde_json::Value) -> String {
    format!("{EVENT_LINE_PREFIX}{event}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_as_screaming_names() {
        for k in [
            EventKind::JobSucceeded,
            EventKind::JobCheckDue,
            EventKind::JobAttention,
        ] {
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.as_str())
            );
        }
    }
}
