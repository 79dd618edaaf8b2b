//! Typed UUIDs. Every id on the wire is a full UUID (new ones are v7); prefixes are never
//! accepted, so parsing is strict.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        /// Read through [`parse_full_uuid`]: a body may carry only the hyphenated form.
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
                parse_full_uuid(&text).map($name).map_err(serde::de::Error::custom)
            }
        }

        impl $name {
            /// A fresh time-ordered (v7) id.
            pub fn new() -> Self {
                $name(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.as_hyphenated().fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                parse_full_uuid(s).map($name)
            }
        }

        /// What [`parse_full_uuid`] accepts, for schemas generated from types that carry
        /// ids (the MCP tools' inputs): the hyphenated form only.
        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "format": "uuid",
                    "pattern": UUID_PATTERN,
                    "description": "A full hyphenated UUID; prefixes are never accepted.",
                })
            }
        }
    };
}

id_type!(
    /// A job: one submission to the queue.
    JobId
);
id_type!(
    /// One run attempt of one step (the "task" of the runbook).
    TaskId
);
id_type!(
    /// One exclusive lane.
    ResourceId
);
id_type!(
    /// One Attention hold on a resource.
    AttentionId
);
id_type!(
    /// The receiver of a job's events.
    ThreadId
);
id_type!(
    /// A client-chosen id that makes move, cancel and release safe to retry.
    OperationId
);
id_type!(
    /// One installation: one daemon, one state home, one queue.
    MachineId
);

/// A string that is not a full hyphenated UUID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a full UUID: {0:?}")]
pub struct InvalidId(pub String);

/// The JSON Schema pattern of [`parse_full_uuid`]'s form (the spec's schema uses the same).
pub const UUID_PATTERN: &str =
    "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$";

/// Parses a complete UUID in its hyphenated 36-character form (SPEC: full UUIDs). The simple
/// 32-hex, braced and URN forms are refused, as are prefixes.
pub fn parse_full_uuid(s: &str) -> Result<Uuid, InvalidId> {
    let hyphens_in_place = s.len() == 36
        && s.bytes()
            .enumerate()
            .all(|(i, b)| matches!(i, 8 | 13 | 18 | 23) == (b == b'-'));
    if !hyphens_in_place {
        return Err(InvalidId(s.to_string()));
    }
    Uuid::try_parse(s).map_err(|_| InvalidId(s.to_string()))
}

/// True when `s` reads as a UUID in its hyphenated or its simple 32-hex form: resource names
/// may never look like one, even in the form no id is accepted in.
pub fn looks_like_uuid(s: &str) -> bool {
    (s.len() == 36 || s.len() == 32) && Uuid::try_parse(s).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_uuids_parse_and_prefixes_do_not() {
        let id = JobId::new();
        assert_eq!(id.to_string().parse::<JobId>().unwrap(), id);
        assert!("0190".parse::<JobId>().is_err());
        assert!(id.to_string()[..35].parse::<JobId>().is_err());
        assert!(format!("{{{id}}}").parse::<JobId>().is_err());
        assert!("gpu0".parse::<ResourceId>().is_err());
    }

    #[test]
    fn only_the_hyphenated_form_parses_from_text_and_json() {
        let id = JobId::new();
        let simple = id.0.simple().to_string();
        assert_eq!(simple.len(), 32);
        assert!(simple.parse::<JobId>().is_err());
        assert!(id.0.urn().to_string().parse::<JobId>().is_err());
        assert!(serde_json::from_value::<JobId>(serde_json::json!(simple)).is_err());
        let back: JobId = serde_json::from_value(serde_json::json!(id.to_string())).unwrap();
        assert_eq!(back, id);
        assert!(looks_like_uuid(&simple), "still never a resource name");
    }

    #[test]
    fn new_ids_are_version_7() {
        assert_eq!(TaskId::new().0.get_version_num(), 7);
    }
}
