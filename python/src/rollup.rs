//! `Reader(data_dir=…).rollup(…)`: a rollup's states merged where the data is
//! ([`sluice_rollups::query`], the code `sluice rollup query` runs), rows as dicts.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sluice_reader::filter::Filter;
use sluice_rollups::{RollupError, RollupQuery};

use crate::reader::{open_store, read_error};

/// `(rows, warnings, other_events)` of the rollup `name` over `from <= epoch < to` at `step`
/// seconds (`None`: the rollup's), its groups filtered by `where_`.
#[pyfunction]
#[pyo3(signature = (data_dir, name, start, end, step=None, where_=None))]
pub fn rollup_query<'py>(
    py: Python<'py>,
    data_dir: &str,
    name: &str,
    start: i64,
    end: i64,
    step: Option<String>,
    where_: Option<String>,
) -> PyResult<(Bound<'py, PyList>, Vec<String>, u64)> {
    let step = step
        .as_deref()
        .map(sluice_reader::reduce::parse_window)
        .transpose()
        .map_err(|e| PyValueError::new_err(e.to_string().replace("--window", "step")))?;
    let filter = where_
        .as_deref()
        .map(Filter::parse)
        .transpose()
        .map_err(|e| PyValueError::new_err(format!("where: {e}")))?;
    let store = open_store(py, data_dir)?;
    let answer = py.allow_threads(|| {
        let def = sluice_substreams::registry::get(&*store, name).map_err(|e| e.to_string())?;
        sluice_rollups::query(
            &*store,
            &def,
            &RollupQuery {
                from: start,
                to: end,
                step,
                filter,
            },
        )
        .map_err(|e| match e {
            RollupError::Invalid(m) => m,
            RollupError::Read(m) => m,
        })
    });
    let answer = answer.map_err(|m| read_error(py, m))?;
    let rows = PyList::empty(py);
    for r in &answer.rows {
        let d = PyDict::new(py);
        d.set_item("start", r.start)?;
        for (k, v) in &r.group {
            d.set_item(k, v)?;
        }
        for (k, v) in &r.values {
            match v {
                Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => d.set_item(k, *f as i64)?,
                Some(f) => d.set_item(k, *f)?,
                None => d.set_item(k, py.None())?,
            }
        }
        rows.append(d)?;
    }
    Ok((rows, answer.warnings, answer.other_events))
}
