//! One received payload in, validated and tagged events out.
//!
//! # Formats (auto-detected by [`detect`])
//! - **Sereal**: the payload starts with `=srl` (protocol 1-2) or `=\xF3rl` (3+); it must be
//!   exactly one document (compressed or not). Its body is one event (a hash) or an array of
//!   events.
//! - **JSON object**: one JSON value (normally an object: one event), possibly pretty-printed.
//! - **JSON array**: one JSON array whose elements are events.
//! - **NDJSON**: several JSON values separated by `\n` (`\r\n` fine); each line is one event
//!   or an array of events; blank lines are skipped. A payload is NDJSON when it has at least two
//!   non-blank lines and its first non-blank line, trimmed, looks like one complete value
//!   (starts with `{` and ends with `}`, or `[` … `]`) — or does not start with `{`/`[` at all.
//!   A pretty-printed document's first line (`{`, `[`, `{"a": 1,`) never looks complete.
//!
//! Whitespace around values is ignored and a leading UTF-8 byte order mark is skipped (JSON
//! only; offsets reported in [`Drop`] still count from the first byte received).
//!
//! # What is lost when something is wrong
//! Whole payload (one [`Drop`] with `whole_payload: true`, no events accepted):
//! - the payload is larger than `max_payload_bytes` (`oversized`), or empty (`payload_error`);
//! - a JSON object/array payload that is not valid UTF-8 (`bad_utf8`, offset of the first bad
//!   byte) or has a syntax error anywhere (`payload_error`) — including inside one element of an
//!   array: the array cannot be split reliably, so all of it is refused;
//! - a JSON payload nested too deeply for the parser to even split it into events (more than
//!   127 levels: `too_deep`);
//! - a payload whose first non-blank line is a statsd line (`name:value|type…`, checked by
//!   [`sluice_statsd::looks_like_statsd`]) rather than JSON: `statsd_line`, detail
//!   "statsd line on the events port; use --statsd" (it belongs on `sluice serve --statsd`);
//! - a Sereal document that is corrupt, truncated, followed by trailing bytes
//!   (`payload_error`) or exceeds the decoder limits (`too_deep` for depth, `oversized`
//!   for sizes and counts).
//!
//! Only the bad event (one [`Drop`], the other events are accepted):
//! - NDJSON: a line that is not valid JSON (`malformed`) or not UTF-8 (`bad_utf8`) loses only
//!   that line (if the line was an array, all of that line);
//! - any format: an event that is larger than `max_event_bytes` (`oversized`), nests deeper than
//!   `max_depth` (`too_deep`), is not a map (`not_a_map`), has no `type` (`missing_type`), a bad
//!   `dc`/`type`/`subtype` (`bad_tag`) or `epoch` (`bad_epoch`);
//! - events beyond `max_events` (`too_many`, one drop counting all of them).
//!
//! # Tags
//! `epoch` (integer Unix second), `dc`, `type`, `subtype` are top-level fields. Missing (or
//! `null`) ones are filled: `epoch` = the arrival second passed as `now`, `dc` = the configured
//! dc, `subtype` = `""`; `type` is required. Filled fields are appended to the event's hash (a
//! `null` is replaced in place), so the stored event carries all four. `dc` and `type` must be
//! strings of 1-64 bytes (`dc` may also be an integer, as the original's data-centre ids were: its
//! decimal form is the tag, the event keeps the number), `subtype` 0-64 bytes, none containing `:`, `|` or a control character
//! (they become parts of the key `<epoch>:<dc>:<type>:<subtype>:<chunk>`); a tag key may appear
//! only once at the top level. `epoch` is whole Unix seconds, or milliseconds (integers from
//! 10¹¹), float seconds or an RFC 3339 string, all read by [`crate::epoch`] (the one place) and
//! stored as the whole second (the event's `epoch` field is rewritten to it); it must lie in
//! `now - max_past_secs ..= now + max_future_secs`. Anything else is `bad_epoch`, its detail
//! naming the accepted forms.
//!
//! # Two paths, one answer
//! A JSON event is first tried on the fast path: its text is transcoded straight into a Sereal
//! fragment ([`EventBody::Fragment`], no value tree; see [`crate::json`]) and its tags checked
//! there. Anything unusual or wrong (invalid JSON, a number or escape needing care, a `null` or
//! repeated tag, a tag that breaks a rule) is not taken there and goes to the authoritative path
//! (serde_json into a [`Value`], the tag rules above), which accepts it as [`EventBody::Value`]
//! or gives its drop reason: drops are decided in one place. Sereal input is always a value.

use std::fmt;
use std::io;
use std::sync::Arc;

use sereal::{Decoder, Fragment, FragmentWriter, Hash, Key, Limits, Value};

use crate::drops::{Drop, DropCounters, DropReason, DropTags};
use crate::epoch;
use crate::json::{self, Interner, ParseError, TagValue, Tags};

const BOM: &[u8] = b"\xEF\xBB\xBF";

