//! `dumps` / `loads` (over the direct walkers `encode`/`decode`), their tree-path twins
//! `dumps_tree` / `loads_tree` (the tests' reference), and the emitter's batch packing (over
//! `sereal::Encoder`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use sereal::{Compression, Decoder, Encoder, EncoderOptions, Key, Limits, Value};

use crate::convert::{codec_error, sereal_error, with_key_cache, BinaryMode, ToPy, ToValue};

/// Output documents larger than this are not kept in the thread's cached encoder (it would
/// hold a buffer that large for the life of the thread).
const MAX_CACHED_ENCODER_BYTES: usize = 1 << 20;

thread_local! {
    static ENCODER: std::cell::RefCell<Option<Encoder>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with an encoder for `opts`: this thread's cached one when its options match (its
/// buffers and tables are reused: a call per small event is then mostly encoding), else a new
/// one, which is cached for the next call.
fn with_encoder(
    opts: &EncoderOptions,
    f: impl FnOnce(&mut Encoder) -> sereal::Result<Vec<u8>>,
) -> sereal::Result<Vec<u8>> {
    ENCODER.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return f(&mut Encoder::new(opts.clone())?);
        };
        let mut enc = match slot.take() {
            Some(e) if e.options() == opts => e,
            _ => Encoder::new(opts.clone())?,
        };
        let out = f(&mut enc);
        if matches!(&out, Ok(doc) if doc.len() <= MAX_CACHED_ENCODER_BYTES) {
            *slot = Some(enc);
        }
        out
    })
}

/// Inputs at least this large are encoded / decoded with the GIL released: below it, releasing
/// and re-taking the GIL costs a noticeable share of the work.
const RELEASE_GIL_BYTES: usize = 64 << 10;

/// Encoder options from the Python keyword arguments.
pub fn encoder_options(
    py: Python<'_>,
    protocol: u8,
    compress: Option<&str>,
    level: Option<i32>,
    dedupe: bool,
    canonical: bool,
    compress_threshold: Option<usize>,
) -> PyResult<EncoderOptions> {
    let bad = |msg: String| sereal_error(py, msg, None, "encode");
    if !(3..=5).contains(&protocol) {
        return Err(bad(format!("protocol must be 3, 4 or 5, not {protocol}")));
    }
    let compression = match compress {
        None | Some("none") => Compression::None,
        Some("snappy") => Compression::Snappy,
        Some("zlib") => {
            let level = level.unwrap_or(6);
            if !(1..=9).contains(&level) {
                return Err(bad(format!("zlib level must be 1 to 9, not {level}")));
            }
            Compression::Zlib {
                level: level as u32,
            }
        }
        Some("zstd") => {
            if protocol < 4 {
                return Err(bad("zstd needs protocol 4 or later".into()));
            }
            let level = level.unwrap_or(3);
            if !(-7..=22).contains(&level) {
                return Err(bad(format!("zstd level must be -7 to 22, not {level}")));
            }
            Compression::Zstd { level }
        }
        Some(other) => {
            return Err(bad(format!(
                "compress must be None, \"snappy\", \"zlib\" or \"zstd\", not {other:?}"
            )))
        }
    };
    if level.is_some() && matches!(compression, Compression::None | Compression::Snappy) {
        return Err(bad("level applies only to zlib and zstd".into()));
    }
    Ok(EncoderOptions {
        protocol,
        compression,
        compress_threshold: compress_threshold.unwrap_or(1024),
        dedupe_strings: dedupe,
        canonical,
        ..EncoderOptions::default()
    })
}

