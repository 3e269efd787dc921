//! A substream as a reader sees it, and backfill.
//!
//! [`SubstreamReader`] implements [`sluice_reader::SubstreamView`] from a registered
//! definition: a range read or a tail with `substream=NAME` reads the stored results and, for a
//! chunk without one, computes it here with the same [`Executor`] the runner uses (declarative:
//! the same Rust pass; Python: the same source in a local worker pool, started on first need).
//! [`read_options`] is what every reader front end (CLI, HTTP, Python) calls.
//!
//! [`backfill`] computes a substream for blobs stored before it existed (or whose run was shed),
//! explicitly, over a time range: chunks that already have a result are left alone, so running
//! it twice stores nothing new.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use sluice_blob::{EpochKey, EventKey, IndexEntry};
use sluice_reader::{ComputeError, ReadOptions, Selection, SubstreamView};
use sluice_store::{BlobKey, Namespace, ReadStore, Store};

use crate::exec::{Compiled, Executor, PythonPool, PythonSettings};
use crate::registry::{self, Definition, Error};

/// A registered substream, readable with fallback; see the [module docs](self).
#[derive(Debug)]
pub struct SubstreamReader {
    compiled: Arc<Compiled>,
    exec: Mutex<Executor>,
    /// Holds the Python source file while the reader lives.
    _code_dir: tempfile::TempDir,
}

impl SubstreamReader {
    /// The substream `name` as registered in `store`.
    pub fn open<S: ReadStore + ?Sized>(store: &S, name: &str) -> Result<SubstreamReader, Error> {
        SubstreamReader::new(registry::get(store, name)?, PythonSettings::default())
    }

    /// A reader of `def`, running Python (for fallbacks) with `python`.
    pub fn new(def: Definition, python: PythonSettings) -> Result<SubstreamReader, Error> {
        let dir = tempfile::tempdir().map_err(|e| Error::Invalid(e.to_string()))?;
        let compiled = Compiled::new(def, dir.path()).map_err(|e| Error::Invalid(e.to_string()))?;
        let python = PythonSettings {
            workers: 1,
            ..python
        };
        Ok(SubstreamReader {
            compiled: Arc::new(compiled),
            exec: Mutex::new(Executor::new(Arc::new(PythonPool::new(python)))),
            _code_dir: dir,
        })
    }

    /// The definition.
    pub fn definition(&self) -> &Definition {
        &self.compiled.def
    }
}

impl SubstreamView for SubstreamReader {
    fn name(&self) -> &str {
        &self.compiled.def.name
    }

    fn applies(&self, dc: &str, type_: &str, subtype: &str) -> bool {
        self.compiled.def.applies(dc, type_, subtype)
    }

    fn compute(&self, key: &EventKey, bytes: &[u8]) -> Result<Vec<u8>, ComputeError> {
        let mut exec = self.exec.lock().unwrap_or_else(|e| e.into_inner());
        match exec
            .run(std::slice::from_ref(&self.compiled), key, bytes)
            .pop()
        {
            Some(Ok(b)) => Ok(b),
            Some(Err(m)) => Err(ComputeError {
                reason: m.reason,
                detail: m.detail,
            }),
            // `run` answers every substream it is given (a missing one is a `crashed` miss).
            None => Err(ComputeError {
                reason: "crashed",
                detail: "not run".into(),
            }),
        }
    }
}

/// The read options for `selection`: with a substream, its [`SubstreamReader`] (an unknown
/// name is [`Error::NotFound`]).
pub fn read_options<S: ReadStore + ?Sized>(
    store: &S,
    selection: &Selection,
) -> Result<ReadOptions, Error> {
    let mut opts = ReadOptions::default();
    if let Some(name) = &selection.substream {
        opts.substream = Some(Arc::new(SubstreamReader::open(store, name)?));
    }
    Ok(opts)
}

/// What [`backfill`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackfillReport {
    /// Chunks the substream applies to in the range.
    pub chunks: u64,
    /// Of those, chunks that had a result already (left alone).
    pub present: u64,
    /// Results stored now.
    pub stored: u64,
    /// Runs without a result, by reason (`missing_blob`, `store_error` or an executor reason).
    pub misses: BTreeMap<String, u64>,
}

/// Computes `name` for the chunks of `from <= epoch < to` that have no result yet.
pub fn backfill(
    store: &dyn Store,
    name: &str,
    from: i64,
    to: i64,
    python: PythonSettings,
) -> Result<BackfillReport, Error> {
    let def = registry::get(store, name)?;
    let dir = tempfile::tempdir().map_err(|e| Error::Invalid(e.to_string()))?;
    let compiled =
        Arc::new(Compiled::new(def, dir.path()).map_err(|e| Error::Invalid(e.to_string()))?);
    let mut exec = Executor::new(Arc::new(PythonPool::new(python)));
    let ns = Namespace::Substream(name.to_owned());
    let mut report = BackfillReport::default();
    let miss = |report: &mut BackfillReport, reason: &str| {
        *report.misses.entry(reason.to_owned()).or_default() += 1;
    };
    for (epoch, dc) in store.list_epochs(compiled.def.dc.as_deref(), from, to)? {
        let done = store.get_namespace_index(&ns, epoch, &dc)?;
        let Ok(epoch_key) = EpochKey::new(epoch, &dc) else {
            continue;
        };
        for text in store.get_epoch_index(epoch, &dc)? {
            let Ok(entry) = IndexEntry::parse(&text) else {
                continue;
            };
            if !compiled.def.applies(&dc, entry.type_(), entry.subtype()) {
                continue;
            }
            report.chunks += 1;
            if done.contains(&text) {
                report.present += 1;
                continue;
            }
            let key = EventKey::from_parts(&epoch_key, &entry);
            let key_text = key.to_string();
            let bytes = match store.get_blob(&Namespace::Events, BlobKey::new(epoch, &key_text)) {
                Ok(Some(b)) => b,
                Ok(None) | Err(_) => {
                    miss(&mut report, "missing_blob");
                    continue;
                }
            };
            match exec
                .run(std::slice::from_ref(&compiled), &key, &bytes)
                .pop()
            {
                Some(Ok(result)) => {
                    let stored = store
                        .put_blob(&ns, BlobKey::new(epoch, &key_text), &result)
                        .and_then(|_| store.add_to_namespace_index(&ns, epoch, &dc, &[&text]));
                    match stored {
                        Ok(()) => report.stored += 1,
                        Err(_) => miss(&mut report, "store_error"),
                    }
                }
                Some(Err(m)) => miss(&mut report, m.reason),
                None => miss(&mut report, "crashed"),
            }
        }
    }
    store.flush()?;
    Ok(report)
}
