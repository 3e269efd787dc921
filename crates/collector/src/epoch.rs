//! An event's `epoch` as people write it, normalised to whole Unix seconds — the one place
//! ingest (JSON, NDJSON, Sereal) and `POST /v1/drops` read it.
//!
//! | written as | example | read as |
//! |---|---|---|
//! | whole seconds | `1795928400` | that second |
//! | milliseconds: an integer `>=` [`MS_THRESHOLD`] (10¹¹) | `1795928400250` | divided by 1000, floored |
//! | float seconds (a float `>=` 10¹¹: float milliseconds) | `1795928400.75` | floored |
//! | RFC 3339 string, with `Z` or an offset, fractions allowed | `"2026-11-29T05:00:00Z"`, `"2026-11-29T06:00:00.5+01:00"` | that instant, floored to the second |
//!
//! Anything else (a numeric string, a date without an offset, a boolean, NaN, …) is refused
//! with [`ACCEPTED`] in the message. Whole seconds below 10¹¹ (until the year 5138) are never
//! read as milliseconds, and milliseconds of any date after March 1973 are 10¹¹ or more, so the
//! two cannot be confused for real times. The window check (retention, future limit) is the
//! caller's, on the normalised second.
//!
//! The stored event's `epoch` field holds the normalised second (an integer), so readers of
//! the original `epochs → events` API see what they always saw; the value as sent is not kept.
//! The WAL logs the payload as received and replay parses it again through this function, so a
//! replayed event gets the same second.

use sereal::Value;

/// Integers (and floats) at or above this are milliseconds: 10¹¹ seconds is the year 5138,
/// 10¹¹ milliseconds is March 1973.
pub const MS_THRESHOLD: i64 = 100_000_000_000;

/// The accepted forms, for error messages.
pub const ACCEPTED: &str = "Unix seconds (1795928400), milliseconds (1795928400000), float \
     seconds (1795928400.5) or an RFC 3339 string (\"2026-11-29T05:00:00Z\")";

/// An `epoch` value as a payload held it (the variants the formats can carry).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EpochInput<'a> {
    /// An integer.
    Int(i64),
    /// An integer above `i64::MAX`.
    UInt(u64),
    /// A float.
    Float(f64),
    /// A string.
    Text(&'a str),
    /// Anything else, by kind (`"a boolean"`, `"an array"`, …).
    Other(&'static str),
}

/// The whole Unix second `input` names, or why it names none (a sentence ending with the
/// accepted forms).
pub fn normalize(input: EpochInput<'_>) -> Result<i64, String> {
    match input {
        EpochInput::Int(e) if e >= MS_THRESHOLD => Ok(e.div_euclid(1000)),
        EpochInput::Int(e) => Ok(e),
        EpochInput::UInt(u) => Err(format!("epoch {u} out of range; use {ACCEPTED}")),
        EpochInput::Float(f) => float_seconds(f),
        EpochInput::Text(s) => rfc3339(s),
        EpochInput::Other(kind) => Err(format!("epoch is {kind}, not a time; use {ACCEPTED}")),
    }
}

/// [`normalize`] of a decoded (Sereal or JSON) value.
pub fn from_value(v: &Value) -> Result<i64, String> {
    let v = v.resolve();
    normalize(match v {
        Value::Int(e) => EpochInput::Int(*e),
        Value::UInt(u) => EpochInput::UInt(*u),
        Value::Float(f) => EpochInput::Float(*f),
        Value::String(s) => EpochInput::Text(s),
        Value::Binary(b) => match std::str::from_utf8(b) {
            Ok(s) => EpochInput::Text(s),
            Err(_) => EpochInput::Other("a byte string that is not UTF-8"),
        },
        Value::Undef => EpochInput::Other("null"),
        Value::Bool(_) => EpochInput::Other("a boolean"),
        Value::Array(_) => EpochInput::Other("an array"),
        Value::Hash(_) => EpochInput::Other("a map"),
        _ => EpochInput::Other("a reference or object"),
    })
}

/// [`normalize`] of a `serde_json` value (`POST /v1/drops`).
pub fn from_json(v: &serde_json::Value) -> Result<i64, String> {
    use serde_json::Value as J;
    normalize(match v {
        J::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => EpochInput::Int(i),
            (None, Some(u), _) => EpochInput::UInt(u),
            (None, None, Some(f)) => EpochInput::Float(f),
            _ => EpochInput::Other("a number out of range"),
        },
        J::String(s) => EpochInput::Text(s),
        J::Null => EpochInput::Other("null"),
        J::Bool(_) => EpochInput::Other("a boolean"),
        J::Array(_) => EpochInput::Other("an array"),
        J::Object(_) => EpochInput::Other("a map"),
    })
}

