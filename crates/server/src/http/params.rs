//! The query parameters the read endpoints share: the raw query split into pairs
//! ([`parse_query`]), a time (`from`, `to`: [`time`]), a range read's window ([`TimeRange`]),
//! the output format ([`format()`]) and the error for a key no endpoint takes ([`unknown`]).
//!
//! Contracts: a bad value is refused with a message naming its parameter (`from: …`), which the
//! handler answers with **400**; nothing here reads the clock (each handler passes `now`, so a
//! request sees one `now` for all its relative times). The filters (`dc`, `type`, `subtype`,
//! `select`, `where`) are parsed by [`sluice_reader::Selection::accept`], not here.

use sluice_reader::OutputFormat;

/// Splits a raw query string into decoded `(key, value)` pairs (`+` is a space).
pub(crate) use sluice_reader::selection::parse_query;

/// The answer when a range read has no `from`.
pub const FROM_REQUIRED: &str =
    "`from` is required (Unix seconds, RFC 3339, `now` or relative like -5m)";

/// The time in parameter `name`: Unix seconds, RFC 3339, `now` or relative to `now` (`-5m`).
pub fn time(name: &str, value: &str, now: i64) -> Result<i64, String> {
    sluice_reader::parse_time(value, now).map_err(|e| format!("{name}: {e}"))
}

/// The output format in `format=`: `json` (NDJSON) or `sereal`.
pub fn format(value: &str) -> Result<OutputFormat, String> {
    value.parse().map_err(|e| format!("format: {e}"))
}

/// `hints=1` (or `true`): the client wants hints (`sluice_reader::hints`: a type or field never
/// seen, an empty range…) — in `GET /v1/events`' trailer line, as `event: hint` in
/// `GET /v1/tail`. Off by default, so that a consumer that knows nothing of them never sees
/// an extra line.
pub fn hints(value: &str) -> Result<bool, String> {
    match value {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        other => Err(format!("hints: {other:?} is not 1, 0, true or false")),
    }
}

/// The error for a parameter the endpoint does not take.
pub fn unknown(key: &str) -> String {
    format!("unknown parameter {key:?}")
}

/// The window of a range read: `from` (required) and `to` (exclusive, default `now + 1`).
#[derive(Debug, Default)]
pub struct TimeRange {
    from: Option<i64>,
    to: Option<i64>,
}

impl TimeRange {
    /// Takes `key=value` when `key` is `from` or `to` (`Ok(true)`); `Ok(false)` for any other key.
    pub fn accept(&mut self, key: &str, value: &str, now: i64) -> Result<bool, String> {
        match key {
            "from" => self.from = Some(time("from", value, now)?),
            "to" => self.to = Some(time("to", value, now)?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `(from, to)`; [`FROM_REQUIRED`] without `from`.
    pub fn finish(self, now: i64) -> Result<(i64, i64), String> {
        let from = self.from.ok_or(FROM_REQUIRED)?;
        Ok((from, self.to.unwrap_or(now + 1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn range(query: &str) -> Result<(i64, i64), String> {
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
        assert_eq!(range("to=now"), Err(FROM_REQUIRED.to_string()));
        assert_eq!(range(""), Err(FROM_REQUIRED.to_string()));
        let e = range("from=yesterday").unwrap_err();
        assert!(e.starts_with("from: "), "{e}");
        let e = range("from=1&to=%00").unwrap_err();
        assert!(e.starts_with("to: "), "{e}");
        assert_eq!(range("from=1&limit=5"), Err(unknown("limit")));
        assert_eq!(unknown("limit"), "unknown parameter \"limit\"");
    }

    #[test]
    fn format_is_json_or_sereal() {
        assert_eq!(format("json"), Ok(OutputFormat::Json));
        assert_eq!(format("sereal"), Ok(OutputFormat::Sereal));
        let e = format("xml").unwrap_err();
        assert!(e.starts_with("format: "), "{e}");
    }
}