/// Encode ``obj`` as one Sereal document.
///
/// Args:
///     obj: the value (see ``sluice.sereal`` for the mapping).
///     protocol: 3, 4 or 5 (zstd needs 4 or later).
///     compress: ``None``, ``"snappy"``, ``"zlib"`` (levels 1-9, default 6) or ``"zstd"``
///         (levels -7 to 22, default 3). Bodies under ``compress_threshold`` bytes (default
///         1024), or that do not shrink, are written uncompressed (as the Perl encoder does).
///     level: the compression level.
///     dedupe: write repeated string values (longer than 3 bytes) once and ``COPY`` them
///         (hash keys are always de-duplicated).
///     canonical: sort hash keys (as Perl's ``sort_keys``) for stable output.
///     max_depth: deepest nesting accepted (a reference cycle hits it).
///
/// Without ``compress``/``dedupe`` the bytes are identical to ``Sereal::Encoder``'s for the
/// same data and protocol.
///
/// Raises:
///     SerealError: an unsupported type, a non-``str``/``bytes`` dict key, too deep, bad options.
#[pyfunction]
#[pyo3(signature = (obj, *, protocol=5, compress=None, level=None, dedupe=false, canonical=false, compress_threshold=None, max_depth=512))]
#[allow(clippy::too_many_arguments)]
pub fn dumps<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    protocol: u8,
    compress: Option<&str>,
    level: Option<i32>,
    dedupe: bool,
    canonical: bool,
    compress_threshold: Option<usize>,
    max_depth: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut opts = encoder_options(
        py,
        protocol,
        compress,
        level,
        dedupe,
        canonical,
        compress_threshold,
    )?;
    opts.max_depth = max_depth;
    crate::encode::encode(py, obj, &opts)
}

/// `dumps` through a `sereal::Value` tree and `sereal::Encoder` (the path before the direct
/// writer): kept as the reference the tests compare `dumps` with, byte for byte.
#[pyfunction]
#[pyo3(signature = (obj, *, protocol=5, compress=None, level=None, dedupe=false, canonical=false, compress_threshold=None, max_depth=512))]
#[allow(clippy::too_many_arguments)]
pub fn dumps_tree<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    protocol: u8,
    compress: Option<&str>,
    level: Option<i32>,
    dedupe: bool,
    canonical: bool,
    compress_threshold: Option<usize>,
    max_depth: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut opts = encoder_options(
        py,
        protocol,
        compress,
        level,
        dedupe,
        canonical,
        compress_threshold,
    )?;
    opts.max_depth = max_depth;
    let value = with_key_cache(|cache| ToValue::new(py, cache, max_depth).value(obj))?;
    let compressed = opts.compression != Compression::None;
    let doc = with_encoder(&opts, |enc| {
        if compressed {
            py.allow_threads(|| enc.encode(&value))
        } else {
            enc.encode(&value)
        }
    })
    .map_err(|e| codec_error(py, &e))?;
    let out = PyBytes::new(py, &doc);
    // The tree is freed after the bytes object exists; large trees take a while to free.
    drop(value);
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn limits(
    max_depth: Option<usize>,
    max_decompressed_bytes: Option<usize>,
    max_string_bytes: Option<usize>,
    max_elements: Option<usize>,
    max_values: Option<usize>,
    max_total_string_bytes: Option<usize>,
) -> Limits {
    let d = Limits::default();
    Limits {
        max_depth: max_depth.unwrap_or(d.max_depth),
        max_decompressed_bytes: max_decompressed_bytes.unwrap_or(d.max_decompressed_bytes),
        max_string_bytes: max_string_bytes.unwrap_or(d.max_string_bytes),
        max_elements: max_elements.unwrap_or(d.max_elements),
        max_values: max_values.unwrap_or(d.max_values),
        max_total_string_bytes: max_total_string_bytes.unwrap_or(d.max_total_string_bytes),
    }
}

/// Runs `f` on the bytes of `data` (bytes, bytearray, memoryview or any buffer).
fn with_bytes<R>(data: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> PyResult<R>) -> PyResult<R> {
    if let Ok(b) = data.downcast::<PyBytes>() {
        return f(b.as_bytes());
    }
    // bytearray, memoryview or any other buffer: one copy through `bytes(data)` (the buffer
    // API is not in the stable ABI before Python 3.11).
    let copy = data.py().get_type::<PyBytes>().call1((data,))?;
    f(copy.downcast::<PyBytes>()?.as_bytes())
}

