//! Following the live stream: one read that covers history and then follows new data.
//!
//! ```text
//! every poll(now):
//!   list_epochs(dc, W, min(now + 1, W + late window + 1 + catch-up))   (W: the cursor's watermark)
//!   ──► get_epoch_index per (epoch, dc) ──► keep type/subtype ──► drop chunks already delivered
//!   ──► RangeReader over exactly those chunks (same decoding, select, where, warnings, order)
//!   ──► record them as delivered; W = max(W, now - late window); forget what is below W
//! ```
//!
//! # The cursor
//! Late events are stored as *new chunks of old epochs* (`n`, or `<collector>.<n>` chunk ids),
//! so "everything up to epoch E" cannot describe what was delivered. A [`Cursor`] is:
//! - a watermark `W`: chunks of epochs `< W` are never looked at again;
//! - the exact set of chunks (`epoch`, `dc`, `type:subtype:chunk`) already delivered for epochs
//!   `>= W`. After each poll `W` is `now - late_window_secs` (never lower than before, never past
//!   what has been read), so the set holds about `late_window_secs` seconds of chunk names.
//!
//! Only chunks that pass the type / subtype filter are recorded, so a cursor is meant to be
//! resumed with the same filters (with a wider filter, the other types' chunks of epochs `>= W`
//! are delivered, those below `W` are not).
//!
//! ## Token
//! [`Cursor::to_token`] / [`Cursor::parse`] (also `Display` / `FromStr`):
//! `t1.<W>.<payload>` where `<W>` is the watermark in decimal and `<payload>` is the base64url
//! (RFC 4648 §5, no padding) of UTF-8 text, one line per (epoch, dc) with delivered chunks,
//! lines in (epoch, dc) order, separated by `\n`:
//! `<epoch - W>:<dc>|<type>:<subtype>:<chunk>|…`, where a run of consecutive chunk numbers of one
//! type, subtype and collector is written once as `<chunk>+<k>` (chunks `n ..= n + k`). An
//! empty set gives `t1.<W>.`. Only canonical entries are accepted (the form formatting gives),
//! so formatting a parsed token gives back the same token.
//!
//! A tail that also took live records ([`Tail::go_live`], module `live`) writes
//! `t2.<W>.<payload>.<spans>`: the same, then the base64url of its live spans (the WAL records
//! it was given from memory, module `spans`); a `t1` token is a `t2` token without spans.
//!
//! ## Guarantee
//! For one tail, and across a stop and a resume from the cursor it printed (same filters, same
//! store): **every chunk whose index entry is visible in the store no later than
//! `late_window_secs` seconds after its epoch (measured with the `now` passed to
//! [`Tail::poll`]) is delivered exactly once** — no gap, no duplicate — whatever the order in which
//! chunks appear, and however long the tail was stopped. A chunk that appears later than that (more
//! than `late_window_secs` after its epoch, by the tail's clock) may be missed by a tail; a range
//! read (`sluice cat --from … --to …`) over the epoch still returns it. "Delivered" covers
//! chunks that became warnings (corrupt or missing blob): they are not retried. A chunk whose fetch
//! failed with a transient store error ([`StoreError::is_transient`]: I/O, unavailable, timeout, unknown outcome) is
//! reported as a warning and retried on the next poll. A malformed index entry is reported once
//! per [`Tail`] (it is not part of the cursor, so a resumed tail reports it again). So is each
//! damaged store range ([`ReadStore::damage`]) of the partitions a poll reads new chunks from.
//!
//! With live records, the same holds for every acknowledged event: an event given live is left
//! out of the chunk that later holds it (the chunk's origins name its record), across a flush, a
//! reconnect from the printed cursor and a server restart (records keep their numbers).
//!
//! Inside one poll, items come in (epoch, dc, type, subtype, chunk) order, as a [`RangeReader`]
//! gives them; across polls, a late chunk of an old epoch comes after newer epochs already
//! delivered.
//!
//! # Catching up
//! A tail starting far in the past reads at most `late_window_secs + 1 + catch_up_secs` seconds
//! of epochs per poll ([`Tail::caught_up`] says whether it reached `now`), so memory is bounded
//! by that span; [`Tail::follow`] polls again without sleeping until caught up.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sluice_blob::IndexEntry;
use sluice_store::{
    BlobKey, Counts, Damage, Namespace, ReadStore, Retention, StoreError, TypeSubtype,
};

