//! Reading chunks from the column files instead of their blobs (see "Columns" in
//! [`crate::range`]).
//!
//! The range reader asks, per chunk the index lists, whether a file holds it
//! ([`ColumnsSource::place`]); if so it takes the chunk's rows from that file
//! ([`ColumnsSource::take`]) and applies the same `where` and `select` as the blob path. Only the
//! columns the read needs are read: the top-level fields of the select and where paths (all of
//! them without either), with their sibling columns and `_rest`. The filter runs on the column
//! values themselves where a path's values are surely in its column ([`access`]), so only the
//! rows it keeps become events (`status >= 500` builds 2 % of them); other paths are read from
//! the built event.
//!
//! Each file is read forwards once per read: its rows are in (second, subtype, chunk) order, the
//! order the reader asks for them, so a cursor keeps one batch of one file in memory.

mod access;

use self::access::PathAccess;
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use sereal::lazy::Step;
use sereal::{Key, Path, Value};
use sluice_columns::convert::{
    columns_for_field, BatchRows, ConvertError, CHUNK_COLUMN, EPOCH_COLUMN, INTS_COLUMN,
    REST_COLUMN, SUBTYPE_COLUMN,
};
use sluice_columns::layout::{hour_of, HOUR};
use sluice_columns::parquet_file::{
    FileQuery, ParquetFile, ParquetRecordBatchReader, REST_FIELDS_KEY,
};
use sluice_columns::view::{ChunkPlace, ColumnsView, HourFiles};

use crate::facts::{kind_of, kind_of_scalar, ReadFacts};
use crate::filter::{Filter, Scalar};
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
    /// The needed paths when equal events of a chunk may go out as one with a repeat count
    /// ([`crate::ReadOptions::repeats`]).
    repeat_paths: Option<Vec<Path>>,
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
    /// The batch being read and its first row not taken yet.
    current: Option<(Arc<BatchRows>, usize)>,
    done: bool,
    /// The top-level fields the file's `_rest` holds (its footer), `None` when it does not say.
    rest_fields: Option<Arc<[String]>>,
}

/// A column value as a key of equal events (floats by their bits: equal bits, equal event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ScalarKey<'a> {
    Bool(bool),
    Int(i64),
    Float(u64),
    Str(&'a [u8]),
}

