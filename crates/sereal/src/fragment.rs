//! Fragments: one value encoded ahead of the document it will go into, so that a parser can write
//! Sereal straight from its input (JSON text) without building a [`Value`] tree, and an
//! [`ArrayEncoder`](crate::ArrayEncoder) can append it later with
//! [`push_fragment`](crate::ArrayEncoder::push_fragment).
//!
//! Contract:
//! - A [`Fragment`] holds one complete value in the encoder's form (the rules of
//!   [`crate::ser`]: small integers in the tag, `FLOAT` when `f32` keeps the value, ASCII strings
//!   as binary, `ARRAYREF_n`/`HASHREF_n` under 16 elements) **without** back-references: every
//!   hash key and string value is written out in full, and its position is recorded. Booleans are
//!   written in the protocol 5 form and recorded too.
//! - `push_fragment` copies the bytes between recorded positions as they are and runs every
//!   recorded key and string through the document's de-duplication tables, in order, so the
//!   document is byte for byte what [`ArrayEncoder::push`](crate::ArrayEncoder::push) writes for
//!   the same value (the value [`Fragment::to_value`] gives back).
//! - [`FragmentWriter`] checks its own use: containers closed in order, as many keys as values
//!   in a hash, exactly one top-level value; [`FragmentWriter::finish`] refuses anything else
//!   (and fragments of 1 GiB or more), so a `Fragment` always holds a well-formed value.
//! - An [`EncodedKey`] (a key of up to [`ENCODED_KEY_MAX`] bytes encoded ahead) is written by
//!   [`FragmentWriter::encoded_key`] with the very bytes and mark [`FragmentWriter::key`] writes
//!   for its text, for callers that meet the same keys again and again.

use crate::error::{Error, ErrorCode, Result};
use crate::header;
use crate::scalars::{write_float, write_int, write_raw_string};
use crate::tag::*;
use crate::value::Value;
use crate::varint;

/// Kind of a recorded position (the top two bits of a mark).
pub(crate) const MARK_KEY: u32 = 0;
pub(crate) const MARK_STR: u32 = 1 << 30;
pub(crate) const MARK_BOOL: u32 = 2 << 30;
/// The position part of a mark.
pub(crate) const MARK_POS: u32 = (1 << 30) - 1;

/// One value encoded without back-references (see the [module docs](self)).
#[derive(Clone, PartialEq, Eq)]
pub struct Fragment {
    pub(crate) body: Vec<u8>,
    /// Positions of the keys, string values and booleans in `body`, in order, with their kind.
    pub(crate) marks: Vec<u32>,
    /// Nesting of containers, the outermost counting as 1.
    pub(crate) depth: usize,
}

impl std::fmt::Debug for Fragment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_value() {
            Ok(v) => f.debug_tuple("Fragment").field(&v).finish(),
            Err(_) => f
                .debug_struct("Fragment")
                .field("bytes", &self.body.len())
                .finish(),
        }
    }
}

impl Fragment {
    /// Bytes of the encoded value (before de-duplication).
    pub fn len(&self) -> usize {
        self.body.len()
    }

    /// Whether the fragment is empty (never, for one made by [`FragmentWriter::finish`]).
    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.body.capacity() + 4 * self.marks.capacity()
    }

    /// The value, decoded (strings come back as the decoder gives them: ASCII ones as
    /// [`Value::Binary`]).
    pub fn to_value(&self) -> Result<Value> {
        self.as_ref().to_value()
    }

    /// The fragment, borrowed.
    pub fn as_ref(&self) -> FragmentRef<'_> {
        FragmentRef {
            body: &self.body,
            marks: &self.marks,
            depth: self.depth,
        }
    }
}

/// A borrowed [`Fragment`] (from one, or from a [`FragmentList`]): what
/// [`ArrayEncoder::push_fragment_ref`](crate::ArrayEncoder::push_fragment_ref) reads.
#[derive(Debug, Clone, Copy)]
pub struct FragmentRef<'a> {
    pub(crate) body: &'a [u8],
    pub(crate) marks: &'a [u32],
    pub(crate) depth: usize,
}

impl FragmentRef<'_> {
    /// Bytes of the encoded value (before de-duplication).
    pub fn len(&self) -> usize {
        self.body.len()
    }

    /// Whether the fragment is empty (never, for one made by [`FragmentWriter::finish`]).
    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// Number of recorded positions (keys, strings, booleans): what it takes in a
    /// [`FragmentList`] besides its bytes (see [`FragmentList::reserve`]).
    pub fn mark_count(&self) -> usize {
        self.marks.len()
    }

    /// The value, decoded (see [`Fragment::to_value`]).
    pub fn to_value(&self) -> Result<Value> {
        let mut doc = Vec::with_capacity(self.body.len() + 8);
        header::write(&mut doc, 5, header::Encoding::Raw);
        doc.extend_from_slice(self.body);
        crate::Decoder::new().decode(&doc)
    }
}

