//! A Sereal document → Python objects in one walk over the body, with no `sereal::Value` tree.
//!
//! Contract: [`decode`] either gives exactly what the tree path (`sereal::Decoder` then
//! `convert::ToPy`) gives for the document, or gives up ([`None`]) and the caller runs the tree
//! path, which then decides: the result, or the typed error (message, offset, category). So
//! errors and limits are the Rust decoder's by construction, and this walker only has to be as
//! strict as it: it keeps the same budgets (depth, elements, values, string bytes, string length;
//! decompression is `sereal::de::open`'s, under the same limit) and gives up as soon as one is
//! exceeded, on any malformed byte, and on everything outside JSON-like data (the track bit,
//! `REFP`/`ALIAS`, objects, regexps, `WEAKEN`, long doubles, a user header) — hostile or exotic
//! input costs a second decode, never a different answer.
//!
//! Repeated keys are one Python `str` each: within a document by the offset `COPY` names,
//! across documents by their bytes (the thread's `KEY_STRS`, shared with `ToPy`). A string value
//! that `COPY` names more than once is decoded once.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;
use rustc_hash::FxHashMap;
use sereal::tag::*;
use sereal::{varint, Limits};

use crate::convert::{BinaryMode, KEY_STRS, MAX_KEY_TEXTS};

/// The walker gave up: the tree path decides.
struct GiveUp;

type R<T> = Result<T, GiveUp>;

/// Compressed inputs at least this large are decompressed with the GIL released.
const RELEASE_GIL_BYTES: usize = 64 << 10;

thread_local! {
    /// The decompression buffer, kept between documents (up to a size).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Buffers larger than this are not kept for the next call.
const MAX_KEPT_BYTES: usize = 4 << 20;

/// Decode the document at the start of `doc`: the value and the bytes it took (documents may be
/// concatenated). `None`: the tree path must decide (see the module docs).
pub fn decode<'py>(
    py: Python<'py>,
    doc: &[u8],
    limits: &Limits,
    binary: BinaryMode,
) -> Option<(Bound<'py, PyAny>, usize)> {
    SCRATCH.with(|cell| {
        let mut fresh = Vec::new();
        let mut kept = cell.try_borrow_mut().ok();
        let scratch = kept.as_deref_mut().unwrap_or(&mut fresh);
        let out = decode_with(py, doc, limits, binary, scratch);
        if scratch.capacity() > MAX_KEPT_BYTES {
            *scratch = Vec::new();
        }
        out
    })
}

fn decode_with<'py>(
    py: Python<'py>,
    doc: &[u8],
    limits: &Limits,
    binary: BinaryMode,
    scratch: &mut Vec<u8>,
) -> Option<(Bound<'py, PyAny>, usize)> {
    let compressed = doc.get(4).is_some_and(|b| b >> 4 != 0);
    let body = if compressed && doc.len() >= RELEASE_GIL_BYTES {
        py.allow_threads(|| sereal::de::open(doc, limits, scratch))
    } else {
        sereal::de::open(doc, limits, scratch)
    }
    .ok()?;
    if body.header.user_header.is_some() {
        return None;
    }
    KEY_STRS.with(|cell| {
        let mut key_strs = cell.try_borrow_mut().ok()?;
        let mut w = Walker {
            py,
            buf: body.bytes,
            pos: 0,
            offset_base: body.offset_base,
            limits,
            depth: 0,
            values_left: limits.max_values,
            string_bytes_left: limits.max_total_string_bytes,
            in_copy: false,
            binary,
            copied_keys: FxHashMap::default(),
            copied_strings: FxHashMap::default(),
            key_strs: &mut key_strs,
        };
        let v = w.value().ok()?;
        while w.buf.get(w.pos).is_some_and(|b| b & !TRACK_FLAG == PAD) {
            w.pos += 1;
        }
        let len = match body.compressed_end {
            Some(end) if w.pos == body.bytes.len() => end,
            Some(_) => return None,
            None => body.error_base + w.pos,
        };
        Some((v, len))
    })
}

