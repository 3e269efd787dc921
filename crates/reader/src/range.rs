//! Range reads: the events of a time range (and dc / type / subtype), out of a [`ReadStore`].
//!
//! ```text
//! list_epochs(dc, from, to) ──► get_epoch_index per (epoch, dc) ──► keep type/subtype
//!   ──► get_blobs (a batch of keys; the store fetches in parallel) ──► Blob::parse (SHA-1,
//!       unless the store checked the bytes: [`ReadOptions::verify_sha1`])
//!   ──► decode (all of it) or lazy select (--select / --where) ──► ReadItem per event
//! ```
//!
//! [`RangeReader`] is an [`Iterator`] of [`ReadItem`]s: it reads lazily, one batch of chunks at a
//! time, so a caller (the CLI's `cat`, an HTTP handler streaming NDJSON) holds at most one batch
//! of chunk bytes ([`ReadOptions::fetch_batch`]) and one chunk's decoded events, never the range.
//! Dropping the iterator stops the read.
//!
//! # Order (guaranteed)
//! Events come by epoch (ascending), then dc (ascending, as [`ReadStore::list_epochs`] orders them),
//! then type, subtype and chunk as [`IndexEntry`] orders them (by string; chunk ids: plain numbers
//! numerically, then `<collector>.<n>` by collector and number), then in their order inside the
//! chunk. Every listed chunk is read exactly once; an event is returned as often as it is stored.
//!
//! # Errors do not stop a read
//! Anything wrong with one chunk or one epoch's index — missing blob, store error, checksum
//! mismatch, undecodable body, malformed index entry — becomes a [`ReadItem::Warning`] in the
//! stream (at the position where the chunk's events would have been), and the read goes on. A
//! chunk is all or nothing: a chunk that fails halfway through decoding contributes no events.
//! Only a failure to list the range at all is an error ([`ReadError`]). The caller decides the
//! exit code (the CLI: non-zero at the end if any warning).
//!
//! Damage the store found in the partitions of the range ([`ReadStore::damage`]: skipped ranges of
//! its files, torn tails a read-only store left) comes last, one warning per damaged range, key
//! `store:<file>@<offset>`: the events in it are lost, everything else was returned.
//!
//! # Select and where
//! With neither, each event is the fully decoded event. With `select` and/or `filter`, chunks
//! are read with the codec's lazy reader: per event, one [`Selector`] pass picks the select paths
//! and the filter's paths (nothing else is materialised), the filter is evaluated on those
//! values, and a matching event becomes either the whole decoded event (no `select`) or a map
//! `{path text: value}` (a path with `[*]` gives an array of every match, any other path its
//! first match or `null`) — the shape of `sluice sereal decode --select`.
//!
//! With both a `select` and a filter, each event is searched for the filter's paths alone first
//! and for the select paths only when it passes (once every select path has been met, so that
//! the hints' "field never seen" stays true). A blob with an element index ([`sereal::index`];
//! the default profile writes one) is then never walked past what the filter needed. A blob
//! whose index is bad is read by walking, same results, with a [`ReadItem::Notice`] naming it.
//!
//! # Substreams
//! With [`Selection::substream`] (and its [`SubstreamView`] in [`ReadOptions::substream`]) the
//! read lists the same chunks of the events' epoch index, restricted to those the substream
//! applies to, and reads each one's result from `substreams/<name>` when the substream's index
//! lists it. A chunk without a stored result (shed, failed, stored before the substream
//! existed) is read in full from `events` and the result computed here
//! ([`SubstreamView::compute`]: the bytes the runner would have stored), preceded by a
//! [`ReadItem::Notice`]; with [`Selection::no_fallback`] it is a [`ReadItem::Warning`] (a gap)
//! instead. `select` / `where` then apply to the substream's results.
//!
//! # Output
//! [`write_items`] writes a stream as NDJSON (one event per line, [`sereal::json`] mapping) or as
//! Sereal: **one Sereal document per event** (protocol 5, uncompressed), concatenated. Each
//! document is self-delimiting ([`sereal::Document::len`] / Perl's `decode_with_offset`), so a
//! consumer reads them in sequence and a stream can be cut after any event (HTTP streaming,
//! `head`); per-event documents lose the cross-event string de-duplication of a blob, which is
//! the price of that.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::io::{self, Write};
use std::ops::Deref;
use std::str::FromStr;
use std::sync::Arc;

