//! Splitter: cut a document whose body is an array into several complete, standalone documents
//! ("chunks") of at most `max_bytes` bytes each (whole document: header, framing, compressed
//! body), each holding a contiguous run of the elements, in order. Elements are never decoded
//! into [`Value`](crate::Value)s: their bytes are copied tag by tag.
//!
//! # The offset-fixup invariant
//!
//! Sereal items refer back to earlier items by absolute body offset: `COPY` (a de-duplicated
//! string or hash key, usually in an *earlier element*), `REFP`/`ALIAS` (a tracked item) and
//! `OBJECTV` (a class name). Moving an element into a new chunk changes every offset, and the
//! target may not be in the chunk at all. The splitter keeps this invariant for every chunk:
//!
//! > every back-reference written into a chunk points to an item emitted *earlier in the same
//! > chunk* that decodes exactly as the original target did; for `REFP`/`ALIAS` that item
//! > carries the track bit and stands for the same shared item throughout the chunk.
//!
//! It is kept with a per-chunk table from *old* body position to *new* position, filled only for
//! positions that some back-reference in the input names (found by a validating pre-scan), with
//! one slot per role:
//! - `copy`: the latest emission of the item that is a faithful copy of its bytes (no reference
//!   inside had to be inlined, no value `COPY` inside); a value `COPY` may point there. Hash keys
//!   and class names need a plain string there.
//! - `ident`: the latest emission of the item with the track bit; `REFP`/`ALIAS` point there.
//!   It is recorded *before* the item's children are walked, so cycles survive.
//! - `class`: the latest class-name string of an `OBJECT`; `OBJECTV` points there.
//!
//! When an element is copied, a back-reference whose target has the needed slot is rewritten to
//! the target's new offset. Otherwise the target is *inlined* in place of the reference, walked
//! with the same rules (so its own references are fixed up recursively) and recorded, so later
//! references in the chunk point at the inlined copy:
//! - `COPY x` becomes the item at `x` (the track bit of the `COPY` tag carried over);
//! - a key/class `COPY x` becomes the string at `x`, still a key (track bit dropped);
//! - `REFP x` becomes `REFN` followed by the item at `x` with the track bit set;
//! - `ALIAS x` becomes the item at `x` with the track bit set;
//! - `OBJECTV x` becomes `OBJECT` (or `OBJECT_FREEZE`) with the class string at `x`.
//!
//! The track bits of copied items are kept as they were, so a chunk decodes to exactly the
//! values (shared items included) that its elements had in the original document. Two more
//! rewrites keep Perl's view of the data intact:
//! - a `WEAKEN` whose referent is first seen in the chunk right there (inlined, or its first
//!   occurrence) is dropped: the strong reference may have stayed in another chunk, and Perl
//!   frees a referent that only weak references hold;
//! - `PAD` bytes are dropped (their track bit moves to the item they precede).
//!
//! A chunk's body is the reference encoder's array form: `ARRAYREF_n` below 16 elements, else
//! `REFN ARRAY <count>`, whatever form the input used. Its header carries the input's user
//! header, if any ([`SplitOptions::keep_user_header`]) — except an [element index](crate::index),
//! which describes the input's body: then each chunk carries a fresh index of its own elements
//! (protocol 2+), whatever `keep_user_header` says.
//!
//! # Fitting
//!
//! Elements are emitted into a growing chunk body once; the body after each element is known, so
//! any prefix of the run can be tried without re-emitting. A candidate is sized with a running
//! compression ratio (seeded from the input document), compressed and measured exactly; nothing
//! is returned without its exact size having been checked. The first chunk is searched alone
//! (interpolating from the measured ratio, then halving), which calibrates the ratio; the rest
//! go in batches of [`BATCH`] candidates sized from the running ratio and compressed together,
//! on several threads if allowed. Every candidate that fits is kept; the first that does not is
//! searched alone and the rest of its batch discarded. So each chunk usually costs one
//! compression, and the chunks are the same whatever the number of threads.
//!
//! # Safety
//!
//! The input is fully validated by a pre-scan before anything is emitted (tags, lengths, key and
//! class-name types, back-references pointing strictly backwards at suitable items, no `COPY` of
//! a `COPY`) under the caller's [`Limits`]; recursion is bounded by `Limits::max_depth` and the
//! work of inlining by `Limits::max_decompressed_bytes`. Nothing in here panics on input.