use sluice_blob::key::check_tag;
/// Longest `dc`, `type` or `subtype`, in bytes (the key module owns the tag rule).
pub use sluice_blob::key::MAX_TAG_BYTES;

/// Limits and defaults of the input layer. `Default` gives the documented defaults with
/// `dc = "local"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestConfig {
    /// The collector's data-centre id, filled into events without a `dc` (default `"local"`).
    pub dc: String,
    /// Largest payload accepted, in bytes (default 8 MiB). Transports may impose smaller limits
    /// of their own (a UDP datagram is at most 64 KiB).
    pub max_payload_bytes: usize,
    /// Largest single event (default 64 KiB): the bytes of its JSON text (of the NDJSON line or
    /// array element, whitespace included), or for Sereal input the length of its compact JSON
    /// form.
    pub max_event_bytes: usize,
    /// Deepest nesting of containers in an event, its top-level map counting as 1 (default 32).
    pub max_depth: usize,
    /// Most events per payload (default 100,000); bad events count too. The excess is dropped
    /// as `too_many`.
    pub max_events: usize,
    /// Oldest epoch accepted, in seconds before `now` (default 10 days: the default retention).
    pub max_past_secs: i64,
    /// Newest epoch accepted, in seconds after `now` (default 300).
    pub max_future_secs: i64,
    /// Largest decompressed Sereal body (default 64 MiB).
    pub max_decompressed_bytes: usize,
}

impl Default for IngestConfig {
    fn default() -> IngestConfig {
        IngestConfig {
            dc: "local".to_owned(),
            max_payload_bytes: 8 << 20,
            max_event_bytes: 64 << 10,
            max_depth: 32,
            max_events: 100_000,
            max_past_secs: 10 * 86_400,
            max_future_secs: 300,
            max_decompressed_bytes: 64 << 20,
        }
    }
}

/// An [`IngestConfig`] that cannot work (bad `dc`, a zero limit, a negative window).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid collector input configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl IngestConfig {
    /// Check the configuration: `dc` obeys the tag rules, limits are positive, the window is not
    /// negative.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_tag("dc", &self.dc, false).map_err(|e| ConfigError(e.to_string()))?;
        let positive = [
            ("max_payload_bytes", self.max_payload_bytes),
            ("max_event_bytes", self.max_event_bytes),
            ("max_depth", self.max_depth),
            ("max_events", self.max_events),
            ("max_decompressed_bytes", self.max_decompressed_bytes),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(ConfigError(format!("{name} must be positive")));
            }
        }
        if self.max_past_secs < 0 || self.max_future_secs < 0 {
            return Err(ConfigError(
                "max_past_secs and max_future_secs must not be negative".into(),
            ));
        }
        Ok(())
    }
}

/// The payload formats [`detect`] tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// Nothing but whitespace (and maybe a BOM).
    Empty,
    /// A Sereal document.
    Sereal,
    /// One JSON value that is not an array (normally an object: one event).
    JsonObject,
    /// One JSON array of events.
    JsonArray,
    /// Newline-delimited JSON: one event or one array of events per line.
    Ndjson,
}

impl Format {
    /// A stable lower-case name (`empty`, `sereal`, `json_object`, `json_array`, `ndjson`).
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Empty => "empty",
            Format::Sereal => "sereal",
            Format::JsonObject => "json_object",
            Format::JsonArray => "json_array",
            Format::Ndjson => "ndjson",
        }
    }
}

/// The detail of a [`DropReason::StatsdLine`] drop.
pub const STATSD_ON_EVENTS_PORT: &str = "statsd line on the events port; use --statsd";

/// Guess the format of `payload` from its first bytes and lines, without parsing it (see the
/// module documentation for the rules).
pub fn detect(payload: &[u8]) -> Format {
    if payload.starts_with(b"=srl") || payload.starts_with(b"=\xF3rl") {
        return Format::Sereal;
    }
    let body = payload.strip_prefix(BOM).unwrap_or(payload);
    let mut lines = NonBlankLines::new(body, 0);
    let Some((_, first)) = lines.next() else {
        return Format::Empty;
    };
    let more = lines.next().is_some();
    let (head, tail) = (first[0], first[first.len() - 1]);
    if more
        && (!matches!(head, b'{' | b'[')
            || (head == b'{' && tail == b'}')
            || (head == b'[' && tail == b']'))
    {
        return Format::Ndjson;
    }
    if body.trim_ascii_start().first() == Some(&b'[') {
        Format::JsonArray
    } else {
        Format::JsonObject
    }
}

/// Non-blank lines of `bytes`, trimmed, each with its offset (`base` + offset in `bytes`).
struct NonBlankLines<'a> {
    bytes: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> NonBlankLines<'a> {
    fn new(bytes: &'a [u8], base: usize) -> Self {
        NonBlankLines {
            bytes,
            pos: 0,
            base,
        }
    }
}

