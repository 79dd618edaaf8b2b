//! Job events (SPEC section 8): what happened to a job, numbered per job from 1 without gaps.

use crate::ids::{AttentionId, JobId, MachineId, ResourceId, TaskId, ThreadId};
use crate::rundir::ExitReason;
use crate::time::{serde_rfc3339, Millis};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The prefix of one event line in a thread inbox or on a callback's stdin.
pub const EVENT_LINE_PREFIX: &str = "HOMEBASED_EVENT ";

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
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
    /// The name on the wire: serde's, derived by strum.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Notices tell about a situation that may end; they are suppressed when no longer true.
    pub fn is_notice(self) -> bool {
        matches!(self, EventKind::JobBlocked | EventKind::JobCheckDue)
    }

    /// Every kind, in the order of SPEC section 8 (the declaration's, derived).
    pub const ALL: &'static [EventKind] = <EventKind as strum::VariantArray>::VARIANTS;

    /// The kind named `name` (`JOB_SUCCEEDED`, ...), if any.
    pub fn from_name(name: &str) -> Option<EventKind> {
        crate::queue::variant(name)
    }
}

/// One event as stored, delivered and shown (SPEC section 8), without its envelope: it is
/// written as `Versioned<Event>`, so `api_version` comes first. The run fields are `null`
/// for an event about no run (a queued job's cancel, a blocked notice).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub event: EventKind,
    pub job: JobId,
    pub seq: u32,
    #[serde(with = "serde_rfc3339")]
    pub at: Millis,
    pub thread: ThreadId,
    pub name: String,
    pub machine: MachineId,
    pub resource: Option<ResourceId>,
    pub task: Option<TaskId>,
    pub run_number: Option<u32>,
    pub step: Option<u32>,
    #[serde(flatten)]
    pub detail: EventDetail,
}

/// The fields only some kinds carry; absent, not `null`, on the others.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventDetail {
    /// How the run's process ended, when the worker recorded it (ends of runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ExitReason>,
    /// `JOB_ATTENTION`: the hold to release, and the cleanup failure that caused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionId>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::wire::sorted_keys::serialize"
    )]
    pub cleanup: Option<crate::wire::CleanupResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<BlockedNotice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_due: Option<CheckDueNotice>,
    /// Why the job ended this way, when the kind alone does not say (SPEC section 8:
    /// `{"cause":"time_limit"}`, `{"cause":"dependency_failed","job":UUID}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<EventCause>,
}

/// The `detail` of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum EventCause {
    /// `JOB_FAILED`: the run was still executing at its start plus the job's `time_limit`.
    TimeLimit,
    /// `JOB_CANCELLED`: `job`, named in this job's `after`, failed or was cancelled.
    DependencyFailed { job: JobId },
}

/// `JOB_BLOCKED`: the episode this notice belongs to and what blocks the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockedNotice {
    pub episode: uuid::Uuid,
    #[serde(with = "serde_rfc3339")]
    pub blocked_since: Millis,
    pub blockers: Value,
}

/// `JOB_CHECK_DUE`: the run has written no output since `silent_since`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckDueNotice {
    #[serde(with = "serde_rfc3339")]
    pub silent_since: Millis,
    /// The effective timeout, as a duration like `2h 30m`.
    pub timeout: String,
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
    fn causes_have_the_spec_shape() {
        let job = JobId::new();
        assert_eq!(
            serde_json::to_value(EventCause::TimeLimit).unwrap(),
            serde_json::json!({"cause": "time_limit"})
        );
        assert_eq!(
            serde_json::to_value(EventCause::DependencyFailed { job }).unwrap(),
            serde_json::json!({"cause": "dependency_failed", "job": job})
        );
        let back: EventCause = serde_json::from_str(r#"{"cause":"time_limit"}"#).unwrap();
        assert_eq!(back, EventCause::TimeLimit);
    }

    #[test]
    fn kinds_serialize_as_screaming_names() {
        for &k in EventKind::ALL {
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.as_str())
            );
        }
    }

    #[test]
    fn every_kind_is_found_by_its_name() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_name(k.as_str()), Some(*k));
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

    #[test]
    fn an_event_is_written_in_its_envelope_with_only_its_own_kind_fields() {
        let event = Event {
            event: EventKind::JobAttention,
            job: JobId::new(),
            seq: 3,
            at: 1_700_000_000_000,
            thread: ThreadId::new(),
            name: "train".into(),
            machine: MachineId::new(),
            resource: None,
            task: None,
            run_number: None,
            step: None,
            detail: EventDetail {
                attention: Some(AttentionId::new()),
                cleanup: Some(crate::wire::CleanupResult {
                    attempt: 1,
                    outcome: crate::rundir::CleanupOutcome::TargetsSurvived {
                        remaining: Vec::new(),
                    },
                }),
                ..EventDetail::default()
            },
        };
        let text = serde_json::to_string(&crate::wire::Versioned::new(&event)).unwrap();
        assert!(
            text.starts_with(r#"{"api_version":1,"event":"JOB_ATTENTION","#),
            "{text}"
        );
        let value: Value = serde_json::from_str(&text).unwrap();
        // The run fields are null, not absent; another kind's fields are absent.
        assert_eq!(value["task"], Value::Null);
        assert!(value.get("task").is_some());
        for absent in ["process", "blocked", "check_due"] {
            assert!(value.get(absent).is_none(), "{absent} in {text}");
        }
        assert!(value["at"].as_str().unwrap().ends_with('Z'));
        let back: crate::wire::Versioned<Event> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.into_answer(), event);
    }
}