struct Walker<'a, 'py, 'k> {
    py: Python<'py>,
    buf: &'a [u8],
    pos: usize,
    offset_base: usize,
    limits: &'a Limits,
    depth: usize,
    values_left: usize,
    string_bytes_left: usize,
    /// Inside a `COPY` expansion, where a further `COPY` is refused.
    in_copy: bool,
    binary: BinaryMode,
    /// Key objects by the body index of their first occurrence (what `COPY` names).
    copied_keys: FxHashMap<usize, (Bound<'py, PyAny>, usize)>,
    /// String values named by a `COPY`, by body index, with their length in bytes.
    copied_strings: FxHashMap<usize, (Bound<'py, PyAny>, usize)>,
    key_strs: &'k mut FxHashMap<Box<[u8]>, Py<PyString>>,
}

/// Takes ownership of a new reference from the C API; `None` (an exception, e.g. MemoryError)
/// gives up.
#[inline]
fn owned<'py>(py: Python<'py>, p: *mut ffi::PyObject) -> R<Bound<'py, PyAny>> {
    if p.is_null() {
        // The tree path will meet the same condition and report it.
        drop(PyErr::take(py));
        return Err(GiveUp);
    }
    // SAFETY: a new, non-null reference.
    Ok(unsafe { Bound::from_owned_ptr(py, p) })
}

