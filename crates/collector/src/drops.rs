//! Why something was dropped, and counters of drops per reason.
//!
//! A [`Drop`] is either one event (`whole_payload == false`: the other events of the payload
//! are unaffected) or the whole payload (`whole_payload == true`: nothing in it was accepted).
//! [`DropReason::as_str`] gives a stable lower-case name for metrics labels and 4xx messages.
//! A dropped event carries the tags ingest could read of it ([`DropTags`]), so whoever counts
//! drops per (second, dc, type, subtype) never parses the event again.

use std::fmt;

/// Why an event (or a whole payload) was dropped. The names returned by [`as_str`](Self::as_str)
/// are stable: they are metric labels and appear in error replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DropReason {
    /// `payload_error`: the payload as a whole could not be parsed into events (empty, not a
    /// known format, a syntax error in a JSON document or array, a corrupt or truncated Sereal
    /// document). Always `whole_payload`.
    PayloadError,
    /// `malformed`: one NDJSON line is not valid JSON (only that line is lost).
    Malformed,
    /// `oversized`: the event is larger than `max_event_bytes`, or (whole payload) the payload
    /// is larger than `max_payload_bytes`.
    Oversized,
    /// `too_deep`: the event nests containers deeper than `max_depth`, or (whole payload) the
    /// nesting was too deep to even split the payload into events.
    TooDeep,
    /// `not_a_map`: the event's top level is not a map (object / hash).
    NotAMap,
    /// `missing_type`: the event has no `type` field.
    MissingType,
    /// `bad_tag`: `dc`, `type` or `subtype` is not a string, too long, empty (`dc`, `type`),
    /// contains `:`, `|` or a control character, or appears twice at the top level.
    BadTag,
    /// `bad_epoch`: `epoch` is not a time in an accepted form (`crate::epoch`), or lies outside
    /// the accepted window around now.
    BadEpoch,
    /// `bad_utf8`: the text is not valid UTF-8 (the detail gives the byte offset).
    BadUtf8,
    /// `too_many`: the payload holds more than `max_events` events; the excess is dropped
    /// (one [`Drop`] whose `count` says how many).
    TooMany,
    /// `shed`: refused under backpressure (the store is down and the spool full). Acknowledged
    /// transports get an error and may retry; UDP events are lost and counted.
    Shed,
    /// `statsd_line`: the payload is statsd lines (`name:value|type…`, see
    /// [`sluice_statsd::looks_like_statsd`]) sent to an events port rather than to the
    /// `--statsd` listener. Always `whole_payload`; the detail says "statsd line on the events
    /// port; use --statsd".
    StatsdLine,
}

impl DropReason {
    /// Every reason, in a fixed order (the order of [`DropCounters::iter`]).
    pub const ALL: [DropReason; 12] = [
        DropReason::PayloadError,
        DropReason::Malformed,
        DropReason::Oversized,
        DropReason::TooDeep,
        DropReason::NotAMap,
        DropReason::MissingType,
        DropReason::BadTag,
        DropReason::BadEpoch,
        DropReason::BadUtf8,
        DropReason::TooMany,
        DropReason::Shed,
        DropReason::StatsdLine,
    ];

    /// The stable snake_case name, for metric labels and error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::PayloadError => "payload_error",
            DropReason::Malformed => "malformed",
            DropReason::Oversized => "oversized",
            DropReason::TooDeep => "too_deep",
            DropReason::NotAMap => "not_a_map",
            DropReason::MissingType => "missing_type",
            DropReason::BadTag => "bad_tag",
            DropReason::BadEpoch => "bad_epoch",
            DropReason::BadUtf8 => "bad_utf8",
            DropReason::TooMany => "too_many",
            DropReason::Shed => "shed",
            DropReason::StatsdLine => "statsd_line",
        }
    }

    fn slot(self) -> usize {
        match self {
            DropReason::PayloadError => 0,
            DropReason::Malformed => 1,
            DropReason::Oversized => 2,
            DropReason::TooDeep => 3,
            DropReason::NotAMap => 4,
            DropReason::MissingType => 5,
            DropReason::BadTag => 6,
            DropReason::BadEpoch => 7,
            DropReason::BadUtf8 => 8,
            DropReason::TooMany => 9,
            DropReason::Shed => 10,
            DropReason::StatsdLine => 11,
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One dropped event, or a dropped payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drop {
    /// Ordinal of the (first) dropped event among the event candidates of the payload, counting
    /// good and bad ones in payload order (array elements; NDJSON lines, or the elements of an
    /// array on a line). 0 for a whole payload.
    pub index: usize,
    /// Byte offset in the payload (as received, BOM included) where the event, line or problem
    /// starts. For `bad_utf8` it is the offset of the first invalid byte.
    pub offset: usize,
    /// Why.
    pub reason: DropReason,
    /// Human-readable detail, suitable for a 4xx reply body.
    pub detail: String,
    /// How many events this drop stands for: 1, except for `too_many` (the whole excess) and
    /// whole payloads (1: the number of events in an unparseable payload is unknown).
    pub count: u64,
    /// True when nothing of the payload was accepted because of this problem.
    pub whole_payload: bool,
    /// The dropped event's tags, when ingest could read them (see [`DropTags`]); `None` for a
    /// whole payload, `too_many`, and an event whose `type` could not be read.
    pub tags: Option<DropTags>,
}

/// The tags of a dropped event, as far as they could be read: a single JSON event that is a
/// map with a valid `type`. Counters use the arrival second and the configured dc for the
/// parts that are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropTags {
    /// Its `epoch`, when an integer inside the ingest window.
    pub epoch: Option<i64>,
    /// Its `dc`, when a valid tag (an integer `dc` by its decimal form, as ingest names it).
    pub dc: Option<String>,
    /// Its `type` (valid, non-empty).
    pub type_: String,
    /// Its `subtype` (valid, or `""`).
    pub subtype: String,
}

impl fmt::Display for Drop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.whole_payload {
            write!(f, "payload rejected ({}): {}", self.reason, self.detail)
        } else {
            write!(
                f,
                "event {} dropped ({}): {}",
                self.index, self.reason, self.detail
            )
        }
    }
}

/// Plain per-reason counters (no metrics library): add each [`IngestOutcome`](crate::IngestOutcome), read them out
/// with [`iter`](Self::iter) when rendering `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropCounters {
    counts: [u64; DropReason::ALL.len()],
    /// Events accepted so far.
    pub accepted: u64,
    /// Payloads seen so far.
    pub payloads: u64,
    /// Payloads rejected as a whole.
    pub payloads_rejected: u64,
}

impl DropCounters {
    /// All counters at zero.
    pub fn new() -> DropCounters {
        DropCounters::default()
    }

    /// Add `n` drops of `reason` (e.g. for drops decided outside the ingest layer).
    pub fn record(&mut self, reason: DropReason, n: u64) {
        let slot = &mut self.counts[reason.slot()];
        *slot = slot.saturating_add(n);
    }

    /// Drops counted for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason.slot()]
    }

    /// Total drops over all reasons.
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Every reason with its count (zeros included, so metric series exist from the start), in
    /// the order of [`DropReason::ALL`].
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(move |&r| (r, self.get(r)))
    }

    /// Add another set of counters into this one (e.g. per-thread counters into a total).
    pub fn merge(&mut self, other: &DropCounters) {
        for (r, n) in other.iter() {
            self.record(r, n);
        }
        self.accepted = self.accepted.saturating_add(other.accepted);
        self.payloads = self.payloads.saturating_add(other.payloads);
        self.payloads_rejected = self
            .payloads_rejected
            .saturating_add(other.payloads_rejected);
    }
}
