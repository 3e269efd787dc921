//! Encoder: a [`Value`] in, a Sereal document out — byte-identical to the Perl reference
//! (`Sereal::Encoder`) for data JSON can express, given the same options.
//!
//! What the reference does, and so what we do:
//! - strings: pure ASCII goes out as `SHORT_BINARY`/`BINARY` (Perl keeps such strings without the
//!   UTF-8 flag), anything else as `STR_UTF8`; [`Value::Binary`] always as binary.
//! - hash keys are always de-duplicated (`COPY` to the first occurrence, any length);
//!   values only with `dedupe_strings`, and only when longer than 3 bytes.
//! - arrays/hashes under 16 elements use `ARRAYREF_n`/`HASHREF_n`, others `REFN ARRAY`/`REFN HASH`;
//!   canonical mode always uses the `REFN` form and sorts keys by (length, bytes, UTF-8 flag).
//! - a float goes out as `FLOAT` when it survives the round trip through `f32`, else `DOUBLE`.
//! - compression only when the body reaches the threshold (default 1024 bytes) and the result is
//!   smaller; the compressed length is written in a varint padded to the width the reference
//!   reserves, so the framing bytes match too.

use rustc_hash::FxHashMap as HashMap;

use crate::compress::{self, Compression};
use crate::error::{Error, ErrorCode, Result};
use crate::fragment::{Fragment, FragmentRef, MARK_BOOL, MARK_KEY, MARK_POS};
use crate::header;
use crate::scalars::{write_float, write_int, write_raw_string};
use crate::tag::*;
use crate::value::{Key, Value};
use crate::varint;

/// Encoder settings. `Default` is protocol 5, no compression, no dedupe, not canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncoderOptions {
    /// Protocol version to emit: 3, 4 or 5.
    pub protocol: u8,
    /// Body compression.
    pub compression: Compression,
    /// Bodies smaller than this many bytes are not compressed (reference default: 1024).
    pub compress_threshold: usize,
    /// De-duplicate string values longer than 3 bytes with `COPY` (the events-blob form does).
    pub dedupe_strings: bool,
    /// Sort hash keys and always use the `REFN` container form, for stable output.
    pub canonical: bool,
    /// Deepest nesting accepted (guards the recursion; default 512, the decoder's default).
    pub max_depth: usize,
    /// When the document is an array, write where each element starts in its user header (the
    /// [element index](crate::index)): readers jump between elements without walking them, and
    /// decoders that do not know it skip it. Off by default (the reference writes no user
    /// header, so byte-identical output needs it off).
    pub element_index: bool,
}

impl Default for EncoderOptions {
    fn default() -> Self {
        EncoderOptions {
            protocol: header::MAX_PROTOCOL,
            compression: Compression::None,
            compress_threshold: 1024,
            dedupe_strings: false,
            canonical: false,
            max_depth: 512,
            element_index: false,
        }
    }
}

impl EncoderOptions {
    /// The original events system's blob form: protocol 3, zlib level 6, `dedupe_strings`.
    pub fn original_events() -> Self {
        EncoderOptions {
            protocol: 3,
            compression: Compression::Zlib { level: 6 },
            dedupe_strings: true,
            ..Default::default()
        }
    }
}

/// Largest body an [`ArrayEncoder`] writes (an element that would pass it is refused): its
/// back-reference positions are kept as `u32`. Far beyond any chunk or memory budget.
pub const MAX_STREAMED_BODY: usize = u32::MAX as usize;

/// Slots of the encoder's key cache (a power of two).
const KEY_CACHE: usize = 256;

/// Slots of the cache of keys found by their bytes (a power of two).
const KEY_TAGS: usize = 256;

/// Slots of the cache of de-duplicated string values found by their bytes (a power of two;
/// 10 KiB, allocated only with `dedupe_strings`). Events repeat a few hundred values (hosts,
/// user agents, methods, tags) among unique ones.
const VALUE_TAGS: usize = 256;

/// A key (or string value) written (or copied) before, found by its bytes: its length, first 8
/// bytes (zero-padded) and UTF-8 flag, and where its tag and bytes are in the body (`at` 0:
/// empty).
#[derive(Debug, Clone, Copy, Default)]
struct KeyTag {
    head: u64,
    len: usize,
    utf8: bool,
    at: usize,
    data: usize,
}

