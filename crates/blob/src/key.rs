//! Keys of the `events` and `epochs` namespaces, and the `epochs` value (the pipe list).
//!
//! | namespace | key | value |
//! |---|---|---|
//! | `events` | `<epoch>:<dc>:<type>:<subtype>:<chunk>` ([`EventKey`]) | a blob |
//! | `epochs` | `<epoch>-<dc>` ([`EpochKey`]) | `type:subtype:chunk\|type:subtype:chunk\|…` ([`EpochIndex`]) |
//!
//! # Chunk ids and several collectors
//!
//! The original system numbered chunks `0`, `1`, … and had one writer per key. When several
//! collectors write the same (epoch, dc, type, subtype), each would start at `0` and overwrite
//! the others. A [`ChunkId`] is therefore one of:
//! - `<n>`: the original plain number (what old data has, and what a sole writer may keep
//!   writing);
//! - `<collector>.<n>`: chunk `n` written by collector `collector`, e.g. `ams1-c2.0`.
//!
//! Why this form: `.` is a separator in neither namespace (`:` splits event keys, `|` the list,
//! `-` the epochs key), so every existing splitter still finds the same five fields and three
//! entry parts; a collector id must start with an ASCII letter and holds only `[A-Za-z0-9_-]`,
//! so a chunk part is either all digits (exactly the original meaning) or plainly not a number
//! (never mistaken for `1.5` by a tool that parses numbers); and `n` counts per collector, so a
//! collector needs no coordination with the others, only its own counter (or
//! [`EpochIndex::next_chunk`] over the epoch's metadata after a restart). Collector ids must be
//! unique among the writers of a dc.
//!
//! Every component is validated: `dc` and `type` are non-empty, `subtype` may be empty, none may
//! hold `:`, `|` or a control character (newline, tab, NUL, …), and each is at most
//! [`MAX_TAG_BYTES`] bytes: the tag rule, [`check_tag`], which ingest and drop accounting call
//! too, so an event that is accepted always has a key and a refused one is never counted under
//! a tag no key could hold. Epochs are non-negative Unix seconds written without leading
//! zeros, chunk numbers are `u32` written without leading zeros, so that parsing then formatting
//! any accepted key gives back the same text.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::error::{shorten, BlobError, Result};

/// Longest `dc`, `type` or `subtype`, in bytes (the tag rule: [`check_tag`]).
pub const MAX_TAG_BYTES: usize = 64;
/// Longest collector id, in bytes.
pub const MAX_COLLECTOR_LEN: usize = 64;

/// The chunk part of an event key: `<n>` (the original form) or `<collector>.<n>`.
///
/// Ordered plain numbers first (by number), then by collector id, then by number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId {
    collector: Option<Box<str>>,
    n: u32,
}

impl ChunkId {
    /// The original form: chunk `n`.
    pub fn plain(n: u32) -> ChunkId {
        ChunkId { collector: None, n }
    }

    /// Chunk `n` of collector `collector` (see the [module docs](self) for the rules on ids).
    pub fn collector(collector: &str, n: u32) -> Result<ChunkId> {
        check_collector(collector, collector)?;
        Ok(ChunkId {
            collector: Some(collector.into()),
            n,
        })
    }

    /// The chunk number.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// The collector id, if this is the `<collector>.<n>` form.
    pub fn collector_id(&self) -> Option<&str> {
        self.collector.as_deref()
    }

    /// The same form and collector with number `n + i`: chunk `i` of a build whose first chunk
    /// is `self`. Errors if the number overflows `u32`.
    pub fn offset(&self, i: u32) -> Result<ChunkId> {
        let n = self.n.checked_add(i).ok_or_else(|| {
            BlobError::bad_key(
                &self.to_string(),
                format!("chunk number overflows adding {i}"),
            )
        })?;
        Ok(ChunkId {
            collector: self.collector.clone(),
            n,
        })
    }

