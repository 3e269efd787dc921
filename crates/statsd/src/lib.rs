//! statsd lines in, Sluice events out: the parser behind `sluice serve --statsd`.
//!
//! A statsd payload (a UDP datagram, or what a TCP connection sends) holds one metric per line,
//! lines separated by `\n` (a `\r` before it is ignored; blank lines are skipped). A line is
//!
//! ```text
//! name:value|type[|@rate][|#tag:v,tag2,…]
//! ```
//!
//! the Etsy statsd form with DogStatsD's `#tags`. `@rate` and `#tags` may come in either order,
//! each at most once. [`parse_line`] gives a [`Metric`] or a [`Reject`]; [`Metric::write_event`]
//! writes the event it becomes, one JSON object; [`Converter`] does both for a whole payload and
//! counts what it did. Nothing here panics or allocates without bound on any input: every
//! length is checked against [`Limits`] before it is used.
//!
//! # What each type becomes
//!
//! Every event is `{"epoch": <arrival second>, "type": "statsd", "subtype": …, "name": NAME,
//! "value": …}` plus `"rate"` when the line had `@rate`, `"delta": true` for a gauge change and
//! `"tags": {k: v, …}` when it had tags (a tag without `:` has the value `""`; a repeated key keeps
//! its last value). The dc is the server's (ingest fills it).
//!
//! | type | example | `subtype` | `value` | notes |
//! |---|---|---|---|---|
//! | `c` | `hits:1\|c\|@0.1` | `counter` | number: value ÷ rate (`10`) | the rate is kept in `"rate"`; a negative count is a decrement |
//! | `g` | `temp:21.5\|g`, `temp:-2\|g` | `gauge` | number (with its sign) | a leading `+` or `-` is a change, not a set: `"delta": true` |
//! | `ms` | `load:320\|ms` | `timer` | number | a rate is recorded, the value is not scaled |
//! | `h` | `size:512\|h` | `histogram` | number | as `ms` |
//! | `d` | `lat:3.2\|d` | `distribution` | number | as `ms` |
//! | `s` | `users:alice\|s` | `set` | string: the member as sent | any text but `\|`; never a number |
//!
//! Numbers are decimal (`12`, `-3.5`, `1e3`, `.5`); `NaN`, infinities, hex and empty values are
//! refused. An integral value within ±2^53 is written as a JSON integer (`10`, not `10.0`).
//!
//! # Rejected lines: reasons
//!
//! A bad line is dropped alone (the other lines of the payload are kept) with a stable
//! [`Reject::as_str`] label, the metric label of `sluice_statsd_dropped_total{reason}`:
//!
//! | reason | the line |
//! |---|---|
//! | `too_long` | is longer than [`Limits::max_line_bytes`], or its name longer than [`Limits::max_name_bytes`] |
//! | `bad_utf8` | is not UTF-8 |
//! | `no_value` | has no `:` after the name, or an empty value |
//! | `bad_name` | has an empty name, or one with whitespace, a control character, `\|`, `@` or `#` |
//! | `bad_value` | has a value that is not a finite decimal number (every type but `s`) |
//! | `bad_type` | has no `\|type`, or a type other than `c g ms h d s` |
//! | `bad_rate` | has a rate that is not a number in `(0, 1]`, or two rates |
//! | `bad_tag` | has an empty tag list, an empty tag or tag key, a control character in a tag, or two tag sections |
//! | `too_many_tags` | has more than [`Limits::max_tags`] tags |
//! | `bad_field` | has another `\|` section (DogStatsD's `\|c:` container id, `\|T` timestamp, …) |
//!
//! # Limits
//!
//! [`Limits::default`]: lines of at most 4096 bytes (DogStatsD's own buffer is 8 KiB per
//! datagram; a line is one metric), names of at most 256 bytes, at most 64 tags a line. The
//! events a line becomes are therefore at most a few KiB, well under ingest's `max_event_bytes`.
//!
//! # On the events port
//!
//! [`looks_like_statsd`] tells a payload whose first non-blank line is a valid statsd line: the
//! events listeners use it to name such a payload in their drop reason instead of calling it
//! unparseable. A JSON event never parses as a statsd line (it has no `|type`).