use crate::compress::{self, Compression};
use crate::de::{open, Limits};
use crate::error::{Error, ErrorCode, Result};
use crate::header::{self, Encoding};
use crate::index::{ElementIndex, Parsed};
use crate::tag::*;
use crate::varint;

/// How the chunks are written. `Default`: same protocol and compression type as the input (at
/// the reference's default levels), the reference's compression threshold, user header kept,
/// oversized elements refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitOptions {
    /// Protocol version of the chunks, 1 to 5; `None` keeps the input's. Only the header and the
    /// offset base change: tags are copied as they are, so asking for an older protocol than the
    /// body's tags need (e.g. `YES`/`NO` below 5) is the caller's responsibility.
    pub protocol: Option<u8>,
    /// Compression of the chunks; `None` uses the input's type (Snappy, zlib level 6, zstd
    /// level 3, or none). zlib and zstd need protocol 3 or later.
    pub compression: Option<Compression>,
    /// Chunk bodies smaller than this many bytes are not compressed (reference default: 1024).
    pub compress_threshold: usize,
    /// Copy the input's user header (protocol 2+) into every chunk; it counts towards the size.
    pub keep_user_header: bool,
    /// When a single element cannot fit in `max_bytes` even alone, emit it as a chunk of its own
    /// that is larger than `max_bytes`, instead of failing with a "chunk too small" error.
    pub allow_oversized: bool,
    /// Threads used to compress candidate chunks: 0 for one per available CPU (at most
    /// [`BATCH`]), 1 to stay on the calling thread. The chunks are the same for any value.
    pub threads: usize,
}

impl Default for SplitOptions {
    fn default() -> Self {
        SplitOptions {
            protocol: None,
            compression: None,
            compress_threshold: 1024,
            keep_user_header: true,
            allow_oversized: false,
            threads: 0,
        }
    }
}

