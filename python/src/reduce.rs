//! `sluice.reduce`'s engine: the reader's [`sluice_reader::reduce::Reducer`] over Python events,
//! so that the CLI (`sluice cat --group-by …`) and Python group and aggregate with one code;
//! and the reduce read of a data directory (`Reader.reduce`, and `sluice.reduce` over a read not
//! yet started): the reader's plan ([`PlanArgs::plan`]) run where the data is, reading only the
//! fields it names ([`Plan::narrow_read`]: blob chunks read lazily), rows out as windows complete.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sereal::{Path, Value};
use sluice_reader::reduce::{Plan, PlanArgs, ReduceSpec, Reducer as Inner, Sink};
use sluice_reader::{RangeReader, ReadItem, ReadRequest};
use sluice_store::EmbeddedStore;

use crate::convert::{with_key_cache, BinaryMode, ToPy, ToValue};
use crate::reader::{open_store, read_error, read_options, selection, Notes};

/// Read items handled per release of the GIL (rows come back as soon as some are ready).
const BATCH: usize = 4096;

/// Deepest event accepted (as `dumps`' default).
const MAX_DEPTH: usize = 512;

/// A running reduce: `push` batches of events (dicts), get the rows of finished windows back;
/// `finish` gives the rest.
#[pyclass(module = "sluice._native")]
pub struct Reducer {
    inner: Option<Inner>,
    time_field: Path,
    late_at_finish: u64,
    #[pyo3(get)]
    no_epoch: u64,
}

fn rows<'py>(py: Python<'py>, rows: Vec<Value>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut to = ToPy::new(py, BinaryMode::Auto);
    rows.iter().map(|r| to.value(r)).collect()
}

fn epoch_of(v: &Value) -> Option<i64> {
    match v.resolve() {
        Value::Int(i) => Some(*i),
        Value::UInt(u) => i64::try_from(*u).ok(),
        Value::Float(f) if f.is_finite() => Some(f.floor() as i64),
        _ => None,
    }
}

#[pymethods]
impl Reducer {
    #[new]
    #[pyo3(signature = (group_by, agg, window=None, *, time_field="epoch", max_groups=None, top=None, by=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        group_by: Vec<String>,
        agg: Vec<String>,
        window: Option<String>,
        time_field: &str,
        max_groups: Option<usize>,
        top: Option<usize>,
        by: Option<String>,
    ) -> PyResult<Reducer> {
        let mut spec = ReduceSpec::parse(&group_by, &agg, window.as_deref())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        if let Some(m) = max_groups {
            spec.max_groups = m.max(1);
        }
        if top.is_some() || by.is_some() {
            spec = spec
                .ranked(by.as_deref(), top)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        let time_field = Path::parse(time_field)
            .map_err(|e| PyValueError::new_err(format!("time_field {time_field:?}: {e}")))?;
        Ok(Reducer {
            inner: Some(Inner::new(spec)),
            time_field,
            late_at_finish: 0,
            no_epoch: 0,
        })
    }

    /// Adds `events` (dicts with the time field); returns the rows that are now complete.
    fn push<'py>(
        &mut self,
        py: Python<'py>,
        events: &Bound<'py, PyList>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Err(PyValueError::new_err("push after finish"));
        };
        let mut no_epoch = 0;
        with_key_cache(|cache| -> PyResult<()> {
            let mut conv = ToValue::new(py, cache, MAX_DEPTH);
            for ev in events.iter() {
                let ev = ev.downcast::<PyDict>().map_err(|_| {
                    PyValueError::new_err(format!(
                        "reduce takes events as dicts, not {}",
                        ev.get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })?;
                let value = conv.value(ev.as_any())?;
                match self
                    .time_field
                    .eval(&value)
                    .first()
                    .and_then(|v| epoch_of(v))
                {
                    Some(epoch) => inner
                        .push(epoch, &value)
                        .map_err(|e| PyValueError::new_err(e.to_string()))?,
                    None => no_epoch += 1,
                }
            }
            Ok(())
        })?;
        self.no_epoch += no_epoch;
        let ready = inner.ready();
        rows(py, ready)
    }

    /// The rows of every window left; the reducer is done.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        match self.inner.take() {
            None => Ok(Vec::new()),
            Some(inner) => {
                self.late_at_finish = inner.late();
                rows(py, inner.finish())
            }
        }
    }

    /// Events left out because their window had already been returned.
    #[getter]
    fn late(&self) -> u64 {
        self.inner.as_ref().map_or(self.late_at_finish, Inner::late)
    }
}

/// The plan of a reduce read's arguments (`GET /v1/events`' and `sluice cat`'s rules); a bad
/// one is a `ValueError`.
#[allow(clippy::too_many_arguments)]
fn plan_of(
    group_by: Vec<String>,
    agg: Vec<String>,
    window: Option<String>,
    count_by: Vec<String>,
    top: Option<usize>,
    by: Option<String>,
    max_groups: Option<usize>,
) -> PyResult<Plan> {
    PlanArgs {
        group_by,
        agg,
        window,
        count_by,
        top,
        by,
        max_groups,
    }
    .plan(false)
    .map_err(|e| PyValueError::new_err(e.to_string()))?
    .ok_or_else(|| {
        PyValueError::new_err("a reduce needs group_by, agg, window, count_by, or top and by")
    })
}