use std::fmt;

/// Bounds on what a line may hold; see the module documentation for the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest line taken, in bytes (without its `\n` / `\r\n`).
    pub max_line_bytes: usize,
    /// The longest metric name, in bytes.
    pub max_name_bytes: usize,
    /// The most tags a line may carry.
    pub max_tags: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_line_bytes: 4096,
            max_name_bytes: 256,
            max_tags: 64,
        }
    }
}

/// Why a line was dropped. [`as_str`](Self::as_str) names are stable metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reject {
    /// `too_long`: the line or its name is over the limit.
    TooLong,
    /// `bad_utf8`: the line is not UTF-8.
    BadUtf8,
    /// `no_value`: no `:value`, or an empty one.
    NoValue,
    /// `bad_name`: empty, or whitespace / control characters / `|@#` in it.
    BadName,
    /// `bad_value`: not a finite decimal number (sets excepted).
    BadValue,
    /// `bad_type`: no type, or an unknown one.
    BadType,
    /// `bad_rate`: not in `(0, 1]`, or repeated.
    BadRate,
    /// `bad_tag`: an empty tag or key, a control character, or a repeated tag section.
    BadTag,
    /// `too_many_tags`: more than [`Limits::max_tags`].
    TooManyTags,
    /// `bad_field`: a `|` section that is not `@rate` or `#tags`.
    BadField,
}

impl Reject {
    /// Every reason, in a fixed order (the order of [`Counts::rejected`]).
    pub const ALL: [Reject; 10] = [
        Reject::TooLong,
        Reject::BadUtf8,
        Reject::NoValue,
        Reject::BadName,
        Reject::BadValue,
        Reject::BadType,
        Reject::BadRate,
        Reject::BadTag,
        Reject::TooManyTags,
        Reject::BadField,
    ];

    /// The stable snake_case label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reject::TooLong => "too_long",
            Reject::BadUtf8 => "bad_utf8",
            Reject::NoValue => "no_value",
            Reject::BadName => "bad_name",
            Reject::BadValue => "bad_value",
            Reject::BadType => "bad_type",
            Reject::BadRate => "bad_rate",
            Reject::BadTag => "bad_tag",
            Reject::TooManyTags => "too_many_tags",
            Reject::BadField => "bad_field",
        }
    }

    fn slot(self) -> usize {
        Reject::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A metric type, by its line code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `c`
    Counter,
    /// `g`
    Gauge,
    /// `ms`
    Timer,
    /// `h`
    Histogram,
    /// `d`
    Distribution,
    /// `s`
    Set,
}

impl Kind {
    /// The type from its code (`c`, `g`, `ms`, `h`, `d`, `s`).
    pub fn from_code(code: &str) -> Option<Kind> {
        Some(match code {
            "c" => Kind::Counter,
            "g" => Kind::Gauge,
            "ms" => Kind::Timer,
            "h" => Kind::Histogram,
            "d" => Kind::Distribution,
            "s" => Kind::Set,
            _ => return None,
        })
    }

    /// The event's `subtype`: `counter`, `gauge`, `timer`, `histogram`, `distribution`, `set`.
    pub fn subtype(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Timer => "timer",
            Kind::Histogram => "histogram",
            Kind::Distribution => "distribution",
            Kind::Set => "set",
        }
    }
}

/// A metric's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// Every type but sets (a counter's already divided by its rate).
    Number(f64),
    /// A set's member, as sent.
    Member(&'a str),
}

/// One parsed line, borrowing from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric<'a> {
    /// The name, as sent.
    pub name: &'a str,
    /// The type.
    pub kind: Kind,
    /// The value (see [`Value`]).
    pub value: Value<'a>,
    /// The sample rate, when the line had one.
    pub rate: Option<f64>,
    /// A gauge change (`+n` / `-n`) rather than a set.
    pub delta: bool,
    /// The tags in line order, `(key, value)`; a tag without `:` has the value `""`.
    pub tags: Vec<(&'a str, &'a str)>,
}

