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

    /// Every kind, in the order of SPEC section 8.
    pub const ALL: [EventKind; 7] = [
        EventKind::JobSucceeded,
        EventKind::JobFailed,
        EventKind::JobCancelled,
        EventKind::JobPreempted,
        EventKind::JobAttention,
        EventKind::JobBlocked,
        EventKind::JobCheckDue,
    ];

    /// The kind named `name` (`JOB_SUCCEEDED`, ...), if any.
    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// Formats one event object as its line (without the newline).
pub fn event_line(event: &serde_json::Value) -> String {
    format!("{EVENT_LINE_PREFIX}{event}")
}

/// Reads one inbox line back into its event object; `None` for anything else (a torn line
/// left by a crash mid-append, a blank line).
pub fn parse_event_line(line: &str) -> Option<serde_json::Value> {
    let json = line
        .trim_end_matches(['\n', '\r'])
        .strip_prefix(EVENT_LINE_PREFIX)?;
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .filter(serde_json::Value::is_object)
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

    #[test]
    fn every_kind_is_found_by_its_name() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_name(k.as_str()), Some(k));
        }
        assert_eq!(EventKind::from_name("JOB_DONE"), None);
    }

    #[test]
    fn event_lines_round_trip_and_torn_lines_are_skipped() {
        let event = serde_json::json!({"event": "JOB_SUCCEEDED", "seq": 1});
        let line = event_line(&event);
        assert!(line.starts_with("HOMEBASED_EVENT {"));
        assert_eq!(parse_event_line(&line), Some(event.clone()));
        assert_eq!(parse_event_line(&format!("{line}\n")), Some(event));
        assert_eq!(
            parse_event_line("HOMEBASED_EVENT {\"event\":\"JOB_SUC"),
            None
        );
        assert_eq!(parse_event_line("HOMEBASED_EVENT 3"), None);
        assert_eq!(parse_event_line(""), None);
    }
}