/// The first 8 bytes of `s` (zero-padded) and the cache slot of `s`.
#[inline]
fn key_head(s: &[u8]) -> (u64, usize) {
    // Assembled in a register: a variable-length copy into a stack word (a `memcpy` call, then a
    // wide load of narrow stores) stalled on store forwarding, half of `push_fragment`'s time.
    let head = match s.get(..8) {
        Some(word) => {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            u64::from_le_bytes(w)
        }
        None => s
            .iter()
            .enumerate()
            .fold(0u64, |h, (i, &b)| h | u64::from(b) << (8 * i)),
    };
    let mut x = (head ^ (s.len() as u64).rotate_right(8)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 32;
    (head, (x as usize) & (KEY_TAGS - 1))
}

/// The first 8 bytes of `s` (zero-padded) and the slot of `s` in the value cache. Values often
/// share their first bytes (`Mozilla/`, `https://`), so the slot also mixes in the last 8.
#[inline]
fn value_head(s: &[u8]) -> (u64, usize) {
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let (head, tail) = if s.len() >= 8 {
        (word(0), word(s.len() - 8))
    } else {
        let h = s
            .iter()
            .enumerate()
            .fold(0u64, |h, (i, &b)| h | u64::from(b) << (8 * i));
        (h, 0)
    };
    let mut x = (head ^ tail.rotate_left(29) ^ (s.len() as u64).rotate_right(8))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 32;
    (head, (x as usize) & (VALUE_TAGS - 1))
}

/// A reusable encoder; buffers and de-duplication tables are kept between documents.
#[derive(Debug)]
pub struct Encoder {
    opts: EncoderOptions,
    body: Vec<u8>,
    /// First offset of each hash key's content.
    keys: SeenStrings,
    /// The same, by the address of a key's shared bytes: the fast path for a key `Arc` seen
    /// before (how Perl's encoder finds repeated keys: by their shared-string pointer).
    key_ptrs: HashMap<usize, usize>,
    /// Recent `key_ptrs` hits, by pointer bits: `(pointer, offset)`, pointer 0 = empty.
    key_cache: Box<[(usize, usize); KEY_CACHE]>,
    /// Keys of fragments, by their bytes (see [`Encoder::key_bytes`]).
    key_tags: Box<[KeyTag; KEY_TAGS]>,
    /// First offset of each de-duplicated string value.
    strings: SeenStrings,
    /// Recent `strings` hits and insertions, direct-mapped by [`value_head`]: a hit skips
    /// hashing the whole string and probing the table. `VALUE_TAGS` slots with
    /// `dedupe_strings`, else none.
    value_tags: Box<[KeyTag]>,
    classes: HashMap<String, usize>,
    depth: usize,
    /// Set by [`ArrayEncoder`]: back-references are recorded and keys in `key_ptrs` are held,
    /// because its elements are dropped between pushes.
    streaming: bool,
    /// Positions in `body` of tags followed by a back-reference offset (`COPY`, `OBJECTV`, …),
    /// in order; only while `streaming`. `u32`: an events document has about one per key, as
    /// many bytes as its body at `usize`; a streamed body stays under [`MAX_STREAMED_BODY`].
    backrefs: Vec<u32>,
    /// Keys whose addresses are in `key_ptrs`, kept alive so that no other key can be given
    /// the same address while the document is open; only while `streaming`.
    held_keys: Vec<Key>,
}

impl Encoder {
    /// An encoder with the given options.
    pub fn new(opts: EncoderOptions) -> Result<Encoder> {
        if !(1..=header::MAX_PROTOCOL).contains(&opts.protocol) || opts.protocol < 3 {
            return Err(Error::new(ErrorCode::BadVersion(opts.protocol), 0));
        }
        let value_slots = if opts.dedupe_strings { VALUE_TAGS } else { 0 };
        Ok(Encoder {
            opts,
            body: Vec::new(),
            keys: Default::default(),
            key_ptrs: HashMap::default(),
            key_cache: Box::new([(0, 0); KEY_CACHE]),
            key_tags: Box::new([KeyTag::default(); KEY_TAGS]),
            strings: Default::default(),
            value_tags: vec![KeyTag::default(); value_slots].into_boxed_slice(),
            classes: HashMap::default(),
            depth: 0,
            streaming: false,
            backrefs: Vec::new(),
            held_keys: Vec::new(),
        })
    }

    /// The options in force.
    pub fn options(&self) -> &EncoderOptions {
        &self.opts
    }

    /// Encode `value` as a complete document.
    pub fn encode(&mut self, value: &Value) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.encode_into(value, &mut out)?;
        Ok(out)
    }

    /// Encode `value` as a complete document appended to `out`.
    pub fn encode_into(&mut self, value: &Value, out: &mut Vec<u8>) -> Result<()> {
        self.reset(false);
        let mut starts = Vec::new();
        match value {
            Value::Array(items) if self.opts.element_index => {
                // What `value` writes for an array, noting where each element starts.
                self.enter()?;
                let mut head = [0u8; 12];
                let n = array_header(items.len(), self.opts.canonical, &mut head);
                self.body.extend_from_slice(&head[..n]);
                starts.reserve(items.len());
                for item in items {
                    starts.push(self.body.len());
                    self.value(item)?;
                }
                self.depth -= 1;
            }
            _ => self.value(value)?,
        }
        let body = std::mem::take(&mut self.body);
        let result = finish_document(&self.opts, &body, &starts, out);
        self.body = body;
        result
    }

    /// Forget the document being written (keeping the buffers' capacity).
    fn reset(&mut self, streaming: bool) {
        self.body.clear();
        self.keys.clear();
        self.key_ptrs.clear();
        self.key_cache.fill((0, 0));
        self.key_tags.fill(KeyTag::default());
        self.strings.clear();
        self.value_tags.fill(KeyTag::default());
        self.classes.clear();
        self.depth = 0;
        self.streaming = streaming;
        self.backrefs.clear();
        self.held_keys.clear();
    }

    /// Append a fragment's bytes, running its keys and strings through the de-duplication
    /// tables (in order, as `value` would meet them) and its booleans through the protocol's
    /// form.
    fn relink(&mut self, f: FragmentRef<'_>) -> Result<()> {
        let src = f.body;
        // No `reserve` of the whole fragment: the body grows exactly when `value` would grow it,
        // so memory accounting (`memory_bytes`) does not depend on which path an event took.
        let mut last = 0;
        for &m in f.marks {
            let at = (m & MARK_POS) as usize;
            let chunk = src
                .get(last..at)
                .ok_or_else(|| Error::new(ErrorCode::BadOffset(at as u64), at))?;
            self.body.extend_from_slice(chunk);
            if m & !MARK_POS == MARK_BOOL {
                let yes = src.get(at) == Some(&YES);
                self.body.push(match (self.opts.protocol >= 5, yes) {
                    (true, true) => YES,
                    (true, false) => NO,
                    (false, true) => TRUE,
                    (false, false) => FALSE,
                });
                last = at + 1;
                continue;
            }
            let tag = *src.get(at).ok_or_else(|| Error::new(ErrorCode::Eof, at))?;
            let mut data = at + 1;
            let (len, utf8) = match tag {
                STR_UTF8 => (varint::read(src, &mut data)? as usize, true),
                BINARY => (varint::read(src, &mut data)? as usize, false),
                t if t & 0xE0 == SHORT_BINARY_0 => ((t & 0x1F) as usize, false),
                t => return Err(Error::new(ErrorCode::BadTag(t), at)),
            };
            let bytes = src
                .get(data..data + len)
                .ok_or_else(|| Error::new(ErrorCode::Eof, data))?;
            if m & !MARK_POS == MARK_KEY {
                self.key_bytes(bytes, utf8);
            } else {
                self.string(bytes, utf8);
            }
            last = data + len;
        }
        self.body
            .extend_from_slice(src.get(last..).unwrap_or_default());
        Ok(())
    }

    /// Refuses an element that took a streamed body to [`MAX_STREAMED_BODY`] (its positions
    /// would not fit `backrefs`).
    #[inline]
    fn check_streamed_size(&self) -> Result<()> {
        if self.body.len() > MAX_STREAMED_BODY {
            return Err(Error::new(
                ErrorCode::UnsupportedTag("array document body of 4 GiB or more"),
                self.body.len(),
            ));
        }
        Ok(())
    }

    /// Offsets are 1-based from the start of the body (protocol 2+).
    fn offset(&self) -> usize {
        self.body.len() + 1
    }

    fn value(&mut self, v: &Value) -> Result<()> {
        match v {
            Value::Undef => self.body.push(UNDEF),
            Value::Bool(b) => self.body.push(match (self.opts.protocol >= 5, *b) {
                (true, true) => YES,
                (true, false) => NO,
                (false, true) => TRUE,
                (false, false) => FALSE,
            }),
            Value::Int(i) => self.int(*i),
            Value::UInt(u) => {
                self.body.push(VARINT);
                varint::write(&mut self.body, *u);
            }
            Value::Float(f) => self.float(*f),
            Value::Binary(b) => self.string(b, false),
            Value::String(s) => self.string(s.as_bytes(), !s.is_ascii()),
            Value::Array(items) => {
                self.enter()?;
                let n = items.len();
                if n < 16 && !self.opts.canonical {
                    self.body.push(ARRAYREF_0 | n as u8);
                } else {
                    self.body.extend_from_slice(&[REFN, ARRAY]);
                    varint::write(&mut self.body, n as u64);
                }
                for item in items {
                    self.value(item)?;
                }
                self.depth -= 1;
            }
            Value::Hash(entries) => {
                self.enter()?;
                let n = entries.len();
                if n < 16 && !self.opts.canonical {
                    self.body.push(HASHREF_0 | n as u8);
                } else {
                    self.body.extend_from_slice(&[REFN, HASH]);
                    varint::write(&mut self.body, n as u64);
                }
                if self.opts.canonical {
                    let mut sorted: Vec<&(Key, Value)> = entries.iter().collect();
                    sorted.sort_by(|(a, _), (b, _)| canonical_key_order(a, b));
                    for (k, v) in sorted {
                        self.key(k);
                        self.value(v)?;
                    }
                } else {
                    for (k, v) in entries {
                        self.key(k);
                        self.value(v)?;
                    }
                }
                self.depth -= 1;
            }
            Value::Ref(inner) => {
                self.enter()?;
                self.body.push(REFN);
                self.value(inner)?;
                self.depth -= 1;
            }
            Value::Object(o) => {
                self.enter()?;
                self.class(&o.class, o.frozen);
                self.value(&o.value)?;
                self.depth -= 1;
            }
            Value::Regexp(r) => {
                // As Perl writes `qr//`: a reference to a REGEXP blessed into "Regexp".
                self.class("Regexp", false);
                self.body.extend_from_slice(&[REFN, REGEXP]);
                self.value(&r.pattern)?;
                self.raw_string(r.flags.as_bytes(), false);
            }
            // Sharing is not re-created: each use is written out in full.
            Value::Shared(inner) => self.value(inner)?,
        }
        Ok(())
    }

    /// `OBJECT <class>` the first time a class is seen, `OBJECTV <offset>` after that.
    fn class(&mut self, class: &str, frozen: bool) {
        let (tag, tagv) = if frozen {
            (OBJECT_FREEZE, OBJECTV_FREEZE)
        } else {
            (OBJECT, OBJECTV)
        };
        if let Some(&at) = self.classes.get(class) {
            if self.streaming {
                self.backrefs.push(self.body.len() as u32);
            }
            self.body.push(tagv);
            varint::write(&mut self.body, at as u64);
        } else {
            self.body.push(tag);
            let at = self.offset();
            self.classes.insert(class.to_owned(), at);
            self.raw_string(class.as_bytes(), !class.is_ascii());
        }
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > self.opts.max_depth {
            return Err(Error::new(
                ErrorCode::DepthLimit(self.opts.max_depth),
                self.body.len(),
            ));
        }
        Ok(())
    }

    #[inline]
    fn int(&mut self, i: i64) {
        write_int(&mut self.body, i);
    }

    fn float(&mut self, f: f64) {
        write_float(&mut self.body, f);
    }

    /// A string value, de-duplicated when asked to. The value cache only ever holds what the
    /// table would answer (the first occurrence), so it changes no output byte.
    #[inline]
    fn string(&mut self, bytes: &[u8], utf8: bool) {
        if self.opts.dedupe_strings && bytes.len() > 3 {
            let (head, slot) = value_head(bytes);
            let e = self.value_tags[slot];
            if e.at != 0
                && e.head == head
                && e.len == bytes.len()
                && e.utf8 == utf8
                && (bytes.len() <= 8
                    || same_bytes(&self.body[e.data + 8..e.data + e.len], &bytes[8..]))
            {
                self.copy(e.at);
                return;
            }
            let hash = SeenStrings::hash(bytes, utf8);
            match self.strings.get_entry(&self.body, hash, bytes, utf8) {
                Some((at, data)) => {
                    self.copy(at);
                    // Cached only once seen twice: unique values (ids, addresses) would
                    // otherwise evict the repeated ones.
                    self.value_tags[slot] = KeyTag {
                        head,
                        len: bytes.len(),
                        utf8,
                        at,
                        data,
                    };
                }
                None => {
                    let here = self.offset();
                    let data = self.raw_string(bytes, utf8);
                    self.strings.insert(hash, here, data, bytes.len(), utf8);
                }
            }
            return;
        }
        self.raw_string(bytes, utf8);
    }

    /// A hash key: always de-duplicated.
    #[inline]
    fn key(&mut self, k: &Key) {
        // The value tree is borrowed for the whole encode, so no key is freed and no address
        // reused while `key_ptrs` is in use.
        let ptr = k.ptr();
        // A direct-mapped cache in front of the map: events repeat the same few dozen keys, and
        // two loads and a compare beat hashing (35% of plain-event encode time before).
        let slot = (ptr >> 4) & (KEY_CACHE - 1);
        let (cached_ptr, cached_at) = self.key_cache[slot];
        if cached_ptr == ptr {
            self.copy(cached_at);
            return;
        }
        if let Some(&at) = self.key_ptrs.get(&ptr) {
            self.key_cache[slot] = (ptr, at);
            self.copy(at);
            return;
        }
        if self.streaming {
            self.held_keys.push(k.clone());
        }
        let (bytes, utf8) = match k {
            Key::Binary(b) => (&b[..], false),
            Key::Utf8(s) => (s.as_bytes(), !s.is_ascii()),
        };
        let hash = SeenStrings::hash(bytes, utf8);
        if let Some(at) = self.keys.get(&self.body, hash, bytes, utf8) {
            self.key_ptrs.insert(ptr, at);
            self.copy(at);
            return;
        }
        let here = self.offset();
        let data = self.raw_string(bytes, utf8);
        self.keys.insert(hash, here, data, bytes.len(), utf8);
        self.key_ptrs.insert(ptr, here);
    }

    /// A hash key given by its bytes (from a fragment): always de-duplicated, against the same
    /// table as [`key`](Self::key), with a direct-mapped cache in front (events repeat the same
    /// few dozen keys).
    #[inline]
    fn key_bytes(&mut self, bytes: &[u8], utf8: bool) {
        let (head, slot) = key_head(bytes);
        let e = self.key_tags[slot];
        if e.at != 0
            && e.head == head
            && e.len == bytes.len()
            && e.utf8 == utf8
            && (bytes.len() <= 8 || same_bytes(&self.body[e.data + 8..e.data + e.len], &bytes[8..]))
        {
            self.copy(e.at);
            return;
        }
        let hash = SeenStrings::hash(bytes, utf8);
        let (at, data) = match self.keys.get_entry(&self.body, hash, bytes, utf8) {
            Some(found) => {
                self.copy(found.0);
                found
            }
            None => {
                let here = self.offset();
                let data = self.raw_string(bytes, utf8);
                self.keys.insert(hash, here, data, bytes.len(), utf8);
                (here, data)
            }
        };
        self.key_tags[slot] = KeyTag {
            head,
            len: bytes.len(),
            utf8,
            at,
            data,
        };
    }

    #[inline]
    fn copy(&mut self, at: usize) {
        if self.streaming {
            self.backrefs.push(self.body.len() as u32);
        }
        self.body.push(COPY);
        varint::write(&mut self.body, at as u64);
    }

    /// Write a string tag and its bytes; returns where the bytes start in the body.
    #[inline]
    fn raw_string(&mut self, bytes: &[u8], utf8: bool) -> usize {
        write_raw_string(&mut self.body, bytes, utf8)
    }
}

