//! Reading the spec's JSON: the strict parse, RFC 6901 pointers, refusals that carry them,
//! and field access that refuses unknown fields. Every rule file reads through these, so that
//! every refusal names exactly where the user wrote the offending value.

use super::MAX_SPEC_BYTES;
use crate::error::{ApiError, ErrorCode};
use crate::wire::strict::{self, StrictError};
use serde_json::{json, Map, Value};
use std::fmt::{self, Display};

/// Size cap first (nothing is parsed past it), then JSON with duplicate keys refused: with
/// duplicates, two readers of the same body could disagree on what was submitted.
pub(super) fn parse(raw: &[u8]) -> Result<Value, ApiError> {
    let root = Ptr::root();
    if raw.len() > MAX_SPEC_BYTES {
        return Err(invalid(
            &root,
            &Value::Null,
            format!(
                "the spec is {} bytes, over the limit of {MAX_SPEC_BYTES} bytes",
                raw.len()
            ),
        ));
    }
    strict::parse(raw).map_err(|e| match e {
        StrictError::Duplicate { pointer } => {
            let why = format!("duplicate key: the spec names {pointer} twice");
            invalid(&Ptr(pointer), &Value::Null, why)
        }
        e => invalid(&root, &Value::Null, format!("the spec is {e}")),
    })
}

/// An RFC 6901 JSON pointer to where the user wrote a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Ptr(String);

impl Ptr {
    pub(super) fn root() -> Ptr {
        Ptr(String::new())
    }

    pub(super) fn key(&self, key: &str) -> Ptr {
        Ptr(format!(
            "{}/{}",
            self.0,
            key.replace('~', "~0").replace('/', "~1")
        ))
    }

    pub(super) fn index(&self, i: usize) -> Ptr {
        Ptr(format!("{}/{i}", self.0))
    }
}

impl Display for Ptr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A refusal with the pointer and value the user wrote as `input`.
pub(super) fn refuse(code: ErrorCode, at: &Ptr, value: &Value, why: impl Display) -> ApiError {
    let place = if at.0.is_empty() { "spec" } else { &at.0 };
    ApiError::new(code, format!("{place}: {why}"))
        .with_input(json!({ "pointer": at.0, "value": value }))
}

/// An `invalid_spec` refusal, the code of every broken rule but a missing cwd or program.
pub(super) fn invalid(at: &Ptr, value: &Value, why: impl Display) -> ApiError {
    refuse(ErrorCode::InvalidSpec, at, value, why)
}

/// One JSON object of the spec whose fields were checked against the known ones.
pub(super) struct Fields<'a> {
    map: &'a Map<String, Value>,
    at: Ptr,
}

impl<'a> Fields<'a> {
    /// Refuses a non-object, or any field outside `known`; `hint` explains common mistakes.
    pub(super) fn open(
        v: &'a Value,
        at: &Ptr,
        what: &str,
        known: &[&str],
        hint: fn(&str) -> Option<&'static str>,
    ) -> Result<Self, ApiError> {
        let map = v
            .as_object()
            .ok_or_else(|| invalid(at, v, format!("must be {what}")))?;
        if let Some((k, value)) = map.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            let why = match hint(k) {
                Some(h) => format!("unknown field: {h}"),
                None => format!("unknown field: {what} takes {}", known.join(", ")),
            };
            return Err(invalid(&at.key(k), value, why));
        }
        Ok(Fields {
            map,
            at: at.clone(),
        })
    }

    /// A field that must be present and not null.
    pub(super) fn required(&self, key: &str) -> Result<(&'a Value, Ptr), ApiError> {
        self.optional(key)
            .ok_or_else(|| invalid(&self.at.key(key), &Value::Null, "is required"))
    }

    /// An optional field; `null` means absent, so canonical JSON reads back as the same spec.
    pub(super) fn optional(&self, key: &str) -> Option<(&'a Value, Ptr)> {
        self.get(key).filter(|(v, _)| !v.is_null())
    }

    /// A field as written, `null` included.
    pub(super) fn get(&self, key: &str) -> Option<(&'a Value, Ptr)> {
        self.map.get(key).map(|v| (v, self.at.key(key)))
    }
}

pub(super) fn text<'v>(v: &'v Value, at: &Ptr) -> Result<&'v str, ApiError> {
    v.as_str().ok_or_else(|| invalid(at, v, "must be a string"))
}

