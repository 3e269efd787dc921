//! Items: undecoded handles to the values of a body ([`Item`]), what can be read from one
//! without decoding it (fields, elements, borrowed scalars), and iterators over arrays and hashes.

use std::fmt;

use super::doc::{Core, LazyDoc};
use super::path::{resolve_index, Path};
use super::walker::{walk, Emit, ValueEmit};
use crate::de::Parser;
use crate::error::{ErrorCode, Result};
use crate::tag::*;
use crate::value::Value;
use crate::varint;

/// A borrowed, undecoded item of a [`LazyDoc`] body: the span of one tagged value (think
/// `serde_json::value::RawValue`). Cheap to copy. Its bytes are not self-contained (they may
/// refer back to earlier parts of the body), so all reading goes through the document.
#[derive(Clone, Copy)]
pub struct Item<'d> {
    pub(super) doc: &'d LazyDoc<'d>,
    pub(super) start: usize,
    pub(super) end: usize,
    /// Reached inside a COPY expansion (through a selection), where a further COPY is invalid:
    /// decoding it later must apply the same rule as decoding it during the walk.
    pub(super) in_copy: bool,
}

impl fmt::Debug for Item<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Item")
            .field("start", &self.start)
            .field("end", &self.end)
            .field("tag", &crate::tag::name(self.tag()))
            .finish()
    }
}

/// A borrowed scalar read straight from the body, without allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar<'d> {
    /// `UNDEF` / `CANONICAL_UNDEF`.
    Undef,
    /// `TRUE`/`FALSE`/`YES`/`NO`.
    Bool(bool),
    /// An integer that fits in `i64`.
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    UInt(u64),
    /// A float (long doubles narrowed to `f64`).
    Float(f64),
    /// A string's bytes; `utf8` is true for `STR_UTF8` (whose bytes may still be invalid UTF-8).
    Str {
        /// The string bytes, borrowed from the body.
        bytes: &'d [u8],
        /// Whether the string was flagged UTF-8.
        utf8: bool,
    },
}

impl<'d> Item<'d> {
    /// Body index of the item's first byte (`Item::as_bytes` is `body[start..end]`).
    pub fn start(&self) -> usize {
        self.start
    }

    /// Body index just past the item.
    pub fn end(&self) -> usize {
        self.end
    }