/// Parses one line (without its `\n`; a trailing `\r` is ignored).
pub fn parse_line<'a>(line: &'a [u8], limits: &Limits) -> Result<Metric<'a>, Reject> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > limits.max_line_bytes {
        return Err(Reject::TooLong);
    }
    let line = std::str::from_utf8(line).map_err(|_| Reject::BadUtf8)?;
    let (name, rest) = line.split_once(':').ok_or(Reject::NoValue)?;
    if name.len() > limits.max_name_bytes {
        return Err(Reject::TooLong);
    }
    if name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '|' | '@' | '#'))
    {
        return Err(Reject::BadName);
    }
    let mut sections = rest.split('|');
    let value = sections.next().unwrap_or("");
    if value.is_empty() {
        return Err(Reject::NoValue);
    }
    let kind = sections
        .next()
        .and_then(Kind::from_code)
        .ok_or(Reject::BadType)?;
    let mut rate = None;
    let mut tags: Option<Vec<(&str, &str)>> = None;
    for s in sections {
        if let Some(r) = s.strip_prefix('@') {
            if rate.is_some() {
                return Err(Reject::BadRate);
            }
            let r = number(r).ok_or(Reject::BadRate)?;
            if !(r > 0.0 && r <= 1.0) {
                return Err(Reject::BadRate);
            }
            rate = Some(r);
        } else if let Some(t) = s.strip_prefix('#') {
            if tags.is_some() {
                return Err(Reject::BadTag);
            }
            tags = Some(parse_tags(t, limits)?);
        } else {
            return Err(Reject::BadField);
        }
    }
    let mut delta = false;
    let value = match kind {
        Kind::Set => Value::Member(value),
        _ => {
            let mut v = number(value).ok_or(Reject::BadValue)?;
            if kind == Kind::Gauge {
                delta = value.starts_with(['+', '-']);
            }
            if let (Kind::Counter, Some(r)) = (kind, rate) {
                v /= r;
                if !v.is_finite() {
                    return Err(Reject::BadValue);
                }
            }
            Value::Number(v)
        }
    };
    Ok(Metric {
        name,
        kind,
        value,
        rate,
        delta,
        tags: tags.unwrap_or_default(),
    })
}

/// A finite decimal number: digits, `.`, `e`/`E` and signs only (no `inf`, `NaN`, hex).
fn number(s: &str) -> Option<f64> {
    if !s.bytes().any(|b| b.is_ascii_digit())
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn parse_tags<'a>(list: &'a str, limits: &Limits) -> Result<Vec<(&'a str, &'a str)>, Reject> {
    let mut tags = Vec::new();
    for tag in list.split(',') {
        if tags.len() == limits.max_tags {
            return Err(Reject::TooManyTags);
        }
        if tag.chars().any(char::is_control) {
            return Err(Reject::BadTag);
        }
        let (k, v) = tag.split_once(':').unwrap_or((tag, ""));
        if k.is_empty() {
            return Err(Reject::BadTag);
        }
        tags.push((k, v));
    }
    Ok(tags)
}

impl Metric<'_> {
    /// Appends the event this metric becomes (one JSON object, no newline) to `out`.
    pub fn write_event(&self, epoch: i64, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"epoch\":");
        out.extend_from_slice(epoch.to_string().as_bytes());
        out.extend_from_slice(b",\"type\":\"statsd\",\"subtype\":\"");
        out.extend_from_slice(self.kind.subtype().as_bytes());
        out.extend_from_slice(b"\",\"name\":");
        json_str(self.name, out);
        out.extend_from_slice(b",\"value\":");
        match self.value {
            Value::Number(v) => json_num(v, out),
            Value::Member(m) => json_str(m, out),
        }
        if let Some(r) = self.rate {
            out.extend_from_slice(b",\"rate\":");
            json_num(r, out);
        }
        if self.delta {
            out.extend_from_slice(b",\"delta\":true");
        }
        if !self.tags.is_empty() {
            out.extend_from_slice(b",\"tags\":{");
            let mut first = true;
            for (i, (k, v)) in self.tags.iter().enumerate() {
                if self.tags[i + 1..].iter().any(|(k2, _)| k2 == k) {
                    continue; // a later one wins
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                json_str(k, out);
                out.push(b':');
                json_str(v, out);
            }
            out.push(b'}');
        }
        out.push(b'}');
    }
}

