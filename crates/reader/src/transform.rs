//! Several selections (`select` + `where`) applied to one chunk in **one** lazy pass, and the
//! hook through which a range read reaches a substream's results.
//!
//! [`MultiSelect`] is the one implementation of "select these paths of the events this predicate
//! keeps": a range read with `--select` / `--where` uses it with one selection; the substream
//! runner (`sluice-substreams`) with every declarative substream that applies to a blob, so a
//! blob is walked once whatever their number; a reader's client-side fallback with the one
//! substream it reads. Same code, same output.
//!
//! # Contract
//! - One [`sereal::lazy::Selector`] pass per event over the paths every event needs (each
//!   distinct path once): the filters' paths and the outputs of selections without a filter.
//!   The other outputs are found by a second walk of the event (stopping once they are found)
//!   only when some filter kept it. Plain key paths (`a.b.c`) are walked by their own
//!   selectors, which keep the codec's fast key-tree walk; the others (`[*]`, `[i]`) by a
//!   separate one, on first use in an event — so one `[*]` path does not slow every other path
//!   down. A value is decoded at most once per event, and only when some selection needs it
//!   (its filter's paths, or its output for an event its filter kept).
//! - Identical filters (same `where` text) are evaluated once per event for all the selections
//!   that have them.
//! - The output of selection `i` is exactly what a [`crate::RangeReader`] with that selection
//!   alone gives for the chunk: the whole decoded event (no `select`) or a map
//!   `{path text: value}` (a `[*]` path: array of every match; any other path: its first match
//!   or `null`).
//! - A chunk is all or nothing: any decode error fails the whole chunk for every selection.

use std::fmt;
use std::sync::Arc;

use sereal::lazy::{Item, Selector, Step};
use sereal::{Decoder, Key, Limits, Path, Value};
use sluice_blob::{Blob, BlobError, EventKey};

use crate::filter::Filter;
use crate::selection::Selection;

/// One selection's share of the union of paths.
#[derive(Debug, Clone)]
struct Part {
    /// Output keys with their union index and whether the path has a `[*]`.
    select: Vec<(Key, usize, bool)>,
    /// Its filter's index in [`MultiSelect::filters`] (identical filters are shared).
    filter: Option<usize>,
}

/// One distinct filter of the selections, evaluated at most once per event for all of them.
#[derive(Debug, Clone)]
struct SharedFilter {
    filter: Filter,
    /// The union index of each of its paths.
    idxs: Vec<usize>,
    /// Whether those are distinct (then the values are lent to the filter, not cloned).
    distinct: bool,
}

/// A filter's verdict on the current event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Unknown,
    Keep,
    Drop,
}

/// Several selections over one chunk in one pass; see the [module docs](self).
pub struct MultiSelect {
    parts: Vec<Part>,
    /// The distinct filters (by their text), shared by the parts that have them.
    filters: Vec<SharedFilter>,
    /// The plain key paths every event needs (union indices `0..n_first`: the filters' paths
    /// and the outputs of selections without a filter): drives the iteration.
    selector: Selector,
    /// The other plain key paths (union indices `n_first..n_plain`: outputs of filtered
    /// selections), walked only for an event some filter kept.
    rest: Option<Selector>,
    /// The paths with `[*]` / `[i]` (union indices `n_plain..`), walked on first use.
    others: Option<Selector>,
    n_first: usize,
    n_plain: usize,
    n_paths: usize,
    /// Whether some selection decodes whole events (no `select`, or no lazy part at all).
    whole_only: bool,
    decoder: Decoder,
    scratch: Vec<u8>,
}

impl fmt::Debug for MultiSelect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiSelect")
            .field("selections", &self.parts.len())
            .field("filters", &self.filters.len())
            .field("paths", &self.n_paths)
            .finish()
    }
}