mod live;
mod spans;

use spans::LiveSpans;

use crate::chunk::ChunkDecoder;
use crate::item::{ReadItem, ReadWarning};
use crate::range::{RangeReader, ReadError};
use crate::request::{ReadOptions, ReadRequest};
use crate::selection::Selection;

/// What to follow: a [`Selection`] (a tail has no range).
pub type TailRequest = Selection;

impl From<ReadRequest> for Selection {
    /// The selection of `req` (its `from` / `to` are dropped).
    fn from(req: ReadRequest) -> Selection {
        req.selection
    }
}

/// How to follow.
#[derive(Debug, Clone)]
pub struct TailOptions {
    /// Sleep between polls in [`Tail::follow`] (default 250 ms).
    pub poll_interval: Duration,
    /// How late (seconds after its epoch) a chunk may appear and still be followed (default 60).
    pub late_window_secs: i64,
    /// Extra seconds of epochs read per poll while catching up (default 60).
    pub catch_up_secs: i64,
    /// Namespace, decoder limits and fetch batch, as for a range read.
    pub read: ReadOptions,
    /// With a substream: how long (seconds after its epoch) a new chunk waits for the
    /// substream's stored result before it is delivered through the client-side fallback
    /// (default 5; the runner's emit → result p99 target is 2.5 s).
    pub substream_wait_secs: i64,
}

impl Default for TailOptions {
    fn default() -> Self {
        TailOptions {
            poll_interval: Duration::from_millis(250),
            late_window_secs: 60,
            catch_up_secs: 60,
            read: ReadOptions::default(),
            substream_wait_secs: 5,
        }
    }
}

/// Where a tail is: see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cursor {
    watermark: i64,
    delivered: BTreeMap<(i64, String), BTreeSet<IndexEntry>>,
    /// WAL records delivered live (see [`spans`]).
    spans: LiveSpans,
}

impl Cursor {
    /// A cursor that delivers everything from `epoch` on (nothing delivered yet).
    pub fn at(epoch: i64) -> Cursor {
        Cursor {
            watermark: epoch,
            delivered: BTreeMap::new(),
            spans: LiveSpans::default(),
        }
    }

    /// The watermark: chunks of epochs below it are not followed any more.
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// How many chunks (of epochs at or above the watermark) are recorded as delivered.
    pub fn delivered_len(&self) -> usize {
        self.delivered.values().map(BTreeSet::len).sum()
    }

    /// Whether the chunk `entry` of `(epoch, dc)` counts as delivered.
    pub fn is_delivered(&self, epoch: i64, dc: &str, entry: &IndexEntry) -> bool {
        epoch < self.watermark
            || self
                .delivered
                .get(&(epoch, dc.to_owned()))
                .is_some_and(|set| set.contains(entry))
    }

    fn insert(&mut self, epoch: i64, dc: &str, entry: IndexEntry) {
        self.delivered
            .entry((epoch, dc.to_owned()))
            .or_default()
            .insert(entry);
    }

    /// Raises the watermark to `w` (never lowers it) and forgets what is below it.
    fn advance(&mut self, w: i64) {
        if w > self.watermark {
            self.watermark = w;
            self.delivered = self.delivered.split_off(&(w, String::new()));
            self.spans.prune(w);
        }
    }

