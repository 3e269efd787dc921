//! A range read of a data directory as Arrow record batches (`Reader.iter_batches()`,
//! `Reader.to_arrow()`): events become columns in Rust (`sluice_columns::export`, the history
//! tier's layout and sticky types), a batch at a time, and cross to Python as Arrow IPC streams
//! that pyarrow opens without copying value by value.

use std::sync::Arc;

use arrow_ipc::writer::StreamWriter;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sluice_columns::convert::RecordBatch;
use sluice_columns::export::{ArrowBatches, TypeBatch};
use sluice_reader::{RangeReader, ReadItem, ReadRequest};
use sluice_store::EmbeddedStore;

use crate::reader::{open_store, read_error, read_options, selection, Notes};

/// Items read between checks for a full batch (the GIL is released meanwhile).
const STEP: usize = 4096;

/// A range read handing out Arrow batches (see `sluice/reader.py`).
#[pyclass(module = "sluice._native")]
pub struct BatchIter {
    reader: Option<RangeReader<Arc<EmbeddedStore>>>,
    batches: Option<ArrowBatches>,
    /// Batches ready to hand out.
    ready: std::collections::VecDeque<TypeBatch>,
    warnings: Notes,
    notices: Notes,
}

#[pymethods]
impl BatchIter {
    /// The next batch as an Arrow IPC stream (`pyarrow.ipc.open_stream`), `None` when the read
    /// is over. Its schema's metadata has `sluice.dc` and `sluice.type`.
    fn next_ipc<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                let bytes = py
                    .allow_threads(|| ipc(b))
                    .map_err(|e| read_error(py, format!("arrow: {e}")))?;
                return Ok(Some(PyBytes::new(py, &bytes)));
            }
            let Some(reader) = self.reader.as_mut() else {
                // Read over: what is left of every (dc, type).
                let Some(batches) = self.batches.take() else {
                    return Ok(None);
                };
                let rest = py
                    .allow_threads(|| batches.finish())
                    .map_err(|e| read_error(py, format!("arrow: {e}")))?;
                self.ready.extend(rest);
                continue;
            };
            let Some(batches) = self.batches.as_mut() else {
                return Ok(None);
            };
            let (warnings, notices, ready) =
                (&mut self.warnings, &mut self.notices, &mut self.ready);
            let done = py.allow_threads(|| -> Result<bool, String> {
                for _ in 0..STEP {
                    match reader.next() {
                        Some(ReadItem::Event(e)) => {
                            let k = &e.key;
                            let chunk = k.chunk().to_string();
                            let full = batches
                                .push(k.epoch(), k.dc(), k.type_(), k.subtype(), &chunk, e.value)
                                .map_err(|e| e.to_string())?;
                            if let Some(full) = full {
                                ready.push_back(full);
                                return Ok(false);
                            }
                        }
                        Some(ReadItem::Warning(w)) => warnings.push((w.key, w.reason)),
                        Some(ReadItem::Notice(w)) => notices.push((w.key, w.reason)),
                        None => return Ok(true),
                    }
                }
                Ok(false)
            });
            match done {
                // Closes the store (releases the directory lock) as soon as the read is over.
                Ok(true) => self.reader = None,
                Ok(false) => {}
                Err(e) => return Err(read_error(py, format!("arrow: {e}"))),
            }
        }
    }

    /// Warnings gathered since the last call: `(key, reason)` pairs.
    fn take_warnings(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.warnings)
    }

    /// Notices gathered since the last call: `(key, reason)` pairs.
    fn take_notices(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.notices)
    }

    /// Stops the read and closes the store.
    fn close(&mut self) {
        self.reader = None;
        self.batches = None;
        self.ready.clear();
    }
}

/// One batch as an IPC stream, its (dc, type) in the schema's metadata.
fn ipc(b: TypeBatch) -> Result<Vec<u8>, arrow_schema::ArrowError> {
    let mut meta = b.batch.schema().metadata().clone();
    meta.insert("sluice.dc".to_owned(), b.dc);
    meta.insert("sluice.type".to_owned(), b.type_);
    let schema = Arc::new(b.batch.schema().as_ref().clone().with_metadata(meta));
    let batch = RecordBatch::try_new(schema.clone(), b.batch.columns().to_vec())?;
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new(&mut out, &schema)?;
    w.write(&batch)?;
    w.finish()?;
    drop(w);
    Ok(out)
}

/// Starts a range read of `[start, end)` over the data directory `dir`, as Arrow batches of at
/// most `rows_per_batch` events per (dc, type); the column files are read where they cover
/// unless `columns` is false.
#[pyfunction]
#[pyo3(signature = (dir, start, end, *, dc=None, type_=None, subtype=None, select=vec![], where_=None, rows_per_batch=65536, columns=true))]
#[allow(clippy::too_many_arguments)]
pub fn open_batches(
    py: Python<'_>,
    dir: &str,
    start: i64,
    end: i64,
    dc: Option<String>,
    type_: Option<String>,
    subtype: Option<String>,
    select: Vec<String>,
    where_: Option<String>,
    rows_per_batch: usize,
    columns: bool,
) -> PyResult<BatchIter> {
    if rows_per_batch == 0 {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "rows_per_batch must be at least 1",
        ));
    }
    let selection = selection(py, dc, type_, subtype, select, where_, None, false)?;
    let store = open_store(py, dir)?;
    let mut opts = read_options(py, &store, &selection)?;
    if columns {
        opts.columns = sluice_columns::view::data_dir_view(std::path::Path::new(dir));
    }
    let req = ReadRequest::selected(start, end, selection);
    let reader = py
        .allow_threads(|| RangeReader::new(store, req, opts))
        .map_err(|e| read_error(py, e.to_string()))?;
    Ok(BatchIter {
        reader: Some(reader),
        batches: Some(ArrowBatches::new(rows_per_batch)),
        ready: Default::default(),
        warnings: Vec::new(),
        notices: Vec::new(),
    })
}
