//! Reading chunks from the column files instead of their blobs (see "Columns" in
//! [`crate::range`]).
//!
//! The range reader asks, per chunk the index lists, whether a file holds it
//! ([`ColumnsSource::place`]); if so it takes the chunk's rows from that file
//! ([`ColumnsSource::take`]) and applies the same `where` and `select` as the blob path, on the
//! rows read back as events. Only the columns the read needs are read: the top-level fields of the
//! select and where paths (all of them without either), with their sibling columns and `_rest`.
//!
//! Each file is read forwards once per read: its rows are in (second, subtype, chunk) order, the
//! order the reader asks for them, so a cursor keeps one second of one file in memory.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use sereal::lazy::Step;
use sereal::{Key, Path, Value};
use sluice_columns::convert::{
    columns_for_field, from_batch, RowOut, CHUNK_COLUMN, EPOCH_COLUMN, REST_COLUMN, SUBTYPE_COLUMN,
};
use sluice_columns::layout::{hour_of, HOUR};
use sluice_columns::parquet_file::{
    FileQuery, ParquetFile, ParquetRecordBatchReader, REST_FIELDS_KEY,
};
use sluice_columns::view::{ChunkPlace, ColumnsView, HourFiles};

use crate::facts::ReadFacts;
use crate::filter::Filter;
use crate::request::ReadRequest;

/// One chunk held by a file: where to take its rows.
#[derive(Debug, Clone)]
pub(crate) struct ColumnsChunk {
    /// The file's path.
    pub path: String,
    /// The rows the covers promise.
    pub events: u64,
}

/// The columns side of one range read.
pub(crate) struct ColumnsSource {
    view: Arc<ColumnsView>,
    from: i64,
    to: i64,
    /// Top-level fields to read; `None`: every column.
    fields: Option<BTreeSet<String>>,
    hours: HashMap<i64, Option<Arc<HourFiles>>>,
    cursors: HashMap<String, FileCursor>,
    filter: Option<Filter>,
    select: Vec<(Path, Key, bool)>,
    /// Whether the file's rows are pruned by anything but time (then a chunk may come back with
    /// fewer rows than its covers say).
    pruned: bool,
    /// Warnings about the columns (damaged files), reported once.
    pub(crate) damaged: Vec<(String, String)>,
}

/// A forward cursor over one file.
struct FileCursor {
    /// In a mutex only to keep the reader `Sync` (the Python bindings share it): one thread
    /// uses it at a time anyway.
    batches: std::sync::Mutex<ParquetRecordBatchReader>,
    /// Rows read but not taken yet, in file order.
    rows: VecDeque<RowOut>,
    done: bool,
}

impl ColumnsSource {
    /// The columns side of `req` over `view`.
    pub(crate) fn new(
        view: Arc<ColumnsView>,
        req: &ReadRequest,
        needs: Option<&[Path]>,
    ) -> ColumnsSource {
        let sel = &req.selection;
        let mut paths: Vec<&Path> = sel.select.iter().collect();
        if let Some(f) = &sel.filter {
            paths.extend(f.paths());
        }
        if sel.select.is_empty() {
            paths.extend(needs.unwrap_or_default());
        }
        // Without a select (or a consumer that names what it reads) the whole event is the
        // answer: every column.
        let fields = if sel.select.is_empty() && needs.is_none() {
            None
        } else {
            paths
                .iter()
                .map(|p| match p.steps().first() {
                    Some(Step::Key(k)) => Some(k.clone()),
                    _ => None,
                })
                .collect::<Option<BTreeSet<String>>>()
        };
        let select = sel
            .select
            .iter()
            .map(|p| {
                let many = p.steps().iter().any(|s| matches!(s, Step::Wildcard));
                (p.clone(), Key::Utf8(Arc::from(p.to_string())), many)
            })
            .collect();
        ColumnsSource {
            view,
            from: req.from,
            to: req.to,
            fields,
            hours: HashMap::new(),
            cursors: HashMap::new(),
            pruned: sel
                .filter
                .as_ref()
                .is_some_and(|f| !f.string_equalities().is_empty()),
            filter: sel.filter.clone(),
            select,
            damaged: Vec::new(),
        }
    }

    /// The files of the hour holding `epoch` (`None` when they cannot be listed: blobs then).
    fn hour(&mut self, epoch: i64) -> Option<Arc<HourFiles>> {
        let hour = hour_of(epoch);
        if let Some(h) = self.hours.get(&hour) {
            return h.clone();
        }
        let got = match self.view.hour(hour) {
            Ok(files) => {
                self.damaged.extend(files.damaged.iter().cloned());
                Some(files)
            }
            Err(e) => {
                self.damaged.push((
                    self.view.location().describe(),
                    format!("listing hour {hour}: {e}"),
                ));
                None
            }
        };
        self.hours.insert(hour, got.clone());
        got
    }

    /// The (epoch, dc) pairs only the columns may hold, for `[from, to)` and `dc`.
    pub(crate) fn epochs(&mut self, dc: Option<&str>) -> Vec<(i64, String)> {
        let mut out = Vec::new();
        if self.to <= self.from {
            return out;
        }
        let mut hour = hour_of(self.from);
        while hour < self.to {
            if let Some(files) = self.hour(hour) {
                out.extend(
                    files
                        .epochs()
                        .filter(|(e, d)| {
                            *e >= self.from && *e < self.to && dc.is_none_or(|want| want == *d)
                        })
                        .map(|(e, d)| (e, d.to_owned())),
                );
            }
            hour += HOUR;
        }
        out
    }