/// Bytes a new [`ArrayEncoder`] reserves in front of its elements for the array header: the
/// size of `REFN ARRAY <count>` for 128-16383 elements. Then each document guesses the header
/// of the one before it (see [`ArrayEncoder::finish_into`]).
const ARRAY_HEADER_GUESS: usize = 4;

/// Encodes a document whose body is an array, one element at a time, so that the elements need
/// not be kept (nor copied into one [`Value::Array`]) until the document is finished. The result
/// is byte for byte what [`Encoder::encode_into`] writes for the whole array with the same
/// options; buffers and tables are kept for the next document.
///
/// The array header's length depends on the final count, and `COPY` offsets count from the start
/// of the body, so elements are written after a guessed header length and, when the guess is
/// wrong, moved once at the end with every back-reference (which this encoder records) fixed up.
#[derive(Debug)]
pub struct ArrayEncoder {
    enc: Encoder,
    count: usize,
    /// The body with the real header, when it differs in length from the guess.
    moved: Vec<u8>,
    /// (end of a back-reference in the old body whose new offset changed length, shift of
    /// everything from there on): sorted, one entry per change.
    shifts: Vec<(usize, isize)>,
    /// Where each element pushed starts in the body (with the guessed header), for the
    /// element index; only with [`EncoderOptions::element_index`].
    starts: Vec<usize>,
    /// The elements' origins, runs `(seq, n)` in element order ([`ArrayEncoder::push_origin`]);
    /// only with [`EncoderOptions::element_index`].
    origins: Vec<(u64, u32)>,
    /// Bytes reserved in front of the elements for the array header.
    header_guess: usize,
}