    /// Parse the chunk part of a key.
    pub fn parse(s: &str) -> Result<ChunkId> {
        match s.split_once('.') {
            None => Ok(ChunkId::plain(parse_u32(s, s, "chunk number")?)),
            Some((collector, n)) => {
                check_collector(collector, s)?;
                let n = parse_u32(n, s, "chunk number after the collector id")?;
                Ok(ChunkId {
                    collector: Some(collector.into()),
                    n,
                })
            }
        }
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.collector {
            None => write!(f, "{}", self.n),
            Some(c) => write!(f, "{c}.{}", self.n),
        }
    }
}

impl FromStr for ChunkId {
    type Err = BlobError;
    fn from_str(s: &str) -> Result<ChunkId> {
        ChunkId::parse(s)
    }
}

impl From<u32> for ChunkId {
    fn from(n: u32) -> ChunkId {
        ChunkId::plain(n)
    }
}

/// A key of the `events` namespace: `<epoch>:<dc>:<type>:<subtype>:<chunk>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventKey {
    epoch: i64,
    dc: String,
    type_: String,
    subtype: String,
    chunk: ChunkId,
}

impl EventKey {
    /// A key from its parts, validated (see the [module docs](self)).
    pub fn new(
        epoch: i64,
        dc: &str,
        type_: &str,
        subtype: &str,
        chunk: ChunkId,
    ) -> Result<EventKey> {
        check_epoch(epoch)?;
        check_component(dc, "dc", false)?;
        check_component(type_, "type", false)?;
        check_component(subtype, "subtype", true)?;
        Ok(EventKey {
            epoch,
            dc: dc.into(),
            type_: type_.into(),
            subtype: subtype.into(),
            chunk,
        })
    }

    /// The key of `entry` in the `epochs` list of `epoch_key`.
    pub fn from_parts(epoch_key: &EpochKey, entry: &IndexEntry) -> EventKey {
        EventKey {
            epoch: epoch_key.epoch,
            dc: epoch_key.dc.clone(),
            type_: entry.type_.clone(),
            subtype: entry.subtype.clone(),
            chunk: entry.chunk.clone(),
        }
    }

    /// Parse `<epoch>:<dc>:<type>:<subtype>:<chunk>`.
    pub fn parse(s: &str) -> Result<EventKey> {
        let parts: Vec<&str> = s.splitn(6, ':').collect();
        let [epoch, dc, type_, subtype, chunk] = parts[..] else {
            return Err(BlobError::bad_key(
                s,
                format!("expected 5 `:`-separated fields <epoch>:<dc>:<type>:<subtype>:<chunk>, found {}", s.split(':').count()),
            ));
        };
        let epoch = parse_epoch(epoch, s)?;
        check_component_in(dc, "dc", false, s)?;
        check_component_in(type_, "type", false, s)?;
        check_component_in(subtype, "subtype", true, s)?;
        let chunk = ChunkId::parse(chunk).map_err(|e| rekey(e, s))?;
        Ok(EventKey {
            epoch,
            dc: dc.into(),
            type_: type_.into(),
            subtype: subtype.into(),
            chunk,
        })
    }

    /// The Unix second.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }
    /// The data centre.
    pub fn dc(&self) -> &str {
        &self.dc
    }
    /// The event type.
    pub fn type_(&self) -> &str {
        &self.type_
    }
    /// The subtype (may be empty).
    pub fn subtype(&self) -> &str {
        &self.subtype
    }
    /// The chunk part.
    pub fn chunk(&self) -> &ChunkId {
        &self.chunk
    }

    /// The same key with another chunk part.
    pub fn with_chunk(&self, chunk: ChunkId) -> EventKey {
        EventKey {
            chunk,
            ..self.clone()
        }
    }

    /// The `epochs` key this event key is listed under.
    pub fn epoch_key(&self) -> EpochKey {
        EpochKey {
            epoch: self.epoch,
            dc: self.dc.clone(),
        }
    }

    /// The entry that lists this key in its epoch's [`EpochIndex`].
    pub fn index_entry(&self) -> IndexEntry {
        IndexEntry {
            type_: self.type_.clone(),
            subtype: self.subtype.clone(),
            chunk: self.chunk.clone(),
        }
    }
}

impl fmt::Display for EventKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}:{}",
            self.epoch, self.dc, self.type_, self.subtype, self.chunk
        )
    }
}

