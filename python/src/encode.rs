//! Python objects → a Sereal document in one walk, with no `sereal::Value` tree in between.
//!
//! Contract: for every object the tree path accepts (`convert::ToValue` then `sereal::Encoder`),
//! [`encode`] writes the same bytes and refuses the same objects with the same `SerealError`
//! (message and category): same mapping and type-check order as `ToValue`, same output rules as
//! `crates/sereal/src/ser.rs` (ASCII strings as binary, keys always `COPY`-de-duplicated by
//! content, values when `dedupe` and longer than 3 bytes, `ARRAYREF_n`/`HASHREF_n` under 16
//! elements unless canonical, `FLOAT` when exact in 32 bits), the same depth limit. The tests in
//! `tests/test_codec_paths.py` compare both paths byte for byte on random data.
//!
//! Where this differs, on purpose: a list or dict that changes size while it is being encoded
//! (only possible when encoding a `PerlObject`/`memoryview` runs Python code that mutates it) is
//! an encode error instead of a snapshot of whatever was seen.
//!
//! Safety: containers are walked through the C API with borrowed references. Each container is
//! held by a strong reference while it is walked; items are used before any Python code can run;
//! the one path that runs Python code (`slow`) holds its object and forgets every cached key
//! address (an object seen before may be freed there and its address reused).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyList, PyMemoryView, PyString, PyTuple,
};
use rustc_hash::FxHashMap;
use sereal::header::{self, Encoding};
use sereal::ser::{canonical_key_order, finish_document, same_bytes, SeenStrings};
use sereal::tag::*;
use sereal::{varint, Compression, EncoderOptions, Key};

use crate::convert::{codec_error, depth_error, encode_error, types};

/// Slots of the per-document cache of key objects by address (a power of two).
const KEY_SLOTS: usize = 256;
/// Slots of the per-document direct-mapped table of key contents (a power of two).
const KEY_TEXT_SLOTS: usize = 256;

/// A key written in this document, in [`State::key_texts`].
#[derive(Clone, Copy, Default)]
struct KeyText {
    /// The document (`State::document`) it was written in: entries of older ones are empty.
    generation: u64,
    hash: u64,
    /// Offset of its tag, as `COPY` names it.
    at: usize,
    /// Index of its bytes in the buffer.
    data: usize,
    len: usize,
    utf8: bool,
    /// Written for a `str` key: another `str` with the same bytes has the same `utf8`.
    from_str: bool,
}
/// Buffers larger than this are not kept for the next call. 8 MiB holds a 10k-event array
/// (~5 MB): below it such a document regrew its buffer from nothing on every call (5 % of its
/// encode time in copies and fresh pages); above it, a thread does not hold more than that.
const MAX_KEPT_BYTES: usize = 8 << 20;
/// Bodies at least this large are compressed with the GIL released.
const RELEASE_GIL_BYTES: usize = 64 << 10;

/// What a thread keeps between documents: buffers and tables (cleared, capacity kept).
struct State {
    /// Header, then the body.
    buf: Vec<u8>,
    /// Hash keys written, by content (every repeated key is a `COPY` of its first occurrence):
    /// first in this direct-mapped table (one slot per hash, never evicted within a document,
    /// cleared by the generation), then, for a key whose slot another key took, in `keys`.
    /// Most keys then cost a compare instead of a hash-table insert (a quarter of encode time).
    key_texts: Box<[KeyText; KEY_TEXT_SLOTS]>,
    /// Keys whose `key_texts` slot was taken.
    keys: SeenStrings,
    /// String values written (with `dedupe`).
    strings: SeenStrings,
    /// `(key object address, generation, offset)`: a key object met before in this document.
    key_ptrs: Box<[(usize, u64, usize); KEY_SLOTS]>,
    /// Bumped per document and whenever Python code may have run: older `key_ptrs` are stale.
    generation: u64,
    /// Bumped per document: older `key_texts` are empty.
    document: u64,
    /// Class names written (`OBJECT`), for `OBJECTV`.
    classes: FxHashMap<String, usize>,
}

