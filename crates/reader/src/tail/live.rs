//! A tail fed from memory as well: the server's live hub hands it every acknowledged WAL record
//! after a start point ([`Tail::go_live`], [`Tail::deliver_live`]), and each poll sorts the new
//! chunks of that server's collector by their origins ([`spans`](super::spans)): events already
//! delivered live are left out, a chunk holding a record the hub has not handed over yet waits.
//!
//! ```text
//! go_live(collector, start) ─► deliver_live(record s)  (s > start, in order, none missed)
//!        │                         └─ events kept by the selection; span (start, s] recorded
//!        ▼
//! poll: new chunk of collector ─► origins ─► all live: delivered, not read
//!                                            none live: read as usual
//!                                            some live: read only the others
//!                                            a record > s: wait for the next poll
//! ```
//!
//! Exactness rests on three facts: the hub gives a subscriber every record after its start, in
//! order, each once it is durable; a stored chunk's origins name each event's record (written
//! with the data, so a replay after a crash gives its events their old numbers); and a cursor
//! remembers a span until its watermark passes the span's latest epoch (no chunk below the
//! watermark is ever read).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use sereal::{Limits, Value};
use sluice_blob::{Blob, BlobBuilder, BlobOptions, ChunkId, EventKey, IndexEntry};
use sluice_store::{BlobKey, ReadStore};

use super::spans::Verdict;
use super::Tail;
use crate::chunk::ChunkDecoder;
use crate::item::{ReadEvent, ReadItem, ReadWarning};
use crate::live::LiveDoc;
use crate::request::ReadRequest;

/// The open live subscription of a tail.
#[derive(Debug, Clone)]
pub(super) struct OpenLive {
    /// The server's collector id (`""`: plain chunk ids).
    pub collector: String,
    /// The last record handed over (the subscription's start before the first).
    pub to: u64,
}

/// The new chunks of one poll, sorted by what live delivery already covered.
#[derive(Default)]
pub(super) struct Sorted {
    /// Chunk key → the bytes to read for it (fetched once: the whole chunk, or a chunk of only
    /// the events not delivered live).
    pub prefetched: HashMap<String, Vec<u8>>,
    /// The earliest epoch of a chunk left for a later poll.
    pub deferred_from: Option<i64>,
}