    /// The printable token (see the [module docs](self#token)).
    pub fn to_token(&self) -> String {
        let mut text = String::new();
        for ((epoch, dc), set) in &self.delivered {
            if set.is_empty() {
                continue;
            }
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!("{}:{dc}", epoch - self.watermark));
            let entries: Vec<&IndexEntry> = set.iter().collect();
            let mut i = 0;
            while i < entries.len() {
                let first = entries[i];
                let mut j = i;
                while j + 1 < entries.len() && follows(entries[j], entries[j + 1]) {
                    j += 1;
                }
                text.push('|');
                text.push_str(&first.to_string());
                if j > i {
                    text.push_str(&format!("+{}", j - i));
                }
                i = j + 1;
            }
        }
        let spans = self.spans.to_text(self.watermark);
        if spans.is_empty() {
            format!(
                "t1.{}.{}",
                self.watermark,
                base64url_encode(text.as_bytes())
            )
        } else {
            format!(
                "t2.{}.{}.{}",
                self.watermark,
                base64url_encode(text.as_bytes()),
                base64url_encode(spans.as_bytes())
            )
        }
    }

    /// Parses a token made by [`to_token`](Cursor::to_token).
    pub fn parse(token: &str) -> Result<Cursor, CursorError> {
        let token = token.trim();
        let (rest, with_spans) = match (token.strip_prefix("t1."), token.strip_prefix("t2.")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => return Err(CursorError::Version),
        };
        let (w, payload) = rest
            .split_once('.')
            .ok_or_else(|| CursorError::Syntax("no `.` after the watermark".into()))?;
        let watermark = parse_i64(w).ok_or_else(|| CursorError::Watermark(w.to_owned()))?;
        let mut cursor = Cursor::at(watermark);
        let payload = if with_spans {
            let (payload, spans) = payload
                .split_once('.')
                .ok_or_else(|| CursorError::Syntax("no `.` before the live spans".into()))?;
            let bytes = base64url_decode(spans).ok_or(CursorError::Encoding)?;
            let text = String::from_utf8(bytes).map_err(|_| CursorError::Encoding)?;
            cursor.spans = LiveSpans::parse(&text, watermark).map_err(CursorError::Syntax)?;
            if cursor.spans.is_empty() {
                return Err(CursorError::Syntax("a t2 token with no live span".into()));
            }
            payload
        } else {
            payload
        };
        let bytes = base64url_decode(payload).ok_or(CursorError::Encoding)?;
        let text = String::from_utf8(bytes).map_err(|_| CursorError::Encoding)?;
        if text.is_empty() {
            return Ok(cursor);
        }
        let mut prev: Option<(i64, String)> = None;
        for (n, line) in text.split('\n').enumerate() {
            let line_no = n + 1;
            let bad = |reason: String| CursorError::Line {
                line: line_no,
                reason,
            };
            let mut fields = line.split('|');
            let head = fields.next().unwrap_or_default();
            let (off, dc) = head
                .split_once(':')
                .ok_or_else(|| bad(format!("expected <offset>:<dc>, got {head:?}")))?;
            let off = parse_i64(off)
                .filter(|o| *o >= 0)
                .ok_or_else(|| bad(format!("bad epoch offset {off:?}")))?;
            let epoch = watermark
                .checked_add(off)
                .ok_or_else(|| bad("epoch overflows".into()))?;
            if dc.is_empty() || dc.chars().any(char::is_control) {
                return Err(bad(format!("bad dc {dc:?}")));
            }
            let group = (epoch, dc.to_owned());
            if prev.as_ref().is_some_and(|p| *p >= group) {
                return Err(bad("(epoch, dc) lines out of order or repeated".into()));
            }
            let mut set = BTreeSet::new();
            let mut last: Option<IndexEntry> = None;
            for field in fields {
                let (text, run) = match field.rsplit_once('+') {
                    Some((t, k)) if !k.contains(':') => {
                        let k = parse_u32(k)
                            .filter(|k| *k > 0)
                            .ok_or_else(|| bad(format!("bad run length in {field:?}")))?;
                        (t, k)
                    }
                    _ => (field, 0),
                };
                let entry =
                    IndexEntry::parse(text).map_err(|e| bad(format!("bad entry {text:?}: {e}")))?;
                if entry.to_string() != text {
                    return Err(bad(format!("entry {text:?} is not in canonical form")));
                }
                if last.as_ref().is_some_and(|l| *l >= entry) {
                    return Err(bad(format!("entry {text:?} out of order or repeated")));
                }
                if last.as_ref().is_some_and(|l| follows(l, &entry)) {
                    return Err(bad(format!(
                        "entry {text:?} should be part of the run before it"
                    )));
                }
                let mut cur = entry;
                for _ in 0..run {
                    let chunk = cur
                        .chunk()
                        .offset(1)
                        .map_err(|e| bad(format!("run {field:?}: {e}")))?;
                    let next = IndexEntry::new(cur.type_(), cur.subtype(), chunk)
                        .map_err(|e| bad(e.to_string()))?;
                    set.insert(std::mem::replace(&mut cur, next));
                }
                set.insert(cur.clone());
                last = Some(cur);
            }
            if set.is_empty() {
                return Err(bad("no entries".into()));
            }
            cursor.delivered.insert(group.clone(), set);
            prev = Some(group);
        }
        Ok(cursor)
    }
}

