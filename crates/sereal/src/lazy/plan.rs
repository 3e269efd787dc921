//! The fast walk of plain key paths (`a.b.c`): the paths as a tree of keys, and hash keys
//! identified once per document through a cache and a per-position memo, so that most pairs of
//! an event are skipped without comparing their keys.

use super::doc::{Core, LazyDoc};
use super::item::Item;
use super::path::{Path, Step};
use crate::error::{ErrorCode, Result};
use crate::tag::*;

/// Selection of plain key paths as a tree of keys: node 0 is the item itself, each node's
/// children are the keys looked up in the hash it resolves to, and a node ends the paths listed
/// in its `ends`. Same semantics as [`Walker`] with [`ItemEmit`] (first matching key only,
/// wrappers looked through), specialised: no cursor stack, and hash keys are identified through
/// a per-document cache instead of compared byte by byte against every path.
#[derive(Debug, Clone)]
pub(super) struct KeyPlan {
    nodes: Vec<PlanNode>,
    /// Key cache: [`KEY_CACHE_SLOTS`] slots per node, `(body index of a COPY'd key + 1, child)`;
    /// valid for the document `cache_doc`. `NO_CHILD` caches a key that is none of the node's.
    cache: Vec<(usize, u32)>,
    /// Per node and pair number (the first [`MEMO_PAIRS`]), the last COPY'd key seen there.
    /// Events of one stream list their keys in the same order, so this usually names the key
    /// before it is read: the key's bytes are compared as one word, and where its value starts
    /// is known without waiting for the varint to be decoded.
    memo: Vec<MemoSlot>,
    cache_doc: u64,
    visits_left: usize,
}

#[derive(Debug, Clone, Default)]
struct PlanNode {
    /// Paths (indexes into the selector's paths) that end at this node.
    ends: Vec<u32>,
    /// Keys looked up under this node, and the node each leads to.
    children: Vec<(Box<[u8]>, u32)>,
}

/// Slots of the key cache per plan node (a power of two): an event has a few dozen distinct
/// keys, and a collision only costs a re-comparison.
const KEY_CACHE_SLOTS: usize = 64;
/// Most keys under one node for the plan (a bit set of found keys per hash).
const MAX_PLAN_CHILDREN: usize = 64;
const NO_CHILD: u32 = u32::MAX;
/// A key remembered by [`KeyPlan::memo`]: its encoding (the COPY tag and offset varint, at
/// most 4 bytes, little-endian in `raw`, `mask` covering its `len` bytes), the body index the
/// offset names, and which child it is.
#[derive(Debug, Clone, Copy)]
struct MemoSlot {
    raw: u32,
    mask: u32,
    len: u8,
    idx: usize,
    child: u32,
}

/// A slot that matches nothing (`raw & 0` is never 1).
const EMPTY_MEMO: MemoSlot = MemoSlot {
    raw: 1,
    mask: 0,
    len: 0,
    idx: 0,
    child: NO_CHILD,
};

/// Pairs per hash with a [`KeyPlan::memo`] slot.
const MEMO_PAIRS: usize = 32;

impl KeyPlan {
    /// The plan of `paths`, or `None` when one has an index or wildcard step (or a node would
    /// have too many keys): those take the general walk.
    pub(super) fn build(paths: &[Path]) -> Option<KeyPlan> {
        if paths.is_empty() || paths.len() > u32::MAX as usize / 2 {
            return None;
        }
        let mut nodes = vec![PlanNode::default()];
        for (i, path) in paths.iter().enumerate() {
            let mut node = 0usize;
            for step in path.steps() {
                let Step::Key(k) = step else { return None };
                let found = nodes[node]
                    .children
                    .iter()
                    .find(|(key, _)| **key == *k.as_bytes())
                    .map(|&(_, n)| n);
                node = match found {
                    Some(n) => n as usize,
                    None => {
                        if nodes[node].children.len() >= MAX_PLAN_CHILDREN {
                            return None;
                        }
                        let n = u32::try_from(nodes.len()).ok()?;
                        nodes[node].children.push((k.as_bytes().into(), n));
                        nodes.push(PlanNode::default());
                        n as usize
                    }
                };
            }
            nodes[node].ends.push(i as u32);
        }
        let cache = vec![(0, NO_CHILD); nodes.len() * KEY_CACHE_SLOTS];
        let memo = vec![EMPTY_MEMO; nodes.len() * MEMO_PAIRS];
        Some(KeyPlan {
            nodes,
            cache,
            memo,
            cache_doc: 0,
            visits_left: 0,
        })
    }