    /// The item's bytes in the body, undecoded.
    pub fn as_bytes(&self) -> &'d [u8] {
        &self.doc.body.buf[self.start..self.end]
    }

    /// The item's first tag byte (track flag included; may be `PAD`).
    pub fn tag(&self) -> u8 {
        self.doc.body.buf[self.start]
    }

    /// The document this item belongs to.
    pub fn doc(&self) -> &'d LazyDoc<'d> {
        self.doc
    }

    /// Decode the whole item, exactly as the full decoder would decode it at this place.
    pub fn decode(&self) -> Result<Value> {
        let mut m = self.doc.parser();
        m.value_at(self.start, self.in_copy).map(|(v, _)| v)
    }

    /// The values at `path` (several for `[*]`, none if the path does not match).
    pub fn get(&self, path: &Path) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut stack = Vec::new();
        walk(
            self.doc,
            self.start,
            std::slice::from_ref(path),
            &mut stack,
            ValueEmit(self.doc.parser()),
            &mut out,
        )?;
        Ok(out.pop().unwrap_or_default())
    }

    /// The values at each of `paths`, in one pass over the item: `result[i]` holds the values at
    /// `paths[i]`, in document order. Stops reading as soon as nothing more can match. For many
    /// items, a [`Selector`](super::Selector) reuses its buffers between calls.
    pub fn select(&self, paths: &[Path]) -> Result<Vec<Vec<Value>>> {
        let mut out = Vec::new();
        let mut stack = Vec::new();
        walk(
            self.doc,
            self.start,
            paths,
            &mut stack,
            ValueEmit(self.doc.parser()),
            &mut out,
        )?;
        Ok(out)
    }

    /// Like [`Item::select`] but returns undecoded handles instead of values (for cheap scalar
    /// reads and comparisons, or decoding only some of them).
    pub fn select_items(&self, paths: &[Path]) -> Result<Vec<Vec<Item<'d>>>> {
        let mut out = Vec::new();
        let mut stack = Vec::new();
        walk(self.doc, self.start, paths, &mut stack, ItemEmit, &mut out)?;
        Ok(out)
    }

    /// The value under `key` when this item is a hash (or a reference to / object wrapping one),
    /// as an undecoded handle; `None` if the key is missing or this is not a hash.
    pub fn field(&self, key: &str) -> Result<Option<Item<'d>>> {
        let d = self.doc;
        let mut depth = 0;
        let Core::Hash(n, mut p) = d.resolve(self.start, &mut depth, &mut None, &mut false)? else {
            return Ok(None);
        };
        for _ in 0..n {
            let (k, _, after) = d.key_at(p)?;
            if k == key.as_bytes() {
                return Ok(Some(Item {
                    doc: d,
                    start: after,
                    end: d.skip_n(after, 1)?,
                    in_copy: false,
                }));
            }
            p = d.skip_n(after, 1)?;
        }
        Ok(None)
    }

    /// Element `index` (negative counts from the end) when this item is an array (or a reference
    /// to / object wrapping one); `None` if out of range or not an array.
    pub fn element(&self, index: i64) -> Result<Option<Item<'d>>> {
        let d = self.doc;
        let mut depth = 0;
        let Core::Array(n, first) = d.resolve(self.start, &mut depth, &mut None, &mut false)?
        else {
            return Ok(None);
        };
        let Some(i) = resolve_index(index, n) else {
            return Ok(None);
        };
        let start = d.skip_n(first, i)?;
        Ok(Some(Item {
            doc: d,
            start,
            end: d.skip_n(start, 1)?,
            in_copy: false,
        }))
    }

    /// The elements of this item when it is an array (or a reference to / object wrapping one),
    /// as undecoded handles; `None` if it is not an array.
    pub fn elements(&self) -> Result<Option<Items<'d>>> {
        let mut depth = 0;
        Ok(
            match self
                .doc
                .resolve(self.start, &mut depth, &mut None, &mut false)?
            {
                Core::Array(n, first) => Some(Items {
                    doc: self.doc,
                    pos: first,
                    remaining: n,
                    failed: false,
                    bounds: &[],
                }),
                _ => None,
            },
        )
    }

    /// The entries of this item when it is a hash (or a reference to / object wrapping one), as
    /// (key bytes, undecoded value) pairs; `None` if it is not a hash.
    pub fn entries(&self) -> Result<Option<Entries<'d>>> {
        let mut depth = 0;
        Ok(
            match self
                .doc
                .resolve(self.start, &mut depth, &mut None, &mut false)?
            {
                Core::Hash(n, first) => Some(Entries {
                    doc: self.doc,
                    pos: first,
                    remaining: n,
                    failed: false,
                }),
                _ => None,
            },
        )
    }

    /// The item as a borrowed scalar, looking through what `Value::resolve` looks through (`PAD`,
    /// `ALIAS`, `COPY`, `WEAKEN`, the track bit); `None` for containers, references, objects and
    /// regexps.
    pub fn scalar(&self) -> Result<Option<Scalar<'d>>> {
        let d = self.doc;
        let at = d.resolve_scalar(self.start)?;
        let tag = d.body.buf[at] & !TRACK_FLAG;
        let mut p = at + 1;
        Ok(Some(match tag {
            0x00..=0x0f => Scalar::Int(tag as i64),
            0x10..=0x1f => Scalar::Int(tag as i64 - 32),
            VARINT => {
                let v = d.body.varint_at(&mut p)?;
                match i64::try_from(v) {
                    Ok(i) => Scalar::Int(i),
                    Err(_) => Scalar::UInt(v),
                }
            }
            ZIGZAG => Scalar::Int(varint::unzigzag(d.body.varint_at(&mut p)?)),
            UNDEF | CANONICAL_UNDEF => Scalar::Undef,
            TRUE | YES => Scalar::Bool(true),
            FALSE | NO => Scalar::Bool(false),
            FLOAT | DOUBLE | LONG_DOUBLE | FLOAT_128 => {
                match d.parser().value_at(at, false)?.0.resolve() {
                    Value::Float(f) => Scalar::Float(*f),
                    _ => return Ok(None),
                }
            }
            BINARY | STR_UTF8 | SHORT_BINARY_0..=0x7f => match d.string_at(at)? {
                Some((bytes, utf8, _)) => Scalar::Str { bytes, utf8 },
                None => return Ok(None),
            },
            _ => return Ok(None),
        }))
    }

    /// The bytes of a string item (see [`Item::scalar`]), borrowed from the body.
    pub fn str_bytes(&self) -> Result<Option<&'d [u8]>> {
        Ok(match self.scalar()? {
            Some(Scalar::Str { bytes, .. }) => Some(bytes),
            _ => None,
        })
    }

    /// The text of a string item whose bytes are valid UTF-8, borrowed from the body.
    pub fn as_str(&self) -> Result<Option<&'d str>> {
        Ok(self.str_bytes()?.and_then(|b| std::str::from_utf8(b).ok()))
    }

    /// Whether this item is a string equal to `s` (byte comparison, no allocation).
    pub fn str_eq(&self, s: &str) -> Result<bool> {
        Ok(self.str_bytes()? == Some(s.as_bytes()))
    }

    /// The item as an `i64`, if it is an integer that fits.
    pub fn as_i64(&self) -> Result<Option<i64>> {
        Ok(match self.scalar()? {
            Some(Scalar::Int(i)) => Some(i),
            Some(Scalar::UInt(u)) => i64::try_from(u).ok(),
            _ => None,
        })
    }

    /// The item as an `f64`, for any number.
    pub fn as_f64(&self) -> Result<Option<f64>> {
        Ok(match self.scalar()? {
            Some(Scalar::Int(i)) => Some(i as f64),
            Some(Scalar::UInt(u)) => Some(u as f64),
            Some(Scalar::Float(f)) => Some(f),
            _ => None,
        })
    }

    /// The item as a boolean, if it is one (`TRUE`/`FALSE`/`YES`/`NO`).
    pub fn as_bool(&self) -> Result<Option<bool>> {
        Ok(match self.scalar()? {
            Some(Scalar::Bool(b)) => Some(b),
            _ => None,
        })
    }
}

