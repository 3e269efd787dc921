//! `sluice.reduce`'s engine: the reader's [`sluice_reader::reduce::Reducer`] over Python events,
//! so that the CLI (`sluice cat --group-by …`) and Python group and aggregate with one code.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sereal::{Path, Value};
use sluice_reader::reduce::{ReduceSpec, Reducer as Inner};

use crate::convert::{with_key_cache, BinaryMode, ToPy, ToValue};

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