/// Decode the Sereal document that makes up all of ``data``.
///
/// Args:
///     data: the document (any protocol 1-5, raw, Snappy, zlib or zstd).
///     binary: how binary strings come out: ``"auto"`` (``str`` if valid UTF-8, else
///         ``bytes``), ``"bytes"`` or ``"latin1"``.
///     max_depth: deepest nesting (default 512).
///     max_decompressed_bytes: largest decompressed body (default 256 MiB).
///     max_string_bytes: longest single string (default 64 MiB).
///     max_elements: most elements in one array or hash (default 8 Mi).
///     max_values: most values in the document, ``COPY`` re-reads included (default 8 Mi).
///     max_total_string_bytes: most string bytes in the document (default 256 MiB).
///
/// Raises:
///     SerealError: with ``offset`` and ``category`` (``"eof"`` for a truncated document,
///         ``"limit"`` when a limit stopped decoding, ``"invalid"`` otherwise), also for
///         trailing bytes after the document.
#[pyfunction]
#[pyo3(signature = (data, *, binary="auto", max_depth=None, max_decompressed_bytes=None, max_string_bytes=None, max_elements=None, max_values=None, max_total_string_bytes=None))]
#[allow(clippy::too_many_arguments)]
pub fn loads<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    binary: &str,
    max_depth: Option<usize>,
    max_decompressed_bytes: Option<usize>,
    max_string_bytes: Option<usize>,
    max_elements: Option<usize>,
    max_values: Option<usize>,
    max_total_string_bytes: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let mode = BinaryMode::parse(py, binary)?;
    let lim = limits(
        max_depth,
        max_decompressed_bytes,
        max_string_bytes,
        max_elements,
        max_values,
        max_total_string_bytes,
    );
    with_bytes(data, |bytes| {
        // The direct walker, else (exotic or bad input) the tree path, which decides.
        if let Some((v, len)) = crate::decode::decode(py, bytes, &lim, mode) {
            if len == bytes.len() {
                return Ok(v);
            }
        }
        let mut dec = Decoder::with_limits(lim.clone());
        let r = if bytes.len() >= RELEASE_GIL_BYTES {
            py.allow_threads(|| dec.decode(bytes))
        } else {
            dec.decode(bytes)
        };
        let value = r.map_err(|e| codec_error(py, &e))?;
        ToPy::new(py, mode).value(&value)
    })
}

/// `loads` through a `sereal::Value` tree (`sereal::Decoder` then `ToPy`): the path `loads` falls
/// back to, kept callable as the reference the tests compare `loads` with.
#[pyfunction]
#[pyo3(signature = (data, *, binary="auto", max_depth=None, max_decompressed_bytes=None, max_string_bytes=None, max_elements=None, max_values=None, max_total_string_bytes=None))]
#[allow(clippy::too_many_arguments)]
pub fn loads_tree<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    binary: &str,
    max_depth: Option<usize>,
    max_decompressed_bytes: Option<usize>,
    max_string_bytes: Option<usize>,
    max_elements: Option<usize>,
    max_values: Option<usize>,
    max_total_string_bytes: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let mode = BinaryMode::parse(py, binary)?;
    let lim = limits(
        max_depth,
        max_decompressed_bytes,
        max_string_bytes,
        max_elements,
        max_values,
        max_total_string_bytes,
    );
    let value = with_bytes(data, |bytes| {
        let mut dec = Decoder::with_limits(lim);
        let r = if bytes.len() >= RELEASE_GIL_BYTES {
            py.allow_threads(|| dec.decode(bytes))
        } else {
            dec.decode(bytes)
        };
        r.map_err(|e| codec_error(py, &e))
    })?;
    ToPy::new(py, mode).value(&value)
}

/// The direct walker alone: the value, or `None` where `loads` would fall back to the tree path
/// (for tests: plain data must never need the fallback). Default limits.
#[pyfunction]
#[pyo3(signature = (data, *, binary="auto"))]
pub fn loads_direct<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    binary: &str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let mode = BinaryMode::parse(py, binary)?;
    with_bytes(data, |bytes| {
        Ok(crate::decode::decode(py, bytes, &Limits::default(), mode)
            .filter(|(_, len)| *len == bytes.len())
            .map(|(v, _)| v))
    })
}