impl State {
    fn new() -> State {
        State {
            buf: Vec::new(),
            key_texts: Box::new([KeyText::default(); KEY_TEXT_SLOTS]),
            keys: SeenStrings::default(),
            strings: SeenStrings::default(),
            key_ptrs: Box::new([(0, 0, 0); KEY_SLOTS]),
            generation: 0,
            document: 0,
            classes: FxHashMap::default(),
        }
    }
}

thread_local! {
    static STATE: std::cell::RefCell<State> = std::cell::RefCell::new(State::new());
}

/// Encode `obj` as one document with `opts` (options already validated).
pub fn encode<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    opts: &EncoderOptions,
) -> PyResult<Bound<'py, PyBytes>> {
    STATE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut state) => {
            let out = encode_with(py, obj, opts, &mut state);
            if state.buf.capacity() > MAX_KEPT_BYTES {
                *state = State::new();
            }
            out
        }
        // Re-entered (a `PerlObject` property calling `dumps`): a fresh state.
        Err(_) => encode_with(py, obj, opts, &mut State::new()),
    })
}

fn encode_with<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    opts: &EncoderOptions,
    state: &mut State,
) -> PyResult<Bound<'py, PyBytes>> {
    state.buf.clear();
    state.keys.clear();
    state.strings.clear();
    state.classes.clear();
    state.generation += 1;
    state.document += 1;
    header::write(&mut state.buf, opts.protocol, Encoding::Raw);
    let base = state.buf.len();
    let mut w = Writer {
        py,
        st: state,
        base,
        protocol: opts.protocol,
        dedupe: opts.dedupe_strings,
        canonical: opts.canonical,
        max_depth: opts.max_depth,
        depth: 0,
    };
    w.value(obj.as_ptr())?;
    let buf = &state.buf;
    if opts.compression == Compression::None {
        return Ok(PyBytes::new(py, buf));
    }
    let body = &buf[base..];
    let mut out = Vec::new();
    let r = if body.len() >= RELEASE_GIL_BYTES {
        py.allow_threads(|| finish_document(opts, body, &[], &mut out))
    } else {
        finish_document(opts, body, &[], &mut out)
    };
    r.map_err(|e| codec_error(py, &e))?;
    Ok(PyBytes::new(py, &out))
}

struct Writer<'py, 's> {
    py: Python<'py>,
    st: &'s mut State,
    /// Header length: body offsets count from here.
    base: usize,
    protocol: u8,
    dedupe: bool,
    canonical: bool,
    max_depth: usize,
    depth: usize,
}

/// The UTF-8 of a `str` object (any `str`, subclasses included), or the `SerealError` the tree
/// path raises for a lone surrogate.
///
/// # Safety
/// `s` must point to a live `str` object, which must outlive the returned slice.
#[inline(always)]
unsafe fn str_bytes<'a>(py: Python<'_>, s: *mut ffi::PyObject) -> PyResult<&'a [u8]> {
    let mut len: ffi::Py_ssize_t = 0;
    let data = ffi::PyUnicode_AsUTF8AndSize(s, &mut len);
    if data.is_null() {
        let e = PyErr::fetch(py);
        return Err(encode_error(
            py,
            format!("string is not encodable as UTF-8: {e}"),
        ));
    }
    Ok(std::slice::from_raw_parts(data as *const u8, len as usize))
}