/// Checks the arguments of a reduce read (raises `ValueError` as the read would), so a server
/// read is refused before any request.
#[pyfunction]
#[pyo3(signature = (*, group_by=vec![], agg=vec![], window=None, count_by=vec![], top=None, by=None, max_groups=None))]
pub fn check_plan(
    group_by: Vec<String>,
    agg: Vec<String>,
    window: Option<String>,
    count_by: Vec<String>,
    top: Option<usize>,
    by: Option<String>,
    max_groups: Option<usize>,
) -> PyResult<()> {
    plan_of(group_by, agg, window, count_by, top, by, max_groups).map(|_| ())
}

/// A reduce read of a data directory in progress (see `Reader.reduce` in `sluice/reader.py`).
#[pyclass(module = "sluice._native")]
pub struct ReduceRead {
    reader: Option<RangeReader<Arc<EmbeddedStore>>>,
    sink: Option<Sink>,
    warnings: Notes,
    notices: Notes,
    hints: Vec<String>,
    binary: BinaryMode,
}

#[pymethods]
impl ReduceRead {
    /// The next rows (a list of dicts); an empty list when the read is over. More groups than
    /// `max_groups` raise `ValueError`.
    fn next_batch<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut rows = Vec::new();
        while rows.is_empty() {
            let (Some(reader), Some(sink)) = (self.reader.as_mut(), self.sink.as_mut()) else {
                break;
            };
            let mut warnings = Vec::new();
            let mut notices = Vec::new();
            let (done, failed) = py.allow_threads(|| {
                for (n, item) in reader.by_ref().enumerate() {
                    match item {
                        ReadItem::Event(e) => match sink.push_read(&e) {
                            Ok(ready) => rows.extend(ready),
                            Err(err) => return (true, Some(err)),
                        },
                        ReadItem::Warning(w) => warnings.push((w.key, w.reason)),
                        ReadItem::Notice(w) => notices.push((w.key, w.reason)),
                    }
                    if n + 1 >= BATCH && !rows.is_empty() {
                        return (false, None);
                    }
                }
                (true, None)
            });
            self.warnings.extend(warnings);
            self.notices.extend(notices);
            if let Some(err) = failed {
                self.close();
                return Err(PyValueError::new_err(err.to_string()));
            }
            if done {
                self.hints = reader.hints(sluice_reader::time::now_unix());
                // Closes the store (releases the directory lock) as soon as the read is over.
                self.reader = None;
                if let Some(sink) = self.sink.take() {
                    let (rest, late) = sink.finish();
                    rows.extend(rest);
                    if late > 0 {
                        self.warnings.push((
                            "reduce".into(),
                            format!("{late} event(s) came after their window was sent and were left out"),
                        ));
                    }
                }
            }
        }
        let mut conv = ToPy::new(py, self.binary);
        let out = rows
            .iter()
            .map(|v| conv.value(v))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, out)
    }

    /// Warnings gathered since the last call: `(key, reason)` pairs.
    fn take_warnings(&mut self) -> Notes {
        std::mem::take(&mut self.warnings)
    }

    /// Notices gathered since the last call (substream results computed here): `(key, reason)`.
    fn take_notices(&mut self) -> Notes {
        std::mem::take(&mut self.notices)
    }

    /// The hints of a read that is over (a type never seen, an empty range, …).
    fn take_hints(&mut self) -> Vec<String> {
        std::mem::take(&mut self.hints)
    }

    /// Stops the read and closes the store.
    fn close(&mut self) {
        self.reader = None;
        self.sink = None;
    }
}

/// Starts a reduce read of `[start, end)` over the data directory `dir`.
#[pyfunction]
#[pyo3(signature = (dir, start, end, *, group_by=vec![], agg=vec![], window=None, count_by=vec![], top=None, by=None, max_groups=None, dc=None, type_=None, subtype=None, where_=None, binary="auto", substream=None, no_fallback=false))]
#[allow(clippy::too_many_arguments)]
pub fn open_reduce(
    py: Python<'_>,
    dir: &str,
    start: i64,
    end: i64,
    group_by: Vec<String>,
    agg: Vec<String>,
    window: Option<String>,
    count_by: Vec<String>,
    top: Option<usize>,
    by: Option<String>,
    max_groups: Option<usize>,
    dc: Option<String>,
    type_: Option<String>,
    subtype: Option<String>,
    where_: Option<String>,
    binary: &str,
    substream: Option<String>,
    no_fallback: bool,
) -> PyResult<ReduceRead> {
    let binary = BinaryMode::parse(py, binary)?;
    let mut plan = plan_of(group_by, agg, window, count_by, top, by, max_groups)?;
    // As `sluice cat`: rows of a window the range cuts are marked `partial`.
    plan.set_range(start, end);
    let selection = selection(
        py,
        dc,
        type_,
        subtype,
        Vec::new(),
        where_,
        substream,
        no_fallback,
    )?;
    let store = open_store(py, dir)?;
    let mut opts = read_options(py, &store, &selection)?;
    // As `sluice cat --data`: the column files where they cover (same rows).
    opts.columns = sluice_columns::view::data_dir_view(std::path::Path::new(dir));
    plan.narrow_read(&mut opts);
    let sink = Sink::new(plan).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let req = ReadRequest::selected(start, end, selection);
    let reader = py
        .allow_threads(|| RangeReader::new(store, req, opts))
        .map_err(|e| read_error(py, e.to_string()))?;
    Ok(ReduceRead {
        reader: Some(reader),
        sink: Some(sink),
        warnings: Vec::new(),
        notices: Vec::new(),
        hints: Vec::new(),
        binary,
    })
}