/// Split `doc`, whose body must be an array (`ARRAY`, `REFN ARRAY`, `ARRAYREF_n`, tracked or
/// not), into standalone documents of at most `max_bytes` bytes each, holding consecutive runs of
/// its elements in order; each decodes on its own to exactly its elements.
///
/// A document that already fits is validated and returned unchanged as the only chunk (whatever
/// `opts` say). Errors: anything invalid in the input (with its offset), a body that is not an
/// array (`NotAnArray`), a reference to the top-level array itself, a [`Limits`] overrun, and an
/// element that does not fit in `max_bytes` even alone (a [`Category::Limit`] error naming the
/// element index, unless [`SplitOptions::allow_oversized`]).
///
/// [`Category::Limit`]: crate::Category::Limit
pub fn split(
    doc: &[u8],
    max_bytes: usize,
    opts: &SplitOptions,
    limits: &Limits,
) -> Result<Vec<Vec<u8>>> {
    let mut scratch = Vec::new();
    let body = open(doc, limits, &mut scratch)?;
    if let Some(end) = body.compressed_end {
        if end != doc.len() {
            return Err(Error::new(ErrorCode::TrailingBytes, end));
        }
    }
    let hdr = body.header.clone();
    let bytes = body.bytes;
    let err_base = body.error_base;
    let in_base = body.offset_base;

    let mut scanner = Scanner::new(bytes, in_base, err_base, limits);
    let elements = scanner.run()?;

    if doc.len() <= max_bytes {
        return Ok(vec![doc.to_vec()]);
    }
    if elements.is_empty() {
        return Err(Error::new(
            ErrorCode::ChunkTooSmall {
                element: 0,
                needed: doc.len(),
                limit: max_bytes,
            },
            0,
        ));
    }

    // Output format.
    let protocol = opts.protocol.unwrap_or(hdr.version);
    if protocol == 0 || protocol > header::MAX_PROTOCOL {
        return Err(Error::new(ErrorCode::BadVersion(protocol), 0));
    }
    let compression = opts.compression.unwrap_or(match hdr.encoding {
        Encoding::Raw => Compression::None,
        Encoding::Snappy | Encoding::SnappyLegacy => Compression::Snappy,
        Encoding::Zlib => Compression::Zlib { level: 6 },
        Encoding::Zstd => Compression::Zstd { level: 3 },
    });
    if matches!(
        compression,
        Compression::Zlib { .. } | Compression::Zstd { .. }
    ) && protocol < 3
    {
        return Err(Error::new(
            ErrorCode::BadEncodingType(compression.encoding().type_nibble()),
            0,
        ));
    }
    let mut head = Vec::new();
    head.extend_from_slice(if protocol >= 3 {
        header::MAGIC_V3
    } else {
        header::MAGIC_V1
    });
    head.push(protocol);
    // An element index describes the input's body, not a chunk's: each chunk gets its own.
    let input_index = hdr
        .user_header
        .as_ref()
        .and_then(|r| doc.get(r.clone()))
        .filter(|uh| !matches!(ElementIndex::parse(uh), Parsed::NotAnIndex));
    let index_per_byte = match input_index {
        Some(uh) if protocol >= 2 => Some(uh.len() as f64 / bytes.len().max(1) as f64),
        _ => None,
    };
    match (&hdr.user_header, opts.keep_user_header && protocol >= 2) {
        _ if input_index.is_some() => head.push(0),
        (Some(range), true) => {
            // The whole suffix: the bitfield byte, then the user meta data body.
            let suffix = doc
                .get(range.start.saturating_sub(1)..range.end)
                .unwrap_or(&[]);
            varint::write(&mut head, suffix.len() as u64);
            head.extend_from_slice(suffix);
        }
        _ => head.push(0),
    }
    let out_base = if protocol == 1 { head.len() } else { 1 };

    // Seed the compression ratio from the input when it used the same kind of compression.
    let mut ratio = 0.35;
    if compression != Compression::None
        && compression.encoding() == hdr.encoding
        && !bytes.is_empty()
    {
        let data = doc.len().saturating_sub(hdr.body_offset) as f64;
        ratio = (data / bytes.len() as f64).clamp(0.001, 1.0);
    }

    let targets = scanner.into_targets();
    let budget = limits
        .max_decompressed_bytes
        .saturating_add(bytes.len().saturating_mul(8));
    let emitter = Emitter {
        buf: bytes,
        base: in_base,
        err_base,
        targets: &targets.0,
        entries: vec![Entry::EMPTY; targets.1],
        gen: 0,
        out: Vec::new(),
        out_base,
        depth: 0,
        max_depth: limits.max_depth,
        cap: limits.max_decompressed_bytes,
    };
    let mut s = Splitter {
        elements: &elements,
        max_bytes,
        head,
        index_per_byte,
        protocol,
        compression,
        threshold: opts.compress_threshold,
        allow_oversized: opts.allow_oversized,
        threads: match opts.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            t => t,
        }
        .min(BATCH),
        ratio,
        em: emitter,
        start: 0,
        prefix: 0,
        ends: Vec::new(),
        emitted_total: 0,
        budget,
    };
    s.run()
}

// ---------------------------------------------------------------------------------------------
// Bit sets and the target index.

struct BitSet(Vec<u64>);

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
struct Targets {
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
    fn index(&self, i: usize) -> Option<usize> {
        let &(w, rank) = self.words.get(i / 64)?;
        let m = 1u64 << (i % 64);
        if w & m == 0 {
            return None;
        }
        Some(rank + (w & (m - 1)).count_ones() as usize)
    }
}

/// A varint, with the one- and two-byte cases (lengths, most offsets) inline.
#[inline(always)]
fn read_varint(buf: &[u8], pos: &mut usize, err_base: usize) -> Result<u64> {
    if let Some(&b0) = buf.get(*pos) {
        if b0 < 0x80 {
            *pos += 1;
            return Ok(b0 as u64);
        }
        if let Some(&b1) = buf.get(*pos + 1) {
            if b1 < 0x80 {
                *pos += 2;
                return Ok((b0 & 0x7f) as u64 | (b1 as u64) << 7);
            }
        }
    }
    varint::read(buf, pos).map_err(|e| e.with_base(err_base))
}

