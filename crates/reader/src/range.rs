//! Range reads: the events of a time range (and dc / type / subtype), out of a [`ReadStore`].
//!
//! The reader's parts, each in its own module: what is asked ([`crate::request`]), what comes
//! out ([`crate::item`]), what was seen for the hints ([`crate::facts`]), one chunk's decoding
//! (the private `chunk` module), the writers of the output ([`crate::output`]). This module is the
//! iterator that drives them.
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
//! are read with the codec's lazy reader: per event, one [`Selector`](sereal::lazy::Selector) pass picks the select paths
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
//! With [`crate::Selection::substream`] (and its [`crate::SubstreamView`] in [`ReadOptions::substream`]) the
//! read lists the same chunks of the events' epoch index, restricted to those the substream
//! applies to, and reads each one's result from `substreams/<name>` when the substream's index
//! lists it. A chunk without a stored result (shed, failed, stored before the substream
//! existed) is read in full from `events` and the result computed here
//! ([`crate::SubstreamView::compute`]: the bytes the runner would have stored), preceded by a
//! [`ReadItem::Notice`]; with [`crate::Selection::no_fallback`] it is a [`ReadItem::Warning`] (a gap)
//! instead. `select` / `where` then apply to the substream's results.
//!
//! # Output
//! Writing the items out (NDJSON, Sereal, the human formats) is [`crate::output`]'s.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use sluice_blob::{EpochKey, EventKey, IndexEntry};
use sluice_store::{BlobKey, Namespace, ReadStore, StoreError};

use crate::chunk::ChunkDecoder;
use crate::columns::{ColumnsChunk, ColumnsSource};
use crate::facts::ReadFacts;
use crate::item::{ReadEvent, ReadItem, ReadStats, ReadWarning};
use crate::request::{ReadOptions, ReadRequest};

/// Why a range cannot be read at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The request is invalid (e.g. `to` before `from`).
    #[error("bad read request: {0}")]
    BadRequest(String),
    /// The store could not list the range.
    #[error("listing the range: {0}")]
    Store(#[source] StoreError),
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

/// Something queued for fetching, in output order.
enum Pending {
    Key(Arc<EventKey>, Source),
    /// A chunk a column file holds (read from there, not fetched).
    Columns(Arc<EventKey>, ColumnsChunk),
    Warning(ReadWarning),
}

/// Something fetched, in output order.
enum Fetched {
    Blob(Arc<EventKey>, Source, Result<Option<Vec<u8>>, StoreError>),
    Columns(Arc<EventKey>, ColumnsChunk),
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
    /// The column files, when [`ReadOptions::columns`] is given (not for substream reads).
    columns: Option<ColumnsSource>,
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
        let mut epochs = store
            .list_epochs(req.selection.dc.as_deref(), req.from, req.to)
            .map_err(ReadError::Store)?;
        let mut columns = match (&opts.columns, &req.selection.substream) {
            (Some(view), None) => Some(ColumnsSource::new(
                view.clone(),
                &req,
                opts.needs.as_deref(),
                opts.repeats,
            )),
            _ => None,
        };
        if let Some(source) = &mut columns {
            // Past the blobs' retention only the columns hold a second: list both.
            let mut all: BTreeSet<(i64, String)> = epochs.into_iter().collect();
            all.extend(source.epochs(req.selection.dc.as_deref()));
            epochs = all.into_iter().collect();
        }
        let mut chunk = ChunkDecoder::new(&req, &opts);
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
            columns,
            stats,
            damage_reported: false,
        })
    }

    /// Queues one warning per damaged range the store reports for the range's partitions.
    fn report_damage(&mut self) {
        self.damage_reported = true;
        // Column files that could not be used: their chunks were read from blobs.
        if let Some(c) = &mut self.columns {
            for (path, reason) in std::mem::take(&mut c.damaged) {
                self.out.push_back(ReadItem::Notice(ReadWarning {
                    key: format!("columns:{path}"),
                    reason: format!("{reason}; its chunks were read from blobs"),
                }));
            }
        }
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

    /// The store read (the hints sample it: [`crate::hints`]).
    pub(crate) fn store(&self) -> &T {
        &self.store
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
        let mut raw = match self.store.get_epoch_index(epoch, &dc) {
            Ok(raw) => raw,
            Err(e) => {
                self.pending
                    .push_back(warn(format!("reading the epoch index: {e}")));
                return true;
            }
        };
        if let Some(source) = &mut self.columns {
            raw.extend(source.entries(epoch, &dc));
        }
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
                let key = Arc::new(EventKey::from_parts(&epoch_key, entry));
                let place = self.columns.as_mut().and_then(|c| {
                    c.place(
                        epoch,
                        &dc,
                        entry.type_(),
                        entry.subtype(),
                        &entry.chunk().to_string(),
                    )
                });
                self.pending.push_back(match place {
                    Some(place) => Pending::Columns(key, place),
                    None => Pending::Key(key, Source::Plain),
                });
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
                Pending::Columns(k, place) => self.fetched.push_back(Fetched::Columns(k, place)),
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
            Fetched::Columns(key, place) => match self.take_columns(&key, &place) {
                Ok(()) => return,
                // The file could not give the chunk: read its blob instead, saying so.
                Err(reason) => {
                    self.out.push_back(ReadItem::Notice(ReadWarning {
                        key: key.to_string(),
                        reason: format!("column file {}: {reason}; read from the blob", place.path),
                    }));
                    let text = key.to_string();
                    let got = self
                        .store
                        .get_blob(&self.opts.namespace, BlobKey::new(key.epoch(), &text));
                    (key, Source::Plain, got)
                }
            },
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
                            repeat: 1,
                        })
                    })),
                    Err(reason) => self.out.push_back(warn(reason)),
                }
            }
        }
    }
}

impl<S, T> RangeReader<S>
where
    S: Deref<Target = T>,
    T: ReadStore + ?Sized,
{
    /// The events of one chunk a column file holds, into `out`.
    fn take_columns(&mut self, key: &EventKey, place: &ColumnsChunk) -> Result<(), String> {
        let Some(source) = &mut self.columns else {
            return Err("no columns".into());
        };
        let chunk = key.chunk().to_string();
        let values = source.take(
            place,
            key.epoch(),
            key.subtype(),
            &chunk,
            &mut self.chunk.facts,
        )?;
        self.stats.chunks += 1;
        self.stats.from_columns += 1;
        let key = Arc::new(key.clone());
        self.out.extend(values.into_iter().map(|(value, repeat)| {
            ReadItem::Event(ReadEvent {
                key: key.clone(),
                value,
                repeat,
            })
        }));
        Ok(())
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
                    ReadItem::Event(e) => self.stats.events += e.repeat,
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