/// Decode a stream of concatenated documents (as `GET /v1/events?format=sereal` sends): a list
/// of the decoded bodies. A truncated last document is an error (category `eof`).
#[pyfunction]
#[pyo3(signature = (data, *, binary="auto", max_depth=None, max_decompressed_bytes=None, max_string_bytes=None, max_elements=None, max_values=None, max_total_string_bytes=None))]
#[allow(clippy::too_many_arguments)]
pub fn loads_many<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    binary: &str,
    max_depth: Option<usize>,
    max_decompressed_bytes: Option<usize>,
    max_string_bytes: Option<usize>,
    max_elements: Option<usize>,
    max_values: Option<usize>,
    max_total_string_bytes: Option<usize>,
) -> PyResult<Bound<'py, PyList>> {
    let mode = BinaryMode::parse(py, binary)?;
    let lim = limits(
        max_depth,
        max_decompressed_bytes,
        max_string_bytes,
        max_elements,
        max_values,
        max_total_string_bytes,
    );
    let items = with_bytes(data, |bytes| {
        let mut dec = Decoder::with_limits(lim.clone());
        let mut conv = ToPy::new(py, mode);
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            // The direct walker, else (exotic or bad input) the tree path, which decides.
            if let Some((v, len)) = crate::decode::decode(py, rest, &lim, mode) {
                out.push(v);
                at += len.max(1);
                continue;
            }
            let doc = dec.decode_document(rest).map_err(|e| {
                // Report offsets from the start of `data`, not of the document.
                let msg = format!("document at offset {at}: {e}");
                let category = if e.is_eof() {
                    "eof"
                } else if e.is_limit() {
                    "limit"
                } else {
                    "invalid"
                };
                sereal_error(py, msg, Some(at + e.offset()), category)
            })?;
            at += doc.len.max(1);
            out.push(conv.value(&doc.body)?);
        }
        Ok(out)
    })?;
    PyList::new(py, items)
}

/// Whether `s` may be a `dc` / `type` / `subtype` (the collector's rule: at most 64 bytes, no
/// `:`, `|` or control character; `type` and `dc` not empty).
fn valid_tag(s: &str, may_be_empty: bool) -> bool {
    (may_be_empty || !s.is_empty())
        && s.len() <= 64
        && !s.chars().any(|c| c == ':' || c == '|' || c.is_control())
}

/// What `pack_events` returns to the emitter.
#[pyclass(frozen, get_all)]
pub struct Packed {
    /// The payloads: Sereal documents whose bodies are arrays of events.
    pub payloads: Vec<Py<PyBytes>>,
    /// Events in all the payloads together.
    pub events: usize,
    /// Events that could not be encoded or had bad tags (dropped).
    pub invalid: usize,
    /// Events larger than `max_bytes` on their own (dropped).
    pub oversized: usize,
    /// The first reason an event was dropped, for the emitter's report.
    pub first_error: Option<String>,
}

/// Packs queued events into payloads for the collector.
///
/// `items` is a list of `(type, subtype, epoch, event)` tuples; each event (a dict) gets the
/// tags (its own `epoch`/`dc`/`type`/`subtype` keys are replaced; with no `dc` the collector
/// fills in its own). Events that cannot be
/// encoded, or whose tags the collector would refuse, are dropped and counted. The rest are
/// encoded as one array document (GIL released) and, when `max_bytes` is given (UDP datagrams),
/// cut by `sereal::split` into standalone documents of at most `max_bytes`; an event too large
/// for a datagram on its own is dropped and counted as oversized.
#[pyfunction]
#[pyo3(signature = (items, dc, *, max_bytes=None, protocol=5, compress=None, level=None))]
pub fn pack_events<'py>(
    py: Python<'py>,
    items: &Bound<'py, PyList>,
    dc: Option<&str>,
    max_bytes: Option<usize>,
    protocol: u8,
    compress: Option<&str>,
    level: Option<i32>,
) -> PyResult<Packed> {
    let opts = encoder_options(py, protocol, compress, level, false, false, None)?;
    with_key_cache(|cache| pack_with(py, items, dc, max_bytes, opts, cache))
}