impl<'a> Iterator for NonBlankLines<'a> {
    type Item = (usize, &'a [u8]);

    fn next(&mut self) -> Option<(usize, &'a [u8])> {
        while self.pos < self.bytes.len() {
            let rest = &self.bytes[self.pos..];
            let len = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
            let line = &rest[..len];
            let start = self.pos;
            self.pos += len + 1;
            let lead = line.len() - line.trim_ascii_start().len();
            let trimmed = line.trim_ascii();
            if !trimmed.is_empty() {
                return Some((self.base + start + lead, trimmed));
            }
        }
        None
    }
}

/// An accepted event with its four tags (also present in `event`).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedEvent {
    /// The event's second (UTC Unix time).
    pub epoch: i64,
    /// Data-centre id.
    pub dc: String,
    /// Event type, e.g. `WEB`.
    pub type_: String,
    /// Subtype, possibly empty.
    pub subtype: String,
    /// The whole event, a hash carrying `epoch`, `dc`, `type` and `subtype`.
    pub event: EventBody,
}

/// An accepted event's body: what the aggregator encodes into its group's document. Either form
/// gives the same bytes there.
#[derive(Debug, Clone, PartialEq)]
pub enum EventBody {
    /// Encoded ahead, with no value tree (JSON on the fast path, [`json::transcode_event`]).
    Fragment(Fragment),
    /// A value tree (Sereal input, and JSON the fast path leaves to the authoritative parser).
    Value(Value),
}

impl EventBody {
    /// The event as a value tree (decoded for a fragment: ASCII strings come back as
    /// [`Value::Binary`], as the decoder gives them).
    pub fn to_value(&self) -> Result<Value, sereal::Error> {
        match self {
            EventBody::Fragment(f) => f.to_value(),
            EventBody::Value(v) => Ok(v.clone()),
        }
    }
}

/// What became of one payload.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestOutcome {
    /// The detected format.
    pub format: Format,
    /// Accepted events, in payload order.
    pub events: Vec<ParsedEvent>,
    /// What was dropped and why, in payload order.
    pub dropped: Vec<Drop>,
}

impl IngestOutcome {
    /// The drop that lost the whole payload, if that happened.
    pub fn payload_rejected(&self) -> Option<&Drop> {
        self.dropped.iter().find(|d| d.whole_payload)
    }

    /// Events dropped (sum of the drops' `count`).
    pub fn dropped_count(&self) -> u64 {
        self.dropped
            .iter()
            .fold(0u64, |a, d| a.saturating_add(d.count))
    }

    /// True when nothing was dropped.
    pub fn is_clean(&self) -> bool {
        self.dropped.is_empty()
    }
}

/// The reusable input stage: configuration, key interner and Sereal decoder are kept between
/// payloads. One per receiving thread.
#[derive(Debug)]
pub struct Ingestor {
    cfg: IngestConfig,
    /// The fast path's output buffer, kept between events.
    writer: FragmentWriter,
    /// The fast path's cache of the keys met (encoded ahead), kept between events.
    keys_met: json::KeyCache,
    interner: Interner,
    decoder: Decoder,
    keys: TagKeys,
}

#[derive(Debug)]
struct TagKeys {
    epoch: Key,
    dc: Key,
    subtype: Key,
}

/// Accumulates the outcome of one payload.
struct Sink {
    out: IngestOutcome,
    next_index: usize,
    now: i64,
}

impl Sink {
    fn drop_event(&mut self, index: usize, offset: usize, reason: DropReason, detail: String) {
        self.drop_tagged(index, offset, reason, detail, None);
    }

    /// Drops one event with the tags read of it (see [`DropTags`]).
    fn drop_tagged(
        &mut self,
        index: usize,
        offset: usize,
        reason: DropReason,
        detail: String,
        tags: Option<DropTags>,
    ) {
        self.out.dropped.push(Drop {
            index,
            offset,
            reason,
            detail,
            count: 1,
            whole_payload: false,
            tags,
        });
    }

    /// The epoch window around `now` (the same bounds as [`Ingestor::check_tags`]).
    fn window(&self, cfg: &IngestConfig) -> std::ops::RangeInclusive<i64> {
        self.now.saturating_sub(cfg.max_past_secs)..=self.now.saturating_add(cfg.max_future_secs)
    }

    fn drop_payload(&mut self, offset: usize, reason: DropReason, detail: String) {
        self.out.dropped.push(Drop {
            index: 0,
            offset,
            reason,
            detail,
            count: 1,
            whole_payload: true,
            tags: None,
        });
    }

    fn too_many(&mut self, offset: usize, count: usize, max: usize) {
        let index = self.next_index;
        self.next_index += count;
        self.out.dropped.push(Drop {
            index,
            offset,
            reason: DropReason::TooMany,
            detail: format!("{count} events beyond the limit of {max} per payload"),
            count: count as u64,
            whole_payload: false,
            tags: None,
        });
    }

    fn take_index(&mut self) -> usize {
        let i = self.next_index;
        self.next_index += 1;
        i
    }
}