impl FromStr for EventKey {
    type Err = BlobError;
    fn from_str(s: &str) -> Result<EventKey> {
        EventKey::parse(s)
    }
}

/// A key of the `epochs` namespace: `<epoch>-<dc>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpochKey {
    epoch: i64,
    dc: String,
}

impl EpochKey {
    /// A key from its parts, validated.
    pub fn new(epoch: i64, dc: &str) -> Result<EpochKey> {
        check_epoch(epoch)?;
        check_component(dc, "dc", false)?;
        Ok(EpochKey {
            epoch,
            dc: dc.into(),
        })
    }

    /// Parse `<epoch>-<dc>` (the epoch is digits only, so the first `-` ends it; the dc may hold
    /// further `-`).
    pub fn parse(s: &str) -> Result<EpochKey> {
        let Some((epoch, dc)) = s.split_once('-') else {
            return Err(BlobError::bad_key(s, "expected <epoch>-<dc>: no `-`"));
        };
        let epoch = parse_epoch(epoch, s)?;
        check_component_in(dc, "dc", false, s)?;
        Ok(EpochKey {
            epoch,
            dc: dc.into(),
        })
    }

    /// The Unix second.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }
    /// The data centre.
    pub fn dc(&self) -> &str {
        &self.dc
    }
}

impl fmt::Display for EpochKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.epoch, self.dc)
    }
}

impl FromStr for EpochKey {
    type Err = BlobError;
    fn from_str(s: &str) -> Result<EpochKey> {
        EpochKey::parse(s)
    }
}

/// One entry of an [`EpochIndex`]: `type:subtype:chunk`, an event key without epoch and dc.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IndexEntry {
    type_: String,
    subtype: String,
    chunk: ChunkId,
}

impl IndexEntry {
    /// An entry from its parts, validated.
    pub fn new(type_: &str, subtype: &str, chunk: ChunkId) -> Result<IndexEntry> {
        check_component(type_, "type", false)?;
        check_component(subtype, "subtype", true)?;
        Ok(IndexEntry {
            type_: type_.into(),
            subtype: subtype.into(),
            chunk,
        })
    }

    /// Parse `type:subtype:chunk`.
    pub fn parse(s: &str) -> Result<IndexEntry> {
        let parts: Vec<&str> = s.splitn(4, ':').collect();
        let [type_, subtype, chunk] = parts[..] else {
            return Err(BlobError::bad_key(
                s,
                format!(
                    "expected 3 `:`-separated fields <type>:<subtype>:<chunk>, found {}",
                    s.split(':').count()
                ),
            ));
        };
        check_component_in(type_, "type", false, s)?;
        check_component_in(subtype, "subtype", true, s)?;
        let chunk = ChunkId::parse(chunk).map_err(|e| rekey(e, s))?;
        Ok(IndexEntry {
            type_: type_.into(),
            subtype: subtype.into(),
            chunk,
        })
    }

    /// The event type.
    pub fn type_(&self) -> &str {
        &self.type_
    }
    /// The subtype (may be empty).
    pub fn subtype(&self) -> &str {
        &self.subtype
    }
    /// The chunk part.
    pub fn chunk(&self) -> &ChunkId {
        &self.chunk
    }
}

impl fmt::Display for IndexEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.type_, self.subtype, self.chunk)
    }
}

impl FromStr for IndexEntry {
    type Err = BlobError;
    fn from_str(s: &str) -> Result<IndexEntry> {
        IndexEntry::parse(s)
    }
}

/// The value of an `epochs` key: the set of event keys stored for that second and dc, written
/// `type1:sub1:0|type1:sub1:1|type3::0`.
///
/// A set: parsing drops duplicates, [`EpochIndex::merge`] is a union (commutative, associative,
/// idempotent — so concurrent writers' lists can be merged in any order and none of their chunks
/// is lost), and the text form lists the entries sorted by type, subtype, then chunk (plain
/// numbers first, numerically; then by collector id and number). Parsing accepts any order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct EpochIndex {
    entries: BTreeSet<IndexEntry>,
}

impl EpochIndex {
    /// An empty list.
    pub fn new() -> EpochIndex {
        EpochIndex::default()
    }