/// Float seconds (float milliseconds at or above [`MS_THRESHOLD`]), floored.
fn float_seconds(f: f64) -> Result<i64, String> {
    if !f.is_finite() {
        return Err(format!("epoch {f} is not a time; use {ACCEPTED}"));
    }
    let secs = if f >= MS_THRESHOLD as f64 {
        f / 1000.0
    } else {
        f
    };
    let floor = secs.floor();
    // i64::MAX as f64 rounds up to 2^63, itself out of range: compare strictly.
    if floor < i64::MIN as f64 || floor >= i64::MAX as f64 {
        return Err(format!("epoch {f} out of range; use {ACCEPTED}"));
    }
    Ok(floor as i64)
}

/// An RFC 3339 instant (`jiff` parses it: offsets, fractions), floored to the second.
fn rfc3339(s: &str) -> Result<i64, String> {
    let shown: String = s.chars().take(40).collect();
    match s.trim().parse::<jiff::Timestamp>() {
        // as_second truncates toward zero; before 1970 a fraction makes it one too late.
        Ok(t) if t.subsec_nanosecond() < 0 => Ok(t.as_second() - 1),
        Ok(t) => Ok(t.as_second()),
        Err(_) => Err(format!(
            "epoch {shown:?} is not a time; use {ACCEPTED} (an RFC 3339 string needs a date, a \
             time and `Z` or an offset)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_795_928_400; // 2026-11-29T05:00:00Z

    #[test]
    fn every_accepted_form_gives_the_whole_second() {
        let cases: Vec<(EpochInput<'_>, i64)> = vec![
            (EpochInput::Int(T), T),
            (EpochInput::Int(0), 0),
            (EpochInput::Int(T * 1000), T),
            (EpochInput::Int(T * 1000 + 999), T),
            (EpochInput::Int(MS_THRESHOLD), MS_THRESHOLD / 1000),
            (EpochInput::Int(MS_THRESHOLD - 1), MS_THRESHOLD - 1),
            (EpochInput::Float(T as f64 + 0.75), T),
            (EpochInput::Float(T as f64), T),
            (EpochInput::Float(-0.5), -1),
            (EpochInput::Float(T as f64 * 1000.0 + 500.0), T),
            (EpochInput::Text("2026-11-29T05:00:00Z"), T),
            (EpochInput::Text("2026-11-29T05:00:00z"), T),
            (EpochInput::Text("2026-11-29T06:00:00+01:00"), T),
            (EpochInput::Text("2026-11-29T00:00:00-05:00"), T),
            (EpochInput::Text("2026-11-29T05:00:00.999999Z"), T),
            (EpochInput::Text("2026-11-29T05:00:01.5+00:00"), T + 1),
            (EpochInput::Text("1969-12-31T23:59:59.5Z"), -1),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), Ok(want), "{input:?}");
        }
    }

    #[test]
    fn anything_else_is_refused_naming_the_accepted_forms() {
        for input in [
            EpochInput::Text("1795928400"),
            EpochInput::Text("2026-11-29T05:00:00"),
            EpochInput::Text("2026-11-29"),
            EpochInput::Text("yesterday"),
            EpochInput::Text(""),
            EpochInput::Float(f64::NAN),
            EpochInput::Float(f64::INFINITY),
            EpochInput::Float(1e30),
            EpochInput::UInt(u64::MAX),
            EpochInput::Other("a boolean"),
        ] {
            let e = normalize(input).expect_err("refused");
            assert!(e.contains("RFC 3339") && e.contains("milliseconds"), "{e}");
        }
    }

    #[test]
    fn decoded_values_and_json_agree() {
        let pairs = [
            (Value::Int(T * 1000), serde_json::json!(T * 1000)),
            (
                Value::Float(T as f64 + 0.2),
                serde_json::json!(T as f64 + 0.2),
            ),
            (
                Value::String("2026-11-29T05:00:00Z".into()),
                serde_json::json!("2026-11-29T05:00:00Z"),
            ),
            (
                Value::Binary(b"2026-11-29T05:00:00Z".to_vec()),
                serde_json::json!("2026-11-29T05:00:00Z"),
            ),
        ];
        for (v, j) in pairs {
            assert_eq!(from_value(&v), Ok(T));
            assert_eq!(from_json(&j), Ok(T));
        }
        assert!(from_value(&Value::Bool(true)).is_err());
        assert!(from_json(&serde_json::json!(null)).is_err());
    }
}