impl<'a> ScalarKey<'a> {
    /// `None` for a map or an array.
    fn of(v: Scalar<'a>) -> Option<ScalarKey<'a>> {
        Some(match v {
            Scalar::Bool(b) => ScalarKey::Bool(b),
            Scalar::Int(i) => ScalarKey::Int(i),
            Scalar::Float(f) => ScalarKey::Float(f.to_bits()),
            Scalar::Str(s) => ScalarKey::Str(s),
            Scalar::Other => return None,
        })
    }
}

/// Rows of one chunk in one batch.
struct Slice {
    rows: Arc<BatchRows>,
    range: Range<usize>,
}

impl ColumnsSource {
    /// The columns side of `req` over `view`.
    pub(crate) fn new(
        view: Arc<ColumnsView>,
        req: &ReadRequest,
        needs: Option<&[Path]>,
        repeats: bool,
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
            repeat_paths: needs
                .filter(|_| repeats && sel.select.is_empty())
                .map(<[Path]>::to_vec),
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

    /// The output values of one chunk read from its file (all or nothing), each with how many
    /// equal events it stands for, or why not.
    pub(crate) fn take(
        &mut self,
        place: &ColumnsChunk,
        epoch: i64,
        subtype: &str,
        chunk: &str,
        facts: &mut ReadFacts,
    ) -> Result<Vec<(Value, u64)>, String> {
        if !self.cursors.contains_key(&place.path) {
            let file = self.view.file(&place.path).map_err(|e| e.to_string())?;
            let cursor = self.open(&file, epoch)?;
            self.cursors.insert(place.path.clone(), cursor);
        }
        let Some(cursor) = self.cursors.get_mut(&place.path) else {
            return Err("cursor lost".into());
        };
        let slices = cursor.take(epoch, subtype, chunk, place.events)?;
        let taken: usize = slices.iter().map(|s| s.range.len()).sum();
        if !self.pruned && taken as u64 != place.events {
            return Err(format!(
                "{}: {} rows for the chunk, its covers say {}",
                place.path, taken, place.events
            ));
        }
        facts.scanned += taken as u64;
        let rest_fields = cursor.rest_fields.clone();
        let mut out = Vec::new();
        for slice in &slices {
            self.take_slice(slice, rest_fields.as_deref(), facts, &mut out)
                .map_err(|e| format!("{}: {e}", place.path))?;
        }
        Ok(out)
    }

    /// The output values of one slice's rows, into `out`: the filter on the columns where its
    /// paths are surely there (events built for the rows kept only), else on the built events.
    fn take_slice(
        &self,
        slice: &Slice,
        rest_fields: Option<&[String]>,
        facts: &mut ReadFacts,
        out: &mut Vec<(Value, u64)>,
    ) -> Result<(), ConvertError> {
        let rows = &slice.rows;
        let batch = rows.batch();
        let n_select = self.select.len();
        let accessors = |paths: &[Path]| -> Option<Vec<PathAccess>> {
            paths
                .iter()
                .map(|p| PathAccess::new(batch, p, rest_fields))
                .collect()
        };
        let select_access: Vec<Option<PathAccess>> = self
            .select
            .iter()
            .map(|(p, ..)| PathAccess::new(batch, p, rest_fields))
            .collect();
        let filter_access = self.filter.as_ref().and_then(|f| accessors(f.paths()));
        // The rows kept, with their event when the filter needed it built.
        let mut kept: Vec<(usize, Option<Value>)> = Vec::new();
        let mut found: Vec<Option<Scalar<'_>>> = Vec::new();
        for row in slice.range.clone() {
            // The select paths' hints: from the columns where they can be read (once each has
            // been seen, nothing more); the others need the event.
            let mut hint_on_event = false;
            for (i, access) in select_access.iter().enumerate() {
                if let Some(seen) = facts.path_seen.get_mut(i).filter(|s| !**s) {
                    match access {
                        Some(a) => *seen = a.get(row).is_some(),
                        None => hint_on_event = true,
                    }
                }
            }
            if let (Some(f), Some(access)) = (&self.filter, &filter_access) {
                found.clear();
                found.extend(access.iter().map(|a| a.get(row)));
                for (i, v) in found.iter().enumerate() {
                    if let Some(v) = v {
                        if let Some(seen) = facts.path_seen.get_mut(n_select + i) {
                            *seen = true;
                        }
                        if let Some(kinds) = facts.path_kinds.get_mut(n_select + i) {
                            *kinds |= kind_of_scalar(*v);
                        }
                    }
                }
                let keep = f.matches_scalars(&found);
                if hint_on_event {
                    let event = rows.event(row)?;
                    self.hint_select(&event, facts);
                    if keep {
                        kept.push((row, Some(event)));
                    }
                } else if keep {
                    kept.push((row, None));
                }
                continue;
            }
            let Some(f) = &self.filter else {
                if hint_on_event {
                    let event = rows.event(row)?;
                    self.hint_select(&event, facts);
                    kept.push((row, Some(event)));
                } else {
                    kept.push((row, None));
                }
                continue;
            };
            let event = rows.event(row)?;
            if hint_on_event {
                self.hint_select(&event, facts);
            }
            for (i, p) in f.paths().iter().enumerate() {
                let found = p.eval(&event);
                if let Some(seen) = facts.path_seen.get_mut(n_select + i) {
                    *seen |= !found.is_empty();
                }
                if let Some(kinds) = facts.path_kinds.get_mut(n_select + i) {
                    for v in found {
                        *kinds |= kind_of(v);
                    }
                }
            }
            if f.matches(&event) {
                kept.push((row, Some(event)));
            }
        }
        // Equal events of the chunk as one, with how many: when the consumer counts repeats
        // and every needed path is surely in the columns.
        let repeat_access = self.repeat_paths.as_deref().and_then(accessors);
        let Some(access) = repeat_access else {
            for (row, event) in kept {
                let event = match event {
                    Some(e) => e,
                    None => rows.event(row)?,
                };
                out.push((self.output(event), 1));
            }
            return Ok(());
        };
        let ints = batch.column_by_name(INTS_COLUMN);
        // Per row, a lookup with a key kept across rows: allocation only for a new key.
        let mut index: HashMap<Vec<Option<ScalarKey<'_>>>, usize, foldhash::fast::RandomState> =
            HashMap::default();
        let mut first: Vec<(usize, Option<Value>, u64)> = Vec::new();
        let mut key: Vec<Option<ScalarKey<'_>>> = Vec::with_capacity(access.len());
        'rows: for (row, event) in kept {
            key.clear();
            // A row with an integer noted in `_ints`, or a map or an array in a needed path,
            // is not compared: its event goes out on its own.
            let alone = ints.is_some_and(|a| a.is_valid(row));
            for a in access.iter().filter(|_| !alone) {
                match a.get(row) {
                    None => key.push(None),
                    Some(v) => match ScalarKey::of(v) {
                        Some(k) => key.push(Some(k)),
                        None => {
                            first.push((row, event, 1));
                            continue 'rows;
                        }
                    },
                }
            }
            if alone {
                first.push((row, event, 1));
                continue;
            }
            match index.get(key.as_slice()) {
                Some(&at) => first[at].2 += 1,
                None => {
                    index.insert(key.clone(), first.len());
                    first.push((row, event, 1));
                }
            }
        }
        for (row, event, n) in first {
            let event = match event {
                Some(e) => e,
                None => rows.event(row)?,
            };
            out.push((event, n));
        }
        Ok(())
    }

