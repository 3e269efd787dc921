//! The query parameters the read endpoints share: the raw query split into pairs
//! ([`parse_query`]), a time (`from`, `to`: [`time`]), a range read's window ([`TimeRange`]),
//! the output format ([`format()`]) and the error for a key no endpoint takes ([`unknown`]);
//! every refusal is a [`ParamError`].
//!
//! Contracts: a bad value is refused with a message naming its parameter (`from: …`), which the
//! handler answers with **400**; nothing here reads the clock (each handler passes `now`, so a
//! request sees one `now` for all its relative times). The filters (`dc`, `type`, `subtype`,
//! `select`, `where`) are parsed by [`sluice_reader::Selection::accept`], not here.

use sluice_reader::{CursorError, FormatError, OutputFormat, SelectionError, TimeError};

/// Splits a raw query string into decoded `(key, value)` pairs (`+` is a space).
pub(crate) use sluice_reader::selection::parse_query;

/// The answer when a range read has no `from`.
pub const FROM_REQUIRED: &str =
    "`from` is required (Unix seconds, RFC 3339, `now` or relative like -5m)";

/// A query parameter refused; its text (the HTTP error body) names the parameter first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParamError {
    /// A time (`from`, `to`) that does not parse.
    #[error("{name}: {source}")]
    Time {
        /// The parameter.
        name: String,
        /// Why.
        source: TimeError,
    },
    /// `format=` names no wire format.
    #[error("format: {0}")]
    Format(#[from] FormatError),
    /// `hints=` is not a boolean.
    #[error("hints: {0:?} is not 1, 0, true or false")]
    Hints(String),
    /// A switch (`columns=`) that is not on or off.
    #[error("{name}: {value:?} is not on, off, 1, 0, true or false")]
    Switch {
        /// The parameter.
        name: String,
        /// The value given.
        value: String,
    },
    /// `cursor=` is not a tail's cursor.
    #[error("cursor: {0}")]
    Cursor(#[from] CursorError),
    /// A count (`top`, `max_groups`) that is not a whole number.
    #[error("{name}: expected a whole number, got {value:?}")]
    Count {
        /// The parameter.
        name: String,
        /// The value given.
        value: String,
    },
    /// A filter (`dc`, `type`, `select`, `where`…) refused by the selection.
    #[error("{0}")]
    Selection(#[from] SelectionError),
    /// The reduce parameters (`group_by`, `agg`, `window`, …) do not make a plan.
    #[error("{0}")]
    Plan(String),
    /// A range read without `from`.
    #[error("{FROM_REQUIRED}")]
    FromRequired,
    /// A parameter the endpoint does not take.
    #[error("unknown parameter {0:?}")]
    Unknown(String),
}

/// The handlers answer a refused parameter with its text.
impl From<ParamError> for String {
    fn from(e: ParamError) -> String {
        e.to_string()
    }
}

/// The time in parameter `name`: Unix seconds, RFC 3339, `now` or relative to `now` (`-5m`).
pub fn time(name: &str, value: &str, now: i64) -> Result<i64, ParamError> {
    sluice_reader::parse_time(value, now).map_err(|source| ParamError::Time {
        name: name.to_owned(),
        source,
    })
}

/// The output format in `format=`: a wire format, `json` (NDJSON) or `sereal`
/// ([`OutputFormat::WIRE`]; the names and the message are `sluice_reader::output`'s).
pub fn format(value: &str) -> Result<OutputFormat, ParamError> {
    Ok(OutputFormat::parse_among(value, OutputFormat::WIRE)?)
}

/// `hints=1` (or `true`): the client wants hints (`sluice_reader::hints`: a type or field never
/// seen, an empty range…) — in `GET /v1/events`' trailer line, as `event: hint` in
/// `GET /v1/tail`. Off by default, so that a consumer that knows nothing of them never sees
/// an extra line.
pub fn hints(value: &str) -> Result<bool, ParamError> {
    match value {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        other => Err(ParamError::Hints(other.to_owned())),
    }
}

/// A switch (`columns=off` reads blobs only): `on`/`1`/`true` or `off`/`0`/`false`.
pub fn on_off(name: &str, value: &str) -> Result<bool, ParamError> {
    match value {
        "on" | "1" | "true" => Ok(true),
        "off" | "0" | "false" => Ok(false),
        other => Err(ParamError::Switch {
            name: name.to_owned(),
            value: other.to_owned(),
        }),
    }
}

/// A count parameter (`top`, `max_groups`): a whole number.
pub fn count(name: &str, value: &str) -> Result<usize, ParamError> {
    value.parse::<usize>().map_err(|_| ParamError::Count {
        name: name.to_owned(),
        value: value.to_owned(),
    })
}

/// The error for a parameter the endpoint does not take.
pub fn unknown(key: &str) -> ParamError {
    ParamError::Unknown(key.to_owned())
}

/// The window of a range read: `from` (required) and `to` (exclusive, default `now + 1`).
#[derive(Debug, Default)]
pub struct TimeRange {
    from: Option<i64>,
    to: Option<i64>,
}

impl TimeRange {
    /// Takes `key=value` when `key` is `from` or `to` (`Ok(true)`); `Ok(false)` for any other key.
    pub fn accept(&mut self, key: &str, value: &str, now: i64) -> Result<bool, ParamError> {
        match key {
            "from" => self.from = Some(time("from", value, now)?),
            "to" => self.to = Some(time("to", value, now)?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `(from, to)`; [`ParamError::FromRequired`] without `from`.
    pub fn finish(self, now: i64) -> Result<(i64, i64), ParamError> {
        let from = self.from.ok_or(ParamError::FromRequired)?;
        Ok((from, self.to.unwrap_or(now + 1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn range(query: &str) -> Result<(i64, i64), ParamError> {
        let mut r = TimeRange::default();
        for (k, v) in parse_query(query) {
            if !r.accept(&k, &v, NOW)? {
                return Err(unknown(&k));
            }
        }
        r.finish(NOW)
    }

    #[test]
    fn range_takes_every_time_syntax_and_defaults_to_after_now() {
        assert_eq!(range("from=1699999990"), Ok((1_699_999_990, NOW + 1)));
        assert_eq!(range("from=-5m&to=now"), Ok((NOW - 300, NOW)));
        assert_eq!(
            range("from=2023-11-14T22:13:20Z&to=1700000005"),
            Ok((NOW, NOW + 5))
        );
        // The last value of a repeated key wins.
        assert_eq!(range("from=1&from=2&to=3"), Ok((2, 3)));
    }

    #[test]
    fn range_errors_name_the_parameter() {
        assert_eq!(range("to=now").unwrap_err().to_string(), FROM_REQUIRED);
        assert_eq!(range("").unwrap_err().to_string(), FROM_REQUIRED);
        let e = range("from=yesterday").unwrap_err().to_string();
        assert!(e.starts_with("from: "), "{e}");
        let e = range("from=1&to=%00").unwrap_err().to_string();
        assert!(e.starts_with("to: "), "{e}");
        assert_eq!(range("from=1&limit=5"), Err(unknown("limit")));
        assert_eq!(unknown("limit").to_string(), "unknown parameter \"limit\"");
    }

    #[test]
    fn format_is_json_or_sereal() {
        assert_eq!(format("json"), Ok(OutputFormat::Json));
        assert_eq!(format("sereal"), Ok(OutputFormat::Sereal));
        let e = format("xml").unwrap_err().to_string();
        assert_eq!(e, "format: unknown format \"xml\": one of json, sereal");
        assert!(format("pretty").is_err());
    }
}
