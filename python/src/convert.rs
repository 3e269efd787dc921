//! Python objects ↔ [`sereal::Value`]: the documented mapping (see `sluice/sereal.py`).
//!
//! This is the tree path: values go through the codec's own value model and `sereal::Encoder` /
//! `sereal::Decoder`. `pack_events`, the reader and `reduce` use it; `dumps`/`loads` use the
//! direct walkers in `encode.rs`/`decode.rs`, which must give what this path gives (the tests
//! compare them on random data), and `loads` falls back to this path for anything exotic or bad.
//!
//! | Python | `Value` |
//! |---|---|
//! | `None` | `Undef` |
//! | `bool` | `Bool` |
//! | `int` in i64 / u64 | `Int` / `UInt`; larger ints: their decimal text as a `String` |
//! | `float` | `Float` |
//! | `str` | `String` (ASCII goes out as binary, as Perl writes it) |
//! | `bytes`, `bytearray`, `memoryview` | `Binary` |
//! | `dict` (keys `str` or `bytes`) | `Hash`, in insertion order |
//! | `list`, `tuple` | `Array` |
//! | `PerlObject(cls, value, frozen)` | `Object` |
//! | `PerlRegexp(pattern, flags)` | `Regexp` |
//!
//! Decoding: `Binary` is `str` when it is valid UTF-8 and `bytes` otherwise (mode `auto`), always
//! `bytes` (mode `bytes`) or always `str` read as Latin-1 (mode `latin1`, Perl's view of a byte
//! string); `Ref` is the referenced value; `Shared` is a copy at each place.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyList, PyMemoryView, PyString, PyTuple, PyType,
};
use rustc_hash::FxHashMap;
use sereal::{Hash, Key, Value};

/// The Python classes the mapping needs, registered by `sluice/_types.py` at import.
pub struct Types {
    pub sereal_error: Py<PyType>,
    pub read_error: Py<PyType>,
    pub perl_object: Py<PyType>,
    pub perl_regexp: Py<PyType>,
}

pub static TYPES: GILOnceCell<Types> = GILOnceCell::new();

pub fn types(py: Python<'_>) -> PyResult<&Types> {
    TYPES.get(py).ok_or_else(|| {
        PyValueError::new_err("sluice._native used before sluice._types registered its classes")
    })
}

/// A `SerealError(message)` with `.offset` and `.category` set.
pub fn sereal_error(py: Python<'_>, msg: String, offset: Option<usize>, category: &str) -> PyErr {
    let Ok(t) = types(py) else {
        return PyValueError::new_err(msg);
    };
    let err = PyErr::from_type(t.sereal_error.bind(py).clone(), (msg,));
    let v = err.value(py);
    // Attribute setting on a fresh exception instance cannot fail in practice; if it did, the
    // message still says everything.
    let _ = v.setattr("offset", offset);
    let _ = v.setattr("category", category);
    err
}

/// Maps a codec error to `SerealError` with its offset and category.
pub fn codec_error(py: Python<'_>, e: &sereal::Error) -> PyErr {
    let category = match e.classify() {
        sereal::Category::Eof => "eof",
        sereal::Category::Limit => "limit",
        sereal::Category::Encode => "encode",
        _ => "invalid",
    };
    sereal_error(py, e.to_string(), Some(e.offset()), category)
}

/// An encode-side error (bad type, too deep): no offset.
pub(crate) fn encode_error(py: Python<'_>, msg: String) -> PyErr {
    sereal_error(py, msg, None, "encode")
}

/// The encoders' error for nesting deeper than `max_depth` (both writers say it the same way).
pub(crate) fn depth_error(py: Python<'_>, max_depth: usize) -> PyErr {
    encode_error(
        py,
        format!("nesting deeper than the limit of {max_depth} (or a reference cycle)"),
    )
}

/// Slots of the direct-mapped cache of key objects (a power of two).
const KEY_SLOTS: usize = 256;
/// Distinct key texts remembered between calls; past this the map starts over (programs with
/// ever-new keys must not grow it without bound).
pub(crate) const MAX_KEY_TEXTS: usize = 4096;

/// Key conversions remembered by a thread between calls (see [`with_key_cache`]).
pub struct KeyCache {
    /// Incremented per call: a slot filled in an earlier call is stale (its object may be gone
    /// and its address reused), without clearing the slots.
    generation: u64,
    /// Recently seen key objects: `(address, generation, key)`. Event dicts usually repeat the
    /// same (interned) key objects, and a hit costs two compares. Sound within a call because
    /// every key object is kept alive by the dict holding it, so an address cannot be reused.
    recent: Box<[(usize, u64, Option<Key>); KEY_SLOTS]>,
    /// Keys by text: equal keys share one `Arc` even when they are distinct objects (as
    /// `json.loads` makes them), which is what lets the encoder recognise a repeated key by
    /// pointer (its fast path).
    by_text: FxHashMap<Box<str>, Key>,
}

