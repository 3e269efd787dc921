//! Time arguments of `--from` / `--to` (and the HTTP API's `from` / `to`): Unix seconds or
//! milliseconds, RFC 3339 (with or without an offset), or relative to a given "now"; and the one
//! way times are shown ([`format_time`]: RFC 3339 in a [`Zone`]).
//!
//! | form | example | meaning |
//! |---|---|---|
//! | Unix seconds | `1700000000` | that second (UTC); non-negative, at most 12 digits |
//! | Unix milliseconds | `1700000000123` | exactly 13 digits: that millisecond, truncated to the second |
//! | RFC 3339 | `2026-11-22T08:00:00Z`, `2026-11-22T10:00:00+02:00`, `2026-11-22 08:00:00.5z` | that instant, truncated to the second (fractions are dropped, not rounded) |
//! | local date-time | `2026-11-24T09:30`, `2026-11-24T09:30:00`, `2026-11-24` | that wall-clock time (midnight for a date) in the zone passed in (`--tz`; default UTC) |
//! | `now` | `now` | the `now` passed in |
//! | relative | `-5m`, `-90s`, `-2h`, `-1d`, `-1w`, `+10s` | `now` plus/minus that many seconds, minutes, hours, days or weeks |
//!
//! A relative time needs its sign (`5m` alone is an error, so a typo never becomes an absolute
//! epoch). `now` is passed in by the caller, so tests and a server can use their own clock. A
//! local time that a zone skips (a DST gap) is read as the instant after the gap; one it repeats
//! (a DST fold) as the earlier instant (`jiff`'s "compatible" rule, as RFC 5545).
//!
//! A [`Zone`] is `UTC`, a fixed offset (`+02:00`, `-0530`) or an IANA name (`Europe/Paris`, read
//! from the system's zoneinfo database).
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
    /// A `--tz` that is neither `UTC`, an offset nor a known IANA zone name.
    BadZone {
        /// The argument.
        input: String,
        /// What is wrong.
        reason: String,
    },
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeError::Empty => {
                f.write_str("empty time; expected Unix seconds, RFC 3339, `now` or e.g. `-5m`")
            }
            TimeError::Unrecognised(s) => write!(
                f,
                "unrecognised time {s:?}; expected Unix seconds (1700000000) or milliseconds \
                 (1700000000000), RFC 3339 (2026-11-22T08:00:00Z, or 2026-11-22T08:00 in --tz), \
                 `now`, or a relative time (-90s, -5m, -2h, -1d, -1w)"
            ),
            TimeError::BadRelative { input, reason } => {
                write!(f, "bad relative time {input:?}: {reason}")
            }
            TimeError::BadRfc3339 { input, reason } => {
                write!(f, "bad RFC 3339 time {input:?}: {reason}")
            }
            TimeError::OutOfRange(s) => write!(f, "time {s:?} is out of range"),
            TimeError::BadZone { input, reason } => write!(
                f,
                "unknown time zone {input:?} ({reason}); expected UTC, an offset like +02:00, \
                 or an IANA name like Europe/Paris"
            ),
        }
    }
}

impl std::error::Error for TimeError {}

/// A time zone for reading local times and showing times: see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    tz: jiff::tz::TimeZone,
    utc: bool,
}

impl Default for Zone {
    fn default() -> Zone {
        Zone::utc()
    }
}

impl Zone {
    /// UTC.
    pub fn utc() -> Zone {
        Zone {
            tz: jiff::tz::TimeZone::UTC,
            utc: true,
        }
    }