impl ArrayEncoder {
    /// An encoder for array documents with `opts` (as [`Encoder::new`]).
    pub fn new(opts: EncoderOptions) -> Result<ArrayEncoder> {
        let mut enc = Encoder::new(opts)?;
        enc.reset(true);
        enc.body.resize(ARRAY_HEADER_GUESS, 0);
        Ok(ArrayEncoder {
            enc,
            count: 0,
            moved: Vec::new(),
            shifts: Vec::new(),
            starts: Vec::new(),
            origins: Vec::new(),
            header_guess: ARRAY_HEADER_GUESS,
        })
    }

    /// Reserves the array header of a document of about `n` elements, before its first
    /// element (ignored after): a right guess spares moving every element at
    /// [`finish_into`](Self::finish_into); a wrong one costs that move, as without a guess.
    pub fn expect_len(&mut self, n: usize) {
        if self.count != 0 || self.enc.body.len() != self.header_guess {
            return;
        }
        let mut header = [0u8; 12];
        self.header_guess = array_header(n, self.enc.opts.canonical, &mut header);
        self.enc.body.resize(self.header_guess, 0);
    }

    /// The options in force.
    pub fn options(&self) -> &EncoderOptions {
        &self.enc.opts
    }

    /// Elements written so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no element has been written yet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes held by the encoder's buffers (their capacity), kept between documents.
    pub fn retained_bytes(&self) -> usize {
        self.enc.body.capacity() + self.moved.capacity()
    }