/// Decodes [`Item`]s of one document (e.g. what [`Selector::next_selected`] picked) into
/// [`Value`]s, exactly as [`Item::decode`] would, but with one budget for all of them: what they
/// materialise together is bounded by [`Limits::max_values`] and
/// [`Limits::max_total_string_bytes`], as for one [`Selector::select_into`] call. Make one per
/// event; it allocates nothing until it decodes.
///
/// [`Selector::next_selected`]: super::Selector::next_selected
/// [`Selector::select_into`]: super::Selector::select_into
/// [`Limits::max_values`]: crate::Limits::max_values
/// [`Limits::max_total_string_bytes`]: crate::Limits::max_total_string_bytes
pub struct ItemDecoder<'d> {
    pub(super) parser: Parser<'d, 'd>,
}

impl fmt::Debug for ItemDecoder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemDecoder").finish_non_exhaustive()
    }
}

impl<'d> ItemDecoder<'d> {
    /// Decode `item` (an item of the document this decoder was made for).
    pub fn decode(&mut self, item: &Item<'d>) -> Result<Value> {
        self.parser
            .value_at(item.start, item.in_copy)
            .map(|(v, _)| v)
    }
}

/// Iterator over the elements of an array, as undecoded [`Item`]s. After an error it ends.
#[derive(Debug, Clone)]
pub struct Items<'d> {
    pub(super) doc: &'d LazyDoc<'d>,
    pub(super) pos: usize,
    pub(super) remaining: usize,
    pub(super) failed: bool,
    /// Element bounds from the document's element index (top-level array only), or empty: then
    /// each element is walked to find where it ends.
    pub(super) bounds: &'d [u32],
}