    /// Select from the item at `start` into `out` (sized and cleared); returns the item's end
    /// (`known_end` when given: then the walk stops as soon as nothing more can match).
    pub(super) fn select<'d>(
        &mut self,
        doc: &'d LazyDoc<'d>,
        start: usize,
        known_end: Option<usize>,
        out: &mut [Vec<Item<'d>>],
    ) -> Result<usize> {
        if self.cache_doc != doc.id {
            self.cache.fill((0, NO_CHILD));
            self.memo.fill(EMPTY_MEMO);
            self.cache_doc = doc.id;
        }
        self.visits_left = doc.limits.max_values;
        let need_end = known_end.is_none();
        match (
            self.node(doc, 0, start, need_end, 0, false, out)?,
            known_end,
        ) {
            (_, Some(end)) => Ok(end),
            (Some(end), None) => Ok(end),
            (None, None) => doc.skip_n(start, 1),
        }
    }

    /// [`Walker::node`] for plan node `node` at `pos`.
    #[allow(clippy::too_many_arguments)]
    fn node<'d>(
        &mut self,
        d: &'d LazyDoc<'d>,
        node: u32,
        pos: usize,
        need_end: bool,
        mut depth: usize,
        in_copy: bool,
        out: &mut [Vec<Item<'d>>],
    ) -> Result<Option<usize>> {
        if self.visits_left == 0 {
            return Err(d
                .body
                .err(ErrorCode::TotalValuesLimit(d.limits.max_values), pos));
        }
        self.visits_left -= 1;
        let n = &self.nodes[node as usize];
        let mut known_end = None;
        if !n.ends.is_empty() {
            let end = d.skip_one(pos)?;
            for &p in &n.ends {
                out[p as usize].push(Item {
                    doc: d,
                    start: pos,
                    end,
                    in_copy,
                });
            }
            known_end = Some(end);
        }
        if n.children.is_empty() {
            return Ok(match known_end {
                Some(e) => Some(e),
                None if need_end => Some(d.skip_n(pos, 1)?),
                None => None,
            });
        }
        let mut jumped = None;
        let mut in_copy = in_copy;
        let core = d.resolve(pos, &mut depth, &mut jumped, &mut in_copy)?;
        let known_end = known_end.or(jumped);
        let need_end = need_end && known_end.is_none();
        let end = match core {
            Core::Hash(count, first) => {
                self.hash(d, node, count, first, need_end, depth, pos, in_copy, out)?
            }
            Core::Array(..) => {
                // A key does not apply to an array; the depth check is the general walk's.
                d.check_depth(depth + 1, pos)?;
                None
            }
            Core::Other => None,
        };
        Ok(match known_end.or(end) {
            Some(e) => Some(e),
            None if need_end => Some(d.skip_n(pos, 1)?),
            None => None,
        })
    }

    /// [`Walker::hash`] for the children of `node`.
    #[allow(clippy::too_many_arguments)]
    fn hash<'d>(
        &mut self,
        d: &'d LazyDoc<'d>,
        node: u32,
        count: usize,
        first: usize,
        need_end: bool,
        depth: usize,
        at: usize,
        in_copy: bool,
        out: &mut [Vec<Item<'d>>],
    ) -> Result<Option<usize>> {
        let depth = depth + 1;
        d.check_depth(depth, at)?;
        let mut keys_left = self.nodes[node as usize].children.len();
        let mut found = 0u64;
        let mut e = first;
        let mut pair = 0;
        while pair < count {
            // Most pairs of an event are keys no path wants, named by the memo: skip them in a
            // tight loop (half the instructions of the general step below, which does the same
            // for them). Anything else — a wanted key, a memo miss, the last pair, an odd value —
            // leaves it for the general step, which also reports errors.
            let memo = node as usize * MEMO_PAIRS;
            while pair + 1 < count && pair < MEMO_PAIRS {
                let Some(&m) = self.memo.get(memo + pair) else {
                    break;
                };
                let Some(w) = d.body.buf.get(e..e + 4) else {
                    break;
                };
                let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                if m.child != NO_CHILD || w & m.mask != m.raw || m.idx >= e {
                    break;
                }
                match d.skip_one(e + m.len as usize) {
                    Ok(end) => e = end,
                    Err(_) => break,
                }
                pair += 1;
            }
            let (child, value_at) = self.key(d, node, pair, e)?;
            let hit = child != NO_CHILD && found & (1 << child) == 0;
            if hit {
                found |= 1 << child;
                keys_left -= 1;
            }
            let more_wanted = keys_left > 0 && pair + 1 < count;
            if !hit {
                if !more_wanted && !need_end {
                    return Ok(None);
                }
                e = d.skip_one(value_at)?;
            } else {
                let next = self.nodes[node as usize].children[child as usize].1;
                let target = &self.nodes[next as usize];
                if target.children.is_empty() {
                    // Paths end here and go no deeper (most do): `node`'s work, inline.
                    if self.visits_left == 0 {
                        return Err(d
                            .body
                            .err(ErrorCode::TotalValuesLimit(d.limits.max_values), value_at));
                    }
                    self.visits_left -= 1;
                    let end = d.skip_one(value_at)?;
                    for &p in &target.ends {
                        out[p as usize].push(Item {
                            doc: d,
                            start: value_at,
                            end,
                            in_copy,
                        });
                    }
                    e = end;
                } else {
                    let child_need = need_end || more_wanted;
                    match self.node(d, next, value_at, child_need, depth, in_copy, out)? {
                        Some(end) if child_need => e = end,
                        _ => return Ok(None),
                    }
                }
            }
            if !more_wanted {
                if !need_end {
                    return Ok(None);
                }
                // Nothing more to find here: skip the remaining pairs in one go.
                let rest = (count - pair - 1)
                    .checked_mul(2)
                    .ok_or_else(|| d.body.eof())?;
                return Ok(Some(d.skip_n(e, rest)?));
            }
            pair += 1;
        }
        Ok(Some(e))
    }