impl Ingestor {
    /// An ingestor for `cfg` (checked with [`IngestConfig::validate`]).
    pub fn new(cfg: IngestConfig) -> Result<Ingestor, ConfigError> {
        cfg.validate()?;
        let mut interner = Interner::default();
        let keys = TagKeys {
            epoch: interner.key("epoch"),
            dc: interner.key("dc"),
            subtype: interner.key("subtype"),
        };
        // Sereal nesting counts references too, so give the decoder room and check our own
        // container depth on the result.
        let limits = Limits {
            max_depth: cfg.max_depth.saturating_mul(2).saturating_add(4),
            max_decompressed_bytes: cfg.max_decompressed_bytes,
            ..Limits::default()
        };
        Ok(Ingestor {
            writer: FragmentWriter::new(),
            keys_met: json::KeyCache::default(),
            decoder: Decoder::with_limits(limits),
            interner,
            keys,
            cfg,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &IngestConfig {
        &self.cfg
    }

    /// Turn one payload into events. `now` is the arrival second (UTC Unix time): the default
    /// epoch and the centre of the accepted epoch window. Never panics.
    pub fn ingest(&mut self, payload: &[u8], now: i64) -> IngestOutcome {
        let format = detect(payload);
        let mut sink = Sink {
            out: IngestOutcome {
                format,
                events: Vec::new(),
                dropped: Vec::new(),
            },
            next_index: 0,
            now,
        };
        if payload.len() > self.cfg.max_payload_bytes {
            let detail = format!(
                "payload of {} bytes exceeds the limit of {}",
                payload.len(),
                self.cfg.max_payload_bytes
            );
            sink.drop_payload(0, DropReason::Oversized, detail);
            return sink.out;
        }
        let bom = if payload.starts_with(BOM) && format != Format::Sereal {
            BOM.len()
        } else {
            0
        };
        let body = &payload[bom..];
        if matches!(format, Format::JsonObject | Format::Ndjson)
            && !matches!(body.trim_ascii_start().first(), Some(b'{' | b'['))
            && sluice_statsd::looks_like_statsd(body)
        {
            sink.drop_payload(0, DropReason::StatsdLine, STATSD_ON_EVENTS_PORT.into());
            return sink.out;
        }
        match format {
            Format::Empty => sink.drop_payload(0, DropReason::PayloadError, "empty payload".into()),
            Format::Sereal => self.ingest_sereal(&mut sink, payload),
            Format::JsonObject | Format::JsonArray => match std::str::from_utf8(body) {
                Err(e) => {
                    let at = bom + e.valid_up_to();
                    sink.drop_payload(
                        at,
                        DropReason::BadUtf8,
                        format!("invalid UTF-8 at byte offset {at}"),
                    );
                }
                Ok(text) if format == Format::JsonArray => match json::split_array(text) {
                    Ok(elems) => self.json_elements(&mut sink, text, bom, &elems),
                    Err(ParseError::TooDeep(m)) => sink.drop_payload(0, DropReason::TooDeep, m),
                    Err(ParseError::Syntax(m)) => sink.drop_payload(
                        0,
                        DropReason::PayloadError,
                        format!("malformed JSON array: {m}"),
                    ),
                },
                Ok(text) => {
                    let lead = text.len() - text.trim_start().len();
                    let index = sink.take_index();
                    if text.trim().len() > self.cfg.max_event_bytes {
                        let detail = self.oversized_detail(text.trim().len());
                        let tags = text_tags(text, &sink.window(&self.cfg));
                        sink.drop_tagged(index, bom + lead, DropReason::Oversized, detail, tags);
                        return sink.out;
                    }
                    if self.json_fast(&mut sink, text) {
                        return sink.out;
                    }
                    match json::parse_value(text, &mut self.interner, self.cfg.max_depth) {
                        Ok(v) => self.finish_event(&mut sink, index, bom + lead, v, true),
                        Err(ParseError::TooDeep(m)) => {
                            let tags = text_tags(text, &sink.window(&self.cfg));
                            sink.drop_tagged(index, bom + lead, DropReason::TooDeep, m, tags)
                        }
                        Err(ParseError::Syntax(m)) => sink.drop_payload(
                            0,
                            DropReason::PayloadError,
                            format!("malformed JSON: {m}"),
                        ),
                    }
                }
            },
            Format::Ndjson => self.ingest_ndjson(&mut sink, body, bom),
        }
        sink.out
    }

    fn oversized_detail(&self, len: usize) -> String {
        format!(
            "event of {len} bytes exceeds the limit of {}",
            self.cfg.max_event_bytes
        )
    }

    fn ingest_ndjson(&mut self, sink: &mut Sink, body: &[u8], base: usize) {
        let mut lines = NonBlankLines::new(body, base);
        while let Some((off, line)) = lines.next() {
            if sink.next_index >= self.cfg.max_events {
                let count = 1 + lines.count();
                sink.too_many(off, count, self.cfg.max_events);
                return;
            }
            let text = match std::str::from_utf8(line) {
                Ok(t) => t,
                Err(e) => {
                    let at = off + e.valid_up_to();
                    let index = sink.take_index();
                    sink.drop_event(
                        index,
                        at,
                        DropReason::BadUtf8,
                        format!("invalid UTF-8 at byte offset {at}"),
                    );
                    continue;
                }
            };
            if line[0] == b'[' {
                match json::split_array(text) {
                    Ok(elems) => self.json_elements(sink, text, off, &elems),
                    Err(e) => {
                        let index = sink.take_index();
                        let (reason, m) = match e {
                            ParseError::TooDeep(m) => (DropReason::TooDeep, m),
                            ParseError::Syntax(m) => (DropReason::Malformed, m),
                        };
                        sink.drop_event(
                            index,
                            off,
                            reason,
                            format!("line is not a valid JSON array: {m}"),
                        );
                    }
                }
            } else {
                self.json_event(sink, text, off, DropReason::Malformed);
            }
        }
    }

    fn json_elements(
        &mut self,
        sink: &mut Sink,
        text: &str,
        base: usize,
        elems: &[&serde_json::value::RawValue],
    ) {
        for (i, raw) in elems.iter().enumerate() {
            let s = raw.get();
            let off = base + (s.as_ptr() as usize).saturating_sub(text.as_ptr() as usize);
            if sink.next_index >= self.cfg.max_events {
                sink.too_many(off, elems.len() - i, self.cfg.max_events);
                return;
            }
            if !s.starts_with('{') {
                // Syntax already checked by the splitter: no need to build a non-map.
                let index = sink.take_index();
                let what = match s.as_bytes().first() {
                    Some(b'[') => "an array",
                    Some(b'"') => "a string",
                    Some(b'n') => "null",
                    Some(b't' | b'f') => "a boolean",
                    _ => "a number",
                };
                sink.drop_event(
                    index,
                    off,
                    DropReason::NotAMap,
                    format!("top level is {what}, not a map"),
                );
                continue;
            }
            self.json_event(sink, s, off, DropReason::Malformed);
        }
    }

    /// One event's JSON text (an NDJSON line or a raw array element).
    fn json_event(&mut self, sink: &mut Sink, text: &str, off: usize, syntax: DropReason) {
        let index = sink.take_index();
        if text.len() > self.cfg.max_event_bytes {
            let detail = self.oversized_detail(text.len());
            let tags = text_tags(text, &sink.window(&self.cfg));
            sink.drop_tagged(index, off, DropReason::Oversized, detail, tags);
            return;
        }
        if self.json_fast(sink, text) {
            return;
        }
        match json::parse_value(text, &mut self.interner, self.cfg.max_depth) {
            Ok(v) => self.finish_event(sink, index, off, v, true),
            Err(ParseError::TooDeep(m)) => {
                let tags = text_tags(text, &sink.window(&self.cfg));
                sink.drop_tagged(index, off, DropReason::TooDeep, m, tags)
            }
            Err(ParseError::Syntax(m)) => {
                let tags = text_tags(text, &sink.window(&self.cfg));
                sink.drop_tagged(index, off, syntax, format!("invalid JSON: {m}"), tags)
            }
        }
    }

    /// The fast path of one event's JSON text: transcoded straight into a fragment, its tags
    /// checked and filled. `false` when not taken — the text is unusual (see
    /// [`json::transcode_event`]) or a tag is wrong — and then nothing was recorded: the
    /// authoritative path (value tree, [`Ingestor::check_tags`]) decides, drop reason included.
    fn json_fast(&mut self, sink: &mut Sink, text: &str) -> bool {
        let Some(tags) = json::transcode_event(
            text,
            &mut self.writer,
            &mut self.keys_met,
            self.cfg.max_depth,
        ) else {
            self.writer.clear();
            return false;
        };
        match self.fast_tags(tags, sink.now) {
            Some((epoch, dc, type_, subtype)) => match self.writer.finish() {
                Ok(fragment) => {
                    sink.out.events.push(ParsedEvent {
                        epoch,
                        dc,
                        type_,
                        subtype,
                        event: EventBody::Fragment(fragment),
                    });
                    true
                }
                Err(_) => false,
            },
            None => {
                self.writer.clear();
                false
            }
        }
    }

    /// [`Ingestor::check_tags`]'s rules for the tags the transcoder found, when all of them hold:
    /// appends the missing ones (`epoch`, `dc`, `subtype`, in that order) and closes the event's
    /// hash. `None` when any rule fails (then the writer is left as it is).
    fn fast_tags(&mut self, tags: Tags<'_>, now: i64) -> Option<(i64, String, String, String)> {
        let [epoch_t, dc_t, type_t, subtype_t] = tags;
        let type_ = match type_t {
            Some(TagValue::Str(s)) if check_tag("type", &s, false).is_ok() => s.into_owned(),
            _ => return None,
        };
        let dc = match &dc_t {
            None => None,
            Some(TagValue::Str(s)) if check_tag("dc", s, false).is_ok() => Some(s.to_string()),
            Some(TagValue::Int(n)) => Some(n.to_string()),
            Some(TagValue::Str(_)) => return None,
        };
        let subtype = match subtype_t {
            None => None,
            Some(TagValue::Str(s)) if check_tag("subtype", &s, true).is_ok() => {
                Some(s.into_owned())
            }
            Some(_) => return None,
        };
        let epoch = match epoch_t {
            None => None,
            // The transcoder wrote a numeric epoch as its second (`crate::epoch`).
            Some(TagValue::Int(e)) if e < epoch::MS_THRESHOLD => {
                let lo = now.saturating_sub(self.cfg.max_past_secs);
                let hi = now.saturating_add(self.cfg.max_future_secs);
                if e < lo || e > hi {
                    return None;
                }
                Some(e)
            }
            Some(TagValue::Int(_) | TagValue::Str(_)) => return None,
        };
        let w = &mut self.writer;
        let epoch = epoch.unwrap_or_else(|| {
            w.key("epoch");
            w.int(now);
            now
        });
        let dc = dc.unwrap_or_else(|| {
            w.key("dc");
            w.str(&self.cfg.dc);
            self.cfg.dc.clone()
        });
        let subtype = subtype.unwrap_or_else(|| {
            w.key("subtype");
            w.str("");
            String::new()
        });
        w.end();
        Some((epoch, dc, type_, subtype))
    }

    fn ingest_sereal(&mut self, sink: &mut Sink, payload: &[u8]) {
        let body = match self.decoder.decode(payload) {
            Ok(v) => v,
            Err(e) => {
                let msg = format!("Sereal: {e}");
                let reason = if !e.is_limit() {
                    DropReason::PayloadError
                } else if msg.contains("nesting") {
                    DropReason::TooDeep
                } else {
                    DropReason::Oversized
                };
                sink.drop_payload(e.offset(), reason, msg);
                return;
            }
        };
        match unshare(body) {
            Value::Array(items) => {
                let n = items.len();
                for (i, item) in items.into_iter().enumerate() {
                    if sink.next_index >= self.cfg.max_events {
                        sink.too_many(0, n - i, self.cfg.max_events);
                        return;
                    }
                    self.sereal_event(sink, unshare(item));
                }
            }
            other => self.sereal_event(sink, other),
        }
    }

    fn sereal_event(&mut self, sink: &mut Sink, v: Value) {
        let index = sink.take_index();
        if !matches!(v, Value::Hash(_)) {
            sink.drop_event(
                index,
                0,
                DropReason::NotAMap,
                format!("top level is {}, not a map", kind(&v)),
            );
            return;
        }
        if depth_exceeds(&v, self.cfg.max_depth) {
            sink.drop_event(
                index,
                0,
                DropReason::TooDeep,
                format!("nesting deeper than {}", self.cfg.max_depth),
            );
            return;
        }
        let mut counter = ByteCounter {
            n: 0,
            limit: self.cfg.max_event_bytes,
        };
        if sereal::json::to_writer(&mut counter, &v).is_err() {
            let detail = format!(
                "event exceeds the limit of {} bytes (as JSON)",
                self.cfg.max_event_bytes
            );
            sink.drop_event(index, 0, DropReason::Oversized, detail);
            return;
        }
        self.finish_event(sink, index, 0, v, false);
    }

    /// Check the top level, fill and validate the tags, accept or drop. A dropped JSON event
    /// carries the tags read of its hash (Sereal drops are counted under the fallback).
    fn finish_event(&mut self, sink: &mut Sink, index: usize, off: usize, v: Value, json: bool) {
        let hash = match v {
            Value::Hash(h) => h,
            other => {
                sink.drop_event(
                    index,
                    off,
                    DropReason::NotAMap,
                    format!("top level is {}, not a map", kind(&other)),
                );
                return;
            }
        };
        match self.check_tags(&hash, sink.now) {
            Ok(found) => sink.out.events.push(self.fill_tags(hash, found)),
            Err((reason, detail)) => {
                let tags = json
                    .then(|| hash_tags(&hash, &sink.window(&self.cfg)))
                    .flatten();
                sink.drop_tagged(index, off, reason, detail, tags)
            }
        }
    }

    /// The tag rules (see the module documentation) over an event's top-level hash: where each
    /// tag is and its value, or why the event is dropped.
    fn check_tags(&self, hash: &Hash, now: i64) -> Result<FoundTags, (DropReason, String)> {
        const NAMES: [&str; 4] = ["epoch", "dc", "type", "subtype"];
        let mut slots = [Slot::Missing; 4];
        for (i, (k, v)) in hash.iter().enumerate() {
            let Some(t) = NAMES.iter().position(|n| n.as_bytes() == k.as_bytes()) else {
                continue;
            };
            if slots[t] != Slot::Missing {
                let reason = if t == 0 {
                    DropReason::BadEpoch
                } else {
                    DropReason::BadTag
                };
                return Err((reason, format!("duplicate top-level key {:?}", NAMES[t])));
            }
            // A null tag counts as missing; it is filled in place.
            slots[t] = if matches!(v.resolve(), Value::Undef) {
                Slot::Null(i)
            } else {
                Slot::Present(i)
            };
        }
        let [epoch_s, dc_s, type_s, subtype_s] = slots;

        let type_ = match type_s {
            Slot::Missing => return Err((DropReason::MissingType, "no \"type\" field".into())),
            Slot::Null(_) => return Err((DropReason::MissingType, "\"type\" is null".into())),
            Slot::Present(i) => tag_str(&hash[i].1, "type", false)?,
        };
        let dc = match dc_s {
            Slot::Present(i) => tag_dc(&hash[i].1)?,
            _ => self.cfg.dc.clone(),
        };
        let subtype = match subtype_s {
            Slot::Present(i) => tag_str(&hash[i].1, "subtype", true)?,
            _ => String::new(),
        };
        let mut epoch_rewritten = false;
        let epoch = match epoch_s {
            Slot::Present(i) => {
                let v = hash[i].1.resolve();
                // Milliseconds, float seconds and RFC 3339 are read here, in one place
                // (`crate::epoch`); the stored event then holds the whole second.
                let e = epoch::from_value(v).map_err(|why| (DropReason::BadEpoch, why))?;
                epoch_rewritten = !matches!(v, Value::Int(x) if *x == e);
                let lo = now.saturating_sub(self.cfg.max_past_secs);
                let hi = now.saturating_add(self.cfg.max_future_secs);
                if e < lo || e > hi {
                    return Err((
                        DropReason::BadEpoch,
                        format!("epoch {e} outside the accepted window {lo}..={hi}"),
                    ));
                }
                e
            }
            _ => now,
        };
        Ok(FoundTags {
            slots,
            epoch,
            epoch_rewritten,
            dc,
            type_,
            subtype,
        })
    }

    /// The accepted event: its missing or `null` tags filled (appended, or replaced in place).
    fn fill_tags(&self, mut hash: Hash, found: FoundTags) -> ParsedEvent {
        let FoundTags {
            slots,
            epoch,
            epoch_rewritten,
            dc,
            type_,
            subtype,
        } = found;
        let [epoch_s, dc_s, _, subtype_s] = slots;
        if let (Slot::Present(i), true) = (epoch_s, epoch_rewritten) {
            if let Some(entry) = hash.get_mut(i) {
                entry.1 = Value::Int(epoch);
            }
        }
        let mut fill = |slot: Slot, key: &Key, value: Value| match slot {
            Slot::Present(_) => {}
            Slot::Null(i) => {
                if let Some(entry) = hash.get_mut(i) {
                    entry.1 = value;
                }
            }
            Slot::Missing => hash.push((key.clone(), value)),
        };
        fill(epoch_s, &self.keys.epoch, Value::Int(epoch));
        fill(dc_s, &self.keys.dc, Value::String(dc.clone()));
        fill(subtype_s, &self.keys.subtype, Value::String(String::new()));
        ParsedEvent {
            epoch,
            dc,
            type_,
            subtype,
            event: EventBody::Value(Value::Hash(hash)),
        }
    }
}

/// What [`Ingestor::check_tags`] found: the four slots (epoch, dc, type, subtype) and the tags.
struct FoundTags {
    slots: [Slot; 4],
    epoch: i64,
    /// The event's `epoch` was written in another form (ms, float, RFC 3339): stored as `epoch`.
    epoch_rewritten: bool,
    dc: String,
    type_: String,
    subtype: String,
}

/// The tags of a dropped JSON event whose hash was read: `None` when a tag key repeats or the
/// `type` is not valid; an `epoch` outside `window` or a bad `dc` is left out, a bad `subtype`
/// read as `""`.
fn hash_tags(hash: &Hash, window: &std::ops::RangeInclusive<i64>) -> Option<DropTags> {
    const NAMES: [&str; 4] = ["epoch", "dc", "type", "subtype"];
    let mut found: [Option<&Value>; 4] = [None; 4];
    for (k, v) in hash.iter() {
        if let Some(t) = NAMES.iter().position(|n| n.as_bytes() == k.as_bytes()) {
            if found[t].is_some() {
                return None;
            }
            found[t] = Some(v);
        }
    }
    let [epoch, dc, type_, subtype] =
        found.map(|v| v.filter(|v| !matches!(v.resolve(), Value::Undef)));
    Some(DropTags {
        type_: tag_str(type_?, "type", false).ok()?,
        epoch: epoch
            .and_then(|v| epoch::from_value(v).ok())
            .filter(|e| window.contains(e)),
        dc: dc.and_then(|v| tag_dc(v).ok()),
        subtype: subtype
            .and_then(|v| tag_str(v, "subtype", true).ok())
            .unwrap_or_default(),
    })
}

/// The tags of a dropped JSON event that was not read into a hash (too large, too deep, or not
/// valid JSON after its first value): only the four tag fields of its first JSON value are
/// decoded, the rest is skipped. Same answers as [`hash_tags`]; `None` also when the text does
/// not start with an object or its first value does not parse.
fn text_tags(text: &str, window: &std::ops::RangeInclusive<i64>) -> Option<DropTags> {
    #[derive(serde::Deserialize)]
    struct Raw {
        epoch: Option<serde_json::Value>,
        dc: Option<serde_json::Value>,
        #[serde(rename = "type")]
        type_: Option<serde_json::Value>,
        subtype: Option<serde_json::Value>,
    }
    let text = text.trim_ascii_start();
    if !text.starts_with('{') {
        return None;
    }
    let raw: Raw = serde_json::Deserializer::from_str(text)
        .into_iter::<Raw>()
        .next()?
        .ok()?;
    // The tag rule of keys (`check_tag`), so a drop is never counted under a tag that ingest
    // refuses; an integer `dc` is named by its decimal form, as ingest does.
    fn tag(v: &Option<serde_json::Value>, name: &str, allow_empty: bool) -> Option<String> {
        let s = match v {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) if name == "dc" && (n.is_i64() || n.is_u64()) => {
                n.to_string()
            }
            _ => return None,
        };
        check_tag(name, &s, allow_empty).ok().map(|()| s)
    }
    Some(DropTags {
        type_: tag(&raw.type_, "type", false)?,
        epoch: raw
            .epoch
            .as_ref()
            .and_then(|v| epoch::from_json(v).ok())
            .filter(|e| window.contains(e)),
        dc: tag(&raw.dc, "dc", false),
        subtype: tag(&raw.subtype, "subtype", true).unwrap_or_default(),
    })
}

/// Where a tag is in the event's hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Missing,
    Null(usize),
    Present(usize),
}

/// Validate one string tag and return it.
fn tag_str(v: &Value, name: &str, allow_empty: bool) -> Result<String, (DropReason, String)> {
    let Some(s) = v.as_str() else {
        return Err((
            DropReason::BadTag,
            format!("{name} is {}, not a string", kind(v)),
        ));
    };
    check_tag(name, s, allow_empty).map_err(|m| (DropReason::BadTag, m.to_string()))?;
    Ok(s.to_owned())
}

/// The `dc` tag: a string, or an integer (the original's data-centre ids were numbers), whose
/// decimal form names it in keys; the event keeps the value as sent.
fn tag_dc(v: &Value) -> Result<String, (DropReason, String)> {
    match v.resolve() {
        Value::Int(n) => Ok(n.to_string()),
        Value::UInt(n) => Ok(n.to_string()),
        _ => tag_str(v, "dc", false),
    }
}

/// Take a value out of `Shared` wrappers (cloning only if the `Arc` is still shared).
fn unshare(mut v: Value) -> Value {
    while let Value::Shared(a) = v {
        v = Arc::try_unwrap(a).unwrap_or_else(|a| (*a).clone());
    }
    v
}

fn kind(v: &Value) -> &'static str {
    match v.resolve() {
        Value::Undef => "null",
        Value::Bool(_) => "a boolean",
        Value::Int(_) | Value::UInt(_) | Value::Float(_) => "a number",
        Value::Binary(_) | Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Hash(_) => "a map",
        Value::Ref(_) => "a reference",
        Value::Object(_) => "a blessed object",
        Value::Regexp(_) => "a regexp",
        Value::Shared(_) => "a shared value",
    }
}

