//! Decoder: a Sereal document in, a [`Value`] tree out.
//!
//! One pass over the body with explicit bounds on everything the input controls: nesting depth,
//! decompressed size, string lengths, element counts and the total number of values (which also
//! bounds the work `COPY` can make us repeat). Nothing in here can panic on input.

use std::collections::HashMap;
use std::sync::Arc;

use crate::compress;
use crate::cursor::{Cursor, Input};
use crate::error::{Error, ErrorCode, Result};
use crate::header::{self, Encoding, Header};
use crate::tag::*;
use crate::value::{Hash, Key, Object, Regexp, Value};
use crate::varint;

/// Bounds on what a document may make the decoder do. The defaults keep any input of up to
/// 10 MB within about 1 GB of memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of containers and references (default 512).
    pub max_depth: usize,
    /// Largest decompressed body, in bytes (default 256 MiB).
    pub max_decompressed_bytes: usize,
    /// Longest single string, in bytes (default 64 MiB).
    pub max_string_bytes: usize,
    /// Most elements in one array or pairs in one hash (default 8 Mi).
    pub max_elements: usize,
    /// Most values in one document, `COPY` expansions included (default 8 Mi ≈ 256 MiB of tree).
    pub max_values: usize,
    /// Most string bytes materialised for one document, `COPY` expansions included (default 256 MiB).
    pub max_total_string_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_depth: 512,
            max_decompressed_bytes: 256 << 20,
            max_string_bytes: 64 << 20,
            max_elements: 8 << 20,
            max_values: 8 << 20,
            max_total_string_bytes: 256 << 20,
        }
    }
}

/// A whole decoded document: header facts, optional user header, body.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// The parsed header.
    pub header: Header,
    /// The decoded user meta data (protocol 2+), if present.
    pub user_header: Option<Value>,
    /// The decoded body.
    pub body: Value,
    /// Bytes of the input this document occupied (documents may be concatenated).
    pub len: usize,
}

/// The located (and if needed decompressed) body of a document.
#[derive(Debug)]
pub struct Body<'a> {
    /// The parsed header.
    pub header: Header,
    /// The body bytes: a slice of the document, or of the decompression buffer.
    pub bytes: &'a [u8],
    /// Subtract from a document offset (as written in REFP/COPY/…) to get an index in `bytes`.
    pub offset_base: usize,
    /// Added to an index in `bytes` to report an error offset (the header length).
    pub error_base: usize,
    /// End of the compressed data in the document, or `None` for a raw body (ends with its item).
    pub compressed_end: Option<usize>,
}

/// Parse the header and expose the body bytes, decompressing into `scratch` if needed (under
/// `limits.max_decompressed_bytes`). For decoders that walk a body without a [`Value`] tree.
pub fn open<'a>(doc: &'a [u8], limits: &Limits, scratch: &'a mut Vec<u8>) -> Result<Body<'a>> {
    let header = header::parse(doc)?;
    // Protocol 1 offsets count from the start of the document, later ones from the body (1-based).
    let offset_base = if header.version == 1 {
        header.body_offset
    } else {
        1
    };
    if header.encoding == Encoding::Raw {
        let bytes = &doc[header.body_offset..];
        let error_base = header.body_offset;
        return Ok(Body {
            header,
            bytes,
            offset_base,
            error_base,
            compressed_end: None,
        });
    }
    let framed = compress::locate(doc, header.encoding, header.body_offset)?;
    compress::decompress(
        header.encoding,
        &framed,
        limits.max_decompressed_bytes,
        scratch,
    )?;
    let end = framed.end;
    let error_base = header.body_offset;
    Ok(Body {
        header,
        bytes: scratch.as_slice(),
        offset_base,
        error_base,
        compressed_end: Some(end),
    })
}

/// The body of `doc` as plain bytes (decompressed if needed), e.g. to compare two documents'
/// bodies or to look at what a compressed blob holds.
pub fn body_bytes(doc: &[u8], limits: &Limits) -> Result<Vec<u8>> {
    let mut scratch = Vec::new();
    let body = open(doc, limits, &mut scratch)?;
    Ok(body.bytes.to_vec())
}

