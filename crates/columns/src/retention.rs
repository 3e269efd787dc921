//! Retention of column files, per type and subtype ([`TypeRetention`], the rule's one owner).
//!
//! A file holds one (dc, type) for a part or an hour, its rows sorted by subtype. It is deleted
//! once every subtype it may hold is past its retention (the longest rule of its type); before
//! that, once some subtype it holds is past its own, it is rewritten without that subtype's rows
//! and chunks (its covers), under the same name ([`crate::location::Location::put`] replaces it whole, so a
//! reader sees the old file or the new one). Chunks no longer covered are read from the blobs,
//! if the blobs still hold them, as any uncovered chunk is.

use sluice_store::TypeRetention;

use crate::covers::{Covers, COVERS_KEY, SCHEMA_KEY};
use crate::layout::{FileKind, FileName};
use crate::parquet_file::{write_file, FileQuery, WriteOptions};
use crate::tier::{RunReport, TierError};
use crate::view::ColumnsView;

/// The retention that never ends (`columns_retention_days = 0`): far enough that no file ever
/// reaches it, small enough that `now - FOREVER` cannot overflow.
pub const FOREVER: i64 = i64::MAX / 4;

/// Deletes the files past their retention and rewrites those holding a subtype past its own.
pub fn expire(
    view: &ColumnsView,
    rules: &TypeRetention,
    hour_options: &WriteOptions,
    part_zstd_level: i32,
    now: i64,
) -> Result<RunReport, TierError> {
    let mut report = RunReport::default();
    if rules.is_empty() && rules.default_secs() >= FOREVER {
        return Ok(report);
    }
    for listed in view.location().list("")? {
        let Some(name) = FileName::parse(&listed.path) else {
            continue;
        };
        let age = now.saturating_sub(name.span().1);
        let (shortest, longest) = rules.bounds_for_type(&name.type_);
        if age >= longest {
            view.location().delete(&listed.path)?;
            view.forget(&listed.path);
            view.invalidate(name.hour);
            report.deleted += 1;
        } else if age >= shortest {
            let opts = match name.kind {
                FileKind::Part { .. } => WriteOptions {
                    zstd_level: part_zstd_level,
                    ..hour_options.clone()
                },
                FileKind::Hour => hour_options.clone(),
            };
            let keep = |subtype: &str| age < rules.keep_secs(&name.type_, subtype);
            report.add(purge_file(view, &listed.path, &name, &keep, &opts)?);
        }
    }
    Ok(report)
}

/// Rewrites the file at `path` with only the subtypes `keep` keeps (deletes it when none is
/// left); nothing when it holds no other.
fn purge_file(
    view: &ColumnsView,
    path: &str,
    name: &FileName,
    keep: &dyn Fn(&str) -> bool,
    opts: &WriteOptions,
) -> Result<RunReport, TierError> {
    let mut report = RunReport::default();
    let write_err = |detail: String| TierError::Write {
        path: path.to_owned(),
        detail,
    };
    let file = view.file(path)?;
    let covers_json = file
        .metadata_value(COVERS_KEY)
        .ok_or_else(|| write_err(format!("no {COVERS_KEY} in the footer")))?;
    let mut covers = Covers::from_json(covers_json).map_err(|e| write_err(e.to_string()))?;
    if covers.chunks.iter().all(|c| keep(&c.subtype)) {
        return Ok(report);
    }
    covers.chunks.retain(|c| keep(&c.subtype));
    if covers.chunks.is_empty() {
        view.location().delete(path)?;
        view.forget(path);
        view.invalidate(name.hour);
        report.deleted += 1;
        return Ok(report);
    }
    let wanted: Vec<String> = {
        let mut s: Vec<String> = covers.chunks.iter().map(|c| c.subtype.clone()).collect();
        s.sort();
        s.dedup();
        s
    };
    let query = FileQuery {
        subtypes: Some(wanted.clone()),
        ..FileQuery::all()
    };
    let subtype_at = file
        .arrow_schema()
        .index_of(crate::convert::SUBTYPE_COLUMN)
        .map_err(|e| write_err(e.to_string()))?;
    let mut batches = Vec::new();
    for batch in file.read(&query).map_err(|e| write_err(e.to_string()))? {
        let batch = batch.map_err(|e| write_err(e.to_string()))?;
        // Rows are sorted by subtype: the kept ones are runs, taken as zero-copy slices (the
        // query's pruning is by row group, so other subtypes' rows can be in the batch).
        let subtypes = batch
            .column(subtype_at)
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .ok_or_else(|| write_err("_subtype is not a string column".into()))?;
        let mut run_start = None;
        for row in 0..=batch.num_rows() {
            let kept = row < batch.num_rows() && keep(subtypes.value(row));
            match (kept, run_start) {
                (true, None) => run_start = Some(row),
                (false, Some(start)) => {
                    batches.push(batch.slice(start, row - start));
                    run_start = None;
                }
                _ => {}
            }
        }
    }
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    if rows != covers.events() {
        return Err(write_err(format!(
            "kept {rows} rows where the covers promise {}: left as it is",
            covers.events()
        )));
    }
    let mut metadata = vec![(COVERS_KEY.to_owned(), covers.to_json())];
    if let Some(schema) = file.metadata_value(SCHEMA_KEY) {
        metadata.push((SCHEMA_KEY.to_owned(), schema.to_owned()));
    }
    let bytes = write_file(&batches, &metadata, opts).map_err(|e| write_err(e.to_string()))?;
    view.location().put(path, &bytes)?;
    view.forget(path);
    view.invalidate(name.hour);
    report.files += 1;
    report.rows += rows;
    report.bytes += bytes.len() as u64;
    Ok(report)
}
