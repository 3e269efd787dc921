//! Emission: copy elements tag by tag into a chunk body, fixing up back-references (see the
//! offset-fixup invariant in the [module documentation](super)).

use super::is_string_tag;
use super::scan::Targets;
use crate::cursor::Input;
use crate::de::Limits;
use crate::error::{Error, ErrorCode, Result};
use crate::tag::*;
use crate::varint;

/// No emission yet (in an [`Entry`] slot).
const NONE: u32 = u32::MAX;
/// In the `copy` slot: the emission is a plain string (usable by key and class-name `COPY`).
const STRING: u32 = 1 << 31;

/// Where an old target position was last emitted in the current chunk, per role (see the module
/// documentation), as chunk body positions below 2^31. `gen` says which chunk it belongs to.
#[derive(Clone, Copy)]
struct Entry {
    gen: u32,
    copy: u32,
    ident: u32,
    class: u32,
}

impl Entry {
    const EMPTY: Entry = Entry {
        gen: 0,
        copy: NONE,
        ident: NONE,
        class: NONE,
    };
}

/// Copies elements of the input into a chunk body (`out`), one chunk at a time, remembering per
/// chunk where back-reference targets were emitted ([`Entry`]).
pub(super) struct Emitter<'a> {
    input: Input<'a>,
    targets: &'a Targets,
    entries: Vec<Entry>,
    gen: u32,
    pub(super) out: Vec<u8>,
    /// The document offset of `out[0]`.
    out_base: usize,
    pub(super) depth: usize,
    max_depth: usize,
    /// Largest chunk body we are willing to build.
    pub(super) cap: usize,
}