impl<S, T> Tail<S>
where
    S: std::ops::Deref<Target = T>,
    T: ReadStore + ?Sized,
{
    /// Starts taking live records of the server whose chunks are named by `collector` (`None`:
    /// plain numbers): every record after `start` will be given to
    /// [`deliver_live`](Self::deliver_live), in order, none missed.
    pub fn go_live(&mut self, collector: Option<&str>, start: u64) {
        let collector = collector.unwrap_or_default().to_owned();
        // A span past the server's last record cannot be of this WAL (one wiped and started
        // again numbers from 1): skipping by it would lose new events of the same numbers.
        self.cursor.spans.forget_beyond(&collector, start);
        self.live = Some(OpenLive {
            collector,
            to: start,
        });
    }

    /// The live subscription ended (the hub dropped it, or it was never possible): from now on
    /// the records after the last one handed over come from the store.
    pub fn end_live(&mut self) {
        self.live = None;
    }

    /// Whether a live subscription is open.
    pub fn is_live(&self) -> bool {
        self.live.is_some()
    }

    /// The events of one live record that this tail's selection keeps, as a poll would give
    /// them; the record is then part of the cursor. A record not after the last one (or with no
    /// subscription open) gives nothing.
    pub fn deliver_live(&mut self, doc: &LiveDoc) -> Vec<ReadItem> {
        let Some(open) = self.live.as_mut() else {
            return Vec::new();
        };
        if doc.seq <= open.to {
            return Vec::new();
        }
        let from = std::mem::replace(&mut open.to, doc.seq);
        let collector = open.collector.clone();
        self.cursor
            .spans
            .record(&collector, from, doc.seq, doc.max_epoch);
        let mut items = Vec::new();
        for part in &doc.parts {
            if self.req.dc.as_deref().is_some_and(|dc| dc != part.dc)
                || !self.req.keeps_in(&part.dc, &part.type_, &part.subtype)
            {
                continue;
            }
            self.facts.see_type(&part.type_);
            // Named as what it is: not a stored chunk (yet).
            let chunk = ChunkId::collector("live", (doc.seq % (1 << 32)) as u32);
            let key = match chunk
                .and_then(|c| EventKey::new(part.epoch, &part.dc, &part.type_, &part.subtype, c))
            {
                Ok(k) => Arc::new(k),
                Err(e) => {
                    items.push(ReadItem::Warning(ReadWarning {
                        key: format!("live:{}", doc.seq),
                        reason: e.to_string(),
                    }));
                    continue;
                }
            };
            let decoder = self.live_decoder.get_or_insert_with(|| {
                let req = ReadRequest::selected(i64::MIN, i64::MAX, self.req.clone());
                ChunkDecoder::new(&req, &self.opts.read)
            });
            match decoder.decode(part.blob.as_bytes()) {
                Ok(values) => items.extend(values.into_iter().map(|value| {
                    ReadItem::Event(ReadEvent {
                        key: key.clone(),
                        value,
                        repeat: 1,
                    })
                })),
                Err(reason) => items.push(ReadItem::Warning(ReadWarning {
                    key: key.to_string(),
                    reason,
                })),
            }
        }
        items
    }

    /// Whether this poll's new chunks must be sorted by their origins.
    pub(super) fn live_matters(&self) -> bool {
        self.live.is_some() || !self.cursor.spans.is_empty()
    }

    /// Sorts the new chunks of collectors with live spans (or the open subscription's):
    /// removes from `snapshot` those all delivered live (they stay in `fresh`: recorded as
    /// delivered) and those to wait for (removed from `fresh` too), and prefetches the rest.
    pub(super) fn sort_by_origins(
        &mut self,
        snapshot: &mut BTreeMap<(i64, String), Result<BTreeSet<String>, String>>,
        fresh: &mut Vec<(i64, String, IndexEntry)>,
    ) -> Sorted {
        let mut sorted = Sorted::default();
        let open = self.live.clone();
        let relevant = |entry: &IndexEntry| {
            let c = entry.chunk().collector_id().unwrap_or_default();
            self.cursor.spans.has_collector(c) || open.as_ref().is_some_and(|o| o.collector == c)
        };
        let texts: Vec<(usize, String)> = fresh
            .iter()
            .enumerate()
            .filter(|(_, (_, _, entry))| relevant(entry))
            .map(|(i, (epoch, dc, entry))| (i, format!("{epoch}:{dc}:{entry}")))
            .collect();
        if texts.is_empty() {
            return sorted;
        }
        let keys: Vec<BlobKey<'_>> = texts
            .iter()
            .map(|(i, text)| BlobKey::new(fresh[*i].0, text))
            .collect();
        let results = self.store.get_blobs(&self.opts.read.namespace, &keys);
        let mut defer = Vec::new();
        for ((i, text), result) in texts.iter().zip(results) {
            let (epoch, dc, entry) = &fresh[*i];
            let bytes = match result {
                Ok(Some(bytes)) => bytes,
                // Listed but not stored: the range read reports it.
                Ok(None) => continue,
                // Not read whole by the range read instead (a second fetch that worked would
                // repeat the live events): tried again at the next poll, as a failed fetch is.
                Err(_) => {
                    unlist_chunk(snapshot, *epoch, dc, entry);
                    defer.push(*i);
                    continue;
                }
            };
            let collector = entry.chunk().collector_id().unwrap_or_default();
            let origins = Blob::parse(&bytes).ok().and_then(|b| b.origins());
            let verdict = match &origins {
                Some(o) => {
                    let to = open
                        .as_ref()
                        .filter(|o| o.collector == collector)
                        .map(|o| o.to);
                    self.cursor.spans.verdict(collector, o, to)
                }
                // No origins (another profile, or a damaged index): nothing to skip by.
                None => Verdict::Keep,
            };
            match verdict {
                Verdict::Keep => {
                    sorted.prefetched.insert(text.clone(), bytes);
                }
                Verdict::SkipAll => unlist_chunk(snapshot, *epoch, dc, entry),
                Verdict::Defer => {
                    unlist_chunk(snapshot, *epoch, dc, entry);
                    defer.push(*i);
                    sorted.deferred_from =
                        Some(sorted.deferred_from.map_or(*epoch, |e| e.min(*epoch)));
                }
                Verdict::Partial(keep) => {
                    // A chunk that cannot be cut is read whole: its own read reports why (a
                    // chunk that decodes always re-encodes).
                    let bytes =
                        keep_elements(&bytes, &keep, &self.opts.read.limits).unwrap_or(bytes);
                    sorted.prefetched.insert(text.clone(), bytes);
                }
            }
        }
        let mut i = 0;
        fresh.retain(|_| {
            let keep = !defer.contains(&i);
            i += 1;
            keep
        });
        sorted
    }
}

/// Takes chunk `entry` of `(epoch, dc)` out of this poll's snapshot (the range read skips it).
fn unlist_chunk(
    snapshot: &mut BTreeMap<(i64, String), Result<BTreeSet<String>, String>>,
    epoch: i64,
    dc: &str,
    entry: &IndexEntry,
) {
    let pair = (epoch, dc.to_owned());
    if let Some(Ok(set)) = snapshot.get_mut(&pair) {
        set.remove(&entry.to_string());
        if set.is_empty() {
            snapshot.remove(&pair);
        }
    }
}

/// A blob of the elements of `bytes` marked in `keep`, in order (the default profile, one chunk).
fn keep_elements(bytes: &[u8], keep: &[bool], limits: &Limits) -> Result<Vec<u8>, String> {
    let blob = Blob::parse(bytes).map_err(|e| e.to_string())?;
    let values = blob.decode(limits).map_err(|e| e.to_string())?;
    if values.len() != keep.len() {
        return Err(format!(
            "origins name {} events, the chunk holds {}",
            keep.len(),
            values.len()
        ));
    }
    let kept: Vec<Value> = values
        .into_iter()
        .zip(keep)
        .filter_map(|(v, k)| k.then_some(v))
        .collect();
    let opts = BlobOptions {
        // One chunk: fewer events than a stored chunk held.
        chunk_limit: bytes.len().saturating_mul(4).saturating_add(1 << 16),
        ..BlobOptions::default()
    };
    let mut builder = BlobBuilder::new(opts).map_err(|e| e.to_string())?;
    let mut blobs = builder.build(&kept).map_err(|e| e.to_string())?;
    match blobs.len() {
        1 => Ok(blobs.remove(0).into_bytes()),
        n => Err(format!("re-encoding gave {n} chunks")),
    }
}