use sereal::lazy::{Selector, Step};
use sereal::{Decoder, Encoder, EncoderOptions, Key, Limits, Value};
use sluice_blob::{Blob, EpochKey, EventKey, IndexEntry};
use sluice_store::{BlobKey, Namespace, ReadStore, StoreError};

use crate::filter::Filter;
use crate::selection::Selection;
use crate::transform::SubstreamView;

/// What to read: a half-open range of epochs and a [`Selection`].
#[derive(Debug, Clone, Default)]
pub struct ReadRequest {
    /// First epoch (Unix second) included.
    pub from: i64,
    /// First epoch *not* included (`to == from` reads nothing).
    pub to: i64,
    /// Which events, and which parts of them.
    pub selection: Selection,
}

impl ReadRequest {
    /// Every event of `from <= epoch < to`.
    pub fn new(from: i64, to: i64) -> ReadRequest {
        ReadRequest {
            from,
            to,
            ..ReadRequest::default()
        }
    }

    /// The events `selection` picks from `from <= epoch < to`.
    pub fn selected(from: i64, to: i64, selection: Selection) -> ReadRequest {
        ReadRequest {
            from,
            to,
            selection,
        }
    }

    /// Whether the lazy reader is used (a `select` or a `filter` is given).
    pub fn is_lazy(&self) -> bool {
        self.selection.is_lazy()
    }
}

/// How to read.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The namespace to read (`events`, or a substream: same keys, same blob format).
    pub namespace: Namespace,
    /// Limits of the Sereal decoder (per chunk).
    pub limits: Limits,
    /// Chunks fetched per [`ReadStore::get_blobs`] call (at least 1; default 16). The store may fetch
    /// them in parallel; the reader holds at most this many chunks' bytes at once.
    pub fetch_batch: usize,
    /// The substream named by [`Selection::substream`] (required with it; see "Substreams" in
    /// the module docs). `namespace` is then ignored.
    pub substream: Option<Arc<dyn SubstreamView>>,
    /// Check every chunk's SHA-1 trailer even when the store checked a checksum of the same
    /// bytes on the read ([`ReadStore::checks_each_read`]: the embedded store and Cassandra do,
    /// so by default their chunks are not hashed twice). Default: false (`sluice cat --verify-sha1`).
    pub verify_sha1: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            namespace: Namespace::Events,
            limits: Limits::default(),
            fetch_batch: 16,
            substream: None,
            verify_sha1: false,
        }
    }
}

/// One event read.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadEvent {
    /// The key of the chunk it came from (epoch, dc, type, subtype, chunk); shared by the
    /// chunk's events.
    pub key: Arc<EventKey>,
    /// The event (a map), or with a `select` the map of selected paths.
    pub value: Value,
}

/// Something that went wrong with part of a range: the part is skipped, the read goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadWarning {
    /// The event key of the chunk (`<epoch>:<dc>:<type>:<subtype>:<chunk>`), or the epochs key
    /// (`<epoch>-<dc>`) when the epoch's index could not be read.
    pub key: String,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for ReadWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// What a [`RangeReader`] yields.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadItem {
    /// An event (or the selection of one).
    Event(ReadEvent),
    /// A chunk or an epoch index that could not be read (and is skipped).
    Warning(ReadWarning),
    /// Something the reader did that the caller should know but that loses nothing: a
    /// substream result computed client-side from the full blob (the "fallback"). Says so on
    /// stderr / in the HTTP trailer; not a partial read.
    Notice(ReadWarning),
}

/// Why a range cannot be read at all.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReadError {
    /// The request is invalid (e.g. `to` before `from`).
    BadRequest(String),
    /// The store could not list the range.
    Store(StoreError),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::BadRequest(m) => write!(f, "bad read request: {m}"),
            ReadError::Store(e) => write!(f, "listing the range: {e}"),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Store(e) => Some(e),
            ReadError::BadRequest(_) => None,
        }
    }
}

/// Counters of a read so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// `(epoch, dc)` pairs listed.
    pub epochs: usize,
    /// Chunks fetched (including ones that turned out bad).
    pub chunks: usize,
    /// Bytes of chunks fetched.
    pub bytes: u64,
    /// Events yielded (after the filter).
    pub events: u64,
    /// Warnings yielded.
    pub warnings: u64,
    /// Substream results computed client-side from the full blob (fallbacks).
    pub fallbacks: u64,
}

/// Where a chunk is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// `opts.namespace` (a plain read).
    Plain,
    /// The substream's stored result.
    Result,
    /// The full event blob, to compute the substream's result on the client.
    Fallback,
}

