//! Writing a typed value with its object keys in sorted order, the order a `serde_json::Value`
//! writes them in. A run's process and cleanup, an Attention's failure and a job's events
//! were carried as `Value`s before they were typed: clients have seen their keys sorted, and
//! the fields that carry them now keep those bytes with
//! `#[serde(serialize_with = "sorted_keys::serialize")]` (SPEC section 9 is unchanged).

use serde::{Serialize, Serializer};

/// `serialize_with` for a field of any serializable type (`Option` and `Vec` included):
/// written as the `Value` it makes, whose maps are ordered by key at every depth.
pub fn serialize<T: Serialize, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

/// The JSON text of `value` with its keys sorted: what the store writes for these records,
/// byte for byte what it wrote when they were `Value`s.
pub fn to_string<T: Serialize>(value: &T) -> serde_json::Result<String> {
    serde_json::to_value(value).map(|v| v.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Unsorted {
        zeta: u32,
        alpha: Inner,
    }

    #[derive(Serialize)]
    struct Inner {
        pid: u32,
        start_ticks: u64,
        reason: &'static str,
    }

    #[derive(Serialize)]
    struct Carrier {
        #[serde(serialize_with = "serialize")]
        records: Vec<Unsorted>,
        last: bool,
    }

    fn unsorted() -> Unsorted {
        Unsorted {
            zeta: 1,
            alpha: Inner {
                pid: 7,
                start_ticks: 9,
                reason: "marked",
            },
        }
    }

    #[test]
    fn keys_are_sorted_at_every_depth_and_only_in_the_field_marked() {
        assert_eq!(
            to_string(&unsorted()).unwrap(),
            r#"{"alpha":{"pid":7,"reason":"marked","start_ticks":9},"zeta":1}"#
        );
        let carrier = Carrier {
            records: vec![unsorted()],
            last: true,
        };
        assert_eq!(
            serde_json::to_string(&carrier).unwrap(),
            r#"{"records":[{"alpha":{"pid":7,"reason":"marked","start_ticks":9},"zeta":1}],"last":true}"#
        );
    }
}