#[inline]
fn is_string_tag(t: u8) -> bool {
    matches!(t, BINARY | STR_UTF8 | SHORT_BINARY_0..=0x7f)
}

// ---------------------------------------------------------------------------------------------
// Pre-scan: validate everything, find the elements and the positions back-references name.

struct Scanner<'a> {
    buf: &'a [u8],
    base: usize,
    err_base: usize,
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
    fn new(buf: &'a [u8], base: usize, err_base: usize, limits: &'a Limits) -> Self {
        Scanner {
            buf,
            base,
            err_base,
            limits,
            depth: 0,
            values_left: limits.max_values,
            floor: 0,
            targets: BitSet::new(buf.len()),
            tracked: BitSet::new(buf.len()),
            copy_ok: BitSet::new(buf.len()),
        }
    }

    fn into_targets(self) -> (Targets, usize) {
        Targets::new(self.targets)
    }

    #[cold]
    fn err(&self, code: ErrorCode, at: usize) -> Error {
        Error::new(code, at + self.err_base)
    }

    #[cold]
    fn eof(&self) -> Error {
        Error::eof(self.buf.len() + self.err_base)
    }

    #[inline]
    fn at(&self, pos: usize) -> Result<u8> {
        self.buf.get(pos).copied().ok_or_else(|| self.eof())
    }

    #[inline]
    fn varint(&self, pos: &mut usize) -> Result<u64> {
        read_varint(self.buf, pos, self.err_base)
    }

    #[inline]
    fn skip(&self, pos: usize, n: u64) -> Result<usize> {
        usize::try_from(n)
            .ok()
            .and_then(|n| pos.checked_add(n))
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.eof())
    }

    fn count(&self, pos: &mut usize, at: usize) -> Result<u64> {
        let n = self.varint(pos)?;
        if n > self.limits.max_elements as u64 {
            return Err(self.err(ErrorCode::ElementCountLimit(self.limits.max_elements), at));
        }
        Ok(n)
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
        let idx = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_sub(self.base))
            .filter(|&i| i < at && i >= self.floor)
            .ok_or_else(|| self.err(ErrorCode::BadOffset(offset), at))?;
        self.targets.set(idx);
        Ok(idx)
    }

    /// Body: skip PADs, expect an array, walk its elements; returns their byte ranges.
    fn run(&mut self) -> Result<Vec<(usize, usize)>> {
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
                (t & 0x0f) as u64
            }
            _ => return Err(self.err(ErrorCode::NotAnArray, pos)),
        };
        self.floor = pos;
        let mut elements = Vec::with_capacity((n as usize).min(self.buf.len().saturating_sub(pos)));
        for _ in 0..n {
            let start = pos;
            pos = self.value(pos, false)?;
            elements.push((start, pos));
        }
        pos = self.skip_pads(pos);
        if pos != self.buf.len() {
            return Err(self.err(ErrorCode::TrailingBytes, pos));
        }
        Ok(elements)
    }

    fn skip_pads(&self, mut pos: usize) -> usize {
        while self.buf.get(pos) == Some(&PAD) {
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
            FLOAT => pos = self.skip(pos, 4)?,
            DOUBLE => pos = self.skip(pos, 8)?,
            LONG_DOUBLE | FLOAT_128 => pos = self.skip(pos, 16)?,
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
                    _ => (t & 0x0f) as u64,
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
            let len = self.varint(&mut pos)?;
            if len > self.limits.max_string_bytes as u64 {
                return Err(self.err(
                    ErrorCode::StringLengthLimit(self.limits.max_string_bytes),
                    start,
                ));
            }
            len
        } else {
            (t & 0x1f) as u64
        };
        self.skip(pos, len)
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

// ---------------------------------------------------------------------------------------------
// Emission: copy elements tag by tag into a chunk body, fixing up back-references.

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

struct Emitter<'a> {
    buf: &'a [u8],
    base: usize,
    err_base: usize,
    targets: &'a Targets,
    entries: Vec<Entry>,
    gen: u32,
    out: Vec<u8>,
    /// The document offset of `out[0]`.
    out_base: usize,
    depth: usize,
    max_depth: usize,
    /// Largest chunk body we are willing to build.
    cap: usize,
}

