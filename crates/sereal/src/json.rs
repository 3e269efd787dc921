//! The documented mapping between [`Value`] and JSON.
//!
//! | Sereal / [`Value`]                         | JSON                                              |
//! |--------------------------------------------|---------------------------------------------------|
//! | `Undef`                                    | `null`                                            |
//! | `Bool`                                     | `true` / `false`                                  |
//! | `Int`, `UInt`                              | integer                                           |
//! | `Float` (finite)                           | number (shortest form that round-trips)           |
//! | `Float` NaN, +inf, -inf                    | the strings `"NaN"`, `"Infinity"`, `"-Infinity"`  |
//! | `String`; `Binary` that is valid UTF-8      | string (Perl producers send UTF-8 as binary)      |
//! | `Binary` that is not valid UTF-8           | `{"$binary": "<base64>"}`                         |
//! | hash key not valid UTF-8                   | the key `"$binary:<base64>"`                      |
//! | `Array`, `Hash`                            | array, object (keys in document order)            |
//! | `Ref`, `Shared` (REFP, ALIAS, …)           | the referenced value, copied                      |
//! | `Object`                                   | `{"$object": "<class>", "$value": <data>}`        |
//! | `Regexp`                                   | `{"$regexp": "<pattern>", "$flags": "<mods>"}`    |
//!
//! JSON to [`Value`]: `null`, booleans, strings, arrays and objects map back one to one; numbers
//! become `Int` (or `UInt` above `i64::MAX`) when integral in the text, else `Float`. The `$`
//! forms are not interpreted on the way in.

use std::io::{self, Write};

use base64::Engine;

use crate::value::{Key, Value};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Write `value` as compact JSON.
pub fn to_writer<W: Write>(mut w: W, value: &Value) -> io::Result<()> {
    write_value(&mut w, value)
}

/// Render `value` as a compact JSON string.
pub fn to_string(value: &Value) -> String {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = write_value(&mut out, value);
    String::from_utf8(out).unwrap_or_default()
}

/// Convert to a `serde_json::Value` (for pretty-printing or structural comparison).
pub fn to_json_value(value: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        Value::Undef => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(i) => J::from(*i),
        Value::UInt(u) => J::from(*u),
        Value::Float(f) => float_json(*f),
        Value::Binary(b) => match std::str::from_utf8(b) {
            Ok(s) => J::String(s.to_owned()),
            Err(_) => serde_json::json!({ "$binary": B64.encode(b) }),
        },
        Value::String(s) => J::String(s.clone()),
        Value::Array(items) => J::Array(items.iter().map(to_json_value).collect()),
        Value::Hash(entries) => J::Object(
            entries
                .iter()
                .map(|(k, v)| (key_text(k), to_json_value(v)))
                .collect(),
        ),
        Value::Ref(inner) => to_json_value(inner),
        Value::Shared(inner) => to_json_value(inner),
        Value::Object(o) => {
            serde_json::json!({ "$object": o.class, "$value": to_json_value(&o.value) })
        }
        Value::Regexp(r) => {
            serde_json::json!({ "$regexp": to_json_value(&r.pattern), "$flags": r.flags })
        }
    }
}

/// Convert a `serde_json::Value` into a [`Value`] (keys keep their order; equal keys share one
/// allocation, as they would coming out of the decoder).
pub fn from_json_value(j: &serde_json::Value) -> Value {
    let mut keys = rustc_hash::FxHashMap::default();
    convert(j, &mut keys)
}

fn convert<'j>(j: &'j serde_json::Value, keys: &mut rustc_hash::FxHashMap<&'j str, Key>) -> Value {
    use serde_json::Value as J;
    match j {
        J::Null => Value::Undef,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::UInt(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        J::String(s) => Value::String(s.clone()),
        J::Array(items) => Value::Array(items.iter().map(|v| convert(v, keys)).collect()),
        J::Object(map) => Value::Hash(
            map.iter()
                .map(|(k, v)| {
                    let key = keys
                        .entry(k.as_str())
                        .or_insert_with(|| Key::from(k.as_str()))
                        .clone();
                    (key, convert(v, keys))
                })
                .collect(),
        ),
    }
}