    /// Bytes of the (uncompressed) body so far.
    pub fn body_len(&self) -> usize {
        self.enc.body.len()
    }

    /// Estimated heap bytes held by this encoder: the capacities of its buffers and of its
    /// de-duplication tables (entries of the string and key tables, back-reference positions,
    /// held keys). A caller bounding memory per open document counts this.
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let e = &self.enc;
        // hashbrown tables: one entry plus one control byte per slot.
        let table = |slots: usize, entry: usize| slots * (entry + 1);
        self.retained_bytes()
            + table(e.keys.table.capacity(), size_of::<SeenString>())
            + table(e.strings.table.capacity(), size_of::<SeenString>())
            + table(e.key_ptrs.capacity(), 2 * size_of::<usize>())
            + e.backrefs.capacity() * size_of::<u32>()
            + e.held_keys.capacity() * size_of::<Key>()
            + self.shifts.capacity() * size_of::<(usize, isize)>()
            + self.starts.capacity() * size_of::<usize>()
            + self.origins.capacity() * size_of::<(u64, u32)>()
    }

    /// Records that the element just pushed came from source record `seq` (a WAL sequence
    /// number; 0: none), for the element index's origins (format version 2, see
    /// [`crate::index`]). Call it once per pushed element, in order, or not at all: origins that
    /// do not cover every element are left out at [`finish_into`](Self::finish_into). Without
    /// [`EncoderOptions::element_index`] it does nothing. Consecutive elements of one record
    /// share a run: no allocation per element.
    #[inline]
    pub fn push_origin(&mut self, seq: u64) {
        if !self.enc.opts.element_index {
            return;
        }
        match self.origins.last_mut() {
            Some((last, n)) if *last == seq && *n < u32::MAX => *n += 1,
            _ => self.origins.push((seq, 1)),
        }
    }

    /// The origins recorded for the document being written (runs `(seq, n)` in element order).
    pub fn origins(&self) -> &[(u64, u32)] {
        &self.origins
    }

    /// Append one element. On error (nesting deeper than `max_depth`, or a body that would pass
    /// [`MAX_STREAMED_BODY`]) nothing of it is kept and the document stays as it was.
    pub fn push(&mut self, value: &Value) -> Result<()> {
        let enc = &mut self.enc;
        let mark = enc.body.len();
        let backrefs = enc.backrefs.len();
        enc.depth = 0;
        // The array itself is the first level, as in a one-shot encode.
        let result = enc
            .enter()
            .and_then(|()| enc.value(value))
            .and_then(|()| enc.check_streamed_size());
        enc.depth = 0;
        if let Err(e) = result {
            self.rollback(mark, backrefs);
            return Err(e);
        }
        if enc.opts.element_index {
            self.starts.push(mark);
        }
        self.count += 1;
        Ok(())
    }

    /// Append one element given as a [`Fragment`]: the document gets the same bytes as
    /// [`push`](Self::push) of the fragment's value would write (see [`crate::fragment`]). On
    /// error (as [`push`](Self::push)) nothing of it is kept.
    pub fn push_fragment(&mut self, f: &Fragment) -> Result<()> {
        self.push_fragment_ref(f.as_ref())
    }

    /// [`push_fragment`](Self::push_fragment) of a borrowed fragment (e.g. one of a
    /// [`FragmentList`](crate::FragmentList)).
    pub fn push_fragment_ref(&mut self, f: FragmentRef<'_>) -> Result<()> {
        if self.enc.opts.canonical {
            // Keys must be sorted: go through the value (off the fast path by choice).
            return self.push(&f.to_value()?);
        }
        let enc = &mut self.enc;
        // The array itself is the first level, as in `push`.
        if f.depth + 1 > enc.opts.max_depth {
            return Err(Error::new(
                ErrorCode::DepthLimit(enc.opts.max_depth),
                enc.body.len(),
            ));
        }
        let mark = enc.body.len();
        let backrefs = enc.backrefs.len();
        if let Err(e) = enc.relink(f).and_then(|()| enc.check_streamed_size()) {
            self.rollback(mark, backrefs);
            return Err(e);
        }
        if enc.opts.element_index {
            self.starts.push(mark);
        }
        self.count += 1;
        Ok(())
    }

    /// Forget everything written after `mark` (a body length between elements).
    #[cold]
    fn rollback(&mut self, mark: usize, backrefs: usize) {
        let enc = &mut self.enc;
        enc.body.truncate(mark);
        enc.backrefs.truncate(backrefs);
        // Offsets are 1-based: an entry whose tag starts at `mark` or later has `at > mark`.
        enc.keys.table.retain(|e| e.at as usize <= mark);
        enc.strings.table.retain(|e| e.at as usize <= mark);
        enc.key_ptrs.retain(|_, at| *at <= mark);
        enc.classes.retain(|_, at| *at <= mark);
        enc.key_cache.fill((0, 0));
        enc.key_tags.fill(KeyTag::default());
        enc.value_tags.fill(KeyTag::default());
        // `held_keys` stays: entries kept in `key_ptrs` may name keys pushed after `mark`.
    }

    /// Append the complete document (header, array header, elements; compressed as the options
    /// say; with the element index, the [origins](Self::push_origin) when they cover every
    /// element) to `out`, and start a new, empty one.
    pub fn finish_into(&mut self, out: &mut Vec<u8>) -> Result<()> {
        let mut header = [0u8; 12];
        let header_len = array_header(self.count, self.enc.opts.canonical, &mut header);
        if self.enc.opts.element_index && self.starts.len() != self.count {
            // Elements written other than by `push`: find them by walking the body.
            self.starts.clear();
            if let Some(found) = crate::lazy::element_starts(
                &self.enc.body[self.header_guess..],
                self.header_guess,
                self.count,
            ) {
                self.starts = found;
            }
        }
        let result = if header_len == self.header_guess {
            self.enc.body[..header_len].copy_from_slice(&header[..header_len]);
            finish_document_with_origins(
                &self.enc.opts,
                &self.enc.body,
                &self.starts,
                &self.origins,
                out,
            )
        } else {
            self.relocate(&header[..header_len]).and_then(|()| {
                self.relocate_starts(header_len);
                finish_document_with_origins(
                    &self.enc.opts,
                    &self.moved,
                    &self.starts,
                    &self.origins,
                    out,
                )
            })
        };
        // The next document (the same stream's next second, mostly) likely has as many
        // elements: reserving its header's size spares moving every element at its end
        // (5-7 % of a live shard's CPU at 1 M events/s, where groups pass 16,383 a second).
        self.header_guess = header_len;
        self.clear();
        result
    }

    /// Move the recorded element starts to their places in `moved` (after `relocate`).
    fn relocate_starts(&mut self, header_len: usize) {
        let first_shift = header_len as isize - self.header_guess as isize;
        let mut i = 0;
        for s in self.starts.iter_mut() {
            // Starts and shift ends both increase: one merge pass.
            while i < self.shifts.len() && self.shifts[i].0 <= *s {
                i += 1;
            }
            let shift = if i == 0 {
                first_shift
            } else {
                self.shifts[i - 1].1
            };
            *s = (*s as isize + shift) as usize;
        }
    }

    /// Drop the document being written, keeping buffers and tables' capacity.
    pub fn clear(&mut self) {
        self.enc.reset(true);
        self.enc.body.resize(self.header_guess, 0);
        self.count = 0;
        self.starts.clear();
        self.origins.clear();
    }

    /// Write `header` + the elements into `moved`, fixing every back-reference offset for the
    /// elements' new positions.
    fn relocate(&mut self, header: &[u8]) -> Result<()> {
        let body = &self.enc.body;
        let moved = &mut self.moved;
        moved.clear();
        moved.reserve(body.len() + 16);
        moved.extend_from_slice(header);
        self.shifts.clear();
        let first_shift = header.len() as isize - self.header_guess as isize;
        let mut shift = first_shift;
        let mut last = self.header_guess;
        for &pos in &self.enc.backrefs {
            let pos = pos as usize;
            // Tag byte included; the offset varint follows it.
            moved.extend_from_slice(&body[last..=pos]);
            let mut end = pos + 1;
            let target = (varint::read(body, &mut end)? as usize).saturating_sub(1);
            // Targets lie before the reference, so every shift that applies to them is known.
            let i = self.shifts.partition_point(|&(e, _)| e <= target);
            let target_shift = if i == 0 {
                first_shift
            } else {
                self.shifts[i - 1].1
            };
            let new = (target as isize + target_shift) as u64 + 1;
            varint::write(moved, new);
            let grown = varint::len(new) as isize - (end - pos - 1) as isize;
            if grown != 0 {
                // Only where the shift changes: most offsets keep their varint length, and a
                // shift list with an entry per reference made every lookup a cache-missing
                // binary search over millions (25 % of a live server's CPU once).
                shift += grown;
                self.shifts.push((end, shift));
            }
            last = end;
        }
        moved.extend_from_slice(&body[last..]);
        Ok(())
    }
}

