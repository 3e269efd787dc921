//! Decoding one chunk of a range read: the whole blob, or with `select` / `where` the lazy pass
//! that picks the paths, evaluates the filter and decodes only what is kept (see "Select and
//! where" in [`crate::range`]). Records what it saw in [`ReadFacts`] for the hints.

use std::sync::Arc;

use sereal::lazy::{Selector, Step};
use sereal::{Decoder, Key, Limits, Value};
use sluice_blob::Blob;

use crate::facts::{ReadFacts, KIND_NUMBER, KIND_OTHER, KIND_STRING};
use crate::filter::Filter;
use crate::request::ReadRequest;

/// Decodes chunks for one request, reusing buffers across chunks.
pub(crate) struct ChunkDecoder {
    lazy: bool,
    /// Check each chunk's SHA-1 (false: the store checked the bytes, see
    /// [`crate::ReadOptions::verify_sha1`]).
    pub(crate) verify_sha1: bool,
    limits: Limits,
    decoder: Decoder,
    /// The select paths, then the filter's: one pass for both.
    selector: Selector,
    /// With both a select and a filter: the filter's paths alone, then the select paths alone
    /// for the events the filter keeps (most events are rejected after a short walk, and with
    /// an element index never walked further).
    split: Option<(Selector, Selector)>,
    /// Set by `decode` when the chunk's element index was bad (read by walking instead).
    pub(crate) notice: Option<String>,
    /// Number of select paths (the selector's first paths); the filter's follow.
    n_select: usize,
    /// Select path texts (output keys) and whether each has a `[*]`.
    select_keys: Vec<(Key, bool)>,
    filter: Option<Filter>,
    scratch: Vec<u8>,
    found: Vec<Vec<Value>>,
    pub(crate) facts: ReadFacts,
}

impl ChunkDecoder {
    pub(crate) fn new(req: &ReadRequest, limits: &Limits) -> ChunkDecoder {
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
    pub(crate) fn decode(&mut self, bytes: &[u8]) -> Result<Vec<Value>, String> {
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