    /// Parses `UTC` / `Z`, `±HH:MM` / `±HHMM` / `±HH`, or an IANA name.
    pub fn parse(input: &str) -> Result<Zone, TimeError> {
        let s = input.trim();
        let bad = |reason: &str| TimeError::BadZone {
            input: cut(s),
            reason: reason.to_owned(),
        };
        if s.eq_ignore_ascii_case("utc") || s.eq_ignore_ascii_case("z") {
            return Ok(Zone::utc());
        }
        if let Some(rest) = s.strip_prefix(['+', '-']) {
            let digits: String = rest.chars().filter(|c| *c != ':').collect();
            let ok_shape = matches!(rest.len(), 2 | 4) && rest.bytes().all(|b| b.is_ascii_digit())
                || rest.len() == 5 && rest.as_bytes()[2] == b':' && digits.len() == 4;
            if !ok_shape || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("an offset is ±HH:MM, ±HHMM or ±HH"));
            }
            let h: i32 = digits[..2].parse().map_err(|_| bad("bad hours"))?;
            let m: i32 = digits
                .get(2..4)
                .map_or(Ok(0), str::parse)
                .map_err(|_| bad("bad minutes"))?;
            if h > 23 || m > 59 {
                return Err(bad("offset out of range"));
            }
            let secs = (h * 3_600 + m * 60) * if s.starts_with('-') { -1 } else { 1 };
            let offset = jiff::tz::Offset::from_seconds(secs).map_err(|e| bad(&e.to_string()))?;
            return Ok(Zone {
                tz: jiff::tz::TimeZone::fixed(offset),
                utc: secs == 0,
            });
        }
        let tz = jiff::tz::TimeZone::get(s).map_err(|_| bad("not in the system's zoneinfo"))?;
        Ok(Zone { tz, utc: false })
    }

    /// Whether this is UTC (times are then shown with `Z`).
    pub fn is_utc(&self) -> bool {
        self.utc
    }
}

/// Shows Unix seconds as RFC 3339 in `zone`: `2026-11-24T09:30:00Z` in UTC, else with the
/// zone's offset at that instant (`2026-11-24T10:30:00+01:00`). A fractional epoch keeps its
/// milliseconds (`…:00.250Z`). Out of range (or not finite): the number as it is.
pub fn format_time(epoch: f64, zone: &Zone) -> String {
    let millis = (epoch * 1000.0).round();
    let ts = if millis.is_finite() && millis.abs() < 2.5e14 {
        jiff::Timestamp::from_millisecond(millis as i64).ok()
    } else {
        None
    };
    let Some(ts) = ts else {
        return epoch.to_string();
    };
    let zoned = ts.to_zoned(zone.tz.clone());
    let frac = if millis as i64 % 1000 != 0 {
        ".%3f"
    } else {
        ""
    };
    let pattern = if zone.utc {
        format!("%Y-%m-%dT%H:%M:%S{frac}Z")
    } else {
        format!("%Y-%m-%dT%H:%M:%S{frac}%:z")
    };
    zoned.strftime(&pattern).to_string()
}

/// Parses a time argument to Unix seconds (see the [module docs](self) for the forms); a local
/// date-time without an offset is read in UTC.
pub fn parse_time(input: &str, now: i64) -> Result<i64, TimeError> {
    parse_time_in(input, now, &Zone::utc())
}

/// [`parse_time`], reading a local date-time without an offset in `zone`.
pub fn parse_time_in(input: &str, now: i64, zone: &Zone) -> Result<i64, TimeError> {
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
        // 13 digits: milliseconds (from 2001-09-09 on); seconds have at most 12 until year 33658.
        if b.len() == 13 {
            return s
                .parse::<i64>()
                .map(|ms| ms / 1000)
                .map_err(|_| TimeError::OutOfRange(shown()));
        }
        if b.len() > 12 {
            return Err(TimeError::OutOfRange(shown()));
        }
        return s.parse::<i64>().map_err(|_| TimeError::OutOfRange(shown()));
    }
    if b.len() >= 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' {
        return parse_rfc3339(s, zone);
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
        "" => return Err(bad("missing unit: one of s, m, h, d, w")),
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        other => {
            return Err(bad(&format!(
                "unknown unit {other:?}: one of s, m, h, d, w"
            )))
        }
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