impl KeyCache {
    fn new() -> KeyCache {
        KeyCache {
            generation: 0,
            recent: Box::new(std::array::from_fn(|_| (0, 0, None))),
            by_text: FxHashMap::default(),
        }
    }
}

thread_local! {
    static KEY_CACHE: std::cell::RefCell<KeyCache> = std::cell::RefCell::new(KeyCache::new());
}

/// Runs `f` with this thread's key cache (a fresh one if it is in use: a conversion can call
/// Python code, e.g. a `PerlObject` subclass's property, that calls `dumps` again).
pub fn with_key_cache<R>(f: impl FnOnce(&mut KeyCache) -> R) -> R {
    KEY_CACHE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut cache) => {
            cache.generation += 1;
            if cache.by_text.len() > MAX_KEY_TEXTS {
                cache.by_text.clear();
            }
            f(&mut cache)
        }
        Err(_) => f(&mut KeyCache::new()),
    })
}

/// Python → `Value`, one call's state.
pub struct ToValue<'py, 'c> {
    py: Python<'py>,
    cache: &'c mut KeyCache,
    depth: usize,
    max_depth: usize,
}

impl<'py, 'c> ToValue<'py, 'c> {
    pub fn new(py: Python<'py>, cache: &'c mut KeyCache, max_depth: usize) -> Self {
        ToValue {
            py,
            cache,
            depth: 0,
            max_depth,
        }
    }