/// The array header the encoder writes for `n` elements; returns its length.
fn array_header(n: usize, canonical: bool, out: &mut [u8; 12]) -> usize {
    if n < 16 && !canonical {
        out[0] = ARRAYREF_0 | n as u8;
        return 1;
    }
    let mut v = Vec::with_capacity(12);
    v.extend_from_slice(&[REFN, ARRAY]);
    varint::write(&mut v, n as u64);
    out[..v.len()].copy_from_slice(&v);
    v.len()
}

/// Strings already written, found by content without keeping a copy of it: an entry remembers
/// where the bytes lie in the body being written, and a lookup compares against them there.
/// Public for encoders that write a body without a [`Value`] tree (the Python codec).
///
/// Entries keep positions as `u32` (24 bytes, not 40: an events group's table is its encoder's
/// largest buffer after the body). A string whose offsets or length do not fit (4 GiB into a
/// body) is not remembered, so not de-duplicated; streamed bodies stay below that
/// ([`MAX_STREAMED_BODY`]).
#[derive(Debug, Default)]
pub struct SeenStrings {
    table: hashbrown::HashTable<SeenString>,
}

#[derive(Debug, Clone, Copy)]
struct SeenString {
    hash: u64,
    /// Offset of the string's tag, as COPY names it.
    at: u32,
    /// Index of its bytes in the body.
    data: u32,
    len: u32,
    utf8: bool,
}

