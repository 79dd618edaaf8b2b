//! Reading untrusted JSON strictly: UTF-8 checked first (with the offset of the first bad
//! byte), then a parse that refuses duplicate object keys with the pointer where the second
//! one was written. `serde_json::Value` silently keeps the last duplicate, so two readers of
//! one body could disagree on what was sent; every request body and spec reads through here.

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::fmt;

/// Why a body is not strict JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StrictError {
    /// Not UTF-8: `offset` is the first invalid byte.
    NotUtf8 { offset: usize },
    /// The same key twice in one object; `pointer` (RFC 6901) names the second one.
    Duplicate { pointer: String },
    /// Any other JSON syntax error, as serde_json words it.
    Syntax(String),
}

impl fmt::Display for StrictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StrictError::NotUtf8 { offset } => {
                write!(f, "not valid UTF-8 (first bad byte at offset {offset})")
            }
            StrictError::Duplicate { pointer } => write!(f, "duplicate key at {pointer}"),
            StrictError::Syntax(e) => write!(f, "not valid JSON: {e}"),
        }
    }
}

/// Parses `raw` as one JSON value with the rules above.
pub fn parse(raw: &[u8]) -> Result<Value, StrictError> {
    if let Err(e) = std::str::from_utf8(raw) {
        return Err(StrictError::NotUtf8 {
            offset: e.valid_up_to(),
        });
    }
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(raw);
    let parsed = Seed {
        at: String::new(),
        duplicate: &duplicate,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match (parsed, duplicate.into_inner()) {
        (_, Some(pointer)) => Err(StrictError::Duplicate { pointer }),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(StrictError::Syntax(e.to_string())),
    }
}

/// One value at pointer `at`; the first duplicate found is recorded in `duplicate`.
struct Seed<'a> {
    at: String,
    duplicate: &'a RefCell<Option<String>>,
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::from(s))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let seed = Seed {
                at: format!("{}/{}", self.at, out.len()),
                duplicate: self.duplicate,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let at = format!("{}/{}", self.at, escape(&key));
            if out.contains_key(&key) {
                *self.duplicate.borrow_mut() = Some(at);
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate field {key:?}"
                )));
            }
            let v = map.next_value_seed(Seed {
                at,
                duplicate: self.duplicate,
            })?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_refused_with_their_pointer() {
        assert_eq!(
            parse(br#"{"a":1,"b":[{"c/d":1,"c/d":2}]}"#),
            Err(StrictError::Duplicate {
                pointer: "/b/0/c~1d".into()
            })
        );
        assert_eq!(
            parse(br#"{"a":1,"a":1}"#),
            Err(StrictError::Duplicate {
                pointer: "/a".into()
            })
        );
        assert_eq!(
            parse(br#"{"a":{"x":1},"b":{"x":2}}"#).unwrap(),
            serde_json::json!({"a":{"x":1},"b":{"x":2}})
        );
    }

    #[test]
    fn bad_utf8_and_syntax_are_told_apart() {
        assert_eq!(
            parse(b"{\"a\":\"\xff\"}"),
            Err(StrictError::NotUtf8 { offset: 6 })
        );
        assert!(matches!(parse(b"{\"a\":"), Err(StrictError::Syntax(_))));
        assert!(matches!(parse(b"{} {}"), Err(StrictError::Syntax(_))));
    }
}