    /// Parse the pipe-separated list; the empty string is the empty list. An empty entry (as in
    /// `a::0||b::0` or a trailing `|`) is an error.
    pub fn parse(s: &str) -> Result<EpochIndex> {
        let mut index = EpochIndex::new();
        if s.is_empty() {
            return Ok(index);
        }
        for (i, part) in s.split('|').enumerate() {
            let entry = IndexEntry::parse(part).map_err(|e| match e {
                BlobError::BadKey { key, reason } => BlobError::BadIndex {
                    entry: i,
                    reason: format!("{key:?}: {reason}"),
                },
                other => other,
            })?;
            index.entries.insert(entry);
        }
        Ok(index)
    }

    /// Parse a stored value (bytes that must be UTF-8).
    pub fn parse_bytes(bytes: &[u8]) -> Result<EpochIndex> {
        let s = std::str::from_utf8(bytes).map_err(|e| BlobError::BadIndex {
            entry: bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'|')
                .count(),
            reason: format!("not UTF-8 at byte {}", e.valid_up_to()),
        })?;
        EpochIndex::parse(s)
    }

    /// Add an entry; `false` if it was there already.
    pub fn insert(&mut self, entry: IndexEntry) -> bool {
        self.entries.insert(entry)
    }

    /// Add the entry of an event key (its epoch and dc are the caller's business).
    pub fn insert_key(&mut self, key: &EventKey) -> bool {
        self.entries.insert(key.index_entry())
    }

    /// Add every entry of `other` (set union).
    pub fn merge(&mut self, other: &EpochIndex) {
        self.entries.extend(other.entries.iter().cloned());
    }

    /// The union of `self` and `other`.
    pub fn union(&self, other: &EpochIndex) -> EpochIndex {
        let mut out = self.clone();
        out.merge(other);
        out
    }

    /// Whether `entry` is listed.
    pub fn contains(&self, entry: &IndexEntry) -> bool {
        self.entries.contains(entry)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in the text form's order.
    pub fn iter(&self) -> impl Iterator<Item = &IndexEntry> + '_ {
        self.entries.iter()
    }

    /// The full event keys listed, for the epoch and dc of `epoch_key`.
    pub fn event_keys<'s>(
        &'s self,
        epoch_key: &'s EpochKey,
    ) -> impl Iterator<Item = EventKey> + 's {
        self.entries
            .iter()
            .map(move |e| EventKey::from_parts(epoch_key, e))
    }

    /// The first unused chunk of (`type_`, `subtype`) in the given form: `collector: None` gives
    /// the plain number after the highest plain one listed, `Some(id)` the number after the
    /// highest `id.<n>` listed (0 if none). Errors if the number would overflow.
    pub fn next_chunk(
        &self,
        type_: &str,
        subtype: &str,
        collector: Option<&str>,
    ) -> Result<ChunkId> {
        let start = match collector {
            None => ChunkId::plain(0),
            Some(id) => ChunkId::collector(id, 0)?,
        };
        let last = self
            .entries
            .iter()
            .filter(|e| {
                e.type_ == type_ && e.subtype == subtype && e.chunk.collector == start.collector
            })
            .map(|e| e.chunk.n)
            .max();
        match last {
            None => Ok(start),
            Some(n) => start.offset(n).and_then(|c| c.offset(1)),
        }
    }
}

impl fmt::Display for EpochIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl FromStr for EpochIndex {
    type Err = BlobError;
    fn from_str(s: &str) -> Result<EpochIndex> {
        EpochIndex::parse(s)
    }
}

impl FromIterator<IndexEntry> for EpochIndex {
    fn from_iter<I: IntoIterator<Item = IndexEntry>>(iter: I) -> EpochIndex {
        EpochIndex {
            entries: iter.into_iter().collect(),
        }
    }
}

impl Extend<IndexEntry> for EpochIndex {
    fn extend<I: IntoIterator<Item = IndexEntry>>(&mut self, iter: I) {
        self.entries.extend(iter)
    }
}

