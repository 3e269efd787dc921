//! What a range read is asked for: [`ReadRequest`] (which epochs, which events) and
//! [`ReadOptions`] (namespace, decoder limits, batch size, substream, checksums, and what the
//! consumer reads of each event: [`ReadOptions::needs`], [`ReadOptions::top`]).
//!
//! Its own module because the reader ([`crate::range`]), the hints ([`crate::hints`]) and the
//! tail ([`crate::tail`]) all take them: none of them owns the others' inputs.
//!
//! # Sparse events
//! A consumer that reads a few paths of each event (a reduce: `--count-by status`) says so in
//! [`ReadOptions::needs`]; blob chunks are then read with the codec's lazy reader and each event
//! is a *sparse event* ([`SparseShape`]): only the values those paths can reach, at the same
//! places, so that [`sereal::Path::eval`] of a needed path gives on the sparse event exactly what
//! it gives on the whole one (every match of a `[*]` path, the same first match). Decoding whole
//! events was most of a reduce's cost.

use std::sync::Arc;

use sereal::lazy::Step;
use sereal::{Key, Limits, Path, Value};
use sluice_store::Namespace;

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
    /// Chunks fetched per [`sluice_store::ReadStore::get_blobs`] call (at least 1; default 16). The store may fetch
    /// them in parallel; the reader holds at most this many chunks' bytes at once.
    pub fetch_batch: usize,
    /// The substream named by [`Selection::substream`] (required with it; see "Substreams" in
    /// the module docs). `namespace` is then ignored.
    pub substream: Option<Arc<dyn SubstreamView>>,
    /// Check every chunk's SHA-1 trailer even when the store checked a checksum of the same
    /// bytes on the read ([`sluice_store::ReadStore::checks_each_read`]: the embedded store and Cassandra do,
    /// so by default their chunks are not hashed twice). Default: false (`sluice cat --verify-sha1`).
    pub verify_sha1: bool,
    /// The column files: chunks a file holds are read from it, the rest from blobs (same
    /// answer). `None` reads blobs only (`columns=off`). Not used by substream reads.
    pub columns: Option<Arc<sluice_columns::view::ColumnsView>>,
    /// The paths the consumer reads of each event (a reduce's fields): each event is then a
    /// sparse event ([`SparseShape`]: blob chunks read lazily, only these paths' values
    /// materialised), and the columns read only these fields. `None`: whole events. Ignored
    /// with a `select` (which names its own), and when a path starts with an index or `[*]`
    /// (whole events then).
    pub needs: Option<Vec<sereal::Path>>,
    /// The consumer keeps only the `n` events with the largest value at this path, as
    /// [`crate::reduce::TopEvents`] ranks them (`--top N --by PATH`): blob chunks are then read
    /// lazily and only the events among the `n` first of all those read so far are handed out
    /// (whole, in read order; an event `n` earlier ones beat cannot be among the read's top),
    /// the rest are never decoded. The top events of the read are the same. `None`: every
    /// event. Ignored with a `select`.
    pub top: Option<(sereal::Path, usize)>,
    /// With [`ReadOptions::needs`]: the consumer counts [`crate::ReadEvent::repeat`], so the column
    /// reads may hand over one event for equal ones of a chunk (equal in every needed path: a
    /// count by status then builds one event per status and chunk, not one per row). Only for
    /// consumers whose result does not depend on how many times an equal event is pushed
    /// apart from its count ([`crate::reduce::Plan::narrow_read`] sets it for count, min and
    /// max). Default false.
    pub repeats: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            namespace: Namespace::Events,
            limits: Limits::default(),
            fetch_batch: 16,
            substream: None,
            verify_sha1: false,
            columns: None,
            needs: None,
            top: None,
            repeats: false,
        }
    }
}