impl Emitter<'_> {
    /// Start a new chunk body with `prefix` reserved bytes.
    fn reset(&mut self, prefix: usize) {
        self.out.clear();
        self.out.resize(prefix, 0);
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            self.entries.iter_mut().for_each(|e| *e = Entry::EMPTY);
            self.gen = 1;
        }
    }

    #[cold]
    fn err(&self, code: ErrorCode, at: usize) -> Error {
        Error::new(code, at + self.err_base)
    }

    #[cold]
    fn eof(&self) -> Error {
        Error::eof(self.buf.len() + self.err_base)
    }

    #[inline]
    fn at(&self, pos: usize) -> Result<u8> {
        self.buf.get(pos).copied().ok_or_else(|| self.eof())
    }

    #[inline]
    fn varint(&self, pos: &mut usize) -> Result<u64> {
        read_varint(self.buf, pos, self.err_base)
    }

    #[inline]
    fn skip(&self, pos: usize, n: u64) -> Result<usize> {
        usize::try_from(n)
            .ok()
            .and_then(|n| pos.checked_add(n))
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.eof())
    }

    /// Append `tag` then the input bytes `from..to`.
    #[inline]
    fn copy(&mut self, tag: u8, from: usize, to: usize) -> Result<()> {
        let bytes = self
            .buf
            .get(from..to)
            .ok_or_else(|| Error::eof(to + self.err_base))?;
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
        usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_sub(self.base))
            .filter(|&i| i < at)
            .ok_or_else(|| self.err(ErrorCode::BadOffset(offset), at))
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
    fn value(&mut self, pos: usize, force_track: bool) -> Result<(usize, bool)> {
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
                pos = self.skip(pos, n)?;
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
                let b = *self.buf.get(*pos)?;
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
                let Ok(offset) = varint::read(self.buf, &mut pos) else {
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
        self.skip(pos, len)
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

// ---------------------------------------------------------------------------------------------
// Fitting.

/// Length of the array prefix of a chunk of `count` elements: `ARRAYREF_n` below 16 (as the
/// reference encoder writes it), else `REFN ARRAY <count>`.
fn prefix_len(count: usize) -> usize {
    if count < 16 {
        1
    } else {
        2 + varint::len(count as u64)
    }
}

fn write_prefix(out: &mut [u8], count: usize) {
    if count < 16 {
        if let Some(b) = out.first_mut() {
            *b = ARRAYREF_0 | count as u8;
        }
        return;
    }
    let mut v = Vec::with_capacity(12);
    v.extend_from_slice(&[REFN, ARRAY]);
    varint::write(&mut v, count as u64);
    let n = v.len().min(out.len());
    out[..n].copy_from_slice(&v[..n]);
}

/// Candidate chunks compressed together (in parallel when threads allow). A chunk that fits is
/// kept; one that does not is refitted alone and the rest of its batch discarded. Fixed, so that
/// the chunks do not depend on the number of threads.
pub const BATCH: usize = 4;
/// Batched chunks aim this full (of `max_bytes`), going by the running compression ratio.
const BATCH_FILL: f64 = 0.96;
/// A chunk fitted alone first aims this full...
const FILL: f64 = 0.975;
/// ...is good enough at this fill...
const ACCEPT: f64 = 0.95;
/// ...grows towards this fill when it is not...
const GROW_FILL: f64 = 0.99;
/// ...and stops after this many compressions with the best fit found.
const MAX_PROBES: usize = 6;

/// Header + (possibly compressed) body, as the encoder writes them. `head` is the magic, the
/// version byte and the header suffix.
fn make_doc(
    head: &[u8],
    protocol: u8,
    compression: Compression,
    threshold: usize,
    body: &[u8],
) -> Result<Vec<u8>> {
    let mut doc = Vec::with_capacity(head.len() + body.len() / 2 + 16);
    doc.extend_from_slice(head);
    let version_at = 4;
    if compression != Compression::None && body.len() >= threshold {
        doc[version_at] = (compression.encoding().type_nibble() << 4) | protocol;
        if compress::compress_framed(compression, body, &mut doc)? {
            return Ok(doc);
        }
        doc.truncate(head.len());
    }
    doc[version_at] = protocol;
    doc.extend_from_slice(body);
    Ok(doc)
}

/// A chunk tried in a batch: first and end element, body, header.
type Candidate = (usize, usize, Vec<u8>, Vec<u8>);

struct Splitter<'a> {
    elements: &'a [(usize, usize)],
    max_bytes: usize,
    /// Magic, version and header suffix of every chunk; without the suffix when each chunk gets
    /// its own element index (`index_per_byte`).
    head: Vec<u8>,
    /// Index bytes per body byte of the input, when the chunks carry element indexes.
    index_per_byte: Option<f64>,
    protocol: u8,
    compression: Compression,
    threshold: usize,
    allow_oversized: bool,
    threads: usize,
    /// Running estimate of compressed/raw body size.
    ratio: f64,
    em: Emitter<'a>,
    /// First element of the chunk being built.
    start: usize,
    /// Bytes reserved for the array prefix in `em.out`.
    prefix: usize,
    /// `ends[j]`: body length after element `start + j`.
    ends: Vec<usize>,
    emitted_total: usize,
    budget: usize,
}

impl Splitter<'_> {
    fn reset(&mut self, start: usize, prefix: usize) {
        self.start = start;
        self.prefix = prefix;
        self.ends.clear();
        self.em.reset(prefix);
    }

    fn emitted(&self) -> usize {
        self.start + self.ends.len()
    }

    /// Emit the next element into the chunk body.
    fn push_next(&mut self) -> Result<()> {
        let Some(&(s, e)) = self.elements.get(self.emitted()) else {
            return Ok(());
        };
        let before = self.em.out.len();
        self.em.depth = 2;
        let (end, _) = self.em.value(s, false)?;
        if end != e {
            return Err(self.em.err(
                ErrorCode::UnsupportedTag("splitter: element bounds disagree"),
                s,
            ));
        }
        self.emitted_total += self.em.out.len() - before;
        if self.emitted_total > self.budget {
            return Err(self
                .em
                .err(ErrorCode::DecompressedSizeLimit(self.em.cap), s));
        }
        self.ends.push(self.em.out.len());
        Ok(())
    }

    /// Body length of the chunk `start..k` (`k > start`, already emitted).
    fn raw(&self, k: usize) -> usize {
        self.ends
            .get(k - self.start - 1)
            .copied()
            .unwrap_or(self.prefix)
    }

    /// The header of the chunk `start..k` (emitted): the shared head, or the head with the
    /// chunk's own element index.
    fn chunk_head(&self, k: usize) -> Vec<u8> {
        if self.index_per_byte.is_none() || k <= self.start {
            return self.head.clone();
        }
        let count = k - self.start;
        let mut starts = Vec::with_capacity(count);
        starts.push(self.prefix);
        starts.extend_from_slice(&self.ends[..count - 1]);
        let mut user = Vec::new();
        crate::index::write(&starts, self.raw(k), &mut user);
        let mut head = self.head.clone();
        head.pop(); // the empty suffix
        let (magic, version) = (&head[..4], head[4]);
        let mut out = Vec::with_capacity(head.len() + user.len() + 8);
        header::write_with_user_header(&mut out, version & 0x0f, Encoding::Raw, &user);
        out[..4].copy_from_slice(magic);
        out
    }

    /// Estimated document size for a body of `raw` bytes.
    fn estimate(&self, raw: usize) -> f64 {
        let index = self.index_per_byte.map_or(0.0, |r| r * raw as f64);
        let plain = (self.head.len() + raw) as f64 + index;
        if self.compression == Compression::None || raw < self.threshold {
            return plain;
        }
        let mut framing = varint::len((raw + raw / 4 + 256) as u64);
        if let Compression::Zlib { .. } = self.compression {
            framing += varint::len(raw as u64);
        }
        let packed = (self.head.len() + framing) as f64 + raw as f64 * self.ratio + index;
        packed.min(plain)
    }

    /// The largest `k` in `lo < k < hi` whose estimated size is within `fill * max_bytes`,
    /// emitting elements as far as needed; `lo` if none.
    fn guess(&mut self, lo: usize, hi: usize, fill: f64) -> Result<usize> {
        let goal = self.max_bytes as f64 * fill;
        let top = hi.saturating_sub(1).min(self.elements.len());
        while self.emitted() < top
            && self.estimate(self.raw(self.emitted().max(self.start + 1))) <= goal
        {
            let was = self.emitted();
            self.push_next()?;
            if self.emitted() == was {
                break;
            }
        }
        let top = top.min(self.emitted());
        if top <= lo {
            return Ok(lo);
        }
        // ends are increasing, so the estimate is (almost) monotonic: binary search.
        let (mut l, mut h) = (lo, top); // invariant: l fits (or is lo), answer in l..=h
        while l < h {
            let m = l + (h - l).div_ceil(2);
            if self.estimate(self.raw(m)) <= goal {
                l = m;
            } else {
                h = m - 1;
            }
        }
        Ok(l)
    }

    /// Emit the exact chunk body for elements `start..k` (right array prefix) into `em.out`;
    /// returns its length.
    fn body(&mut self, k: usize) -> Result<usize> {
        let count = k - self.start;
        let p = prefix_len(count);
        if p != self.prefix {
            let start = self.start;
            self.reset(start, p);
        }
        while self.emitted() < k {
            let was = self.emitted();
            self.push_next()?;
            if self.emitted() == was {
                break;
            }
        }
        write_prefix(&mut self.em.out[..p], count);
        Ok(self.raw(k))
    }

    /// Build the document for elements `start..k` exactly; returns it, its body length and its
    /// header length.
    fn probe(&mut self, k: usize) -> Result<(Vec<u8>, usize, usize)> {
        let end = self.body(k)?;
        let head = self.chunk_head(k);
        let body = self.em.out.get(..end).unwrap_or(&[]);
        Ok((
            make_doc(&head, self.protocol, self.compression, self.threshold, body)?,
            end,
            head.len(),
        ))
    }

    fn learn(&mut self, doc: &[u8], raw: usize, head: usize) {
        if self.compression != Compression::None && raw >= self.threshold && raw > 0 {
            // Framing included: a slight overestimate.
            let packed = doc.len().saturating_sub(head) as f64;
            self.ratio = (packed / raw as f64).clamp(0.0005, 1.0);
        }
    }

    /// All the chunks: the first fitted alone (which calibrates the ratio), then batches.
    fn run(&mut self) -> Result<Vec<Vec<u8>>> {
        let n = self.elements.len();
        let mut chunks = Vec::new();
        let (mut a, first) = self.next_chunk(0, 0)?;
        let mut last_count = a;
        chunks.push(first);
        let fill = if self.compression == Compression::None {
            1.0
        } else {
            BATCH_FILL
        };
        while a < n {
            // Candidates from the running ratio, each body kept for compression.
            let mut batch = Vec::with_capacity(BATCH);
            let mut s = a;
            while batch.len() < BATCH && s < n {
                self.reset(s, prefix_len(last_count.max(1)));
                let k = self.guess(s, n + 1, fill)?.max(s + 1);
                let end = self.body(k)?;
                let head = self.chunk_head(k);
                batch.push((s, k, self.em.out.get(..end).unwrap_or(&[]).to_vec(), head));
                last_count = k - s;
                s = k;
            }
            let docs = self.make_docs(&batch)?;
            for ((s, k, body, head), doc) in batch.iter().zip(docs) {
                if doc.len() <= self.max_bytes {
                    self.learn(&doc, body.len(), head.len());
                    chunks.push(doc);
                    a = *k;
                    continue;
                }
                let (k, doc) = self.next_chunk(*s, k - s)?;
                last_count = k - s;
                chunks.push(doc);
                a = k;
                break;
            }
        }
        Ok(chunks)
    }

    /// Compress a batch of bodies, spread over the threads.
    fn make_docs(&self, batch: &[Candidate]) -> Result<Vec<Vec<u8>>> {
        let (protocol, compression, threshold) = (self.protocol, self.compression, self.threshold);
        let one = |c: &Candidate| make_doc(&c.3, protocol, compression, threshold, &c.2);
        let threads = self.threads.min(batch.len());
        if threads <= 1 || compression == Compression::None {
            return batch.iter().map(one).collect();
        }
        let mut slots: Vec<Option<Result<Vec<u8>>>> = (0..batch.len()).map(|_| None).collect();
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            for t in 1..threads {
                let work = std::thread::Builder::new().spawn_scoped(scope, move || {
                    (t..batch.len())
                        .step_by(threads)
                        .map(|i| (i, one(&batch[i])))
                        .collect::<Vec<_>>()
                });
                match work {
                    Ok(h) => handles.push(h),
                    // No thread: do its share here.
                    Err(_) => {
                        for i in (t..batch.len()).step_by(threads) {
                            slots[i] = Some(one(&batch[i]));
                        }
                    }
                }
            }
            for i in (0..batch.len()).step_by(threads) {
                slots[i] = Some(one(&batch[i]));
            }
            for h in handles {
                if let Ok(done) = h.join() {
                    for (i, r) in done {
                        slots[i] = Some(r);
                    }
                }
            }
        });
        slots
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(Error::new(
                        ErrorCode::Compress("compression thread failed".into()),
                        0,
                    ))
                })
            })
            .collect()
    }

    /// Find and build the chunk starting at element `a`: returns its end and its bytes.
    fn next_chunk(&mut self, a: usize, last_count: usize) -> Result<(usize, Vec<u8>)> {
        let n = self.elements.len();
        let max = self.max_bytes;
        self.reset(a, prefix_len(last_count.max(1)));
        let mut lo = a; // largest k known to fit
        let mut best: Option<Vec<u8>> = None;
        let mut hi = n + 1; // smallest k known not to fit
        let mut single: Option<Vec<u8>> = None;
        let mut probes = 0;
        let mut misses = 0;
        let mut k = self.guess(a, hi, FILL)?.max(a + 1);
        loop {
            probes += 1;
            let (doc, raw, head) = self.probe(k)?;
            self.learn(&doc, raw, head);
            if doc.len() <= max {
                misses = 0;
                if k > lo {
                    lo = k;
                    best = Some(doc);
                }
            } else {
                misses += 1;
                hi = hi.min(k);
                if k == a + 1 {
                    single = Some(doc);
                }
            }
            if lo + 1 >= hi {
                break;
            }
            let best_len = best.as_ref().map_or(0, Vec::len);
            if lo > a && (lo == n || best_len as f64 >= max as f64 * ACCEPT || probes >= MAX_PROBES)
            {
                break;
            }
            let next = if lo > a {
                // Something fits: grow while the estimate says another element fits.
                let g = self.guess(lo, hi, GROW_FILL)?;
                if g <= lo {
                    break;
                }
                g
            } else {
                // Nothing fits yet: shrink, halving after repeated misses.
                let g = self.guess(a, hi, FILL)?.max(a + 1);
                let half = a + (hi - a) / 2;
                if misses >= 2 {
                    g.min(half).max(a + 1)
                } else {
                    g
                }
            };
            k = if next >= hi || next == k {
                lo + (hi - lo) / 2
            } else {
                next
            };
            k = k.clamp(lo + 1, hi - 1);
        }
        match best {
            Some(doc) if lo > a => Ok((lo, doc)),
            _ => {
                let doc = match single {
                    Some(d) => d,
                    None => self.probe(a + 1)?.0,
                };
                if self.allow_oversized {
                    return Ok((a + 1, doc));
                }
                let at = self.elements.get(a).map_or(0, |e| e.0);
                Err(self.em.err(
                    ErrorCode::ChunkTooSmall {
                        element: a,
                        needed: doc.len(),
                        limit: max,
                    },
                    at,
                ))
            }
        }
    }
}
