//! The pre-scan: validate the whole input, find the elements of its array, and mark the
//! positions that back-references name (the only ones the emitter tracks).

use super::is_string_tag;
use crate::cursor::Input;
use crate::de::Limits;
use crate::error::{Error, ErrorCode, Result};
use crate::tag::*;

/// A set of body positions.
pub(super) struct BitSet(Vec<u64>);

impl BitSet {
    fn new(bits: usize) -> BitSet {
        BitSet(vec![0; bits / 64 + 1])
    }

    #[inline]
    fn set(&mut self, i: usize) {
        if let Some(w) = self.0.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }

    #[inline]
    fn get(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

/// Positions named by a back-reference, each with a dense index (its rank) for the slot table.
/// Each 64-position word is stored next to the number of targets before it: one cache line.
pub(super) struct Targets {
    words: Vec<(u64, usize)>,
}

impl Targets {
    fn new(set: BitSet) -> (Targets, usize) {
        let mut words = Vec::with_capacity(set.0.len());
        let mut total = 0usize;
        for &w in &set.0 {
            words.push((w, total));
            total += w.count_ones() as usize;
        }
        (Targets { words }, total)
    }

    #[inline]
    pub(super) fn index(&self, i: usize) -> Option<usize> {
        let &(w, rank) = self.words.get(i / 64)?;
        let m = 1u64 << (i % 64);
        if w & m == 0 {
            return None;
        }
        Some(rank + (w & (m - 1)).count_ones() as usize)
    }
}

/// The pre-scan's state: budgets, and what it has found so far.
pub(super) struct Scanner<'a> {
    input: Input<'a>,
    limits: &'a Limits,
    depth: usize,
    values_left: usize,
    /// First byte of the first element: nothing before it may be referred to.
    floor: usize,
    targets: BitSet,
    tracked: BitSet,
    /// Value-`COPY` targets already checked.
    copy_ok: BitSet,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(input: Input<'a>, limits: &'a Limits) -> Self {
        let len = input.len();
        Scanner {
            input,
            limits,
            depth: 0,
            values_left: limits.max_values,
            floor: 0,
            targets: BitSet::new(len),
            tracked: BitSet::new(len),
            copy_ok: BitSet::new(len),
        }
    }

    pub(super) fn into_targets(self) -> (Targets, usize) {
        Targets::new(self.targets)
    }

    #[cold]
    fn err(&self, code: ErrorCode, at: usize) -> Error {
        self.input.err(code, at)
    }

    #[inline]
    fn at(&self, pos: usize) -> Result<u8> {
        self.input.byte_at(pos)
    }

    #[inline]
    fn varint(&self, pos: &mut usize) -> Result<u64> {
        self.input.varint_at(pos)
    }

    fn count(&self, pos: &mut usize, at: usize) -> Result<usize> {
        self.input.count_at(pos, at, self.limits.max_elements)
    }

    fn enter(&mut self, at: usize) -> Result<()> {
        self.depth += 1;
        if self.depth > self.limits.max_depth {
            return Err(self.err(ErrorCode::DepthLimit(self.limits.max_depth), at));
        }
        Ok(())
    }

    /// A back-reference at `at`: its target must lie strictly before it, inside the elements.
    fn back(&mut self, offset: u64, at: usize) -> Result<usize> {
        let idx = self.input.back_offset(offset, at)?;
        if idx < self.floor {
            return Err(self.err(ErrorCode::BadOffset(offset), at));
        }
        self.targets.set(idx);
        Ok(idx)
    }

    /// Body: skip PADs, expect an array, walk its elements; returns their byte ranges.
    pub(super) fn run(&mut self) -> Result<Vec<(usize, usize)>> {
        let mut pos = self.skip_pads(0);
        let t = self.at(pos)? & !TRACK_FLAG;
        let n = match t {
            REFN | ARRAY => {
                if t == REFN {
                    self.enter(pos)?;
                    pos = self.skip_pads(pos + 1);
                    if self.at(pos)? & !TRACK_FLAG != ARRAY {
                        return Err(self.err(ErrorCode::NotAnArray, pos));
                    }
                }
                let at = pos;
                self.enter(at)?;
                pos += 1;
                self.count(&mut pos, at)?
            }
            0x40..=0x4f => {
                self.enter(pos)?;
                pos += 1;
                (t & 0x0f) as usize
            }
            _ => return Err(self.err(ErrorCode::NotAnArray, pos)),
        };
        self.floor = pos;
        let mut elements = Vec::with_capacity(n.min(self.input.len().saturating_sub(pos)));
        for _ in 0..n {
            let start = pos;
            pos = self.value(pos, false)?;
            elements.push((start, pos));
        }
        pos = self.skip_pads(pos);
        if pos != self.input.len() {
            return Err(self.err(ErrorCode::TrailingBytes, pos));
        }
        Ok(elements)
    }

    fn skip_pads(&self, mut pos: usize) -> usize {
        while self.input.buf.get(pos) == Some(&PAD) {
            pos += 1;
        }
        pos
    }

    /// Check one item at `pos`, returning the position after it. `in_copy`: the item is being
    /// checked as the target of a value `COPY`, where a further value `COPY` is forbidden.
    fn value(&mut self, mut pos: usize, in_copy: bool) -> Result<usize> {
        if self.values_left == 0 {
            return Err(self.err(ErrorCode::TotalValuesLimit(self.limits.max_values), pos));
        }
        self.values_left -= 1;
        let raw = loop {
            let b = self.at(pos)?;
            if b & TRACK_FLAG != 0 {
                self.tracked.set(pos);
            }
            if b & !TRACK_FLAG != PAD {
                break b;
            }
            pos += 1;
        };
        let start = pos;
        pos += 1;
        let t = raw & !TRACK_FLAG;
        match t {
            0x00..=0x1f | UNDEF | CANONICAL_UNDEF | TRUE | FALSE | YES | NO => {}
            VARINT | ZIGZAG => {
                self.varint(&mut pos)?;
            }
            FLOAT => pos = self.input.skip(pos, 4)?,
            DOUBLE => pos = self.input.skip(pos, 8)?,
            LONG_DOUBLE | FLOAT_128 => pos = self.input.skip(pos, 16)?,
            BINARY | STR_UTF8 | SHORT_BINARY_0..=0x7f => pos = self.string_rest(t, pos, start)?,
            REFN | WEAKEN => {
                self.enter(start)?;
                pos = self.value(pos, in_copy)?;
                self.depth -= 1;
            }
            REFP | ALIAS => {
                let offset = self.varint(&mut pos)?;
                let idx = self.back(offset, start)?;
                if !self.tracked.get(idx) {
                    return Err(self.err(ErrorCode::BadOffset(offset), start));
                }
            }
            COPY => {
                if in_copy {
                    return Err(self.err(ErrorCode::CopyOfCopy, start));
                }
                let offset = self.varint(&mut pos)?;
                let idx = self.back(offset, start)?;
                if !self.copy_ok.get(idx) {
                    self.enter(start)?;
                    self.value(idx, true)?;
                    self.depth -= 1;
                    self.copy_ok.set(idx);
                }
            }
            ARRAY | HASH | 0x40..=0x5f => {
                let n = match t {
                    ARRAY | HASH => self.count(&mut pos, start)?,
                    _ => (t & 0x0f) as usize,
                };
                let hash = t == HASH || (0x50..=0x5f).contains(&t);
                self.enter(start)?;
                for _ in 0..n {
                    if hash {
                        pos = self.key(pos, false)?;
                    }
                    pos = self.value(pos, in_copy)?;
                }
                self.depth -= 1;
            }
            OBJECT | OBJECT_FREEZE => {
                self.enter(start)?;
                pos = self.key(pos, true)?;
                pos = self.value(pos, in_copy)?;
                self.depth -= 1;
            }
            OBJECTV | OBJECTV_FREEZE => {
                let offset = self.varint(&mut pos)?;
                let idx = self.back(offset, start)?;
                self.key(idx, true)?;
                self.enter(start)?;
                pos = self.value(pos, in_copy)?;
                self.depth -= 1;
            }
            REGEXP => {
                self.enter(start)?;
                pos = self.value(pos, in_copy)?;
                pos = self.value(pos, in_copy)?;
                self.depth -= 1;
            }
            MANY => {
                return Err(self.err(
                    ErrorCode::UnsupportedTag("MANY (never implemented by any encoder)"),
                    start,
                ))
            }
            _ => return Err(self.err(ErrorCode::BadTag(raw), start)),
        }
        Ok(pos)
    }

    /// The length and bytes of a string whose tag `t` (at `start`) has been read.
    fn string_rest(&self, t: u8, mut pos: usize, start: usize) -> Result<usize> {
        let len = if t == BINARY || t == STR_UTF8 {
            let max = self.limits.max_string_bytes;
            self.input.string_len_at(&mut pos, start, max)? as u64
        } else {
            (t & 0x1f) as u64
        };
        self.input.skip(pos, len)
    }

    /// A hash key (or, with `class`, a class name): a string, or a `COPY` of one.
    fn key(&mut self, pos: usize, class: bool) -> Result<usize> {
        let bad = |t| {
            if class {
                ErrorCode::BadClassName(t)
            } else {
                ErrorCode::BadKeyTag(t)
            }
        };
        let t = self.at(pos)? & !TRACK_FLAG;
        if is_string_tag(t) {
            return self.string_rest(t, pos + 1, pos);
        }
        if t != COPY {
            return Err(self.err(bad(t), pos));
        }
        let mut end = pos + 1;
        let offset = self.varint(&mut end)?;
        let idx = self.back(offset, pos)?;
        let tt = self.at(idx)? & !TRACK_FLAG;
        if !is_string_tag(tt) {
            return Err(self.err(bad(tt), idx));
        }
        self.string_rest(tt, idx + 1, idx)?;
        Ok(end)
    }
}
