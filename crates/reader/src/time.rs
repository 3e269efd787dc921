//! Time arguments of `--from` / `--to` (and the HTTP API's `from` / `to`): Unix seconds, RFC 3339,
//! or relative to a given "now".
//!
//! | form | example | meaning |
//! |---|---|---|
//! | Unix seconds | `1700000000` | that second (UTC); non-negative, at most 12 digits |
//! | RFC 3339 | `2026-11-22T08:00:00Z`, `2026-11-22T10:00:00+02:00`, `2026-11-22 08:00:00.5z` | that instant, truncated to the second (fractions are dropped, not rounded) |
//! | `now` | `now` | the `now` passed in |
//! | relative | `-5m`, `-90s`, `-2h`, `-1d`, `+10s` | `now` plus/minus that many seconds, minutes, hours or days |
//!
//! A relative time needs its sign (`5m` alone is an error, so a typo never becomes an absolute
//! epoch). `now` is passed in by the caller, so tests and a server can use their own clock.
//!
//! ```
//! use sluice_reader::time::parse_time;
//! let now = 1_700_000_000;
//! assert_eq!(parse_time("1700000000", now), Ok(1_700_000_000));
//! assert_eq!(parse_time("2023-11-14T22:13:20Z", now), Ok(1_700_000_000));
//! assert_eq!(parse_time("2023-11-15T00:13:20+02:00", now), Ok(1_700_000_000));
//! assert_eq!(parse_time("-5m", now), Ok(now - 300));
//! assert!(parse_time("yesterday", now).is_err());
//! ```

use std::fmt;

/// Why a time argument does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeError {
    /// The argument is empty (or only whitespace).
    Empty,
    /// Looks like none of the accepted forms.
    Unrecognised(String),
    /// A relative time (`-5m`) whose number or unit is wrong.
    BadRelative {
        /// The argument.
        input: String,
        /// What is wrong.
        reason: String,
    },
    /// An RFC 3339 time that does not parse or names no real instant (e.g. February 30).
    BadRfc3339 {
        /// The argument.
        input: String,
        /// What is wrong.
        reason: String,
    },
    /// The result is outside the supported range (year 0000 to 9999, non-negative epochs).
    OutOfRange(String),
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeError::Empty => {
                f.write_str("empty time; expected Unix seconds, RFC 3339, `now` or e.g. `-5m`")
            }
            TimeError::Unrecognised(s) => write!(
                f,
                "unrecognised time {s:?}; expected Unix seconds (1700000000), RFC 3339 \
                 (2026-11-22T08:00:00Z), `now`, or a relative time (-90s, -5m, -2h, -1d)"
            ),
            TimeError::BadRelative { input, reason } => {
                write!(f, "bad relative time {input:?}: {reason}")
            }
            TimeError::BadRfc3339 { input, reason } => {
                write!(f, "bad RFC 3339 time {input:?}: {reason}")
            }
            TimeError::OutOfRange(s) => write!(f, "time {s:?} is out of range"),
        }
    }
}

impl std::error::Error for TimeError {}

/// Parses a time argument to Unix seconds (see the [module docs](self) for the forms).
pub fn parse_time(input: &str, now: i64) -> Result<i64, TimeError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(TimeError::Empty);
    }
    let shown = || cut(s);
    if s.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    let b = s.as_bytes();
    if b[0] == b'-' || b[0] == b'+' {
        return parse_relative(s, now);
    }
    if b.iter().all(u8::is_ascii_digit) {
        if b.len() > 12 {
            return Err(TimeError::OutOfRange(shown()));
        }
        return s.parse::<i64>().map_err(|_| TimeError::OutOfRange(shown()));
    }
    if b.len() >= 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' {
        return parse_rfc3339(s);
    }
    Err(TimeError::Unrecognised(shown()))
}

/// The current time as Unix seconds (the `now` to pass to [`parse_time`] outside tests).
pub fn now_unix() -> i64 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