impl<'a, 'py> Walker<'a, 'py, '_> {
    #[inline]
    fn byte(&mut self) -> R<u8> {
        let b = *self.buf.get(self.pos).ok_or(GiveUp)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    fn varint(&mut self) -> R<u64> {
        varint::read(self.buf, &mut self.pos).map_err(|_| GiveUp)
    }

    #[inline]
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(GiveUp)?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    #[inline]
    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > self.limits.max_depth {
            return Err(GiveUp);
        }
        Ok(())
    }

    #[inline]
    fn charge_string(&mut self, len: usize) -> R<()> {
        self.string_bytes_left = self.string_bytes_left.checked_sub(len).ok_or(GiveUp)?;
        Ok(())
    }

    fn string_len(&mut self) -> R<usize> {
        let len = self.varint()?;
        if len > self.limits.max_string_bytes as u64 {
            return Err(GiveUp);
        }
        Ok(len as usize)
    }

    fn count(&mut self) -> R<usize> {
        let n = self.varint()?;
        if n > self.limits.max_elements as u64 {
            return Err(GiveUp);
        }
        Ok(n as usize)
    }

    /// A document offset as a body index strictly before `before`.
    fn back_offset(&self, offset: u64, before: usize) -> R<usize> {
        usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_sub(self.offset_base))
            .filter(|&i| i < before)
            .ok_or(GiveUp)
    }

    /// One item (the parser's `read_value`).
    fn value(&mut self) -> R<Bound<'py, PyAny>> {
        self.values_left = self.values_left.checked_sub(1).ok_or(GiveUp)?;
        let mut start = self.pos;
        let mut tag = self.byte()?;
        while tag == PAD {
            start = self.pos;
            tag = self.byte()?;
        }
        let py = self.py;
        // SAFETY (every ffi call below): plain constructors, the GIL is held.
        unsafe {
            match tag {
                0x00..=0x0f => owned(py, ffi::PyLong_FromLong(tag as _)),
                0x10..=0x1f => owned(py, ffi::PyLong_FromLong(tag as std::os::raw::c_long - 32)),
                VARINT => {
                    let v = self.varint()?;
                    match i64::try_from(v) {
                        Ok(i) => owned(py, ffi::PyLong_FromLongLong(i)),
                        Err(_) => owned(py, ffi::PyLong_FromUnsignedLongLong(v)),
                    }
                }
                ZIGZAG => {
                    let v = varint::unzigzag(self.varint()?);
                    owned(py, ffi::PyLong_FromLongLong(v))
                }
                FLOAT => {
                    let b = self.take(4)?;
                    let f = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64;
                    owned(py, ffi::PyFloat_FromDouble(f))
                }
                DOUBLE => {
                    let b = self.take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    owned(py, ffi::PyFloat_FromDouble(f64::from_le_bytes(a)))
                }
                UNDEF | CANONICAL_UNDEF => Ok(py.None().into_bound(py)),
                TRUE | YES => Ok(pyo3::types::PyBool::new(py, true).to_owned().into_any()),
                FALSE | NO => Ok(pyo3::types::PyBool::new(py, false).to_owned().into_any()),
                SHORT_BINARY_0..=0x7f => {
                    let len = (tag & 0x1f) as usize;
                    self.charge_string(len)?;
                    let b = self.take(len)?;
                    binary_value(py, b, self.binary)
                }
                BINARY => {
                    let len = self.string_len()?;
                    self.charge_string(len)?;
                    let b = self.take(len)?;
                    binary_value(py, b, self.binary)
                }
                STR_UTF8 => {
                    let len = self.string_len()?;
                    self.charge_string(len)?;
                    let b = self.take(len)?;
                    match std::str::from_utf8(b) {
                        Ok(s) => owned(
                            py,
                            ffi::PyUnicode_FromStringAndSize(
                                s.as_ptr().cast(),
                                s.len() as ffi::Py_ssize_t,
                            ),
                        ),
                        // Perl's lax utf8: a binary string.
                        Err(_) => binary_value(py, b, self.binary),
                    }
                }
                REFN => {
                    // A reference to a container is the container; to a scalar, the scalar.
                    self.enter()?;
                    let v = self.value()?;
                    self.depth -= 1;
                    Ok(v)
                }
                ARRAY => {
                    let n = self.count()?;
                    self.array(n)
                }
                HASH => {
                    let n = self.count()?;
                    self.hash(n)
                }
                0x40..=0x4f => self.array((tag & 0x0f) as usize),
                0x50..=0x5f => self.hash((tag & 0x0f) as usize),
                COPY => self.copy(start),
                // The track bit, REFP/ALIAS, objects, regexps, WEAKEN, long doubles, bad tags.
                _ => Err(GiveUp),
            }
        }
    }

    /// `COPY <offset>`: the item at an earlier offset, read again (charged again).
    fn copy(&mut self, start: usize) -> R<Bound<'py, PyAny>> {
        if self.in_copy {
            return Err(GiveUp);
        }
        let offset = self.varint()?;
        let idx = self.back_offset(offset, start)?;
        self.enter()?;
        // The copied item is counted as it is re-read, not as the COPY tag itself.
        self.values_left += 1;
        if let Some((s, len)) = self.copied_strings.get(&idx) {
            let (s, len) = (s.clone(), *len);
            self.values_left -= 1;
            self.charge_string(len)?;
            self.depth -= 1;
            return Ok(s);
        }
        let saved = self.pos;
        let strings_before = self.string_bytes_left;
        self.pos = idx;
        self.in_copy = true;
        let v = self.value();
        self.in_copy = false;
        self.pos = saved;
        self.depth -= 1;
        let v = v?;
        let is_string = matches!(self.buf[idx], SHORT_BINARY_0..=0x7f | BINARY | STR_UTF8);
        if is_string {
            let len = strings_before - self.string_bytes_left;
            self.copied_strings.insert(idx, (v.clone(), len));
        }
        Ok(v)
    }

    fn array(&mut self, n: usize) -> R<Bound<'py, PyAny>> {
        self.enter()?;
        // Every element takes at least a byte: a longer count is a truncated document.
        if n > self.buf.len() - self.pos {
            return Err(GiveUp);
        }
        // SAFETY: a new list of `n` empty slots, each filled once with a new reference (slots
        // left empty on giving up are NULL, which the list's deallocation skips).
        let list = unsafe { owned(self.py, ffi::PyList_New(n as ffi::Py_ssize_t))? };
        for i in 0..n {
            let item = self.value()?;
            unsafe {
                ffi::PyList_SetItem(list.as_ptr(), i as ffi::Py_ssize_t, item.into_ptr());
            }
        }
        self.depth -= 1;
        Ok(list)
    }

    fn hash(&mut self, n: usize) -> R<Bound<'py, PyAny>> {
        self.enter()?;
        // SAFETY: a new dict; `PyDict_SetItem` takes its own references.
        let dict = unsafe { owned(self.py, ffi::PyDict_New())? };
        for _ in 0..n {
            let k = self.key()?;
            let v = self.value()?;
            if unsafe { ffi::PyDict_SetItem(dict.as_ptr(), k.as_ptr(), v.as_ptr()) } != 0 {
                drop(PyErr::take(self.py));
                return Err(GiveUp);
            }
        }
        self.depth -= 1;
        Ok(dict)
    }

    /// A hash key: a string tag, or a `COPY` of one (the parser's `read_key`).
    fn key(&mut self) -> R<Bound<'py, PyAny>> {
        let start = self.pos;
        let tag = self.byte()? & !TRACK_FLAG;
        if tag == COPY {
            let offset = self.varint()?;
            let idx = self.back_offset(offset, start)?;
            if let Some((k, len)) = self.copied_keys.get(&idx) {
                let (k, len) = (k.clone(), *len);
                self.charge_string(len)?;
                return Ok(k);
            }
            let saved = self.pos;
            self.pos = idx;
            let tag = self.byte()? & !TRACK_FLAG;
            let k = self.key_string(tag);
            self.pos = saved;
            let (k, len) = k?;
            self.copied_keys.insert(idx, (k.clone(), len));
            return Ok(k);
        }
        // Recorded only when a COPY names it (most keys of a one-event document never are).
        Ok(self.key_string(tag)?.0)
    }

    /// A key string's object (as `ToPy::key` makes it) and its length in bytes.
    fn key_string(&mut self, tag: u8) -> R<(Bound<'py, PyAny>, usize)> {
        let (len, utf8) = match tag {
            SHORT_BINARY_0..=0x7f => ((tag & 0x1f) as usize, false),
            BINARY => (self.string_len()?, false),
            STR_UTF8 => (self.string_len()?, true),
            _ => return Err(GiveUp),
        };
        self.charge_string(len)?;
        let py = self.py;
        let binary = self.binary;
        let bytes = self.take(len)?;
        // A binary key in latin1 mode: Perl's view.
        if binary == BinaryMode::Latin1 && !utf8 {
            return Ok((latin1(py, bytes)?, len));
        }
        // Only valid UTF-8 is cached: a hit needs no validation.
        if let Some(s) = self.key_strs.get(bytes) {
            return Ok((s.bind(py).clone().into_any(), len));
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            // Not UTF-8 (under STR_UTF8: Perl's lax utf8, a binary key).
            if binary == BinaryMode::Latin1 {
                return Ok((latin1(py, bytes)?, len));
            }
            return Ok((pyo3::types::PyBytes::new(py, bytes).into_any(), len));
        };
        if self.key_strs.len() >= MAX_KEY_TEXTS {
            self.key_strs.clear();
        }
        let s = PyString::new(py, text);
        self.key_strs.insert(Box::from(bytes), s.clone().unbind());
        Ok((s.into_any(), len))
    }
}

