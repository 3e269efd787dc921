//! Reading a data directory with `sluice_reader` (range reads and tails over the embedded store).
//!
//! The store is opened per read and closed when the read ends (or its iterator is dropped):
//! the embedded store takes an exclusive lock on its directory, and a `Reader` object that held
//! it for its whole life would lock out `sluice serve` and `sluice cat` needlessly.

use std::path::Path as FsPath;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyList;
use sereal::Value;
use sluice_reader::{
    Cursor, RangeReader, ReadItem, ReadOptions, ReadRequest, Selection, Tail, TailOptions,
};
use sluice_store::{EmbeddedStore, StoreError};

use crate::convert::{types, BinaryMode, ToPy};

/// Events converted to Python per batch: the GIL is released while a batch is read.
const BATCH: usize = 512;

pub(crate) fn read_error(py: Python<'_>, msg: String) -> PyErr {
    match types(py) {
        Ok(t) => PyErr::from_type(t.read_error.bind(py).clone(), (msg,)),
        Err(e) => e,
    }
}

pub(crate) fn open_store(py: Python<'_>, dir: &str) -> PyResult<Arc<EmbeddedStore>> {
    if !FsPath::new(dir).is_dir() {
        return Err(read_error(py, format!("{dir}: no such data directory")));
    }
    // Read-only: a reader never changes the files (damage is skipped and reported as warnings).
    match py.allow_threads(|| EmbeddedStore::open_read_only(dir)) {
        Ok(s) => Ok(Arc::new(s)),
        Err(e @ StoreError::Locked { .. }) => Err(read_error(
            py,
            format!("{e}: a running server owns this directory; read it with Reader(server=URL)"),
        )),
        Err(e) => Err(read_error(py, format!("{dir}: {e}"))),
    }
}

/// The keyword arguments of a read as the one [`Selection`] every reader takes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn selection(
    py: Python<'_>,
    dc: Option<String>,
    type_: Option<String>,
    subtype: Option<String>,
    select: Vec<String>,
    where_: Option<String>,
    substream: Option<String>,
    no_fallback: bool,
) -> PyResult<Selection> {
    Selection::from_texts(dc, type_, subtype, &select, where_.as_deref())
        .map(|s| s.with_substream(substream, no_fallback))
        .map_err(|e| read_error(py, e.to_string()))
}

/// The read options of `selection`: with a substream, its definition from the store's registry
/// (a missing result is computed here: declarative in Rust, Python in a local worker).
pub(crate) fn read_options(
    py: Python<'_>,
    store: &EmbeddedStore,
    sel: &Selection,
) -> PyResult<ReadOptions> {
    py.allow_threads(|| sluice_substreams::view::read_options(store, sel))
        .map_err(|e| read_error(py, e.to_string()))
}

/// `(key, reason)` pairs.
pub(crate) type Notes = Vec<(String, String)>;

/// Splits read items into events, `(key, reason)` warnings and notices.
fn sort_items(
    items: Vec<ReadItem>,
    events: &mut Vec<Value>,
    warnings: &mut Notes,
    notices: &mut Notes,
) {
    for item in items {
        match item {
            ReadItem::Event(e) => events.push(e.value),
            ReadItem::Warning(w) => warnings.push((w.key, w.reason)),
            ReadItem::Notice(w) => notices.push((w.key, w.reason)),
        }
    }
}

/// A range read in progress (see `sluice/reader.py`).
#[pyclass(module = "sluice._native")]
pub struct RangeIter {
    reader: Option<RangeReader<Arc<EmbeddedStore>>>,
    warnings: Notes,
    notices: Notes,
    /// What to tell the user once the read is over (`sluice_reader::hints`).
    hints: Vec<String>,
    binary: BinaryMode,
}

#[pymethods]
impl RangeIter {
    /// The next events (a list of dicts); an empty list when the read is over.
    fn next_batch<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let Some(reader) = self.reader.as_mut() else {
            return Ok(PyList::empty(py));
        };
        let (items, done) = py.allow_threads(|| {
            let items: Vec<ReadItem> = reader.by_ref().take(BATCH).collect();
            let done = items.len() < BATCH;
            (items, done)
        });
        if done {
            self.hints = reader.hints(sluice_reader::time::now_unix());
            // Closes the store (releases the directory lock) as soon as the read is over.
            self.reader = None;
        }
        let mut events = Vec::with_capacity(items.len());
        sort_items(items, &mut events, &mut self.warnings, &mut self.notices);
        let mut conv = ToPy::new(py, self.binary);
        let out = events
            .iter()
            .map(|v| conv.value(v))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, out)
    }

    /// Warnings gathered since the last call: `(key, reason)` pairs.
    fn take_warnings(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.warnings)
    }

    /// Notices gathered since the last call (substream results computed here): `(key, reason)`.
    fn take_notices(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.notices)
    }

    /// The hints of a read that is over (a field or type never seen, an empty range, …).
    fn take_hints(&mut self) -> Vec<String> {
        std::mem::take(&mut self.hints)
    }

    /// Stops the read and closes the store.
    fn close(&mut self) {
        self.reader = None;
    }
}