/// Whether `b` is chunk `n + 1` of `a`'s type, subtype and collector.
fn follows(a: &IndexEntry, b: &IndexEntry) -> bool {
    a.type_() == b.type_()
        && a.subtype() == b.subtype()
        && a.chunk().collector_id() == b.chunk().collector_id()
        && a.chunk().n().checked_add(1) == Some(b.chunk().n())
}

fn parse_i64(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_u32(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_token())
    }
}

impl FromStr for Cursor {
    type Err = CursorError;
    fn from_str(s: &str) -> Result<Cursor, CursorError> {
        Cursor::parse(s)
    }
}

/// Why a cursor token cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CursorError {
    /// The token does not start with `t1.` or `t2.` (not a cursor, or a newer version).
    Version,
    /// The token is not `t1.<watermark>.<payload>`.
    Syntax(String),
    /// The watermark is not a decimal integer.
    Watermark(String),
    /// The payload is not base64url of UTF-8 text.
    Encoding,
    /// A line of the payload is malformed.
    Line {
        /// 1-based line number in the payload.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

impl fmt::Display for CursorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CursorError::Version => {
                f.write_str("not a tail cursor (expected a token starting with `t1.` or `t2.`)")
            }
            CursorError::Syntax(m) => write!(f, "bad tail cursor: {m}"),
            CursorError::Watermark(w) => {
                write!(f, "bad tail cursor: watermark {w:?} is not an integer")
            }
            CursorError::Encoding => {
                f.write_str("bad tail cursor: payload is not base64url of UTF-8 text")
            }
            CursorError::Line { line, reason } => {
                write!(f, "bad tail cursor: line {line}: {reason}")
            }
        }
    }
}

impl std::error::Error for CursorError {}

/// RFC 4648 §5 without padding; decoding rejects padding and non-zero unused bits, so every
/// payload has exactly one encoding (tokens stay canonical).
fn base64url_encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn base64url_decode(s: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(s).ok()
}

/// Follows a store: see the [module docs](self). `S` is anything that derefs to a store, as for
/// [`RangeReader`].
pub struct Tail<S> {
    store: S,
    req: TailRequest,
    opts: TailOptions,
    cursor: Cursor,
    /// Malformed index entries already reported: (epoch, dc, entry text).
    bad_entries: HashSet<(i64, String, String)>,
    /// Damaged store ranges already reported: (location, offset).
    damage_seen: Mutex<HashSet<(String, u64)>>,
    caught_up: bool,
    /// What the polls saw, for [`Tail::hints`].
    facts: crate::facts::ReadFacts,
    /// The field names the hints sampled (once; see [`crate::hints::for_tail`]).
    hint_sample: std::sync::OnceLock<std::collections::BTreeSet<String>>,
    /// The open live subscription ([`Tail::go_live`]).
    live: Option<live::OpenLive>,
    /// Decodes live records with the selection (made at the first one).
    live_decoder: Option<ChunkDecoder>,
}

impl<S> fmt::Debug for Tail<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tail")
            .field("req", &self.req)
            .field("watermark", &self.cursor.watermark)
            .field("delivered", &self.cursor.delivered_len())
            .finish()
    }
}