#[allow(clippy::too_many_arguments)]
fn pack_with(
    py: Python<'_>,
    items: &Bound<'_, PyList>,
    dc: Option<&str>,
    max_bytes: Option<usize>,
    opts: EncoderOptions,
    cache: &mut crate::convert::KeyCache,
) -> PyResult<Packed> {
    let dc_ok = dc.is_none_or(|d| valid_tag(d, false));
    let k_epoch = Key::Binary(Arc::from(&b"epoch"[..]));
    let k_dc = Key::Binary(Arc::from(&b"dc"[..]));
    let k_type = Key::Binary(Arc::from(&b"type"[..]));
    let k_sub = Key::Binary(Arc::from(&b"subtype"[..]));
    let dc_value = dc.map(|d| Value::String(d.to_owned()));
    let mut conv = ToValue::new(py, cache, opts.max_depth);
    let mut values = Vec::with_capacity(items.len());
    let mut invalid = 0usize;
    let mut first_error: Option<String> = None;
    let note = |msg: String, first_error: &mut Option<String>| {
        if first_error.is_none() {
            *first_error = Some(msg);
        }
    };
    if !dc_ok {
        note(
            format!("bad dc {:?}", dc.unwrap_or_default()),
            &mut first_error,
        );
        return Ok(Packed {
            payloads: vec![],
            events: 0,
            invalid: items.len(),
            oversized: 0,
            first_error,
        });
    }
    for item in items.iter() {
        let event = (|| -> PyResult<Result<Value, String>> {
            let t = item.downcast::<PyTuple>()?;
            let type_: String = t.get_item(0)?.extract()?;
            let subtype: String = t.get_item(1)?.extract()?;
            // Whole seconds as given (the default); milliseconds, float seconds and RFC 3339
            // strings go as the caller wrote them: the collector normalises every form.
            let epoch_item = t.get_item(2)?;
            let epoch = if epoch_item.is_instance_of::<pyo3::types::PyBool>() {
                return Ok(Err("bad epoch: a bool".to_string()));
            } else if let Ok(i) = epoch_item.extract::<i64>() {
                Value::Int(i)
            } else if let Ok(f) = epoch_item.downcast::<pyo3::types::PyFloat>() {
                Value::Float(f.value())
            } else if let Ok(text) = epoch_item.downcast::<pyo3::types::PyString>() {
                Value::String(text.to_str()?.to_owned())
            } else {
                let name = epoch_item
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default();
                return Ok(Err(format!(
                    "bad epoch: an int, float or str (RFC 3339), not {name}"
                )));
            };
            if !valid_tag(&type_, false) {
                return Ok(Err(format!(
                    "bad type {type_:?} (1-64 bytes, no ':', '|' or control characters)"
                )));
            }
            if !valid_tag(&subtype, true) {
                return Ok(Err(format!(
                    "bad subtype {subtype:?} (0-64 bytes, no ':', '|' or control characters)"
                )));
            }
            let ev = t.get_item(3)?;
            let Ok(d) = ev.downcast::<PyDict>() else {
                let name = ev
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default();
                return Ok(Err(format!("an event must be a dict, not {name}")));
            };
            let mut tags = Vec::with_capacity(4);
            tags.push((&k_epoch, epoch));
            if let Some(dc) = &dc_value {
                tags.push((&k_dc, dc.clone()));
            }
            tags.push((&k_type, Value::String(type_)));
            tags.push((&k_sub, Value::String(subtype)));
            Ok(Ok(conv.event(d, tags)?))
        })();
        match event {
            Ok(Ok(v)) => values.push(v),
            Ok(Err(msg)) => {
                invalid += 1;
                note(msg, &mut first_error);
            }
            Err(e) => {
                invalid += 1;
                note(e.to_string(), &mut first_error);
            }
        }
    }
    if values.is_empty() {
        return Ok(Packed {
            payloads: vec![],
            events: 0,
            invalid,
            oversized: 0,
            first_error,
        });
    }
    let n = values.len();
    let result = py.allow_threads(|| -> Result<(Vec<Vec<u8>>, usize), sereal::Error> {
        let mut enc = Encoder::new(opts.clone())?;
        let doc = enc.encode(&Value::Array(values))?;
        let Some(max) = max_bytes else {
            return Ok((vec![doc], 0));
        };
        if doc.len() <= max {
            return Ok((vec![doc], 0));
        }
        let split_opts = sereal::SplitOptions {
            allow_oversized: true,
            threads: 1,
            ..Default::default()
        };
        let chunks = sereal::split(&doc, max, &split_opts, &Limits::default())?;
        // A chunk over the limit is one event alone (the splitter only lets a single element
        // exceed it): drop it, it cannot go in a datagram.
        let before = chunks.len();
        let kept: Vec<Vec<u8>> = chunks.into_iter().filter(|c| c.len() <= max).collect();
        let oversized = before - kept.len();
        Ok((kept, oversized))
    });
    let (docs, oversized) = result.map_err(|e| codec_error(py, &e))?;
    if oversized > 0 {
        note(
            format!(
                "{oversized} event(s) larger than a datagram ({} bytes)",
                max_bytes.unwrap_or(0)
            ),
            &mut first_error,
        );
    }
    let payloads = docs.iter().map(|d| PyBytes::new(py, d).unbind()).collect();
    Ok(Packed {
        payloads,
        events: n - oversized,
        invalid,
        oversized,
        first_error,
    })
}