impl<'d> Items<'d> {
    /// The end of the next element when the element index gives it (no walk needed).
    #[inline]
    pub(super) fn indexed_end(&self) -> Option<usize> {
        let i = self.bounds.len().checked_sub(self.remaining)?;
        self.bounds.get(i).map(|&e| e as usize)
    }
}

impl<'d> Iterator for Items<'d> {
    type Item = Result<Item<'d>>;

    fn next(&mut self) -> Option<Result<Item<'d>>> {
        if self.remaining == 0 || self.failed {
            return None;
        }
        let start = self.pos;
        let end = match self.indexed_end() {
            Some(end) => Ok(end),
            None => self.doc.skip_n(start, 1),
        };
        match end {
            Ok(end) => {
                self.pos = end;
                self.remaining -= 1;
                Some(Ok(Item {
                    doc: self.doc,
                    start,
                    end,
                    in_copy: false,
                }))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.failed {
            (0, Some(0))
        } else {
            (0, Some(self.remaining))
        }
    }
}

impl Items<'_> {
    /// Elements not yet yielded, as declared by the array's count.
    pub fn remaining(&self) -> usize {
        if self.failed {
            0
        } else {
            self.remaining
        }
    }
}

/// Iterator over the entries of a hash, as (key bytes, undecoded value) pairs. After an error it
/// ends.
#[derive(Debug, Clone)]
pub struct Entries<'d> {
    doc: &'d LazyDoc<'d>,
    pos: usize,
    remaining: usize,
    failed: bool,
}

impl<'d> Iterator for Entries<'d> {
    type Item = Result<(&'d [u8], Item<'d>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 || self.failed {
            return None;
        }
        let r = self.doc.key_at(self.pos).and_then(|(k, _, start)| {
            let end = self.doc.skip_n(start, 1)?;
            Ok((
                k,
                Item {
                    doc: self.doc,
                    start,
                    end,
                    in_copy: false,
                },
            ))
        });
        match r {
            Ok((k, item)) => {
                self.pos = item.end;
                self.remaining -= 1;
                Some(Ok((k, item)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.failed {
            (0, Some(0))
        } else {
            (0, Some(self.remaining))
        }
    }
}

/// The handles a document hands out: here, beside the handles, so that the document itself
/// ([`super::doc`]) knows nothing of them.
impl<'a> LazyDoc<'a> {
    /// A decoder for items of this document that charges all it decodes to one budget, like one
    /// selection does (see [`ItemDecoder`]).
    pub fn item_decoder(&self) -> ItemDecoder<'_> {
        ItemDecoder {
            parser: self.parser(),
        }
    }

    /// The top-level item as an undecoded span. This skips over the whole body once to find
    /// where the item ends; [`LazyDoc::items`] does not.
    pub fn root(&self) -> Result<Item<'_>> {
        let end = self.skip_n(0, 1)?;
        Ok(Item {
            doc: self.shrink(),
            start: 0,
            end,
            in_copy: false,
        })
    }

    /// Iterate over the elements of the top-level array (an `ARRAY`, `ARRAYREF`, or a reference
    /// to one), yielding a handle per element without decoding it. A body that is not an array is
    /// a "not an array" error.
    pub fn items(&self) -> Result<Items<'_>> {
        let mut depth = 0;
        match self.resolve(0, &mut depth, &mut None, &mut false)? {
            Core::Array(n, first) => Ok(Items {
                doc: self.shrink(),
                pos: first,
                remaining: n,
                failed: false,
                bounds: &self.bounds,
            }),
            _ => Err(self.body.err(ErrorCode::NotAnArray, 0)),
        }
    }
}

/// Emit undecoded handles.
pub(super) struct ItemEmit;

impl<'d> Emit<'d> for ItemEmit {
    type Out = Item<'d>;
    fn emit(
        &mut self,
        doc: &'d LazyDoc<'d>,
        pos: usize,
        in_copy: bool,
    ) -> Result<(Item<'d>, usize)> {
        let end = doc.skip_n(pos, 1)?;
        Ok((
            Item {
                doc,
                start: pos,
                end,
                in_copy,
            },
            end,
        ))
    }
}
