//! `sluice columns verify`: every chunk a file says it holds is checked against its blob.
//!
//! Per covered chunk: the file has as many rows as the covers say; when the blob is still
//! stored, its SHA-1 is the one in the covers, and its events equal the rows read back (compared
//! as JSON with keys sorted: key order is not kept by the columns, see [`crate::convert`]).
//! A blob past the store's retention is counted, not an error: the columns are then all there is.
//! Nothing is modified.

use std::collections::HashMap;

use sluice_blob::{Blob, ChunkId, EpochKey, EventKey, IndexEntry};
use sluice_store::{BlobKey, Namespace, ReadStore};

use crate::convert::{from_batch, RowOut};
use crate::covers::sha1_hex;
use crate::layout::{hour_of, HOUR};
use crate::parquet_file::FileQuery;
use crate::tier::TierError;
use crate::view::ColumnsView;

/// What a verification found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Files checked.
    pub files: u64,
    /// Chunks checked.
    pub chunks: u64,
    /// Rows checked.
    pub rows: u64,
    /// Chunks whose blob is no longer stored (only the columns hold them).
    pub blobs_gone: u64,
    /// Everything wrong: (file, what).
    pub problems: Vec<(String, String)>,
}

/// Checks the files of every hour meeting `[from, to)`.
pub fn verify(
    view: &ColumnsView,
    store: &dyn ReadStore,
    from: i64,
    to: i64,
) -> Result<VerifyReport, TierError> {
    let mut report = VerifyReport::default();
    let limits = sereal::Limits::default();
    let mut hour = hour_of(from);
    while hour < to {
        let files = view.hour(hour)?;
        for (path, why) in &files.damaged {
            report.problems.push((path.clone(), why.clone()));
        }
        for f in &files.files {
            report.files += 1;
            let rows = match read_rows(view, &f.path) {
                Ok(rows) => rows,
                Err(e) => {
                    report.problems.push((f.path.clone(), e));
                    continue;
                }
            };
            // Rows by chunk, in file order.
            let mut by_chunk: HashMap<(i64, String, String), Vec<RowOut>> = HashMap::new();
            for row in rows {
                by_chunk
                    .entry((row.epoch, row.subtype.clone(), row.chunk.clone()))
                    .or_default()
                    .push(row);
            }
            for c in &f.covers.chunks {
                report.chunks += 1;
                let rows = by_chunk
                    .remove(&(c.epoch, c.subtype.clone(), c.chunk.clone()))
                    .unwrap_or_default();
                report.rows += rows.len() as u64;
                let name = format!("{}:{}:{}:{}", c.epoch, f.covers.type_, c.subtype, c.chunk);
                if rows.len() as u64 != c.events {
                    report.problems.push((
                        f.path.clone(),
                        format!("{name}: {} rows, the covers say {}", rows.len(), c.events),
                    ));
                    continue;
                }
                let key = ChunkId::parse(&c.chunk)
                    .ok()
                    .and_then(|chunk| IndexEntry::new(&f.covers.type_, &c.subtype, chunk).ok())
                    .and_then(|entry| {
                        EpochKey::new(c.epoch, &f.covers.dc)
                            .ok()
                            .map(|ek| EventKey::from_parts(&ek, &entry).to_string())
                    });
                let Some(key) = key else {
                    report
                        .problems
                        .push((f.path.clone(), format!("{name}: not a valid chunk key")));
                    continue;
                };
                let bytes = match store.get_blob(&Namespace::Events, BlobKey::new(c.epoch, &key)) {
                    Ok(Some(b)) => b,
                    Ok(None) => {
                        report.blobs_gone += 1;
                        continue;
                    }
                    Err(e) => return Err(TierError::Store(e)),
                };
                let blob = match Blob::parse(&bytes) {
                    Ok(b) => b,
                    Err(e) => {
                        report
                            .problems
                            .push((f.path.clone(), format!("{key}: the blob is damaged: {e}")));
                        continue;
                    }
                };
                if sha1_hex(&blob.checksum()) != c.sha1 {
                    report.problems.push((
                        f.path.clone(),
                        format!("{key}: the blob's SHA-1 is not the one the file was made from"),
                    ));
                    continue;
                }
                let events = match blob.decode(&limits) {
                    Ok(e) => e,
                    Err(e) => {
                        report.problems.push((
                            f.path.clone(),
                            format!("{key}: the blob does not decode: {e}"),
                        ));
                        continue;
                    }
                };
                let differ = events
                    .iter()
                    .zip(&rows)
                    .position(|(e, r)| canonical(e) != canonical(&r.event));
                if let Some(i) = differ {
                    report.problems.push((
                        f.path.clone(),
                        format!("{key}: event {i} differs from its row"),
                    ));
                }
            }
        }
        hour += HOUR;
    }
    Ok(report)
}

fn read_rows(view: &ColumnsView, path: &str) -> Result<Vec<RowOut>, String> {
    let file = view.file(path).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for batch in file.read(&FileQuery::all()).map_err(|e| e.to_string())? {
        let batch = batch.map_err(|e| e.to_string())?;
        rows.extend(from_batch(&batch).map_err(|e| e.to_string())?);
    }
    Ok(rows)
}

/// An event as JSON with every object's keys sorted: the columns keep values, not key order.
pub fn canonical(event: &sereal::Value) -> String {
    fn sort(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(map) => {
                let mut entries: Vec<(String, serde_json::Value)> =
                    map.into_iter().map(|(k, v)| (k, sort(v))).collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                serde_json::Value::Object(entries.into_iter().collect())
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.into_iter().map(sort).collect())
            }
            other => other,
        }
    }
    sort(sereal::json::to_json_value(event)).to_string()
}