impl<'a> IntoIterator for &'a EpochIndex {
    type Item = &'a IndexEntry;
    type IntoIter = std::collections::btree_set::Iter<'a, IndexEntry>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// Replace the key echoed by a component error with the whole key it came from.
fn rekey(e: BlobError, whole: &str) -> BlobError {
    match e {
        BlobError::BadKey { reason, .. } => BlobError::bad_key(whole, reason),
        other => other,
    }
}

fn check_epoch(epoch: i64) -> Result<()> {
    if epoch < 0 {
        return Err(BlobError::bad_key(
            &epoch.to_string(),
            "epoch must be a non-negative Unix second",
        ));
    }
    Ok(())
}

fn parse_epoch(s: &str, whole: &str) -> Result<i64> {
    let digits = canonical_digits(s, whole, "epoch")?;
    digits.parse::<i64>().map_err(|_| {
        BlobError::bad_key(
            whole,
            format!("epoch {:?} does not fit in 64 bits", shorten(s)),
        )
    })
}

fn parse_u32(s: &str, whole: &str, what: &str) -> Result<u32> {
    let digits = canonical_digits(s, whole, what)?;
    digits.parse::<u32>().map_err(|_| {
        BlobError::bad_key(
            whole,
            format!("{what} {:?} is over {}", shorten(s), u32::MAX),
        )
    })
}

/// `s` if it is a canonical decimal number: ASCII digits, no sign, no leading zero.
fn canonical_digits<'s>(s: &'s str, whole: &str, what: &str) -> Result<&'s str> {
    if s.is_empty() {
        return Err(BlobError::bad_key(whole, format!("{what} is empty")));
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BlobError::bad_key(
            whole,
            format!("{what} {:?} is not a decimal number", shorten(s)),
        ));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(BlobError::bad_key(
            whole,
            format!("{what} {:?} has a leading zero", shorten(s)),
        ));
    }
    Ok(s)
}

fn check_component(s: &str, what: &str, allow_empty: bool) -> Result<()> {
    check_component_in(s, what, allow_empty, s)
}

fn check_component_in(s: &str, what: &str, allow_empty: bool, whole: &str) -> Result<()> {
    check_tag(what, s, allow_empty).map_err(|reason| BlobError::bad_key(whole, reason.to_string()))
}

/// Why a `dc`, `type` or `subtype` breaks the tag rule ([`check_tag`]); the message names the tag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TagError(String);

/// The tag rule for `dc`, `type` and `subtype` (`what` names the tag in the message): 1 to
/// [`MAX_TAG_BYTES`] bytes (0 allowed when `allow_empty`, as for `subtype`), no `:`, `|` or
/// control character, since each becomes a field of `<epoch>:<dc>:<type>:<subtype>:<chunk>`.
pub fn check_tag(what: &str, s: &str, allow_empty: bool) -> std::result::Result<(), TagError> {
    if s.is_empty() && !allow_empty {
        return Err(TagError(format!("{what} is empty")));
    }
    if s.len() > MAX_TAG_BYTES {
        return Err(TagError(format!(
            "{what} is {} bytes long, over {MAX_TAG_BYTES}",
            s.len()
        )));
    }
    if let Some(c) = s.chars().find(|&c| c == ':' || c == '|' || c.is_control()) {
        return Err(TagError(format!(
            "{what} {:?} contains {c:?} (`:`, `|` and control characters are not allowed)",
            shorten(s)
        )));
    }
    Ok(())
}

fn check_collector(id: &str, whole: &str) -> Result<()> {
    let reason = if id.is_empty() {
        "collector id is empty".to_string()
    } else if id.len() > MAX_COLLECTOR_LEN {
        format!(
            "collector id is {} bytes long, over {MAX_COLLECTOR_LEN}",
            id.len()
        )
    } else if !id.as_bytes()[0].is_ascii_alphabetic() {
        format!(
            "collector id {:?} must start with an ASCII letter",
            shorten(id)
        )
    } else if let Some(c) = id
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
    {
        format!(
            "collector id {:?} contains {c:?} (only A-Z, a-z, 0-9, `-`, `_`)",
            shorten(id)
        )
    } else {
        return Ok(());
    };
    Err(BlobError::bad_key(whole, reason))
}
