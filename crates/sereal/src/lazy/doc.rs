//! The document: its header, its whole body, and reading the structure of that body — strings,
//! hash keys, and the wrappers (references, objects, back-references) that lead to a container or
//! a scalar.

use std::fmt;

use crate::cursor::Input;
use crate::de::{open, Limits, Parser};
use crate::error::{ErrorCode, Result};
use crate::header::Header;
use crate::tag::*;

/// A document opened for lazy reading: its header and its whole (decompressed) body.
pub struct LazyDoc<'a> {
    pub(super) header: Header,
    /// The body bytes and their offset bases.
    pub(super) body: Input<'a>,
    pub(super) limits: Limits,
    /// Unique per opened document (a body decompressed into a reused buffer has the same address
    /// as the previous one): what a [`Selector`]'s key cache is valid for.
    pub(super) id: u64,
    /// The top-level array's element bounds from a checked [element index](crate::index)
    /// (`count + 1` positions), or empty.
    pub(super) bounds: Vec<u32>,
    /// What became of the document's element index.
    pub(super) index_use: IndexUse,
    /// The elements' origins from a checked version 2 index, or empty.
    pub(super) origins: Vec<(u64, u32)>,
}

/// What [`LazyDoc::open`] did with the document's [element index](crate::index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexUse {
    /// The document has none (no user header, another user header, or an index of a newer
    /// format version: all read by walking, as always).
    Absent,
    /// A valid index of this many elements: [`LazyDoc::items`] jumps between elements.
    Used(usize),
    /// The index is damaged or does not match the body: it is not used (elements are found by
    /// walking them, so results are the same, only slower). The reason, for a warning.
    Ignored(String),
}

/// Source of [`LazyDoc`] ids.
static NEXT_DOC_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl<'a> LazyDoc<'a> {
    /// A decoder over this body, for materialising selected items (it resolves REFP/ALIAS by
    /// jumping to their targets).
    pub(super) fn parser<'s>(&'s self) -> Parser<'s, 's> {
        let b = self.body;
        Parser::new(b.buf, b.offset_base, b.error_base, &self.limits)
    }
}

impl fmt::Debug for LazyDoc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyDoc")
            .field("header", &self.header)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// A container found by following wrappers.
#[derive(Clone, Copy)]
pub(super) enum Core {
    /// An array: element count and position of the first element.
    Array(usize, usize),
    /// A hash: pair count and position of the first key.
    Hash(usize, usize),
    /// Anything else (scalars, regexps).
    Other,
}