/// Parse JSON text into a [`Value`].
pub fn from_json_slice(text: &[u8]) -> serde_json::Result<Value> {
    let j: serde_json::Value = serde_json::from_slice(text)?;
    Ok(from_json_value(&j))
}

fn float_json(f: f64) -> serde_json::Value {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        (if f > 0.0 { "Infinity" } else { "-Infinity" }).into()
    } else {
        serde_json::Number::from_f64(f)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null)
    }
}

fn key_text(k: &Key) -> String {
    match k.as_str() {
        Some(s) => s.to_owned(),
        None => format!("$binary:{}", B64.encode(k.as_bytes())),
    }
}

fn write_str<W: Write>(w: &mut W, s: &str) -> io::Result<()> {
    serde_json::to_writer(w, s).map_err(io::Error::from)
}

fn write_value<W: Write>(w: &mut W, value: &Value) -> io::Result<()> {
    match value {
        Value::Undef => w.write_all(b"null"),
        Value::Bool(true) => w.write_all(b"true"),
        Value::Bool(false) => w.write_all(b"false"),
        Value::Int(i) => write!(w, "{i}"),
        Value::UInt(u) => write!(w, "{u}"),
        Value::Float(f) => serde_json::to_writer(w, &float_json(*f)).map_err(io::Error::from),
        Value::Binary(b) => match std::str::from_utf8(b) {
            Ok(s) => write_str(w, s),
            Err(_) => write!(w, "{{\"$binary\":\"{}\"}}", B64.encode(b)),
        },
        Value::String(s) => write_str(w, s),
        Value::Array(items) => {
            w.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    w.write_all(b",")?;
                }
                write_value(w, item)?;
            }
            w.write_all(b"]")
        }
        Value::Hash(entries) => {
            w.write_all(b"{")?;
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    w.write_all(b",")?;
                }
                match k.as_str() {
                    Some(s) => write_str(w, s)?,
                    None => write_str(w, &key_text(k))?,
                }
                w.write_all(b":")?;
                write_value(w, v)?;
            }
            w.write_all(b"}")
        }
        Value::Ref(inner) => write_value(w, inner),
        Value::Shared(inner) => write_value(w, inner),
        Value::Object(o) => {
            w.write_all(b"{\"$object\":")?;
            write_str(w, &o.class)?;
            w.write_all(b",\"$value\":")?;
            write_value(w, &o.value)?;
            w.write_all(b"}")
        }
        Value::Regexp(r) => {
            w.write_all(b"{\"$regexp\":")?;
            write_value(w, &r.pattern)?;
            w.write_all(b",\"$flags\":")?;
            write_str(w, &r.flags)?;
            w.write_all(b"}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_examples() {
        let v = Value::Hash(vec![
            (
                Key::Binary(b"a"[..].into()),
                Value::Binary(vec![0xff, 0x00]),
            ),
            (Key::Binary(vec![0xe9].into()), Value::Float(f64::NAN)),
            (Key::Utf8("é".into()), Value::Float(1.5)),
            (Key::Utf8("r".into()), Value::Ref(Box::new(Value::Int(-3)))),
        ]);
        assert_eq!(
            to_string(&v),
            r#"{"a":{"$binary":"/wA="},"$binary:6Q==":"NaN","é":1.5,"r":-3}"#
        );
        assert_eq!(
            serde_json::to_string(&to_json_value(&v)).unwrap(),
            to_string(&v)
        );
    }

    #[test]
    fn from_json_keeps_order_and_number_kinds() {
        let v = from_json_slice(br#"{"z":1,"a":[1.0,18446744073709551615,-2,null,true]}"#).unwrap();
        assert_eq!(
            to_string(&v),
            r#"{"z":1,"a":[1.0,18446744073709551615,-2,null,true]}"#
        );
    }
}
