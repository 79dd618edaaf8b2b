//! The job spec (SPEC section 3): its canonical types here; reading the JSON (strict parse,
//! pointers, refusals) in `spec/input.rs`; the job-level rules in `spec/validate.rs`; the step
//! rules in `spec/task.rs` and `spec/container.rs`; the JSON Schema in `spec/schema.rs`.
//!
//! A spec arrives as raw JSON, is checked field by field (unknown fields refused, each
//! refusal an `invalid_spec` error with the JSON pointer and value), and leaves as a
//! [`ValidSpec`]: the typed [`JobSpec`], its canonical JSON (defaults written out, `workload`
//! stored as a one-element `steps`) and that JSON's SHA-256 digest.

mod container;
mod input;
mod schema;
mod task;
#[cfg(test)]
mod testkit;
mod validate;

pub use schema::json_schema;

/// Reads a spec's JSON as the daemon will: the size cap, UTF-8, duplicate keys refused with
/// their pointer, each refusal an `invalid_spec` error. The rules are checked by [`validate`].
pub fn read_json(raw: &[u8]) -> Result<serde_json::Value, crate::error::ApiError> {
    input::parse(raw)
}
pub use validate::{canonical, validate, SubmitContext};

use crate::ids::ThreadId;
use crate::queue::{PreemptMode, Priority};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub const MAX_STEPS: usize = 32;
/// The most jobs one `after` may name (SPEC section 3).
pub const MAX_AFTER: usize = 32;
/// The most lanes a job may ask for at the spec's level; the daemon then checks `gpus`
/// against the lanes the machine has (SPEC section 3).
pub const MAX_GPUS: u32 = 1024;
pub const MAX_NAME_CHARS: usize = 120;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60 * 60);
pub const MIN_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// The longest `timeout`: an inactivity notice later than a month is no notice.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// The bounds of `time_limit` (SPEC section 3): a minute, so that a workload told its
/// deadline has time to checkpoint before it, to thirty days.
pub const MIN_TIME_LIMIT: Duration = Duration::from_secs(60);
pub const MAX_TIME_LIMIT: Duration = Duration::from_secs(30 * 24 * 60 * 60);
pub const MIN_RESTART_WITHIN: Duration = Duration::from_secs(60);
pub const MAX_RESTART_WITHIN: Duration = Duration::from_secs(24 * 60 * 60);
pub const MIN_CONTAINER_MEMORY: u64 = 6 * 1024 * 1024;
/// The largest spec body accepted, before parsing.
pub const MAX_SPEC_BYTES: usize = 1024 * 1024;

/// A job spec in canonical form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub api_version: u32,
    pub thread: ThreadId,
    pub name: String,
    /// Absolute; the same for every step.
    pub cwd: PathBuf,
    pub priority: Priority,
    pub preempt: Preempt,
    /// Output-inactivity notice per run. It never stops work.
    #[serde(with = "duration_text")]
    pub timeout: Duration,
    /// The wall-clock limit of each run (SPEC section 3): a run still executing at its start
    /// plus this is stopped as a restart is and its job fails. Left out of the canonical spec
    /// while absent, so a spec without one keeps the digest it always had (and a job stored
    /// before the field existed reads back).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "duration_text::option"
    )]
    pub time_limit: Option<Duration>,
    /// A Fleet machine name or UUID; `None` is local.
    pub machine: Option<String>,
    /// A resource name or UUID the job is pinned to (only with `gpus` 1).
    pub resource: Option<String>,
    /// How many lanes each run of the job holds at once (SPEC section 3). Left out of the
    /// canonical spec at 1, so a one-lane spec keeps the digest it always had.
    #[serde(default = "one_gpu", skip_serializing_if = "is_one_gpu")]
    pub gpus: u32,
    /// `gpus` distinct resource names or UUIDs the job is pinned to, as given; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Jobs of this machine that must succeed before this one may start (SPEC section 4,
    /// dependencies), in the order given. Left out of the canonical spec while empty, so a
    /// spec without one keeps the digest it always had (and a job stored before the field
    /// existed reads back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<crate::ids::JobId>,
    pub steps: Vec<Step>,
}

fn one_gpu() -> u32 {
    1
}

// serde's `skip_serializing_if` hands a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_one_gpu(gpus: &u32) -> bool {
    *gpus == 1
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preempt {
    pub mode: PreemptMode,
    #[serde(with = "duration_text::option")]
    pub restart_within: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Step {
    /// One host command: a non-empty argv, no shell added, with `env` set over the
    /// submitter's environment. An empty `env` is left out of the canonical spec, so a spec
    /// without one keeps the digest it always had.
    Task {
        command: Vec<String>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
        /// Left out of the canonical spec while it is the default, so a spec without one keeps
        /// the digest it always had (and a job stored before the field existed reads back).
        #[serde(default, skip_serializing_if = "YieldCodes::is_default")]
        yield_codes: YieldCodes,
    },
    /// One container, run with the Docker CLI.
    Container(ContainerStep),
}

impl Step {
    /// The exit codes that count as a yield for this step; a container step has the default.
    pub fn yield_codes(&self) -> YieldCodes {
        match self {
            Step::Task { yield_codes, .. } => yield_codes.clone(),
            Step::Container(_) => YieldCodes::default(),
        }
    }
}

/// The exit codes of a step that mean "checkpoint saved after a yield request" (SPEC section
/// 3): 1 to [`MAX_YIELD_CODES`] distinct codes from 1 to 255, `[75]` unless the step says
/// otherwise. A launcher that rewrites its workers' exit codes needs more than 75: `torchrun`
/// reports a worker's 75 as 1. They count as a yield only when a yield was committed for the
/// run (`core::classify` in the daemon), so an unasked 1 stays a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct YieldCodes(Vec<u8>);

pub const MAX_YIELD_CODES: usize = 8;

impl YieldCodes {
    /// `codes` as validated (`spec/task.rs`): 1 to 8 distinct codes, none 0.
    pub(crate) fn new(codes: Vec<u8>) -> YieldCodes {
        YieldCodes(codes)
    }

    pub fn contains(&self, code: i32) -> bool {
        self.0.iter().any(|&c| i32::from(c) == code)
    }

    pub fn codes(&self) -> &[u8] {
        &self.0
    }

    pub fn is_default(&self) -> bool {
        *self == YieldCodes::default()
    }
}

impl Default for YieldCodes {
    fn default() -> Self {
        // EXIT_YIELDED is 75, within u8.
        YieldCodes(vec![crate::rundir::EXIT_YIELDED as u8])
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerStep {
    /// Pinned: `sha256:<64 hex>` or `name@sha256:<64 hex>`. Never pulled.
    pub image: String,
    /// Memory and swap limit in bytes.
    pub memory: u64,
    pub entrypoint: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    /// Numeric `uid:gid`.
    pub user: Option<String>,
    pub workdir: Option<String>,
    pub mounts: Vec<Mount>,
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

/// A spec that passed every rule.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidSpec {
    pub spec: JobSpec,
    /// The canonical JSON stored with the job.
    pub canonical: serde_json::Value,
    /// Lower-case hex SHA-256 of the canonical JSON's compact bytes.
    pub digest: String,
}

/// Durations in specs travel as humantime strings (`90s`, `15m`, `1h`).
pub(crate) mod duration_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }

    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|t| humantime::parse_duration(&t).map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}