fn json_str(s: &str, out: &mut Vec<u8>) {
    // Writing a str to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn json_num(v: f64, out: &mut Vec<u8>) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if v.fract() == 0.0 && v.abs() <= EXACT {
        out.extend_from_slice((v as i64).to_string().as_bytes());
    } else {
        let _ = serde_json::to_writer(&mut *out, &v);
    }
}

/// The non-blank lines of a payload (split at `\n`; the `\r` of `\r\n` stays, [`parse_line`]
/// drops it).
pub fn lines(payload: &[u8]) -> impl Iterator<Item = &[u8]> {
    payload
        .split(|b| *b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
}

/// True when the first non-blank line of `payload` is a valid statsd line (default limits).
pub fn looks_like_statsd(payload: &[u8]) -> bool {
    lines(payload)
        .next()
        .is_some_and(|l| parse_line(l, &Limits::default()).is_ok())
}

/// What a [`Converter`] did, cumulative.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Non-blank lines seen.
    pub lines: u64,
    /// Events written (valid lines).
    pub events: u64,
    /// Lines dropped, per [`Reject::ALL`] slot.
    pub rejected: [u64; Reject::ALL.len()],
}

impl Counts {
    /// Lines dropped for `reason`.
    pub fn rejected(&self, reason: Reject) -> u64 {
        self.rejected[reason.slot()]
    }

    /// `(reason, count)` for every reason, in [`Reject::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Reject, u64)> + '_ {
        Reject::ALL.iter().map(|r| (*r, self.rejected[r.slot()]))
    }

    /// Lines dropped, all reasons.
    pub fn dropped(&self) -> u64 {
        self.rejected.iter().sum()
    }
}

/// Turns statsd payloads into NDJSON events (one per valid line), counting lines, events and
/// rejects by reason.
#[derive(Debug, Clone, Default)]
pub struct Converter {
    /// The limits applied.
    pub limits: Limits,
    /// What it did so far.
    pub counts: Counts,
}

impl Converter {
    /// A converter with `limits`.
    pub fn new(limits: Limits) -> Converter {
        Converter {
            limits,
            counts: Counts::default(),
        }
    }

    /// Appends to `out` one event line (`…\n`) per valid line of `payload`, dated `epoch`;
    /// returns how many.
    pub fn convert(&mut self, payload: &[u8], epoch: i64, out: &mut Vec<u8>) -> u64 {
        let mut made = 0;
        for line in lines(payload) {
            self.counts.lines += 1;
            match parse_line(line, &self.limits) {
                Ok(m) => {
                    m.write_event(epoch, out);
                    out.push(b'\n');
                    made += 1;
                }
                Err(r) => self.counts.rejected[r.slot()] += 1,
            }
        }
        self.counts.events += made;
        made
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Metric<'_>, Reject> {
        parse_line(s.as_bytes(), &Limits::default())
    }

    fn event(s: &str) -> serde_json::Value {
        let mut out = Vec::new();
        p(s).expect(s).write_event(1_700_000_000, &mut out);
        serde_json::from_slice(&out).expect("valid JSON")
    }

    #[test]
    fn every_type_becomes_its_event() {
        use serde_json::json;
        assert_eq!(
            event("hits:1|c|@0.1"),
            json!({"epoch": 1_700_000_000i64, "type": "statsd", "subtype": "counter",
                   "name": "hits", "value": 10, "rate": 0.1})
        );
        assert_eq!(event("hits:3|c")["value"], json!(3));
        assert_eq!(event("hits:-1|c")["value"], json!(-1));
        assert_eq!(event("t:21.5|g")["value"], json!(21.5));
        assert_eq!(event("t:21.5|g").get("delta"), None);
        assert_eq!(event("t:+2|g")["delta"], json!(true));
        assert_eq!(event("t:+2|g")["value"], json!(2));
        assert_eq!(event("t:-2.5|g")["value"], json!(-2.5));
        assert_eq!(event("t:-2.5|g")["delta"], json!(true));
        assert_eq!(event("load:320|ms")["subtype"], json!("timer"));
        assert_eq!(event("load:320|ms|@0.5")["value"], json!(320));
        assert_eq!(event("load:320|ms|@0.5")["rate"], json!(0.5));
        assert_eq!(event("size:512|h")["subtype"], json!("histogram"));
        assert_eq!(event("lat:3.25|d")["subtype"], json!("distribution"));
        assert_eq!(event("lat:3.25|d")["value"], json!(3.25));
        let s = event("users:42|s");
        assert_eq!(
            (s["subtype"].clone(), s["value"].clone()),
            (json!("set"), json!("42"))
        );
        assert_eq!(event("u:a:b c|s")["value"], json!("a:b c"));
        assert_eq!(event("x:1e3|ms")["value"], json!(1000));
        assert_eq!(event("x:.5|ms")["value"], json!(0.5));
    }