/// Starts a range read of `[start, end)` over the data directory `dir`.
#[pyfunction]
#[pyo3(signature = (dir, start, end, *, dc=None, type_=None, subtype=None, select=vec![], where_=None, binary="auto", substream=None, no_fallback=false))]
#[allow(clippy::too_many_arguments)]
pub fn open_range(
    py: Python<'_>,
    dir: &str,
    start: i64,
    end: i64,
    dc: Option<String>,
    type_: Option<String>,
    subtype: Option<String>,
    select: Vec<String>,
    where_: Option<String>,
    binary: &str,
    substream: Option<String>,
    no_fallback: bool,
) -> PyResult<RangeIter> {
    let binary = BinaryMode::parse(py, binary)?;
    let selection = selection(
        py,
        dc,
        type_,
        subtype,
        select,
        where_,
        substream,
        no_fallback,
    )?;
    let store = open_store(py, dir)?;
    let mut opts = read_options(py, &store, &selection)?;
    // As `sluice cat --data`: the column files where they cover (same answer).
    opts.columns = sluice_columns::view::data_dir_view(FsPath::new(dir));
    let req = ReadRequest::selected(start, end, selection);
    let reader = py
        .allow_threads(|| RangeReader::new(store, req, opts))
        .map_err(|e| read_error(py, e.to_string()))?;
    Ok(RangeIter {
        reader: Some(reader),
        warnings: Vec::new(),
        notices: Vec::new(),
        hints: Vec::new(),
        binary,
    })
}

/// What one poll of a tail gives: the events, the `(key, reason)` warnings, whether it caught up
/// with now, and the notices.
type Polled<'py> = (Bound<'py, PyList>, Notes, bool, Notes);

/// A tail of a data directory (see `sluice/reader.py`).
#[pyclass(module = "sluice._native")]
pub struct TailHandle {
    tail: Option<Tail<Arc<EmbeddedStore>>>,
    binary: BinaryMode,
}

#[pymethods]
impl TailHandle {
    /// Reads what is new at `now`: `(events, warnings, caught_up)`.
    fn poll<'py>(&mut self, py: Python<'py>, now: i64) -> PyResult<Polled<'py>> {
        let Some(tail) = self.tail.as_mut() else {
            return Err(read_error(py, "the tail is closed".into()));
        };
        let (result, caught_up) = py.allow_threads(|| {
            let r = tail.poll(now);
            (r, tail.caught_up())
        });
        let mut events = Vec::new();
        let mut warnings = Vec::new();
        let mut notices = Vec::new();
        match result {
            Ok(items) => sort_items(items, &mut events, &mut warnings, &mut notices),
            // The store could not list epochs: reported, and the next poll retries.
            Err(e) => warnings.push(("tail".to_owned(), e.to_string())),
        }
        let mut conv = ToPy::new(py, self.binary);
        let out = events
            .iter()
            .map(|v| conv.value(v))
            .collect::<PyResult<Vec<_>>>()?;
        Ok((PyList::new(py, out)?, warnings, caught_up, notices))
    }

    /// The cursor token after the last poll.
    fn cursor(&self) -> Option<String> {
        self.tail.as_ref().map(|t| t.cursor().to_token())
    }

    /// Closes the store.
    fn close(&mut self) {
        self.tail = None;
    }
}

/// Starts a tail of the data directory `dir` from the epoch `start` or a cursor token.
#[pyfunction]
#[pyo3(signature = (dir, *, start=None, cursor=None, dc=None, type_=None, subtype=None, select=vec![], where_=None, binary="auto", substream=None, no_fallback=false))]
#[allow(clippy::too_many_arguments)]
pub fn open_tail(
    py: Python<'_>,
    dir: &str,
    start: Option<i64>,
    cursor: Option<&str>,
    dc: Option<String>,
    type_: Option<String>,
    subtype: Option<String>,
    select: Vec<String>,
    where_: Option<String>,
    binary: &str,
    substream: Option<String>,
    no_fallback: bool,
) -> PyResult<TailHandle> {
    let binary = BinaryMode::parse(py, binary)?;
    let selection = selection(
        py,
        dc,
        type_,
        subtype,
        select,
        where_,
        substream,
        no_fallback,
    )?;
    let start = match (cursor, start) {
        (Some(token), _) => token
            .parse::<Cursor>()
            .map_err(|e| read_error(py, format!("cursor: {e}")))?,
        (None, Some(epoch)) => Cursor::at(epoch),
        (None, None) => Cursor::at(sluice_reader::time::now_unix()),
    };
    let store = open_store(py, dir)?;
    let opts = TailOptions {
        read: read_options(py, &store, &selection)?,
        ..TailOptions::default()
    };
    let tail = Tail::new(store, selection, start, opts);
    Ok(TailHandle {
        tail: Some(tail),
        binary,
    })
}

/// Parses a time argument as `sluice cat --from` does (Unix seconds, RFC 3339, `now`, `-5m`).
#[pyfunction]
pub fn parse_time(py: Python<'_>, text: &str, now: i64) -> PyResult<i64> {
    sluice_reader::parse_time(text, now).map_err(|e| read_error(py, format!("time {text:?}: {e}")))
}