impl<'a> LazyDoc<'a> {
    /// Open `doc` (one document; bytes after its body are ignored): parse the header and, for a
    /// compressed body, decompress it into `scratch` (cleared first; reuse it across documents to
    /// avoid reallocating). Nothing of the body is read yet. `limits` bound decompression, depth,
    /// and what materialising values may cost.
    ///
    /// A valid [element index](crate::index) in the user header is checked against the body here
    /// and then used by [`LazyDoc::items`]; a bad one is set aside ([`LazyDoc::element_index`]
    /// says why), never trusted.
    pub fn open(doc: &'a [u8], limits: &Limits, scratch: &'a mut Vec<u8>) -> Result<LazyDoc<'a>> {
        let body = open(doc, limits, scratch)?;
        let mut lazy = LazyDoc {
            header: body.header,
            body: Input::new(body.bytes, body.offset_base, body.error_base),
            limits: limits.clone(),
            id: NEXT_DOC_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            bounds: Vec::new(),
            index_use: IndexUse::Absent,
            origins: Vec::new(),
        };
        if let Some(range) = lazy.header.user_header.clone() {
            lazy.load_index(doc.get(range).unwrap_or_default());
        }
        Ok(lazy)
    }

    /// Parse and check the element index in user header body `uh`.
    fn load_index(&mut self, uh: &[u8]) {
        use crate::index::{ElementIndex, Parsed};
        let index = match ElementIndex::parse(uh) {
            Parsed::NotAnIndex | Parsed::Unsupported(_) => return,
            Parsed::Bad(reason) => {
                self.index_use = IndexUse::Ignored(format!("element index: {reason}"));
                return;
            }
            Parsed::Index(index) => index,
        };
        let checked = match self.resolve(0, &mut 0, &mut None, &mut false) {
            Ok(Core::Array(count, first)) => {
                index.check(self.body.len(), count, first, |p| self.skip_n(p, 1).ok())
            }
            Ok(_) => Err("the body is not an array".into()),
            Err(e) => Err(format!("the body's array: {e}")),
        };
        match checked {
            Ok(()) => {
                self.index_use = IndexUse::Used(index.len());
                self.origins = index.origins().map(<[_]>::to_vec).unwrap_or_default();
                self.bounds = index.into_bounds();
            }
            Err(reason) => self.index_use = IndexUse::Ignored(format!("element index: {reason}")),
        }
    }

    /// What became of the document's [element index](crate::index): absent, used, or ignored
    /// (with the reason: a reader should warn, since a writer produced a bad one).
    pub fn element_index(&self) -> &IndexUse {
        &self.index_use
    }

    /// The elements' origins (runs `(seq, n)` in element order, see [`crate::index`]) from an
    /// element index that was checked against the body ([`IndexUse::Used`]); `None` without one,
    /// or when it carries none (format version 1).
    pub fn origins(&self) -> Option<&[(u64, u32)]> {
        (!self.origins.is_empty()).then_some(&self.origins[..])
    }

    /// The parsed header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The body bytes (after decompression).
    pub fn body(&self) -> &'a [u8] {
        self.body.buf
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// `&LazyDoc<'a>` as `&LazyDoc<'_>` (covariance, spelled out for the handles).
    pub(super) fn shrink(&self) -> &LazyDoc<'_> {
        self
    }

    /// The bytes and end of a string tag at `pos` (a hash key, class name or string value).
    #[inline]
    pub(super) fn string_at(&self, pos: usize) -> Result<Option<(&'a [u8], bool, usize)>> {
        let tag = self.body.byte_at(pos)? & !TRACK_FLAG;
        let mut p = pos + 1;
        let (len, utf8) = match tag {
            SHORT_BINARY_0..=0x7f => ((tag & 0x1f) as usize, false),
            BINARY | STR_UTF8 => {
                let max = self.limits.max_string_bytes;
                (self.body.string_len_at(&mut p, pos, max)?, tag == STR_UTF8)
            }
            _ => return Ok(None),
        };
        let (bytes, end) = self.body.slice(p, len as u64)?;
        Ok(Some((bytes, utf8, end)))
    }

    /// A hash key at `pos` (a string, or a COPY of one): its bytes, whether it is flagged UTF-8,
    /// and the position after it.
    #[inline]
    pub(super) fn key_at(&self, pos: usize) -> Result<(&'a [u8], bool, usize)> {
        let tag = self.body.byte_at(pos)? & !TRACK_FLAG;
        if tag == COPY {
            let mut p = pos + 1;
            let offset = self.body.varint_at(&mut p)?;
            let idx = self.body.back_offset(offset, pos)?;
            return match self.string_at(idx)? {
                Some((bytes, utf8, _)) => Ok((bytes, utf8, p)),
                None => Err(self
                    .body
                    .err(ErrorCode::BadKeyTag(self.body.buf[idx] & !TRACK_FLAG), idx)),
            };
        }
        match self.string_at(pos)? {
            Some((bytes, utf8, end)) => Ok((bytes, utf8, end)),
            None => Err(self.body.err(ErrorCode::BadKeyTag(tag), pos)),
        }
    }

    /// The position after a class name (a string or COPY of one) at `pos`.
    fn skip_class(&self, pos: usize) -> Result<usize> {
        let tag = self.body.byte_at(pos)? & !TRACK_FLAG;
        match tag {
            SHORT_BINARY_0..=0x7f | BINARY | STR_UTF8 | COPY => Ok(self.key_at(pos)?.2),
            _ => Err(self.body.err(ErrorCode::BadClassName(tag), pos)),
        }
    }

    #[inline]
    fn enter(&self, depth: &mut usize, at: usize) -> Result<()> {
        *depth += 1;
        self.check_depth(*depth, at)
    }

    #[inline]
    pub(super) fn check_depth(&self, depth: usize, at: usize) -> Result<()> {
        if depth > self.limits.max_depth {
            return Err(self
                .body
                .err(ErrorCode::DepthLimit(self.limits.max_depth), at));
        }
        Ok(())
    }

    /// Follow wrappers (PAD, track bit, REFN, WEAKEN, OBJECT*, REFP, ALIAS, COPY) from `pos` to
    /// the container or scalar they lead to. On the first back-reference jump, `jumped` is set to
    /// the position after it (the end of the item at `pos`). Every wrapper counts as a level of
    /// depth; jumps only go backwards, so this always terminates.
    pub(super) fn resolve(
        &self,
        mut p: usize,
        depth: &mut usize,
        jumped: &mut Option<usize>,
        in_copy: &mut bool,
    ) -> Result<Core> {
        loop {
            let at = p;
            let tag = self.body.byte_at(p)? & !TRACK_FLAG;
            p += 1;
            match tag {
                PAD => {}
                0x40..=0x4f => return Ok(Core::Array((tag & 0x0f) as usize, p)),
                0x50..=0x5f => return Ok(Core::Hash((tag & 0x0f) as usize, p)),
                ARRAY => {
                    let n = self.body.count_at(&mut p, at, self.limits.max_elements)?;
                    return Ok(Core::Array(n, p));
                }
                HASH => {
                    let n = self.body.count_at(&mut p, at, self.limits.max_elements)?;
                    return Ok(Core::Hash(n, p));
                }
                REFN | WEAKEN => self.enter(depth, at)?,
                OBJECT | OBJECT_FREEZE => {
                    self.enter(depth, at)?;
                    p = self.skip_class(p)?;
                }
                OBJECTV | OBJECTV_FREEZE => {
                    self.enter(depth, at)?;
                    let offset = self.body.varint_at(&mut p)?;
                    let idx = self.body.back_offset(offset, at)?;
                    self.skip_class(idx)?;
                }
                REFP | ALIAS | COPY => {
                    if tag == COPY {
                        if *in_copy {
                            return Err(self.body.err(ErrorCode::CopyOfCopy, at));
                        }
                        *in_copy = true;
                    }
                    self.enter(depth, at)?;
                    let offset = self.body.varint_at(&mut p)?;
                    let idx = self.body.back_offset(offset, at)?;
                    if tag != COPY {
                        if self.body.byte_at(idx)? & TRACK_FLAG == 0 {
                            return Err(self.body.err(ErrorCode::BadOffset(offset), at));
                        }
                        // The target was written (and is read) outside any COPY expansion.
                        *in_copy = false;
                    }
                    if jumped.is_none() {
                        *jumped = Some(p);
                    }
                    p = idx;
                }
                _ => return Ok(Core::Other),
            }
        }
    }

    /// Follow only what [`Value::resolve`] looks through (PAD, track bit, ALIAS, COPY, WEAKEN) to
    /// the tag of a scalar.
    pub(super) fn resolve_scalar(&self, mut p: usize) -> Result<usize> {
        let mut depth = 0;
        let mut in_copy = false;
        loop {
            let at = p;
            let tag = self.body.byte_at(p)? & !TRACK_FLAG;
            p += 1;
            match tag {
                PAD => {}
                WEAKEN => self.enter(&mut depth, at)?,
                ALIAS | COPY => {
                    if tag == COPY {
                        if in_copy {
                            return Err(self.body.err(ErrorCode::CopyOfCopy, at));
                        }
                        in_copy = true;
                    }
                    self.enter(&mut depth, at)?;
                    let offset = self.body.varint_at(&mut p)?;
                    let idx = self.body.back_offset(offset, at)?;
                    if tag == ALIAS {
                        if self.body.byte_at(idx)? & TRACK_FLAG == 0 {
                            return Err(self.body.err(ErrorCode::BadOffset(offset), at));
                        }
                        in_copy = false;
                    }
                    p = idx;
                }
                _ => return Ok(at),
            }
        }
    }
}