/// An argv: strings without NUL bytes (the kernel could not pass them). `first_nonempty`
/// requires a program name in element 0; otherwise the list may only not be empty.
pub(super) fn argv(v: &Value, at: &Ptr, first_nonempty: bool) -> Result<Vec<String>, ApiError> {
    let list = v
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| invalid(at, v, "must be a non-empty array of strings"))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let s = text(item, &at.index(i))?;
        if s.contains('\0') {
            return Err(invalid(&at.index(i), item, "must not contain NUL bytes"));
        }
        if i == 0 && first_nonempty && s.is_empty() {
            return Err(invalid(
                &at.index(i),
                item,
                "the program name must not be empty",
            ));
        }
        out.push(s.to_string());
    }
    Ok(out)
}

/// Which of SPEC section 3's rules a step's `env` keys follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EnvRule {
    /// A task step (on the host): names a shell could export (`[A-Za-z_][A-Za-z0-9_]*`),
    /// never one the queue sets for each run (`HOMEBASED_*`, `CUDA_VISIBLE_DEVICES`,
    /// `CUDA_DEVICE_ORDER`).
    Host,
    /// A container step: any name Docker's `--env` takes (non-empty, without `=` or NUL),
    /// never `HOMEBASED_*` nor a variable that chooses GPUs ([`GPU_SELECTION`]).
    Container,
}

impl EnvRule {
    /// Why `key` is refused under this rule, if it is.
    fn refusal(self, key: &str) -> Option<&'static str> {
        match self {
            EnvRule::Host => {
                let mut chars = key.chars();
                let first_ok = chars
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
                if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    Some("names are letters, digits and _, not starting with a digit")
                } else if crate::rundir::is_run_variable(key) {
                    Some(
                        "HOMEBASED_*, CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER are set by the \
                         queue for each run",
                    )
                } else {
                    None
                }
            }
            EnvRule::Container => {
                if key.is_empty() || key.contains(['=', '\0']) {
                    Some("names must be non-empty, without = or NUL")
                } else if key.starts_with("HOMEBASED_") {
                    Some("HOMEBASED_* variables are set by the queue for each run")
                } else if GPU_SELECTION.contains(&key) {
                    // The NVIDIA runtime reads these from the container's environment: one
                    // would hand the container GPUs the queue did not give it (`all`).
                    Some("the queue owns GPU selection (NVIDIA_VISIBLE_DEVICES, NVIDIA_MIG_CONFIG_DEVICES, CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER)")
                } else {
                    None
                }
            }
        }
    }
}

/// Variables that choose a container's GPUs, refused as `gpus` is (SPEC 3: the queue owns GPU
/// selection). `CUDA_DEVICE_ORDER` renumbers the devices the others name, and the queue sets
/// it wherever it sets `CUDA_VISIBLE_DEVICES`.
const GPU_SELECTION: [&str; 4] = [
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
];

/// A step's `env`, the one validator of host and container steps: an object of names (by
/// `rule`) to explicit strings without NUL bytes.
pub(super) fn env_map(
    v: &Value,
    at: &Ptr,
    rule: EnvRule,
) -> Result<std::collections::BTreeMap<String, String>, ApiError> {
    let map = v
        .as_object()
        .ok_or_else(|| invalid(at, v, "must be an object of NAME: \"value\""))?;
    let mut out = std::collections::BTreeMap::new();
    for (key, value) in map {
        let at = at.key(key);
        if let Some(why) = rule.refusal(key) {
            return Err(invalid(&at, value, why));
        }
        let s = value
            .as_str()
            .filter(|s| !s.contains('\0'))
            .ok_or_else(|| invalid(&at, value, "must be an explicit string without NUL bytes"))?;
        out.insert(key.clone(), s.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_escape_tilde_and_slash() {
        let at = Ptr::root().key("env").key("a/b~c").index(3);
        assert_eq!(at.to_string(), "/env/a~1b~0c/3");
    }

    #[test]
    fn env_names_follow_the_rule_of_their_step() {
        let refused = |rule: EnvRule, key: &str| rule.refusal(key).is_some();
        for key in ["PATH", "_x1", "lower"] {
            assert!(!refused(EnvRule::Host, key), "{key}");
            assert!(!refused(EnvRule::Container, key), "{key}");
        }
        // A container takes names no shell could export.
        for key in ["1X", "a-b", "a.b"] {
            assert!(refused(EnvRule::Host, key), "{key}");
            assert!(!refused(EnvRule::Container, key), "{key}");
        }
        // Nor may it choose its GPUs: the NVIDIA runtime would hand it `all`.
        for key in ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES"] {
            assert!(!refused(EnvRule::Host, key), "{key}");
            assert!(refused(EnvRule::Container, key), "{key}");
        }
        for key in [
            "",
            "A=B",
            "HOMEBASED_JOB",
            "HOMEBASED_DEADLINE",
            "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER",
        ] {
            assert!(refused(EnvRule::Host, key), "{key}");
            assert!(refused(EnvRule::Container, key), "{key}");
        }
    }
}