/// What a read saw besides its output, for [`RangeReader::hints`]: cheap to keep (a flag and a
/// kind mask per select / where path, a count, the types in the epoch indexes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadFacts {
    /// Events decoded or scanned (before the `where` filter; 0 for chunks never fetched).
    pub scanned: u64,
    /// Event types listed in the range's epoch indexes (before the type filter; at most
    /// [`MAX_TYPES_SEEN`]).
    pub types: std::collections::BTreeSet<String>,
    /// Per lazy path (the select paths, then the filter's): whether any scanned event had it.
    pub path_seen: Vec<bool>,
    /// Per lazy path: the kinds of values met ([`KIND_NUMBER`] | [`KIND_STRING`] | [`KIND_OTHER`];
    /// known for the filter's paths, whose values are decoded for every event).
    pub path_kinds: Vec<u8>,
}

impl ReadFacts {
    /// Records a type listed in an index (up to [`MAX_TYPES_SEEN`]).
    pub fn see_type(&mut self, type_: &str) {
        if self.types.len() < MAX_TYPES_SEEN && !self.types.contains(type_) {
            self.types.insert(type_.to_owned());
        }
    }

    /// Adds what another read of the same selection saw (a tail's next poll).
    pub fn add_scan(&mut self, other: &ReadFacts) {
        self.scanned += other.scanned;
        for t in &other.types {
            self.see_type(t);
        }
        if self.path_seen.len() < other.path_seen.len() {
            self.path_seen.resize(other.path_seen.len(), false);
            self.path_kinds.resize(other.path_kinds.len(), 0);
        }
        for (a, b) in self.path_seen.iter_mut().zip(&other.path_seen) {
            *a |= *b;
        }
        for (a, b) in self.path_kinds.iter_mut().zip(&other.path_kinds) {
            *a |= *b;
        }
    }
}

/// Most distinct types [`ReadFacts::types`] keeps.
pub const MAX_TYPES_SEEN: usize = 256;
/// [`ReadFacts::path_kinds`]: a number was met.
pub const KIND_NUMBER: u8 = 1;
/// [`ReadFacts::path_kinds`]: a string was met.
pub const KIND_STRING: u8 = 2;
/// [`ReadFacts::path_kinds`]: something else (a map, an array, a boolean, null) was met.
pub const KIND_OTHER: u8 = 4;

/// Something queued for fetching, in output order.
enum Pending {
    Key(Arc<EventKey>, Source),
    Warning(ReadWarning),
}

/// Something fetched, in output order.
enum Fetched {
    Blob(Arc<EventKey>, Source, Result<Option<Vec<u8>>, StoreError>),
    Warning(ReadWarning),
}

/// Reads a range lazily; see the [module docs](self). `S` is anything that derefs to a store:
/// `&EmbeddedStore`, `&dyn Store`, `Arc<dyn Store>`, `Box<dyn Store>`.
pub struct RangeReader<S> {
    store: S,
    req: ReadRequest,
    opts: ReadOptions,
    epochs: VecDeque<(i64, String)>,
    pending: VecDeque<Pending>,
    fetched: VecDeque<Fetched>,
    out: VecDeque<ReadItem>,
    chunk: ChunkDecoder,
    stats: ReadStats,
    /// Whether the store's damage report was queued (once, after the last epoch).
    damage_reported: bool,
}

impl<S> fmt::Debug for RangeReader<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RangeReader")
            .field("req", &self.req)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<S, T> RangeReader<S>
