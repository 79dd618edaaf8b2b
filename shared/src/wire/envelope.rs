//! The envelope of every answer: `{"api_version":1, ...the answer's own fields}`.
//!
//! The answer types carry no version of their own; the daemon wraps what it answers and the
//! CLI wraps what it prints, so the field is written in exactly one place. Reading an answer
//! through the envelope refuses one written in a version this build does not speak, rather
//! than misreading its fields.

use crate::API_VERSION;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An answer with the API version it is written in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Versioned<T> {
    api_version: ApiVersion,
    #[serde(flatten)]
    pub answer: T,
}

impl<T> Versioned<T> {
    pub fn new(answer: T) -> Versioned<T> {
        Versioned {
            api_version: ApiVersion,
            answer,
        }
    }

    pub fn into_answer(self) -> T {
        self.answer
    }
}

/// The `api_version` field: always [`API_VERSION`] when written, and nothing else when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ApiVersion;

impl Serialize for ApiVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(API_VERSION)
    }
}

impl<'de> Deserialize<'de> for ApiVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ApiVersion, D::Error> {
        let version = u64::deserialize(d)?;
        if version == u64::from(API_VERSION) {
            Ok(ApiVersion)
        } else {
            Err(serde::de::Error::custom(format!(
                "api_version {version} is not spoken here (this build speaks {API_VERSION})"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{CancelResult, MoveResult};
    use serde_json::json;

    fn moved() -> MoveResult {
        MoveResult {
            job: "0190a1b2-0000-7000-8000-000000000001".parse().unwrap(),
            priority: crate::queue::Priority::High,
            position: 2,
        }
    }

    #[test]
    fn writes_the_version_once_and_first() {
        let text = serde_json::to_string(&Versioned::new(moved())).unwrap();
        assert_eq!(
            text,
            r#"{"api_version":1,"job":"0190a1b2-0000-7000-8000-000000000001","priority":"high","position":2}"#
        );
        assert_eq!(text.matches("api_version").count(), 1);
    }

    #[test]
    fn a_tagged_answer_keeps_its_tag_beside_the_version() {
        let value = serde_json::to_value(Versioned::new(CancelResult::Cancelled)).unwrap();
        assert_eq!(value, json!({ "api_version": 1, "result": "cancelled" }));
        let back: Versioned<CancelResult> = serde_json::from_value(value).unwrap();
        assert_eq!(back.into_answer(), CancelResult::Cancelled);
    }

    #[test]
    fn reads_back_what_it_wrote() {
        let text = serde_json::to_string(&Versioned::new(moved())).unwrap();
        let back: Versioned<MoveResult> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.into_answer(), moved());
    }

    #[test]
    fn refuses_another_version_or_none() {
        let mut value = serde_json::to_value(Versioned::new(moved())).unwrap();
        value["api_version"] = json!(2);
        let err = serde_json::from_value::<Versioned<MoveResult>>(value.clone()).unwrap_err();
        assert!(err.to_string().contains("api_version 2"), "{err}");
        value.as_object_mut().unwrap().remove("api_version");
        assert!(serde_json::from_value::<Versioned<MoveResult>>(value).is_err());
    }
}