impl<S, T> Tail<S>
where
    S: std::ops::Deref<Target = T>,
    T: ReadStore + ?Sized,
{
    /// A tail of `store` for `req`, starting at `start` ([`Cursor::at`] an epoch, or a parsed
    /// token). Reads nothing until [`poll`](Tail::poll).
    pub fn new(store: S, req: TailRequest, start: Cursor, opts: TailOptions) -> Tail<S> {
        Tail {
            store,
            req,
            opts,
            cursor: start,
            bad_entries: HashSet::new(),
            damage_seen: Mutex::new(HashSet::new()),
            caught_up: false,
            facts: crate::facts::ReadFacts::default(),
            hint_sample: std::sync::OnceLock::new(),
            live: None,
            live_decoder: None,
        }
    }

    /// The typo hints of this tail ([`crate::hints::for_tail`]: a type or a field it has never
    /// seen, a number field compared with a string), once it can judge: `None` while catching
    /// up or before any data was seen. Say them once.
    pub fn hints(&self, now: i64) -> Option<Vec<String>> {
        if !self.caught_up {
            return None;
        }
        crate::hints::for_tail(&*self.store, &self.req, &self.facts, now, &self.hint_sample)
    }

    /// The cursor after the last poll: resume from it to continue with no gap and no duplicate.
    pub fn cursor(&self) -> &Cursor {
        &self.cursor
    }

    /// Whether the last poll read up to its `now` (false while catching up on history).
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }

    /// The options.
    pub fn options(&self) -> &TailOptions {
        &self.opts
    }

    /// Reads what is new at time `now` (Unix seconds) and records it in the cursor. An error
    /// (the store could not list epochs) leaves the cursor unchanged: poll again later.
    pub fn poll(&mut self, now: i64) -> Result<Vec<ReadItem>, ReadError> {
        let late = self.opts.late_window_secs.max(0);
        let w = self.cursor.watermark;
        let span = late
            .saturating_add(1)
            .saturating_add(self.opts.catch_up_secs.max(1));
        let limit = w.saturating_add(span);
        let end = now.saturating_add(1).min(limit).max(w);
        let pairs = self
            .store
            .list_epochs(self.req.dc.as_deref(), w, end)
            .map_err(ReadError::Store)?;

        // The new chunks of each (epoch, dc): index entries minus what was delivered.
        let mut snapshot: BTreeMap<(i64, String), Result<BTreeSet<String>, String>> =
            BTreeMap::new();
        let mut fresh: Vec<(i64, String, IndexEntry)> = Vec::new();
        let view = self
            .req
            .substream
            .as_ref()
            .and(self.opts.read.substream.clone());
        for (epoch, dc) in pairs {
            let raw = match self.store.get_epoch_index(epoch, &dc) {
                Ok(raw) => raw,
                Err(e) => {
                    snapshot.insert((epoch, dc), Err(e.to_string()));
                    continue;
                }
            };
            // A recent chunk whose substream result is not stored yet waits for it (a later
            // poll) rather than going through the fallback at once.
            let waiting = match &view {
                Some(v) if epoch > now.saturating_sub(self.opts.substream_wait_secs) => {
                    let ns = Namespace::Substream(v.name().to_owned());
                    let done = self
                        .store
                        .get_namespace_index(&ns, epoch, &dc)
                        .unwrap_or_default();
                    Some((v, done))
                }
                _ => None,
            };
            let mut new = BTreeSet::new();
            for text in raw {
                match IndexEntry::parse(&text) {
                    Ok(entry) => {
                        // Hints name only the types this reader may see.
                        if self
                            .req
                            .visible
                            .as_ref()
                            .is_none_or(|v| v.allows(&dc, entry.type_()))
                        {
                            self.facts.see_type(entry.type_());
                        }
                        let keep = self.req.keeps_in(&dc, entry.type_(), entry.subtype());
                        let wait = waiting.as_ref().is_some_and(|(v, done)| {
                            v.applies(&dc, entry.type_(), entry.subtype()) && !done.contains(&text)
                        });
                        if keep && !wait && !self.cursor.is_delivered(epoch, &dc, &entry) {
                            new.insert(text);
                            fresh.push((epoch, dc.clone(), entry));
                        }
                    }
                    // Passed on once, so that the range reader reports it.
                    Err(_) => {
                        if self.bad_entries.insert((epoch, dc.clone(), text.clone())) {
                            new.insert(text);
                        }
                    }
                }
            }
            if !new.is_empty() {
                snapshot.insert((epoch, dc), Ok(new));
            }
        }

        // Chunks holding events this tail got live are read without them (see `live`).
        let sorted = if self.live_matters() {
            self.sort_by_origins(&mut snapshot, &mut fresh)
        } else {
            live::Sorted::default()
        };
        let mut items = Vec::new();
        let failed = if snapshot.is_empty() {
            HashSet::new()
        } else {
            let mut read = self.opts.read.clone();
            if !sorted.prefetched.is_empty() {
                // The column files hold whole chunks: read the prefetched (maybe cut) blobs.
                read.columns = None;
            }
            let view = Snapshot {
                inner: &*self.store,
                index: snapshot,
                failed: Mutex::new(HashSet::new()),
                damage_seen: &self.damage_seen,
                prefetched: sorted.prefetched,
            };
            let req = ReadRequest::selected(w, end, self.req.clone());
            match RangeReader::new(&view, req, read) {
                Ok(mut reader) => {
                    items.extend(&mut reader);
                    self.facts.add_scan(reader.facts());
                }
                Err(e) => return Err(e),
            }
            view.failed.into_inner().unwrap_or_else(|e| e.into_inner())
        };

        for (epoch, dc, entry) in fresh {
            let key = format!("{epoch}:{dc}:{entry}");
            if !failed.contains(&key) {
                self.cursor.insert(epoch, &dc, entry);
            }
        }
        self.caught_up = end > now;
        // Never past what has been read (`end`), never more than the late window behind `now`,
        // never past a chunk left for a later poll.
        let mut w = now.saturating_sub(late).min(end);
        if let Some(d) = sorted.deferred_from {
            w = w.min(d);
        }
        self.cursor.advance(w);
        let watermark = self.cursor.watermark;
        self.bad_entries.retain(|(e, _, _)| *e >= watermark);
        Ok(items)
    }

    /// Polls until `stop` is set, with the wall clock, sleeping [`TailOptions::poll_interval`]
    /// between polls once caught up, and passes every item to `f`. A failed poll (the store
    /// cannot list epochs) becomes a warning (key `tail`) and is retried. Returns `f`'s first
    /// error; the cursor is then that of before the poll whose items `f` was given (so a resume
    /// repeats that poll's items: no gap, but possibly duplicates of that one batch).
    pub fn follow<E>(
        &mut self,
        stop: &AtomicBool,
        mut f: impl FnMut(ReadItem) -> Result<(), E>,
    ) -> Result<(), E> {
        while !stop.load(Ordering::Relaxed) {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            let before = self.cursor.clone();
            let items = match self.poll(now) {
                Ok(items) => items,
                Err(e) => {
                    self.caught_up = true;
                    vec![ReadItem::Warning(ReadWarning {
                        key: "tail".into(),
                        reason: e.to_string(),
                    })]
                }
            };
            for item in items {
                if let Err(e) = f(item) {
                    self.cursor = before;
                    return Err(e);
                }
            }
            if self.caught_up {
                let mut left = self.opts.poll_interval;
                while !left.is_zero() && !stop.load(Ordering::Relaxed) {
                    let step = left.min(Duration::from_millis(50));
                    std::thread::sleep(step);
                    left -= step;
                }
            }
        }
        Ok(())
    }
}