where
    S: Deref<Target = T>,
    T: ReadStore + ?Sized,
{
    /// Starts a read: validates the request and lists the epochs of the range (the only step
    /// whose failure fails the whole read). Nothing else is fetched until the first `next()`.
    pub fn new(store: S, req: ReadRequest, opts: ReadOptions) -> Result<RangeReader<S>, ReadError> {
        if req.to < req.from {
            let utc = crate::time::Zone::utc();
            let show = |t: i64| format!("{t} = {}", crate::time::format_time(t as f64, &utc));
            return Err(ReadError::BadRequest(format!(
                "`to` ({}) is before `from` ({}): swap them",
                show(req.to),
                show(req.from)
            )));
        }
        if let Some(name) = &req.selection.substream {
            match &opts.substream {
                Some(view) if view.name() == name => {}
                _ => {
                    return Err(ReadError::BadRequest(format!(
                        "substream {name:?}: its definition was not given to the reader"
                    )))
                }
            }
        }
        let epochs = store
            .list_epochs(req.selection.dc.as_deref(), req.from, req.to)
            .map_err(ReadError::Store)?;
        let mut chunk = ChunkDecoder::new(&req, &opts.limits);
        chunk.verify_sha1 = opts.verify_sha1 || !store.checks_each_read();
        let stats = ReadStats {
            epochs: epochs.len(),
            ..ReadStats::default()
        };
        Ok(RangeReader {
            store,
            req,
            opts,
            epochs: epochs.into(),
            pending: VecDeque::new(),
            fetched: VecDeque::new(),
            out: VecDeque::new(),
            chunk,
            stats,
            damage_reported: false,
        })
    }

    /// Queues one warning per damaged range the store reports for the range's partitions.
    fn report_damage(&mut self) {
        self.damage_reported = true;
        match self.store.damage(self.req.from, self.req.to) {
            Ok(found) => self.out.extend(found.into_iter().map(|d| {
                ReadItem::Warning(ReadWarning {
                    key: format!("store:{}@{}", d.location, d.offset),
                    reason: format!("{} bytes damaged ({:?}): {}", d.len, d.kind, d.what),
                })
            })),
            Err(e) => self.out.push_back(ReadItem::Warning(ReadWarning {
                key: "store".into(),
                reason: format!("checking the range for damage: {e}"),
            })),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
    }

    /// What the read saw so far (see [`ReadFacts`]).
    pub fn facts(&self) -> &ReadFacts {
        &self.chunk.facts
    }

    /// Hints for the user about a read that is done: typos in a type or a field, a string
    /// compared with a number field, an empty range or one beyond the retention
    /// ([`crate::hints`]). Empty when there is nothing to say. Call it after the last item; it
    /// may sample a few chunks of the range (only when a field was never seen).
    pub fn hints(&self, now: i64) -> Vec<String> {
        crate::hints::for_read(&*self.store, &self.req, &self.chunk.facts, self.stats, now)
    }

    /// The request being read.
    pub fn request(&self) -> &ReadRequest {
        &self.req
    }

    /// Reads the index of the next (epoch, dc) into `pending`. False when there is none left.
    fn next_epoch(&mut self) -> bool {
        let Some((epoch, dc)) = self.epochs.pop_front() else {
            return false;
        };
        let warn = |reason: String| {
            Pending::Warning(ReadWarning {
                key: format!("{epoch}-{dc}"),
                reason,
            })
        };
        let epoch_key = match EpochKey::new(epoch, &dc) {
            Ok(k) => k,
            Err(e) => {
                self.pending.push_back(warn(format!("bad epoch key: {e}")));
                return true;
            }
        };
        let raw = match self.store.get_epoch_index(epoch, &dc) {
            Ok(raw) => raw,
            Err(e) => {
                self.pending
                    .push_back(warn(format!("reading the epoch index: {e}")));
                return true;
            }
        };
        let substream = self
            .req
            .selection
            .substream
            .as_ref()
            .and(self.opts.substream.clone());
        let mut entries = Vec::with_capacity(raw.len());
        for text in &raw {
            match IndexEntry::parse(text) {
                Ok(entry) => {
                    // Hints name only the types this reader may see.
                    if self
                        .req
                        .selection
                        .visible
                        .as_ref()
                        .is_none_or(|v| v.allows(&dc, entry.type_()))
                    {
                        self.chunk.facts.see_type(entry.type_());
                    }
                    let keep = self
                        .req
                        .selection
                        .keeps_in(&dc, entry.type_(), entry.subtype())
                        && substream
                            .as_ref()
                            .is_none_or(|v| v.applies(&dc, entry.type_(), entry.subtype()));
                    if keep {
                        entries.push(entry);
                    }
                }
                Err(e) => self
                    .pending
                    .push_back(warn(format!("bad index entry {text:?}: {e}"))),
            }
        }
        // The store sorts entries as strings; chunk ids must sort as IndexEntry does (`10` after `2`).
        entries.sort();
        entries.dedup();
        let Some(view) = substream else {
            for entry in &entries {
                self.pending.push_back(Pending::Key(
                    Arc::new(EventKey::from_parts(&epoch_key, entry)),
                    Source::Plain,
                ));
            }
            return true;
        };
        // A substream: its result where the runner stored one, else the full blob (fallback).
        let ns = Namespace::Substream(view.name().to_owned());
        let results = match self.store.get_namespace_index(&ns, epoch, &dc) {
            Ok(r) => r,
            Err(e) => {
                self.pending.push_back(Pending::Warning(ReadWarning {
                    key: format!("{epoch}-{dc}"),
                    reason: format!("reading the index of {ns}: {e} (every chunk is a gap)"),
                }));
                BTreeSet::new()
            }
        };
        for entry in &entries {
            let key = Arc::new(EventKey::from_parts(&epoch_key, entry));
            if results.contains(&entry.to_string()) {
                self.pending.push_back(Pending::Key(key, Source::Result));
            } else if self.req.selection.no_fallback {
                self.pending.push_back(Pending::Warning(ReadWarning {
                    key: key.to_string(),
                    reason: format!(
                        "no result in {ns} (not computed, shed or failed; --no-fallback)"
                    ),
                }));
            } else {
                self.pending.push_back(Pending::Key(key, Source::Fallback));
            }
        }
        true
    }

    /// Fetches the next batch of pending keys into `fetched`.
    fn fetch_batch(&mut self) {
        let n = self.pending.len().min(self.opts.fetch_batch.max(1));
        let batch: Vec<Pending> = self.pending.drain(..n).collect();
        // One get_blobs call per namespace the batch reads from, answers put back in order.
        let mut answers: [std::vec::IntoIter<Result<Option<Vec<u8>>, StoreError>>; 3] =
            Default::default();
        for (slot, source) in [Source::Plain, Source::Result, Source::Fallback]
            .into_iter()
            .enumerate()
        {
            let keys: Vec<(i64, String)> = batch
                .iter()
                .filter_map(|p| match p {
                    Pending::Key(k, s) if *s == source => Some((k.epoch(), k.to_string())),
                    _ => None,
                })
                .collect();
            if keys.is_empty() {
                continue;
            }
            let blob_keys: Vec<BlobKey<'_>> =
                keys.iter().map(|(e, k)| BlobKey::new(*e, k)).collect();
            let ns = match (source, &self.opts.substream) {
                (Source::Result, Some(v)) => Namespace::Substream(v.name().to_owned()),
                (Source::Fallback, _) => Namespace::Events,
                _ => self.opts.namespace.clone(),
            };
            answers[slot] = self.store.get_blobs(&ns, &blob_keys).into_iter();
        }
        for p in batch {
            match p {
                Pending::Warning(w) => self.fetched.push_back(Fetched::Warning(w)),
                Pending::Key(k, source) => {
                    let slot = source as usize;
                    let r = answers[slot].next().unwrap_or_else(|| {
                        Err(StoreError::Unavailable {
                            reason: "store returned fewer results than keys".into(),
                        })
                    });
                    self.fetched.push_back(Fetched::Blob(k, source, r));
                }
            }
        }
    }

    /// Turns the next fetched chunk into items in `out`.
    fn process_one(&mut self) {
        let Some(f) = self.fetched.pop_front() else {
            return;
        };
        let (key, source, result) = match f {
            Fetched::Warning(w) => {
                self.out.push_back(ReadItem::Warning(w));
                return;
            }
            Fetched::Blob(key, source, result) => (key, source, result),
        };
        self.stats.chunks += 1;
        let warn = |reason: String| {
            ReadItem::Warning(ReadWarning {
                key: key.to_string(),
                reason,
            })
        };
        match result {
            Err(e) => self.out.push_back(warn(format!("fetching: {e}"))),
            Ok(None) => self.out.push_back(warn(
                "missing: listed in the epoch index but not stored".into(),
            )),
            Ok(Some(bytes)) => {
                self.stats.bytes += bytes.len() as u64;
                let bytes = if source == Source::Fallback {
                    let Some(view) = &self.opts.substream else {
                        return;
                    };
                    match view.compute(&key, &bytes) {
                        Ok(result) => {
                            self.stats.fallbacks += 1;
                            self.out.push_back(ReadItem::Notice(ReadWarning {
                                key: key.to_string(),
                                reason: format!(
                                    "no stored result of substream {:?}: computed here from the full blob (fallback)",
                                    view.name()
                                ),
                            }));
                            result
                        }
                        Err(e) => {
                            self.out.push_back(warn(format!(
                                "no stored result of substream {:?}, and computing it here failed: {e}",
                                view.name()
                            )));
                            return;
                        }
                    }
                } else {
                    bytes
                };
                let decoded = self.chunk.decode(&bytes);
                if let Some(reason) = self.chunk.notice.take() {
                    self.out.push_back(ReadItem::Notice(ReadWarning {
                        key: key.to_string(),
                        reason,
                    }));
                }
                match decoded {
                    Ok(values) => self.out.extend(values.into_iter().map(|value| {
                        ReadItem::Event(ReadEvent {
                            key: key.clone(),
                            value,
                        })
                    })),
                    Err(reason) => self.out.push_back(warn(reason)),
                }
            }
        }
    }
}

impl<S, T> Iterator for RangeReader<S>
where
    S: Deref<Target = T>,
    T: ReadStore + ?Sized,
{
    type Item = ReadItem;

    fn next(&mut self) -> Option<ReadItem> {
        loop {
            if let Some(item) = self.out.pop_front() {
                match &item {
                    ReadItem::Event(_) => self.stats.events += 1,
                    ReadItem::Warning(_) => self.stats.warnings += 1,
                    ReadItem::Notice(_) => {}
                }
                return Some(item);
            }
            if !self.fetched.is_empty() {
                self.process_one();
            } else if !self.pending.is_empty() {
                self.fetch_batch();
            } else if !self.next_epoch() {
                if self.damage_reported {
                    return None;
                }
                self.report_damage();
            }
        }
    }
}

/// Decodes chunks for one request, reusing buffers across chunks.
struct ChunkDecoder {
    lazy: bool,
    /// Check each chunk's SHA-1 (false: the store checked the bytes, see
    /// [`ReadOptions::verify_sha1`]).
    verify_sha1: bool,
    limits: Limits,
    decoder: Decoder,
    /// The select paths, then the filter's: one pass for both.
    selector: Selector,
    /// With both a select and a filter: the filter's paths alone, then the select paths alone
    /// for the events the filter keeps (most events are rejected after a short walk, and with
    /// an element index never walked further).
    split: Option<(Selector, Selector)>,
    /// Set by `decode` when the chunk's element index was bad (read by walking instead).
    notice: Option<String>,
    /// Number of select paths (the selector's first paths); the filter's follow.
    n_select: usize,
    /// Select path texts (output keys) and whether each has a `[*]`.
    select_keys: Vec<(Key, bool)>,
    filter: Option<Filter>,
    scratch: Vec<u8>,
    found: Vec<Vec<Value>>,
    facts: ReadFacts,
}

impl ChunkDecoder {
    fn new(req: &ReadRequest, limits: &Limits) -> ChunkDecoder {
        let mut paths = req.selection.select.clone();
        if let Some(f) = &req.selection.filter {
            paths.extend(f.paths().iter().cloned());
        }
        let select_keys = req
            .selection
            .select
            .iter()
            .map(|p| {
                let many = p.steps().iter().any(|s| matches!(s, Step::Wildcard));
                (Key::Utf8(Arc::from(p.to_string())), many)
            })
            .collect();
        let n_paths = paths.len();
        ChunkDecoder {
            facts: ReadFacts {
                path_seen: vec![false; n_paths],
                path_kinds: vec![0; n_paths],
                ..ReadFacts::default()
            },
            lazy: req.is_lazy(),
            limits: limits.clone(),
            decoder: Decoder::with_limits(limits.clone()),
            selector: Selector::new(paths),
            split: req.selection.filter.as_ref().and_then(|f| {
                (!req.selection.select.is_empty()).then(|| {
                    (
                        Selector::new(f.paths().to_vec()),
                        Selector::new(req.selection.select.clone()),
                    )
                })
            }),
            notice: None,
            verify_sha1: true,
            n_select: req.selection.select.len(),
            select_keys,
            filter: req.selection.filter.clone(),
            scratch: Vec::new(),
            found: Vec::new(),
        }
    }

    /// The output values of one chunk (all or nothing), or why the chunk is unreadable.
    fn decode(&mut self, bytes: &[u8]) -> Result<Vec<Value>, String> {
        let blob = if self.verify_sha1 {
            Blob::parse(bytes)
        } else {
            Blob::parse_store_checked(bytes)
        }
        .map_err(|e| e.to_string())?;
        if !self.lazy {
            let values = blob
                .decode_with(&mut self.decoder)
                .map_err(|e| e.to_string())?;
            self.facts.scanned += values.len() as u64;
            return Ok(values);
        }
        let doc = blob
            .lazy(&self.limits, &mut self.scratch)
            .map_err(|e| e.to_string())?;
        if let sereal::lazy::IndexUse::Ignored(reason) = doc.element_index() {
            self.notice = Some(format!("{reason}; events found by walking instead"));
        }
        let mut items = doc.items().map_err(|e| format!("blob body: {e}"))?;
        // One pass per event picks undecoded handles for the select and filter paths; the filter
        // is evaluated first, and only the events it keeps are decoded (most are not: a
        // `status >= 500` keeps ~2 %). Handles borrow the body, so they live per chunk.
        let mut handles: Vec<Vec<sereal::lazy::Item<'_>>> = Vec::new();
        let mut picked_select: Vec<Vec<sereal::lazy::Item<'_>>> = Vec::new();
        let mut out = Vec::new();
        let mut i = 0usize;
        let n_select = self.n_select;
        loop {
            // Filter paths first, the select paths only for the events kept — once every select
            // path has been seen (until then each event is searched for all paths, so that
            // `path_seen` means what it says: some scanned event had it).
            let filter_first = match &self.split {
                Some(_) => self.facts.path_seen[..n_select].iter().all(|&s| s),
                None => false,
            };
            let next = match (&mut self.split, filter_first) {
                (Some((filter_sel, _)), true) => filter_sel.next_selected(&mut items, &mut handles),
                _ => self.selector.next_selected(&mut items, &mut handles),
            };
            let Some(item) = next else { break };
            let event = i;
            i += 1;
            let item = item.map_err(|e| format!("event {event}: {e}"))?;
            self.facts.scanned += 1;
            // Where the filter's handles start in `handles`.
            let fbase = if filter_first { 0 } else { n_select };
            let seen = self.facts.path_seen[n_select - fbase..].iter_mut();
            for (seen, picked) in seen.zip(&handles) {
                *seen |= !picked.is_empty();
            }
            // One budget per event for all it decodes, as one selection had; set up on first use
            // (most events only have a plain integer read, which needs no decoder).
            let mut dec = None;
            // The common `field <op> literal` on one plain integer (`status >= 500`): evaluated
            // on that value alone, without the per-path value lists.
            let one = match (&self.filter, &handles[fbase..]) {
                (Some(f), [picked]) if picked.len() == 1 => plain_int(&picked[0])
                    .and_then(|v| f.matches_one(&v).map(|keep| (keep, kind_of(&v)))),
                _ => None,
            };
            if let Some((keep, kind)) = one {
                self.facts.path_kinds[n_select] |= kind;
                if !keep {
                    continue;
                }
            } else if let Some(f) = &self.filter {
                self.found.resize_with(handles.len() - fbase, Vec::new);
                let kinds = self.facts.path_kinds[n_select..].iter_mut();
                for ((values, picked), kind) in
                    self.found.iter_mut().zip(&handles[fbase..]).zip(kinds)
                {
                    values.clear();
                    for h in picked {
                        let v = match plain_int(h) {
                            Some(v) => v,
                            None => dec
                                .get_or_insert_with(|| doc.item_decoder())
                                .decode(h)
                                .map_err(|e| format!("event {event}: {e}"))?,
                        };
                        *kind |= kind_of(&v);
                        values.push(v);
                    }
                }
                if !f.matches_selected(&self.found) {
                    continue;
                }
            }
            if n_select == 0 {
                out.push(
                    dec.get_or_insert_with(|| doc.item_decoder())
                        .decode(&item)
                        .map_err(|e| format!("event {event}: {e}"))?,
                );
                continue;
            }
            let selected = match (&mut self.split, filter_first) {
                (Some((_, select_sel)), true) => {
                    select_sel
                        .select_handles(&item, &mut picked_select)
                        .map_err(|e| format!("event {event}: {e}"))?;
                    &picked_select
                }
                _ => &handles,
            };
            let mut hash = Vec::with_capacity(n_select);
            for ((key, many), picked) in self.select_keys.iter().zip(selected) {
                let v = if *many {
                    let mut all = Vec::with_capacity(picked.len());
                    for h in picked {
                        all.push(
                            dec.get_or_insert_with(|| doc.item_decoder())
                                .decode(h)
                                .map_err(|e| format!("event {event}: {e}"))?,
                        );
                    }
                    Value::Array(all)
                } else {
                    match picked.first() {
                        Some(h) => dec
                            .get_or_insert_with(|| doc.item_decoder())
                            .decode(h)
                            .map_err(|e| format!("event {event}: {e}"))?,
                        None => Value::Undef,
                    }
                };
                hash.push((key.clone(), v));
            }
            out.push(Value::Hash(hash));
        }
        Ok(out)
    }
}

/// The value of an integer written in place (no reference, no track flag), as the decoder would
/// give it, read without setting up a decoder: most `where` operands are such numbers (a status,
/// a duration). `None` for anything else.
#[inline]
fn plain_int(h: &sereal::lazy::Item<'_>) -> Option<Value> {
    use sereal::lazy::Scalar;
    use sereal::tag::{VARINT, ZIGZAG};
    match h.tag() {
        0x00..=0x1f | VARINT | ZIGZAG => match h.scalar() {
            Ok(Some(Scalar::Int(i))) => Some(Value::Int(i)),
            Ok(Some(Scalar::UInt(u))) => Some(Value::UInt(u)),
            _ => None,
        },
        _ => None,
    }
}

fn kind_of(v: &Value) -> u8 {
    match v.resolve() {
        Value::Int(_) | Value::UInt(_) | Value::Float(_) => KIND_NUMBER,
        Value::String(_) | Value::Binary(_) => KIND_STRING,
        Value::Ref(inner) => kind_of(inner),
        _ => KIND_OTHER,
    }
}

/// Output format of [`write_items`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// NDJSON: one event per line.
    #[default]
    Json,
    /// One Sereal document (protocol 5, uncompressed) per event, concatenated.
    Sereal,
}