    /// The select paths' hints from a built event (for paths not read from the columns).
    fn hint_select(&self, event: &Value, facts: &mut ReadFacts) {
        for (i, (p, ..)) in self.select.iter().enumerate() {
            if let Some(seen) = facts.path_seen.get_mut(i).filter(|s| !**s) {
                *seen = !p.eval(event).is_empty();
            }
        }
    }

    /// What the read yields for a kept event: the event, or the map of its selected paths.
    fn output(&self, event: Value) -> Value {
        if self.select.is_empty() {
            return event;
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
        Value::Hash(hash)
    }

    fn open(&mut self, file: &ParquetFile, epoch: i64) -> Result<FileCursor, String> {
        let schema = file.arrow_schema();
        let rest_fields: Option<Arc<[String]>> = file
            .metadata_value(REST_FIELDS_KEY)
            .and_then(|t| serde_json::from_str::<Vec<String>>(t).ok())
            .map(Arc::from);
        let columns = self.fields.as_ref().map(|fields| {
            let mut cols: Vec<String> = vec![
                EPOCH_COLUMN.to_owned(),
                SUBTYPE_COLUMN.to_owned(),
                CHUNK_COLUMN.to_owned(),
            ];
            // `_rest` only when the footer says it holds one of the fields: decoding it per row
            // is the dearest part of a projected read.
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
            current: None,
            done: false,
            rest_fields,
        })
    }
}

impl FileCursor {
    /// The rows of (epoch, subtype, chunk): rows before them are passed over (chunks the read
    /// does not want, e.g. another subtype), rows after them stay for the next call. `expect`,
    /// the rows the covers promise, lets a run be taken by checking its last row instead of
    /// every row (rows of a chunk are contiguous: comparing each row's keys was 11 % of a
    /// filtered read); the row after it is still checked.
    fn take(
        &mut self,
        epoch: i64,
        subtype: &str,
        chunk: &str,
        expect: u64,
    ) -> Result<Vec<Slice>, String> {
        let here = |rows: &BatchRows, row: usize| {
            rows.epoch(row) == epoch && rows.subtype(row) == subtype && rows.chunk(row) == chunk
        };
        let mut out: Vec<Slice> = Vec::new();
        loop {
            if let Some((rows, pos)) = &mut self.current {
                let n = rows.len();
                while *pos < n && !here(rows, *pos) {
                    if !out.is_empty() || rows.epoch(*pos) > epoch {
                        // Past the chunk: its rows are contiguous, so it is complete.
                        return Ok(out);
                    }
                    *pos += 1;
                }
                let start = *pos;
                let taken: usize = out.iter().map(|s| s.range.len()).sum();
                let left = usize::try_from(expect)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(taken);
                if left > 1 && start < n && start + left <= n && here(rows, start + left - 1) {
                    *pos = start + left;
                }
                while *pos < n && here(rows, *pos) {
                    *pos += 1;
                }
                if *pos > start {
                    out.push(Slice {
                        rows: rows.clone(),
                        range: start..*pos,
                    });
                }
                if *pos < n {
                    return Ok(out);
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
                Some(Ok(batch)) => {
                    let rows = BatchRows::new(&batch).map_err(|e| e.to_string())?;
                    self.current = Some((Arc::new(rows), 0));
                }
                Some(Err(e)) => return Err(e.to_string()),
                None => {
                    self.done = true;
                    self.current = None;
                }
            }
        }
    }
}
