//! Wall-clock time as stored (integer milliseconds since the epoch) and as shown on the wire
//! (RFC 3339 UTC with milliseconds).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

pub fn now_ms() -> Millis {
    to_ms(SystemTime::now())
}

/// Microseconds since the Unix epoch: the stamps of the start path (`rundir::StartStamps`),
/// finer than the millisecond a start takes apart.
pub fn now_us() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i64,
        Err(e) => -(e.duration().as_micros() as i64),
    }
}

pub fn to_ms(t: SystemTime) -> Millis {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as Millis,
        Err(e) => -(e.duration().as_millis() as Millis),
    }
}

pub fn from_ms(ms: Millis) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

/// `2026-11-29T13:23:06.123Z`
pub fn rfc3339(ms: Millis) -> String {
    humantime::format_rfc3339_millis(from_ms(ms)).to_string()
}

/// Serde helpers for `Millis` fields that travel as RFC 3339 strings.
pub mod serde_rfc3339 {
    use super::*;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Written straight into the output (`collect_str`), not through a `String`: a listing
    /// writes two of these a job.
    pub fn serialize<S: Serializer>(ms: &Millis, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_rfc3339_millis(from_ms(*ms)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Millis, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_rfc3339(&text)
            .map(to_ms)
            .map_err(serde::de::Error::custom)
    }

    /// For `Option<Millis>` fields.
    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(ms: &Option<Millis>, s: S) -> Result<S::Ok, S::Error> {
            match ms {
                Some(ms) => s.collect_str(&humantime::format_rfc3339_millis(from_ms(*ms))),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Millis>, D::Error> {
            let text = Option::<String>::deserialize(d)?;
            text.map(|t| {
                humantime::parse_rfc3339(&t)
                    .map(to_ms)
                    .map_err(serde::de::Error::custom)
            })
            .transpose()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_with_milliseconds() {
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(to_ms(from_ms(42)), 42);
    }
}