impl MultiSelect {
    /// The selections' `select` and `where` (their dc / type / subtype are the caller's to
    /// apply to chunk keys).
    pub fn new<'a>(selections: impl IntoIterator<Item = &'a Selection>) -> MultiSelect {
        let mut union: Vec<Path> = Vec::new();
        let mut index_of = |p: &Path| -> usize {
            match union.iter().position(|q| q == p) {
                Some(i) => i,
                None => {
                    union.push(p.clone());
                    union.len() - 1
                }
            }
        };
        let mut parts = Vec::new();
        let mut filters: Vec<SharedFilter> = Vec::new();
        for sel in selections {
            let select = sel
                .select
                .iter()
                .map(|p| {
                    let many = p.steps().iter().any(|s| matches!(s, Step::Wildcard));
                    (Key::Utf8(Arc::from(p.to_string())), index_of(p), many)
                })
                .collect();
            // The same text parses to the same expression over the same paths: one verdict.
            let filter = sel.filter.as_ref().map(|f| {
                match filters.iter().position(|s| s.filter.text() == f.text()) {
                    Some(i) => i,
                    None => {
                        let idxs: Vec<usize> = f.paths().iter().map(&mut index_of).collect();
                        let distinct = idxs.iter().enumerate().all(|(i, x)| !idxs[..i].contains(x));
                        filters.push(SharedFilter {
                            filter: f.clone(),
                            idxs,
                            distinct,
                        });
                        filters.len() - 1
                    }
                }
            });
            parts.push(Part { select, filter });
        }
        let whole_only = parts
            .iter()
            .all(|p| p.select.is_empty() && p.filter.is_none());
        let n_paths = union.len();
        // Which paths every event needs: those of the filters, and the outputs of selections
        // without one. The others are read only for events some filter kept.
        let mut always = vec![false; n_paths];
        for f in &filters {
            f.idxs.iter().for_each(|&i| always[i] = true);
        }
        for part in parts.iter().filter(|p| p.filter.is_none()) {
            part.select.iter().for_each(|(_, i, _)| always[*i] = true);
        }
        // Plain key paths first (their own selectors keep the fast walk), those every event
        // needs before the others; then the rest.
        let plain = |p: &Path| p.steps().iter().all(|s| matches!(s, Step::Key(_)));
        let mut order: Vec<usize> = (0..n_paths)
            .filter(|&i| plain(&union[i]) && always[i])
            .collect();
        let n_first = order.len();
        order.extend((0..n_paths).filter(|&i| plain(&union[i]) && !always[i]));
        let n_plain = order.len();
        order.extend((0..n_paths).filter(|&i| !plain(&union[i])));
        let mut new_index = vec![0; n_paths];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new;
        }
        for part in &mut parts {
            for (_, idx, _) in &mut part.select {
                *idx = new_index[*idx];
            }
        }
        for f in &mut filters {
            for idx in &mut f.idxs {
                *idx = new_index[*idx];
            }
        }
        let paths_of = |r: std::ops::Range<usize>| -> Vec<Path> {
            order[r].iter().map(|&i| union[i].clone()).collect()
        };
        let (first, rest, others) = (
            paths_of(0..n_first),
            paths_of(n_first..n_plain),
            paths_of(n_plain..n_paths),
        );
        MultiSelect {
            parts,
            filters,
            selector: Selector::new(first),
            rest: (!rest.is_empty()).then(|| Selector::new(rest)),
            others: (!others.is_empty()).then(|| Selector::new(others)),
            n_first,
            n_plain,
            n_paths,
            whole_only,
            decoder: Decoder::new(),
            scratch: Vec::new(),
        }
    }

    /// Number of selections.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether there is no selection.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Number of distinct paths walked per event.
    pub fn paths(&self) -> usize {
        self.n_paths
    }

    /// Number of distinct filters evaluated per event (identical `where` texts count once).
    pub fn filters(&self) -> usize {
        self.filters.len()
    }

    /// The output of every selection for the chunk `bytes` (a blob: Sereal + `=chk`), in
    /// selection order; or why the chunk is unreadable (for all of them).
    pub fn apply(
        &mut self,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<Vec<Vec<Value>>, TransformError> {
        let blob = Blob::parse(bytes)?;
        let mut outs: Vec<Vec<Value>> = vec![Vec::new(); self.parts.len()];
        if self.whole_only {
            if self.decoder.limits() != limits {
                self.decoder = Decoder::with_limits(limits.clone());
            }
            let events = blob.decode_with(&mut self.decoder)?;
            if let Some((last, rest)) = outs.split_last_mut() {
                for o in rest {
                    o.clone_from(&events);
                }
                *last = events;
            }
            return Ok(outs);
        }
        let MultiSelect {
            parts,
            filters,
            selector,
            rest,
            others,
            n_first,
            n_plain,
            n_paths,
            scratch,
            ..
        } = self;
        let doc = blob.lazy(limits, scratch)?;
        let mut items = doc.items().map_err(TransformError::Body)?;
        let mut handles: Vec<Vec<Item<'_>>> = Vec::new();
        let mut rest_handles: Vec<Vec<Item<'_>>> = Vec::new();
        let mut other_handles: Vec<Vec<Item<'_>>> = Vec::new();
        // Per event: the decoded values of each union path (decoded on first use), each
        // distinct filter's verdict (evaluated on first use) and the whole event (decoded on
        // first use).
        let mut decoded: Vec<Vec<Value>> = vec![Vec::new(); *n_paths];
        let mut done: Vec<bool> = vec![false; *n_paths];
        let mut verdicts: Vec<Verdict> = vec![Verdict::Unknown; filters.len()];
        let mut found: Vec<Vec<Value>> = Vec::new();
        let mut i = 0usize;
        while let Some(item) = selector.next_selected(&mut items, &mut handles) {
            let event = i;
            i += 1;
            let ev = |source: sereal::Error| TransformError::Event { event, source };
            let item = item.map_err(ev)?;
            let mut paths = EventPaths {
                item,
                handles: [&mut handles, &mut rest_handles, &mut other_handles],
                selectors: [rest.as_mut(), others.as_mut()],
                walked: [true, false, false],
                bounds: [0, *n_first, *n_plain],
                decoded: &mut decoded,
                done: &mut done,
                // One budget per event for all it decodes, as one selection had.
                dec: doc.item_decoder(),
                event,
            };
            paths.done.fill(false);
            verdicts.fill(Verdict::Unknown);
            let mut whole: Option<Value> = None;
            for (part, out) in parts.iter().zip(outs.iter_mut()) {
                if let Some(fi) = part.filter {
                    if verdicts[fi] == Verdict::Unknown {
                        let keep = filters[fi].eval(&mut paths, &mut found)?;
                        verdicts[fi] = if keep { Verdict::Keep } else { Verdict::Drop };
                    }
                    if verdicts[fi] == Verdict::Drop {
                        continue;
                    }
                }
                if part.select.is_empty() {
                    if whole.is_none() {
                        whole = Some(paths.dec.decode(&item).map_err(ev)?);
                    }
                    out.push(whole.clone().unwrap_or(Value::Undef));
                    continue;
                }
                let mut hash = Vec::with_capacity(part.select.len());
                for (key, idx, many) in &part.select {
                    paths.decode(*idx)?;
                    let vs = &paths.decoded[*idx];
                    let v = if *many {
                        Value::Array(vs.to_vec())
                    } else {
                        vs.first().cloned().unwrap_or(Value::Undef)
                    };
                    hash.push((key.clone(), v));
                }
                out.push(Value::Hash(hash));
            }
        }
        Ok(outs)
    }
}