impl FromStr for OutputFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<OutputFormat, String> {
        match s {
            "json" | "ndjson" => Ok(OutputFormat::Json),
            "sereal" => Ok(OutputFormat::Sereal),
            other => Err(format!("unknown format {other:?}: json or sereal")),
        }
    }
}

/// Writes events one at a time in an [`OutputFormat`].
pub struct EventWriter<W: Write> {
    out: W,
    format: OutputFormat,
    encoder: Option<Encoder>,
    buf: Vec<u8>,
}

impl<W: Write> fmt::Debug for EventWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventWriter")
            .field("format", &self.format)
            .finish()
    }
}

impl<W: Write> EventWriter<W> {
    /// A writer of `format` into `out` (wrap `out` in a `BufWriter` if it is unbuffered).
    pub fn new(out: W, format: OutputFormat) -> EventWriter<W> {
        EventWriter {
            out,
            format,
            encoder: None,
            buf: Vec::new(),
        }
    }

    /// Writes one event (a JSON line, or a Sereal document).
    pub fn write(&mut self, value: &Value) -> io::Result<()> {
        match self.format {
            OutputFormat::Json => {
                self.buf.clear();
                sereal::json::to_writer(&mut self.buf, value)?;
                self.buf.push(b'\n');
                self.out.write_all(&self.buf)
            }
            OutputFormat::Sereal => {
                if self.encoder.is_none() {
                    self.encoder =
                        Some(Encoder::new(EncoderOptions::default()).map_err(io::Error::other)?);
                }
                let enc = self.encoder.as_mut().expect("just set");
                self.buf.clear();
                enc.encode_into(value, &mut self.buf)
                    .map_err(io::Error::other)?;
                self.out.write_all(&self.buf)
            }
        }
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer, to write around the events (e.g. other formats of them).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// What [`write_items`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteSummary {
    /// Events written.
    pub events: u64,
    /// Warnings met (each also given to the callback).
    pub warnings: u64,
    /// Notices met (each also given to the callback, with `true`).
    pub notices: u64,
}

/// Writes the events of `items` to `out` in `format`, passing each warning to `on_warning` (e.g.
/// print it on stderr) as it comes (notices are only counted). Stops only on a write error (e.g.
/// a closed pipe). The caller exits non-zero if the summary counts warnings.
pub fn write_items<W: Write>(
    items: impl IntoIterator<Item = ReadItem>,
    format: OutputFormat,
    out: W,
    mut on_warning: impl FnMut(&ReadWarning),
) -> io::Result<WriteSummary> {
    write_items_noting(items, format, out, |w, notice| {
        if !notice {
            on_warning(w)
        }
    })
}

/// [`write_items`], passing notices too (with `true`; warnings with `false`).
pub fn write_items_noting<W: Write>(
    items: impl IntoIterator<Item = ReadItem>,
    format: OutputFormat,
    out: W,
    mut on_warning: impl FnMut(&ReadWarning, bool),
) -> io::Result<WriteSummary> {
    let mut w = EventWriter::new(out, format);
    let mut summary = WriteSummary::default();
    for item in items {
        match item {
            ReadItem::Event(e) => {
                w.write(&e.value)?;
                summary.events += 1;
            }
            ReadItem::Warning(warning) => {
                on_warning(&warning, false);
                summary.warnings += 1;
            }
            ReadItem::Notice(notice) => {
                on_warning(&notice, true);
                summary.notices += 1;
            }
        }
    }
    w.flush()?;
    Ok(summary)
}