/// Many fragments in one pair of buffers, in order: a batch of events handed to another thread
/// costs three allocations instead of two per event (and frees them there: freeing many small
/// blocks on a thread other than the one that allocated them is what made two pipeline shards
/// slower per event than one).
#[derive(Debug, Clone, Default)]
pub struct FragmentList {
    body: Vec<u8>,
    marks: Vec<u32>,
    /// Per fragment: where its body and its marks end, and its depth.
    ends: Vec<(usize, usize, usize)>,
}

impl FragmentList {
    /// An empty list.
    pub fn new() -> FragmentList {
        FragmentList::default()
    }

    /// Appends a copy of `f`; its index is the length before.
    pub fn push(&mut self, f: FragmentRef<'_>) {
        self.body.extend_from_slice(f.body);
        self.marks.extend_from_slice(f.marks);
        self.ends.push((self.body.len(), self.marks.len(), f.depth));
    }

    /// Makes room for `fragments` more fragments of `bytes` bytes and `marks` recorded positions
    /// in all (so a list filled from known fragments is allocated once, not grown by copies).
    pub fn reserve(&mut self, fragments: usize, bytes: usize, marks: usize) {
        self.body.reserve_exact(bytes);
        self.marks.reserve_exact(marks);
        self.ends.reserve_exact(fragments);
    }

    /// Fragment `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<FragmentRef<'_>> {
        let &(body_end, marks_end, depth) = self.ends.get(i)?;
        let (body_start, marks_start) = match i.checked_sub(1) {
            Some(p) => (self.ends[p].0, self.ends[p].1),
            None => (0, 0),
        };
        Some(FragmentRef {
            body: &self.body[body_start..body_end],
            marks: &self.marks[marks_start..marks_end],
            depth,
        })
    }

    /// Number of fragments.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the list holds no fragment.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.body.capacity()
            + 4 * self.marks.capacity()
            + std::mem::size_of::<(usize, usize, usize)>() * self.ends.capacity()
    }
}

/// Longest key (in bytes) an [`EncodedKey`] holds.
pub const ENCODED_KEY_MAX: usize = 30;

/// A hash key encoded ahead (its string tag and bytes, as [`FragmentWriter::key`] writes them),
/// for [`FragmentWriter::encoded_key`]; padded to a fixed size so that writing it is a
/// constant-size copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedKey {
    bytes: [u8; ENCODED_KEY_MAX + 2],
    len: u8,
}

impl EncodedKey {
    /// The key `s` encoded, or `None` when it is longer than [`ENCODED_KEY_MAX`] bytes.
    pub fn new(s: &str) -> Option<EncodedKey> {
        if s.len() > ENCODED_KEY_MAX {
            return None;
        }
        // `write_raw_string`'s forms for strings this short, without a vector (a cache fills
        // these on misses); `encoded_keys_are_written_keys` holds them equal.
        let mut bytes = [0u8; ENCODED_KEY_MAX + 2];
        let header = if s.is_ascii() {
            bytes[0] = SHORT_BINARY_0 | s.len() as u8;
            1
        } else {
            bytes[0] = STR_UTF8;
            bytes[1] = s.len() as u8; // a one-byte varint: under 128
            2
        };
        bytes[header..header + s.len()].copy_from_slice(s.as_bytes());
        Some(EncodedKey {
            bytes,
            len: (header + s.len()) as u8,
        })
    }
}

/// An open container of a [`FragmentWriter`].
#[derive(Debug)]
struct Open {
    /// Where its one-byte header slot is.
    at: usize,
    /// Marks recorded before it (those after it move if its header grows).
    marks: usize,
    hash: bool,
    values: usize,
    keys: usize,
}

/// Writes one [`Fragment`] at a time; buffers are kept between fragments.
#[derive(Debug, Default)]
pub struct FragmentWriter {
    body: Vec<u8>,
    marks: Vec<u32>,
    open: Vec<Open>,
    depth: usize,
    top_values: usize,
    misuse: bool,
}

impl FragmentWriter {
    /// An empty writer.
    pub fn new() -> FragmentWriter {
        FragmentWriter::default()
    }

    /// Forget the fragment being written.
    pub fn clear(&mut self) {
        self.body.clear();
        self.marks.clear();
        self.open.clear();
        self.depth = 0;
        self.top_values = 0;
        self.misuse = false;
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.body.len()
    }

    /// Whether nothing was written since the last [`finish`](Self::finish) or
    /// [`clear`](Self::clear).
    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    #[inline]
    fn counted(&mut self) {
        match self.open.last_mut() {
            Some(o) => o.values += 1,
            None => self.top_values += 1,
        }
    }

    #[inline]
    fn mark(&mut self, kind: u32) {
        self.marks.push(kind | (self.body.len() as u32 & MARK_POS));
    }

    /// `null`.
    #[inline]
    pub fn undef(&mut self) {
        self.counted();
        self.body.push(UNDEF);
    }

    /// A boolean.
    #[inline]
    pub fn bool(&mut self, b: bool) {
        self.counted();
        self.mark(MARK_BOOL);
        self.body.push(if b { YES } else { NO });
    }

    /// A signed integer.
    #[inline]
    pub fn int(&mut self, i: i64) {
        self.counted();
        write_int(&mut self.body, i);
    }