impl SharedFilter {
    /// Whether the current event of `paths` passes (its paths decoded as needed).
    fn eval(
        &self,
        paths: &mut EventPaths<'_, '_>,
        found: &mut Vec<Vec<Value>>,
    ) -> Result<bool, TransformError> {
        let idxs = &self.idxs;
        if found.len() < idxs.len() {
            found.resize_with(idxs.len(), Vec::new);
        }
        for (k, &idx) in idxs.iter().enumerate() {
            paths.decode(idx)?;
            if self.distinct {
                std::mem::swap(&mut found[k], &mut paths.decoded[idx]);
            } else {
                found[k].clear();
                found[k].extend_from_slice(&paths.decoded[idx]);
            }
        }
        let keep = self.filter.matches_selected(&found[..idxs.len()]);
        if self.distinct {
            // Lent, now given back.
            for (k, &idx) in idxs.iter().enumerate() {
                std::mem::swap(&mut found[k], &mut paths.decoded[idx]);
            }
        }
        Ok(keep)
    }
}

/// The union paths of one event: handles found by the pass (group 0: the paths every event
/// needs) or by a second walk of the event on first use of a path of group 1 (the other plain
/// paths) or 2 (the others), decoded on first use. Most events need neither: only selections
/// whose filter kept the event read their outputs.
struct EventPaths<'a, 'd> {
    item: Item<'d>,
    /// The handles of each group (indexed from the group's first union index).
    handles: [&'a mut Vec<Vec<Item<'d>>>; 3],
    /// The selectors of groups 1 and 2.
    selectors: [Option<&'a mut Selector>; 2],
    /// Whether each group's handles are of this event.
    walked: [bool; 3],
    /// The first union index of each group.
    bounds: [usize; 3],
    decoded: &'a mut [Vec<Value>],
    done: &'a mut [bool],
    dec: sereal::lazy::ItemDecoder<'d>,
    event: usize,
}

impl EventPaths<'_, '_> {
    /// Decodes the values of union path `idx` of the current event unless done already.
    fn decode(&mut self, idx: usize) -> Result<(), TransformError> {
        if self.done[idx] {
            return Ok(());
        }
        let event = self.event;
        let ev = |source: sereal::Error| TransformError::Event { event, source };
        let group = self.bounds.iter().rposition(|&b| idx >= b).unwrap_or(0);
        if !self.walked[group] {
            if let Some(s) = self.selectors[group - 1].as_deref_mut() {
                s.select_handles(&self.item, self.handles[group])
                    .map_err(ev)?;
            }
            self.walked[group] = true;
        }
        let vs = &mut self.decoded[idx];
        vs.clear();
        let handles = self.handles[group].get(idx - self.bounds[group]);
        for h in handles.map(Vec::as_slice).unwrap_or_default() {
            vs.push(self.dec.decode(h).map_err(ev)?);
        }
        self.done[idx] = true;
        Ok(())
    }
}

/// Why a chunk could not be transformed: for every selection, as a chunk is all or nothing.
/// Its text is the reason a range read's warning gives.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransformError {
    /// The blob (its checksum, header or compression) is unreadable.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// The body's sequence of events is unreadable.
    #[error("blob body: {0}")]
    Body(sereal::Error),
    /// One event is unreadable.
    #[error("event {event}: {source}")]
    Event {
        /// Its position in the chunk (from 0).
        event: usize,
        /// What the codec said.
        source: sereal::Error,
    },
}