/// `YYYY-MM-DD[Tt ]HH:MM:SS[.frac](Z|z|±HH:MM)`; without the offset (and then optionally without
/// the seconds, or the whole time of day) a wall-clock time in `zone`.
fn parse_rfc3339(s: &str, zone: &Zone) -> Result<i64, TimeError> {
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
    let check_date = || -> Result<(), TimeError> {
        if !(1..=12).contains(&month) {
            return Err(bad("month must be 01-12"));
        }
        if day < 1 || day > days_in_month(year, month) {
            return Err(bad("no such day in that month"));
        }
        Ok(())
    };
    if b.len() == 10 {
        check_date()?;
        return local_in(zone, s, year, month, day, 0, 0, 0);
    }
    expect(10, b"Tt ", "'T' between date and time")?;
    let hour = num(11, 2, "hour")?;
    expect(13, b":", "':'")?;
    let minute = num(14, 2, "minute")?;
    if b.len() == 16 {
        check_date()?;
        if hour > 23 || minute > 59 {
            return Err(bad("time of day out of range"));
        }
        return local_in(zone, s, year, month, day, hour, minute, 0);
    }
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
        None => {
            check_date()?;
            if hour > 23 || minute > 59 || second > 59 {
                return Err(bad("time of day out of range"));
            }
            return local_in(zone, s, year, month, day, hour, minute, second);
        }
        Some(_) => return Err(bad(&format!("expected Z or ±HH:MM at byte {pos}"))),
    };
    if pos != b.len() {
        return Err(bad(&format!("unexpected text after byte {pos}")));
    }
    check_date()?;
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

/// A wall-clock time (already range-checked) in `zone`, as Unix seconds.
#[allow(clippy::too_many_arguments)]
fn local_in(
    zone: &Zone,
    s: &str,
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
) -> Result<i64, TimeError> {
    let bad = |reason: String| TimeError::BadRfc3339 {
        input: cut(s),
        reason,
    };
    let narrow = |v: i64| i8::try_from(v).map_err(|_| TimeError::OutOfRange(cut(s)));
    let year = i16::try_from(year).map_err(|_| TimeError::OutOfRange(cut(s)))?;
    let dt = jiff::civil::DateTime::new(
        year,
        narrow(month)?,
        narrow(day)?,
        narrow(hour)?,
        narrow(minute)?,
        narrow(second)?,
        0,
    )
    .map_err(|e| bad(e.to_string()))?;
    let t = dt
        .to_zoned(zone.tz.clone())
        .map_err(|e| bad(e.to_string()))?
        .timestamp()
        .as_second();
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

    #[test]
    fn local_times_milliseconds_weeks_and_zones() {
        let now = 1_800_000_000;
        let utc = Zone::utc();
        let t = parse_time("2026-11-24T09:30:00Z", now).unwrap();
        assert_eq!(parse_time("2026-11-24T09:30", now), Ok(t));
        assert_eq!(parse_time("2026-11-24T09:30:00", now), Ok(t));
        assert_eq!(parse_time("2026-11-24", now), Ok(t - 9 * 3600 - 1800));
        assert_eq!(parse_time("1700000000123", now), Ok(1_700_000_000));
        assert_eq!(parse_time("-1w", now), Ok(now - 7 * 86_400));
        let plus2 = Zone::parse("+02:00").unwrap();
        assert_eq!(parse_time_in("2026-11-24T11:30", now, &plus2), Ok(t));
        assert_eq!(Zone::parse("+0200").unwrap(), plus2);
        let paris = Zone::parse("Europe/Paris").unwrap();
        assert_eq!(parse_time_in("2026-11-24T10:30", now, &paris), Ok(t));
        // An explicit offset wins over the zone.
        assert_eq!(parse_time_in("2026-11-24T09:30:00Z", now, &paris), Ok(t));
        assert_eq!(format_time(t as f64, &utc), "2026-11-24T09:30:00Z");
        assert_eq!(
            format_time(t as f64 + 0.25, &utc),
            "2026-11-24T09:30:00.250Z"
        );
        assert_eq!(format_time(t as f64, &paris), "2026-11-24T10:30:00+01:00");
        assert_eq!(format_time(t as f64, &plus2), "2026-11-24T11:30:00+02:00");
        for bad in ["Mars/Base", "+25:00", "+2", "02:00", ""] {
            assert!(
                matches!(Zone::parse(bad), Err(TimeError::BadZone { .. })),
                "{bad}"
            );
        }
        for bad in [
            "2026-11-24T25:00",
            "2026-02-30",
            "2026-11-24T09:3",
            "2026-11-24T09:30:61",
        ] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
    }
}