    #[test]
    fn tags_and_rate_in_any_order() {
        use serde_json::json;
        let e = event("req:2|c|#env:prod,region:eu-west:1,canary|@0.5");
        assert_eq!(e["value"], json!(4));
        assert_eq!(e["rate"], json!(0.5));
        assert_eq!(
            e["tags"],
            json!({"env": "prod", "region": "eu-west:1", "canary": ""})
        );
        let e = event("req:2|c|@0.5|#env:prod,env:dev");
        assert_eq!(e["tags"], json!({"env": "dev"}));
        assert_eq!(event("q:1|c|#a\"b:\\x")["tags"], json!({"a\"b": "\\x"}));
        assert_eq!(event("q:1|c\r")["value"], json!(1));
    }

    #[test]
    fn every_reason() {
        let cases: &[(&str, Reject)] = &[
            ("nocolon", Reject::NoValue),
            ("name|c", Reject::NoValue),
            ("name:|c", Reject::NoValue),
            (":1|c", Reject::BadName),
            ("a b:1|c", Reject::BadName),
            ("a#b:1|c", Reject::BadName),
            ("a:1", Reject::BadType),
            ("a:1|", Reject::BadType),
            ("a:1|x", Reject::BadType),
            ("a:1|C", Reject::BadType),
            ("a:x|c", Reject::BadValue),
            ("a:inf|c", Reject::BadValue),
            ("a:NaN|g", Reject::BadValue),
            ("a:0x10|ms", Reject::BadValue),
            ("a:1.2.3|h", Reject::BadValue),
            ("a:+|g", Reject::BadValue),
            ("a:1|c|@0", Reject::BadRate),
            ("a:1|c|@1.5", Reject::BadRate),
            ("a:1|c|@-0.5", Reject::BadRate),
            ("a:1|c|@x", Reject::BadRate),
            ("a:1|c|@", Reject::BadRate),
            ("a:1|c|@0.5|@0.5", Reject::BadRate),
            ("a:1|c|#", Reject::BadTag),
            ("a:1|c|#a,,b", Reject::BadTag),
            ("a:1|c|#:v", Reject::BadTag),
            ("a:1|c|#a|#b", Reject::BadTag),
            ("a:1|c|#a\tb", Reject::BadTag),
            ("a:1|c|T1700000000", Reject::BadField),
            ("a:1|c|c:abc", Reject::BadField),
            ("a:1|c|", Reject::BadField),
        ];
        for (line, want) in cases {
            assert_eq!(p(line).err(), Some(*want), "{line}");
        }
        assert_eq!(
            parse_line(b"a:\xff|s", &Limits::default()).err(),
            Some(Reject::BadUtf8)
        );
    }

    #[test]
    fn limits() {
        let l = Limits {
            max_line_bytes: 40,
            max_name_bytes: 8,
            max_tags: 2,
        };
        assert!(parse_line(b"12345678:1|c", &l).is_ok());
        assert_eq!(
            parse_line(b"123456789:1|c", &l).err(),
            Some(Reject::TooLong)
        );
        assert_eq!(
            parse_line(b"a:1|c|#a,b,c", &l).err(),
            Some(Reject::TooManyTags)
        );
        assert!(parse_line(b"a:1|c|#a,b", &l).is_ok());
        let long = format!("a:1|c|#{}", "x".repeat(34));
        assert_eq!(long.len(), 41);
        assert_eq!(parse_line(long.as_bytes(), &l).err(), Some(Reject::TooLong));
        assert!(parse_line(&long.as_bytes()[..40], &l).is_ok());
        // The defaults are the documented ones.
        let d = Limits::default();
        assert_eq!(
            (d.max_line_bytes, d.max_name_bytes, d.max_tags),
            (4096, 256, 64)
        );
    }

