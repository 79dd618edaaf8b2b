//! A run's records as the store keeps them and the wire shows them (SPEC sections 6 and 9):
//! the result of the cleanup that ended its cleaning phase ([`CleanupResult`]) and why an
//! Attention holds lanes ([`AttentionFailure`]). How its process ended is the worker's own
//! `exit.json` reason, [`ExitReason`](crate::rundir::ExitReason), as is. The store decodes
//! them once when it reads a row and encodes them when it writes one; the CLI, the
//! dashboard's JSON and the MCP tools read these types, never keys.
//!
//! Their JSON is what it was while they were `serde_json::Value`s: the wire fields that
//! carry them write their keys sorted ([`super::sorted_keys`]).

use crate::ids::{JobId, TaskId};
use crate::rundir::{CleanupOutcome, CleanupRecord};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The cleanup result a run keeps (`runs.cleanup`, a `JOB_ATTENTION`'s `cleanup`): the
/// outcome of the attempt that ended its cleaning phase, its `result` beside that attempt's
/// number (`{"attempt":1,"result":"clean"}`). `cleanup.json` less its `finished_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupResult {
    pub attempt: u32,
    #[serde(flatten)]
    pub outcome: CleanupOutcome,
}

impl From<&CleanupRecord> for CleanupResult {
    fn from(record: &CleanupRecord) -> CleanupResult {
        CleanupResult {
            attempt: record.attempt,
            outcome: record.outcome.clone(),
        }
    }
}

/// Why an Attention holds its lanes until a person releases it (`attentions.failure`,
/// `resource list`'s `failure`). Told apart by `result`: `unknown_live_run` is
/// [`AttentionFailure::UnknownLiveRun`], every other is a cleanup's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttentionFailure {
    /// The run's cleanup failed (its last attempt's result; never `clean`).
    Cleanup(CleanupResult),
    /// A live run the store does not know, or knows as ended (SPEC section 1).
    UnknownLiveRun(UnknownLiveRun),
}

/// The `result` of an [`AttentionFailure::UnknownLiveRun`].
const UNKNOWN_LIVE_RUN: &str = "unknown_live_run";

impl AttentionFailure {
    /// Its `result`: the cleanup outcome's name, or `unknown_live_run`.
    pub fn result(&self) -> &'static str {
        match self {
            AttentionFailure::Cleanup(cleanup) => cleanup.outcome.name(),
            AttentionFailure::UnknownLiveRun(_) => UNKNOWN_LIVE_RUN,
        }
    }
}

/// The record of a live run the store does not know, as its run directory names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownLiveRun {
    pub task: TaskId,
    pub job: JobId,
    pub run_number: u32,
    pub step: u32,
    pub resume: bool,
    /// Its worker's pid: from the process table where its command line names the run, else
    /// from `worker.json`; `null` when neither does.
    pub pid: Option<u32>,
    /// The lanes its worker's command line and its `run.json` name, by name (the command
    /// line's first); every lane held when nothing names one.
    pub resources: Vec<String>,
    /// What a person is to check before releasing the hold.
    pub message: String,
}

/// The wire form of an unknown live run: its record with `result` beside its fields.
#[derive(Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
enum Tagged<T> {
    UnknownLiveRun(T),
}

impl Serialize for AttentionFailure {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            AttentionFailure::Cleanup(cleanup) => cleanup.serialize(s),
            AttentionFailure::UnknownLiveRun(run) => Tagged::UnknownLiveRun(run).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for AttentionFailure {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AttentionFailure, D::Error> {
        use serde::de::Error;
        // Read whole first: which shape it is shows only in its `result`.
        let value = serde_json::Value::deserialize(d)?;
        let failure = if value.get("result").and_then(|r| r.as_str()) == Some(UNKNOWN_LIVE_RUN) {
            serde_json::from_value::<Tagged<UnknownLiveRun>>(value)
                .map(|Tagged::UnknownLiveRun(run)| AttentionFailure::UnknownLiveRun(run))
        } else {
            serde_json::from_value(value).map(AttentionFailure::Cleanup)
        };
        failure.map_err(D::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::rundir::{RemainingProcess, RemainingReason};
    use crate::wire::sorted_keys;

    fn survived() -> CleanupResult {
        CleanupResult {
            attempt: 2,
            outcome: CleanupOutcome::TargetsSurvived {
                remaining: vec![RemainingProcess {
                    pid: 4242,
                    start_ticks: 99,
                    reason: RemainingReason::Marked,
                }],
            },
        }
    }

    fn unknown() -> UnknownLiveRun {
        UnknownLiveRun {
            task: "01a23100-0000-7000-8000-0000000000b0".parse().unwrap(),
            job: "01a23100-0000-7000-8000-000000000001".parse().unwrap(),
            run_number: 2,
            step: 1,
            resume: false,
            pid: None,
            resources: vec!["gpu0".into()],
            message: "check it".into(),
        }
    }

    /// Both shapes read back as what was written, told apart by `result` alone.
    #[test]
    fn a_failure_is_a_cleanup_result_or_an_unknown_live_run_by_its_result() {
        let cleanup = AttentionFailure::Cleanup(survived());
        let text = sorted_keys::to_string(&cleanup).unwrap();
        assert_eq!(
            text,
            r#"{"attempt":2,"remaining":[{"pid":4242,"reason":"marked","start_ticks":99}],"result":"targets_survived"}"#
        );
        assert_eq!(
            serde_json::from_str::<AttentionFailure>(&text).unwrap(),
            cleanup
        );
        assert_eq!(cleanup.result(), "targets_survived");

        let held = AttentionFailure::UnknownLiveRun(unknown());
        let text = sorted_keys::to_string(&held).unwrap();
        assert_eq!(
            text,
            r#"{"job":"01a23100-0000-7000-8000-000000000001","message":"check it","pid":null,"resources":["gpu0"],"result":"unknown_live_run","resume":false,"run_number":2,"step":1,"task":"01a23100-0000-7000-8000-0000000000b0"}"#
        );
        assert_eq!(
            serde_json::from_str::<AttentionFailure>(&text).unwrap(),
            held
        );
        assert_eq!(held.result(), "unknown_live_run");
    }

    /// A record that is neither shape is refused with what is wrong, not read as some default.
    #[test]
    fn a_failure_of_no_known_shape_is_refused_saying_why() {
        let unknown_result =
            serde_json::from_str::<AttentionFailure>(r#"{"result":"melted","attempt":1}"#);
        assert!(unknown_result.unwrap_err().to_string().contains("melted"));
        let without_task =
            serde_json::from_str::<AttentionFailure>(r#"{"result":"unknown_live_run","job":"x"}"#);
        assert!(without_task.is_err());
        let not_an_object = serde_json::from_str::<AttentionFailure>("3");
        assert!(not_an_object.is_err());
    }
}