impl<'py> Writer<'py, '_> {
    /// Offsets are 1-based from the start of the body (protocol 2+).
    #[inline]
    fn offset(&self) -> usize {
        self.st.buf.len() - self.base + 1
    }

    fn enter(&mut self) -> PyResult<()> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(depth_error(self.py, self.max_depth));
        }
        Ok(())
    }

    /// One object. `o` is borrowed: it must stay alive for the call (its container holds it).
    #[inline(never)]
    fn value(&mut self, o: *mut ffi::PyObject) -> PyResult<()> {
        self.item(o)
    }

    /// [`Self::value`], inlined into the container loops: a leaf (most items) then costs no call.
    #[inline(always)]
    fn item(&mut self, o: *mut ffi::PyObject) -> PyResult<()> {
        // SAFETY: `o` is a live object (see `value`); the type objects are static.
        unsafe {
            let t = ffi::Py_TYPE(o);
            if t == std::ptr::addr_of_mut!(ffi::PyUnicode_Type) {
                let b = str_bytes(self.py, o)?;
                self.string(b, !b.is_ascii());
            } else if t == std::ptr::addr_of_mut!(ffi::PyLong_Type) {
                self.long(o)?;
            } else if t == std::ptr::addr_of_mut!(ffi::PyFloat_Type) {
                self.float(ffi::PyFloat_AsDouble(o));
            } else if t == std::ptr::addr_of_mut!(ffi::PyDict_Type) {
                self.dict_outlined(o)?;
            } else if t == std::ptr::addr_of_mut!(ffi::PyList_Type) {
                self.list_outlined(o)?;
            } else if o == ffi::Py_None() {
                self.st.buf.push(UNDEF);
            } else if t == std::ptr::addr_of_mut!(ffi::PyBool_Type) {
                self.bool(o == ffi::Py_True());
            } else {
                self.slow_borrowed(o)?;
            }
        }
        Ok(())
    }

    #[inline(never)]
    fn dict_outlined(&mut self, o: *mut ffi::PyObject) -> PyResult<()> {
        // SAFETY: called by `item` on a live dict.
        unsafe { self.dict(o) }
    }

    #[inline(never)]
    fn list_outlined(&mut self, o: *mut ffi::PyObject) -> PyResult<()> {
        // SAFETY: called by `item` on a live list.
        unsafe { self.list(o) }
    }

    #[inline(never)]
    #[cold]
    fn slow_borrowed(&mut self, o: *mut ffi::PyObject) -> PyResult<()> {
        // SAFETY: called by `item` on a live object; held from here on.
        let obj = unsafe { Bound::from_borrowed_ptr(self.py, o) };
        self.slow(&obj)
    }

    fn bool(&mut self, b: bool) {
        self.st.buf.push(match (self.protocol >= 5, b) {
            (true, true) => YES,
            (true, false) => NO,
            (false, true) => TRUE,
            (false, false) => FALSE,
        });
    }

    /// An `int`: i64, else u64, else (Sereal has no big integers) its decimal text.
    ///
    /// # Safety
    /// `o` is a live `int` (or subclass).
    #[inline(always)]
    unsafe fn long(&mut self, o: *mut ffi::PyObject) -> PyResult<()> {
        let mut overflow = 0;
        let v = ffi::PyLong_AsLongLongAndOverflow(o, &mut overflow);
        if overflow == 0 && v != -1 {
            self.int(v);
            return Ok(());
        }
        self.long_rare(o, v, overflow)
    }

    /// [`Self::long`] for -1 (maybe an error), and beyond i64.
    #[inline(never)]
    unsafe fn long_rare(&mut self, o: *mut ffi::PyObject, v: i64, overflow: i32) -> PyResult<()> {
        if overflow == 0 {
            if !ffi::PyErr_Occurred().is_null() {
                return Err(PyErr::fetch(self.py));
            }
            self.int(v);
            return Ok(());
        }
        if overflow > 0 {
            let u = ffi::PyLong_AsUnsignedLongLong(o);
            if u != u64::MAX || ffi::PyErr_Occurred().is_null() {
                self.st.buf.push(VARINT);
                varint::write(&mut self.st.buf, u);
                return Ok(());
            }
            ffi::PyErr_Clear();
        }
        let text = Bound::from_borrowed_ptr(self.py, o).str()?;
        let b = str_bytes(self.py, text.as_ptr())?;
        self.string(b, !b.is_ascii());
        Ok(())
    }

    /// As `Encoder::int` in ser.rs.
    #[inline]
    fn int(&mut self, i: i64) {
        let buf = &mut self.st.buf;
        if (0..16).contains(&i) {
            buf.push(POS_0 | i as u8);
        } else if (-16..0).contains(&i) {
            buf.push((i + 32) as u8);
        } else if i > 0 {
            buf.push(VARINT);
            varint::write(buf, i as u64);
        } else {
            buf.push(ZIGZAG);
            varint::write(buf, varint::zigzag(i));
        }
    }

    /// As `Encoder::float` in ser.rs.
    #[inline]
    fn float(&mut self, f: f64) {
        let buf = &mut self.st.buf;
        let narrow = f as f32;
        if narrow as f64 == f || f.is_nan() {
            buf.push(FLOAT);
            buf.extend_from_slice(&narrow.to_le_bytes());
        } else {
            buf.push(DOUBLE);
            buf.extend_from_slice(&f.to_le_bytes());
        }
    }

    /// A string value, de-duplicated when asked to (as `Encoder::string`).
    #[inline]
    fn string(&mut self, bytes: &[u8], utf8: bool) {
        if self.dedupe && bytes.len() > 3 {
            let hash = SeenStrings::hash(bytes, utf8);
            if let Some(at) = self.st.strings.get(&self.st.buf, hash, bytes, utf8) {
                self.copy(at);
                return;
            }
            let here = self.offset();
            let data = self.raw_string(bytes, utf8);
            self.st.strings.insert(hash, here, data, bytes.len(), utf8);
            return;
        }
        self.raw_string(bytes, utf8);
    }

    #[inline(always)]
    fn copy(&mut self, at: usize) {
        let buf = &mut self.st.buf;
        buf.reserve(11);
        // SAFETY: 11 bytes are reserved: the tag and a varint of at most 10.
        unsafe {
            let start = buf.len();
            let p = buf.as_mut_ptr().add(start);
            *p = COPY;
            let mut n = 1;
            let mut v = at as u64;
            while v >= 0x80 {
                *p.add(n) = (v as u8) | 0x80;
                v >>= 7;
                n += 1;
            }
            *p.add(n) = v as u8;
            buf.set_len(start + n + 1);
        }
    }

    /// A string tag and its bytes (as `Encoder::raw_string`); returns where the bytes start.
    #[inline]
    fn raw_string(&mut self, bytes: &[u8], utf8: bool) -> usize {
        let buf = &mut self.st.buf;
        let len = bytes.len();
        buf.reserve(len + 11);
        if !utf8 && len < 32 {
            // The common short string: one capacity check for tag and bytes.
            let at = buf.len();
            // SAFETY: `len + 1` bytes are reserved past `at`; the source is a valid slice that
            // cannot overlap the buffer's spare capacity.
            unsafe {
                let p = buf.as_mut_ptr().add(at);
                *p = SHORT_BINARY_0 | len as u8;
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(1), len);
                buf.set_len(at + 1 + len);
            }
            return at + 1;
        }
        if utf8 {
            buf.push(STR_UTF8);
            varint::write(buf, bytes.len() as u64);
        } else if bytes.len() < 32 {
            buf.push(SHORT_BINARY_0 | bytes.len() as u8);
        } else {
            buf.push(BINARY);
            varint::write(buf, bytes.len() as u64);
        }
        let data = buf.len();
        buf.extend_from_slice(bytes);
        data
    }

    /// `ARRAYREF_n`/`HASHREF_n` under 16 elements (not canonical), else `REFN ARRAY|HASH <n>`.
    #[inline]
    fn container(&mut self, n: usize, short: u8, long: u8) {
        if n < 16 && !self.canonical {
            self.st.buf.push(short | n as u8);
        } else {
            self.st.buf.extend_from_slice(&[REFN, long]);
            varint::write(&mut self.st.buf, n as u64);
        }
    }

    /// A hash key by content: `COPY` of its first occurrence, else the string. Returns its
    /// offset.
    #[inline(always)]
    fn key_bytes(&mut self, bytes: &[u8], utf8: bool, hash: u64) -> usize {
        let slot = (hash as usize) & (KEY_TEXT_SLOTS - 1);
        self.key_miss(bytes, utf8, hash, slot, false)
    }

    /// A `str` key (exact type) by content: on a hit in its `key_texts` slot (the common case
    /// in arrays of events) the UTF-8 flag need not be computed.
    #[inline(always)]
    fn key_str(&mut self, bytes: &[u8], hash: u64) -> usize {
        let slot = (hash as usize) & (KEY_TEXT_SLOTS - 1);
        let e = self.st.key_texts[slot];
        if e.generation == self.st.document
            && e.hash == hash
            && e.len == bytes.len()
            && e.from_str
            && same_bytes(&self.st.buf[e.data..e.data + e.len], bytes)
        {
            self.copy(e.at);
            return e.at;
        }
        if e.generation != self.st.document {
            // A free slot (every key of a one-event document): written here, not in `key_miss`.
            return self.key_new(bytes, !bytes.is_ascii(), hash, slot, true);
        }
        self.key_miss(bytes, !bytes.is_ascii(), hash, slot, true)
    }

    /// Write a key whose `key_texts` slot is free, and take the slot.
    #[inline(always)]
    fn key_new(
        &mut self,
        bytes: &[u8],
        utf8: bool,
        hash: u64,
        slot: usize,
        from_str: bool,
    ) -> usize {
        let here = self.offset();
        let data = self.raw_string(bytes, utf8);
        self.st.key_texts[slot] = KeyText {
            generation: self.st.document,
            hash,
            at: here,
            data,
            len: bytes.len(),
            utf8,
            from_str,
        };
        here
    }

    /// A hash key by content: `COPY` of its first occurrence, else the string. Returns its
    /// offset.
    #[inline(never)]
    fn key_miss(
        &mut self,
        bytes: &[u8],
        utf8: bool,
        hash: u64,
        slot: usize,
        from_str: bool,
    ) -> usize {
        let e = self.st.key_texts[slot];
        if e.generation != self.st.document {
            // A free slot: no key with this slot was written in this document, so this key is
            // new (slots are only filled, never emptied, within a document).
            return self.key_new(bytes, utf8, hash, slot, from_str);
        }
        if e.hash == hash
            && e.len == bytes.len()
            && e.utf8 == utf8
            && same_bytes(&self.st.buf[e.data..e.data + e.len], bytes)
        {
            self.copy(e.at);
            return e.at;
        }
        // The slot holds another key: the overflow table.
        if let Some(at) = self.st.keys.get(&self.st.buf, hash, bytes, utf8) {
            self.copy(at);
            return at;
        }
        let here = self.offset();
        let data = self.raw_string(bytes, utf8);
        self.st.keys.insert(hash, here, data, bytes.len(), utf8);
        here
    }

    /// A dict key: `str` (by address first: dicts of one shape share key objects) or `bytes`.
    ///
    /// # Safety
    /// `k` is a live object held by the dict being walked.
    #[inline]
    unsafe fn key(&mut self, k: *mut ffi::PyObject) -> PyResult<()> {
        if ffi::Py_TYPE(k) == std::ptr::addr_of_mut!(ffi::PyUnicode_Type) {
            // A top-level dict's keys are distinct objects: the address cache cannot hit there
            // (one event per document is the common call), only in nested dicts and arrays of
            // dicts that share key objects (literal dicts, one `json.loads`).
            let shared = self.depth > 1;
            let ptr = k as usize;
            let slot = (ptr >> 4) & (KEY_SLOTS - 1);
            if shared {
                let (p, g, at) = self.st.key_ptrs[slot];
                if p == ptr && g == self.st.generation {
                    self.copy(at);
                    return Ok(());
                }
            }
            let b = str_bytes(self.py, k)?;
            // A dict key's hash is cached in the object: no pass over its bytes.
            let hash = ffi::PyObject_Hash(k) as u64;
            let at = self.key_str(b, hash);
            if shared {
                self.st.key_ptrs[slot] = (ptr, self.st.generation, at);
            }
            return Ok(());
        }
        let key = Bound::from_borrowed_ptr(self.py, k);
        if key.downcast::<PyString>().is_ok() {
            let b = str_bytes(self.py, k)?;
            let utf8 = !b.is_ascii();
            self.key_bytes(b, utf8, key_hash(self.py, b, utf8)?);
            return Ok(());
        }
        if let Ok(b) = key.downcast::<PyBytes>() {
            self.key_bytes(b.as_bytes(), false, key_hash(self.py, b.as_bytes(), false)?);
            return Ok(());
        }
        Err(encode_error(
            self.py,
            format!("dict keys must be str or bytes, not {}", type_name(&key)),
        ))
    }

    /// A dict (or subclass: its storage, as `PyDict_Next` sees it).
    ///
    /// # Safety
    /// `d` is a live dict.
    unsafe fn dict(&mut self, d: *mut ffi::PyObject) -> PyResult<()> {
        self.enter()?;
        // Held for the walk: Python code run for an item must not free it under us.
        let _hold = Bound::from_borrowed_ptr(self.py, d);
        let n = ffi::PyDict_Size(d) as usize;
        self.container(n, HASHREF_0, HASH);
        if self.canonical {
            self.canonical_dict(d, n)?;
        } else {
            let mut pos: ffi::Py_ssize_t = 0;
            let (mut k, mut v) = (std::ptr::null_mut(), std::ptr::null_mut());
            let mut seen = 0;
            while ffi::PyDict_Next(d, &mut pos, &mut k, &mut v) != 0 {
                seen += 1;
                if seen > n {
                    break;
                }
                self.key(k)?;
                // The value is held by the dict until Python code runs; `slow` holds it then.
                self.item(v)?;
            }
            if seen != n {
                return Err(changed(self.py, "dict"));
            }
        }
        self.depth -= 1;
        Ok(())
    }

    /// Keys sorted as the reference's `sort_keys` (ser.rs `canonical_key_order`).
    unsafe fn canonical_dict(&mut self, d: *mut ffi::PyObject, n: usize) -> PyResult<()> {
        let dict = Bound::from_borrowed_ptr(self.py, d);
        let dict = dict.downcast::<PyDict>()?;
        let mut entries: Vec<(Key, Bound<'py, PyAny>)> = Vec::with_capacity(n);
        for (k, v) in dict.iter() {
            let key = if let Ok(s) = k.downcast::<PyString>() {
                let b = str_bytes(self.py, s.as_ptr())?;
                // `str_bytes` gave valid UTF-8.
                Key::Utf8(std::str::from_utf8(b).unwrap_or_default().into())
            } else if let Ok(b) = k.downcast::<PyBytes>() {
                Key::Binary(b.as_bytes().into())
            } else {
                return Err(encode_error(
                    self.py,
                    format!("dict keys must be str or bytes, not {}", type_name(&k)),
                ));
            };
            entries.push((key, v));
        }
        if entries.len() != n {
            return Err(changed(self.py, "dict"));
        }
        entries.sort_by(|(a, _), (b, _)| canonical_key_order(a, b));
        for (k, v) in &entries {
            match k {
                Key::Utf8(s) => {
                    let utf8 = !s.is_ascii();
                    self.key_bytes(s.as_bytes(), utf8, key_hash(self.py, s.as_bytes(), utf8)?)
                }
                Key::Binary(b) => self.key_bytes(b, false, key_hash(self.py, b, false)?),
            };
            self.value(v.as_ptr())?;
        }
        Ok(())
    }

    /// A list (or subclass).
    ///
    /// # Safety
    /// `l` is a live list.
    unsafe fn list(&mut self, l: *mut ffi::PyObject) -> PyResult<()> {
        self.enter()?;
        let _hold = Bound::from_borrowed_ptr(self.py, l);
        let n = ffi::PyList_Size(l) as usize;
        self.container(n, ARRAYREF_0, ARRAY);
        for i in 0..n {
            // Bounds-checked: Python code run for an earlier item may have shrunk the list.
            let item = ffi::PyList_GetItem(l, i as ffi::Py_ssize_t);
            if item.is_null() {
                ffi::PyErr_Clear();
                return Err(changed(self.py, "list"));
            }
            self.item(item)?;
        }
        if ffi::PyList_Size(l) as usize != n {
            return Err(changed(self.py, "list"));
        }
        self.depth -= 1;
        Ok(())
    }

    /// A tuple (or subclass): an array.
    unsafe fn tuple(&mut self, t: &Bound<'py, PyTuple>) -> PyResult<()> {
        self.enter()?;
        let n = t.len();
        self.container(n, ARRAYREF_0, ARRAY);
        for i in 0..n {
            let item = ffi::PyTuple_GetItem(t.as_ptr(), i as ffi::Py_ssize_t);
            if item.is_null() {
                return Err(PyErr::fetch(self.py));
            }
            self.value(item)?;
        }
        self.depth -= 1;
        Ok(())
    }

    /// Everything but the exact basic types, in `ToValue::slow`'s order.
    #[cold]
    fn slow(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<()> {
        let py = self.py;
        // Python code may run from here on (`tobytes`, properties): key addresses seen so far
        // may be freed and reused.
        self.st.generation += 1;
        if let Ok(t) = obj.downcast::<PyTuple>() {
            // SAFETY: a live tuple, held by `obj`.
            return unsafe { self.tuple(t) };
        }
        if let Ok(b) = obj.downcast::<PyBytes>() {
            self.string(b.as_bytes(), false);
            return Ok(());
        }
        if let Ok(b) = obj.downcast::<PyByteArray>() {
            let v = b.to_vec();
            self.string(&v, false);
            return Ok(());
        }
        if obj.downcast::<PyMemoryView>().is_ok() {
            let b = obj.call_method0("tobytes")?;
            let b = b.downcast::<PyBytes>()?;
            self.string(b.as_bytes(), false);
            return Ok(());
        }
        if let Ok(b) = obj.downcast::<PyBool>() {
            self.bool(b.is_true());
            return Ok(());
        }
        // SAFETY (the three blocks below): `obj` is held, of the type checked.
        if obj.downcast::<PyString>().is_ok() {
            let b = unsafe { str_bytes(py, obj.as_ptr())? };
            self.string(b, !b.is_ascii());
            return Ok(());
        }
        if obj.downcast::<pyo3::types::PyInt>().is_ok() {
            return unsafe { self.long(obj.as_ptr()) };
        }
        if let Ok(f) = obj.downcast::<PyFloat>() {
            self.float(f.value());
            return Ok(());
        }
        if obj.downcast::<PyDict>().is_ok() {
            return unsafe { self.dict(obj.as_ptr()) };
        }
        if obj.downcast::<PyList>().is_ok() {
            return unsafe { self.list(obj.as_ptr()) };
        }
        let t = types(py)?;
        if obj.is_instance(t.perl_object.bind(py))? {
            let class: String = obj.getattr("class_name")?.extract()?;
            let frozen: bool = obj.getattr("frozen")?.is_truthy()?;
            self.enter()?;
            let value = obj.getattr("value")?;
            self.class(&class, frozen);
            self.value(value.as_ptr())?;
            self.depth -= 1;
            return Ok(());
        }
        if obj.is_instance(t.perl_regexp.bind(py))? {
            let pattern = obj.getattr("pattern")?;
            // As Perl writes `qr//`: a reference to a REGEXP blessed into "Regexp".
            self.class("Regexp", false);
            self.st.buf.extend_from_slice(&[REFN, REGEXP]);
            self.value(pattern.as_ptr())?;
            let flags: String = obj.getattr("flags")?.extract()?;
            self.raw_string(flags.as_bytes(), !flags.is_ascii());
            return Ok(());
        }
        Err(encode_error(
            py,
            format!(
                "cannot encode an object of type {} as Sereal",
                type_name(obj)
            ),
        ))
    }

    /// `OBJECT <class>` the first time a class is seen, `OBJECTV <offset>` after that.
    fn class(&mut self, class: &str, frozen: bool) {
        let (tag, tagv) = if frozen {
            (OBJECT_FREEZE, OBJECTV_FREEZE)
        } else {
            (OBJECT, OBJECTV)
        };
        if let Some(&at) = self.st.classes.get(class) {
            self.st.buf.push(tagv);
            varint::write(&mut self.st.buf, at as u64);
        } else {
            self.st.buf.push(tag);
            let at = self.offset();
            self.st.classes.insert(class.to_owned(), at);
            self.raw_string(class.as_bytes(), !class.is_ascii());
        }
    }
}

/// The hash of a key's content as `PyObject_Hash` gives it for an exact `str` key with these
/// bytes, which the key tables use: an exact `str` key's hash is cached in the object, so the
/// common case costs a call, not a pass over the bytes. CPython hashes an ASCII `str` like the
/// `bytes` of its text, so a key that is not UTF-8 (`utf8` false: ASCII or binary) is hashed as
/// `bytes`; a UTF-8 key only ever equals an equal `str`.
fn key_hash(py: Python<'_>, bytes: &[u8], utf8: bool) -> PyResult<u64> {
    let obj = if utf8 {
        // `utf8` keys come from a `str`: valid UTF-8.
        PyString::new(py, std::str::from_utf8(bytes).unwrap_or_default()).into_any()
    } else {
        PyBytes::new(py, bytes).into_any()
    };
    Ok(obj.hash()? as u64)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cold]
fn changed(py: Python<'_>, what: &str) -> PyErr {
    encode_error(py, format!("{what} changed size while being encoded"))
}