impl<'a> Emitter<'a> {
    /// An emitter of the elements of `input`, whose back-references name the `count` positions
    /// in `targets`; chunk bodies start at document offset `out_base`.
    pub(super) fn new(
        input: Input<'a>,
        targets: &'a Targets,
        count: usize,
        out_base: usize,
        limits: &Limits,
    ) -> Emitter<'a> {
        Emitter {
            input,
            targets,
            entries: vec![Entry::EMPTY; count],
            gen: 0,
            out: Vec::new(),
            out_base,
            depth: 0,
            max_depth: limits.max_depth,
            cap: limits.max_decompressed_bytes,
        }
    }

    /// Start a new chunk body with `prefix` reserved bytes.
    pub(super) fn reset(&mut self, prefix: usize) {
        self.out.clear();
        self.out.resize(prefix, 0);
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            self.entries.iter_mut().for_each(|e| *e = Entry::EMPTY);
            self.gen = 1;
        }
    }

    #[cold]
    pub(super) fn err(&self, code: ErrorCode, at: usize) -> Error {
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

    /// Append `tag` then the input bytes `from..to`.
    #[inline]
    fn copy(&mut self, tag: u8, from: usize, to: usize) -> Result<()> {
        let bytes = self
            .input
            .buf
            .get(from..to)
            .ok_or_else(|| self.err(ErrorCode::Eof, to))?;
        self.out.push(tag);
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    fn write_ref(&mut self, tag: u8, new_pos: usize) {
        self.out.push(tag);
        varint::write(&mut self.out, (new_pos + self.out_base) as u64);
    }

    fn enter(&mut self, at: usize) -> Result<()> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(self.err(ErrorCode::DepthLimit(self.max_depth), at));
        }
        Ok(())
    }

    fn back(&self, offset: u64, at: usize) -> Result<usize> {
        self.input.back_offset(offset, at)
    }

    /// The current chunk's entry for old position `i`, if `i` is a target.
    #[inline]
    fn entry(&self, i: usize) -> Option<&Entry> {
        let e = self.entries.get(self.targets.index(i)?)?;
        (e.gen == self.gen).then_some(e)
    }

    #[inline]
    fn entry_mut(&mut self, i: usize) -> Option<&mut Entry> {
        let gen = self.gen;
        let e = self.entries.get_mut(self.targets.index(i)?)?;
        if e.gen != gen {
            *e = Entry {
                gen,
                ..Entry::EMPTY
            };
        }
        Some(e)
    }

    fn slot(&self, i: usize, pick: impl Fn(&Entry) -> u32) -> Option<usize> {
        self.entry(i)
            .map(pick)
            .filter(|&p| p != NONE)
            .map(|p| (p & !STRING) as usize)
    }

    /// A chunk body position as stored in an [`Entry`].
    #[inline]
    fn pos32(&self, p: usize, at: usize) -> Result<u32> {
        u32::try_from(p)
            .ok()
            .filter(|&p| p < STRING)
            .ok_or_else(|| {
                self.err(
                    ErrorCode::DecompressedSizeLimit(self.cap.min(STRING as usize)),
                    at,
                )
            })
    }

    /// Emit the item at old position `pos` (PADs first, dropped); `force_track` sets the track
    /// bit on it. Returns the position after it and whether the emission is a faithful copy.
    pub(super) fn value(&mut self, pos: usize, force_track: bool) -> Result<(usize, bool)> {
        if self.out.len() > self.cap {
            return Err(self.err(ErrorCode::DecompressedSizeLimit(self.cap), pos));
        }
        let first = pos;
        let mut pos = pos;
        let mut track = force_track;
        let raw = loop {
            let b = self.at(pos)?;
            track |= b & TRACK_FLAG != 0;
            if b & !TRACK_FLAG != PAD {
                break b;
            }
            pos += 1;
        };
        let start = pos;
        pos += 1;
        let t = raw & !TRACK_FLAG;
        let tb = if track { TRACK_FLAG } else { 0 };
        let new_at = self.out.len();
        let new32 = self.pos32(new_at, start)?;
        if track {
            // Before the children: a reference back into this item (a cycle) finds it.
            for i in first..=start {
                if let Some(e) = self.entry_mut(i) {
                    e.ident = new32;
                }
            }
        }
        let mut plain = true;
        match t {
            0x00..=0x1f | UNDEF | CANONICAL_UNDEF | TRUE | FALSE | YES | NO => {
                self.out.push(t | tb)
            }
            VARINT | ZIGZAG => {
                self.varint(&mut pos)?;
                self.copy(t | tb, start + 1, pos)?;
            }
            FLOAT | DOUBLE | LONG_DOUBLE | FLOAT_128 => {
                let n = match t {
                    FLOAT => 4,
                    DOUBLE => 8,
                    _ => 16,
                };
                pos = self.input.skip(pos, n)?;
                self.copy(t | tb, start + 1, pos)?;
            }
            BINARY | STR_UTF8 | SHORT_BINARY_0..=0x7f => {
                pos = self.string_end(t, pos)?;
                self.copy(t | tb, start + 1, pos)?;
            }
            REFN | WEAKEN => {
                if t == WEAKEN && self.first_mention(pos) {
                    // Written strong: its strong counterpart may be in another chunk, and Perl
                    // frees a referent that only weak references hold.
                    plain = false;
                } else {
                    self.out.push(t | tb);
                }
                self.enter(start)?;
                let (end, p) = self.value(pos, false)?;
                self.depth -= 1;
                pos = end;
                plain &= p;
            }
            REFP | ALIAS => {
                let offset = self.varint(&mut pos)?;
                let idx = self.back(offset, start)?;
                if let Some(p) = self.slot(idx, |e| e.ident) {
                    self.write_ref(t | tb, p);
                } else {
                    // Not in this chunk: inline the target, tracked, so later references in the
                    // chunk find it. REFP is a new reference to it, ALIAS the item itself.
                    self.enter(start)?;
                    if t == REFP {
                        self.out.push(REFN | tb);
                    }
                    self.value(idx, true)?;
                    self.depth -= 1;
                    plain = false;
                }
            }
            COPY => {
                let offset = self.varint(&mut pos)?;
                let idx = self.back(offset, start)?;
                if let Some(p) = self.slot(idx, |e| e.copy) {
                    self.write_ref(COPY | tb, p);
                } else {
                    self.enter(start)?;
                    self.value(idx, track)?;
                    self.depth -= 1;
                }
                plain = false;
            }
            ARRAY | HASH | 0x40..=0x5f => {
                let n = match t {
                    ARRAY | HASH => self.varint(&mut pos)?,
                    _ => (t & 0x0f) as u64,
                };
                self.copy(t | tb, start + 1, pos)?;
                let hash = t == HASH || (0x50..=0x5f).contains(&t);
                self.enter(start)?;
                for _ in 0..n {
                    if hash {
                        pos = self.key(pos)?;
                    }
                    let (end, p) = self.value(pos, false)?;
                    pos = end;
                    plain &= p;
                }
                self.depth -= 1;
            }
            OBJECT | OBJECT_FREEZE => {
                self.out.push(t | tb);
                self.enter(start)?;
                pos = self.class(pos)?;
                let (end, p) = self.value(pos, false)?;
                self.depth -= 1;
                pos = end;
                plain &= p;
            }
            OBJECTV | OBJECTV_FREEZE => {
                let offset = self.varint(&mut pos)?;
                let idx = self.back(offset, start)?;
                if let Some(p) = self.slot(idx, |e| e.class) {
                    self.write_ref(t | tb, p);
                } else {
                    self.out
                        .push(if t == OBJECTV { OBJECT } else { OBJECT_FREEZE } | tb);
                    self.class(idx)?;
                    plain = false;
                }
                self.enter(start)?;
                let (end, p) = self.value(pos, false)?;
                self.depth -= 1;
                pos = end;
                plain &= p;
            }
            REGEXP => {
                self.out.push(t | tb);
                self.enter(start)?;
                let (end, p1) = self.value(pos, false)?;
                let (end, p2) = self.value(end, false)?;
                self.depth -= 1;
                pos = end;
                plain &= p1 && p2;
            }
            _ => return Err(self.err(ErrorCode::BadTag(raw), start)),
        }
        if plain {
            let copy = if is_string_tag(t) {
                new32 | STRING
            } else {
                new32
            };
            for i in first..=start {
                if let Some(e) = self.entry_mut(i) {
                    e.copy = copy;
                }
            }
        }
        Ok((pos, plain))
    }

    /// Whether the reference at `pos` (after a `WEAKEN`) is the first mention of a tracked
    /// referent in this chunk: `REFN` to a tracked item, or `REFP` to one not yet in the chunk.
    fn first_mention(&self, mut pos: usize) -> bool {
        // The next tag after any PADs, and whether it (or a PAD before it) is tracked.
        let next = |pos: &mut usize| -> Option<(u8, bool)> {
            let mut tracked = false;
            loop {
                let b = *self.input.buf.get(*pos)?;
                *pos += 1;
                tracked |= b & TRACK_FLAG != 0;
                if b & !TRACK_FLAG != PAD {
                    return Some((b & !TRACK_FLAG, tracked));
                }
            }
        };
        match next(&mut pos) {
            Some((REFN, _)) => next(&mut pos).is_some_and(|(_, tracked)| tracked),
            Some((REFP, _)) => {
                let at = pos - 1;
                let Ok(offset) = self.varint(&mut pos) else {
                    return false;
                };
                match self.back(offset, at) {
                    Ok(idx) => self.slot(idx, |e| e.ident).is_none(),
                    Err(_) => false,
                }
            }
            _ => false,
        }
    }

    /// End of a string whose tag `t` has been read, its length (if any) starting at `pos`.
    fn string_end(&self, t: u8, mut pos: usize) -> Result<usize> {
        let len = if t == BINARY || t == STR_UTF8 {
            self.varint(&mut pos)?
        } else {
            (t & 0x1f) as u64
        };
        self.input.skip(pos, len)
    }

    /// Emit the string at `pos` with tag byte `tag_out`, recording it as a plain string.
    fn string_at(&mut self, pos: usize, tag_out: u8) -> Result<(usize, u32)> {
        let t = self.at(pos)? & !TRACK_FLAG;
        if !is_string_tag(t) {
            return Err(self.err(ErrorCode::BadKeyTag(t), pos));
        }
        let end = self.string_end(t, pos + 1)?;
        let new_at = self.out.len();
        let new32 = self.pos32(new_at, pos)?;
        self.copy(tag_out, pos + 1, end)?;
        if let Some(e) = self.entry_mut(pos) {
            e.copy = new32 | STRING;
        }
        Ok((end, new32))
    }

    /// Emit a hash key at `pos`: a string, or a `COPY` of one (re-pointed or inlined).
    fn key(&mut self, pos: usize) -> Result<usize> {
        let b = self.at(pos)?;
        let t = b & !TRACK_FLAG;
        if t != COPY {
            return Ok(self.string_at(pos, b)?.0);
        }
        let mut end = pos + 1;
        let offset = self.varint(&mut end)?;
        let idx = self.back(offset, pos)?;
        match self.entry(idx) {
            Some(e) if e.copy != NONE && e.copy & STRING != 0 => {
                let p = (e.copy & !STRING) as usize;
                self.write_ref(COPY, p);
            }
            _ => {
                let tt = self.at(idx)? & !TRACK_FLAG;
                self.string_at(idx, tt)?;
            }
        }
        Ok(end)
    }

    /// Emit a class name at `pos` (after an `OBJECT` tag), recording where `OBJECTV` can find it.
    fn class(&mut self, pos: usize) -> Result<usize> {
        let b = self.at(pos)?;
        let t = b & !TRACK_FLAG;
        if t == COPY {
            return self.key(pos);
        }
        if !is_string_tag(t) {
            return Err(self.err(ErrorCode::BadClassName(t), pos));
        }
        let (end, new_at) = self.string_at(pos, b)?;
        if let Some(e) = self.entry_mut(pos) {
            e.class = new_at;
        }
        Ok(end)
    }
}
