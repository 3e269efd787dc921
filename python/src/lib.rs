//! `sluice._native`: the Rust half of the `sluice` Python package.
//!
//! Modules:
//! - `convert`: Python objects ↔ `sereal::Value` (the documented mapping).
//! - `encode` / `decode`: Python objects ↔ Sereal bytes in one walk, no `Value` tree (the fast
//!   paths of `dumps` and `loads`; `decode` falls back to the tree path on exotic or bad input).
//! - `codec`: `dumps`, `loads`, `loads_many` and `pack_events` (the emitter's batch encoder and
//!   datagram splitter), over `encode`/`decode` and `crates/sereal`; `dumps_tree`/`loads_tree`
//!   are the tree paths, kept as the tests' reference.
//! - `reader`: range reads and tails of a data directory over `crates/reader` and `crates/store`.
//! - `reduce`: `sluice.reduce`'s engine, the reader's `reduce::Reducer` over Python events, and
//!   the reduce read of a data directory (`Reader.reduce`: only the fields it names are read).
//!
//! The public API, its documentation and type hints live in the Python modules (`sluice/*.py`);
//! this module is private to them.

use pyo3::prelude::*;
use pyo3::types::PyType;

/// Rust-side allocations (the `sereal::Value` trees built and freed for every `dumps`/`loads`
/// call, decoded blobs) go through mimalloc: glibc's malloc/free were a fifth of encode time.
/// Python's own objects still use Python's allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod arrow;
mod codec;
mod convert;
mod decode;
mod encode;
mod reader;
mod reduce;
mod rollup;

/// Registers the Python classes the native code creates or recognises (called once, by
/// `sluice._types`, at import).
#[pyfunction]
fn register_types(
    py: Python<'_>,
    sereal_error: Py<PyType>,
    read_error: Py<PyType>,
    perl_object: Py<PyType>,
    perl_regexp: Py<PyType>,
) -> PyResult<()> {
    // A second registration (a reloaded module) keeps the first classes: the cell is set once.
    let _ = convert::TYPES.set(
        py,
        convert::Types {
            sereal_error,
            read_error,
            perl_object,
            perl_regexp,
        },
    );
    Ok(())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(register_types, m)?)?;
    m.add_function(wrap_pyfunction!(codec::dumps, m)?)?;
    m.add_function(wrap_pyfunction!(codec::loads, m)?)?;
    m.add_function(wrap_pyfunction!(codec::loads_many, m)?)?;
    m.add_function(wrap_pyfunction!(codec::dumps_tree, m)?)?;
    m.add_function(wrap_pyfunction!(codec::loads_tree, m)?)?;
    m.add_function(wrap_pyfunction!(codec::loads_direct, m)?)?;
    m.add_function(wrap_pyfunction!(codec::pack_events, m)?)?;
    m.add_class::<codec::Packed>()?;
    m.add_function(wrap_pyfunction!(reader::open_range, m)?)?;
    m.add_function(wrap_pyfunction!(rollup::rollup_query, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::open_batches, m)?)?;
    m.add_class::<arrow::BatchIter>()?;
    m.add_function(wrap_pyfunction!(reader::open_tail, m)?)?;
    m.add_function(wrap_pyfunction!(reader::parse_time, m)?)?;
    m.add_class::<reader::RangeIter>()?;
    m.add_class::<reader::TailHandle>()?;
    m.add_class::<reduce::Reducer>()?;
    m.add_function(wrap_pyfunction!(reduce::open_reduce, m)?)?;
    m.add_function(wrap_pyfunction!(reduce::check_plan, m)?)?;
    m.add_class::<reduce::ReduceRead>()?;
    Ok(())
}
