//! Test fixtures shared by the tests of every spec file: a temporary directory with an
//! executable `bin/tool`, a context pointing at it, a minimal valid spec, and spec edits.

#![allow(clippy::unwrap_used)]

use super::validate::{validate, SubmitContext};
use super::ValidSpec;
use crate::error::{ApiError, ErrorCode};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

pub(in crate::spec) const THREAD: &str = "0190a0c4-8d2e-7c3b-9f7e-2b4c6d8e0f12";

pub(in crate::spec) struct Fixture {
    pub dir: tempfile::TempDir,
    pub ctx: SubmitContext,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let ctx = SubmitContext {
            path: Some(format!("/nonexistent:{}/bin", dir.path().display())),
            cwd: dir.path().to_path_buf(),
            elsewhere: false,
        };
        let fx = Fixture { dir, ctx };
        fx.executable("bin/tool");
        fx
    }

    /// A file at `rel` under the directory, with `mode`, its parents created.
    pub fn file(&self, rel: &str, mode: u32) -> PathBuf {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    pub fn executable(&self, rel: &str) -> PathBuf {
        self.file(rel, 0o755)
    }

    /// The absolute path of `rel` under the directory, as a JSON-ready string.
    pub fn abs(&self, rel: &str) -> String {
        self.dir.path().join(rel).to_str().unwrap().to_string()
    }

    pub fn spec(&self) -> Value {
        json!({
            "api_version": 1,
            "thread": THREAD,
            "name": "train",
            "cwd": ".",
            "priority": "medium",
            "preempt": {"mode": "yield"},
            "workload": {"type": "task", "command": ["tool", "--flag"]},
        })
    }

    pub fn validate(&self, spec: &Value) -> Result<ValidSpec, ApiError> {
        validate(&serde_json::to_vec(spec).unwrap(), &self.ctx)
    }

    /// Asserts the refusal's code and pointer, and that its value is what `spec` holds at
    /// that pointer (null when absent).
    pub fn assert_refused(
        &self,
        behaviour: &str,
        spec: &Value,
        code: ErrorCode,
        pointer: &str,
    ) -> ApiError {
        let err = match self.validate(spec) {
            Ok(v) => panic!("{behaviour}: accepted {}", v.canonical),
            Err(e) => e,
        };
        assert_eq!(
            (err.code, err.input["pointer"].as_str()),
            (code, Some(pointer)),
            "{behaviour}: {}",
            err.message
        );
        let written = spec.pointer(pointer).cloned().unwrap_or(Value::Null);
        assert_eq!(err.input["value"], written, "{behaviour}: {}", err.message);
        err
    }
}

/// One change to a spec, at an RFC 6901 pointer.
pub(in crate::spec) enum Edit {
    Set(String, Value),
    Remove(String),
    /// Several edits, in order.
    All(Vec<Edit>),
}

impl Edit {
    pub fn set(pointer: &str, value: Value) -> Edit {
        Edit::Set(pointer.into(), value)
    }

    pub fn remove(pointer: &str) -> Edit {
        Edit::Remove(pointer.into())
    }

    /// This edit, then a set of `pointer` (a rule between two fields).
    pub fn and_set(self, pointer: &str, value: Value) -> Edit {
        let mut all = match self {
            Edit::All(all) => all,
            one => vec![one],
        };
        all.push(Edit::set(pointer, value));
        Edit::All(all)
    }

    pub fn apply(&self, spec: &mut Value) {
        let pointer = match self {
            Edit::Set(pointer, _) | Edit::Remove(pointer) => pointer,
            Edit::All(all) => {
                for edit in all {
                    edit.apply(spec);
                }
                return;
            }
        };
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let key = key.replace("~1", "/").replace("~0", "~");
        match (spec.pointer_mut(parent).unwrap(), self) {
            (Value::Object(map), Edit::Set(_, v)) => {
                map.insert(key, v.clone());
            }
            (Value::Object(map), Edit::Remove(_)) => {
                map.remove(&key);
            }
            (Value::Array(list), Edit::Set(_, v)) => {
                list[key.parse::<usize>().unwrap()] = v.clone()
            }
            (Value::Array(list), Edit::Remove(_)) => {
                list.remove(key.parse::<usize>().unwrap());
            }
            (other, _) => panic!("cannot edit {pointer} in {other}"),
        }
    }
}