/// The shape of the sparse events of a read with [`ReadOptions::needs`]: which values are read
/// and where they go. The one owner of the rule (the blob reader and `sluice cat --server`'s
/// reduce both build their events with it):
///
/// - each needed path's leading key steps (`timings.total_ms` whole; `experiments` of
///   `experiments[*].id`; `a` of `a[0]`) name a *prefix*, a key path;
/// - a prefix under another one is dropped (`a.b` when `a` is read);
/// - a prefix's value (its first match, decoded as the full decoder would) is put at the same
///   keys of nested maps; a missing one is left out.
///
/// A key step takes the first entry of that key and looks through references and objects,
/// both in the lazy reader and in [`sereal::Path::eval`]; so a needed path's steps past its
/// prefix meet exactly the value they meet in the whole event, and its matches are the same.
/// A needed path that starts with an index or `[*]` has no prefix: it needs whole events
/// ([`SparseShape::of`] is `None`).
#[derive(Debug, Clone, PartialEq)]
pub struct SparseShape {
    /// The prefixes read, none under another, in the order first needed.
    prefixes: Vec<Path>,
    /// Each prefix's keys (cloned into each event: no allocation per key).
    keys: Vec<Vec<Key>>,
}

impl SparseShape {
    /// The shape for the paths `needs`; `None` when one of them needs the whole event.
    pub fn of(needs: &[Path]) -> Option<SparseShape> {
        let mut prefixes: Vec<Vec<String>> = Vec::new();
        for p in needs {
            let keys: Vec<String> = p
                .steps()
                .iter()
                .map_while(|s| match s {
                    Step::Key(k) => Some(k.clone()),
                    _ => None,
                })
                .collect();
            if keys.is_empty() {
                return None;
            }
            prefixes.push(keys);
        }
        // Drop a prefix equal to or under another (keeping the first of equal ones).
        let mut kept: Vec<Vec<String>> = Vec::with_capacity(prefixes.len());
        for (i, p) in prefixes.iter().enumerate() {
            let covered = prefixes
                .iter()
                .enumerate()
                .any(|(j, q)| j != i && p.starts_with(q) && (q.len() < p.len() || j < i));
            if !covered {
                kept.push(p.clone());
            }
        }
        let mut paths = Vec::with_capacity(kept.len());
        let mut keys = Vec::with_capacity(kept.len());
        for k in kept {
            // At least one key step: `from_steps` cannot refuse it.
            let path = Path::from_steps(k.iter().cloned().map(Step::Key).collect()).ok()?;
            keys.push(k.iter().map(|s| Key::Utf8(Arc::from(s.as_str()))).collect());
            paths.push(path);
        }
        Some(SparseShape {
            prefixes: paths,
            keys,
        })
    }

    /// The key paths read of each event (the prefixes), in the order [`SparseShape::build`]
    /// takes their values.
    pub fn paths(&self) -> &[Path] {
        &self.prefixes
    }

    /// The sparse event holding `values[i]` (the first match of prefix `i`, or `None`) at
    /// prefix `i`.
    pub fn build(&self, values: impl IntoIterator<Item = Option<Value>>) -> Value {
        let mut root: Vec<(Key, Value)> = Vec::with_capacity(self.keys.len());
        for (keys, value) in self.keys.iter().zip(values) {
            let Some(value) = value else { continue };
            let Some((leaf, parents)) = keys.split_last() else {
                continue;
            };
            // Prefixes are distinct and none is under another, so a leaf never meets a map
            // made for another prefix (and `map_at` never meets anything but maps).
            if let Some(map) = map_at(&mut root, parents) {
                map.push((leaf.clone(), value));
            }
        }
        Value::Hash(root)
    }
}

/// The map at keys `parents` under `root`, made empty where missing; `None` if a value that is
/// not a map is in the way.
fn map_at<'m>(
    root: &'m mut Vec<(Key, Value)>,
    parents: &[Key],
) -> Option<&'m mut Vec<(Key, Value)>> {
    let mut map = root;
    for k in parents {
        let at = match map.iter().position(|(mk, _)| mk.as_bytes() == k.as_bytes()) {
            Some(at) => at,
            None => {
                map.push((k.clone(), Value::Hash(Vec::new())));
                map.len() - 1
            }
        };
        map = match &mut map[at].1 {
            Value::Hash(inner) => inner,
            _ => return None,
        };
    }
    Some(map)
}