/// A substream as a range read sees it: which chunks it covers and how to compute a missing
/// result on the client. Implemented by `sluice-substreams` from its registry (the reader does
/// not know the registry's format); given in [`ReadOptions::substream`](crate::ReadOptions).
pub trait SubstreamView: Send + Sync + fmt::Debug {
    /// The substream's name (its namespace is `substreams/<name>`).
    fn name(&self) -> &str;
    /// Whether the substream applies to chunks of this dc, type and subtype.
    fn applies(&self, dc: &str, type_: &str, subtype: &str) -> bool;
    /// The result blob of the event blob `bytes` stored under `key`: byte for byte what the
    /// substream runner stores for it (so a fallback reads exactly as a stored result).
    fn compute(&self, key: &EventKey, bytes: &[u8]) -> Result<Vec<u8>, ComputeError>;
}

/// Why [`SubstreamView::compute`] has no result: the substream's stable miss label and what
/// happened, for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail} ({reason})")]
pub struct ComputeError {
    /// Stable label (`wall_time`, `exception`, `unavailable`…).
    pub reason: &'static str,
    /// For people.
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_blob::BlobBuilder;

    fn ev(status: i64, path: &str) -> Value {
        Value::Hash(vec![
            (Key::Utf8(Arc::from("status")), Value::Int(status)),
            (Key::Utf8(Arc::from("path")), Value::String(path.to_owned())),
            (
                Key::Utf8(Arc::from("tags")),
                Value::Array(vec![Value::Int(status / 100), Value::Int(status % 100)]),
            ),
        ])
    }

    #[test]
    fn several_selections_equal_each_alone() {
        let events = vec![ev(200, "/a"), ev(500, "/b"), ev(404, "/c")];
        let blob = BlobBuilder::with_profile(Default::default())
            .unwrap()
            .build(&events)
            .unwrap()
            .remove(0)
            .into_bytes();
        let sels = [
            Selection::from_texts::<&str>(None, None, None, &["status"], Some("status >= 500"))
                .unwrap(),
            Selection::from_texts(None, None, None, &["path", "status"], None).unwrap(),
            Selection::from_texts::<&str>(None, None, None, &[], Some("path == \"/c\"")).unwrap(),
            Selection::from_texts(
                None,
                None,
                None,
                &["tags[*]", "status"],
                Some("status >= 404"),
            )
            .unwrap(),
            Selection::from_texts(None, None, None, &["tags[1]"], None).unwrap(),
            // The first one's filter again: one verdict per event for both.
            Selection::from_texts::<&str>(None, None, None, &["path"], Some("status >= 500"))
                .unwrap(),
        ];
        let all = MultiSelect::new(&sels)
            .apply(&blob, &Limits::default())
            .unwrap();
        assert_eq!(all.len(), 6);
        assert_eq!(all[3].len(), 2);
        assert_eq!(all[4].len(), 3);
        for (i, sel) in sels.iter().enumerate() {
            let one = MultiSelect::new([sel])
                .apply(&blob, &Limits::default())
                .unwrap();
            assert_eq!(one[0], all[i], "selection {i}");
        }
        assert_eq!(all[0].len(), 1);
        assert_eq!(all[1].len(), 3);
        assert_eq!(all[2].len(), 1);
        assert_eq!(all[5].len(), 1);
        assert_eq!(MultiSelect::new(&sels).paths(), 4);
        assert_eq!(MultiSelect::new(&sels).filters(), 3);
    }
}