/// A binary string as `ToPy` gives it in `mode`.
#[inline]
fn binary_value<'py>(py: Python<'py>, b: &[u8], mode: BinaryMode) -> R<Bound<'py, PyAny>> {
    // SAFETY: constructors over a valid slice, the GIL is held.
    unsafe {
        match mode {
            BinaryMode::Auto => match std::str::from_utf8(b) {
                Ok(s) => owned(
                    py,
                    ffi::PyUnicode_FromStringAndSize(s.as_ptr().cast(), s.len() as ffi::Py_ssize_t),
                ),
                Err(_) => owned(
                    py,
                    ffi::PyBytes_FromStringAndSize(b.as_ptr().cast(), b.len() as ffi::Py_ssize_t),
                ),
            },
            BinaryMode::Bytes => owned(
                py,
                ffi::PyBytes_FromStringAndSize(b.as_ptr().cast(), b.len() as ffi::Py_ssize_t),
            ),
            BinaryMode::Latin1 => latin1(py, b),
        }
    }
}

/// Each byte one character, as Perl sees a byte string.
#[inline]
fn latin1<'py>(py: Python<'py>, b: &[u8]) -> R<Bound<'py, PyAny>> {
    // SAFETY: a constructor over a valid slice, the GIL is held.
    unsafe {
        owned(
            py,
            ffi::PyUnicode_DecodeLatin1(
                b.as_ptr().cast(),
                b.len() as ffi::Py_ssize_t,
                std::ptr::null(),
            ),
        )
    }
}