/// The store as one poll sees it: only the new chunks are listed; blobs come from the real
/// store, and keys whose fetch failed transiently are remembered (to be retried).
struct Snapshot<'a, T: ?Sized> {
    inner: &'a T,
    index: BTreeMap<(i64, String), Result<BTreeSet<String>, String>>,
    failed: Mutex<HashSet<String>>,
    /// The tail's damaged ranges already reported: each is passed on once.
    damage_seen: &'a Mutex<HashSet<(String, u64)>>,
    /// Blobs already fetched (and maybe cut) by key: served without asking the store again.
    prefetched: std::collections::HashMap<String, Vec<u8>>,
}

impl<T: ReadStore + ?Sized> ReadStore for Snapshot<'_, T> {
    fn get_blob(&self, ns: &Namespace, key: BlobKey<'_>) -> sluice_store::Result<Option<Vec<u8>>> {
        self.get_blobs(ns, &[key]).pop().unwrap_or(Ok(None))
    }

    fn checks_each_read(&self) -> bool {
        self.inner.checks_each_read()
    }

    fn get_blobs(
        &self,
        ns: &Namespace,
        keys: &[BlobKey<'_>],
    ) -> Vec<sluice_store::Result<Option<Vec<u8>>>> {
        // Prefetched blobs are served as they are; only the others are asked of the store.
        let prefetched = |k: &BlobKey<'_>| {
            (*ns == Namespace::Events)
                .then(|| self.prefetched.get(k.key))
                .flatten()
        };
        let missing: Vec<BlobKey<'_>> = keys
            .iter()
            .filter(|k| prefetched(k).is_none())
            .copied()
            .collect();
        let mut fetched = if missing.is_empty() {
            Vec::new()
        } else {
            self.inner.get_blobs(ns, &missing)
        }
        .into_iter();
        let results: Vec<sluice_store::Result<Option<Vec<u8>>>> = keys
            .iter()
            .map(|k| match prefetched(k) {
                Some(bytes) => Ok(Some(bytes.clone())),
                // A short answer from the store: retried like a transient error.
                None => fetched.next().unwrap_or_else(|| {
                    Err(StoreError::Unavailable {
                        reason: "the store answered fewer keys than asked".into(),
                    })
                }),
            })
            .collect();
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        for (i, key) in keys.iter().enumerate() {
            // Transient errors (and a short answer) are retried; corrupt or missing blobs are not.
            if results
                .get(i)
                .is_none_or(|r| r.as_ref().is_err_and(StoreError::is_transient))
            {
                failed.insert(key.key.to_owned());
            }
        }
        results
    }

    fn get_epoch_index(&self, epoch: i64, dc: &str) -> sluice_store::Result<BTreeSet<String>> {
        match self.index.get(&(epoch, dc.to_owned())) {
            Some(Ok(set)) => Ok(set.clone()),
            Some(Err(reason)) => Err(StoreError::Unavailable {
                reason: reason.clone(),
            }),
            None => Ok(BTreeSet::new()),
        }
    }

    fn get_namespace_index(
        &self,
        ns: &Namespace,
        epoch: i64,
        dc: &str,
    ) -> sluice_store::Result<BTreeSet<String>> {
        match ns {
            Namespace::Events => self.get_epoch_index(epoch, dc),
            _ => self.inner.get_namespace_index(ns, epoch, dc),
        }
    }

    fn get_catalog(&self, kind: &str) -> sluice_store::Result<BTreeMap<String, Vec<u8>>> {
        self.inner.get_catalog(kind)
    }

    fn get_counts(
        &self,
        epoch: i64,
        dc: &str,
    ) -> sluice_store::Result<BTreeMap<TypeSubtype, Counts>> {
        self.inner.get_counts(epoch, dc)
    }

    fn list_epochs(
        &self,
        dc: Option<&str>,
        from: i64,
        to: i64,
    ) -> sluice_store::Result<Vec<(i64, String)>> {
        Ok(self
            .index
            .keys()
            .filter(|(e, d)| *e >= from && *e < to && dc.is_none_or(|dc| dc == d))
            .cloned()
            .collect())
    }

    fn retention(&self) -> Retention {
        self.inner.retention()
    }

    fn damage(&self, from: i64, to: i64) -> sluice_store::Result<Vec<Damage>> {
        let mut seen = self.damage_seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut found = self.inner.damage(from, to)?;
        found.retain(|d| seen.insert((d.location.clone(), d.offset)));
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_round_trips() {
        for len in 0..20 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let enc = base64url_encode(&bytes);
            assert_eq!(base64url_decode(&enc), Some(bytes), "{enc}");
        }
        assert_eq!(base64url_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64url_encode(b"fo"), "Zm8");
        assert_eq!(base64url_decode("Zm9"), None); // non-zero unused bits
        assert_eq!(base64url_decode("Z"), None);
        assert_eq!(base64url_decode("Zm+v"), None);
        assert_eq!(base64url_decode("Zm8="), None); // padding
    }
}