    /// The index entries (`type:subtype:chunk`) the files hold for (epoch, dc).
    pub(crate) fn entries(&mut self, epoch: i64, dc: &str) -> Vec<String> {
        self.hour(epoch)
            .map(|h| h.entries(epoch, dc))
            .unwrap_or_default()
    }

    /// Where a chunk's rows are, if a file holds it.
    pub(crate) fn place(
        &mut self,
        epoch: i64,
        dc: &str,
        type_: &str,
        subtype: &str,
        chunk: &str,
    ) -> Option<ColumnsChunk> {
        let files = self.hour(epoch)?;
        let ChunkPlace { file, events } = files.chunk(epoch, dc, type_, subtype, chunk)?;
        Some(ColumnsChunk {
            path: files.files.get(file)?.path.clone(),
            events,
        })
    }

    /// The output values of one chunk read from its file (all or nothing), or why not.
    pub(crate) fn take(
        &mut self,
        place: &ColumnsChunk,
        epoch: i64,
        subtype: &str,
        chunk: &str,
        facts: &mut ReadFacts,
    ) -> Result<Vec<Value>, String> {
        if !self.cursors.contains_key(&place.path) {
            let file = self.view.file(&place.path).map_err(|e| e.to_string())?;
            let cursor = self.open(&file, epoch)?;
            self.cursors.insert(place.path.clone(), cursor);
        }
        let Some(cursor) = self.cursors.get_mut(&place.path) else {
            return Err("cursor lost".into());
        };
        let rows = cursor.take(epoch, subtype, chunk)?;
        if !self.pruned && rows.len() as u64 != place.events {
            return Err(format!(
                "{}: {} rows for the chunk, its covers say {}",
                place.path,
                rows.len(),
                place.events
            ));
        }
        facts.scanned += rows.len() as u64;
        let n_select = self.select.len();
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let event = row.event;
            // What the hints need of the select paths: once each has been seen, nothing more.
            for (i, p) in self.select.iter().map(|(p, ..)| p).enumerate() {
                if let Some(seen) = facts.path_seen.get_mut(i).filter(|s| !**s) {
                    *seen = !p.eval(&event).is_empty();
                }
            }
            if let Some(f) = &self.filter {
                for (i, p) in f.paths().iter().enumerate() {
                    let found = p.eval(&event);
                    if let Some(seen) = facts.path_seen.get_mut(n_select + i) {
                        *seen |= !found.is_empty();
                    }
                    if let Some(kinds) = facts.path_kinds.get_mut(n_select + i) {
                        for v in found {
                            *kinds |= crate::facts::kind_of(v);
                        }
                    }
                }
                if !f.matches(&event) {
                    continue;
                }
            }
            if self.select.is_empty() {
                out.push(event);
                continue;
            }
            let mut hash = Vec::with_capacity(self.select.len());
            for (path, key, many) in &self.select {
                let found = path.eval(&event);
                let v = if *many {
                    Value::Array(found.into_iter().cloned().collect())
                } else {
                    found.first().map_or(Value::Undef, |v| (*v).clone())
                };
                hash.push((key.clone(), v));
            }
            out.push(Value::Hash(hash));
        }
        Ok(out)
    }

    fn open(&mut self, file: &ParquetFile, epoch: i64) -> Result<FileCursor, String> {
        let schema = file.arrow_schema();
        let columns = self.fields.as_ref().map(|fields| {
            let mut cols: Vec<String> = vec![
                EPOCH_COLUMN.to_owned(),
                SUBTYPE_COLUMN.to_owned(),
                CHUNK_COLUMN.to_owned(),
            ];
            // `_rest` only when the footer says it holds one of the fields: decoding it per row
            // is the dearest part of a projected read.
            let rest_fields: Option<Vec<String>> = file
                .metadata_value(REST_FIELDS_KEY)
                .and_then(|t| serde_json::from_str(t).ok());
            let rest_needed = rest_fields
                .as_ref()
                .is_none_or(|r| r.iter().any(|n| n == "*" || fields.contains(n)));
            for f in fields {
                for c in columns_for_field(&schema, f) {
                    if (c != REST_COLUMN || rest_needed) && !cols.contains(&c) {
                        cols.push(c);
                    }
                }
            }
            cols
        });
        let query = FileQuery {
            columns,
            epoch_from: epoch.max(self.from),
            epoch_to: self.to,
            string_equals: self
                .filter
                .as_ref()
                .map(Filter::string_equalities)
                .unwrap_or_default(),
            ..FileQuery::all()
        };
        Ok(FileCursor {
            batches: std::sync::Mutex::new(file.read(&query).map_err(|e| e.to_string())?),
            rows: VecDeque::new(),
            done: false,
        })
    }
}

impl FileCursor {
    /// The rows of (epoch, subtype, chunk): rows before them are passed over (chunks the read
    /// does not want, e.g. another subtype), rows after them stay for the next call.
    fn take(&mut self, epoch: i64, subtype: &str, chunk: &str) -> Result<Vec<RowOut>, String> {
        let mut out = Vec::new();
        loop {
            while let Some(front) = self.rows.front() {
                let here = front.epoch == epoch && front.subtype == subtype && front.chunk == chunk;
                if here {
                    if let Some(row) = self.rows.pop_front() {
                        out.push(row);
                    }
                } else if !out.is_empty() || front.epoch > epoch {
                    // Past the chunk: its rows are contiguous, so it is complete.
                    return Ok(out);
                } else {
                    self.rows.pop_front();
                }
            }
            if self.done {
                return Ok(out);
            }
            let next = self
                .batches
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .next();
            match next {
                Some(Ok(batch)) => self
                    .rows
                    .extend(from_batch(&batch).map_err(|e| e.to_string())?),
                Some(Err(e)) => return Err(e.to_string()),
                None => self.done = true,
            }
        }
    }
}