/// True when `v` nests containers (arrays, hashes, objects) more than `max` deep (`v` itself
/// counting as 1). Recursion is bounded by the decoder's depth limit.
fn depth_exceeds(v: &Value, max: usize) -> bool {
    fn walk(v: &Value, left: usize) -> bool {
        match v {
            Value::Array(items) => left == 0 || items.iter().any(|x| walk(x, left - 1)),
            Value::Hash(entries) => left == 0 || entries.iter().any(|(_, x)| walk(x, left - 1)),
            Value::Object(o) => left == 0 || walk(&o.value, left - 1),
            Value::Ref(inner) => walk(inner, left),
            Value::Shared(inner) => walk(inner, left),
            _ => false,
        }
    }
    walk(v, max)
}

/// Counts bytes written and fails once past `limit` (to stop sizing a huge event early).
struct ByteCounter {
    n: usize,
    limit: usize,
}

impl io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.n += buf.len();
        if self.n > self.limit {
            return Err(io::Error::other("event too large"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// Here rather than in `drops`, which knows nothing of ingest: the counters add up outcomes.
impl DropCounters {
    /// Count one payload's outcome: its accepted events and every drop (by its `count`).
    pub fn add(&mut self, outcome: &IngestOutcome) {
        self.payloads += 1;
        self.accepted += outcome.events.len() as u64;
        if outcome.payload_rejected().is_some() {
            self.payloads_rejected += 1;
        }
        for d in &outcome.dropped {
            self.record(d.reason, d.count);
        }
    }
}