    /// An unsigned integer, as [`Value::UInt`] is written.
    #[inline]
    pub fn uint(&mut self, u: u64) {
        self.counted();
        self.body.push(VARINT);
        varint::write(&mut self.body, u);
    }

    /// A float.
    #[inline]
    pub fn float(&mut self, f: f64) {
        self.counted();
        write_float(&mut self.body, f);
    }

    /// Replaces the number written last — [`int`](Self::int) or [`float`](Self::float), which
    /// started at byte `at` (what [`len`](Self::len) said before it) — by the integer `i`, still
    /// one value: for a value rewritten once read (ingest stores an `epoch` as its whole second).
    /// Numbers record no marks, so only the bytes change.
    pub fn replace_number(&mut self, at: usize, i: i64) {
        self.body.truncate(at);
        write_int(&mut self.body, i);
    }

    /// A string value.
    #[inline]
    pub fn str(&mut self, s: &str) {
        self.counted();
        self.mark(MARK_STR);
        write_raw_string(&mut self.body, s.as_bytes(), !s.is_ascii());
    }

    /// A hash key (the next value written is its value).
    #[inline]
    pub fn key(&mut self, s: &str) {
        match self.open.last_mut() {
            Some(o) if o.hash && o.keys == o.values => o.keys += 1,
            _ => self.misuse = true,
        }
        self.mark(MARK_KEY);
        write_raw_string(&mut self.body, s.as_bytes(), !s.is_ascii());
    }

    /// A hash key encoded ahead by [`EncodedKey::new`]: the same bytes and mark as
    /// [`key`](Self::key) of the same text, with a fixed-size copy instead of a length check,
    /// an ASCII check and a `memcpy` (events repeat the same keys).
    #[inline]
    pub fn encoded_key(&mut self, k: &EncodedKey) {
        match self.open.last_mut() {
            Some(o) if o.hash && o.keys == o.values => o.keys += 1,
            _ => self.misuse = true,
        }
        self.mark(MARK_KEY);
        let at = self.body.len();
        // All of `k.bytes` (a constant size: two vector stores), then the padding cut off.
        self.body.extend_from_slice(&k.bytes);
        self.body.truncate(at + usize::from(k.len));
    }

    /// Open a hash: then `key`, value, `key`, value, …, [`end`](Self::end).
    #[inline]
    pub fn begin_hash(&mut self) {
        self.begin(true);
    }

    /// Open an array: then its elements, [`end`](Self::end).
    #[inline]
    pub fn begin_array(&mut self) {
        self.begin(false);
    }

    #[inline]
    fn begin(&mut self, hash: bool) {
        self.counted();
        self.open.push(Open {
            at: self.body.len(),
            marks: self.marks.len(),
            hash,
            values: 0,
            keys: 0,
        });
        // The header's usual size; rewritten by `end`.
        self.body.push(0);
        self.depth = self.depth.max(self.open.len());
    }

    /// Close the innermost open container.
    #[inline]
    pub fn end(&mut self) {
        let Some(o) = self.open.pop() else {
            self.misuse = true;
            return;
        };
        if o.hash && o.keys != o.values {
            self.misuse = true;
        }
        let n = o.values;
        let (small, big_tag) = if o.hash {
            (HASHREF_0, HASH)
        } else {
            (ARRAYREF_0, ARRAY)
        };
        if n < 16 {
            self.body[o.at] = small | n as u8;
            return;
        }
        self.grow_header(o, big_tag, n);
    }

    /// `REFN HASH|ARRAY <n>` in place of the one-byte slot: moves the contents.
    #[cold]
    fn grow_header(&mut self, o: Open, tag: u8, n: usize) {
        // In place (no temporary vector): an event hash of 16 keys or more comes here each time.
        let count = varint::len(n as u64);
        let shift = 1 + count;
        let end = self.body.len();
        self.body.resize(end + shift, 0);
        self.body.copy_within(o.at + 1..end, o.at + 1 + shift);
        self.body[o.at] = REFN;
        self.body[o.at + 1] = tag;
        varint::write_padded(&mut self.body[o.at + 2..o.at + 2 + count], n as u64);
        for m in &mut self.marks[o.marks..] {
            *m += shift as u32;
        }
    }

    /// The fragment written since the last `finish`/`clear` (moved out in buffers of exact
    /// size); the writer is then empty. Errors: misuse (unclosed or unbalanced containers, not
    /// exactly one top-level value) or a fragment of 1 GiB or more.
    pub fn finish(&mut self) -> Result<Fragment> {
        let ok = !self.misuse
            && self.open.is_empty()
            && self.top_values == 1
            && self.body.len() <= MARK_POS as usize;
        let result = if ok {
            Ok(Fragment {
                body: self.body.as_slice().into(),
                marks: self.marks.as_slice().into(),
                depth: self.depth,
            })
        } else {
            Err(Error::new(
                ErrorCode::UnsupportedTag("malformed or oversized fragment"),
                self.body.len(),
            ))
        };
        self.clear();
        result
    }
}