    pub fn value(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<Value> {
        // Exact-type checks first (the common event shapes), subclasses after.
        if let Ok(s) = obj.downcast_exact::<PyString>() {
            return Ok(Value::String(self.text(s)?.to_owned()));
        }
        if obj.is_exact_instance_of::<pyo3::types::PyInt>() {
            return self.int(obj);
        }
        if let Ok(d) = obj.downcast_exact::<PyDict>() {
            return self.dict(d);
        }
        if let Ok(l) = obj.downcast_exact::<PyList>() {
            return self.sequence(l.len(), l.iter());
        }
        if let Ok(f) = obj.downcast_exact::<PyFloat>() {
            return Ok(Value::Float(f.value()));
        }
        if obj.is_none() {
            return Ok(Value::Undef);
        }
        if let Ok(b) = obj.downcast_exact::<PyBool>() {
            return Ok(Value::Bool(b.is_true()));
        }
        self.slow(obj)
    }

    #[cold]
    fn slow(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<Value> {
        let py = self.py;
        // What follows may run Python code (`tobytes`, `__str__`, a wrapper subclass's
        // properties), which could free a key object already seen and reuse its address: forget
        // the addresses seen so far.
        self.cache.generation += 1;
        if let Ok(t) = obj.downcast::<PyTuple>() {
            return self.sequence(t.len(), t.iter());
        }
        if let Ok(b) = obj.downcast::<PyBytes>() {
            return Ok(Value::Binary(b.as_bytes().to_vec()));
        }
        if let Ok(b) = obj.downcast::<PyByteArray>() {
            return Ok(Value::Binary(b.to_vec()));
        }
        if obj.downcast::<PyMemoryView>().is_ok() {
            let b = obj.call_method0("tobytes")?;
            let b = b.downcast::<PyBytes>()?;
            return Ok(Value::Binary(b.as_bytes().to_vec()));
        }
        // Subclasses of the basic types (bool is an int subclass: checked first).
        if let Ok(b) = obj.downcast::<PyBool>() {
            return Ok(Value::Bool(b.is_true()));
        }
        if let Ok(s) = obj.downcast::<PyString>() {
            return Ok(Value::String(self.text(s)?.to_owned()));
        }
        if obj.downcast::<pyo3::types::PyInt>().is_ok() {
            return self.int(obj);
        }
        if let Ok(f) = obj.downcast::<PyFloat>() {
            return Ok(Value::Float(f.value()));
        }
        if let Ok(d) = obj.downcast::<PyDict>() {
            return self.dict(d);
        }
        if let Ok(l) = obj.downcast::<PyList>() {
            return self.sequence(l.len(), l.iter());
        }
        let t = types(py)?;
        if obj.is_instance(t.perl_object.bind(py))? {
            let class: String = obj.getattr("class_name")?.extract()?;
            let frozen: bool = obj.getattr("frozen")?.is_truthy()?;
            self.enter()?;
            let value = self.value(&obj.getattr("value")?)?;
            self.depth -= 1;
            return Ok(Value::Object(Box::new(sereal::Object {
                class,
                value,
                frozen,
            })));
        }
        if obj.is_instance(t.perl_regexp.bind(py))? {
            let pattern = self.value(&obj.getattr("pattern")?)?;
            let flags: String = obj.getattr("flags")?.extract()?;
            return Ok(Value::Regexp(Box::new(sereal::Regexp { pattern, flags })));
        }
        let name = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into());
        Err(encode_error(
            py,
            format!("cannot encode an object of type {name} as Sereal"),
        ))
    }

    /// The UTF-8 of a `str` (a lone surrogate has none: an encode error, not a UnicodeError).
    fn text<'a>(&self, s: &'a Bound<'py, PyString>) -> PyResult<&'a str> {
        s.to_str()
            .map_err(|e| encode_error(self.py, format!("string is not encodable as UTF-8: {e}")))
    }

    /// A list or tuple (its `len` items) as an array, one nesting level deeper.
    fn sequence(
        &mut self,
        len: usize,
        items: impl Iterator<Item = Bound<'py, PyAny>>,
    ) -> PyResult<Value> {
        self.enter()?;
        let mut out = Vec::with_capacity(len);
        for item in items {
            out.push(self.value(&item)?);
        }
        self.depth -= 1;
        Ok(Value::Array(out))
    }

    fn enter(&mut self) -> PyResult<()> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(depth_error(self.py, self.max_depth));
        }
        Ok(())
    }

    fn int(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<Value> {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::Int(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::UInt(u));
        }
        // Sereal has no big integers: beyond 64 bits an int goes out as its decimal text, which
        // Perl reads as that number in numeric context (and Math::BigInt->new takes).
        Ok(Value::String(obj.str()?.to_str()?.to_owned()))
    }

    pub fn key(&mut self, k: &Bound<'py, PyAny>) -> PyResult<Key> {
        if let Ok(s) = k.downcast_exact::<PyString>() {
            let ptr = s.as_ptr() as usize;
            let gen = self.cache.generation;
            let i = (ptr >> 4) & (KEY_SLOTS - 1);
            if let (p, g, Some(key)) = &self.cache.recent[i] {
                if *p == ptr && *g == gen {
                    return Ok(key.clone());
                }
            }
            let text = self.text(s)?;
            let key = match self.cache.by_text.get(text) {
                Some(key) => key.clone(),
                None => {
                    let key = Key::Utf8(Arc::from(text));
                    self.cache.by_text.insert(Box::from(text), key.clone());
                    key
                }
            };
            self.cache.recent[i] = (ptr, gen, Some(key.clone()));
            return Ok(key);
        }
        if let Ok(s) = k.downcast::<PyString>() {
            return Ok(Key::Utf8(Arc::from(self.text(s)?)));
        }
        if let Ok(b) = k.downcast::<PyBytes>() {
            return Ok(Key::Binary(Arc::from(b.as_bytes())));
        }
        let name = k
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into());
        Err(encode_error(
            self.py,
            format!("dict keys must be str or bytes, not {name}"),
        ))
    }

    fn dict(&mut self, d: &Bound<'py, PyDict>) -> PyResult<Value> {
        self.enter()?;
        let mut entries: Hash = Vec::with_capacity(d.len());
        for (k, v) in d.iter() {
            let key = self.key(&k)?;
            entries.push((key, self.value(&v)?));
        }
        self.depth -= 1;
        Ok(Value::Hash(entries))
    }

    /// An event for the collector: the dict's entries without the four tag keys, then the tags
    /// (the collector wants each tag key once, at the top level).
    pub fn event(&mut self, d: &Bound<'py, PyDict>, tags: Vec<(&Key, Value)>) -> PyResult<Value> {
        self.enter()?;
        let mut entries: Hash = Vec::with_capacity(d.len() + 4);
        for (k, v) in d.iter() {
            let key = self.key(&k)?;
            // The tag keys are the four fixed names, whatever the caller passed.
            if matches!(key.as_bytes(), b"epoch" | b"dc" | b"type" | b"subtype") {
                continue;
            }
            entries.push((key, self.value(&v)?));
        }
        self.depth -= 1;
        for (k, v) in tags {
            entries.push((k.clone(), v));
        }
        Ok(Value::Hash(entries))
    }
}

