//! Where each column file goes: Hive-style paths that DuckDB and Spark read as partitions.
//!
//! ```text
//! date=2026-11-28/hour=18/dc=ams1/type=WEB/part-1795890480-1795890540-c1.parquet   a minute part
//! date=2026-11-28/hour=18/dc=ams1/type=WEB/hour-c1.parquet                        the merged hour
//! ```
//!
//! - Dates and hours are UTC. A part names the seconds it holds, `[from, to)`; an hour file holds
//!   its whole hour. The last field is the **owner**: the collector that wrote the file (each
//!   converts and merges only its own chunks, so collectors sharing a keyspace never race).
//! - `dc`, `type` and the owner are tags that may hold any character but `:`, `|` and control
//!   characters; in a path, everything but `A-Z a-z 0-9 . _ -` is written `%XX` (so `/` and `=`
//!   cannot break the layout). The hidden path `_…` at the top is never a data file.

use std::fmt::Write as _;

/// Seconds in an hour: the unit of merging and of expiry.
pub const HOUR: i64 = 3600;

/// What a file holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    /// The seconds `[from, to)` (a minute, or what was due when the tier ran).
    Part {
        /// First second.
        from: i64,
        /// One past the last second.
        to: i64,
    },
    /// The whole hour, merged.
    Hour,
}

/// One column file's identity, as its path spells it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileName {
    /// The hour's first second (a multiple of [`HOUR`]).
    pub hour: i64,
    /// The dc.
    pub dc: String,
    /// The type.
    pub type_: String,
    /// Part or hour.
    pub kind: FileKind,
    /// The collector that wrote it.
    pub owner: String,
}

impl FileName {
    /// The seconds the file may hold, `[from, to)`.
    pub fn span(&self) -> (i64, i64) {
        match self.kind {
            FileKind::Part { from, to } => (from, to),
            FileKind::Hour => (self.hour, self.hour + HOUR),
        }
    }

    /// The path under a location's root.
    pub fn path(&self) -> String {
        let mut p = format!(
            "{}dc={}/type={}/",
            hour_prefix(self.hour),
            encode(&self.dc),
            encode(&self.type_)
        );
        match self.kind {
            FileKind::Part { from, to } => {
                let _ = write!(p, "part-{from}-{to}-{}.parquet", encode(&self.owner));
            }
            FileKind::Hour => {
                let _ = write!(p, "hour-{}.parquet", encode(&self.owner));
            }
        }
        p
    }

    /// Parses a path written by [`FileName::path`]; `None` for anything else (never an error:
    /// a listing may hold files that are not ours).
    pub fn parse(path: &str) -> Option<FileName> {
        let mut parts = path.split('/');
        let date = parts.next()?.strip_prefix("date=")?;
        let hour: i64 = parts.next()?.strip_prefix("hour=")?.parse().ok()?;
        let dc = decode(parts.next()?.strip_prefix("dc=")?)?;
        let type_ = decode(parts.next()?.strip_prefix("type=")?)?;
        let file = parts.next()?.strip_suffix(".parquet")?;
        if parts.next().is_some() || !(0..24).contains(&hour) {
            return None;
        }
        let day = parse_date(date)?;
        let hour = day * 86_400 + hour * HOUR;
        let kind_and_owner = if let Some(owner) = file.strip_prefix("hour-") {
            (FileKind::Hour, owner)
        } else {
            let rest = file.strip_prefix("part-")?;
            let (from, rest) = split_int(rest)?;
            let (to, owner) = split_int(rest)?;
            if !(hour <= from && from < to && to <= hour + HOUR) {
                return None;
            }
            (FileKind::Part { from, to }, owner)
        };
        Some(FileName {
            hour,
            dc,
            type_,
            kind: kind_and_owner.0,
            owner: decode(kind_and_owner.1)?,
        })
    }
}

/// `-?digits-rest` → (number, rest).
fn split_int(s: &str) -> Option<(i64, &str)> {
    let neg = s.starts_with('-');
    let body = if neg { &s[1..] } else { s };
    let end = body.find('-')?;
    let n: i64 = body[..end].parse().ok()?;
    Some((if neg { -n } else { n }, &body[end + 1..]))
}

/// The first second of the hour holding `epoch`.
pub fn hour_of(epoch: i64) -> i64 {
    epoch - epoch.rem_euclid(HOUR)
}

/// The directory of one hour: `date=YYYY-MM-DD/hour=HH/`.
pub fn hour_prefix(hour: i64) -> String {
    let day = hour.div_euclid(86_400);
    let (y, m, d) = civil_from_days(day);
    format!(
        "date={y:04}-{m:02}-{d:02}/hour={:02}/",
        hour.rem_euclid(86_400) / HOUR
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) → days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn parse_date(s: &str) -> Option<i64> {
    let mut it = s.splitn(3, '-');
    let y: i64 = it.next()?.parse().ok()?;
    let m: u32 = it.next()?.parse().ok()?;
    let d: u32 = it.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let days = days_from_civil(y, m, d);
    (civil_from_days(days) == (y, m, d)).then_some(days)
}

/// A tag as a path segment: `A-Z a-z 0-9 . _ -` as they are, every other byte `%XX`.
pub fn encode(tag: &str) -> String {
    let mut out = String::with_capacity(tag.len());
    for b in tag.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    // `.` and `..` alone would be directory names of their own.
    if out == "." || out == ".." {
        out = out.replace('.', "%2E");
    }
    out
}

/// The inverse of [`encode`]; `None` for a malformed escape or bytes that are not UTF-8.
pub fn decode(seg: &str) -> Option<String> {
    let bytes = seg.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = seg.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_and_dates_are_utc() {
        let hour = 1_795_888_800; // 2026-11-28T18:00:00Z
        let f = FileName {
            hour,
            dc: "ams 1/x=y".into(),
            type_: "WEB".into(),
            kind: FileKind::Part {
                from: hour + 60,
                to: hour + 120,
            },
            owner: "c1".into(),
        };
        let p = f.path();
        assert_eq!(
            p,
            "date=2026-11-28/hour=18/dc=ams%201%2Fx%3Dy/type=WEB/part-1795888860-1795888920-c1.parquet"
        );
        assert_eq!(FileName::parse(&p), Some(f.clone()));
        let h = FileName {
            kind: FileKind::Hour,
            ..f
        };
        assert_eq!(FileName::parse(&h.path()), Some(h.clone()));
        assert_eq!(h.span(), (hour, hour + HOUR));
        assert_eq!(hour_prefix(0), "date=1970-01-01/hour=00/");
        assert_eq!(hour_prefix(-HOUR), "date=1969-12-31/hour=23/");
        assert_eq!(hour_of(hour + 59), hour);
        for bad in [
            "date=2026-11-28/hour=18/dc=a/type=b/part-5-1-c.parquet",
            "date=2026-02-30/hour=18/dc=a/type=b/hour-c.parquet",
            "date=2026-11-28/hour=24/dc=a/type=b/hour-c.parquet",
            "date=2026-11-28/hour=18/dc=a/type=b/hour-c.txt",
            "_schema/x",
            "date=2026-11-28/hour=18/dc=%zz/type=b/hour-c.parquet",
        ] {
            assert_eq!(FileName::parse(bad), None, "{bad}");
        }
        assert_eq!(encode(".."), "%2E%2E");
        assert_eq!(decode("%2E%2E").as_deref(), Some(".."));
    }
}