/// A reusable decoder: holds limits and a decompression buffer that is recycled between calls.
#[derive(Debug, Default)]
pub struct Decoder {
    limits: Limits,
    scratch: Vec<u8>,
}

impl Decoder {
    /// A decoder with the default [`Limits`].
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// A decoder with custom limits.
    pub fn with_limits(limits: Limits) -> Decoder {
        Decoder {
            limits,
            scratch: Vec::new(),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Decode the body of the document that makes up all of `doc`.
    pub fn decode(&mut self, doc: &[u8]) -> Result<Value> {
        let d = self.decode_document(doc)?;
        if d.len != doc.len() {
            return Err(Error::new(ErrorCode::TrailingBytes, d.len));
        }
        Ok(d.body)
    }

    /// Decode the document at the start of `doc` (header, user header and body); trailing bytes
    /// are allowed and `Document::len` says where the next document starts.
    pub fn decode_document(&mut self, doc: &[u8]) -> Result<Document> {
        let header = header::parse(doc)?;
        let user_header = match &header.user_header {
            Some(range) => {
                let bytes = &doc[range.clone()];
                // The user header is a self-contained body with its own 1-based offsets.
                let mut p = Parser::new(bytes, 1, range.start, &self.limits);
                let v = p.read_value()?;
                Some(v)
            }
            None => None,
        };
        let limits = &self.limits;
        let body = open(doc, limits, &mut self.scratch)?;
        let mut p = Parser::new(body.bytes, body.offset_base, body.error_base, limits);
        let value = p.read_value()?;
        p.skip_pad();
        let len = match body.compressed_end {
            Some(end) => {
                if p.pos() != body.bytes.len() {
                    return Err(Error::new(
                        ErrorCode::TrailingBytes,
                        p.pos() + body.error_base,
                    ));
                }
                end
            }
            None => body.error_base + p.pos(),
        };
        Ok(Document {
            header: body.header,
            user_header,
            body: value,
            len,
        })
    }
}

/// Decode the document that makes up all of `doc`, with default limits.
pub fn from_slice(doc: &[u8]) -> Result<Value> {
    Decoder::new().decode(doc)
}

/// Recursive-descent state over one body.
pub(crate) struct Parser<'a, 'l> {
    cur: Cursor<'a>,
    limits: &'l Limits,
    depth: usize,
    values_left: usize,
    string_bytes_left: usize,
    /// Items carrying the track bit, by body index; `None` while still being decoded.
    tracked: HashMap<usize, Option<Tracked>>,
    /// Inside a COPY expansion, where a further COPY may only name a string.
    in_copy: bool,
    /// Keys already read at a body index that COPY names: encoders write every repeated hash
    /// key as a COPY of its first occurrence, so this turns almost every key into an `Arc` clone.
    copied_keys: rustc_hash::FxHashMap<usize, Key>,
}

impl<'a, 'l> Parser<'a, 'l> {
    pub(crate) fn new(
        buf: &'a [u8],
        offset_base: usize,
        error_base: usize,
        limits: &'l Limits,
    ) -> Self {
        Parser {
            cur: Cursor::new(Input::new(buf, offset_base, error_base)),
            limits,
            depth: 0,
            values_left: limits.max_values,
            string_bytes_left: limits.max_total_string_bytes,
            tracked: HashMap::new(),
            in_copy: false,
            copied_keys: Default::default(),
        }
    }

    #[cold]
    fn err(&self, code: ErrorCode, at: usize) -> Error {
        self.cur.err(code, at)
    }

    /// The next body index to read.
    pub(crate) fn pos(&self) -> usize {
        self.cur.pos
    }

    fn skip_pad(&mut self) {
        while self.cur.peek().is_some_and(|b| b & !TRACK_FLAG == PAD) {
            self.cur.pos += 1;
        }
    }

    /// Turn a document offset into a body index that lies strictly before `before`.
    fn back_offset(&self, offset: u64, before: usize) -> Result<usize> {
        self.cur.input.back_offset(offset, before)
    }

    fn string_len(&mut self, at: usize) -> Result<usize> {
        let max = self.limits.max_string_bytes;
        self.cur.input.string_len_at(&mut self.cur.pos, at, max)
    }

    #[inline]
    fn charge_string(&mut self, len: usize, at: usize) -> Result<()> {
        if len > self.string_bytes_left {
            return Err(self.err(
                ErrorCode::TotalStringBytesLimit(self.limits.max_total_string_bytes),
                at,
            ));
        }
        self.string_bytes_left -= len;
        Ok(())
    }

    fn count(&mut self, at: usize) -> Result<usize> {
        let max = self.limits.max_elements;
        self.cur.input.count_at(&mut self.cur.pos, at, max)
    }

    /// Capacity to reserve for `n` elements: each needs at least one byte of input, so a lying
    /// count cannot make us allocate more than the remaining input justifies.
    fn capacity_for(&self, n: usize) -> usize {
        n.min(self.cur.remaining())
    }

    fn enter(&mut self, at: usize) -> Result<()> {
        self.depth += 1;
        if self.depth > self.limits.max_depth {
            return Err(self.err(ErrorCode::DepthLimit(self.limits.max_depth), at));
        }
        Ok(())
    }

    /// Decode the item at body index `pos` (for callers that jump around a body, like the lazy
    /// reader); returns it and the index after it. Budgets are shared across calls.
    pub(crate) fn value_at(&mut self, pos: usize, in_copy: bool) -> Result<(Value, usize)> {
        self.cur.pos = pos;
        self.depth = 0;
        self.in_copy = in_copy;
        let v = self.read_value()?;
        Ok((v, self.cur.pos))
    }

    /// Read one item.
    pub(crate) fn read_value(&mut self) -> Result<Value> {
        if self.values_left == 0 {
            return Err(self.err(
                ErrorCode::TotalValuesLimit(self.limits.max_values),
                self.cur.pos,
            ));
        }
        self.values_left -= 1;
        let mut start = self.cur.pos;
        let mut tag = self.cur.byte()?;
        // PAD is skipped; the value is whatever follows. A loop, not recursion, so a run of PADs
        // cannot exhaust the stack. A PAD with the track bit is a WEAKEN the reference encoder
        // blanked out after the fact: references to its offset mean the item that follows.
        let mut tracked_pad = None;
        while tag & !TRACK_FLAG == PAD {
            if tag & TRACK_FLAG != 0 {
                tracked_pad = Some(start);
            }
            start = self.cur.pos;
            tag = self.cur.byte()?;
        }
        match tracked_pad {
            Some(pad) => self.track(pad, |p| p.read_item(start, tag)),
            None => self.read_item(start, tag),
        }
    }

    fn read_item(&mut self, start: usize, tag: u8) -> Result<Value> {
        if tag & TRACK_FLAG != 0 {
            return self.track(start, |p| p.read_tagged(start, tag & !TRACK_FLAG));
        }
        self.read_tagged(start, tag)
    }

    /// Decode an item that later REFP/ALIAS tags may name by the offset `at`.
    fn track(&mut self, at: usize, read: impl FnOnce(&mut Self) -> Result<Value>) -> Result<Value> {
        self.tracked.insert(at, None);
        let (values_before, strings_before) = (self.values_left, self.string_bytes_left);
        let shared = match read(self)? {
            Value::Shared(arc) => arc,
            v => Arc::new(v),
        };
        let t = Tracked {
            value: shared.clone(),
            values: values_before - self.values_left + 1,
            string_bytes: strings_before - self.string_bytes_left,
        };
        self.tracked.insert(at, Some(t));
        Ok(Value::Shared(shared))
    }

    fn read_tagged(&mut self, start: usize, tag: u8) -> Result<Value> {
        Ok(match tag {
            0x00..=0x0f => Value::Int(tag as i64),
            0x10..=0x1f => Value::Int(tag as i64 - 32),
            VARINT => {
                let v = self.cur.varint()?;
                match i64::try_from(v) {
                    Ok(i) => Value::Int(i),
                    Err(_) => Value::UInt(v),
                }
            }
            ZIGZAG => Value::Int(varint::unzigzag(self.cur.varint()?)),
            FLOAT => {
                let b = self.cur.take(4)?;
                Value::Float(f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
            }
            DOUBLE => {
                let b = self.cur.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Value::Float(f64::from_le_bytes(a))
            }
            LONG_DOUBLE => Value::Float(x87_extended_to_f64(self.cur.take(16)?)),
            FLOAT_128 => Value::Float(binary128_to_f64(self.cur.take(16)?)),
            UNDEF | CANONICAL_UNDEF => Value::Undef,
            TRUE | YES => Value::Bool(true),
            FALSE | NO => Value::Bool(false),
            BINARY => {
                let len = self.string_len(start)?;
                self.charge_string(len, start)?;
                Value::Binary(self.cur.take(len as u64)?.to_vec())
            }
            SHORT_BINARY_0..=0x7f => {
                let len = (tag & 0x1f) as usize;
                self.charge_string(len, start)?;
                Value::Binary(self.cur.take(len as u64)?.to_vec())
            }
            STR_UTF8 => {
                let len = self.string_len(start)?;
                self.charge_string(len, start)?;
                utf8_value(self.cur.take(len as u64)?)
            }
            REFN => {
                self.enter(start)?;
                let next = self.cur.peek().map(|b| b & !TRACK_FLAG);
                let inner = self.read_value()?;
                self.depth -= 1;
                match next {
                    // A reference to a container is the container in this model.
                    Some(ARRAY) | Some(HASH) => inner,
                    _ => Value::Ref(Box::new(inner)),
                }
            }
            REFP => {
                let offset = self.cur.varint()?;
                let idx = self.back_offset(offset, start)?;
                let target = self.tracked_at(idx, offset, start)?;
                match target.as_ref() {
                    Value::Array(_) | Value::Hash(_) => Value::Shared(target),
                    _ => Value::Ref(Box::new(Value::Shared(target))),
                }
            }
            ALIAS => {
                let offset = self.cur.varint()?;
                let idx = self.back_offset(offset, start)?;
                Value::Shared(self.tracked_at(idx, offset, start)?)
            }
            ARRAY => {
                let n = self.count(start)?;
                self.read_array(n, start)?
            }
            HASH => {
                let n = self.count(start)?;
                self.read_hash(n, start)?
            }
            0x40..=0x4f => self.read_array((tag & 0x0f) as usize, start)?,
            0x50..=0x5f => self.read_hash((tag & 0x0f) as usize, start)?,
            OBJECT | OBJECT_FREEZE => {
                let class = self.read_class()?;
                self.read_object(class, tag == OBJECT_FREEZE, start)?
            }
            OBJECTV | OBJECTV_FREEZE => {
                let offset = self.cur.varint()?;
                let idx = self.back_offset(offset, start)?;
                let saved = self.cur.pos;
                self.cur.pos = idx;
                let class = self.read_class()?;
                self.cur.pos = saved;
                self.read_object(class, tag == OBJECTV_FREEZE, start)?
            }
            COPY => {
                if self.in_copy {
                    return Err(self.err(ErrorCode::CopyOfCopy, start));
                }
                let offset = self.cur.varint()?;
                let idx = self.back_offset(offset, start)?;
                let saved = self.cur.pos;
                self.cur.pos = idx;
                self.in_copy = true;
                self.enter(start)?;
                // The copied item is counted as it is re-read, not as the COPY tag itself.
                self.values_left += 1;
                let v = self.read_value();
                self.depth -= 1;
                self.in_copy = false;
                self.cur.pos = saved;
                v?
            }
            WEAKEN => {
                self.enter(start)?;
                let v = self.read_value()?;
                self.depth -= 1;
                v
            }
            REGEXP => {
                self.enter(start)?;
                let pattern = self.read_value()?;
                let flags = self.read_value()?;
                self.depth -= 1;
                if !is_string(&pattern) {
                    return Err(self.err(ErrorCode::BadTag(REGEXP), start));
                }
                let mut flags = match flags {
                    Value::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
                    Value::String(s) => s,
                    _ => return Err(self.err(ErrorCode::BadTag(REGEXP), start)),
                };
                // Perl compiles a STR_UTF8 pattern with Unicode rules (/u) unless another charset
                // is named; say so, as the reference decoder's regexp does.
                if matches!(pattern.resolve(), Value::String(_))
                    && !flags.contains(['u', 'a', 'l', 'd'])
                {
                    flags.push('u');
                }
                Value::Regexp(Box::new(Regexp { pattern, flags }))
            }
            MANY => {
                return Err(self.err(
                    ErrorCode::UnsupportedTag("MANY (never implemented by any encoder)"),
                    start,
                ))
            }
            _ => return Err(self.err(ErrorCode::BadTag(tag), start)),
        })
    }

    /// The tracked item at body index `idx`, named by a REFP/ALIAS at `at`. A linear decode has
    /// always met it already; a caller that starts in the middle of a body (the lazy reader) has
    /// not, so an unseen target that carries the track bit is decoded now, by jumping there.
    fn tracked_at(&mut self, idx: usize, offset: u64, at: usize) -> Result<Arc<Value>> {
        match self.tracked.get(&idx) {
            Some(Some(t)) => {
                let t = t.clone();
                if t.values > self.values_left {
                    return Err(self.err(ErrorCode::TotalValuesLimit(self.limits.max_values), at));
                }
                self.values_left -= t.values;
                self.charge_string(t.string_bytes, at)?;
                Ok(t.value)
            }
            // A reference back into an item still being decoded: a cycle, which a tree of
            // values cannot hold.
            Some(None) => Err(self.err(ErrorCode::UnsupportedTag("cyclic reference"), at)),
            None if self.cur.buf().get(idx).is_some_and(|b| b & TRACK_FLAG != 0) => {
                self.enter(at)?;
                let saved = (self.cur.pos, self.in_copy);
                // The target was written outside any COPY expansion.
                self.in_copy = false;
                self.cur.pos = idx;
                let v = self.read_value();
                (self.cur.pos, self.in_copy) = saved;
                self.depth -= 1;
                match v? {
                    Value::Shared(arc) => Ok(arc),
                    _ => Err(self.err(ErrorCode::BadOffset(offset), at)),
                }
            }
            None => Err(self.err(ErrorCode::BadOffset(offset), at)),
        }
    }

    fn read_array(&mut self, n: usize, start: usize) -> Result<Value> {
        self.enter(start)?;
        let mut items = Vec::with_capacity(self.capacity_for(n));
        for _ in 0..n {
            items.push(self.read_value()?);
        }
        self.depth -= 1;
        Ok(Value::Array(items))
    }

    fn read_hash(&mut self, n: usize, start: usize) -> Result<Value> {
        self.enter(start)?;
        let mut entries: Hash = Vec::with_capacity(self.capacity_for(n));
        for _ in 0..n {
            let k = self.read_key()?;
            let v = self.read_value()?;
            entries.push((k, v));
        }
        self.depth -= 1;
        Ok(Value::Hash(entries))
    }

    /// A hash key: a string tag, or a COPY of one.
    fn read_key(&mut self) -> Result<Key> {
        let start = self.cur.pos;
        let tag = self.cur.byte()? & !TRACK_FLAG;
        if tag == COPY {
            let offset = self.cur.varint()?;
            let idx = self.back_offset(offset, start)?;
            if let Some(k) = self.copied_keys.get(&idx) {
                let k = k.clone();
                self.charge_string(k.as_bytes().len(), start)?;
                return Ok(k);
            }
            let saved = self.cur.pos;
            self.cur.pos = idx;
            let tag = self.cur.byte()? & !TRACK_FLAG;
            let k = self.read_key_string(idx, tag);
            self.cur.pos = saved;
            let k = k?;
            self.copied_keys.insert(idx, k.clone());
            return Ok(k);
        }
        self.read_key_string(start, tag)
    }

    fn read_key_string(&mut self, start: usize, tag: u8) -> Result<Key> {
        let (len, utf8) = match tag {
            SHORT_BINARY_0..=0x7f => ((tag & 0x1f) as usize, false),
            BINARY => (self.string_len(start)?, false),
            STR_UTF8 => (self.string_len(start)?, true),
            _ => return Err(self.err(ErrorCode::BadKeyTag(tag), start)),
        };
        self.charge_string(len, start)?;
        let bytes = self.cur.take(len as u64)?;
        if utf8 {
            if let Ok(s) = std::str::from_utf8(bytes) {
                return Ok(Key::Utf8(s.into()));
            }
        }
        Ok(Key::Binary(bytes.into()))
    }

    /// A class name: a string tag, or a COPY of one.
    fn read_class(&mut self) -> Result<String> {
        let start = self.cur.pos;
        let tag = self.cur.input.byte_at(self.cur.pos)? & !TRACK_FLAG;
        match tag {
            SHORT_BINARY_0..=0x7f | BINARY | STR_UTF8 | COPY => {
                let k = self.read_key()?;
                Ok(String::from_utf8_lossy(k.as_bytes()).into_owned())
            }
            _ => Err(self.err(ErrorCode::BadClassName(tag), start)),
        }
    }

    fn read_object(&mut self, class: String, frozen: bool, start: usize) -> Result<Value> {
        self.enter(start)?;
        let value = self.read_value()?;
        self.depth -= 1;
        // Perl writes `qr//` as a reference to a REGEXP blessed into "Regexp": that is just a
        // regular expression. Other classes keep their blessing around it.
        if class == "Regexp" && !frozen {
            if let Value::Ref(inner) = value {
                return Ok(match *inner {
                    Value::Regexp(r) => Value::Regexp(r),
                    other => Value::Object(Box::new(Object {
                        class,
                        value: Value::Ref(Box::new(other)),
                        frozen,
                    })),
                });
            }
        }
        Ok(Value::Object(Box::new(Object {
            class,
            value,
            frozen,
        })))
    }
}

/// A decoded tracked item and what it cost, so that every reference to it is charged the same:
/// shared items are expanded by the JSON mapping and the encoder, and a chain of references
/// doubling at each step must not turn a small document into an exponential amount of work.
#[derive(Clone)]
struct Tracked {
    value: Arc<Value>,
    values: usize,
    string_bytes: usize,
}

fn is_string(v: &Value) -> bool {
    matches!(v.resolve(), Value::Binary(_) | Value::String(_))
}

#[inline]
fn utf8_value(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => Value::Binary(bytes.to_vec()),
    }
}

/// Convert an x86 80-bit extended float (as Perl stores `long double`, padded to 16 bytes).
fn x87_extended_to_f64(b: &[u8]) -> f64 {
    let mantissa = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let se = u16::from_le_bytes([b[8], b[9]]);
    let sign = if se & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = (se & 0x7fff) as i32;
    if exp == 0x7fff {
        return if mantissa << 1 == 0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    if exp == 0 && mantissa == 0 {
        return sign * 0.0;
    }
    // value = mantissa * 2^(exp - 16383 - 63); the explicit integer bit is part of the mantissa.
    sign * (mantissa as f64) * pow2(exp - 16383 - 63)
}

/// Convert an IEEE 754 binary128 (`__float128`).
fn binary128_to_f64(b: &[u8]) -> f64 {
    let lo = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let hi = u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
    let sign = if hi >> 63 != 0 { -1.0 } else { 1.0 };
    let exp = ((hi >> 48) & 0x7fff) as i32;
    let frac_hi = hi & 0x0000_ffff_ffff_ffff;
    if exp == 0x7fff {
        return if frac_hi == 0 && lo == 0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    // Top 64 bits of the 112-bit fraction are enough for an f64's 53.
    let top = (frac_hi << 16) | (lo >> 48);
    let (int_bit, e) = if exp == 0 {
        (0u64, 1 - 16383)
    } else {
        (1u64, exp - 16383)
    };
    let m = (int_bit as f64) + (top as f64) * pow2(-64);
    sign * m * pow2(e)
}

fn pow2(e: i32) -> f64 {
    // powi on 2.0 is exact while the result is a normal or subnormal f64.
    if e < -1074 {
        0.0
    } else if e > 1023 {
        f64::INFINITY
    } else if e < -1022 {
        2f64.powi(e + 64) * 2f64.powi(-64)
    } else {
        2f64.powi(e)
    }
}