impl SeenStrings {
    /// The table's hash of a string's bytes and UTF-8 flag.
    #[inline]
    pub fn hash(bytes: &[u8], utf8: bool) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one((bytes, utf8))
    }

    /// The offset (as `COPY` names it) of an equal string already written in `body`.
    #[inline]
    pub fn get(&self, body: &[u8], hash: u64, bytes: &[u8], utf8: bool) -> Option<usize> {
        self.get_entry(body, hash, bytes, utf8).map(|(at, _)| at)
    }

    /// `(at, data)` of a string seen before.
    #[inline]
    fn get_entry(
        &self,
        body: &[u8],
        hash: u64,
        bytes: &[u8],
        utf8: bool,
    ) -> Option<(usize, usize)> {
        self.table
            .find(hash, |e| {
                let (data, len) = (e.data as usize, e.len as usize);
                len == bytes.len() && e.utf8 == utf8 && same_bytes(&body[data..data + len], bytes)
            })
            .map(|e| (e.at as usize, e.data as usize))
    }

    /// Remember a string written at offset `at` whose `len` bytes start at index `data` of the
    /// body (unless one of them does not fit a `u32`: see the [type docs](Self)).
    #[inline]
    pub fn insert(&mut self, hash: u64, at: usize, data: usize, len: usize, utf8: bool) {
        let (Ok(at), Ok(data), Ok(len)) =
            (u32::try_from(at), u32::try_from(data), u32::try_from(len))
        else {
            return;
        };
        self.table.insert_unique(
            hash,
            SeenString {
                hash,
                at,
                data,
                len,
                utf8,
            },
            |e| e.hash,
        );
    }

    /// Forget every string (keeping the table's capacity).
    pub fn clear(&mut self) {
        self.table.clear();
    }
}