fn cut(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

fn parse_relative(s: &str, now: i64) -> Result<i64, TimeError> {
    let bad = |reason: &str| TimeError::BadRelative {
        input: cut(s),
        reason: reason.to_owned(),
    };
    let negative = s.starts_with('-');
    let rest = &s[1..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(bad("expected a number after the sign, e.g. -5m"));
    }
    if digits > 12 {
        return Err(TimeError::OutOfRange(cut(s)));
    }
    let n: i64 = rest[..digits]
        .parse()
        .map_err(|_| bad("number too large"))?;
    let unit = match &rest[digits..] {
        "" => return Err(bad("missing unit: one of s, m, h, d")),
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        other => return Err(bad(&format!("unknown unit {other:?}: one of s, m, h, d"))),
    };
    let delta = n
        .checked_mul(unit)
        .ok_or_else(|| TimeError::OutOfRange(cut(s)))?;
    let t = if negative {
        now.checked_sub(delta)
    } else {
        now.checked_add(delta)
    };
    t.ok_or_else(|| TimeError::OutOfRange(cut(s)))
}

/// `YYYY-MM-DD[Tt ]HH:MM:SS[.frac](Z|z|±HH:MM)`.
fn parse_rfc3339(s: &str) -> Result<i64, TimeError> {
    let bad = |reason: &str| TimeError::BadRfc3339 {
        input: cut(s),
        reason: reason.to_owned(),
    };
    let b = s.as_bytes();
    let num = |at: usize, len: usize, what: &str| -> Result<i64, TimeError> {
        let part = b
            .get(at..at + len)
            .ok_or_else(|| bad(&format!("too short: missing {what}")))?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(bad(&format!("{what} must be {len} digits")));
        }
        Ok(part
            .iter()
            .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0')))
    };
    let expect = |at: usize, chars: &[u8], what: &str| -> Result<(), TimeError> {
        match b.get(at) {
            Some(c) if chars.contains(c) => Ok(()),
            _ => Err(bad(&format!("expected {what} at byte {at}"))),
        }
    };
    let year = num(0, 4, "year")?;
    expect(4, b"-", "'-'")?;
    let month = num(5, 2, "month")?;
    expect(7, b"-", "'-'")?;
    let day = num(8, 2, "day")?;
    if b.len() == 10 {
        return Err(bad(
            "a time of day and an offset are required, e.g. 2026-11-22T08:00:00Z",
        ));
    }
    expect(10, b"Tt ", "'T' between date and time")?;
    let hour = num(11, 2, "hour")?;
    expect(13, b":", "':'")?;
    let minute = num(14, 2, "minute")?;
    expect(16, b":", "':'")?;
    let second = num(17, 2, "second")?;
    let mut pos = 19;
    if b.get(pos) == Some(&b'.') {
        pos += 1;
        let n = b[pos..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return Err(bad("expected digits after '.'"));
        }
        pos += n;
    }
    let offset = match b.get(pos) {
        Some(b'Z' | b'z') => {
            pos += 1;
            0
        }
        Some(&sign @ (b'+' | b'-')) => {
            let oh = num(pos + 1, 2, "offset hours")?;
            expect(pos + 3, b":", "':' in the offset")?;
            let om = num(pos + 4, 2, "offset minutes")?;
            pos += 6;
            if oh > 23 || om > 59 {
                return Err(bad("offset out of range"));
            }
            let o = oh * 3_600 + om * 60;
            if sign == b'-' {
                -o
            } else {
                o
            }
        }
        None => return Err(bad("missing offset: end with Z or ±HH:MM")),
        Some(_) => return Err(bad(&format!("expected Z or ±HH:MM at byte {pos}"))),
    };
    if pos != b.len() {
        return Err(bad(&format!("unexpected text after byte {pos}")));
    }
    if !(1..=12).contains(&month) {
        return Err(bad("month must be 01-12"));
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(bad("no such day in that month"));
    }
    if hour > 23 || minute > 59 || second > 60 {
        return Err(bad("time of day out of range"));
    }
    // A leap second (:60) is read as the next second's start, as most systems do.
    let t =
        days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second - offset;
    if t < 0 {
        return Err(TimeError::OutOfRange(cut(s)));
    }
    Ok(t)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2023, 11, 14), 19_675);
    }
}