    /// The hash key at `pos` (validated as [`LazyDoc::key_at`] does): which child of `node` it
    /// names (`NO_CHILD` for none), and the position of its value.
    #[inline]
    fn key(&mut self, d: &LazyDoc<'_>, node: u32, pair: usize, pos: usize) -> Result<(u32, usize)> {
        let body = d.body.buf;
        let memo = node as usize * MEMO_PAIRS + pair;
        let word = body
            .get(pos..pos + 4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        if pair < MEMO_PAIRS {
            if let (Some(m), Some(w)) = (self.memo.get(memo), word) {
                // The same bytes name the same offset; it must still point backwards from here.
                if w & m.mask == m.raw && m.idx < pos {
                    return Ok((m.child, pos + m.len as usize));
                }
            }
        }
        let tag = d.body.byte_at(pos)? & !TRACK_FLAG;
        if tag == COPY {
            // The offset: one or two varint bytes inline (keys near the start of the body).
            let (idx, p) = match (body.get(pos + 1), body.get(pos + 2)) {
                (Some(&b1), _) if b1 < 0x80 => (d.body.back_offset(b1 as u64, pos)?, pos + 2),
                (Some(&b1), Some(&b2)) if b2 < 0x80 => (
                    d.body
                        .back_offset((b1 & 0x7f) as u64 | (b2 as u64) << 7, pos)?,
                    pos + 3,
                ),
                _ => {
                    let mut p = pos + 1;
                    let offset = d.body.varint_at(&mut p)?;
                    (d.body.back_offset(offset, pos)?, p)
                }
            };
            // Encoders write every repeated key as a COPY of its first occurrence, so almost
            // every key is identified by the memo or this cache; the target was validated when
            // cached.
            let hash =
                ((idx as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % KEY_CACHE_SLOTS;
            let slot = node as usize * KEY_CACHE_SLOTS + hash;
            let (cached_idx, child) = self.cache[slot];
            let child = if cached_idx == idx + 1 {
                child
            } else {
                let child = match d.string_at(idx)? {
                    Some((bytes, _, _)) => self.child(node, bytes),
                    None => {
                        return Err(d
                            .body
                            .err(ErrorCode::BadKeyTag(d.body.buf[idx] & !TRACK_FLAG), idx))
                    }
                };
                self.cache[slot] = (idx + 1, child);
                child
            };
            let len = p - pos;
            if let (true, Some(w), Some(slot)) =
                (pair < MEMO_PAIRS && len <= 4, word, self.memo.get_mut(memo))
            {
                let mask = u32::MAX >> (32 - 8 * len as u32);
                *slot = MemoSlot {
                    raw: w & mask,
                    mask,
                    len: len as u8,
                    idx,
                    child,
                };
            }
            return Ok((child, p));
        }
        match d.string_at(pos)? {
            Some((bytes, _, end)) => Ok((self.child(node, bytes), end)),
            None => Err(d.body.err(ErrorCode::BadKeyTag(tag), pos)),
        }
    }

    #[inline]
    fn child(&self, node: u32, key: &[u8]) -> u32 {
        self.nodes[node as usize]
            .children
            .iter()
            .position(|(k, _)| **k == *key)
            .map_or(NO_CHILD, |i| i as u32)
    }
}