/// `a == b` for slices of equal length, without a `memcmp` call for the short strings events
/// are made of (the call costs more than the comparison there).
#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(w)
    };
    if (8..=16).contains(&n) {
        // Two overlapping words cover the whole string.
        return word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8);
    }
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    a == b
}

/// Key order of the reference's `sort_keys => 1` (`he_sv_islt_fast` in its encoder): by byte
/// length of the key in UTF-8, then UTF-8 keys before binary ones, then by bytes. (Perl keeps a
/// Latin-1-only key downgraded, but sorts and writes it upgraded, so its UTF-8 form counts.)
pub fn canonical_key_order(a: &Key, b: &Key) -> std::cmp::Ordering {
    let utf8 = |k: &Key| matches!(k, Key::Utf8(s) if !s.is_ascii());
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    ab.len()
        .cmp(&bb.len())
        .then_with(|| utf8(b).cmp(&utf8(a)))
        .then_with(|| ab.cmp(bb))
}

/// Write header + (possibly compressed) body; with [`EncoderOptions::element_index`], the header
/// carries the index of the elements starting at `starts` (none when `starts` is empty).
pub fn finish_document(
    opts: &EncoderOptions,
    body: &[u8],
    starts: &[usize],
    out: &mut Vec<u8>,
) -> Result<()> {
    finish_document_with_origins(opts, body, starts, &[], out)
}

/// [`finish_document`] whose element index also carries the elements' `origins` (runs
/// `(seq, n)`; left out unless they describe exactly the indexed elements: see
/// [`crate::index::write_with_origins`]).
pub fn finish_document_with_origins(
    opts: &EncoderOptions,
    body: &[u8],
    starts: &[usize],
    origins: &[(u64, u32)],
    out: &mut Vec<u8>,
) -> Result<()> {
    let mut user = Vec::new();
    if opts.element_index {
        crate::index::write_with_origins(starts, body.len(), origins, &mut user);
    }
    let compression = opts.compression;
    if compression != Compression::None && body.len() >= opts.compress_threshold {
        let header_at = out.len();
        header::write_with_user_header(out, opts.protocol, compression.encoding(), &user);
        if compress::compress_framed(compression, body, out)? {
            return Ok(());
        }
        out.truncate(header_at);
    }
    header::write_with_user_header(out, opts.protocol, header::Encoding::Raw, &user);
    out.extend_from_slice(body);
    Ok(())
}

/// Encode `value` with the given options.
pub fn to_vec(value: &Value, opts: &EncoderOptions) -> Result<Vec<u8>> {
    Encoder::new(opts.clone())?.encode(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_walks_elements_that_push_did_not_record() {
        let opts = EncoderOptions {
            element_index: true,
            ..EncoderOptions::default()
        };
        let items: Vec<Value> = (0..40)
            .map(|i| Value::Array(vec![Value::Int(i); (i % 5) as usize]))
            .collect();
        let mut enc = ArrayEncoder::new(opts.clone()).unwrap();
        for item in &items {
            enc.push(item).unwrap();
        }
        // As if some elements had been written another way than `push`.
        enc.starts.truncate(3);
        let mut doc = Vec::new();
        enc.finish_into(&mut doc).unwrap();
        let want = to_vec(&Value::Array(items), &opts).unwrap();
        assert_eq!(doc, want);
        let h = header::parse(&doc).unwrap();
        assert!(h.user_header.is_some(), "indexed by walking");
    }
}