    #[test]
    fn converter_counts_lines_events_and_reasons() {
        let mut c = Converter::default();
        let mut out = Vec::new();
        let made = c.convert(b"a:1|c\n\nb:2|g\r\nbad\nc:x|ms\n  \nd:1|q", 7, &mut out);
        assert_eq!(made, 2);
        assert_eq!(c.counts.lines, 5);
        assert_eq!(c.counts.events, 2);
        assert_eq!(c.counts.rejected(Reject::NoValue), 1);
        assert_eq!(c.counts.rejected(Reject::BadValue), 1);
        assert_eq!(c.counts.rejected(Reject::BadType), 1);
        assert_eq!(c.counts.dropped(), 3);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["name"], "b");
        assert_eq!(lines[1]["epoch"], 7);
    }

    #[test]
    fn detection() {
        assert!(looks_like_statsd(b"a.b:1|c"));
        assert!(looks_like_statsd(b"\n\na.b:1|c|#x:y\nzzz"));
        assert!(!looks_like_statsd(b"{\"type\":\"WEB\",\"a\":\"1|c\"}"));
        assert!(!looks_like_statsd(
            b"{\"type\":\"WEB\"}\n{\"type\":\"WEB\"}"
        ));
        assert!(!looks_like_statsd(b"[{\"type\":\"WEB\"}]"));
        assert!(!looks_like_statsd(b"=srl\x01\x00"));
        assert!(!looks_like_statsd(b""));
        assert!(!looks_like_statsd(b"garbage"));
    }

    /// Random bytes, and random mutations of valid lines, never panic; what parses writes valid
    /// JSON whose fields match the metric.
    #[test]
    fn fuzz_never_panics() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seeds: &[&[u8]] = &[
            b"a.b:1|c|@0.5|#x:y,z",
            b"g:-3.5|g",
            b"s:member|s|#k:v",
            b"t:12|ms|@0.1",
            b"d:1e3|d",
        ];
        let alphabet = b"ab:|@#,.-+e0123456789\r\n\xff c g ms h d s";
        let mut c = Converter::default();
        let mut out = Vec::new();
        for i in 0..100_000 {
            let mut buf: Vec<u8> = if i % 2 == 0 {
                seeds[(next() % seeds.len() as u64) as usize].to_vec()
            } else {
                Vec::new()
            };
            let edits = next() % 8;
            for _ in 0..edits {
                let b = if next() % 3 == 0 {
                    next() as u8
                } else {
                    alphabet[(next() % alphabet.len() as u64) as usize]
                };
                match next() % 3 {
                    0 if !buf.is_empty() => {
                        let at = (next() % buf.len() as u64) as usize;
                        buf[at] = b;
                    }
                    1 if !buf.is_empty() => {
                        let at = (next() % buf.len() as u64) as usize;
                        buf.remove(at);
                    }
                    _ => {
                        let at = (next() % (buf.len() as u64 + 1)) as usize;
                        buf.insert(at, b);
                    }
                }
            }
            if let Ok(m) = parse_line(&buf, &Limits::default()) {
                let mut one = Vec::new();
                m.write_event(1, &mut one);
                let v: serde_json::Value = serde_json::from_slice(&one).expect("valid JSON");
                assert_eq!(v["name"], m.name);
                assert_eq!(v["subtype"], m.kind.subtype());
            }
            out.clear();
            c.convert(&buf, 1, &mut out);
            for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                serde_json::from_slice::<serde_json::Value>(line).expect("valid JSON");
            }
        }
        assert_eq!(c.counts.lines, c.counts.events + c.counts.dropped());
        assert!(
            c.counts.events > 1000 && c.counts.dropped() > 1000,
            "{:?}",
            c.counts
        );
    }
}
