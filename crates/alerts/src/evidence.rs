//! Evidence: the events behind an alert — a few sample events of its window that match the
//! rule (selected fields), how many match, and how to read the rest (`sluice cat` and
//! `GET /v1/events`).
//!
//! The matching events are the rollup's (its dc, type, subtype and `where`), of the alert's
//! group (each `by` field equal to the group's value), and of the rule's evidence condition:
//! `evidence_where` when given, else the first `count where` condition of the expression
//! (the 5xx of an error-ratio rule), else all of the group's events.

use std::collections::BTreeMap;

use serde::Serialize;
use sluice_reader::{RangeReader, ReadItem, ReadOptions, ReadRequest, Selection};
use sluice_store::ReadStore;
use sluice_substreams::registry::{Definition, Transform};

use crate::expr::Expr;
use crate::rule::Rule;

/// Most matching events counted for one alert (the count says "at least" past it).
pub const MAX_COUNTED: u64 = 1_000_000;

/// The evidence of one alert.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// Up to the rule's `samples` events (their `sample_fields`, or whole).
    pub samples: Vec<serde_json::Value>,
    /// Matching events in the window (at most [`MAX_COUNTED`]).
    pub count: u64,
    /// The `--where` of the matching events.
    pub where_: String,
    /// A `sluice cat` command printing them all.
    pub command: String,
    /// The `GET /v1/events` path and query printing them all.
    pub url: String,
}

/// The evidence of the alert of `rule` for the group `labels`, over `[from, to)`.
pub fn gather<S: ReadStore + ?Sized>(
    store: &S,
    rule: &Rule,
    expr: &Expr,
    def: &Definition,
    labels: &BTreeMap<String, String>,
    from: i64,
    to: i64,
) -> Result<Evidence, String> {
    let mut parts = Vec::new();
    if let Transform::Rollup {
        where_: Some(w), ..
    } = &def.transform
    {
        parts.push(w.clone());
    }
    match (&rule.evidence_where, expr.conditions().first()) {
        (Some(w), _) => parts.push(w.clone()),
        (None, Some(c)) => parts.push(c.clone()),
        (None, None) => {}
    }
    for (field, value) in labels {
        parts.push(equals(field, value));
    }
    let where_ = match parts.len() {
        0 => String::new(),
        1 => parts.remove(0),
        _ => parts
            .iter()
            .map(|p| format!("({p})"))
            .collect::<Vec<_>>()
            .join(" and "),
    };
    let selection = Selection::from_texts(
        def.dc.clone(),
        def.type_.clone(),
        def.subtype.clone(),
        &rule.sample_fields,
        (!where_.is_empty()).then_some(where_.as_str()),
    )
    .map_err(|e| e.to_string())?;
    let req = ReadRequest::selected(from, to, selection);
    let reader = RangeReader::new(store, req, ReadOptions::default()).map_err(|e| e.to_string())?;
    let mut samples = Vec::new();
    let mut count = 0u64;
    for item in reader {
        if let ReadItem::Event(e) = item {
            count += e.repeat.max(1);
            if samples.len() < rule.samples {
                samples.push(sereal::json::to_json_value(&e.value));
            }
            if count >= MAX_COUNTED {
                break;
            }
        }
    }
    let mut args = vec![
        "sluice cat".to_owned(),
        format!("--from {from}"),
        format!("--to {to}"),
    ];
    let mut query = vec![format!("from={from}"), format!("to={to}")];
    for (flag, v) in [
        ("dc", &def.dc),
        ("type", &def.type_),
        ("subtype", &def.subtype),
    ] {
        if let Some(v) = v {
            args.push(format!("--{flag} {}", shell_quote(v)));
            query.push(format!("{flag}={}", url_encode(v)));
        }
    }
    if !where_.is_empty() {
        args.push(format!("--where {}", shell_quote(&where_)));
        query.push(format!("where={}", url_encode(&where_)));
    }
    Ok(Evidence {
        samples,
        count,
        where_,
        command: args.join(" "),
        url: format!("/v1/events?{}", query.join("&")),
    })
}

/// `field == value` in the `--where` language: a number as a number, `null` as a missing
/// field, anything else as a quoted string.
fn equals(field: &str, value: &str) -> String {
    let path = if field
        .split('.')
        .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        field.to_owned()
    } else {
        quote(field)
    };
    if value == "null" {
        return format!("not exists {path}");
    }
    if value.parse::<f64>().is_ok_and(f64::is_finite) {
        return format!("{path} == {value}");
    }
    format!("{path} == {}", quote(value))
}

/// A double-quoted string literal of the `--where` language.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A word for a POSIX shell: single-quoted unless plain.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ':'))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Percent-encodes a query parameter value (RFC 3986 unreserved characters kept).
fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_equality_in_the_where_language() {
        assert_eq!(equals("path", "/a\"b"), r#"path == "/a\"b""#);
        assert_eq!(equals("status", "500"), "status == 500");
        assert_eq!(equals("user.id", "null"), "not exists user.id");
        assert_eq!(equals("my key", "x"), r#""my key" == "x""#);
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(url_encode("a b>=5"), "a%20b%3E%3D5");
    }
}