/// How `Binary` values come out of `loads`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum BinaryMode {
    /// `str` when valid UTF-8, else `bytes`.
    Auto,
    /// Always `bytes`.
    Bytes,
    /// Always `str`, each byte one character (Latin-1), as Perl sees a byte string.
    Latin1,
}

impl BinaryMode {
    pub fn parse(py: Python<'_>, s: &str) -> PyResult<BinaryMode> {
        match s {
            "auto" => Ok(BinaryMode::Auto),
            "bytes" => Ok(BinaryMode::Bytes),
            "latin1" => Ok(BinaryMode::Latin1),
            other => Err(sereal_error(
                py,
                format!("binary must be \"auto\", \"bytes\" or \"latin1\", not {other:?}"),
                None,
                "invalid",
            )),
        }
    }
}

thread_local! {
    /// Python `str` hash keys by their UTF-8, kept between calls: events repeat the same few
    /// dozen keys, and reusing one `str` object (already hashed) saves creating, decoding and
    /// hashing it again for every event. Bounded by [`MAX_KEY_TEXTS`].
    pub(crate) static KEY_STRS: std::cell::RefCell<FxHashMap<Box<[u8]>, Py<PyString>>> = std::cell::RefCell::new(FxHashMap::default());
}

/// `Value` → Python, one call's state.
pub struct ToPy<'py> {
    py: Python<'py>,
    binary: BinaryMode,
}

impl<'py> ToPy<'py> {
    pub fn new(py: Python<'py>, binary: BinaryMode) -> Self {
        ToPy { py, binary }
    }

    pub fn value(&mut self, v: &Value) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        Ok(match v {
            Value::Undef => py.None().into_bound(py),
            Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
            Value::Int(i) => i.into_pyobject(py)?.into_any(),
            Value::UInt(u) => u.into_pyobject(py)?.into_any(),
            Value::Float(f) => PyFloat::new(py, *f).into_any(),
            Value::String(s) => PyString::new(py, s).into_any(),
            Value::Binary(b) => self.binary(b),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(self.value(item)?);
                }
                PyList::new(py, out)?.into_any()
            }
            Value::Hash(entries) => {
                let d = PyDict::new(py);
                for (k, v) in entries {
                    let key = self.key(k);
                    d.set_item(key, self.value(v)?)?;
                }
                d.into_any()
            }
            Value::Ref(inner) => self.value(inner)?,
            Value::Shared(inner) => self.value(inner)?,
            Value::Object(o) => {
                let t = types(py)?;
                let value = self.value(&o.value)?;
                t.perl_object
                    .bind(py)
                    .call1((o.class.as_str(), value, o.frozen))?
            }
            Value::Regexp(r) => {
                let t = types(py)?;
                let pattern = self.value(&r.pattern)?;
                t.perl_regexp.bind(py).call1((pattern, r.flags.as_str()))?
            }
        })
    }

    fn binary(&self, b: &[u8]) -> Bound<'py, PyAny> {
        let py = self.py;
        match self.binary {
            BinaryMode::Auto => match std::str::from_utf8(b) {
                Ok(s) => PyString::new(py, s).into_any(),
                Err(_) => PyBytes::new(py, b).into_any(),
            },
            BinaryMode::Bytes => PyBytes::new(py, b).into_any(),
            BinaryMode::Latin1 => {
                let s: String = b.iter().map(|&c| c as char).collect();
                PyString::new(py, &s).into_any()
            }
        }
    }

    fn key(&mut self, k: &Key) -> Bound<'py, PyAny> {
        let py = self.py;
        let bytes = k.as_bytes();
        if self.binary == BinaryMode::Latin1 && matches!(k, Key::Binary(_)) {
            let s: String = bytes.iter().map(|&c| c as char).collect();
            return PyString::new(py, &s).into_any();
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            return PyBytes::new(py, bytes).into_any();
        };
        // No Python code runs while the cache is borrowed, so the borrow cannot be re-entered.
        KEY_STRS.with(|cell| {
            let Ok(mut cache) = cell.try_borrow_mut() else {
                return PyString::new(py, text).into_any();
            };
            if let Some(s) = cache.get(bytes) {
                return s.bind(py).clone().into_any();
            }
            if cache.len() >= MAX_KEY_TEXTS {
                cache.clear();
            }
            let s = PyString::new(py, text);
            cache.insert(Box::from(bytes), s.clone().unbind());
            s.into_any()
        })
    }
}
